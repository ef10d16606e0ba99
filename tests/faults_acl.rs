//! The minimal ACL of `docs/failure-semantics.md` ("Minimal ACL"), read from the document
//! itself: for each row of its table, a user with exactly that row's commands and key patterns
//! (and the row of every call) runs the component's operations on a fresh private server, and
//! the commands the server then counts (`INFO commandstats`, `ACL LOG`) must be exactly the
//! row's: a command granted but never used fails, and so does one used but not granted.

#[path = "support/harness.rs"]
mod harness;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::Value;
use redkit::inventory::{Cancel, Commit, Decrement, Inventory, Order, Reserve, Restock};
use redkit::lock::{
    Acquire, FairLock, Fence, FencedWrite, Lock, LockOptions, Mode, Owner, Redlock, ReentrantLock,
    Release, Renew, RwLock, Semaphore, WithLock,
};
use redkit::rate_limit::{
    Algorithm, AlignedWindow, Decision, FixedWindow, Gcra, LimitKey, Limiter, QuotaLease, Rate,
    RateLimiter, SlidingWindow,
};
use redkit::script::admin::{Admin, FlushMode, LibraryState, NodeReport};
use redkit::script::{Backend, Library, Replication};
use redkit::versioned::{Cas, RetryPolicy, Update, Versioned};
use redkit::{GroupCommit, Registry, ScriptManager};
use support::{RedisCluster, RedisServer, Valkey};

// ---------------------------------------------------------------------------------------------
// The table, from the document.

const DOC: &str = include_str!("../docs/failure-semantics.md");

/// One row of the table: who it is for, the commands it grants (`+name`, lower case, a
/// subcommand as `name|sub`), the key patterns (`~pattern`), and the commands redkit also sends
/// that may be refused without harm (the last column).
#[derive(Debug, Clone)]
struct Row {
    label: String,
    commands: BTreeSet<String>,
    keys: Vec<String>,
    optional: BTreeSet<String>,
}

/// The cells of a table line, split at the `|` that are not escaped (`\|` is a `|` inside a
/// cell).
fn cells(line: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut chars = line.trim().trim_matches('|').chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                chars.next();
                out.last_mut().unwrap().push('|');
            }
            '|' => out.push(String::new()),
            c => out.last_mut().unwrap().push(c),
        }
    }
    out.into_iter().map(|c| c.trim().to_owned()).collect()
}

/// Every word of `text` that starts with `sigil` (`+evalsha`, `~redkit:rl:*`), without it.
fn words(text: &str, sigil: char) -> Vec<String> {
    text.split(|c: char| c.is_whitespace() || c == '`' || c == ',' || c == '(' || c == ')')
        .filter_map(|w| w.strip_prefix(sigil))
        .filter(|w| !w.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The section "Minimal ACL" of the document: its table and the `ACL SETUSER` example.
fn section() -> &'static str {
    let start = DOC
        .find("### Minimal ACL")
        .expect("docs: no section \"Minimal ACL\"");
    let rest = &DOC[start + 3..];
    let end = rest.find("\n#").map_or(rest.len(), |i| i + 1);
    &rest[..end]
}

fn table() -> Vec<Row> {
    let lines: Vec<&str> = section()
        .lines()
        .skip_while(|l| !l.starts_with("| for |"))
        .take_while(|l| l.starts_with('|'))
        .collect();
    assert!(lines.len() > 2, "docs: the Minimal ACL table is missing");
    let header = cells(lines[0]);
    assert_eq!(
        header.len(),
        4,
        "docs: the table has the columns for, commands, keys, sent but may be refused: {header:?}"
    );
    lines[2..]
        .iter()
        .map(|line| {
            let c = cells(line);
            assert_eq!(c.len(), 4, "docs: a row of four cells: {line}");
            Row {
                label: c[0].replace('`', ""),
                commands: words(&c[1], '+').into_iter().collect(),
                keys: words(&c[2], '~'),
                optional: words(&c[3], '+').into_iter().collect(),
            }
        })
        .collect()
}

/// The row labelled `label` (a remark in parentheses after it aside).
fn row(label: &str) -> Row {
    let rows = table();
    let found: Vec<Row> = rows
        .into_iter()
        .filter(|r| r.label == label || r.label.starts_with(&format!("{label} (")))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "docs: one row for {label:?}, found {found:?}"
    );
    found.into_iter().next().unwrap()
}

/// The row of every call with the script cache (`EVALSHA`, `EVAL`).
fn base() -> Row {
    row("every call")
}

// ---------------------------------------------------------------------------------------------
// What a server counted.

/// Commands of the connections themselves and of the test's admin connection: not the
/// component's.
const CONNECTION: &[&str] = &[
    "auth",
    "hello",
    "ping",
    "select",
    "client|setinfo",
    "client|list",
    "config|resetstat",
    "acl|setuser",
    "acl|log",
    // A Cluster's replicas acknowledging the replication stream.
    "replconf",
];

/// What the server counted since the last [`Bench::new`] reset it.
#[derive(Debug, Default)]
struct Usage {
    /// Commands run (`calls` of `INFO commandstats`), with how many times.
    ran: BTreeMap<String, u64>,
    /// Commands refused (`rejected_calls` of `INFO commandstats`, and `ACL LOG` entries of
    /// reason `command`), with how many times.
    refused: BTreeMap<String, u64>,
    /// Keys refused (`ACL LOG` entries of reason `key`).
    refused_keys: BTreeSet<String>,
}

fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(n) => n.to_string(),
        other => format!("{other:?}"),
    }
}

/// A field of an `ACL LOG` entry (a flat array of names and values in RESP2, a map in RESP3).
fn field(entry: &Value, name: &str) -> Option<String> {
    match entry {
        Value::Array(items) => items
            .chunks(2)
            .find(|kv| text(&kv[0]) == name)
            .map(|kv| text(&kv[1])),
        Value::Map(pairs) => pairs
            .iter()
            .find(|(k, _)| text(k) == name)
            .map(|(_, v)| text(v)),
        _ => None,
    }
}

/// The number after `name=` in a `cmdstat_` line.
fn stat(line: &str, name: &str) -> u64 {
    line.split([':', ','])
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// A server with a user of one row (or a few).

/// `ACL SETUSER app`: `base` (the row of every call) and `rows` as its commands, the rows'
/// key patterns and `extra_keys` (data keys the caller names, e.g. a fenced write's) as its
/// keys, password `pw`.
async fn set_user(
    conn: &mut MultiplexedConnection,
    base: &Row,
    rows: &[&Row],
    extra_keys: &[&str],
) {
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER")
        .arg("app")
        .arg("reset")
        .arg("on")
        .arg(">pw")
        .arg("-@all");
    let commands: BTreeSet<&String> = std::iter::once(base)
        .chain(rows.iter().copied())
        .flat_map(|r| &r.commands)
        .collect();
    for c in commands {
        cmd.arg(format!("+{c}"));
    }
    let keys: BTreeSet<String> = rows
        .iter()
        .flat_map(|r| r.keys.iter().cloned())
        .chain(extra_keys.iter().map(|k| k.to_string()))
        .collect();
    for k in keys {
        cmd.arg(format!("~{k}"));
    }
    let ok: String = cmd.query_async(conn).await.unwrap();
    assert_eq!(ok, "OK");
}

/// Statistics and the ACL log of the server of `admin` from zero.
async fn reset_stats(admin: &mut MultiplexedConnection) {
    let _: () = redis::cmd("ACL")
        .arg("LOG")
        .arg("RESET")
        .query_async(admin)
        .await
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(admin)
        .await
        .unwrap();
}

/// What the server of `admin` counted since [`reset_stats`], added to `usage`.
async fn add_usage(admin: &mut MultiplexedConnection, usage: &mut Usage) {
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(admin)
        .await
        .unwrap();
    for line in stats.lines() {
        let Some((name, _)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        let (calls, rejected) = (stat(line, "calls"), stat(line, "rejected_calls"));
        if calls > 0 {
            *usage.ran.entry(name.to_owned()).or_default() += calls;
        }
        if rejected > 0 {
            *usage.refused.entry(name.to_owned()).or_default() += rejected;
        }
    }
    let log: Vec<Value> = redis::cmd("ACL")
        .arg("LOG")
        .arg("128")
        .query_async(admin)
        .await
        .unwrap();
    for entry in &log {
        let object = field(entry, "object").unwrap_or_default();
        match field(entry, "reason").as_deref() {
            Some("command") => {
                usage.refused.entry(object).or_insert(1);
            }
            Some("key") => {
                usage.refused_keys.insert(object);
            }
            _ => {}
        }
    }
}

/// A fresh server, a user `app` with exactly the granted rows, and an admin connection that
/// only resets and reads statistics and the ACL log and lists clients.
struct Bench {
    server: RedisServer,
    admin: MultiplexedConnection,
}

impl Bench {
    /// The user of [`set_user`] on `server`; then the statistics and the ACL log start from
    /// zero (data a scenario needs beforehand is written before this, as the default user).
    async fn new(server: RedisServer, base: &Row, rows: &[&Row], extra_keys: &[&str]) -> Self {
        let mut admin = server.conn().await;
        set_user(&mut admin, base, rows, extra_keys).await;
        reset_stats(&mut admin).await;
        Self { server, admin }
    }

    /// A new connection as `app`, with generous timeouts (a loaded 2-core machine).
    async fn conn(&self) -> MultiplexedConnection {
        let url = format!("redis://app:pw@127.0.0.1:{}/", self.server.port());
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(10)))
            .set_response_timeout(Some(Duration::from_secs(5)));
        redis::Client::open(url)
            .unwrap()
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .unwrap()
    }

    /// Until `n` clients are blocked in `BLPOP` (see [`RedisServer::until_blocked`]).
    async fn until_blocked(&self, n: usize) {
        self.server.until_blocked(n).await;
    }

    /// What the server counted since the reset.
    async fn usage(&mut self) -> Usage {
        let mut usage = Usage::default();
        add_usage(&mut self.admin, &mut usage).await;
        usage
    }
}

