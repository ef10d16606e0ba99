//! [`Lock`]: the single-node lock (acquire with fencing, compare-and-delete release,
//! compare-and-PEXPIRE renewal, watchdog).

mod acquire;
mod blocking;
pub(crate) mod fencing;
pub(crate) mod inspect;
pub(crate) mod with_lock;

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionLike;

use crate::error::Result;
use crate::lock::lease::guard::LockGuard;
use crate::lock::lease::kind::{lease_verbs, lock_kind};
use crate::lock::lease::schema;
use crate::lock::lease::{native, renewal};
use crate::lock::lease::{HeldLease, LeaseKind};
use crate::lock::options::{LockOptions, OwnerToken, Polling, Replicable};
use crate::lock::outcome::{renew_status, Renew};
use crate::script::{embedded, Call, Script};

lock_kind! {
    /// A lock on one Redis server or Redis Cluster: one round trip per operation (a script, or
    /// without fencing a plain command: `SET NX PX GET` to acquire, and on Valkey 9 `DELIFEQ`
    /// to release and `SET ... IFEQ` to renew); the release of a hold that a caller blocked in
    /// [`acquire_blocking`](Self::acquire_blocking) has marked takes more (the wake-up), and on
    /// Valkey so does its renewal.
    ///
    /// Keys: `<prefix>:{<resource>}` holds the owner token (with the lease as TTL), and
    /// `<prefix>:{<resource>}:fence` the last fencing token issued (TTL `2 × lease + 10 s`,
    /// refreshed by every acquire and renewal, so per-entity locks leave no forever-keys; the
    /// tokens themselves never go backwards, see [`FencingToken`](crate::lock::FencingToken)). A blocked
    /// acquirer ([`acquire_blocking`](Self::acquire_blocking)) marks the holder's value (one byte
    /// 0xFF after the token, the TTL kept), so that its release pushes to
    /// `<prefix>:{<resource>}:wake` (a wake-up list of at most one entry, 60 s TTL). All share one
    /// hash tag, so they live in one Cluster slot. The resource name is escaped and bounded (see [`keys`](crate::keys)).
    ///
    /// Cheap to clone (an `Arc`). Generic over any [`ConnectionLike`].
    ///
    /// ```no_run
    /// # async fn run() -> redkit::Result<()> {
    /// use std::time::Duration;
    /// use redkit::lock::{Acquire, Lock, LockOptions, Release};
    ///
    /// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
    /// let mut conn = client.get_multiplexed_async_connection().await?;
    /// let lock = Lock::new();
    /// // fencing(true): the guard carries a fencing token for the storage (off by default).
    /// let options = LockOptions::new().fencing(true).ttl(Duration::from_secs(10)).retries(50);
    /// if let Acquire::Acquired(guard) = lock.acquire(&mut conn, "invoice-17", &options).await? {
    ///     // ... work, passing guard.fencing_token() to the storage ...
    ///     assert_eq!(lock.release(&mut conn, guard).await?, Release::Released);
    /// }
    /// # Ok(()) }
    /// ```
    pub struct Lock;
    prefix = "redkit:lock";
    key = "The key holding the owner token of `resource`.";
    inner {
        pub(in crate::lock) acquire: &'static Script = embedded::LOCK_ACQUIRE.script(),
        release: &'static Script = embedded::LOCK_RELEASE.script(),
        /// Whether `acquire_blocking` marks the lock and blocks until a release wakes it (see
        /// [`Lock::wake_on_release`]).
        pub(in crate::lock) wakes: bool = true,
        renew: &'static Script = embedded::LOCK_RENEW.script(),
        fenced_set: &'static Script = embedded::FENCED_SET.script(),
        pub(in crate::lock) fence: &'static Script = embedded::LOCK_FENCE.script(),
    }
}

impl Lock {
    /// Whether [`acquire_blocking`](Self::acquire_blocking) waits for a release to wake it
    /// (default `true`): it marks the holder's value and blocks on the resource's wake-up list,
    /// and the release that finds the mark pushes a wake-up.
    ///
    /// With `false`, [`acquire_blocking`](Self::acquire_blocking) marks nothing and does not
    /// block: it polls, each attempt after the options'
    /// [`retry_delay`](LockOptions::retry_delay) plus [`jitter`](LockOptions::jitter) (at
    /// least 1 ms, never past the holder's lease end or the wait), until `wait` has passed (no
    /// `BLPOP` holds the connection). Releases are the same either way: a release reads only
    /// the lock key, and wakes a waiter (of any process) only when one marked it, so a lock
    /// nobody blocks on pays nothing for wake-ups. Outcomes are the same either way.
    ///
    /// ```
    /// use redkit::lock::Lock;
    /// let lock = Lock::new().wake_on_release(false);
    /// assert!(!lock.wakes_on_release());
    /// assert!(Lock::new().wakes_on_release());
    /// ```
    pub fn wake_on_release(mut self, wake: bool) -> Self {
        let inner = Arc::make_mut(&mut self.inner);
        inner.wakes = wake;
        self
    }

