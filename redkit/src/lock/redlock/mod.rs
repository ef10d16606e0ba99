//! [`Redlock`]: a lock over N independent Redis masters, held with a quorum of N/2+1.

mod guard;
pub(crate) mod inspect;
mod report;

pub use guard::RedlockGuard;
pub use inspect::{NodeState, RedlockState};
pub use report::{NodeAnswer, Nodes, Quorum};

use std::fmt;
use std::future::Future;
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use redis::Value;

use super::lease::deadline;
use super::lease::schema;
use super::lease::token::owner_token;
use super::lease::wait::{self, ms, Attempts, Pace, Step};
use super::options::{LockOptions, Polling};
use super::outcome::{release_label, renew_label, Acquire, HeldOnNodes, Release, Renew};
use crate::error::{Error, Result};
use crate::keys;
use crate::lock::metrics::{self, LockKind, LockOp};
use crate::script::{embedded, script_error, Call, Script, ScriptManager};

/// The Redlock algorithm over N independent masters (N odd: 3 or 5 typically).
///
/// - **acquire**: `SET key token NX PX ttl` on every node concurrently, each bounded by the
///   [node timeout](Self::with_node_timeout) (much smaller than the ttl, so a dead or frozen node
///   costs little). Success needs a quorum of N/2+1 *and* a validity left:
///   `ttl − elapsed − drift` (drift: 1 % of the ttl + 2 ms unless
///   [`LockOptions::drift`] says otherwise), measured with [`Instant`] from before the first
///   request. Otherwise the key is given back on all nodes, and the answer is
///   [`Acquire::Busy`] when enough nodes said "held by another owner" that no quorum
///   was possible, else [`Error::NoQuorum`] saying how many agreed and why each other node
///   failed; both carry what each node answered to the give-back ([`HeldOnNodes::rollback`],
///   `NoQuorum { rollback, .. }`).
/// - **renew**: compare-and-PEXPIRE on every node; [`Renew::Renewed`] only with a quorum.
/// - **release**: compare-and-delete on every node.
///
/// The verbs are those of every other kind: [`try_acquire`](Self::try_acquire)
/// and [`acquire`](Self::acquire) answer [`Acquire`]; [`renew`](Self::renew) and
/// [`release`](Self::release) answer a [`Quorum`]: the [`Renew`] or [`Release`] the quorum
/// decided, with each node's answer ([`Nodes`]), so the masters that could not be reached
/// (and may keep the key until its TTL) are known even when the quorum decided. The guard
/// holds the acquire's report ([`RedlockGuard::nodes`]).
///
/// Redlock gives no fencing tokens: counters on independent nodes cannot be made strictly
/// increasing without consensus. Use [`Lock`](crate::lock::Lock) on one server (or Cluster) when the
/// protected storage needs fencing.
///
/// ```no_run
/// # async fn run() -> redkit::Result<()> {
/// use std::time::Duration;
/// use redkit::lock::{LockOptions, Redlock};
/// let mut nodes = Vec::new();
/// for url in ["redis://10.0.0.1/", "redis://10.0.0.2/", "redis://10.0.0.3/"] {
///     nodes.push(redis::Client::open(url)?.get_multiplexed_async_connection().await?);
/// }
/// let redlock = Redlock::new(nodes)?.with_node_timeout(Duration::from_millis(50));
/// let options = LockOptions::new().ttl(Duration::from_secs(10));
/// if let redkit::lock::Acquire::Acquired(guard) = redlock.acquire("payout-9", &options).await? {
///     println!("held for {:?}", guard.validity());
///     redlock.release(guard).await?;
/// }
/// # Ok(()) }
/// ```
pub struct Redlock<C> {
    nodes: Vec<C>,
    manager: ScriptManager,
    release: &'static Script,
    renew: &'static Script,
    prefix: String,
    node_timeout: Duration,
}

/// The attempts of one acquire of a [`Redlock`]: each is a round on every node (no
/// connection of its own, hence `()`); one that failed for too few answers may be tried
/// again, like a busy lock.
struct Quorums<'a, C> {
    redlock: &'a Redlock<C>,
    key: &'a str,
    ttl_ms: u64,
    options: &'a LockOptions<Redlock<C>>,
}

