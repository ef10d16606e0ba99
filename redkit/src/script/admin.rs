//! Script-cache administration on every node: status, load, verify, flush, prune, kill.
//!
//! Each operation connects to every node directly (found with `CLUSTER NODES` on a Cluster),
//! so the answer is per node, by address, never an aggregate that hides one node's state.
//!
//! ```no_run
//! # async fn run() -> redkit::Result<()> {
//! use redkit::script::admin::Admin;
//! let admin = Admin::cluster(["redis://127.0.0.1:7000/"])?;
//! admin.load().await?;
//! let report = admin.verify().await?;
//! assert!(report.is_ok(), "{:?}", report.primaries);
//! # Ok(()) }
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, Value};

use super::capabilities::{probe_node, Capabilities};
use super::errors::unsupported_or;
use super::registry::{Registry, RetiredScript, Script};
use crate::error::{Error, Result};

mod functions;
mod report;
pub use functions::LibraryState;
pub use report::{
    KillOutcome, Node, NodeError, NodeErrorKind, NodeReport, NodeStatus, PrimaryVerification,
    Pruned, Role, ScriptPresence, Verification,
};

/// Administers the script cache of one server or of every node of a Cluster.
///
/// Building one only parses the addresses; every operation connects to the nodes.
///
/// ```
/// use redkit::script::admin::Admin;
/// let admin = Admin::single("redis://ops:secret@10.0.0.7:6379/")?;
/// // Its Debug output names the addresses, never the credentials.
/// let shown = format!("{admin:?}");
/// assert!(shown.contains("10.0.0.7:6379") && !shown.contains("secret"));
/// # Ok::<(), redkit::Error>(())
/// ```
#[derive(Clone)]
pub struct Admin {
    seeds: Vec<ConnectionInfo>,
    cluster: bool,
    timeout: Duration,
    scripts: Arc<Registry>,
}

impl fmt::Debug for Admin {
    /// Addresses only: connection info may hold a password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let addrs: Vec<String> = self.seeds.iter().map(|i| describe_addr(i.addr())).collect();
        f.debug_struct("Admin")
            .field("seeds", &addrs)
            .field("cluster", &self.cluster)
            .field("timeout", &self.timeout)
            .field("scripts", &self.scripts.scripts().len())
            .finish()
    }
}

/// How `SCRIPT FLUSH` frees memory.
///
/// ```
/// use redkit::script::admin::{Admin, FlushMode};
/// assert_eq!(FlushMode::default(), FlushMode::Async);
///
/// // Wait until the memory is freed before reloading, e.g. to measure it.
/// async fn flush_now(admin: &Admin) -> redkit::Result<bool> {
///     Ok(admin.flush(FlushMode::Sync).await?.iter().all(|r| r.is_ok()))
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum FlushMode {
    /// `SCRIPT FLUSH ASYNC` (the default): the server frees the cache in the background.
    #[default]
    Async,
    /// `SCRIPT FLUSH SYNC`.
    Sync,
}

impl FlushMode {
    /// The argument of `SCRIPT FLUSH` / `FUNCTION FLUSH`.
    fn arg(self) -> &'static str {
        match self {
            Self::Async => "ASYNC",
            Self::Sync => "SYNC",
        }
    }
}

impl Admin {
    /// Default per-node connect and response timeout.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::script::admin::Admin;
    /// assert_eq!(Admin::DEFAULT_TIMEOUT, Duration::from_secs(5));
    /// let admin = Admin::single("redis://127.0.0.1:6379/")?; // until with_timeout says otherwise
    /// assert!(format!("{admin:?}").contains(&format!("timeout: {:?}", Admin::DEFAULT_TIMEOUT)));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

