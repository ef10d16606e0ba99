//! A Redis Cluster connection with a bounded call time that never re-sends a request that may
//! have run, and that finds a promoted replica after a primary hangs.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, ErrorKind, IntoConnectionInfo, Pipeline, RedisError, RedisFuture, RedisResult};
use redis::{ServerErrorKind, Value};

use super::slots::{layout_of, nodes_of, slot_ranges};
use super::Timeouts;
use crate::Result;

/// Pause before following `TRYAGAIN` / `CLUSTERDOWN` / `MASTERDOWN` / `LOADING` again.
const WAIT_AND_RETRY: Duration = Duration::from_millis(50);
/// Pause per repeated `MOVED`/`READONLY` (times the number of redirects so far).
const REDIRECT_BACKOFF: Duration = Duration::from_millis(5);
/// Most redirects followed by one call.
const MAX_REDIRECTS: u32 = 16;

/// A `ClusterClientBuilder` for [`Cluster`]: connect and response timeouts set, the overall
/// request time bounded by [`Timeouts::call_bound`], and **`retries(0)`**: redis-rs then never
/// re-sends a request by itself (its retries also re-send after a response timeout or a dropped
/// connection, when the first copy may have run). Add credentials or TLS to it, then pass the
/// built client to [`Cluster::new`].
///
/// ```
/// use redkit::connect::{self, Timeouts};
/// let client = connect::cluster_builder(["redis://127.0.0.1:7000/"], Timeouts::default())
///     .password("secret")
///     .build()?;
/// # let _ = client;
/// # Ok::<(), redis::RedisError>(())
/// ```
pub fn cluster_builder<T: IntoConnectionInfo>(
    nodes: impl IntoIterator<Item = T>,
    timeouts: Timeouts,
) -> ClusterClientBuilder {
    ClusterClientBuilder::new(nodes)
        .connection_timeout(timeouts.connect())
        .response_timeout(timeouts.response())
        .overall_response_timeout(Some(timeouts.call_bound()))
        .retries(0)
}

/// Connects a [`Cluster`] to these seed nodes with [`cluster_builder`].
///
/// ```no_run
/// # async fn run() -> redkit::Result<()> {
/// use redkit::connect::{self, Timeouts};
/// let mut conn = connect::cluster(["redis://127.0.0.1:7000/"], Timeouts::default()).await?;
/// let _: () = redis::cmd("SET").arg("k").arg(1).query_async(&mut conn).await?;
/// # Ok(()) }
/// ```
pub async fn cluster<T: IntoConnectionInfo>(
    nodes: impl IntoIterator<Item = T>,
    timeouts: Timeouts,
) -> Result<Cluster> {
    let client = cluster_builder(nodes, timeouts).build()?;
    Cluster::new(client, timeouts).await
}

/// A Redis Cluster connection (a `redis::aio::ConnectionLike`, cheap to clone) over redis-rs's
/// `ClusterConnection` built by [`cluster_builder`], that:
///
/// - returns every call within [`Timeouts::call_bound`] (plus scheduling);
/// - never re-sends a request that may have reached a server: a response timeout or a dropped
///   connection is returned to the caller as an error (the request may or may not have run; only
///   an idempotent call, e.g. with a request id or an owner token, may be retried blindly);
/// - follows, within that bound, the replies that mean a single command did **not** run:
///   `MOVED`, `ASK` (with `ASKING`), `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, `LOADING`,
///   `READONLY`. A pipeline is never re-sent (some of its commands may have run);
/// - after a timeout, a connection error, an error redis-rs made up itself (no connection for
///   the slot, a failed slot refresh) or redirects beyond the bound, rebuilds its slot map from
///   the seed nodes in the background (one rebuild at a time), so calls reach a replica the
///   cluster promoted in place of a hung primary; redis-rs alone keeps routing to the hung node.
///   A server's reply to the command (a script error, `NOSCRIPT`, `BUSY`, ...) never does;
/// - watches the layout while it is held, busy or idle: every [`Timeouts::call_bound`] one
///   node is asked `CLUSTER SLOTS`, and a layout that changed (a failover, a slot moved, a
///   node added) rebuilds the slot map in the background (once more at the next read, and at
///   every read until a rebuild succeeds), so a connection left idle through a failover finds
///   the promoted replica before its next call, not by timing out on the old primary. The
///   watch ends when the last clone is dropped. It asks the nodes in turn, so a hung node
///   delays it by one period at most.
///
/// ```no_run
/// # async fn run() -> redkit::Result<()> {
/// use redkit::connect::{Cluster, Timeouts, cluster_builder};
/// let timeouts = Timeouts::default();
/// let client = cluster_builder(["redis://127.0.0.1:7000/"], timeouts).build()?;
/// let conn = Cluster::new(client, timeouts).await?;
/// # let _ = conn;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

