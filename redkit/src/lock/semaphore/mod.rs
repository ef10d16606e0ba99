//! [`Semaphore`]: N leased permits per resource, one script round trip per step.

/// The concurrency layer's leased slots (feature `tower`).
#[cfg(feature = "tower")]
pub(crate) mod block;
mod blocking;
pub(crate) mod inspect;
pub(crate) mod permit;

use std::time::Duration;

use redis::aio::ConnectionLike;

use crate::error::{Error, Result};
use crate::lock::fair::FairLock;
use crate::lock::lease::grant::settle;
use crate::lock::lease::guard::LockGuard;
use crate::lock::lease::kind::{lease_verbs, lock_kind, try_acquire, Kind};
use crate::lock::lease::renewal::renewal;
use crate::lock::lease::schema;
use crate::lock::lease::wait::{self, Attempts, Pace, Step};
use crate::lock::lease::{HeldLease, LeaseGuard, LeaseKind};
use crate::lock::metrics::LockKind;
use crate::lock::options::{LockOptions, OwnerToken, Polling, Replicable};
use crate::lock::outcome::{Acquire, HeldPermits};
use crate::lock::semaphore::permit::PermitGuard;
use crate::script::{embedded, Call, Script, ScriptManager};

lock_kind! {
    /// A counting semaphore on one Redis server or a Redis Cluster: at most `permits` owners hold
    /// a resource at once, each with an owner token and a lease measured by the server's clock.
    ///
    /// Keys per resource: `<prefix>:{<resource>}:wake`, a short list that wakes blocked
    /// acquirers, and `<prefix>:{<resource>}`: a sorted set of holders (member = owner
    /// token, score = lease end in ms of Redis `TIME`). Every acquire first drops the holders
    /// whose lease ended (`ZREMRANGEBYSCORE`), so **a crashed holder's permit comes back when its
    /// lease ends**, never later. The key's TTL follows the longest lease (no forever-keys).
    ///
    /// Every caller of one resource must pass the same `permits`: the count is not stored.
    /// [`LockOptions`] gives the lease (`ttl`), waiting (`retries`, `retry_delay`, `jitter`,
    /// `max_wait`), the drift allowance, an optional caller-supplied owner `token` (an acquire
    /// retried with the same token finds its own permit) and `require_replicas` (each attempt is
    /// followed by `WAIT` in the same round trip; a permit fewer replicas confirmed is given back
    /// and answered [`Acquire::NotReplicated`]).
    ///
    /// Cheap to clone (an `Arc`). Generic over any [`ConnectionLike`].
    ///
    /// ```no_run
    /// # async fn run() -> redkit::Result<()> {
    /// use std::time::Duration;
    /// use redkit::lock::{Acquire, LockOptions, Semaphore};
    /// use redkit::ScriptManager;
    ///
    /// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
    /// let mut conn = client.get_multiplexed_async_connection().await?;
    /// let sem = Semaphore::new();
    /// let wait = LockOptions::new().ttl(Duration::from_secs(10)).retries(100);
    /// // at most 3 exports at once, across every process
    /// if let Acquire::Acquired(permit) = sem.acquire(&mut conn, "export", 3, &wait).await? {
    ///     // ... work ...
    ///     sem.release(&mut conn, permit).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub struct Semaphore;
    prefix = "redkit:sem";
    key = "The key holding `resource`'s holders (escaped, bounded: see [`keys`](crate::keys)).";
    rebase = Inner::rebase;
    inner {
        /// The arrival-order queue in front of [`Semaphore::acquire_fair`] (keys under
        /// `<prefix>:gate`).
        pub(in crate::lock) gate: FairLock = FairLock::new().gated(Self::DEFAULT_PREFIX, None),
        acquire: &'static Script = embedded::SEMAPHORE_ACQUIRE.script(),
        renew: &'static Script = embedded::SEMAPHORE_RENEW.script(),
        release: &'static Script = embedded::SEMAPHORE_RELEASE.script(),
    }
}

impl Semaphore {
    /// Most permits one resource may have.
    ///
    /// ```
    /// use redkit::lock::Semaphore;
    /// assert_eq!(Semaphore::MAX_PERMITS, 1_000_000);
    /// // permits from configuration, kept within what an acquire accepts (1 to MAX_PERMITS)
    /// let configured: u32 = 5_000_000;
    /// let permits = configured.clamp(1, Semaphore::MAX_PERMITS);
    /// assert_eq!(permits, Semaphore::MAX_PERMITS);
    /// ```
    pub const MAX_PERMITS: u32 = 1_000_000;

    try_acquire! {
        PermitGuard => HeldPermits, permits: u32;
        /// One attempt: takes a permit when fewer than `permits` unexpired holders exist (or this
        /// attempt's owner token already holds one: its lease is refreshed), else
        /// [`Acquire::Busy`]. Same as [`acquire`](Self::acquire) with no retries.
        ///
        /// ```no_run
        /// # async fn run(sem: redkit::lock::Semaphore, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
        /// use redkit::lock::LockOptions;
        /// let outcome = sem.try_acquire(&mut conn, "crawler", 10, &LockOptions::new()).await?;
        /// println!("{}", outcome.is_acquired());
        /// # Ok(()) }
        /// ```
    }

