//! [`ScriptManager`]: EVALSHA in the steady state, EVAL once on NOSCRIPT, batches, preload.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use redis::aio::ConnectionLike;
use redis::{FromRedisValue, RedisError, ServerErrorKind, Value};
use tracing::Instrument;

use super::call::Call;
use super::registry::{Registry, Script};
use crate::error::{Error, Result};

/// Error code a script uses (`redis.error_reply("REDKIT_DATA ...")`) for data it refuses.
pub(crate) const DATA_ERROR_CODE: &str = "REDKIT_DATA";
/// Error code a script uses for an argument it rejects (second line of defence).
pub(crate) const INPUT_ERROR_CODE: &str = "REDKIT_INPUT";
/// Error code a script uses when `redis.acl_check_cmd` denies a command it would run.
pub(crate) const NOPERM_ERROR_CODE: &str = "REDKIT_NOPERM";

/// Runs scripts: one `EVALSHA` round trip in the steady state, one `EVAL` fallback when the
/// server answers `NOSCRIPT` (after a restart, a failover or a `SCRIPT FLUSH`).
///
/// Cheap to clone (an `Arc`); clones share their [`Stats`]. Generic over any
/// [`redis::aio::ConnectionLike`]: `MultiplexedConnection`, `ConnectionManager`,
/// `cluster_async::ClusterConnection`, pooled connections.
///
/// ```no_run
/// # async fn run() -> redkit::Result<()> {
/// use redkit::{Call, Registry, ScriptManager};
/// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
/// let mut conn = client.get_multiplexed_async_connection().await?;
/// let manager = ScriptManager::new();
/// manager.preload(&mut conn).await?; // optional: SCRIPT LOAD everything up front
///
/// let script = Registry::global().require("fixed_window", 1)?;
/// let mut call = Call::new(script);
/// call.key("rk:{demo}:fw").arg(10).arg(60_000).arg(1);
/// let reply: redis::Value = manager.invoke(&mut conn, &call).await?;
/// # let _ = reply; Ok(()) }
/// ```
#[derive(Clone, Debug, Default)]
pub struct ScriptManager {
    stats: Arc<Counters>,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) noscript_fallbacks: AtomicU64,
    pub(crate) batch_reruns: AtomicU64,
}

/// A snapshot of a [`ScriptManager`]'s counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Single calls that were answered `NOSCRIPT` and re-sent as `EVAL`.
    pub noscript_fallbacks: u64,
    /// Calls of batches that were answered `NOSCRIPT` and re-run after `SCRIPT LOAD`.
    pub batch_reruns: u64,
}

impl ScriptManager {
    /// A manager with zeroed counters.
    pub fn new() -> Self {
        Self::default()
    }

    pub(crate) fn counters(&self) -> &Counters {
        &self.stats
    }

    /// The counters, for metrics and tests.
    pub fn stats(&self) -> Stats {
        Stats {
            noscript_fallbacks: self.stats.noscript_fallbacks.load(Ordering::Relaxed),
            batch_reruns: self.stats.batch_reruns.load(Ordering::Relaxed),
        }
    }

    /// `SCRIPT LOAD` of every embedded script (on a Cluster connection redis-rs sends it to
    /// every node). Checks that each SHA1 the server returns equals the local one. Idempotent.
    /// Returns how many scripts were loaded.
    pub async fn preload<C: ConnectionLike>(&self, conn: &mut C) -> Result<usize> {
        self.preload_scripts(conn, Registry::global().scripts())
            .await
    }

    /// `SCRIPT LOAD` of the given scripts, checking each returned SHA1.
    pub async fn preload_scripts<C: ConnectionLike>(
        &self,
        conn: &mut C,
        scripts: &[Script],
    ) -> Result<usize> {
        for script in scripts {
            let sha: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(script.source())
                .query_async(conn)
                .await?;
            check_sha(script, &sha)?;
        }
        Ok(scripts.len())
    }

    /// Runs one call: `EVALSHA`; on `NOSCRIPT`, `EVAL` with the full source (which caches the
    /// script again). At most one fallback per call; every other error is returned typed.
    pub async fn invoke<T, C>(&self, conn: &mut C, call: &Call<'_>) -> Result<T>
    where
        T: FromRedisValue,
        C: ConnectionLike,
    {
        call.validate()?;
        let script = call.script();
        let span = tracing::debug_span!(
            "redkit.invoke",
            script = script.name(),
            version = script.version()
        );
        async {
            let value = match call.evalsha().query_async::<Value>(conn).await {
                Ok(value) => value,
                Err(err) if is_noscript(&err) => {
                    self.count_fallback();
                    tracing::debug!(script = script.id(), "NOSCRIPT: falling back to EVAL");
                    Call::eval_from(script, call.evalsha())
                        .query_async::<Value>(conn)
                        .await
                        .map_err(|e| script_error(script, e))?
                }
                Err(err) => return Err(script_error(script, err)),
            };
            T::from_redis_value(value).map_err(|e| Error::unexpected(script.id(), e.to_string()))
        }
        .instrument(span)
        .await
    }
}

/// `true` when Redis answered `NOSCRIPT`.
pub(crate) fn is_noscript(err: &RedisError) -> bool {
    err.kind() == redis::ErrorKind::Server(ServerErrorKind::NoScript)
}

fn check_sha(script: &Script, server: &str) -> Result<()> {
    if server.eq_ignore_ascii_case(script.sha1()) {
        Ok(())
    } else {
        Err(Error::ShaMismatch {
            script: script.id().to_owned(),
            local: script.sha1().to_owned(),
            server: server.to_owned(),
        })
    }
}

/// Turns a server error from a script into a typed [`Error`].
pub(crate) fn script_error(script: &Script, err: RedisError) -> Error {
    let detail = || err.detail().unwrap_or_default().to_owned();
    match err.code() {
        Some("WRONGTYPE") => Error::WrongType {
            script: script.id().to_owned(),
        },
        Some(DATA_ERROR_CODE) => Error::CorruptData {
            script: script.id().to_owned(),
            detail: detail(),
        },
        Some(NOPERM_ERROR_CODE) | Some("NOPERM") => Error::PermissionDenied {
            script: script.id().to_owned(),
            detail: detail(),
        },
        Some(INPUT_ERROR_CODE) => Error::InvalidInput {
            what: "argument",
            reason: format!("{}: {}", script.id(), detail()),
        },
        _ => Error::Redis(err),
    }
}
