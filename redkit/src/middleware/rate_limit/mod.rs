//! [`RateLimitLayer`] -> [`RateLimit`] -> [`ResponseFuture`](super::ResponseFuture): per-client
//! rate limiting with [`Policies`] (a default limiter and per-route overrides, loadable with
//! serde), a local fallback for outages, and the [`LimitOutcome`] handlers read.

mod fallback;
mod layer;
mod outcome;
mod policy;
mod service;

pub use layer::{MiddlewareStats, RateLimitBuilder, RateLimitLayer};
pub use outcome::{LimitOutcome, Unchecked};
pub use policy::{Policies, PolicyConfig, PolicySpec};
pub use service::RateLimit;
