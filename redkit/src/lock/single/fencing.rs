//! Fenced writes: storage that refuses writes carrying an older fencing token.

use redis::aio::ConnectionLike;
use redis::Value;

use crate::error::{Error, Result};
use crate::lock::lease::guard::LockGuard;
use crate::lock::lease::schema;
use crate::lock::lease::token::{issued, FencingToken};
use crate::lock::lease::wait::ms;
use crate::lock::outcome::{Fence, FencedWrite};
use crate::lock::single::Lock;
use crate::script::{Acked, Call, Replicated, Replication};

/// Longest key accepted for a fenced value, in bytes.
///
/// ```no_run
/// # async fn run(lock: redkit::lock::Lock, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
/// use redkit::lock::MAX_FENCED_KEY_LEN;
/// let too_long = "k".repeat(MAX_FENCED_KEY_LEN + 1);
/// // refused before anything is sent
/// let refused = lock.fenced_get(&mut conn, &too_long).await;
/// assert!(matches!(refused, Err(redkit::Error::InvalidInput { .. })));
/// # Ok(()) }
/// ```
pub const MAX_FENCED_KEY_LEN: usize = 1024;

fn check_key(key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(Error::invalid("key", "must not be empty"));
    }
    if key.len() > MAX_FENCED_KEY_LEN {
        return Err(Error::invalid(
            "key",
            format!("must be at most {MAX_FENCED_KEY_LEN} bytes long"),
        ));
    }
    Ok(())
}

impl Lock {
    /// A fencing token for the lock `guard` holds now, in one round trip: for a lock acquired
    /// without fencing (the default) whose holder turns out to need one, e.g. before its first
    /// write to storage that checks tokens. The script issues it only if the lock key still
    /// holds the guard's owner token, by the rule of fenced acquisitions
    /// (`max(last issued + 1, server TIME in µs)`, one increasing sequence with them), and
    /// stores it in the guard: [`LockGuard::fencing_token`] returns it from then on, and a
    /// guard that already has a token answers it without a round trip. [`Fence::Lost`] when
    /// the lease is gone (expired, or another owner holds the lock): nothing written.
    ///
    /// Because a token is issued only while its holder holds the lock, a later holder's token
    /// is larger, so storage that refuses older tokens refuses this holder's writes once a
    /// later holder has written. Errors: `CorruptData` for a fence key that is not an integer
    /// below 2^53, `PermissionDenied` / `WrongType`, nothing written.
    ///
    /// ```no_run
    /// # async fn run(lock: redkit::lock::Lock, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use redkit::lock::{Acquire, Fence, LockOptions};
    /// if let Acquire::Acquired(mut guard) = lock.acquire(&mut conn, "report", &LockOptions::new()).await? {
    ///     if let Fence::Issued(token) = lock.fence(&mut conn, &mut guard).await? {
    ///         lock.fenced_set(&mut conn, "report:{q3}", token, "v2").await?;
    ///     }
    ///     lock.release(&mut conn, guard).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn fence<C: ConnectionLike>(
        &self,
        conn: &mut C,
        guard: &mut LockGuard<Lock>,
    ) -> Result<Fence> {
        if let Some(token) = guard.fencing_token() {
            return Ok(Fence::Issued(token));
        }
        let ttl_ms = ms(guard.ttl());
        let script = self.inner.fence;
        let mut call = Call::new(script);
        call.key(&guard.held.key)
            .key(schema::fence(&guard.held.key))
            .arg(&guard.held.token)
            .arg(schema::fence_ttl_ms(ttl_ms));
        let reply: Vec<i64> = self.manager().invoke(conn, &call).await?;
        match reply.as_slice() {
            [0] => Ok(Fence::Lost),
            [1, n] => {
                let token = issued(script, *n)?;
                guard.fence = Some(token);
                // Fenced now: its renewals keep the fence key alive again (the script; a
                // watchdog started before keeps its copy of the lease, and renews natively:
                // the fence key may then expire first, which the time floor of the next
                // token makes harmless).
                guard.held.plain = false;
                Ok(Fence::Issued(token))
            }
            other => Err(Error::unexpected(
                script.id(),
                format!("reply {other:?} is neither {{0}} nor {{1, token}}"),
            )),
        }
    }

    /// Fenced write of `value` at `key`, in one script: applied only if `fence` is not older
    /// than the last fencing token that wrote `key` (equal is accepted, so one holder can
    /// write several times). `key` holds a hash with fields `value` and `fence`.
    ///
    /// A holder that paused past its lease while another acquired and wrote gets
    /// [`FencedWrite::Stale`] and changes nothing.
    ///
    /// ```no_run
    /// # async fn run(lock: redkit::lock::Lock, mut conn: redis::aio::MultiplexedConnection, guard: redkit::lock::LockGuard<redkit::lock::Lock>) -> redkit::Result<()> {
    /// use redkit::lock::FencedWrite;
    /// match lock.fenced_set(&mut conn, "report:{q3}", guard.fencing_token(), "v2").await? {
    ///     FencedWrite::Written => {}
    ///     FencedWrite::Stale { newer } => eprintln!("token {newer} already wrote: giving up"),
    ///     _ => {}
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn fenced_set<C: ConnectionLike, V: AsRef<[u8]>>(
        &self,
        conn: &mut C,
        key: &str,
        fence: FencingToken,
        value: V,
    ) -> Result<FencedWrite> {
        let call = self.fenced_call(key, fence, value.as_ref())?;
        let (written, last): (i64, u64) = self.manager().invoke(conn, &call).await?;
        self.fenced_outcome(written, last)
    }

    /// This lock's fenced writes followed by `WAIT` for `wait` in the same round trip:
    /// [`Replicated::fenced_set`] answers how many replicas have the write. (The lock's own
    /// acquire and renewals wait for replicas through
    /// [`LockOptions::require_replicas`](crate::lock::LockOptions::require_replicas).)
    ///
    /// ```no_run
    /// # async fn run(lock: redkit::lock::Lock, mut conn: redis::aio::MultiplexedConnection, guard: redkit::lock::LockGuard<redkit::lock::Lock>) -> redkit::Result<()> {
    /// use std::time::Duration;
    /// use redkit::script::Replication;
    /// let wait = Replication::new(1, Duration::from_millis(100))?;
    /// let acked = lock
    ///     .replicated(wait)
    ///     .fenced_set(&mut conn, "report:{q3}", guard.fencing_token(), "v2")
    ///     .await?;
    /// if acked.outcome.is_written() && !acked.is_replicated() {
    ///     eprintln!("written on the primary only");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn replicated(&self, wait: Replication) -> Replicated<'_, Lock> {
        Replicated::new(self, wait)
    }

    fn fenced_call(&self, key: &str, fence: FencingToken, value: &[u8]) -> Result<Call<'static>> {
        check_key(key)?;
        if i64::try_from(fence.get()).is_err() {
            return Err(Error::invalid("fencing token", "must be in 1..=i64::MAX"));
        }
        let mut call = Call::new(self.fenced_set_script());
        call.key(key).arg(fence.get()).arg(value);
        Ok(call)
    }

    fn fenced_outcome(&self, written: i64, last: u64) -> Result<FencedWrite> {
        Ok(
            if crate::lock::outcome::status(self.fenced_set_script(), written)? {
                FencedWrite::Written
            } else {
                FencedWrite::Stale {
                    newer: FencingToken::new(last).ok_or_else(|| {
                        Error::unexpected(self.fenced_set_script().id(), "newer fence is 0")
                    })?,
                }
            },
        )
    }

    /// Reads a fenced value: the value and the fencing token that wrote it (`None` when
    /// nothing was written yet).
    ///
    /// ```no_run
    /// # async fn run(lock: redkit::lock::Lock, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// if let Some((value, fence)) = lock.fenced_get(&mut conn, "report:{q3}").await? {
    ///     println!("{} bytes written by token {fence}", value.len());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn fenced_get<C: ConnectionLike>(
        &self,
        conn: &mut C,
        key: &str,
    ) -> Result<Option<(Vec<u8>, FencingToken)>> {
        check_key(key)?;
        let reply: Value = redis::cmd("HMGET")
            .arg(key)
            .arg("value")
            .arg("fence")
            .query_async(conn)
            .await
            .map_err(|e| crate::script::script_error(self.fenced_set_script(), e))?;
        let corrupt = |detail: &str| Error::CorruptData {
            script: self.fenced_set_script().id().to_owned(),
            detail: detail.to_owned(),
        };
        let Value::Array(fields) = reply else {
            return Err(Error::unexpected("HMGET", "not an array"));
        };
        match fields.as_slice() {
            [Value::Nil, Value::Nil] => Ok(None),
            [Value::BulkString(value), Value::BulkString(fence)] => {
                let fence = std::str::from_utf8(fence)
                    .ok()
                    .and_then(crate::lock::lease::token::parse_positive)
                    .and_then(FencingToken::new)
                    .ok_or_else(|| corrupt("stored fence is not a positive integer"))?;
                Ok(Some((value.clone(), fence)))
            }
            _ => Err(corrupt("fenced value lacks its value or fence field")),
        }
    }
}

