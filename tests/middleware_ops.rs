//! Running the rate-limit layer in production, against a real Redis: allow and deny lists
//! decided before any Redis call, shadow mode (counted and headed as if enforced, never
//! refused), policies replaced while requests flow (no half-old, half-new request; counters
//! kept), and the local fallback while Redis is frozen (each instance its share, bounded, back
//! on Redis with its first answer).

mod support;

use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Request, Response, StatusCode};
use redis::aio::ConnectionManager;
use redkit::middleware::{
    ClientId, FailMode, FnKey, LimitOutcome, Policies, PolicyConfig, RateLimitLayer, Unchecked,
    RATELIMIT, RATELIMIT_POLICY,
};
use redkit::rate_limit::{FixedWindow, Gcra, Limiter, QuotaLease, Rate, SlidingWindow};
use support::RedisServer;
use tower::{Layer, Service, ServiceExt};

/// The client is the address in the `x-client` header.
fn by_header() -> FnKey<impl Fn(&redkit::middleware::RequestInfo<'_>) -> Option<ClientId>> {
    FnKey::new(|req: &redkit::middleware::RequestInfo<'_>| {
        let ip: IpAddr = req.headers().get("x-client")?.to_str().ok()?.parse().ok()?;
        Some(ClientId::Ip(ip))
    })
}

/// The handler: the body names the outcome, and for a decision the quota's limit.
async fn handler(req: Request<String>) -> Result<Response<String>, Infallible> {
    let body = match req.extensions().get::<LimitOutcome>() {
        Some(LimitOutcome::Checked(d)) => format!("checked limit={}", d.quota().limit()),
        Some(LimitOutcome::WouldLimit(d)) => format!("would-limit limit={}", d.quota().limit()),
        Some(LimitOutcome::Unchecked(Unchecked::Allowlisted)) => "allowlisted".to_owned(),
        Some(LimitOutcome::Unchecked(Unchecked::LocalFallback)) => "local".to_owned(),
        other => format!("{other:?}"),
    };
    Ok(Response::new(body))
}

async fn manager(server: &RedisServer) -> ConnectionManager {
    let client = redis::Client::open(format!("{}?protocol=resp3", server.url())).unwrap();
    ConnectionManager::new(client).await.unwrap()
}

/// The Redis counter of `client` under the layer's default policy.
async fn counted<C, K, H>(
    server: &RedisServer,
    layer: &RateLimitLayer<C, K, H>,
    client: &str,
) -> u64 {
    let key = redkit::rate_limit::LimitKey::ip(client.parse().unwrap());
    let key = layer.policies().for_path("/").redis_key(&key);
    server.cmd::<u64>(&["GET", &key]).await
}

/// A layer of `policies` (client from `x-client`, defaults otherwise) and its service.
async fn layered(
    server: &RedisServer,
    policies: Policies,
) -> (
    RateLimitLayer<ConnectionManager, impl redkit::middleware::KeyExtractor>,
    impl Service<Request<String>, Response = Response<String>, Error = Infallible> + Clone,
) {
    let layer = RateLimitLayer::builder(policies, manager(server).await)
        .key_extractor(by_header())
        .build()
        .unwrap();
    let service = layer.layer(tower::service_fn(handler));
    (layer, service)
}

fn config(toml: &str) -> Policies {
    let config: PolicyConfig = toml::from_str(toml).unwrap();
    Policies::from_config(&config).unwrap()
}

/// One request from `client` through `service`: status, body, headers.
async fn send<S>(service: &S, client: &str) -> (StatusCode, String, http::HeaderMap)
where
    S: Service<Request<String>, Response = Response<String>, Error = Infallible> + Clone,
{
    let req = Request::builder()
        .uri("/")
        .header("x-client", client)
        .body(String::new())
        .unwrap();
    let response = service.clone().oneshot(req).await.unwrap();
    let (parts, body) = response.into_parts();
    (parts.status, body, parts.headers)
}