/// `granted` covers `command`: the same name, or its whole family (`script` covers
/// `script|load`).
fn covers(granted: &BTreeSet<String>, command: &str) -> bool {
    granted.contains(command)
        || command
            .split_once('|')
            .is_some_and(|(family, _)| granted.contains(family))
}

/// Compares what the server counted with the rows: every command of a row in `tested` ran,
/// every command that ran or was refused is granted by `tested` or `context` (rows the scenario
/// also needs, not checked for use), or is listed as "may be refused" by one of them and was
/// only refused; every "may be refused" command of `tested` was sent. The base row's commands
/// (the script calls themselves) are not compared. `run` is how the operations ended.
fn verdict(
    scenario: &str,
    usage: &Usage,
    base: &Row,
    tested: &[&Row],
    context: &[&Row],
    run: Result<(), String>,
) {
    eprintln!(
        "{scenario}: ran {:?}, refused {:?}",
        usage.ran, usage.refused
    );
    let own: BTreeSet<String> = base.commands.union(&base.optional).cloned().collect();
    let skip = |c: &str| CONNECTION.contains(&c) || covers(&own, c);
    let all = || tested.iter().chain(context.iter());
    let granted: BTreeSet<String> = all().flat_map(|r| r.commands.iter().cloned()).collect();
    let optional: BTreeSet<String> = all().flat_map(|r| r.optional.iter().cloned()).collect();
    let mut problems = Vec::new();
    for (command, times) in &usage.refused {
        if skip(command) || covers(&optional, command) {
            continue;
        }
        problems.push(format!(
            "`{command}` used but not granted (refused {times} times: NOPERM)"
        ));
    }
    for (command, times) in &usage.ran {
        if !skip(command) && !covers(&granted, command) && !covers(&optional, command) {
            problems.push(format!("`{command}` ran {times} times but is in no row"));
        }
        if covers(&optional, command) && !covers(&granted, command) && !skip(command) {
            problems.push(format!(
                "`{command}` ran although only listed as \"may be refused\""
            ));
        }
    }
    for key in &usage.refused_keys {
        problems.push(format!(
            "key `{key}` refused: no key pattern of the row covers it"
        ));
    }
    let used = |c: &str| {
        usage
            .ran
            .keys()
            .chain(usage.refused.keys())
            .any(|u| u == c || u.starts_with(&format!("{c}|")))
    };
    let ran = |c: &str| {
        usage
            .ran
            .keys()
            .any(|u| u == c || u.starts_with(&format!("{c}|")))
    };
    match &run {
        Ok(()) => {
            for r in tested {
                for c in &r.commands {
                    if !ran(c) {
                        problems.push(format!(
                            "`+{c}` granted by row {:?} but never used",
                            r.label
                        ));
                    }
                }
                for c in &r.optional {
                    if !used(c) {
                        problems.push(format!(
                            "`+{c}` listed as sent by row {:?} but never sent",
                            r.label
                        ));
                    }
                }
            }
        }
        Err(e) => problems.push(format!(
            "the operations failed (grants not checked for use): {e}"
        )),
    }
    assert!(
        problems.is_empty(),
        "{scenario}: the documented ACL is not what the operations use:\n  {}\n(ran: {:?}; refused: {:?})",
        problems.join("\n  "),
        usage.ran,
        usage.refused,
    );
}

// ---------------------------------------------------------------------------------------------
// The operations, with errors as text (a refusal must reach the verdict, not panic first).

type Run = Result<(), String>;

trait At<T> {
    fn at(self, what: &str) -> Result<T, String>;
}

impl<T> At<T> for redkit::Result<T> {
    fn at(self, what: &str) -> Result<T, String> {
        self.map_err(|e| format!("{what}: {e:?}"))
    }
}

macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

fn key(k: &str) -> LimitKey {
    LimitKey::text(k).unwrap()
}

fn allowed(d: &Decision) -> bool {
    matches!(d, Decision::Allowed(_))
}

fn all_ran<T: std::fmt::Debug>(outcomes: &[redkit::CallOutcome<T>]) -> bool {
    outcomes
        .iter()
        .all(|o| matches!(o, redkit::CallOutcome::Ran(Ok(_))))
}

/// Every limiter and variant: the window's first hit, later hits and a refusal, a cost, a
/// reset, batches; the aligned window, group commit (alone and aligned), the quota lease;
/// GCRA and the sliding window alike; a wait for a permit.
async fn rate_limiting(conn: &mut MultiplexedConnection) -> Run {
    // Windows of a day: the aligned ones start at midnight UTC, so four hits in a row are in
    // one window (short of one in ten million).
    let rate = Rate::new(redkit::nonzero!(3), Duration::from_secs(86_400)).unwrap();
    // A batch on a cold script cache: EVALSHA answered NOSCRIPT inside the transaction, the
    // calls re-run in a second one.
    let cold = FixedWindow::new("cold", rate).unwrap();
    let batch = cold
        .check_batch(conn, &[key("x"), key("y")])
        .await
        .at("batch")?;
    ensure!(all_ran(&batch), "check_batch on a cold cache: {batch:?}");
    let windows: [(&str, Limiter); 5] = [
        ("fixed window", FixedWindow::new("fw", rate).unwrap().into()),
        (
            "aligned window",
            AlignedWindow::new("al", rate).unwrap().into(),
        ),
        (
            "group commit",
            FixedWindow::new("gc", rate)
                .unwrap()
                .grouped(GroupCommit::for_checks())
                .into(),
        ),
        (
            "aligned group commit",
            AlignedWindow::new("ag", rate)
                .unwrap()
                .grouped(GroupCommit::for_checks())
                .into(),
        ),
        (
            "quota lease",
            FixedWindow::new("le", rate)
                .unwrap()
                .leased(QuotaLease::new(2).unwrap())
                .into(),
        ),
    ];
    for (what, w) in &windows {
        for i in 0..4 {
            let d = w.check(conn, &key("a")).await.at(what)?;
            ensure!(allowed(&d) == (i < 3), "{what}: hit {i}: {d:?}");
        }
        let d = w
            .check_n(conn, &key("b"), redkit::nonzero!(2))
            .await
            .at(what)?;
        ensure!(allowed(&d), "{what}: cost 2: {d:?}");
        ensure!(w.reset(conn, &key("a")).await.at(what)?, "{what}: reset");
        // Concurrent checks (what group commit gathers into one call).
        let mut clones: Vec<MultiplexedConnection> = (0..4).map(|_| conn.clone()).collect();
        let c = key("c");
        let many = clones.iter_mut().map(|conn| w.check(conn, &c));
        for d in futures_util::future::join_all(many).await {
            d.at(what)?;
        }
    }
    let Limiter::Fixed(fw) = &windows[0].1 else {
        unreachable!("the first is the plain window")
    };
    let batch = fw
        .check_batch(conn, &[key("x"), key("y")])
        .await
        .at("batch")?;
    ensure!(all_ran(&batch), "check_batch: {batch:?}");
    let batch = fw
        .check_batch_by_slot(conn, &[key("x"), key("z")])
        .await
        .at("batch by slot")?;
    ensure!(all_ran(&batch), "check_batch_by_slot: {batch:?}");

    let gcra = Gcra::new("g", rate).unwrap();
    let sliding = SlidingWindow::new("s", rate).unwrap();
    for l in [Limiter::from(gcra), Limiter::from(sliding)] {
        let what = l.name().to_owned();
        for i in 0..4 {
            let d = l.check(conn, &key("a")).await.at(&what)?;
            ensure!(allowed(&d) == (i < 3), "{what}: hit {i}: {d:?}");
        }
        let d = l
            .check_n(conn, &key("b"), redkit::nonzero!(2))
            .await
            .at(&what)?;
        ensure!(allowed(&d), "{what}: cost 2: {d:?}");
        ensure!(l.reset(conn, &key("a")).await.at(&what)?, "{what}: reset");
    }
    // A wait for a permit: allowed at once; then refused, and allowed after the window.
    let l = Limiter::new(
        Algorithm::FixedWindow,
        "w",
        Rate::per_second(redkit::nonzero!(1)),
    )
    .unwrap();
    let d = l
        .check_within(conn, &key("a"), Duration::from_secs(3))
        .await
        .at("check_within")?;
    ensure!(allowed(&d), "check_within: {d:?}");
    let d = l
        .check_within(conn, &key("a"), Duration::from_secs(3))
        .await
        .at("check_within, waiting")?;
    ensure!(allowed(&d), "check_within after a wait: {d:?}");
    Ok(())
}

