//! Waiting for a permit (`RateLimiter::check_within` / `check_n_within`) against a real Redis,
//! for every algorithm: a waiter checks again only when its refusal's `retry_after` has passed
//! (two round trips for one wait, counted on the server), waiters on a limit of R per second
//! are let through at R per second, a deadline is never overrun (a refusal that lasts beyond
//! it is answered at once), and what can never pass is answered at once.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use redkit::rate_limit::{
    Algorithm, Decision, FixedWindow, Gcra, LimitKey, Limiter, Rate, RateLimiter, SlidingWindow,
};
use support::RedisServer;

fn each(rate: Rate) -> Vec<Limiter> {
    [
        Algorithm::FixedWindow,
        Algorithm::Gcra,
        Algorithm::SlidingWindow,
    ]
    .into_iter()
    .map(|a| Limiter::new(a, "wait", rate).unwrap())
    .collect()
}

fn key(name: &str) -> LimitKey {
    LimitKey::text(name).unwrap()
}

/// Loads the limiter's script (a check on another key), so `EVALSHA` counts are exact.
async fn warm(server: &RedisServer, limiter: &Limiter) {
    let mut conn = server.conn().await;
    limiter.check(&mut conn, &key("warm-up")).await.unwrap();
}

/// One waiter behind a used-up limit: it sleeps the refusal's retry-after, not less (it is
/// allowed on its second check: two `EVALSHA`s), and not much more (the jitter is at most a
/// tenth of the retry-after; 250 ms of slack for a loaded machine).
#[tokio::test]
async fn a_waiter_checks_again_only_after_the_retry_after_and_then_passes() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    for limiter in each(Rate::new(redkit::nonzero!(1), Duration::from_millis(400)).unwrap()) {
        warm(&server, &limiter).await;
        let k = key(&format!("one-{:?}", limiter.algorithm()));
        assert!(limiter.check(&mut conn, &k).await.unwrap().is_allowed());
        let asked = Instant::now();
        let retry_after = match limiter.check(&mut conn, &k).await.unwrap() {
            Decision::Limited { retry_after, .. } => retry_after,
            other => panic!("{:?}: used up, got {other:?}", limiter.algorithm()),
        };
        let before = server.evalsha_calls().await;
        let decision = limiter
            .check_within(&mut conn, &k, Duration::from_secs(5))
            .await
            .unwrap();
        let waited = asked.elapsed();
        assert!(decision.is_allowed(), "{decision:?}");
        let calls = server.evalsha_calls().await - before;
        assert_eq!(
            calls,
            2,
            "{:?}: one refusal, one allow",
            limiter.algorithm()
        );
        assert!(
            waited + Duration::from_millis(2) >= retry_after,
            "{:?}: passed after {waited:?}, before the retry-after {retry_after:?}",
            limiter.algorithm()
        );
        assert!(
            waited <= retry_after + retry_after / 10 + Duration::from_millis(250),
            "{:?}: {waited:?} for a retry-after of {retry_after:?}",
            limiter.algorithm()
        );
    }
}

