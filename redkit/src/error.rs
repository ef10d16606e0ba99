//! The one error type of redkit.
//!
//! Business outcomes (a request was limited, stock was insufficient, a lock is held by someone
//! else) are *values* returned by the typed APIs. [`Error`] is for "could not find out": bad
//! input rejected before any round trip, Redis unreachable, a reply redkit did not expect, or
//! data in Redis that a script refused to touch.

use std::time::Duration;

/// `Result` with redkit's [`Error`].
///
/// ```
/// use redkit::rate_limit::LimitKey;
///
/// fn user_key(id: &str) -> redkit::Result<LimitKey> {
///     LimitKey::text(id)
/// }
/// assert_eq!(user_key("user-7")?.as_str(), "k:user-7");
/// assert!(matches!(user_key(""), Err(redkit::Error::InvalidInput { .. })));
///
/// // Like `std::result::Result`, the second parameter names another error type.
/// let parsed: redkit::Result<u32, std::num::ParseIntError> = "42".parse();
/// assert_eq!(parsed, Ok(42));
/// # Ok::<(), redkit::Error>(())
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in redkit.
///
/// Variants carry enough context to act on without parsing the message. None carries a
/// password or a stored value; [`NotFound::detail`](Error::NotFound) carries the identifier the
/// caller asked for (e.g. the SKU), and `CorruptData`/`PermissionDenied` name key *roles* and
/// commands, never key contents.
///
/// ```no_run
/// # async fn run(store: redkit::inventory::Store, mut conn: redis::aio::MultiplexedConnection) {
/// match store.decrement(&mut conn, "sku-42", 1, Some("order-7")).await {
///     Ok(outcome) => println!("{outcome:?}"),
///     // Nothing was sent, or nothing written: fix the call or the data.
///     Err(e @ (redkit::Error::InvalidInput { .. } | redkit::Error::CorruptData { .. })) => {
///         eprintln!("refused: {e}")
///     }
///     // The request may not have reached Redis: retry with the same request id.
///     Err(e) if e.is_unavailable() => eprintln!("retry later: {e}"),
///     Err(e) => eprintln!("failed: {e}"),
/// }
/// # }
/// ```
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An argument was rejected in Rust before anything was sent to Redis.
    #[error("invalid {what}: {reason}")]
    InvalidInput {
        /// The parameter that was rejected (e.g. `"limit"`, `"ttl"`, `"key"`).
        what: &'static str,
        /// Why it was rejected.
        reason: String,
    },

    /// Redis (or the connection to it) returned an error that redkit does not interpret.
    #[error("redis error: {0}")]
    Redis(#[from] redis::RedisError),

    /// A script answered with a reply of a shape redkit does not expect; nothing was decoded.
    #[error("unexpected reply from script {script}: {detail}")]
    UnexpectedReply {
        /// `name.vN` of the script.
        script: String,
        /// What was wrong with the reply.
        detail: String,
    },

    /// A script found data at one of its keys that it refuses to use (e.g. a counter that is
    /// not an integer). The script wrote nothing.
    #[error("script {script} refused the data it found: {detail}")]
    CorruptData {
        /// `name.vN` of the script.
        script: String,
        /// What the script reported (the offending key role, never the key's value).
        detail: String,
    },

    /// A key used by the call holds a value of another Redis type. Nothing was written.
    #[error("script {script}: a key holds a value of the wrong type")]
    WrongType {
        /// `name.vN` of the script.
        script: String,
    },

    /// `SCRIPT LOAD` returned a SHA1 that differs from the one computed locally.
    #[error("script {script}: server computed SHA1 {server} but the local SHA1 is {local}")]
    ShaMismatch {
        /// `name.vN` of the script.
        script: String,
        /// The SHA1 computed by redkit.
        local: String,
        /// The SHA1 returned by the server.
        server: String,
    },

    /// A call was built with a number of keys that differs from what the script declares,
    /// or declares more than [`Call::MAX_KEYS`](crate::Call::MAX_KEYS) (then `expected` is
    /// that maximum).
    #[error("script {script} takes {expected} keys, the call has {got}")]
    KeyCount {
        /// `name.vN` of the script.
        script: String,
        /// Keys the script declares.
        expected: usize,
        /// Keys the call supplied.
        got: usize,
    },

    /// The keys of one request would live in different Cluster hash slots.
    #[error("the keys of one request span several hash slots: {detail}")]
    CrossSlot {
        /// Which parts of the request disagree.
        detail: String,
    },

    /// An operation did not complete within its deadline.
    #[error("timed out after {0:?}")]
    Timeout(Duration),

    /// Fewer nodes than a quorum agreed (Redlock).
    #[error(
        "quorum not reached: {agreed} of {total} nodes agreed, {needed} needed; failed: {failed:?}"
    )]
    NoQuorum {
        /// Nodes that agreed.
        agreed: usize,
        /// Nodes needed for a quorum.
        needed: usize,
        /// All nodes.
        total: usize,
        /// Per node that did not agree: its index and its answer (no passwords).
        failed: Vec<(usize, String)>,
        /// For an acquire: what each node answered when the attempt gave its key back (an
        /// unreached node may keep it until its TTL); `None` for a renewal or release.
        rollback: Option<crate::lock::Nodes>,
    },

    /// The Redis user may not run a command the script needs (ACL), found by the script's
    /// `redis.acl_check_cmd` checks before its first write (or denied on its first write).
    /// Nothing was written.
    #[error("script {script}: permission denied: {detail}")]
    PermissionDenied {
        /// `name.vN` of the script.
        script: String,
        /// Which command (and key role) was denied, never key values.
        detail: String,
    },

    /// Something the request needs does not exist in Redis (e.g. a SKU whose stock was never
    /// set). Nothing was written.
    #[error("{what} not found: {detail}")]
    NotFound {
        /// What is missing (e.g. `"sku"`).
        what: &'static str,
        /// Which one, as the caller named it (e.g. the SKU id).
        detail: String,
    },

    /// The task that was sending a call on this caller's behalf stopped before the outcome
    /// was known: a [grouped decrement](crate::inventory::InventoryBuilder::with_group_commit)
    /// whose leader's future was dropped (cancelled, timed out) while its script call was in
    /// flight. The call may have run: retry with the same request id to learn the outcome.
    #[error("interrupted: {detail}")]
    Interrupted {
        /// What was interrupted.
        detail: String,
    },

    /// A policy asks its algorithm for an option the algorithm cannot honour (group commit
    /// on GCRA, a lease on windows aligned to the clock, a burst on anything but GCRA, ...):
    /// refused when the policies are built, never ignored. Nothing was built.
    ///
    /// ```
    /// use redkit::middleware::{Policies, PolicyConfig, PolicySpec};
    /// use redkit::rate_limit::{Algorithm, QuotaLease, Rate};
    /// let aligned = PolicySpec::new("api", Rate::per_second(redkit::nonzero!(10))).algorithm(Algorithm::AlignedWindow);
    /// let config = PolicyConfig::new(aligned).with_lease(QuotaLease::new(8)?);
    /// match Policies::from_config(&config) {
    ///     Err(redkit::Error::UnsupportedOption { policy, option, algorithm, .. }) => {
    ///         assert_eq!((policy.as_str(), option, algorithm), ("api", "lease", Algorithm::AlignedWindow));
    ///     }
    ///     other => panic!("{other:?}"),
    /// }
    /// # Ok::<(), redkit::Error>(())
    /// ```
    #[error(
        "policy {policy:?}: option {option} is not supported by {}: {reason}",
        algorithm.as_str()
    )]
    UnsupportedOption {
        /// The policy's name (its limiter's name).
        policy: String,
        /// The option, as written in configuration (`"group_commit"`, `"lease"`, `"burst"`).
        option: &'static str,
        /// The policy's algorithm.
        algorithm: crate::rate_limit::Algorithm,
        /// Why the algorithm cannot honour it.
        reason: &'static str,
    },

    /// The server lacks a feature the call needs: Redis Functions (`FCALL`) on a server older
    /// than 7.0, or Lua scripting itself (`EVALSHA` / `EVAL` / `SCRIPT` unknown: a server
    /// without its Lua engine, or the commands renamed away; said once in the log). Nothing
    /// ran.
    #[error("not supported by this server: {feature}: {detail}")]
    Unsupported {
        /// The feature, e.g. `"Redis Functions (FCALL, Redis 7.0+)"`.
        feature: &'static str,
        /// What the server answered.
        detail: String,
    },
}