    /// Administers one server.
    ///
    /// ```
    /// use redkit::script::admin::Admin;
    /// let admin = Admin::single("redis://127.0.0.1:6379/")?; // nothing is sent yet
    /// assert!(format!("{admin:?}").contains("127.0.0.1:6379"));
    /// assert!(Admin::single("not a url").is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn single(info: impl IntoConnectionInfo) -> Result<Self> {
        Ok(Self {
            seeds: vec![info.into_connection_info()?],
            cluster: false,
            timeout: Self::DEFAULT_TIMEOUT,
            scripts: Arc::new(Registry::global().clone()),
        })
    }

    /// Administers every node of a Cluster reachable from one of `seeds`.
    ///
    /// ```
    /// use redkit::script::admin::Admin;
    /// // Several seeds: one that is down or busy does not stop node discovery.
    /// let admin = Admin::cluster(["redis://10.0.0.1:7000/", "redis://10.0.0.2:7000/"])?;
    /// assert!(format!("{admin:?}").contains("10.0.0.2:7000"));
    /// assert!(Admin::cluster(Vec::<String>::new()).is_err()); // at least one seed
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn cluster<T: IntoConnectionInfo>(seeds: impl IntoIterator<Item = T>) -> Result<Self> {
        let seeds = seeds
            .into_iter()
            .map(|s| s.into_connection_info())
            .collect::<redis::RedisResult<Vec<_>>>()?;
        if seeds.is_empty() {
            return Err(Error::invalid(
                "seeds",
                "at least one node address is needed",
            ));
        }
        Ok(Self {
            seeds,
            cluster: true,
            timeout: Self::DEFAULT_TIMEOUT,
            scripts: Arc::new(Registry::global().clone()),
        })
    }

    /// Administers another script set than redkit's embedded one (your crate's
    /// [`embed_scripts!`](crate::embed_scripts), or [`Registry::from_dir`]): `status`,
    /// `load` and `verify` then use its scripts.
    ///
    /// ```no_run
    /// # async fn run() -> redkit::Result<()> {
    /// use redkit::{script::admin::Admin, Registry};
    /// let admin = Admin::cluster(["redis://127.0.0.1:7000/"])?.with_scripts(Registry::from_dir("lua")?);
    /// assert!(admin.verify().await?.is_ok());
    /// # Ok(()) }
    /// ```
    pub fn with_scripts(mut self, scripts: Registry) -> Self {
        self.scripts = Arc::new(scripts);
        self
    }

    /// The script set administered.
    ///
    /// ```
    /// let admin = redkit::script::admin::Admin::single("redis://127.0.0.1:6379/")?;
    /// assert_eq!(admin.scripts().scripts().len(), redkit::Registry::global().scripts().len());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn scripts(&self) -> &Registry {
        &self.scripts
    }

    /// Sets the per-node connect and response timeout.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::script::admin::Admin;
    /// let admin = Admin::single("redis://127.0.0.1:6379/")?.with_timeout(Duration::from_millis(500));
    /// assert!(format!("{admin:?}").contains("timeout: 500ms"));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Every node: all primaries and replicas of the Cluster (asked with `CLUSTER NODES` of
    /// the first seed that answers: give several seeds, since a node busy running a script
    /// answers nothing but `SCRIPT KILL`), or the server itself.
    ///
    /// A server given with [`Admin::single`] that turns out to be a Cluster node
    /// (`cluster_enabled:1`) is treated as a seed of its Cluster: every operation then acts on
    /// every node, never on one node while reporting success for the whole Cluster.
    ///
    /// ```no_run
    /// # async fn run() -> redkit::Result<()> {
    /// let admin = redkit::script::admin::Admin::single("redis://127.0.0.1:7000/")?;
    /// for node in admin.nodes().await? {
    ///     println!("{} {:?}", node.addr, node.role);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn nodes(&self) -> Result<Vec<Node>> {
        if !self.cluster {
            let info = &self.seeds[0];
            let mut conn = self.connect(info).await?;
            let role = match server_role(&mut conn).await {
                Ok(ServerRole::ClusterNode) => return self.cluster_nodes(info).await,
                Ok(ServerRole::Alone(role)) => role,
                // A server running a long script answers BUSY to INFO (only SCRIPT KILL and
                // SHUTDOWN are served): `kill` must still reach it. A server named on its
                // own is administered as a primary.
                Err(Error::Redis(e)) if e.code() == Some("BUSY") => Role::Primary,
                Err(e) => return Err(e),
            };
            return Ok(vec![Node {
                addr: describe_addr(info.addr()),
                role,
            }]);
        }
        let mut last = None;
        for seed in &self.seeds {
            match self.cluster_nodes(seed).await {
                Ok(nodes) => return Ok(nodes),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::invalid("seeds", "no seed")))
    }

    async fn cluster_nodes(&self, seed: &ConnectionInfo) -> Result<Vec<Node>> {
        let mut conn = self.connect(seed).await?;
        let text: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query_async(&mut conn)
            .await?;
        let mut nodes = parse_cluster_nodes(&text);
        if nodes.is_empty() {
            return Err(Error::unexpected("CLUSTER NODES", "no usable node listed"));
        }
        nodes.sort_by(|a, b| {
            (a.role != Role::Primary, &a.addr).cmp(&(b.role != Role::Primary, &b.addr))
        });
        Ok(nodes)
    }

    /// Runs `op` on every node concurrently; every node gets a report, failed or not.
    async fn each_node<'a, T, F, Fut>(&'a self, op: F) -> Result<Vec<NodeReport<T>>>
    where
        F: Fn(&'a Self, Node) -> Fut,
        Fut: std::future::Future<Output = (Node, Result<T>)>,
    {
        self.each_node_where(false, op).await
    }

    /// Like `each_node`, on the primaries only when `primaries_only`.
    async fn each_node_where<'a, T, F, Fut>(
        &'a self,
        primaries_only: bool,
        op: F,
    ) -> Result<Vec<NodeReport<T>>>
    where
        F: Fn(&'a Self, Node) -> Fut,
        Fut: std::future::Future<Output = (Node, Result<T>)>,
    {
        let mut nodes = self.nodes().await?;
        if primaries_only {
            nodes.retain(|n| n.role == Role::Primary);
        }
        let runs = nodes.into_iter().map(|node| op(self, node));
        Ok(futures_util::future::join_all(runs)
            .await
            .into_iter()
            .map(|(node, result)| NodeReport::from_result(node, result))
            .collect())
    }

    /// Server version, role, the set's scripts each node has cached, the set's retired
    /// scripts it still holds, and the native commands it offers in place of a script. A node that cannot be asked is reported with its
    /// [`NodeError`]; the others are still asked.
    ///
    /// ```no_run
    /// # async fn run() -> redkit::Result<()> {
    /// let admin = redkit::script::admin::Admin::single("redis://127.0.0.1:6379/")?;
    /// for s in admin.status().await? {
    ///     println!("{} {:?} {:?}", s.node.addr, s.version, s.error);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn status(&self) -> Result<Vec<NodeStatus>> {
        let scripts = self.scripts.scripts();
        let reports = self
            .each_node(|admin, node| async move {
                let result = admin.node_status(&node, scripts).await;
                (node, result)
            })
            .await?;
        Ok(reports
            .into_iter()
            .map(|r| {
                let (version, scripts, retired, native) = match r.value {
                    Some((v, s, retired, native)) => (Some(v), s, retired, Some(native)),
                    None => (None, Vec::new(), Vec::new(), None),
                };
                NodeStatus {
                    node: r.node,
                    version,
                    scripts,
                    retired,
                    native,
                    error: r.error,
                }
            })
            .collect())
    }

    async fn node_status(
        &self,
        node: &Node,
        scripts: &[Script],
    ) -> Result<(String, Vec<ScriptPresence>, Vec<String>, Capabilities)> {
        let mut conn = self.connect_addr(&node.addr).await?;
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut conn)
            .await?;
        let version = info_field(&info, "redis_version")
            .unwrap_or("unknown")
            .to_owned();
        let retired = self.scripts.retired();
        let sha1s: Vec<&str> = scripts
            .iter()
            .map(Script::sha1)
            .chain(retired.iter().map(|r| r.sha1.as_str()))
            .collect();
        let mut loaded = script_exists(&mut conn, &sha1s).await?;
        let held = held_retired(retired, &loaded.split_off(scripts.len()));
        let presence = scripts
            .iter()
            .zip(loaded)
            .map(|(s, loaded)| ScriptPresence {
                script: s.id().to_owned(),
                sha1: s.sha1().to_owned(),
                loaded,
            })
            .collect();
        let native = probe_node(&mut conn).await?;
        Ok((version, presence, held, native))
    }

    /// `SCRIPT LOAD` of every script of the set on every node (replicas too, so a promoted
    /// replica is warm), concurrently. Idempotent. Each node's report holds how many scripts
    /// it loaded, or why it could not; a failed node does not stop the others.
    ///
    /// ```no_run
    /// # async fn run() -> redkit::Result<()> {
    /// let admin = redkit::script::admin::Admin::cluster(["redis://127.0.0.1:7000/"])?;
    /// let failed: Vec<_> = admin.load().await?.into_iter().filter(|r| !r.is_ok()).collect();
    /// assert!(failed.is_empty(), "{failed:?}");
    /// # Ok(()) }
    /// ```
    pub async fn load(&self) -> Result<Vec<NodeReport<usize>>> {
        self.each_node(|admin, node| async move {
            let result = async {
                let mut conn = admin.connect_addr(&node.addr).await?;
                super::ScriptManager::new()
                    .preload_scripts(&mut conn, admin.scripts.scripts())
                    .await
            }
            .await;
            (node, result)
        })
        .await
    }

    /// Checks that every primary has every script of the set cached.
    ///
    /// ```no_run
    /// # async fn run() -> redkit::Result<()> {
    /// let admin = redkit::script::admin::Admin::cluster(["redis://127.0.0.1:7000/"])?;
    /// assert!(admin.verify().await?.is_ok());
    /// # Ok(()) }
    /// ```
    pub async fn verify(&self) -> Result<Verification> {
        let primaries = self
            .status()
            .await?
            .into_iter()
            .filter(|s| s.node.role == Role::Primary)
            .map(|s| PrimaryVerification {
                missing: s
                    .scripts
                    .into_iter()
                    .filter(|p| !p.loaded)
                    .map(|p| p.script)
                    .collect(),
                node: s.node,
                error: s.error,
            })
            .collect();
        Ok(Verification { primaries })
    }

    /// `SCRIPT FLUSH` on every node, concurrently; a failed node does not stop the others.
    ///
    /// ```no_run
    /// # async fn run() -> redkit::Result<()> {
    /// use redkit::script::admin::{Admin, FlushMode};
    /// for r in Admin::single("redis://127.0.0.1:6379/")?.flush(FlushMode::Async).await? {
    ///     println!("{}: {}", r.node.addr, if r.is_ok() { "flushed" } else { "FAILED" });
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn flush(&self, mode: FlushMode) -> Result<Vec<NodeReport<()>>> {
        self.flush_each("SCRIPT", mode, false, Error::from).await
    }

    /// `<command> FLUSH <mode>` on every node (every primary when `primaries_only`),
    /// concurrently; a node's failure made an error by `error`.
    async fn flush_each(
        &self,
        command: &'static str,
        mode: FlushMode,
        primaries_only: bool,
        error: fn(redis::RedisError) -> Error,
    ) -> Result<Vec<NodeReport<()>>> {
        let mode = mode.arg();
        self.each_node_where(primaries_only, |admin, node| async move {
            let result = async {
                let mut conn = admin.connect_addr(&node.addr).await?;
                redis::cmd(command)
                    .arg("FLUSH")
                    .arg(mode)
                    .query_async::<()>(&mut conn)
                    .await
                    .map_err(error)
            }
            .await;
            (node, result)
        })
        .await
    }

    /// Removes the set's [retired](Registry::retired) scripts from every node's cache. Redis
    /// cannot drop one cached script, so on each node that holds at least one (every node
    /// when `force`) this is `SCRIPT FLUSH` followed by `SCRIPT LOAD` of the set; a node that
    /// holds none is left alone unless `force`. Nodes are pruned concurrently; a failed node
    /// does not stop the others.
    ///
    /// The race, by design: between the flush and the end of the load a caller's `EVALSHA`
    /// may meet `NOSCRIPT`. A [`ScriptManager`](crate::ScriptManager) answers it with one
    /// `EVAL` of the full source, which caches the script again, so no call fails because of a
    /// prune (each script costs one `EVAL`, once). A client that sends `EVALSHA` with no
    /// `EVAL` fallback would see `NOSCRIPT`, and scripts of other applications cached on the
    /// node are dropped too (they come back the same way, on their next `EVAL`). An older
    /// build still running a retired version caches it again on its first call: prune once
    /// the older builds are gone ([`status`](Self::status) shows what is held).
    ///
    /// ```no_run
    /// # async fn run() -> redkit::Result<()> {
    /// use redkit::script::admin::{Admin, FlushMode};
    /// for r in Admin::single("redis://127.0.0.1:6379/")?.prune(FlushMode::Async, false).await? {
    ///     if let Some(p) = &r.value {
    ///         println!("{}: {} retired scripts dropped", r.node.addr, p.retired.len());
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn prune(&self, mode: FlushMode, force: bool) -> Result<Vec<NodeReport<Pruned>>> {
        let mode = mode.arg();
        self.each_node(|admin, node| async move {
            let result = async {
                let mut conn = admin.connect_addr(&node.addr).await?;
                let retired = admin.scripts.retired();
                let sha1s: Vec<&str> = retired.iter().map(|r| r.sha1.as_str()).collect();
                let held = if sha1s.is_empty() {
                    Vec::new()
                } else {
                    held_retired(retired, &script_exists(&mut conn, &sha1s).await?)
                };
                if held.is_empty() && !force {
                    return Ok(Pruned {
                        retired: held,
                        flushed: false,
                        loaded: 0,
                    });
                }
                redis::cmd("SCRIPT")
                    .arg("FLUSH")
                    .arg(mode)
                    .query_async::<()>(&mut conn)
                    .await?;
                let loaded = super::ScriptManager::new()
                    .preload_scripts(&mut conn, admin.scripts.scripts())
                    .await?;
                Ok(Pruned {
                    retired: held,
                    flushed: true,
                    loaded,
                })
            }
            .await;
            (node, result)
        })
        .await
    }

    /// `SCRIPT KILL` on every node; `NOTBUSY` and `UNKILLABLE` are outcomes, a node that
    /// cannot be asked has an error.
    ///
    /// ```no_run
    /// # async fn run() -> redkit::Result<()> {
    /// use redkit::script::admin::{Admin, KillOutcome};
    /// for r in Admin::single("redis://127.0.0.1:6379/")?.kill().await? {
    ///     if r.value == Some(KillOutcome::Unkillable) { eprintln!("{} is stuck", r.node.addr); }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn kill(&self) -> Result<Vec<NodeReport<KillOutcome>>> {
        self.each_node(|admin, node| async move {
            let result = async {
                let mut conn = admin.connect_addr(&node.addr).await?;
                match redis::cmd("SCRIPT")
                    .arg("KILL")
                    .query_async::<Value>(&mut conn)
                    .await
                {
                    Ok(_) => Ok(KillOutcome::Killed),
                    Err(e) if e.code() == Some("NOTBUSY") => Ok(KillOutcome::NotBusy),
                    Err(e) if e.code() == Some("UNKILLABLE") => Ok(KillOutcome::Unkillable),
                    Err(e) => Err(Error::from(e)),
                }
            }
            .await;
            (node, result)
        })
        .await
    }

    async fn connect_addr(&self, addr: &str) -> Result<MultiplexedConnection> {
        let (host, port) = addr
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
            .ok_or_else(|| Error::unexpected("CLUSTER NODES", "node address without port"))?;
        let mut target = self.seeds[0].addr().clone();
        match &mut target {
            ConnectionAddr::Tcp(h, p)
            | ConnectionAddr::TcpTls {
                host: h, port: p, ..
            } => {
                *h = host.to_owned();
                *p = port;
            }
            _ => return Err(Error::invalid("url", "node discovery needs a TCP address")),
        }
        self.connect(&self.seeds[0].clone().set_addr(target)).await
    }

    async fn connect(&self, info: &ConnectionInfo) -> Result<MultiplexedConnection> {
        let client = redis::Client::open(info.clone())?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout));
        Ok(client
            .get_multiplexed_async_connection_with_config(&config)
            .await?)
    }
}

