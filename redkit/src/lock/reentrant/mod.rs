//! [`ReentrantLock`]: a lock its owner may take again while holding it, released when the
//! last hold is given back.

pub(crate) mod inspect;

use std::fmt;

use redis::aio::ConnectionLike;

use super::lease::grant::{Grant, Granting};
use super::lease::guard::LockGuard;
use super::lease::kind::{lease_verbs, lock_kind, try_acquire};
use super::lease::renewal;
use super::lease::schema;
use super::lease::token::owner_token;
use super::lease::wait::{self, Pace};
use super::lease::{HeldLease, LeaseKind};
use super::options::{LockOptions, Polling, Replicable};
use super::outcome::{Acquire, Release};
use crate::error::{Error, Result};
use crate::script::{embedded, Call, Script};

/// Who holds a [`ReentrantLock`]: an explicit handle (a tokio task has no thread id), cloned
/// into the nested code that may take the lock again. Its token is a secret, never printed.
///
/// ```
/// use redkit::lock::Owner;
/// let me = Owner::new();
/// let same = me.clone(); // nested code reuses it
/// assert!(Owner::from_token("too short").is_err());
/// # let _ = same;
/// ```
#[derive(Clone)]
pub struct Owner {
    token: String,
}

impl Owner {
    /// A new owner with a random 128-bit token.
    ///
    /// ```
    /// use redkit::lock::Owner;
    /// let me = Owner::new(); // one per owner (e.g. per task), not per acquire
    /// let nested = me.clone(); // for the nested code that takes the lock again
    /// assert_eq!(format!("{nested:?}"), "Owner { .. }"); // the token is never printed
    /// ```
    pub fn new() -> Self {
        Self {
            token: owner_token(),
        }
    }

    /// An owner with your token (16 to 128 bytes, unique per owner and unguessable), e.g. to
    /// take the lock again from another process acting as the same owner.
    ///
    /// ```
    /// assert!(redkit::lock::Owner::from_token("job-7f3a9c2e-retry-safe").is_ok());
    /// ```
    pub fn from_token(token: &str) -> Result<Self> {
        if !(16..=128).contains(&token.len()) {
            return Err(Error::invalid("owner", "token must be 16 to 128 bytes"));
        }
        Ok(Self {
            token: token.to_owned(),
        })
    }
}

impl Default for Owner {
    /// [`Owner::new`].
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Owner {
    /// The token is a secret: never printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Owner").finish_non_exhaustive()
    }
}

lock_kind! {
    /// A reentrant lock on one Redis server or a Redis Cluster (Redisson's `RLock` behaviour): its
    /// [`Owner`] may acquire it again while holding it; each acquire is one more hold, each
    /// release gives one back, and the lock is free only when the count reaches zero.
    ///
    /// Keys per resource (one hash tag): `<prefix>:{<resource>}`, a hash `{owner token -> holds}`
    /// whose TTL is the lease shared by all holds (every acquire and renewal resets it, so it
    /// renews while any hold is live: watch one guard), and `…:fence`, the last fencing token;
    /// nested holds get the fencing token of the first one.
    ///
    /// Waiting follows [`LockOptions`] as [`Lock::acquire`](super::Lock::acquire); the owner
    /// token comes from the [`Owner`] (`LockOptions<ReentrantLock>` has no `token` setter, see
    /// the last example). With [`LockOptions::require_replicas`] every attempt is followed
    /// by `WAIT` in the same round trip, and a hold fewer replicas confirmed is given back (the
    /// count returns to what it was) and answered [`Acquire::NotReplicated`].
    ///
    /// ```no_run
    /// # async fn run() -> redkit::Result<()> {
    /// use redkit::lock::{Acquire, LockOptions, Owner, ReentrantLock};
    ///
    /// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
    /// let mut conn = client.get_multiplexed_async_connection().await?;
    /// let lock = ReentrantLock::new();
    /// let me = Owner::new();
    /// let options = LockOptions::new().retries(50);
    /// if let Acquire::Acquired(outer) = lock.acquire(&mut conn, "account-9", &me, &options).await? {
    ///     if let Acquire::Acquired(inner) = lock.acquire(&mut conn, "account-9", &me, &options).await? {
    ///         lock.release(&mut conn, inner).await?; // still held: one hold left
    ///     }
    ///     lock.release(&mut conn, outer).await?; // free now
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// A caller-supplied token does not compile (the [`Owner`] is the token):
    ///
    /// ```compile_fail,E0277
    /// use redkit::lock::{LockOptions, ReentrantLock};
    /// let options: LockOptions<ReentrantLock> = LockOptions::new().token("job-7f3a9c2e-retry-safe");
    /// ```
    pub struct ReentrantLock;
    prefix = "redkit:rlock";
    key = "The holds key of `resource` (escaped, bounded: see [`keys`](crate::keys)).";
    inner {
        acquire: &'static Script = embedded::REENTRANT_ACQUIRE.script(),
        renew: &'static Script = embedded::REENTRANT_RENEW.script(),
        release: &'static Script = embedded::REENTRANT_RELEASE.script(),
    }
}

