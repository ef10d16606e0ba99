//! Replication acknowledgement on demand: `WAIT` after a script, in the same round trip.
//!
//! Redis replicates asynchronously: a write the primary acknowledged can be lost when the
//! primary dies before a replica received it, and the replica is promoted. `WAIT n timeout`
//! blocks the caller until `n` replicas acknowledged every write this connection made so far,
//! or the timeout passes, and answers how many did. redkit sends it in the same pipeline as the
//! script, so it costs no extra round trip, and reports the count in [`Acked`]: a caller can
//! refuse to confirm an order (or to use a fencing token) whose write might still be lost.
//!
//! `WAIT` does not make Redis strongly consistent: a write acknowledged by fewer replicas than
//! asked was still applied on the primary (it is not rolled back), and a replica that
//! acknowledged can still lose it if it is not the one promoted. See the README's "Failure
//! semantics" section for what is measured.

use std::num::NonZeroU32;
use std::sync::atomic::Ordering;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{FromRedisValue, Pipeline, ServerErrorKind, Value};
use tracing::Instrument;

use super::call::Call;
use super::functions::is_function_missing;
use super::manager::{fcall_cmd, function_error, ScriptManager};
use crate::error::{Error, Result};

/// How many replicas must acknowledge a write, and how long to wait for them (`WAIT`).
///
/// ```
/// use std::time::Duration;
/// use redkit::script::Replication;
/// let r = Replication::new(1, Duration::from_millis(100))?;
/// assert_eq!((r.replicas(), r.timeout()), (1, Duration::from_millis(100)));
/// assert!(Replication::new(0, Duration::from_millis(100)).is_err());
/// assert!(Replication::new(1, Duration::ZERO).is_err()); // WAIT 1 0 would block forever
/// # Ok::<(), redkit::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Replication {
    replicas: NonZeroU32,
    timeout: Duration,
}

impl Replication {
    /// The longest timeout accepted: a call must stay bounded.
    pub const MAX_TIMEOUT: Duration = Duration::from_secs(60);

    /// Wait for `replicas` (>= 1) replicas, at most `timeout` (1 ms ..= [`Self::MAX_TIMEOUT`],
    /// rounded down to whole milliseconds).
    ///
    /// ```
    /// # use std::time::Duration;
    /// let r = redkit::script::Replication::new(2, Duration::from_secs(1))?;
    /// # let _ = r; Ok::<(), redkit::Error>(())
    /// ```
    pub fn new(replicas: u32, timeout: Duration) -> Result<Self> {
        let replicas = NonZeroU32::new(replicas)
            .ok_or_else(|| Error::invalid("replicas", "must be at least 1"))?;
        if timeout < Duration::from_millis(1) || timeout > Self::MAX_TIMEOUT {
            return Err(Error::invalid(
                "timeout",
                format!(
                    "must be 1 ms ..= {:?} (0 would make WAIT block forever)",
                    Self::MAX_TIMEOUT
                ),
            ));
        }
        Ok(Self { replicas, timeout })
    }

    /// Replicas that must acknowledge.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let r = redkit::script::Replication::new(2, Duration::from_secs(1))?;
    /// assert_eq!(r.replicas(), 2);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn replicas(&self) -> u32 {
        self.replicas.get()
    }

    /// How long `WAIT` may block.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let r = redkit::script::Replication::new(1, Duration::from_millis(250))?;
    /// assert_eq!(r.timeout(), Duration::from_millis(250));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The `WAIT` command.
    pub(crate) fn wait_cmd(&self) -> redis::Cmd {
        let ms = u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX);
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(self.replicas.get()).arg(ms);
        cmd
    }
}

/// An outcome together with how many replicas acknowledged the write behind it.
///
/// `replicas >= requested` means the write reached that many replicas before the reply;
/// fewer means it is applied on the primary but could still be lost in a failover.
///
/// ```
/// use redkit::script::Acked;
/// let a = Acked::new("placed", 0, 1);
/// assert!(!a.is_replicated()); // applied, but no replica has it yet
/// assert!(a.map(|s| s.len()).outcome == 6);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Acked<T> {
    /// The outcome of the operation, exactly as without acknowledgement.
    pub outcome: T,
    /// Replicas that acknowledged (the reply of `WAIT`).
    pub replicas: u32,
    /// Replicas that were asked for.
    pub requested: u32,
}

impl<T> Acked<T> {
    /// An outcome with its acknowledgement count.
    ///
    /// ```
    /// let a = redkit::script::Acked::new(7, 1, 1);
    /// assert!(a.is_replicated());
    /// ```
    pub fn new(outcome: T, replicas: u32, requested: u32) -> Self {
        Self {
            outcome,
            replicas,
            requested,
        }
    }

    /// `true` when at least the requested number of replicas acknowledged.
    ///
    /// ```
    /// assert!(!redkit::script::Acked::new((), 1, 2).is_replicated());
    /// ```
    pub fn is_replicated(&self) -> bool {
        self.replicas >= self.requested
    }

    /// Maps the outcome, keeping the counts.
    ///
    /// ```
    /// let a = redkit::script::Acked::new(2, 1, 1).map(|n| n * 10);
    /// assert_eq!(a.outcome, 20);
    /// ```
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Acked<U> {
        Acked {
            outcome: f(self.outcome),
            replicas: self.replicas,
            requested: self.requested,
        }
    }
}

