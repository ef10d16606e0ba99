//! [`ScriptManager`]: its configuration (backend, libraries), its counters, preload, and the
//! single and replicated calls, all sent through the one call path ([`super::path`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use redis::aio::ConnectionLike;
use redis::{FromRedisValue, Value};

use super::aof_support;
use super::call::Call;
use super::capabilities::{Capabilities, Native};
use super::errors::{check_sha, function_error, unsupported_or};
use super::functions::{Backend, Library};
use super::path::{in_span, load_library, script_load, Path};
use super::recheck::RecheckInterval;
use super::registry::{Registry, Script};
use super::replication::{Acked, Replicated, Replication};
use super::state::State;
use crate::error::{Error, Result};
use crate::telemetry::round_trip::Server;

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
/// manager.preload(&mut conn).await?; // optional: SCRIPT LOAD every embedded script up front
///
/// let script = Registry::global().require("fixed_window", 9)?;
/// let mut call = Call::new(script);
/// call.key("rk:{demo}:fw").arg(10).arg(60_000).arg(1);
/// let reply: redis::Value = manager.invoke(&mut conn, &call).await?;
/// # let _ = reply; Ok(()) }
/// ```
#[derive(Clone, Debug, Default)]
pub struct ScriptManager {
    state: Arc<State>,
    /// `Some` with the [`Backend::Functions`]: redkit's library, then the user's.
    libraries: Option<Arc<[Library]>>,
    /// The server the spans name (`server.address`, `server.port`), when told.
    server: Option<Server>,
}

