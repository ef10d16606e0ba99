//! Server cost of redkit's scripts beside the minimal "seed-style" script a user writes from
//! the articles, in ONE run against one private redis-server (see ARCHITECTURE.md, "How we
//! measure"):
//!
//! - fixed-window check over 10k IPs: `FixedWindow::check` vs `INCR; EXPIRE on the first hit;
//!   compare` through raw `redis::Script`;
//! - single-SKU decrement (64 buyers on one SKU), without and with a request id:
//!   `Store::decrement` vs `GET; compare; DECRBY`;
//! - lock acquire + release with default options, own key per task: `Lock` vs plain
//!   `SET NX PX` + a `GET == token -> DEL` script.
//!
//! Each case runs 64 tasks on one multiplexed connection for a few seconds and reports ops/s,
//! the ratio to the seed script, and the server's CPU per operation (`INFO server`
//! `process_id`, `/proc/<pid>/schedstat` first field, delta / ops). Then the
//! `redis-benchmark -c 8 -P 16` EVALSHA ceiling of every shipped version of redkit's script
//! (v2 and later) and of the seed script. Not a timed test: it prints, it does not assert
//! speed.
//!
//! `cargo bench --bench lean` (`REDKIT_LEAN_SECS=<n>` per case, default 3).

#[path = "../tests/support/mod.rs"]
mod support;

use std::future::Future;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redkit::inventory::{Decrement, Inventory};
use redkit::lock::{Acquire, Lock, LockOptions, Release};
use redkit::rate_limit::{Decision, FixedWindow, LimitKey};
use redkit::{Registry, ScriptManager};

const CALLERS: u64 = 64;
const IPS: usize = 10_000;
const LIMIT: u32 = 1_000_000_000;
const WINDOW_MS: u64 = 600_000;
const STOCK: u64 = Inventory::MAX_QUANTITY;

const SEED_LIMITER: &str = r"
local c = redis.call('INCR', KEYS[1])
if c == 1 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
if c > tonumber(ARGV[1]) then return 0 end
return 1";

const SEED_STOCK: &str = r"
local s = tonumber(redis.call('GET', KEYS[1]))
if not s then return -1 end
if s < tonumber(ARGV[1]) then return 0 end
redis.call('DECRBY', KEYS[1], ARGV[1])
return 1";

const SEED_UNLOCK: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0";

/// The redis-server's main-thread CPU time in ns (`/proc/<pid>/schedstat`, first field).
fn server_cpu_ns(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

async fn server_pid(conn: &mut MultiplexedConnection) -> Option<u32> {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(conn)
        .await
        .ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|v| v.trim().parse().ok())
}

struct Measured {
    ops: u64,
    secs: f64,
    cpu_ns: Option<u64>,
}

impl Measured {
    fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.secs
    }
    fn cpu_us_per_op(&self) -> Option<f64> {
        self.cpu_ns
            .map(|ns| ns as f64 / 1000.0 / self.ops.max(1) as f64)
    }
}