#[tokio::test]
async fn allow_and_deny_lists_are_decided_before_any_redis_call() {
    let server = RedisServer::spawn().await;
    let policies = config(
        r#"
        allow = ["10.0.0.0/8"]
        deny = ["203.0.113.0/24", "10.66.0.0/16"]
        [default]
        name = "api"
        limit = 2
        window_ms = 60000
        "#,
    );
    let (layer, service) = layered(&server, policies).await;
    let calls = server.evalsha_calls().await + server.command_calls("eval").await;
    for _ in 0..5 {
        let (status, body, _) = send(&service, "10.1.2.3").await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "allowlisted"));
    }
    for denied in ["203.0.113.9", "10.66.1.1", "::ffff:203.0.113.10"] {
        let (status, _, _) = send(&service, denied).await;
        assert_eq!(
            status,
            StatusCode::FORBIDDEN,
            "{denied}: the more specific deny wins"
        );
    }
    let after = server.evalsha_calls().await + server.command_calls("eval").await;
    assert_eq!(after, calls, "no Redis call for listed clients");
    let statuses: Vec<StatusCode> = {
        let mut v = Vec::new();
        for _ in 0..3 {
            v.push(send(&service, "192.0.2.1").await.0);
        }
        v
    };
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
    let stats = layer.stats();
    assert_eq!(
        (
            stats.allowlisted,
            stats.denied,
            stats.allowed,
            stats.limited
        ),
        (5, 3, 2, 1)
    );
}

#[tokio::test]
async fn a_shadow_policy_counts_and_heads_as_if_enforced_but_never_refuses() {
    let server = RedisServer::spawn().await;
    let policies = config(
        r#"
        [default]
        name = "api"
        limit = 2
        window_ms = 60000
        shadow = true
        "#,
    );
    let (layer, service) = layered(&server, policies).await;
    let mut bodies = Vec::new();
    for _ in 0..4 {
        let (status, body, headers) = send(&service, "192.0.2.7").await;
        assert_eq!(status, StatusCode::OK, "shadow never refuses");
        assert!(headers.contains_key(RATELIMIT) && headers.contains_key(RATELIMIT_POLICY));
        bodies.push((body, headers[RATELIMIT].to_str().unwrap().to_owned()));
    }
    assert_eq!(bodies[0].0, "checked limit=2");
    assert_eq!(bodies[2].0, "would-limit limit=2");
    assert_eq!(bodies[3].0, "would-limit limit=2");
    assert!(
        bodies[3].1.contains("r=0"),
        "headers as if enforced: {}",
        bodies[3].1
    );
    let stats = layer.stats();
    assert_eq!(
        (stats.allowed, stats.shadow_limited, stats.limited),
        (2, 2, 0)
    );
    assert_eq!(
        counted(&server, &layer, "192.0.2.7").await,
        2,
        "refused checks are not counted"
    );
}

/// Shadow mode over leased quota, for the fixed and the sliding window and GCRA: the units
/// held in process answer as Redis would, the refusals past the limit are counted as
/// shadow-limited and let through, and Redis never counts past the limit.
#[tokio::test]
async fn a_shadow_policy_over_leased_quota_counts_refusals_and_lets_them_through() {
    let server = RedisServer::spawn().await;
    for (algorithm, client) in [
        ("fixed_window", "192.0.2.21"),
        ("sliding_window", "192.0.2.22"),
        ("gcra", "192.0.2.23"),
    ] {
        let policies = config(&format!(
            r#"
            lease = {{ max_units = 4 }}
            [default]
            name = "api"
            limit = 5
            window_ms = 60000
            algorithm = "{algorithm}"
            shadow = true
            "#
        ));
        let (layer, service) = layered(&server, policies).await;
        let mut bodies = Vec::new();
        for _ in 0..8 {
            let (status, body, _) = send(&service, client).await;
            assert_eq!(status, StatusCode::OK, "{algorithm}: shadow never refuses");
            bodies.push(body);
        }
        assert!(
            bodies[..5].iter().all(|b| b == "checked limit=5"),
            "{algorithm}: {bodies:?}"
        );
        assert!(
            bodies[5..].iter().all(|b| b == "would-limit limit=5"),
            "{algorithm}: {bodies:?}"
        );
        let stats = layer.stats();
        assert_eq!(
            (stats.allowed, stats.shadow_limited, stats.limited),
            (5, 3, 0),
            "{algorithm}"
        );
        let key = redkit::rate_limit::LimitKey::ip(client.parse().unwrap());
        let key = layer.policies().for_path("/").redis_key(&key);
        if algorithm == "gcra" {
            // A burst of 5 units of 12 s each: the TAT moved by exactly 60 s, no further.
            let pttl: i64 = server.cmd(&["PTTL", &key]).await;
            assert!(
                (50_000..=60_000).contains(&pttl),
                "gcra: the TAT moved by the burst only: {pttl} ms"
            );
            continue;
        }
        let raw: String = server.cmd(&["GET", &key]).await;
        let current: u64 = raw.split(':').next().unwrap().parse().unwrap();
        assert_eq!(
            current, 5,
            "{algorithm}: every counted unit used once, none past the limit"
        );
    }
}