struct Inner {
    client: ClusterClient,
    timeouts: Timeouts,
    state: Mutex<State>,
    /// The fingerprint of the layout the slot map is known to follow: the watch's first
    /// `CLUSTER SLOTS`, then the layout each successful rebuild the watch asked for was asked
    /// for (0: none read yet).
    layout: AtomicU64,
}

struct State {
    conn: ClusterConnection,
    generation: u64,
    rebuilding: bool,
    rebuilds: u64,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The client is not printed: its connection info may hold a password.
        f.debug_struct("Cluster")
            .field("timeouts", &self.inner.timeouts)
            .field("rebuilds", &self.rebuilds())
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// Connects through `client`, which should come from [`cluster_builder`] with the same
    /// `timeouts` (a client with redis-rs's default retries re-sends requests by itself).
    ///
    /// ```no_run
    /// # async fn run() -> redkit::Result<()> {
    /// use redkit::connect::{Cluster, Timeouts, cluster_builder};
    /// let t = Timeouts::default();
    /// let conn = Cluster::new(cluster_builder(["redis://127.0.0.1:7000/"], t).build()?, t).await?;
    /// # let _ = conn;
    /// # Ok(()) }
    /// ```
    pub async fn new(client: ClusterClient, timeouts: Timeouts) -> Result<Self> {
        let conn = bounded(timeouts, client.get_async_connection()).await?;
        let this = Self {
            inner: Arc::new(Inner {
                client,
                timeouts,
                state: Mutex::new(State {
                    conn,
                    generation: 0,
                    rebuilding: false,
                    rebuilds: 0,
                }),
                layout: AtomicU64::new(0),
            }),
        };
        // Outside a tokio runtime (another executor) there is no watch: rebuilds after
        // timeouts still apply.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(watch(Arc::downgrade(&this.inner)));
        }
        Ok(this)
    }

    /// How many times the slot map was rebuilt after a timeout or connection error.
    ///
    /// ```no_run
    /// # async fn run(conn: redkit::connect::Cluster) {
    /// println!("{} rebuilds", conn.rebuilds());
    /// # }
    /// ```
    pub fn rebuilds(&self) -> u64 {
        self.lock().rebuilds
    }

    /// The timeouts this connection was built with.
    ///
    /// ```no_run
    /// # async fn run(conn: redkit::connect::Cluster) {
    /// let bound = conn.timeouts().call_bound();
    /// # let _ = bound;
    /// # }
    /// ```
    pub fn timeouts(&self) -> Timeouts {
        self.inner.timeouts
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave State inconsistent: recover.
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The current cluster connection (what a scan routes its per-node commands through).
    pub(super) fn connection(&self) -> ClusterConnection {
        self.current().0
    }

    fn current(&self) -> (ClusterConnection, u64) {
        let state = self.lock();
        (state.conn.clone(), state.generation)
    }

    /// Starts one background rebuild unless one is running or a newer connection exists.
    /// `layout`: the layout the watch read, recorded as the slot map's once the rebuild
    /// succeeded (so a rebuild that failed, or was not started, is asked again at the watch's
    /// next read).
    fn rebuild(&self, seen: u64, layout: Option<u64>) {
        {
            let mut state = self.lock();
            if state.generation != seen || state.rebuilding {
                return;
            }
            state.rebuilding = true;
        }
        let this = self.clone();
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            self.lock().rebuilding = false;
            return;
        };
        handle.spawn(async move {
            // Discovery may wait for one connect timeout (a hung seed) and then query slots.
            let bound = this.inner.timeouts.call_bound();
            let fresh = match tokio::time::timeout(
                bound.saturating_add(bound),
                this.inner.client.get_async_connection(),
            )
            .await
            {
                Ok(result) => result,
                Err(_) => Err(io_error(
                    io::ErrorKind::TimedOut,
                    "redkit rebuild bound exceeded",
                )),
            };
            let mut state = this.lock();
            state.rebuilding = false;
            if let Ok(conn) = fresh {
                state.conn = conn;
                state.generation = state.generation.wrapping_add(1);
                state.rebuilds = state.rebuilds.saturating_add(1);
                if let Some(layout) = layout {
                    this.inner.layout.store(layout, Ordering::Release);
                }
                tracing::debug!(
                    rebuilds = state.rebuilds,
                    "redkit.connect: cluster slot map rebuilt"
                );
            }
        });
    }

    async fn command(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        let deadline = Instant::now().checked_add(self.inner.timeouts.call_bound());
        let mut ask: Option<(String, u16)> = None;
        let mut redirects = 0u32;
        loop {
            let (mut conn, generation) = self.current();
            let left = remaining(deadline);
            let attempt = async {
                match ask.take() {
                    Some((host, port)) => {
                        let mut pipe = Pipeline::new();
                        pipe.cmd("ASKING").add_command(cmd.clone());
                        let route = SingleNodeRoutingInfo::ByAddress { host, port };
                        let mut values = conn.route_pipeline(pipe, 1, 1, route).await?;
                        values
                            .pop()
                            .ok_or_else(|| io_error(io::ErrorKind::InvalidData, "empty reply"))
                    }
                    None => conn.req_packed_command(cmd).await,
                }
            };
            let result = match tokio::time::timeout(left, attempt).await {
                Ok(result) => result,
                Err(_) => Err(io_error(
                    io::ErrorKind::TimedOut,
                    "redkit call bound exceeded",
                )),
            };
            let err = match result {
                Ok(value) => return Ok(value),
                Err(err) => err,
            };
            match did_not_run(&err) {
                Some(follow) if redirects < MAX_REDIRECTS && !remaining(deadline).is_zero() => {
                    redirects = redirects.saturating_add(1);
                    match follow {
                        Follow::Ask => ask = err.redirect_node().and_then(parse_node),
                        Follow::Wait => {
                            tokio::time::sleep(WAIT_AND_RETRY.min(remaining(deadline))).await;
                        }
                        // The slot refresh redis-rs started may still read a stale map
                        // from a node that has not learned the change: back off a little.
                        Follow::Now if redirects > 2 => {
                            let pause = REDIRECT_BACKOFF.saturating_mul(redirects);
                            tokio::time::sleep(pause.min(remaining(deadline))).await;
                        }
                        Follow::Now => {}
                    }
                }
                // Redirected or refused for longer than the bound: the slot map redis-rs
                // holds may be stale, and its own refresh stuck; start from a fresh one.
                Some(_) => {
                    self.rebuild(generation, None);
                    return Err(err);
                }
                None => {
                    if needs_fresh_map(&err) {
                        self.rebuild(generation, None);
                    }
                    return Err(err);
                }
            }
        }
    }

    async fn pipeline(
        &mut self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let (mut conn, generation) = self.current();
        let left = self.inner.timeouts.call_bound();
        let result =
            match tokio::time::timeout(left, conn.req_packed_commands(pipeline, offset, count))
                .await
            {
                Ok(result) => result,
                Err(_) => Err(io_error(
                    io::ErrorKind::TimedOut,
                    "redkit call bound exceeded",
                )),
            };
        if let Err(err) = &result {
            if needs_fresh_map(err) || did_not_run(err).is_some() {
                self.rebuild(generation, None);
            }
        }
        result
    }
}

