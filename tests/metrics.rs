//! Metrics (feature `metrics`) through a recorder installed in the test, against a real Redis:
//! each count equals what the test did. The names, labels and units are the README's
//! "Metrics and traces" table.

mod support;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, OnceLock};

use metrics::{KeyName, SharedString};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::MetricKind;
use redkit::rate_limit::{DenyCache, FixedWindow, LimitKey, Rate, RateLimiter};
use redkit::{Call, GroupCommit, Registry, ScriptManager};

/// A metric's name and its sorted labels.
type Series = (String, Vec<(String, String)>);

/// Every metric recorded so far in this process, by kind, name and sorted labels (a snapshot
/// drains the recorder, so the tests of this file share one accumulated view).
#[derive(Default)]
struct Seen {
    counters: HashMap<Series, u64>,
    histograms: HashMap<Series, Vec<f64>>,
    gauges: HashMap<String, f64>,
    /// The same gauges by name and labels (tests running at once share a name).
    gauge_series: HashMap<Series, f64>,
    units: HashMap<String, Option<metrics::Unit>>,
}

fn recorder() -> &'static (Snapshotter, Mutex<Seen>) {
    static RECORDER: OnceLock<(Snapshotter, Mutex<Seen>)> = OnceLock::new();
    RECORDER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("the only recorder of this test binary");
        redkit::describe_metrics();
        (snapshotter, Mutex::new(Seen::default()))
    })
}

/// The metrics recorded so far, accumulated.
fn seen() -> std::sync::MutexGuard<'static, Seen> {
    let (snapshotter, seen) = recorder();
    // A test that failed while holding it leaves the data as it was: keep reading.
    let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
    for (key, unit, _, value) in snapshotter.snapshot().into_vec() {
        let name = key.key().name().to_owned();
        let mut labels: Vec<(String, String)> = key
            .key()
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        labels.sort();
        seen.units.insert(name.clone(), unit);
        match (key.kind(), value) {
            (MetricKind::Counter, DebugValue::Counter(n)) => {
                *seen.counters.entry((name, labels)).or_default() += n
            }
            (MetricKind::Histogram, DebugValue::Histogram(v)) => seen
                .histograms
                .entry((name, labels))
                .or_default()
                .extend(v.into_iter().map(|x| x.into_inner())),
            // The debugging recorder drains gauges as well (a snapshot swaps them to 0): a
            // snapshot's value is what was added or set since the last one, so the gauges
            // are summed here, whichever test of this process took the snapshot.
            (MetricKind::Gauge, DebugValue::Gauge(g)) => {
                *seen.gauges.entry(name.clone()).or_default() += g.into_inner();
                *seen.gauge_series.entry((name, labels)).or_default() += g.into_inner();
            }
            _ => {}
        }
    }
    seen
}

fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    v.sort();
    v
}

/// What `describe_*` told of one metric: its name, kind, unit and help.
type Description = (String, MetricKind, Option<metrics::Unit>, String);

/// A recorder that keeps what `describe_*` told it.
#[derive(Default)]
struct Described(Mutex<Vec<Description>>);

impl Described {
    fn push(&self, kind: MetricKind, name: KeyName, unit: Option<metrics::Unit>, help: &str) {
        let entry = (name.as_str().to_owned(), kind, unit, help.to_owned());
        self.0.lock().unwrap().push(entry);
    }
}

impl metrics::Recorder for Described {
    fn describe_counter(&self, name: KeyName, unit: Option<metrics::Unit>, help: SharedString) {
        self.push(MetricKind::Counter, name, unit, &help);
    }

    fn describe_gauge(&self, name: KeyName, unit: Option<metrics::Unit>, help: SharedString) {
        self.push(MetricKind::Gauge, name, unit, &help);
    }

    fn describe_histogram(&self, name: KeyName, unit: Option<metrics::Unit>, help: SharedString) {
        self.push(MetricKind::Histogram, name, unit, &help);
    }

    fn register_counter(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        metrics::Counter::noop()
    }

    fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::noop()
    }

    fn register_histogram(
        &self,
        _: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}