#[tokio::test]
async fn policies_replaced_while_serving_keep_counters() {
    let server = RedisServer::spawn().await;
    let limited = |limit: u32| {
        Policies::new(FixedWindow::new("api", Rate::per_minute(support::nz(limit))).unwrap())
    };
    let layer = RateLimitLayer::builder(limited(3), manager(&server).await)
        .key_extractor(by_header())
        .build()
        .unwrap();
    let service = layer.layer(tower::service_fn(handler));
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(send(&service, "192.0.2.1").await.0.as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 429]);
    // Grown: the client keeps its 3 used, and gets 2 more.
    layer.replace_policies(limited(5));
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(send(&service, "192.0.2.1").await.0.as_u16());
    }
    assert_eq!(statuses, [200, 200, 429], "counters kept across the swap");
    // Shrunk below what it used: refused until the window ends.
    layer.replace_policies(limited(1));
    assert_eq!(
        send(&service, "192.0.2.1").await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
    // A service built before the swap (a clone) sees the new set too.
    assert_eq!(layer.policies().for_path("/").limit(), 1);
}

/// A swap drops the units leased under the old policies: after a limit of 100 a minute,
/// leased in blocks of up to 16, has admitted 10 requests (units held in process beyond
/// them), the policies are replaced by a limit of 5, leased too. The fixed and the sliding
/// window then refuse every request (the window holds 10 or more), never answering from the
/// units the old limiter held. GCRA's state is a time (the TAT) that keeps its place and is
/// read at the new rate: the 10 requests (and the units leased ahead, at most 16) put it at
/// most 9.6 s ahead, and a limit of 5 a minute (12 s per unit, a burst of 5) lets 4 more
/// through at once; with the old units still answering more would pass: at most the new
/// burst of 5 must.
#[tokio::test]
async fn a_swap_drops_the_leases_held_and_never_admits_past_the_new_limit() {
    let server = RedisServer::spawn().await;
    let lease = QuotaLease::new(16).unwrap();
    let rate = |limit: u32| Rate::per_minute(support::nz(limit));
    let fixed = |limit: u32| -> Limiter {
        FixedWindow::new("fx", rate(limit))
            .unwrap()
            .leased(lease)
            .into()
    };
    let sliding = |limit: u32| -> Limiter {
        SlidingWindow::new("sw", rate(limit))
            .unwrap()
            .leased(lease)
            .into()
    };
    let gcra =
        |limit: u32| -> Limiter { Gcra::new("gc", rate(limit)).unwrap().leased(lease).into() };
    type Build<'a> = &'a dyn Fn(u32) -> Limiter;
    let cases: [(Build, std::ops::RangeInclusive<u64>); 3] =
        [(&fixed, 0..=0), (&sliding, 0..=0), (&gcra, 1..=5)];
    for (build, after_swap) in cases {
        let name = build(1).name().to_owned();
        let layer = RateLimitLayer::builder(Policies::new(build(100)), manager(&server).await)
            .key_extractor(by_header())
            .build()
            .unwrap();
        let service = layer.layer(tower::service_fn(handler));
        let before = server.evalsha_calls().await;
        for i in 0..10 {
            assert_eq!(
                send(&service, "192.0.2.9").await.0,
                StatusCode::OK,
                "{name}: request {i}"
            );
        }
        let calls = server.evalsha_calls().await - before;
        assert!(
            calls < 10,
            "{name}: {calls} lease calls for 10 requests: units were held in process"
        );
        layer.replace_policies(Policies::new(build(5)));
        let mut passed = 0;
        for _ in 0..10 {
            if send(&service, "192.0.2.9").await.0 == StatusCode::OK {
                passed += 1;
            }
        }
        assert!(
            after_swap.contains(&passed),
            "{name}: {passed} of 10 passed after the swap, expected {after_swap:?}: the old leases are dropped"
        );
        assert_eq!(layer.stats().allowed, 10 + passed, "{name}");
    }
}

