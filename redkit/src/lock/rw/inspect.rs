//! Looking at a [`RwLock`] from outside: its readers, its writer and the writer waiting
//! first, with their leases, and the last fencing token. Diagnostic by nature.

use std::num::NonZeroU32;
use std::time::Duration;

use redis::Value;

use super::RwLock;
use crate::error::{Error, Result};
use crate::lock::lease::schema;
use crate::lock::{repair, FencingToken, Holder};
use crate::script::{embedded, Call};

/// A read-write lock at one instant ([`RwLock::inspect`]). A diagnostic: readers and
/// writers come and go while it is read.
///
/// ```no_run
/// # async fn run(lock: redkit::lock::RwLock, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
/// let state = lock.inspect(&mut conn, "catalog", redkit::nonzero!(10)).await?;
/// match (&state.writer, state.live_readers) {
///     (Some(w), _) => println!("written by {}", w.token),
///     (None, 0) => println!("free"),
///     (None, n) => println!("read by {n}"),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RwLockState {
    /// Readers whose lease has not ended.
    pub live_readers: u64,
    /// The first live readers, soonest lease end first (as many as asked).
    pub readers: Vec<Holder>,
    /// The writer, `None` when none holds the lock.
    pub writer: Option<Holder>,
    /// The writer waiting first (its intent blocks new readers), `None` when none waits.
    pub waiting_writer: Option<Holder>,
    /// The last fencing token issued, `None` when none was or its key expired.
    pub last_fencing_token: Option<FencingToken>,
}

impl RwLock {
    /// Reads `resource`'s readers (how many, and the first `list` with their lease left),
    /// its writer and the writer waiting first, and the last fencing token. One read-only
    /// script call (`EVALSHA_RO` / `FCALL_RO`: a replica may serve it); nothing is written.
    ///
    /// Errors: [`Error::InvalidInput`] for a bad resource or `list` above 10,000 (nothing
    /// sent), [`Error::WrongType`] / [`Error::CorruptData`], [`Error::PermissionDenied`],
    /// connection errors.
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// let lock = redkit::lock::RwLock::new();
    /// let state = lock.inspect(&mut conn, "catalog", redkit::nonzero!(5)).await?;
    /// assert!(state.readers.len() as u64 <= state.live_readers);
    /// # Ok(()) }
    /// ```
    pub async fn inspect<C: redis::aio::ConnectionLike>(
        &self,
        conn: &mut C,
        resource: &str,
        list: NonZeroU32,
    ) -> Result<RwLockState> {
        let list = repair::checked_list(list)?;
        let key = self.key(resource)?;
        let script = embedded::RW_INSPECT.script();
        let mut call = Call::new(script);
        call.key(schema::readers(&key))
            .key(schema::writer(&key))
            .key(schema::intent(&key))
            .key(schema::fence(&key))
            .arg(list);
        let reply = self.manager().invoke(conn, &call).await?;
        let expected = "{now, readers, writer, pttl, intent, pttl, fence, readers..}";
        let items = repair::inspected(script, reply, expected)?;
        let bad = || Error::unexpected(script.id(), format!("expected {expected}"));
        let int = |v: &Value| match v {
            Value::Int(i) => Ok(*i),
            _ => Err(bad()),
        };
        let text = |v: &Value| match v {
            Value::BulkString(b) => String::from_utf8(b.clone()).map_err(|_| bad()),
            _ => Err(bad()),
        };
        let holder = |token: &Value, pttl: &Value| -> Result<Option<Holder>> {
            if *token == Value::Nil {
                return Ok(None);
            }
            Ok(Some(Holder {
                token: text(token)?,
                ttl: u64::try_from(int(pttl)?).ok().map(Duration::from_millis),
            }))
        };
        let (head, rest) = items.split_at_checked(7).ok_or_else(bad)?;
        let now = int(&head[0])?;
        let mut readers = Vec::with_capacity(rest.len() / 2);
        for pair in rest.chunks(2) {
            let [token, end] = pair else {
                return Err(bad());
            };
            let left = int(end)?.saturating_sub(now);
            readers.push(Holder {
                token: text(token)?,
                ttl: Some(Duration::from_millis(u64::try_from(left).unwrap_or(0))),
            });
        }
        Ok(RwLockState {
            live_readers: u64::try_from(int(&head[1])?).map_err(|_| bad())?,
            readers,
            writer: holder(&head[2], &head[3])?,
            waiting_writer: holder(&head[4], &head[5])?,
            last_fencing_token: repair::fence(script, head[6].clone())?,
        })
    }
}
