//! Replication acknowledgement (`WAIT` in the same pipeline as the script) against a real
//! primary with a replica, and on the Cluster harness.

#[path = "fixtures/mod.rs"]
mod fixtures;
#[path = "support/harness.rs"]
mod harness;
mod support;

// Connections to the primary are `patient_conn`s (10 s response timeout): a call and its
// `WAIT` are one round trip, which must not time out on redis-rs's 500 ms default while a
// loaded machine's replica takes long to acknowledge (see `Replication::new`).

use std::time::{Duration, Instant};

use redkit::script::Backend;
use redkit::script::Replication;
use redkit::{Call, Error, Registry, ScriptManager};
use support::{RedisCluster, ReplicatedPair, Valkey};

fn hit(key: &str) -> Call<'static> {
    let script = fixtures::sample();
    let mut call = Call::new(script);
    call.key(key).arg(1_000_000).arg(600_000).arg(1);
    call
}

async fn acked_counts_the_replica_and_reports_zero_when_it_is_frozen() {
    let mut pair = ReplicatedPair::spawn().await;
    let mut conn = pair.primary.patient_conn().await;
    let m = ScriptManager::new();
    let one = Replication::new(1, Duration::from_millis(2_000)).unwrap();

    // Not loaded yet: NOSCRIPT, then EVAL + WAIT once more; the replica acknowledges.
    let a = m
        .replicated(one)
        .invoke::<(i64, i64, i64), _>(&mut conn, &hit("{r}:c"))
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
        .replicated(short)
        .invoke::<(i64, i64, i64), _>(&mut conn, &hit("{r}:c"))
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

/// What the acknowledgement is for, and its negative control in one failover: the write the
/// replica acknowledged survives the primary's death, the one it did not (`replicas == 0`,
/// the link down) is lost. Without the lever the caller could not tell the two apart.
async fn an_unacknowledged_write_is_lost_in_a_failover_and_an_acknowledged_one_is_not() {
    let mut pair = ReplicatedPair::spawn().await;
    let mut conn = pair.primary.patient_conn().await;
    let m = ScriptManager::new();
    let wait = Replication::new(1, Duration::from_millis(2_000)).unwrap();
    let kept = m
        .replicated(wait)
        .invoke::<(i64, i64, i64), _>(&mut conn, &hit("{f}:c"))
        .await
        .unwrap();
    assert_eq!((kept.outcome.0, kept.replicas), (1, 1));
    pair.cut_link().await;
    let short = Replication::new(1, Duration::from_millis(100)).unwrap();
    let unconfirmed = m
        .replicated(short)
        .invoke::<(i64, i64, i64), _>(&mut conn, &hit("{f}:c"))
        .await
        .unwrap();
    assert_eq!(
        (unconfirmed.outcome.0, unconfirmed.replicas),
        (2, 0),
        "applied on the primary, acknowledged by no replica"
    );
    let on_primary: String = pair.primary.cmd(&["GET", "{f}:c"]).await;
    assert_eq!(on_primary, "2");
    // The failover: the primary dies, its replica is promoted.
    pair.primary.stop().await;
    let _: () = pair.replica.cmd(&["REPLICAOF", "NO", "ONE"]).await;
    let promoted: String = pair.replica.cmd(&["GET", "{f}:c"]).await;
    assert_eq!(
        promoted, "1",
        "the acknowledged write survived; the unacknowledged one was lost"
    );
}

async fn acked_script_error_is_typed_and_writes_nothing() {
    let pair = ReplicatedPair::spawn().await;
    let mut conn = pair.primary.patient_conn().await;
    let _: () = pair.primary.cmd(&["SET", "{r}:bad", "x"]).await;
    let one = Replication::new(1, Duration::from_millis(500)).unwrap();
    let err = ScriptManager::new()
        .replicated(one)
        .invoke::<(i64, i64, i64), _>(&mut conn, &hit("{r}:bad"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::CorruptData { .. }), "{err:?}");
    let v: String = pair.primary.cmd(&["GET", "{r}:bad"]).await;
    assert_eq!(v, "x");
}

async fn acked_on_a_cluster_waits_on_the_node_that_ran_the_script() {
    let cluster = RedisCluster::spawn().await;
    let mut conn = cluster.conn().await;
    let m = ScriptManager::new();
    let one = Replication::new(1, Duration::from_millis(2_000)).unwrap();
    for tag in ["a", "b", "c", "d", "e", "f"] {
        let key = format!("{{{tag}}}:c");
        let a = m
            .replicated(one)
            .invoke::<(i64, i64, i64), _>(&mut conn, &hit(&key))
            .await
            .unwrap();
        assert_eq!(a.outcome.0, 1, "{key}");
        assert_eq!(a.replicas, 1, "{key}: its primary's replica acknowledged");
    }
}

/// `calls=` of `cmdstat_<command>` in `INFO commandstats` (0 before the first call).
async fn command_calls(server: &support::RedisServer, command: &str) -> u64 {
    let stats: String = server.cmd(&["INFO", "commandstats"]).await;
    let prefix = format!("cmdstat_{command}:calls=");
    stats
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// The replicated path recovers from `NOSCRIPT` like a plain call: `EVAL`, then one
/// `SCRIPT LOAD`, so the script is not left in Valkey's (Redis 8's) 500-entry `EVAL` eviction
/// list. Valkey primary + replica; a flood of 600 other `EVAL`s must not evict it.
async fn acked_call_after_script_flush_leaves_its_script_loaded(valkey: Valkey) {
    let primary =
        support::RedisServer::spawn_valkey(&valkey, &["--repl-diskless-sync-delay", "0"]).await;
    let port = primary.port().to_string();
    let replica = support::RedisServer::spawn_valkey(
        &valkey,
        &[
            "--replicaof",
            "127.0.0.1",
            &port,
            "--repl-diskless-sync-delay",
            "0",
        ],
    )
    .await;
    let pair = ReplicatedPair { primary, replica };
    pair.wait_in_sync(Duration::from_secs(20)).await;
    let mut conn = pair.primary.patient_conn().await;
    let m = ScriptManager::new();
    let one = Replication::new(1, Duration::from_millis(2_000)).unwrap();
    let call = hit("{f}:c");
    let sha = call.script().sha1().to_owned();
    let a = m
        .replicated(one)
        .invoke::<(i64, i64, i64), _>(&mut conn, &call)
        .await
        .unwrap();
    assert_eq!((a.outcome.0, a.replicas), (1, 1));

    let _: () = pair.primary.cmd(&["SCRIPT", "FLUSH"]).await;
    let before = m.stats();
    let a = m
        .replicated(one)
        .invoke::<(i64, i64, i64), _>(&mut conn, &call)
        .await
        .unwrap();
    assert_eq!((a.outcome.0, a.replicas), (2, 1));
    let after = m.stats();
    assert_eq!(after.noscript_fallbacks - before.noscript_fallbacks, 1);
    assert_eq!(
        after.fallback_loads - before.fallback_loads,
        1,
        "SCRIPT LOAD after the EVAL"
    );

    // 600 distinct scripts run with EVAL by someone else: more than the 500 kept.
    let mut other = pair.primary.patient_conn().await;
    let mut pipe = redis::pipe();
    for i in 0..600 {
        pipe.cmd("EVAL").arg(format!("return {i}")).arg(0).ignore();
    }
    let _: () = pipe.query_async(&mut other).await.unwrap();
    let exists: Vec<i64> = pair.primary.cmd(&["SCRIPT", "EXISTS", &sha]).await;
    assert_eq!(exists, [1], "SCRIPT LOADed: not evicted by the EVAL flood");
    let a = m
        .replicated(one)
        .invoke::<(i64, i64, i64), _>(&mut conn, &call)
        .await
        .unwrap();
    assert_eq!(a.outcome.0, 3);
    assert_eq!(
        m.stats().noscript_fallbacks,
        after.noscript_fallbacks,
        "an EVALSHA hit"
    );
}

/// On a cold script cache a replicated call waits for its `WAIT` once: the `WAIT` goes behind
/// the command that runs the script, never behind an `EVALSHA` answered `NOSCRIPT` (whose
/// `WAIT` would block its whole timeout for nothing, with the replica's link down).
async fn acked_call_on_a_cold_cache_waits_once() {
    const WAIT: Duration = Duration::from_millis(300);
    // Slack for the round trips, SCRIPT EXISTS / EVAL / SCRIPT LOAD included, on a loaded
    // 2-core machine; far below the second WAIT this guards against.
    const SLACK: Duration = Duration::from_millis(250);
    let pair = without_replica().await;
    let mut conn = pair.primary.patient_conn().await;
    let m = ScriptManager::new();
    let wait = Replication::new(1, WAIT).unwrap();
    let waits = command_calls(&pair.primary, "wait").await;
    let started = Instant::now();
    let a = m
        .replicated(wait)
        .invoke::<(i64, i64, i64), _>(&mut conn, &hit("{w}:c"))
        .await
        .unwrap();
    let took = started.elapsed();
    assert_eq!(a.outcome.0, 1, "applied on the primary");
    assert_eq!(a.replicas, 0, "the link is down");
    assert_eq!(m.stats().noscript_fallbacks, 1, "the cache was cold");
    assert_eq!(command_calls(&pair.primary, "wait").await - waits, 1);
    println!("cold acked call with a {WAIT:?} WAIT, link down: {took:?}");
    assert!(took >= WAIT, "{took:?}");
    assert!(took < WAIT + SLACK, "{took:?}: waited more than once");
    assert!(took < 2 * WAIT, "{took:?}");
}

/// A primary whose replica's link is cut (`connected_slaves:0`): a `WAIT` for one replica
/// blocks its whole timeout.
async fn without_replica() -> ReplicatedPair {
    let pair = ReplicatedPair::spawn().await;
    pair.cut_link().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let info: String = pair.primary.cmd(&["INFO", "replication"]).await;
        if info.contains("connected_slaves:0") {
            return pair;
        }
        assert!(Instant::now() < deadline, "the replica never left");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The same with the Functions backend on a server without redkit's library: the library is
/// loaded first (its function was not listed), so the `WAIT` goes behind the `FCALL` that
/// runs, never behind one answered "Function not found".
async fn acked_function_call_without_its_library_waits_once() {
    const WAIT: Duration = Duration::from_millis(300);
    // As above: the round trips (FUNCTION LIST, FUNCTION LOAD, FCALL), far below a second WAIT.
    const SLACK: Duration = Duration::from_millis(250);
    let pair = without_replica().await;
    let mut conn = pair.primary.patient_conn().await;
    let m = ScriptManager::new().with_backend(Backend::Functions);
    let script = Registry::global().require("fixed_window", 9).unwrap();
    let mut call = Call::new(script);
    call.key("{f}:c").arg(100).arg(600_000).arg(1);
    let wait = Replication::new(1, WAIT).unwrap();
    let waits = command_calls(&pair.primary, "wait").await;
    let started = Instant::now();
    let a = m
        .replicated(wait)
        .invoke::<i64, _>(&mut conn, &call)
        .await
        .unwrap();
    let took = started.elapsed();
    assert_eq!(a.outcome % 101, 1, "counted once on the primary");
    assert_eq!(a.replicas, 0, "the link is down");
    assert_eq!(m.stats().function_reloads, 1, "the library was missing");
    assert_eq!(
        command_calls(&pair.primary, "fcall").await,
        1,
        "one FCALL ran"
    );
    assert_eq!(command_calls(&pair.primary, "wait").await - waits, 1);
    assert!(took >= WAIT, "{took:?}");
    assert!(took < WAIT + SLACK, "{took:?}: waited more than once");

    // Known loaded now: the next call asks nothing first.
    let lists = command_calls(&pair.primary, "function|list").await;
    assert_eq!(lists, 1, "the first call asked once");
    m.replicated(wait)
        .invoke::<i64, _>(&mut conn, &call)
        .await
        .unwrap();
    assert_eq!(command_calls(&pair.primary, "function|list").await, lists);
    assert_eq!(m.stats().function_reloads, 1);
}

/// A replicated operation of the public API, run by [`replicated_op`].
#[derive(Clone, Copy, Debug)]
enum Op {
    Invoke,
    Decrement,
    Restock,
    Order,
    Reserve,
    Commit,
    Cancel,
    LockAcquire,
    FencedAcquire,
    FencedSet,
    SemaphoreAcquire,
    FairAcquire,
    RwAcquire,
    ReentrantAcquire,
}

const OPS: [Op; 14] = [
    Op::Invoke,
    Op::Decrement,
    Op::Restock,
    Op::Order,
    Op::Reserve,
    Op::Commit,
    Op::Cancel,
    Op::LockAcquire,
    Op::FencedAcquire,
    Op::FencedSet,
    Op::SemaphoreAcquire,
    Op::FairAcquire,
    Op::RwAcquire,
    Op::ReentrantAcquire,
];

/// What `op` needs in place before its replicated call (a stock, a reservation, a held lock),
/// made with a manager of its own; `Some` guard for a renewal.
async fn prepare(
    op: Op,
    conn: &mut redis::aio::MultiplexedConnection,
    run: usize,
) -> Option<redkit::lock::LockGuard<redkit::lock::Lock>> {
    use redkit::inventory::Inventory;
    use redkit::lock::{Acquire, Lock, LockOptions};
    let store = Inventory::new("t:inv").unwrap().store("s").unwrap();
    store.set(conn, "a", 1_000).await.unwrap();
    store.set(conn, "b", 1_000).await.unwrap();
    match op {
        Op::Commit | Op::Cancel => {
            let id = format!("cart-{run}");
            let hold = store
                .reserve(conn, "a", 1, Duration::from_secs(60), &id)
                .await
                .unwrap();
            assert!(hold.is_held());
            None
        }
        Op::FencedSet => {
            let options = LockOptions::new()
                .ttl(Duration::from_secs(30))
                .fencing(true);
            match Lock::new()
                .try_acquire(conn, &format!("held-{run}"), &options)
                .await
                .unwrap()
            {
                Acquire::Acquired(guard) => Some(guard),
                other => panic!("{other:?}"),
            }
        }
        _ => None,
    }
}

/// Runs `op` once with `manager`, waiting for `wait`; the operation's outcome is only checked
/// for being answered (the link is down: nothing is acknowledged).
async fn replicated_op(
    op: Op,
    manager: &ScriptManager,
    conn: &mut redis::aio::MultiplexedConnection,
    run: usize,
    guard: Option<redkit::lock::LockGuard<redkit::lock::Lock>>,
    wait: Replication,
) -> u32 {
    use redkit::inventory::Inventory;
    use redkit::lock::{
        Acquire, FairLock, Lock, LockOptions, Mode, Owner, ReentrantLock, RwLock, Semaphore,
    };
    let inventory = Inventory::builder()
        .prefix("t:inv")
        .with_manager(manager.clone())
        .build()
        .unwrap();
    let store = inventory.store("s").unwrap();
    let id = format!("r-{run}");
    let cart = format!("cart-{run}");
    let resource = format!("res-{run}");
    let not_replicated = |replicas: u32| replicas;
    let acquired = |outcome: String| {
        assert!(outcome.contains("NotReplicated"), "{outcome}");
        0
    };
    let ttl = Duration::from_secs(30);
    match op {
        Op::Invoke => {
            let a = manager
                .replicated(wait)
                .invoke::<(i64, i64, i64), _>(conn, &hit(&format!("{{i}}:{run}")))
                .await
                .unwrap();
            not_replicated(a.replicas)
        }
        Op::Decrement => {
            let a = store.replicated(wait).decrement(conn, "a", 1, Some(&id));
            not_replicated(a.await.unwrap().replicas)
        }
        Op::Restock => {
            let a = store.replicated(wait).restock(conn, "a", 1, Some(&id));
            not_replicated(a.await.unwrap().replicas)
        }
        Op::Order => {
            let lines = [store.line("a", 1).unwrap(), store.line("b", 1).unwrap()];
            let a = inventory
                .replicated(wait)
                .place_order(conn, &lines, Some(&id));
            not_replicated(a.await.unwrap().replicas)
        }
        Op::Reserve => {
            let a = store.replicated(wait).reserve(conn, "a", 1, ttl, &cart);
            not_replicated(a.await.unwrap().replicas)
        }
        Op::Commit => {
            let a = store.replicated(wait).commit(conn, "a", &cart);
            not_replicated(a.await.unwrap().replicas)
        }
        Op::Cancel => {
            let a = store.replicated(wait).cancel(conn, "a", &cart);
            not_replicated(a.await.unwrap().replicas)
        }
        Op::LockAcquire | Op::FencedAcquire => {
            let lock = Lock::new().with_manager(manager.clone());
            let options = LockOptions::new()
                .ttl(ttl)
                .fencing(matches!(op, Op::FencedAcquire))
                .require_replicas(wait);
            acquired(format!(
                "{:?}",
                lock.try_acquire(conn, &resource, &options).await.unwrap()
            ))
        }
        Op::FencedSet => {
            let lock = Lock::new().with_manager(manager.clone());
            let guard = guard.expect("a held lock");
            let a = lock
                .replicated(wait)
                .fenced_set(conn, "{app}:v", guard.fencing_token().unwrap(), b"x")
                .await
                .unwrap();
            not_replicated(a.replicas)
        }
        Op::SemaphoreAcquire => {
            let sem = Semaphore::new().with_manager(manager.clone());
            let options = LockOptions::new().ttl(ttl).require_replicas(wait);
            acquired(format!(
                "{:?}",
                sem.try_acquire(conn, &resource, 2, &options).await.unwrap()
            ))
        }
        Op::FairAcquire => {
            let fair = FairLock::new().with_manager(manager.clone());
            let options = LockOptions::new().ttl(ttl).require_replicas(wait);
            acquired(format!(
                "{:?}",
                fair.acquire(conn, &resource, &options).await.unwrap()
            ))
        }
        Op::RwAcquire => {
            let rw = RwLock::new().with_manager(manager.clone());
            let options = LockOptions::new().ttl(ttl).require_replicas(wait);
            acquired(format!(
                "{:?}",
                rw.acquire(conn, &resource, Mode::Write, &options)
                    .await
                    .unwrap()
            ))
        }
        Op::ReentrantAcquire => {
            let lock = ReentrantLock::new().with_manager(manager.clone());
            let options = LockOptions::new().ttl(ttl).require_replicas(wait);
            let me = Owner::new();
            let outcome = lock.acquire(conn, &resource, &me, &options).await.unwrap();
            if let Acquire::Acquired(_) = outcome {
                panic!("acquired without the replica");
            }
            acquired(format!("{outcome:?}"))
        }
    }
}

/// Every replicated call of the API waits about its timeout, once, whatever the script cache
/// held: with a manager that never saw the script (on a flushed server), with the script
/// cached, and on a server flushed after the manager saw it (whose `EVALSHA` is answered
/// `NOSCRIPT` after its `WAIT` blocked: the recovery's `WAIT` gets only what is left).
/// The replica's link is down, so each `WAIT` blocks its whole timeout.
async fn every_replicated_call_waits_about_its_timeout_cold_and_warm() {
    const WAIT: Duration = Duration::from_millis(600);
    // A blocked WAIT ends on the server's timer (hz 10: up to 100 ms late), and the
    // recovery's WAIT of what is left ends on the next tick; plus the round trips (SCRIPT
    // EXISTS, EVALSHA, EVAL, SCRIPT LOAD, a give-back) on a loaded 2-core machine. Measured
    // without the recovery's budget: about 2 x WAIT + 100 ms, well above WAIT + SLACK.
    const SLACK: Duration = Duration::from_millis(450);
    let pair = without_replica().await;
    let mut conn = pair.primary.patient_conn().await;
    let wait = Replication::new(1, WAIT).unwrap();
    let mut run = 0;
    for op in OPS {
        let manager = ScriptManager::new();
        for state in ["never seen", "cached", "flushed after seen"] {
            run += 1;
            let guard = prepare(op, &mut conn, run).await;
            if state != "cached" {
                let _: () = pair.primary.cmd(&["SCRIPT", "FLUSH"]).await;
            }
            let started = Instant::now();
            let replicas = replicated_op(op, &manager, &mut conn, run, guard, wait).await;
            let took = started.elapsed();
            println!("{op:?}, {state}: {took:?}");
            assert_eq!(replicas, 0, "{op:?}, {state}: the link is down");
            assert!(took >= WAIT, "{op:?}, {state}: {took:?}");
            assert!(
                took < WAIT + SLACK,
                "{op:?}, {state}: {took:?}, waited more than once"
            );
        }
    }
}

/// The same with the Functions backend: after `FUNCTION FLUSH` the manager still believes its
/// library loaded, so its `FCALL` is answered "Function not found" after its `WAIT` blocked;
/// the reload's `FCALL` waits only for what is left.
async fn a_function_call_after_function_flush_waits_about_its_timeout() {
    const WAIT: Duration = Duration::from_millis(600);
    // As in every_replicated_call_waits_about_its_timeout_cold_and_warm.
    const SLACK: Duration = Duration::from_millis(450);
    let pair = without_replica().await;
    let mut conn = pair.primary.patient_conn().await;
    let m = ScriptManager::new().with_backend(Backend::Functions);
    let script = Registry::global().require("fixed_window", 9).unwrap();
    let mut call = Call::new(script);
    call.key("{f}:c").arg(100).arg(600_000).arg(1);
    let wait = Replication::new(1, WAIT).unwrap();
    m.replicated(wait)
        .invoke::<i64, _>(&mut conn, &call)
        .await
        .unwrap();
    let _: () = pair.primary.cmd(&["FUNCTION", "FLUSH"]).await;
    let started = Instant::now();
    let a = m
        .replicated(wait)
        .invoke::<i64, _>(&mut conn, &call)
        .await
        .unwrap();
    let took = started.elapsed();
    assert_eq!(a.outcome % 101, 2, "counted once more");
    assert_eq!(m.stats().function_reloads, 2, "loaded, then reloaded");
    assert!(took >= WAIT, "{took:?}");
    assert!(took < WAIT + SLACK, "{took:?}: waited more than once");
}

fn main() -> std::process::ExitCode {
    let mut tests = harness::Tests::new();
    harness::add!(
        tests,
        acked_counts_the_replica_and_reports_zero_when_it_is_frozen,
        an_unacknowledged_write_is_lost_in_a_failover_and_an_acknowledged_one_is_not,
        acked_script_error_is_typed_and_writes_nothing,
        acked_on_a_cluster_waits_on_the_node_that_ran_the_script,
        acked_call_on_a_cold_cache_waits_once,
        acked_function_call_without_its_library_waits_once,
        every_replicated_call_waits_about_its_timeout_cold_and_warm,
        a_function_call_after_function_flush_waits_about_its_timeout
    );
    harness::add!(
        tests,
        a_required_renewal_waits_about_its_timeout_cold_and_warm
    );
    harness::add!(tests, valkey: acked_call_after_script_flush_leaves_its_script_loaded);
    tests.run()
}

/// The renewal of a lease acquired with `require_replicas` waits about its timeout too,
/// whatever the script cache held: the replica frozen after the acquire (it acknowledges
/// nothing), each renewal's `WAIT` blocks its whole timeout and answers `NotReplicated`.
async fn a_required_renewal_waits_about_its_timeout_cold_and_warm() {
    use redkit::lock::{Acquire, Lock, LockOptions, Renew};
    const WAIT: Duration = Duration::from_millis(600);
    // As in every_replicated_call_waits_about_its_timeout_cold_and_warm.
    const SLACK: Duration = Duration::from_millis(450);
    let mut pair = ReplicatedPair::spawn().await;
    let mut conn = pair.primary.patient_conn().await;
    let wait = Replication::new(1, WAIT).unwrap();
    let lock = Lock::new().with_manager(ScriptManager::new());
    let options = LockOptions::new()
        .ttl(Duration::from_secs(30))
        .fencing(true)
        .require_replicas(wait);
    let Acquire::Acquired(mut guard) = lock.acquire(&mut conn, "r", &options).await.unwrap() else {
        panic!("acquired with the replica in sync");
    };
    pair.replica.pause().await;
    for state in ["never seen", "cached", "flushed after seen"] {
        if state == "flushed after seen" {
            let _: () = pair.primary.cmd(&["SCRIPT", "FLUSH"]).await;
        }
        let started = Instant::now();
        let renewed = lock.renew(&mut conn, &mut guard).await.unwrap();
        let took = started.elapsed();
        println!("required renewal, {state}: {took:?}");
        assert!(
            matches!(
                renewed,
                Renew::NotReplicated {
                    replicas: 0,
                    requested: 1
                }
            ),
            "{state}: {renewed:?}"
        );
        assert!(took >= WAIT, "{state}: {took:?}");
        assert!(
            took < WAIT + SLACK,
            "{state}: {took:?}, waited more than once"
        );
    }
    pair.replica.resume().await;
}
