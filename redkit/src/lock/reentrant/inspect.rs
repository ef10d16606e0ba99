//! Looking at a [`ReentrantLock`] from outside: its owner, how many holds it has, its lease
//! and the last fencing token. Diagnostic by nature.

use std::time::Duration;

use redis::Value;

use super::ReentrantLock;
use crate::error::{Error, Result};
use crate::lock::lease::schema;
use crate::lock::{repair, FencingToken, Holder};
use crate::script::{embedded, Call};

/// A reentrant lock at one instant ([`ReentrantLock::inspect`]). A diagnostic: holds are
/// taken and given back while it is read.
///
/// ```no_run
/// # async fn run(lock: redkit::lock::ReentrantLock, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
/// let state = lock.inspect(&mut conn, "account-7").await?;
/// if let Some(h) = &state.holder {
///     println!("{} holds it {} times, {:?} left", h.token, state.holds, h.ttl);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReentrantState {
    /// The owner and its lease left, `None` when the lock is free.
    pub holder: Option<Holder>,
    /// How many holds the owner has (0 when free): releases needed before it is free.
    pub holds: u64,
    /// The last fencing token issued, `None` when none was or its key expired.
    pub last_fencing_token: Option<FencingToken>,
}

impl ReentrantLock {
    /// Reads `resource`'s owner, hold count, lease left and last fencing token. One
    /// read-only script call (`EVALSHA_RO` / `FCALL_RO`: a replica may serve it); nothing is
    /// written.
    ///
    /// Errors: [`Error::InvalidInput`] for a bad resource (nothing sent),
    /// [`Error::WrongType`] / [`Error::CorruptData`], [`Error::PermissionDenied`],
    /// connection errors.
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// let lock = redkit::lock::ReentrantLock::new();
    /// let state = lock.inspect(&mut conn, "account-7").await?;
    /// assert_eq!(state.holder.is_none(), state.holds == 0);
    /// # Ok(()) }
    /// ```
    pub async fn inspect<C: redis::aio::ConnectionLike>(
        &self,
        conn: &mut C,
        resource: &str,
    ) -> Result<ReentrantState> {
        let key = self.key(resource)?;
        let script = embedded::REENTRANT_INSPECT.script();
        let mut call = Call::new(script);
        call.key(&key).key(schema::fence(&key));
        let reply = self.manager().invoke(conn, &call).await?;
        let expected = "{owner, holds, pttl, fence}";
        let items = repair::inspected(script, reply, expected)?;
        let bad = || Error::unexpected(script.id(), format!("expected {expected}"));
        let [owner, holds, pttl, fence] = <[Value; 4]>::try_from(items).map_err(|_| bad())?;
        let (Value::Int(holds), Value::Int(pttl)) = (holds, pttl) else {
            return Err(bad());
        };
        let holder = match owner {
            Value::Nil => None,
            Value::BulkString(b) => Some(Holder {
                token: String::from_utf8(b).map_err(|_| bad())?,
                ttl: u64::try_from(pttl).ok().map(Duration::from_millis),
            }),
            _ => return Err(bad()),
        };
        Ok(ReentrantState {
            holder,
            holds: u64::try_from(holds).map_err(|_| bad())?,
            last_fencing_token: repair::fence(script, fence)?,
        })
    }
}
