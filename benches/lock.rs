//! Lock acquire+release cycle: redkit's `Lock` (fencing counter included) beside raw redis-rs
//! (`SET NX PX` + a compare-and-delete script), sequential and 64 concurrent on distinct keys.
//!
//! `cargo bench --bench lock`

#[path = "../tests/fixtures/mod.rs"]
mod fixtures;
#[path = "common/seed_lock.rs"]
mod seed_lock;
#[path = "../tests/support/mod.rs"]
mod support;
use seed_lock::{seed_lock_cycle, SEED_UNLOCK};

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use redis::aio::MultiplexedConnection;
use redkit::lock::{Acquire, Lock, LockOptions, Release};

const CONCURRENCY: usize = 64;

async fn redkit_cycle(lock: &Lock, conn: &mut MultiplexedConnection, resource: &str) {
    let options = LockOptions::new().ttl(Duration::from_secs(10));
    match lock.acquire(conn, resource, &options).await {
        Ok(Acquire::Acquired(guard)) => {
            let released = lock.release(conn, guard).await;
            assert!(matches!(released, Ok(Release::Released)));
        }
        other => panic!("{other:?}"),
    }
}

async fn same_scripts_cycle(
    acquire: &redis::Script,
    release: &redis::Script,
    conn: &mut MultiplexedConnection,
    key: &str,
) {
    let token = format!("{:032x}", rand::random::<u128>());
    let (ok, _fence): (i64, i64) = acquire
        .key(key)
        .key(format!("{key}:fence"))
        .arg(&token)
        .arg(10_000)
        .invoke_async(conn)
        .await
        .unwrap();
    assert_eq!(ok, 1);
    let deleted: i64 = release
        .key(key)
        .arg(&token)
        .invoke_async(conn)
        .await
        .unwrap();
    assert_eq!(deleted, 1);
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (server, conn) = rt.block_on(async {
        let server = support::RedisServer::spawn().await;
        let conn = server.conn().await;
        (server, conn)
    });
    let lock = Lock::new();
    let unlock = redis::Script::new(SEED_UNLOCK);
    let source = |name| fixtures::script(name, 1).source().to_owned();
    let same_acquire = redis::Script::new(&source("lock_acquire"));
    let same_release = redis::Script::new(&source("lock_release"));
    let resources: Vec<String> = (0..CONCURRENCY).map(|i| format!("res-{i}")).collect();
    let raw_keys: Vec<String> = (0..CONCURRENCY)
        .map(|i| format!("raw:{{res-{i}}}"))
        .collect();

    let mut group = c.benchmark_group("lock_cycle_sequential");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1))
        .throughput(Throughput::Elements(1));
    group.bench_function("redkit", |b| {
        b.to_async(&rt).iter(|| {
            let mut conn = conn.clone();
            let lock = lock.clone();
            async move { redkit_cycle(&lock, &mut conn, "seq").await }
        })
    });
    group.bench_function("raw_redis_rs", |b| {
        b.to_async(&rt).iter(|| {
            let mut conn = conn.clone();
            let unlock = &unlock;
            async move { seed_lock_cycle(unlock, &mut conn, "raw:{seq}", 10_000).await }
        })
    });
    group.finish();

    let mut group = c.benchmark_group("lock_cycle_concurrent_64");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1))
        .throughput(Throughput::Elements(CONCURRENCY as u64));
    group.bench_function("redkit", |b| {
        b.to_async(&rt).iter(|| {
            let runs = resources.iter().map(|resource| {
                let mut conn = conn.clone();
                let lock = lock.clone();
                async move { redkit_cycle(&lock, &mut conn, resource).await }
            });
            futures_util::future::join_all(runs)
        })
    });
    group.bench_function("raw_redis_rs", |b| {
        b.to_async(&rt).iter(|| {
            let runs = raw_keys.iter().map(|key| {
                let mut conn = conn.clone();
                let unlock = &unlock;
                async move { seed_lock_cycle(unlock, &mut conn, key, 10_000).await }
            });
            futures_util::future::join_all(runs)
        })
    });
    // The same Lua as redkit, run through redis::Script: separates the cost of the scripts
    // (fencing counter included) from the cost of redkit's Rust layer.
    group.bench_function("raw_redis_rs_same_scripts", |b| {
        b.to_async(&rt).iter(|| {
            let runs = raw_keys.iter().map(|key| {
                let mut conn = conn.clone();
                let (acquire, release) = (&same_acquire, &same_release);
                async move { same_scripts_cycle(acquire, release, &mut conn, key).await }
            });
            futures_util::future::join_all(runs)
        })
    });
    group.finish();
    drop(server);
}

criterion_group!(benches, bench);
criterion_main!(benches);
