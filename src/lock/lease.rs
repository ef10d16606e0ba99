//! The lease interface every lock kind implements, and the lease state every guard holds:
//! key, owner token, lease length, drift allowance and the local validity clock.
//!
//! A kind says *which* script call renews or releases a held lease ([`LeaseKind`]); the
//! kernel here runs it, decodes the answer and moves the local validity. The watchdog,
//! [`renew`] and [`release`] depend on this trait only, never on a list of kinds.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;

use super::outcome::{release_label, renew_label, renew_status, status, Release, Renew};
use crate::error::Result;
use crate::script::{Call, ScriptManager};
use crate::telemetry::metric::{self, LockKind, LockOp};

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

/// A held lease: what every guard holds and what a watchdog renews (a clone shares the
/// clock).
#[derive(Debug, Clone)]
pub(crate) struct HeldLease {
    pub(crate) key: String,
    pub(crate) token: String,
    pub(crate) ttl: Duration,
    pub(crate) drift: Duration,
    pub(crate) clock: Arc<Clock>,
}

impl HeldLease {
    /// The lease of a hold granted to a request sent at `started`.
    pub(crate) fn new(
        key: String,
        token: String,
        ttl: Duration,
        drift: Duration,
        started: Instant,
    ) -> Self {
        Self {
            key,
            token,
            ttl,
            drift,
            clock: Clock::new(deadline(started, ttl, drift)),
        }
    }

    /// How much of the lease is left, by the local clock (zero once lost or run out).
    pub(crate) fn remaining(&self) -> Duration {
        self.clock.remaining()
    }

    /// Moves the local validity after a renewal sent at `started` answered `outcome`.
    pub(crate) fn renewed(&self, started: Instant, outcome: Renew) -> Renew {
        match outcome {
            Renew::Renewed => self.clock.set(deadline(started, self.ttl, self.drift)),
            Renew::Lost => self.clock.expire(),
        }
        outcome
    }
}

/// What a lock kind tells the kernel about its leases: the script call that renews one and
/// the one that releases one. Every kind ([`Lock`](super::Lock), [`FairLock`](super::FairLock),
/// [`RwLock`](super::RwLock), [`ReentrantLock`](super::ReentrantLock),
/// [`Semaphore`](super::Semaphore)) implements it; a new kind is one more `impl`.
pub(crate) trait LeaseKind: Clone + Send + Sync + 'static {
    /// What a guard of this kind holds beyond the lease (a semaphore: its permit count).
    type Extra;

    /// The kind (the `redkit.lock.kind` metric label).
    const KIND: LockKind;

    /// The manager every call of this kind runs through.
    fn manager(&self) -> &ScriptManager;

    /// The compare-and-extend call that resets `held`'s lease to its ttl (answers 1 / 0).
    fn renew_call(&self, held: &HeldLease) -> Call<'_>;

    /// The compare-and-delete call that gives `held` back.
    fn release_call(&self, held: &HeldLease, extra: &Self::Extra) -> Call<'_>;

    /// Decodes the release call's answer (default: 1 released, 0 not the owner).
    fn released(&self, call: &Call<'_>, answer: i64) -> Result<Release> {
        Ok(if status(call.script(), answer)? {
            Release::Released
        } else {
            Release::NotOwner
        })
    }
}

/// A guard of a [`LeaseKind`]'s lease: what giving it back needs.
pub(crate) trait LeaseGuard {
    /// The kind that granted it.
    type Kind: LeaseKind;

    /// The held lease.
    fn held(&self) -> &HeldLease;

    /// What a release of this guard passes its kind beyond the lease.
    fn extra(&self) -> &<Self::Kind as LeaseKind>::Extra;
}

/// One renewal of `held` by `kind`, without moving the local validity.
pub(crate) async fn renew_once<K: LeaseKind, C: ConnectionLike>(
    kind: &K,
    conn: &mut C,
    held: &HeldLease,
) -> Result<Renew> {
    let call = kind.renew_call(held);
    let answer: i64 = kind.manager().invoke(conn, &call).await?;
    renew_status(call.script(), answer)
}

/// Renews `held` and moves its local validity: what every kind's `renew` does.
pub(crate) async fn renew<K: LeaseKind, C: ConnectionLike>(
    kind: &K,
    conn: &mut C,
    held: &HeldLease,
) -> Result<Renew> {
    let started = Instant::now();
    let outcome = renew_once(kind, conn, held).await;
    let label = renew_label(&outcome);
    metric::lock_operation(K::KIND, LockOp::Renew, label);
    Ok(held.renewed(started, outcome?))
}

/// Gives `held` back (ending the validity of a watchdog's copy first): what every kind's `release` does.
pub(crate) async fn release<K: LeaseKind, C: ConnectionLike>(
    kind: &K,
    conn: &mut C,
    held: &HeldLease,
    extra: &K::Extra,
) -> Result<Release> {
    if Arc::strong_count(&held.clock) > 1 {
        // A watchdog still winding down shares the clock: end its validity too.
        held.clock.expire();
    }
    let call = kind.release_call(held, extra);
    let released = match kind.manager().invoke::<i64, _>(conn, &call).await {
        Ok(answer) => kind.released(&call, answer),
        Err(e) => Err(e),
    };
    let label = release_label(&released);
    metric::lock_operation(K::KIND, LockOp::Release, label);
    released
}