/// A snapshot of a [`ScriptManager`]'s counters.
///
/// ```
/// use redkit::{ScriptManager, Stats};
/// let manager = ScriptManager::new();
/// let clone = manager.clone(); // clones share their counters
/// assert_eq!(clone.stats(), Stats::default());
/// let s = manager.stats();
/// println!("{} EVAL fallbacks, {} batch re-runs", s.noscript_fallbacks, s.batch_reruns);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Single calls (replicated ones included) that were answered `NOSCRIPT` and re-sent as
    /// `EVAL`; and replicated calls sent as `EVAL` at once because `SCRIPT EXISTS` said the
    /// script is missing (see [`replicated`](ScriptManager::replicated)).
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
    ///
    /// ```
    /// use redkit::{script::Backend, ScriptManager, Stats};
    /// let manager = ScriptManager::new();
    /// assert_eq!(manager.stats(), Stats::default());
    /// assert_eq!(manager.backend(), Backend::Scripts); // EVALSHA, EVAL on NOSCRIPT
    /// ```
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
    ///
    /// ```
    /// use redkit::{script::Backend, ScriptManager};
    /// let manager = ScriptManager::new();
    /// assert_eq!(manager.backend(), Backend::Scripts);
    /// let functions = manager.with_backend(Backend::Functions);
    /// assert_eq!(functions.backend(), Backend::Functions);
    /// ```
    pub fn backend(&self) -> Backend {
        if self.libraries.is_some() {
            Backend::Functions
        } else {
            Backend::Scripts
        }
    }

    /// Names the server in the span of every round trip of this manager (`server.address`,
    /// `server.port`; see the README's "Metrics and traces"), from a connection address:
    /// host and port, or a Unix socket's path. An address holds no credentials, so none can
    /// reach a trace. Clones made before this call keep their own setting.
    ///
    /// ```
    /// let client = redis::Client::open("redis://user:secret@cache.internal:6380/")?;
    /// let manager = redkit::ScriptManager::new().with_server_address(client.get_connection_info().addr());
    /// assert!(!format!("{manager:?}").contains("secret"));
    /// # Ok::<(), redis::RedisError>(())
    /// ```
    pub fn with_server_address(mut self, addr: &redis::ConnectionAddr) -> Self {
        self.server = Some(Server::of(addr));
        self
    }

    /// How long what [`capabilities`](Self::capabilities) found stands before the next call
    /// that needs it probes again (default one minute, [`RecheckInterval::DEFAULT`]; on a
    /// Cluster the primaries are asked again only when `CLUSTER SLOTS` shows another layout).
    /// Shorter during a rolling upgrade to use a command as soon as the last node has it.
    /// Applies to this manager and its clones. Cannot fail: [`RecheckInterval::new`] refuses
    /// zero.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::script::RecheckInterval;
    /// let every = RecheckInterval::new(Duration::from_secs(5))?;
    /// let manager = redkit::ScriptManager::new().with_capabilities_recheck(every);
    /// # let _ = manager;
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn with_capabilities_recheck(self, every: RecheckInterval) -> Self {
        self.state.native.recheck_after(every.get());
        self
    }

    /// The call path with this manager's state, libraries and server.
    pub(crate) fn path(&self) -> Path<'_> {
        Path::new(
            &self.state,
            self.libraries.as_deref().unwrap_or_default(),
            self.server.as_ref(),
        )
    }

    /// The counters, for metrics and tests.
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use redkit::{Call, Registry, ScriptManager};
    /// let manager = ScriptManager::new();
    /// manager.preload(&mut conn).await?;
    /// let script = Registry::global().require("fixed_window", 9)?;
    /// let mut call = Call::new(script);
    /// call.key("rk:{demo}:fw").arg(10).arg(60_000).arg(1);
    /// let _: redis::Value = manager.invoke(&mut conn, &call).await?;
    /// // Preloaded, so EVALSHA found the script: no EVAL fallback was needed.
    /// assert_eq!(manager.stats().noscript_fallbacks, 0);
    /// # Ok(()) }
    /// ```
    pub fn stats(&self) -> Stats {
        Stats {
            noscript_fallbacks: self.state.noscript_fallbacks.load(Ordering::Relaxed),
            batch_reruns: self.state.batch_reruns.load(Ordering::Relaxed),
            function_reloads: self.state.function_reloads.load(Ordering::Relaxed),
            fallback_loads: self.state.fallback_loads.load(Ordering::Relaxed),
        }
    }

    /// The native commands the server offers in place of a script ([`Capabilities`]): probed
    /// on the first call that needs to know (this one, or the first release or renewal of a
    /// plain [`Lock`](crate::lock::Lock)) with `CLUSTER SLOTS` (an error: not a Cluster),
    /// `COMMAND INFO DELIFEQ` and `COMMAND DOCS SET` (three round trips), then cached for
    /// this manager and its clones.
    ///
    /// A belief, re-checked when wrong: a native command answered "unknown command" or
    /// "syntax error" (the server was replaced by an older one, the command renamed away)
    /// never reaches the caller: that call runs its script instead, and the next call probes
    /// again. A native command the ACL refuses (`NOPERM`) is not sent again by this manager
    /// (the call runs its script, which answers the typed error if it is refused too). On a
    /// Cluster connection the probe asks every primary (the commands themselves, on a key of
    /// each primary's slots that nothing else uses; nothing is deleted or created) and a
    /// command is used only when every primary offers it: a Cluster half-way through an
    /// upgrade keeps its scripts. A probe older than a minute
    /// ([`with_capabilities_recheck`](Self::with_capabilities_recheck)) is redone by the next
    /// call that needs it (a primary upgraded or added since).
    ///
    /// Fails only when the probe could not be sent or answered (connection, timeout); nothing
    /// is cached then. A user without `+command` in its ACL gets no capabilities (scripts).
    ///
    /// ```no_run
    /// # async fn run() -> redkit::Result<()> {
    /// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
    /// let mut conn = client.get_multiplexed_async_connection().await?;
    /// let manager = redkit::ScriptManager::new();
    /// let found = manager.capabilities(&mut conn).await?;
    /// if found.delifeq {
    ///     println!("plain locks release with DELIFEQ, no script");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn capabilities<C: ConnectionLike>(&self, conn: &mut C) -> Result<Capabilities> {
        self.state.native.capabilities(conn).await
    }

    /// `true` when `command` may be sent in place of a script now (probing first when
    /// nothing is known; see [`capabilities`](Self::capabilities)).
    pub(crate) async fn native_usable<C: ConnectionLike>(
        &self,
        conn: &mut C,
        command: Native,
    ) -> bool {
        self.state.native.usable(conn, command).await
    }

    /// `true` when a native command's error means it did not run and its call must run the
    /// script instead (recorded: a re-probe, or the command no longer used).
    pub(crate) fn native_falls_back(&self, command: Native, err: &redis::RedisError) -> bool {
        self.state.native.falls_back(command, err)
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
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use redkit::{Registry, ScriptManager};
    /// let manager = ScriptManager::new();
    /// let loaded = manager.preload(&mut conn).await?;
    /// assert_eq!(loaded, Registry::global().scripts().len());
    /// # Ok(()) }
    /// ```
    pub async fn preload<C: ConnectionLike>(&self, conn: &mut C) -> Result<usize> {
        let loaded = self
            .preload_scripts(conn, Registry::global().scripts())
            .await?;
        for library in self.libraries.as_deref().unwrap_or_default() {
            load_library(conn, library).await?;
        }
        Ok(loaded)
    }

    /// `SCRIPT LOAD` of the given scripts, checking each returned SHA1.
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use redkit::{Registry, ScriptManager};
    /// let mine = Registry::from_files([
    ///     ("hello.v1.lua", "--! keys: 1\nreturn 'hello ' .. KEYS[1]"),
    ///     ("bye.v1.lua", "--! keys: 1\nreturn 'bye ' .. KEYS[1]"),
    /// ]);
    /// let loaded = ScriptManager::new().preload_scripts(&mut conn, mine.scripts()).await?;
    /// assert_eq!(loaded, 2);
    /// # Ok(()) }
    /// ```
    pub async fn preload_scripts<C: ConnectionLike>(
        &self,
        conn: &mut C,
        scripts: &[Script],
    ) -> Result<usize> {
        for script in scripts {
            let sha: String = script_load(script)
                .query_async(conn)
                .await
                .map_err(unsupported_or)?;
            check_sha(script, &sha)?;
            self.path().cached(script);
        }
        Ok(scripts.len())
    }

    /// Runs one call: `EVALSHA`; on `NOSCRIPT`, `EVAL` with the full source (which caches the
    /// script again). At most one fallback per call; every other error is returned typed.
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use redkit::{Call, Script, ScriptManager};
    /// let script = Script::new("incr_by", 1, 1, "return redis.call('INCRBY', KEYS[1], ARGV[1])")?;
    /// let manager = ScriptManager::new();
    /// let mut call = Call::new(&script);
    /// call.key("visits").arg(5);
    /// let total: i64 = manager.invoke(&mut conn, &call).await?;
    /// assert!(total >= 5);
    /// # Ok(()) }
    /// ```
    pub async fn invoke<T, C>(&self, conn: &mut C, call: &Call<'_>) -> Result<T>
    where
        T: FromRedisValue,
        C: ConnectionLike,
    {
        self.invoke_waiting(conn, call, None)
            .await
            .map(|(outcome, _)| outcome)
    }

    /// This manager's calls followed by `WAIT` for `wait` (or `WAITAOF`), both in one pipeline
    /// (one round trip) on the node that ran the script (on a Cluster connection the pipeline is
    /// routed by the call's first key): [`Replicated::invoke`] answers the outcome with how many
    /// replicas have the write. On `NOSCRIPT` the pair is sent once more with `EVAL`, and the
    /// script is loaded again like after a single call's fallback. A script the manager has not
    /// seen cached since the last `NOSCRIPT` is asked for with `SCRIPT EXISTS` first, so a cold
    /// cache costs one wait, not two; a script flushed after the manager saw it is found
    /// missing only by the `EVALSHA`, whose wait blocks for nothing, and the recovery's wait
    /// then has what is left of the timeout: a call waits about `wait.timeout()` in all,
    /// whatever the cache held. A script error is returned as the typed error (the script
    /// wrote nothing).
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
    /// let script = Registry::global().require("fixed_window", 9)?;
    /// let mut call = Call::new(script);
    /// call.key("rk:{demo}:fw").arg(10).arg(60_000).arg(1);
    /// let wait = Replication::new(1, Duration::from_millis(100))?;
    /// let acked = ScriptManager::new()
    ///     .replicated(wait)
    ///     .invoke::<redis::Value, _>(&mut conn, &call)
    ///     .await?;
    /// if !acked.is_replicated() { /* applied on the primary only: could be lost in a failover */ }
    /// # Ok(()) }
    /// ```
    pub fn replicated(&self, wait: Replication) -> Replicated<'_, ScriptManager> {
        Replicated::new(self, wait)
    }

    /// The one call path of a single call: checked, sent (with `replication`'s wait behind it
    /// when given), recovered once, decoded. The outcome, and the acknowledgement (`None` when
    /// no wait was sent).
    pub(crate) async fn invoke_waiting<T, C>(
        &self,
        conn: &mut C,
        call: &Call<'_>,
        replication: Option<Replication>,
    ) -> Result<(T, Option<Acked<()>>)>
    where
        T: FromRedisValue,
        C: ConnectionLike,
    {
        call.validate()?;
        if let Some(r) = &replication {
            // Boxed: only a replicated call checks; every other call's future stays small.
            Box::pin(self.check_wait(conn, r)).await?;
        }
        let script = call.script();
        let span = tracing::debug_span!(
            "redkit.invoke",
            script = script.name(),
            version = script.version(),
            wait = tracing::field::Empty
        );
        if let Some(r) = &replication {
            span.record("wait", r.replicas());
        }
        let call = async {
            let path = self.path();
            let answer = path.run(conn, &path.request(call, replication)).await?;
            let value = answer.reply.map_err(|e| function_error(script, e))?;
            let outcome = T::from_redis_value(value)
                .map_err(|e| Error::unexpected(script.id(), e.to_string()))?;
            let ack = replication.map(|r| r.acked((), &answer.ack.unwrap_or(Value::Nil)));
            Ok((outcome, ack))
        };
        in_span(span, call).await
    }

    /// Checks `replication` before a write (see [`aof_support::check_wait`]).
    pub(crate) async fn check_wait<C: ConnectionLike>(
        &self,
        conn: &mut C,
        replication: &Replication,
    ) -> Result<()> {
        aof_support::check_wait(&self.state.aof, conn, replication).await
    }

    pub(crate) fn count_batch_reruns(&self, calls: usize) {
        self.state
            .batch_reruns
            .fetch_add(calls as u64, Ordering::Relaxed);
    }
}

