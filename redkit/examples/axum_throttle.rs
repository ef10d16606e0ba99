//! An axum server throttled per client IP with redkit.
//!
//! ```text
//! redis-server --port 6379 &
//! cargo run --example axum_throttle --features tower
//! for i in $(seq 1 7); do curl -si http://127.0.0.1:3000/ | grep -iE '^(HTTP|ratelimit|retry-after)'; done
//! curl -si http://127.0.0.1:3000/login          # stricter route policy
//! ```
//!
//! Environment:
//! - `REDIS_URL` (default `redis://127.0.0.1:6379/?protocol=resp3`; RESP3 lets the connection
//!   manager reconnect by itself after an outage)
//! - `LISTEN` (default `127.0.0.1:3000`)
//! - `POLICY_FILE`: a TOML policy file (`[default]` + `[[routes]]`, see below); built-in
//!   policies otherwise
//! - `TRUSTED_PROXIES`: comma-separated CIDRs of reverse proxies whose `X-Forwarded-For` is
//!   believed (e.g. `127.0.0.1/32`); by default the socket peer is the client.

use std::net::SocketAddr;

use axum::routing::get;
use axum::Extension;
use axum::Router;
use redkit::middleware::{LimitOutcome, Policies, PolicyConfig, RateLimitLayer, TrustedProxies};

const DEFAULT_POLICIES: &str = r#"
[default]
name = "default"
limit = 5
window_ms = 10000

[[routes]]
path = "/login"
name = "login"
limit = 2
window_ms = 60000
"#;

async fn hello(Extension(outcome): Extension<LimitOutcome>) -> String {
    // The layer puts a `LimitOutcome` in every request it lets through, also when Redis is
    // down and it fails open, so this extractor never turns an outage into a 500.
    match outcome.decision() {
        Some(d) => format!(
            "hello! {} requests left in this window\n",
            d.quota().remaining()
        ),
        None => "hello! (not checked: limiter unavailable)\n".to_owned(),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();

    let url = std::env::var("REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379/?protocol=resp3".to_owned());
    let listen = std::env::var("LISTEN").unwrap_or_else(|_| "127.0.0.1:3000".to_owned());
    let policy_text = match std::env::var("POLICY_FILE") {
        Ok(path) => std::fs::read_to_string(path)?,
        Err(_) => DEFAULT_POLICIES.to_owned(),
    };
    let config: PolicyConfig = toml::from_str(&policy_text)?;
    let policies = Policies::from_config(&config)?;

    let conn = redis::aio::ConnectionManager::new(redis::Client::open(url)?).await?;
    let routes = Router::new()
        .route("/", get(hello))
        .route("/login", get(hello));
    let app = match std::env::var("TRUSTED_PROXIES") {
        Ok(list) => {
            let proxies = TrustedProxies::parse_cidrs(list.split(','))?;
            routes.layer(
                RateLimitLayer::builder(policies, conn)
                    .key_extractor(proxies)
                    .build()?,
            )
        }
        Err(_) => routes.layer(RateLimitLayer::new(policies, conn)),
    };

    let listener = tokio::net::TcpListener::bind(&listen).await?;
    tracing::info!("listening on http://{listen}");
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
