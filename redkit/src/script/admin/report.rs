//! What the operations of [`Admin`](super::Admin) report, per node: the node, its state and
//! its error, as values that serialize to the CLI's JSON documents.

use std::fmt;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::script::capabilities::Capabilities;
use crate::script::errors::LUA_SCRIPTING;

/// The role of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
///
/// ```
/// use redkit::script::admin::Role;
/// // As the admin's JSON reports show it.
/// assert_eq!(serde_json::to_string(&Role::Primary).unwrap(), r#""primary""#);
/// assert_eq!(serde_json::to_string(&Role::Replica).unwrap(), r#""replica""#);
/// ```
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Role {
    /// A primary (master): serves writes.
    Primary,
    /// A replica of a primary.
    Replica,
}

/// One node, by address.
///
/// ```no_run
/// # async fn run() -> redkit::Result<()> {
/// use redkit::script::admin::{Admin, Role};
/// let admin = Admin::cluster(["redis://127.0.0.1:7000/"])?;
/// let nodes = admin.nodes().await?;
/// let primaries: Vec<&str> = nodes.iter()
///     .filter(|n| n.role == Role::Primary)
///     .map(|n| n.addr.as_str())
///     .collect();
/// assert!(!primaries.is_empty(), "a Cluster has at least one primary");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Node {
    /// `host:port`.
    pub addr: String,
    /// Its role when discovered.
    pub role: Role,
}

/// Whether one script of the administered set is in one node's cache.
///
/// ```no_run
/// # async fn run() -> redkit::Result<()> {
/// let admin = redkit::script::admin::Admin::single("redis://127.0.0.1:6379/")?;
/// for node in admin.status().await? {
///     let cold: Vec<&str> = node.scripts.iter().filter(|p| !p.loaded).map(|p| p.script.as_str()).collect();
///     println!("{}: {} of {} scripts not cached: {}", node.node.addr, cold.len(), node.scripts.len(), cold.join(", "));
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ScriptPresence {
    /// `name.vN`.
    pub script: String,
    /// Its SHA1.
    pub sha1: String,
    /// `true` when `SCRIPT EXISTS` says it is cached.
    pub loaded: bool,
}

/// What kind of failure kept a node from doing what was asked.
///
/// ```
/// use redkit::script::admin::NodeErrorKind;
/// assert_ne!(NodeErrorKind::Auth, NodeErrorKind::Unreachable);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum NodeErrorKind {
    /// Could not connect, or no answer within the timeout.
    Unreachable,
    /// Authentication or ACL refused (`NOAUTH`, `WRONGPASS`, `NOPERM`).
    Auth,
    /// The node is running a long script (`BUSY`): it answers only `SCRIPT KILL`.
    Busy,
    /// Something answered, but not in the Redis protocol (e.g. an HTTP server on that port).
    NotRedis,
    /// The node has no Lua scripting (`EVAL`, `EVALSHA` or `SCRIPT` unknown: a server without
    /// its Lua engine, or the commands renamed away).
    NoScripting,
    /// Any other error the node answered with.
    Redis,
}

/// What a node without Lua scripting is reported as.
const NO_SCRIPTING: &str =
    "no Lua scripting on this node (EVAL, EVALSHA and SCRIPT are unknown commands)";

/// Why one node could not do what was asked (never holds a password).
///
/// ```
/// # fn show(e: &redkit::script::admin::NodeError) {
/// eprintln!("{:?}: {}", e.kind, e.message);
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct NodeError {
    /// The kind of failure.
    pub kind: NodeErrorKind,
    /// One line saying what went wrong.
    pub message: String,
}