impl Error {
    pub(crate) fn invalid(what: &'static str, reason: impl Into<String>) -> Self {
        Self::InvalidInput {
            what,
            reason: reason.into(),
        }
    }

    pub(crate) fn unexpected(script: impl ToString, detail: impl Into<String>) -> Self {
        Self::UnexpectedReply {
            script: script.to_string(),
            detail: detail.into(),
        }
    }

    /// `true` when Redis refused who the client is: no password given to a server that
    /// needs one (`NOAUTH`), a wrong user or password (`WRONGPASS`, failed `AUTH`), or an ACL
    /// denial (`NOPERM`, [`Error::PermissionDenied`]). Retrying will not help; fixing the
    /// credentials or the ACL will.
    ///
    /// ```
    /// let e = redkit::Error::PermissionDenied { script: "s.v1".into(), detail: "set".into() };
    /// assert!(e.is_auth_failure() && !e.is_unavailable());
    /// ```
    pub fn is_auth_failure(&self) -> bool {
        match self {
            Self::Redis(e) => {
                e.kind() == redis::ErrorKind::AuthenticationFailed
                    || matches!(e.code(), Some("NOAUTH" | "WRONGPASS" | "NOPERM"))
            }
            Self::PermissionDenied { .. } => true,
            _ => false,
        }
    }

    /// `true` when the error is about the connection (refused, dropped, timed out), i.e. the
    /// request may not have reached Redis. Used by fail-open policies. Authentication failures
    /// are not unavailability (see [`is_auth_failure`](Self::is_auth_failure)).
    ///
    /// ```
    /// assert!(redkit::Error::Timeout(std::time::Duration::from_millis(5)).is_unavailable());
    /// ```
    pub fn is_unavailable(&self) -> bool {
        if self.is_auth_failure() {
            return false;
        }
        match self {
            Self::Redis(e) => {
                e.is_io_error()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal()
                    || e.is_timeout()
                    || e.is_unrecoverable_error()
            }
            Self::Timeout(_) | Self::Interrupted { .. } => true,
            _ => false,
        }
    }
}

/// `true` for the server errors that refuse a command (a script call, a queued transaction)
/// before it runs: placement (`MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`, `CROSSSLOT`), a
/// server not ready or read-only (`MASTERDOWN`, `LOADING`, `READONLY`, `BUSY`), an unknown
/// script (`NOSCRIPT`) and a discarded transaction (`EXECABORT`). Nothing was written.
pub(crate) fn refused_before_running(e: &redis::RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    matches!(
        e.kind(),
        ErrorKind::Server(
            ServerErrorKind::Moved
                | ServerErrorKind::Ask
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
                | ServerErrorKind::BusyLoading
                | ServerErrorKind::ReadOnly
                | ServerErrorKind::CrossSlot
                | ServerErrorKind::NoScript
                | ServerErrorKind::ExecAbort
        )
    ) || e.code() == Some("BUSY")
}