/// The README's "Metrics and traces" table: each metric's name, kind and unit (`seconds`, or
/// a count: `calls` or no unit given). A row may name two metrics (`a.b` / `.c`: `a.c`), with
/// a kind each (`counter / gauge`).
fn readme_metrics() -> BTreeMap<String, (MetricKind, metrics::Unit)> {
    let readme = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"));
    let rows = readme
        .lines()
        .skip_while(|line| !line.starts_with("| metric | type, unit |"))
        .skip(2)
        .take_while(|line| line.starts_with('|'));
    let mut table = BTreeMap::new();
    for row in rows {
        let cells: Vec<&str> = row.trim_matches('|').split(" | ").map(str::trim).collect();
        let (kinds, unit) = match cells[1].split_once(", ") {
            Some((kinds, unit)) => (kinds, unit),
            None => (cells[1], ""),
        };
        let unit = match unit {
            "seconds" => metrics::Unit::Seconds,
            "" | "calls" => metrics::Unit::Count,
            other => panic!("a unit the test does not know: {other}"),
        };
        let names: Vec<&str> = cells[0].split(" / ").map(|n| n.trim_matches('`')).collect();
        let kinds: Vec<&str> = kinds.split(" / ").collect();
        assert_eq!(names.len(), kinds.len(), "a kind per name: {row}");
        let first = names[0];
        for (name, kind) in names.iter().zip(kinds) {
            let name = match name.strip_prefix('.') {
                Some(suffix) => format!("{}.{suffix}", &first[..first.rfind('.').unwrap()]),
                None => (*name).to_owned(),
            };
            let kind = match kind {
                "counter" => MetricKind::Counter,
                "gauge" => MetricKind::Gauge,
                "histogram" => MetricKind::Histogram,
                other => panic!("a kind the test does not know: {other}"),
            };
            assert!(table.insert(name, (kind, unit)).is_none(), "{row}");
        }
    }
    table
}

#[test]
fn every_metric_of_the_readme_is_described_with_its_kind_and_unit() {
    let expected = readme_metrics();
    assert_eq!(expected.len(), 10, "the README's table: {expected:?}");

    let described = Described::default();
    metrics::with_local_recorder(&described, redkit::describe_metrics);
    let described = described.0.into_inner().unwrap();
    let mut seen = BTreeMap::new();
    for (name, kind, unit, help) in described {
        assert!(!help.is_empty(), "{name} has a help text");
        let previous = seen.insert(name.clone(), (kind, unit.expect("a unit")));
        assert!(previous.is_none(), "{name} described once");
    }
    assert_eq!(seen, expected);
}

#[tokio::test]
async fn script_round_trips_and_reloads_are_counted_as_they_happened() {
    recorder();
    let server = support::RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let scripts = Registry::from_files([(
        "metrics_probe.v1.lua",
        "--! keys: 1\nreturn redis.call('INCR', KEYS[1])",
    )]);
    let manager = ScriptManager::new();
    let mut call = Call::new(scripts.require("metrics_probe", 1).unwrap());
    call.key("m:{probe}");
    for _ in 0..3 {
        let _: i64 = manager.invoke(&mut conn, &call).await.unwrap();
    }
    let _: () = server.cmd(&["SCRIPT", "FLUSH"]).await;
    let _: i64 = manager.invoke(&mut conn, &call).await.unwrap();

    let seen = seen();
    let duration = "db.client.operation.duration";
    let trip = |op: &str, error: Option<&str>| {
        let mut l = vec![
            ("db.system.name", "redis"),
            ("db.operation.name", op),
            ("db.stored_procedure.name", "metrics_probe.v1"),
        ];
        l.extend(error.map(|e| ("error.type", e)));
        seen.histograms
            .get(&(duration.to_owned(), labels(&l)))
            .map_or(0, Vec::len)
    };
    // Two NOSCRIPTs: the first call (a cold server) and the one after the flush.
    assert_eq!(trip("EVALSHA", Some("NOSCRIPT")), 2);
    assert_eq!(trip("EVALSHA", None), 2);
    assert_eq!(trip("EVAL", None), 2);
    assert_eq!(trip("SCRIPT", None), 2, "one SCRIPT LOAD after each EVAL");
    assert_eq!(seen.units[duration], Some(metrics::Unit::Seconds));
    let reloads = |kind: &str| {
        seen.counters
            .get(&(
                "redkit.script.reloads".to_owned(),
                labels(&[
                    ("redkit.reload", kind),
                    ("db.stored_procedure.name", "metrics_probe.v1"),
                ]),
            ))
            .copied()
            .unwrap_or(0)
    };
    assert_eq!(reloads("eval_fallback"), 2);
    assert_eq!(reloads("script_load"), 2);
    assert_eq!(reloads("function_load"), 0);
    assert_eq!(
        manager.stats().noscript_fallbacks,
        2,
        "the same as the manager's own counter"
    );
}