impl ScriptManager {
    /// Runs one call like [`invoke`](Self::invoke), or like [`invoke_acked`](Self::invoke_acked)
    /// when `replication` is given: the outcome, and the replicas that acknowledged (`None`
    /// when no `WAIT` was sent).
    pub(crate) async fn invoke_waiting<T, C>(
        &self,
        conn: &mut C,
        call: &Call<'_>,
        replication: Option<Replication>,
    ) -> Result<(T, Option<u32>)>
    where
        T: FromRedisValue,
        C: ConnectionLike,
    {
        Ok(match replication {
            None => (self.invoke(conn, call).await?, None),
            Some(r) => {
                let acked = self.invoke_acked(conn, call, r).await?;
                (acked.outcome, Some(acked.replicas))
            }
        })
    }

    /// Runs one call like [`invoke`](Self::invoke), then `WAIT` for `replication`, both in one
    /// pipeline (one round trip) on the node that ran the script (on a Cluster connection the
    /// pipeline is routed by the call's first key). On `NOSCRIPT` the pair is sent once more
    /// with `EVAL`. A script error is returned as the typed error (the script wrote nothing).
    ///
    /// `WAIT` counts the replicas that have every write of *this connection* so far, so on a
    /// shared (multiplexed) connection the count is conservative, never optimistic.
    ///
    /// ```no_run
    /// # async fn run() -> redkit::Result<()> {
    /// use std::time::Duration;
    /// use redkit::script::Replication;
    /// use redkit::{Call, Registry, ScriptManager};
    /// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
    /// let mut conn = client.get_multiplexed_async_connection().await?;
    /// let script = Registry::global().require("fixed_window", 1)?;
    /// let mut call = Call::new(script);
    /// call.key("rk:{demo}:fw").arg(10).arg(60_000).arg(1);
    /// let acked = ScriptManager::new()
    ///     .invoke_acked::<redis::Value, _>(&mut conn, &call, Replication::new(1, Duration::from_millis(100))?)
    ///     .await?;
    /// if !acked.is_replicated() { /* applied on the primary only: could be lost in a failover */ }
    /// # Ok(()) }
    /// ```
    pub async fn invoke_acked<T, C>(
        &self,
        conn: &mut C,
        call: &Call<'_>,
        replication: Replication,
    ) -> Result<Acked<T>>
    where
        T: FromRedisValue,
        C: ConnectionLike,
    {
        call.validate()?;
        let script = call.script();
        let span = tracing::debug_span!(
            "redkit.invoke",
            script = script.name(),
            version = script.version(),
            wait = replication.replicas()
        );
        async {
            let send = |first: redis::Cmd| {
                let mut pipe = Pipeline::with_capacity(2);
                pipe.ignore_errors();
                pipe.add_command(first).add_command(replication.wait_cmd());
                pipe
            };
            let function = self.function_for(script);
            let first = match function {
                Some((_, name, read_only)) => fcall_cmd(call, name, read_only),
                None => call.evalsha().clone(),
            };
            let mut replies: Vec<Value> = send(first.clone()).query_async(conn).await?;
            if let Some((library, _, _)) = function {
                if matches!(replies.first(), Some(Value::ServerError(e)) if is_function_missing(&e.clone().into()))
                {
                    self.counters()
                        .function_reloads
                        .fetch_add(1, Ordering::Relaxed);
                    self.load_library(conn, library).await?;
                    replies = send(first).query_async(conn).await?;
                }
            } else if matches!(replies.first(), Some(Value::ServerError(e)) if e.kind() == Some(ServerErrorKind::NoScript))
            {
                self.count_fallback();
                tracing::debug!(script = script.id(), "NOSCRIPT: falling back to EVAL");
                replies = send(Call::eval_from(script, call.evalsha()))
                    .query_async(conn)
                    .await?;
            }
            let mut replies = replies.into_iter();
            let (Some(value), Some(acks)) = (replies.next(), replies.next()) else {
                return Err(Error::unexpected(script.id(), "script + WAIT: missing replies"));
            };
            let value = match value {
                Value::ServerError(e) => return Err(function_error(script, e.into())),
                v => v,
            };
            let replicas = match acks {
                Value::Int(n) => u32::try_from(n).unwrap_or(0),
                Value::ServerError(e) => return Err(Error::Redis(e.into())),
                other => {
                    return Err(Error::unexpected(
                        "WAIT",
                        format!("expected an integer, got {other:?}"),
                    ))
                }
            };
            let outcome =
                T::from_redis_value(value).map_err(|e| Error::unexpected(script.id(), e.to_string()))?;
            Ok(Acked::new(outcome, replicas, replication.replicas()))
        }
        .instrument(span)
        .await
    }

    pub(crate) fn count_fallback(&self) {
        self.counters()
            .noscript_fallbacks
            .fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_command_is_encoded_in_ms() {
        let r = Replication::new(2, Duration::from_micros(1_500)).unwrap();
        let args: Vec<Vec<u8>> = r
            .wait_cmd()
            .args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => b.to_vec(),
                _ => vec![],
            })
            .collect();
        assert_eq!(args, vec![b"WAIT".to_vec(), b"2".to_vec(), b"1".to_vec()]);
    }

    #[test]
    fn extreme_inputs_are_errors_not_panics() {
        assert!(Replication::new(u32::MAX, Duration::MAX).is_err());
        assert!(Replication::new(u32::MAX, Replication::MAX_TIMEOUT).is_ok());
        assert!(Replication::new(1, Duration::from_nanos(999_999)).is_err());
    }
}
