//! [`Lock::with_lock`]: run work under a watched lease and learn whether it held throughout.

use std::future::Future;

use redis::aio::ConnectionLike;

use crate::error::Result;
use crate::lock::lease::token::FencingToken;
use crate::lock::lease::watchdog::LeaseSignal;
use crate::lock::options::LockOptions;
use crate::lock::outcome::{Acquire, LeaseLoss, Release};
use crate::lock::single::Lock;

/// What the work run by [`Lock::with_lock`] receives: the fencing token and the loss signal.
///
/// ```no_run
/// # async fn run(lease: redkit::lock::Lease) {
/// tokio::select! {
///     _ = lease.signal().lost() => { /* stop: another owner may hold the lock */ }
///     _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {
///         println!("done with fencing token {:?}", lease.fencing_token());
///     }
/// }
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Lease {
    fence: Option<FencingToken>,
    signal: LeaseSignal,
}

impl Lease {
    /// The fencing token of this acquisition: `None` unless the lock was acquired with
    /// [`LockOptions::fencing(true)`](crate::lock::LockOptions::fencing).
    ///
    /// ```no_run
    /// # async fn run(lock: redkit::lock::Lock, conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use redkit::lock::LockOptions;
    /// let fenced = LockOptions::new().fencing(true);
    /// let (writer, mut write_conn) = (lock.clone(), conn.clone());
    /// let outcome = lock
    ///     .with_lock(&conn, "invoice-17", &fenced, |lease| async move {
    ///         let token = lease.fencing_token().expect("acquired with fencing");
    ///         writer.fenced_set(&mut write_conn, "invoice:{17}", token, "paid").await
    ///     })
    ///     .await?;
    /// if let Some(write) = outcome.into_value() {
    ///     println!("fenced write: {:?}", write?);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn fencing_token(&self) -> Option<FencingToken> {
        self.fence
    }

    /// Fired when the lease is lost.
    ///
    /// ```no_run
    /// # async fn run(lease: redkit::lock::Lease) {
    /// for _ in 0..10 {
    ///     if lease.signal().is_lost() {
    ///         break; // another owner may hold the lock now: stop
    ///     }
    ///     // ... one step of the work ...
    /// }
    /// # }
    /// ```
    pub fn signal(&self) -> &LeaseSignal {
        &self.signal
    }
}

/// Result of [`Lock::with_lock`].
///
/// ```
/// use redkit::lock::WithLock;
/// let done: WithLock<u32> = WithLock::Busy;
/// assert!(done.into_value().is_none());
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum WithLock<T> {
    /// The work ran and the lease held throughout (it was released afterwards, or, if the
    /// release itself failed, it ends by its TTL).
    Completed {
        /// What the work returned.
        value: T,
        /// The fencing token of the acquisition (`None` without
        /// [`LockOptions::fencing`](crate::lock::LockOptions::fencing)).
        fencing_token: Option<FencingToken>,
    },
    /// The work ran but the lease was lost while it did: another owner may have run at the
    /// same time. Treat its effects as unprotected (fenced writes were still checked).
    LeaseLost {
        /// What the work returned.
        value: T,
        /// Why the lease was lost.
        loss: LeaseLoss,
    },
    /// The lock was held by another owner (after the retries the options allow); the work did
    /// not run.
    Busy,
    /// The acquisition was not confirmed by the replicas
    /// [`LockOptions::require_replicas`](crate::lock::LockOptions::require_replicas) asked for, and
    /// was released again; the work did not run.
    NotReplicated {
        /// Replicas that acknowledged.
        replicas: u32,
        /// Replicas required.
        requested: u32,
    },
}

impl<T> WithLock<T> {
    /// The work's value, if it ran.
    ///
    /// ```
    /// use redkit::lock::{FencingToken, LeaseLoss, WithLock};
    /// let done = WithLock::Completed { value: 42, fencing_token: FencingToken::new(7) };
    /// assert_eq!(done.into_value(), Some(42));
    /// let unfenced = WithLock::Completed { value: 42, fencing_token: None };
    /// assert_eq!(done.into_value(), Some(42));
    /// // it ran, but not under the lock throughout: still its value
    /// let lost = WithLock::LeaseLost { value: 42, loss: LeaseLoss::Expired };
    /// assert_eq!(lost.into_value(), Some(42));
    /// let busy: WithLock<u32> = WithLock::Busy;
    /// assert_eq!(busy.into_value(), None);
    /// ```
    pub fn into_value(self) -> Option<T> {
        match self {
            Self::Completed { value, .. } | Self::LeaseLost { value, .. } => Some(value),
            Self::Busy | Self::NotReplicated { .. } => None,
        }
    }
}

impl Lock {
    /// Acquires `resource` (waiting as `options` allow), starts a watchdog, runs `work` and
    /// releases. Tells whether the lease held throughout: [`WithLock::LeaseLost`] when the
    /// watchdog signalled a loss, the local validity had run out, or the final
    /// compare-and-delete found another owner.
    ///
    /// `work` receives a [`Lease`] whose signal it should select on to stop early. If `work`
    /// panics the guard is dropped: the watchdog stops and the lease ends by its TTL.
    ///
    /// ```no_run
    /// # async fn run() -> redkit::Result<()> {
    /// use std::time::Duration;
    /// use redkit::lock::{Lock, LockOptions, WithLock};
    /// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
    /// let conn = client.get_multiplexed_async_connection().await?;
    /// let lock = Lock::new();
    /// let options = LockOptions::new().ttl(Duration::from_secs(3)).retries(10);
    /// let outcome = lock
    ///     .with_lock(&conn, "nightly-report", &options, |lease| async move {
    ///         tokio::select! {
    ///             _ = lease.signal().lost() => "stopped early",
    ///             _ = tokio::time::sleep(Duration::from_secs(10)) => "finished",
    ///         }
    ///     })
    ///     .await?;
    /// match outcome {
    ///     WithLock::Completed { value, .. } => println!("{value}"),
    ///     WithLock::LeaseLost { loss, .. } => eprintln!("lease lost: {loss:?}"),
    ///     _ => println!("someone else is running it"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn with_lock<C, F, Fut, T>(
        &self,
        conn: &C,
        resource: &str,
        options: &LockOptions<Lock>,
        work: F,
    ) -> Result<WithLock<T>>
    where
        C: ConnectionLike + Clone + Send + 'static,
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = T>,
    {
        let mut own = conn.clone();
        let mut guard = match self.acquire(&mut own, resource, options).await? {
            Acquire::Acquired(guard) => guard,
            Acquire::NotReplicated {
                replicas,
                requested,
            } => {
                return Ok(WithLock::NotReplicated {
                    replicas,
                    requested,
                })
            }
            _ => return Ok(WithLock::Busy),
        };
        let signal = self.watch(conn, &mut guard)?;
        let fencing_token = guard.fencing_token();
        let value = work(Lease {
            fence: fencing_token,
            signal: signal.clone(),
        })
        .await;
        let mut loss = signal
            .loss()
            .or_else(|| (!guard.is_valid()).then_some(LeaseLoss::Expired));
        match self.release(&mut own, guard).await {
            Ok(Release::NotOwner) => {
                loss.get_or_insert(LeaseLoss::NotOwner);
            }
            Ok(_) => {}
            Err(err) => {
                tracing::warn!(error = %err, "release after work failed; the lease ends by TTL")
            }
        }
        Ok(match loss {
            Some(loss) => WithLock::LeaseLost { value, loss },
            None => WithLock::Completed {
                value,
                fencing_token,
            },
        })
    }
}
