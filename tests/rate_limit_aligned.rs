//! Fixed windows aligned to the clock (`AlignedWindow`, fixed_window_aligned.v3)
//! against a real Redis: counts, resets at the window's end, nothing half-applied whatever is
//! stored and whatever the ACL denies.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redkit::rate_limit::{AlignedWindow, Decision, DenyCache, LimitKey, Rate};
use redkit::{Call, Error, Registry, ScriptManager};
use support::RedisServer;

/// A window far longer than any test (2^40 ms, about 35 years): it never rolls over mid-test.
const LONG: Duration = Duration::from_millis(1 << 40);

fn now_ms() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

fn aligned(name: &str, limit: u32, window: Duration) -> AlignedWindow {
    AlignedWindow::new(name, Rate::new(support::nz(limit), window).unwrap()).unwrap()
}

/// Every key of the (private) server with its DUMP and whether it has a TTL
/// ([`support::snapshot`], TTLs reduced to "has one": they run down between two snapshots).
async fn keyspace(server: &RedisServer) -> BTreeMap<Vec<u8>, (Vec<u8>, bool)> {
    support::snapshot(&mut server.conn().await)
        .await
        .into_iter()
        .map(|(key, (dump, pttl))| (key, (dump, pttl > 0)))
        .collect()
}

#[tokio::test]
async fn counts_to_the_limit_in_a_key_per_window_and_resets_at_the_windows_end() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let window = Duration::from_secs(3600);
    let limiter = aligned("al", 3, window);
    let key = LimitKey::text("u").unwrap();
    let before = now_ms();
    let mut decisions = Vec::new();
    for _ in 0..5 {
        decisions.push(limiter.check(&mut conn, &key).await.unwrap());
    }
    let after = now_ms();
    let remaining: Vec<u32> = decisions.iter().map(|d| d.quota().remaining()).collect();
    let allowed: Vec<bool> = decisions.iter().map(Decision::is_allowed).collect();
    // Unless the hour turned during these calls (then the new window counts afresh).
    if before / 3_600_000 == after / 3_600_000 {
        assert_eq!(allowed, [true, true, true, false, false], "{decisions:?}");
        assert_eq!(remaining, [2, 1, 0, 0, 0]);
        let number = before / 3_600_000;
        let rk = format!("redkit:rl:al:{{k:u}}:{number}");
        assert_eq!(limiter.redis_key(&key), rk);
        let stored: String = server.cmd(&["GET", &rk]).await;
        assert_eq!(stored, "3", "limited requests are not counted");
        // The reset is the window's end by this clock; the key outlives it by the grace (5 s).
        let end = (number + 1) * 3_600_000;
        for d in &decisions {
            let reset = u64::try_from(d.quota().reset_after().as_millis()).unwrap();
            assert!(
                end - after <= reset && reset <= end - before,
                "{reset} vs {}..={}",
                end - after,
                end - before
            );
        }
        assert_eq!(
            decisions[3].retry_after(),
            Some(decisions[3].quota().reset_after())
        );
        let pttl: i64 = server.cmd(&["PTTL", &rk]).await;
        let pttl = u64::try_from(pttl).unwrap();
        assert!(
            pttl <= end - before + 5_000 && pttl + 60_000 > end - after + 5_000,
            "{pttl}"
        );
        let keys: Vec<String> = server.cmd(&["KEYS", "*"]).await;
        assert_eq!(keys, [rk], "one key per client and window");
    }
}

#[tokio::test]
async fn the_next_window_is_a_new_key_that_counts_from_zero() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let limiter = aligned("roll", 1, Duration::from_millis(400));
    let key = LimitKey::text("u").unwrap();
    // Start early in a window, so that two calls fit in it.
    let first = loop {
        let d = limiter.check(&mut conn, &key).await.unwrap();
        if d.quota().reset_after() > Duration::from_millis(200) && d.is_allowed() {
            break d;
        }
        tokio::time::sleep(d.quota().reset_after() + Duration::from_millis(5)).await;
    };
    let second = limiter.check(&mut conn, &key).await.unwrap();
    let first_key = limiter.redis_key(&key);
    assert!(!second.is_allowed(), "{second:?}");
    let wait = second.retry_after().unwrap();
    assert!(wait <= first.quota().reset_after(), "{wait:?} {first:?}");
    tokio::time::sleep(wait + Duration::from_millis(5)).await;
    let third = limiter.check(&mut conn, &key).await.unwrap();
    assert!(
        third.is_allowed(),
        "{third:?}: the next window counts afresh"
    );
    assert_ne!(limiter.redis_key(&key), first_key);
    // The old window's counter expires by itself (within its grace: min(window, 5 s) = 400 ms).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    loop {
        let exists: i64 = server.cmd(&["EXISTS", &first_key]).await;
        if exists == 0 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{first_key} kept");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn concurrent_checks_allow_exactly_the_limit() {
    let server = RedisServer::spawn().await;
    let conn = server.conn().await;
    let limiter = Arc::new(aligned("conc", 20, LONG));
    let key = LimitKey::text("hot").unwrap();
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let (l, k, mut c) = (limiter.clone(), key.clone(), conn.clone());
        tasks.push(tokio::spawn(async move {
            l.check(&mut c, &k).await.unwrap().is_allowed()
        }));
    }
    let mut allowed = 0;
    for t in tasks {
        allowed += usize::from(t.await.unwrap());
    }
    assert_eq!(allowed, 20);
    let stored: String = server.cmd(&["GET", &limiter.redis_key(&key)]).await;
    assert_eq!(stored, "20");
}