impl ReentrantLock {
    try_acquire! {
        LockGuard<ReentrantLock>, owner: &Owner;
        /// One attempt at one hold for `owner`: granted when the lock is free or already
        /// `owner`'s, else [`Acquire::Busy`]. Same as [`acquire`](Self::acquire) with no retries.
        ///
        /// ```no_run
        /// # async fn run(lock: redkit::lock::ReentrantLock, mut conn: redis::aio::MultiplexedConnection, me: redkit::lock::Owner) -> redkit::Result<()> {
        /// use redkit::lock::{Acquire, LockOptions};
        /// if let Acquire::Acquired(hold) = lock.try_acquire(&mut conn, "cart-1", &me, &LockOptions::new()).await? {
        ///     lock.release(&mut conn, hold).await?;
        /// }
        /// # Ok(()) }
        /// ```
    }

    /// Takes one hold for `owner`, waiting as the options allow: granted when the lock is
    /// free or already `owner`'s (one more hold; the lease renewed). [`Acquire::Busy`] when
    /// another owner holds it after the last attempt.
    ///
    /// Fails with [`Error::InvalidInput`] (nothing sent) for a bad resource or options; with [`Error::WrongType`] /
    /// [`Error::CorruptData`] for keys holding something else and
    /// [`Error::PermissionDenied`] for an ACL refusal (nothing written in these cases); with
    /// [`Error::Timeout`] when the acquire took the whole lease (the hold is given back).
    ///
    /// ```no_run
    /// # async fn run(lock: redkit::lock::ReentrantLock, mut conn: redis::aio::MultiplexedConnection, me: redkit::lock::Owner) -> redkit::Result<()> {
    /// use redkit::lock::{Acquire, LockOptions};
    /// if let Acquire::Acquired(hold) = lock.acquire(&mut conn, "cart-1", &me, &LockOptions::new()).await? {
    ///     lock.release(&mut conn, hold).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn acquire<C: ConnectionLike>(
        &self,
        conn: &mut C,
        resource: &str,
        owner: &Owner,
        options: &LockOptions<ReentrantLock>,
    ) -> Result<Acquire<LockGuard<ReentrantLock>>> {
        let ttl_ms = options.validate()?;
        let settings = options.settings();
        let key = self.key(resource)?;
        let script = self.inner.acquire;
        let mut call = Call::new(script);
        call.key(&key)
            .key(schema::fence(&key))
            .arg(&owner.token)
            .arg(ttl_ms)
            .arg(schema::fence_ttl_ms(ttl_ms));
        let grant = Grant::new(self, call, (&key, &owner.token), ttl_ms, options);
        let mut attempts = Granting {
            grant,
            granted: (3, "[1, fence, holds]"),
        };
        wait::acquire(Pace::Poll(settings), conn, &mut attempts).await
    }

    lease_verbs! {
        LockGuard<ReentrantLock>;
        /// Gives one hold back (and stops that guard's watchdog): [`Release::Released`] when the
        /// owner held the lock (it is free once no hold is left), [`Release::NotOwner`] when its
        /// lease had ended.
        ///
        /// ```no_run
        /// # async fn run(lock: redkit::lock::ReentrantLock, mut conn: redis::aio::MultiplexedConnection, hold: redkit::lock::LockGuard<redkit::lock::ReentrantLock>) -> redkit::Result<()> {
        /// lock.release(&mut conn, hold).await?;
        /// # Ok(()) }
        /// ```
        release;
        /// Resets the lease shared by all of the owner's holds to the guard's ttl, if the owner
        /// still holds the lock; [`Renew::Lost`](super::Renew::Lost) otherwise.
        ///
        /// ```no_run
        /// # async fn run(lock: redkit::lock::ReentrantLock, mut conn: redis::aio::MultiplexedConnection, mut hold: redkit::lock::LockGuard<redkit::lock::ReentrantLock>) -> redkit::Result<()> {
        /// lock.renew(&mut conn, &mut hold).await?;
        /// # Ok(()) }
        /// ```
        renew;
        /// Starts a watchdog for `guard` (renewal of the shared lease about every ttl/3) and
        /// returns the signal fired when the lock is lost. Fails with [`Error::InvalidInput`]
        /// outside a tokio runtime.
        ///
        /// ```no_run
        /// # async fn run(lock: redkit::lock::ReentrantLock, conn: redis::aio::MultiplexedConnection, mut hold: redkit::lock::LockGuard<redkit::lock::ReentrantLock>) -> redkit::Result<()> {
        /// let lost = lock.watch(&conn, &mut hold)?;
        /// # let _ = lost; Ok(()) }
        /// ```
        watch;
    }

    /// How many holds `owner` has on `resource` now (0: none, or another owner's lock).
    ///
    /// ```no_run
    /// # async fn run(lock: redkit::lock::ReentrantLock, mut conn: redis::aio::MultiplexedConnection, me: redkit::lock::Owner) -> redkit::Result<()> {
    /// println!("{} holds", lock.holds(&mut conn, "cart-1", &me).await?);
    /// # Ok(()) }
    /// ```
    pub async fn holds<C: ConnectionLike>(
        &self,
        conn: &mut C,
        resource: &str,
        owner: &Owner,
    ) -> Result<u64> {
        let key = self.key(resource)?;
        let count: Option<String> = redis::cmd("HGET")
            .arg(&key)
            .arg(&owner.token)
            .query_async(conn)
            .await?;
        match count {
            None => Ok(0),
            Some(n) => n
                .parse()
                .map_err(|_| Error::unexpected("HGET", format!("hold count {n:?}"))),
        }
    }
}

impl LeaseKind for ReentrantLock {
    type Extra = ();

    fn renew_call(&self, held: &HeldLease) -> Call<'_> {
        renewal::fenced(self.inner.renew, &held.key, &held.token, held.ttl)
    }

    fn release_call(&self, held: &HeldLease, (): &()) -> Call<'_> {
        let mut call = Call::new(self.inner.release);
        call.key(&held.key).arg(&held.token);
        call
    }

    /// The holds left, or -1 when the owner held none.
    fn released(&self, call: &Call<'_>, left: i64) -> Result<Release> {
        match left {
            -1 => Ok(Release::NotOwner),
            n if n >= 0 => Ok(Release::Released),
            other => Err(Error::unexpected(
                call.script().id(),
                format!("holds left {other}"),
            )),
        }
    }
}

impl super::options::sealed::Sealed for ReentrantLock {}
impl Polling for ReentrantLock {}
impl Replicable for ReentrantLock {}