/// The layout watch of a [`Cluster`] (see there): one `CLUSTER SLOTS` every call bound, a
/// rebuild when the layout changed. Holds the connection only while it asks.
///
/// It asks the nodes the last reply named in turn, primaries and replicas (a random one until
/// the first reply): a hung node costs one period per round, never several in a row, so a
/// node that knows the new layout is asked within two periods of the failover.
async fn watch(inner: Weak<Inner>) {
    let Some(period) = inner.upgrade().map(|i| i.timeouts.call_bound()) else {
        return;
    };
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // After a rebuild for a changed layout, one more at the next read: the node that told the
    // watch may have been the first to know (the promoted replica itself), and the rebuild's
    // discovery may have read others that did not know yet.
    let mut again = false;
    let mut nodes: Vec<(String, u16)> = Vec::new();
    let mut last: Option<(String, u16)> = None;
    loop {
        ticks.tick().await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let this = Cluster { inner };
        let (mut conn, generation) = this.current();
        let Some(slots) = ask_slots(&mut conn, &nodes, &mut last, period).await else {
            continue;
        };
        let ranges = slot_ranges(&slots);
        if ranges.is_empty() {
            continue;
        }
        nodes = nodes_of(&slots);
        let layout = layout_of(&ranges);
        // The first read is the layout the connection was built from; after it, the layout
        // the last successful rebuild was asked for. Until a rebuild for a changed layout
        // succeeds, every read asks for one again (a rebuild can time out on the hung node,
        // or find another one already running that may have read the old layout).
        let last =
            match this
                .inner
                .layout
                .compare_exchange(0, layout, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => continue,
                Err(last) => last,
            };
        if last != layout || again {
            tracing::debug!("redkit.connect: cluster layout changed: rebuilding the slot map");
            again = last != layout;
            this.rebuild(generation, Some(layout));
        }
    }
}

