//! The one call path: how a [`Call`] goes out, and the one recovery when the server lacks its
//! script. Single calls ([`invoke`](super::ScriptManager::invoke)), replicated calls
//! ([`replicated`](super::ScriptManager::replicated): locks, semaphores, the inventory)
//! and batches (their missing calls, their re-run's loads, their calls run one by one after a
//! redirect) all go through here.
//!
//! - [`Path::request`] builds the command: `EVALSHA` (`EVALSHA_RO` for a read-only script), or
//!   with the Functions backend `FCALL` (`FCALL_RO`) of the script's function; with a
//!   [`Replication`], its `WAIT` / `WAITAOF` behind it in the same pipeline.
//! - [`Path::run`] sends it and recovers once:
//!   - `NOSCRIPT`: the same request as `EVAL` (`EVAL_RO`) with the full source, wait included;
//!     then `SCRIPT LOAD` by the first caller of a burst (below);
//!   - "Function not found": `FUNCTION LOAD REPLACE` of the library, then the same request once
//!     more.
//!
//!   A call answered `NOSCRIPT` or "Function not found" did not run, so sending it again never
//!   applies it twice.
//! - [`Path::reloads`]: the same loads as commands, for a batch whose re-run is a transaction.
//!
//! # The `SCRIPT LOAD` after `EVAL`
//!
//! `EVAL` runs the script and, on Redis 7, caches it like `SCRIPT LOAD`. Since Redis 8.0 (and
//! Valkey), a script cached only by `EVAL` sits in a 500-entry eviction list while a `SCRIPT
//! LOAD`ed one stays. So the first caller whose fallback succeeds also sends `SCRIPT LOAD` of the
//! script after its `EVAL` (one more round trip for that caller only; on a Cluster connection
//! redis-rs sends it to every primary); callers that fall back while that load is in flight
//! send only their `EVAL`. A burst of calls after a failover or a `SCRIPT FLUSH` then costs one
//! load per script, not one per call in flight, and the next calls are `EVALSHA` hits no
//! eviction can take away. A `SCRIPT LOAD` that fails (an ACL user without `+script|load`, a
//! node that does not answer) changes nothing for the caller: its `EVAL` reply is what it gets.
//! A failed `EVAL` loads nothing. The load goes after the `EVAL`, not in a pipeline with it: a
//! redirected `EVAL` (`ASK`, `MOVED`) is then followed by the connection like any single
//! command.
//!
//! # A replicated call on a cold cache
//!
//! A `WAIT` behind an `EVALSHA` answered `NOSCRIPT` (or an `FCALL` answered "Function not
//! found") waits for nothing the call wrote, and with a replica missing it blocks its whole
//! timeout before the recovery and its own `WAIT` even start. So a replicated call of a script
//! the manager has not seen run since the last recovery ([`Cached`](super::state::Cached))
//! first asks whether the server holds it (`SCRIPT EXISTS`; with the Functions backend,
//! `FUNCTION LIST LIBRARYNAME`): a missing one goes straight to the recovery (`EVAL` + wait,
//! then `SCRIPT LOAD`; or `FUNCTION LOAD REPLACE`, then the call + wait), one wait in all. A
//! server flushed after the manager saw the script still answers `NOSCRIPT` (or "Function not
//! found") with the wait behind it, which blocks for nothing the call wrote; the recovery's
//! wait then gets only what is left of the call's timeout (at least 1 ms), so a replicated
//! call waits about its timeout in all, whatever the cache held. With replicas that keep up,
//! the refused request's wait answers at once and the recovery's wait has nearly all of it.

use std::borrow::Cow;
use std::time::Instant;

use futures_util::future::Either;
use redis::aio::ConnectionLike;
use redis::{Cmd, RedisError, RedisResult, Value};
use tracing::instrument::Instrumented;
use tracing::Instrument;