/// Every inventory operation: set, stock, decrement (with and without request id, repeated,
/// short), restock, reservations (held, committed, cancelled, expired and given back), orders
/// of several SKUs (placed and short), grouped decrements, and the v1 reservation migration.
async fn inventory(conn: &mut MultiplexedConnection, v1_hash: &str) -> Run {
    let inv = Inventory::new("shop:inv").unwrap();
    let store = inv.store("berlin").unwrap();
    store.set(conn, "mug", 10).await.at("set")?;
    store.set(conn, "tee", 10).await.at("set")?;
    ensure!(store.stock(conn, "mug").await.at("stock")? == 10, "stock");
    let d = store
        .decrement(conn, "mug", 2, Some("o-1"))
        .await
        .at("decrement")?;
    ensure!(d == Decrement::Decremented { remaining: 8 }, "{d:?}");
    let d = store
        .decrement(conn, "mug", 2, Some("o-1"))
        .await
        .at("decrement")?;
    ensure!(matches!(d, Decrement::Duplicate { .. }), "{d:?}");
    let d = store
        .decrement(conn, "mug", 1, None)
        .await
        .at("decrement")?;
    ensure!(d == Decrement::Decremented { remaining: 7 }, "{d:?}");
    let d = store
        .decrement(conn, "mug", 99, None)
        .await
        .at("decrement")?;
    ensure!(matches!(d, Decrement::Insufficient { .. }), "{d:?}");
    let r = store
        .restock(conn, "mug", 3, Some("d-1"))
        .await
        .at("restock")?;
    ensure!(matches!(r, Restock::Restocked { stock: 10 }), "{r:?}");

    let hold = Duration::from_secs(60);
    let r = store
        .reserve(conn, "mug", 2, hold, "cart-1")
        .await
        .at("reserve")?;
    ensure!(matches!(r, Reserve::Reserved { .. }), "{r:?}");
    let v = store.stock_view(conn, "mug").await.at("stock_view")?;
    ensure!(
        (v.available, v.reserved, v.reservations) == (8, 2, 1),
        "{v:?}"
    );
    let page = store
        .reservations(conn, "mug", 0, redkit::nonzero!(10))
        .await
        .at("reservations")?;
    ensure!(page.reservations.len() == 1, "{page:?}");
    let c = store.commit(conn, "mug", "cart-1").await.at("commit")?;
    ensure!(c == Commit::Committed { quantity: 2 }, "{c:?}");
    let r = store
        .reserve(conn, "mug", 1, hold, "cart-2")
        .await
        .at("reserve")?;
    ensure!(matches!(r, Reserve::Reserved { .. }), "{r:?}");
    let c = store.cancel(conn, "mug", "cart-2").await.at("cancel")?;
    ensure!(matches!(c, Cancel::Cancelled { .. }), "{c:?}");
    let r = store
        .reserve(conn, "mug", 99, hold, "cart-3")
        .await
        .at("reserve")?;
    ensure!(matches!(r, Reserve::Insufficient { .. }), "{r:?}");
    // A hold that expires: the next read gives it back to stock.
    let short = Duration::from_millis(50);
    let r = store
        .reserve(conn, "mug", 3, short, "cart-4")
        .await
        .at("reserve")?;
    ensure!(matches!(r, Reserve::Reserved { .. }), "{r:?}");
    let before = Instant::now();
    while store.stock(conn, "mug").await.at("stock")? != 8 {
        ensure!(
            before.elapsed() < Duration::from_secs(10),
            "the expired hold never returned to stock"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let o = store
        .place_order(conn, [("mug", 1), ("tee", 2)], Some("order-1"))
        .await
        .at("place_order")?;
    ensure!(matches!(o, Order::Placed { .. }), "{o:?}");
    let lines = [
        store.line("mug", 1).unwrap(),
        store.line("tee", 99).unwrap(),
    ];
    let o = inv
        .place_order(conn, &lines, None)
        .await
        .at("place_order")?;
    ensure!(matches!(o, Order::Insufficient { .. }), "{o:?}");

    let grouped = Inventory::builder()
        .prefix("shop:inv")
        .with_group_commit(GroupCommit::default())
        .build()
        .unwrap()
        .store("berlin")
        .unwrap();
    let mut clones: Vec<MultiplexedConnection> = (0..4).map(|_| conn.clone()).collect();
    let many = clones.iter_mut().enumerate().map(|(i, c)| {
        let id = format!("g-{i}");
        let grouped = &grouped;
        async move { grouped.decrement(c, "tee", 1, Some(&id)).await }
    });
    for d in futures_util::future::join_all(many).await {
        let d = d.at("grouped decrement")?;
        ensure!(matches!(d, Decrement::Decremented { .. }), "{d:?}");
    }

    // An expired v1 hold (not in the expiry ZSET) whose id is reserved again: found by its
    // id, given back, and looked up in the ZSET.
    store.set(conn, "cup", 5).await.at("set")?;
    let r = store
        .reserve(conn, "cup", 1, hold, "cart-v1")
        .await
        .at("reserve")?;
    ensure!(matches!(r, Reserve::Reserved { remaining: 5, .. }), "{r:?}");

    ensure!(
        store.reservation_key("v1").unwrap() == v1_hash,
        "the v1 hash the test seeded"
    );
    let moved = store
        .migrate_v1_reservations(conn, "v1")
        .await
        .at("migrate_v1_reservations")?;
    ensure!(moved == 1, "migrated {moved}");
    Ok(())
}

/// Every lock operation: unfenced acquire (free, busy, retried by its own owner token),
/// renewal, a fence issued later, fenced acquire, fenced writes (written and stale) and read,
/// release (fenced and not, waking and not), a blocked acquirer woken by the release (of an
/// unfenced and of a fenced holder), a polling waiter of a lock that wakes no one, the
/// watchdog (`with_lock`), and a Redlock on one node.
async fn locks(bench: &mut Bench) -> Run {
    let mut conn = bench.conn().await;
    let conn = &mut conn;
    let lock = Lock::new();
    let plain = LockOptions::new().ttl(Duration::from_secs(5));
    let fenced = plain.clone().fencing(true);

    let Acquire::Acquired(mut guard) = lock
        .try_acquire(conn, "job", &plain.clone().token("owner-0123456789abcdef"))
        .await
        .at("acquire")?
    else {
        return Err("unfenced acquire: not acquired".into());
    };
    let busy = lock.try_acquire(conn, "job", &plain).await.at("acquire")?;
    ensure!(matches!(busy, Acquire::Busy(_)), "{busy:?}");
    // The same owner token again (a retry after a lost reply): the lease is renewed.
    let again = lock
        .try_acquire(conn, "job", &plain.clone().token("owner-0123456789abcdef"))
        .await
        .at("acquire, retried")?;
    ensure!(again.is_acquired(), "{again:?}");
    let r = lock.renew(conn, &mut guard).await.at("renew")?;
    ensure!(r == Renew::Renewed, "{r:?}");
    let Fence::Issued(token) = lock.fence(conn, &mut guard).await.at("fence")? else {
        return Err("fence: lost".into());
    };
    let r = lock.renew(conn, &mut guard).await.at("renew, fenced")?;
    ensure!(r == Renew::Renewed, "{r:?}");
    let w = lock
        .fenced_set(conn, "app:{job}:data", token, "v")
        .await
        .at("fenced_set")?;
    ensure!(w == FencedWrite::Written, "{w:?}");
    let stale = redkit::lock::FencingToken::new(token.get() - 1).unwrap();
    let w = lock
        .fenced_set(conn, "app:{job}:data", stale, "old")
        .await
        .at("fenced_set, stale")?;
    ensure!(matches!(w, FencedWrite::Stale { .. }), "{w:?}");
    let read = lock
        .fenced_get(conn, "app:{job}:data")
        .await
        .at("fenced_get")?;
    ensure!(read.is_some(), "fenced_get: nothing");
    let r = lock.release(conn, guard).await.at("release")?;
    ensure!(r == Release::Released, "{r:?}");

    // Fenced acquire, and a plain one, each released while a blocked acquirer waits.
    for (what, options) in [("fenced", &fenced), ("unfenced", &plain)] {
        let Acquire::Acquired(holder) = lock.try_acquire(conn, "queue", options).await.at(what)?
        else {
            return Err(format!("{what} acquire: not acquired"));
        };
        let mut own = bench.conn().await;
        let waiter = {
            let (lock, options) = (lock.clone(), options.clone());
            tokio::spawn(async move {
                let got = lock
                    .acquire_blocking(
                        &mut own,
                        "queue",
                        &options.clone().max_wait(Duration::from_secs(10)),
                    )
                    .await;
                match got {
                    Ok(Acquire::Acquired(g)) => lock
                        .release(&mut own, g)
                        .await
                        .map(drop)
                        .at("waiter's release"),
                    Ok(other) => Err(format!("waiter: {other:?}")),
                    Err(e) => Err(format!("waiter: {e:?}")),
                }
            })
        };
        bench.until_blocked(1).await;
        let r = lock.release(conn, holder).await.at(what)?;
        ensure!(r == Release::Released, "{what}: {r:?}");
        waiter.await.unwrap().map_err(|e| format!("{what}: {e}"))?;
    }

    // A lock whose blocking acquires poll: the same release.
    let quiet = Lock::new().wake_on_release(false);
    for options in [&fenced, &plain] {
        let Acquire::Acquired(holder) = quiet.try_acquire(conn, "q", options).await.at("quiet")?
        else {
            return Err("quiet acquire: not acquired".into());
        };
        let r = quiet.release(conn, holder).await.at("quiet release")?;
        ensure!(r == Release::Released, "{r:?}");
    }
    let short = LockOptions::new().ttl(Duration::from_millis(100));
    let Acquire::Acquired(_held) = quiet.try_acquire(conn, "p", &short).await.at("quiet")? else {
        return Err("quiet acquire: not acquired".into());
    };
    let polled = quiet
        .acquire_blocking(conn, "p", &plain.clone().max_wait(Duration::from_secs(10)))
        .await
        .at("polling waiter")?;
    let Acquire::Acquired(polled) = polled else {
        return Err(format!("polling waiter: {polled:?}"));
    };
    quiet.release(conn, polled).await.at("quiet release")?;

    // The watchdog renews in the background while the work runs.
    let outcome = lock
        .with_lock(conn, "wd", &fenced, |lease| async move {
            lease.fencing_token().unwrap()
        })
        .await
        .at("with_lock")?;
    ensure!(matches!(outcome, WithLock::Completed { .. }), "{outcome:?}");

    let redlock = Redlock::new(vec![conn.clone()]).unwrap();
    let Acquire::Acquired(mut g) = redlock
        .try_acquire("rl", &LockOptions::new())
        .await
        .at("redlock")?
    else {
        return Err("redlock: not acquired".into());
    };
    let r = redlock.renew(&mut g).await.at("redlock renew")?.outcome;
    ensure!(r == Renew::Renewed, "{r:?}");
    let r = redlock.release(g).await.at("redlock release")?.outcome;
    ensure!(r == Release::Released, "{r:?}");
    Ok(())
}

/// Every semaphore operation: acquire (free and busy), renewal, release, and a blocked
/// acquirer woken by a release.
async fn semaphore(bench: &mut Bench) -> Run {
    let mut conn = bench.conn().await;
    let conn = &mut conn;
    let sem = Semaphore::new();
    let options = LockOptions::new().ttl(Duration::from_secs(5));
    let Acquire::Acquired(mut permit) = sem
        .try_acquire(conn, "job", 1, &options)
        .await
        .at("acquire")?
    else {
        return Err("semaphore: not acquired".into());
    };
    let busy = sem
        .try_acquire(conn, "job", 1, &options)
        .await
        .at("acquire")?;
    ensure!(matches!(busy, Acquire::Busy(_)), "{busy:?}");
    let r = sem.renew(conn, &mut permit).await.at("renew")?;
    ensure!(r == Renew::Renewed, "{r:?}");
    let state = sem
        .inspect(conn, "job", redkit::nonzero!(5))
        .await
        .at("inspect")?;
    ensure!(state.live == 1, "{state:?}");
    let mut own = bench.conn().await;
    let waiter = {
        let (sem, options) = (sem.clone(), options.clone());
        tokio::spawn(async move {
            let got = sem
                .acquire_blocking(
                    &mut own,
                    "job",
                    1,
                    &options.clone().max_wait(Duration::from_secs(10)),
                )
                .await;
            match got {
                Ok(Acquire::Acquired(p)) => sem
                    .release(&mut own, p)
                    .await
                    .map(drop)
                    .at("waiter's release"),
                Ok(other) => Err(format!("waiter: {other:?}")),
                Err(e) => Err(format!("waiter: {e:?}")),
            }
        })
    };
    bench.until_blocked(1).await;
    let r = sem.release(conn, permit).await.at("release")?;
    ensure!(r == Release::Released, "{r:?}");
    waiter.await.unwrap()?;
    let got = sem
        .acquire(conn, "job", 2, &options.clone().retries(3))
        .await
        .at("acquire")?;
    let Acquire::Acquired(p) = got else {
        return Err(format!("semaphore: {got:?}"));
    };
    sem.release(conn, p).await.at("release")?;
    leased_slots(bench).await
}

/// The concurrency layer's leased slots, under the semaphore's prefix: a block taken, a
/// request refused on it, the block given back.
async fn leased_slots(bench: &mut Bench) -> Run {
    use redkit::middleware::{ClientId, ConcurrencyLimitLayer, ConcurrencyPolicy, FnKey};
    use tower::{Service, ServiceExt};
    let policy = ConcurrencyPolicy::new("cc", 1)
        .at("policy")?
        .with_prefix(redkit::keys::Prefix::new("redkit:sem").at("prefix")?);
    let one = FnKey::new(|_: &redkit::middleware::RequestInfo<'_>| {
        Some(ClientId::Key(LimitKey::text("c").unwrap()))
    });
    let layer = ConcurrencyLimitLayer::builder(policy, bench.conn().await)
        .key_extractor(one)
        .leased(redkit::rate_limit::QuotaLease::new(4).at("lease")?)
        .build()
        .at("layer")?;
    let (entered_tx, mut entered) = tokio::sync::mpsc::unbounded_channel();
    // Stays open once opened: no wake-up lost to a handler not yet waiting.
    let (open, gate) = tokio::sync::watch::channel(false);
    let mut service = tower::ServiceBuilder::new()
        .layer(layer.clone())
        .service(tower::service_fn(move |_req: http::Request<String>| {
            let (entered_tx, mut gate) = (entered_tx.clone(), gate.clone());
            async move {
                entered_tx.send(()).unwrap();
                gate.wait_for(|open| *open).await.unwrap();
                Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
            }
        }));
    let first = service
        .ready()
        .await
        .unwrap()
        .call(http::Request::new(String::new()));
    let held = tokio::spawn(first);
    let got = tokio::time::timeout(Duration::from_secs(10), entered.recv()).await;
    ensure!(
        matches!(got, Ok(Some(()))),
        "leased slots: the first request never ran"
    );
    let second = service
        .ready()
        .await
        .unwrap()
        .call(http::Request::new(String::new()))
        .await
        .unwrap();
    ensure!(
        second.status() == http::StatusCode::TOO_MANY_REQUESTS,
        "leased slots: {:?}",
        second.status()
    );
    open.send(true).unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), held).await;
    let Ok(Ok(Ok(first))) = first else {
        return Err("leased slots: the first request did not finish".into());
    };
    ensure!(
        first.status() == http::StatusCode::OK,
        "{:?}",
        first.status()
    );
    let _ = tokio::time::timeout(Duration::from_secs(5), layer.shutdown()).await;
    let stats = layer.stats();
    ensure!(
        stats.redis_failures == 0 && stats.admitted == 1,
        "leased slots: {stats:?}"
    );
    Ok(())
}

