//! Fixed-window rate limiting against a real Redis (single server and Cluster).

#[path = "fixtures/mod.rs"]
mod fixtures;
mod support;

use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redkit::keys::Prefix;
use redkit::rate_limit::{Decision, FixedWindow, LimitKey, Limiter, Rate};
use redkit::{Call, CallOutcome, Error, Registry, ScriptManager};
use support::{RedisCluster, RedisServer};

fn ip(s: &str) -> LimitKey {
    LimitKey::ip(s.parse::<IpAddr>().unwrap())
}

async fn pttl(server: &RedisServer, key: &str) -> i64 {
    server.cmd(&["PTTL", key]).await
}

#[tokio::test]
async fn exactly_n_pass_then_the_window_elapses() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    // Short, but long enough that 8 round trips fit in it even on a loaded machine.
    let window = Duration::from_millis(1000);
    let limiter = FixedWindow::new("seq", Rate::new(redkit::nonzero!(5), window).unwrap()).unwrap();
    let key = ip("192.0.2.1");

    let mut decisions = Vec::new();
    for _ in 0..8 {
        decisions.push(limiter.check(&mut conn, &key).await.unwrap());
    }
    let allowed = decisions.iter().filter(|d| d.is_allowed()).count();
    assert_eq!(allowed, 5, "{decisions:?}");
    assert!(
        decisions[..5].iter().all(Decision::is_allowed),
        "the first five pass"
    );
    let remaining: Vec<u32> = decisions.iter().map(|d| d.quota().remaining()).collect();
    assert_eq!(remaining, [4, 3, 2, 1, 0, 0, 0, 0]);
    for d in &decisions {
        assert_eq!(d.quota().limit(), 5);
        assert!(d.quota().reset_after() <= window);
        assert!(d.quota().reset_after() > Duration::ZERO);
    }
    let last = decisions[7];
    assert!(matches!(last, Decision::Limited { .. }));
    let retry = last.retry_after().unwrap();
    assert!(retry > Duration::ZERO && retry <= window, "{retry:?}");
    // Limited requests are not counted.
    let count: String = server.cmd(&["GET", &limiter.redis_key(&key)]).await;
    assert_eq!(count, "5");

    // Wait out the window with a wide margin; the key expires in Redis.
    tokio::time::sleep(window + Duration::from_millis(500)).await;
    assert_eq!(
        pttl(&server, &limiter.redis_key(&key)).await,
        -2,
        "key expired"
    );
    let again = limiter.check(&mut conn, &key).await.unwrap();
    assert!(again.is_allowed());
    assert_eq!(again.quota().remaining(), 4, "a fresh window");
}

