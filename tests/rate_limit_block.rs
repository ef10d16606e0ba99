//! Blocking a client for a while (`block_for`): every check refused until the block ends,
//! with the block's end as its retry-after, never shortening a longer wait, and refused with
//! a typed error (nothing written) by the algorithms whose state cannot hold a block.
//! The time is what these tests test: they sleep the block's length plus a stated slack.

mod support;

use std::time::Duration;

use redkit::rate_limit::{
    AlignedWindow, Decision, FixedWindow, Gcra, LimitKey, Limiter, QuotaLease, Rate, SlidingWindow,
};
use redkit::{nonzero, Error};
use support::{same_dumps, snapshot, RedisServer};

/// What a check may take beyond the block's end to see it over (scheduling on a busy machine).
const SLACK: Duration = Duration::from_millis(150);

fn key(k: &str) -> LimitKey {
    LimitKey::text(k).unwrap()
}

/// The limiters that can block, each 10 units an hour.
fn blockable() -> Vec<Limiter> {
    let rate = Rate::per_hour(nonzero!(10));
    vec![
        FixedWindow::new("block-fw", rate).unwrap().into(),
        Gcra::new("block-gcra", rate).unwrap().into(),
    ]
}

#[tokio::test]
async fn a_blocked_client_is_refused_until_the_block_ends_and_then_passes() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let block = Duration::from_millis(400);
    for limiter in blockable() {
        let name = limiter.name().to_string();
        // A window 1 s long for the fixed window, so its own end is not what holds the client.
        let limiter = match limiter {
            Limiter::Fixed(_) => Limiter::from(
                FixedWindow::new(
                    "block-fw",
                    Rate::new(nonzero!(10), Duration::from_millis(200)).unwrap(),
                )
                .unwrap(),
            ),
            other => other,
        };
        let k = key("abuser");
        assert!(
            limiter.check(&mut conn, &k).await.unwrap().is_allowed(),
            "{name}"
        );
        let blocked = limiter.block_for(&mut conn, &k, block).await.unwrap();
        assert!(
            blocked >= block && blocked <= block + Duration::from_millis(1),
            "{name}: {blocked:?}"
        );

        // Refused, with the block's end as the retry-after; a peek sees nothing left.
        let d = limiter.check(&mut conn, &k).await.unwrap();
        let Decision::Limited { retry_after, .. } = d else {
            panic!("{name}: a blocked client passed: {d:?}");
        };
        assert!(
            retry_after <= block && retry_after > block - SLACK,
            "{name}: {retry_after:?}"
        );
        let q = limiter.peek(&mut conn, &k).await.unwrap();
        assert_eq!(q.remaining(), 0, "{name}: {q:?}");
        // Another client is not blocked.
        assert!(
            limiter
                .check(&mut conn, &key("neighbour"))
                .await
                .unwrap()
                .is_allowed(),
            "{name}"
        );

        // Once the block is over, the client passes again.
        tokio::time::sleep(retry_after + SLACK).await;
        let d = limiter.check(&mut conn, &k).await.unwrap();
        assert!(
            d.is_allowed(),
            "{name}: still refused after the block: {d:?}"
        );
    }
}

#[tokio::test]
async fn a_block_never_shortens_a_longer_wait() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    for limiter in blockable() {
        let name = limiter.name().to_string();
        let k = key("long");
        let long = limiter
            .block_for(&mut conn, &k, Duration::from_secs(600))
            .await
            .unwrap();
        let short = limiter
            .block_for(&mut conn, &k, Duration::from_millis(50))
            .await
            .unwrap();
        assert!(
            short <= long && short > Duration::from_secs(590),
            "{name}: {long:?} then {short:?}"
        );
        let d = limiter.check(&mut conn, &k).await.unwrap();
        assert!(
            d.retry_after()
                .is_some_and(|r| r > Duration::from_secs(590)),
            "{name}: {d:?}"
        );
    }
    // The fixed window's own window holds longer than a short block: the window's end stands.
    let hour = FixedWindow::new("block-hour", Rate::per_hour(nonzero!(10))).unwrap();
    let k = key("hour");
    assert!(hour.check(&mut conn, &k).await.unwrap().is_allowed());
    let blocked = hour
        .block_for(&mut conn, &k, Duration::from_millis(10))
        .await
        .unwrap();
    assert!(blocked > Duration::from_secs(3590), "{blocked:?}");
}

