//! [`LockGuard`]: proof of a held lease, with its local validity deadline.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::options::LockOptions;
use super::outcome::Renew;
use super::token::{issued, FencingToken};
use super::watchdog::{LeaseSignal, WatchdogHandle};
use crate::error::Result;
use crate::script::Script;

/// The local validity deadline of a lease, shared with its watchdog.
#[derive(Debug)]
pub(crate) struct Clock {
    valid_until: Mutex<Instant>,
}

impl Clock {
    pub(crate) fn new(valid_until: Instant) -> Arc<Self> {
        Arc::new(Self {
            valid_until: Mutex::new(valid_until),
        })
    }

    pub(crate) fn valid_until(&self) -> Instant {
        // A poisoned lock still holds a valid Instant.
        *self.valid_until.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn set(&self, valid_until: Instant) {
        *self.valid_until.lock().unwrap_or_else(|e| e.into_inner()) = valid_until;
    }

    /// Marks the lease as no longer valid.
    pub(crate) fn expire(&self) {
        self.set(Instant::now());
    }

    pub(crate) fn remaining(&self) -> Duration {
        self.valid_until().saturating_duration_since(Instant::now())
    }
}

/// `start + ttl - drift`: the local end of a lease granted by a request sent at `start`.
/// Measuring from before the request makes the elapsed acquire time count against it.
/// Never panics: a deadline beyond what an `Instant` holds is `start` (no validity), which
/// cannot happen for a validated ttl (at most 30 days).
pub(crate) fn deadline(start: Instant, ttl: Duration, drift: Duration) -> Instant {
    start
        .checked_add(ttl.saturating_sub(drift))
        .unwrap_or(start)
}

/// A held lock: key, owner token, fencing token and a local validity deadline.
///
/// Give it back with [`Lock::release`](super::Lock::release) (compare-and-delete). Renew it
/// with [`Lock::renew`](super::Lock::renew), or let a watchdog do it
/// ([`Lock::watch`](super::Lock::watch)).
///
/// The validity is measured locally with [`Instant`]: `ttl − (time the acquire took) − drift`,
/// moved forward by every successful renewal. While [`is_valid`](Self::is_valid) is `true`
/// no other owner can hold the lock (barring clock jumps on the Redis server beyond the drift
/// allowance). Acquire with [`LockOptions::fencing(true)`](super::LockOptions::fencing) and use
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
///     println!("fencing token {}, valid for {:?}", guard.fencing_token(), guard.validity());
///     lock.release(&mut conn, guard).await?;
/// }
/// # Ok(()) }
/// ```
pub struct LockGuard {
    pub(crate) key: String,
    pub(crate) token: String,
    pub(crate) fence: FencingToken,
    pub(crate) ttl: Duration,
    pub(crate) drift: Duration,
    pub(crate) clock: Arc<Clock>,
    pub(crate) watchdog: Option<WatchdogHandle>,
}

impl LockGuard {
    /// The Redis key of the lock (`<prefix>:{<resource>}`).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The fencing token of this acquisition; `0` (never issued, refused by the fenced
    /// writes) unless the lock was acquired with
    /// [`LockOptions::fencing(true)`](super::LockOptions::fencing).
    pub fn fencing_token(&self) -> FencingToken {
        self.fence
    }

    /// `false` unless the lock was acquired with
    /// [`LockOptions::fencing(true)`](super::LockOptions::fencing) (no fencing token).
    ///
    /// ```no_run
    /// # async fn run(lock: redkit::lock::Lock, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use redkit::lock::{Acquire, LockOptions};
    /// let cheap = LockOptions::new(); // no fencing token by default
    /// if let Acquire::Acquired(guard) = lock.acquire(&mut conn, "cache-warmup", &cheap).await? {
    ///     assert!(!guard.is_fenced());
    ///     lock.release(&mut conn, guard).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_fenced(&self) -> bool {
        self.fence.get() != 0
    }

    /// The lease length requested at acquire (and at every renewal).
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// How much of the lease is left, by the local clock (zero once lost or run out).
    pub fn validity(&self) -> Duration {
        self.clock.remaining()
    }

    /// `true` while the local validity has not run out and no watchdog reported a loss.
    pub fn is_valid(&self) -> bool {
        !self.validity().is_zero()
    }

    /// The loss signal of this guard's watchdog, if one runs.
    pub fn lease_signal(&self) -> Option<&LeaseSignal> {
        self.watchdog.as_ref().map(|w| &w.signal)
    }

    /// The guard of a grant: `script` answered fencing token `fence` (must be positive) to an
    /// acquire of `ttl_ms` sent at `started`.
    pub(crate) fn granted(
        script: &Script,
        key: String,
        token: String,
        fence: i64,
        ttl_ms: u64,
        options: &LockOptions,
        started: Instant,
    ) -> Result<Self> {
        let fence = issued(script, fence)?;
        Ok(Self::held(key, token, fence, ttl_ms, options, started))
    }

    /// The guard of a hold granted to a request sent at `started` (fence 0: no fencing).
    pub(crate) fn held(
        key: String,
        token: String,
        fence: FencingToken,
        ttl_ms: u64,
        options: &LockOptions,
        started: Instant,
    ) -> Self {
        let ttl = Duration::from_millis(ttl_ms);
        let drift = options.drift_allowance();
        Self {
            key,
            token,
            fence,
            ttl,
            drift,
            clock: Clock::new(deadline(started, ttl, drift)),
            watchdog: None,
        }
    }

    /// Moves the local validity after a renewal sent at `started` answered `outcome`.
    pub(crate) fn renewed(&self, started: Instant, outcome: Renew) -> Renew {
        match outcome {
            Renew::Renewed => self.clock.set(deadline(started, self.ttl, self.drift)),
            Renew::Lost => self.clock.expire(),
        }
        outcome
    }

    /// What a watchdog for this guard renews.
    pub(crate) fn lease(&self) -> super::watchdog::Lease {
        super::watchdog::Lease {
            key: self.key.clone(),
            token: self.token.clone(),
            ttl: self.ttl,
            drift: self.drift,
            clock: Arc::clone(&self.clock),
        }
    }

    /// Stops the watchdog, if any (also done on drop and release).
    pub(crate) fn stop_watchdog(&mut self) {
        self.watchdog = None;
    }

    /// Ends the local validity for whoever else holds this guard's clock (a watchdog still
    /// winding down): nobody else, nothing to do (the guard is being given back).
    pub(crate) fn expire_shared_clock(&self) {
        if Arc::strong_count(&self.clock) > 1 {
            self.clock.expire();
        }
    }
}

impl fmt::Debug for LockGuard {
    /// The owner token is a secret (it allows releasing the lock): never printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &self.key)
            .field("fencing_token", &self.fence)
            .field("ttl", &self.ttl)
            .field("validity", &self.validity())
            .field("watchdog", &self.watchdog.is_some())
            .finish_non_exhaustive()
    }
}