#[tokio::test]
async fn sixty_four_clients_on_four_connections_get_exactly_the_limit() {
    let server = RedisServer::spawn().await;
    let mut conns = Vec::new();
    for _ in 0..4 {
        conns.push(server.conn().await);
    }
    let limiter =
        Arc::new(FixedWindow::new("burst", Rate::per_minute(redkit::nonzero!(100))).unwrap());
    let allowed = Arc::new(AtomicU32::new(0));
    let limited = Arc::new(AtomicU32::new(0));
    let key = ip("198.51.100.7");
    let mut tasks = Vec::new();
    for client in 0..64 {
        let mut conn = conns[client % 4].clone();
        let (limiter, allowed, limited, key) = (
            Arc::clone(&limiter),
            Arc::clone(&allowed),
            Arc::clone(&limited),
            key.clone(),
        );
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                match limiter.check(&mut conn, &key).await.unwrap() {
                    Decision::Allowed(_) => allowed.fetch_add(1, Ordering::Relaxed),
                    _ => limited.fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(allowed.load(Ordering::Relaxed), 100);
    assert_eq!(limited.load(Ordering::Relaxed), 64 * 5 - 100);
    let count: String = server.cmd(&["GET", &limiter.redis_key(&key)]).await;
    assert_eq!(count, "100");
}

#[tokio::test]
async fn a_counter_without_ttl_gets_one_on_the_next_check() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let window = Duration::from_secs(30);
    let limiter =
        FixedWindow::new("heal", Rate::new(redkit::nonzero!(3), window).unwrap()).unwrap();

    // Allowed path: a counter someone PERSISTed.
    let key = ip("203.0.113.1");
    let rkey = limiter.redis_key(&key);
    limiter.check(&mut conn, &key).await.unwrap();
    let _: i64 = server.cmd(&["PERSIST", &rkey]).await;
    assert_eq!(pttl(&server, &rkey).await, -1);
    let d = limiter.check(&mut conn, &key).await.unwrap();
    assert!(d.is_allowed());
    let ttl = pttl(&server, &rkey).await;
    assert!(ttl > 0 && ttl <= 30_000, "{ttl}");

    // Limited path: a full counter left without TTL must not block the IP forever.
    let key = ip("203.0.113.2");
    let rkey = limiter.redis_key(&key);
    let _: () = server.cmd(&["SET", &rkey, "3"]).await;
    let d = limiter.check(&mut conn, &key).await.unwrap();
    assert!(matches!(d, Decision::Limited { .. }), "{d:?}");
    let ttl = pttl(&server, &rkey).await;
    assert!(ttl > 0 && ttl <= 30_000, "{ttl}");
    assert!(d.quota().reset_after() <= window);
}

#[tokio::test]
async fn bad_input_is_a_typed_error_and_writes_nothing() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    assert!(matches!(
        Rate::new(redkit::nonzero!(1), Duration::ZERO).and_then(|r| FixedWindow::new("x", r)),
        Err(Error::InvalidInput { what: "period", .. })
    ));
    assert!(matches!(
        Rate::new(redkit::nonzero!(1), Duration::from_micros(999))
            .and_then(|r| FixedWindow::new("x", r)),
        Err(Error::InvalidInput { what: "window", .. })
    ));
    assert!(matches!(
        FixedWindow::new("x{y}", Rate::per_second(redkit::nonzero!(1))),
        Err(Error::InvalidInput { what: "name", .. })
    ));
    assert!(matches!(
        LimitKey::text(&"k".repeat(300)),
        Err(Error::InvalidInput { .. })
    ));

    // A zero cost does not compile (the cost is a NonZeroU32).
    let limiter = FixedWindow::new(
        "bad",
        Rate::new(redkit::nonzero!(10), Duration::from_secs(10)).unwrap(),
    )
    .unwrap();

    // A key of another type.
    let hkey = LimitKey::text("hash").unwrap();
    let rk = limiter.redis_key(&hkey);
    let _: i64 = server.cmd(&["HSET", &rk, "f", "v"]).await;
    assert!(matches!(
        limiter.check(&mut conn, &hkey).await,
        Err(Error::WrongType { .. })
    ));
    assert_eq!(pttl(&server, &rk).await, -1, "no expiry was set");
    let v: String = server.cmd(&["HGET", &rk, "f"]).await;
    assert_eq!(v, "v");

    // Non-integer values.
    for junk in [
        "abc",
        "1.5",
        "-3",
        " 5",
        "1e3",
        "0x10",
        "99999999999999999999",
    ] {
        let k = LimitKey::text(junk).unwrap();
        let rk = limiter.redis_key(&k);
        let _: () = server.cmd(&["SET", &rk, junk]).await;
        assert!(
            matches!(
                limiter.check(&mut conn, &k).await,
                Err(Error::CorruptData { .. })
            ),
            "{junk}"
        );
        let v: String = server.cmd(&["GET", &rk]).await;
        assert_eq!(v, junk, "value untouched");
        assert_eq!(pttl(&server, &rk).await, -1, "no expiry was set");
    }

    // The script validates its arguments again (second line of defence).
    let manager = ScriptManager::new();
    for version in [2, 3, 4, 5] {
        let script = fixtures::script("fixed_window", version);
        let cases = [
            ("0", "1000", "1"),
            ("5", "0", "1"),
            ("5", "1000", "0"),
            ("x", "1000", "1"),
            ("5", "1.5", "1"),
            ("05", "1000", "1"),
            ("5", "1e3", "1"),
            ("5", " 1000", "1"),
            ("5", "1000", "+1"),
            ("5", "9007199254740993", "1"),
        ];
        let label = format!("v{version}");
        assert_refused(
            &manager,
            &mut conn,
            script,
            "redkit:rl:raw:{k:x}",
            &cases,
            &label,
        )
        .await;
    }
    let exists: i64 = server.cmd(&["EXISTS", "redkit:rl:raw:{k:x}"]).await;
    assert_eq!(exists, 0);

    // v6 checks the limit and the window as numbers (as fixed_window_aligned.v1) and the
    // cost's form where Redis would store it: out-of-range numbers and a cost in any other
    // form than canonical decimal are refused, on a new counter and on one that exists.
    let v6 = fixtures::script("fixed_window", 6);
    for stored in [None, Some("3")] {
        let key = "redkit:rl:raw6:{k:x}";
        if let Some(v) = stored {
            let _: () = server.cmd(&["SET", key, v, "PX", "60000"]).await;
        }
        let cases = [
            ("0", "1000", "1"),
            ("5", "0", "1"),
            ("5", "1000", "0"),
            ("x", "1000", "1"),
            ("5", "1.5", "1"),
            ("5", "9007199254740993", "1"),
            ("-5", "1000", "1"),
            ("5", "1000", "+1"),
            ("5", "1000", "1.0"),
            ("5", "1000", " 1"),
            ("5", "1000", "1e0"),
            ("5", "1000", "0x1"),
        ];
        let label = format!("v6 {stored:?}");
        assert_refused(&manager, &mut conn, v6, key, &cases, &label).await;
        let v: Option<String> = server.cmd(&["GET", key]).await;
        assert_eq!(v.as_deref(), stored, "v6 wrote nothing");
        let _: () = server.cmd(&["DEL", key]).await;
    }
    // v7 converts the window only where it uses it: a bad limit or cost is refused on every
    // path; a bad window where a window starts or a counter lacks a TTL (nothing written),
    // while a call in a running window does not read it. v8 and v9 (shipped: v8's body) the same.
    let v7 = fixtures::script("fixed_window", 7);
    let v9 = Registry::global().require("fixed_window", 9).unwrap(); // v8's body
    let bad_limit_or_cost = [
        ("0", "1000", "1"),
        ("x", "1000", "1"),
        ("-5", "1000", "1"),
        ("5.5", "1000", "1"),
        ("9007199254740993", "1000", "1"),
        ("5", "1000", "0"),
        ("5", "1000", "-1"),
        ("5", "1000", "+1"),
        ("5", "1000", "1.0"),
        ("5", "1000", "1.5"),
        ("5", "1000", " 1"),
        ("5", "1000", "1e0"),
        ("5", "1000", "0x1"),
        ("5", "1000", "9007199254740993"),
    ];
    let bad_window = [
        ("5", "0", "1"),
        ("5", "x", "1"),
        ("5", "1.5", "1"),
        ("5", "-1000", "1"),
        ("5", "9007199254740993", "1"),
    ];
    // (stored count, its PX)
    let states = [(None, None), (Some("3"), None), (Some("3"), Some("60000"))];
    for ((stored, px), (version, v7)) in states
        .into_iter()
        .flat_map(|state| [(7, v7), (9, v9)].map(|script| (state, script)))
    {
        let key = "redkit:rl:raw7:{k:x}";
        let set = |v: &'static str| match px {
            Some(px) => vec!["SET", key, v, "PX", px],
            None => vec!["SET", key, v],
        };
        if let Some(v) = stored {
            let _: () = server.cmd(&set(v)).await;
        }
        let label = format!("v{version} {stored:?} PX {px:?}");
        assert_refused(&manager, &mut conn, v7, key, &bad_limit_or_cost, &label).await;
        if px.is_none() {
            assert_refused(&manager, &mut conn, v7, key, &bad_window, &label).await;
        }
        let v: Option<String> = server.cmd(&["GET", key]).await;
        assert_eq!(v.as_deref(), stored, "{label}: wrote nothing");
        let ttl = pttl(&server, key).await;
        match (stored, px) {
            (None, _) => assert_eq!(ttl, -2, "{label}: no counter made"),
            (Some(_), None) => assert_eq!(ttl, -1, "{label}: no TTL given"),
            (Some(_), Some(_)) => assert!(ttl > 0, "{label}: {ttl}"),
        }
        if px.is_some() {
            // A running window: the window argument is not read, the call counts.
            for (i, (limit, window, cost)) in bad_window.iter().enumerate() {
                let mut call = Call::new(v7);
                call.key(key).arg(*limit).arg(*window).arg(*cost);
                let reply: redis::Value = manager.invoke(&mut conn, &call).await.unwrap();
                let (count, ttl, allowed) = window_reply(&reply, 5);
                let expected = 4 + i as i64;
                assert_eq!(
                    (count, allowed),
                    if expected <= 5 { (expected, 1) } else { (5, 0) },
                    "{label} {window}"
                );
                assert!((1..=60_000).contains(&ttl), "{label} {window}: {ttl}");
            }
            let v: String = server.cmd(&["GET", key]).await;
            assert_eq!(v, "5", "{label}: counted up to the limit, no further");
        }
        let _: () = server.cmd(&["DEL", key]).await;
    }

    // ... and reads a limit or window Lua reads as an integer as that integer.
    for (limit, window) in [
        ("05", "1000"),
        ("5", "1e3"),
        ("5.0", " 1000"),
        ("0x5", "1000"),
    ] {
        let key = "redkit:rl:raw6:{k:y}";
        let mut call = Call::new(v6);
        call.key(key).arg(limit).arg(window).arg("1");
        let first: redis::Value = manager.invoke(&mut conn, &call).await.unwrap();
        assert_eq!(window_reply(&first, 5), (1, 1000, 1), "{limit} {window}");
        let pttl: i64 = server.cmd(&["PTTL", key]).await;
        assert!((1..=1000).contains(&pttl), "{limit} {window}: {pttl}");
        let _: () = server.cmd(&["DEL", key]).await;
    }
}

