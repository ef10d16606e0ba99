//! [`RedlockGuard`]: a lock held on a quorum.

use std::fmt;
use std::time::{Duration, Instant};

/// A lock held on a quorum of Redlock nodes.
///
/// Dropping it without [`Redlock::release`](super::Redlock::release) lets the lease end by its TTL on every node.
///
/// ```no_run
/// # fn show(guard: &redkit::lock::RedlockGuard) {
/// if guard.is_valid() {
///     println!("{} is ours for {:?}", guard.key(), guard.validity());
/// }
/// # }
/// ```
pub struct RedlockGuard {
    pub(super) key: String,
    pub(super) token: String,
    pub(super) ttl: Duration,
    pub(super) drift: Duration,
    pub(super) valid_until: Instant,
}

impl RedlockGuard {
    /// The key on every node (`<prefix>:{<resource>}`).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The lease length.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// What is left of the validity: `ttl − elapsed − drift` at acquire (or last renewal),
    /// minus the time since.
    pub fn validity(&self) -> Duration {
        self.valid_until.saturating_duration_since(Instant::now())
    }

    /// `true` while some validity is left.
    pub fn is_valid(&self) -> bool {
        !self.validity().is_zero()
    }
}

impl fmt::Debug for RedlockGuard {
    /// The owner token is never printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedlockGuard")
            .field("key", &self.key)
            .field("ttl", &self.ttl)
            .field("validity", &self.validity())
            .finish_non_exhaustive()
    }
}
