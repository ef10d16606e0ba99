//! Business outcomes of lock operations: values, not errors. Every kind answers an acquire
//! with the same [`Acquire`] (its guard type as parameter), a release with [`Release`] and a
//! renewal with [`Renew`].

use std::time::Duration;

use super::lease::token::FencingToken;
use crate::error::{Error, Result};
use crate::lock::metrics::LockOutcome;
use crate::script::Script;

/// Result of an acquire, the same shape for every kind: `G` is the kind's guard
/// ([`LockGuard<Lock>`](super::LockGuard), [`LockGuard<FairLock>`](super::LockGuard),
/// [`PermitGuard`](super::PermitGuard), [`RedlockGuard`](super::RedlockGuard), ...) and `H`
/// what it can tell of the holders when busy: [`Held`] (a single-node lock: the holder's
/// TTL), [`HeldPermits`] (a semaphore: the holders and the earliest TTL), [`HeldOnNodes`]
/// (Redlock: the masters that refused, and the give-back).
///
/// ```no_run
/// # async fn run(lock: redkit::lock::Lock, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
/// use redkit::lock::{Acquire, LockOptions};
/// match lock.acquire(&mut conn, "report-42", &LockOptions::new()).await? {
///     Acquire::Acquired(guard) => { /* work, then */ lock.release(&mut conn, guard).await?; }
///     Acquire::Busy(held) => println!("held by another owner for {:?}", held.ttl),
///     _ => {}
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Acquire<G, H = Held> {
    /// Ours until the guard's validity runs out (or it is released).
    Acquired(G),
    /// Held elsewhere (after all the waiting the options allow): what was seen of the
    /// holders.
    Busy(H),
    /// Acquired, but fewer replicas than `require_replicas` asked for acknowledged it in
    /// time: it was given back at once (it could have been lost in a failover).
    NotReplicated {
        /// Replicas that acknowledged.
        replicas: u32,
        /// Replicas required.
        requested: u32,
    },
}

impl<G, H> Acquire<G, H> {
    /// `true` for [`Acquire::Acquired`].
    ///
    /// ```
    /// use redkit::lock::{Acquire, HeldPermits, PermitGuard};
    /// let refused: Acquire<PermitGuard, HeldPermits> = Acquire::NotReplicated { replicas: 0, requested: 1 };
    /// assert!(!refused.is_acquired());
    /// ```
    pub fn is_acquired(&self) -> bool {
        matches!(self, Self::Acquired(_))
    }

    /// The guard, if acquired.
    ///
    /// ```
    /// use redkit::lock::{Acquire, HeldPermits, PermitGuard};
    /// let refused: Acquire<PermitGuard, HeldPermits> = Acquire::NotReplicated { replicas: 0, requested: 1 };
    /// assert!(refused.acquired().is_none());
    /// ```
    pub fn acquired(self) -> Option<G> {
        match self {
            Self::Acquired(guard) => Some(guard),
            _ => None,
        }
    }
}

/// What an acquire of a single-node lock ([`Lock`](super::Lock),
/// [`FairLock`](super::FairLock), [`RwLock`](super::RwLock),
/// [`ReentrantLock`](super::ReentrantLock)) saw of the holder when it answered
/// [`Acquire::Busy`].
///
/// ```no_run
/// # async fn run(lock: redkit::lock::Lock, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
/// use redkit::lock::{Acquire, LockOptions};
/// if let Acquire::Busy(held) = lock.try_acquire(&mut conn, "export", &LockOptions::new()).await? {
///     println!("held; the lease ends in {:?}", held.ttl);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Held {
    /// How long until the hold ends, as last seen (by the server's clock): the holder's lease
    /// (a [`Lock`](super::Lock), [`ReentrantLock`](super::ReentrantLock)), the blocking
    /// writer's lease or intent (an [`RwLock`](super::RwLock)). `None` when unknown (a
    /// [`FairLock`](super::FairLock) waiter behind others, a key without TTL).
    pub ttl: Option<Duration>,
}

impl Held {
    /// Held by one owner whose lease ends in `ttl` (`None`: unknown or no TTL).
    pub(crate) fn until(ttl: Option<Duration>) -> Self {
        Self { ttl }
    }

    /// Held by one owner whose lease ends in `ms` milliseconds, as a script or `PTTL`
    /// answered it (negative: unknown or no TTL).
    pub(crate) fn until_ms(ms: i64) -> Self {
        Self::until(u64::try_from(ms).ok().map(Duration::from_millis))
    }
}

