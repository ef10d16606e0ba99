//! The tower/axum layer on a real axum server on loopback, driven by a real HTTP client,
//! against a real Redis.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::routing::get;
use axum::Extension;
use axum::Router;
use redis::aio::ConnectionManager;
use redkit::middleware::{
    ClientId, FailMode, FnKey, LimitOutcome, Policies, PolicyConfig, QuotaHeaders, RateLimitLayer,
    TrustedProxies, Unchecked, UnknownClient,
};
use redkit::rate_limit::{FixedWindow, LimitKey, Limiter, QuotaLease, Rate};
use reqwest::StatusCode;
use support::RedisServer;

/// Extracts the outcome unconditionally, as the README tells handlers to: a request that
/// reached the handler without it would be answered 500 by axum.
async fn handler(Extension(outcome): Extension<LimitOutcome>) -> String {
    match outcome {
        LimitOutcome::Checked(d) => format!("remaining={}", d.quota().remaining()),
        LimitOutcome::Unchecked(Unchecked::RedisUnavailable) => "unchecked: redis".to_owned(),
        LimitOutcome::Unchecked(Unchecked::UnknownClient) => "unchecked: unknown client".to_owned(),
        other => format!("unexpected {other:?}"),
    }
}

fn app<L>(layer: L) -> Router
where
    L: tower::Layer<axum::routing::Route> + Clone + Send + Sync + 'static,
    L::Service: tower::Service<
            Request,
            Response = axum::response::Response,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + Sync
        + 'static,
    <L::Service as tower::Service<Request>>::Future: Send + 'static,
{
    Router::new()
        .route("/", get(handler))
        .route("/login", get(handler))
        .route("/login/otp", get(handler))
        .layer(layer)
}

/// Serves `app` on a loopback port; `connect_info` decides whether the peer is known.
async fn serve(app: Router, connect_info: bool) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        if connect_info {
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .await
            .unwrap();
        } else {
            axum::serve(listener, app).await.unwrap();
        }
    });
    format!("http://{addr}")
}

async fn manager(server: &RedisServer) -> ConnectionManager {
    let client = redis::Client::open(format!("{}?protocol=resp3", server.url())).unwrap();
    ConnectionManager::new(client).await.unwrap()
}

/// Serves the app behind a layer of the policies in `toml` (a `PolicyConfig` file), with the
/// peer's address known; returns the base URL.
async fn serve_policies(server: &RedisServer, toml: &str) -> String {
    let config: PolicyConfig = toml::from_str(toml).unwrap();
    let layer = RateLimitLayer::new(
        Policies::from_config(&config).unwrap(),
        manager(server).await,
    );
    serve(app(layer), true).await
}

/// A connection whose calls wait 30 s for a reply (longer than any freeze in these tests:
/// calls in flight wait for Redis rather than time out).
async fn patient_conn(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(server.url()).unwrap();
    let config =
        redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(30)));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap()
}

fn limiter(name: &str, limit: u32, window: Duration) -> FixedWindow {
    FixedWindow::new(name, Rate::new(support::nz(limit), window).unwrap()).unwrap()
}

fn header<'a>(r: &'a reqwest::Response, name: &str) -> Option<&'a str> {
    r.headers().get(name).map(|v| v.to_str().unwrap())
}

async fn get_with(http: &reqwest::Client, url: &str, xff: Option<&str>) -> reqwest::Response {
    let mut req = http.get(url);
    if let Some(v) = xff {
        req = req.header("x-forwarded-for", v);
    }
    req.send().await.unwrap()
}

#[tokio::test]
async fn over_the_limit_is_429_with_retry_after_and_ratelimit_headers() {
    let server = RedisServer::spawn().await;
    let layer = RateLimitLayer::new(
        limiter("api", 3, Duration::from_secs(60)),
        manager(&server).await,
    );
    let base = serve(app(layer.clone()), true).await;
    let http = reqwest::Client::new();

    for expected_remaining in [2, 1, 0] {
        let r = get_with(&http, &base, None).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(header(&r, "ratelimit-policy"), Some("\"api\";q=3;w=60"));
        let state = header(&r, "ratelimit").unwrap().to_owned();
        assert!(
            state.starts_with(&format!("\"api\";r={expected_remaining};t=")),
            "{state}"
        );
        let t: u64 = state.rsplit("t=").next().unwrap().parse().unwrap();
        assert!((1..=60).contains(&t), "{state}");
        assert!(header(&r, "retry-after").is_none());
        // The decision reached the handler through the request extensions.
        assert_eq!(
            r.text().await.unwrap(),
            format!("remaining={expected_remaining}")
        );
    }

    let r = get_with(&http, &base, None).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = header(&r, "retry-after").unwrap().parse().unwrap();
    let pttl: i64 = server.cmd(&["PTTL", "redkit:rl:api:{ip:127.0.0.1}"]).await;
    // Rounded up: never below the window's remaining time, never above the window.
    let ceil_now = (pttl as u64).div_ceil(1000);
    assert!(
        retry >= ceil_now.max(1) && retry <= 60,
        "retry {retry}, pttl {pttl}"
    );
    assert_eq!(header(&r, "ratelimit-policy"), Some("\"api\";q=3;w=60"));
    assert_eq!(
        header(&r, "ratelimit"),
        Some(format!("\"api\";r=0;t={retry}").as_str())
    );
    let stats = layer.stats();
    assert_eq!((stats.allowed, stats.limited), (3, 1));
}

