//! The end-to-end metrics check: an axum app with the rate-limit layer and a Prometheus
//! `/metrics` endpoint (`metrics-exporter-prometheus`), driven with allowed and limited
//! requests, then with Redis frozen (SIGSTOP) for a fail-open stretch; the scraped counts
//! equal what the clients saw.

mod support;

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::PrometheusBuilder;
use redkit::middleware::{FailMode, RateLimitLayer};
use redkit::rate_limit::{FixedWindow, Rate};

/// The value of the sample `name{labels..}` whose labels include every one of `labels`.
fn sample(scraped: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    scraped
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scraped_counts_match_what_the_clients_saw() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).expect("the only recorder of this test binary");
    redkit::describe_metrics();

    let mut server = support::RedisServer::spawn().await;
    let conn = redkit::connect::manager(server.client(), redkit::connect::Timeouts::default())
        .await
        .unwrap();
    let limiter = FixedWindow::new("api", Rate::per_minute(redkit::nonzero!(5))).unwrap();
    let layer = RateLimitLayer::builder(limiter, conn)
        .fail_mode(FailMode::Open)
        .timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let scrape = handle.clone();
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(layer)
        .route("/metrics", get(move || async move { scrape.render() }));
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let service = app.into_make_service_with_connect_info::<SocketAddr>();
    let http_server = tokio::spawn(async move { axum::serve(listener, service).await });

    let http = reqwest::Client::new();
    let get = || async {
        http.get(format!("http://{addr}/"))
            .send()
            .await
            .unwrap()
            .status()
    };
    let mut seen = std::collections::HashMap::<u16, u32>::new();
    for _ in 0..8 {
        *seen.entry(get().await.as_u16()).or_default() += 1;
    }
    assert_eq!((seen[&200], seen[&429]), (5, 3), "{seen:?}");
    server.pause().await;
    for _ in 0..4 {
        assert_eq!(get().await, 200, "fail-open while Redis is frozen");
    }
    server.resume().await;

    let scraped = http
        .get(format!("http://{addr}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let decisions = |result: &str| {
        sample(
            &scraped,
            "redkit_rate_limiting_requests",
            &[
                ("redkit_rate_limiting_policy", "api"),
                ("redkit_rate_limiting_result", result),
            ],
        )
    };
    assert_eq!(decisions("allowed"), 5.0, "{scraped}");
    assert_eq!(decisions("limited"), 3.0, "{scraped}");
    assert_eq!(decisions("fail_open"), 4.0, "{scraped}");
    let round_trips = sample(
        &scraped,
        "db_client_operation_duration_count",
        &[("db_operation_name", "EVALSHA")],
    );
    assert!(
        round_trips >= 8.0,
        "every check a round trip: {round_trips}\n{scraped}"
    );
    assert!(
        scraped.contains("# TYPE redkit_rate_limiting_requests counter"),
        "{scraped}"
    );
    http_server.abort();
}