#[tokio::test]
async fn a_limited_request_or_a_cost_above_the_limit_leaves_the_keyspace_unchanged() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let limiter = aligned("back", 10, LONG);
    let key = LimitKey::text("full").unwrap();
    let rk = limiter.redis_key(&key);
    let _: () = server.cmd(&["SET", "rk:other", "untouched"]).await;
    for (stored, cost) in [("10", 1), ("8", 3), ("0", 11), ("4", 11)] {
        let _: () = server.cmd(&["SET", &rk, stored, "PX", "600000"]).await;
        let before = keyspace(&server).await;
        let d = limiter
            .check_n(&mut conn, &key, support::nz(cost))
            .await
            .unwrap();
        assert!(!d.is_allowed(), "{stored} + {cost}: {d:?}");
        let count: u32 = stored.parse().unwrap();
        assert_eq!(d.quota().remaining(), 10 - count, "{stored} + {cost}");
        assert_eq!(
            matches!(d, Decision::CostExceedsLimit { cost: 11, .. }),
            cost == 11
        );
        assert_eq!(keyspace(&server).await, before, "{stored} + {cost}");
    }
    // A cost above the limit with no counter: nothing created.
    let _: () = server.cmd(&["DEL", &rk]).await;
    let d = limiter
        .check_n(&mut conn, &key, redkit::nonzero!(11))
        .await
        .unwrap();
    assert!(matches!(d, Decision::CostExceedsLimit { .. }), "{d:?}");
    assert_eq!(d.quota().remaining(), 10);
    let exists: i64 = server.cmd(&["EXISTS", &rk]).await;
    assert_eq!(exists, 0);
    // What fits is counted, up to the limit exactly; a new counter gets a TTL.
    let d = limiter
        .check_n(&mut conn, &key, redkit::nonzero!(10))
        .await
        .unwrap();
    assert!(d.is_allowed());
    assert_eq!(d.quota().remaining(), 0);
    let pttl: i64 = server.cmd(&["PTTL", &rk]).await;
    assert!(pttl > 0, "{pttl}");
}

#[tokio::test]
async fn a_poisoned_counter_is_refused_and_nothing_is_written() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let key = LimitKey::text("victim").unwrap();
    let _: () = server.cmd(&["SET", "rk:other", "untouched"]).await;
    // A low limit (the count is compared) and a high one (INCRBY alone must refuse).
    for limit in [10, 1_000_000] {
        let limiter = aligned("poison", limit, LONG);
        let rk = limiter.redis_key(&key);
        for with_ttl in [false, true] {
            for bad in support::NOT_COUNTERS {
                let _: () = server.cmd(&["DEL", &rk]).await;
                let _: () = server.cmd(&["SET", &rk, bad]).await;
                if with_ttl {
                    let _: i64 = server.cmd(&["PEXPIRE", &rk, "60000"]).await;
                }
                let before = keyspace(&server).await;
                for cost in [1, limit + 1] {
                    let r = limiter.check_n(&mut conn, &key, support::nz(cost)).await;
                    assert!(
                        matches!(r, Err(Error::CorruptData { .. })),
                        "{bad:?} limit {limit} cost {cost} ttl={with_ttl}: {r:?}"
                    );
                    assert_eq!(keyspace(&server).await, before, "{bad:?} ttl={with_ttl}");
                }
            }
            for (kind, args) in [
                ("hash", vec!["HSET", &rk, "f", "1"]),
                ("list", vec!["RPUSH", &rk, "1"]),
            ] {
                let _: () = server.cmd(&["DEL", &rk]).await;
                let _: i64 = server.cmd(&args).await;
                let before = keyspace(&server).await;
                for cost in [1, limit + 1] {
                    let r = limiter.check_n(&mut conn, &key, support::nz(cost)).await;
                    assert!(matches!(r, Err(Error::WrongType { .. })), "{kind}: {r:?}");
                    assert_eq!(keyspace(&server).await, before, "{kind}");
                }
            }
        }
        // Valid extremes: int64 max is far above the limit (limited, unchanged).
        let _: () = server.cmd(&["DEL", &rk]).await;
        let _: () = server
            .cmd(&["SET", &rk, "9223372036854775807", "PX", "60000"])
            .await;
        let before = keyspace(&server).await;
        let d = limiter.check(&mut conn, &key).await.unwrap();
        assert!(!d.is_allowed(), "{d:?}");
        assert_eq!(d.quota().remaining(), 0);
        assert_eq!(keyspace(&server).await, before);
        let _: () = server.cmd(&["DEL", &rk]).await;
    }
}

