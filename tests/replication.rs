//! Replication acknowledgement (`WAIT` in the same pipeline as the script) against a real
//! primary with a replica, and on the Cluster harness.

mod support;

use std::time::{Duration, Instant};

use redkit::script::Replication;
use redkit::{Call, Error, Registry, ScriptManager};
use support::{RedisCluster, ReplicatedPair};

fn hit(key: &str) -> Call<'static> {
    let script = Registry::global().require("fixed_window", 1).unwrap();
    let mut call = Call::new(script);
    call.key(key).arg(1_000_000).arg(600_000).arg(1);
    call
}

#[tokio::test]
async fn acked_counts_the_replica_and_reports_zero_when_it_is_frozen() {
    let mut pair = ReplicatedPair::spawn().await;
    let mut conn = pair.primary.conn().await;
    let m = ScriptManager::new();
    let one = Replication::new(1, Duration::from_millis(2_000)).unwrap();

    // Not loaded yet: NOSCRIPT, then EVAL + WAIT once more; the replica acknowledges.
    let a = m
        .invoke_acked::<(i64, i64, i64), _>(&mut conn, &hit("{r}:c"), one)
        .await
        .unwrap();
    assert_eq!(a.outcome.0, 1);
    assert_eq!((a.replicas, a.requested), (1, 1));
    assert!(a.is_replicated());
    assert_eq!(m.stats().noscript_fallbacks, 1);
    let replica_value: String = pair.replica.cmd(&["GET", "{r}:c"]).await;
    assert_eq!(replica_value, "1", "acknowledged means the replica has it");

    // Replica frozen: the write is applied on the primary, WAIT times out with 0 acks.
    pair.replica.pause().await;
    let short = Replication::new(1, Duration::from_millis(200)).unwrap();
    let started = Instant::now();
    let a = m
        .invoke_acked::<(i64, i64, i64), _>(&mut conn, &hit("{r}:c"), short)
        .await
        .unwrap();
    let took = started.elapsed();
    assert_eq!(a.outcome.0, 2, "applied on the primary");
    assert_eq!(a.replicas, 0);
    assert!(!a.is_replicated());
    assert!(took >= Duration::from_millis(190), "{took:?}");
    assert!(took < Duration::from_secs(2), "{took:?}");
    pair.replica.resume().await;
}

#[tokio::test]
async fn acked_script_error_is_typed_and_writes_nothing() {
    let pair = ReplicatedPair::spawn().await;
    let mut conn = pair.primary.conn().await;
    let _: () = pair.primary.cmd(&["SET", "{r}:bad", "x"]).await;
    let one = Replication::new(1, Duration::from_millis(500)).unwrap();
    let err = ScriptManager::new()
        .invoke_acked::<(i64, i64, i64), _>(&mut conn, &hit("{r}:bad"), one)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::CorruptData { .. }), "{err:?}");
    let v: String = pair.primary.cmd(&["GET", "{r}:bad"]).await;
    assert_eq!(v, "x");
}

#[tokio::test]
async fn acked_on_a_cluster_waits_on_the_node_that_ran_the_script() {
    let cluster = RedisCluster::spawn().await;
    let mut conn = cluster.conn().await;
    let m = ScriptManager::new();
    let one = Replication::new(1, Duration::from_millis(2_000)).unwrap();
    for tag in ["a", "b", "c", "d", "e", "f"] {
        let key = format!("{{{tag}}}:c");
        let a = m
            .invoke_acked::<(i64, i64, i64), _>(&mut conn, &hit(&key), one)
            .await
            .unwrap();
        assert_eq!(a.outcome.0, 1, "{key}");
        assert_eq!(a.replicas, 1, "{key}: its primary's replica acknowledged");
    }
}