/// One `CLUSTER SLOTS` reply, asked of `nodes` (sorted) in turn, starting after `last` (the
/// node asked last time): a node that fails at once (no connection to it, a refusal) hands
/// over to the next in the same round; one that does not answer within `period` ends the
/// round, and the next round starts after it. When every node failed at once (the list is
/// empty, or names nodes the connection no longer holds), a random node of the connection is
/// asked. The turn follows the nodes' order, not a position, so a node joining or leaving
/// the list never makes the watch ask one node twice in a row.
async fn ask_slots(
    conn: &mut ClusterConnection,
    nodes: &[(String, u16)],
    last: &mut Option<(String, u16)>,
    period: Duration,
) -> Option<Value> {
    let started = Instant::now();
    // Each node once, then (all failed at once) a random one.
    for round in 0..=nodes.len() {
        let next = next_node(nodes, last.as_ref(), round);
        let route = match &next {
            Some((host, port)) => SingleNodeRoutingInfo::ByAddress {
                host: host.clone(),
                port: *port,
            },
            None => SingleNodeRoutingInfo::Random,
        };
        if next.is_some() {
            *last = next;
        }
        let left = period.saturating_sub(started.elapsed());
        let cmd = redis::cmd("CLUSTER").arg("SLOTS").clone();
        match tokio::time::timeout(
            left,
            conn.route_command(cmd, RoutingInfo::SingleNode(route)),
        )
        .await
        {
            Ok(Ok(slots)) => return Some(slots),
            Ok(Err(_)) => {}
            Err(_) => return None,
        }
    }
    None
}

/// The node a round of [`ask_slots`] asks in its `round`-th try: the first of `nodes` (sorted)
/// after `last`, from the start again past the end; `None`, a random node of the connection,
/// once every node had its try (`round == nodes.len()`) or when there is none.
fn next_node(
    nodes: &[(String, u16)],
    last: Option<&(String, u16)>,
    round: usize,
) -> Option<(String, u16)> {
    if round >= nodes.len() {
        return None;
    }
    last.and_then(|last| nodes.iter().find(|node| *node > last))
        .or(nodes.first())
        .cloned()
}

/// How to follow an error reply that means the single command did not run.
enum Follow {
    Now,
    Ask,
    Wait,
}

fn did_not_run(err: &RedisError) -> Option<Follow> {
    match err.kind() {
        // redis-rs starts a slot refresh on MOVED and READONLY even with retries(0).
        ErrorKind::Server(ServerErrorKind::Moved | ServerErrorKind::ReadOnly) => Some(Follow::Now),
        ErrorKind::Server(ServerErrorKind::Ask) => Some(Follow::Ask),
        ErrorKind::Server(
            ServerErrorKind::TryAgain
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::MasterDown
            | ServerErrorKind::BusyLoading,
        ) => Some(Follow::Wait),
        _ => None,
    }
}

