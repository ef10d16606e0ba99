//! [`ConcurrencyLimitLayer`]: at most N requests in flight per client, across every instance,
//! on leased [`Semaphore`] permits.

use std::sync::atomic::AtomicU64;

use crate::middleware::common::CommonCounters;

mod blocks;
mod fallback;
mod layer;
mod policy;
mod service;

pub use layer::{ConcurrencyLimitBuilder, ConcurrencyLimitLayer};
pub use policy::ConcurrencyPolicy;
pub use service::ConcurrencyLimit;

/// Counters of a [`ConcurrencyLimitLayer`] (shared by all its clones).
///
/// ```
/// # fn show<C, K>(layer: &redkit::middleware::ConcurrencyLimitLayer<C, K>) {
/// let s = layer.stats();
/// println!("{} in flight, {} refused", s.admitted - s.finished, s.rejected);
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConcurrencyStats {
    /// Requests that got a permit and reached the inner service.
    pub admitted: u64,
    /// Admitted requests whose response future completed or was dropped (permit given back).
    pub finished: u64,
    /// Requests refused because every permit of their client was held.
    pub rejected: u64,
    /// Acquires or releases that failed (Redis error or timeout), whatever the fail mode.
    pub redis_failures: u64,
    /// Requests let through without a permit because of [`FailMode::Open`](crate::middleware::FailMode::Open).
    pub failed_open: u64,
    /// Requests refused because of [`FailMode::Closed`](crate::middleware::FailMode::Closed).
    pub failed_closed: u64,
    /// Requests whose client could not be determined.
    pub unknown_clients: u64,
    /// Requests [`FailMode::Local`](crate::middleware::FailMode::Local) let through while
    /// Redis failed (counted in `admitted` too).
    pub fallback_allowed: u64,
    /// Requests [`FailMode::Local`](crate::middleware::FailMode::Local) refused while Redis
    /// failed: this instance's share of the client's slots was in flight.
    pub fallback_limited: u64,
}

#[derive(Debug, Default)]
pub(super) struct Stats {
    pub(super) admitted: AtomicU64,
    pub(super) finished: AtomicU64,
    pub(super) rejected: AtomicU64,
    pub(super) fallback_allowed: AtomicU64,
    pub(super) fallback_limited: AtomicU64,
    pub(super) common: CommonCounters,
}