impl Replicated<'_, ScriptManager> {
    /// [`ScriptManager::invoke`], then the wait: the outcome with how many replicas
    /// acknowledged the write (see [`ScriptManager::replicated`]).
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use std::time::Duration;
    /// use redkit::script::Replication;
    /// use redkit::{Call, Script, ScriptManager};
    /// let script = Script::new("incr_by", 1, 1, "return redis.call('INCRBY', KEYS[1], ARGV[1])")?;
    /// let mut call = Call::new(&script);
    /// call.key("visits").arg(5);
    /// let wait = Replication::new(1, Duration::from_millis(100))?;
    /// let acked = ScriptManager::new().replicated(wait).invoke::<i64, _>(&mut conn, &call).await?;
    /// println!("{} on {} of {} replicas", acked.outcome, acked.replicas, acked.requested);
    /// # Ok(()) }
    /// ```
    pub async fn invoke<T, C>(self, conn: &mut C, call: &Call<'_>) -> Result<Acked<T>>
    where
        T: FromRedisValue,
        C: ConnectionLike,
    {
        let wait = self.wait();
        let (outcome, ack) = self.of().invoke_waiting(conn, call, Some(wait)).await?;
        let ack = ack.unwrap_or_else(|| Acked::new((), 0, wait.replicas()));
        Ok(ack.map(|()| outcome))
    }
}