/// Any failure that is not a server's reply to the command: a timeout, a connection-level
/// failure, no connection for the slot, an unreadable reply, or an error redis-rs made up
/// itself (e.g. a failed slot refresh handed to the requests waiting for it). The slot map may
/// point at a dead or hung node, or redis-rs's own recovery may be failing: start a fresh
/// connection. A server's reply (a script error, `NOSCRIPT`, `BUSY`, `OOM`, `NOPERM`, ...)
/// says the node is there and serving: no rebuild.
fn needs_fresh_map(err: &RedisError) -> bool {
    err.is_io_error()
        || err.is_timeout()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || !matches!(err.kind(), ErrorKind::Server(_) | ErrorKind::Extension)
}

fn parse_node((node, _slot): (&str, u16)) -> Option<(String, u16)> {
    let (host, port) = node.rsplit_once(':')?;
    Some((host.to_owned(), port.parse().ok()?))
}

fn remaining(deadline: Option<Instant>) -> Duration {
    match deadline {
        Some(d) => d.saturating_duration_since(Instant::now()),
        None => Duration::MAX,
    }
}

fn io_error(kind: io::ErrorKind, what: &'static str) -> RedisError {
    RedisError::from(io::Error::new(kind, what))
}

async fn bounded<T>(
    timeouts: Timeouts,
    fut: impl std::future::Future<Output = RedisResult<T>>,
) -> RedisResult<T> {
    match tokio::time::timeout(timeouts.call_bound(), fut).await {
        Ok(result) => result,
        Err(_) => Err(io_error(
            io::ErrorKind::TimedOut,
            "redkit connect bound exceeded",
        )),
    }
}

impl ConnectionLike for Cluster {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(self.command(cmd))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(self.pipeline(pipeline, offset, count))
    }

    fn get_db(&self) -> i64 {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watch_asks_each_node_in_turn_then_a_random_one() {
        let node = |port: u16| ("127.0.0.1".to_owned(), port);
        let nodes = [node(7000), node(7001), node(7002)];
        // A round: from after the node asked last, each node once, wrapping, then random.
        let mut last = Some(node(7001));
        let mut asked = Vec::new();
        for round in 0..=nodes.len() {
            let next = next_node(&nodes, last.as_ref(), round);
            if next.is_some() {
                last.clone_from(&next);
            }
            asked.push(next.map(|(_, port)| port));
        }
        assert_eq!(asked, [Some(7002), Some(7000), Some(7001), None]);
        // The first read knows no node: random. A node that left the list: the next one up.
        assert_eq!(next_node(&[], None, 0), None);
        assert_eq!(next_node(&nodes, None, 0), Some(node(7000)));
        assert_eq!(next_node(&nodes, Some(&node(6999)), 0), Some(node(7000)));
        assert_eq!(next_node(&nodes, Some(&node(7005)), 1), Some(node(7000)));
        assert_eq!(next_node(&nodes, Some(&node(7000)), 3), None);
    }

    #[test]
    fn a_fresh_map_is_built_after_anything_but_a_servers_reply() {
        let server = |kind| RedisError::from((ErrorKind::Server(kind), "reply"));
        for kind in [
            ServerErrorKind::ResponseError,
            ServerErrorKind::NoScript,
            ServerErrorKind::NoPerm,
            ServerErrorKind::Moved,
        ] {
            assert!(!needs_fresh_map(&server(kind)), "{kind:?}");
        }
        assert!(!needs_fresh_map(&RedisError::from((
            ErrorKind::Extension,
            "BUSY"
        ))));
        for err in [
            io_error(io::ErrorKind::TimedOut, "t"),
            io_error(io::ErrorKind::ConnectionReset, "r"),
            RedisError::from((ErrorKind::ClusterConnectionNotFound, "none")),
            RedisError::from((ErrorKind::Client, "slot refresh failed")),
            RedisError::from((ErrorKind::Parse, "bad reply")),
        ] {
            assert!(needs_fresh_map(&err), "{err:?}");
        }
    }
}