/// `SCRIPT EXISTS` for all `sha1s` on one node (none asked: none answered).
async fn script_exists(conn: &mut MultiplexedConnection, sha1s: &[&str]) -> Result<Vec<bool>> {
    if sha1s.is_empty() {
        return Ok(Vec::new());
    }
    let mut cmd = redis::cmd("SCRIPT");
    cmd.arg("EXISTS");
    for sha1 in sha1s {
        cmd.arg(*sha1);
    }
    let flags: Vec<bool> = cmd.query_async(conn).await.map_err(unsupported_or)?;
    if flags.len() != sha1s.len() {
        return Err(Error::unexpected("SCRIPT EXISTS", "wrong number of flags"));
    }
    Ok(flags)
}

/// The ids of the retired scripts whose `SCRIPT EXISTS` flag is set.
fn held_retired(retired: &[RetiredScript], flags: &[bool]) -> Vec<String> {
    retired
        .iter()
        .zip(flags)
        .filter(|(_, &held)| held)
        .map(|(r, _)| r.id.clone())
        .collect()
}

/// What a server named on its own turned out to be.
enum ServerRole {
    /// `cluster_enabled:1`: one node of a Cluster.
    ClusterNode,
    /// A standalone server with its replication role.
    Alone(Role),
}

async fn server_role(conn: &mut MultiplexedConnection) -> Result<ServerRole> {
    let cluster: String = redis::cmd("INFO").arg("cluster").query_async(conn).await?;
    if info_field(&cluster, "cluster_enabled") == Some("1") {
        return Ok(ServerRole::ClusterNode);
    }
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query_async(conn)
        .await?;
    Ok(ServerRole::Alone(match info_field(&info, "role") {
        Some("slave") => Role::Replica,
        _ => Role::Primary,
    }))
}

fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .map(str::trim)
}

/// `host:port` of an address, for messages: never user names or passwords (those live
/// elsewhere in `ConnectionInfo`).
///
/// ```
/// use redkit::script::admin::describe_addr;
/// let client = redis::Client::open("redis://ops:secret@cache.internal:6380/")?;
/// assert_eq!(describe_addr(client.get_connection_info().addr()), "cache.internal:6380");
/// # Ok::<(), redis::RedisError>(())
/// ```
pub fn describe_addr(addr: &ConnectionAddr) -> String {
    match addr {
        ConnectionAddr::Tcp(h, p)
        | ConnectionAddr::TcpTls {
            host: h, port: p, ..
        } => {
            format!("{h}:{p}")
        }
        ConnectionAddr::Unix(path) => path.display().to_string(),
        _ => "unknown".to_owned(),
    }
}

/// Nodes from `CLUSTER NODES` output, skipping failed and address-less ones.
fn parse_cluster_nodes(text: &str) -> Vec<Node> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            let _id = parts.next()?;
            let addr = parts.next()?;
            let flags = parts.next()?;
            if flags.contains("noaddr") || flags.contains("handshake") {
                return None;
            }
            let addr = addr.split(['@', ',']).next()?;
            if addr.starts_with(':') {
                return None;
            }
            let role = if flags.split(',').any(|f| f == "master") {
                Role::Primary
            } else {
                Role::Replica
            };
            Some(Node {
                addr: addr.to_owned(),
                role,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cluster_nodes() {
        let text = "\
07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,host-a slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002 master - 0 1426238316232 2 connected 5461-10922
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5460
6ec23923021cf3ffec47632106199cb7f496ce01 :0@0 master,noaddr - 0 0 0 disconnected
";
        let nodes = parse_cluster_nodes(text);
        assert_eq!(nodes.len(), 3);
        assert_eq!(nodes[0].addr, "127.0.0.1:30004");
        assert_eq!(nodes[0].role, Role::Replica);
        assert_eq!(nodes[2].role, Role::Primary);
    }

    #[test]
    fn debug_never_prints_the_password() {
        let admin = Admin::cluster(["redis://ops:hunter2@10.0.0.7:7000/"]).unwrap();
        let text = format!("{admin:?}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(!text.contains("ops"), "{text}");
        assert!(text.contains("10.0.0.7:7000"), "{text}");
    }

    #[test]
    fn reads_info_fields() {
        let info = "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n";
        assert_eq!(info_field(info, "redis_version"), Some("7.0.15"));
        assert_eq!(info_field(info, "role"), None);
    }
}
