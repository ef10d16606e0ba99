//! The watchdog: an opt-in background task that renews a lease about every ttl/3 and signals
//! its loss.

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::lock::lease::{deadline, renew_once, HeldLease, LeaseKind};
use crate::lock::metrics::{self, LockOp, LockOutcome};
use crate::lock::outcome::{LeaseLoss, Renew};

/// The running watchdog's signal from `slot`, or a new watchdog renewing `held` through
/// `kind` stored there: what every `watch` does. [`Error::InvalidInput`] outside a tokio
/// runtime.
pub(crate) fn watch<K, C>(
    kind: &K,
    conn: &C,
    slot: &mut Option<WatchdogHandle>,
    held: &HeldLease,
) -> Result<LeaseSignal>
where
    K: LeaseKind,
    C: ConnectionLike + Clone + Send + 'static,
{
    if let Some(running) = slot {
        return Ok(running.signal.clone());
    }
    let handle = spawn(kind.clone(), conn.clone(), held.clone())
        .ok_or_else(|| Error::invalid("runtime", "the watchdog needs a tokio runtime"))?;
    let signal = handle.signal.clone();
    *slot = Some(handle);
    Ok(signal)
}

/// Tells the work done under a lock that the lease is gone.
///
/// Fired once, by the watchdog, the moment a renewal answers [`Renew::Lost`]
/// ([`LeaseLoss::NotOwner`]) or when renewals kept failing until the local validity ran out
/// ([`LeaseLoss::Expired`]). For a hold acquired with
/// [`LockOptions::require_replicas`](crate::lock::LockOptions::require_replicas), a renewal the
/// replicas did not acknowledge in time ([`Renew::NotReplicated`]) counts as failed: it does
/// not move the validity, and is tried again sooner.
///
/// Cheap to clone; select on [`lost`](Self::lost) or hand out
/// [`cancellation_token`](Self::cancellation_token) to code that already understands
/// cancellation.
///
/// ```no_run
/// # async fn run(signal: redkit::lock::LeaseSignal) {
/// tokio::select! {
///     loss = signal.lost() => eprintln!("lease lost ({loss:?}): stopping"),
///     _ = tokio::time::sleep(std::time::Duration::from_secs(5)) => println!("work done"),
/// }
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct LeaseSignal {
    fired: CancellationToken,
    loss: Arc<OnceLock<LeaseLoss>>,
}

impl LeaseSignal {
    fn new() -> Self {
        Self {
            fired: CancellationToken::new(),
            loss: Arc::new(OnceLock::new()),
        }
    }

    /// Records the loss (the first reason wins) and wakes every waiter.
    pub(crate) fn fire(&self, loss: LeaseLoss) {
        let _ = self.loss.set(loss);
        self.fired.cancel();
    }

    /// `true` once the lease is known to be lost.
    ///
    /// ```no_run
    /// # async fn run(lock: redkit::lock::Lock, mut conn: redis::aio::MultiplexedConnection, mut guard: redkit::lock::LockGuard<redkit::lock::Lock>) -> redkit::Result<()> {
    /// let signal = lock.watch(&conn, &mut guard)?;
    /// for _ in 0..100 {
    ///     if signal.is_lost() {
    ///         break; // another owner may hold the lock now: stop between batches
    ///     }
    ///     // ... process one batch ...
    /// }
    /// lock.release(&mut conn, guard).await?;
    /// # Ok(()) }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.fired.is_cancelled()
    }

    /// Why the lease was lost, once it is.
    ///
    /// ```no_run
    /// # fn run(signal: redkit::lock::LeaseSignal) {
    /// use redkit::lock::LeaseLoss;
    /// match signal.loss() {
    ///     None => println!("still held"),
    ///     Some(LeaseLoss::NotOwner) => eprintln!("another owner holds the lock, or its key is gone"),
    ///     Some(_) => eprintln!("renewals failed until the lease ran out"),
    /// }
    /// # }
    /// ```
    pub fn loss(&self) -> Option<LeaseLoss> {
        self.loss.get().copied()
    }

    /// Waits until the lease is lost (forever if it never is, e.g. after a release).
    ///
    /// ```no_run
    /// # async fn run(signal: redkit::lock::LeaseSignal) {
    /// let work = tokio::spawn(async { /* the work the lock protects */ });
    /// let abort = work.abort_handle();
    /// tokio::spawn(async move {
    ///     let loss = signal.lost().await;
    ///     eprintln!("lease lost ({loss:?}): aborting the work");
    ///     abort.abort();
    /// });
    /// # }
    /// ```
    pub async fn lost(&self) -> LeaseLoss {
        self.fired.cancelled().await;
        self.loss().unwrap_or(LeaseLoss::NotOwner)
    }

    /// A token cancelled when the lease is lost. It is a child token: cancelling it yourself
    /// does not mark the lease as lost.
    ///
    /// ```no_run
    /// # async fn run(signal: redkit::lock::LeaseSignal) {
    /// // hand it to code that already stops on cancellation
    /// let stop = signal.cancellation_token();
    /// let worker = tokio::spawn(async move {
    ///     while !stop.is_cancelled() {
    ///         // ... one step of the work ...
    ///         tokio::task::yield_now().await;
    ///     }
    /// });
    /// # let _ = worker;
    /// # }
    /// ```
    pub fn cancellation_token(&self) -> CancellationToken {
        self.fired.child_token()
    }
}