/// The deny cache's hits and misses and its size, and the size of every group sent by group
/// commit (summing to the checks made). The only test of this binary using either.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deny_cache_lookups_and_group_sizes_add_up_to_the_checks_made() {
    recorder();
    let server = support::RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let cached = FixedWindow::new("metrics-deny", Rate::per_minute(redkit::nonzero!(2)))
        .unwrap()
        .with_deny_cache(DenyCache::new(100).unwrap());
    let key = LimitKey::text("client").unwrap();
    let mut allowed = 0;
    for _ in 0..5 {
        allowed += usize::from(cached.check(&mut conn, &key).await.unwrap().is_allowed());
    }
    assert_eq!(allowed, 2);

    let grouped = FixedWindow::new("metrics-group", Rate::per_minute(redkit::nonzero!(1_000)))
        .unwrap()
        .grouped(GroupCommit::for_checks());
    ScriptManager::new().preload(&mut conn).await.unwrap(); // no NOSCRIPT: one call per group
    let before = server.evalsha_calls().await;
    let checks: Vec<_> = (0..50)
        .map(|i| {
            let (grouped, conn) = (grouped.clone(), conn.clone());
            tokio::spawn(async move {
                let mut conn = conn;
                let key = LimitKey::text(&format!("c{i}")).unwrap();
                grouped.check(&mut conn, &key).await.unwrap()
            })
        })
        .collect();
    for check in checks {
        assert!(check.await.unwrap().is_allowed());
    }
    let calls = server.evalsha_calls().await - before;

    let seen = seen();
    let lookups = |result: &str| {
        seen.counters
            .get(&(
                "redkit.deny_cache.lookups".to_owned(),
                labels(&[("redkit.result", result)]),
            ))
            .copied()
            .unwrap_or(0)
    };
    // Checks 1-3 asked Redis (the third was refused and stored), 4-5 were answered locally.
    assert_eq!((lookups("hit"), lookups("miss")), (2, 3));
    assert_eq!(seen.gauges["redkit.deny_cache.entries"], 1.0);
    let sizes = &seen.histograms[&(
        "redkit.group_commit.size".to_owned(),
        labels(&[("redkit.operation", "rate-limit check")]),
    )];
    assert_eq!(
        sizes.iter().sum::<f64>(),
        50.0,
        "every check in one group: {sizes:?}"
    );
    assert_eq!(
        sizes.len() as u64,
        calls,
        "one script call per group: {sizes:?}"
    );
    println!("50 concurrent checks in {} groups: {sizes:?}", sizes.len());
}

