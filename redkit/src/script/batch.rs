//! Batches: many calls in one `MULTI`/`EXEC` transaction, each reported as ran / not run /
//! may have run ([`CallOutcome`]).
//!
//! # Why a transaction, not a plain pipeline
//!
//! redis-rs 1.8.1's `cluster_async::ClusterConnection` (`choose_response` in
//! `cluster_handling/async_connection/request.rs`) looks at every reply of a plain pipeline;
//! if any one is an error that "requires action" (`MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`,
//! `MASTERDOWN`, `LOADING`, `READONLY`) it re-sends the **whole** pipeline (following the
//! redirect, up to `ClusterClientBuilder::retries`, default 16). In a half-migrated slot the
//! calls on keys still on the source ran, the others answered `ASK`, and the resend ran the
//! first ones again: a batch of INCRBY calls applied some increments many times and reported
//! an error.
//!
//! In a `MULTI`/`EXEC` transaction the server refuses a redirected command when it is
//! queued (the transaction is then aborted with `EXECABORT`) or refuses `EXEC` itself with
//! the redirect: in both cases nothing of the batch ran. redis-rs maps the first to an
//! `ExecAbort` error, which it never retries (`RetryMethod::NoRetry`, and it does not refresh
//! its slot map either); it follows the second (the transaction is re-sent, with `ASKING` for
//! an `ASK`, after a wait of at least `min_retry_wait`, 1.28 s by default, for `TRYAGAIN`),
//! which is safe because nothing ran. When a transaction is refused for slot placement
//! (`MOVED`, `ASK`, `TRYAGAIN`), its calls are run one by one as single `EVALSHA` commands:
//! redis-rs follows each one's redirect (a single command answered `ASK`/`MOVED` did not run,
//! so its resend is safe) and refreshes its slot map on `MOVED`, so the next batch goes to
//! the right node. `NOSCRIPT` is a per-command error inside `EXEC`: the other calls ran, the
//! missing ones are re-run once in a second transaction that starts with `SCRIPT LOAD`.
//!
//! What a transaction cannot fix: when the connection drops or a response times out after
//! the batch was sent, the outcome is unknown ([`CallOutcome::MaybeRan`]); and a
//! `ClusterConnection` re-sends a request after such an I/O error by itself (`Reconnect` /
//! `RetryImmediately` in `choose_response`, up to `retries`), so with retries enabled a
//! transaction that ran can run again and be reported once. Build the cluster client with
//! `ClusterClientBuilder::retries(0)` where that matters, or make the calls idempotent
//! (request ids). `MultiplexedConnection` and `ConnectionManager` never re-send.

use std::collections::HashMap;

use redis::aio::ConnectionLike;
use redis::cluster_routing::Slot;
use redis::{ErrorKind, Pipeline, RedisError, ServerErrorKind, Value};

use super::call::Call;
use super::errors::{function_error, is_function_missing, is_unsupported, script_error};
use super::manager::ScriptManager;
use super::outcome::CallOutcome;
use super::path::{in_span, Path, Request};
use crate::error::{refused_before_running, Error, Result};
use crate::telemetry::round_trip::RoundTrip;

/// What one transaction came back with.
enum Sent {
    /// `EXEC` ran: one reply per queued command, in order.
    Ran(Vec<Value>),
    /// Refused before anything ran.
    NotRun(RedisError),
    /// Sent, reply lost or not understood: it may have run.
    MaybeRan(Error),
}