/// Owned by the guard: stops the task on drop (release or drop of the guard).
#[derive(Debug)]
pub(crate) struct WatchdogHandle {
    pub(crate) signal: LeaseSignal,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Drop for WatchdogHandle {
    fn drop(&mut self) {
        self.stop.cancel();
        self.task.abort();
    }
}

/// Spawns the watchdog on the current tokio runtime (`None` outside a runtime).
fn spawn<K, C>(kind: K, conn: C, lease: HeldLease) -> Option<WatchdogHandle>
where
    K: LeaseKind,
    C: ConnectionLike + Send + 'static,
{
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    let signal = LeaseSignal::new();
    let stop = CancellationToken::new();
    let task = runtime.spawn(run(kind, conn, lease, signal.clone(), stop.clone()));
    Some(WatchdogHandle { signal, stop, task })
}

/// Runs `fut` unless `stop` is cancelled first.
async fn unless_stopped<F: Future>(stop: &CancellationToken, fut: F) -> Option<F::Output> {
    tokio::select! {
        biased;
        _ = stop.cancelled() => None,
        out = fut => Some(out),
    }
}

async fn run<K: LeaseKind, C: ConnectionLike>(
    kind: K,
    mut conn: C,
    lease: HeldLease,
    signal: LeaseSignal,
    stop: CancellationToken,
) {
    let period = (lease.ttl / 3).max(Duration::from_millis(1));
    // After a failed renewal, try again sooner (the lease is running out).
    let retry = (period / 3).max(Duration::from_millis(1));
    let mut next = period;
    // The last attempt ran on the primary but was not acknowledged by enough replicas.
    let mut unconfirmed = false;
    loop {
        // Renew before the validity runs out even when the lease is already short (a watch
        // started late, or failed attempts): never sleep past half of what is left.
        let remaining = lease.clock.remaining();
        let wait = next
            .min(remaining / 2)
            .max(Duration::from_millis(1))
            .min(remaining);
        if unless_stopped(&stop, tokio::time::sleep(wait))
            .await
            .is_none()
        {
            return;
        }
        let remaining = lease.clock.remaining();
        if remaining.is_zero() {
            tracing::warn!(
                key = %lease.key,
                not_replicated = unconfirmed,
                "lease ran out before a renewal succeeded"
            );
            metrics::lock_operation(K::KIND, LockOp::LeaseLost, LockOutcome::Expired);
            signal.fire(LeaseLoss::Expired);
            return;
        }
        let started = Instant::now();
        let attempt = tokio::time::timeout(remaining, renew_once(&kind, &mut conn, &lease));
        let Some(result) = unless_stopped(&stop, attempt).await else {
            return;
        };
        match result {
            Ok(Ok(Renew::Renewed)) => {
                lease.clock.set(deadline(started, lease.ttl, lease.drift));
                unconfirmed = false;
                next = period;
            }
            Ok(Ok(Renew::NotReplicated {
                replicas,
                requested,
            })) => {
                tracing::debug!(
                    key = %lease.key,
                    replicas,
                    requested,
                    "lease renewal not replicated; validity not extended, retrying"
                );
                unconfirmed = true;
                next = retry;
            }
            Ok(Ok(_lost)) => {
                tracing::warn!(key = %lease.key, "lease lost: another owner or no key");
                metrics::lock_operation(K::KIND, LockOp::LeaseLost, LockOutcome::NotOwner);
                lease.clock.expire();
                signal.fire(LeaseLoss::NotOwner);
                return;
            }
            Ok(Err(err)) => {
                tracing::debug!(key = %lease.key, error = %err, "lease renewal failed; retrying");
                unconfirmed = false;
                next = retry;
            }
            Err(_timeout) => {
                unconfirmed = false;
                next = Duration::ZERO;
            }
        }
    }
}
