//! `WAITAOF` on demand (`Replication::fsynced`, `with_local_fsync`) against real Valkey 9
//! servers (the harness's Redis 7.2+ server: the machines run Redis 7.0, which has no
//! `WAITAOF`; without Valkey those tests are SKIPPED with a notice, and fail under `CI`): a
//! primary and a replica, both with `appendonly yes`. The counts reported are the server's; a
//! shortfall releases a required lock; a server that cannot answer is a typed error before
//! anything is written; a refused `WAIT` never hides an applied outcome.
//!
//! The tests on the default server (`redis-server`, or `REDKIT_REDIS_SERVER`) probe it for
//! `WAITAOF` (`COMMAND INFO`) and assert what that server must do: 7.0 refuses before any
//! write, 7.2+ answers the real (short) acknowledgement.

#[path = "fixtures/mod.rs"]
mod fixtures;
#[path = "support/harness.rs"]
mod harness;
mod support;

use std::time::Duration;

use redkit::inventory::{Decrement, Inventory};
use redkit::lock::{Acquire, Lock, LockOptions};
use redkit::script::Replication;
use redkit::{Call, Error, ScriptManager};
use support::{snapshot, RedisServer, ReplicatedPair, Valkey};

fn hit(key: &str) -> Call<'static> {
    let script = fixtures::sample();
    let mut call = Call::new(script);
    call.key(key).arg(1_000_000).arg(600_000).arg(1);
    call
}

fn fsynced(replicas: u32, ms: u64) -> Replication {
    Replication::fsynced(replicas, Duration::from_millis(ms)).unwrap()
}

async fn waitaof_counts_the_replicas_fsync_and_the_primarys_own(valkey: Valkey) {
    let pair = ReplicatedPair::spawn_valkey_aof(&valkey).await;
    let mut conn = pair.primary.patient_conn().await;
    let m = ScriptManager::new();

    let both = fsynced(1, 2_000).with_local_fsync();
    let a = m
        .replicated(both)
        .invoke::<(i64, i64, i64), _>(&mut conn, &hit("{w}:c"))
        .await
        .unwrap();
    assert_eq!(a.outcome.0, 1);
    assert_eq!((a.replicas, a.requested, a.local_fsync), (1, 1, Some(true)));
    assert!(a.is_replicated());
    let on_replica: String = pair.replica.cmd(&["GET", "{w}:c"]).await;
    assert_eq!(
        on_replica, "1",
        "fsynced by the replica means the replica has it"
    );

    // Replicas only: the local fsync is not asked (None), the replica's is counted.
    let a = m
        .replicated(fsynced(1, 2_000))
        .invoke::<(i64, i64, i64), _>(&mut conn, &hit("{w}:c"))
        .await
        .unwrap();
    assert_eq!((a.outcome.0, a.replicas, a.local_fsync), (2, 1, None));

    // Replica link down: applied and fsynced on the primary, no replica: a shortfall.
    pair.cut_link().await;
    let a = m
        .replicated(fsynced(1, 200).with_local_fsync())
        .invoke::<(i64, i64, i64), _>(&mut conn, &hit("{w}:c"))
        .await
        .unwrap();
    assert_eq!(a.outcome.0, 3, "applied on the primary");
    assert_eq!((a.replicas, a.local_fsync), (0, Some(true)));
    assert!(!a.is_replicated());
    // The local fsync alone is confirmed without any replica.
    let a = m
        .replicated(fsynced(0, 200).with_local_fsync())
        .invoke::<(i64, i64, i64), _>(&mut conn, &hit("{w}:c"))
        .await
        .unwrap();
    assert_eq!((a.outcome.0, a.replicas, a.requested), (4, 0, 0));
    assert!(a.is_replicated());
}