/// 20 waiters on GCRA at 20 per second (burst 1, one unit every 50 ms) are let through one
/// per emission interval: the span from the first grant to the last is at least 19 intervals
/// (the server's bound, less 20 ms for client-side observation) and at most 19 intervals
/// plus a tenth (the jitter) plus 1 s of slack for a loaded machine; the round trips stay
/// bounded (each waiter comes back at most once per grant of another).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiters_on_r_per_second_are_let_through_at_r_per_second() {
    let server = RedisServer::spawn().await;
    let gcra: Limiter = Gcra::bursting(
        "wait",
        Rate::per_second(redkit::nonzero!(20)),
        std::num::NonZeroU32::MIN,
    )
    .unwrap()
    .into();
    warm(&server, &gcra).await;
    let k = Arc::new(key("crowd"));
    let before = server.evalsha_calls().await;
    let barrier = Arc::new(tokio::sync::Barrier::new(20));
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let (gcra, k, barrier) = (gcra.clone(), k.clone(), barrier.clone());
        let mut conn = server.conn().await;
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let d = gcra
                .check_within(&mut conn, &k, Duration::from_secs(10))
                .await
                .unwrap();
            (d, Instant::now())
        }));
    }
    let mut granted = Vec::new();
    for task in tasks {
        let (decision, at) = task.await.unwrap();
        assert!(decision.is_allowed(), "{decision:?}");
        granted.push(at);
    }
    granted.sort();
    let span = granted[19] - granted[0];
    let interval = Duration::from_millis(50);
    assert!(
        span + Duration::from_millis(20) >= interval * 19,
        "{span:?}"
    );
    assert!(
        span <= interval * 19 + interval * 19 / 10 + Duration::from_secs(1),
        "20 waiters took {span:?}"
    );
    let calls = server.evalsha_calls().await - before;
    assert!(
        (20..=20 * 21 / 2 + 20).contains(&calls),
        "{calls} round trips"
    );
    println!("20 waiters at 20/s: {span:?} from first to last grant, {calls} round trips");
}

/// A refusal that lasts beyond the deadline is answered at once (no sleep), a deadline that
/// falls after the retry-after is met, `max_wait` zero is one check, and a cost above the
/// limit or a zero cost come back at once.
#[tokio::test]
async fn the_deadline_is_never_overrun_and_what_cannot_pass_comes_back_at_once() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    for limiter in each(Rate::new(redkit::nonzero!(1), Duration::from_secs(2)).unwrap()) {
        let name = limiter.algorithm();
        warm(&server, &limiter).await;
        let k = key(&format!("late-{name:?}"));
        assert!(limiter.check(&mut conn, &k).await.unwrap().is_allowed());
        for max_wait in [Duration::ZERO, Duration::from_millis(300)] {
            let before = server.evalsha_calls().await;
            let started = Instant::now();
            let d = limiter.check_within(&mut conn, &k, max_wait).await.unwrap();
            let took = started.elapsed();
            match d {
                Decision::Limited { retry_after, .. } => {
                    assert!(retry_after > max_wait, "{name:?}: {retry_after:?}")
                }
                other => panic!("{name:?}: {other:?}"),
            }
            assert!(
                took < Duration::from_millis(300),
                "{name:?}: slept {took:?}"
            );
            assert_eq!(server.evalsha_calls().await - before, 1, "{name:?}");
        }
        let started = Instant::now();
        let d = limiter
            .check_n_within(&mut conn, &k, redkit::nonzero!(2), Duration::from_secs(60))
            .await
            .unwrap();
        assert!(
            matches!(d, Decision::CostExceedsLimit { cost: 2, .. }),
            "{name:?}: {d:?}"
        );
        assert!(started.elapsed() < Duration::from_millis(300));
    }
    // A deadline after the retry-after: allowed once the window/bucket frees a unit.
    let fixed = FixedWindow::new(
        "wait",
        Rate::new(redkit::nonzero!(1), Duration::from_millis(500)).unwrap(),
    )
    .unwrap();
    let sliding = SlidingWindow::new(
        "wait",
        Rate::new(redkit::nonzero!(1), Duration::from_millis(500)).unwrap(),
    )
    .unwrap();
    let k = key("in-time");
    assert!(fixed.check(&mut conn, &k).await.unwrap().is_allowed());
    assert!(sliding.check(&mut conn, &k).await.unwrap().is_allowed());
    let started = Instant::now();
    assert!(fixed
        .check_within(&mut conn, &k, Duration::from_millis(1_500))
        .await
        .unwrap()
        .is_allowed());
    assert!(sliding
        .check_within(&mut conn, &k, Duration::from_millis(1_500))
        .await
        .unwrap()
        .is_allowed());
    assert!(started.elapsed() < Duration::from_millis(1_500 + 300));
}
