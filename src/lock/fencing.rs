//! Fenced writes: storage that refuses writes carrying an older fencing token.

use redis::aio::ConnectionLike;
use redis::Value;

use super::outcome::FencedWrite;
use super::single::Lock;
use super::token::FencingToken;
use crate::error::{Error, Result};
use crate::script::{Acked, Call, Replication};

/// Longest key accepted for a fenced value, in bytes.
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
    /// Fenced write of `value` at `key`, in one script: applied only if `fence` is not older
    /// than the last fencing token that wrote `key` (equal is accepted, so one holder can
    /// write several times). `key` holds a hash with fields `value` and `fence`.
    ///
    /// A holder that paused past its lease while another acquired and wrote gets
    /// [`FencedWrite::Stale`] and changes nothing.
    ///
    /// ```no_run
    /// # async fn run(lock: redkit::lock::Lock, mut conn: redis::aio::MultiplexedConnection, guard: redkit::lock::LockGuard) -> redkit::Result<()> {
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

    /// Like [`fenced_set`](Self::fenced_set), followed by `WAIT` for `replication` in the same
    /// round trip: the answer says how many replicas have the write.
    ///
    /// ```no_run
    /// # async fn run(lock: redkit::lock::Lock, mut conn: redis::aio::MultiplexedConnection, guard: redkit::lock::LockGuard) -> redkit::Result<()> {
    /// use std::time::Duration;
    /// use redkit::script::Replication;
    /// let acked = lock
    ///     .fenced_set_acked(&mut conn, "report:{q3}", guard.fencing_token(), "v2", Replication::new(1, Duration::from_millis(100))?)
    ///     .await?;
    /// if acked.outcome.is_written() && !acked.is_replicated() {
    ///     eprintln!("written on the primary only");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn fenced_set_acked<C: ConnectionLike, V: AsRef<[u8]>>(
        &self,
        conn: &mut C,
        key: &str,
        fence: FencingToken,
        value: V,
        replication: Replication,
    ) -> Result<Acked<FencedWrite>> {
        let call = self.fenced_call(key, fence, value.as_ref())?;
        let ((written, last), ack) = self
            .manager()
            .invoke_acked::<(i64, u64), _>(conn, &call, replication)
            .await?
            .split();
        let outcome = self.fenced_outcome(written, last)?;
        Ok(ack.map(|()| outcome))
    }

    fn fenced_call(&self, key: &str, fence: FencingToken, value: &[u8]) -> Result<Call<'static>> {
        check_key(key)?;
        if fence.get() == 0 {
            return Err(Error::invalid(
                "fencing token",
                "is 0 (none issued): acquire with LockOptions::fencing(true) to get one",
            ));
        }
        if i64::try_from(fence.get()).is_err() {
            return Err(Error::invalid("fencing token", "must be in 1..=i64::MAX"));
        }
        let mut call = Call::new(self.fenced_set_script());
        call.key(key).arg(fence.get()).arg(value);
        Ok(call)
    }

    fn fenced_outcome(&self, written: i64, last: u64) -> Result<FencedWrite> {
        Ok(
            if super::outcome::status(self.fenced_set_script(), written)? {
                FencedWrite::Written
            } else {
                FencedWrite::Stale {
                    newer: FencingToken::new(last),
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
                    .and_then(super::token::parse_positive)
                    .ok_or_else(|| corrupt("stored fence is not a positive integer"))?;
                Ok(Some((value.clone(), FencingToken::new(fence))))
            }
            _ => Err(corrupt("fenced value lacks its value or fence field")),
        }
    }
}
