//! `FixedWindow::check` beside raw redis-rs running the same script, and the server's
//! ceiling measured with `redis-benchmark -c 8 -P 16` (EVALSHA of the same script).
//!
//! `cargo bench --bench rate_limit`

#[path = "../tests/fixtures/mod.rs"]
mod fixtures;
#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use redis::aio::MultiplexedConnection;
use redkit::rate_limit::{FixedWindow, LimitKey, Rate};
use support::RedisServer;

const CALLERS: u64 = 64;
const BATCH: usize = 64;
const LIMIT: u32 = 1_000_000_000;
const WINDOW_MS: u64 = 600_000;

struct Setup {
    _server: RedisServer,
    conn: MultiplexedConnection,
    limiter: FixedWindow,
    raw: redis::Script,
    key: LimitKey,
}

fn setup(rt: &tokio::runtime::Runtime) -> Setup {
    rt.block_on(async {
        let server = RedisServer::spawn().await;
        let conn = server.conn().await;
        let limiter = FixedWindow::new(
            "bench",
            Rate::new(support::nz(LIMIT), Duration::from_millis(WINDOW_MS)).unwrap(),
        )
        .unwrap();
        let script = fixtures::script("fixed_window", 3);
        let raw = redis::Script::new(script.source());
        assert_eq!(raw.get_hash(), script.sha1());
        let mut c = conn.clone();
        let manager = redkit::ScriptManager::new();
        manager.preload(&mut c).await.unwrap();
        manager
            .preload_scripts(&mut c, std::slice::from_ref(script))
            .await
            .unwrap();
        ceiling(&server, script.sha1());
        Setup {
            _server: server,
            conn,
            limiter,
            raw,
            key: LimitKey::ip([192, 0, 2, 1].into()),
        }
    })
}

/// Prints the server's own EVALSHA throughput (the ceiling) on this machine.
fn ceiling(server: &RedisServer, sha: &str) {
    let port = server.port().to_string();
    let (limit, window) = (LIMIT.to_string(), WINDOW_MS.to_string());
    let out = std::process::Command::new("redis-benchmark")
        .args([
            "-p", &port, "-c", "8", "-P", "16", "-n", "400000", "-q", "EVALSHA", sha,
        ])
        .args(["1", "rk:rl:ceiling:{ip:192.0.2.1}", &limit, &window, "1"])
        .output();
    match out {
        Ok(out) => {
            // `-q` redraws a progress line with `\r`; the last segment is the result.
            let text = String::from_utf8_lossy(&out.stdout);
            let last = text.rsplit('\r').next().unwrap_or_default().trim();
            let rps = last.rsplit(": ").next().unwrap_or(last);
            println!("ceiling: redis-benchmark -c 8 -P 16 EVALSHA fixed_window: {rps}");
        }
        Err(e) => println!("redis-benchmark not available: {e}"),
    }
}

fn bench(c: &mut Criterion) {
    // REDKIT_BENCH_RT=current runs everything on one thread (no cross-thread wake-ups);
    // the default is a 2-worker multi-thread runtime, like a typical axum server.
    let rt = match std::env::var("REDKIT_BENCH_RT").as_deref() {
        Ok("current") => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap(),
        _ => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap(),
    };
    let s = setup(&rt);
    let raw_key = s.limiter.redis_key(&s.key);

    let mut group = c.benchmark_group("fixed_window/sequential");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(1));
    group.bench_function("redkit_check", |b| {
        b.to_async(&rt).iter(|| {
            let mut conn = s.conn.clone();
            let (limiter, key) = (&s.limiter, &s.key);
            async move { limiter.check(&mut conn, key).await.unwrap() }
        });
    });
    group.bench_function("raw_redis_script", |b| {
        b.to_async(&rt).iter(|| {
            let mut conn = s.conn.clone();
            let (raw, key) = (&s.raw, &raw_key);
            async move {
                let r: (i64, i64, i64) = raw
                    .key(key)
                    .arg(LIMIT)
                    .arg(WINDOW_MS)
                    .arg(1)
                    .invoke_async(&mut conn)
                    .await
                    .unwrap();
                r
            }
        });
    });
    group.finish();

    let mut group = c.benchmark_group("fixed_window/concurrent64");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(CALLERS));
    group.bench_function("redkit_check", |b| {
        b.to_async(&rt).iter_custom(|iters| {
            let (conn, limiter, key) = (s.conn.clone(), s.limiter.clone(), s.key.clone());
            async move {
                let start = Instant::now();
                let tasks: Vec<_> = (0..CALLERS)
                    .map(|_| {
                        let (mut conn, limiter, key) = (conn.clone(), limiter.clone(), key.clone());
                        tokio::spawn(async move {
                            for _ in 0..iters {
                                limiter.check(&mut conn, &key).await.unwrap();
                            }
                        })
                    })
                    .collect();
                for t in tasks {
                    t.await.unwrap();
                }
                start.elapsed()
            }
        });
    });
    group.bench_function("raw_redis_script", |b| {
        b.to_async(&rt).iter_custom(|iters| {
            let (conn, raw, key) = (s.conn.clone(), s.raw.clone(), raw_key.clone());
            async move {
                let start = Instant::now();
                let tasks: Vec<_> = (0..CALLERS)
                    .map(|_| {
                        let (mut conn, raw, key) = (conn.clone(), raw.clone(), key.clone());
                        tokio::spawn(async move {
                            for _ in 0..iters {
                                let _: (i64, i64, i64) = raw
                                    .key(&key)
                                    .arg(LIMIT)
                                    .arg(WINDOW_MS)
                                    .arg(1)
                                    .invoke_async(&mut conn)
                                    .await
                                    .unwrap();
                            }
                        })
                    })
                    .collect();
                for t in tasks {
                    t.await.unwrap();
                }
                start.elapsed()
            }
        });
    });
    group.finish();

    let keys: Vec<LimitKey> = (0..BATCH)
        .map(|i| LimitKey::ip([198, 51, (i / 256) as u8, (i % 256) as u8].into()))
        .collect();
    let mut group = c.benchmark_group("fixed_window/batch64");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(BATCH as u64));
    group.bench_function("redkit_check_batch", |b| {
        b.to_async(&rt).iter(|| {
            let mut conn = s.conn.clone();
            let (limiter, keys) = (&s.limiter, &keys);
            async move { limiter.check_batch(&mut conn, keys).await.unwrap() }
        });
    });
    group.bench_function("redkit_check_batch_x8_in_flight", |b| {
        b.to_async(&rt).iter_custom(|iters| {
            let (conn, limiter, keys) = (s.conn.clone(), s.limiter.clone(), keys.clone());
            async move {
                let start = Instant::now();
                let tasks: Vec<_> = (0..8)
                    .map(|_| {
                        let (mut conn, limiter, keys) =
                            (conn.clone(), limiter.clone(), keys.clone());
                        tokio::spawn(async move {
                            for _ in 0..iters.div_ceil(8) {
                                limiter.check_batch(&mut conn, &keys).await.unwrap();
                            }
                        })
                    })
                    .collect();
                for t in tasks {
                    t.await.unwrap();
                }
                start.elapsed()
            }
        });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
