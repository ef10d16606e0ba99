//! Cluster faults (issue 8, items 3 and 5), counted: a non-idempotent script call whose primary
//! freezes after the call was sent (does the connection re-send it?), and a primary frozen
//! forever while the cluster promotes its replica (how long until calls succeed again?).

mod support;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::cluster::ClusterClientBuilder;
use redkit::connect::{self, Timeouts};
use redkit::inventory::{Decrement, Inventory, Store};
use redkit::lock::{Acquire, Lock, LockOptions};
use redkit::rate_limit::{Decision, FixedWindow, LimitKey, Rate};
use support::RedisCluster;

fn store() -> Store {
    Inventory::new("fx").unwrap().store("s").unwrap()
}

const START: u64 = 1_000;
const BIG: u64 = 10_000_000;

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

/// The scenarios of this file measure recovery times of 6-node clusters; run one at a time so
/// that four clusters failing over at once on 2 cores do not turn timing into noise.
static SERIAL: std::sync::LazyLock<tokio::sync::Mutex<()>> =
    std::sync::LazyLock::new(|| tokio::sync::Mutex::new(()));

#[tokio::test]
async fn resends_of_a_call_sent_to_a_frozen_primary_are_counted() {
    let _serial = SERIAL.lock().await;
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
    assert!(connect::may_have_applied(c.as_ref().unwrap_err()), "{c:?}");
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

/// Counts of one buyer loop.
#[derive(Debug, Default)]
struct Counts {
    attempted: u64,
    succeeded: u64,
    errored: u64,
    /// When the first call succeeded after the freeze had made one fail.
    recovered_after: Option<Duration>,
    /// The last error seen (diagnostics).
    last_error: Option<String>,
}

/// Decrements `sku` once per request id, retrying an id (safe: idempotent) until it succeeds,
/// until `until`. Records when calls succeed again after the first failure.
async fn buyer<C: redis::aio::ConnectionLike>(
    mut conn: C,
    sku: &str,
    frozen_at: Instant,
    until: Instant,
) -> Counts {
    let s = store();
    let mut counts = Counts::default();
    let mut failed_once = false;
    let mut id = 0u64;
    while Instant::now() < until {
        counts.attempted += 1;
        match s
            .decrement(&mut conn, sku, 1, Some(&format!("{sku}-{id}")))
            .await
        {
            Ok(outcome) => {
                assert!(outcome.is_applied(), "stock ran out: {outcome:?}");
                counts.succeeded += 1;
                tokio::time::sleep(Duration::from_millis(2)).await;
                id += 1;
                if failed_once && counts.recovered_after.is_none() {
                    counts.recovered_after = Some(frozen_at.elapsed());
                }
            }
            Err(e) => {
                counts.errored += 1;
                counts.last_error = Some(e.to_string());
                failed_once = true;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    counts
}

/// The indexes of `key`'s primary and of its replica.
async fn owner_and_replica(cluster: &RedisCluster, key: &str) -> (usize, usize) {
    let owner = cluster.primary_index_for(key).await;
    let owner_port = cluster.nodes[owner].port();
    for (i, node) in cluster.nodes.iter().enumerate() {
        let repl: String = node.cmd(&["INFO", "replication"]).await;
        if repl.contains(&format!("master_port:{owner_port}\r")) {
            return (owner, i);
        }
    }
    panic!("the primary of {key} has no replica");
}

#[tokio::test]
// Ignored for one session after 2 of ~25 runs never recovered (calls failing fast for 7 s,
// 2-3 rebuilds). The panic message carried the last error when it came back (2026-11-25):
// "sku not found: a", the SKU written just before the freeze had not reached the replica that
// was promoted. The test now waits for the replica's offset before freezing.
async fn a_hung_primary_costs_at_most_node_timeout_plus_3s() {
    let _serial = SERIAL.lock().await;
    const NODE_TIMEOUT: Duration = Duration::from_millis(1_000);
    const WITHIN: Duration = Duration::from_millis(1_000 + 3_000);
    let mut cluster = RedisCluster::spawn_with_node_timeout(1_000).await;
    let (owner, replica) = owner_and_replica(&cluster, "fx:{s}:sku:a").await;

    let t = Timeouts::new(Duration::from_millis(300), Duration::from_millis(200)).unwrap();
    let mut redkit_conn = connect::cluster(cluster.urls(), t).await.unwrap();
    let raw_conn = ClusterClientBuilder::new(cluster.urls())
        .response_timeout(Duration::from_millis(200))
        .build()
        .unwrap()
        .get_async_connection()
        .await
        .unwrap();
    for sku in ["a", "b"] {
        store().set(&mut redkit_conn, sku, BIG).await.unwrap();
    }
    // The SKUs must reach the replica before the freeze: promoted without them, it answers
    // "sku not found" to every later call (async replication; this was the cause of the rare
    // "never recovered" failures noted above, whose last error was exactly that).
    let offset = |info: &str, field: &str| -> Option<u64> {
        info.lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().parse().ok())
    };
    let p: String = cluster.nodes[owner].cmd(&["INFO", "replication"]).await;
    let written = offset(&p, "master_repl_offset:").expect("primary offset");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r: String = cluster.nodes[replica].cmd(&["INFO", "replication"]).await;
        if offset(&r, "slave_repl_offset:").is_some_and(|o| o >= written) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the replica never caught up: {r}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    cluster.nodes[owner].pause().await; // never resumed while the buyers run
    let frozen_at = Instant::now();
    let until = frozen_at + WITHIN + Duration::from_secs(3);
    let promoted = async {
        loop {
            let repl: String = cluster.nodes[replica].cmd(&["INFO", "replication"]).await;
            if repl.contains("role:master") {
                return Some(frozen_at.elapsed());
            }
            if Instant::now() > until {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let (redkit, raw, promoted) = tokio::join!(
        buyer(redkit_conn.clone(), "a", frozen_at, until),
        buyer(raw_conn.clone(), "b", frozen_at, until),
        promoted,
    );
    eprintln!(
        "hung primary, node timeout {NODE_TIMEOUT:?}: replica promoted after {promoted:?}; \
         redkit::connect::cluster {redkit:?} (rebuilds {}); redis-rs with response timeout {raw:?}",
        redkit_conn.rebuilds()
    );
    let promoted = promoted.expect("the cluster promoted the replica");
    // Finding: redis-rs alone keeps routing to the hung node (no slot refresh on timeouts).
    assert_eq!(raw.succeeded, 0, "redis-rs now recovers by itself: {raw:?}");
    assert!(promoted < until - frozen_at);
    let recovered = redkit
        .recovered_after
        .unwrap_or_else(|| panic!("redkit's connection never recovered: {redkit:?}"));
    assert!(
        recovered <= WITHIN,
        "calls succeeded again {recovered:?} after the freeze (promotion at {promoted:?})"
    );
    // Every acknowledged decrement is in the new primary's stock (each id applied once; the
    // ids acknowledged before the freeze were replicated before it, nothing acknowledged
    // later went through the frozen node).
    let stock = store().stock(&mut redkit_conn, "a").await.unwrap();
    assert_eq!(BIG - stock, redkit.succeeded, "lost or doubled decrements");
}

#[tokio::test]
async fn redirects_are_followed_and_each_call_applied_once() {
    let _serial = SERIAL.lock().await;
    let cluster = RedisCluster::spawn().await;
    let t = Timeouts::new(Duration::from_millis(500), Duration::from_millis(500)).unwrap();
    let mut conn = connect::cluster(cluster.urls(), t).await.unwrap();
    let limiter = FixedWindow::new(
        "fx",
        Rate::new(redkit::nonzero!(1_000_000), Duration::from_secs(600)).unwrap(),
    )
    .unwrap();
    let client = LimitKey::text("m").unwrap();
    let key = limiter.redis_key(&client);
    let hits = |d: Decision| match d {
        Decision::Allowed(q) => 1_000_000 - q.remaining(),
        other => panic!("{other:?}"),
    };
    assert_eq!(hits(limiter.check(&mut conn, &client).await.unwrap()), 1);
    // A multi-key script of the same slot: stock key and reservation key.
    let s = Inventory::new("fx").unwrap().store("k:m").unwrap(); // same hash tag as the limiter key
    s.set(&mut conn, "a", START).await.unwrap();

    let slot: i64 = cluster.nodes[0].cmd(&["CLUSTER", "KEYSLOT", &key]).await;
    let slot = slot.to_string();
    let from = cluster.primary_for(&key).await;
    let to = cluster
        .primaries()
        .await
        .into_iter()
        .find(|p| p.port() != from.port())
        .unwrap();
    let from_id: String = from.cmd(&["CLUSTER", "MYID"]).await;
    let to_id: String = to.cmd(&["CLUSTER", "MYID"]).await;

    // Half-migrated slot, the keys already moved: the owner answers ASK.
    let _: String = to
        .cmd(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id])
        .await;
    let _: String = from
        .cmd(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id])
        .await;
    let keys: Vec<String> = from.cmd(&["CLUSTER", "GETKEYSINSLOT", &slot, "100"]).await;
    assert!(keys.contains(&key), "{keys:?}");
    let port = to.port().to_string();
    let mut migrate = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
    migrate.extend(keys.iter().map(String::as_str));
    let _: String = from.cmd(&migrate).await;
    // Single-key script: ASK, then ASKING + the script on the importing node (not cached
    // there: NOSCRIPT, then EVAL, redirected the same way).
    assert_eq!(hits(limiter.check(&mut conn, &client).await.unwrap()), 2);
    // A batch is one MULTI/EXEC: answered ASK, the transaction did not run and is never
    // re-sent as a whole; each call reports whether it ran (the batch layer may run refused
    // calls one by one, which connect::cluster redirects). Nothing may have run twice.
    let batch = limiter
        .check_batch(&mut conn, &[client.clone(), client.clone()])
        .await
        .unwrap();
    assert!(
        batch.iter().all(|o| o.ran() || o.is_not_run()),
        "no call may have run: {batch:?}"
    );
    let batch_ran = batch.iter().filter(|o| o.ran()).count();
    // Multi-key script whose reservation key does not exist yet: the importing node answers
    // TRYAGAIN until the migration ends; followed within the bound, then the error. Nothing ran.
    let started = Instant::now();
    let split = s.decrement(&mut conn, "a", 1, None).await;
    assert!(split.is_err(), "{split:?}");
    assert!(started.elapsed() <= t.call_bound() + Duration::from_millis(100));

    // Migration finished; this connection's slot map is stale: the old owner answers MOVED.
    for node in cluster.primaries().await {
        let _: String = node
            .cmd(&["CLUSTER", "SETSLOT", &slot, "NODE", &to_id])
            .await;
    }
    assert_eq!(
        hits(limiter.check(&mut conn, &client).await.unwrap()),
        3 + u32::try_from(batch_ran).unwrap()
    );
    let d = s.decrement(&mut conn, "a", 1, None).await.unwrap();
    assert_eq!(
        d,
        Decrement::Decremented {
            remaining: START - 1
        },
        "the TRYAGAIN call ran"
    );

    // Each call ran exactly once, on the new owner.
    let count: String = to.cmd(&["GET", &key]).await;
    assert_eq!(
        count,
        (3 + batch_ran).to_string(),
        "counted == reported: {batch:?}"
    );
    eprintln!(
        "ASK, TRYAGAIN then MOVED through connect::cluster: 5 calls, 4 succeeded, \
         1 errored (did not run), each applied once; a batch answered ASK: error, not re-sent"
    );
}

/// What the concurrent workers of the failover scenario saw.
#[derive(Debug, Default)]
struct Seen {
    buys_attempted: u64,
    buys_errored: u64,
    acked: Vec<String>,
    pending: Vec<String>,
    checks_attempted: u64,
    checks_succeeded: u64,
    /// Acquired and released (a token issued).
    lock_cycles: u64,
    /// Acquires answered Busy (a lock whose release reply was lost, held until its TTL).
    lock_busy: u64,
    /// Lock cycles completed after the SIGKILL (tokens issued by the promoted node).
    lock_cycles_after_kill: u64,
    lock_errors: u64,
    /// When (since start) each lock attempt failed.
    lock_error_at: Vec<Duration>,
    /// Fencing tokens not greater than one issued before (issue 8 item 4: lagging replica).
    token_regressions: u64,
    /// (time since start, what failed) of the last error, per worker kind.
    last_error: Vec<(Duration, &'static str)>,
}

#[tokio::test]
async fn cluster_failover_and_primary_kill_with_buyers_limiter_and_locks() {
    let _serial = SERIAL.lock().await;
    let mut cluster = RedisCluster::spawn_with_node_timeout(1_000).await;
    let t = Timeouts::new(Duration::from_millis(300), Duration::from_millis(200)).unwrap();
    let conn = connect::cluster(cluster.urls(), t).await.unwrap();
    // Buyers, limiter and lock share one hash tag, so one primary serves them all.
    let s = Inventory::new("fw").unwrap().store("k:w").unwrap();
    s.set(&mut conn.clone(), "sku", BIG).await.unwrap();
    let (_, replica) = owner_and_replica(&cluster, "fw:{k:w}:sku:sku").await;

    let seen = Arc::new(Mutex::new(Seen::default()));
    let stop = stop_flag();
    // Since start, when the SIGKILL was sent (set once, read by the lock worker).
    let killed_at = Arc::new(Mutex::new(None::<Duration>));
    let started = Instant::now();
    let mut workers = Vec::new();
    for b in 0..4 {
        let (mut conn, seen, stop) = (conn.clone(), seen.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            let s = Inventory::new("fw").unwrap().store("k:w").unwrap();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let id = format!("b{b}-{i}");
                let r = s.decrement(&mut conn, "sku", 1, Some(&id)).await;
                {
                    let mut seen = seen.lock().unwrap();
                    seen.buys_attempted += 1;
                    match r {
                        Ok(_) => {
                            seen.acked.push(id);
                            i += 1;
                        }
                        Err(_) => {
                            seen.buys_errored += 1;
                            seen.last_error.push((started.elapsed(), "buy"));
                            if !seen.pending.contains(&id) {
                                seen.pending.push(id);
                            }
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }));
    }
    {
        let (mut conn, seen, stop) = (conn.clone(), seen.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            let limiter = FixedWindow::new(
                "fw",
                Rate::new(redkit::nonzero!(1_000_000_000), Duration::from_secs(600)).unwrap(),
            )
            .unwrap();
            let client = LimitKey::text("w").unwrap();
            while !stop.load(Ordering::Relaxed) {
                let r = limiter.check(&mut conn, &client).await;
                {
                    let mut seen = seen.lock().unwrap();
                    seen.checks_attempted += 1;
                    match r {
                        Ok(_) => seen.checks_succeeded += 1,
                        Err(_) => seen.last_error.push((started.elapsed(), "check")),
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }));
    }
    {
        let (mut conn, seen, stop) = (conn.clone(), seen.clone(), stop.clone());
        let killed_at = killed_at.clone();
        workers.push(tokio::spawn(async move {
            let lock = Lock::new();
            // Fencing tokens are opt-in: without `fencing(true)` every token is 0.
            let options = LockOptions::new().ttl(Duration::from_secs(2)).fencing(true);
            let mut highest = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let r = match lock.try_acquire(&mut conn, "k:w", &options).await {
                    Ok(Acquire::Acquired(guard)) => {
                        let token = guard.fencing_token().unwrap().get();
                        assert!(token > 0, "a fenced acquire without a token");
                        let regressed = token <= highest;
                        highest = highest.max(token);
                        lock.release(&mut conn, guard)
                            .await
                            .map(|_| Some(regressed))
                    }
                    Ok(_) => Ok(None), // held by a guard whose release was lost
                    Err(e) => Err(e),
                };
                {
                    let mut seen = seen.lock().unwrap();
                    match r {
                        Ok(Some(regressed)) => {
                            seen.lock_cycles += 1;
                            if killed_at.lock().unwrap().is_some() {
                                seen.lock_cycles_after_kill += 1;
                            }
                            seen.token_regressions += u64::from(regressed);
                        }
                        Ok(None) => seen.lock_busy += 1,
                        Err(_) => {
                            seen.lock_errors += 1;
                            seen.lock_error_at.push(started.elapsed());
                            seen.last_error.push((started.elapsed(), "lock"));
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }));
    }

    tokio::time::sleep(Duration::from_millis(1_000)).await;
    // 1. Manual CLUSTER FAILOVER on the replica (waits for it to catch up, then switches).
    let failover_at = started.elapsed();
    // Acknowledged before the failover: by the original primary, which ends the run as the
    // primary again (promoted back after the kill), so these cannot be lost whatever happens.
    let before_failover = seen.lock().unwrap().acked.len();
    let ok: String = cluster.nodes[replica].cmd(&["CLUSTER", "FAILOVER"]).await;
    assert_eq!(ok, "OK");
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    let after_failover = seen.lock().unwrap().acked.len();
    // 2. SIGKILL of the new primary (the old replica); the old primary is promoted back.
    let kill_at = started.elapsed();
    *killed_at.lock().unwrap() = Some(kill_at);
    cluster.nodes[replica].stop().await;
    tokio::time::sleep(Duration::from_millis(1_000 + 3_000 + 2_000)).await;
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
    let seen = std::mem::take(&mut *seen.lock().unwrap());

    // Count against the surviving primary.
    let mut check = conn.clone();
    let mut lost_at = Vec::new(); // positions in `acked` of the acknowledged ids not found
    for (i, id) in seen.acked.iter().enumerate() {
        if !matches!(
            s.decrement(&mut check, "sku", 1, Some(id)).await.unwrap(),
            Decrement::Duplicate { .. }
        ) {
            lost_at.push(i);
        }
    }
    let lost = lost_at.len() as u64;
    for id in &seen.pending {
        if !seen.acked.contains(id) {
            s.decrement(&mut check, "sku", 1, Some(id)).await.unwrap();
        }
    }
    let ids = seen.acked.len() as u64
        + seen
            .pending
            .iter()
            .filter(|id| !seen.acked.contains(id))
            .count() as u64;
    let applied = BIG - s.stock(&mut check, "sku").await.unwrap();
    let limiter_key = FixedWindow::new("fw", Rate::per_second(redkit::nonzero!(1)))
        .unwrap()
        .redis_key(&LimitKey::text("w").unwrap());
    let counted: u64 = redis::cmd("GET")
        .arg(&limiter_key)
        .query_async(&mut check)
        .await
        .unwrap();
    let errors_after = |from: Duration, to: Duration| {
        seen.last_error
            .iter()
            .filter(|(t, _)| *t >= from && *t < to)
            .map(|(t, _)| *t)
            .max()
            .map(|t| t - from)
    };
    let failover_outage = errors_after(failover_at, kill_at);
    let kill_outage = errors_after(kill_at, Duration::MAX);
    eprintln!(
        "cluster CLUSTER FAILOVER + SIGKILL (node timeout 1 s), connect::cluster: buys attempted {}, \
         succeeded {}, errored {}, lost {lost}, doubled {}; limiter checks attempted {}, \
         succeeded {}, counted {counted}; lock cycles {} ({} after the kill, {} busy), lock errors {}, \
         fencing token regressions {}; \
         last error {:?} after CLUSTER FAILOVER, {:?} after SIGKILL; {} acknowledged during \
         the failover phase",
        seen.buys_attempted,
        seen.acked.len(),
        seen.buys_errored,
        applied.saturating_sub(ids),
        seen.checks_attempted,
        seen.checks_succeeded,
        seen.lock_cycles,
        seen.lock_cycles_after_kill,
        seen.lock_busy,
        seen.lock_errors,
        seen.token_regressions,
        failover_outage,
        kill_outage,
        after_failover,
    );
    assert_eq!(
        applied, ids,
        "after retrying every id, each applied exactly once"
    );
    // Lost acknowledged purchases. CLUSTER FAILOVER (not FORCE) switches only once the
    // replica has caught up: nothing acknowledged before it can be lost (and the original
    // primary, which acknowledged those, is the final primary). The SIGKILL can lose what the
    // killed primary acknowledged but had not yet written to its replica link: Redis writes a
    // command to the link in the same event-loop pass as its reply, and each buyer has one
    // call in flight, so at most one purchase per buyer (BUYERS). README, failure semantics,
    // "cluster failover": 0 lost in four runs; nothing promises 0 without WAIT.
    const BUYERS: u64 = 4;
    assert!(
        lost <= BUYERS,
        "{lost} acknowledged purchases lost at the kill (at most one per buyer, {BUYERS})"
    );
    assert!(
        lost_at.iter().all(|&i| i >= before_failover),
        "a purchase acknowledged before CLUSTER FAILOVER was lost: positions {lost_at:?}, \
         {before_failover} acknowledged before it"
    );
    // The lock: tokens never went backwards, not even across the promotion after the kill
    // (README: "0 fencing-token regressions"; a token is max(last + 1, server TIME in us)).
    assert_eq!(
        seen.token_regressions, 0,
        "fencing tokens went backwards ({} cycles)",
        seen.lock_cycles
    );
    assert!(seen.lock_cycles > 0, "no lock cycle completed");
    assert!(
        seen.lock_cycles_after_kill > 0,
        "no lock cycle after the kill: the tokens of the promoted node were never compared"
    );
    // Lock errors only from the kill, each within cluster-node-timeout + 3 s of it (none
    // during the manual failover: README "no error during the manual failover").
    assert!(
        seen.lock_errors > 0,
        "the kill never reached the lock worker"
    );
    let stray: Vec<_> = seen
        .lock_error_at
        .iter()
        .filter(|&&t| t < kill_at || t > kill_at + Duration::from_millis(4_000))
        .collect();
    assert!(
        stray.is_empty(),
        "lock errors outside the kill's outage (kill at {kill_at:?}, CLUSTER FAILOVER at \
         {failover_at:?}): {stray:?}"
    );
    // No check was counted twice (nothing re-sent); failed checks may or may not have counted.
    assert!(
        counted <= seen.checks_attempted,
        "{counted} > {}",
        seen.checks_attempted
    );
    // Calls succeed again within cluster-node-timeout + 3 s after the kill.
    let kill_outage = kill_outage.expect("the kill caused errors");
    assert!(
        kill_outage <= Duration::from_millis(4_000),
        "{kill_outage:?}"
    );
    assert!(
        seen.acked.len() > after_failover,
        "no purchase after the kill"
    );
}

/// The layout watch asks the nodes in turn, primaries and replicas, not a random one: a hung
/// node then delays it by one period per round, never several periods in a row (a random pick
/// can land on the hung node period after period, and an idle connection then misses a
/// failover). Counted on the servers: over 18 periods each of the 6 nodes answers about 3 of
/// the watch's `CLUSTER SLOTS`.
#[tokio::test]
async fn the_layout_watch_asks_every_node_in_turn() {
    let _serial = SERIAL.lock().await;
    let cluster = RedisCluster::spawn().await;
    // A replica is in `CLUSTER SLOTS` once it has replicated something: write to every shard,
    // then wait until every node names all six.
    let mut plain = cluster.conn().await;
    for shard in ["{a}", "{b}", "{c}"] {
        let _: () = redis::cmd("SET")
            .arg(format!("fx:{shard}:k"))
            .arg(1)
            .query_async(&mut plain)
            .await
            .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    for node in &cluster.nodes {
        loop {
            let slots: Vec<Vec<redis::Value>> = node.cmd(&["CLUSTER", "SLOTS"]).await;
            let named: usize = slots
                .iter()
                .map(|range| range.len().saturating_sub(2))
                .sum();
            if named == 6 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "replicas never listed: {slots:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let t = Timeouts::new(Duration::from_millis(300), Duration::from_millis(200)).unwrap();
    let conn = connect::cluster(cluster.urls(), t).await.unwrap();
    for node in &cluster.nodes {
        let _: () = node.cmd(&["CONFIG", "RESETSTAT"]).await;
    }
    tokio::time::sleep(18 * t.call_bound()).await;
    let mut asked = Vec::new();
    for node in &cluster.nodes {
        let stats: String = node.cmd(&["INFO", "commandstats"]).await;
        let calls = stats
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_cluster|slots:calls="))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |n| n.parse::<u64>().unwrap());
        asked.push(calls);
    }
    let (least, most) = (
        asked.iter().copied().min().unwrap(),
        asked.iter().copied().max().unwrap(),
    );
    eprintln!("the watch's CLUSTER SLOTS per node over 18 periods: {asked:?}");
    assert!(
        least >= 2 && most - least <= 1,
        "CLUSTER SLOTS answered per node over 18 periods: {asked:?}"
    );
    assert_eq!(conn.rebuilds(), 0, "a steady layout was rebuilt");
}

/// A connection left idle through a hung primary's failover: its layout watch reads the
/// promotion and rebuilds the slot map, so its first calls after the promotion succeed at
/// once, as a busy connection's do, instead of each timing out on the hung node first.
#[tokio::test]
async fn an_idle_connection_learns_a_failover_before_its_next_call() {
    let _serial = SERIAL.lock().await;
    let mut cluster = RedisCluster::spawn_with_node_timeout(1_000).await;
    let key = "fx:{idle}:k";
    let (owner, replica) = owner_and_replica(&cluster, key).await;
    let t = Timeouts::new(Duration::from_millis(300), Duration::from_millis(200)).unwrap();
    let mut conn = connect::cluster(cluster.urls(), t).await.unwrap();
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg("v")
        .query_async(&mut conn)
        .await
        .unwrap();
    // On the replica before the freeze (asynchronous replication).
    let _: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(2_000)
        .query_async(&mut conn)
        .await
        .unwrap();
    // A layout that does not change is never rebuilt, whichever node the watch asks.
    tokio::time::sleep(6 * t.call_bound()).await;
    assert_eq!(conn.rebuilds(), 0, "a steady layout was rebuilt");

    cluster.nodes[owner].pause().await;
    let frozen_at = Instant::now();
    loop {
        let repl: String = cluster.nodes[replica].cmd(&["INFO", "replication"]).await;
        if repl.contains("role:master") {
            break;
        }
        assert!(
            frozen_at.elapsed() < Duration::from_secs(15),
            "the replica was never promoted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let promoted = frozen_at.elapsed();
    // The failover is over when every node (the frozen one aside) names the new primary.
    let replica_port = cluster.nodes[replica].port();
    cluster
        .until_every_node_shows_primary(replica_port, &[owner])
        .await;
    let agreed = frozen_at.elapsed();
    // Idle for three of the watch's periods (the call bound, 500 ms here) after that: the
    // watch reads the new layout and rebuilds.
    tokio::time::sleep(3 * t.call_bound()).await;
    let mut slowest = Duration::ZERO;
    for i in 0..5 {
        let started = Instant::now();
        let value: redis::RedisResult<String> =
            redis::cmd("GET").arg(key).query_async(&mut conn).await;
        slowest = slowest.max(started.elapsed());
        assert_eq!(
            value.as_deref().ok(),
            Some("v"),
            "call {i} after an idle failover (promoted after {promoted:?}, agreed after \
             {agreed:?}, rebuilds {}): {value:?}",
            conn.rebuilds()
        );
    }
    eprintln!(
        "idle through a failover: promoted after {promoted:?}; rebuilds {}; slowest of the \
         first 5 calls {slowest:?}",
        conn.rebuilds()
    );
    assert!(conn.rebuilds() >= 1, "the watch rebuilt the slot map");
    assert!(
        slowest < t.response(),
        "no call waited on the hung node: {slowest:?}"
    );
    cluster.nodes[owner].resume().await;
}