#[tokio::test]
async fn retry_after_is_rounded_up_and_at_least_one_second() {
    let server = RedisServer::spawn().await;
    let window = Duration::from_millis(1500);
    let layer = RateLimitLayer::new(limiter("short", 1, window), manager(&server).await);
    let base = serve(app(layer), true).await;
    let http = reqwest::Client::new();
    assert_eq!(get_with(&http, &base, None).await.status(), StatusCode::OK);
    let r = get_with(&http, &base, None).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = header(&r, "retry-after").unwrap().parse().unwrap();
    let pttl: i64 = server
        .cmd(&["PTTL", "redkit:rl:short:{ip:127.0.0.1}"])
        .await;
    // 1.5 s rounds up to 2 s; never 0, never below what is really left.
    assert!((1..=2).contains(&retry), "{retry}");
    assert!(
        retry >= (pttl.max(0) as u64).div_ceil(1000),
        "retry {retry}, pttl {pttl}"
    );
    // A 1.5 s window is not claimed as `w=2` (or `w=1`): `w` is left out.
    assert_eq!(header(&r, "ratelimit-policy"), Some("\"short\";q=1"));
    // After the window the client passes again.
    tokio::time::sleep(window + Duration::from_millis(500)).await;
    assert_eq!(get_with(&http, &base, None).await.status(), StatusCode::OK);
}

#[tokio::test]
async fn spoofed_forwarded_for_from_an_untrusted_peer_is_ignored() {
    let server = RedisServer::spawn().await;
    // Default extractor (socket peer): headers are never read.
    let layer = RateLimitLayer::new(
        limiter("peer", 3, Duration::from_secs(60)),
        manager(&server).await,
    );
    let base = serve(app(layer), true).await;
    let http = reqwest::Client::new();
    for i in 0..3 {
        let r = get_with(&http, &base, Some(&format!("203.0.113.{i}"))).await;
        assert_eq!(r.status(), StatusCode::OK);
    }
    let r = get_with(&http, &base, Some("198.51.100.99")).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    // A proxy list that does not include the (loopback) peer: headers are ignored too.
    let proxies = TrustedProxies::parse_cidrs(["10.0.0.0/8"]).unwrap();
    let layer = RateLimitLayer::builder(
        limiter("cidr", 3, Duration::from_secs(60)),
        manager(&server).await,
    )
    .key_extractor(proxies)
    .build()
    .unwrap();
    let base = serve(app(layer), true).await;
    let http = reqwest::Client::new();
    for i in 0..3 {
        let r = get_with(&http, &base, Some(&format!("10.0.0.1, 203.0.113.{i}"))).await;
        assert_eq!(r.status(), StatusCode::OK);
    }
    let r = get_with(&http, &base, Some("198.51.100.99")).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    let keys: Vec<String> = server.cmd(&["KEYS", "redkit:rl:*"]).await;
    let mut keys = keys;
    keys.sort();
    assert_eq!(
        keys,
        [
            "redkit:rl:cidr:{ip:127.0.0.1}",
            "redkit:rl:peer:{ip:127.0.0.1}"
        ]
    );
}

#[tokio::test]
async fn a_trusted_proxy_forwards_the_right_most_untrusted_hop() {
    let server = RedisServer::spawn().await;
    let proxies = TrustedProxies::parse_cidrs(["127.0.0.0/8", "10.0.0.0/8"]).unwrap();
    let layer = RateLimitLayer::builder(
        limiter("xff", 2, Duration::from_secs(60)),
        manager(&server).await,
    )
    .key_extractor(proxies)
    .build()
    .unwrap();
    let base = serve(app(layer), true).await;
    let http = reqwest::Client::new();

    // Client 203.0.113.1 behind proxy 10.0.0.5; the left-most entry is client-written junk
    // that changes on every request and must not matter.
    for spoof in ["6.6.6.6", "7.7.7.7"] {
        let r = get_with(
            &http,
            &base,
            Some(&format!("{spoof}, 203.0.113.1, 10.0.0.5")),
        )
        .await;
        assert_eq!(r.status(), StatusCode::OK);
    }
    let r = get_with(&http, &base, Some("8.8.8.8, 203.0.113.1, 10.0.0.5")).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    // Another client through the same proxy has its own bucket.
    let r = get_with(&http, &base, Some("203.0.113.2, 10.0.0.5")).await;
    assert_eq!(r.status(), StatusCode::OK);
    // No header: the proxy itself (loopback) is the client.
    assert_eq!(get_with(&http, &base, None).await.status(), StatusCode::OK);
    let mut keys: Vec<String> = server.cmd(&["KEYS", "redkit:rl:*"]).await;
    keys.sort();
    assert_eq!(
        keys,
        [
            "redkit:rl:xff:{ip:127.0.0.1}",
            "redkit:rl:xff:{ip:203.0.113.1}",
            "redkit:rl:xff:{ip:203.0.113.2}",
        ]
    );
    let count: String = server.cmd(&["GET", "redkit:rl:xff:{ip:203.0.113.1}"]).await;
    assert_eq!(count, "2");
}

#[tokio::test]
async fn ten_thousand_addresses_in_one_ipv6_slash_64_share_one_bucket() {
    const N: u32 = 10_000;
    let server = RedisServer::spawn().await;
    let proxies = TrustedProxies::parse_cidrs(["127.0.0.1/32"]).unwrap();
    let layer = RateLimitLayer::builder(
        limiter("v6", N, Duration::from_secs(300)),
        manager(&server).await,
    )
    .key_extractor(proxies)
    .timeout(Duration::from_secs(5))
    .build()
    .unwrap();
    let base = Arc::new(serve(app(layer.clone()), true).await);
    let http = reqwest::Client::new();
    let tasks: Vec<_> = (0..16u32)
        .map(|worker| {
            let (http, base) = (http.clone(), Arc::clone(&base));
            tokio::spawn(async move {
                let mut ok = 0u32;
                let mut i = worker;
                while i < N {
                    // Distinct addresses spread over the whole interface-id half.
                    let iid = u64::from(i).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                    let addr = std::net::Ipv6Addr::from(
                        (0x2001_0db8_00aa_00bbu128 << 64) | u128::from(iid),
                    );
                    let r = get_with(&http, &base, Some(&addr.to_string())).await;
                    if r.status() == StatusCode::OK {
                        ok += 1;
                    }
                    i += 16;
                }
                ok
            })
        })
        .collect();
    let mut ok = 0;
    for t in tasks {
        ok += t.await.unwrap();
    }
    assert_eq!(ok, N, "all fit in the shared bucket");
    let r = get_with(&http, &base, Some("2001:db8:aa:bb:1234:5678:9abc:def0")).await;
    assert_eq!(
        r.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "the /64 is exhausted"
    );
    let r = get_with(&http, &base, Some("2001:db8:aa:bc::1")).await;
    assert_eq!(r.status(), StatusCode::OK, "a neighbouring /64 is not");
    let keys: Vec<String> = server.cmd(&["KEYS", "redkit:rl:*"]).await;
    assert_eq!(keys.len(), 2, "{keys:?}");
    let count: String = server
        .cmd(&["GET", "redkit:rl:v6:{ip:2001:db8:aa:bb::/64}"])
        .await;
    assert_eq!(count, N.to_string());
}