/// What an acquire of a [`Semaphore`](super::Semaphore) saw of the holders when it answered
/// [`Acquire::Busy`]: every permit held.
///
/// ```no_run
/// # async fn run(sem: redkit::lock::Semaphore, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
/// use redkit::lock::{Acquire, LockOptions};
/// if let Acquire::Busy(held) = sem.try_acquire(&mut conn, "export", 3, &LockOptions::new()).await? {
///     println!("{} holders; the first lease ends in {:?}", held.holders, held.ttl);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct HeldPermits {
    /// Unexpired holders.
    pub holders: u32,
    /// How long until the earliest of their leases ends (by the server's clock); `None` when
    /// unknown (a fair acquire that gave up in the queue before it could count).
    pub ttl: Option<Duration>,
}

impl HeldPermits {
    /// Held by `holders` holders, the earliest lease ending in `ttl`.
    pub(crate) fn by(holders: u32, ttl: Option<Duration>) -> Self {
        Self { holders, ttl }
    }
}

/// What a [`Redlock`](super::Redlock) acquire saw when it answered [`Acquire::Busy`]: so
/// many masters answered "held by another owner" in its last attempt that no quorum was
/// possible.
///
/// ```no_run
/// # async fn run(redlock: redkit::lock::Redlock<redis::aio::MultiplexedConnection>) -> redkit::Result<()> {
/// use redkit::lock::{Acquire, LockOptions};
/// if let Acquire::Busy(held) = redlock.acquire("report", &LockOptions::new()).await? {
///     println!("held on {} of {} masters", held.held_on, held.nodes);
///     println!("give-back of our attempt: {:?}", held.rollback);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HeldOnNodes {
    /// Masters that answered "held by another owner" in the last attempt.
    pub held_on: usize,
    /// All masters.
    pub nodes: usize,
    /// What each master answered when the failed attempt gave its key back: an unreached one
    /// may keep it until its TTL.
    pub rollback: super::Nodes,
}

impl HeldOnNodes {
    /// Held by another owner on `held_on` of `nodes` masters; `rollback` the give-back.
    pub(crate) fn on(held_on: usize, nodes: usize, rollback: super::Nodes) -> Self {
        Self {
            held_on,
            nodes,
            rollback,
        }
    }
}

/// Result of a compare-and-delete release.
///
/// ```
/// use redkit::lock::Release;
/// assert_ne!(Release::Released, Release::NotOwner);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Release {
    /// The key held our token and was deleted.
    Released,
    /// The key was gone or held another owner's token; nothing was deleted.
    NotOwner,
}

/// Result of a compare-and-PEXPIRE lease renewal.
///
/// ```
/// use redkit::lock::Renew;
/// assert_ne!(Renew::Renewed, Renew::Lost);
/// let unconfirmed = Renew::NotReplicated { replicas: 0, requested: 1 };
/// assert!(Renew::Renewed.is_renewed() && !unconfirmed.is_renewed());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Renew {
    /// The key held our token; its TTL was reset to the lease length (and, for a hold
    /// acquired with [`LockOptions::require_replicas`](super::LockOptions::require_replicas),
    /// as many replicas acknowledged it in time). The guard's validity moved forward.
    Renewed,
    /// The key was gone or held another owner's token: the lease is lost.
    Lost,
    /// For a hold acquired with
    /// [`LockOptions::require_replicas`](super::LockOptions::require_replicas): the key held
    /// our token and its TTL was reset on the primary, but fewer replicas than required
    /// acknowledged that in time. The guard's validity did **not** move: a failover now could
    /// promote a replica where the lease ends as the last confirmed renewal left it. The hold
    /// is still ours until then; renew again (a watchdog retries by itself, and signals
    /// [`LeaseLoss::Expired`] when the validity runs out first).
    NotReplicated {
        /// Replicas that acknowledged.
        replicas: u32,
        /// Replicas required.
        requested: u32,
    },
}

impl Renew {
    /// `true` for [`Renew::Renewed`]: the guard's validity moved forward.
    ///
    /// ```
    /// use redkit::lock::Renew;
    /// assert!(Renew::Renewed.is_renewed());
    /// assert!(!Renew::Lost.is_renewed());
    /// // reset on the primary only: the validity did not move
    /// assert!(!Renew::NotReplicated { replicas: 0, requested: 1 }.is_renewed());
    /// ```
    pub fn is_renewed(&self) -> bool {
        matches!(self, Self::Renewed)
    }
}