/// `Semaphore::acquire_fair`: the holder's permit taken through the gate, a first waiter at
/// the head of the gate waiting for a permit, a second one queued at the gate behind it; each
/// release hands on.
async fn fair_semaphore(bench: &mut Bench) -> Run {
    let mut conn = bench.conn().await;
    let conn = &mut conn;
    let sem = Semaphore::new();
    let options = LockOptions::new().ttl(Duration::from_secs(5));
    let wait = Duration::from_secs(10);
    let got = sem
        .acquire_fair(conn, "job", 1, &options.clone().max_wait(wait))
        .await
        .at("acquire_fair")?;
    let Acquire::Acquired(holder) = got else {
        return Err(format!("acquire_fair: {got:?}"));
    };
    let state = sem
        .inspect(conn, "job", redkit::nonzero!(5))
        .await
        .at("inspect")?;
    ensure!(state.live == 1, "{state:?}");
    let spawn_waiter = |mut own: MultiplexedConnection| {
        let (sem, options) = (sem.clone(), options.clone());
        tokio::spawn(async move {
            match sem
                .acquire_fair(&mut own, "job", 1, &options.clone().max_wait(wait))
                .await
            {
                Ok(Acquire::Acquired(p)) => Ok::<_, String>((own, p)),
                Ok(other) => Err(format!("waiter: {other:?}")),
                Err(e) => Err(format!("waiter: {e:?}")),
            }
        })
    };
    let first = spawn_waiter(bench.conn().await);
    bench.until_blocked(1).await;
    let second = spawn_waiter(bench.conn().await);
    bench.until_blocked(2).await;
    sem.release(conn, holder).await.at("release")?;
    let (mut own, p) = first.await.unwrap()?;
    sem.release(&mut own, p).await.at("release")?;
    let (mut own, p) = second.await.unwrap()?;
    sem.release(&mut own, p).await.at("release")?;
    Ok(())
}