    /// Acquires one of `permits` permits of `resource`, waiting as the options allow (up to
    /// `retries` more attempts, paused by `retry_delay` + random `jitter`, none started after
    /// `max_wait`). Every attempt uses one owner token: [`LockOptions::token`] when set, else
    /// a fresh random one.
    ///
    /// Fails with [`Error::InvalidInput`] before anything is sent for an empty or too long
    /// resource, `permits` outside `1..=`[`MAX_PERMITS`](Self::MAX_PERMITS) or invalid
    /// options; with [`Error::WrongType`] when the key is not a sorted set, with
    /// [`Error::CorruptData`] when a stored lease ends further away than the longest lease
    /// allowed, with [`Error::PermissionDenied`] when the ACL user may not run one of the
    /// script's commands (nothing written in these cases); and with [`Error::Timeout`] when
    /// the acquire took the whole lease (the permit is then released again).
    ///
    /// ```no_run
    /// # async fn run(sem: redkit::lock::Semaphore, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use std::time::Duration;
    /// use redkit::lock::{Acquire, LockOptions};
    /// let wait = LockOptions::new().retries(1000).max_wait(Duration::from_secs(5));
    /// if let Acquire::Acquired(permit) = sem.acquire(&mut conn, "gpu", 2, &wait).await? {
    ///     sem.release(&mut conn, permit).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn acquire<C: ConnectionLike>(
        &self,
        conn: &mut C,
        resource: &str,
        permits: u32,
        options: &LockOptions<Semaphore>,
    ) -> Result<Acquire<PermitGuard, HeldPermits>> {
        let mut attempts = self.attempts(resource, permits, options)?;
        wait::acquire(Pace::Poll(options.settings()), conn, &mut attempts).await
    }

    /// The attempts of an acquire of one of `permits` permits of `resource`, all with one
    /// owner token, or the typed error of its bad input (nothing sent).
    pub(in crate::lock) fn attempts<'a>(
        &'a self,
        resource: &str,
        permits: u32,
        options: &'a LockOptions<Semaphore>,
    ) -> Result<PermitAttempts<'a>> {
        let ttl_ms = options.validate()?;
        if permits == 0 || permits > Self::MAX_PERMITS {
            return Err(Error::invalid(
                "permits",
                format!("must be 1 to {}", Self::MAX_PERMITS),
            ));
        }
        Ok(PermitAttempts {
            sem: self,
            key: self.key(resource)?,
            token: options.owner_token(),
            permits,
            ttl_ms,
            options,
            gate: None,
        })
    }

    async fn attempt<C: ConnectionLike>(
        &self,
        conn: &mut C,
        key: &str,
        token: &str,
        permits: u32,
        ttl_ms: u64,
        options: &LockOptions<Semaphore>,
    ) -> Result<Acquire<PermitGuard, HeldPermits>> {
        let script = self.inner.acquire;
        let mut call = Call::new(script);
        call.key(key).arg(token).arg(permits).arg(ttl_ms);
        let (reply, started, replicas): (Vec<i64>, _, _) = self
            .inner
            .base
            .attempt(conn, &call, options.get_replication())
            .await?;
        let count = |n: i64| {
            u32::try_from(n)
                .map_err(|_| Error::unexpected(script.id(), format!("holder count {n}")))
        };
        match reply.as_slice() {
            [1, holders] => {
                let ttl = Duration::from_millis(ttl_ms);
                let drift = options.drift_allowance();
                let (key, token) = (key.to_owned(), token.to_owned());
                let wait = options.get_replication();
                let held = HeldLease::new(key, token, ttl, drift, wait, started);
                let guard = PermitGuard {
                    held,
                    permits,
                    holders: count(*holders)?,
                    watchdog: None,
                };
                settle(
                    self,
                    conn,
                    guard,
                    started,
                    options.settings(),
                    replicas.as_ref(),
                )
                .await
            }
            [0, holders, retry_after] => Ok(Acquire::Busy(HeldPermits::by(
                count(*holders)?,
                Some(Duration::from_millis(
                    u64::try_from(*retry_after).unwrap_or(0),
                )),
            ))),
            other => Err(Error::unexpected(
                script.id(),
                format!("reply {other:?} is neither [1, holders] nor [0, holders, ms]"),
            )),
        }
    }

    lease_verbs! {
        PermitGuard;
        /// Gives the permit back at once (and stops its watchdog), and wakes one caller blocked
        /// in [`acquire_blocking`](Self::acquire_blocking). [`Release::NotOwner`](crate::lock::Release::NotOwner) when the
        /// lease had already ended (the permit may have been given to someone else meanwhile).
        ///
        /// ```no_run
        /// # async fn run(sem: redkit::lock::Semaphore, mut conn: redis::aio::MultiplexedConnection, permit: redkit::lock::PermitGuard) -> redkit::Result<()> {
        /// use redkit::lock::Release;
        /// if sem.release(&mut conn, permit).await? == Release::NotOwner {
        ///     eprintln!("the lease had ended: more than N holders may have overlapped");
        /// }
        /// # Ok(()) }
        /// ```
        release;
        /// Extends the permit's lease to its ttl from now (server time) if it has not ended, and
        /// moves the local validity forward; [`Renew::Lost`](crate::lock::Renew::Lost) otherwise (the guard is then no
        /// longer valid).
        ///
        /// ```no_run
        /// # async fn run(sem: redkit::lock::Semaphore, mut conn: redis::aio::MultiplexedConnection, mut permit: redkit::lock::PermitGuard) -> redkit::Result<()> {
        /// use redkit::lock::Renew;
        /// if sem.renew(&mut conn, &mut permit).await? == Renew::Lost {
        ///     return Ok(()); // stop: the permit may belong to someone else now
        /// }
        /// # Ok(()) }
        /// ```
        renew;
        /// Starts a watchdog for `permit`: a background task on the current tokio runtime that
        /// renews the lease about every ttl/3 over `conn` (a clone of yours) until the permit is
        /// released or dropped, and fires the returned signal when the lease is lost. Calling it
        /// again returns the running watchdog's signal. Fails with [`Error::InvalidInput`]
        /// outside a tokio runtime.
        ///
        /// ```no_run
        /// # async fn run(sem: redkit::lock::Semaphore, conn: redis::aio::MultiplexedConnection, mut permit: redkit::lock::PermitGuard) -> redkit::Result<()> {
        /// let lost = sem.watch(&conn, &mut permit)?;
        /// tokio::select! {
        ///     loss = lost.lost() => eprintln!("permit lost: {loss:?}"),
        ///     _ = tokio::time::sleep(std::time::Duration::from_secs(60)) => {}
        /// }
        /// let mut conn = conn;
        /// sem.release(&mut conn, permit).await?;
        /// # Ok(()) }
        /// ```
        watch;
    }
}