/// Sends requests until one carries RateLimit headers again (limiting resumed), up to 20 s.
async fn wait_until_limiting(http: &reqwest::Client, url: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let r = get_with(http, url, None).await;
        if header(&r, "ratelimit").is_some() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("limiting did not resume at {url}");
}

#[tokio::test]
async fn redis_outage_fails_open_or_closed_and_limiting_resumes() {
    let mut server = RedisServer::spawn().await;
    let timeout = Duration::from_millis(300);
    let open = RateLimitLayer::builder(
        limiter("open", 2, Duration::from_secs(60)),
        manager(&server).await,
    )
    .timeout(timeout)
    .build()
    .unwrap();
    let closed = RateLimitLayer::builder(
        limiter("closed", 2, Duration::from_secs(60)),
        manager(&server).await,
    )
    .timeout(timeout)
    .fail_mode(FailMode::Closed)
    .build()
    .unwrap();
    let open_url = serve(app(open.clone()), true).await;
    let closed_url = serve(app(closed.clone()), true).await;
    let http = reqwest::Client::new();
    for url in [&open_url, &closed_url] {
        assert_eq!(get_with(&http, url, None).await.status(), StatusCode::OK);
    }

    for outage in ["stop", "pause"] {
        match outage {
            "stop" => server.stop().await,
            _ => server.pause().await,
        }
        for _ in 0..3 {
            let started = Instant::now();
            let r = get_with(&http, &open_url, None).await;
            assert_eq!(
                r.status(),
                StatusCode::OK,
                "{outage}: fail-open lets requests through"
            );
            assert!(header(&r, "ratelimit").is_none());
            // The handler extracted `Extension<LimitOutcome>`: present during the outage.
            assert_eq!(r.text().await.unwrap(), "unchecked: redis");
            let r = get_with(&http, &closed_url, None).await;
            assert_eq!(
                r.status(),
                StatusCode::SERVICE_UNAVAILABLE,
                "{outage}: fail-closed"
            );
            assert_eq!(header(&r, "retry-after"), Some("1"));
            // Bounded by the timeout (generous margin for a loaded machine).
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "{outage}: {:?}",
                started.elapsed()
            );
        }
        match outage {
            "stop" => server.start().await,
            _ => server.resume().await,
        }
        // No restart of the app: the connection manager reconnects by itself.
        wait_until_limiting(&http, &open_url).await;
        wait_until_limiting(&http, &closed_url).await;
        for url in [&open_url, &closed_url] {
            let _: () = server.cmd(&["FLUSHALL"]).await;
            assert_eq!(get_with(&http, url, None).await.status(), StatusCode::OK);
            assert_eq!(get_with(&http, url, None).await.status(), StatusCode::OK);
            assert_eq!(
                get_with(&http, url, None).await.status(),
                StatusCode::TOO_MANY_REQUESTS,
                "{outage}: limiting resumed"
            );
        }
    }
    let (o, c) = (open.stats(), closed.stats());
    assert!(o.failed_open >= 6 && o.failed_closed == 0, "{o:?}");
    assert!(c.failed_closed >= 6 && c.failed_open == 0, "{c:?}");
    assert!(o.redis_failures >= o.failed_open);
}

