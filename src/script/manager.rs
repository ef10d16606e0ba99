//! [`ScriptManager`]: EVALSHA in the steady state, EVAL once on NOSCRIPT, batches, preload.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use redis::aio::ConnectionLike;
use redis::{FromRedisValue, RedisError, ServerErrorKind, Value};
use tracing::Instrument;

use super::call::Call;
use super::functions::{self, Backend, Library};
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
    /// `Some` with the [`Backend::Functions`]: redkit's library, then the user's.
    libraries: Option<Arc<[Library]>>,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) noscript_fallbacks: AtomicU64,
    pub(crate) batch_reruns: AtomicU64,
    pub(crate) function_reloads: AtomicU64,
    pub(crate) fallback_loads: AtomicU64,
    pub(crate) loading: super::fallback::Loading,
    pub(crate) aof: super::aof_support::AofSupport,
}

/// A snapshot of a [`ScriptManager`]'s counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Single calls that were answered `NOSCRIPT` and re-sent as `EVAL`.
    pub noscript_fallbacks: u64,
    /// Calls of batches that were answered `NOSCRIPT` and re-run after `SCRIPT LOAD`.
    pub batch_reruns: u64,
    /// Calls answered "Function not found" (the [`Backend::Functions`]) that loaded their
    /// library with `FUNCTION LOAD REPLACE` and were sent again.
    pub function_reloads: u64,
    /// `SCRIPT LOAD`s sent after an `EVAL` fallback and accepted: one per script per burst of
    /// fallbacks (Redis 8 may evict a script cached only by `EVAL`, never a loaded one).
    pub fallback_loads: u64,
}

impl ScriptManager {
    /// A manager with zeroed counters.
    pub fn new() -> Self {
        Self::default()
    }

    /// Chooses how scripts run (default [`Backend::Scripts`]). With
    /// [`Backend::Functions`], every script of redkit's own set (and of the sets added with
    /// [`with_library`](Self::with_library)) is called as a function of its [`Library`]; a
    /// script outside every library (e.g. one built with [`Script::new`]) still runs as
    /// `EVALSHA`. Batches ([`invoke_batch`](Self::invoke_batch)) follow the same rule, call by
    /// call.
    ///
    /// ```
    /// use redkit::script::Backend;
    /// let manager = redkit::ScriptManager::new().with_backend(Backend::Functions);
    /// assert_eq!(manager.backend(), Backend::Functions);
    /// assert_eq!(redkit::ScriptManager::new().backend(), Backend::Scripts);
    /// ```
    pub fn with_backend(mut self, backend: Backend) -> Self {
        self.libraries = match backend {
            Backend::Functions => Some(
                self.libraries
                    .take()
                    .unwrap_or_else(|| Arc::from([Library::redkit().clone()])),
            ),
            _ => None,
        };
        self
    }

