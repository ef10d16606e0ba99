//! The watchdog: an opt-in background task that renews a lease about every ttl/3 and signals
//! its loss.

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::fair::FairLock;
use super::guard::{deadline, Clock};
use super::outcome::{LeaseLoss, Renew};
use super::reentrant::ReentrantLock;
use super::rw::RwLock;
use super::semaphore::Semaphore;
use super::single::Lock;
use crate::error::{Error, Result};

/// What a watchdog renews: a lock's key or a semaphore permit.
#[derive(Debug, Clone)]
pub(crate) enum Renewer {
    Lock(Lock),
    Semaphore(Semaphore),
    Fair(FairLock),
    Rw(RwLock),
    Reentrant(ReentrantLock),
}

impl From<ReentrantLock> for Renewer {
    fn from(lock: ReentrantLock) -> Self {
        Self::Reentrant(lock)
    }
}

impl From<RwLock> for Renewer {
    fn from(rw: RwLock) -> Self {
        Self::Rw(rw)
    }
}

impl From<FairLock> for Renewer {
    fn from(fair: FairLock) -> Self {
        Self::Fair(fair)
    }
}

impl From<Lock> for Renewer {
    fn from(lock: Lock) -> Self {
        Self::Lock(lock)
    }
}

impl From<Semaphore> for Renewer {
    fn from(semaphore: Semaphore) -> Self {
        Self::Semaphore(semaphore)
    }
}

impl Renewer {
    async fn renew<C: ConnectionLike>(
        &self,
        conn: &mut C,
        key: &str,
        token: &str,
        ttl: Duration,
    ) -> Result<Renew> {
        match self {
            Self::Lock(lock) => lock.renew_raw(conn, key, token, ttl).await,
            Self::Semaphore(semaphore) => semaphore.renew_raw(conn, key, token, ttl).await,
            Self::Fair(fair) => fair.renew_raw(conn, key, token, ttl).await,
            Self::Rw(rw) => rw.renew_raw(conn, key, token, ttl).await,
            Self::Reentrant(lock) => lock.renew_raw(conn, key, token, ttl).await,
        }
    }
}

/// The running watchdog's signal from `slot`, or a new watchdog for `lease()` stored there:
/// what every `watch` does. [`Error::InvalidInput`] outside a tokio runtime.
pub(crate) fn watch<C>(
    renewer: impl Into<Renewer>,
    conn: &C,
    slot: &mut Option<WatchdogHandle>,
    lease: impl FnOnce() -> Lease,
) -> Result<LeaseSignal>
where
    C: ConnectionLike + Clone + Send + 'static,
{
    if let Some(running) = slot {
        return Ok(running.signal.clone());
    }
    let handle = spawn(renewer, conn.clone(), lease())
        .ok_or_else(|| Error::invalid("runtime", "the watchdog needs a tokio runtime"))?;
    let signal = handle.signal.clone();
    *slot = Some(handle);
    Ok(signal)
}

/// Tells the work done under a lock that the lease is gone.
///
/// Fired once, by the watchdog, the moment a renewal answers [`Renew::Lost`]
/// ([`LeaseLoss::NotOwner`]) or when renewals kept failing until the local validity ran out
/// ([`LeaseLoss::Expired`]). Cheap to clone; select on [`lost`](Self::lost) or hand out
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
    pub fn is_lost(&self) -> bool {
        self.fired.is_cancelled()
    }

    /// Why the lease was lost, once it is.
    pub fn loss(&self) -> Option<LeaseLoss> {
        self.loss.get().copied()
    }

    /// Waits until the lease is lost (forever if it never is, e.g. after a release).
    pub async fn lost(&self) -> LeaseLoss {
        self.fired.cancelled().await;
        self.loss().unwrap_or(LeaseLoss::NotOwner)
    }

    /// A token cancelled when the lease is lost. It is a child token: cancelling it yourself
    /// does not mark the lease as lost.
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

/// Everything the task needs, owned.
pub(crate) struct Lease {
    pub(crate) key: String,
    pub(crate) token: String,
    pub(crate) ttl: Duration,
    pub(crate) drift: Duration,
    pub(crate) clock: Arc<Clock>,
}

/// Spawns the watchdog on the current tokio runtime (`None` outside a runtime).
pub(crate) fn spawn<C>(renewer: impl Into<Renewer>, conn: C, lease: Lease) -> Option<WatchdogHandle>
where
    C: ConnectionLike + Send + 'static,
{
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    let signal = LeaseSignal::new();
    let stop = CancellationToken::new();
    let task = runtime.spawn(run(
        renewer.into(),
        conn,
        lease,
        signal.clone(),
        stop.clone(),
    ));
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

async fn run<C: ConnectionLike>(
    lock: Renewer,
    mut conn: C,
    lease: Lease,
    signal: LeaseSignal,
    stop: CancellationToken,
) {
    let period = (lease.ttl / 3).max(Duration::from_millis(1));
    // After a failed renewal, try again sooner (the lease is running out).
    let retry = (period / 3).max(Duration::from_millis(1));
    let mut next = period;
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
            tracing::warn!(key = %lease.key, "lease ran out before a renewal succeeded");
            signal.fire(LeaseLoss::Expired);
            return;
        }
        let started = Instant::now();
        let attempt = tokio::time::timeout(
            remaining,
            lock.renew(&mut conn, &lease.key, &lease.token, lease.ttl),
        );
        let Some(result) = unless_stopped(&stop, attempt).await else {
            return;
        };
        match result {
            Ok(Ok(Renew::Renewed)) => {
                lease.clock.set(deadline(started, lease.ttl, lease.drift));
                next = period;
            }
            Ok(Ok(_lost)) => {
                tracing::warn!(key = %lease.key, "lease lost: another owner or no key");
                lease.clock.expire();
                signal.fire(LeaseLoss::NotOwner);
                return;
            }
            Ok(Err(err)) => {
                tracing::debug!(key = %lease.key, error = %err, "lease renewal failed; retrying");
                next = retry;
            }
            Err(_timeout) => next = Duration::ZERO,
        }
    }
}