impl NodeErrorKind {
    /// Classifies an error the way the admin reports classify node failures.
    ///
    /// ```
    /// use redkit::script::admin::NodeErrorKind;
    /// let e = redkit::Error::Timeout(std::time::Duration::from_secs(1));
    /// assert_eq!(NodeErrorKind::of(&e), NodeErrorKind::Unreachable);
    /// ```
    pub fn of(e: &Error) -> Self {
        if e.is_auth_failure() {
            Self::Auth
        } else if matches!(e, Error::Redis(r) if r.code() == Some("BUSY")) {
            Self::Busy
        } else if matches!(e, Error::Redis(r) if r.kind() == redis::ErrorKind::Parse) {
            // Checked before unavailability, which counts a reply that cannot be parsed as a
            // broken connection.
            Self::NotRedis
        } else if e.is_unavailable() {
            Self::Unreachable
        } else if matches!(e, Error::Unsupported { feature, .. } if *feature == LUA_SCRIPTING) {
            Self::NoScripting
        } else {
            Self::Redis
        }
    }
}

impl NodeError {
    pub(super) fn from_error(e: &Error) -> Self {
        let kind = NodeErrorKind::of(e);
        let message = match kind {
            // What the peer sent is no clue (e.g. `Parse error at 1`): say what it is not.
            NodeErrorKind::NotRedis => {
                "not a Redis server (its reply is not the Redis protocol)".to_owned()
            }
            NodeErrorKind::NoScripting => NO_SCRIPTING.to_owned(),
            _ => e.to_string(),
        };
        Self {
            kind,
            message: message.lines().next().unwrap_or_default().to_owned(),
        }
    }
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// The outcome of one operation on one node: `value` when it succeeded there, `error` when
/// it did not. Operations go on past a failed node, so every node gets a report.
///
/// ```no_run
/// # async fn run() -> redkit::Result<()> {
/// let admin = redkit::script::admin::Admin::single("redis://127.0.0.1:6379/")?;
/// for report in admin.load().await? {
///     match (&report.value, &report.error) {
///         (Some(n), _) => println!("{}: {n} scripts loaded", report.node.addr),
///         (_, Some(e)) => eprintln!("{}: {e}", report.node.addr),
///         _ => {}
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct NodeReport<T> {
    /// The node.
    pub node: Node,
    /// What the operation returned on this node, when it succeeded.
    pub value: Option<T>,
    /// Why it failed on this node, when it did.
    pub error: Option<NodeError>,
}

impl<T> NodeReport<T> {
    pub(super) fn from_result(node: Node, result: Result<T>) -> Self {
        match result {
            Ok(value) => Self {
                node,
                value: Some(value),
                error: None,
            },
            Err(e) => Self {
                node,
                value: None,
                error: Some(NodeError::from_error(&e)),
            },
        }
    }

