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
    /// Each node's answer to the acquire, or to the last renewal.
    pub(super) nodes: super::Nodes,
}

impl RedlockGuard {
    /// The key on every node (`<prefix>:{<resource>}`).
    ///
    /// ```no_run
    /// # async fn run(redlock: redkit::lock::Redlock<redis::aio::MultiplexedConnection>) -> redkit::Result<()> {
    /// use redkit::lock::{Acquire, LockOptions};
    /// if let Acquire::Acquired(guard) = redlock.try_acquire("payout-9", &LockOptions::new()).await? {
    ///     assert_eq!(guard.key(), redlock.key("payout-9")?);
    ///     redlock.release(guard).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The lease length.
    ///
    /// ```no_run
    /// # async fn run(redlock: redkit::lock::Redlock<redis::aio::MultiplexedConnection>) -> redkit::Result<()> {
    /// use std::time::Duration;
    /// use redkit::lock::{Acquire, LockOptions};
    /// let options = LockOptions::new().ttl(Duration::from_secs(10));
    /// if let Acquire::Acquired(guard) = redlock.try_acquire("payout-9", &options).await? {
    ///     assert_eq!(guard.ttl(), Duration::from_secs(10));
    ///     redlock.release(guard).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// What is left of the validity: `ttl − elapsed − drift` at acquire (or last renewal),
    /// minus the time since.
    ///
    /// ```no_run
    /// # async fn run(redlock: redkit::lock::Redlock<redis::aio::MultiplexedConnection>, guard: redkit::lock::RedlockGuard) -> redkit::Result<()> {
    /// // the acquire's own time and the drift allowance are already taken off the ttl
    /// assert!(guard.validity() < guard.ttl());
    /// // finish the work before the lease may end on the nodes
    /// let work = async { /* the work the lock protects */ };
    /// if tokio::time::timeout(guard.validity(), work).await.is_err() {
    ///     eprintln!("out of validity: stopped the work");
    /// }
    /// redlock.release(guard).await?;
    /// # Ok(()) }
    /// ```
    pub fn validity(&self) -> Duration {
        self.valid_until.saturating_duration_since(Instant::now())
    }

    /// What each node answered to the acquire (or to the last renewal): which masters do
    /// not hold the key (an acquire can succeed on a quorum while others are unreachable).
    ///
    /// ```no_run
    /// # async fn run(redlock: redkit::lock::Redlock<redis::aio::MultiplexedConnection>) -> redkit::Result<()> {
    /// use redkit::lock::{Acquire, LockOptions};
    /// if let Acquire::Acquired(guard) = redlock.try_acquire("payout-9", &LockOptions::new()).await? {
    ///     assert!(guard.nodes().done() >= redlock.quorum());
    ///     redlock.release(guard).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn nodes(&self) -> &super::Nodes {
        &self.nodes
    }

    /// `true` while some validity is left.
    ///
    /// ```no_run
    /// # async fn run(redlock: redkit::lock::Redlock<redis::aio::MultiplexedConnection>, mut guard: redkit::lock::RedlockGuard) -> redkit::Result<()> {
    /// use redkit::lock::Renew;
    /// for _ in 0..10 {
    ///     if !guard.is_valid() || redlock.renew(&mut guard).await?.outcome != Renew::Renewed {
    ///         return Ok(()); // the lease may be gone: stop working
    ///     }
    ///     // ... one step of the work ...
    /// }
    /// redlock.release(guard).await?;
    /// # Ok(()) }
    /// ```
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
            .field("nodes", &self.nodes)
            .finish_non_exhaustive()
    }
}
