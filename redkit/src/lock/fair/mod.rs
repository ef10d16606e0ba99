//! [`FairLock`]: a lock served in arrival order (ZooKeeper's guarantee), each waiter woken by
//! its predecessor leaving, not by polling.

pub(crate) mod inspect;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::Value;

use super::lease::grant::Grant;
use super::lease::guard::LockGuard;
use super::lease::kind::{lease_verbs, lock_kind, try_acquire, Kind};
use super::lease::renewal::renewal;
use super::lease::schema;
use super::lease::wait::{self, block_on, ms, Attempts, Pace, Step};
use super::lease::{self, HeldLease, LeaseKind};
use super::options::{LockOptions, OwnerToken, Replicable};
use super::outcome::{Acquire, Held};
use super::waiter_lease::WaiterLease;
use crate::error::{Error, Result};
use crate::lock::metrics::LockKind;
use crate::script::{embedded, Call, Script, ScriptManager};

lock_kind! {
    /// A fair lock on one Redis server or a Redis Cluster: callers hold it one at a time **in the
    /// order they arrived**, like ZooKeeper's ephemeral sequential nodes.
    ///
    /// Keys per resource (one hash tag, so one Cluster slot): `<prefix>:{<resource>}`, the queue
    /// (a sorted set of owner tokens scored by arrival number); `…:leases`, every entry's lease
    /// end (server `TIME`, ms); `…:fence`, the last arrival number issued; and
    /// `…:gone:<token>`, a list pushed when that entry leaves, which the entry behind it blocks
    /// on (`BLPOP`). The head of the queue holds the lock, with the lease of
    /// [`LockOptions::ttl`]; a waiter holds a short **waiter lease**
    /// ([`with_waiter_lease`](Self::with_waiter_lease), 2 s by default) that its blocked
    /// acquire renews about every third of it. A waiter or holder that dies is skipped when its
    /// own lease ends, never later; a waiter wakes when its predecessor leaves (release, give-up)
    /// or when the predecessor's lease ends.
    ///
    /// The arrival number is `max(last + 1, server TIME in µs)`: holders follow arrival order,
    /// so it is also the holder's [`FencingToken`](super::FencingToken), strictly increasing from holder to holder.
    ///
    /// Guards are [`LockGuard<FairLock>`](LockGuard)s: only [`FairLock::release`],
    /// [`renew`](FairLock::renew) and [`watch`](FairLock::watch) take them.
    /// With [`LockOptions::require_replicas`], every attempt is followed by `WAIT` in the same
    /// round trip; a turn that fewer replicas confirmed is given to the next in line and
    /// answered [`Acquire::NotReplicated`] (keep the `WAIT` timeout below the waiter lease: a
    /// waiting attempt may block that long).
    ///
    /// ```no_run
    /// # async fn run() -> redkit::Result<()> {
    /// use std::time::Duration;
    /// use redkit::lock::{Acquire, FairLock, LockOptions};
    ///
    /// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
    /// let mut own = client.get_multiplexed_async_connection().await?;
    /// let fair = FairLock::new();
    /// let options = LockOptions::new().ttl(Duration::from_secs(10));
    /// let options = options.max_wait(Duration::from_secs(30));
    /// if let Acquire::Acquired(guard) = fair.acquire(&mut own, "payouts", &options).await? {
    ///     // ... work, passing guard.fencing_token() to the storage ...
    ///     fair.release(&mut own, guard).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub struct FairLock;
    prefix = "redkit:fair";
    key = "The queue key of `resource` (escaped, bounded: see [`keys`](crate::keys)).";
    inner {
        waiter_lease: Duration = Self::DEFAULT_WAITER_LEASE,
        acquire: &'static Script = embedded::FAIR_ACQUIRE.script(),
        renew: &'static Script = embedded::FAIR_RENEW.script(),
        release: &'static Script = embedded::FAIR_RELEASE.script(),
    }
}