/// 8 tasks send requests while the policies are replaced 100 times between two sets (the same
/// limiter name, so one counter, with limits 100000 and 200000): every response's
/// `RateLimit-Policy` header and the handler's decision come from the same set, and the
/// counter equals the requests sent (never reset).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_swap_under_load_never_mixes_two_sets() {
    let server = RedisServer::spawn().await;
    let set = |limit: u32| {
        Policies::new(FixedWindow::new("api", Rate::per_minute(support::nz(limit))).unwrap())
    };
    let layer = RateLimitLayer::builder(set(100_000), manager(&server).await)
        .key_extractor(by_header())
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let service = layer.layer(tower::service_fn(handler));
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (service, stop, sent) = (service.clone(), stop.clone(), sent.clone());
        tasks.push(tokio::spawn(async move {
            let mut seen = [0u64; 2];
            while !stop.load(Ordering::Relaxed) {
                let (status, body, headers) = send(&service, "192.0.2.50").await;
                sent.fetch_add(1, Ordering::Relaxed);
                assert_eq!(status, StatusCode::OK);
                let policy = headers[RATELIMIT_POLICY].to_str().unwrap().to_owned();
                let limit: u32 = body
                    .strip_prefix("checked limit=")
                    .unwrap()
                    .parse()
                    .unwrap();
                assert!(
                    policy.contains(&format!("q={limit};")),
                    "header {policy} vs decision {limit}"
                );
                seen[usize::from(limit == 200_000)] += 1;
            }
            seen
        }));
    }
    for i in 0..100 {
        tokio::time::sleep(Duration::from_millis(3)).await;
        layer.replace_policies(set(if i % 2 == 0 { 200_000 } else { 100_000 }));
    }
    stop.store(true, Ordering::Relaxed);
    let mut seen = [0u64; 2];
    for task in tasks {
        let s = task.await.unwrap();
        seen[0] += s[0];
        seen[1] += s[1];
    }
    assert!(seen[0] > 0 && seen[1] > 0, "both sets served: {seen:?}");
    assert_eq!(
        counted(&server, &layer, "192.0.2.50").await,
        sent.load(Ordering::Relaxed),
        "one counter, never reset"
    );
}