use super::call::Call;
use super::errors::{is_function_missing, is_noscript, unsupported_or};
use super::functions::{lists, Library};
use super::registry::Script;
use super::replication::Replication;
use super::state::State;
use crate::error::{Error, Result};
use crate::telemetry::round_trip::{operation, RoundTrip, Server};
use crate::telemetry::script_metrics::{self, Operation, Reload};

/// Where a script lives on the server.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Route<'m> {
    /// The script cache: `EVALSHA` (`EVALSHA_RO`), recovered with `EVAL` (`EVAL_RO`).
    Script,
    /// A function of a Functions library: `FCALL` (`FCALL_RO` when `read_only`).
    Function {
        library: &'m Library,
        name: &'m str,
        read_only: bool,
    },
}

/// One call, ready to send: its command and, for a replicated call, the wait behind it.
#[derive(Clone, Debug)]
pub(crate) struct Request<'c> {
    script: &'c Script,
    route: Route<'c>,
    cmd: Cow<'c, Cmd>,
    wait: Option<Replication>,
}

impl<'c> Request<'c> {
    /// The script the request runs.
    pub(crate) fn script(&self) -> &'c Script {
        self.script
    }

    /// The command that runs the script (without the wait).
    pub(crate) fn cmd(&self) -> &Cmd {
        &self.cmd
    }

    /// `true` when `err` says the server lacks this request's script or function: the call did
    /// not run.
    pub(crate) fn is_missing(&self, err: &RedisError) -> bool {
        match self.route {
            Route::Script => is_noscript(err),
            Route::Function { .. } => is_function_missing(err),
        }
    }

    /// The same request as `EVAL` (`EVAL_RO`) with the script's source.
    fn as_eval(&self) -> Request<'c> {
        Request {
            script: self.script,
            route: Route::Script,
            cmd: Cow::Owned(Call::eval_from(self.script, &self.cmd)),
            wait: self.wait,
        }
    }

    /// The same request whose wait has only what is left of its budget, which a wait sent
    /// at `since` began to spend (the whole budget when no wait was sent yet).
    fn budgeted(&self, since: Option<Instant>) -> Request<'c> {
        Request {
            script: self.script,
            route: self.route,
            cmd: self.cmd.clone(),
            wait: match (self.wait, since) {
                (Some(wait), Some(since)) => Some(wait.after(since.elapsed())),
                (wait, _) => wait,
            },
        }
    }
}

/// What came back for a request.
#[derive(Debug)]
pub(crate) struct Answer {
    /// The script's reply, or the error for it (the server's, or the connection's).
    pub(crate) reply: RedisResult<Value>,
    /// The wait's reply, when a wait was sent and its pipeline answered.
    pub(crate) ack: Option<Value>,
}

/// A manager's view of the call path: its state, its Functions libraries, and the server its
/// spans name.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Path<'m> {
    state: &'m State,
    libraries: &'m [Library],
    server: Option<&'m Server>,
}

impl<'m> Path<'m> {
    pub(crate) fn new(
        state: &'m State,
        libraries: &'m [Library],
        server: Option<&'m Server>,
    ) -> Self {
        Self {
            state,
            libraries,
            server,
        }
    }