#[tokio::test]
async fn costs_count_and_a_cost_above_the_limit_can_never_pass() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let limiter = FixedWindow::new(
        "cost",
        Rate::new(redkit::nonzero!(10), Duration::from_secs(10)).unwrap(),
    )
    .unwrap();
    let key = LimitKey::text("user-1").unwrap();

    let d = limiter
        .check_n(&mut conn, &key, redkit::nonzero!(11))
        .await
        .unwrap();
    assert!(
        matches!(d, Decision::CostExceedsLimit { cost: 11, .. }),
        "{d:?}"
    );
    assert_eq!(d.retry_after(), None);
    assert_eq!(d.quota().remaining(), 10);
    let exists: i64 = server.cmd(&["EXISTS", &limiter.redis_key(&key)]).await;
    assert_eq!(exists, 0, "nothing counted");

    let d = limiter
        .check_n(&mut conn, &key, redkit::nonzero!(4))
        .await
        .unwrap();
    assert_eq!((d.is_allowed(), d.quota().remaining()), (true, 6));
    let d = limiter
        .check_n(&mut conn, &key, redkit::nonzero!(7))
        .await
        .unwrap();
    assert!(matches!(d, Decision::Limited { .. }));
    assert_eq!(d.quota().remaining(), 6, "a refused cost is not counted");
    let d = limiter
        .check_n(&mut conn, &key, redkit::nonzero!(6))
        .await
        .unwrap();
    assert_eq!((d.is_allowed(), d.quota().remaining()), (true, 0));
    let d = limiter
        .check_n(&mut conn, &key, redkit::nonzero!(11))
        .await
        .unwrap();
    assert!(matches!(d, Decision::CostExceedsLimit { .. }));
    assert_eq!(d.quota().remaining(), 0);
}

#[tokio::test]
async fn names_keep_counters_apart_and_reset_starts_over() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let a = FixedWindow::new(
        "a",
        Rate::new(redkit::nonzero!(1), Duration::from_secs(10)).unwrap(),
    )
    .unwrap();
    let b = FixedWindow::new(
        "b",
        Rate::new(redkit::nonzero!(1), Duration::from_secs(10)).unwrap(),
    )
    .unwrap();
    let key = ip("192.0.2.50");
    assert!(a.check(&mut conn, &key).await.unwrap().is_allowed());
    assert!(b.check(&mut conn, &key).await.unwrap().is_allowed());
    assert!(!a.check(&mut conn, &key).await.unwrap().is_allowed());
    assert!(!b.check(&mut conn, &key).await.unwrap().is_allowed());

    assert!(a.reset(&mut conn, &key).await.unwrap());
    assert!(!a.reset(&mut conn, &key).await.unwrap(), "already gone");
    assert!(a.check(&mut conn, &key).await.unwrap().is_allowed());
    assert!(!b.check(&mut conn, &key).await.unwrap().is_allowed());
}

