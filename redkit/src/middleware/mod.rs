//! Tower/axum middleware: per-client rate limiting with any [`Limiter`](crate::rate_limit::Limiter)
//! (feature `tower`).
//!
//! - [`RateLimitLayer`] -> [`RateLimit`] -> [`ResponseFuture`]: the tower triad.
//! - [`KeyExtractor`]: who the client is ([`PeerIp`], [`TrustedProxies`], [`FnKey`]).
//! - [`Policies`] / [`PolicyConfig`]: a default policy and per-route overrides (serde).
//! - Headers: `Retry-After`, [`RATELIMIT_POLICY`], [`RATELIMIT`].
//! - [`LimitOutcome`]: what handlers find in the request extensions, outage or not.
//! - [`ConcurrencyLimitLayer`]: at most N requests in flight per client, on leased
//!   [`Semaphore`](crate::lock::Semaphore) permits.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::{net::SocketAddr, time::Duration};
//! use axum::{routing::get, Extension, Router};
//! use redkit::middleware::{LimitOutcome, RateLimitLayer};
//! use redkit::rate_limit::{FixedWindow, Rate};
//!
//! let client = redis::Client::open("redis://127.0.0.1:6379/?protocol=resp3")?;
//! let conn = redis::aio::ConnectionManager::new(client).await?;
//! let layer = RateLimitLayer::new(FixedWindow::new("api", Rate::per_minute(redkit::nonzero!(100)))?, conn);
//! let app: Router = Router::new()
//!     .route("/", get(|Extension(o): Extension<LimitOutcome>| async move {
//!         format!("{:?}", o.decision().map(|d| d.quota().remaining()))
//!     }))
//!     .layer(layer);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
//! # Ok(()) }
//! ```

mod access;
mod client;
mod common;
mod concurrency;
mod future;
mod headers;
mod key;
pub(crate) mod metrics;
mod rate_limit;
mod respond;

pub use access::{Access, AccessList};
pub use common::{FailMode, UnknownClient};
pub use concurrency::{
    ConcurrencyLimit, ConcurrencyLimitBuilder, ConcurrencyLimitLayer, ConcurrencyPolicy,
    ConcurrencyStats,
};
pub use future::ResponseFuture;
pub use headers::{QuotaHeaders, RATELIMIT, RATELIMIT_POLICY};
pub use key::{
    ClientId, FnKey, ForwardedHeader, KeyExtractor, PeerIp, RequestInfo, TrustedProxies,
};
pub use rate_limit::{
    LimitOutcome, MiddlewareStats, Policies, PolicyConfig, PolicySpec, RateLimit, RateLimitBuilder,
    RateLimitLayer, Unchecked,
};
pub use respond::{DefaultResponses, Rejection, Respond, RespondWith};
