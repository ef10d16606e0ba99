//! An axum server with the rate-limit layer and a Prometheus `/metrics` endpoint: every
//! decision, every Redis round trip and every script reload of redkit, scraped as Prometheus
//! text.
//!
//! ```text
//! redis-server --port 6379 &
//! cargo run --features metrics-tests --example metrics_endpoint
//! for i in $(seq 1 7); do curl -s -o /dev/null -w '%{http_code}\n' http://127.0.0.1:3000/; done
//! curl -s http://127.0.0.1:3000/metrics | grep redkit_rate_limiting_requests
//! ```
//!
//! Environment: `REDIS_URL` (default `redis://127.0.0.1:6379/?protocol=resp3`), `LISTEN`
//! (default `127.0.0.1:3000`). `/metrics` itself is not rate-limited (it is routed after the
//! layer). Freeze Redis (`kill -STOP <pid>`) to watch `fail_open` grow, then `kill -CONT`.

use std::net::SocketAddr;

use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::PrometheusBuilder;
use redkit::middleware::RateLimitLayer;
use redkit::rate_limit::{FixedWindow, Rate};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Install the recorder first: redkit records through the `metrics` facade.
    let prometheus = PrometheusBuilder::new().install_recorder()?;
    redkit::describe_metrics();

    let url = std::env::var("REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379/?protocol=resp3".to_owned());
    let listen = std::env::var("LISTEN").unwrap_or_else(|_| "127.0.0.1:3000".to_owned());
    let client = redis::Client::open(url)?;
    // The spans of every round trip name the server (never its password).
    let manager =
        redkit::ScriptManager::new().with_server_address(client.get_connection_info().addr());
    let conn = redis::aio::ConnectionManager::new(client).await?;

    let limiter = FixedWindow::new(
        "api",
        Rate::new(redkit::nonzero!(5), std::time::Duration::from_secs(10))?,
    )?
    .with_manager(manager);
    let app = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .layer(RateLimitLayer::new(limiter, conn))
        .route("/metrics", get(move || async move { prometheus.render() }));

    let listener = tokio::net::TcpListener::bind(&listen).await?;
    println!("listening on http://{listen} (metrics on /metrics)");
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