/// Every fair lock operation: acquire at the head, renewal, a waiter queued behind the holder
/// and woken by its release, a caller who gives up and leaves the queue.
async fn fair_lock(bench: &mut Bench) -> Run {
    let mut conn = bench.conn().await;
    let conn = &mut conn;
    let fair = FairLock::new();
    let options = LockOptions::new().ttl(Duration::from_secs(5));
    let Acquire::Acquired(mut holder) = fair
        .try_acquire(conn, "job", &options)
        .await
        .at("acquire")?
    else {
        return Err("fair lock: not acquired".into());
    };
    let r = fair.renew(conn, &mut holder).await.at("renew")?;
    ensure!(r == Renew::Renewed, "{r:?}");
    let state = fair
        .inspect(conn, "job", redkit::nonzero!(5))
        .await
        .at("inspect")?;
    ensure!(state.queued == 1, "{state:?}");
    let busy = fair
        .try_acquire(conn, "job", &options)
        .await
        .at("acquire")?;
    ensure!(matches!(busy, Acquire::Busy(_)), "{busy:?}");
    let mut own = bench.conn().await;
    let waiter = {
        let fair = fair.clone();
        let options = options.clone().max_wait(Duration::from_secs(10));
        tokio::spawn(async move {
            match fair.acquire(&mut own, "job", &options).await {
                Ok(Acquire::Acquired(g)) => fair
                    .release(&mut own, g)
                    .await
                    .map(drop)
                    .at("waiter's release"),
                Ok(other) => Err(format!("waiter: {other:?}")),
                Err(e) => Err(format!("waiter: {e:?}")),
            }
        })
    };
    bench.until_blocked(1).await;
    let r = fair.release(conn, holder).await.at("release")?;
    ensure!(r == Release::Released, "{r:?}");
    waiter.await.unwrap()?;
    Ok(())
}

/// Every read-write lock operation: two readers, renewal, a writer refused while they read
/// (its intent withdrawn), releases, a writer, its renewal and release.
async fn rw_lock(bench: &mut Bench) -> Run {
    let mut conn = bench.conn().await;
    let conn = &mut conn;
    let rw = RwLock::new();
    let options = LockOptions::new().ttl(Duration::from_secs(5));
    let mut readers = Vec::new();
    for _ in 0..2 {
        let got = rw
            .try_acquire(conn, "doc", Mode::Read, &options)
            .await
            .at("read")?;
        let Acquire::Acquired(g) = got else {
            return Err(format!("reader: {got:?}"));
        };
        readers.push(g);
    }
    let state = rw
        .inspect(conn, "doc", redkit::nonzero!(5))
        .await
        .at("inspect")?;
    ensure!(state.live_readers == 2, "{state:?}");
    let r = rw.renew(conn, &mut readers[0]).await.at("renew")?;
    ensure!(r == Renew::Renewed, "{r:?}");
    let busy = rw
        .try_acquire(conn, "doc", Mode::Write, &options)
        .await
        .at("write")?;
    ensure!(matches!(busy, Acquire::Busy(_)), "{busy:?}");
    for g in readers {
        let r = rw.release(conn, g).await.at("release")?;
        ensure!(r == Release::Released, "{r:?}");
    }
    let got = rw
        .try_acquire(conn, "doc", Mode::Write, &options)
        .await
        .at("write")?;
    let Acquire::Acquired(mut w) = got else {
        return Err(format!("writer: {got:?}"));
    };
    let r = rw.renew(conn, &mut w).await.at("renew")?;
    ensure!(r == Renew::Renewed, "{r:?}");
    let busy = rw
        .try_acquire(conn, "doc", Mode::Read, &options)
        .await
        .at("read")?;
    ensure!(matches!(busy, Acquire::Busy(_)), "{busy:?}");
    let r = rw.release(conn, w).await.at("release")?;
    ensure!(r == Release::Released, "{r:?}");
    Ok(())
}

/// Every reentrant lock operation: acquire, acquire again by the same owner, the hold count,
/// renewal, a second owner refused, the releases.
async fn reentrant_lock(bench: &mut Bench) -> Run {
    let mut conn = bench.conn().await;
    let conn = &mut conn;
    let lock = ReentrantLock::new();
    let options = LockOptions::new().ttl(Duration::from_secs(5));
    let owner = Owner::new();
    let mut guards = Vec::new();
    for _ in 0..2 {
        let got = lock
            .try_acquire(conn, "job", &owner, &options)
            .await
            .at("acquire")?;
        let Acquire::Acquired(g) = got else {
            return Err(format!("reentrant: {got:?}"));
        };
        guards.push(g);
    }
    ensure!(
        lock.holds(conn, "job", &owner).await.at("holds")? == 2,
        "holds"
    );
    let r = lock.renew(conn, &mut guards[0]).await.at("renew")?;
    ensure!(r == Renew::Renewed, "{r:?}");
    let busy = lock
        .try_acquire(conn, "job", &Owner::new(), &options)
        .await
        .at("acquire")?;
    ensure!(matches!(busy, Acquire::Busy(_)), "{busy:?}");
    for g in guards {
        let r = lock.release(conn, g).await.at("release")?;
        ensure!(r == Release::Released, "{r:?}");
    }
    Ok(())
}