impl ScriptManager {
    /// Runs many calls in one `MULTI`/`EXEC` transaction (one round trip) and reports, per
    /// call and in order, whether it ran ([`CallOutcome::Ran`] with its reply or the script's
    /// error), did not run ([`CallOutcome::NotRun`]: safe to retry) or may have run
    /// ([`CallOutcome::MaybeRan`]: the reply was lost).
    ///
    /// Calls answered `NOSCRIPT` did not run: those, and only those, are re-run once in a
    /// second transaction that starts with `SCRIPT LOAD` of the missing scripts; the calls
    /// that already ran keep their results whatever happens to the re-run. With
    /// [`Backend::Functions`](super::Backend::Functions) the calls go out as `FCALL` /
    /// `FCALL_RO`, and calls answered "Function not found" are re-run the same way after
    /// `FUNCTION LOAD REPLACE` of their library (counted in `Stats::function_reloads`).
    ///
    /// A redirect (`MOVED`, `ASK` in a slot being migrated, `TRYAGAIN`) refuses the whole
    /// transaction before anything runs; the calls are then run one by one, each following
    /// its own redirect, and a call still refused is `NotRun` (see the module notes for why a
    /// plain pipeline would re-run calls). An empty batch returns an empty `Vec`
    /// without a round trip. The outer error is only for input rejected before sending
    /// (e.g. [`Error::KeyCount`]). On a Cluster every call of the batch must hash to one slot
    /// (use [`invoke_batch_by_slot`](Self::invoke_batch_by_slot) otherwise).
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use redkit::{Call, CallOutcome, Script, ScriptManager};
    /// let script = Script::new("incr_by", 1, 1, "return redis.call('INCRBY', KEYS[1], ARGV[1])")?;
    /// let calls: Vec<Call> = ["{u}:a", "{u}:b"]
    ///     .iter()
    ///     .map(|k| {
    ///         let mut c = Call::new(&script);
    ///         c.key(*k).arg(1);
    ///         c
    ///     })
    ///     .collect();
    /// for outcome in ScriptManager::new().invoke_batch(&mut conn, calls).await? {
    ///     match outcome {
    ///         CallOutcome::Ran(reply) => println!("ran: {reply:?}"),
    ///         CallOutcome::NotRun(e) => println!("not run, retry: {e}"),
    ///         CallOutcome::MaybeRan(e) => println!("unknown, read back first: {e}"),
    ///         _ => {}
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn invoke_batch<C: ConnectionLike>(
        &self,
        conn: &mut C,
        calls: Vec<Call<'_>>,
    ) -> Result<Vec<CallOutcome<Value>>> {
        for call in &calls {
            call.validate()?;
        }
        if calls.is_empty() {
            return Ok(Vec::new());
        }
        let span = tracing::debug_span!("redkit.batch", calls = calls.len());
        in_span(span, self.run_batch(conn, calls)).await
    }

    async fn run_batch<C: ConnectionLike>(
        &self,
        conn: &mut C,
        calls: Vec<Call<'_>>,
    ) -> Result<Vec<CallOutcome<Value>>> {
        let path = self.path();
        // With the Functions backend, a script of a library goes out as FCALL / FCALL_RO.
        let requests: Vec<Request<'_>> = calls.iter().map(|c| path.request(c, None)).collect();
        let all: Vec<usize> = (0..requests.len()).collect();
        let mut out: Vec<Option<CallOutcome<Value>>> = (0..requests.len()).map(|_| None).collect();
        let missing = send(conn, path, &requests, &all, &[], &mut out).await;
        if !missing.is_empty() {
            self.count_batch_reruns(missing.len());
            tracing::debug!(
                calls = missing.len(),
                "NOSCRIPT / function missing in batch: reloading and re-running"
            );
            let to_load = path.reloads(missing.iter().map(|&i| &requests[i]));
            let still = send(conn, path, &requests, &missing, &to_load, &mut out).await;
            for i in still {
                out[i] = Some(CallOutcome::NotRun(Error::Redis(RedisError::from((
                    ErrorKind::Server(ServerErrorKind::NoScript),
                    "script still missing after SCRIPT LOAD / FUNCTION LOAD",
                )))));
            }
        }
        Ok(recorded(out))
    }

    /// Like [`invoke_batch`](Self::invoke_batch) for calls spread over many Cluster slots:
    /// calls are grouped by the hash slot of their first key and the groups are sent
    /// concurrently (one transaction each) over clones of `conn`. Outcomes keep the input
    /// order; a group that fails (e.g. its slot is being migrated) reports its own calls as
    /// not run / may have run and never hides the outcomes of the other groups.
    ///
    /// ```no_run
    /// # async fn run(conn: redis::cluster_async::ClusterConnection, calls: Vec<redkit::Call<'_>>) -> redkit::Result<()> {
    /// let outcomes = redkit::ScriptManager::new().invoke_batch_by_slot(&conn, calls).await?;
    /// let ran = outcomes.iter().filter(|o| o.ran()).count();
    /// # let _ = ran; Ok(()) }
    /// ```
    pub async fn invoke_batch_by_slot<C: ConnectionLike + Clone>(
        &self,
        conn: &C,
        calls: Vec<Call<'_>>,
    ) -> Result<Vec<CallOutcome<Value>>> {
        for call in &calls {
            call.validate()?;
        }
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
        let mut out: Vec<Option<CallOutcome<Value>>> = (0..total).map(|_| None).collect();
        for (indices, outcomes) in futures_util::future::join_all(runs).await {
            match outcomes {
                Ok(outcomes) => {
                    for (i, o) in indices.into_iter().zip(outcomes) {
                        out[i] = Some(o);
                    }
                }
                // Validated above, so nothing of this group was sent.
                Err(e) => {
                    let text = e.to_string();
                    for i in indices {
                        out[i] = Some(CallOutcome::NotRun(Error::invalid("call", text.clone())));
                    }
                }
            }
        }
        Ok(recorded(out))
    }
}