async fn inventory_and_a_required_lock_use_waitaof(valkey: Valkey) {
    let pair = ReplicatedPair::spawn_valkey_aof(&valkey).await;
    let mut conn = pair.primary.patient_conn().await;
    let store = Inventory::new("t:aof").unwrap().store("s").unwrap();
    store.set(&mut conn, "mug", 5).await.unwrap();
    let d = store
        .replicated(fsynced(1, 2_000).with_local_fsync())
        .decrement(&mut conn, "mug", 2, Some("o-1"))
        .await
        .unwrap();
    assert_eq!(d.outcome, Decrement::Decremented { remaining: 3 });
    assert_eq!((d.replicas, d.local_fsync), (1, Some(true)));

    let lock = Lock::new();
    let options = LockOptions::new()
        .ttl(Duration::from_secs(10))
        .require_replicas(fsynced(1, 2_000));
    let Acquire::Acquired(guard) = lock.acquire(&mut conn, "job", &options).await.unwrap() else {
        panic!("expected the lock with the replica in sync");
    };
    lock.release(&mut conn, guard).await.unwrap();

    pair.cut_link().await;
    let options = options.require_replicas(fsynced(1, 150));
    match lock.acquire(&mut conn, "job", &options).await.unwrap() {
        Acquire::NotReplicated {
            replicas: 0,
            requested: 1,
        } => {}
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    let key = lock.key("job").unwrap();
    assert_eq!(
        pair.primary.cmd::<i64>(&["EXISTS", &key]).await,
        0,
        "released"
    );
    // Unfenced locks take the same path (SET NX + WAITAOF in one pipeline).
    let unfenced = options.clone().fencing(false);
    assert!(matches!(
        lock.acquire(&mut conn, "job2", &unfenced).await.unwrap(),
        Acquire::NotReplicated {
            replicas: 0,
            requested: 1
        }
    ));
    let key = lock.key("job2").unwrap();
    assert_eq!(
        pair.primary.cmd::<i64>(&["EXISTS", &key]).await,
        0,
        "released"
    );
}

/// `true` when `server` answers `WAITAOF` (Redis 7.2+, Valkey), checked against its version.
async fn probe_waitaof(server: &RedisServer) -> bool {
    let waitaof = server.has_command("WAITAOF").await;
    let version = server.redis_version().await;
    assert_eq!(
        waitaof,
        version >= (7, 2, 0),
        "COMMAND INFO WAITAOF disagrees with redis_version {version:?}"
    );
    waitaof
}

async fn waitaof_on_the_default_server_is_refused_by_7_0_and_acknowledged_by_7_2() {
    let server = RedisServer::spawn().await; // redis-server: 7.0 here, maybe 7.2+ elsewhere
    let waitaof = probe_waitaof(&server).await;
    let mut conn = server.conn().await;
    let store = Inventory::new("t:aof").unwrap().store("s").unwrap();
    store.set(&mut conn, "mug", 5).await.unwrap();
    let lock = Lock::new();
    let options = LockOptions::new().require_replicas(fsynced(1, 100));
    let unfenced = options.clone().fencing(false);
    let before = snapshot(&mut conn).await;
    if waitaof {
        // 7.2+: applied, and the count is the server's: no replica here, 0 of 1.
        let d = store
            .replicated(fsynced(1, 100))
            .decrement(&mut conn, "mug", 1, Some("o-1"))
            .await
            .unwrap();
        assert_eq!(d.outcome, Decrement::Decremented { remaining: 4 });
        assert_eq!((d.replicas, d.requested, d.local_fsync), (0, 1, None));
        assert!(!d.is_replicated());
        assert_eq!(store.stock(&mut conn, "mug").await.unwrap(), 4);
        // A required lock is released on the shortfall, fenced or not.
        for (name, options) in [("job", &options), ("job2", &unfenced)] {
            match lock.acquire(&mut conn, name, options).await.unwrap() {
                Acquire::NotReplicated {
                    replicas: 0,
                    requested: 1,
                } => {}
                other => panic!("{name}: expected NotReplicated, got {other:?}"),
            }
            let key = lock.key(name).unwrap();
            assert_eq!(server.cmd::<i64>(&["EXISTS", &key]).await, 0, "released");
        }
    } else {
        // 7.0: a typed error before anything is written.
        let err = store
            .replicated(fsynced(1, 100))
            .decrement(&mut conn, "mug", 1, Some("o-1"))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
        let err = lock.acquire(&mut conn, "job", &options).await.unwrap_err();
        assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
        let err = lock.acquire(&mut conn, "job", &unfenced).await.unwrap_err();
        assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
        assert_eq!(snapshot(&mut conn).await, before, "nothing written");
    }
    // WAIT works on both: one unit more.
    let d = store
        .replicated(Replication::new(1, Duration::from_millis(10)).unwrap())
        .decrement(&mut conn, "mug", 1, Some("o-2"))
        .await
        .unwrap();
    let left = if waitaof { 3 } else { 4 };
    assert_eq!(d.outcome, Decrement::Decremented { remaining: left });
}

async fn local_fsync_without_appendonly_is_unsupported_and_an_empty_wait_is_invalid(
    valkey: Valkey,
) {
    let server = RedisServer::spawn_valkey(&valkey, &[]).await; // appendonly no
    let mut conn = server.conn().await;
    let m = ScriptManager::new();
    let err = m
        .replicated(fsynced(0, 100).with_local_fsync())
        .invoke::<(i64, i64, i64), _>(&mut conn, &hit("{w}:c"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
    let err = m
        .replicated(fsynced(0, 100))
        .invoke::<(i64, i64, i64), _>(&mut conn, &hit("{w}:c"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
    assert_eq!(server.cmd::<i64>(&["DBSIZE"]).await, 0, "nothing written");
    // Replicas' fsync alone needs no local AOF: no replica here, so 0 of 1 after the timeout.
    let a = m
        .replicated(fsynced(1, 50))
        .invoke::<(i64, i64, i64), _>(&mut conn, &hit("{w}:c"))
        .await
        .unwrap();
    assert_eq!((a.outcome.0, a.replicas, a.local_fsync), (1, 0, None));
}

async fn a_refused_wait_counts_as_zero_and_keeps_the_applied_outcome() {
    let server = RedisServer::spawn().await;
    let mut conn = support::denied_conn(&server, "wait").await;
    let one = Replication::new(1, Duration::from_millis(50)).unwrap();
    let store = Inventory::new("t:aof").unwrap().store("s").unwrap();
    store.set(&mut conn, "mug", 5).await.unwrap();
    let d = store
        .replicated(one)
        .decrement(&mut conn, "mug", 1, Some("o-1"))
        .await
        .unwrap();
    assert_eq!(d.outcome, Decrement::Decremented { remaining: 4 });
    assert_eq!((d.replicas, d.requested), (0, 1));
    assert!(!d.is_replicated());
    // The retry with the same id finds the outcome instead of deducting again.
    let d = store
        .replicated(one)
        .decrement(&mut conn, "mug", 1, Some("o-1"))
        .await
        .unwrap();
    assert!(matches!(d.outcome, Decrement::Duplicate { .. }), "{d:?}");
    assert_eq!(
        store.stock(&mut conn, "mug").await.unwrap(),
        4,
        "deducted once"
    );

    let lock = Lock::new();
    for fencing in [true, false] {
        let name = format!("job-{fencing}");
        let options = LockOptions::new().fencing(fencing).require_replicas(one);
        let a = lock.acquire(&mut conn, &name, &options).await.unwrap();
        assert!(
            matches!(
                a,
                Acquire::NotReplicated {
                    replicas: 0,
                    requested: 1
                }
            ),
            "no replica fsynced it: refused and given back, got {a:?}"
        );
        let key = lock.key(&name).unwrap();
        assert_eq!(server.cmd::<i64>(&["EXISTS", &key]).await, 0, "given back");
    }
}

async fn on_a_cluster_waitaof_waits_on_the_node_that_ran_the_script(valkey: Valkey) {
    let cluster = support::RedisCluster::spawn_valkey_aof(&valkey).await;
    let mut conn = cluster.conn().await;
    let inventory = Inventory::new("t:aofc").unwrap();
    let both = fsynced(1, 2_000).with_local_fsync();
    // Six stores: their hash tags spread over the three primaries.
    for name in ["a", "b", "c", "d", "e", "f"] {
        let store = inventory.store(name).unwrap();
        store.set(&mut conn, "mug", 5).await.unwrap();
        let d = store
            .replicated(both)
            .decrement(&mut conn, "mug", 1, Some("o-1"))
            .await
            .unwrap();
        assert_eq!(d.outcome, Decrement::Decremented { remaining: 4 }, "{name}");
        assert_eq!((d.replicas, d.local_fsync), (1, Some(true)), "{name}");
    }
}

async fn on_a_default_cluster_waitaof_is_refused_by_7_0_and_acknowledged_by_7_2() {
    let cluster = support::RedisCluster::spawn().await;
    let waitaof = probe_waitaof(&cluster.nodes[0]).await;
    let mut conn = cluster.conn().await;
    let store = Inventory::new("t:aofc").unwrap().store("a").unwrap();
    store.set(&mut conn, "mug", 5).await.unwrap();
    let primaries = cluster.primaries().await;
    let mut before = Vec::new();
    for primary in &primaries {
        before.push(snapshot(&mut primary.conn().await).await);
    }
    assert_eq!(
        before.iter().map(|s| s.len()).sum::<usize>(),
        1,
        "the stock key"
    );
    let result = store
        .replicated(fsynced(1, 100))
        .decrement(&mut conn, "mug", 1, Some("o-1"))
        .await;
    if waitaof {
        // 7.2+: applied on the owner; its replica has no AOF, so no fsync is acknowledged.
        let d = result.unwrap();
        assert_eq!(d.outcome, Decrement::Decremented { remaining: 4 });
        assert_eq!((d.replicas, d.requested, d.local_fsync), (0, 1, None));
        assert_eq!(store.stock(&mut conn, "mug").await.unwrap(), 4);
    } else {
        let err = result.unwrap_err();
        assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
        for (primary, before) in primaries.iter().zip(&before) {
            let after = snapshot(&mut primary.conn().await).await;
            assert_eq!(&after, before, "nothing written on {}", primary.port());
        }
    }
}

fn main() -> std::process::ExitCode {
    let mut tests = harness::Tests::new();
    harness::add!(
        tests,
        waitaof_on_the_default_server_is_refused_by_7_0_and_acknowledged_by_7_2,
        a_refused_wait_counts_as_zero_and_keeps_the_applied_outcome,
        on_a_default_cluster_waitaof_is_refused_by_7_0_and_acknowledged_by_7_2
    );
    harness::add!(tests, valkey: waitaof_counts_the_replicas_fsync_and_the_primarys_own, inventory_and_a_required_lock_use_waitaof, local_fsync_without_appendonly_is_unsupported_and_an_empty_wait_is_invalid, on_a_cluster_waitaof_waits_on_the_node_that_ran_the_script);
    tests.run()
}
