//! Cluster faults (issue 8, items 3 and 5), counted: a non-idempotent script call whose primary
//! freezes after the call was sent (does the connection re-send it?), and a primary frozen
//! forever while the cluster promotes its replica (how long until calls succeed again?).

mod support;

use std::time::{Duration, Instant};

use redis::cluster::ClusterClientBuilder;
use redkit::connect::{self, Timeouts};
use redkit::inventory::{Decrement, Inventory, Store};
use support::RedisCluster;

fn store() -> Store {
    Inventory::new("fx").unwrap().store("s").unwrap()
}

const START: u64 = 1_000;

/// Sets `sku` to START and decrements it once (so the script is cached); stock START - 1.
async fn prepare<C: redis::aio::ConnectionLike>(conn: &mut C, sku: &str) {
    let s = store();
    s.set(conn, sku, START).await.unwrap();
    let d = s.decrement(conn, sku, 1, None).await.unwrap();
    assert_eq!(
        d,
        Decrement::Decremented {
            remaining: START - 1
        }
    );
}

/// How many times the decrement after `prepare` was applied.
async fn applied<C: redis::aio::ConnectionLike>(conn: &mut C, sku: &str) -> u64 {
    let stock = store().stock(conn, sku).await.unwrap();
    START - 1 - stock
}

#[tokio::test]
async fn resends_of_a_call_sent_to_a_frozen_primary_are_counted() {
    // A long node timeout: no failover while the primary is frozen for a few seconds.
    let mut cluster = RedisCluster::spawn_with_node_timeout(20_000).await;
    let owner = cluster.primary_index_for("fx:{s}:sku:a").await;

    // redis-rs as users configure it: a per-attempt response timeout, default retries (16).
    let default_client = ClusterClientBuilder::new(cluster.urls())
        .response_timeout(Duration::from_millis(200))
        .overall_response_timeout(Some(Duration::from_millis(1_500)))
        .build()
        .unwrap();
    let mut default_conn = default_client.get_async_connection().await.unwrap();
    let t = Timeouts::new(Duration::from_millis(300), Duration::from_millis(200)).unwrap();
    let mut redkit_conn = connect::cluster(cluster.urls(), t).await.unwrap();

    prepare(&mut default_conn, "no-id").await;
    prepare(&mut default_conn, "with-id").await;
    prepare(&mut redkit_conn, "redkit").await;

    // Other callers keep using both connections meanwhile (as in any busy service), on a key
    // served by another primary. (Without traffic redis-rs leaves its queued retry undispatched
    // until the caller gave up, and then drops it.)
    let other = (0..)
        .map(|i| format!("other-{i}"))
        .find(|k| {
            redis::cluster_routing::Slot::for_key(k) != redis::cluster_routing::Slot::for_key("{s}")
        })
        .unwrap();
    let stop = stop_flag();
    let traffic: Vec<_> = [default_conn.clone()]
        .into_iter()
        .map(|c| traffic(c, other.clone(), stop.clone()))
        .chain(std::iter::once(traffic(
            redkit_conn.clone(),
            other.clone(),
            stop.clone(),
        )))
        .collect();

    cluster.nodes[owner].pause().await;
    let (mut c1, mut c2, mut c3) = (
        default_conn.clone(),
        default_conn.clone(),
        redkit_conn.clone(),
    );
    let (s1, s2, s3) = (store(), store(), store());
    let (a, b, c) = tokio::join!(
        s1.decrement(&mut c1, "no-id", 1, None),
        s2.decrement(&mut c2, "with-id", 1, Some("order-1")),
        s3.decrement(&mut c3, "redkit", 1, None),
    );
    eprintln!("replies: {a:?} {b:?} {c:?}");
    // Every caller was told "failed" (a timeout): none knows whether it ran.
    assert!(a.is_err() && b.is_err() && c.is_err(), "{a:?} {b:?} {c:?}");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in traffic {
        t.await.unwrap();
    }
    cluster.nodes[owner].resume().await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let stats: String = cluster.nodes[owner].cmd(&["INFO", "commandstats"]).await;
    eprintln!(
        "{}",
        stats
            .lines()
            .filter(|l| l.contains("eval"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let no_id = applied(&mut default_conn, "no-id").await;
    let with_id = applied(&mut default_conn, "with-id").await;
    let redkit = applied(&mut redkit_conn, "redkit").await;
    eprintln!(
        "one call each, frozen primary: redis-rs defaults without id applied {no_id}x, \
         with request id {with_id}x; redkit::connect::cluster {redkit}x"
    );
    // Finding: redis-rs re-sends the timed-out request by itself (each copy runs on resume).
    assert!(no_id >= 2, "redis-rs no longer re-sends? applied {no_id}x");
    // A request id makes those copies harmless, and the retry finds the first outcome.
    assert_eq!(with_id, 1);
    let retry = store()
        .decrement(&mut default_conn, "with-id", 1, Some("order-1"))
        .await
        .unwrap();
    assert!(matches!(retry, Decrement::Duplicate { .. }), "{retry:?}");
    assert_eq!(applied(&mut default_conn, "with-id").await, 1);
    // redkit's setup never re-sends: the call that reached the server ran exactly once.
    assert_eq!(redkit, 1);
}

fn stop_flag() -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false))
}

/// GETs `key` every 10 ms until `stop`; errors ignored.
fn traffic<C: redis::aio::ConnectionLike + Send + 'static>(
    mut conn: C,
    key: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let _: redis::RedisResult<Option<String>> =
                redis::cmd("GET").arg(&key).query_async(&mut conn).await;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
}
