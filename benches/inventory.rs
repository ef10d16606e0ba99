//! Inventory throughput against a local redis-server, beside raw redis-rs doing the same work
//! with a hand-written `redis::Script` (and plain `DECRBY`, which cannot refuse an oversell,
//! as a floor).
//!
//! `cargo bench --bench inventory`

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use futures_util::future::join_all;
use redis::aio::MultiplexedConnection;
use redkit::inventory::{Inventory, OrderLine, Store};

const CONCURRENT: usize = 64;
const SKUS: [&str; 5] = ["a", "b", "c", "d", "e"];
/// Enough stock that no benchmark ever runs out.
const STOCK: u64 = Inventory::MAX_QUANTITY;

const RAW_DECR: &str = r"
local s = tonumber(redis.call('GET', KEYS[1]))
if not s then return redis.error_reply('unknown') end
local q = tonumber(ARGV[1])
if s < q then return {0, s} end
return {1, redis.call('DECRBY', KEYS[1], q)}";

const RAW_ORDER: &str = r"
for i = 1, #KEYS do
  local s = tonumber(redis.call('GET', KEYS[i]))
  if not s then return redis.error_reply('unknown') end
  if s < tonumber(ARGV[i]) then return {0, i, s} end
end
local out = {1}
for i = 1, #KEYS do out[#out + 1] = redis.call('DECRBY', KEYS[i], ARGV[i]) end
return out";

struct Fixture {
    _server: support::RedisServer,
    conn: MultiplexedConnection,
    inventory: Inventory,
    store: Store,
    lines: Vec<OrderLine>,
    keys: Vec<String>,
    raw_decr: redis::Script,
    raw_order: redis::Script,
}

fn fixture(rt: &tokio::runtime::Runtime) -> Fixture {
    rt.block_on(async {
        let server = support::RedisServer::spawn().await;
        let mut conn = server.conn().await;
        let inventory = Inventory::new("bench:inv").unwrap();
        let store = inventory.store("w1").unwrap();
        for sku in SKUS {
            store.set(&mut conn, sku, STOCK).await.unwrap();
        }
        inventory.manager().preload(&mut conn).await.unwrap();
        let lines = SKUS.iter().map(|s| store.line(s, 1).unwrap()).collect();
        let keys = SKUS.iter().map(|s| store.key(s).unwrap()).collect();
        Fixture {
            _server: server,
            conn,
            inventory,
            store,
            lines,
            keys,
            raw_decr: redis::Script::new(RAW_DECR),
            raw_order: redis::Script::new(RAW_ORDER),
        }
    })
}

fn configure(group: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>) {
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1));
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let f = fixture(&rt);
    let f = &f;
    let ids = AtomicU64::new(0);
    let ids = &ids;

    let mut g = c.benchmark_group("decrement_sequential");
    configure(&mut g);
    g.throughput(Throughput::Elements(1));
    g.bench_function("redkit", |b| {
        b.to_async(&rt).iter(|| async {
            let mut conn = f.conn.clone();
            f.store.decrement(&mut conn, "a", 1, None).await.unwrap()
        })
    });
    g.bench_function("redkit_request_id", |b| {
        b.to_async(&rt).iter(|| async {
            let mut conn = f.conn.clone();
            let id = format!("r{}", ids.fetch_add(1, Ordering::Relaxed));
            f.store
                .decrement(&mut conn, "a", 1, Some(&id))
                .await
                .unwrap()
        })
    });
    g.bench_function("raw_script", |b| {
        b.to_async(&rt).iter(|| async {
            let mut conn = f.conn.clone();
            let r: (i64, i64) = f
                .raw_decr
                .key(&f.keys[0])
                .arg(1)
                .invoke_async(&mut conn)
                .await
                .unwrap();
            r
        })
    });
    g.bench_function("raw_decrby", |b| {
        b.to_async(&rt).iter(|| async {
            let mut conn = f.conn.clone();
            let r: i64 = redis::cmd("DECRBY")
                .arg(&f.keys[0])
                .arg(1)
                .query_async(&mut conn)
                .await
                .unwrap();
            r
        })
    });
    g.finish();

    let mut g = c.benchmark_group("decrement_64_concurrent");
    configure(&mut g);
    g.throughput(Throughput::Elements(CONCURRENT as u64));
    g.bench_function("redkit", |b| {
        b.to_async(&rt).iter(|| async {
            join_all((0..CONCURRENT).map(|_| async {
                let mut conn = f.conn.clone();
                f.store.decrement(&mut conn, "a", 1, None).await.unwrap()
            }))
            .await
        })
    });
    g.bench_function("raw_script", |b| {
        b.to_async(&rt).iter(|| async {
            join_all((0..CONCURRENT).map(|_| async {
                let mut conn = f.conn.clone();
                let r: (i64, i64) = f
                    .raw_decr
                    .key(&f.keys[0])
                    .arg(1)
                    .invoke_async(&mut conn)
                    .await
                    .unwrap();
                r
            }))
            .await
        })
    });
    g.finish();

    let mut g = c.benchmark_group("order_5_sku_sequential");
    configure(&mut g);
    g.throughput(Throughput::Elements(1));
    g.bench_function("redkit", |b| {
        b.to_async(&rt).iter(|| async {
            let mut conn = f.conn.clone();
            f.inventory
                .place_order(&mut conn, &f.lines, None)
                .await
                .unwrap()
        })
    });
    g.bench_function("raw_script", |b| {
        b.to_async(&rt).iter(|| async {
            let mut conn = f.conn.clone();
            let mut inv = f.raw_order.prepare_invoke();
            for key in &f.keys {
                inv.key(key);
            }
            for _ in &f.keys {
                inv.arg(1);
            }
            let r: Vec<i64> = inv.invoke_async(&mut conn).await.unwrap();
            r
        })
    });
    g.finish();

    let mut g = c.benchmark_group("order_5_sku_64_concurrent");
    configure(&mut g);
    g.throughput(Throughput::Elements(CONCURRENT as u64));
    g.bench_function("redkit", |b| {
        b.to_async(&rt).iter(|| async {
            join_all((0..CONCURRENT).map(|_| async {
                let mut conn = f.conn.clone();
                f.inventory
                    .place_order(&mut conn, &f.lines, None)
                    .await
                    .unwrap()
            }))
            .await
        })
    });
    g.bench_function("raw_script", |b| {
        b.to_async(&rt).iter(|| async {
            join_all((0..CONCURRENT).map(|_| async {
                let mut conn = f.conn.clone();
                let mut inv = f.raw_order.prepare_invoke();
                for key in &f.keys {
                    inv.key(key);
                }
                for _ in &f.keys {
                    inv.arg(1);
                }
                let r: Vec<i64> = inv.invoke_async(&mut conn).await.unwrap();
                r
            }))
            .await
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
