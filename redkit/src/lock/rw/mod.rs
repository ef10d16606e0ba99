//! [`RwLock`]: many readers or one writer, leases on both, writers not starved.

pub(crate) mod inspect;

use std::time::Duration;

use redis::aio::ConnectionLike;

use super::lease::grant::{Grant, Granting};
use super::lease::guard::LockGuard;
use super::lease::kind::{lease_verbs, lock_kind, try_acquire};
use super::lease::renewal::renewal;
use super::lease::schema;
use super::lease::wait::{self, ms, Pace};
use super::lease::{self, HeldLease, LeaseKind};
use super::options::{LockOptions, OwnerToken, Polling, Replicable, Settings};
use super::outcome::Acquire;
use crate::error::Result;
use crate::script::{embedded, Call, Script};

/// Which hold an [`RwLock`] acquire asks for.
///
/// ```
/// use redkit::lock::Mode;
/// assert_ne!(Mode::Read, Mode::Write);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Mode {
    /// A read hold: shared with other readers.
    Read,
    /// The write hold: alone.
    Write,
}

impl Mode {
    /// The mode as the script reads it.
    fn arg(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
        }
    }
}

/// How long a waiting writer's intent outlives its longest pause between two attempts.
const INTENT_MARGIN: Duration = Duration::from_millis(500);

lock_kind! {
    /// A read-write lock on one Redis server or a Redis Cluster: many readers at once, or one
    /// writer; every hold has an owner token, a lease measured by the server's clock and a
    /// [`FencingToken`](super::FencingToken); a waiting writer is not starved by a stream of readers.
    ///
    /// Keys per resource (one hash tag, so one Cluster slot): `<prefix>:{<resource>}:readers`,
    /// a sorted set of reader tokens scored by lease end (expired readers are dropped by every
    /// acquire: a crashed reader's hold ends with its lease); `…:writer`, the writer's token with
    /// its lease as TTL; `…:intent`, the token of the writer waiting first: while it exists no new
    /// reader gets in, so the readers drain and the writer takes over. The intent lives twice the
    /// writer's longest pause between attempts plus 0.5 s, renewed by each attempt, so a writer
    /// that stops trying (crashed, gave up) lets readers in again soon; giving up withdraws it at
    /// once. `…:fence` holds the last fencing token, `max(last + 1, server TIME in µs)`, issued
    /// to every hold (read or write).
    ///
    /// [`try_acquire`](RwLock::try_acquire) makes one attempt; [`acquire`](RwLock::acquire) waits
    /// as [`LockOptions`] allow (`retries`, `retry_delay`, `jitter`, `max_wait`), as
    /// [`Lock::acquire`](super::Lock::acquire) does. The [`Mode`] says read or write. A reader
    /// does not upgrade to writer (its own read
    /// hold would block it until the read lease ends). With [`LockOptions::require_replicas`]
    /// every attempt is followed by `WAIT` in the same round trip, and a hold fewer replicas
    /// confirmed is given back and answered [`Acquire::NotReplicated`]. Guards are
    /// [`LockGuard<RwLock>`](LockGuard)s, released with [`RwLock::release`].
    ///
    /// ```no_run
    /// # async fn run() -> redkit::Result<()> {
    /// use std::time::Duration;
    /// use redkit::lock::{Acquire, LockOptions, Mode, RwLock};
    ///
    /// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
    /// let mut conn = client.get_multiplexed_async_connection().await?;
    /// let rw = RwLock::new();
    /// let wait = LockOptions::new().ttl(Duration::from_secs(10)).retries(200);
    /// if let Acquire::Acquired(guard) = rw.acquire(&mut conn, "catalog", Mode::Read, &wait).await? {
    ///     // ... read, alongside other readers ...
    ///     rw.release(&mut conn, guard).await?;
    /// }
    /// if let Acquire::Acquired(guard) = rw.acquire(&mut conn, "catalog", Mode::Write, &wait).await? {
    ///     // ... write, alone ...
    ///     rw.release(&mut conn, guard).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub struct RwLock;
    prefix = "redkit:rw";
    key = "The base key of `resource` (the others add `:readers`, `:writer`, `:intent`, `:fence`).";
    inner {
        acquire: &'static Script = embedded::RW_ACQUIRE.script(),
        renew: &'static Script = embedded::RW_RENEW.script(),
        release: &'static Script = embedded::RW_RELEASE.script(),
    }
}

impl RwLock {
    try_acquire! {
        LockGuard<RwLock>, mode: Mode;
        /// One attempt at a hold of `mode`: [`Mode::Read`] is granted unless a writer holds the
        /// lock or waits for it; [`Mode::Write`] when no writer holds it, no earlier writer waits
        /// and no reader is left. Same as [`acquire`](Self::acquire) with no retries (a writer's
        /// intent is withdrawn at once).
        ///
        /// ```no_run
        /// # async fn run(rw: redkit::lock::RwLock, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
        /// use redkit::lock::{Acquire, LockOptions, Mode};
        /// if let Acquire::Acquired(guard) = rw.try_acquire(&mut conn, "prices", Mode::Read, &LockOptions::new()).await? {
        ///     rw.release(&mut conn, guard).await?;
        /// }
        /// # Ok(()) }
        /// ```
    }