/// Every versioned-value operation: read (missing and present), compare-and-set (set and
/// conflicting), the fenced variant (set and stale), update.
async fn versioned(conn: &mut MultiplexedConnection, manager: ScriptManager) -> Run {
    let v = Versioned::new().with_manager(manager);
    ensure!(v.read(conn, "cfg").await.at("read")?.version == 0, "read");
    let c = v.compare_and_set(conn, "cfg", 0, b"a").await.at("cas")?;
    ensure!(c.is_set(), "{c:?}");
    let c = v.compare_and_set(conn, "cfg", 0, b"b").await.at("cas")?;
    ensure!(matches!(c, Cas::Conflict(_)), "{c:?}");
    let fence = redkit::lock::FencingToken::new(5).unwrap();
    let c = v
        .compare_and_set_fenced(conn, "cfg", 1, b"c", fence)
        .await
        .at("cas fenced")?;
    ensure!(c.is_set(), "{c:?}");
    let older = redkit::lock::FencingToken::new(3).unwrap();
    let c = v
        .compare_and_set_fenced(conn, "cfg", 2, b"d", older)
        .await
        .at("cas fenced")?;
    ensure!(matches!(c, Cas::Stale { .. }), "{c:?}");
    let u = v
        .update(conn, "cfg", &RetryPolicy::new(), |old| {
            [old.unwrap_or_default(), b"+"].concat()
        })
        .await
        .at("update")?;
    ensure!(matches!(u, Update::Updated { .. }), "{u:?}");
    ensure!(v.read(conn, "cfg").await.at("read")?.version == 3, "read");
    Ok(())
}

/// The `replicated(wait)` calls and `require_replicas` (on a server without replicas: each wait answers
/// 0 at its timeout), and with `fsynced` the fsync waits (Valkey with `appendonly`).
async fn replicated(conn: &mut MultiplexedConnection, fsync: bool) -> Run {
    let mut waits = vec![Replication::new(1, Duration::from_millis(5)).unwrap()];
    if fsync {
        waits.push(Replication::fsynced(1, Duration::from_millis(5)).unwrap());
        waits.push(
            Replication::fsynced(0, Duration::from_millis(500))
                .unwrap()
                .with_local_fsync(),
        );
    }
    let lock = Lock::new();
    let store = Inventory::new("shop:inv").unwrap().store("berlin").unwrap();
    for (i, wait) in waits.into_iter().enumerate() {
        let options = LockOptions::new()
            .ttl(Duration::from_secs(5))
            .fencing(true)
            .require_replicas(wait);
        let got = lock.try_acquire(conn, "r", &options).await.at("acquire")?;
        let local = wait.local_fsync() && wait.replicas() == 0;
        ensure!(
            local == got.is_acquired(),
            "require_replicas {wait:?}: {got:?}"
        );
        let plain = LockOptions::new().ttl(Duration::from_secs(5)).fencing(true);
        let Acquire::Acquired(mut guard) =
            lock.try_acquire(conn, "s", &plain).await.at("acquire")?
        else {
            return Err("acquire: not acquired".into());
        };
        lock.renew(conn, &mut guard).await.at("renew")?;
        let token = guard.fencing_token().unwrap();
        lock.replicated(wait)
            .fenced_set(conn, "app:{s}:data", token, "v")
            .await
            .at("replicated fenced_set")?;
        lock.release(conn, guard).await.at("release")?;
        let sku = format!("sku-{i}");
        store.set(conn, &sku, 10).await.at("set")?;
        store
            .replicated(wait)
            .decrement(conn, &sku, 1, None)
            .await
            .at("replicated decrement")?;
        store
            .replicated(wait)
            .restock(conn, &sku, 1, None)
            .await
            .at("replicated restock")?;
        let hold = Duration::from_secs(60);
        store
            .replicated(wait)
            .reserve(conn, &sku, 1, hold, "c")
            .await
            .at("replicated reserve")?;
        store
            .replicated(wait)
            .commit(conn, &sku, "c")
            .await
            .at("replicated commit")?;
        store
            .replicated(wait)
            .reserve(conn, &sku, 1, hold, "d")
            .await
            .at("replicated reserve")?;
        store
            .replicated(wait)
            .cancel(conn, &sku, "d")
            .await
            .at("replicated cancel")?;
    }
    Ok(())
}

