//! Batches during a live slot migration on the Cluster harness: `CLUSTER SETSLOT
//! MIGRATING/IMPORTING` and `MIGRATE` of the keys a few at a time, so the slot answers `ASK`
//! for the moved keys while batches of increments run. Side effects counted in Redis must
//! equal what the callers were told: every `Ran` applied once, every `NotRun` not at all,
//! and at most the `MaybeRan` ones on top.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::cluster_async::ClusterConnection;
use redis::Value;
use redkit::connect::{Cluster, Timeouts};
use redkit::rate_limit::{FixedWindow, LimitKey, Rate};
use redkit::{Call, CallOutcome, Script, ScriptManager};
use support::RedisCluster;

fn incr_script() -> &'static Script {
    static S: std::sync::OnceLock<Script> = std::sync::OnceLock::new();
    S.get_or_init(|| {
        Script::new(
            "incr_by",
            1,
            1,
            "return redis.call('INCRBY', KEYS[1], ARGV[1])",
        )
        .unwrap()
    })
}

fn incr(key: &str) -> Call<'static> {
    let mut c = Call::new(incr_script());
    c.key(key).arg(1);
    c
}

/// What callers were told, per call.
#[derive(Default, Debug, Clone, Copy)]
struct Told {
    ran_ok: i64,
    ran_err: i64,
    not_run: i64,
    maybe: i64,
}

impl Told {
    fn add<T>(&mut self, o: &CallOutcome<T>) {
        match o {
            CallOutcome::Ran(Ok(_)) => self.ran_ok += 1,
            CallOutcome::Ran(Err(_)) => self.ran_err += 1,
            CallOutcome::NotRun(_) => self.not_run += 1,
            CallOutcome::MaybeRan(_) => self.maybe += 1,
            _ => panic!("unknown outcome"),
        }
    }
    fn merge(&mut self, o: Told) {
        self.ran_ok += o.ran_ok;
        self.ran_err += o.ran_err;
        self.not_run += o.not_run;
        self.maybe += o.maybe;
    }
}

async fn sum_of(conn: &mut ClusterConnection, keys: &[String]) -> i64 {
    let mut sum = 0;
    for k in keys {
        let v: Option<i64> = redis::cmd("GET").arg(k).query_async(conn).await.unwrap();
        sum += v.unwrap_or(0);
    }
    sum
}

/// A raw redis-rs cluster connection that re-sends a request at most `retries` times.
async fn raw(cluster: &RedisCluster, retries: u32) -> ClusterConnection {
    // redis-rs waits at least 1.28 s before re-sending after TRYAGAIN (a transaction whose
    // keys are partly moved answers TRYAGAIN at EXEC), growing each retry: keep the waits short.
    redis::cluster::ClusterClientBuilder::new(cluster.urls())
        .min_retry_wait(10)
        .max_retry_wait(100)
        .retries(retries)
        .build()
        .unwrap()
        .get_async_connection()
        .await
        .unwrap()
}

/// The connection the README recommends on a Cluster: `redkit::connect::cluster` (no re-sends,
/// every call bounded, a new redis-rs connection after a timeout).
async fn bounded(cluster: &RedisCluster) -> Cluster {
    redkit::connect::cluster(cluster.urls(), Timeouts::default())
        .await
        .unwrap()
}

