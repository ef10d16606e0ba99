//! Atomic inventory against real Redis: no oversell under concurrency, all-or-nothing
//! multi-SKU orders, idempotent retries, typed errors that leave data untouched, Cluster, and
//! `SCRIPT FLUSH` in the middle of a run.

#[path = "fixtures/mod.rs"]
mod fixtures;
mod support;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::aio::MultiplexedConnection;
use redkit::inventory::{
    Cancel, Commit, Decrement, Inventory, Order, Reserve, Restock, Shortage, Store,
};
use redkit::Error;
use support::{RedisCluster, RedisServer};

fn store(id: &str) -> Store {
    Inventory::new("t:inv").unwrap().store(id).unwrap()
}

async fn raw_get(server: &RedisServer, key: &str) -> Option<String> {
    server.cmd(&["GET", key]).await
}

async fn conns(server: &RedisServer, n: usize) -> Vec<MultiplexedConnection> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(server.conn().await);
    }
    out
}

/// Polls GET on `keys` until `stop`, asserting every value read is a non-negative integer.
/// Returns once the reader has made its first round of reads, so it runs during what follows.
async fn spawn_reader(
    server: &RedisServer,
    keys: Vec<String>,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<u64> {
    let client = server.client();
    let (ready, started) = tokio::sync::oneshot::channel();
    let reader = tokio::spawn(async move {
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let mut ready = Some(ready);
        let mut reads = 0;
        loop {
            for key in &keys {
                let v: Option<String> = redis::cmd("GET")
                    .arg(key)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                let v: i64 = v.expect("stock key exists").parse().expect("an integer");
                assert!(v >= 0, "stock of {key} read as {v}");
                reads += 1;
            }
            if let Some(ready) = ready.take() {
                let _ = ready.send(());
            }
            if stop.load(Ordering::Relaxed) {
                return reads;
            }
        }
    });
    started.await.expect("reader started");
    reader
}

/// Total `EVALSHA` + `EVAL` calls the server has seen since the last `CONFIG RESETSTAT`.
async fn script_calls(server: &RedisServer) -> u64 {
    let stats: String = server.cmd(&["INFO", "commandstats"]).await;
    stats
        .lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

#[tokio::test]
async fn single_sku_operations_and_outcomes() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let s = store("basics");

    s.set(&mut conn, "a", 10).await.unwrap();
    assert_eq!(s.stock(&mut conn, "a").await.unwrap(), 10);
    assert_eq!(
        s.decrement(&mut conn, "a", 3, None).await.unwrap(),
        Decrement::Decremented { remaining: 7 }
    );
    assert_eq!(
        s.decrement(&mut conn, "a", 8, None).await.unwrap(),
        Decrement::Insufficient { available: 7 }
    );
    assert_eq!(
        s.decrement(&mut conn, "a", 7, None).await.unwrap(),
        Decrement::Decremented { remaining: 0 }
    );
    assert_eq!(
        s.decrement(&mut conn, "a", 1, None).await.unwrap(),
        Decrement::Insufficient { available: 0 }
    );
    assert_eq!(
        s.restock(&mut conn, "a", 5, None).await.unwrap(),
        Restock::Restocked { stock: 5 }
    );
    assert_eq!(
        raw_get(&server, &s.key("a").unwrap()).await.as_deref(),
        Some("5")
    );

    // Unknown SKU: typed error everywhere, nothing created.
    for result in [
        s.stock(&mut conn, "nope").await.map(|_| ()),
        s.decrement(&mut conn, "nope", 1, Some("r1"))
            .await
            .map(|_| ()),
        s.restock(&mut conn, "nope", 1, Some("r2"))
            .await
            .map(|_| ()),
    ] {
        assert!(
            matches!(&result, Err(Error::NotFound { what: "sku", detail }) if detail == "nope"),
            "{result:?}"
        );
    }
    let exists: u64 = server
        .cmd(&[
            "EXISTS",
            &s.key("nope").unwrap(),
            &s.request_key("r1").unwrap(),
            &s.request_key("r2").unwrap(),
        ])
        .await;
    assert_eq!(exists, 0, "errors write nothing, not even a request record");

    // Restock beyond the maximum: refused by the script, nothing changed.
    s.set(&mut conn, "big", Inventory::MAX_QUANTITY - 1)
        .await
        .unwrap();
    assert!(matches!(
        s.restock(&mut conn, "big", 2, None).await,
        Err(Error::InvalidInput { .. })
    ));
    assert_eq!(
        s.stock(&mut conn, "big").await.unwrap(),
        Inventory::MAX_QUANTITY - 1
    );
}

#[tokio::test]
async fn bad_input_is_refused_before_any_round_trip() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let inventory = Inventory::new("t:inv").unwrap();
    let a = inventory.store("a").unwrap();
    let b = inventory.store("b").unwrap();
    a.set(&mut conn, "x", 10).await.unwrap();
    b.set(&mut conn, "x", 10).await.unwrap();
    let _: () = server.cmd(&["CONFIG", "RESETSTAT"]).await;

    let too_big = Inventory::MAX_QUANTITY + 1;
    assert!(matches!(
        a.decrement(&mut conn, "x", 0, None).await,
        Err(Error::InvalidInput {
            what: "quantity",
            ..
        })
    ));
    assert!(matches!(
        a.decrement(&mut conn, "x", too_big, None).await,
        Err(Error::InvalidInput {
            what: "quantity",
            ..
        })
    ));
    assert!(matches!(
        a.restock(&mut conn, "x", 0, Some("r")).await,
        Err(Error::InvalidInput {
            what: "quantity",
            ..
        })
    ));
    assert!(matches!(
        a.set(&mut conn, "x", too_big).await,
        Err(Error::InvalidInput { what: "stock", .. })
    ));
    assert!(matches!(
        a.decrement(&mut conn, "", 1, None).await,
        Err(Error::InvalidInput { what: "sku", .. })
    ));
    assert!(matches!(
        a.decrement(&mut conn, "x", 1, Some(&"r".repeat(300))).await,
        Err(Error::InvalidInput {
            what: "request id",
            ..
        })
    ));
    assert!(a.line("x", 0).is_err());
    assert!(a.line(&"s".repeat(300), 1).is_err());

    // Multi-SKU: crossing stores (slots) is a typed error, as are empty and repeated lines.
    let cross = [a.line("x", 1).unwrap(), b.line("x", 1).unwrap()];
    let err = inventory.place_order(&mut conn, &cross, Some("o1")).await;
    assert!(matches!(err, Err(Error::CrossSlot { .. })), "{err:?}");
    assert!(matches!(
        inventory.place_order(&mut conn, &[], None).await,
        Err(Error::InvalidInput { what: "order", .. })
    ));
    let twice = [a.line("x", 1).unwrap(), a.line("x", 2).unwrap()];
    assert!(matches!(
        inventory.place_order(&mut conn, &twice, None).await,
        Err(Error::InvalidInput { what: "order", .. })
    ));
    let many: Vec<_> = (0..=Inventory::MAX_ORDER_LINES)
        .map(|i| a.line(&format!("s{i}"), 1).unwrap())
        .collect();
    assert!(matches!(
        inventory.place_order(&mut conn, &many, None).await,
        Err(Error::InvalidInput { what: "order", .. })
    ));
    let other = Inventory::new("t:other").unwrap();
    assert!(matches!(
        other
            .place_order(&mut conn, &[a.line("x", 1).unwrap()], None)
            .await,
        Err(Error::InvalidInput { what: "order", .. })
    ));

    assert_eq!(script_calls(&server).await, 0, "nothing was sent");
    assert_eq!(a.stock(&mut conn, "x").await.unwrap(), 10);
    assert_eq!(b.stock(&mut conn, "x").await.unwrap(), 10);
    let records: Vec<String> = server.cmd(&["KEYS", "t:inv:*:req:*"]).await;
    assert!(records.is_empty(), "{records:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_buyers_on_four_connections_sell_exactly_the_stock() {
    let server = RedisServer::spawn().await;
    let s = store("flash-sale");
    let mut conns = conns(&server, 4).await;
    s.set(&mut conns[0], "hot", 100).await.unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let reader = spawn_reader(&server, vec![s.key("hot").unwrap()], stop.clone()).await;

    let mut buyers = Vec::new();
    for i in 0..1000 {
        let mut conn = conns[i % 4].clone();
        let s = s.clone();
        buyers.push(tokio::spawn(async move {
            s.decrement(&mut conn, "hot", 1, None).await.unwrap()
        }));
    }
    let mut remaining_seen = HashSet::new();
    let mut insufficient = 0;
    for buyer in buyers {
        match buyer.await.unwrap() {
            Decrement::Decremented { remaining } => {
                assert!(
                    remaining_seen.insert(remaining),
                    "{remaining} reported twice"
                );
            }
            Decrement::Insufficient { available } => {
                assert_eq!(available, 0);
                insufficient += 1;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    reader.await.unwrap();

    assert_eq!(remaining_seen.len(), 100, "exactly 100 buyers succeed");
    assert_eq!(remaining_seen, (0..100).collect::<HashSet<u64>>());
    assert_eq!(insufficient, 900);
    assert_eq!(s.stock(&mut conns[0], "hot").await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_overlapping_orders_conserve_every_sku() {
    const SKUS: [&str; 6] = ["a", "b", "c", "d", "e", "f"];
    const INITIAL: u64 = 60;
    let server = RedisServer::spawn().await;
    let inventory = Inventory::new("t:inv").unwrap();
    let s = inventory.store("multi").unwrap();
    let mut conns = conns(&server, 4).await;
    for sku in SKUS {
        s.set(&mut conns[0], sku, INITIAL).await.unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let keys = SKUS.iter().map(|k| s.key(k).unwrap()).collect();
    let reader = spawn_reader(&server, keys, stop.clone()).await;

    let mut rng = StdRng::seed_from_u64(7);
    let mut orders = Vec::new();
    for i in 0..400 {
        let n = rng.random_range(2..=4);
        let mut picked: Vec<usize> = (0..SKUS.len()).collect();
        for j in 0..n {
            let k = rng.random_range(j..SKUS.len());
            picked.swap(j, k);
        }
        let lines: Vec<(usize, u64)> = picked[..n]
            .iter()
            .map(|&k| (k, rng.random_range(1..=3)))
            .collect();
        let order_lines: Vec<_> = lines
            .iter()
            .map(|&(k, q)| s.line(SKUS[k], q).unwrap())
            .collect();
        let mut conn = conns[i % 4].clone();
        let inventory = inventory.clone();
        orders.push(tokio::spawn(async move {
            let outcome = inventory
                .place_order(&mut conn, &order_lines, Some(&format!("order-{i}")))
                .await
                .unwrap();
            (lines, outcome)
        }));
    }
    let mut sold = [0u64; SKUS.len()];
    let (mut placed, mut refused) = (0, 0);
    for order in orders {
        let (lines, outcome) = order.await.unwrap();
        match outcome {
            Order::Placed { remaining } => {
                assert_eq!(remaining.len(), lines.len());
                for (k, q) in lines {
                    sold[k] += q;
                }
                placed += 1;
            }
            Order::Insufficient { short } => {
                assert!(!short.is_empty());
                for Shortage {
                    requested,
                    available,
                    ..
                } in short
                {
                    assert!(available < requested);
                }
                refused += 1;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    reader.await.unwrap();
    assert!(
        placed > 0 && refused > 0,
        "placed {placed}, refused {refused}"
    );
    for (k, sku) in SKUS.iter().enumerate() {
        let left = s.stock(&mut conns[0], sku).await.unwrap();
        assert_eq!(
            sold[k] + left,
            INITIAL,
            "sku {sku}: sold {} left {left}",
            sold[k]
        );
    }
}

#[tokio::test]
async fn short_order_changes_nothing_and_names_the_short_skus() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let inventory = Inventory::new("t:inv").unwrap();
    let s = inventory.store("s").unwrap();
    for (sku, stock) in [("a", 5), ("b", 1), ("c", 0)] {
        s.set(&mut conn, sku, stock).await.unwrap();
    }
    let lines = [
        s.line("a", 2).unwrap(),
        s.line("b", 2).unwrap(),
        s.line("c", 1).unwrap(),
    ];
    let outcome = inventory
        .place_order(&mut conn, &lines, None)
        .await
        .unwrap();
    let Order::Insufficient { short } = outcome else {
        panic!("{outcome:?}")
    };
    let short: Vec<_> = short
        .iter()
        .map(|s| (s.sku.as_str(), s.requested, s.available))
        .collect();
    assert_eq!(short, [("b", 2, 1), ("c", 1, 0)]);
    for (sku, stock) in [("a", 5), ("b", 1), ("c", 0)] {
        assert_eq!(s.stock(&mut conn, sku).await.unwrap(), stock);
    }
    let ok = [s.line("a", 5).unwrap(), s.line("b", 1).unwrap()];
    assert_eq!(
        inventory.place_order(&mut conn, &ok, None).await.unwrap(),
        Order::Placed {
            remaining: vec![0, 0]
        }
    );
    // An unknown SKU in an order: typed error naming it, nothing changed.
    s.set(&mut conn, "a", 3).await.unwrap();
    let unknown = [s.line("a", 1).unwrap(), s.line("ghost", 1).unwrap()];
    let err = inventory.place_order(&mut conn, &unknown, None).await;
    assert!(
        matches!(&err, Err(Error::NotFound { detail, .. }) if detail == "ghost"),
        "{err:?}"
    );
    assert_eq!(s.stock(&mut conn, "a").await.unwrap(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_request_id_deducts_once_sequentially_and_concurrently() {
    let server = RedisServer::spawn().await;
    let inventory = Inventory::new("t:inv").unwrap();
    let s = inventory.store("idem").unwrap();
    let conns = conns(&server, 4).await;
    let conn = &mut conns[0].clone();
    s.set(conn, "a", 50).await.unwrap();

    // Sequential: the first applies, the nine retries return it.
    let first = s.decrement(conn, "a", 2, Some("order-1")).await.unwrap();
    assert_eq!(first, Decrement::Decremented { remaining: 48 });
    for _ in 0..9 {
        assert_eq!(
            s.decrement(conn, "a", 2, Some("order-1"))
                .await
                .unwrap()
                .original(),
            Some(&first.clone())
        );
    }
    assert_eq!(s.stock(conn, "a").await.unwrap(), 48);

    // Concurrent: ten copies of one request over four connections; exactly one applies.
    let mut copies = Vec::new();
    for i in 0..10 {
        let mut c = conns[i % 4].clone();
        let s = s.clone();
        copies.push(tokio::spawn(async move {
            s.decrement(&mut c, "a", 3, Some("order-2")).await.unwrap()
        }));
    }
    let mut applied = Vec::new();
    let mut duplicates = Vec::new();
    for copy in copies {
        match copy.await.unwrap() {
            Decrement::Duplicate { original } => duplicates.push(original.into_inner()),
            other => applied.push(other),
        }
    }
    assert_eq!(applied, [Decrement::Decremented { remaining: 45 }]);
    assert_eq!(duplicates.len(), 9);
    assert!(duplicates.iter().all(|d| d == &applied[0]));
    assert_eq!(s.stock(conn, "a").await.unwrap(), 45);

    // Orders and restocks are idempotent too.
    let lines = [s.line("a", 5).unwrap()];
    let placed = inventory
        .place_order(conn, &lines, Some("order-3"))
        .await
        .unwrap();
    assert_eq!(
        placed,
        Order::Placed {
            remaining: vec![40]
        }
    );
    for _ in 0..9 {
        let again = inventory
            .place_order(conn, &lines, Some("order-3"))
            .await
            .unwrap();
        assert_eq!(again.original(), Some(&placed.clone()));
    }
    let restocked = s.restock(conn, "a", 10, Some("delivery-1")).await.unwrap();
    assert_eq!(restocked, Restock::Restocked { stock: 50 });
    let again = s.restock(conn, "a", 10, Some("delivery-1")).await.unwrap();
    assert_eq!(again.original(), Some(&restocked));
    assert_eq!(s.stock(conn, "a").await.unwrap(), 50);

    // An insufficient outcome is remembered too: a retry after a restock still answers it.
    let short = s.decrement(conn, "a", 60, Some("order-4")).await.unwrap();
    assert_eq!(short, Decrement::Insufficient { available: 50 });
    s.restock(conn, "a", 20, None).await.unwrap();
    assert_eq!(
        s.decrement(conn, "a", 60, Some("order-4"))
            .await
            .unwrap()
            .original(),
        Some(&short)
    );
    assert_eq!(s.stock(conn, "a").await.unwrap(), 70);

    // The id reused for a different request: an outcome, nothing changed.
    assert_eq!(
        s.decrement(conn, "a", 3, Some("order-1")).await.unwrap(),
        Decrement::IdReused
    );
    assert_eq!(
        s.restock(conn, "a", 2, Some("order-1")).await.unwrap(),
        Restock::IdReused
    );
    assert_eq!(
        inventory
            .place_order(conn, &lines, Some("order-1"))
            .await
            .unwrap(),
        Order::IdReused
    );
    assert_eq!(s.stock(conn, "a").await.unwrap(), 70);

    // The record lives in the store's slot and expires after the retention.
    let record = s.request_key("order-1").unwrap();
    let ttl: i64 = server.cmd(&["PTTL", &record]).await;
    let retention = Inventory::DEFAULT_RETENTION.as_millis() as i64;
    assert!(ttl > retention - 60_000 && ttl <= retention, "{ttl}");
    assert_eq!(
        redis::cluster_routing::Slot::for_key(record.as_bytes()),
        redis::cluster_routing::Slot::for_key(s.key("a").unwrap().as_bytes())
    );
}

#[tokio::test]
async fn a_retry_after_the_retention_is_a_new_request() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let s = Inventory::builder()
        .prefix("t:inv")
        .retention(Duration::from_millis(100))
        .build()
        .unwrap()
        .store("short-memory")
        .unwrap();
    s.set(&mut conn, "a", 10).await.unwrap();
    s.decrement(&mut conn, "a", 1, Some("r")).await.unwrap();
    let record = s.request_key("r").unwrap();
    // Wait (generously) until Redis itself has dropped the record.
    for _ in 0..100 {
        let exists: u64 = server.cmd(&["EXISTS", &record]).await;
        if exists == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        s.decrement(&mut conn, "a", 1, Some("r")).await.unwrap(),
        Decrement::Decremented { remaining: 8 }
    );
    assert!(Inventory::builder()
        .prefix("t")
        .retention(Duration::ZERO)
        .build()
        .is_err());
    assert!(Inventory::builder()
        .prefix("t")
        .retention(Inventory::MAX_RETENTION + Duration::from_secs(1))
        .build()
        .is_err());
}

#[tokio::test]
async fn corrupt_or_wrong_type_stock_is_a_typed_error_and_left_untouched() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let inventory = Inventory::new("t:inv").unwrap();
    let s = inventory.store("bad").unwrap();
    s.set(&mut conn, "good", 5).await.unwrap();
    let key = s.key("x").unwrap();
    for corrupt in ["12abc", "-5", "1.5", "", " 3", "123456789012345"] {
        let _: () = server.cmd(&["SET", &key, corrupt]).await;
        let results = [
            s.stock(&mut conn, "x").await.map(|_| ()),
            s.decrement(&mut conn, "x", 1, Some("r")).await.map(|_| ()),
            s.restock(&mut conn, "x", 1, Some("r")).await.map(|_| ()),
            inventory
                .place_order(
                    &mut conn,
                    &[s.line("good", 1).unwrap(), s.line("x", 1).unwrap()],
                    Some("r"),
                )
                .await
                .map(|_| ()),
        ];
        for result in results {
            assert!(
                matches!(&result, Err(Error::CorruptData { detail, .. }) if detail.contains("line")),
                "{corrupt:?}: {result:?}"
            );
        }
        assert_eq!(raw_get(&server, &key).await.as_deref(), Some(corrupt));
        assert_eq!(s.stock(&mut conn, "good").await.unwrap(), 5);
        let exists: u64 = server.cmd(&["EXISTS", &s.request_key("r").unwrap()]).await;
        assert_eq!(exists, 0);
    }
    // `set` repairs it.
    s.set(&mut conn, "x", 4).await.unwrap();
    assert_eq!(s.stock(&mut conn, "x").await.unwrap(), 4);

    // A key of another type: WrongType from every operation, the list untouched.
    let list = s.key("list").unwrap();
    let _: () = server.cmd(&["RPUSH", &list, "1"]).await;
    let results = [
        s.stock(&mut conn, "list").await.map(|_| ()),
        s.set(&mut conn, "list", 3).await,
        s.decrement(&mut conn, "list", 1, None).await.map(|_| ()),
        s.restock(&mut conn, "list", 1, None).await.map(|_| ()),
    ];
    for result in results {
        assert!(matches!(result, Err(Error::WrongType { .. })), "{result:?}");
    }
    let len: u64 = server.cmd(&["LLEN", &list]).await;
    assert_eq!(len, 1);
    // A request record key of another type is refused the same way.
    let _: () = server
        .cmd(&["RPUSH", &s.request_key("listreq").unwrap(), "1"])
        .await;
    assert!(matches!(
        s.decrement(&mut conn, "x", 1, Some("listreq")).await,
        Err(Error::WrongType { .. })
    ));
    assert_eq!(s.stock(&mut conn, "x").await.unwrap(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn works_on_a_cluster_and_refuses_cross_slot_orders() {
    let cluster = RedisCluster::spawn().await;
    let mut conn = cluster.conn().await;
    let inventory = Inventory::new("t:inv").unwrap();
    // Stores spread over the primaries.
    let stores: Vec<Store> = (0..6)
        .map(|i| inventory.store(&format!("w{i}")).unwrap())
        .collect();
    let mut nodes = HashSet::new();
    for s in &stores {
        nodes.insert(cluster.primary_for(&s.key("a").unwrap()).await.port());
    }
    assert!(nodes.len() > 1, "stores should land on several primaries");

    for s in &stores {
        for sku in ["a", "b", "c", "d", "e"] {
            s.set(&mut conn, sku, 20).await.unwrap();
        }
        assert_eq!(
            s.decrement(&mut conn, "a", 5, Some("o1")).await.unwrap(),
            Decrement::Decremented { remaining: 15 }
        );
        assert!(matches!(
            s.decrement(&mut conn, "a", 5, Some("o1")).await.unwrap(),
            Decrement::Duplicate { .. }
        ));
        let lines: Vec<_> = ["a", "b", "c", "d", "e"]
            .iter()
            .map(|sku| s.line(sku, 2).unwrap())
            .collect();
        assert_eq!(
            inventory
                .place_order(&mut conn, &lines, Some("o2"))
                .await
                .unwrap(),
            Order::Placed {
                remaining: vec![13, 18, 18, 18, 18]
            }
        );
        assert_eq!(
            s.restock(&mut conn, "a", 7, None).await.unwrap().stock(),
            Some(20)
        );
    }

    // Concurrent buyers of one store on the cluster connection.
    let s = stores[0].clone();
    s.set(&mut conn, "hot", 30).await.unwrap();
    let mut buyers = Vec::new();
    for _ in 0..100 {
        let mut c = conn.clone();
        let s = s.clone();
        buyers.push(tokio::spawn(async move {
            s.decrement(&mut c, "hot", 1, None)
                .await
                .unwrap()
                .is_applied()
        }));
    }
    let mut sold = 0;
    for b in buyers {
        sold += u64::from(b.await.unwrap());
    }
    assert_eq!(sold, 30);
    assert_eq!(s.stock(&mut conn, "hot").await.unwrap(), 0);

    // Lines of two stores: refused before sending, nothing changed.
    let cross = [
        stores[0].line("b", 1).unwrap(),
        stores[1].line("b", 1).unwrap(),
    ];
    let err = inventory.place_order(&mut conn, &cross, Some("x")).await;
    assert!(matches!(err, Err(Error::CrossSlot { .. })), "{err:?}");
    assert_eq!(stores[0].stock(&mut conn, "b").await.unwrap(), 18);
    assert_eq!(stores[1].stock(&mut conn, "b").await.unwrap(), 18);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn script_flush_mid_run_loses_nothing_and_applies_nothing_twice() {
    const INITIAL: u64 = 500;
    const REQUESTS: usize = 800;
    let server = RedisServer::spawn().await;
    let inventory = Inventory::new("t:inv").unwrap();
    let s = inventory.store("flush").unwrap();
    let mut conns = conns(&server, 4).await;
    s.set(&mut conns[0], "a", INITIAL).await.unwrap();
    s.set(&mut conns[0], "b", INITIAL).await.unwrap();

    inventory.manager().preload(&mut conns[0]).await.unwrap();
    let fallbacks_before = inventory.manager().stats().noscript_fallbacks;

    // Flushes the script cache every millisecond until the run ends; the run starts after the
    // first flush.
    let stop = Arc::new(AtomicBool::new(false));
    let flushes = Arc::new(AtomicU64::new(0));
    let (first_flush, flushed) = tokio::sync::oneshot::channel();
    let flusher = {
        let client = server.client();
        let (stop, flushes) = (stop.clone(), flushes.clone());
        tokio::spawn(async move {
            let mut conn = client.get_multiplexed_async_connection().await.unwrap();
            let mut first_flush = Some(first_flush);
            while !stop.load(Ordering::Relaxed) {
                let _: () = redis::cmd("SCRIPT")
                    .arg("FLUSH")
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                flushes.fetch_add(1, Ordering::Relaxed);
                if let Some(tx) = first_flush.take() {
                    let _ = tx.send(());
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    };
    flushed.await.unwrap();

    // Every request carries a unique id; half are single decrements, half 2-SKU orders.
    let mut tasks = Vec::new();
    for i in 0..REQUESTS {
        let mut conn = conns[i % 4].clone();
        let (inventory, s) = (inventory.clone(), s.clone());
        tasks.push(tokio::spawn(async move {
            let id = format!("req-{i}");
            if i % 2 == 0 {
                let d = s.decrement(&mut conn, "a", 1, Some(&id)).await.unwrap();
                (u64::from(d.is_applied()), 0)
            } else {
                let lines = [s.line("a", 1).unwrap(), s.line("b", 1).unwrap()];
                let o = inventory
                    .place_order(&mut conn, &lines, Some(&id))
                    .await
                    .unwrap();
                let n = u64::from(o.is_applied());
                (n, n)
            }
        }));
    }
    let (mut sold_a, mut sold_b) = (0, 0);
    for task in tasks {
        let (a, b) = task.await.unwrap();
        sold_a += a;
        sold_b += b;
    }
    stop.store(true, Ordering::Relaxed);
    flusher.await.unwrap();
    let mut conn = conns[0].clone();
    let fallbacks = inventory.manager().stats().noscript_fallbacks - fallbacks_before;
    assert!(fallbacks > 0, "the run must actually have hit NOSCRIPT");
    eprintln!(
        "{} flushes, {fallbacks} NOSCRIPT fallbacks during the run",
        flushes.load(Ordering::Relaxed)
    );
    let left_a = s.stock(&mut conn, "a").await.unwrap();
    let left_b = s.stock(&mut conn, "b").await.unwrap();
    assert_eq!(sold_a + left_a, INITIAL);
    assert_eq!(sold_b + left_b, INITIAL);

    // Each request id was applied exactly once: all are recorded, and replaying every one of
    // them changes nothing.
    for i in 0..REQUESTS {
        let id = format!("req-{i}");
        if i % 2 == 0 {
            let d = s.decrement(&mut conn, "a", 1, Some(&id)).await.unwrap();
            assert!(matches!(d, Decrement::Duplicate { .. }), "{id}: {d:?}");
        } else {
            let lines = [s.line("a", 1).unwrap(), s.line("b", 1).unwrap()];
            let o = inventory
                .place_order(&mut conn, &lines, Some(&id))
                .await
                .unwrap();
            assert!(matches!(o, Order::Duplicate { .. }), "{id}: {o:?}");
        }
    }
    assert_eq!(s.stock(&mut conn, "a").await.unwrap(), left_a);
    assert_eq!(s.stock(&mut conn, "b").await.unwrap(), left_b);
}

#[tokio::test]
async fn works_over_a_connection_manager() {
    let server = RedisServer::spawn().await;
    let mut conn = redis::aio::ConnectionManager::new(server.client())
        .await
        .unwrap();
    let inventory = Inventory::new("t:inv").unwrap();
    let s = inventory.store("cm").unwrap();
    s.set(&mut conn, "a", 3).await.unwrap();
    assert_eq!(
        s.decrement(&mut conn, "a", 2, Some("o")).await.unwrap(),
        Decrement::Decremented { remaining: 1 }
    );
    let lines = [s.line("a", 2).unwrap()];
    let outcome = inventory
        .place_order(&mut conn, &lines, None)
        .await
        .unwrap();
    assert!(matches!(outcome, Order::Insufficient { .. }), "{outcome:?}");
    assert_eq!(s.stock(&mut conn, "a").await.unwrap(), 1);
}

// ---------------------------------------------------------------------------------------------
// Reservations
// ---------------------------------------------------------------------------------------------

const MINUTE: Duration = Duration::from_secs(60);

/// The live reservations of `sku` as stored: (id, quantity), without the `{next}` field.
async fn raw_reservations(server: &RedisServer, s: &Store, sku: &str) -> Vec<(String, u64)> {
    let all: Vec<String> = server
        .cmd(&["HGETALL", &s.reservation_key(sku).unwrap()])
        .await;
    let mut out: Vec<(String, u64)> = all
        .chunks(2)
        .filter(|kv| kv[0] != "{next}")
        .map(|kv| {
            let qty = kv[1].split(' ').next().unwrap().parse().unwrap();
            (kv[0].clone(), qty)
        })
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn reserve_commit_cancel_and_unknown_ids() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let s = store("resv");
    s.set(&mut conn, "a", 10).await.unwrap();

    // Reserve deducts at once.
    let r = s
        .reserve(&mut conn, "a", 3, MINUTE, "cart-1")
        .await
        .unwrap();
    assert_eq!(
        r,
        Reserve::Reserved {
            remaining: 7,
            expires_in: MINUTE
        }
    );
    assert_eq!(s.stock(&mut conn, "a").await.unwrap(), 7);
    assert_eq!(
        raw_reservations(&server, &s, "a").await,
        vec![("cart-1".to_owned(), 3)]
    );
    // The same id again: the existing hold, nothing deducted twice.
    match s
        .reserve(&mut conn, "a", 3, MINUTE, "cart-1")
        .await
        .unwrap()
    {
        Reserve::AlreadyReserved {
            quantity: 3,
            expires_in,
        } => assert!(expires_in <= MINUTE && expires_in > MINUTE / 2),
        other => panic!("{other:?}"),
    }
    assert_eq!(s.stock(&mut conn, "a").await.unwrap(), 7);
    // More than the stock: nothing changes.
    assert_eq!(
        s.reserve(&mut conn, "a", 8, MINUTE, "cart-2")
            .await
            .unwrap(),
        Reserve::Insufficient { available: 7 }
    );
    assert_eq!(raw_reservations(&server, &s, "a").await.len(), 1);

    // Commit keeps the units deducted and drops the hold.
    assert_eq!(
        s.commit(&mut conn, "a", "cart-1").await.unwrap(),
        Commit::Committed { quantity: 3 }
    );
    assert_eq!(s.stock(&mut conn, "a").await.unwrap(), 7);
    assert!(raw_reservations(&server, &s, "a").await.is_empty());
    let exists: u64 = server
        .cmd(&[
            "EXISTS",
            &s.reservation_key("a").unwrap(),
            &s.reservation_expiry_key("a").unwrap(),
        ])
        .await;
    assert_eq!(exists, 0, "an empty reservation hash is deleted");
    // A retried commit, or a cancel after the commit: told what happened, nothing changes.
    assert_eq!(
        s.commit(&mut conn, "a", "cart-1").await.unwrap(),
        Commit::AlreadyCommitted { quantity: 3 }
    );
    assert_eq!(
        s.cancel(&mut conn, "a", "cart-1").await.unwrap(),
        Cancel::AlreadyCommitted { quantity: 3 }
    );
    assert_eq!(s.stock(&mut conn, "a").await.unwrap(), 7);

    // Cancel returns the units.
    s.reserve(&mut conn, "a", 5, MINUTE, "cart-3")
        .await
        .unwrap();
    s.reserve(&mut conn, "a", 1, MINUTE, "cart-4")
        .await
        .unwrap();
    assert_eq!(s.stock(&mut conn, "a").await.unwrap(), 1);
    assert_eq!(
        s.cancel(&mut conn, "a", "cart-3").await.unwrap(),
        Cancel::Cancelled {
            quantity: 5,
            stock: 6
        }
    );
    assert_eq!(
        raw_get(&server, &s.key("a").unwrap()).await.as_deref(),
        Some("6")
    );
    assert_eq!(
        raw_reservations(&server, &s, "a").await,
        vec![("cart-4".to_owned(), 1)]
    );
    // A retried cancel, or a commit after the cancel: nothing returned twice.
    assert_eq!(
        s.cancel(&mut conn, "a", "cart-3").await.unwrap(),
        Cancel::AlreadyCancelled { quantity: 5 }
    );
    assert_eq!(
        s.commit(&mut conn, "a", "cart-3").await.unwrap(),
        Commit::AlreadyCancelled { quantity: 5 }
    );
    assert_eq!(s.stock(&mut conn, "a").await.unwrap(), 6);
    // Unknown ids change nothing.
    assert_eq!(
        s.commit(&mut conn, "a", "never").await.unwrap(),
        Commit::Unknown
    );
    assert_eq!(
        s.cancel(&mut conn, "a", "never").await.unwrap(),
        Cancel::Unknown
    );
    assert_eq!(s.stock(&mut conn, "a").await.unwrap(), 6);
    assert_eq!(raw_reservations(&server, &s, "a").await.len(), 1);
    // Ids are escaped: braces never leak a second hash tag.
    s.reserve(&mut conn, "a", 1, MINUTE, "x{y}").await.unwrap();
    assert_eq!(
        s.cancel(&mut conn, "a", "x{y}").await.unwrap(),
        Cancel::Cancelled {
            quantity: 1,
            stock: 6
        }
    );

    // Unknown SKU: typed error, nothing created.
    for result in [
        s.reserve(&mut conn, "nope", 1, MINUTE, "c")
            .await
            .map(|_| ()),
        s.commit(&mut conn, "nope", "c").await.map(|_| ()),
        s.cancel(&mut conn, "nope", "c").await.map(|_| ()),
    ] {
        assert!(
            matches!(&result, Err(Error::NotFound { what: "sku", .. })),
            "{result:?}"
        );
    }
    let exists: u64 = server
        .cmd(&[
            "EXISTS",
            &s.key("nope").unwrap(),
            &s.reservation_key("nope").unwrap(),
        ])
        .await;
    assert_eq!(exists, 0);

    // Bad input: refused before any round trip, nothing written.
    let calls_before = script_calls(&server).await;
    let long = "x".repeat(300);
    for result in [
        s.reserve(&mut conn, "a", 0, MINUTE, "c").await,
        s.reserve(&mut conn, "a", Inventory::MAX_QUANTITY + 1, MINUTE, "c")
            .await,
        s.reserve(&mut conn, "a", 1, Duration::ZERO, "c").await,
        s.reserve(&mut conn, "a", 1, Duration::from_micros(999), "c")
            .await,
        s.reserve(
            &mut conn,
            "a",
            1,
            Inventory::MAX_RESERVATION_TTL + Duration::from_millis(1),
            "c",
        )
        .await,
        s.reserve(&mut conn, "a", 1, MINUTE, "").await,
        s.reserve(&mut conn, "a", 1, MINUTE, &long).await,
        s.reserve(&mut conn, "", 1, MINUTE, "c").await,
    ] {
        assert!(
            matches!(result, Err(Error::InvalidInput { .. })),
            "{result:?}"
        );
    }
    for result in [
        s.commit(&mut conn, "a", "").await.map(|_| ()),
        s.cancel(&mut conn, "a", &long).await.map(|_| ()),
    ] {
        assert!(
            matches!(result, Err(Error::InvalidInput { .. })),
            "{result:?}"
        );
    }
    assert_eq!(script_calls(&server).await, calls_before);
    assert_eq!(s.stock(&mut conn, "a").await.unwrap(), 6);
    assert_eq!(raw_reservations(&server, &s, "a").await.len(), 1);

    // The script checks its arguments too: a raw call with a bad TTL writes nothing.
    let script = fixtures::script("inventory_reserve", 2);
    let err: redis::RedisResult<redis::Value> = redis::cmd("EVAL")
        .arg(script.source())
        .arg(4)
        .arg(s.key("a").unwrap())
        .arg(s.reservation_key("a").unwrap())
        .arg("t:inv:{resv}:raw-settlement")
        .arg(s.reservation_expiry_key("a").unwrap())
        .arg("reserve")
        .arg("raw")
        .arg(1)
        .arg(0)
        .arg(10)
        .query_async(&mut conn)
        .await;
    assert!(format!("{err:?}").contains("REDKIT_INPUT"), "{err:?}");
    assert_eq!(s.stock(&mut conn, "a").await.unwrap(), 6);

    // A corrupt reservation is a typed error and changes nothing.
    let rkey = s.reservation_key("a").unwrap();
    let _: u64 = server.cmd(&["HSET", &rkey, "bad", "x y"]).await;
    let zkey = s.reservation_expiry_key("a").unwrap();
    let _: u64 = server.cmd(&["ZADD", &zkey, "0", "bad"]).await;
    let err = s.decrement(&mut conn, "a", 1, None).await;
    assert!(matches!(err, Err(Error::CorruptData { .. })), "{err:?}");
    assert_eq!(
        raw_get(&server, &s.key("a").unwrap()).await.as_deref(),
        Some("6")
    );
}

#[tokio::test]
async fn a_full_sku_refuses_more_reservations() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let s = store("full");
    s.set(&mut conn, "a", 20_000).await.unwrap();
    // Fill the hash to the limit directly (far-future expiries), then ask for one more.
    let rkey = s.reservation_key("a").unwrap();
    let zkey = s.reservation_expiry_key("a").unwrap();
    let limit = Inventory::MAX_RESERVATIONS_PER_SKU;
    let far = "99999999999999";
    let mut fields: Vec<String> = vec!["HSET".into(), rkey.clone()];
    let mut members: Vec<String> = vec!["ZADD".into(), zkey.clone()];
    for i in 0..limit {
        fields.push(format!("r{i}"));
        fields.push(format!("1 {far}"));
        members.push(far.into());
        members.push(format!("r{i}"));
    }
    let args: Vec<&str> = fields.iter().map(String::as_str).collect();
    let _: u64 = server.cmd(&args).await;
    let args: Vec<&str> = members.iter().map(String::as_str).collect();
    let _: u64 = server.cmd(&args).await;
    assert_eq!(
        s.reserve(&mut conn, "a", 1, MINUTE, "one-more")
            .await
            .unwrap(),
        Reserve::Full { limit }
    );
    assert_eq!(s.stock(&mut conn, "a").await.unwrap(), 20_000);
    // One cancelled: room for one again.
    assert!(s.cancel(&mut conn, "a", "r0").await.unwrap().is_cancelled());
    assert!(s
        .reserve(&mut conn, "a", 1, MINUTE, "one-more")
        .await
        .unwrap()
        .is_held());
}

#[tokio::test]
async fn an_expired_reservation_returns_to_stock_lazily_and_only_once() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let s = store("expiry");
    let short = Duration::from_millis(100);
    let margin = Duration::from_millis(600);

    // The next decrement sees the returned units.
    s.set(&mut conn, "a", 10).await.unwrap();
    s.reserve(&mut conn, "a", 4, short, "gone").await.unwrap();
    s.reserve(&mut conn, "a", 3, MINUTE, "kept").await.unwrap();
    tokio::time::sleep(margin).await;
    // Nothing ran in between: the raw stock still lacks the expired units.
    assert_eq!(
        raw_get(&server, &s.key("a").unwrap()).await.as_deref(),
        Some("3")
    );
    assert_eq!(
        s.decrement(&mut conn, "a", 7, None).await.unwrap(),
        Decrement::Decremented { remaining: 0 },
        "3 in stock + 4 expired = 7 sellable"
    );
    assert_eq!(
        raw_reservations(&server, &s, "a").await,
        vec![("kept".to_owned(), 3)]
    );
    for _ in 0..3 {
        assert_eq!(
            s.stock(&mut conn, "a").await.unwrap(),
            0,
            "returned once only"
        );
    }
    assert_eq!(
        s.commit(&mut conn, "a", "gone").await.unwrap(),
        Commit::Unknown
    );
    assert_eq!(
        s.cancel(&mut conn, "a", "gone").await.unwrap(),
        Cancel::Unknown
    );
    assert_eq!(s.stock(&mut conn, "a").await.unwrap(), 0);
    assert!(s
        .commit(&mut conn, "a", "kept")
        .await
        .unwrap()
        .is_committed());
    // A settled id stays settled: a reserve under it holds nothing (no second sale).
    s.restock(&mut conn, "a", 2, None).await.unwrap();
    assert_eq!(
        s.reserve(&mut conn, "a", 2, short, "kept").await.unwrap(),
        Reserve::AlreadyCommitted { quantity: 3 }
    );
    assert_eq!(
        s.commit(&mut conn, "a", "kept").await.unwrap(),
        Commit::AlreadyCommitted { quantity: 3 }
    );
    assert_eq!(s.stock(&mut conn, "a").await.unwrap(), 2);

    // A stock read returns them too, once.
    s.set(&mut conn, "b", 5).await.unwrap();
    s.reserve(&mut conn, "b", 2, short, "r1").await.unwrap();
    s.reserve(&mut conn, "b", 1, short, "r2").await.unwrap();
    assert_eq!(s.stock(&mut conn, "b").await.unwrap(), 2);
    tokio::time::sleep(margin).await;
    for _ in 0..3 {
        assert_eq!(s.stock(&mut conn, "b").await.unwrap(), 5);
    }
    let exists: u64 = server
        .cmd(&[
            "EXISTS",
            &s.reservation_key("b").unwrap(),
            &s.reservation_expiry_key("b").unwrap(),
        ])
        .await;
    assert_eq!(exists, 0);

    // An order and a restock see them as well; an expired id may be reserved afresh.
    s.set(&mut conn, "c", 1).await.unwrap();
    s.set(&mut conn, "d", 1).await.unwrap();
    s.reserve(&mut conn, "c", 1, short, "o").await.unwrap();
    s.reserve(&mut conn, "d", 1, short, "o").await.unwrap();
    tokio::time::sleep(margin).await;
    let lines = [s.line("c", 1).unwrap()];
    assert_eq!(
        Inventory::new("t:inv")
            .unwrap()
            .place_order(&mut conn, &lines, Some("ord"))
            .await
            .unwrap(),
        Order::Placed { remaining: vec![0] }
    );
    assert_eq!(
        s.restock(&mut conn, "d", 1, None).await.unwrap(),
        Restock::Restocked { stock: 2 }
    );
    assert!(matches!(
        s.reserve(&mut conn, "d", 2, MINUTE, "o").await.unwrap(),
        Reserve::Reserved { remaining: 0, .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservers_and_buyers_at_once_never_oversell() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let s = store("race");
    s.set(&mut conn, "hot", 100).await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let reader = spawn_reader(&server, vec![s.key("hot").unwrap()], stop.clone()).await;

    let committed = Arc::new(AtomicU64::new(0));
    let sold = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for (i, c) in conns(&server, 4).await.into_iter().enumerate() {
        for j in 0..50u64 {
            let (s, mut c) = (s.clone(), c.clone());
            let (committed, sold) = (committed.clone(), sold.clone());
            tasks.push(tokio::spawn(async move {
                let mut rng = StdRng::seed_from_u64(i as u64 * 1000 + j);
                let qty = rng.random_range(1..=3);
                if j % 3 == 0 {
                    if s.decrement(&mut c, "hot", qty, None)
                        .await
                        .unwrap()
                        .is_applied()
                    {
                        sold.fetch_add(qty, Ordering::Relaxed);
                    }
                    return;
                }
                // Short TTLs expire during the run; long ones outlive it.
                let ttl = if rng.random_bool(0.5) {
                    Duration::from_millis(rng.random_range(1..=50))
                } else {
                    MINUTE
                };
                let id = format!("c{i}-{j}");
                if !s
                    .reserve(&mut c, "hot", qty, ttl, &id)
                    .await
                    .unwrap()
                    .is_held()
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(rng.random_range(0..30))).await;
                match rng.random_range(0..3) {
                    0 => {
                        if let Commit::Committed { quantity } =
                            s.commit(&mut c, "hot", &id).await.unwrap()
                        {
                            assert_eq!(quantity, qty);
                            committed.fetch_add(quantity, Ordering::Relaxed);
                        }
                    }
                    1 => {
                        let _ = s.cancel(&mut c, "hot", &id).await.unwrap();
                    }
                    _ => {} // abandoned: held until it expires
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    assert!(reader.await.unwrap() > 0);

    let committed = committed.load(Ordering::Relaxed);
    let sold = sold.load(Ordering::Relaxed);
    let held = |r: Vec<(String, u64)>| r.iter().map(|(_, q)| q).sum::<u64>();
    // Raw state (no reclaim): stock + every hold (live or expired) + committed + sold.
    let raw_stock: u64 = raw_get(&server, &s.key("hot").unwrap())
        .await
        .unwrap()
        .parse()
        .unwrap();
    let all_holds = held(raw_reservations(&server, &s, "hot").await);
    assert_eq!(raw_stock + all_holds + committed + sold, 100);
    assert!(committed + sold > 0, "some units moved");
    // After every short TTL has passed, a read reclaims the expired holds exactly once.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stock = s.stock(&mut conn, "hot").await.unwrap();
    let live = held(raw_reservations(&server, &s, "hot").await);
    assert_eq!(stock + live + committed + sold, 100);
    assert_eq!(s.stock(&mut conn, "hot").await.unwrap(), stock);
    // Releasing every live hold restores the rest.
    for (id, _) in raw_reservations(&server, &s, "hot").await {
        assert!(s
            .cancel(&mut conn, "hot", &id)
            .await
            .unwrap()
            .is_cancelled());
    }
    assert_eq!(
        s.stock(&mut conn, "hot").await.unwrap(),
        100 - committed - sold
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservations_work_on_a_cluster() {
    let cluster = RedisCluster::spawn().await;
    let mut conn = cluster.conn().await;
    let inventory = Inventory::new("t:inv").unwrap();
    let stores: Vec<Store> = (0..6)
        .map(|i| inventory.store(&format!("w{i}")).unwrap())
        .collect();
    let mut nodes = HashSet::new();
    for s in &stores {
        let node = cluster.primary_for(&s.key("a").unwrap()).await.port();
        assert_eq!(
            cluster
                .primary_for(&s.reservation_key("a").unwrap())
                .await
                .port(),
            node,
            "the reservation key shares the SKU's slot"
        );
        nodes.insert(node);
    }
    assert!(nodes.len() > 1, "stores should land on several primaries");

    for s in &stores {
        s.set(&mut conn, "a", 10).await.unwrap();
        s.set(&mut conn, "b", 10).await.unwrap();
        assert!(s
            .reserve(&mut conn, "a", 2, MINUTE, "keep")
            .await
            .unwrap()
            .is_held());
        assert!(s
            .reserve(&mut conn, "a", 3, MINUTE, "back")
            .await
            .unwrap()
            .is_held());
        assert!(s
            .reserve(&mut conn, "b", 4, Duration::from_millis(50), "lapse")
            .await
            .unwrap()
            .is_held());
        assert_eq!(
            s.commit(&mut conn, "a", "keep").await.unwrap(),
            Commit::Committed { quantity: 2 }
        );
        assert_eq!(
            s.cancel(&mut conn, "a", "back").await.unwrap(),
            Cancel::Cancelled {
                quantity: 3,
                stock: 8
            }
        );
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    for s in &stores {
        let lines = [s.line("a", 8).unwrap(), s.line("b", 10).unwrap()];
        assert_eq!(
            inventory
                .place_order(&mut conn, &lines, None)
                .await
                .unwrap(),
            Order::Placed {
                remaining: vec![0, 0]
            },
            "the lapsed hold of b is back for the order"
        );
        assert_eq!(s.stock(&mut conn, "a").await.unwrap(), 0);
        assert_eq!(s.stock(&mut conn, "b").await.unwrap(), 0);
    }
}

#[tokio::test]
async fn a_store_places_an_order_of_its_own_lines() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let s = store("own-lines");
    s.set(&mut conn, "mug", 3).await.unwrap();
    s.set(&mut conn, "tee", 1).await.unwrap();
    let placed = s
        .place_order(&mut conn, [("mug", 2), ("tee", 1)], Some("o-1"))
        .await
        .unwrap();
    assert_eq!(
        placed,
        Order::Placed {
            remaining: vec![1, 0]
        }
    );
    // A retry with the same id changes nothing and answers the original.
    let again = s
        .place_order(&mut conn, [("mug", 2), ("tee", 1)], Some("o-1"))
        .await
        .unwrap();
    assert!(matches!(again, Order::Duplicate { .. }), "{again:?}");
    // All or nothing: one short line, nothing deducted.
    let short = s
        .place_order(&mut conn, [("mug", 1), ("tee", 1)], None)
        .await
        .unwrap();
    assert!(matches!(short, Order::Insufficient { .. }), "{short:?}");
    assert_eq!(s.stock(&mut conn, "mug").await.unwrap(), 1);
    // Bad lines are refused before anything is sent.
    let bad = s.place_order(&mut conn, [("mug", 0)], None).await;
    assert!(matches!(bad, Err(Error::InvalidInput { .. })), "{bad:?}");
    let empty = s.place_order(&mut conn, [], None).await;
    assert!(
        matches!(empty, Err(Error::InvalidInput { .. })),
        "{empty:?}"
    );
    assert_eq!(s.stock(&mut conn, "mug").await.unwrap(), 1);
}

/// The key prefix follows the lock rule: `DEFAULT_PREFIX` when none is set, a builder setter,
/// a `prefix()` getter; the stock of a SKU is written at `Store::key`.
#[tokio::test]
async fn the_prefix_has_a_default_a_builder_setter_and_a_getter() {
    let defaulted = Inventory::builder().build().unwrap();
    assert_eq!(Inventory::DEFAULT_PREFIX, "redkit:inv");
    assert_eq!(defaulted.prefix(), Inventory::DEFAULT_PREFIX);
    let set = Inventory::builder().prefix("t:pfx").build().unwrap();
    assert_eq!(set.prefix(), "t:pfx");
    assert_eq!(Inventory::new("t:pfx").unwrap().prefix(), "t:pfx");
    // The last setter wins; a bad prefix is refused when built, before any round trip.
    let last = Inventory::builder().prefix("a").prefix("t:last").build();
    assert_eq!(last.unwrap().prefix(), "t:last");
    for bad in ["", "a b", "a{b}"] {
        let built = Inventory::builder().prefix(bad).build();
        assert!(matches!(built, Err(Error::InvalidInput { .. })), "{bad:?}");
    }

    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let (a, b) = (defaulted.store("s").unwrap(), set.store("s").unwrap());
    assert_eq!(a.key("mug").unwrap(), "redkit:inv:{s}:sku:mug");
    assert_eq!(b.key("mug").unwrap(), "t:pfx:{s}:sku:mug");
    a.set(&mut conn, "mug", 3).await.unwrap();
    b.set(&mut conn, "mug", 7).await.unwrap();
    assert_eq!(
        raw_get(&server, "redkit:inv:{s}:sku:mug").await.as_deref(),
        Some("3")
    );
    assert_eq!(
        raw_get(&server, "t:pfx:{s}:sku:mug").await.as_deref(),
        Some("7")
    );
    // An order is placed under the prefix of its lines' inventory only.
    let lines = [b.line("mug", 1).unwrap()];
    assert!(matches!(
        defaulted.place_order(&mut conn, &lines, None).await,
        Err(Error::InvalidInput { .. })
    ));
    let mixed = [a.line("mug", 1).unwrap(), b.line("mug", 1).unwrap()];
    assert!(matches!(
        defaulted.place_order(&mut conn, &mixed, None).await,
        Err(Error::CrossSlot { .. })
    ));
    assert_eq!(a.stock(&mut conn, "mug").await.unwrap(), 3);
    assert_eq!(b.stock(&mut conn, "mug").await.unwrap(), 7);
}