#[tokio::test]
async fn ip_keys_are_canonical() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let limiter = FixedWindow::new(
        "canon",
        Rate::new(redkit::nonzero!(3), Duration::from_secs(10)).unwrap(),
    )
    .unwrap();
    // IPv4 and its IPv4-mapped IPv6 form share a bucket.
    for addr in ["10.9.8.7", "::ffff:10.9.8.7", "::ffff:a09:807"] {
        assert!(limiter
            .check(&mut conn, &ip(addr))
            .await
            .unwrap()
            .is_allowed());
    }
    assert!(!limiter
        .check(&mut conn, &ip("10.9.8.7"))
        .await
        .unwrap()
        .is_allowed());
    // Three addresses of one /64 share a bucket, another /64 does not.
    for addr in [
        "2001:db8:1:1::1",
        "2001:db8:1:1:abcd::2",
        "2001:db8:1:1:ffff:ffff:ffff:ffff",
    ] {
        assert!(limiter
            .check(&mut conn, &ip(addr))
            .await
            .unwrap()
            .is_allowed());
    }
    assert!(!limiter
        .check(&mut conn, &ip("2001:db8:1:1::99"))
        .await
        .unwrap()
        .is_allowed());
    assert!(limiter
        .check(&mut conn, &ip("2001:db8:1:2::1"))
        .await
        .unwrap()
        .is_allowed());
    // Hash-tag injection attempts stay inside the tag.
    let k = LimitKey::text("}{evil").unwrap();
    assert_eq!(limiter.redis_key(&k), "redkit:rl:canon:{k:%7D%7Bevil}");
}

#[tokio::test]
async fn batch_checks_many_keys_in_one_round_trip() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let limiter = FixedWindow::new(
        "batch",
        Rate::new(redkit::nonzero!(2), Duration::from_secs(10)).unwrap(),
    )
    .unwrap();
    let (a, b) = (ip("192.0.2.1"), ip("192.0.2.2"));
    let results = limiter
        .check_batch(&mut conn, &[a.clone(), a.clone(), a.clone(), b.clone()])
        .await
        .unwrap();
    let allowed: Vec<bool> = results
        .iter()
        .map(|r| r.value().unwrap().is_allowed())
        .collect();
    assert_eq!(allowed, [true, true, false, true]);
    // One bad key does not spoil the others.
    let bad = LimitKey::text("bad").unwrap();
    let _: () = server.cmd(&["SET", &limiter.redis_key(&bad), "x"]).await;
    let results = limiter
        .check_batch(&mut conn, &[b.clone(), bad])
        .await
        .unwrap();
    assert!(results[0].value().unwrap().is_allowed());
    assert!(matches!(
        results[1],
        CallOutcome::Ran(Err(Error::CorruptData { .. }))
    ));
}

#[tokio::test]
async fn works_over_a_connection_manager() {
    let server = RedisServer::spawn().await;
    let mut conn = redis::aio::ConnectionManager::new(server.client())
        .await
        .unwrap();
    let limiter = FixedWindow::new(
        "cm",
        Rate::new(redkit::nonzero!(2), Duration::from_secs(10)).unwrap(),
    )
    .unwrap();
    let key = ip("192.0.2.3");
    assert!(limiter.check(&mut conn, &key).await.unwrap().is_allowed());
    assert!(limiter.check(&mut conn, &key).await.unwrap().is_allowed());
    assert!(!limiter.check(&mut conn, &key).await.unwrap().is_allowed());
}

#[tokio::test]
async fn works_on_a_cluster() {
    let cluster = RedisCluster::spawn().await;
    let mut conn = cluster.conn().await;
    let limiter = FixedWindow::new(
        "cluster",
        Rate::new(redkit::nonzero!(3), Duration::from_secs(30)).unwrap(),
    )
    .unwrap();
    let keys: Vec<LimitKey> = (1..=20u8).map(|i| ip(&format!("10.0.0.{i}"))).collect();
    for key in &keys {
        for _ in 0..3 {
            assert!(limiter.check(&mut conn, key).await.unwrap().is_allowed());
        }
        assert!(!limiter.check(&mut conn, key).await.unwrap().is_allowed());
    }
    // The counter lives on the primary owning its slot.
    let owner = cluster.primary_for(&limiter.redis_key(&keys[0])).await;
    let count: String = owner.cmd(&["GET", &limiter.redis_key(&keys[0])]).await;
    assert_eq!(count, "3");
    // Batches across many slots.
    let fresh: Vec<LimitKey> = (1..=40u8).map(|i| ip(&format!("10.1.0.{i}"))).collect();
    let mut twice = fresh.clone();
    twice.extend(fresh.iter().cloned());
    twice.extend(fresh.iter().cloned());
    twice.extend(fresh.iter().cloned());
    let results = limiter.check_batch_by_slot(&conn, &twice).await.unwrap();
    let allowed = results
        .iter()
        .filter(|r| r.value().unwrap().is_allowed())
        .count();
    assert_eq!(allowed, 40 * 3);
    assert!(results[120..]
        .iter()
        .all(|r| !r.value().unwrap().is_allowed()));
}

/// Every algorithm of `Limiter` on a Cluster: one key per client, on the primary that owns its
/// slot, no CROSSSLOT; the limit holds per client.
#[tokio::test]
async fn every_algorithm_works_on_a_cluster() {
    use redkit::rate_limit::{Gcra, SlidingWindow};
    let cluster = RedisCluster::spawn().await;
    let mut conn = cluster.conn().await;
    let period = Duration::from_secs(30);
    let limiters: Vec<Limiter> = vec![
        FixedWindow::new("c-fixed", Rate::new(redkit::nonzero!(3), period).unwrap())
            .unwrap()
            .into(),
        // Aligned to the clock: a window far longer than the test, so it never rolls over.
        redkit::rate_limit::AlignedWindow::new(
            "c-aligned",
            Rate::new(redkit::nonzero!(3), Duration::from_secs(1 << 40)).unwrap(),
        )
        .unwrap()
        .into(),
        Gcra::new("c-gcra", Rate::new(redkit::nonzero!(3), period).unwrap())
            .unwrap()
            .into(),
        SlidingWindow::new("c-sliding", Rate::new(redkit::nonzero!(3), period).unwrap())
            .unwrap()
            .into(),
        // A chosen prefix keeps the hash tag: still one slot per client.
        Gcra::new(
            "c-prefixed",
            Rate::new(redkit::nonzero!(3), period).unwrap(),
        )
        .unwrap()
        .with_prefix(Prefix::new("app:gcra").unwrap())
        .into(),
    ];
    let keys: Vec<LimitKey> = (1..=12u8).map(|i| ip(&format!("10.2.0.{i}"))).collect();
    for limiter in &limiters {
        for key in &keys {
            for _ in 0..3 {
                let d = limiter.check(&mut conn, key).await.unwrap();
                assert!(d.is_allowed(), "{}: {d:?}", limiter.name());
            }
            let d = limiter.check(&mut conn, key).await.unwrap();
            assert!(!d.is_allowed(), "{}: {d:?}", limiter.name());
        }
        let redis_key = limiter.redis_key(&keys[0]);
        let owner = cluster.primary_for(&redis_key).await;
        let exists: i64 = owner.cmd(&["EXISTS", &redis_key]).await;
        assert_eq!(exists, 1, "{redis_key} on its slot's primary");
        assert!(limiter.reset(&mut conn, &keys[0]).await.unwrap());
        assert!(limiter
            .check(&mut conn, &keys[0])
            .await
            .unwrap()
            .is_allowed());
    }
}