/// Runs `work` on 4 tasks over clones of `conn` while the slot of `{tag}` migrates key by key,
/// then a little after.
async fn during_migration<C, F, Fut>(cluster: &RedisCluster, tag: &str, conn: C, work: F) -> Told
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
    F: Fn(C, u64, Arc<AtomicBool>) -> Fut,
    Fut: std::future::Future<Output = Told> + Send + 'static,
{
    let slot: u16 = cluster.nodes[0].cmd(&["CLUSTER", "KEYSLOT", tag]).await;
    let done = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for w in 0..4u64 {
        workers.push(tokio::spawn(work(conn.clone(), w, done.clone())));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    eprintln!("{tag}: slot {slot}: migration begins");
    let mig = cluster.begin_migration(slot).await;
    eprintln!("{tag}: {} -> {}", mig.source.port(), mig.target.port());
    for _ in 0..20 {
        mig.migrate_keys(3).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("{tag}: finishing");
    mig.finish(cluster).await;
    eprintln!("{tag}: finished");
    tokio::time::sleep(Duration::from_millis(300)).await;
    done.store(true, Ordering::Relaxed);
    let mut told = Told::default();
    for w in workers {
        told.merge(w.await.unwrap());
    }
    // The connection that saw the migration still works for batches in the moved slot.
    let mut conn = conn;
    let probe = format!("{tag}:probe");
    let m = ScriptManager::new();
    let mut attempts = 0;
    eprintln!("{tag}: workers stopped; probing");
    loop {
        attempts += 1;
        let o = m.invoke_batch(&mut conn, vec![incr(&probe)]).await.unwrap();
        if o[0].ran() {
            break;
        }
        assert!(attempts < 50, "batch never ran after the migration: {o:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("{tag}: batches run again after {attempts} attempt(s)");
    told
}

fn check(what: &str, told: Told, applied: i64) {
    println!("{what}: told {told:?}, applied {applied}");
    assert!(told.ran_ok > 0, "{what}: some batches ran");
    assert_eq!(told.ran_err, 0, "{what}: INCRBY never errors");
    assert!(
        applied >= told.ran_ok && applied <= told.ran_ok + told.maybe,
        "{what}: side effects {applied} outside [{}, {}]",
        told.ran_ok,
        told.ran_ok + told.maybe
    );
}

// Two migrations in sequence on one cluster (bounded: ~2 s of migration each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_during_a_slot_migration_report_every_side_effect() {
    let started = std::time::Instant::now();
    let cluster = RedisCluster::spawn().await;
    let m = ScriptManager::new();

    // 1. invoke_batch: 8 calls of one slot per batch.
    let keys: Vec<String> = (0..64).map(|i| format!("{{mig}}:{i}")).collect();
    let told = during_migration(
        &cluster,
        "{mig}",
        bounded(&cluster).await,
        |mut conn, w, stop| {
            let (m, keys) = (m.clone(), keys.clone());
            async move {
                let mut told = Told::default();
                let mut i = w;
                while !stop.load(Ordering::Relaxed) {
                    tokio::task::yield_now().await;
                    let calls: Vec<Call> = (0..8)
                        .map(|j| incr(&keys[((i * 8 + j) % 64) as usize]))
                        .collect();
                    i += 1;
                    for o in m.invoke_batch(&mut conn, calls).await.unwrap() {
                        told.add(&o);
                    }
                }
                told
            }
        },
    )
    .await;
    let applied = sum_of(&mut cluster.conn().await, &keys).await;
    check("invoke_batch", told, applied);

    // 2. invoke_batch_by_slot: 32 calls over many slots, 1 in 4 in the migrating slot.
    let moving: Vec<String> = (0..64).map(|i| format!("{{mig2}}:{i}")).collect();
    let spread: Vec<String> = (0..96).map(|i| format!("{{s{i}}}:c")).collect();
    let told = during_migration(
        &cluster,
        "{mig2}",
        bounded(&cluster).await,
        |conn, w, stop| {
            let (m, moving, spread) = (m.clone(), moving.clone(), spread.clone());
            async move {
                let mut told = Told::default();
                let mut i = w as usize;
                while !stop.load(Ordering::Relaxed) {
                    tokio::task::yield_now().await;
                    let calls: Vec<Call> = (0..32)
                        .map(|j| {
                            if j % 4 == 0 {
                                incr(&moving[(i * 8 + j) % 64])
                            } else {
                                incr(&spread[(i * 24 + j) % 96])
                            }
                        })
                        .collect();
                    i += 1;
                    for o in m.invoke_batch_by_slot(&conn, calls).await.unwrap() {
                        told.add(&o);
                    }
                }
                told
            }
        },
    )
    .await;
    let mut all = moving.clone();
    all.extend(spread.iter().cloned());
    let applied = sum_of(&mut cluster.conn().await, &all).await;
    check("invoke_batch_by_slot", told, applied);

    assert!(
        started.elapsed() < Duration::from_secs(30),
        "bounded: {:?}",
        started.elapsed()
    );
    let _ = Value::Nil;
}

/// The limiter's `check_batch_by_slot` during a migration, over a connection with `retries`.
async fn limiter_during_migration<C>(cluster: RedisCluster, conn: C)
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    // The limiter's check_batch_by_slot: 32 keys per batch, a huge limit so every check
    //    that ran counts one unit.
    let limiter = FixedWindow::new(
        "mig",
        Rate::new(redkit::nonzero!(1_000_000), Duration::from_secs(600)).unwrap(),
    )
    .unwrap();
    let lkeys: Vec<LimitKey> = (0..128)
        .map(|i| LimitKey::text(&format!("c{i}")).unwrap())
        .collect();
    let tag = {
        let k = limiter.redis_key(&lkeys[0]);
        k[k.find('{').unwrap()..].to_owned()
    };
    let ports: Arc<Vec<u16>> = Arc::new(cluster.nodes.iter().map(|n| n.port()).collect());
    let told = during_migration(&cluster, &tag, conn, |conn, w, stop| {
        let (limiter, lkeys, ports) = (limiter.clone(), lkeys.clone(), ports.clone());
        async move {
            let mut told = Told::default();
            let mut i = w as usize;
            while !stop.load(Ordering::Relaxed) {
                tokio::task::yield_now().await;
                // Key 0 (the migrating slot) in every batch, plus 31 others.
                let mut batch = vec![lkeys[0].clone()];
                batch.extend((1..32).map(|j| lkeys[1 + (i * 31 + j) % 127].clone()));
                i += 1;
                let r = tokio::time::timeout(
                    Duration::from_secs(10),
                    limiter.check_batch_by_slot(&conn, &batch),
                )
                .await;
                let Ok(r) = r else {
                    eprintln!("HUNG batch at {:?}", std::time::SystemTime::now());
                    for port in ports.iter() {
                        let out = std::process::Command::new("redis-cli")
                            .args(["-p", &port.to_string(), "CLIENT", "LIST"])
                            .output()
                            .unwrap();
                        eprintln!(
                            "{port} CLIENT LIST:\n{}",
                            String::from_utf8_lossy(&out.stdout)
                        );
                    }
                    panic!("hung");
                };
                for o in r.unwrap() {
                    if let CallOutcome::Ran(Ok(d)) = &o {
                        assert!(d.is_allowed());
                    }
                    told.add(&o);
                }
            }
            told
        }
    })
    .await;
    let rkeys: Vec<String> = lkeys.iter().map(|k| limiter.redis_key(k)).collect();
    let applied = sum_of(&mut cluster.conn().await, &rkeys).await;
    check("check_batch_by_slot", told, applied);
}

/// Over `redkit::connect::cluster` (the README's lever on a Cluster): every unit reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limiter_batches_during_a_slot_migration_report_every_unit() {
    let cluster = RedisCluster::spawn().await;
    let conn = bounded(&cluster).await;
    limiter_during_migration(cluster, conn).await
}

/// Same over a raw redis-rs connection with its default re-sending (retries 16). Hangs: the
/// connection wedges for good once the slot has moved (see `single_checks_during_migration`
/// for the root cause in redis-rs 1.8.1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "reproduces a deadlock inside redis-rs 1.8.1's cluster connection (see \
            single_checks_during_migration)"]