/// Leases and the local fallback: while Redis is frozen, each of 4 instances first answers
/// from the units it holds (counted in Redis before the freeze, so no more than were granted:
/// one each here), then from its share in process (`FailMode::Local`), never from both past
/// what each promises: the held units, plus `share + share x t / window` of the fallback.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leased_units_held_are_used_before_the_local_fallback_takes_over() {
    let mut server = RedisServer::spawn().await;
    let (limit, window) = (40u32, Duration::from_secs(60));
    let mut services = Vec::new();
    for _ in 0..4 {
        let leased = FixedWindow::new("api", Rate::new(support::nz(limit), window).unwrap())
            .unwrap()
            .leased(QuotaLease::new(8).unwrap().instances(4).unwrap());
        let layer = RateLimitLayer::builder(Policies::new(leased), manager(&server).await)
            .key_extractor(by_header())
            .fail_mode(FailMode::Local { instances: 4 })
            .timeout(Duration::from_millis(50))
            .build()
            .unwrap();
        services.push(layer.layer(tower::service_fn(handler)));
    }
    // Each instance: a lease of 1 (a key's first), then of 2: one unit held.
    for service in &services {
        for _ in 0..2 {
            assert_eq!(send(service, "192.0.2.1").await.1, "checked limit=40");
        }
    }
    let key = redkit::rate_limit::LimitKey::ip("192.0.2.1".parse().unwrap());
    let redis_key = Limiter::from(
        FixedWindow::new("api", Rate::new(support::nz(limit), window).unwrap()).unwrap(),
    )
    .redis_key(&key);
    assert_eq!(
        server.cmd::<u64>(&["GET", &redis_key]).await,
        12,
        "4 x (1 + 2)"
    );
    server.pause().await;
    let started = Instant::now();
    let (mut held, mut local, mut refused) = (0u64, 0u64, 0u64);
    for service in &services {
        for _ in 0..15 {
            match send(service, "192.0.2.1").await {
                (StatusCode::OK, body, _) if body == "checked limit=40" => {
                    assert_eq!(local, 0, "a held unit after the fallback took over");
                    held += 1;
                }
                (StatusCode::OK, body, _) => {
                    assert_eq!(body, "local");
                    local += 1;
                }
                (StatusCode::TOO_MANY_REQUESTS, _, _) => refused += 1,
                (other, body, _) => panic!("{other}: {body}"),
            }
        }
        // The next instance: its held unit comes first again.
        local = 0;
    }
    let frozen = started.elapsed();
    server.resume().await;
    assert_eq!(held, 4, "each instance used the unit it held, and no more");
    let share = f64::from(limit / 4);
    let bound = 4.0 * (share + share * frozen.as_secs_f64() / window.as_secs_f64());
    let fell_back = 60 - held - refused;
    assert!(
        fell_back as f64 <= bound && fell_back >= 4 * u64::from(limit / 4),
        "{fell_back} let through in process in {frozen:?}; each instance's share is {share}"
    );
    assert!(refused > 0, "the shares were never exhausted");
}

