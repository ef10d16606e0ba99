//! redkit's `ScriptManager::invoke` against raw `redis::Script::invoke_async` running the same
//! script on the same server, sequential and with 64 callers in flight on one multiplexed
//! connection; `redis-benchmark -c 8 -P 16` EVALSHA of that script is the server's ceiling.
//!
//! `cargo bench --bench script`

mod common;
#[path = "../tests/fixtures/mod.rs"]
mod fixtures;
#[path = "../tests/support/mod.rs"]
mod support;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use futures_util::stream::{self, StreamExt};
use redis::aio::MultiplexedConnection;
use redkit::{Call, ScriptManager};
use std::time::Duration;

const IN_FLIGHT: usize = 64;
const BATCH: usize = 1024;
const LIMIT: &str = "1000000000";
const WINDOW_MS: &str = "600000";

fn redkit_call(key: &str) -> Call<'static> {
    let script = fixtures::sample();
    let mut call = Call::new(script);
    call.key(key).arg(LIMIT).arg(WINDOW_MS).arg(1);
    call
}

async fn redkit_one(m: &ScriptManager, conn: &mut MultiplexedConnection) {
    let _: (i64, i64, i64) = m
        .invoke(conn, &redkit_call("{b}:rk"))
        .await
        .expect("invoke");
}

async fn raw_one(script: &redis::Script, conn: &mut MultiplexedConnection) {
    let _: (i64, i64, i64) = script
        .key("{b}:raw")
        .arg(LIMIT)
        .arg(WINDOW_MS)
        .arg(1)
        .invoke_async(conn)
        .await
        .expect("invoke_async");
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let server = rt.block_on(support::RedisServer::spawn());
    let conn = rt.block_on(server.conn());
    let manager = ScriptManager::new();
    let source = fixtures::sample();
    let raw = redis::Script::new(source.source());
    rt.block_on(async {
        manager.preload(&mut conn.clone()).await.unwrap();
        manager
            .preload_scripts(&mut conn.clone(), fixtures::registry().scripts())
            .await
            .unwrap();
    });

    let ceiling = common::redis_benchmark_ceiling(
        server.port(),
        &[
            "EVALSHA",
            source.sha1(),
            "1",
            "{b}:rb",
            LIMIT,
            WINDOW_MS,
            "1",
        ],
    );
    common::report_ceiling("EVALSHA fixed_window.v1", ceiling);

    let mut g = c.benchmark_group("invoke/sequential");
    g.sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(1));
    g.bench_function("redkit", |b| {
        b.to_async(&rt).iter(|| {
            let mut conn = conn.clone();
            let m = manager.clone();
            async move { redkit_one(&m, &mut conn).await }
        })
    });
    g.bench_function("raw_redis_script", |b| {
        b.to_async(&rt).iter(|| {
            let mut conn = conn.clone();
            let raw = &raw;
            async move { raw_one(raw, &mut conn).await }
        })
    });
    g.finish();

    let mut g = c.benchmark_group("invoke/64_in_flight");
    g.sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .throughput(Throughput::Elements(BATCH as u64));
    g.bench_function("redkit", |b| {
        b.to_async(&rt).iter(|| {
            let conn = conn.clone();
            let m = manager.clone();
            async move {
                stream::iter(0..BATCH)
                    .for_each_concurrent(IN_FLIGHT, |_| {
                        let mut conn = conn.clone();
                        let m = &m;
                        async move { redkit_one(m, &mut conn).await }
                    })
                    .await
            }
        })
    });
    g.bench_function("raw_redis_script", |b| {
        b.to_async(&rt).iter(|| {
            let conn = conn.clone();
            let raw = &raw;
            async move {
                stream::iter(0..BATCH)
                    .for_each_concurrent(IN_FLIGHT, |_| {
                        let mut conn = conn.clone();
                        async move { raw_one(raw, &mut conn).await }
                    })
                    .await
            }
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