    /// Whether [`acquire_blocking`](Self::acquire_blocking) waits for a release to wake it
    /// ([`wake_on_release`](Self::wake_on_release)) instead of polling.
    ///
    /// ```
    /// assert!(redkit::lock::Lock::new().wakes_on_release());
    /// ```
    pub fn wakes_on_release(&self) -> bool {
        self.inner.wakes
    }

    /// The key holding the fencing counter of `resource` (same hash slot as the lock key).
    ///
    /// ```
    /// let lock = redkit::lock::Lock::new();
    /// assert_eq!(lock.fence_key("invoice-17")?, "redkit:lock:{invoice-17}:fence");
    /// // the lock key's hash tag: one Cluster slot for both
    /// assert!(lock.fence_key("invoice-17")?.starts_with(&lock.key("invoice-17")?));
    /// assert!(lock.fence_key("").is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn fence_key(&self, resource: &str) -> Result<String> {
        Ok(schema::fence(&self.key(resource)?))
    }

    lease_verbs! {
        LockGuard<Lock>;
        /// Compare-and-delete: deletes the key only if it still holds this guard's token.
        /// [`Release::NotOwner`](crate::lock::Release::NotOwner) when the lease had expired (and maybe another owner holds the
        /// lock now, whose key is left untouched). Stops the guard's watchdog first. The release
        /// is `lock_release` (`GET`, `DEL`: what a bare compare-and-delete costs); when it
        /// deletes nothing (a hold a caller blocked in
        /// [`acquire_blocking`](Self::acquire_blocking) has marked, or a lost lease),
        /// `lock_release_wake` follows, which deletes a marked hold and pushes the caller's
        /// wake-up: a second round trip only then.
        ///
        /// A guard acquired without fencing is released without a script where the server has
        /// `DELIFEQ` (Valkey 9+, see [`ScriptManager::capabilities`](crate::ScriptManager::capabilities)):
        /// `DELIFEQ key token` alone. When it deletes nothing (the lock was marked by a blocked
        /// acquirer, or the lease was lost) the release script follows, which deletes a marked
        /// lock and wakes its waiter, or answers `NotOwner`: a second round trip only then.
        ///
        /// On an error the lease ends by its TTL.
        ///
        /// ```no_run
        /// # async fn run(lock: redkit::lock::Lock, mut conn: redis::aio::MultiplexedConnection, guard: redkit::lock::LockGuard<redkit::lock::Lock>) -> redkit::Result<()> {
        /// use redkit::lock::Release;
        /// if lock.release(&mut conn, guard).await? == Release::NotOwner {
        ///     eprintln!("the lease had expired: the work may have overlapped with another owner");
        /// }
        /// # Ok(()) }
        /// ```
        release;
        /// Compare-and-PEXPIRE: resets the TTL to the guard's lease length only if the key still
        /// holds its token, and moves the local validity forward. [`Renew::Lost`] otherwise (the
        /// guard is then no longer valid). A guard acquired with
        /// [`LockOptions::require_replicas`] renews with its wait behind it, and moves the
        /// validity only when the replicas acknowledged ([`Renew::NotReplicated`] otherwise).
        /// A guard acquired without fencing is renewed without a
        /// script where the server has `SET ... IFEQ` (Valkey 8.1+): `SET key token IFEQ token
        /// PX ttl`, same outcomes (the fence key, which only fencing needs, is not touched).
        ///
        /// ```no_run
        /// # async fn run(lock: redkit::lock::Lock, mut conn: redis::aio::MultiplexedConnection, mut guard: redkit::lock::LockGuard<redkit::lock::Lock>) -> redkit::Result<()> {
        /// use redkit::lock::Renew;
        /// if lock.renew(&mut conn, &mut guard).await? == Renew::Lost {
        ///     return Ok(()); // stop working: someone else may hold the lock now
        /// }
        /// # Ok(()) }
        /// ```
        renew;
        /// Starts a watchdog for `guard`: a background task on the current tokio runtime that
        /// renews the lease about every ttl/3 over its own clone of `conn`,
        /// until the guard is released or dropped. Returns the signal fired when the lease is lost
        /// (a renewal answered [`Renew::Lost`], or renewals kept failing until the local validity
        /// ran out). Calling it again returns the running watchdog's signal.
        ///
        /// Fails with [`Error::InvalidInput`](crate::Error::InvalidInput) outside a tokio runtime.
        ///
        /// ```no_run
        /// # async fn run(lock: redkit::lock::Lock, conn: redis::aio::MultiplexedConnection, mut guard: redkit::lock::LockGuard<redkit::lock::Lock>) -> redkit::Result<()> {
        /// let lost = lock.watch(&conn, &mut guard)?;
        /// tokio::select! {
        ///     loss = lost.lost() => eprintln!("lease lost: {loss:?}"),
        ///     _ = tokio::time::sleep(std::time::Duration::from_secs(60)) => {}
        /// }
        /// let mut conn = conn;
        /// lock.release(&mut conn, guard).await?; // stops the watchdog
        /// # Ok(()) }
        /// ```
        watch;
    }

    /// Renews the lease of `key` held with `token` (an unfenced acquire finding its own
    /// token): `SET ... IFEQ` where the server offers it, else the renewal script.
    pub(in crate::lock) async fn renew_raw<C: ConnectionLike>(
        &self,
        conn: &mut C,
        key: &str,
        token: &str,
        ttl: Duration,
    ) -> Result<Renew> {
        let manager = &self.inner.base.manager;
        if let Some(renewed) = native::renew(manager, conn, key, token, ttl, None).await {
            return renewed.map(|(outcome, _)| outcome);
        }
        let call = renewal::fenced(self.inner.renew, key, token, ttl);
        let renewed = manager.invoke::<i64, _>(conn, &call).await?;
        renew_status(self.inner.renew, renewed)
    }

    pub(in crate::lock) fn fenced_set_script(&self) -> &'static Script {
        self.inner.fenced_set
    }
}