async fn limiter_batches_during_a_slot_migration_with_redis_rs_retries() {
    let cluster = RedisCluster::spawn().await;
    let conn = raw(&cluster, 16).await;
    limiter_during_migration(cluster, conn).await
}

/// 32 concurrent single `check` calls per round (no batch, no transaction) while a slot
/// migrates. Panics if a round does not complete within 4 s, saying whether the connection
/// is wedged (a new unrelated `GET` hangs too).
///
/// **Root cause of the wedge (redis-rs 1.8.1, `cluster_handling/async_connection`).** Request
/// futures take `conn_lock.read()`; a `MOVED` makes `poll_flush` start `refresh_slots`, which
/// takes `conn_lock.write()` and, while it waits, `poll_flush` polls only the recovery future,
/// not the in-flight requests. tokio's `RwLock` is fair: a request future queued for a read
/// permit is *granted* it when the previous holder releases, before it is polled again. Such a
/// future, never polled during recovery, holds its read permit forever, so `refresh_slots`
/// never gets the write lock and every later request queues behind it. Seen with a 3 s probe
/// around the write lock in a patched copy of redis-rs ("write lock still not granted after
/// 3 s" right before each hang); polling in-flight requests while recovering (a 6-line change
/// in `poll_flush`) made the reproduction pass 3 of 3 runs, where it hung 3 of 3 without.
/// `connect::Cluster` does not wedge for good: its calls are bounded, and a timed-out call
/// makes it replace the redis-rs connection (counted in `Cluster::rebuilds`).
async fn single_checks_during_migration<C>(cluster: &RedisCluster, conn: C) -> Told
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    let limiter = FixedWindow::new(
        "mig",
        Rate::new(redkit::nonzero!(1_000_000), Duration::from_secs(600)).unwrap(),
    )
    .unwrap();
    let lkeys: Vec<LimitKey> = (0..128)
        .map(|i| LimitKey::text(&format!("c{i}")).unwrap())
        .collect();
    let rk = limiter.redis_key(&lkeys[0]);
    let tag = rk[rk.find('{').unwrap()..].to_owned();
    let told = during_migration(cluster, &tag, conn, |conn, w, stop| {
        let (limiter, lkeys) = (limiter.clone(), lkeys.clone());
        async move {
            let mut told = Told::default();
            let mut i = w as usize;
            while !stop.load(Ordering::Relaxed) {
                tokio::task::yield_now().await;
                let mut batch = vec![lkeys[0].clone()];
                batch.extend((1..32).map(|j| lkeys[1 + (i * 31 + j) % 127].clone()));
                i += 1;
                let runs = batch.iter().map(|k| {
                    let (limiter, mut conn) = (limiter.clone(), conn.clone());
                    async move { limiter.check(&mut conn, k).await }
                });
                let mut all = Box::pin(futures_util::future::join_all(runs));
                let results = match tokio::time::timeout(Duration::from_secs(4), &mut all).await {
                    Ok(r) => r,
                    Err(_) => {
                        // Does one new, unrelated request (which makes redis-rs poll its
                        // request queue again) release the stuck ones?
                        let mut poke = conn.clone();
                        let mut get_cmd = redis::cmd("GET");
                        get_cmd.arg("poke");
                        let get = get_cmd.query_async::<Option<String>>(&mut poke);
                        if tokio::time::timeout(Duration::from_secs(2), get)
                            .await
                            .is_err()
                        {
                            panic!(
                                "single checks hung; the connection is wedged: a new GET hangs too"
                            );
                        }
                        match tokio::time::timeout(Duration::from_secs(2), &mut all).await {
                            Ok(_) => panic!("single checks hung; released by one new request"),
                            Err(_) => panic!("single checks hung; still stuck after a new request"),
                        }
                    }
                };
                for r in results {
                    told.add(&CallOutcome::Ran(r));
                }
            }
            told
        }
    })
    .await;
    println!("single checks: {told:?}");
    told
}

