//! The local deny cache of the fixed window and GCRA, against a real Redis: Redis calls saved
//! (counted with `INFO commandstats`), decisions unchanged, memory bounded, expiry on time.

mod support;

use std::time::{Duration, Instant};

use redkit::rate_limit::{Decision, DenyCache, FixedWindow, Gcra, LimitKey, Rate};
use redkit::CallOutcome;
use support::RedisServer;

fn key(s: &str) -> LimitKey {
    LimitKey::text(s).unwrap()
}

fn cached(name: &str, limit: u32, window: Duration, capacity: usize) -> (FixedWindow, DenyCache) {
    let cache = DenyCache::new(capacity).unwrap();
    let limiter = FixedWindow::new(name, Rate::new(support::nz(limit), window).unwrap())
        .unwrap()
        .with_deny_cache(cache.clone());
    (limiter, cache)
}

/// Two instances (own limiter, own cache, own connection) flood one client at 10x its limit
/// for several windows: Redis sees the allowed requests plus about one refusal per window per
/// instance, not the flood.
#[tokio::test]
async fn a_flood_at_ten_times_the_limit_costs_about_one_call_per_window_per_instance() {
    let server = RedisServer::spawn().await;
    let limit = 5u32;
    let window = Duration::from_millis(400);
    let client = key("flooder");
    // Warm the script cache so that no SCRIPT LOAD / NOSCRIPT retry blurs the count.
    let (warm, _) = cached("warm", 1, window, 10);
    warm.check(&mut server.conn().await, &client).await.unwrap();

    let before = server.evalsha_calls().await;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let mut conn = server.conn().await;
        let (limiter, cache) = cached("flood", limit, window, 100);
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            // 10 x limit per window: one request every window / (10 * limit) = 8 ms.
            let mut tick = tokio::time::interval(window / (10 * limit));
            let (mut allowed, mut sent) = (0u64, 0u64);
            while started.elapsed() < window * 5 {
                tick.tick().await;
                sent += 1;
                if limiter
                    .check(&mut conn, &client)
                    .await
                    .unwrap()
                    .is_allowed()
                {
                    allowed += 1;
                }
            }
            (allowed, sent, cache.stats())
        }));
    }
    let mut allowed = 0;
    let mut sent = 0;
    let mut hits = 0;
    for task in tasks {
        let (a, s, stats) = task.await.unwrap();
        allowed += a;
        sent += s;
        hits += stats.hits;
        assert_eq!(
            stats.hits + stats.misses,
            s,
            "every check consulted the cache"
        );
    }
    let elapsed = started.elapsed();
    let calls = server.evalsha_calls().await - before;
    // Windows start at the first counted hit and are back to back under a flood.
    let windows = u64::try_from(elapsed.as_millis() / window.as_millis()).unwrap() + 1;
    assert!(
        allowed <= windows * u64::from(limit),
        "allowed {allowed} in {windows} windows"
    );
    // Per window and instance: one refusal fills the cache; at most one more call when the
    // entry ends a round trip before the key does.
    let bound = allowed + windows * 2 * 2;
    assert!(
        calls <= bound,
        "{calls} Redis calls for {sent} requests ({allowed} allowed, {windows} windows); bound {bound}"
    );
    println!("flood: {sent} requests, {allowed} allowed, {windows} windows, {calls} Redis calls, {hits} local answers");
    assert!(sent >= 150, "the flood was a flood: {sent} requests");
    assert!(hits >= sent - bound, "{hits} local answers of {sent}");
}