/// Every algorithm keeps its state at `<prefix>:<name>:{<client>}` on the server: its
/// `DEFAULT_PREFIX`, or the prefix chosen with `with_prefix` (and then nothing under the
/// default); `with_prefix("rk:rl")` counts on a counter left under the old prefix; `reset`
/// deletes the prefixed key.
#[tokio::test]
async fn keys_live_under_the_prefix_on_the_server() {
    use redkit::rate_limit::{Gcra, Limiter, SlidingWindow};
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let rate = Rate::per_minute(redkit::nonzero!(5));
    let key = LimitKey::text("u").unwrap();
    let defaults: [(Limiter, &str); 3] = [
        (
            FixedWindow::new("d", rate).unwrap().into(),
            "redkit:rl:d:{k:u}",
        ),
        (Gcra::new("d", rate).unwrap().into(), "redkit:gcra:d:{k:u}"),
        (
            SlidingWindow::new("d", rate).unwrap().into(),
            "redkit:sw:d:{k:u}",
        ),
    ];
    for (limiter, expected) in defaults {
        assert_eq!(limiter.redis_key(&key), expected);
        assert!(limiter.check(&mut conn, &key).await.unwrap().is_allowed());
        let exists: i64 = server.cmd(&["EXISTS", expected]).await;
        assert_eq!(exists, 1, "{expected}");
        // The same limiter under another prefix has its own state.
        let moved = limiter.clone().with_prefix(Prefix::new("app:x").unwrap());
        let moved_key = moved.redis_key(&key);
        assert!(moved_key.starts_with("app:x:d:{k:u}"), "{moved_key}");
        let d = moved.check(&mut conn, &key).await.unwrap();
        assert_eq!(d.quota().remaining(), 4, "a fresh count under {moved_key}");
        let exists: i64 = server.cmd(&["EXISTS", &moved_key]).await;
        assert_eq!(exists, 1, "{moved_key}");
        assert!(moved.reset(&mut conn, &key).await.unwrap());
        let exists: i64 = server.cmd(&["EXISTS", &moved_key]).await;
        assert_eq!(exists, 0, "{moved_key} reset");
        let exists: i64 = server.cmd(&["EXISTS", expected]).await;
        assert_eq!(
            exists, 1,
            "{expected} untouched by the other prefix's reset"
        );
    }
    let all: Vec<String> = server.cmd(&["KEYS", "*"]).await;
    assert!(all.iter().all(|k| k.starts_with("redkit:")), "{all:?}");

    // A counter under the prefix used before 0.2 is found with `with_prefix("rk:rl")`.
    let _: () = server
        .cmd(&["SET", "rk:rl:old:{k:u}", "4", "PX", "60000"])
        .await;
    let old = FixedWindow::new("old", rate)
        .unwrap()
        .with_prefix(Prefix::new("rk:rl").unwrap());
    assert_eq!(old.prefix(), "rk:rl");
    assert!(old.check(&mut conn, &key).await.unwrap().is_allowed());
    assert!(!old.check(&mut conn, &key).await.unwrap().is_allowed());
    let fresh = FixedWindow::new("old", rate).unwrap();
    let d = fresh.check(&mut conn, &key).await.unwrap();
    assert_eq!(d.quota().remaining(), 4, "the default prefix starts afresh");
    // A bad prefix is refused before a limiter can have it.
    for bad in ["", "a b", "a{b}", &"p".repeat(65)] {
        assert!(matches!(
            Prefix::new(bad),
            Err(Error::InvalidInput { what: "prefix", .. })
        ));
    }
}

// ---- fixed_window.v2: nothing half-applied, whatever is stored and whatever the ACL denies ----

/// Every key of the (private) server: its DUMP and whether it has a TTL.
async fn keyspace(server: &RedisServer) -> Vec<(Vec<u8>, Vec<u8>, bool)> {
    let mut conn = server.conn().await;
    let mut keys: Vec<Vec<u8>> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .unwrap();
    keys.sort();
    let mut out = Vec::new();
    for k in keys {
        let dump: Vec<u8> = redis::cmd("DUMP")
            .arg(&k)
            .query_async(&mut conn)
            .await
            .unwrap();
        let pttl: i64 = redis::cmd("PTTL")
            .arg(&k)
            .query_async(&mut conn)
            .await
            .unwrap();
        out.push((k, dump, pttl > 0));
    }
    out
}

