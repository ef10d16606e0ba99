//! Looking at a [`Redlock`] on every master at once: who holds the resource on each, for how
//! long, and on how many. Diagnostic by nature.

use redis::aio::ConnectionLike;

use super::Redlock;
use crate::lock::single::inspect::{decode, inspect_call};
use crate::lock::Holder;
use crate::script::{embedded, Call};

/// What one master holds for a Redlock resource ([`RedlockState::nodes`]).
///
/// ```
/// # fn show(n: &redkit::lock::NodeState) {
/// use redkit::lock::NodeState;
/// match n {
///     NodeState::Held(h) => println!("held by {}", h.token),
///     NodeState::Free => println!("free"),
///     NodeState::Failed(why) => println!("no answer: {why}"),
///     _ => {}
/// }
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeState {
    /// The key holds this owner token, with this lease left.
    Held(Holder),
    /// No key: free on this master.
    Free,
    /// The master did not answer in time, or answered an error (said).
    Failed(String),
}

/// A Redlock resource on every master at one instant ([`Redlock::inspect`]). A diagnostic:
/// holds begin and end while it is read.
///
/// ```no_run
/// # async fn run(r: redkit::lock::Redlock<redis::aio::MultiplexedConnection>) -> redkit::Result<()> {
/// let state = r.inspect("payout-9").await?;
/// if let Some((token, k)) = state.held_on() {
///     println!("held by {token} on {k} of {}", state.nodes.len());
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedlockState {
    /// Each master's answer, in the order the masters were given.
    pub nodes: Vec<NodeState>,
}

impl RedlockState {
    /// The owner token held on the most masters, and on how many (`None` when free on every
    /// master that answered). A hold is valid only on a quorum (a majority).
    ///
    /// ```
    /// let free = redkit::lock::RedlockState::default();
    /// assert_eq!(free.held_on(), None);
    /// ```
    pub fn held_on(&self) -> Option<(&str, usize)> {
        let mut counts: Vec<(&str, usize)> = Vec::new();
        for node in &self.nodes {
            if let NodeState::Held(h) = node {
                match counts.iter_mut().find(|(t, _)| *t == h.token) {
                    Some((_, n)) => *n += 1,
                    None => counts.push((h.token.as_str(), 1)),
                }
            }
        }
        counts.into_iter().max_by_key(|(_, n)| *n)
    }
}

impl<C: ConnectionLike + Clone> Redlock<C> {
    /// Reads `resource`'s key on every master at once (each bounded by the node timeout):
    /// the holder and its lease left on each, or why a master did not say. One read-only
    /// script call per master; nothing is written.
    ///
    /// Errors: [`Error::InvalidInput`](crate::Error::InvalidInput) for a bad resource
    /// (nothing sent). A master that fails is reported in its [`NodeState::Failed`].
    ///
    /// ```no_run
    /// # async fn run(r: redkit::lock::Redlock<redis::aio::MultiplexedConnection>) -> redkit::Result<()> {
    /// let state = r.inspect("payout-9").await?;
    /// for (i, node) in state.nodes.iter().enumerate() {
    ///     println!("master {i}: {node:?}");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self, resource: &str) -> crate::Result<RedlockState> {
        let script = embedded::LOCK_INSPECT.script();
        let call = inspect_call(&self.key(resource)?);
        let eval = Call::eval_from(script, call.evalsha());
        let timeout = self.node_timeout;
        let reads = self.nodes.iter().map(|conn| {
            let (mut conn, eval) = (conn.clone(), &eval);
            async move {
                let read = async {
                    let reply: redis::Value = eval.query_async(&mut conn).await?;
                    decode(script, reply)
                };
                match tokio::time::timeout(timeout, read).await {
                    Ok(Ok(state)) => state.holder.map_or(NodeState::Free, NodeState::Held),
                    Ok(Err(e)) => NodeState::Failed(e.to_string()),
                    Err(_) => NodeState::Failed(format!("no answer within {timeout:?}")),
                }
            }
        });
        Ok(RedlockState {
            nodes: futures_util::future::join_all(reads).await,
        })
    }
}
