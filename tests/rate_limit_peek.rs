//! Peeks: every limiter reads a client's state as a check would find it, without counting.
//! Proven by the server's own records: the keyspace dumped before and after, no write command
//! in `INFO commandstats`, and the same peek answered by a read-only replica (which refuses a
//! check: the negative control that the replica would catch a write).

mod support;

use std::time::Duration;

use redkit::rate_limit::{
    AlignedWindow, Decision, FixedWindow, Gcra, LimitKey, Limiter, Rate, SlidingWindow,
};
use redkit::{nonzero, Error};
use support::{nz, same_dumps, snapshot, RedisServer, ReplicatedPair};

/// The four algorithms, each 5 units an hour (nothing refills while a test runs).
fn limiters() -> Vec<Limiter> {
    let rate = Rate::per_hour(nonzero!(5));
    vec![
        FixedWindow::new("peek-fw", rate).unwrap().into(),
        AlignedWindow::new("peek-al", rate).unwrap().into(),
        Gcra::new("peek-gcra", rate).unwrap().into(),
        SlidingWindow::new("peek-sw", rate).unwrap().into(),
    ]
}

/// Calls of the commands a limiter's check writes with, by the server's count.
async fn writes(server: &RedisServer) -> u64 {
    let mut n = 0;
    for command in ["set", "incrby", "pexpire", "del", "expire", "incr"] {
        n += server.command_calls(command).await;
    }
    n
}

#[tokio::test]
async fn a_peek_reads_what_a_check_would_see_and_counts_nothing() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    for limiter in limiters() {
        let name = limiter.name().to_string();
        let key = LimitKey::text("client-1").unwrap();

        // A client never seen: everything left, nothing used.
        let fresh = limiter.peek(&mut conn, &key).await.unwrap();
        assert_eq!(
            (fresh.used(), fresh.remaining(), fresh.limit()),
            (0, 5, 5),
            "{name}"
        );
        assert!(fresh.would_allow(nonzero!(5)) && !fresh.would_allow(nonzero!(6)));

        // After a check of 2, the peek sees what the check left.
        let d = limiter.check_n(&mut conn, &key, nonzero!(2)).await.unwrap();
        assert!(d.is_allowed(), "{name}: {d:?}");
        let before_dump = snapshot(&mut conn).await;
        let (before_writes, before_ro) = (
            writes(&server).await,
            server.command_calls("evalsha_ro").await,
        );
        for _ in 0..3 {
            let q = limiter.peek(&mut conn, &key).await.unwrap();
            assert_eq!(
                (q.used(), q.remaining()),
                (2, d.quota().remaining()),
                "{name}: {q:?}"
            );
            assert!(
                q.reset_after() > Duration::ZERO && q.reset_after() <= d.quota().reset_after(),
                "{name}: {q:?}"
            );
        }
        // Three read-only calls, no write command, the keyspace unchanged.
        assert_eq!(
            server.command_calls("evalsha_ro").await - before_ro,
            3,
            "{name}"
        );
        assert_eq!(writes(&server).await, before_writes, "{name}: a peek wrote");
        same_dumps(&before_dump, &snapshot(&mut conn).await, &name);
        // And no TTL moved up: each key's TTL only ran down.
        let after_dump = snapshot(&mut conn).await;
        for (key, (_, ttl)) in &before_dump {
            let now = after_dump[key].1;
            assert!(now <= *ttl, "{name}: a TTL went up: {ttl} -> {now}");
        }

        // `would_allow` agrees with the real check on both sides of the edge.
        let q = limiter.peek(&mut conn, &key).await.unwrap();
        let left = q.remaining();
        assert!(!q.would_allow(nz(left + 1)));
        let over = limiter
            .check_n(&mut conn, &key, nz(left + 1))
            .await
            .unwrap();
        assert!(matches!(over, Decision::Limited { .. }), "{name}: {over:?}");
        assert!(q.would_allow(nz(left)));
        let fits = limiter.check_n(&mut conn, &key, nz(left)).await.unwrap();
        assert!(fits.is_allowed(), "{name}: {fits:?}");
        let spent = limiter.peek(&mut conn, &key).await.unwrap();
        assert_eq!(
            (spent.used(), spent.remaining()),
            (5, 0),
            "{name}: {spent:?}"
        );
        assert!(!spent.would_allow(nonzero!(1)));
    }
}

#[tokio::test]
async fn a_peek_is_served_by_a_read_only_replica_and_a_check_is_not() {
    let pair = ReplicatedPair::spawn().await;
    let mut primary = pair.primary.conn().await;
    let mut replica = pair.replica.conn().await;
    for limiter in limiters() {
        let name = limiter.name().to_string();
        let key = LimitKey::text("client-2").unwrap();
        let d = limiter
            .check_n(&mut primary, &key, nonzero!(3))
            .await
            .unwrap();
        support::until_replicated(&mut primary).await;
        let q = limiter.peek(&mut replica, &key).await.unwrap();
        assert_eq!(
            (q.used(), q.remaining()),
            (3, d.quota().remaining()),
            "{name}: {q:?}"
        );
        // The negative control: the replica refuses a check, which writes.
        let refused = limiter.check(&mut replica, &key).await;
        assert!(
            refused.is_err(),
            "{name}: a read-only replica ran a check: {refused:?}"
        );
    }
}

#[tokio::test]
async fn a_peek_of_a_key_holding_something_else_is_a_typed_error() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    for limiter in limiters() {
        let name = limiter.name().to_string();
        let hash = LimitKey::text("hash").unwrap();
        let _: i64 = server
            .cmd(&["HSET", &limiter.redis_key(&hash), "f", "v"])
            .await;
        let r = limiter.peek(&mut conn, &hash).await;
        assert!(matches!(r, Err(Error::WrongType { .. })), "{name}: {r:?}");
        let junk = LimitKey::text("junk").unwrap();
        let _: () = server.cmd(&["SET", &limiter.redis_key(&junk), "x1"]).await;
        let r = limiter.peek(&mut conn, &junk).await;
        assert!(matches!(r, Err(Error::CorruptData { .. })), "{name}: {r:?}");
    }
}