impl Inner {
    /// Moves the gate under the new prefix, and onto the new manager when given.
    fn rebase(inner: &mut Inner, manager: Option<&ScriptManager>) {
        inner.gate = inner
            .gate
            .clone()
            .gated(&inner.base.prefix, manager.cloned());
    }
}

impl LeaseKind for Semaphore {
    /// The permit count the guard was acquired with.
    type Extra = u32;

    fn renew_call(&self, held: &HeldLease) -> Call<'_> {
        renewal(self.inner.renew, &[&held.key], &held.token, held.ttl)
    }

    fn release_call(&self, held: &HeldLease, permits: &u32) -> Call<'_> {
        let mut call = Call::new(self.inner.release);
        call.key(&held.key)
            .key_suffixed(&held.key, schema::WAKE)
            .arg(&held.token)
            .arg(permits);
        call
    }
}

/// The attempts of one acquire of a permit.
pub(in crate::lock) struct PermitAttempts<'a> {
    pub(in crate::lock) sem: &'a Semaphore,
    pub(in crate::lock) key: String,
    token: String,
    permits: u32,
    ttl_ms: u64,
    options: &'a LockOptions<Semaphore>,
    /// The caller's place at the fair gate, renewed while it waits
    /// ([`Semaphore::acquire_fair`]).
    pub(in crate::lock) gate: Option<&'a mut LockGuard<FairLock>>,
}

impl<C: ConnectionLike> Attempts<C> for PermitAttempts<'_> {
    type Guard = PermitGuard;
    type Held = HeldPermits;

    const KIND: LockKind = <Semaphore as Kind>::KIND;

    async fn wait(
        &mut self,
        conn: &mut C,
        answer: &Acquire<PermitGuard, HeldPermits>,
        left: Duration,
    ) -> Result<bool> {
        self.wait_for_release(conn, answer, left).await
    }

    async fn attempt(&mut self, conn: &mut C) -> Result<Step<PermitGuard, HeldPermits>> {
        let answer = self
            .sem
            .attempt(
                conn,
                &self.key,
                &self.token,
                self.permits,
                self.ttl_ms,
                self.options,
            )
            .await?;
        Ok(Step::unless_acquired(answer))
    }
}

impl LeaseGuard for PermitGuard {
    type Kind = Semaphore;

    fn held(&self) -> &HeldLease {
        &self.held
    }

    /// What a release of this permit passes the semaphore beyond the lease: its permit count.
    fn extra(&self) -> &u32 {
        &self.permits
    }
}

impl crate::lock::options::sealed::Sealed for Semaphore {}
impl Polling for Semaphore {}
impl OwnerToken for Semaphore {}
impl Replicable for Semaphore {}