/// A deterministic arrival sequence (costs 1..=3 under a limit of 10, short pauses, then a
/// wait past the reset, four rounds) gives the same decisions with and without the cache.
#[tokio::test]
async fn decisions_with_the_cache_equal_those_without() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let window = Duration::from_millis(700);
    let (with, cache) = cached("same", 10, window, 100);
    let without =
        FixedWindow::new("same", Rate::new(redkit::nonzero!(10), window).unwrap()).unwrap();
    let (a, b) = (key("with"), key("without"));
    let mut seed: u32 = 0x2545_f491;
    let mut next = || {
        seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        (seed >> 16) % 3
    };
    let mut compared = 0;
    for _round in 0..4 {
        let mut last = None;
        for _ in 0..14 {
            let cost = next() + 1;
            let x = with
                .check_n(&mut conn, &a, support::nz(cost))
                .await
                .unwrap();
            let y = without
                .check_n(&mut conn, &b, support::nz(cost))
                .await
                .unwrap();
            assert_eq!(
                x.is_allowed(),
                y.is_allowed(),
                "cost {cost}: {x:?} vs {y:?}"
            );
            assert_eq!(
                std::mem::discriminant(&x),
                std::mem::discriminant(&y),
                "{x:?} vs {y:?}"
            );
            assert_eq!(
                x.quota().remaining(),
                y.quota().remaining(),
                "{x:?} vs {y:?}"
            );
            assert_eq!(x.quota().limit(), y.quota().limit());
            let gap = |p: Duration, q: Duration| p.abs_diff(q);
            let tolerance = Duration::from_millis(60);
            assert!(gap(x.quota().reset_after(), y.quota().reset_after()) <= tolerance);
            if let (Some(p), Some(q)) = (x.retry_after(), y.retry_after()) {
                assert!(gap(p, q) <= tolerance, "{p:?} vs {q:?}");
            }
            compared += 1;
            last = Some(y);
            tokio::time::sleep(Duration::from_millis(u64::from(next()) * 5)).await;
        }
        // Well past both windows (they started a few ms apart).
        let reset = last.unwrap().quota().reset_after();
        tokio::time::sleep(reset + Duration::from_millis(150)).await;
    }
    assert_eq!(compared, 56);
    assert!(
        cache.stats().hits >= 4,
        "the cache answered: {:?}",
        cache.stats()
    );
}

/// 100k distinct limited clients through a cache of 1000: never more than 1000 entries, and
/// an evicted client is still refused (by Redis).
#[tokio::test]
async fn capacity_holds_under_a_hundred_thousand_limited_keys() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let (limiter, cache) = cached("many", 1, Duration::from_secs(120), 1000);
    let batch = 2000;
    for start in (0..100_000).step_by(batch) {
        let keys: Vec<LimitKey> = (start..start + batch)
            .map(|i| key(&format!("c{i}")))
            .collect();
        for expect_allowed in [true, false] {
            let outcomes = limiter.check_batch(&mut conn, &keys).await.unwrap();
            for outcome in outcomes {
                let decision = outcome.into_result().unwrap();
                assert_eq!(decision.is_allowed(), expect_allowed, "{decision:?}");
            }
            assert!(cache.len() <= 1000, "{} entries", cache.len());
        }
    }
    let stats = cache.stats();
    assert_eq!(stats.inserts, 100_000);
    assert!(stats.evictions >= 99_000, "{stats:?}");
    assert!(stats.len <= 1000 && stats.len >= 900, "{stats:?}");
    let first = limiter.check(&mut conn, &key("c0")).await.unwrap();
    assert!(matches!(first, Decision::Limited { .. }), "{first:?}");
}

