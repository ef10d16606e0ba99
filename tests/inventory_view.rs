//! Reading a SKU without changing it: `Store::stock_view` (stock, live and expired holds, no
//! reclaim: the keyspace dumped before and after, and served by a read-only replica) and
//! `Store::reservations` (every hold, page by page, ids as given).

mod support;

use std::time::{Duration, SystemTime};

use redkit::inventory::{Inventory, Reserve};
use redkit::{nonzero, Error};
use support::{same_dumps, snapshot, RedisServer, ReplicatedPair};

#[tokio::test]
async fn a_view_counts_live_and_expired_holds_and_reclaims_nothing() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let store = Inventory::new("inv").unwrap().store("s1").unwrap();
    store.set(&mut conn, "sku-1", 10).await.unwrap();
    let short = Duration::from_millis(200);
    for (qty, ttl, id) in [
        (3, short, "cart{1}"),
        (2, Duration::from_secs(3600), "cart-2"),
    ] {
        let r = store
            .reserve(&mut conn, "sku-1", qty, ttl, id)
            .await
            .unwrap();
        assert!(matches!(r, Reserve::Reserved { .. }), "{r:?}");
    }
    let v = store.stock_view(&mut conn, "sku-1").await.unwrap();
    assert_eq!(
        (
            v.available,
            v.reserved,
            v.reservations,
            v.expired,
            v.expired_reservations
        ),
        (5, 5, 2, 0, 0)
    );

    // The short hold expires (the time is what is tested: its TTL plus slack); the view sees
    // it expired and reclaims nothing.
    tokio::time::sleep(short + Duration::from_millis(100)).await;
    let before = snapshot(&mut conn).await;
    let v = store.stock_view(&mut conn, "sku-1").await.unwrap();
    assert_eq!(
        (
            v.available,
            v.reserved,
            v.reservations,
            v.expired,
            v.expired_reservations
        ),
        (5, 2, 1, 3, 1)
    );
    same_dumps(&before, &snapshot(&mut conn).await, "stock_view");

    // Every hold, one per page, ids as given (braces included).
    let mut cursor = 0;
    let mut seen = Vec::new();
    loop {
        let page = store
            .reservations(&mut conn, "sku-1", cursor, nonzero!(1))
            .await
            .unwrap();
        seen.extend(page.reservations);
        match page.next {
            Some(next) => cursor = next,
            None => break,
        }
    }
    seen.sort_by(|a, b| a.id.cmp(&b.id));
    let got: Vec<(&str, u64)> = seen.iter().map(|r| (r.id.as_str(), r.quantity)).collect();
    assert_eq!(got, [("cart-2", 2), ("cart{1}", 3)]);
    let now = SystemTime::now();
    assert!(seen[0].expires_at > now + Duration::from_secs(3500));
    assert!(seen[1].expires_at < now);

    // `stock` reclaims (it writes): the expired units come back, and the view agrees.
    assert_eq!(store.stock(&mut conn, "sku-1").await.unwrap(), 8);
    let v = store.stock_view(&mut conn, "sku-1").await.unwrap();
    assert_eq!((v.available, v.expired, v.expired_reservations), (8, 0, 0));
}

#[tokio::test]
async fn a_view_is_served_by_a_read_only_replica() {
    let pair = ReplicatedPair::spawn().await;
    let mut primary = pair.primary.conn().await;
    let mut replica = pair.replica.conn().await;
    let store = Inventory::new("inv").unwrap().store("s1").unwrap();
    store.set(&mut primary, "sku-1", 7).await.unwrap();
    store
        .reserve(&mut primary, "sku-1", 2, Duration::from_secs(60), "cart-1")
        .await
        .unwrap();
    support::until_replicated(&mut primary).await;
    let v = store.stock_view(&mut replica, "sku-1").await.unwrap();
    assert_eq!((v.available, v.reserved, v.reservations), (5, 2, 1));
    let page = store
        .reservations(&mut replica, "sku-1", 0, nonzero!(10))
        .await
        .unwrap();
    assert_eq!(page.reservations.len(), 1);
    // The negative control: the replica refuses what writes.
    assert!(store
        .decrement(&mut replica, "sku-1", 1, None)
        .await
        .is_err());
}

#[tokio::test]
async fn unknown_skus_and_foreign_data_are_typed_errors() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let store = Inventory::new("inv").unwrap().store("s1").unwrap();
    assert!(matches!(
        store.stock_view(&mut conn, "never-set").await,
        Err(Error::NotFound { .. })
    ));
    assert!(matches!(
        store.stock_view(&mut conn, "").await,
        Err(Error::InvalidInput { .. })
    ));
    store.set(&mut conn, "sku-1", 1).await.unwrap();
    let hash = store.reservation_key("sku-1").unwrap();
    let _: i64 = server.cmd(&["HSET", &hash, "x", "not a hold"]).await;
    assert!(matches!(
        store.stock_view(&mut conn, "sku-1").await,
        Err(Error::CorruptData { .. })
    ));
    assert!(matches!(
        store
            .reservations(&mut conn, "sku-1", 0, nonzero!(10))
            .await,
        Err(Error::CorruptData { .. })
    ));
    let _: () = server
        .cmd(&["SET", &store.key("sku-2").unwrap(), "05"])
        .await;
    assert!(matches!(
        store.stock_view(&mut conn, "sku-2").await,
        Err(Error::CorruptData { .. })
    ));
}