#[tokio::test]
async fn policies_from_toml_override_per_route() {
    let server = RedisServer::spawn().await;
    let base = serve_policies(
        &server,
        r#"
        [default]
        name = "default"
        limit = 4
        window_ms = 60000

        [[routes]]
        path = "/login"
        name = "login"
        limit = 2
        window_ms = 60000
        "#,
    )
    .await;
    let http = reqwest::Client::new();
    let login = format!("{base}/login");
    let otp = format!("{base}/login/otp");
    let r = get_with(&http, &login, None).await;
    assert_eq!(header(&r, "ratelimit-policy"), Some("\"login\";q=2;w=60"));
    assert_eq!(get_with(&http, &otp, None).await.status(), StatusCode::OK);
    assert_eq!(
        get_with(&http, &login, None).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    // The default policy has its own counter.
    for _ in 0..4 {
        let r = get_with(&http, &base, None).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(header(&r, "ratelimit-policy"), Some("\"default\";q=4;w=60"));
    }
    assert_eq!(
        get_with(&http, &base, None).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
}

/// `group_commit = true` in the file: concurrent requests of one client are checked in
/// groups (fewer `EVALSHA` than requests) and exactly the limit passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grouped_policy_from_toml_lets_exactly_the_limit_through() {
    let server = RedisServer::spawn().await;
    let base = serve_policies(
        &server,
        r#"
        group_commit = true
        [default]
        name = "grouped"
        limit = 40
        window_ms = 60000
        "#,
    )
    .await;
    let http = reqwest::Client::new();
    let before = server.evalsha_calls().await;
    let statuses = futures_util::future::join_all(
        (0..200).map(|_| async { get_with(&http, &base, None).await.status() }),
    )
    .await;
    let calls = server.evalsha_calls().await - before;
    let ok = statuses.iter().filter(|s| **s == StatusCode::OK).count();
    let limited = statuses
        .iter()
        .filter(|s| **s == StatusCode::TOO_MANY_REQUESTS)
        .count();
    assert_eq!((ok, limited), (40, 160));
    assert!(
        calls < 200,
        "requests were checked in groups: {calls} calls"
    );
}

/// A client that goes away while its request leads a group in flight (its future dropped)
/// does not cost the other requests of that group their decisions: the grouped check runs
/// in a task of its own, so the call that settles the group is still read. Redis is frozen
/// while requests are dropped, so each drop lands with a call in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_request_leading_a_group_leaves_the_others_checked() {
    use axum::body::Body;
    use tower::ServiceExt;

    let mut server = RedisServer::spawn().await;
    let conn = patient_conn(&server).await;
    let limiter = limiter("dropped", 100, Duration::from_secs(60))
        .grouped(redkit::GroupCommit::new(64, 1).unwrap());
    let layer = RateLimitLayer::builder(limiter, conn)
        .key_extractor(FnKey::new(|_| {
            LimitKey::text("one").ok().map(ClientId::Key)
        }))
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let app = app(layer);
    let send = || {
        let app = app.clone();
        tokio::spawn(async move {
            let req = Request::get("/").body(Body::empty()).unwrap();
            let res = app.oneshot(req).await.unwrap();
            let body = axum::body::to_bytes(res.into_body(), 1024).await.unwrap();
            String::from_utf8(body.to_vec()).unwrap()
        })
    };
    let pause = || tokio::time::sleep(Duration::from_millis(150));

    server.pause().await;
    // Alone: its call is sent and stays unanswered.
    let first = send();
    pause().await;
    // One call in flight at most: these queue behind it.
    let queued: Vec<_> = (0..8).map(|_| send()).collect();
    pause().await;
    // Its client goes away. Had the check stopped with it, the next 8 would go as one group
    // led by the first of them...
    first.abort();
    pause().await;
    // ... whose client goes away too, with that group's call in flight.
    let mut queued = queued.into_iter();
    queued.next().unwrap().abort();
    pause().await;
    server.resume().await;

    let mut answers = Vec::new();
    for request in queued {
        answers.push(request.await.unwrap());
    }
    // Each has its own count: the 2nd to the 9th of the window but one (the dropped one's;
    // the order the tasks queued in is the scheduler's).
    let mut remaining: Vec<u32> = answers
        .iter()
        .map(|a| match a.strip_prefix("remaining=") {
            Some(r) => r.parse().unwrap(),
            None => panic!("each request of the group has its decision: {answers:?}"),
        })
        .collect();
    remaining.sort();
    remaining.dedup();
    assert_eq!(remaining.len(), 7, "{answers:?}");
    assert!(
        remaining.iter().all(|r| (91..=98).contains(r)),
        "{answers:?}"
    );
    // The two dropped requests were counted once each, as sent.
    let count: String = server.cmd(&["GET", "redkit:rl:dropped:{k:one}"]).await;
    assert_eq!(count, "9");
}

/// A frozen Redis: grouped requests are answered by the fail mode at the layer's timeout
/// (not at the longer deadline of the checks' own tasks).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grouped_requests_to_a_frozen_redis_are_answered_at_the_layer_timeout() {
    let mut server = RedisServer::spawn().await;
    let conn = patient_conn(&server).await;
    let limiter = limiter("frozen", 100, Duration::from_secs(60))
        .grouped(redkit::GroupCommit::new(64, 2).unwrap());
    let timeout = Duration::from_secs(1);
    let layer = RateLimitLayer::builder(limiter, conn)
        .timeout(timeout)
        .build()
        .unwrap();
    let base = serve(app(layer), true).await;
    let http = reqwest::Client::new();
    server.pause().await;
    let started = Instant::now();
    let answers = futures_util::future::join_all((0..20).map(|_| async {
        let r = get_with(&http, &base, None).await;
        (r.status(), r.text().await.unwrap(), started.elapsed())
    }))
    .await;
    server.resume().await;
    for (status, body, after) in answers {
        assert_eq!(
            (status, body.as_str()),
            (StatusCode::OK, "unchecked: redis")
        );
        // Twice the timeout is how long a grouped check's task may go on.
        assert!(after >= timeout && after < timeout * 2, "{after:?}");
    }
}

#[tokio::test]
async fn each_route_can_use_its_own_algorithm_with_the_right_headers() {
    let server = RedisServer::spawn().await;
    let base = serve_policies(
        &server,
        r#"
        [default]
        name = "default"
        limit = 2
        window_ms = 60000
        algorithm = "sliding_window"

        [[routes]]
        path = "/login"
        name = "login"
        limit = 1
        window_ms = 20000
        algorithm = "gcra"
        burst = 3
        "#,
    )
    .await;
    let http = reqwest::Client::new();
    let login = format!("{base}/login");
    // GCRA: 1 per 20 s, bursts of 3: q=3 per w=60 s; the bucket refills 20 s per unit.
    for left in [2, 1, 0] {
        let r = get_with(&http, &login, None).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(header(&r, "ratelimit-policy"), Some("\"login\";q=3;w=60"));
        let state = header(&r, "ratelimit").unwrap().to_owned();
        assert!(
            state.starts_with(&format!("\"login\";r={left};t=")),
            "{state}"
        );
    }
    let r = get_with(&http, &login, None).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    // The exact wait (about 20 s) rounded up, not the 60 s until the bucket is full.
    let retry: u64 = header(&r, "retry-after").unwrap().parse().unwrap();
    assert!((19..=20).contains(&retry), "{retry}");
    assert_eq!(
        server
            .cmd::<i64>(&["EXISTS", "redkit:gcra:login:{ip:127.0.0.1}"])
            .await,
        1
    );
    // The default policy is a sliding window with its own key.
    for _ in 0..2 {
        let r = get_with(&http, &base, None).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(header(&r, "ratelimit-policy"), Some("\"default\";q=2;w=60"));
    }
    assert_eq!(
        get_with(&http, &base, None).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        server
            .cmd::<String>(&["GET", "redkit:sw:default:{ip:127.0.0.1}"])
            .await,
        "2:0"
    );
}