/// The cache answers while the window lasts, counting down, and the client is allowed again
/// right after the reset.
#[tokio::test]
async fn allowed_again_right_after_the_reset() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let window = Duration::from_millis(600);
    let (limiter, cache) = cached("expiry", 2, window, 10);
    let client = key("e");
    assert!(limiter
        .check(&mut conn, &client)
        .await
        .unwrap()
        .is_allowed());
    assert!(limiter
        .check(&mut conn, &client)
        .await
        .unwrap()
        .is_allowed());
    let from_redis = limiter.check(&mut conn, &client).await.unwrap();
    let first_wait = from_redis.retry_after().expect("limited");
    let before = server.evalsha_calls().await;
    let from_cache = limiter.check(&mut conn, &client).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let later = limiter.check(&mut conn, &client).await.unwrap();
    assert_eq!(server.evalsha_calls().await, before, "answered locally");
    assert_eq!(cache.stats().hits, 2);
    assert_eq!(from_cache.quota().remaining(), 0);
    let (w1, w2) = (
        from_cache.retry_after().unwrap(),
        later.retry_after().unwrap(),
    );
    assert!(w1 <= first_wait, "{w1:?} <= {first_wait:?}");
    assert!(
        w2 + Duration::from_millis(90) <= w1,
        "counts down: {w2:?} after {w1:?}"
    );

    // Wait exactly what the cache said; the key must be gone by then or within a round trip.
    tokio::time::sleep(w2).await;
    let deadline = Instant::now() + Duration::from_millis(200);
    loop {
        let d = limiter.check(&mut conn, &client).await.unwrap();
        if d.is_allowed() {
            assert_eq!(d.quota().remaining(), 1, "a fresh window");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still refused after the reset: {d:?}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Batches leave cached keys out of the round trip; `reset` clears the local entry.
#[tokio::test]
async fn batches_skip_cached_keys_and_reset_clears_the_entry() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let (limiter, cache) = cached("batch", 1, Duration::from_secs(60), 10);
    let (busy, fresh) = (key("busy"), key("fresh"));
    limiter.check(&mut conn, &busy).await.unwrap();
    assert!(!limiter.check(&mut conn, &busy).await.unwrap().is_allowed());
    let before = server.evalsha_calls().await;
    let outcomes = limiter
        .check_batch(&mut conn, &[busy.clone(), fresh.clone(), busy.clone()])
        .await
        .unwrap();
    assert_eq!(
        server.evalsha_calls().await - before,
        1,
        "only the fresh key went out"
    );
    let decisions: Vec<Decision> = outcomes
        .into_iter()
        .map(|o| match o {
            CallOutcome::Ran(Ok(d)) => d,
            other => panic!("{other:?}"),
        })
        .collect();
    let allowed: Vec<bool> = decisions.iter().map(Decision::is_allowed).collect();
    assert_eq!(allowed, [false, true, false]);
    // A cost above the limit is never answered from the cache.
    let huge = limiter
        .check_n(&mut conn, &busy, redkit::nonzero!(2))
        .await
        .unwrap();
    assert!(
        matches!(huge, Decision::CostExceedsLimit { .. }),
        "{huge:?}"
    );

    assert!(limiter.reset(&mut conn, &busy).await.unwrap());
    assert!(limiter.check(&mut conn, &busy).await.unwrap().is_allowed());
    assert!(cache.len() <= 1);
}

/// The middleware with `deny_cache_capacity`: a limited client is answered 429 (with
/// `Retry-After` and `RateLimit`) without a Redis call.
#[tokio::test]
async fn the_middleware_skips_redis_for_a_known_limited_client() {
    use redkit::middleware::RateLimitLayer;

    let server = RedisServer::spawn().await;
    let client = redis::Client::open(format!("{}?protocol=resp3", server.url())).unwrap();
    let conn = redis::aio::ConnectionManager::new(client).await.unwrap();
    let limiter = FixedWindow::new("mw", Rate::per_minute(redkit::nonzero!(3))).unwrap();
    let layer = RateLimitLayer::builder(limiter, conn)
        .deny_cache_capacity(100)
        .build()
        .unwrap();
    assert!(RateLimitLayer::builder(
        FixedWindow::new("x", Rate::per_second(redkit::nonzero!(1))).unwrap(),
        0
    )
    .deny_cache_capacity(0)
    .build()
    .is_err());
    let app = axum::Router::new()
        .route("/", axum::routing::get(|| async { "ok" }))
        .layer(layer.clone());
    let addr = support::serve_axum(app).await;
    let http = reqwest::Client::new();
    let url = format!("http://{addr}/");
    // Warm the script cache (the first call may load it).
    let first = http.get(&url).send().await.unwrap();
    assert_eq!(first.status(), 200);
    let before = server.evalsha_calls().await;
    let mut statuses = Vec::new();
    let mut last = None;
    for _ in 0..20 {
        let res = http.get(&url).send().await.unwrap();
        statuses.push(res.status().as_u16());
        last = Some(res);
    }
    let calls = server.evalsha_calls().await - before;
    assert_eq!(
        statuses.iter().filter(|s| **s == 200).count(),
        2,
        "{statuses:?}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == 429).count(),
        18,
        "{statuses:?}"
    );
    assert_eq!(calls, 3, "2 allowed + 1 refusal went to Redis");
    let stats = layer.deny_cache().unwrap().stats();
    assert_eq!(stats.hits, 17, "{stats:?}");
    assert_eq!(layer.stats().limited, 18);
    let last = last.unwrap();
    let retry: u64 = last.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    let state = last.headers()["ratelimit"].to_str().unwrap();
    assert!(state.starts_with("\"mw\";r=0;t="), "{state}");
}

/// GCRA: every refusal the cache gives locally is one Redis gives too. A client floods a
/// bucket (10 per 200 ms, burst 5) with random costs 1..=3; each time the cached limiter
/// answers from the cache, a cache-less limiter of the same name (same key) asks Redis at once:
/// it must refuse too unless the cached refusal has ended by the time Redis answers, and its
/// retry-after must not end before the cached one. Bounded: ~1.5 s (20 s on a loaded machine).
#[tokio::test]
async fn gcra_refusals_from_the_cache_are_refusals_redis_gives() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let cache = DenyCache::new(100).unwrap();
    let period = Duration::from_millis(200);
    let burst = redkit::nonzero!(5);
    let rate = Rate::new(redkit::nonzero!(10), period).unwrap();
    let with = Gcra::bursting("gcra-dc", rate, burst)
        .unwrap()
        .with_deny_cache(cache.clone());
    let without = Gcra::bursting("gcra-dc", rate, burst).unwrap();
    let client = key("flooder");
    let mut seed: u32 = 0x9e37_79b9;
    let mut next = || {
        seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        (seed >> 16) % 3
    };
    let (mut local, mut remote, mut allowed) = (0, 0, 0);
    let started = Instant::now();
    // 1.5 s, and on a machine too loaded for 20 cached answers in that time, longer (at most
    // 20 s): the count below is of events, not of time.
    while started.elapsed() < Duration::from_millis(1500)
        || (local < 20 && started.elapsed() < Duration::from_secs(20))
    {
        let cost = next() + 1;
        let hits = cache.stats().hits;
        // Taken before the call: the cache computes `retry_after` at some instant between
        // `asked` and its return, so it claims "refused until at least `asked + retry_after`".
        // (An instant taken after the return made the claim look later than it was whenever
        // the task was descheduled in between: seen once, by 0.6 ms, on a loaded machine.)
        let asked = Instant::now();
        let x = with
            .check_n(&mut conn, &client, support::nz(cost))
            .await
            .unwrap();
        if cache.stats().hits > hits {
            local += 1;
            let Decision::Limited { retry_after, .. } = x else {
                panic!("the cache answered something else than a refusal: {x:?}");
            };
            // Redis, asked now, may only disagree once that moment has passed (its answer
            // arrives after it).
            let y = without
                .check_n(&mut conn, &client, support::nz(cost))
                .await
                .unwrap();
            let since = asked.elapsed();
            match y {
                Decision::Limited {
                    retry_after: real, ..
                } => assert!(
                    retry_after <= real + since,
                    "cached retry-after {retry_after:?} later than Redis's {real:?} (+{since:?})"
                ),
                other => assert!(
                    retry_after <= since,
                    "cost {cost}: refused locally for {retry_after:?}, Redis allowed it \
                     {since:?} later: {other:?}"
                ),
            }
        } else {
            remote += 1;
            allowed += u32::from(x.is_allowed());
        }
        // ~4x the rate on average (one arrival every ~5 ms for costs averaging 2).
        tokio::time::sleep(Duration::from_millis(u64::from(next()) * 4 + 1)).await;
    }
    println!("gcra deny cache: {local} answered locally, {remote} by Redis ({allowed} allowed)");
    assert!(local >= 20, "the cache answered too rarely: {local}");
    assert!(allowed > 0);
}