    /// The server the spans of this path's round trips name.
    pub(crate) fn server(&self) -> Option<&'m Server> {
        self.server
    }

    /// Where `script` runs: as a function of the first library that holds it, else as a
    /// script.
    pub(crate) fn route(&self, script: &Script) -> Route<'m> {
        self.libraries
            .iter()
            .find_map(|library| {
                library
                    .function_of(script)
                    .map(|(name, read_only)| Route::Function {
                        library,
                        name,
                        read_only,
                    })
            })
            .unwrap_or(Route::Script)
    }

    /// The one builder: `EVALSHA` / `EVALSHA_RO` / `FCALL` / `FCALL_RO` of `call`, with
    /// `wait`'s `WAIT` / `WAITAOF` behind it when given. The `EVALSHA` is the call's own
    /// command, borrowed: building it costs nothing.
    pub(crate) fn request<'c>(&self, call: &'c Call<'_>, wait: Option<Replication>) -> Request<'c>
    where
        'm: 'c,
    {
        let route = self.route(call.script());
        let cmd = match route {
            Route::Script => Cow::Borrowed(call.evalsha()),
            Route::Function {
                name, read_only, ..
            } => {
                let command = if read_only { "FCALL_RO" } else { "FCALL" };
                Cow::Owned(Call::resend_as(call.evalsha(), command, name))
            }
        };
        Request {
            script: call.script(),
            route,
            cmd,
            wait,
        }
    }

    /// Sends `req`, and recovers once when the server lacks its script (see the module
    /// documentation). Errors are only for what is no reply to the script: a wait's pipeline
    /// answered with the wrong number of replies (it may have run), or a library that could
    /// not be loaded after "Function not found" (the call did not run).
    pub(crate) async fn run<C: ConnectionLike>(
        &self,
        conn: &mut C,
        req: &Request<'_>,
    ) -> Result<Answer> {
        let watch = req.wait.is_some();
        // Boxed, like the recovery: the common call keeps a small future.
        if watch
            && !self.state.cached.contains(req.script.sha1())
            && Box::pin(present(conn, req, self.server)).await == Some(false)
        {
            return Box::pin(self.recover(conn, req, None)).await;
        }
        let sent = watch.then(Instant::now);
        let answer = send(conn, req, self.server).await?;
        match &answer.reply {
            Err(e) if req.is_missing(e) => Box::pin(self.recover(conn, req, sent)).await,
            Ok(_) if watch => {
                self.state.cached.insert(req.script.sha1());
                Ok(answer)
            }
            _ => Ok(answer),
        }
    }

    /// The one recovery of a request whose script or function the server lacks. `waited`:
    /// when the refused request's own wait was sent (it blocked for nothing the call wrote,
    /// and spent part of the call's budget): the recovery's wait gets what is left, so a
    /// replicated call waits about its timeout in all, whatever the cache held.
    async fn recover<C: ConnectionLike>(
        &self,
        conn: &mut C,
        req: &Request<'_>,
        waited: Option<Instant>,
    ) -> Result<Answer> {
        let Route::Function { library, .. } = req.route else {
            return self.eval_and_load(conn, req, waited).await;
        };
        self.state.cached.forget_all();
        self.reload_library(conn, req.script, library).await?;
        let answer = send(conn, &req.budgeted(waited), self.server).await?;
        if answer.reply.is_ok() {
            self.state.cached.insert(req.script.sha1());
        }
        Ok(answer)
    }

    /// `NOSCRIPT`: the request as `EVAL`, wait included; then `SCRIPT LOAD` unless another
    /// caller's load of the script is in flight. Counted in `noscript_fallbacks` (and the load
    /// in `fallback_loads`).
    async fn eval_and_load<C: ConnectionLike>(
        &self,
        conn: &mut C,
        req: &Request<'_>,
        waited: Option<Instant>,
    ) -> Result<Answer> {
        let script = req.script;
        State::bump(&self.state.noscript_fallbacks);
        script_metrics::reload(Reload::EvalFallback, script);
        self.state.cached.forget_all();
        tracing::debug!(script = script.id(), "NOSCRIPT: falling back to EVAL");
        let answer = send(conn, &req.budgeted(waited).as_eval(), self.server).await?;
        if answer.reply.is_err() {
            return Ok(answer);
        }
        let Some(_claim) = self.state.loading.claim(script.sha1()) else {
            return Ok(answer); // another caller's load is in flight
        };
        let trip = RoundTrip::call(Operation::Script, script, self.server);
        match traced(trip, query(conn, &script_load(script))).await {
            Ok(_) => {
                State::bump(&self.state.fallback_loads);
                script_metrics::reload(Reload::ScriptLoad, script);
                self.state.cached.insert(script.sha1());
            }
            Err(e) => {
                tracing::debug!(script = script.id(), error = %e, "SCRIPT LOAD after EVAL failed");
            }
        }
        Ok(answer)
    }

    /// `FUNCTION LOAD REPLACE` of `library` after `script`'s function was not found, counted
    /// in `function_reloads`.
    pub(crate) async fn reload_library<C: ConnectionLike>(
        &self,
        conn: &mut C,
        script: &Script,
        library: &Library,
    ) -> Result<()> {
        State::bump(&self.state.function_reloads);
        script_metrics::reload(Reload::FunctionLoad, script);
        tracing::debug!(
            script = script.id(),
            library = library.name(),
            "function not found: FUNCTION LOAD"
        );
        let trip = RoundTrip::call(Operation::Function, script, self.server);
        let loaded = in_span(trip.span(), load_library(conn, library)).await;
        match &loaded {
            Ok(()) => trip.finish(None),
            Err(Error::Redis(e)) => trip.finish(Some(e)),
            Err(_) => trip.finish_other(),
        }
        loaded
    }

    /// The loads that bring back the scripts of requests answered `NOSCRIPT` or "Function not
    /// found", each once, as commands (a batch sends them at the head of its re-run's
    /// transaction): `FUNCTION LOAD REPLACE` once per library (counted in `function_reloads`),
    /// `SCRIPT LOAD` once per script.
    pub(crate) fn reloads<'r>(&self, missing: impl Iterator<Item = &'r Request<'r>>) -> Vec<Cmd> {
        let mut libraries: Vec<&str> = Vec::new();
        let mut scripts: Vec<&str> = Vec::new();
        let mut cmds = Vec::new();
        for req in missing {
            match req.route {
                Route::Function { library, .. } if !libraries.contains(&library.name()) => {
                    libraries.push(library.name());
                    State::bump(&self.state.function_reloads);
                    script_metrics::reload(Reload::FunctionLoad, req.script);
                    cmds.push(library.load_cmd());
                }
                Route::Script if !scripts.contains(&req.script.sha1()) => {
                    if scripts.is_empty() {
                        self.state.cached.forget_all();
                    }
                    scripts.push(req.script.sha1());
                    script_metrics::reload(Reload::ScriptLoad, req.script);
                    cmds.push(script_load(req.script));
                }
                _ => {}
            }
        }
        cmds
    }

    /// Records that the server has `script` cached (after a `SCRIPT LOAD` of it).
    pub(crate) fn cached(&self, script: &Script) {
        self.state.cached.insert(script.sha1());
    }
}