#[tokio::test]
async fn v2_refuses_every_poisoned_counter_and_writes_nothing() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let limiter = FixedWindow::new(
        "poison",
        Rate::new(redkit::nonzero!(10), Duration::from_secs(10)).unwrap(),
    )
    .unwrap();
    let key = LimitKey::text("victim").unwrap();
    let rk = limiter.redis_key(&key);
    let _: () = server.cmd(&["SET", "rk:other", "untouched"]).await;
    let strings = support::NOT_COUNTERS;
    for with_ttl in [false, true] {
        for bad in strings {
            let _: () = server.cmd(&["DEL", &rk]).await;
            let _: () = server.cmd(&["SET", &rk, bad]).await;
            if with_ttl {
                let _: i64 = server.cmd(&["PEXPIRE", &rk, "60000"]).await;
            }
            let before = keyspace(&server).await;
            let r = limiter.check(&mut conn, &key).await;
            assert!(
                matches!(r, Err(Error::CorruptData { .. })),
                "{bad:?} ttl={with_ttl}: {r:?}"
            );
            assert_eq!(keyspace(&server).await, before, "{bad:?} ttl={with_ttl}");
        }
        for (kind, args) in [
            ("hash", vec!["HSET", &rk, "f", "1"]),
            ("list", vec!["RPUSH", &rk, "1"]),
            ("set", vec!["SADD", &rk, "1"]),
        ] {
            let _: () = server.cmd(&["DEL", &rk]).await;
            let _: i64 = server.cmd(&args).await;
            if with_ttl {
                let _: i64 = server.cmd(&["PEXPIRE", &rk, "60000"]).await;
            }
            let before = keyspace(&server).await;
            let r = limiter.check(&mut conn, &key).await;
            assert!(matches!(r, Err(Error::WrongType { .. })), "{kind}: {r:?}");
            assert_eq!(keyspace(&server).await, before, "{kind} ttl={with_ttl}");
        }
    }
    // Valid extremes are counters: int64 max is far above the limit (limited, unchanged).
    let _: () = server
        .cmd(&["SET", &rk, "9223372036854775807", "PX", "60000"])
        .await;
    let before = keyspace(&server).await;
    let d = limiter.check(&mut conn, &key).await.unwrap();
    assert!(!d.is_allowed(), "{d:?}");
    assert_eq!(d.quota().remaining(), 0);
    assert_eq!(keyspace(&server).await, before);
    let _: () = server.cmd(&["SET", &rk, "0", "PX", "60000"]).await;
    assert!(limiter.check(&mut conn, &key).await.unwrap().is_allowed());
    let v: String = server.cmd(&["GET", &rk]).await;
    assert_eq!(v, "1");
}

#[tokio::test]
async fn v3_a_poisoned_counter_that_looks_small_is_refused_by_incrby_and_nothing_written() {
    // v3 lets INCRBY parse the counter when Lua's lenient tonumber says the request fits:
    // with a high limit every one of these takes that path, and must still be refused.
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let limiter = FixedWindow::new(
        "poison3",
        Rate::new(redkit::nonzero!(1_000_000), Duration::from_secs(10)).unwrap(),
    )
    .unwrap();
    let key = LimitKey::text("victim").unwrap();
    let rk = limiter.redis_key(&key);
    let _: () = server.cmd(&["SET", "rk:other", "untouched"]).await;
    for with_ttl in [false, true] {
        for bad in [
            "1e3", "0x10", "5.0", " 5", "5 ", "-0", "05", "1.5", "+5", "0x0",
        ] {
            let _: () = server.cmd(&["DEL", &rk]).await;
            let _: () = server.cmd(&["SET", &rk, bad]).await;
            if with_ttl {
                let _: i64 = server.cmd(&["PEXPIRE", &rk, "60000"]).await;
            }
            let before = keyspace(&server).await;
            let r = limiter.check(&mut conn, &key).await;
            assert!(
                matches!(r, Err(Error::CorruptData { .. })),
                "{bad:?} ttl={with_ttl}: {r:?}"
            );
            assert_eq!(keyspace(&server).await, before, "{bad:?} ttl={with_ttl}");
        }
    }
    // A canonical counter still counts, and one without a TTL gets the window.
    let _: () = server.cmd(&["SET", &rk, "41"]).await;
    let d = limiter.check(&mut conn, &key).await.unwrap();
    assert!(d.is_allowed());
    assert_eq!(d.quota().remaining(), 1_000_000 - 42);
    assert!(pttl(&server, &rk).await > 0);
}

/// The states a counter can be found in, and the commands the current script (v4) runs in
/// each (a limited request is counted by INCRBY and put back by the same INCRBY).
const STATES: [(&str, &[&str]); 4] = [
    ("new", &["PTTL", "SET"]),
    ("counting", &["PTTL", "INCRBY"]),
    ("no ttl", &["PTTL", "INCRBY", "PEXPIRE"]),
    ("limited", &["PTTL", "INCRBY"]),
];

async fn set_state(server: &RedisServer, rk: &str, state: &str) {
    let _: () = server.cmd(&["DEL", rk]).await;
    match state {
        "new" => {}
        "counting" => server.cmd(&["SET", rk, "1", "PX", "60000"]).await,
        "no ttl" => server.cmd(&["SET", rk, "1"]).await,
        "limited" => server.cmd(&["SET", rk, "2", "PX", "60000"]).await,
        _ => unreachable!(),
    }
}