/// The states a counter can be in, the cost checked, and the commands the script runs then.
const STATES: [(&str, u32, &[&str]); 5] = [
    ("new", 1, &["INCRBY", "PEXPIRE"]),
    ("counting", 1, &["INCRBY", "PEXPIRE"]),
    ("limited", 1, &["INCRBY", "PEXPIRE"]),
    ("new", 3, &["GET"]),
    ("counting", 3, &["GET"]),
];

#[tokio::test]
async fn under_an_acl_user_denied_any_inner_command_nothing_is_written() {
    let server = RedisServer::spawn().await;
    let limiter = aligned("acl", 2, LONG);
    let key = LimitKey::text("u").unwrap();
    let rk = limiter.redis_key(&key);
    let _: () = server.cmd(&["SET", "rk:other", "untouched"]).await;
    // Preload as the default user, so a denial is about the inner command, not SCRIPT LOAD.
    ScriptManager::new()
        .preload(&mut server.conn().await)
        .await
        .unwrap();
    for denied in ["GET", "INCRBY", "PEXPIRE"] {
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
        for (state, cost, runs) in STATES {
            let _: () = server.cmd(&["DEL", &rk]).await;
            match state {
                "counting" => server.cmd(&["SET", &rk, "1", "PX", "600000"]).await,
                "limited" => server.cmd(&["SET", &rk, "2", "PX", "600000"]).await,
                _ => {}
            }
            let before = keyspace(&server).await;
            let r = limiter.check_n(&mut conn, &key, support::nz(cost)).await;
            if runs.contains(&denied) {
                assert!(
                    matches!(r, Err(Error::PermissionDenied { .. })),
                    "-{denied} in state {state} cost {cost}: {r:?}"
                );
                assert_eq!(
                    keyspace(&server).await,
                    before,
                    "-{denied} in state {state}: nothing written"
                );
            } else {
                let d = r.unwrap_or_else(|e| panic!("-{denied} in state {state}: {e}"));
                assert_eq!(d.is_allowed(), state != "limited" && cost == 1, "{state}");
            }
        }
    }
}

#[tokio::test]
async fn the_script_refuses_bad_arguments_before_writing() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let script = Registry::global()
        .require("fixed_window_aligned", 3)
        .unwrap();
    let manager = ScriptManager::new();
    let _: () = server.cmd(&["SET", "redkit:rl:x:{k:b}:1", "3"]).await;
    let bad: [[&str; 3]; 14] = [
        ["0", "1000", "1"],
        ["-1", "1000", "1"],
        ["abc", "1000", "1"],
        ["1.5", "1000", "1"],
        ["inf", "1000", "1"],
        ["nan", "1000", "1"],
        ["10", "0", "1"],
        ["10", "1.5", "1"],
        ["10", "1e400", "1"],
        ["10", "1000", "0"],
        ["10", "1000", "-5"],
        ["10", "1000", "0x1"],
        ["10", "1000", "9007199254740992"],
        ["", "", ""],
    ];
    for args in bad {
        for rk in ["redkit:rl:x:{k:a}:1", "redkit:rl:x:{k:b}:1"] {
            let before = keyspace(&server).await;
            let mut call = Call::new(script);
            call.key(rk).arg(args[0]).arg(args[1]).arg(args[2]);
            let r = manager.invoke::<redis::Value, _>(&mut conn, &call).await;
            assert!(
                matches!(r, Err(Error::InvalidInput { .. })),
                "{args:?} on {rk}: {r:?}"
            );
            assert_eq!(keyspace(&server).await, before, "{args:?} on {rk}");
        }
    }
}

#[tokio::test]
async fn the_deny_cache_and_batches_work_on_aligned_windows() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let cache = DenyCache::new(100).unwrap();
    let limiter = aligned("dc", 2, LONG).with_deny_cache(cache.clone());
    let keys: Vec<LimitKey> = (1..=3u8)
        .map(|i| LimitKey::ip([10, 0, 0, i].into()))
        .collect();
    for round in 0..3 {
        let outcomes = limiter.check_batch(&mut conn, &keys).await.unwrap();
        for o in outcomes {
            let d = o.into_result().unwrap();
            assert_eq!(d.is_allowed(), round < 2, "round {round}: {d:?}");
        }
    }
    // The refusals of round 2 are remembered: round 3 is answered locally.
    let calls = server.evalsha_calls().await;
    let d = limiter.check(&mut conn, &keys[0]).await.unwrap();
    assert!(!d.is_allowed());
    assert_eq!(
        server.evalsha_calls().await,
        calls,
        "answered from the cache"
    );
    assert!(cache.stats().hits >= 1);
    // reset clears the current window's counter (and the cache entry).
    assert!(limiter.reset(&mut conn, &keys[0]).await.unwrap());
    assert!(limiter
        .check(&mut conn, &keys[0])
        .await
        .unwrap()
        .is_allowed());
}