impl<C: ConnectionLike + Clone> Attempts<()> for Quorums<'_, C> {
    type Guard = RedlockGuard;
    type Held = HeldOnNodes;

    const KIND: LockKind = LockKind::Redlock;

    async fn attempt(&mut self, (): &mut ()) -> Result<Step<RedlockGuard, HeldOnNodes>> {
        let attempt = self.redlock.attempt(self.key, self.ttl_ms, self.options);
        Ok(match attempt.await {
            Ok(answer) => Step::unless_acquired(answer),
            Err(e) => Step::Failed(e),
        })
    }
}

impl<C> fmt::Debug for Redlock<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redlock")
            .field("nodes", &self.nodes.len())
            .field("prefix", &self.prefix)
            .field("node_timeout", &self.node_timeout)
            .finish_non_exhaustive()
    }
}

impl<C> super::options::sealed::Sealed for Redlock<C> {}
impl<C> Polling for Redlock<C> {}

impl<C: ConnectionLike + Clone> Redlock<C> {
    /// Default bound on each node's answer.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis::aio::MultiplexedConnection;
    /// use redkit::lock::Redlock;
    /// assert_eq!(Redlock::<MultiplexedConnection>::DEFAULT_NODE_TIMEOUT, Duration::from_millis(50));
    /// # fn demo(nodes: Vec<MultiplexedConnection>) -> redkit::Result<()> {
    /// // masters in other regions: allow each four times the default
    /// let slower = Redlock::<MultiplexedConnection>::DEFAULT_NODE_TIMEOUT * 4;
    /// let redlock = Redlock::new(nodes)?.with_node_timeout(slower);
    /// # let _ = redlock; Ok(()) }
    /// ```
    pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(50);
    /// Default key prefix.
    ///
    /// ```
    /// use redis::aio::MultiplexedConnection;
    /// use redkit::lock::Redlock;
    /// // an ACL rule giving the locking user the Redlock keys
    /// let keys = format!("~{}:*", Redlock::<MultiplexedConnection>::DEFAULT_PREFIX);
    /// assert_eq!(keys, "~redkit:redlock:*");
    /// ```
    pub const DEFAULT_PREFIX: &'static str = "redkit:redlock";

    /// A Redlock over `nodes`, one connection per independent master. Their number must be
    /// odd (1, 3, 5, ...): with N nodes the quorum is N/2+1.
    ///
    /// Connections to nodes that may be down should be created with connection and response
    /// timeouts (`redis::AsyncConnectionConfig`); the node timeout bounds each request anyway.
    ///
    /// ```
    /// use redkit::lock::Redlock;
    /// let none: Vec<redis::aio::MultiplexedConnection> = Vec::new();
    /// assert!(Redlock::new(none).is_err());
    /// ```
    pub fn new(nodes: Vec<C>) -> Result<Self> {
        if nodes.is_empty() || nodes.len().is_multiple_of(2) {
            return Err(Error::invalid(
                "nodes",
                format!("need an odd number of nodes, got {}", nodes.len()),
            ));
        }
        Ok(Self {
            nodes,
            manager: ScriptManager::new(),
            release: embedded::LOCK_RELEASE.script(),
            renew: embedded::LOCK_RENEW.script(),
            prefix: Self::DEFAULT_PREFIX.to_owned(),
            node_timeout: Self::DEFAULT_NODE_TIMEOUT,
        })
    }

    /// Puts keys under `prefix` (a [`Prefix`](crate::keys::Prefix), checked where it was
    /// made, so this cannot fail).
    ///
    /// ```
    /// # fn demo(nodes: Vec<redis::aio::MultiplexedConnection>) -> redkit::Result<()> {
    /// use std::time::Duration;
    /// use redkit::keys::Prefix;
    /// let redlock = redkit::lock::Redlock::new(nodes)?
    ///     .with_prefix(Prefix::new("app:redlock")?)
    ///     .with_node_timeout(Duration::from_millis(30));
    /// assert_eq!(redlock.key("job")?, "app:redlock:{job}");
    /// # Ok(()) }
    /// ```
    pub fn with_prefix(mut self, prefix: keys::Prefix) -> Self {
        self.prefix = prefix.into_string();
        self
    }