/// Sends `req` in a span of its own ([`RoundTrip`]): its command alone, or in one pipeline
/// with its wait (errors kept per command: a refused wait must not hide that the script ran).
async fn send<C: ConnectionLike>(
    conn: &mut C,
    req: &Request<'_>,
    server: Option<&Server>,
) -> Result<Answer> {
    let trip = RoundTrip::call(operation(&req.cmd), req.script, server);
    let sent = in_span(trip.span(), send_untraced(conn, req)).await;
    match &sent {
        Ok(answer) => trip.finish(answer.reply.as_ref().err()),
        Err(Error::Redis(e)) => trip.finish(Some(e)),
        Err(_) => trip.finish_other(),
    }
    sent
}

/// Runs `fut` (one round trip) in `trip`'s span and records how it ended.
pub(crate) async fn traced<T, F>(trip: RoundTrip<'_>, fut: F) -> RedisResult<T>
where
    F: std::future::Future<Output = RedisResult<T>>,
{
    let out = in_span(trip.span(), fut).await;
    trip.finish(out.as_ref().err());
    out
}

async fn send_untraced<C: ConnectionLike>(conn: &mut C, req: &Request<'_>) -> Result<Answer> {
    let Some(wait) = &req.wait else {
        return Ok(Answer {
            reply: query(conn, &req.cmd).await,
            ack: None,
        });
    };
    // Boxed: only a replicated call sends a pipeline; every other call's future stays small.
    Box::pin(send_waiting(conn, req, wait)).await
}

/// [`send_untraced`] of a request with a wait: the command and the wait in one pipeline.
async fn send_waiting<C: ConnectionLike>(
    conn: &mut C,
    req: &Request<'_>,
    wait: &Replication,
) -> Result<Answer> {
    let pipe = wait.pipeline(req.cmd.clone().into_owned());
    let replies: Vec<Value> = match pipe.query_async(conn).await {
        Ok(replies) => replies,
        Err(e) => {
            return Ok(Answer {
                reply: Err(e),
                ack: None,
            })
        }
    };
    let Some((reply, ack)) = wait.split_replies(replies) else {
        return Err(Error::unexpected(
            req.script.id(),
            "script + WAIT: missing replies",
        ));
    };
    Ok(Answer {
        reply: reply.extract_error(),
        ack: Some(ack),
    })
}

/// One command's reply, a server error as `Err`.
async fn query<C: ConnectionLike>(conn: &mut C, cmd: &Cmd) -> RedisResult<Value> {
    conn.req_packed_command(cmd)
        .await
        .and_then(Value::extract_error)
}

/// Whether the server holds `req`'s script (`SCRIPT EXISTS <sha>`) or function (`FUNCTION
/// LIST LIBRARYNAME <library>` names it): `Some(held)`, or `None` when the server did not say
/// (an ACL user without `+script|exists` / `+function|list`, a lost connection): the call then
/// goes out as usual.
async fn present<C: ConnectionLike>(
    conn: &mut C,
    req: &Request<'_>,
    server: Option<&Server>,
) -> Option<bool> {
    let script = req.script;
    let reply = match req.route {
        Route::Script => {
            let mut cmd = redis::cmd("SCRIPT");
            cmd.arg("EXISTS").arg(script.sha1());
            let trip = RoundTrip::call(Operation::Script, script, server);
            traced(trip, cmd.query_async::<Vec<bool>>(conn))
                .await
                .map(|exists| exists.first().copied())
        }
        Route::Function { library, name, .. } => {
            let mut cmd = redis::cmd("FUNCTION");
            cmd.arg("LIST").arg("LIBRARYNAME").arg(library.name());
            let trip = RoundTrip::call(Operation::Function, script, server);
            traced(trip, cmd.query_async::<Value>(conn))
                .await
                .map(|listing| Some(lists(&listing, library.name(), name)))
        }
    };
    reply.unwrap_or_else(|e| {
        tracing::debug!(script = script.id(), error = %e, "presence not answered");
        None
    })
}

/// `SCRIPT LOAD <source>`.
pub(crate) fn script_load(script: &Script) -> Cmd {
    let mut load = redis::cmd("SCRIPT");
    load.arg("LOAD").arg(script.source());
    load
}

/// `FUNCTION LOAD REPLACE` of one library (on a Cluster connection: every primary).
pub(crate) async fn load_library<C: ConnectionLike>(conn: &mut C, library: &Library) -> Result<()> {
    library
        .load_cmd()
        .query_async::<Value>(conn)
        .await
        .map(drop)
        .map_err(unsupported_or)
}

/// Runs `fut` inside `span`; bare when no subscriber wants the span (no span entered and
/// left on every poll of every call).
///
/// A plain function returning either future, not an `async fn` awaiting one of them: an
/// `async fn` keeps its argument `fut` beside the future it awaits, so each level of spans
/// doubled the size of the call's future (a lock release's was 2.6 KB, moved and copied on
/// every call).
pub(crate) fn in_span<F: std::future::Future>(
    span: tracing::Span,
    fut: F,
) -> Either<F, Instrumented<F>> {
    if span.is_disabled() {
        Either::Left(fut)
    } else {
        Either::Right(fut.instrument(span))
    }
}