/// The outcomes recorded, in order; a call without one (none is expected) may have run.
fn recorded(out: Vec<Option<CallOutcome<Value>>>) -> Vec<CallOutcome<Value>> {
    out.into_iter()
        .map(|o| {
            o.unwrap_or_else(|| {
                CallOutcome::MaybeRan(Error::unexpected("batch", "no outcome recorded"))
            })
        })
        .collect()
}

/// Sends `MULTI; <load>..; <requests[i] for i in idx>..; EXEC`, records the outcome of each
/// sent call in `out`, and returns the indices answered `NOSCRIPT` (or, for `FCALL`,
/// "Function not found").
async fn send<C: ConnectionLike>(
    conn: &mut C,
    path: Path<'_>,
    requests: &[Request<'_>],
    idx: &[usize],
    load: &[redis::Cmd],
    out: &mut [Option<CallOutcome<Value>>],
) -> Vec<usize> {
    let mut pipe = Pipeline::with_capacity(load.len() + idx.len());
    pipe.atomic();
    for cmd in load {
        pipe.add_command(cmd.clone());
    }
    for &i in idx {
        pipe.add_command(requests[i].cmd().clone());
    }
    let trip = RoundTrip::batch(load.len() + idx.len(), path.server());
    let sent = in_span(trip.span(), transaction(conn, &pipe)).await;
    match &sent {
        Sent::Ran(_) => trip.finish(None),
        Sent::NotRun(e) | Sent::MaybeRan(Error::Redis(e)) => trip.finish(Some(e)),
        Sent::MaybeRan(_) => trip.finish_other(),
    }
    let replies = match sent {
        Sent::Ran(replies) if replies.len() == load.len() + idx.len() => replies,
        Sent::Ran(replies) => {
            let detail = format!(
                "{} replies for {} commands",
                replies.len(),
                load.len() + idx.len()
            );
            for &i in idx {
                out[i] = Some(CallOutcome::MaybeRan(Error::unexpected("batch", &detail)));
            }
            return Vec::new();
        }
        // Refused because of where the slot lives (a migration in progress: ASK/TRYAGAIN; a
        // stale slot map: MOVED). Nothing ran; run the calls one by one, so redis-rs follows
        // each redirect (a single command answered ASK/MOVED did not run: its resend is
        // safe) and refreshes its slot map for the next batch.
        Sent::NotRun(e) if is_redirect(&e) => {
            tracing::debug!(calls = idx.len(), error = %e, "batch redirected: one by one");
            for &i in idx {
                out[i] = Some(single(conn, path, &requests[i]).await);
            }
            return Vec::new();
        }
        Sent::NotRun(e) => {
            for &i in idx {
                out[i] = Some(CallOutcome::NotRun(script_error(
                    requests[i].script(),
                    e.clone(),
                )));
            }
            return Vec::new();
        }
        Sent::MaybeRan(e) => {
            let text = e.to_string();
            let mut first = Some(e);
            for &i in idx {
                let err = first
                    .take()
                    .unwrap_or_else(|| Error::unexpected("batch", text.clone()));
                out[i] = Some(CallOutcome::MaybeRan(err));
            }
            return Vec::new();
        }
    };
    let mut missing = Vec::new();
    for (&i, reply) in idx.iter().zip(replies.into_iter().skip(load.len())) {
        let req = &requests[i];
        out[i] = Some(match reply {
            Value::ServerError(e) => {
                let e = RedisError::from(e);
                if req.is_missing(&e) {
                    missing.push(i);
                    continue;
                }
                CallOutcome::Ran(Err(function_error(req.script(), e)))
            }
            v => CallOutcome::Ran(Ok(v)),
        });
    }
    missing
}

/// One call of a batch as a single command through the call path (its one recovery
/// included), as an outcome.
async fn single<C: ConnectionLike>(
    conn: &mut C,
    path: Path<'_>,
    req: &Request<'_>,
) -> CallOutcome<Value> {
    let script = req.script();
    let reply = match path.run(conn, req).await {
        Ok(answer) => answer.reply,
        // Without a wait, only a library that could not be loaded after "Function not
        // found": the call did not run.
        Err(e) => return CallOutcome::NotRun(e),
    };
    match reply {
        Ok(v) => CallOutcome::Ran(Ok(v)),
        Err(e) if refused_before_running(&e) => CallOutcome::NotRun(script_error(script, e)),
        // The function is still missing, or the server has no Functions: it did not run.
        Err(e) if is_function_missing(&e) || is_unsupported(&e) => {
            CallOutcome::NotRun(function_error(script, e))
        }
        // Any other reply from the server: the script ran and returned this error.
        Err(e) if e.code().is_some() => CallOutcome::Ran(Err(function_error(script, e))),
        Err(e) => CallOutcome::MaybeRan(Error::Redis(e)),
    }
}

fn is_placement(kind: Option<ServerErrorKind>) -> bool {
    matches!(
        kind,
        Some(ServerErrorKind::Moved | ServerErrorKind::Ask | ServerErrorKind::TryAgain)
    )
}

/// `true` when a transaction was refused because of slot placement (MOVED, ASK, TRYAGAIN),
/// for EXEC itself or for one of its queued commands.
fn is_redirect(e: &RedisError) -> bool {
    match e.kind() {
        ErrorKind::Server(kind) if is_placement(Some(kind)) => true,
        _ => e
            .clone()
            .into_server_errors()
            .is_some_and(|errs| errs.iter().any(|(_, se)| is_placement(se.kind()))),
    }
}

/// `true` when a transaction error records an error outside the queued commands (MULTI's).
fn multi_refused(e: &RedisError, queued: usize) -> bool {
    e.clone()
        .into_server_errors()
        .is_some_and(|errs| errs.iter().any(|(i, _)| *i >= queued))
        || e.to_string().contains("EXEC without MULTI")
}

/// Sends one atomic pipeline and classifies what came back.
async fn transaction<C: ConnectionLike>(conn: &mut C, pipe: &Pipeline) -> Sent {
    // MULTI + each command's QUEUED are skipped; the last reply is EXEC's.
    match conn.req_packed_commands(pipe, pipe.len() + 1, 1).await {
        Ok(mut replies) => match replies.pop() {
            Some(Value::Array(items)) if replies.is_empty() => Sent::Ran(items),
            // EXEC answered nil: a WATCHed key changed (redkit never WATCHes): nothing ran.
            Some(Value::Nil) => Sent::NotRun(RedisError::from((
                ErrorKind::Server(ServerErrorKind::ExecAbort),
                "transaction aborted",
            ))),
            // EXEC itself refused (EXECABORT, or a redirect of the whole transaction).
            Some(Value::ServerError(e)) => Sent::NotRun(e.into()),
            other => Sent::MaybeRan(Error::unexpected(
                "batch",
                format!("unexpected transaction reply {other:?}"),
            )),
        },
        // MULTI itself refused (e.g. an ACL user denied MULTI): the commands were not queued
        // but run one by one, and EXEC failed. redis-rs files MULTI's error at index
        // `0 - 1` (wrapping in release builds; debug builds panic on that subtraction and drop
        // the connection, which ends up below as an I/O error). The calls ran; their replies
        // were skipped: they may have run.
        Err(e) if multi_refused(&e, pipe.len()) => Sent::MaybeRan(Error::Redis(e)),
        // A server error for the transaction (a queued command refused, e.g. ASK/MOVED/TRYAGAIN,
        // so EXECABORT; or EXEC redirected and the redirect not followed): nothing ran.
        Err(e) if matches!(e.kind(), ErrorKind::Server(_)) => Sent::NotRun(e),
        // I/O error, timeout, dropped connection: the batch may have run.
        Err(e) => Sent::MaybeRan(Error::Redis(e)),
    }
}