    /// Runs every call through `manager` (e.g. one shared by the whole application).
    ///
    /// ```
    /// # fn demo(nodes: Vec<redis::aio::MultiplexedConnection>) -> redkit::Result<()> {
    /// let redlock = redkit::lock::Redlock::new(nodes)?.with_manager(redkit::ScriptManager::new());
    /// # let _ = redlock; Ok(()) }
    /// ```
    pub fn with_manager(mut self, manager: ScriptManager) -> Self {
        self.manager = manager;
        self
    }

    /// Bounds each node's answer (default [`DEFAULT_NODE_TIMEOUT`](Self::DEFAULT_NODE_TIMEOUT));
    /// must be non-zero and shorter than the ttl (checked at acquire).
    ///
    /// ```no_run
    /// # async fn run(nodes: Vec<redis::aio::MultiplexedConnection>) -> redkit::Result<()> {
    /// use std::time::Duration;
    /// use redkit::lock::{LockOptions, Redlock};
    /// let redlock = Redlock::new(nodes)?.with_node_timeout(Duration::from_millis(200));
    /// redlock.acquire("payout-9", &LockOptions::new().ttl(Duration::from_secs(10))).await?;
    /// // a ttl not longer than the node timeout is refused before anything is sent
    /// let short = LockOptions::new().ttl(Duration::from_millis(150));
    /// let refused = redlock.acquire("payout-9", &short).await;
    /// assert!(matches!(refused, Err(redkit::Error::InvalidInput { .. })));
    /// # Ok(()) }
    /// ```
    pub fn with_node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// Number of nodes that must agree: N/2+1.
    ///
    /// ```
    /// # use redis::aio::MultiplexedConnection;
    /// # fn demo(a: MultiplexedConnection, b: MultiplexedConnection, c: MultiplexedConnection) -> redkit::Result<()> {
    /// let redlock = redkit::lock::Redlock::new(vec![a, b, c])?;
    /// assert_eq!(redlock.quorum(), 2); // one of three masters may be down
    /// # Ok(()) }
    /// ```
    pub fn quorum(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    /// The key prefix.
    ///
    /// ```
    /// # fn demo(nodes: Vec<redis::aio::MultiplexedConnection>) -> redkit::Result<()> {
    /// let redlock = redkit::lock::Redlock::new(nodes)?;
    /// assert_eq!(redlock.prefix(), "redkit:redlock");
    /// # Ok(()) }
    /// ```
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The script manager used for every call.
    ///
    /// ```
    /// # fn demo(nodes: Vec<redis::aio::MultiplexedConnection>) -> redkit::Result<()> {
    /// let redlock = redkit::lock::Redlock::new(nodes)?;
    /// # let _ = redlock.manager(); Ok(()) }
    /// ```
    pub fn manager(&self) -> &ScriptManager {
        &self.manager
    }

    /// The key of `resource` on every node.
    ///
    /// ```
    /// # fn demo(nodes: Vec<redis::aio::MultiplexedConnection>) -> redkit::Result<()> {
    /// let redlock = redkit::lock::Redlock::new(nodes)?;
    /// assert_eq!(redlock.key("payout-9")?, "redkit:redlock:{payout-9}");
    /// assert!(redlock.key("").is_err());
    /// # Ok(()) }
    /// ```
    pub fn key(&self, resource: &str) -> Result<String> {
        schema::base(&self.prefix, resource)
    }

    /// One attempt on every node: [`Acquire::Acquired`] with a quorum and validity left;
    /// fails or answers as [`acquire`](Self::acquire) does otherwise. Same as `acquire` with no
    /// retries.
    ///
    /// ```no_run
    /// # async fn run(redlock: redkit::lock::Redlock<redis::aio::MultiplexedConnection>) -> redkit::Result<()> {
    /// use redkit::lock::{Acquire, LockOptions};
    /// if let Acquire::Acquired(guard) = redlock.try_acquire("payout-9", &LockOptions::new()).await? {
    ///     redlock.release(guard).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(
        &self,
        resource: &str,
        options: &LockOptions<Redlock<C>>,
    ) -> Result<Acquire<RedlockGuard, HeldOnNodes>> {
        self.acquire(resource, &options.clone().retries(0)).await
    }

