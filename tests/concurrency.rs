//! The concurrency-limit layer against a real Redis: exactly N in flight, cancelled requests
//! give their slot back, a crashed instance's slots come back after the lease, fail modes.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use http::{Request, StatusCode};
use redis::aio::ConnectionManager;
use redkit::keys::Prefix;
use redkit::middleware::{ClientId, ConcurrencyLimitLayer, ConcurrencyPolicy, FailMode, FnKey};
use redkit::rate_limit::{LimitKey, QuotaLease};
use support::RedisServer;
use tower::ServiceExt;

async fn manager(server: &RedisServer) -> ConnectionManager {
    let client = redis::Client::open(format!("{}?protocol=resp3", server.url())).unwrap();
    ConnectionManager::new(client).await.unwrap()
}

fn one_client(
) -> FnKey<impl Fn(&redkit::middleware::RequestInfo<'_>) -> Option<ClientId> + Send + Sync + 'static>
{
    FnKey::new(|_: &redkit::middleware::RequestInfo<'_>| {
        Some(ClientId::Key(LimitKey::text("c").unwrap()))
    })
}

async fn status_of(app: &Router, path: &str) -> StatusCode {
    let req = Request::get(path).body(Body::empty()).unwrap();
    app.clone().oneshot(req).await.unwrap().status()
}

/// Holders of the client's slots, as Redis sees them.
async fn holders(
    server: &RedisServer,
    layer: &ConcurrencyLimitLayer<ConnectionManager, impl Sized>,
) -> i64 {
    let key = layer
        .semaphore()
        .key(&layer.resource(&LimitKey::text("c").unwrap()))
        .unwrap();
    server.cmd(&["ZCARD", &key]).await
}

/// 8 concurrent slow requests of one client over HTTP with N = 3: 3 run (never more at once),
/// 5 get 429 with Retry-After; afterwards the slots are free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n_plus_k_concurrent_slow_requests_run_exactly_n_at_once() {
    let server = RedisServer::spawn().await;
    let layer = ConcurrencyLimitLayer::new(
        ConcurrencyPolicy::new("slow", 3).unwrap(),
        manager(&server).await,
    );
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let (r, m) = (Arc::clone(&running), Arc::clone(&most));
    let app = Router::new()
        .route(
            "/",
            get(move || {
                let (running, most) = (Arc::clone(&r), Arc::clone(&m));
                async move {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(1500)).await;
                    running.fetch_sub(1, Ordering::SeqCst);
                    "done"
                }
            }),
        )
        .layer(layer.clone());
    let url = format!("http://{}/", support::serve_axum(app).await);
    let http = reqwest::Client::new();
    let wave = |n: usize| {
        let requests = (0..n).map(|_| {
            let (http, url) = (http.clone(), url.clone());
            async move {
                let res = http.get(&url).send().await.unwrap();
                let retry = res
                    .headers()
                    .get("retry-after")
                    .map(|v| v.to_str().unwrap().parse::<u64>().unwrap());
                (res.status(), retry)
            }
        });
        futures_util::future::join_all(requests)
    };
    let first = wave(8).await;
    let ok = first.iter().filter(|(s, _)| *s == StatusCode::OK).count();
    let full: Vec<_> = first
        .iter()
        .filter(|(s, _)| *s == StatusCode::TOO_MANY_REQUESTS)
        .collect();
    assert_eq!((ok, full.len()), (3, 5), "{first:?}");
    for (_, retry) in full {
        let retry = retry.expect("Retry-After on a refusal");
        // When the earliest holder's 30 s lease ends (renewed while it runs).
        assert!((20..=30).contains(&retry), "{retry}");
    }
    assert_eq!(most.load(Ordering::SeqCst), 3, "never more than N at once");
    let stats = layer.stats();
    assert_eq!(
        (stats.admitted, stats.finished, stats.rejected),
        (3, 3, 5),
        "{stats:?}"
    );
    assert_eq!(holders(&server, &layer).await, 0, "every slot given back");

    let second = wave(3).await;
    assert!(
        second.iter().all(|(s, _)| *s == StatusCode::OK),
        "{second:?}"
    );
}

