//! Bounded call time (issue 8, item 6): through the `redkit::connect` setups, every call with
//! the server killed or frozen (SIGSTOP) returns an error within `Timeouts::call_bound()` +
//! [`SLACK`], for MultiplexedConnection, ConnectionManager and the Cluster connection.

mod support;

use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use redkit::connect::{self, Timeouts};
use redkit::rate_limit::{Decision, FixedWindow, LimitKey, Rate};
use support::{RedisCluster, RedisServer};

/// What a call may take beyond its configured bound: timer and scheduler lateness on a loaded
/// 2-core machine (100 ms was seen to be exceeded there). Kept below 300 ms so that a bound
/// redkit did not set (redis-rs's default 500 ms response timeout instead of the configured
/// 200 ms) still fails the frozen multiplexed case.
const SLACK: Duration = Duration::from_millis(250);

fn timeouts() -> Timeouts {
    Timeouts::new(Duration::from_millis(300), Duration::from_millis(200)).unwrap()
}

fn limiter() -> FixedWindow {
    FixedWindow::new(
        "faults",
        Rate::new(redkit::nonzero!(1_000_000), Duration::from_secs(600)).unwrap(),
    )
    .unwrap()
}

/// One limiter check that must succeed.
async fn ok_call<C: ConnectionLike>(conn: &mut C, client: &str) {
    let d = limiter()
        .check(conn, &LimitKey::text(client).unwrap())
        .await
        .expect("server up: the call succeeds");
    assert!(matches!(d, Decision::Allowed(_)), "{d:?}");
}

/// `n` limiter checks that must each fail within `bound` + SLACK; returns the slowest.
async fn failing_calls<C: ConnectionLike>(
    conn: &mut C,
    client: &str,
    n: usize,
    bound: Duration,
) -> Duration {
    let mut slowest = Duration::ZERO;
    for i in 0..n {
        let started = Instant::now();
        let r = limiter()
            .check(conn, &LimitKey::text(client).unwrap())
            .await;
        let took = started.elapsed();
        assert!(r.is_err(), "call {i} with the server down answered {r:?}");
        assert!(
            took <= bound + SLACK,
            "call {i} took {took:?}, bound {bound:?} + {SLACK:?}: {r:?}"
        );
        eprintln!("call {i}: {took:?} {r:?}");
        slowest = slowest.max(took);
    }
    slowest
}

#[tokio::test]
async fn multiplexed_calls_are_bounded_with_the_server_frozen_or_killed() {
    let mut server = RedisServer::spawn().await;
    let t = timeouts();
    let mut conn = connect::multiplexed(&server.client(), t).await.unwrap();
    ok_call(&mut conn, "m").await;

    server.pause().await;
    let frozen = failing_calls(&mut conn, "m", 5, t.response()).await;
    server.resume().await;
    ok_call(&mut conn, "m").await;

    server.stop().await;
    let killed = failing_calls(&mut conn, "m", 5, t.call_bound()).await;
    eprintln!("multiplexed: slowest call frozen {frozen:?}, killed {killed:?}");
}

#[tokio::test]
async fn manager_calls_are_bounded_with_the_server_frozen_or_killed_and_it_reconnects() {
    let mut server = RedisServer::spawn().await;
    let t = timeouts();
    let url = format!("{}?protocol=resp3", server.url());
    let mut conn = connect::manager(redis::Client::open(url).unwrap(), t)
        .await
        .unwrap();
    ok_call(&mut conn, "c").await;

    server.pause().await;
    let frozen = failing_calls(&mut conn, "c", 5, t.call_bound()).await;
    server.resume().await;
    ok_call(&mut conn, "c").await;

    server.stop().await;
    let killed = failing_calls(&mut conn, "c", 5, t.call_bound()).await;

    // Back on the same port: the manager reconnects by itself within a few calls.
    server.start().await;
    let mut recovered = false;
    for _ in 0..20 {
        let started = Instant::now();
        let r = limiter()
            .check(&mut conn, &LimitKey::text("c").unwrap())
            .await;
        assert!(started.elapsed() <= t.call_bound() + SLACK);
        if r.is_ok() {
            recovered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(recovered, "the manager never reconnected");
    eprintln!("manager: slowest call frozen {frozen:?}, killed {killed:?}");
}

#[tokio::test]
async fn cluster_calls_are_bounded_with_a_primary_frozen_or_every_node_killed() {
    let mut cluster = RedisCluster::spawn().await;
    let t = timeouts();
    let mut conn = connect::cluster(cluster.urls(), t).await.unwrap();
    // Client part "{f}" is the hash tag of the limiter key.
    ok_call(&mut conn, "f").await;
    let key = limiter().redis_key(&LimitKey::text("f").unwrap());
    let owner = cluster.primary_index_for(&key).await;

    cluster.nodes[owner].pause().await;
    let frozen = failing_calls(&mut conn, "f", 5, t.call_bound()).await;
    cluster.nodes[owner].resume().await;

    for node in &mut cluster.nodes {
        node.stop().await;
    }
    let killed = failing_calls(&mut conn, "f", 5, t.call_bound()).await;
    eprintln!(
        "cluster: slowest call frozen {frozen:?}, killed {killed:?}; rebuilds {}",
        conn.rebuilds()
    );
}

mod timeouts_properties {
    use proptest::prelude::*;
    use redkit::connect::Timeouts;
    use std::time::Duration;

    fn any_duration() -> impl Strategy<Value = Duration> {
        prop_oneof![
            Just(Duration::ZERO),
            Just(Duration::MAX),
            Just(Timeouts::MIN),
            Just(Timeouts::MAX),
            Just(Timeouts::MAX + Duration::from_nanos(1)),
            (any::<u64>(), any::<u32>()).prop_map(|(s, n)| Duration::new(s, n % 1_000_000_000)),
            (0u64..10_000_000).prop_map(Duration::from_micros),
        ]
    }

    proptest! {
        /// Never panics; accepted exactly within MIN..=MAX; the bound is the sum.
        #[test]
        fn new_validates_and_bounds(c in any_duration(), r in any_duration()) {
            let ok = |d: Duration| (Timeouts::MIN..=Timeouts::MAX).contains(&d);
            match Timeouts::new(c, r) {
                Ok(t) => {
                    prop_assert!(ok(c) && ok(r));
                    prop_assert_eq!(t.call_bound(), c + r);
                    let _ = redkit::connect::manager_config(t);
                    let _ = redkit::connect::multiplexed_config(t);
                    let _ = redkit::connect::cluster_builder(["redis://127.0.0.1:1/"], t);
                }
                Err(e) => {
                    prop_assert!(!(ok(c) && ok(r)));
                    prop_assert!(matches!(e, redkit::Error::InvalidInput { .. }), "{e:?}");
                }
            }
        }
    }
}
