//! Looking at a [`FairLock`]'s queue from outside (the holder, the waiters in order, their
//! leases) and removing one entry: an operator's tools, diagnostic by nature.

use std::num::NonZeroU32;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::Value;

use super::FairLock;
use crate::error::{Error, Result};
use crate::lock::lease::schema;
use crate::lock::outcome::Release;
use crate::lock::repair;
use crate::lock::FencingToken;
use crate::script::{embedded, Call};

/// A fair lock's queue at one instant ([`FairLock::inspect`]). A diagnostic: callers join and
/// leave while it is read.
///
/// ```no_run
/// # async fn run(lock: redkit::lock::FairLock, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
/// let state = lock.inspect(&mut conn, "ledger", redkit::nonzero!(10)).await?;
/// println!("{} in the queue", state.queued);
/// for (place, e) in state.entries.iter().enumerate() {
///     println!("{place}: {} (arrival {}, lease {:?})", e.token, e.arrival, e.lease_left);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FairLockState {
    /// Entries in the queue (the holder and the waiters, dead entries not skipped yet
    /// included).
    pub queued: u64,
    /// The last arrival number issued: the fencing token of the latest holder or waiter.
    pub last_fencing_token: Option<FencingToken>,
    /// The first entries in queue order: the first holds the lock while its lease lasts.
    pub entries: Vec<QueueEntry>,
}

/// One entry of a fair lock's queue ([`FairLockState::entries`]).
///
/// ```
/// # fn show(e: &redkit::lock::QueueEntry) {
/// match e.lease_left {
///     Some(left) => println!("{}: {left:?} left", e.token),
///     None => println!("{}: dead, skipped by the next caller", e.token),
/// }
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueEntry {
    /// The entry's owner token.
    pub token: String,
    /// Its arrival number (the holder's fencing token once it holds the lock).
    pub arrival: u64,
    /// Its lease left (the holder lease at the head, the waiter lease behind); `None` when
    /// it ended or is missing: the entry is dead and the next caller skips it.
    pub lease_left: Option<Duration>,
}

impl FairLock {
    /// Reads `resource`'s queue: its length, the last arrival number issued, and the first
    /// `list` entries in order with their leases. One read-only script call (`EVALSHA_RO` /
    /// `FCALL_RO`: a replica may serve it); nothing is written.
    ///
    /// Errors: [`Error::InvalidInput`] for a bad resource or `list` above 10,000 (nothing
    /// sent), [`Error::WrongType`] / [`Error::CorruptData`], [`Error::PermissionDenied`],
    /// connection errors.
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// let lock = redkit::lock::FairLock::new();
    /// let state = lock.inspect(&mut conn, "ledger", redkit::nonzero!(5)).await?;
    /// if let Some(holder) = state.entries.first() {
    ///     println!("held by {}", holder.token);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn inspect<C: ConnectionLike>(
        &self,
        conn: &mut C,
        resource: &str,
        list: NonZeroU32,
    ) -> Result<FairLockState> {
        let list = repair::checked_list(list)?;
        let key = self.key(resource)?;
        let script = embedded::FAIR_INSPECT.script();
        let mut call = Call::new(script);
        call.key(&key)
            .key(schema::leases(&key))
            .key(schema::fence(&key))
            .arg(list);
        let reply = self.manager().invoke(conn, &call).await?;
        let items = repair::inspected(script, reply, "{now, queued, fence, entries..}")?;
        let bad = || Error::unexpected(script.id(), "expected {now, queued, fence, entries..}");
        let int = |v: &Value| match v {
            Value::Int(i) => Ok(*i),
            _ => Err(bad()),
        };
        let (head, rest) = items.split_at_checked(3).ok_or_else(bad)?;
        let now = int(&head[0])?;
        let queued = u64::try_from(int(&head[1])?).map_err(|_| bad())?;
        let last_fencing_token = repair::fence(script, head[2].clone())?;
        let mut entries = Vec::with_capacity(rest.len() / 3);
        for entry in rest.chunks(3) {
            let [Value::BulkString(token), arrival, lease_end] = entry else {
                return Err(bad());
            };
            let token = String::from_utf8(token.clone()).map_err(|_| bad())?;
            let arrival = u64::try_from(int(arrival)?).map_err(|_| bad())?;
            let lease_left = int(lease_end)?
                .checked_sub(now)
                .and_then(|ms| u64::try_from(ms).ok())
                .filter(|ms| *ms > 0)
                .map(Duration::from_millis);
            entries.push(QueueEntry {
                token,
                arrival,
                lease_left,
            });
        }
        Ok(FairLockState {
            queued,
            last_fencing_token,
            entries,
        })
    }

    /// Removes the entry of `token` from `resource`'s queue, for an operator freeing a stuck
    /// holder or a stuck waiter: the release's own script, so the entry behind it is woken;
    /// written as a `WARN` trace event. [`Release::Released`] when `token` was the holder,
    /// [`Release::NotOwner`] when it was a waiter (removed too), expired or absent.
    ///
    /// Errors: [`Error::InvalidInput`] for a bad resource or a token no acquire writes (16 to
    /// 128 bytes), and as [`release`](Self::release).
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// let lock = redkit::lock::FairLock::new();
    /// let state = lock.inspect(&mut conn, "ledger", redkit::nonzero!(1)).await?;
    /// if let Some(stuck) = state.entries.first() {
    ///     lock.evict(&mut conn, "ledger", &stuck.token).await?;
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
        let call = self.leave_call(&key, token);
        let what = "evicted a fair lock entry";
        repair::remove(self.manager(), conn, &call, what, resource, &key, token).await
    }
}
