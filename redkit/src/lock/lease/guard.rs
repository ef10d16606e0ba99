//! [`LockGuard`]: proof of a held lease, with its local validity deadline, typed by the lock
//! kind that granted it.

use std::fmt;
use std::marker::PhantomData;
use std::time::{Duration, Instant};

use crate::error::Result;
use crate::lock::lease::token::{issued, FencingToken};
use crate::lock::lease::watchdog::WatchdogHandle;
use crate::lock::lease::{HeldLease, LeaseGuard, LeaseKind};
use crate::lock::options::Settings;
use crate::script::Script;

/// A held lock: key, owner token, fencing token and a local validity deadline. `K` is the
/// kind that granted it ([`Lock`](crate::lock::Lock), [`FairLock`](crate::lock::FairLock),
/// [`RwLock`](crate::lock::RwLock), [`ReentrantLock`](crate::lock::ReentrantLock)): only that kind's
/// `release`, `renew` and `watch` take it.
///
/// Give it back with the kind's `release` (e.g. [`Lock::release`](crate::lock::Lock::release),
/// compare-and-delete). Renew it with the kind's `renew`, or let a watchdog do it (`watch`).
///
/// The validity is measured locally with [`Instant`]: `ttl − (time the acquire took) − drift`,
/// moved forward by every successful renewal (for a hold acquired with
/// [`LockOptions::require_replicas`](crate::lock::LockOptions::require_replicas): every renewal
/// the replicas acknowledged, see [`Renew::NotReplicated`](crate::lock::Renew::NotReplicated)). While [`is_valid`](Self::is_valid) is `true`
/// no other owner can hold the lock (barring clock jumps on the Redis server beyond the drift
/// allowance). Acquire with [`LockOptions::fencing(true)`](crate::lock::LockOptions::fencing) and use
/// the [`fencing_token`](Self::fencing_token) for writes that must be safe even
/// when that assumption fails.
///
/// **Dropping a guard without releasing it** stops its watchdog (if any) and does *not* talk to
/// Redis: the lease ends when its TTL runs out. `Drop` cannot await, and a release spawned in
/// the background could outlive the runtime or race with a new acquisition by the same code;
/// a bounded TTL is the predictable choice. Release explicitly to free the lock at once.
///
/// ```no_run
/// # async fn run(lock: redkit::lock::Lock, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
/// use redkit::lock::{Acquire, LockOptions};
/// let fenced = LockOptions::new().fencing(true);
/// if let Acquire::Acquired(guard) = lock.acquire(&mut conn, "job-7", &fenced).await? {
///     println!("fencing token {:?}, valid for {:?}", guard.fencing_token(), guard.validity());
///     lock.release(&mut conn, guard).await?;
/// }
/// # Ok(()) }
/// ```
///
/// A guard of one kind cannot be released, renewed or watched through another:
///
/// ```compile_fail,E0308
/// # async fn run(fair: redkit::lock::FairLock, lock: redkit::lock::Lock, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
/// use redkit::lock::{Acquire, LockOptions};
/// if let Acquire::Acquired(guard) = fair.acquire(&mut conn, "job-7", &LockOptions::new()).await? {
///     lock.release(&mut conn, guard).await?; // a LockGuard<FairLock> is not a LockGuard<Lock>
/// }
/// # Ok(()) }
/// ```
///
/// The same code with the kind that granted it compiles:
///
/// ```no_run
/// # async fn run(fair: redkit::lock::FairLock, lock: redkit::lock::Lock, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
/// use redkit::lock::{Acquire, LockOptions};
/// if let Acquire::Acquired(guard) = fair.acquire(&mut conn, "job-7", &LockOptions::new()).await? {
///     fair.release(&mut conn, guard).await?;
/// }
/// # Ok(()) }
/// ```
pub struct LockGuard<K> {
    pub(crate) held: HeldLease,
    pub(crate) fence: Option<FencingToken>,
    pub(crate) watchdog: Option<WatchdogHandle>,
    kind: PhantomData<fn() -> K>,
}

impl<K> LockGuard<K> {
    lease_getters!("lock", "redkit::lock::LockGuard<redkit::lock::Lock>");