/// Runs `op(conn, task, i)` in 64 tasks on clones of one multiplexed connection for `secs`.
async fn run<F, Fut>(conn: MultiplexedConnection, pid: Option<u32>, secs: f64, op: F) -> Measured
where
    F: Fn(MultiplexedConnection, u64, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    let op = Arc::new(op);
    let ops = Arc::new(AtomicU64::new(0));
    let cpu_before = pid.and_then(server_cpu_ns);
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(secs);
    let mut tasks = Vec::new();
    for task in 0..CALLERS {
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
    Measured {
        ops: ops.load(Ordering::Relaxed),
        secs: elapsed,
        cpu_ns: cpu_before.zip(cpu_after).map(|(b, a)| a.saturating_sub(b)),
    }
}

fn row(name: &str, redkit: &Measured, seed: &Measured) {
    let cpu = match (redkit.cpu_us_per_op(), seed.cpu_us_per_op()) {
        (Some(r), Some(s)) => format!("{r:.2} vs {s:.2} us ({:.2}x)", r / s),
        _ => "n/a (no /proc schedstat)".to_owned(),
    };
    println!(
        "| {name} | {:.0}k | {:.0}k | {:.2}x | {cpu} |",
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

/// Every shipped version >= 2 of `name` (the ones this work compares).
fn versions(name: &str) -> Vec<&'static redkit::Script> {
    (2..10)
        .filter_map(|v| Registry::global().get(name, v))
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
    let secs: f64 = std::env::var("REDKIT_LEAN_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(bench(secs));
}

async fn bench(secs: f64) {
    let server = support::RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let pid = server_pid(&mut conn).await;
    ScriptManager::new().preload(&mut conn).await.unwrap();
    println!(
        "lean bench: redis-server pid {pid:?}, {CALLERS} tasks on one multiplexed connection, {secs} s per case"
    );
    println!();
    println!("| operation | redkit ops/s | seed-style ops/s | throughput | server CPU per op |");
    println!("| --- | ---: | ---: | ---: | ---: |");

    // (a) fixed-window check over 10k IPs.
    let limiter =
        Arc::new(FixedWindow::new("lean", LIMIT, Duration::from_millis(WINDOW_MS)).unwrap());
    let ips: Arc<Vec<LimitKey>> = Arc::new(
        (0..IPS as u32)
            .map(|i| LimitKey::ip(Ipv4Addr::from(0x0a00_0000 + i).into()))
            .collect(),
    );
    let seed_keys: Arc<Vec<String>> = Arc::new((0..IPS).map(|i| format!("seed:rl:{i}")).collect());
    let seed_limiter = Arc::new(redis::Script::new(SEED_LIMITER));
    let (l, k) = (limiter.clone(), ips.clone());
    let redkit = run(conn.clone(), pid, secs, move |mut c, t, i| {
        let (l, k) = (l.clone(), k.clone());
        async move {
            let key = &k[((t * 7919 + i * 64) as usize) % IPS];
            let d = l.check(&mut c, key).await.unwrap();
            assert!(matches!(d, Decision::Allowed { .. }), "{d:?}");
        }
    })
    .await;
    let (s, k) = (seed_limiter.clone(), seed_keys.clone());
    let seed = run(conn.clone(), pid, secs, move |mut c, t, i| {
        let (s, k) = (s.clone(), k.clone());
        async move {
            let key = &k[((t * 7919 + i * 64) as usize) % IPS];
            let allowed: i64 = s
                .key(key)
                .arg(LIMIT)
                .arg(WINDOW_MS / 1000)
                .invoke_async(&mut c)
                .await
                .unwrap();
            assert_eq!(allowed, 1);
        }
    })
    .await;
    row("fixed-window check, 10k IPs", &redkit, &seed);

    // (b) single-SKU decrement, 64 buyers on one SKU.
    let inventory = Inventory::new("lean:inv").unwrap();
    let store = Arc::new(inventory.store("w1").unwrap());
    store.set(&mut conn, "hot", STOCK).await.unwrap();
    let _: () = redis::cmd("SET")
        .arg("seed:stock:hot")
        .arg(STOCK)
        .query_async(&mut conn)
        .await
        .unwrap();
    let seed_stock = Arc::new(redis::Script::new(SEED_STOCK));
    let seed_decrement = |conn: &MultiplexedConnection, s: Arc<redis::Script>| {
        run(conn.clone(), pid, secs, move |mut c, _, _| {
            let s = s.clone();
            async move {
                let r: i64 = s
                    .key("seed:stock:hot")
                    .arg(1)
                    .invoke_async(&mut c)
                    .await
                    .unwrap();
                assert_eq!(r, 1);
            }
        })
    };
    let st = store.clone();
    let redkit = run(conn.clone(), pid, secs, move |mut c, _, _| {
        let st = st.clone();
        async move {
            let d = st.decrement(&mut c, "hot", 1, None).await.unwrap();
            assert!(matches!(d, Decrement::Decremented { .. }), "{d:?}");
        }
    })
    .await;
    let seed = seed_decrement(&conn, seed_stock.clone()).await;
    row("decrement, 64 buyers on ONE SKU", &redkit, &seed);
    let st = store.clone();
    let redkit = run(conn.clone(), pid, secs, move |mut c, t, i| {
        let st = st.clone();
        async move {
            let id = format!("r{t}-{i}");
            let d = st.decrement(&mut c, "hot", 1, Some(&id)).await.unwrap();
            assert!(matches!(d, Decrement::Decremented { .. }), "{d:?}");
        }
    })
    .await;
    let seed = seed_decrement(&conn, seed_stock.clone()).await;
    row("decrement with a request id, ONE SKU", &redkit, &seed);

    // (c) lock acquire + release with default options, own key per task.
    let lock = Arc::new(Lock::new());
    let options = Arc::new(LockOptions::new());
    let (lk, o) = (lock.clone(), options.clone());
    let redkit = run(conn.clone(), pid, secs, move |mut c, t, _| {
        let (lk, o) = (lk.clone(), o.clone());
        async move {
            let resource = format!("res-{t}");
            match lk.acquire(&mut c, &resource, &o).await.unwrap() {
                Acquire::Acquired(guard) => {
                    let r = lk.release(&mut c, guard).await.unwrap();
                    assert_eq!(r, Release::Released);
                }
                other => panic!("{other:?}"),
            }
        }
    })
    .await;
    let unlock = Arc::new(redis::Script::new(SEED_UNLOCK));
    // The seed lock uses the same lease as LockOptions' default.
    let ttl_ms = LockOptions::DEFAULT_TTL.as_millis() as u64;
    let u = unlock.clone();
    let seed = run(conn.clone(), pid, secs, move |mut c, t, _| {
        let u = u.clone();
        async move {
            let key = format!("seed:lock:{t}");
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
            let deleted: i64 = u.key(&key).arg(&token).invoke_async(&mut c).await.unwrap();
            assert_eq!(deleted, 1);
        }
    })
    .await;
    row("lock acquire + release, default options", &redkit, &seed);

    // Ceilings: redis-benchmark -c 8 -P 16 EVALSHA of each script version and the seed.
    println!();
    println!("| redis-benchmark -c 8 -P 16 (EVALSHA) | calls/s |");
    println!("| --- | ---: |");
    let port = server.port();
    let (limit, window, window_s) = (
        LIMIT.to_string(),
        WINDOW_MS.to_string(),
        (WINDOW_MS / 1000).to_string(),
    );
    for s in versions("fixed_window") {
        let name = format!("{} (one key)", s.id());
        let args = [
            "EVALSHA",
            s.sha1(),
            "1",
            "ceil:rl:{a}",
            &limit,
            &window,
            "1",
        ];
        print_ceiling(&name, ceiling(port, &args));
    }
    let sha = script_load(&mut conn, SEED_LIMITER).await;
    let args = ["EVALSHA", &sha, "1", "ceil:rl:seed", &limit, &window_s];
    print_ceiling("seed limiter (one key)", ceiling(port, &args));

    let sku = store.sku_key("hot").unwrap();
    let res = store.reservation_key("hot").unwrap();
    let exp = store.reservation_expiry_key("hot").unwrap();
    for s in versions("inventory_apply") {
        let name = format!("{} (one SKU, take 1)", s.id());
        let args = ["EVALSHA", s.sha1(), "3", &sku, &res, &exp, "take", "1", "1"];
        print_ceiling(&name, ceiling(port, &args));
    }
    let sha = script_load(&mut conn, SEED_STOCK).await;
    let args = ["EVALSHA", &sha, "1", "seed:stock:hot", "1"];
    print_ceiling("seed stock script", ceiling(port, &args));

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
    drop(server);
}
