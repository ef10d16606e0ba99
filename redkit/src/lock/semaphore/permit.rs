//! [`PermitGuard`]: a held semaphore permit.

use std::fmt;

use crate::lock::lease::guard::lease_getters;
use crate::lock::lease::watchdog::WatchdogHandle;
use crate::lock::lease::HeldLease;

/// A held semaphore permit: the semaphore key, the owner token and a local validity deadline.
///
/// Give it back with [`Semaphore::release`](crate::lock::Semaphore::release); renew it with
/// [`Semaphore::renew`](crate::lock::Semaphore::renew) or a watchdog
/// ([`Semaphore::watch`](crate::lock::Semaphore::watch)). The validity is measured locally from
/// before the acquire was sent: `ttl − elapsed − drift`, moved forward by every renewal (with
/// `require_replicas`: every renewal the replicas acknowledged).
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
    lease_getters!("semaphore", "redkit::lock::PermitGuard");

    /// Holders (this one included) right after this permit was taken.
    ///
    /// ```no_run
    /// # fn run(permit: redkit::lock::PermitGuard) { assert!(permit.holders() >= 1); }
    /// ```
    pub fn holders(&self) -> u32 {
        self.holders
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