/// GCRA: a cached refusal ends no later than Redis's: right after its retry-after, the same
/// cost is allowed again through the cached limiter.
#[tokio::test]
async fn gcra_cached_refusal_ends_at_its_retry_after() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let cache = DenyCache::new(100).unwrap();
    let l = Gcra::new(
        "gcra-end",
        Rate::new(redkit::nonzero!(5), Duration::from_millis(500)).unwrap(),
    )
    .unwrap()
    .with_deny_cache(cache.clone());
    let client = key("c");
    let mut refusal = None;
    for _ in 0..10 {
        let d = l.check(&mut conn, &client).await.unwrap();
        if let Decision::Limited { retry_after, .. } = d {
            refusal = Some(retry_after);
            break;
        }
    }
    let retry = refusal.expect("the burst ran out");
    // Within the refusal: answered locally.
    let hits = cache.stats().hits;
    assert!(!l.check(&mut conn, &client).await.unwrap().is_allowed());
    assert_eq!(cache.stats().hits, hits + 1);
    tokio::time::sleep(retry + Duration::from_millis(2)).await;
    let d = l.check(&mut conn, &client).await.unwrap();
    assert!(d.is_allowed(), "{d:?}");
    // A reset clears the local entry too.
    for _ in 0..10 {
        if !l.check(&mut conn, &client).await.unwrap().is_allowed() {
            break;
        }
    }
    assert!(l.reset(&mut conn, &client).await.unwrap());
    assert!(l.check(&mut conn, &client).await.unwrap().is_allowed());
}

