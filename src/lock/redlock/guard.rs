//! [`RedlockGuard`] (a lock held on a quorum) and [`RedlockRelease`] (what a release did).

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

    /// What is left of the validity: `ttl − elapsed − drift` at acquire (or last extend),
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

/// What a [`Redlock::release`](super::Redlock::release) did on each node.
///
/// ```no_run
/// # fn show(report: redkit::lock::RedlockRelease) {
/// for (node, why) in &report.failed {
///     eprintln!("node {node} could not be released: {why} (its key ends by TTL)");
/// }
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedlockRelease {
    /// Nodes where our key was deleted.
    pub released: usize,
    /// Nodes that did not hold our key (never acquired there, or expired).
    pub not_owner: usize,
    /// Nodes that could not be reached in time: index and reason. Their key ends by TTL.
    pub failed: Vec<(usize, String)>,
}

/// Result of a [`Redlock::acquire`](super::Redlock::acquire).
///
/// `Busy` only when enough nodes answered "held by another owner" that no quorum was possible
/// even if every unreachable node had agreed; when unreachable nodes decided it, the answer is
/// [`Error::NoQuorum`](crate::Error::NoQuorum) (it cannot be known who holds the lock).
///
/// ```no_run
/// # async fn run(redlock: redkit::lock::Redlock<redis::aio::MultiplexedConnection>) -> redkit::Result<()> {
/// use redkit::lock::{LockOptions, RedlockAcquire};
/// match redlock.acquire("payout-9", &LockOptions::new()).await? {
///     RedlockAcquire::Acquired(guard) => { redlock.release(guard).await; }
///     RedlockAcquire::Busy { held_elsewhere, total } => {
///         println!("held by another owner on {held_elsewhere} of {total} nodes");
///     }
///     _ => {}
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum RedlockAcquire {
    /// Held on a quorum, with validity left.
    Acquired(RedlockGuard),
    /// Another owner holds the lock (after all retries allowed by the options).
    Busy {
        /// Nodes that answered "held by another owner" in the last attempt.
        held_elsewhere: usize,
        /// All nodes.
        total: usize,
    },
}