    /// `true` when the operation succeeded on this node.
    ///
    /// ```
    /// # fn show(r: &redkit::script::admin::NodeReport<usize>) { let _ = r.is_ok(); }
    /// ```
    pub fn is_ok(&self) -> bool {
        self.error.is_none()
    }
}

/// The state of one node.
///
/// ```no_run
/// # async fn run() -> redkit::Result<()> {
/// let admin = redkit::script::admin::Admin::single("redis://127.0.0.1:6379/")?;
/// for s in admin.status().await? {
///     match &s.error {
///         Some(e) => eprintln!("{}: {e}", s.node.addr),
///         None => println!(
///             "{} {:?} redis {}: {} retired scripts held, DELIFEQ: {}",
///             s.node.addr,
///             s.node.role,
///             s.version.as_deref().unwrap_or("?"),
///             s.retired.len(),
///             s.native.is_some_and(|n| n.delifeq),
///         ),
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct NodeStatus {
    /// The node.
    pub node: Node,
    /// `redis_version` from `INFO server`, when the node answered.
    pub version: Option<String>,
    /// Every script of the set and whether it is loaded there (empty when not asked).
    pub scripts: Vec<ScriptPresence>,
    /// Ids (`name.vN`) of the set's [retired](crate::Registry::retired) scripts the node still has
    /// cached: versions no caller of this build runs, removed by [`Admin::prune`](super::Admin::prune).
    pub retired: Vec<String>,
    /// The native commands the node offers in place of a script (what a
    /// [`ScriptManager`](crate::ScriptManager) connected to it would use: see
    /// [`ScriptManager::capabilities`](crate::ScriptManager::capabilities)); `None` when the
    /// node could not be asked.
    pub native: Option<Capabilities>,
    /// Why the node could not be asked, if it could not.
    pub error: Option<NodeError>,
}

/// What [`Admin::prune`](super::Admin::prune) did on one node.
///
/// ```no_run
/// # async fn run() -> redkit::Result<()> {
/// use redkit::script::admin::{Admin, FlushMode};
/// let admin = Admin::single("redis://127.0.0.1:6379/")?;
/// for r in admin.prune(FlushMode::Async, false).await? {
///     if let Some(p) = r.value {
///         // Flushed only where a retired script was held; the set is then loaded again.
///         assert_eq!(p.flushed, !p.retired.is_empty());
///         if p.flushed {
///             assert_eq!(p.loaded, admin.scripts().scripts().len());
///         }
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Pruned {
    /// Ids (`name.vN`) of the retired scripts the node had cached before the prune.
    pub retired: Vec<String>,
    /// `true` when the node's script cache was flushed and the set loaded again; `false` when
    /// it held no retired script (and the prune was not forced): left alone.
    pub flushed: bool,
    /// How many scripts of the set were loaded after the flush (0 when not flushed).
    pub loaded: usize,
}

/// What [`Admin::verify`](super::Admin::verify) found on one primary.
///
/// ```no_run
/// # async fn run() -> redkit::Result<()> {
/// let admin = redkit::script::admin::Admin::cluster(["redis://127.0.0.1:7000/"])?;
/// for p in admin.verify().await?.primaries {
///     match (&p.error, p.missing.is_empty()) {
///         (Some(e), _) => eprintln!("{}: not asked: {e}", p.node.addr),
///         (None, false) => eprintln!("{} lacks {}", p.node.addr, p.missing.join(", ")),
///         (None, true) => println!("{}: ready", p.node.addr),
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct PrimaryVerification {
    /// The primary.
    pub node: Node,
    /// Ids (`name.vN`) of the set's scripts it does not have cached.
    pub missing: Vec<String>,
    /// Why it could not be asked, if it could not.
    pub error: Option<NodeError>,
}

/// The result of [`Admin::verify`](super::Admin::verify): one entry per primary.
///
/// ```no_run
/// # async fn run() -> redkit::Result<()> {
/// let report = redkit::script::admin::Admin::single("redis://127.0.0.1:6379/")?.verify().await?;
/// for p in report.primaries.iter().filter(|p| !p.missing.is_empty()) {
///     eprintln!("{} lacks {}", p.node.addr, p.missing.join(", "));
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Verification {
    /// Every primary, with what it lacks.
    pub primaries: Vec<PrimaryVerification>,
}

impl Verification {
    /// `true` when there is at least one primary and every primary answered and has every
    /// script of the set.
    ///
    /// ```
    /// # fn show(v: &redkit::script::admin::Verification) { let _ = v.is_ok(); }
    /// ```
    pub fn is_ok(&self) -> bool {
        !self.primaries.is_empty()
            && self
                .primaries
                .iter()
                .all(|p| p.missing.is_empty() && p.error.is_none())
    }
}

/// What `SCRIPT KILL` did on one node (a node that could not be asked is reported in
/// [`NodeReport::error`]).
///
/// ```
/// use redkit::script::admin::KillOutcome;
/// assert_ne!(KillOutcome::NotBusy, KillOutcome::Unkillable);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum KillOutcome {
    /// A running read-only script was killed.
    Killed,
    /// No script was running (`NOTBUSY`).
    NotBusy,
    /// The running script has written and cannot be killed (`UNKILLABLE`); only
    /// `SHUTDOWN NOSAVE` would stop it, which redkit never sends.
    Unkillable,
}
