//! The lease interface every lock kind implements, and the lease state every guard holds:
//! key, owner token, lease length, drift allowance, the replication a renewal needs and the
//! local validity clock.
//!
//! A kind says *which* script call renews or releases a held lease ([`LeaseKind`]); the
//! kernel here runs it, decodes the answer and moves the local validity. The watchdog,
//! [`renew`] and [`release`] depend on this trait only, never on a list of kinds.

pub(crate) mod grant;
pub(crate) mod guard;
pub(crate) mod kind;
pub(crate) mod native;
pub(crate) mod renewal;
pub(crate) mod schema;
pub(crate) mod token;
pub(crate) mod wait;
pub(crate) mod watchdog;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;

use crate::error::Result;
use crate::lock::lease::kind::Kind;
use crate::lock::metrics::{self, LockOp};
use crate::lock::outcome::{release_label, renew_label, renew_status, status, Release, Renew};
use crate::script::{Acked, Call, Replication, ScriptManager};

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
    /// What the acquire required ([`LockOptions::require_replicas`](crate::lock::LockOptions::require_replicas)):
    /// every renewal is followed by this wait, and moves the validity only when acknowledged.
    pub(crate) replication: Option<Replication>,
    /// A plain, unfenced [`Lock`](crate::lock::Lock) lease: nothing beside the lock key to keep, so
    /// its renewal and release may use the server's native commands ([`native`]).
    pub(crate) plain: bool,
    pub(crate) clock: Arc<Clock>,
}

impl HeldLease {
    /// The lease of a hold granted to a request sent at `started`, whose renewals need
    /// `replication` (`None`: no wait).
    pub(crate) fn new(
        key: String,
        token: String,
        ttl: Duration,
        drift: Duration,
        replication: Option<Replication>,
        started: Instant,
    ) -> Self {
        Self {
            key,
            token,
            ttl,
            drift,
            replication,
            plain: false,
            clock: Clock::new(deadline(started, ttl, drift)),
        }
    }

    /// The same lease, marked plain (see [`plain`](Self::plain)).
    pub(crate) fn into_plain(self) -> Self {
        Self {
            plain: true,
            ..self
        }
    }

    /// How much of the lease is left, by the local clock (zero once lost or run out).
    pub(crate) fn remaining(&self) -> Duration {
        self.clock.remaining()
    }

    /// Moves the local validity after a renewal sent at `started` answered `outcome` (as
    /// [`confirmed`](Self::confirmed) judged it): forward when renewed, to now when lost, not
    /// at all when not replicated.
    pub(crate) fn renewed(&self, started: Instant, outcome: Renew) -> Renew {
        match outcome {
            Renew::Renewed => self.clock.set(deadline(started, self.ttl, self.drift)),
            Renew::Lost => self.clock.expire(),
            Renew::NotReplicated { .. } => {}
        }
        outcome
    }

    /// A renewal's `outcome` as this lease's replication requirement sees it: a renewal that
    /// ran, by a lease acquired with a requirement, is [`Renew::NotReplicated`] unless it was
    /// followed by a wait (`waited`: the wait sent and what it answered) that covers the
    /// requirement and was acknowledged. Without a requirement the outcome stands.
    pub(crate) fn confirmed(
        &self,
        outcome: Renew,
        waited: Option<(&Replication, &Acked<()>)>,
    ) -> Renew {
        let Some(required) = self.replication else {
            return outcome;
        };
        if outcome != Renew::Renewed {
            return outcome;
        }
        match waited {
            Some((sent, ack)) if sent.covers(&required) && ack.is_replicated() => Renew::Renewed,
            _ => Renew::NotReplicated {
                replicas: waited.map_or(0, |(_, ack)| ack.replicas),
                requested: required.replicas(),
            },
        }
    }
}

/// What a lock kind tells the kernel about its leases: the script call that renews one and
/// the one that releases one. Every kind ([`Lock`](crate::lock::Lock), [`FairLock`](crate::lock::FairLock),
/// [`RwLock`](crate::lock::RwLock), [`ReentrantLock`](crate::lock::ReentrantLock),
/// [`Semaphore`](crate::lock::Semaphore)) implements it; a new kind is one more `impl`. Its
/// base and metric label come from its [`Kind`] impl (written by `lock_kind!`).
pub(crate) trait LeaseKind: Kind + Clone + Send + Sync + 'static {
    /// What a guard of this kind holds beyond the lease (a semaphore: its permit count).
    type Extra;

    /// The manager every call of this kind runs through.
    fn manager(&self) -> &ScriptManager {
        &self.base().manager
    }

    /// The compare-and-extend call that resets `held`'s lease to its ttl (answers 1 / 0).
    fn renew_call(&self, held: &HeldLease) -> Call<'_>;

    /// The compare-and-delete call that gives `held` back.
    fn release_call(&self, held: &HeldLease, extra: &Self::Extra) -> Call<'_>;

    /// The call that follows a [`release_call`](Self::release_call) that released nothing,
    /// when the kind has one (default: none): a [`Lock`](crate::lock::Lock)'s release of a
    /// hold a blocked acquirer marked, which the bare compare-and-delete leaves.
    fn release_marked_call(&self, _held: &HeldLease, _extra: &Self::Extra) -> Option<Call<'_>> {
        None
    }

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