    /// Takes a hold of `mode`, waiting as the options allow. A read hold is granted unless a
    /// writer holds the lock or waits for it. The write hold is granted when no writer holds
    /// it, no earlier writer waits and no reader is left; while readers are left, each
    /// attempt sets this writer's intent, which keeps new readers out (withdrawn when the
    /// writer gives up). [`Acquire::Busy`] after the last attempt (`ttl`: until the blocking
    /// writer's lease or intent ends, as last seen, for a reader).
    ///
    /// Fails with [`Error::InvalidInput`](crate::Error::InvalidInput) (nothing sent) for a bad resource or options, with [`Error::WrongType`](crate::Error::WrongType) / [`Error::CorruptData`](crate::Error::CorruptData) for keys that
    /// hold something else and [`Error::PermissionDenied`](crate::Error::PermissionDenied) for an ACL refusal (nothing written
    /// in these cases), and with [`Error::Timeout`](crate::Error::Timeout) when the acquire took the whole lease.
    ///
    /// ```no_run
    /// # async fn run(rw: redkit::lock::RwLock, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use redkit::lock::{Acquire, LockOptions, Mode};
    /// if let Acquire::Acquired(guard) = rw.acquire(&mut conn, "prices", Mode::Write, &LockOptions::new().retries(50)).await? {
    ///     rw.release(&mut conn, guard).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn acquire<C: ConnectionLike>(
        &self,
        conn: &mut C,
        resource: &str,
        mode: Mode,
        options: &LockOptions<RwLock>,
    ) -> Result<Acquire<LockGuard<RwLock>>> {
        let ttl_ms = options.validate()?;
        let settings = options.settings();
        let key = self.key(resource)?;
        let token = options.owner_token();
        let intent = settings
            .longest_pause()
            .saturating_mul(2)
            .saturating_add(INTENT_MARGIN)
            .min(Settings::MAX_TTL);
        let script = self.inner.acquire;
        let mut call = Call::new(script);
        call.key(schema::readers(&key))
            .key(schema::writer(&key))
            .key(schema::intent(&key))
            .key(schema::fence(&key))
            .arg(mode.arg())
            .arg(&token)
            .arg(ttl_ms)
            .arg(ms(intent))
            .arg(schema::fence_ttl_ms(ttl_ms));
        let grant = Grant::new(self, call, (&key, &token), ttl_ms, options);
        let mut attempts = Granting {
            grant,
            granted: (2, "[1, fence]"),
        };
        let outcome = wait::acquire(Pace::Poll(settings), conn, &mut attempts).await?;
        if mode == Mode::Write && matches!(outcome, Acquire::Busy(_)) {
            let withdraw = self.leave_call(&key, &token);
            lease::leave(self, conn, &withdraw).await?; // withdraw the intent
        }
        Ok(outcome)
    }

    fn leave_call(&self, key: &str, token: &str) -> Call<'_> {
        let mut call = Call::new(self.inner.release);
        call.key(schema::readers(key))
            .key(schema::writer(key))
            .key(schema::intent(key))
            .arg(token);
        call
    }

    lease_verbs! {
        LockGuard<RwLock>;
        /// Gives a read or write hold back (and stops its watchdog). [`Release::NotOwner`](super::Release::NotOwner) when
        /// the lease had already ended.
        ///
        /// ```no_run
        /// # async fn run(rw: redkit::lock::RwLock, mut conn: redis::aio::MultiplexedConnection, guard: redkit::lock::LockGuard<redkit::lock::RwLock>) -> redkit::Result<()> {
        /// rw.release(&mut conn, guard).await?;
        /// # Ok(()) }
        /// ```
        release;
        /// Extends a read or write hold to its ttl from now (server time) if it has not ended;
        /// [`Renew::Lost`](super::Renew::Lost) otherwise.
        ///
        /// ```no_run
        /// # async fn run(rw: redkit::lock::RwLock, mut conn: redis::aio::MultiplexedConnection, mut guard: redkit::lock::LockGuard<redkit::lock::RwLock>) -> redkit::Result<()> {
        /// use redkit::lock::Renew;
        /// if rw.renew(&mut conn, &mut guard).await? == Renew::Lost { return Ok(()); }
        /// # Ok(()) }
        /// ```
        renew;
        /// Starts a watchdog for `guard` (renewal about every ttl/3 over a clone of `conn`) and
        /// returns the signal fired when the hold is lost. Fails with [`Error::InvalidInput`](crate::Error::InvalidInput)
        /// outside a tokio runtime.
        ///
        /// ```no_run
        /// # async fn run(rw: redkit::lock::RwLock, conn: redis::aio::MultiplexedConnection, mut guard: redkit::lock::LockGuard<redkit::lock::RwLock>) -> redkit::Result<()> {
        /// let lost = rw.watch(&conn, &mut guard)?;
        /// # let _ = lost; Ok(()) }
        /// ```
        watch;
    }
}

impl LeaseKind for RwLock {
    type Extra = ();

    fn renew_call(&self, held: &HeldLease) -> Call<'_> {
        let (readers, writer) = (schema::readers(&held.key), schema::writer(&held.key));
        renewal(
            self.inner.renew,
            &[&readers, &writer],
            &held.token,
            held.ttl,
        )
    }

    fn release_call(&self, held: &HeldLease, (): &()) -> Call<'_> {
        self.leave_call(&held.key, &held.token)
    }
}

impl super::options::sealed::Sealed for RwLock {}
impl Polling for RwLock {}
impl OwnerToken for RwLock {}
impl Replicable for RwLock {}