    /// The fencing token of this acquisition: `None` unless the lock was acquired with
    /// [`LockOptions::fencing(true)`](crate::lock::LockOptions::fencing) or a token was issued
    /// later by [`Lock::fence`](crate::lock::Lock::fence).
    ///
    /// ```no_run
    /// # async fn run(lock: redkit::lock::Lock, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use redkit::lock::{Acquire, LockOptions};
    /// let fenced = LockOptions::new().fencing(true);
    /// if let Acquire::Acquired(guard) = lock.acquire(&mut conn, "invoice-17", &fenced).await? {
    ///     if let Some(token) = guard.fencing_token() {
    ///         lock.fenced_set(&mut conn, "invoice:{17}", token, "paid").await?;
    ///     }
    ///     lock.release(&mut conn, guard).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn fencing_token(&self) -> Option<FencingToken> {
        self.fence
    }

    /// The guard of a grant: `script` answered fencing token `fence` (must be positive) to an
    /// acquire of `ttl_ms` sent at `started`.
    pub(crate) fn granted(
        script: &Script,
        key: String,
        token: String,
        fence: i64,
        ttl_ms: u64,
        options: &Settings,
        started: Instant,
    ) -> Result<Self> {
        let fence = issued(script, fence)?;
        Ok(Self::held(
            key,
            token,
            Some(fence),
            ttl_ms,
            options,
            started,
        ))
    }

    /// The guard of a hold granted to a request sent at `started` (no fence: no fencing).
    pub(crate) fn held(
        key: String,
        token: String,
        fence: Option<FencingToken>,
        ttl_ms: u64,
        options: &Settings,
        started: Instant,
    ) -> Self {
        let ttl = Duration::from_millis(ttl_ms);
        let (drift, wait) = (options.drift_allowance(), options.get_replication());
        Self {
            held: HeldLease::new(key, token, ttl, drift, wait, started),
            fence,
            watchdog: None,
            kind: PhantomData,
        }
    }
}

impl<K: LeaseKind<Extra = ()>> LeaseGuard for LockGuard<K> {
    type Kind = K;

    fn held(&self) -> &HeldLease {
        &self.held
    }

    /// Nothing: a lock's release needs only the lease.
    fn extra(&self) -> &() {
        &()
    }
}

impl<K> fmt::Debug for LockGuard<K> {
    /// The owner token is a secret (it allows releasing the lock): never printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &self.held.key)
            .field("fencing_token", &self.fence)
            .field("ttl", &self.held.ttl)
            .field("validity", &self.validity())
            .field("watchdog", &self.watchdog.is_some())
            .finish_non_exhaustive()
    }
}

/// The getters every guard of a lease shares (`key`, `ttl`, `validity`, `is_valid`,
/// `lease_signal`), inside the guard's `impl` block (a struct with `held: HeldLease` and
/// `watchdog: Option<WatchdogHandle>`). `$what` names what the key holds, `$guard` the guard's
/// type in the examples.
macro_rules! lease_getters {
    ($what:literal, $guard:literal) => {
        #[doc = concat!("The Redis key of the ", $what, " (`<prefix>:{<resource>}`).")]
        ///
        /// ```no_run
        #[doc = concat!("# fn run(guard: ", $guard, ") { println!(\"{}\", guard.key()); }")]
        /// ```
        pub fn key(&self) -> &str {
            &self.held.key
        }

        /// The lease length requested at acquire (and at every renewal).
        ///
        /// ```no_run
        #[doc = concat!("# fn run(guard: ", $guard, ") { println!(\"{:?}\", guard.ttl()); }")]
        /// ```
        pub fn ttl(&self) -> ::std::time::Duration {
            self.held.ttl
        }

        /// How much of the lease is left, by the local clock (zero once lost or run out).
        ///
        /// ```no_run
        #[doc = concat!("# fn run(guard: ", $guard, ") { println!(\"{:?}\", guard.validity()); }")]
        /// ```
        pub fn validity(&self) -> ::std::time::Duration {
            self.held.remaining()
        }

        /// `true` while the local validity has not run out and no watchdog reported a loss.
        ///
        /// ```no_run
        #[doc = concat!("# fn run(guard: ", $guard, ") { if !guard.is_valid() { return; } }")]
        /// ```
        pub fn is_valid(&self) -> bool {
            !self.validity().is_zero()
        }

        /// The loss signal of this guard's watchdog, if one runs.
        ///
        /// ```no_run
        #[doc = concat!("# fn run(guard: ", $guard, ") { println!(\"{}\", guard.lease_signal().is_some()); }")]
        /// ```
        pub fn lease_signal(&self) -> Option<&$crate::lock::LeaseSignal> {
            self.watchdog.as_ref().map(|w| &w.signal)
        }
    };
}

pub(in crate::lock) use lease_getters;