/// One renewal of `held` by `kind`, without moving the local validity: the renewal call (for
/// a plain lease, the native command where the server offers it), followed by `WAIT` in the
/// same round trip when the lease requires replication (then a renewal fewer replicas
/// acknowledged is [`Renew::NotReplicated`]).
pub(crate) async fn renew_once<K: LeaseKind, C: ConnectionLike>(
    kind: &K,
    conn: &mut C,
    held: &HeldLease,
) -> Result<Renew> {
    let wait = held.replication;
    if held.plain {
        let manager = kind.manager();
        let (key, token) = (held.key.as_str(), held.token.as_str());
        if let Some(renewed) = native::renew(manager, conn, key, token, held.ttl, wait).await {
            let (outcome, ack) = renewed?;
            return Ok(held.confirmed(outcome, wait.as_ref().zip(ack.as_ref())));
        }
    }
    let call = kind.renew_call(held);
    let (answer, ack) = kind
        .manager()
        .invoke_waiting::<i64, _>(conn, &call, wait)
        .await?;
    let outcome = renew_status(call.script(), answer)?;
    Ok(held.confirmed(outcome, wait.as_ref().zip(ack.as_ref())))
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
    metrics::lock_operation(K::KIND, LockOp::Renew, label);
    Ok(held.renewed(started, outcome?))
}

/// Gives `held` back (ending the validity of a watchdog's copy first): what every kind's
/// `release` does (for a plain lease, with the native command where the server offers it).
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
    if held.plain {
        let (key, token) = (held.key.as_str(), held.token.as_str());
        if let Some(released) = native::release(kind.manager(), conn, (key, token)).await {
            metrics::lock_operation(K::KIND, LockOp::Release, release_label(&released));
            return released;
        }
    }
    let call = kind.release_call(held, extra);
    let mut released = match kind.manager().invoke::<i64, _>(conn, &call).await {
        Ok(answer) => kind.released(&call, answer),
        Err(e) => Err(e),
    };
    // The second call is built only when the first released nothing: building it for every
    // release cost each cycle a `Call` and its keys (a profile of the default cycle).
    let marked = match released {
        Ok(Release::NotOwner) => kind.release_marked_call(held, extra),
        _ => None,
    };
    if let Some(marked) = marked {
        // Boxed: only a release with a waiter (or of a lost lease) sends a second call.
        released = Box::pin(kind.manager().invoke::<i64, _>(conn, &marked))
            .await
            .and_then(|answer| kind.released(&marked, answer));
    }
    let label = release_label(&released);
    metrics::lock_operation(K::KIND, LockOp::Release, label);
    released
}

/// Runs a kind's leave call (a caller giving up its place before its turn: a fair lock's
/// queue entry, a waiting writer's intent), a script answering 1 when the caller held the
/// lock and 0 when not: `true` for 1.
pub(crate) async fn leave<K: LeaseKind, C: ConnectionLike>(
    kind: &K,
    conn: &mut C,
    call: &Call<'_>,
) -> Result<bool> {
    let left: i64 = kind.manager().invoke(conn, call).await?;
    status(call.script(), left)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(replication: Option<Replication>) -> HeldLease {
        let ttl = Duration::from_secs(10);
        let (key, token) = ("k".to_owned(), "t".to_owned());
        HeldLease::new(key, token, ttl, Duration::ZERO, replication, Instant::now())
    }

    #[test]
    fn a_renewal_counts_only_when_a_wait_covering_the_requirement_was_acknowledged() {
        let ms = Duration::from_millis(100);
        let (one, two) = (
            Replication::new(1, ms).unwrap(),
            Replication::new(2, ms).unwrap(),
        );
        let ack = |replicas, requested| Acked::new((), replicas, requested);
        // Without a requirement the outcome stands, waited for or not.
        let free = lease(None);
        assert_eq!(free.confirmed(Renew::Renewed, None), Renew::Renewed);
        assert_eq!(free.confirmed(Renew::Lost, None), Renew::Lost);
        let held = lease(Some(two));
        // A renewal that did not run stays what it was.
        let lost = held.confirmed(Renew::Lost, Some((&two, &ack(0, 2))));
        assert_eq!(lost, Renew::Lost);
        // Covering and acknowledged: renewed.
        let renewed = held.confirmed(Renew::Renewed, Some((&two, &ack(2, 2))));
        assert_eq!(renewed, Renew::Renewed);
        // Acknowledged, but the wait asked for fewer replicas than required; covering, but
        // not acknowledged; no wait at all: not replicated, with what the wait answered.
        for (waited, replicas) in [
            (Some((&one, &ack(1, 1))), 1),
            (Some((&two, &ack(1, 2))), 1),
            (None, 0),
        ] {
            assert_eq!(
                held.confirmed(Renew::Renewed, waited),
                Renew::NotReplicated {
                    replicas,
                    requested: 2
                },
                "{waited:?}"
            );
        }
    }
}