#[tokio::test]
async fn unknown_peer_gets_the_documented_behaviour_not_a_500() {
    let server = RedisServer::spawn().await;
    let http = reqwest::Client::new();
    // Served without ConnectInfo: the peer is unknown.
    let shared = RateLimitLayer::new(
        limiter("anon", 2, Duration::from_secs(60)),
        manager(&server).await,
    );
    let base = serve(app(shared.clone()), false).await;
    assert_eq!(get_with(&http, &base, None).await.status(), StatusCode::OK);
    assert_eq!(get_with(&http, &base, None).await.status(), StatusCode::OK);
    assert_eq!(
        get_with(&http, &base, None).await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(shared.stats().unknown_clients, 3);
    let exists: i64 = server.cmd(&["EXISTS", "redkit:rl:anon:{unknown}"]).await;
    assert_eq!(exists, 1);

    let reject = RateLimitLayer::builder(
        limiter("rej", 2, Duration::from_secs(60)),
        manager(&server).await,
    )
    .unknown_client(UnknownClient::Reject)
    .build()
    .unwrap();
    let base = serve(app(reject), false).await;
    assert_eq!(
        get_with(&http, &base, None).await.status(),
        StatusCode::BAD_REQUEST
    );

    let allow = RateLimitLayer::builder(
        limiter("allow", 1, Duration::from_secs(60)),
        manager(&server).await,
    )
    .unknown_client(UnknownClient::Allow)
    .build()
    .unwrap();
    let base = serve(app(allow), false).await;
    for _ in 0..3 {
        let r = get_with(&http, &base, None).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.text().await.unwrap(), "unchecked: unknown client");
    }
}

#[tokio::test]
async fn a_closure_can_pick_the_key() {
    let server = RedisServer::spawn().await;
    let by_api_key = FnKey::new(|req| {
        let value = req.headers().get("x-api-key")?.to_str().ok()?;
        LimitKey::text(value).ok().map(ClientId::Key)
    });
    let layer = RateLimitLayer::builder(
        limiter("apikey", 1, Duration::from_secs(60)),
        manager(&server).await,
    )
    .key_extractor(by_api_key)
    .build()
    .unwrap();
    let base = serve(app(layer), true).await;
    let http = reqwest::Client::new();
    let call = |key: &'static str| http.get(&base).header("x-api-key", key).send();
    assert_eq!(call("alpha").await.unwrap().status(), StatusCode::OK);
    assert_eq!(
        call("alpha").await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(call("beta{x}").await.unwrap().status(), StatusCode::OK);
    let exists: i64 = server
        .cmd(&["EXISTS", "redkit:rl:apikey:{k:beta%7Bx%7D}"])
        .await;
    assert_eq!(exists, 1);
}

#[tokio::test]
async fn the_layer_works_over_a_cluster_connection() {
    let cluster = support::RedisCluster::spawn().await;
    let layer = RateLimitLayer::builder(
        limiter("clu", 2, Duration::from_secs(60)),
        cluster.conn().await,
    )
    .key_extractor(TrustedProxies::parse_cidrs(["127.0.0.1/32"]).unwrap())
    .timeout(Duration::from_secs(2))
    .build()
    .unwrap();
    let base = serve(app(layer.clone()), true).await;
    let http = reqwest::Client::new();
    // Clients spread over many slots (and so over all three primaries).
    for i in 1..=12u8 {
        let client = format!("203.0.113.{i}");
        assert_eq!(
            get_with(&http, &base, Some(&client)).await.status(),
            StatusCode::OK
        );
        assert_eq!(
            get_with(&http, &base, Some(&client)).await.status(),
            StatusCode::OK
        );
        let r = get_with(&http, &base, Some(&client)).await;
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS, "{client}");
    }
    let s = layer.stats();
    assert_eq!((s.allowed, s.limited, s.redis_failures), (24, 12, 0));
    let owner = cluster.primary_for("redkit:rl:clu:{ip:203.0.113.7}").await;
    let count: String = owner.cmd(&["GET", "redkit:rl:clu:{ip:203.0.113.7}"]).await;
    assert_eq!(count, "2");
}

#[tokio::test]
async fn a_hook_shapes_the_429_and_503_responses() {
    use axum::body::Body;
    use http::header::CONTENT_TYPE;
    use http::HeaderValue;
    use redkit::middleware::Rejection;

    fn problem(rejection: &Rejection<'_>, mut res: http::Response<Body>) -> http::Response<Body> {
        let (title, limiter) = match rejection {
            Rejection::Limited { limiter, decision } => {
                assert!(decision.retry_after().is_some());
                ("Too Many Requests", *limiter)
            }
            Rejection::RedisUnavailable => ("Service Unavailable", "-"),
            _ => ("Bad Request", "-"),
        };
        let body = serde_json::json!({
            "type": "about:blank", "title": title, "status": res.status().as_u16(), "limiter": limiter,
        });
        *res.body_mut() = Body::from(body.to_string());
        res.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        res.headers_mut()
            .insert("x-limited-by", HeaderValue::from_static("redkit"));
        res
    }

    let mut server = RedisServer::spawn().await;
    let layer = RateLimitLayer::builder(
        limiter("hooked", 1, Duration::from_secs(60)),
        manager(&server).await,
    )
    .fail_mode(FailMode::Closed)
    .timeout(Duration::from_millis(300))
    .respond_with(problem)
    .build()
    .unwrap();
    let base = serve(app(layer), true).await;
    let http = reqwest::Client::new();
    let ok = get_with(&http, &base, None).await;
    assert_eq!(ok.status(), StatusCode::OK);
    assert!(
        header(&ok, "x-limited-by").is_none(),
        "the hook only shapes refusals"
    );

    let r = get_with(&http, &base, None).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&r, "content-type"), Some("application/problem+json"));
    assert_eq!(header(&r, "x-limited-by"), Some("redkit"));
    assert!(header(&r, "retry-after").is_some(), "default headers kept");
    assert!(header(&r, "ratelimit").is_some());
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["status"], 429);
    assert_eq!(body["limiter"], "hooked");

    server.stop().await;
    let r = get_with(&http, &base, None).await;
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(header(&r, "content-type"), Some("application/problem+json"));
    assert_eq!(header(&r, "retry-after"), Some("1"));
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["title"], "Service Unavailable");
}