/// Redis frozen: each of 4 instances (layers) enforces a quarter of the limit in process, and
/// what they let through together stays within `4 x (share + share x t / window)`; one
/// instance refuses past its share with `Retry-After`; when Redis answers again, the next
/// request is checked by Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_local_fallback_enforces_each_instances_share_while_redis_is_frozen() {
    let mut server = RedisServer::spawn().await;
    let (limit, window) = (20u32, Duration::from_secs(1));
    let mut instances = Vec::new();
    for _ in 0..4 {
        let policies = Policies::new(
            FixedWindow::new("api", Rate::new(support::nz(limit), window).unwrap()).unwrap(),
        );
        let layer = RateLimitLayer::builder(policies, manager(&server).await)
            .key_extractor(by_header())
            .fail_mode(FailMode::Local { instances: 4 })
            .timeout(Duration::from_millis(50))
            .build()
            .unwrap();
        instances.push(layer);
    }
    let services: Vec<_> = instances
        .iter()
        .map(|l| l.layer(tower::service_fn(handler)))
        .collect();
    // Warm: each instance's connection has answered once.
    for service in &services {
        assert_eq!(send(service, "192.0.2.99").await.0, StatusCode::OK);
    }
    server.pause().await;
    let started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for service in services.clone() {
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            let (mut allowed, mut refused) = (0u64, 0u64);
            while !stop.load(Ordering::Relaxed) {
                let (status, body, headers) = send(&service, "192.0.2.1").await;
                match status {
                    StatusCode::OK => {
                        assert_eq!(body, "local");
                        allowed += 1;
                    }
                    StatusCode::TOO_MANY_REQUESTS => {
                        assert!(headers.contains_key(http::header::RETRY_AFTER));
                        refused += 1;
                    }
                    other => panic!("{other}"),
                }
            }
            (allowed, refused)
        }));
    }
    // 1.5 s by default; `REDKIT_FALLBACK_FREEZE_MS=10000` for the documented measurement.
    let freeze = std::env::var("REDKIT_FALLBACK_FREEZE_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
        .unwrap_or(1_500);
    tokio::time::sleep(Duration::from_millis(freeze)).await;
    stop.store(true, Ordering::Relaxed);
    let frozen = started.elapsed();
    let (mut allowed, mut refused) = (0, 0);
    for task in tasks {
        let (a, r) = task.await.unwrap();
        allowed += a;
        refused += r;
    }
    server.resume().await;
    let share = f64::from(limit / 4);
    let bound = 4.0 * (share + share * frozen.as_secs_f64() / window.as_secs_f64());
    assert!(
        allowed as f64 <= bound,
        "{allowed} let through in {frozen:?}; bound {bound}"
    );
    assert!(
        allowed >= 4 * (limit as u64 / 4),
        "each instance its share at least: {allowed}"
    );
    assert!(refused > 0);
    // The negative control: `FailMode::Open` would have let every request through, more than
    // the bound, so the bound above is one the fallback kept.
    assert!(
        (allowed + refused) as f64 > bound,
        "{} requests in all: the outage never pressed on the bound {bound}",
        allowed + refused
    );
    let stats: u64 = instances.iter().map(|l| l.stats().fallback_allowed).sum();
    assert_eq!(stats, allowed);
    println!(
        "frozen {frozen:?}: {allowed} let through locally (bound {bound:.0}), {refused} refused"
    );
    // Back on Redis with its first answer.
    let back = Instant::now();
    loop {
        let (_, body, _) = send(&services[0], "192.0.2.2").await;
        if body.starts_with("checked") {
            break;
        }
        assert!(
            back.elapsed() < Duration::from_secs(5),
            "never back on Redis"
        );
    }
    println!("back on Redis after {:?}", back.elapsed());
}

/// Every decision is a DEBUG event (target `redkit::middleware`) inside the request's span,
/// naming the policy and the result, and never the client.
#[tokio::test]
async fn each_decision_is_an_event_on_the_request_span() {
    let server = RedisServer::spawn().await;
    let policies = config(
        r#"
        deny = ["203.0.113.0/24"]
        [default]
        name = "api"
        limit = 1
        window_ms = 60000
        "#,
    );
    let (_layer, service) = layered(&server, policies).await;
    // The process-wide subscriber, not a thread's: under `cargo test` other tests of this
    // binary run on other threads at the same time, and an event's interest cached while only
    // they were running would hide it from a thread-local one. Lines are told apart by the
    // span this test opens.
    let out = support::Captured::default();
    let writer = out.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::set_global_default(subscriber)
        .expect("the only global subscriber of this binary");
    for client in ["192.0.2.8", "192.0.2.8", "203.0.113.8"] {
        let span = tracing::info_span!("request", client_no = 4242);
        let _ = tracing::Instrument::instrument(send(&service, client), span).await;
    }
    let text = out.text();
    // Other tests of this binary may be logging at the same time: only this test's span.
    let decisions: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("rate limit decision") && l.contains("request{client_no=4242}"))
        .collect();
    assert_eq!(decisions.len(), 3, "{text}");
    for (line, result) in decisions.iter().zip(["allowed", "limited", "denied"]) {
        assert!(line.contains("redkit::middleware"), "{line}");
        assert!(
            line.contains("redkit.rate_limiting.policy=\"api\""),
            "{line}"
        );
        assert!(
            line.contains(&format!("redkit.rate_limiting.result=\"{result}\"")),
            "{line}"
        );
        assert!(
            !line.contains("192.0.2.8") && !line.contains("203.0.113.8"),
            "no client: {line}"
        );
    }
}