/// A request cancelled while its handler runs (its future dropped) gives its slot back at once,
/// long before the 30 s lease would.
#[tokio::test]
async fn a_cancelled_request_frees_its_slot() {
    let server = RedisServer::spawn().await;
    let layer = ConcurrencyLimitLayer::builder(
        ConcurrencyPolicy::new("cancel", 1).unwrap(),
        manager(&server).await,
    )
    .key_extractor(one_client())
    .build()
    .unwrap();
    let (entered_tx, mut entered) = tokio::sync::mpsc::unbounded_channel();
    let app = Router::new()
        .route(
            "/slow",
            get(move || {
                let entered_tx = entered_tx.clone();
                async move {
                    entered_tx.send(()).unwrap();
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    "never"
                }
            }),
        )
        .route("/fast", get(|| async { "ok" }))
        .layer(layer.clone());
    let slow = tokio::spawn({
        let app = app.clone();
        async move { status_of(&app, "/slow").await }
    });
    support::bounded(10, "the slow request in its handler", entered.recv())
        .await
        .unwrap();
    assert_eq!(
        status_of(&app, "/fast").await,
        StatusCode::TOO_MANY_REQUESTS,
        "slot held"
    );
    assert_eq!(holders(&server, &layer).await, 1);

    slow.abort();
    assert!(slow.await.unwrap_err().is_cancelled());
    let deadline = Instant::now() + Duration::from_secs(5);
    while holders(&server, &layer).await != 0 {
        assert!(
            Instant::now() < deadline,
            "the cancelled request kept its slot"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(status_of(&app, "/fast").await, StatusCode::OK);
    let stats = layer.stats();
    assert_eq!((stats.admitted, stats.finished), (2, 2), "{stats:?}");
}

/// Instance A (its own runtime, connection and layer) holds both slots with requests that run
/// past the lease: the watchdog keeps them. Then A crashes (its runtime is gone, nothing is
/// released): B is refused until the lease ends, then served.
#[tokio::test]
async fn a_crashed_instance_slots_come_back_after_the_lease() {
    let server = RedisServer::spawn().await;
    let lease = Duration::from_millis(1000);
    let url = server.url();
    let (entered_tx, entered_rx) = std::sync::mpsc::channel::<()>();
    let (crash_tx, crash_rx) = tokio::sync::oneshot::channel::<()>();
    let instance_a = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let client = redis::Client::open(format!("{url}?protocol=resp3")).unwrap();
            let conn = ConnectionManager::new(client).await.unwrap();
            let layer =
                ConcurrencyLimitLayer::builder(ConcurrencyPolicy::new("crash", 2).unwrap(), conn)
                    .key_extractor(one_client())
                    .lease(lease)
                    .build()
                    .unwrap();
            let app = Router::new()
                .route(
                    "/",
                    get(move || {
                        let entered_tx = entered_tx.clone();
                        async move {
                            entered_tx.send(()).unwrap();
                            std::future::pending::<()>().await;
                            "never"
                        }
                    }),
                )
                .layer(layer);
            for _ in 0..2 {
                let app = app.clone();
                tokio::spawn(async move { status_of(&app, "/").await });
            }
            crash_rx.await.unwrap();
        });
        // The runtime is dropped here with both requests in flight: their tasks, the
        // watchdogs and the connection vanish as with a killed process.
        drop(runtime);
    });
    for _ in 0..2 {
        entered_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    }

    let layer_b = ConcurrencyLimitLayer::builder(
        ConcurrencyPolicy::new("crash", 2).unwrap(),
        manager(&server).await,
    )
    .key_extractor(one_client())
    .lease(lease)
    .timeout(TIMEOUT)
    .build()
    .unwrap();
    let app_b = Router::new()
        .route("/", get(|| async { "b" }))
        .layer(layer_b.clone());
    // Past two leases: the watchdog of A keeps its slots.
    tokio::time::sleep(lease * 2).await;
    assert_eq!(status_of(&app_b, "/").await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(holders(&server, &layer_b).await, 2);

    crash_tx.send(()).unwrap();
    tokio::task::spawn_blocking(move || instance_a.join().unwrap())
        .await
        .unwrap();
    // When the crashed slots' leases end: the earliest lease end (ZSET score, ms of the
    // server's TIME) against the server's TIME, read in one round trip and placed on this
    // clock between the moment the read was sent and the moment it was answered.
    let key = layer_b
        .semaphore()
        .key(&layer_b.resource(&LimitKey::text("c").unwrap()))
        .unwrap();
    let mut probe = server.conn().await;
    let sent = Instant::now();
    let (ends, (secs, micros)): (Vec<(String, u64)>, (u64, u64)) = redis::pipe()
        .cmd("ZRANGE")
        .arg(&key)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .cmd("TIME")
        .query_async(&mut probe)
        .await
        .unwrap();
    let answered = Instant::now();
    assert_eq!(ends.len(), 2, "{ends:?}");
    let server_now_ms = secs * 1_000 + micros / 1_000;
    let earliest_end = ends.iter().map(|(_, end)| *end).min().unwrap();
    let remaining = Duration::from_millis(earliest_end.saturating_sub(server_now_ms));
    // A's watchdog renewed every lease/3: at the crash each lease had between 2/3 of the lease
    // (minus a late renewal on this loaded machine, RENEWAL_SLACK) and the whole lease left.
    assert!(
        remaining <= lease && remaining + lease / 3 + RENEWAL_SLACK >= lease,
        "lease left at the crash {remaining:?} of {lease:?}"
    );
    assert_eq!(
        status_of(&app_b, "/").await,
        StatusCode::TOO_MANY_REQUESTS,
        "nothing was released by the crashed instance"
    );
    // Not before the lease ends (by the server's clock; ROUNDING: its ms are truncated), and
    // at most one poll (POLL), the 429 call in progress and the call that gets the slot (each
    // bounded by the layer's TIMEOUT) and SCHEDULING after it.
    let earliest = sent + remaining - ROUNDING;
    let latest = answered + remaining + POLL + TIMEOUT * 2 + SCHEDULING;
    let back = loop {
        match status_of(&app_b, "/").await {
            StatusCode::OK => break Instant::now(),
            StatusCode::TOO_MANY_REQUESTS => {
                assert!(
                    Instant::now() < latest + Duration::from_secs(2),
                    "slots never came back"
                );
                tokio::time::sleep(POLL).await;
            }
            other => panic!("{other}"),
        }
    };
    eprintln!(
        "lease left at the crash {remaining:?}; came back {:?} after its end (by the server's clock)",
        back.saturating_duration_since(sent + remaining)
    );
    assert!(
        back >= earliest,
        "came back {:?} before the lease ended",
        earliest - back
    );
    assert!(
        back <= latest,
        "came back {:?} after the lease ended (allowed: {:?})",
        back - (answered + remaining),
        latest - (answered + remaining)
    );
}