/// Lock operations (acquired, busy, renewed, released, not owner, a watchdog's lost lease;
/// a blocking acquire once)
/// and inventory outcomes (applied, insufficient, duplicate, id reused, not found), each
/// counted as it happened. The only test of this binary using locks, decrements, restocks or
/// orders.
#[tokio::test]
async fn lock_and_inventory_outcomes_are_counted_as_they_happened() {
    use redkit::inventory::Inventory;
    use redkit::lock::{Acquire, Lock, LockOptions};
    use std::time::Duration;

    recorder();
    let server = support::RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let lock = Lock::new();
    let options = LockOptions::new().ttl(Duration::from_millis(300));
    let Acquire::Acquired(mut guard) = lock.try_acquire(&mut conn, "m", &options).await.unwrap()
    else {
        panic!("a free lock");
    };
    assert!(matches!(
        lock.try_acquire(&mut conn, "m", &options).await.unwrap(),
        Acquire::Busy(_)
    ));
    lock.renew(&mut conn, &mut guard).await.unwrap();
    lock.release(&mut conn, guard).await.unwrap();
    // A blocking acquire woken by a release is one acquire, counted once (acquired), however
    // many attempts it made while the lock was held (at least two: before and after setting
    // the waiter flag).
    let Acquire::Acquired(held) = lock.try_acquire(&mut conn, "b", &options).await.unwrap() else {
        panic!("a free lock");
    };
    let releaser = {
        let (lock, mut other) = (lock.clone(), server.conn().await);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            lock.release(&mut other, held).await.unwrap()
        })
    };
    let mut own = server.conn().await;
    let woken = lock
        .acquire_blocking(
            &mut own,
            "b",
            &options.clone().max_wait(Duration::from_secs(5)),
        )
        .await
        .unwrap();
    releaser.await.unwrap();
    let Acquire::Acquired(woken) = woken else {
        panic!("woken by the release: {woken:?}");
    };
    lock.release(&mut own, woken).await.unwrap();
    // A watched lease taken away: the watchdog reports it lost.
    let Acquire::Acquired(mut watched) = lock.try_acquire(&mut conn, "w", &options).await.unwrap()
    else {
        panic!("a free lock");
    };
    let signal = lock.watch(&conn, &mut watched).unwrap();
    let _: () = server.cmd(&["DEL", &lock.key("w").unwrap()]).await;
    tokio::time::timeout(Duration::from_secs(5), signal.lost())
        .await
        .unwrap();
    assert_eq!(
        lock.release(&mut conn, watched).await.unwrap(),
        redkit::lock::Release::NotOwner
    );

    // Redlock over 3 masters: acquired, busy, renewed, released, then not owner.
    let masters = support::RedisMasters::spawn(3).await;
    let mut nodes = Vec::new();
    for node in &masters.nodes {
        nodes.push(node.conn().await);
    }
    let redlock = redkit::lock::Redlock::new(nodes)
        .unwrap()
        .with_node_timeout(Duration::from_millis(100));
    let long = LockOptions::new().ttl(Duration::from_secs(10));
    let Acquire::Acquired(mut held) = redlock.try_acquire("r", &long).await.unwrap() else {
        panic!("a free Redlock");
    };
    assert!(matches!(
        redlock.try_acquire("r", &long).await.unwrap(),
        Acquire::Busy(_)
    ));
    redlock.renew(&mut held).await.unwrap();
    redlock.release(held).await.unwrap();
    let Acquire::Acquired(lost) = redlock.try_acquire("r2", &long).await.unwrap() else {
        panic!("a free Redlock");
    };
    let key = redlock.key("r2").unwrap();
    for node in &masters.nodes {
        let _: () = node.cmd(&["DEL", &key]).await;
    }
    redlock.release(lost).await.unwrap();

    let store = Inventory::new("m:inv").unwrap().store("s").unwrap();
    store.set(&mut conn, "a", 2).await.unwrap();
    store
        .decrement(&mut conn, "a", 1, Some("r1"))
        .await
        .unwrap(); // applied
    store
        .decrement(&mut conn, "a", 1, Some("r1"))
        .await
        .unwrap(); // duplicate
    store
        .decrement(&mut conn, "a", 2, Some("r1"))
        .await
        .unwrap(); // id reused
    store.decrement(&mut conn, "a", 5, None).await.unwrap(); // insufficient
    assert!(store.decrement(&mut conn, "nope", 1, None).await.is_err()); // not found
    store.restock(&mut conn, "a", 1, None).await.unwrap(); // applied

    let seen = seen();
    let ops = |name: &str, labels_: &[(&str, &str)]| {
        seen.counters
            .get(&(name.to_owned(), labels(labels_)))
            .copied()
            .unwrap_or(0)
    };
    let lock_op = |op: &str, outcome: &str| {
        ops(
            "redkit.lock.operations",
            &[
                ("redkit.lock.kind", "Lock"),
                ("redkit.operation", op),
                ("redkit.outcome", outcome),
            ],
        )
    };
    assert_eq!(lock_op("acquire", "acquired"), 4);
    assert_eq!(lock_op("acquire", "busy"), 1);
    assert_eq!(lock_op("renew", "renewed"), 1);
    assert_eq!(lock_op("release", "released"), 3);
    assert_eq!(lock_op("release", "not_owner"), 1);
    assert_eq!(lock_op("lease_lost", "not_owner"), 1);
    let redlock_op = |op: &str, outcome: &str| {
        ops(
            "redkit.lock.operations",
            &[
                ("redkit.lock.kind", "Redlock"),
                ("redkit.operation", op),
                ("redkit.outcome", outcome),
            ],
        )
    };
    assert_eq!(redlock_op("acquire", "acquired"), 2);
    assert_eq!(redlock_op("acquire", "busy"), 1);
    assert_eq!(redlock_op("renew", "renewed"), 1);
    assert_eq!(redlock_op("release", "released"), 1);
    assert_eq!(redlock_op("release", "not_owner"), 1);
    let inv = |op: &str, outcome: &str| {
        ops(
            "redkit.inventory.operations",
            &[("redkit.operation", op), ("redkit.outcome", outcome)],
        )
    };
    assert_eq!(inv("decrement", "applied"), 1);
    assert_eq!(inv("decrement", "duplicate"), 1);
    assert_eq!(inv("decrement", "id_reused"), 1);
    assert_eq!(inv("decrement", "insufficient"), 1);
    assert_eq!(inv("decrement", "not_found"), 1);
    assert_eq!(inv("restock", "applied"), 1);
}