/// A leased limiter's block drops the units this process holds of the client: its next
/// checks go to Redis and are refused. The negative control: the same block made through the
/// bare limiter (its counter only) leaves those units to answer, so the scenario does hold
/// units when it blocks.
#[tokio::test]
async fn a_leased_block_drops_the_units_held_here() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let rate = Rate::per_hour(nonzero!(1_000));
    let lease = QuotaLease::new(64).unwrap();
    let leased = || -> Vec<Limiter> {
        vec![
            FixedWindow::new("block-fw-lease", rate)
                .unwrap()
                .leased(lease)
                .into(),
            Gcra::new("block-gcra-lease", rate)
                .unwrap()
                .leased(lease)
                .into(),
        ]
    };
    for (limiter, bare) in leased().into_iter().zip(leased()) {
        let name = limiter.name().to_string();
        let k = key("leased-abuser");
        let before = server.evalsha_calls().await;
        for i in 0..16 {
            let d = limiter.check(&mut conn, &k).await.unwrap();
            assert!(d.is_allowed(), "{name}: check {i}: {d:?}");
        }
        let calls = server.evalsha_calls().await - before;
        assert!(calls < 16, "{name}: {calls} calls: units held here");

        // Negative control: blocked through the bare limiter, the units held here still answer.
        let (Limiter::FixedLeased(_) | Limiter::GcraLeased(_)) = &bare else {
            panic!("{name}: not leased");
        };
        let n = key("leased-neighbour");
        for _ in 0..16 {
            assert!(
                bare.check(&mut conn, &n).await.unwrap().is_allowed(),
                "{name}"
            );
        }
        match &bare {
            Limiter::FixedLeased(l) => {
                l.limiter()
                    .block_for(&mut conn, &n, Duration::from_secs(600))
                    .await
            }
            Limiter::GcraLeased(l) => {
                l.limiter()
                    .block_for(&mut conn, &n, Duration::from_secs(600))
                    .await
            }
            _ => unreachable!(),
        }
        .unwrap();
        assert!(
            bare.check(&mut conn, &n).await.unwrap().is_allowed(),
            "{name}: the control held no units when it blocked"
        );

        // Through the leased limiter: refused at once, every check.
        let blocked = limiter
            .block_for(&mut conn, &k, Duration::from_secs(600))
            .await
            .unwrap();
        assert!(blocked >= Duration::from_secs(600), "{name}: {blocked:?}");
        for i in 0..8 {
            let d = limiter.check(&mut conn, &k).await.unwrap();
            assert!(
                d.retry_after()
                    .is_some_and(|r| r > Duration::from_secs(590)),
                "{name}: check {i} after the block: {d:?}"
            );
        }
    }
}

#[tokio::test]
async fn algorithms_that_cannot_block_refuse_with_a_typed_error_and_write_nothing() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let rate = Rate::per_hour(nonzero!(10));
    let k = key("someone");
    let cannot: Vec<Limiter> = vec![
        AlignedWindow::new("block-al", rate).unwrap().into(),
        SlidingWindow::new("block-sw", rate).unwrap().into(),
        AlignedWindow::new("block-alg", rate)
            .unwrap()
            .grouped(redkit::GroupCommit::for_checks())
            .into(),
    ];
    for limiter in &cannot {
        limiter.check(&mut conn, &k).await.unwrap();
    }
    let before = snapshot(&mut conn).await;
    let evalsha = server.evalsha_calls().await;
    for limiter in &cannot {
        let r = limiter
            .block_for(&mut conn, &k, Duration::from_secs(60))
            .await;
        assert!(
            matches!(
                r,
                Err(Error::UnsupportedOption {
                    option: "block_for",
                    ..
                })
            ),
            "{}: {r:?}",
            limiter.name()
        );
    }
    // Bad blocks are refused before anything is sent.
    let fixed = FixedWindow::new("block-bad", rate).unwrap();
    let gcra = Gcra::new("block-bad", rate).unwrap();
    for bad in [
        Duration::ZERO,
        Duration::from_micros(999),
        FixedWindow::MAX_WINDOW + Duration::from_millis(1),
    ] {
        let r = fixed.block_for(&mut conn, &k, bad).await;
        assert!(
            matches!(r, Err(Error::InvalidInput { what: "block", .. })),
            "{bad:?}: {r:?}"
        );
    }
    for bad in [Duration::ZERO, Duration::from_secs(1_000_000_000)] {
        let r = gcra.block_for(&mut conn, &k, bad).await;
        assert!(
            matches!(r, Err(Error::InvalidInput { what: "block", .. })),
            "{bad:?}: {r:?}"
        );
    }
    assert_eq!(server.evalsha_calls().await, evalsha, "nothing sent");
    same_dumps(&before, &snapshot(&mut conn).await, "refused blocks");

    // A key holding something else: typed, nothing written.
    let hash = key("hash");
    let _: i64 = server
        .cmd(&["HSET", &fixed.redis_key(&hash), "f", "v"])
        .await;
    let _: i64 = server
        .cmd(&["HSET", &gcra.redis_key(&hash), "f", "v"])
        .await;
    let r = fixed
        .block_for(&mut conn, &hash, Duration::from_secs(1))
        .await;
    assert!(matches!(r, Err(Error::WrongType { .. })), "{r:?}");
    let r = gcra
        .block_for(&mut conn, &hash, Duration::from_secs(1))
        .await;
    assert!(matches!(r, Err(Error::WrongType { .. })), "{r:?}");
}