/// GCRA: a refusal of cost `c` is cached for every cost of at least `c` (answered locally),
/// and only for those: a smaller cost may fit and goes to Redis.
#[tokio::test]
async fn gcra_cached_refusal_covers_exactly_the_costs_that_cannot_fit() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let cache = DenyCache::new(100).unwrap();
    let l = Gcra::new("gcra-cost", Rate::per_minute(redkit::nonzero!(10)))
        .unwrap()
        .with_deny_cache(cache.clone());
    let client = key("c");
    // 9 of the 10 units: 1 left, refilled one per 6 s.
    assert!(l
        .check_n(&mut conn, &client, redkit::nonzero!(9))
        .await
        .unwrap()
        .is_allowed());
    let d = l
        .check_n(&mut conn, &client, redkit::nonzero!(3))
        .await
        .unwrap();
    assert!(matches!(d, Decision::Limited { .. }), "{d:?}");
    let calls = server.evalsha_calls().await;
    let hits = cache.stats().hits;
    // The same cost, and a larger one: refused locally.
    for cost in [3, 4] {
        let d = l
            .check_n(&mut conn, &client, support::nz(cost))
            .await
            .unwrap();
        assert!(matches!(d, Decision::Limited { .. }), "{d:?}");
    }
    assert_eq!(cache.stats().hits, hits + 2, "costs >= 3 answered locally");
    assert_eq!(
        server.evalsha_calls().await,
        calls,
        "no script call for them"
    );
    // A smaller cost goes to Redis, which allows it (1 unit left).
    assert!(l
        .check_n(&mut conn, &client, redkit::nonzero!(1))
        .await
        .unwrap()
        .is_allowed());
    assert_eq!(cache.stats().hits, hits + 2);
    assert_eq!(server.evalsha_calls().await, calls + 1);
}
