//! Tower/axum middleware: per-client rate limiting with [`FixedWindow`](crate::rate_limit::FixedWindow)
//! (feature `tower`).
//!
//! - [`RateLimitLayer`] -> [`RateLimit`] -> [`ResponseFuture`]: the tower triad.
//! - [`KeyExtractor`]: who the client is ([`PeerIp`], [`TrustedProxies`], [`FnKey`]).
//! - [`Policies`] / [`PolicyConfig`]: a default policy and per-route overrides (serde).
//! - Headers: `Retry-After`, [`RATELIMIT_POLICY`], [`RATELIMIT`].

mod future;
mod headers;
mod key;
mod layer;
mod outcome;
mod policy;
mod service;

pub use future::ResponseFuture;
pub use headers::{RATELIMIT, RATELIMIT_POLICY};
pub use key::{
    ClientId, FnKey, ForwardedHeader, KeyExtractor, PeerIp, RequestInfo, TrustedProxies,
};
pub use layer::{FailMode, MiddlewareStats, RateLimitBuilder, RateLimitLayer, UnknownClient};
pub use outcome::{LimitOutcome, Unchecked};
pub use policy::{Policies, PolicyConfig, PolicySpec};
pub use service::RateLimit;
