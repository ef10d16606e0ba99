//! Read-only scripts (`--! flags: no-writes`) go out as `EVALSHA_RO` / `FCALL_RO`, which
//! redis-rs routes to replicas when a Cluster client reads from replicas: proven here by the
//! nodes' own `INFO commandstats` (every read served by a replica, none by a primary), for both
//! backends, on the Cluster harness (3 primaries, 3 replicas).
//!
//! Found on the way: redis-rs knows a replica only from `CLUSTER SLOTS`, which lists it only
//! once the replica is known to have replicated something; a client connected before that
//! reads from the primary until its slot map is refreshed (13 of 18 early runs did).

mod support;

use std::time::{Duration, Instant};

use redis::cluster::ClusterClientBuilder;
use redkit::script::Backend;
use redkit::versioned::{Cas, Versioned};
use redkit::ScriptManager;
use support::{RedisCluster, RedisServer};

/// Successful calls (`calls - failed_calls`) of one command on one node.
async fn served(node: &RedisServer, command: &str) -> u64 {
    let stats: String = node.cmd(&["INFO", "commandstats"]).await;
    let prefix = format!("cmdstat_{command}:");
    let Some(line) = stats.lines().find_map(|l| l.strip_prefix(&prefix)) else {
        return 0;
    };
    let field = |name: &str| -> u64 {
        line.split(',')
            .find_map(|kv| kv.strip_prefix(name))
            .map_or(0, |n| n.parse().unwrap())
    };
    field("calls=") - field("failed_calls=")
}

async fn read_only_calls(node: &RedisServer) -> u64 {
    served(node, "evalsha_ro").await
        + served(node, "eval_ro").await
        + served(node, "fcall_ro").await
}

async fn reads_are_served_by_replicas(backend: Backend) {
    let cluster = RedisCluster::spawn().await;
    let v = Versioned::new().with_manager(ScriptManager::new().with_backend(backend));
    let mut writer = cluster.conn().await;
    assert_eq!(
        v.compare_and_set(&mut writer, "flags", 0, b"on")
            .await
            .unwrap(),
        Cas::Set { version: 1 }
    );
    // Redis lists a replica in CLUSTER SLOTS only once it is known to have replicated
    // something (its gossiped offset is not 0); until then redis-rs knows no replica and reads
    // from the primary. Connect the reading client once every slot range lists one, on every
    // node (the client asks any of them).
    let until = Instant::now() + Duration::from_secs(20);
    for node in &cluster.nodes {
        loop {
            let ranges: Vec<Vec<redis::Value>> = node.cmd(&["CLUSTER", "SLOTS"]).await;
            if !ranges.is_empty() && ranges.iter().all(|r| r.len() >= 4) {
                break;
            }
            assert!(
                Instant::now() < until,
                "{} never listed the replicas",
                node.port()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let mut reader = ClusterClientBuilder::new(cluster.urls())
        .read_routing_strategy(redis::cluster_read_routing::RandomReplicaStrategy)
        .build()
        .unwrap()
        .get_async_connection()
        .await
        .unwrap();
    // Replication is asynchronous: wait until a replica has the write (bounded).
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        if v.read(&mut reader, "flags").await.unwrap().version == 1 {
            break;
        }
        assert!(Instant::now() < until, "the replica never got the write");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for node in &cluster.nodes {
        let _: () = node.cmd(&["CONFIG", "RESETSTAT"]).await;
    }
    for _ in 0..20 {
        let snap = v.read(&mut reader, "flags").await.unwrap();
        assert_eq!((snap.value.as_deref(), snap.version), (Some(&b"on"[..]), 1));
    }
    let primaries: Vec<u16> = cluster.primaries().await.iter().map(|p| p.port()).collect();
    let (mut on_primaries, mut on_replicas) = (0, 0);
    for node in &cluster.nodes {
        let n = read_only_calls(node).await;
        if primaries.contains(&node.port()) {
            on_primaries += n;
        } else {
            on_replicas += n;
        }
    }
    assert_eq!(
        (on_primaries, on_replicas),
        (0, 20),
        "{backend:?}: read-only calls served by primaries, by replicas"
    );
    // A write through the same reading connection still goes to the primary.
    assert_eq!(
        v.compare_and_set(&mut reader, "flags", 1, b"off")
            .await
            .unwrap(),
        Cas::Set { version: 2 }
    );
}

#[tokio::test]
async fn read_only_scripts_are_served_by_replicas() {
    reads_are_served_by_replicas(Backend::Scripts).await;
}

#[tokio::test]
async fn read_only_functions_are_served_by_replicas() {
    reads_are_served_by_replicas(Backend::Functions).await;
}