/// The redis-rs deadlock, reproduced over a raw connection that never re-sends (retries 0:
/// hung in 2 of 3 runs; with the default retries 16 in 3 of 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "reproduces a deadlock inside redis-rs 1.8.1's cluster connection: hangs by design"]
async fn control_single_checks_during_a_slot_migration_over_raw_redis_rs() {
    let cluster = RedisCluster::spawn().await;
    let conn = raw(&cluster, 0).await;
    single_checks_during_migration(&cluster, conn).await;
}

/// The same load over `redkit::connect::cluster`: no round hangs, and calls succeed again
/// after the migration (the probe in `during_migration`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_checks_during_a_slot_migration_never_hang_over_connect_cluster() {
    let cluster = RedisCluster::spawn().await;
    let conn = bounded(&cluster).await;
    let told = single_checks_during_migration(&cluster, conn).await;
    assert!(told.ran_ok > 0);
}

/// Deterministic: key A still on the source, key B already moved (the source answers ASK for
/// B). A plain pipeline was re-sent whole by redis-rs (A incremented once per resend); the
/// transaction is refused whole, then each call runs once, following its own redirect.
#[tokio::test]
async fn a_batch_over_a_half_migrated_slot_runs_each_call_once() {
    let cluster = RedisCluster::spawn().await;
    let mut conn = cluster.conn().await;
    let slot: u16 = cluster.nodes[0]
        .cmd(&["CLUSTER", "KEYSLOT", "{half}"])
        .await;
    for k in ["{half}:a", "{half}:b"] {
        let _: () = redis::cmd("SET")
            .arg(k)
            .arg(0)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    for k in ["{half}:c", "{half}:d"] {
        let _: () = redis::cmd("SET")
            .arg(k)
            .arg(0)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let mig = cluster.begin_migration(slot).await;
    mig.migrate_key("{half}:b").await;
    mig.migrate_key("{half}:d").await;
    let m = ScriptManager::new();
    m.preload_scripts(&mut conn, std::slice::from_ref(incr_script()))
        .await
        .unwrap();

    // Witness of the redis-rs behaviour the transaction avoids: the same two calls as a plain
    // pipeline. C runs on the source, D answers ASK, redis-rs re-sends the whole pipeline.
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for k in ["{half}:c", "{half}:d"] {
        pipe.cmd("EVALSHA")
            .arg(incr_script().sha1())
            .arg(1)
            .arg(k)
            .arg(1);
    }
    let plain: redis::RedisResult<Vec<Value>> = pipe.query_async(&mut conn).await;
    let c: i64 = mig.source.cmd(&["GET", "{half}:c"]).await;
    println!("plain pipeline: {plain:?}; C on the source incremented {c} time(s)");
    assert!(
        c > 1 || plain.is_err(),
        "the plain pipeline reported every call correctly: {plain:?}, C = {c}"
    );
    // The re-sends also created C on the target (ASKING); drop the source's copy so the
    // migration can finish.
    let _: i64 = mig.source.cmd(&["DEL", "{half}:c"]).await;

    let outcomes = m
        .invoke_batch(&mut conn, vec![incr("{half}:a"), incr("{half}:b")])
        .await
        .unwrap();
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, CallOutcome::Ran(Ok(Value::Int(1))))),
        "{outcomes:?}"
    );
    let a: i64 = mig.source.cmd(&["GET", "{half}:a"]).await;
    assert_eq!(a, 1, "A ran exactly once");
    mig.finish(&cluster).await;
    let b: i64 = redis::cmd("GET")
        .arg("{half}:b")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(b, 1, "B ran exactly once");
}