impl FairLock {
    /// The waiter lease unless another is chosen ([`WaiterLease::DEFAULT`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::lock::{FairLock, WaiterLease};
    /// assert_eq!(FairLock::DEFAULT_WAITER_LEASE, Duration::from_secs(2));
    /// // skip crashed waiters twice as fast, for twice the renewals of a waiting acquire
    /// let half = WaiterLease::new(FairLock::DEFAULT_WAITER_LEASE / 2)?;
    /// let fair = FairLock::new().with_waiter_lease(half);
    /// # let _ = fair;
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub const DEFAULT_WAITER_LEASE: Duration = WaiterLease::DEFAULT.get();

    /// The gate of a fair semaphore: keys under `<prefix>:gate` (one validated prefix plus a
    /// fixed suffix: bounded), `manager` when given.
    pub(super) fn gated(mut self, prefix: &str, manager: Option<ScriptManager>) -> Self {
        let inner = Arc::make_mut(&mut self.inner);
        inner.base.prefix = schema::gate_prefix(prefix);
        if let Some(manager) = manager {
            inner.base.manager = manager;
        }
        self
    }

    /// How long a waiter that stopped renewing (crashed, cut off) keeps its place (see
    /// [`WaiterLease`]: 30 ms to 30 days, checked where it is made). A blocked acquire renews
    /// it about every third of it, so shorter means faster skipping of dead waiters and more
    /// calls.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::lock::{FairLock, WaiterLease};
    /// let fair = FairLock::new().with_waiter_lease(WaiterLease::new(Duration::from_millis(500))?);
    /// # let _ = fair;
    /// assert!(WaiterLease::new(Duration::from_millis(5)).is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn with_waiter_lease(mut self, lease: WaiterLease) -> Self {
        Arc::make_mut(&mut self.inner).waiter_lease = lease.get();
        self
    }

    try_acquire! {
        LockGuard<FairLock>;
        /// One attempt: joins the queue of `resource` and answers [`Acquire::Acquired`] when no
        /// caller that arrived earlier is left in it; otherwise leaves the queue again (waking the
        /// one behind) and answers [`Acquire::Busy`] (`ttl: None`). Same as
        /// [`acquire`](Self::acquire) without [`LockOptions::max_wait`].
        ///
        /// ```no_run
        /// # async fn run(fair: redkit::lock::FairLock, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
        /// use redkit::lock::{Acquire, LockOptions};
        /// if let Acquire::Acquired(guard) = fair.try_acquire(&mut conn, "ledger", &LockOptions::new()).await? {
        ///     fair.release(&mut conn, guard).await?;
        /// }
        /// # Ok(()) }
        /// ```
    }

    /// Joins the queue of `resource` and waits, up to [`LockOptions::max_wait`] (none set:
    /// one attempt, as [`try_acquire`](Self::try_acquire)), for its turn: answers
    /// [`Acquire::Acquired`] once every caller that arrived earlier has released, given up or
    /// been skipped (its lease ended). While waiting, the caller blocks (`BLPOP`) on its
    /// predecessor's "gone" list, woken when the predecessor leaves, when its lease ends, or
    /// after a third of the waiter lease to renew its own place. After `max_wait` it leaves
    /// the queue (waking the one behind) and answers [`Acquire::Busy`] (`ttl: None`). The
    /// options' `retries`, `retry_delay` and `jitter` are not used (no polling).
    /// Every call uses one owner token ([`LockOptions::token`], else a fresh random one):
    /// a call repeated with the same token keeps its place.
    ///
    /// `BLPOP` holds the connection: pass a connection of its own whose response timeout, if
    /// any, is above 400 ms (each `BLPOP` asks for at most 250 ms, and Redis may answer up to `1000 / hz` ms later).
    ///
    /// Fails with [`Error::InvalidInput`] before anything is sent for an empty or too long
    /// resource or invalid options; with [`Error::WrongType`] / [`Error::CorruptData`] for keys
    /// holding something else, and [`Error::PermissionDenied`] for an ACL refusal (nothing
    /// written in these cases); with [`Error::Timeout`] when the turn came but the acquire
    /// took the whole lease (the lock is then released again). With
    /// [`LockOptions::require_replicas`], [`Acquire::NotReplicated`] when the turn came but
    /// fewer replicas confirmed it (the turn is given to the next in line).
    ///
    /// ```no_run
    /// # async fn run(fair: redkit::lock::FairLock, client: redis::Client) -> redkit::Result<()> {
    /// use std::time::Duration;
    /// use redkit::lock::{Acquire, LockOptions};
    /// let mut own = client.get_multiplexed_async_connection().await?;
    /// let wait = LockOptions::new().max_wait(Duration::from_secs(5));
    /// match fair.acquire(&mut own, "ledger", &wait).await? {
    ///     Acquire::Acquired(guard) => { fair.release(&mut own, guard).await?; }
    ///     _ => println!("not our turn within 5 s: left the queue"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn acquire<C: ConnectionLike>(
        &self,
        conn: &mut C,
        resource: &str,
        options: &LockOptions<FairLock>,
    ) -> Result<Acquire<LockGuard<FairLock>>> {
        let give_up = wait::give_up(options.get_max_wait());
        let ttl_ms = options.validate()?;
        let key = self.key(resource)?;
        let token = options.owner_token();
        let mut call = Call::new(self.inner.acquire);
        call.key(&key)
            .key(schema::leases(&key))
            .key(schema::fence(&key))
            .arg(&token)
            .arg(ttl_ms)
            .arg(ms(self.inner.waiter_lease))
            .arg(schema::fence_ttl_ms(ttl_ms));
        let mut turns = Turns {
            grant: Grant::new(self, call, (&key, &token), ttl_ms, options),
            ahead: None,
        };
        wait::acquire(Pace::Until(give_up), conn, &mut turns).await
    }

    fn leave_call(&self, key: &str, token: &str) -> Call<'_> {
        let mut call = Call::new(self.inner.release);
        call.key(key)
            .key(schema::leases(key))
            .key(schema::gone(key, token.as_bytes()))
            .arg(token);
        call
    }

    lease_verbs! {
        LockGuard<FairLock>;
        /// Gives the lock back (and stops the guard's watchdog), waking the next caller in line.
        /// [`Release::NotOwner`](super::Release::NotOwner) when the lease had already ended (the lock may have been handed
        /// to the next caller meanwhile).
        ///
        /// ```no_run
        /// # async fn run(fair: redkit::lock::FairLock, mut conn: redis::aio::MultiplexedConnection, guard: redkit::lock::LockGuard<redkit::lock::FairLock>) -> redkit::Result<()> {
        /// use redkit::lock::Release;
        /// if fair.release(&mut conn, guard).await? == Release::NotOwner {
        ///     eprintln!("the lease had ended: the next caller may have overlapped");
        /// }
        /// # Ok(()) }
        /// ```
        release;
        /// Extends the holder's lease to its ttl from now (server time) if it has not ended, and
        /// moves the local validity forward; [`Renew::Lost`](super::Renew::Lost) otherwise.
        ///
        /// ```no_run
        /// # async fn run(fair: redkit::lock::FairLock, mut conn: redis::aio::MultiplexedConnection, mut guard: redkit::lock::LockGuard<redkit::lock::FairLock>) -> redkit::Result<()> {
        /// use redkit::lock::Renew;
        /// if fair.renew(&mut conn, &mut guard).await? == Renew::Lost {
        ///     return Ok(()); // stop: the next caller may hold it now
        /// }
        /// # Ok(()) }
        /// ```
        renew;
        /// Starts a watchdog for `guard` (renewal about every ttl/3 over a clone of `conn`, until
        /// released or dropped) and returns the signal fired when the lease is lost. Fails with
        /// [`Error::InvalidInput`] outside a tokio runtime.
        ///
        /// ```no_run
        /// # async fn run(fair: redkit::lock::FairLock, conn: redis::aio::MultiplexedConnection, mut guard: redkit::lock::LockGuard<redkit::lock::FairLock>) -> redkit::Result<()> {
        /// let lost = fair.watch(&conn, &mut guard)?;
        /// tokio::select! {
        ///     loss = lost.lost() => eprintln!("lost: {loss:?}"),
        ///     _ = tokio::time::sleep(std::time::Duration::from_secs(60)) => {}
        /// }
        /// # Ok(()) }
        /// ```
        watch;
    }
}