/// The timeout of instance B's layer (its default, stated).
const TIMEOUT: Duration = Duration::from_millis(250);
/// Between two polls of instance B.
const POLL: Duration = Duration::from_millis(50);
/// The lease ends are whole ms of the server's clock, and so is its TIME read here.
const ROUNDING: Duration = Duration::from_millis(2);
/// A watchdog tick or a poll late by this much on a loaded 2-core machine is tolerated.
const RENEWAL_SLACK: Duration = Duration::from_millis(200);
const SCHEDULING: Duration = Duration::from_millis(250);

/// Redis down: fail open lets requests through without a slot, fail closed answers 503 with
/// `Retry-After: 1`; a 503 can also be chosen for a full pool.
#[tokio::test]
async fn fail_modes_when_redis_is_down() {
    let mut server = RedisServer::spawn().await;
    let conn = manager(&server).await;
    let build = |mode: FailMode| {
        ConcurrencyLimitLayer::builder(ConcurrencyPolicy::new("down", 1).unwrap(), conn.clone())
            .key_extractor(one_client())
            .fail_mode(mode)
            .timeout(Duration::from_millis(200))
            .full_status(StatusCode::SERVICE_UNAVAILABLE)
            .build()
            .unwrap()
    };
    let (open, closed) = (build(FailMode::Open), build(FailMode::Closed));
    let app = |layer: &ConcurrencyLimitLayer<ConnectionManager, _>| {
        Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(layer.clone())
    };
    assert_eq!(status_of(&app(&open), "/").await, StatusCode::OK);
    assert!(
        ConcurrencyLimitLayer::builder(ConcurrencyPolicy::new("x", 1).unwrap(), conn.clone())
            .full_status(StatusCode::OK)
            .build()
            .is_err()
    );
    server.stop().await;
    assert_eq!(status_of(&app(&open), "/").await, StatusCode::OK);
    let req = Request::get("/").body(Body::empty()).unwrap();
    let res = app(&closed).oneshot(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(res.headers()["retry-after"], "1");
    assert_eq!(open.stats().failed_open, 1);
    assert_eq!(closed.stats().failed_closed, 1);
}

/// `FailMode::Local` while Redis is down: each instance admits its share of a client's slots
/// (`permits / instances`: 4 / 2 here) in process, refuses past it with the full status and
/// `Retry-After: 1`, and gives a slot back when its request finishes; with leased slots too.
/// The negative control: fail open under the same outage runs all 6 at once. Once Redis is
/// back, requests take their slots there again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_fallback_admits_this_instances_share_while_redis_is_down() {
    let mut server = RedisServer::spawn().await;
    let conn = manager(&server).await;
    let build = |mode: FailMode, leased: bool| {
        let builder = ConcurrencyLimitLayer::builder(
            ConcurrencyPolicy::new("local", 4).unwrap(),
            conn.clone(),
        )
        .key_extractor(one_client())
        .fail_mode(mode)
        .timeout(Duration::from_millis(200));
        let builder = if leased {
            builder.leased(QuotaLease::new(4).unwrap())
        } else {
            builder
        };
        builder.build().unwrap()
    };
    assert!(
        ConcurrencyLimitLayer::builder(ConcurrencyPolicy::new("local", 4).unwrap(), conn.clone())
            .fail_mode(FailMode::Local { instances: 0 })
            .build()
            .is_err(),
        "Local with 0 instances"
    );
    let local = FailMode::Local { instances: 2 };
    let layers = [
        (build(local, false), 2),
        (build(local, true), 2),
        (build(FailMode::Open, false), 6),
    ];
    server.stop().await;
    for (layer, most_expected) in &layers {
        let (gate, open) = tokio::sync::watch::channel(false);
        let (running, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (r, m) = (Arc::clone(&running), Arc::clone(&most));
        let app = Router::new()
            .route(
                "/",
                get(move || {
                    let (running, most, mut open) = (Arc::clone(&r), Arc::clone(&m), open.clone());
                    async move {
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        open.wait_for(|open| *open).await.unwrap();
                        running.fetch_sub(1, Ordering::SeqCst);
                        "done"
                    }
                }),
            )
            .layer(layer.clone());
        let tasks: Vec<_> = (0..6)
            .map(|_| {
                let app = app.clone();
                tokio::spawn(async move {
                    let req = Request::get("/").body(Body::empty()).unwrap();
                    app.oneshot(req).await.unwrap()
                })
            })
            .collect();
        let refused = 6 - most_expected;
        support::bounded(10, "each request running or refused", async {
            while running.load(Ordering::SeqCst) as u64 + layer.stats().fallback_limited < 6 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        gate.send(true).unwrap();
        let mut statuses = Vec::new();
        for task in tasks {
            let res = support::bounded(10, "an answer", task).await.unwrap();
            if res.status() != StatusCode::OK {
                assert_eq!(res.headers()["retry-after"], "1", "{res:?}");
            }
            statuses.push(res.status());
        }
        let ok = statuses.iter().filter(|s| **s == StatusCode::OK).count();
        let full = statuses
            .iter()
            .filter(|s| **s == StatusCode::TOO_MANY_REQUESTS)
            .count();
        assert_eq!((ok, full), (*most_expected, refused), "{statuses:?}");
        assert_eq!(most.load(Ordering::SeqCst), *most_expected, "most at once");
        let stats = layer.stats();
        if *most_expected == 2 {
            assert_eq!(
                (
                    stats.admitted,
                    stats.finished,
                    stats.fallback_allowed,
                    stats.fallback_limited
                ),
                (2, 2, 2, 4),
                "{stats:?}"
            );
            // The slots were given back: the share is free again.
            assert_eq!(status_of(&app, "/").await, StatusCode::OK);
        } else {
            assert_eq!(stats.failed_open, 6, "{stats:?}");
        }
        assert_eq!(
            stats.redis_failures,
            stats.fallback_allowed + stats.fallback_limited + stats.failed_open
        );
    }

    // Redis back: requests take their slots there (no more fallback).
    server.start().await;
    for (layer, _) in &layers[..2] {
        let app = Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(layer.clone());
        support::bounded(15, "a request admitted by Redis", async {
            loop {
                let before = layer.stats().fallback_allowed;
                let res = status_of(&app, "/").await;
                if res == StatusCode::OK && layer.stats().fallback_allowed == before {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
    }
}

/// The policy's prefix is where the slots live on the server: the default `redkit:cc`, or the
/// one chosen with `with_prefix` (and nothing under the default then).
#[tokio::test]
async fn slots_live_under_the_policy_prefix() {
    let server = RedisServer::spawn().await;
    let conn = manager(&server).await;
    let (entered_tx, entered_rx) = tokio::sync::oneshot::channel::<()>();
    let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
    let entered = Arc::new(std::sync::Mutex::new(Some(entered_tx)));
    let go = Arc::new(tokio::sync::Mutex::new(Some(go_rx)));
    let policy = ConcurrencyPolicy::new("pfx", 1)
        .unwrap()
        .with_prefix(Prefix::new("app:cc").unwrap());
    assert_eq!(policy.key("k:c").unwrap(), "app:cc:pfx:{k:c}");
    let layer = ConcurrencyLimitLayer::builder(policy, conn)
        .key_extractor(one_client())
        .build()
        .unwrap();
    assert_eq!(layer.policy().prefix(), "app:cc");
    let app = Router::new()
        .route(
            "/",
            get(move || {
                let (entered, go) = (Arc::clone(&entered), Arc::clone(&go));
                async move {
                    if let Some(tx) = entered.lock().unwrap().take() {
                        let _ = tx.send(());
                    }
                    if let Some(rx) = go.lock().await.take() {
                        let _ = rx.await;
                    }
                    "ok"
                }
            }),
        )
        .layer(layer.clone());
    let held = tokio::spawn({
        let app = app.clone();
        async move { status_of(&app, "/").await }
    });
    support::bounded(10, "the request in its handler", entered_rx)
        .await
        .unwrap();
    // While the request runs, its slot is a holder of the prefixed key, and only there.
    let holders_prefixed: i64 = server.cmd(&["ZCARD", "app:cc:pfx:{k:c}"]).await;
    assert_eq!(holders_prefixed, 1);
    let under_default: Vec<String> = server.cmd(&["KEYS", "redkit:cc:*"]).await;
    assert!(under_default.is_empty(), "{under_default:?}");
    assert_eq!(holders(&server, &layer).await, 1);
    go_tx.send(()).unwrap();
    assert_eq!(held.await.unwrap(), StatusCode::OK);
    assert_eq!(holders(&server, &layer).await, 0);

    // The default prefix.
    let default = ConcurrencyPolicy::new("pfx", 1).unwrap();
    assert_eq!(default.prefix(), "redkit:cc");
    assert_eq!(default.key("k:c").unwrap(), "redkit:cc:pfx:{k:c}");
    assert!(Prefix::new("bad prefix").is_err());
    // Name and prefix each have their 64 bytes.
    let longest = default.with_prefix(Prefix::new(&"p".repeat(64)).unwrap());
    assert_eq!(
        longest.key("k:c").unwrap(),
        format!("{}:pfx:{{k:c}}", "p".repeat(64))
    );
}

/// Every response the concurrency layer writes itself goes through `respond_with`, as for
/// the rate-limit layer: full (with the policy's name and the retry-after), Redis down under
/// fail-closed, and an unknown client under `UnknownClient::Reject`.
#[tokio::test]
async fn customised_refusals_of_the_concurrency_layer() {
    use redkit::middleware::{Rejection, UnknownClient};
    let mut server = RedisServer::spawn().await;
    let conn = manager(&server).await;
    let respond = |r: &Rejection<'_>, mut res: http::Response<Body>| {
        let text = match r {
            Rejection::Full {
                limiter,
                retry_after,
            } => format!("full:{limiter}:{}", !retry_after.is_zero()),
            Rejection::RedisUnavailable => "down".to_owned(),
            Rejection::UnknownClient => "who".to_owned(),
            _ => "other".to_owned(),
        };
        res.headers_mut()
            .insert("x-refused", http::HeaderValue::from_static("yes"));
        *res.body_mut() = Body::from(text);
        res
    };
    async fn answer(app: &Router) -> (StatusCode, Option<String>, String) {
        let req = Request::get("/").body(Body::empty()).unwrap();
        let res = app.clone().oneshot(req).await.unwrap();
        let status = res.status();
        let retry = res
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_owned());
        assert!(
            status == StatusCode::OK || res.headers()["x-refused"] == "yes",
            "{status}"
        );
        let body = axum::body::to_bytes(res.into_body(), 1 << 16)
            .await
            .unwrap();
        (status, retry, String::from_utf8(body.to_vec()).unwrap())
    }
    // Full: the one slot is held by a request that waits.
    let policy = ConcurrencyPolicy::new("busy", 1).unwrap();
    let layer = ConcurrencyLimitLayer::builder(policy, conn.clone())
        .key_extractor(one_client())
        .fail_mode(FailMode::Closed)
        .respond_with(respond)
        .build()
        .unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let rx = Arc::new(tokio::sync::Mutex::new(Some(rx)));
    let (in_tx, in_rx) = tokio::sync::oneshot::channel::<()>();
    let in_tx = Arc::new(std::sync::Mutex::new(Some(in_tx)));
    let app = Router::new()
        .route(
            "/",
            get(move || {
                let (rx, in_tx) = (Arc::clone(&rx), Arc::clone(&in_tx));
                async move {
                    if let Some(t) = in_tx.lock().unwrap().take() {
                        let _ = t.send(());
                    }
                    if let Some(rx) = rx.lock().await.take() {
                        let _ = rx.await;
                    }
                    "ok"
                }
            }),
        )
        .layer(layer.clone());
    let first = tokio::spawn({
        let app = app.clone();
        async move { answer(&app).await }
    });
    support::bounded(10, "the first request in its handler", in_rx)
        .await
        .unwrap();
    let (status, retry, body) = answer(&app).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert!(retry.is_some(), "the hook keeps the layer's Retry-After");
    assert_eq!(body, "full:busy:true");
    tx.send(()).unwrap();
    assert_eq!(first.await.unwrap().0, StatusCode::OK);

    // An unknown client, refused.
    let unknown =
        ConcurrencyLimitLayer::builder(ConcurrencyPolicy::new("anon", 1).unwrap(), conn.clone())
            .unknown_client(UnknownClient::Reject)
            .respond_with(respond)
            .build()
            .unwrap();
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(unknown);
    let (status, _, body) = answer(&app).await;
    assert_eq!((status, body.as_str()), (StatusCode::BAD_REQUEST, "who"));

    // Redis down, fail-closed.
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    server.stop().await;
    let (status, retry, body) = answer(&app).await;
    assert_eq!(
        (status, retry.as_deref(), body.as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("1"), "down")
    );
}

/// The service exposes the service it wraps (tower's `get_ref` / `get_mut` / `into_inner`).
#[tokio::test]
async fn the_service_gives_access_to_the_inner_one() {
    use tower::Layer;
    #[derive(Debug, Clone, PartialEq)]
    struct Inner(u32);
    let server = RedisServer::spawn().await;
    let layer = ConcurrencyLimitLayer::new(
        ConcurrencyPolicy::new("inner", 1).unwrap(),
        manager(&server).await,
    );
    let mut service = layer.layer(Inner(7));
    assert_eq!(service.get_ref(), &Inner(7));
    service.get_mut().0 = 8;
    assert_eq!(service.into_inner(), Inner(8));
}

/// The layer's service is ready only when the inner service is (tower's contract): over an
/// inner service that is never ready, `ready()` does not complete; over one that is, it does.
#[tokio::test]
async fn the_service_is_ready_only_when_the_inner_one_is() {
    use std::convert::Infallible;
    use std::task::{Context, Poll};
    use tower::{Layer, Service};

    #[derive(Clone)]
    struct NeverReady;
    impl Service<Request<Body>> for NeverReady {
        type Response = http::Response<Body>;
        type Error = Infallible;
        type Future = std::future::Ready<Result<Self::Response, Infallible>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Pending
        }
        fn call(&mut self, _: Request<Body>) -> Self::Future {
            std::future::ready(Ok(http::Response::new(Body::empty())))
        }
    }

    let server = RedisServer::spawn().await;
    let layer = ConcurrencyLimitLayer::new(
        ConcurrencyPolicy::new("ready", 1).unwrap(),
        manager(&server).await,
    );
    let mut never = layer.layer(NeverReady);
    let waited = tokio::time::timeout(Duration::from_millis(100), never.ready()).await;
    assert!(waited.is_err(), "ready while the inner service is not");
    let mut ready = layer.layer(tower::service_fn(|_: Request<Body>| async {
        Ok::<_, Infallible>(http::Response::new(Body::empty()))
    }));
    let waited = tokio::time::timeout(Duration::from_secs(5), ready.ready()).await;
    assert!(waited.is_ok(), "not ready over a ready inner service");
}