/// Every outcome of reserve, commit and cancel (each refusal included, and an error before
/// any round trip), counted once per call under its operation, through the plain and the
/// `replicated(wait)` calls alike. The only test of this binary making reservations.
#[tokio::test]
async fn reservation_outcomes_are_counted_as_they_happened() {
    use redkit::inventory::{Cancel, Commit, Inventory, Reserve};
    use redkit::script::Replication;
    use std::time::Duration;

    recorder();
    let server = support::RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let ttl = Duration::from_secs(60);
    let store = Inventory::new("m:resv").unwrap().store("s").unwrap();
    store.set(&mut conn, "a", 5).await.unwrap();
    let c = &mut conn;

    assert!(matches!(
        store.reserve(c, "a", 2, ttl, "c1").await.unwrap(),
        Reserve::Reserved { remaining: 3, .. }
    ));
    assert!(matches!(
        store.reserve(c, "a", 2, ttl, "c1").await.unwrap(),
        Reserve::AlreadyReserved { quantity: 2, .. }
    ));
    assert_eq!(
        store.reserve(c, "a", 9, ttl, "c2").await.unwrap(),
        Reserve::Insufficient { available: 3 }
    );
    assert!(store.reserve(c, "a", 1, ttl, "c3").await.unwrap().is_held());
    assert_eq!(
        store.commit(c, "a", "c1").await.unwrap(),
        Commit::Committed { quantity: 2 }
    );
    assert_eq!(
        store.commit(c, "a", "c1").await.unwrap(),
        Commit::AlreadyCommitted { quantity: 2 }
    );
    assert_eq!(
        store.reserve(c, "a", 2, ttl, "c1").await.unwrap(),
        Reserve::AlreadyCommitted { quantity: 2 }
    );
    assert_eq!(
        store.cancel(c, "a", "c1").await.unwrap(),
        Cancel::AlreadyCommitted { quantity: 2 }
    );
    assert_eq!(
        store.cancel(c, "a", "c3").await.unwrap(),
        Cancel::Cancelled {
            quantity: 1,
            stock: 3
        }
    );
    // The `replicated(wait)` calls are counted as the plain ones (no replica: `WAIT` answers 0).
    let wait = Replication::new(1, Duration::from_millis(1)).unwrap();
    assert_eq!(
        store
            .replicated(wait)
            .cancel(c, "a", "c3")
            .await
            .unwrap()
            .outcome,
        Cancel::AlreadyCancelled { quantity: 1 }
    );
    assert_eq!(
        store.commit(c, "a", "c3").await.unwrap(),
        Commit::AlreadyCancelled { quantity: 1 }
    );
    assert_eq!(
        store
            .replicated(wait)
            .reserve(c, "a", 1, ttl, "c3")
            .await
            .unwrap()
            .outcome,
        Reserve::AlreadyCancelled { quantity: 1 }
    );
    assert_eq!(
        store
            .replicated(wait)
            .commit(c, "a", "never")
            .await
            .unwrap()
            .outcome,
        Commit::Unknown
    );
    assert_eq!(
        store.cancel(c, "a", "never").await.unwrap(),
        Cancel::Unknown
    );
    let not_found = |e: redkit::Error| matches!(e, redkit::Error::NotFound { .. });
    assert!(not_found(
        store.reserve(c, "nope", 1, ttl, "c4").await.unwrap_err()
    ));
    assert!(not_found(store.commit(c, "nope", "c4").await.unwrap_err()));
    assert!(not_found(store.cancel(c, "nope", "c4").await.unwrap_err()));
    // Refused before any round trip (quantity 0): `error`.
    assert!(matches!(
        store.reserve(c, "a", 0, ttl, "c5").await.unwrap_err(),
        redkit::Error::InvalidInput { .. }
    ));
    // A SKU holding the most live reservations (written directly): `full`.
    store.set(c, "b", 1).await.unwrap();
    let limit = Inventory::MAX_RESERVATIONS_PER_SKU;
    let far = "99999999999999";
    let mut fields = vec!["HSET".to_owned(), store.reservation_key("b").unwrap()];
    let mut members = vec![
        "ZADD".to_owned(),
        store.reservation_expiry_key("b").unwrap(),
    ];
    for i in 0..limit {
        fields.extend([format!("r{i}"), format!("1 {far}")]);
        members.extend([far.to_owned(), format!("r{i}")]);
    }
    for command in [fields, members] {
        let args: Vec<&str> = command.iter().map(String::as_str).collect();
        let _: u64 = server.cmd(&args).await;
    }
    assert_eq!(
        store.reserve(c, "b", 1, ttl, "c6").await.unwrap(),
        Reserve::Full { limit }
    );

    let seen = seen();
    let count = |op: &str, outcome: &str| {
        seen.counters
            .get(&(
                "redkit.inventory.operations".to_owned(),
                labels(&[("redkit.operation", op), ("redkit.outcome", outcome)]),
            ))
            .copied()
            .unwrap_or(0)
    };
    let expected = [
        ("reserve", "applied", 2),
        ("reserve", "already_reserved", 1),
        ("reserve", "insufficient", 1),
        ("reserve", "already_committed", 1),
        ("reserve", "already_cancelled", 1),
        ("reserve", "full", 1),
        ("reserve", "not_found", 1),
        ("reserve", "error", 1),
        ("commit", "applied", 1),
        ("commit", "already_committed", 1),
        ("commit", "already_cancelled", 1),
        ("commit", "unknown", 1),
        ("commit", "not_found", 1),
        ("cancel", "applied", 1),
        ("cancel", "already_committed", 1),
        ("cancel", "already_cancelled", 1),
        ("cancel", "unknown", 1),
        ("cancel", "not_found", 1),
    ];
    for (op, outcome, n) in expected {
        assert_eq!(count(op, outcome), n, "{op} {outcome}");
    }
    // Nothing else under these operations: every call above is counted once, and only once.
    let total: u64 = seen
        .counters
        .iter()
        .filter(|((name, l), _)| {
            name == "redkit.inventory.operations"
                && l.iter().any(|(k, v)| {
                    k == "redkit.operation" && ["reserve", "commit", "cancel"].contains(&v.as_str())
                })
        })
        .map(|(_, n)| n)
        .sum();
    assert_eq!(total, expected.iter().map(|(_, _, n)| n).sum::<u64>());
}