impl LeaseKind for FairLock {
    type Extra = ();

    fn renew_call(&self, held: &HeldLease) -> Call<'_> {
        let keys = [held.key.as_str(), &schema::leases(&held.key)];
        renewal(self.inner.renew, &keys, &held.token, held.ttl)
    }

    fn release_call(&self, held: &HeldLease, (): &()) -> Call<'_> {
        self.leave_call(&held.key, &held.token)
    }
}

/// The attempts of one acquire of a [`FairLock`]: every one joins (or keeps) the caller's
/// place in the queue; between them the caller blocks on its predecessor's "gone" list.
struct Turns<'a> {
    grant: Grant<'a, FairLock>,
    /// From the last attempt: the predecessor's "gone" list and how long its lease lasts at
    /// most.
    ahead: Option<(Vec<u8>, Duration)>,
}

impl<C: ConnectionLike> Attempts<C> for Turns<'_> {
    type Guard = LockGuard<FairLock>;
    type Held = Held;

    const KIND: LockKind = <FairLock as Kind>::KIND;

    async fn attempt(&mut self, conn: &mut C) -> Result<Step<LockGuard<FairLock>>> {
        let (reply, started, replicas): (Vec<Value>, _, _) = self.grant.send(conn).await?;
        let script = self.grant.script();
        let int = |v: &Value| match v {
            Value::Int(n) => Ok(*n),
            other => Err(Error::unexpected(script.id(), format!("{other:?}"))),
        };
        match reply.as_slice() {
            [status, fence] if int(status)? == 1 => {
                // Not confirmed by the replicas: the turn goes to the next in line.
                let answer = self
                    .grant
                    .granted(conn, int(fence)?, started, replicas.as_ref());
                Ok(Step::Done(answer.await?))
            }
            [status, _, _, Value::BulkString(pred), left] if int(status)? == 0 => {
                let left = Duration::from_millis(u64::try_from(int(left)?).unwrap_or(0));
                self.ahead = Some((schema::gone(self.grant.key, pred), left));
                Ok(Step::Again(Acquire::Busy(Held::until(None))))
            }
            other => Err(Error::unexpected(
                script.id(),
                format!(
                    "reply {other:?} is neither [1, fence] nor [0, fence, ahead, predecessor, ms]"
                ),
            )),
        }
    }

    /// Blocks on the predecessor's "gone" list until it leaves, its lease ends, or a third of
    /// the waiter lease has passed (the next attempt renews the caller's place).
    async fn wait(
        &mut self,
        conn: &mut C,
        _answer: &Acquire<LockGuard<FairLock>>,
        left: Duration,
    ) -> Result<bool> {
        let Some((gone, lease_left)) = self.ahead.take() else {
            return Ok(false);
        };
        let block = lease_left
            .saturating_add(Duration::from_millis(1))
            .min(self.grant.kind.inner.waiter_lease / 3)
            .min(left);
        block_on(conn, gone.as_slice(), block).await?;
        Ok(true)
    }

    /// Leaves the queue (waking the one behind).
    async fn give_up(
        &mut self,
        conn: &mut C,
        answer: Acquire<LockGuard<FairLock>>,
    ) -> Result<Acquire<LockGuard<FairLock>>> {
        let Grant {
            kind, key, token, ..
        } = self.grant;
        lease::leave(kind, conn, &kind.leave_call(key, token)).await?;
        Ok(answer)
    }
}

impl super::options::sealed::Sealed for FairLock {}
impl OwnerToken for FairLock {}
impl Replicable for FairLock {}