    /// Adds your own script set as a Functions library and selects [`Backend::Functions`].
    /// Its scripts are then called as `FCALL <library>_<name>_v<N>`.
    ///
    /// ```
    /// let set = redkit::Registry::from_files([("hi.v1.lua", "--! keys: 1\nreturn KEYS[1]")]);
    /// let library = redkit::script::Library::new("myapp", &set)?;
    /// let manager = redkit::ScriptManager::new().with_library(library);
    /// assert_eq!(manager.backend(), redkit::script::Backend::Functions);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn with_library(self, library: Library) -> Self {
        let mut this = self.with_backend(Backend::Functions);
        let mut all: Vec<Library> = this.libraries.as_deref().unwrap_or_default().to_vec();
        all.push(library);
        this.libraries = Some(all.into());
        this
    }

    /// The backend this manager uses.
    pub fn backend(&self) -> Backend {
        if self.libraries.is_some() {
            Backend::Functions
        } else {
            Backend::Scripts
        }
    }

    /// The library and function that run `script`, with the Functions backend.
    pub(crate) fn function_for(&self, script: &Script) -> Option<(&Library, &str, bool)> {
        self.libraries.as_deref()?.iter().find_map(|lib| {
            lib.function_of(script)
                .map(|(function, read_only)| (lib, function, read_only))
        })
    }

    pub(crate) fn counters(&self) -> &Counters {
        &self.stats
    }

    /// The counters, for metrics and tests.
    pub fn stats(&self) -> Stats {
        Stats {
            noscript_fallbacks: self.stats.noscript_fallbacks.load(Ordering::Relaxed),
            batch_reruns: self.stats.batch_reruns.load(Ordering::Relaxed),
            function_reloads: self.stats.function_reloads.load(Ordering::Relaxed),
            fallback_loads: self.stats.fallback_loads.load(Ordering::Relaxed),
        }
    }

    /// `SCRIPT LOAD` of every embedded script, checking that each SHA1 the server returns
    /// equals the local one; with the [`Backend::Functions`], also `FUNCTION LOAD REPLACE` of
    /// every library of the manager. Idempotent. Returns how many scripts were loaded.
    ///
    /// On a Cluster connection redis-rs sends both to **every primary, not to replicas**
    /// (measured: 3 primaries warm, 3 replicas cold). Functions libraries then reach the
    /// replicas by replication, so a promoted replica serves them at once; the script cache
    /// does not replicate, so a promoted replica starts cold (one `EVAL` per script on first
    /// use). To load scripts on every node, replicas included, use
    /// [`Admin::load`](crate::script::admin::Admin::load) (`redkit scripts load`).
    pub async fn preload<C: ConnectionLike>(&self, conn: &mut C) -> Result<usize> {
        let loaded = self
            .preload_scripts(conn, Registry::global().scripts())
            .await?;
        for library in self.libraries.as_deref().unwrap_or_default() {
            self.load_library(conn, library).await?;
        }
        Ok(loaded)
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
        let call = async {
            // The Functions backend and the NOSCRIPT fallback are boxed: the common EVALSHA
            // call keeps a small future (it is moved on every await of the layers above).
            if let Some(function) = self.function_for(script) {
                let value = Box::pin(self.fcall(conn, call, function)).await?;
                return T::from_redis_value(value)
                    .map_err(|e| Error::unexpected(script.id(), e.to_string()));
            }
            let value = match call.evalsha().query_async::<Value>(conn).await {
                Ok(value) => value,
                Err(err) if is_noscript(&err) => {
                    Box::pin(self.eval_fallback(conn, script, call.evalsha()))
                        .await
                        .map_err(|e| script_error(script, e))?
                }
                Err(err) => return Err(script_error(script, err)),
            };
            T::from_redis_value(value).map_err(|e| Error::unexpected(script.id(), e.to_string()))
        };
        in_span(span, call).await
    }
}

/// Runs `fut` inside `span`; bare when no subscriber wants the span (no span entered and
/// left on every poll of every call).
pub(crate) async fn in_span<F: std::future::Future>(span: tracing::Span, fut: F) -> F::Output {
    if span.is_disabled() {
        fut.await
    } else {
        fut.instrument(span).await
    }
}

impl ScriptManager {
    /// `FCALL` (`FCALL_RO`) of `call`; on "Function not found", `FUNCTION LOAD REPLACE` of the
    /// library and one more `FCALL`.
    async fn fcall<C: ConnectionLike>(
        &self,
        conn: &mut C,
        call: &Call<'_>,
        (library, function, read_only): (&Library, &str, bool),
    ) -> Result<Value> {
        let script = call.script();
        let cmd = fcall_cmd(call, function, read_only);
        match cmd.query_async::<Value>(conn).await {
            Ok(value) => Ok(value),
            Err(err) if functions::is_function_missing(&err) => {
                self.reload_library(conn, script, library).await?;
                cmd.query_async::<Value>(conn)
                    .await
                    .map_err(|e| function_error(script, e))
            }
            Err(err) => Err(function_error(script, err)),
        }
    }

    /// [`load_library`](Self::load_library) after `script`'s function was not found,
    /// counted in `function_reloads`.
    pub(crate) async fn reload_library<C: ConnectionLike>(
        &self,
        conn: &mut C,
        script: &Script,
        library: &Library,
    ) -> Result<()> {
        self.stats.function_reloads.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            script = script.id(),
            library = library.name(),
            "function not found: FUNCTION LOAD"
        );
        self.load_library(conn, library).await
    }

    /// `FUNCTION LOAD REPLACE` of one library (on a Cluster connection: every primary).
    pub(crate) async fn load_library<C: ConnectionLike>(
        &self,
        conn: &mut C,
        library: &Library,
    ) -> Result<()> {
        library
            .load_cmd()
            .query_async::<Value>(conn)
            .await
            .map(drop)
            .map_err(functions::unsupported_or)
    }
}

/// `FCALL <function> <numkeys> keys.. args..` (`FCALL_RO` for a read-only script).
pub(crate) fn fcall_cmd(call: &Call<'_>, function: &str, read_only: bool) -> redis::Cmd {
    let command = if read_only { "FCALL_RO" } else { "FCALL" };
    Call::resend_as(call.evalsha(), command, function)
}

/// [`script_error`], and [`Error::Unsupported`] for a server without Functions.
pub(crate) fn function_error(script: &Script, err: RedisError) -> Error {
    if functions::is_unsupported(&err) {
        functions::unsupported_or(err)
    } else {
        script_error(script, err)
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