/// Every operation of the admin API (what the `redkit` CLI runs): nodes, status, load,
/// verify, flush, prune (with nothing retired held, and forced), kill (nothing to kill), and
/// the Functions library: list, load, verify, delete, flush.
async fn admin_api(admin: &Admin) -> Run {
    let ok = |what: &str, errors: Vec<String>| {
        if errors.is_empty() {
            Ok(())
        } else {
            Err(format!("{what}: {errors:?}"))
        }
    };
    fn errors<T>(reports: &[NodeReport<T>]) -> Vec<String> {
        reports
            .iter()
            .filter_map(|r| r.error.as_ref().map(|e| format!("{}: {e:?}", r.node.addr)))
            .collect()
    }
    ensure!(!admin.nodes().await.at("nodes")?.is_empty(), "no node");
    let status = admin.status().await.at("status")?;
    ok(
        "status",
        status
            .iter()
            .filter_map(|s| s.error.as_ref().map(|e| format!("{e:?}")))
            .collect(),
    )?;
    ok("load", errors(&admin.load().await.at("load")?))?;
    let verified = admin.verify().await.at("verify")?;
    ensure!(verified.is_ok(), "verify: {verified:?}");
    ok(
        "flush",
        errors(&admin.flush(FlushMode::Sync).await.at("flush")?),
    )?;
    ok(
        "prune",
        errors(&admin.prune(FlushMode::Sync, false).await.at("prune")?),
    )?;
    ok(
        "prune",
        errors(&admin.prune(FlushMode::Sync, true).await.at("prune")?),
    )?;
    let killed = admin.kill().await.at("kill")?;
    ok("kill", errors(&killed))?;
    ok(
        "libraries",
        errors(&admin.libraries().await.at("libraries")?),
    )?;
    let library = Library::redkit();
    let loaded = admin.load_library(library).await.at("load_library")?;
    ok("load_library", errors(&loaded))?;
    let verified = admin.verify_library(library).await.at("verify_library")?;
    ensure!(
        verified
            .iter()
            .all(|r| r.value == Some(LibraryState::Loaded)),
        "verify_library: {verified:?}"
    );
    let deleted = admin
        .delete_library(library.name())
        .await
        .at("delete_library")?;
    ensure!(deleted.iter().all(|r| r.value == Some(true)), "{deleted:?}");
    ok(
        "flush_functions",
        errors(
            &admin
                .flush_functions(FlushMode::Sync)
                .await
                .at("flush_functions")?,
        ),
    )?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// One test per row.

async fn fresh(label: &str) -> (Row, Row, Bench) {
    let (base, r) = (base(), row(label));
    let bench = Bench::new(RedisServer::spawn().await, &base, &[&r], &[]).await;
    (base, r, bench)
}

async fn rate_limiting_uses_exactly_its_row() {
    let (base, r, mut bench) = fresh("rate limiting").await;
    let mut conn = bench.conn().await;
    let run = rate_limiting(&mut conn).await;
    let usage = bench.usage().await;
    verdict("rate limiting", &usage, &base, &[&r], &[], run);
}

async fn inventory_uses_exactly_its_row() {
    let (base, r) = (base(), row("inventory"));
    let server = RedisServer::spawn().await;
    // A reservation of the v1 layout, for the migration.
    let store = Inventory::new("shop:inv").unwrap().store("berlin").unwrap();
    let hash = store.reservation_key("v1").unwrap();
    let expires = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 3_600_000;
    let hold = format!("1 {expires}");
    let _: i64 = server
        .cmd(&["HSET", &hash, "old-cart", &hold, "{next}", "2"])
        .await;
    // An expired v1 hold of another SKU, whose id is reserved again.
    let expired = store.reservation_key("cup").unwrap();
    let _: i64 = server.cmd(&["HSET", &expired, "cart-v1", "1 1000"]).await;
    let mut bench = Bench::new(server, &base, &[&r], &[]).await;
    let mut conn = bench.conn().await;
    let run = inventory(&mut conn, &hash).await;
    let usage = bench.usage().await;
    verdict("inventory", &usage, &base, &[&r], &[], run);
}

async fn locks_on_redis_7_use_exactly_their_row() {
    let (base, r) = (base(), row("locks"));
    let server = RedisServer::spawn().await;
    assert!(
        !server.has_command("delifeq").await,
        "not a server with DELIFEQ"
    );
    let mut bench = Bench::new(server, &base, &[&r], &["app:*"]).await;
    let run = locks(&mut bench).await;
    let usage = bench.usage().await;
    verdict("locks (scripts)", &usage, &base, &[&r], &[], run);
}

async fn locks_on_valkey_use_exactly_their_rows_with_native_commands(valkey: Valkey) {
    let (base, r, native) = (base(), row("locks"), row("locks, native commands"));
    let server = RedisServer::spawn_valkey(&valkey, &[]).await;
    let mut bench = Bench::new(server, &base, &[&r, &native], &["app:*"]).await;
    let run = locks(&mut bench).await;
    let usage = bench.usage().await;
    verdict("locks (native)", &usage, &base, &[&r, &native], &[], run);
}

async fn locks_on_valkey_without_the_native_row_run_their_scripts(valkey: Valkey) {
    let (base, r) = (base(), row("locks"));
    let server = RedisServer::spawn_valkey(&valkey, &[]).await;
    assert!(server.has_command("delifeq").await, "a server with DELIFEQ");
    let mut bench = Bench::new(server, &base, &[&r], &["app:*"]).await;
    let run = locks(&mut bench).await;
    let usage = bench.usage().await;
    verdict("locks (native refused)", &usage, &base, &[&r], &[], run);
}

async fn semaphore_uses_exactly_its_row() {
    let (base, r, mut bench) = fresh("semaphore").await;
    let run = semaphore(&mut bench).await;
    let usage = bench.usage().await;
    verdict("semaphore", &usage, &base, &[&r], &[], run);
}

async fn fair_semaphore_uses_exactly_its_rows() {
    // The gate of `acquire_fair` is a fair lock under the semaphore's prefix: the semaphore's
    // row and the fair lock's commands.
    let (base, sem, fair) = (base(), row("semaphore"), row("fair lock"));
    let mut bench = Bench::new(RedisServer::spawn().await, &base, &[&sem, &fair], &[]).await;
    let run = fair_semaphore(&mut bench).await;
    let usage = bench.usage().await;
    verdict(
        "semaphore, acquire_fair",
        &usage,
        &base,
        &[&sem, &fair],
        &[],
        run,
    );
}

async fn fair_lock_uses_exactly_its_row() {
    let (base, r, mut bench) = fresh("fair lock").await;
    let run = fair_lock(&mut bench).await;
    let usage = bench.usage().await;
    verdict("fair lock", &usage, &base, &[&r], &[], run);
}

async fn rw_lock_uses_exactly_its_row() {
    let (base, r, mut bench) = fresh("read-write lock").await;
    let run = rw_lock(&mut bench).await;
    let usage = bench.usage().await;
    verdict("read-write lock", &usage, &base, &[&r], &[], run);
}

async fn reentrant_lock_uses_exactly_its_row() {
    let (base, r, mut bench) = fresh("reentrant lock").await;
    let run = reentrant_lock(&mut bench).await;
    let usage = bench.usage().await;
    verdict("reentrant lock", &usage, &base, &[&r], &[], run);
}

async fn versioned_values_use_exactly_their_row() {
    let (base, r, mut bench) = fresh("versioned values").await;
    let mut conn = bench.conn().await;
    let run = versioned(&mut conn, ScriptManager::new()).await;
    let usage = bench.usage().await;
    for read_only in ["evalsha_ro", "eval_ro"] {
        assert!(
            usage.ran.contains_key(read_only),
            "versioned read runs `{read_only}`: {:?}",
            usage.ran
        );
    }
    verdict("versioned values", &usage, &base, &[&r], &[], run);
}

async fn replicated_calls_use_exactly_their_row() {
    let (base, r) = (base(), row("require_replicas, replicated(wait) calls"));
    let (locks, inv) = (row("locks"), row("inventory"));
    let mut bench = Bench::new(
        RedisServer::spawn().await,
        &base,
        &[&r, &locks, &inv],
        &["app:*"],
    )
    .await;
    let mut conn = bench.conn().await;
    let run = replicated(&mut conn, false).await;
    let usage = bench.usage().await;
    verdict(
        "replicated calls",
        &usage,
        &base,
        &[&r],
        &[&locks, &inv],
        run,
    );
}

async fn fsynced_calls_use_exactly_their_rows(valkey: Valkey) {
    let (base, r, f) = (
        base(),
        row("require_replicas, replicated(wait) calls"),
        row("Replication::fsynced"),
    );
    let (locks, native, inv) = (
        row("locks"),
        row("locks, native commands"),
        row("inventory"),
    );
    let server =
        RedisServer::spawn_valkey(&valkey, &["--appendonly", "yes", "--appendfsync", "always"])
            .await;
    let rows = [&r, &f, &locks, &native, &inv];
    let mut bench = Bench::new(server, &base, &rows, &["app:*"]).await;
    let mut conn = bench.conn().await;
    let run = replicated(&mut conn, true).await;
    let usage = bench.usage().await;
    verdict(
        "fsynced calls",
        &usage,
        &base,
        &[&r, &f],
        &[&locks, &native, &inv],
        run,
    );
}

async fn preload_uses_exactly_its_row() {
    let (base, r, limiter) = (base(), row("preload"), row("rate limiting"));
    let mut bench = Bench::new(RedisServer::spawn().await, &base, &[&r, &limiter], &[]).await;
    let mut conn = bench.conn().await;
    let run = async {
        // A first call: EVALSHA answered NOSCRIPT, EVAL, then SCRIPT LOAD.
        let fw = FixedWindow::new("fw", Rate::per_minute(redkit::nonzero!(3))).unwrap();
        fw.check(&mut conn, &key("a")).await.at("check")?;
        let loaded = ScriptManager::new()
            .preload(&mut conn)
            .await
            .at("preload")?;
        ensure!(
            loaded == Registry::global().scripts().len(),
            "preloaded {loaded}"
        );
        Ok(())
    }
    .await;
    let usage = bench.usage().await;
    verdict("preload", &usage, &base, &[&r], &[&limiter], run);
}

async fn the_functions_backend_uses_exactly_its_row() {
    let (script_base, f, v) = (
        base(),
        row("every call, Functions backend"),
        row("versioned values"),
    );
    let (acked, inv) = (
        row("require_replicas, replicated(wait) calls"),
        row("inventory"),
    );
    let mut bench = Bench::new(RedisServer::spawn().await, &f, &[&v, &acked, &inv], &[]).await;
    let mut conn = bench.conn().await;
    let manager = ScriptManager::new().with_backend(Backend::Functions);
    let mut run = versioned(&mut conn, manager.clone()).await;
    if run.is_ok() {
        // A replicated call: asks first whether the server holds the function.
        let store = Inventory::builder()
            .prefix("shop:inv")
            .with_manager(manager)
            .build()
            .unwrap()
            .store("berlin")
            .unwrap();
        let wait = Replication::new(1, Duration::from_millis(5)).unwrap();
        run = async {
            store.set(&mut conn, "mug", 5).await.at("set")?;
            store
                .replicated(wait)
                .restock(&mut conn, "mug", 1, None)
                .await
                .at("replicated restock")?;
            Ok(())
        }
        .await;
    }
    let usage = bench.usage().await;
    for c in &script_base.commands {
        assert!(
            !usage.ran.contains_key(c) && !usage.refused.contains_key(c),
            "the Functions backend sent `{c}`: {usage:?}"
        );
    }
    // The Functions row is the base here: compared as a tested row, with no base of its own.
    let none = Row {
        label: "none".into(),
        commands: BTreeSet::new(),
        keys: Vec::new(),
        optional: BTreeSet::new(),
    };
    verdict(
        "Functions backend",
        &usage,
        &none,
        &[&f, &v],
        &[&acked, &inv],
        run,
    );
}

async fn the_admin_api_uses_exactly_its_row() {
    let (base, r, mut bench) = fresh("admin API / CLI").await;
    let url = format!("redis://app:pw@127.0.0.1:{}/", bench.server.port());
    let run = admin_api(&Admin::single(url.as_str()).unwrap()).await;
    let usage = bench.usage().await;
    verdict("admin API", &usage, &base, &[&r], &[], run);
}

async fn the_admin_api_on_a_cluster_uses_exactly_its_rows() {
    let (base, r, cluster_row) = (
        base(),
        row("admin API / CLI"),
        row("admin API / CLI, Cluster"),
    );
    let cluster = RedisCluster::spawn().await;
    let mut admins = Vec::new();
    for node in &cluster.nodes {
        let mut admin = node.conn().await;
        set_user(&mut admin, &base, &[&r, &cluster_row], &[]).await;
        reset_stats(&mut admin).await;
        admins.push(admin);
    }
    let url = format!("redis://app:pw@127.0.0.1:{}/", cluster.nodes[0].port());
    let run = admin_api(&Admin::cluster([url.as_str()]).unwrap()).await;
    let mut usage = Usage::default();
    for admin in &mut admins {
        add_usage(admin, &mut usage).await;
    }
    verdict(
        "admin API on a Cluster",
        &usage,
        &base,
        &[&r, &cluster_row],
        &[],
        run,
    );
}

// ---------------------------------------------------------------------------------------------
// The scripts' source and the copy-paste example.

/// The row of the table a shipped script belongs to.
fn area(script: &str) -> &'static str {
    const AREAS: &[(&str, &str)] = &[
        ("fixed_window", "rate limiting"),
        ("gcra", "rate limiting"),
        ("sliding_window", "rate limiting"),
        ("inventory_", "inventory"),
        ("lock_", "locks"),
        ("fenced_set", "locks"),
        ("semaphore_", "semaphore"),
        ("fair_", "fair lock"),
        ("rw_", "read-write lock"),
        ("reentrant_", "reentrant lock"),
        ("versioned_", "versioned values"),
    ];
    AREAS
        .iter()
        .find(|(prefix, _)| script.starts_with(prefix))
        .map(|(_, area)| *area)
        .unwrap_or_else(|| panic!("script {script} belongs to no documented row: document its ACL"))
}