impl Replicated<'_, Lock> {
    /// [`Lock::fenced_set`], followed by the wait: the outcome with how many replicas have the
    /// write (see [`Lock::replicated`]).
    ///
    /// ```no_run
    /// # async fn run(lock: redkit::lock::Lock, mut conn: redis::aio::MultiplexedConnection, guard: redkit::lock::LockGuard<redkit::lock::Lock>) -> redkit::Result<()> {
    /// use std::time::Duration;
    /// use redkit::script::Replication;
    /// let wait = Replication::new(1, Duration::from_millis(100))?;
    /// let acked = lock.replicated(wait).fenced_set(&mut conn, "report:{q3}", guard.fencing_token(), "v2").await?;
    /// println!("{:?} on {} replicas", acked.outcome, acked.replicas);
    /// # Ok(()) }
    /// ```
    pub async fn fenced_set<C: ConnectionLike, V: AsRef<[u8]>>(
        self,
        conn: &mut C,
        key: &str,
        fence: FencingToken,
        value: V,
    ) -> Result<Acked<FencedWrite>> {
        let lock = self.of();
        let call = lock.fenced_call(key, fence, value.as_ref())?;
        let ((written, last), ack) = lock
            .manager()
            .replicated(self.wait())
            .invoke::<(i64, u64), _>(conn, &call)
            .await?
            .split();
        let outcome = lock.fenced_outcome(written, last)?;
        Ok(ack.map(|()| outcome))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fenced_key_is_1_to_max_bytes() {
        assert!(check_key("").is_err());
        assert!(check_key("k").is_ok());
        assert!(check_key(&"k".repeat(MAX_FENCED_KEY_LEN)).is_ok());
        assert!(check_key(&"k".repeat(MAX_FENCED_KEY_LEN + 1)).is_err());
    }
}