/// A policy file asking an algorithm for an option it cannot honour is refused when the
/// policies are built, naming the policy, the option and the algorithm: never ignored.
#[test]
fn a_policy_file_option_the_algorithm_cannot_honour_is_refused() {
    use redkit::middleware::PolicyConfig;
    use redkit::rate_limit::Algorithm;
    let refused = |file: &str| {
        let config: PolicyConfig = toml::from_str(file).unwrap();
        match Policies::from_config(&config) {
            Err(redkit::Error::UnsupportedOption {
                policy,
                option,
                algorithm,
                ..
            }) => (policy, option, algorithm),
            other => panic!("{file}: {other:?}"),
        }
    };
    let base = "[default]\nname = \"api\"\nlimit = 10\nwindow_ms = 1000\n";
    let route = |algorithm: &str| {
        format!(
            "{base}[[routes]]\npath = \"/r\"\nname = \"r\"\nlimit = 5\nwindow_ms = 1000\nalgorithm = \"{algorithm}\"\n"
        )
    };
    let r = || "r".to_owned();
    assert_eq!(
        refused(&format!("group_commit = true\n{}", route("gcra"))),
        (r(), "group_commit", Algorithm::Gcra)
    );
    assert_eq!(
        refused(&format!("group_commit = true\n{}", route("sliding_window"))),
        (r(), "group_commit", Algorithm::SlidingWindow)
    );
    assert_eq!(
        refused(&format!(
            "lease = {{ max_units = 8 }}\n{}",
            route("aligned_window")
        )),
        (r(), "lease", Algorithm::AlignedWindow)
    );
    // GCRA leases (it has a lease script): accepted.
    let gcra: PolicyConfig =
        toml::from_str(&format!("lease = {{ max_units = 8 }}\n{}", route("gcra"))).unwrap();
    assert!(matches!(
        Policies::from_config(&gcra).unwrap().for_path("/r"),
        redkit::rate_limit::Limiter::GcraLeased(_)
    ));
    assert_eq!(
        refused(&format!(
            "group_commit = true\nlease = {{ max_units = 8 }}\n{base}"
        )),
        ("api".to_owned(), "group_commit", Algorithm::FixedWindow)
    );
    assert_eq!(
        refused(&format!("{}burst = 20\n", route("sliding_window"))),
        (r(), "burst", Algorithm::SlidingWindow)
    );
    // What the algorithms honour is built: the aligned window groups.
    let grouped: PolicyConfig =
        toml::from_str(&format!("group_commit = true\n{}", route("aligned_window"))).unwrap();
    assert!(matches!(
        Policies::from_config(&grouped).unwrap().for_path("/r"),
        Limiter::AlignedGrouped(_)
    ));
}

/// `group_commit` in a policy file: `true` is `GroupCommit::for_checks()`, a table gives both
/// settings (checked by `GroupCommit::new` while parsing), and the config round-trips.
#[test]
fn group_commit_in_a_policy_file_is_one_groupcommit_value() {
    use redkit::middleware::{PolicyConfig, PolicySpec};
    use redkit::GroupCommit;
    let parse = |setting: &str| {
        toml::from_str::<PolicyConfig>(&format!(
            "group_commit = {setting}\n[default]\nname = \"api\"\nlimit = 10\nwindow_ms = 1000\n"
        ))
    };
    let grouped = |config: &PolicyConfig| match Policies::from_config(config).unwrap().for_path("/")
    {
        Limiter::FixedGrouped(g) => Some(g.group_commit()),
        Limiter::Fixed(_) => None,
        other => panic!("{other:?}"),
    };
    let on = parse("true").unwrap();
    assert_eq!(grouped(&on), Some(GroupCommit::for_checks()));
    assert_eq!(grouped(&parse("false").unwrap()), None);
    let table = parse("{ max_batch = 64, max_in_flight = 4 }").unwrap();
    let settings = GroupCommit::new(64, 4).unwrap();
    assert_eq!(grouped(&table), Some(settings));
    let spec = PolicySpec::new(
        "api",
        redkit::rate_limit::Rate::new(redkit::nonzero!(10), Duration::from_secs(1)).unwrap(),
    );
    assert_eq!(
        table,
        PolicyConfig::new(spec.clone()).with_group_commit(settings)
    );
    assert_eq!(
        on,
        PolicyConfig::new(spec).with_group_commit(GroupCommit::for_checks())
    );
    for bad in [
        "{ max_batch = 1, max_in_flight = 4 }",
        "{ max_batch = 64, max_in_flight = 0 }",
        "{ max_batch = 64, max_in_flight = 17 }",
        "{ max_batch = 64 }",
        "8",
    ] {
        assert!(parse(bad).is_err(), "{bad}");
    }
    for config in [on, table] {
        let json = serde_json::to_string(&config).unwrap();
        assert_eq!(serde_json::from_str::<PolicyConfig>(&json).unwrap(), config);
    }
}