/// A concurrency limit of 1 over HTTP: the request holding the slot is counted `allowed` and
/// raises `redkit.concurrency_limiting.active_requests` to 1; a second one meanwhile is counted
/// `limited` (429); the gauge is back at 0 once the first has finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_limit_decisions_and_active_requests_are_recorded() {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use axum::routing::get;
    use redkit::middleware::{ConcurrencyLimitLayer, ConcurrencyPolicy};
    use tokio::sync::Notify;

    recorder();
    let server = support::RedisServer::spawn().await;
    let client = redis::Client::open(server.url()).unwrap();
    let conn = redis::aio::ConnectionManager::new(client).await.unwrap();
    let layer = ConcurrencyLimitLayer::new(ConcurrencyPolicy::new("metrics-cc", 1).unwrap(), conn);
    let (started, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let app = axum::Router::new()
        .route(
            "/",
            get({
                let (started, release) = (Arc::clone(&started), Arc::clone(&release));
                move || async move {
                    started.notify_one();
                    release.notified().await;
                    "done"
                }
            }),
        )
        .layer(layer);
    let url = format!("http://{}/", support::serve_axum(app).await);
    let http = reqwest::Client::new();
    let first = tokio::spawn(http.get(&url).send());
    support::bounded(10, "the first request in its handler", started.notified()).await;
    let active = || {
        seen()
            .gauge_series
            .get(&(
                "redkit.concurrency_limiting.active_requests".to_owned(),
                labels(&[("redkit.concurrency_limiting.policy", "metrics-cc")]),
            ))
            .copied()
    };
    assert_eq!(active(), Some(1.0), "the first request holds the slot");
    let second = http.get(&url).send().await.unwrap();
    assert_eq!(second.status(), 429);
    release.notify_one();
    assert_eq!(first.await.unwrap().unwrap().status(), 200);
    let given_back = Instant::now();
    while active() != Some(0.0) {
        assert!(
            given_back.elapsed() < Duration::from_secs(5),
            "the gauge stayed at {:?}",
            active()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let seen = seen();
    let decisions = |result: &str| {
        seen.counters
            .get(&(
                "redkit.concurrency_limiting.requests".to_owned(),
                labels(&[
                    ("redkit.concurrency_limiting.policy", "metrics-cc"),
                    ("redkit.concurrency_limiting.result", result),
                ]),
            ))
            .copied()
            .unwrap_or(0)
    };
    assert_eq!((decisions("allowed"), decisions("limited")), (1, 1));
}

/// `FailMode::Local` on the concurrency limit, Redis stopped, 1 slot per client and 1
/// instance: of two requests at once, the one admitted in process is counted
/// `fallback_allowed` (not `allowed`) and the other `fallback_limited`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_local_fallback_decisions_are_recorded() {
    use std::time::Duration;

    use axum::body::Body;
    use redkit::middleware::{ConcurrencyLimitLayer, ConcurrencyPolicy, FailMode};
    use tower::ServiceExt;

    recorder();
    let mut server = support::RedisServer::spawn().await;
    let client = redis::Client::open(server.url()).unwrap();
    let conn = redis::aio::ConnectionManager::new(client).await.unwrap();
    let layer =
        ConcurrencyLimitLayer::builder(ConcurrencyPolicy::new("metrics-ccl", 1).unwrap(), conn)
            .fail_mode(FailMode::Local { instances: 1 })
            .timeout(Duration::from_millis(200))
            .build()
            .unwrap();
    let support::gate::Gated {
        gate,
        mut entered,
        app,
    } = support::gate::gated();
    let app = app.layer(layer.clone());
    server.stop().await;
    let request = || {
        http::Request::get("/")
            .extension(axum::extract::ConnectInfo(std::net::SocketAddr::from((
                [192, 0, 2, 7],
                1,
            ))))
            .body(Body::empty())
            .unwrap()
    };
    let first = tokio::spawn(app.clone().oneshot(request()));
    support::bounded(10, "the first request in its handler", entered.recv()).await;
    let second = support::bounded(10, "the second answer", app.clone().oneshot(request()))
        .await
        .unwrap();
    assert_eq!(second.status(), 429);
    gate.send(true).unwrap();
    let first = support::bounded(10, "the first answer", first).await;
    assert_eq!(first.unwrap().unwrap().status(), 200);
    let seen = seen();
    // The slot taken in process raised the gauge and its release lowered it again.
    let active = seen.gauge_series.get(&(
        "redkit.concurrency_limiting.active_requests".to_owned(),
        labels(&[("redkit.concurrency_limiting.policy", "metrics-ccl")]),
    ));
    assert_eq!(active, Some(&0.0), "active requests after the release");
    let decisions = |result: &str| {
        seen.counters
            .get(&(
                "redkit.concurrency_limiting.requests".to_owned(),
                labels(&[
                    ("redkit.concurrency_limiting.policy", "metrics-ccl"),
                    ("redkit.concurrency_limiting.result", result),
                ]),
            ))
            .copied()
            .unwrap_or(0)
    };
    assert_eq!(
        (
            decisions("fallback_allowed"),
            decisions("fallback_limited"),
            decisions("allowed")
        ),
        (1, 1, 0)
    );
}
