//! [`PermitGuard`]: a held semaphore permit.

use std::fmt;
use std::time::Duration;

use super::lease::HeldLease;
use super::watchdog::{LeaseSignal, WatchdogHandle};

/// A held semaphore permit: the semaphore key, the owner token and a local validity deadline.
///
/// Give it back with [`Semaphore::release`](super::Semaphore::release); renew it with
/// [`Semaphore::renew`](super::Semaphore::renew) or a watchdog
/// ([`Semaphore::watch`](super::Semaphore::watch)). The validity is measured locally from
/// before the acquire was sent: `ttl − elapsed − drift`, moved forward by every renewal.
///
/// **Dropping it without releasing** stops its watchdog and sends nothing: the permit comes
/// back when its lease ends on the server (a crashed holder never leaks a permit).
///
/// ```no_run
/// # async fn run(sem: redkit::lock::Semaphore, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
/// use redkit::lock::{Acquire, LockOptions};
/// if let Acquire::Acquired(permit) = sem.acquire(&mut conn, "jobs", 8, &LockOptions::new()).await? {
///     println!("{} of 8 permits held, valid for {:?}", permit.holders(), permit.validity());
///     sem.release(&mut conn, permit).await?;
/// }
/// # Ok(()) }
/// ```
pub struct PermitGuard {
    pub(crate) held: HeldLease,
    pub(crate) permits: u32,
    pub(crate) holders: u32,
    pub(crate) watchdog: Option<WatchdogHandle>,
}

impl PermitGuard {
    /// The Redis key of the semaphore (`<prefix>:{<resource>}`).
    ///
    /// ```no_run
    /// # fn run(permit: redkit::lock::PermitGuard) { println!("{}", permit.key()); }
    /// ```
    pub fn key(&self) -> &str {
        &self.held.key
    }

    /// Holders (this one included) right after this permit was taken.
    ///
    /// ```no_run
    /// # fn run(permit: redkit::lock::PermitGuard) { assert!(permit.holders() >= 1); }
    /// ```
    pub fn holders(&self) -> u32 {
        self.holders
    }

    /// The lease length requested at acquire (and at every renewal).
    ///
    /// ```no_run
    /// # fn run(permit: redkit::lock::PermitGuard) { println!("{:?}", permit.ttl()); }
    /// ```
    pub fn ttl(&self) -> Duration {
        self.held.ttl
    }

    /// How much of the lease is left, by the local clock (zero once lost or run out).
    ///
    /// ```no_run
    /// # fn run(permit: redkit::lock::PermitGuard) { println!("{:?}", permit.validity()); }
    /// ```
    pub fn validity(&self) -> Duration {
        self.held.remaining()
    }

    /// `true` while the local validity has not run out and no watchdog reported a loss.
    ///
    /// ```no_run
    /// # fn run(permit: redkit::lock::PermitGuard) { if !permit.is_valid() { return; } }
    /// ```
    pub fn is_valid(&self) -> bool {
        !self.validity().is_zero()
    }

    /// The loss signal of this permit's watchdog, if one runs.
    ///
    /// ```no_run
    /// # fn run(permit: redkit::lock::PermitGuard) { println!("{}", permit.lease_signal().is_some()); }
    /// ```
    pub fn lease_signal(&self) -> Option<&LeaseSignal> {
        self.watchdog.as_ref().map(|w| &w.signal)
    }
}

impl fmt::Debug for PermitGuard {
    /// The owner token is a secret (it allows releasing the permit): never printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PermitGuard")
            .field("key", &self.held.key)
            .field("permits", &self.permits)
            .field("holders", &self.holders)
            .field("ttl", &self.held.ttl)
            .field("validity", &self.validity())
            .field("watchdog", &self.watchdog.is_some())
            .finish_non_exhaustive()
    }
}