/// Result of [`Lock::fence`](super::Lock::fence): a fencing token for a lock held now.
///
/// ```
/// use redkit::lock::{Fence, FencingToken};
/// assert_ne!(Fence::Issued(FencingToken::new(7).unwrap()), Fence::Lost);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fence {
    /// The token (issued now, or earlier for this guard): pass it to the storage.
    Issued(FencingToken),
    /// The lock key is gone or holds another owner's token: no token was issued and nothing
    /// was written; the lease is lost.
    Lost,
}

/// Result of a fenced write ([`Lock::fenced_set`](super::Lock::fenced_set)).
///
/// ```
/// use redkit::lock::{FencedWrite, FencingToken};
/// let refused = FencedWrite::Stale { newer: FencingToken::new(9).unwrap() };
/// assert!(!refused.is_written());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FencedWrite {
    /// Written: the presented token was not older than the last one stored.
    Written,
    /// Refused: a newer token has already written; the stored value is unchanged.
    Stale {
        /// The token of the last accepted write.
        newer: FencingToken,
    },
}

impl FencedWrite {
    /// `true` for [`FencedWrite::Written`].
    ///
    /// ```
    /// use redkit::lock::{FencedWrite, FencingToken};
    /// assert!(FencedWrite::Written.is_written());
    /// assert!(!FencedWrite::Stale { newer: FencingToken::new(9).unwrap() }.is_written());
    /// ```
    pub fn is_written(&self) -> bool {
        matches!(self, Self::Written)
    }
}

/// Why a lease was lost while it was being watched.
///
/// ```
/// use redkit::lock::LeaseLoss;
/// assert_ne!(LeaseLoss::NotOwner, LeaseLoss::Expired);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseLoss {
    /// Redis said the key is gone or held by another owner (a renewal answered
    /// [`Renew::Lost`], or the final release answered [`Release::NotOwner`]).
    NotOwner,
    /// Renewals kept failing (errors, timeouts, or, for a hold acquired with
    /// [`LockOptions::require_replicas`](super::LockOptions::require_replicas), renewals
    /// answered [`Renew::NotReplicated`]) until the local validity ran out: the lease must be
    /// assumed lost.
    Expired,
}

/// Reads the 1/0 status a lock script answers (1 = done, 0 = not the owner / refused).
/// A renewal script's 1/0 answer as a [`Renew`].
pub(crate) fn renew_status(script: &Script, answer: i64) -> Result<Renew> {
    Ok(if status(script, answer)? {
        Renew::Renewed
    } else {
        Renew::Lost
    })
}

pub(crate) fn status(script: &Script, status: i64) -> Result<bool> {
    match status {
        1 => Ok(true),
        0 => Ok(false),
        other => Err(Error::unexpected(
            script.id(),
            format!("status {other} is neither 0 nor 1"),
        )),
    }
}

/// The `redkit.outcome` metric label of an acquire's answer.
pub(crate) fn acquire_label<G, H>(answer: &crate::error::Result<Acquire<G, H>>) -> LockOutcome {
    match answer {
        Ok(Acquire::Acquired(_)) => LockOutcome::Acquired,
        Ok(Acquire::Busy(_)) => LockOutcome::Busy,
        Ok(_) => LockOutcome::NotReplicated,
        Err(_) => LockOutcome::Error,
    }
}

/// The `redkit.outcome` metric label of a renewal's answer.
pub(crate) fn renew_label<E>(answer: &std::result::Result<Renew, E>) -> LockOutcome {
    match answer {
        Ok(Renew::Renewed) => LockOutcome::Renewed,
        Ok(Renew::NotReplicated { .. }) => LockOutcome::NotReplicated,
        Ok(_) => LockOutcome::Lost,
        Err(_) => LockOutcome::Error,
    }
}