#[tokio::test]
async fn v2_under_an_acl_user_denied_any_inner_command_writes_nothing() {
    let server = RedisServer::spawn().await;
    let limiter = FixedWindow::new("acl", Rate::per_minute(redkit::nonzero!(2))).unwrap();
    let key = LimitKey::text("u").unwrap();
    let rk = limiter.redis_key(&key);
    let _: () = server.cmd(&["SET", "rk:other", "untouched"]).await;
    // Preload as the default user, so a denial is about the inner command, not SCRIPT LOAD.
    ScriptManager::new()
        .preload(&mut server.conn().await)
        .await
        .unwrap();
    for denied in ["GET", "SET", "INCRBY", "PTTL", "PEXPIRE", "EXPIRE"] {
        let user = format!("u_{}", denied.to_lowercase());
        let rule = format!("-{}", denied.to_lowercase());
        let _: () = server
            .cmd(&[
                "ACL", "SETUSER", &user, "on", ">pw", "~*", "&*", "+@all", &rule,
            ])
            .await;
        let url = format!("redis://{user}:pw@127.0.0.1:{}/", server.port());
        let mut conn = redis::Client::open(url)
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        for (state, runs) in STATES {
            set_state(&server, &rk, state).await;
            let before = keyspace(&server).await;
            let r = limiter.check(&mut conn, &key).await;
            if runs.contains(&denied) {
                assert!(
                    matches!(r, Err(Error::PermissionDenied { .. })),
                    "-{denied} in state {state}: {r:?}"
                );
                assert_eq!(
                    keyspace(&server).await,
                    before,
                    "-{denied} in state {state}: nothing written"
                );
            } else {
                let d = r.unwrap_or_else(|e| panic!("-{denied} in state {state}: {e}"));
                assert_eq!(d.is_allowed(), state != "limited", "{state}");
            }
        }
    }
}

#[tokio::test]
async fn v1_left_a_counter_without_ttl_when_pexpire_was_denied() {
    // The bug v2 fixes, kept as a regression witness: v1 INCRBYs, then PEXPIRE is refused.
    let server = RedisServer::spawn().await;
    let _: () = server
        .cmd(&[
            "ACL", "SETUSER", "noexp", "on", ">pw", "~*", "&*", "+@all", "-pexpire",
        ])
        .await;
    let url = format!("redis://noexp:pw@127.0.0.1:{}/", server.port());
    let mut conn = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let v1 = fixtures::sample();
    let mut call = Call::new(v1);
    call.key("redkit:rl:v1:{k:x}").arg(5).arg(60_000).arg(1);
    let r = ScriptManager::new()
        .invoke::<redis::Value, _>(&mut conn, &call)
        .await;
    assert!(r.is_err());
    assert_eq!(
        pttl(&server, "redkit:rl:v1:{k:x}").await,
        -1,
        "v1: counter without TTL"
    );
    let v: String = server.cmd(&["GET", "redkit:rl:v1:{k:x}"]).await;
    assert_eq!(v, "1");
}

#[tokio::test]
async fn v4_a_limited_request_is_put_back_and_the_keyspace_is_unchanged() {
    // v4 counts with INCRBY first and puts the cost back when it does not fit: the counter,
    // its encoding and its TTL must be exactly as before, for a cost of 1 and one above 1.
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let limiter = FixedWindow::new("back", Rate::per_minute(redkit::nonzero!(10))).unwrap();
    let key = LimitKey::text("full").unwrap();
    let rk = limiter.redis_key(&key);
    let _: () = server.cmd(&["SET", "rk:other", "untouched"]).await;
    for (stored, cost) in [("10", 1), ("8", 3), ("0", 11)] {
        let _: () = server.cmd(&["SET", &rk, stored, "PX", "60000"]).await;
        let before = keyspace(&server).await;
        let d = limiter
            .check_n(&mut conn, &key, support::nz(cost))
            .await
            .unwrap();
        assert!(!d.is_allowed(), "{stored} + {cost}: {d:?}");
        assert_eq!(keyspace(&server).await, before, "{stored} + {cost}");
        let v: String = server.cmd(&["GET", &rk]).await;
        assert_eq!(v, stored);
    }
    // What fits is counted, up to the limit exactly.
    let _: () = server.cmd(&["SET", &rk, "7", "PX", "60000"]).await;
    let d = limiter
        .check_n(&mut conn, &key, redkit::nonzero!(3))
        .await
        .unwrap();
    assert!(d.is_allowed(), "{d:?}");
    assert_eq!(d.quota().remaining(), 0);
    let v: String = server.cmd(&["GET", &rk]).await;
    assert_eq!(v, "10");
}

