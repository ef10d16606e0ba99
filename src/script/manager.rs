//! [`ScriptManager`]: EVALSHA in the steady state, EVAL once on NOSCRIPT, batches, preload.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use redis::aio::ConnectionLike;
use redis::cluster_routing::Slot;
use redis::{FromRedisValue, Pipeline, RedisError, ServerErrorKind, Value};
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

    /// Runs many calls in one pipeline (one round trip). Each call gets its own result, in
    /// order. Calls answered `NOSCRIPT` did not run: those, and only those, are re-run once in
    /// a second pipeline that starts with `SCRIPT LOAD` of the missing scripts.
    ///
    /// On a Cluster every call of the batch must hash to one slot (use
    /// [`invoke_batch_by_slot`](Self::invoke_batch_by_slot) otherwise).
    /// The outer error is for the round trip itself (connection lost, bad input).
    pub async fn invoke_batch<C: ConnectionLike>(
        &self,
        conn: &mut C,
        calls: Vec<Call<'_>>,
    ) -> Result<Vec<Result<Value>>> {
        for call in &calls {
            call.validate()?;
        }
        let scripts: Vec<&Script> = calls.iter().map(|c| c.script()).collect();
        let span = tracing::debug_span!("redkit.batch", calls = calls.len());
        async {
            let mut pipe = Pipeline::with_capacity(calls.len());
            pipe.ignore_errors();
            for call in calls {
                pipe.add_command(call.into_evalsha());
            }
            let replies: Vec<Value> = pipe.query_async(conn).await?;
            if replies.len() != scripts.len() {
                return Err(Error::unexpected(
                    "batch",
                    format!("{} replies for {} calls", replies.len(), scripts.len()),
                ));
            }
            let mut results: Vec<Result<Value>> = Vec::with_capacity(replies.len());
            let mut missing: Vec<usize> = Vec::new();
            for (i, reply) in replies.into_iter().enumerate() {
                match reply {
                    Value::ServerError(e) if e.kind() == Some(ServerErrorKind::NoScript) => {
                        missing.push(i);
                        results.push(Ok(Value::Nil)); // replaced below
                    }
                    Value::ServerError(e) => results.push(Err(script_error(scripts[i], e.into()))),
                    v => results.push(Ok(v)),
                }
            }
            if !missing.is_empty() {
                self.rerun(conn, &scripts, &pipe, &missing, &mut results)
                    .await?;
            }
            Ok(results)
        }
        .instrument(span)
        .await
    }

    /// Re-runs the calls at `missing` after `SCRIPT LOAD` of their scripts, in one pipeline.
    async fn rerun<C: ConnectionLike>(
        &self,
        conn: &mut C,
        scripts: &[&Script],
        sent: &Pipeline,
        missing: &[usize],
        results: &mut [Result<Value>],
    ) -> Result<()> {
        self.stats
            .batch_reruns
            .fetch_add(missing.len() as u64, Ordering::Relaxed);
        tracing::debug!(
            calls = missing.len(),
            "NOSCRIPT in batch: reloading and re-running"
        );
        let mut to_load: Vec<&Script> = Vec::new();
        for &i in missing {
            if !to_load.iter().any(|s| s.sha1() == scripts[i].sha1()) {
                to_load.push(scripts[i]);
            }
        }
        let mut pipe = Pipeline::with_capacity(to_load.len() + missing.len());
        pipe.ignore_errors();
        for script in &to_load {
            pipe.cmd("SCRIPT").arg("LOAD").arg(script.source());
        }
        let sent_cmds: Vec<&redis::Cmd> = sent.cmd_iter().collect();
        for &i in missing {
            pipe.add_command(sent_cmds[i].clone());
        }
        let replies: Vec<Value> = pipe.query_async(conn).await?;
        if replies.len() != to_load.len() + missing.len() {
            return Err(Error::unexpected(
                "batch",
                "wrong number of replies on re-run",
            ));
        }
        let mut replies = replies.into_iter();
        for script in &to_load {
            match replies.next() {
                Some(Value::BulkString(sha)) if sha == script.sha1().as_bytes() => {}
                Some(Value::ServerError(e)) => return Err(Error::Redis(e.into())),
                other => {
                    return Err(Error::ShaMismatch {
                        script: script.id().to_owned(),
                        local: script.sha1().to_owned(),
                        server: format!("{other:?}"),
                    })
                }
            }
        }
        for (&i, reply) in missing.iter().zip(replies) {
            results[i] = match reply {
                Value::ServerError(e) => Err(script_error(scripts[i], e.into())),
                v => Ok(v),
            };
        }
        Ok(())
    }

    /// Like [`invoke_batch`](Self::invoke_batch) for calls spread over many Cluster slots:
    /// calls are grouped by the hash slot of their first key and the groups are sent
    /// concurrently (one pipeline each) over clones of `conn`. Results keep the input order.
    pub async fn invoke_batch_by_slot<C: ConnectionLike + Clone>(
        &self,
        conn: &C,
        calls: Vec<Call<'_>>,
    ) -> Result<Vec<Result<Value>>> {
        let total = calls.len();
        let mut groups: HashMap<Option<Slot>, (Vec<usize>, Vec<Call<'_>>)> = HashMap::new();
        for (i, call) in calls.into_iter().enumerate() {
            let slot = call.first_key().map(Slot::for_key);
            let group = groups.entry(slot).or_default();
            group.0.push(i);
            group.1.push(call);
        }
        let runs = groups.into_values().map(|(indices, calls)| {
            let mut conn = conn.clone();
            async move { (indices, self.invoke_batch(&mut conn, calls).await) }
        });
        let mut out: Vec<Option<Result<Value>>> = (0..total).map(|_| None).collect();
        for (indices, results) in futures_util::future::join_all(runs).await {
            for (i, r) in indices.into_iter().zip(results?) {
                out[i] = Some(r);
            }
        }
        Ok(out
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(Error::unexpected("batch", "missing reply"))))
            .collect())
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