impl LeaseKind for Lock {
    type Extra = ();

    fn renew_call(&self, held: &HeldLease) -> Call<'_> {
        renewal::fenced(self.inner.renew, &held.key, &held.token, held.ttl)
    }

    fn release_call(&self, held: &HeldLease, (): &()) -> Call<'_> {
        let mut call = Call::new(self.inner.release);
        call.key(&held.key).arg(&held.token);
        call
    }

    fn release_marked_call(&self, held: &HeldLease, (): &()) -> Option<Call<'_>> {
        Some(wake_release_call(&held.key, &held.token))
    }
}

/// The release that also wakes a waiter (`lock_release_wake`): deletes `key` when it holds
/// `token`, marked or not, and pushes a wake-up when it was marked. What a guard's release
/// sends when the plain one deleted nothing, and what [`Lock::force_release`] sends.
pub(in crate::lock) fn wake_release_call(key: &str, token: &str) -> Call<'static> {
    let mut call = Call::new(embedded::LOCK_RELEASE_WAKE.script());
    call.key(key).key_suffixed(key, schema::WAKE).arg(token);
    call
}

impl crate::lock::options::sealed::Sealed for Lock {}
impl Polling for Lock {}
impl OwnerToken for Lock {}
impl Replicable for Lock {}

impl LockOptions<Lock> {
    /// Whether the acquisition issues a fencing token (default `false`; only a [`Lock`] has
    /// the choice: the other single-server kinds always issue one, Redlock never can).
    ///
    /// Without fencing (the default) an attempt on a free lock is one plain
    /// `SET key token NX PX ttl GET` command: the cheapest lock Redis offers, the same work as
    /// a hand-written `SET NX PX` lock. The guard then has no fencing token
    /// ([`LockGuard::fencing_token`] is `None`), so it has nothing to pass to
    /// [`Lock::fenced_set`] or the fenced versioned writes until [`Lock::fence`] issues one. A busy lock (or a retry by the same owner token) costs a second round
    /// trip (`PTTL`, or the compare-and-`PEXPIRE` renewal).
    ///
    /// `fencing(true)` runs a script that also reads the fence key and the server clock and
    /// writes the next token, in the same round trip: 1.5x to 2.7x the server CPU of the
    /// unfenced acquire + release cycle in the bench runs (`docs/benchmarks.md`, "Against a
    /// hand-written script"). Ask for it when the lock guards writes to storage that can check the
    /// token: a holder paused past its lease (GC, swap, a network stall) can otherwise still
    /// write after another owner acquired, and only the storage refusing its older token
    /// stops that. A lock that only keeps two workers from duplicating effort does not need
    /// it. Release and renewal answer the same either way (without fencing, on Valkey they
    /// use `DELIFEQ` and `SET ... IFEQ` instead of scripts: see [`Lock::release`]).
    ///
    /// ```
    /// use redkit::lock::{Lock, LockOptions};
    /// let o = LockOptions::<Lock>::new().fencing(true);
    /// assert_ne!(o, LockOptions::new());
    /// assert_eq!(LockOptions::<Lock>::new().fencing(false), LockOptions::new());
    /// ```
    pub fn fencing(self, fencing: bool) -> Self {
        self.adjusted(|s| s.fencing(fencing))
    }

    /// Whether acquisitions issue fencing tokens.
    pub(crate) fn get_fencing(&self) -> bool {
        self.settings().get_fencing()
    }
}