/// `(count, pttl_ms, allowed)` of a `fixed_window` reply: v4's array, or v5's packed integer
/// (`pttl * (limit + 1) + count` when allowed, `-(that) - 1` when not).
fn window_reply(reply: &redis::Value, limit: i64) -> (i64, i64, i64) {
    match reply {
        redis::Value::Int(n) if *n >= 0 => (n % (limit + 1), n / (limit + 1), 1),
        redis::Value::Int(n) => (-(n + 1) % (limit + 1), -(n + 1) / (limit + 1), 0),
        redis::Value::Array(items) => match items.as_slice() {
            [redis::Value::Int(c), redis::Value::Int(t), redis::Value::Int(a)] => (*c, *t, *a),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn v5_packs_the_v4_reply_into_one_integer_when_it_fits() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let manager = ScriptManager::new();
    let v4 = fixtures::script("fixed_window", 4);
    let v5 = fixtures::script("fixed_window", 5);
    let v6 = fixtures::script("fixed_window", 6);
    let v7 = fixtures::script("fixed_window", 7);
    let v9 = Registry::global().require("fixed_window", 9).unwrap(); // v8's body
    let big = "100000000000000"; // 10^14 ms: 10^14 * 2^32 does not fit 2^53
                                 // (stored, its PX, limit, window, cost, v5 answers one integer)
    let cases = [
        (None, None, "10", "60000", "1", true),
        (Some("3"), Some("60000"), "10", "60000", "1", true),
        (Some("9"), Some("60000"), "10", "60000", "1", true),
        (Some("10"), Some("60000"), "10", "60000", "1", true),
        (Some("0"), Some("60000"), "10", "60000", "11", true),
        (None, None, "10", "60000", "11", true),
        (Some("25"), Some("60000"), "10", "60000", "1", false),
        (Some("5"), None, "10", "60000", "1", true),
        (Some("3"), Some(big), "4294967295", big, "1", false),
        (None, None, "4294967295", big, "1", false),
        (
            Some("3"),
            Some("2000000"),
            "4294967295",
            "2000000",
            "1",
            true,
        ),
    ];
    for (i, (stored, px, limit, window, cost, packed)) in cases.into_iter().enumerate() {
        let mut replies = Vec::new();
        for script in [v4, v5, v6, v7, v9] {
            let key = format!("pack:{{{i}}}:{}", script.version());
            if let Some(v) = stored {
                let _: () = match px {
                    Some(px) => server.cmd(&["SET", &key, v, "PX", px]).await,
                    None => server.cmd(&["SET", &key, v]).await,
                };
            }
            let mut call = Call::new(script);
            call.key(&key).arg(limit).arg(window);
            // v8 and later count 1 without a cost, as the limiter calls it.
            if script.version() < 8 || cost != "1" {
                call.arg(cost);
            }
            let reply: redis::Value = manager.invoke(&mut conn, &call).await.unwrap();
            replies.push(reply);
        }
        let case = format!("case {i}: {stored:?} {px:?} limit {limit} cost {cost}");
        let l: i64 = limit.parse().unwrap();
        let a = window_reply(&replies[0], l);
        // v5 to v9 answer alike.
        for reply in &replies[1..] {
            assert_eq!(
                matches!(reply, redis::Value::Int(_)),
                packed,
                "{case}: {reply:?}"
            );
            let b = window_reply(reply, l);
            assert_eq!((a.0, a.2), (b.0, b.2), "{case}: count and allowed");
            assert!((a.1 - b.1).abs() < 5_000, "{case}: pttl {a:?} {b:?}");
        }
    }
    // The limiter decodes both forms alike: packed (limit 10) and table (a stored count above it).
    let limiter = FixedWindow::new("pk", Rate::per_minute(redkit::nonzero!(10))).unwrap();
    let key = LimitKey::text("k").unwrap();
    let d = limiter.check(&mut conn, &key).await.unwrap();
    assert!(d.is_allowed() && d.quota().remaining() == 9, "{d:?}");
    assert!(d.quota().reset_after() > Duration::from_secs(55), "{d:?}");
    let rk = limiter.redis_key(&key);
    let _: () = server.cmd(&["SET", &rk, "25", "PX", "60000"]).await;
    let d = limiter.check(&mut conn, &key).await.unwrap();
    assert!(!d.is_allowed() && d.quota().remaining() == 0, "{d:?}");
    assert!(d.retry_after() > Some(Duration::from_secs(55)), "{d:?}");
    let _: () = server.cmd(&["SET", &rk, "10", "PX", "60000"]).await;
    let d = limiter.check(&mut conn, &key).await.unwrap();
    assert!(!d.is_allowed() && d.quota().remaining() == 0, "{d:?}");
}

/// Runs `script` on `key` with each (limit, window, cost) of `cases` and asserts that every
/// call is refused as `InvalidInput` (`label` names the case in a failure).
async fn assert_refused(
    manager: &ScriptManager,
    conn: &mut redis::aio::MultiplexedConnection,
    script: &redkit::Script,
    key: &str,
    cases: &[(&str, &str, &str)],
    label: &str,
) {
    for (limit, window, cost) in cases {
        let mut call = Call::new(script);
        call.key(key).arg(*limit).arg(*window).arg(*cost);
        let r = manager.invoke::<redis::Value, _>(conn, &call).await;
        assert!(
            matches!(r, Err(Error::InvalidInput { .. })),
            "{label} {limit} {window} {cost}: {r:?}"
        );
    }
}

/// At a window's last millisecond `PTTL` answers 0: a full counter found there is refused for
/// at most a few milliseconds, never for a whole window, and the deny cache does not keep the
/// refusal longer. The counter is set full with a 2 ms TTL right before each check, 200 times,
/// through the plain, the grouped and the leased fixed window (each run finds PTTL 2, 1, 0 or
/// no key; with the old reading of PTTL 0 as "a whole window" the runs at 0 failed).
#[tokio::test]
async fn a_full_counter_in_its_last_millisecond_is_refused_for_milliseconds_only() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let window = Duration::from_secs(60);
    let plain: Limiter = FixedWindow::new("edge", Rate::new(redkit::nonzero!(5), window).unwrap())
        .unwrap()
        .into();
    let grouped: Limiter =
        FixedWindow::new("edge-g", Rate::new(redkit::nonzero!(5), window).unwrap())
            .unwrap()
            .grouped(redkit::GroupCommit::for_checks())
            .into();
    let leased: Limiter =
        FixedWindow::new("edge-l", Rate::new(redkit::nonzero!(5), window).unwrap())
            .unwrap()
            .leased(redkit::rate_limit::QuotaLease::new(4).unwrap())
            .into();
    let cache = redkit::rate_limit::DenyCache::new(1_000).unwrap();
    let cached: Limiter =
        FixedWindow::new("edge-c", Rate::new(redkit::nonzero!(5), window).unwrap())
            .unwrap()
            .with_deny_cache(cache.clone())
            .into();
    let key = LimitKey::text("edge").unwrap();
    for limiter in [&plain, &grouped, &leased, &cached] {
        let rk = limiter.redis_key(&key);
        let mut limited = 0;
        for _ in 0..200 {
            let _: () = server.cmd(&["SET", &rk, "5", "PX", "2"]).await;
            match limiter.check(&mut conn, &key).await.unwrap() {
                Decision::Limited { retry_after, quota } => {
                    limited += 1;
                    assert!(
                        retry_after <= Duration::from_millis(5)
                            && quota.reset_after() <= Duration::from_millis(5),
                        "{}: refused for {retry_after:?} (reset {:?}) in the window's last ms",
                        limiter.name(),
                        quota.reset_after()
                    );
                }
                Decision::Allowed(_) => {}
                other => panic!("{other:?}"),
            }
            let _: () = server.cmd(&["DEL", &rk]).await;
            // A refusal kept by the deny cache ends with the window: 5 ms later Redis decides.
            tokio::time::sleep(Duration::from_millis(6)).await;
        }
        assert!(limited > 0, "{}: never found the counter", limiter.name());
    }
}