/// `prefix` at the top of a policy configuration puts every limiter's keys under it on the
/// server; the layer's service exposes the service it wraps (`get_ref` / `get_mut` /
/// `into_inner`).
#[tokio::test]
async fn a_configured_prefix_is_where_the_counters_live() {
    let server = RedisServer::spawn().await;
    let base = serve_policies(
        &server,
        r#"
        prefix = "app:rl"
        [default]
        name = "d"
        limit = 5
        window_ms = 60000
        [[routes]]
        path = "/login"
        name = "g"
        limit = 5
        window_ms = 60000
        algorithm = "gcra"
        "#,
    )
    .await;
    let http = reqwest::Client::new();
    for path in ["/", "/login"] {
        let r = http.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{path}");
    }
    let mut keys: Vec<String> = server.cmd(&["KEYS", "*"]).await;
    keys.sort();
    assert_eq!(keys, ["app:rl:d:{ip:127.0.0.1}", "app:rl:g:{ip:127.0.0.1}"]);
}

#[tokio::test]
async fn the_service_gives_access_to_the_inner_one() {
    use tower::Layer;
    #[derive(Debug, Clone, PartialEq)]
    struct Inner(u32);
    let server = RedisServer::spawn().await;
    let layer = RateLimitLayer::new(
        limiter("inner", 1, Duration::from_secs(1)),
        manager(&server).await,
    );
    let mut service = layer.layer(Inner(7));
    assert_eq!(service.get_ref(), &Inner(7));
    service.get_mut().0 = 8;
    assert_eq!(service.into_inner(), Inner(8));
}

/// Checks answered in process (leased units, then the deny cache's refusals) answer as the
/// round trip does: statuses, headers, the outcome in the handler, the counters; and most
/// of them without a Redis call.
#[tokio::test]
async fn checks_answered_in_process_answer_as_the_round_trip_does() {
    let server = RedisServer::spawn().await;
    let leased = limiter("ip", 40, Duration::from_secs(60)).leased(QuotaLease::new(16).unwrap());
    let layer = RateLimitLayer::builder(leased, manager(&server).await)
        .deny_cache_capacity(100)
        .build()
        .unwrap();
    let base = serve(app(layer.clone()), true).await;
    let http = reqwest::Client::new();
    let before = server.evalsha_calls().await;
    for i in 0..40 {
        let r = get_with(&http, &base, None).await;
        assert_eq!(r.status(), StatusCode::OK, "request {i}");
        assert_eq!(header(&r, "ratelimit-policy"), Some("\"ip\";q=40;w=60"));
        let state = header(&r, "ratelimit").unwrap().to_owned();
        assert!(state.starts_with("\"ip\";r="), "{state}");
        assert!(header(&r, "retry-after").is_none());
        let body = r.text().await.unwrap();
        assert!(body.starts_with("remaining="), "{body}");
    }
    for i in 0..10 {
        let r = get_with(&http, &base, None).await;
        assert_eq!(
            r.status(),
            StatusCode::TOO_MANY_REQUESTS,
            "request {}",
            40 + i
        );
        let retry: u64 = header(&r, "retry-after").unwrap().parse().unwrap();
        assert!((1..=60).contains(&retry), "{retry}");
        let state = header(&r, "ratelimit").unwrap();
        assert!(state.starts_with("\"ip\";r=0;t="), "{state}");
    }
    let calls = server.evalsha_calls().await - before;
    assert!(
        (1..=20).contains(&calls),
        "{calls} Redis calls for 50 requests: most are answered in process"
    );
    let stats = layer.stats();
    assert_eq!((stats.allowed, stats.limited), (40, 10));
    let counted: i64 = server.cmd(&["GET", "redkit:rl:ip:{ip:127.0.0.1}"]).await;
    assert!(
        counted <= 40,
        "never more than the limit counted: {counted}"
    );
}

/// 40 requests to `base`, each allowed (with the `RateLimit-Policy` header `policy`, when
/// given) with fewer than 20 Redis calls in all (most answered from leased units), then 5
/// refused: their `Retry-After`s.
async fn forty_then_refused(server: &RedisServer, base: &str, policy: Option<&str>) -> Vec<u64> {
    let http = reqwest::Client::new();
    let before = server.evalsha_calls().await;
    for i in 0..40 {
        let r = get_with(&http, base, None).await;
        assert_eq!(r.status(), StatusCode::OK, "request {i}");
        if policy.is_some() {
            assert_eq!(header(&r, "ratelimit-policy"), policy);
        }
    }
    let allowed_calls = server.evalsha_calls().await - before;
    assert!(
        (1..20).contains(&allowed_calls),
        "{allowed_calls} Redis calls for 40 allowed requests: most are answered in process"
    );
    let mut retries = Vec::new();
    for i in 0..5 {
        let r = get_with(&http, base, None).await;
        assert_eq!(
            r.status(),
            StatusCode::TOO_MANY_REQUESTS,
            "request {}",
            40 + i
        );
        retries.push(header(&r, "retry-after").unwrap().parse().unwrap());
    }
    retries
}

/// A policy file leasing a sliding window (`lease` beside `algorithm = "sliding_window"`):
/// the limit is held exactly, most allowed requests are answered in process, and a refusal
/// (Redis's, a sliding window keeps no deny cache) carries the sliding window's `Retry-After`.
#[tokio::test]
async fn a_leased_sliding_window_from_a_policy_file_holds_its_limit_in_process() {
    let server = RedisServer::spawn().await;
    let base = serve_policies(
        &server,
        "lease = { max_units = 16 }\n[default]\nname = \"sw\"\nlimit = 40\nwindow_ms = 60000\nalgorithm = \"sliding_window\"\n",
    )
    .await;
    let retries = forty_then_refused(&server, &base, Some("\"sw\";q=40;w=60")).await;
    assert!(retries.iter().all(|r| (59..=61).contains(r)), "{retries:?}");
    let state: String = server.cmd(&["GET", "redkit:sw:sw:{ip:127.0.0.1}"]).await;
    assert_eq!(
        state, "40:0",
        "exactly the limit counted, each unit used once"
    );
}