    /// Acquires on a quorum, retrying as `options` allow (retries, jittered delay, overall
    /// deadline). [`Acquire::Busy`] (`held_on` of `nodes`) when the last attempt found the lock held by
    /// another owner on so many nodes that no quorum was possible; fails with
    /// [`Error::NoQuorum`] (how many agreed, which failed and why) when unreachable nodes
    /// prevented the quorum, with [`Error::Timeout`] when it was reached but no validity was
    /// left; in these cases the key was given back on all reachable nodes, and
    /// [`HeldOnNodes::rollback`] (for `Busy`) or `NoQuorum`'s `rollback` says what each node
    /// answered to that (a `WARN` event names the unreached ones).
    /// [`Error::InvalidInput`] (nothing sent) for bad input.
    ///
    /// ```no_run
    /// # async fn run(redlock: redkit::lock::Redlock<redis::aio::MultiplexedConnection>) -> redkit::Result<()> {
    /// use redkit::{lock::{Acquire, LockOptions}, Error};
    /// match redlock.acquire("payout-9", &LockOptions::new().retries(3)).await {
    ///     Ok(Acquire::Acquired(guard)) => { redlock.release(guard).await?; }
    ///     Ok(_busy) => println!("another owner holds it"),
    ///     Err(Error::NoQuorum { agreed, needed, failed, .. }) => {
    ///         eprintln!("{agreed}/{needed} nodes agreed; failed: {failed:?}");
    ///     }
    ///     Err(other) => return Err(other),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn acquire(
        &self,
        resource: &str,
        options: &LockOptions<Redlock<C>>,
    ) -> Result<Acquire<RedlockGuard, HeldOnNodes>> {
        let ttl_ms = options.validate()?;
        if self.node_timeout.is_zero() || self.node_timeout >= options.lease() {
            return Err(Error::invalid(
                "node timeout",
                "must be non-zero and much shorter than the ttl",
            ));
        }
        let key = self.key(resource)?;
        let mut quorums = Quorums {
            redlock: self,
            key: &key,
            ttl_ms,
            options,
        };
        wait::acquire(Pace::Poll(options.settings()), &mut (), &mut quorums).await
    }

    async fn attempt(
        &self,
        key: &str,
        ttl_ms: u64,
        options: &LockOptions<Redlock<C>>,
    ) -> Result<Acquire<RedlockGuard, HeldOnNodes>> {
        let token = owner_token();
        let started = Instant::now();
        let nodes = self
            .on_all_nodes(|mut conn| {
                let mut set = redis::cmd("SET");
                set.arg(key).arg(&token).arg("NX").arg("PX").arg(ttl_ms);
                async move {
                    match set.query_async::<Value>(&mut conn).await {
                        Ok(Value::Okay) => NodeAnswer::Done,
                        Ok(Value::Nil) => NodeAnswer::NotOwner,
                        Ok(other) => NodeAnswer::Failed(format!("unexpected reply {other:?}")),
                        Err(e) => NodeAnswer::Failed(e.to_string()),
                    }
                }
            })
            .await;
        let ttl = Duration::from_millis(ttl_ms);
        let drift = options.drift_allowance();
        let (agreed, refused) = (nodes.done(), nodes.not_owner());
        let guard = RedlockGuard {
            key: key.to_owned(),
            token,
            ttl,
            drift,
            valid_until: deadline(started, ttl, drift),
            nodes,
        };
        if agreed >= self.quorum() && guard.is_valid() {
            return Ok(Acquire::Acquired(guard));
        }
        let elapsed = started.elapsed();
        let attempt = guard.nodes.clone();
        let rollback = self.release_on_all(&guard).await;
        if rollback.unreached().next().is_some() {
            tracing::warn!(
                key,
                unreached = ?rollback.unreached().collect::<Vec<_>>(),
                "Redlock: a failed acquire could not give its key back on every node: \
                 those may keep it until its TTL"
            );
        }
        if agreed >= self.quorum() {
            return Err(Error::Timeout(elapsed));
        }
        // Even if every node that failed had agreed, the refusals leave no quorum.
        if refused > self.nodes.len() - self.quorum() {
            return Ok(Acquire::Busy(HeldOnNodes::on(
                refused,
                self.nodes.len(),
                rollback,
            )));
        }
        Err(self.no_quorum(&attempt, Some(rollback)))
    }

    /// Compare-and-PEXPIRE on every node, resetting the TTL to the guard's ttl (the same
    /// renewal script as [`Lock::renew`](super::Lock::renew)). [`Renew::Renewed`] with a
    /// quorum and validity left (the guard's validity is `ttl − elapsed − drift` again);
    /// [`Renew::Lost`] when so many nodes answered "not the owner" that no quorum was
    /// possible; with each node's answer ([`Quorum::nodes`], also kept in the guard).
    /// Otherwise (unreachable nodes decided) [`Error::NoQuorum`], or
    /// [`Error::Timeout`] when the quorum came too late. Except on `Renewed`, the guard is no
    /// longer valid.
    ///
    /// ```no_run
    /// # async fn run(redlock: redkit::lock::Redlock<redis::aio::MultiplexedConnection>, mut guard: redkit::lock::RedlockGuard) -> redkit::Result<()> {
    /// use redkit::lock::Renew;
    /// let renewed = redlock.renew(&mut guard).await?;
    /// if renewed.outcome == Renew::Lost {
    ///     return Ok(()); // stop: another owner may hold the lock now
    /// }
    /// let stale: Vec<usize> = renewed.nodes.unreached().collect(); // not renewed there
    /// # Ok(()) }
    /// ```
    pub async fn renew(&self, guard: &mut RedlockGuard) -> Result<Quorum<Renew>> {
        let renewed = self.renew_quorum(guard).await;
        let label = renew_label(&renewed.as_ref().map(|q| q.outcome));
        metrics::lock_operation(LockKind::Redlock, LockOp::Renew, label);
        renewed
    }

    /// [`renew`](Self::renew) on every node, decided by quorum.
    async fn renew_quorum(&self, guard: &mut RedlockGuard) -> Result<Quorum<Renew>> {
        let started = Instant::now();
        let ttl_ms = ms(guard.ttl);
        let nodes = self
            .on_all_nodes(|mut conn| {
                let mut call = Call::new(self.renew);
                call.key(&guard.key)
                    .key(schema::fence(&guard.key))
                    .arg(&guard.token)
                    .arg(ttl_ms)
                    .arg(schema::fence_ttl_ms(ttl_ms));
                async move { of_status(self.manager.invoke::<i64, _>(&mut conn, &call).await) }
            })
            .await;
        let valid_until = deadline(started, guard.ttl, guard.drift);
        let (agreed, refused) = (nodes.done(), nodes.not_owner());
        guard.nodes = nodes.clone();
        if agreed >= self.quorum() && valid_until > Instant::now() {
            guard.valid_until = valid_until;
            return Ok(Quorum {
                outcome: Renew::Renewed,
                nodes,
            });
        }
        guard.valid_until = Instant::now();
        if agreed >= self.quorum() {
            return Err(Error::Timeout(started.elapsed()));
        }
        if refused > self.nodes.len() - self.quorum() {
            return Ok(Quorum {
                outcome: Renew::Lost,
                nodes,
            });
        }
        Err(self.no_quorum(&nodes, None))
    }

    /// Compare-and-delete on every node (a node where another owner holds the key is left
    /// untouched). [`Release::Released`] when the key was deleted on a quorum,
    /// [`Release::NotOwner`] when so many nodes did not hold it (expired, or another owner's)
    /// that no quorum was possible; otherwise (unreachable nodes decided)
    /// [`Error::NoQuorum`] naming each node that failed and why. The answer carries each
    /// node's answer ([`Quorum::nodes`]): a master it could not reach (failed, timed out)
    /// keeps the key until its TTL; a `WARN` event names them too.
    ///
    /// The release is sent as `EVAL` with the script source, not `EVALSHA`: a node that did
    /// not answer in time (frozen, overloaded) runs our queued `SET` later and then this
    /// queued release; it must not depend on that node's script cache, since a `NOSCRIPT`
    /// answered to nobody would leave the key behind until its TTL.
    ///
    /// ```no_run
    /// # async fn run(redlock: redkit::lock::Redlock<redis::aio::MultiplexedConnection>, guard: redkit::lock::RedlockGuard) -> redkit::Result<()> {
    /// use redkit::lock::Release;
    /// let released = redlock.release(guard).await?;
    /// if released.outcome == Release::NotOwner {
    ///     eprintln!("the lease had ended: the work may have overlapped with another owner");
    /// }
    /// for node in released.nodes.unreached() {
    ///     eprintln!("master {node} was not reached: it keeps the key until its TTL");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn release(&self, guard: RedlockGuard) -> Result<Quorum<Release>> {
        let released = self.release_quorum(guard).await;
        let label = release_label(&released.as_ref().map(|q| q.outcome));
        metrics::lock_operation(LockKind::Redlock, LockOp::Release, label);
        released
    }

    /// [`release`](Self::release) on every node, decided by quorum.
    async fn release_quorum(&self, guard: RedlockGuard) -> Result<Quorum<Release>> {
        let nodes = self.release_on_all(&guard).await;
        if nodes.unreached().next().is_some() {
            tracing::warn!(
                key = guard.key,
                unreached = ?nodes.unreached().collect::<Vec<_>>(),
                "Redlock release: some nodes could not be reached: they may keep the key \
                 until its TTL"
            );
        }
        let outcome = if nodes.done() >= self.quorum() {
            Release::Released
        } else if nodes.not_owner() > self.nodes.len() - self.quorum() {
            Release::NotOwner
        } else {
            return Err(self.no_quorum(&nodes, None));
        };
        Ok(Quorum { outcome, nodes })
    }

    /// Compare-and-delete on every node, each node's answer.
    async fn release_on_all(&self, guard: &RedlockGuard) -> Nodes {
        self.on_all_nodes(|mut conn| {
            let mut call = Call::new(self.release);
            call.key(&guard.key).arg(&guard.token);
            let eval = Call::eval_from(self.release, call.evalsha());
            async move {
                let reply = eval
                    .query_async::<i64>(&mut conn)
                    .await
                    .map_err(|e| script_error(self.release, e));
                of_status(reply)
            }
        })
        .await
    }

    /// Runs `op` on every node concurrently, each bounded by the node timeout.
    async fn on_all_nodes<'a, F, Fut>(&'a self, op: F) -> Nodes
    where
        F: Fn(C) -> Fut,
        Fut: Future<Output = NodeAnswer> + 'a,
    {
        let timeout = self.node_timeout;
        let runs = self.nodes.iter().map(|conn| {
            let fut = op(conn.clone());
            async move {
                tokio::time::timeout(timeout, fut)
                    .await
                    .unwrap_or(NodeAnswer::TimedOut)
            }
        });
        Nodes::from(futures_util::future::join_all(runs).await)
    }

    fn no_quorum(&self, nodes: &Nodes, rollback: Option<Nodes>) -> Error {
        Error::NoQuorum {
            agreed: nodes.done(),
            needed: self.quorum(),
            total: self.nodes.len(),
            failed: nodes.failed(),
            rollback,
        }
    }
}

/// A node's answer to a 1/0 compare-and-act script (`0` = not the owner).
fn of_status(reply: Result<i64>) -> NodeAnswer {
    match reply {
        Ok(1) => NodeAnswer::Done,
        Ok(0) => NodeAnswer::NotOwner,
        Ok(other) => NodeAnswer::Failed(format!("unexpected status {other}")),
        Err(e) => NodeAnswer::Failed(e.to_string()),
    }
}