/// The `redkit.outcome` metric label of a release's answer.
pub(crate) fn release_label<E>(answer: &std::result::Result<Release, E>) -> LockOutcome {
    match answer {
        Ok(Release::Released) => LockOutcome::Released,
        Ok(_) => LockOutcome::NotOwner,
        Err(_) => LockOutcome::Error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::embedded::LOCK_RENEW as SCRIPT;

    #[test]
    fn an_acquire_hands_out_its_guard_and_nothing_else_does() {
        let acquired: Acquire<&str> = Acquire::Acquired("guard");
        assert!(acquired.is_acquired());
        assert_eq!(acquired.acquired(), Some("guard"));
        let busy: Acquire<&str> = Acquire::Busy(Held::until(None));
        assert!(!busy.is_acquired());
        assert_eq!(busy.acquired(), None);
        let refused: Acquire<&str> = Acquire::NotReplicated {
            replicas: 0,
            requested: 1,
        };
        assert!(!refused.is_acquired());
        assert_eq!(refused.acquired(), None);
    }

    #[test]
    fn a_holders_ttl_is_read_from_the_scripts_milliseconds() {
        assert_eq!(
            Held::until_ms(1_500).ttl,
            Some(Duration::from_millis(1_500))
        );
        assert_eq!(Held::until_ms(0).ttl, Some(Duration::ZERO));
        // PTTL's -1 (no TTL) and -2 (no key): unknown.
        assert_eq!(Held::until_ms(-1).ttl, None);
        assert_eq!(Held::until_ms(-2).ttl, None);
        assert_eq!(
            Held::until(Some(Duration::from_secs(3))).ttl,
            Some(Duration::from_secs(3))
        );
        let permits = HeldPermits::by(4, Some(Duration::from_millis(9)));
        assert_eq!(
            (permits.holders, permits.ttl),
            (4, Some(Duration::from_millis(9)))
        );
    }

    #[test]
    fn only_a_renewal_moves_the_validity() {
        assert!(Renew::Renewed.is_renewed());
        assert!(!Renew::Lost.is_renewed());
        assert!(!Renew::NotReplicated {
            replicas: 0,
            requested: 1
        }
        .is_renewed());
        assert!(FencedWrite::Written.is_written());
        assert!(!FencedWrite::Stale {
            newer: FencingToken::new(9).unwrap()
        }
        .is_written());
    }

    #[test]
    fn a_scripts_status_is_one_or_zero_and_anything_else_is_an_error() {
        assert!(status(SCRIPT.script(), 1).unwrap());
        assert!(!status(SCRIPT.script(), 0).unwrap());
        for other in [2, -1, i64::MAX] {
            let err = status(SCRIPT.script(), other).unwrap_err();
            assert!(err.to_string().contains("neither 0 nor 1"), "{err}");
        }
        assert_eq!(renew_status(SCRIPT.script(), 1).unwrap(), Renew::Renewed);
        assert_eq!(renew_status(SCRIPT.script(), 0).unwrap(), Renew::Lost);
        assert!(renew_status(SCRIPT.script(), 7).is_err());
    }

    #[test]
    fn each_answer_has_its_metric_label() {
        let ok: Result<Acquire<()>> = Ok(Acquire::Acquired(()));
        assert_eq!(acquire_label(&ok), LockOutcome::Acquired);
        let busy: Result<Acquire<()>> = Ok(Acquire::Busy(Held::until(None)));
        assert_eq!(acquire_label(&busy), LockOutcome::Busy);
        let refused: Result<Acquire<()>> = Ok(Acquire::NotReplicated {
            replicas: 0,
            requested: 1,
        });
        assert_eq!(acquire_label(&refused), LockOutcome::NotReplicated);
        let failed: Result<Acquire<()>> = Err(Error::unexpected("s", "x"));
        assert_eq!(acquire_label(&failed), LockOutcome::Error);

        let renew = |r: Renew| renew_label::<()>(&Ok(r));
        assert_eq!(renew(Renew::Renewed), LockOutcome::Renewed);
        assert_eq!(renew(Renew::Lost), LockOutcome::Lost);
        assert_eq!(
            renew(Renew::NotReplicated {
                replicas: 0,
                requested: 1
            }),
            LockOutcome::NotReplicated
        );
        assert_eq!(renew_label::<()>(&Err(())), LockOutcome::Error);

        assert_eq!(
            release_label::<()>(&Ok(Release::Released)),
            LockOutcome::Released
        );
        assert_eq!(
            release_label::<()>(&Ok(Release::NotOwner)),
            LockOutcome::NotOwner
        );
        assert_eq!(release_label::<()>(&Err(())), LockOutcome::Error);
    }
}