/// A policy file leasing GCRA (`lease` beside `algorithm = "gcra"`): the burst passes, most
/// allowed requests answered in process, then refusals with GCRA's `Retry-After` (one
/// emission interval, 15 s here), and the TAT moved by exactly the burst.
#[tokio::test]
async fn a_leased_gcra_from_a_policy_file_holds_its_burst_in_process() {
    let server = RedisServer::spawn().await;
    let base = serve_policies(
        &server,
        "lease = { max_units = 16 }\n[default]\nname = \"gc\"\nlimit = 40\nwindow_ms = 600000\nalgorithm = \"gcra\"\n",
    )
    .await;
    let retries = forty_then_refused(&server, &base, None).await;
    assert!(retries.iter().all(|r| (1..=15).contains(r)), "{retries:?}");
    // 40 units of 15 s each: the bucket is full again 600 s after the first.
    let pttl: i64 = server.cmd(&["PTTL", "redkit:gcra:gc:{ip:127.0.0.1}"]).await;
    assert!((590_000..=600_000).contains(&pttl), "{pttl}");
}

/// `QuotaHeaders::OnRefusal`: allowed answers carry no quota headers, refusals carry them
/// with `Retry-After`; through a round trip and answered in process alike.
#[tokio::test]
async fn quota_headers_on_refusal_leave_allowed_answers_alone() {
    let server = RedisServer::spawn().await;
    let conn = manager(&server).await;
    let plain: Limiter = limiter("plain", 3, Duration::from_secs(60)).into();
    let leased: Limiter = limiter("leased", 3, Duration::from_secs(60))
        .leased(QuotaLease::new(4).unwrap())
        .into();
    for limiter in [plain, leased] {
        let name = limiter.name().to_owned();
        let layer = RateLimitLayer::builder(limiter, conn.clone())
            .quota_headers(QuotaHeaders::OnRefusal)
            .build()
            .unwrap();
        let base = serve(app(layer.clone()), true).await;
        let http = reqwest::Client::new();
        for _ in 0..3 {
            let r = get_with(&http, &base, None).await;
            assert_eq!(r.status(), StatusCode::OK, "{name}");
            assert!(header(&r, "ratelimit").is_none(), "{name}");
            assert!(header(&r, "ratelimit-policy").is_none(), "{name}");
            assert!(r.text().await.unwrap().starts_with("remaining="));
        }
        let r = get_with(&http, &base, None).await;
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS, "{name}");
        assert!(header(&r, "retry-after").is_some(), "{name}");
        let policy = format!("\"{name}\";q=3;w=60");
        assert_eq!(header(&r, "ratelimit-policy"), Some(policy.as_str()));
        assert!(
            header(&r, "ratelimit").unwrap().contains(";r=0;t="),
            "{name}"
        );
        let stats = layer.stats();
        assert_eq!((stats.allowed, stats.limited), (3, 1), "{name}");
    }
}

/// An inner service that must be called only after its own `poll_ready` (as tower requires:
/// e.g. a `ConcurrencyLimit` hands out its permit there); a clone is not ready.
struct MustBeReady {
    ready: bool,
    calls: Arc<std::sync::atomic::AtomicUsize>,
}

impl Clone for MustBeReady {
    fn clone(&self) -> Self {
        Self {
            ready: false,
            calls: Arc::clone(&self.calls),
        }
    }
}

impl tower::Service<Request> for MustBeReady {
    type Response = axum::response::Response;
    type Error = std::convert::Infallible;
    type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.ready = true;
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Request) -> Self::Future {
        assert!(self.ready, "inner service called without its poll_ready");
        self.ready = false;
        self.calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        std::future::ready(Ok(axum::response::Response::new(axum::body::Body::empty())))
    }
}

/// Every path of the layer calls the inner service it made ready: through a round trip (the
/// ready service moved into the response future), answered in process (called in `call`
/// itself, not a clone), let through unchecked (an unknown client), and after refusals that
/// call nothing.
#[tokio::test]
async fn the_inner_service_called_is_always_the_one_made_ready() {
    use tower::{Layer, Service, ServiceExt};
    let server = RedisServer::spawn().await;
    let conn = manager(&server).await;
    // No peer address: an unknown client, let through unchecked.
    let request = |ip: Option<&str>| {
        let mut req = Request::new(axum::body::Body::empty());
        if let Some(ip) = ip {
            let peer: SocketAddr = format!("{ip}:4000").parse().unwrap();
            req.extensions_mut()
                .insert(axum::extract::ConnectInfo(peer));
        }
        req
    };
    let plain: Limiter = limiter("ready", 5, Duration::from_secs(60)).into();
    let leased: Limiter = limiter("ready_leased", 5, Duration::from_secs(60))
        .leased(QuotaLease::new(4).unwrap())
        .into();
    for limiter in [plain, leased] {
        let name = limiter.name().to_owned();
        let layer = RateLimitLayer::builder(limiter, conn.clone())
            .deny_cache_capacity(100)
            .unknown_client(UnknownClient::Allow)
            .build()
            .unwrap();
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut service = layer.layer(MustBeReady {
            ready: false,
            calls: Arc::clone(&calls),
        });
        let mut statuses = Vec::new();
        for ip in [Some("10.0.0.1"); 8].into_iter().chain([None; 2]) {
            let response = service
                .ready()
                .await
                .unwrap()
                .call(request(ip))
                .await
                .unwrap();
            statuses.push(response.status().as_u16());
        }
        assert_eq!(
            statuses,
            [200, 200, 200, 200, 200, 429, 429, 429, 200, 200],
            "{name}"
        );
        assert_eq!(
            calls.load(std::sync::atomic::Ordering::Relaxed),
            7,
            "{name}"
        );
    }
}