/// Words in quotes that are arguments of commands, not commands.
const OPTIONS: &[&str] = &[
    "limit",
    "byscore",
    "nx",
    "xx",
    "px",
    "ex",
    "pxat",
    "exat",
    "keepttl",
    "get",
    "withscores",
    "match",
    "count",
    "ch",
    "gt",
    "lt",
    "incr",
];

/// Command names a Lua source may call: every quoted upper-case word (`'GET'`, `"HSET"`),
/// whether it is passed to `redis.call` directly, assigned to a variable, or listed in a write
/// plan that is checked with `redis.acl_check_cmd` and run later. Option words are skipped
/// unless also called directly (`GET` is both).
fn called(source: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes = source.as_bytes();
    for (i, c) in source.char_indices() {
        if c != '\'' && c != '"' {
            continue;
        }
        let rest = &source[i + 1..];
        let word: String = rest
            .chars()
            .take_while(|c| c.is_ascii_uppercase())
            .collect();
        if word.len() < 2 || rest.as_bytes().get(word.len()) != Some(&bytes[i]) {
            continue;
        }
        let lower = word.to_ascii_lowercase();
        let direct = source.contains(&format!("redis.call('{word}'"))
            || source.contains(&format!("redis.call(\"{word}\""))
            || source.contains(&format!("redis.pcall('{word}'"));
        if direct || !OPTIONS.contains(&lower.as_str()) {
            out.insert(lower);
        }
    }
    out
}

fn every_command_a_shipped_script_calls_is_in_its_row() {
    let rows: BTreeMap<&str, Row> = [
        "rate limiting",
        "inventory",
        "locks",
        "semaphore",
        "fair lock",
        "read-write lock",
        "reentrant lock",
        "versioned values",
    ]
    .into_iter()
    .map(|label| (label, row(label)))
    .collect();
    for script in Registry::global().scripts() {
        let allowed = &rows[area(script.name())].commands;
        for cmd in called(script.source()) {
            assert!(
                allowed.contains(&cmd),
                "{} calls {cmd}, missing from the row {:?} of the minimal ACL",
                script.id(),
                area(script.name())
            );
        }
    }
}

/// The rows the tests of this file run, by label: a row added to the document must get a
/// test here.
const TESTED_ROWS: &[&str] = &[
    "every call",
    "every call, Functions backend",
    "rate limiting",
    "inventory",
    "locks",
    "locks, native commands",
    "semaphore",
    "fair lock",
    "read-write lock",
    "reentrant lock",
    "versioned values",
    "require_replicas, replicated(wait) calls",
    "Replication::fsynced",
    "preload",
    "admin API / CLI",
    "admin API / CLI, Cluster",
];

fn every_row_of_the_table_is_run_by_a_test() {
    let labels: BTreeSet<String> = table()
        .into_iter()
        .map(|r| match r.label.split_once(" (") {
            Some((label, _)) => label.to_owned(),
            None => r.label,
        })
        .collect();
    let tested: BTreeSet<String> = TESTED_ROWS.iter().map(|l| l.to_string()).collect();
    assert_eq!(
        labels, tested,
        "the table's rows and the rows the tests run"
    );
}

/// The rows the copy-paste `ACL SETUSER` example of the document grants (with the row of
/// every call): an application that rate-limits, keeps inventory and takes locks.
const EXAMPLE_ROWS: &[&str] = &["rate limiting", "inventory", "locks"];

fn the_acl_setuser_example_is_the_union_of_its_rows() {
    let section = section();
    let start = section
        .find("ACL SETUSER app")
        .expect("docs: the ACL SETUSER example");
    let end = section[start..]
        .find("```")
        .expect("docs: end of the example")
        + start;
    let example = section[start..end].replace("\\\n", " ");
    let commands: BTreeSet<String> = words(&example, '+').into_iter().collect();
    let keys: BTreeSet<String> = words(&example, '~').into_iter().collect();
    let rows: Vec<Row> = EXAMPLE_ROWS.iter().map(|l| row(l)).collect();
    let want: BTreeSet<String> = base()
        .commands
        .into_iter()
        .chain(rows.iter().flat_map(|r| r.commands.iter().cloned()))
        .collect();
    let want_keys: BTreeSet<String> = rows.iter().flat_map(|r| r.keys.iter().cloned()).collect();
    assert_eq!(commands, want, "the example's commands");
    assert_eq!(keys, want_keys, "the example's key patterns");
}

async fn one_permission_less_is_refused_and_writes_nothing() {
    let server = RedisServer::spawn().await;
    let (base, mut limiter) = (base(), row("rate limiting"));
    // A first hit opens the window with one SET PX (fixed_window).
    assert!(limiter.commands.remove("set"));
    let mut bench = Bench::new(server, &base, &[&limiter], &[]).await;
    let mut conn = bench.conn().await;
    let fw = FixedWindow::new("api", Rate::per_minute(redkit::nonzero!(10))).unwrap();
    let r = fw.check(&mut conn, &key("c")).await;
    assert!(
        matches!(r, Err(redkit::Error::PermissionDenied { .. })),
        "{r:?}"
    );
    let usage = bench.usage().await;
    assert!(usage.refused.contains_key("set"), "{usage:?}");
    let keys: Vec<String> = bench.server.cmd(&["KEYS", "*"]).await;
    assert!(keys.is_empty(), "a refused call wrote {keys:?}");
}

fn main() -> std::process::ExitCode {
    let mut tests = harness::Tests::new();
    harness::add!(tests, one_permission_less_is_refused_and_writes_nothing);
    harness::add!(tests, multi_thread: rate_limiting_uses_exactly_its_row, inventory_uses_exactly_its_row, locks_on_redis_7_use_exactly_their_row, semaphore_uses_exactly_its_row, fair_semaphore_uses_exactly_its_rows, fair_lock_uses_exactly_its_row, rw_lock_uses_exactly_its_row, reentrant_lock_uses_exactly_its_row, versioned_values_use_exactly_their_row, replicated_calls_use_exactly_their_row, preload_uses_exactly_its_row, the_functions_backend_uses_exactly_its_row, the_admin_api_uses_exactly_its_row, the_admin_api_on_a_cluster_uses_exactly_its_rows);
    harness::add!(tests, sync: every_command_a_shipped_script_calls_is_in_its_row, every_row_of_the_table_is_run_by_a_test, the_acl_setuser_example_is_the_union_of_its_rows);
    harness::add!(tests, valkey_multi_thread: locks_on_valkey_use_exactly_their_rows_with_native_commands, locks_on_valkey_without_the_native_row_run_their_scripts, fsynced_calls_use_exactly_their_rows);
    tests.run()
}
