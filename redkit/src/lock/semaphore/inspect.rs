//! Looking at a [`Semaphore`] from outside (its holders and their leases) and evicting one
//! leaked permit: an operator's tools, diagnostic by nature.

use std::num::NonZeroU32;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::Value;

use super::Semaphore;
use crate::error::{Error, Result};
use crate::lock::lease::schema;
use crate::lock::outcome::Release;
use crate::lock::repair;
use crate::script::{embedded, Call};

/// A semaphore's holders at one instant ([`Semaphore::inspect`]). A diagnostic: permits are
/// taken and given back while it is read.
///
/// ```no_run
/// # async fn run(sem: redkit::lock::Semaphore, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
/// let state = sem.inspect(&mut conn, "export", redkit::nonzero!(10)).await?;
/// println!("{} permits held ({} expired entries left)", state.live, state.expired);
/// for h in &state.holders {
///     println!("  {} for {:?} more", h.token, h.lease_left);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SemaphoreState {
    /// Permits held now (leases not ended).
    pub live: u64,
    /// Entries whose lease ended that no acquire has dropped yet (they hold no permit).
    pub expired: u64,
    /// The first live holders, soonest lease end first (as many as asked).
    pub holders: Vec<PermitHolder>,
}

/// One holder of a permit ([`SemaphoreState::holders`]).
///
/// ```
/// # fn show(h: &redkit::lock::PermitHolder) {
/// println!("{} ({:?} left)", h.token, h.lease_left);
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PermitHolder {
    /// The holder's owner token.
    pub token: String,
    /// The lease left.
    pub lease_left: Duration,
}

impl Semaphore {
    /// Reads `resource`'s holders: how many permits are held, how many ended leases are left
    /// to drop, and the first `list` holders with their lease left. One read-only script call
    /// (`EVALSHA_RO` / `FCALL_RO`: a replica may serve it); nothing is written.
    ///
    /// Errors: [`Error::InvalidInput`] for a bad resource or `list` above 10,000 (nothing
    /// sent), [`Error::WrongType`], [`Error::PermissionDenied`], connection errors.
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// let sem = redkit::lock::Semaphore::new();
    /// let state = sem.inspect(&mut conn, "export", redkit::nonzero!(100)).await?;
    /// assert!(state.holders.len() as u64 <= state.live);
    /// # Ok(()) }
    /// ```
    pub async fn inspect<C: ConnectionLike>(
        &self,
        conn: &mut C,
        resource: &str,
        list: NonZeroU32,
    ) -> Result<SemaphoreState> {
        let list = repair::checked_list(list)?;
        let script = embedded::SEMAPHORE_INSPECT.script();
        let mut call = Call::new(script);
        call.key(self.key(resource)?).arg(list);
        let reply = self.manager().invoke(conn, &call).await?;
        let items = repair::inspected(script, reply, "{now, live, expired, holders..}")?;
        let bad = || Error::unexpected(script.id(), "expected {now, live, expired, holders..}");
        let int = |v: &Value| match v {
            Value::Int(i) => u64::try_from(*i).map_err(|_| bad()),
            _ => Err(bad()),
        };
        let (head, rest) = items.split_at_checked(3).ok_or_else(bad)?;
        let (now, live, expired) = (int(&head[0])?, int(&head[1])?, int(&head[2])?);
        let mut holders = Vec::with_capacity(rest.len() / 2);
        for pair in rest.chunks(2) {
            let [Value::BulkString(token), end] = pair else {
                return Err(bad());
            };
            let token = String::from_utf8(token.clone()).map_err(|_| bad())?;
            let lease_left = Duration::from_millis(int(end)?.saturating_sub(now));
            holders.push(PermitHolder { token, lease_left });
        }
        Ok(SemaphoreState {
            live,
            expired,
            holders,
        })
    }

    /// Takes back the permit `token` holds on `resource`, for an operator freeing a leaked
    /// one: the release's own script (one blocked acquirer is woken), written as a `WARN`
    /// trace event. [`Release::Released`] when `token` held a live permit,
    /// [`Release::NotOwner`] when it held none (nothing changed). The evicted holder learns
    /// it at its next renewal.
    ///
    /// Errors: [`Error::InvalidInput`] for a bad resource or a token that no acquire writes
    /// (16 to 128 bytes), and as [`release`](Self::release).
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// let sem = redkit::lock::Semaphore::new();
    /// let state = sem.inspect(&mut conn, "export", redkit::nonzero!(1)).await?;
    /// if let Some(stuck) = state.holders.first() {
    ///     sem.evict(&mut conn, "export", &stuck.token).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn evict<C: ConnectionLike>(
        &self,
        conn: &mut C,
        resource: &str,
        token: &str,
    ) -> Result<Release> {
        let key = self.key(resource)?;
        repair::checked_token(token)?;
        let mut call = Call::new(embedded::SEMAPHORE_RELEASE.script());
        // One wake-up entry: one permit came back.
        call.key(&key).key(schema::wake(&key)).arg(token).arg(1u32);
        let what = "evicted a semaphore permit";
        repair::remove(self.manager(), conn, &call, what, resource, &key, token).await
    }
}
