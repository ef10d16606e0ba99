//! Scans: the clients of a limiter and the resources of a lock, found with `SCAN` on every
//! primary of a 3-primary Cluster (keys in every primary's slots), capped below the keyspace
//! with "truncated" said, and read back as typed clients and resources.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use redkit::connect::ScanKeys;
use redkit::lock::{Acquire, Lock, LockOptions};
use redkit::nonzero;
use redkit::rate_limit::{AlignedWindow, FixedWindow, LimitKey, Limiter, Rate};
use support::{RedisCluster, RedisServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_scan_finds_every_client_and_resource_and_stops_at_the_cap() {
    let cluster = RedisCluster::spawn().await;
    let mut conn = cluster.conn().await;
    let limiter: Limiter = FixedWindow::new("scan-fw", Rate::per_hour(nonzero!(10)))
        .unwrap()
        .into();
    let mut expected = BTreeSet::new();
    for i in 0..300 {
        let client = if i % 3 == 0 {
            LimitKey::ip(format!("10.0.{}.{}", i / 256, i % 256).parse().unwrap())
        } else {
            LimitKey::text(&format!("user{{{i}}}")).unwrap()
        };
        limiter.check(&mut conn, &client).await.unwrap();
        expected.insert(client.as_str().to_owned());
    }
    // Keys on every primary: the scan has to visit each.
    for primary in cluster.primaries().await {
        let n: i64 = primary.cmd(&["DBSIZE"]).await;
        assert!(
            n > 0,
            "a primary without keys: the test would not show a per-node scan"
        );
    }
    let all = limiter
        .scan_clients(&mut conn, nonzero!(10_000))
        .await
        .unwrap();
    assert!(!all.truncated && all.skipped == 0, "{all:?}");
    let got: BTreeSet<String> = all.clients.iter().map(|c| c.as_str().to_owned()).collect();
    assert_eq!(got, expected);

    // A cap below the keyspace: stopped there, and said.
    let capped = limiter
        .scan_clients(&mut conn, nonzero!(100))
        .await
        .unwrap();
    assert!(capped.truncated);
    assert_eq!(capped.clients.len(), 100);

    // Locks: each resource once, its fence key not counted.
    let lock = Lock::new();
    let options = LockOptions::new()
        .fencing(true)
        .ttl(Duration::from_secs(60));
    let mut resources = BTreeSet::new();
    for i in 0..40 {
        let r = format!("job{{{i}}}");
        assert!(matches!(
            lock.acquire(&mut conn, &r, &options).await.unwrap(),
            Acquire::Acquired(_)
        ));
        resources.insert(r);
    }
    let found = lock
        .scan_resources(&mut conn, nonzero!(10_000))
        .await
        .unwrap();
    assert!(!found.truncated && found.skipped == 0, "{found:?}");
    assert_eq!(
        found.resources.into_iter().collect::<BTreeSet<_>>(),
        resources
    );
}

#[tokio::test]
async fn a_single_server_scan_reads_clients_back_and_skips_foreign_keys() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    // An aligned window holds a key per window: each client once.
    let aligned: Limiter = AlignedWindow::new("scan-al", Rate::per_hour(nonzero!(5)))
        .unwrap()
        .into();
    let clients = [
        LimitKey::text("a%b{c}").unwrap(),
        LimitKey::ip("2001:db8::1".parse().unwrap()),
        LimitKey::ip_grouped("2001:db8::1".parse().unwrap(), 128),
        LimitKey::ip("192.0.2.7".parse().unwrap()),
    ];
    for c in &clients {
        aligned.check(&mut conn, c).await.unwrap();
    }
    // An earlier window's counter of one client, as a check an hour ago left it.
    let _: () = server
        .cmd(&["SET", "redkit:rl:scan-al:{ip:192.0.2.7}:1", "1"])
        .await;
    let _: () = server
        .cmd(&["SET", "redkit:rl:scan-al:{bogus}:1", "1"])
        .await;
    // A key of another type under the pattern: `TYPE string` leaves it to Redis.
    let _: i64 = server
        .cmd(&["HSET", "redkit:rl:scan-al:{k:h}:1", "f", "v"])
        .await;
    let found = aligned
        .scan_clients(&mut conn, nonzero!(1_000))
        .await
        .unwrap();
    let got: BTreeSet<&str> = found.clients.iter().map(LimitKey::as_str).collect();
    let want: BTreeSet<&str> = clients.iter().map(LimitKey::as_str).collect();
    assert_eq!(got, want, "{found:?}");
    assert_eq!(found.skipped, 1);
    // The plain key scan sees every key under the pattern, on this one node.
    let keys = conn
        .scan_keys("redkit:rl:scan-al:*", None, nonzero!(1_000))
        .await
        .unwrap();
    assert_eq!(keys.keys.len(), clients.len() + 3, "{keys:?}");
}

#[tokio::test]
async fn the_busiest_clients_are_ranked_by_use_and_nothing_is_written() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let limiter: Limiter = FixedWindow::new("scan-top", Rate::per_hour(nonzero!(20)))
        .unwrap()
        .into();
    for i in 1..=100u32 {
        let client = LimitKey::text(&format!("u{i:03}")).unwrap();
        limiter
            .check_n(&mut conn, &client, support::nz(i % 13 + 1))
            .await
            .unwrap();
    }
    let before = support::snapshot(&mut conn).await;
    let top = limiter
        .busiest(&mut conn, nonzero!(1_000), nonzero!(5))
        .await
        .unwrap();
    support::same_dumps(&before, &support::snapshot(&mut conn).await, "busiest");
    assert_eq!((top.surveyed, top.truncated), (100, false));
    // i % 13 + 1 == 13 for i = 12, 25, 38, 51, 64, 77, 90: the five first by name.
    let got: Vec<(&str, u32)> = top
        .clients
        .iter()
        .map(|(c, q)| (c.as_str(), q.used()))
        .collect();
    assert_eq!(
        got,
        [
            ("k:u012", 13),
            ("k:u025", 13),
            ("k:u038", 13),
            ("k:u051", 13),
            ("k:u064", 13)
        ]
    );
}
