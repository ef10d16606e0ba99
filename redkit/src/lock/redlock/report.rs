//! What each node answered to one Redlock round: [`Nodes`], [`NodeAnswer`], and
//! [`Quorum`], an outcome decided by quorum together with its report.

use std::fmt;

/// What one node answered to a Redlock round (an acquire's `SET`, a renewal, a release or
/// the give-back of a failed acquire).
///
/// ```
/// use redkit::lock::NodeAnswer;
/// assert!(NodeAnswer::TimedOut.is_unreached());
/// assert!(!NodeAnswer::NotOwner.is_unreached());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeAnswer {
    /// The node did what was asked: acquired, renewed, released, gave back.
    Done,
    /// The node did not do it because our key was not there: expired, never acquired there,
    /// or held by another owner.
    NotOwner,
    /// The node answered an error, or its connection failed: the message (never a password).
    /// What the node holds is not known: a key of ours may stay until its TTL.
    Failed(String),
    /// No answer within the node timeout: the command may still run there later (a frozen
    /// node runs what it queued when it resumes).
    TimedOut,
}

impl NodeAnswer {
    /// `true` for [`Failed`](Self::Failed) and [`TimedOut`](Self::TimedOut): the node may
    /// hold a key of ours until its TTL.
    ///
    /// ```
    /// use redkit::lock::NodeAnswer;
    /// assert!(NodeAnswer::Failed("connection refused".into()).is_unreached());
    /// assert!(!NodeAnswer::Done.is_unreached());
    /// ```
    pub fn is_unreached(&self) -> bool {
        matches!(self, Self::Failed(_) | Self::TimedOut)
    }
}

impl fmt::Display for NodeAnswer {
    /// `done`, `not the owner`, `failed: <message>`, `timed out`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Done => f.write_str("done"),
            Self::NotOwner => f.write_str("not the owner"),
            Self::Failed(why) => write!(f, "failed: {why}"),
            Self::TimedOut => f.write_str("timed out"),
        }
    }
}

/// Every node's answer to one Redlock round, in the order of the nodes given to
/// [`Redlock::new`](super::Redlock::new): which masters did it, which did not hold the key,
/// and which could not be reached (and may hold a key of ours until its TTL).
///
/// ```
/// use redkit::lock::{NodeAnswer, Nodes};
/// let nodes = Nodes::from(vec![NodeAnswer::Done, NodeAnswer::TimedOut, NodeAnswer::Done]);
/// assert_eq!((nodes.done(), nodes.not_owner()), (2, 0));
/// assert_eq!(nodes.unreached().collect::<Vec<_>>(), [1]);
/// assert_eq!(nodes.answers()[1], NodeAnswer::TimedOut);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Nodes {
    answers: Vec<NodeAnswer>,
}

impl Nodes {
    /// Each node's answer, by node index.
    ///
    /// ```
    /// use redkit::lock::{NodeAnswer, Nodes};
    /// let nodes = Nodes::from(vec![NodeAnswer::Done, NodeAnswer::NotOwner]);
    /// assert_eq!(nodes.answers(), [NodeAnswer::Done, NodeAnswer::NotOwner]);
    /// ```
    pub fn answers(&self) -> &[NodeAnswer] {
        &self.answers
    }

    /// Nodes that did what was asked.
    ///
    /// ```
    /// use redkit::lock::{NodeAnswer, Nodes};
    /// assert_eq!(Nodes::from(vec![NodeAnswer::Done, NodeAnswer::TimedOut]).done(), 1);
    /// ```
    pub fn done(&self) -> usize {
        self.count(|a| *a == NodeAnswer::Done)
    }

    /// Nodes that did not hold our key.
    ///
    /// ```
    /// use redkit::lock::{NodeAnswer, Nodes};
    /// assert_eq!(Nodes::from(vec![NodeAnswer::NotOwner, NodeAnswer::Done]).not_owner(), 1);
    /// ```
    pub fn not_owner(&self) -> usize {
        self.count(|a| *a == NodeAnswer::NotOwner)
    }

    /// The indexes of the nodes that failed or timed out: each may hold a key of ours until
    /// its TTL (an operator's list of masters to look at).
    ///
    /// ```
    /// use redkit::lock::{NodeAnswer, Nodes};
    /// let nodes = Nodes::from(vec![
    ///     NodeAnswer::Failed("connection reset".into()),
    ///     NodeAnswer::Done,
    ///     NodeAnswer::TimedOut,
    /// ]);
    /// assert_eq!(nodes.unreached().collect::<Vec<_>>(), [0, 2]);
    /// ```
    pub fn unreached(&self) -> impl Iterator<Item = usize> + '_ {
        self.answers
            .iter()
            .enumerate()
            .filter(|(_, a)| a.is_unreached())
            .map(|(i, _)| i)
    }

    /// Every node that did not do what was asked, with its answer (the `failed` list of
    /// [`Error::NoQuorum`](crate::Error::NoQuorum)).
    pub(super) fn failed(&self) -> Vec<(usize, String)> {
        self.answers
            .iter()
            .enumerate()
            .filter(|(_, a)| **a != NodeAnswer::Done)
            .map(|(i, a)| (i, a.to_string()))
            .collect()
    }

    fn count(&self, f: impl Fn(&NodeAnswer) -> bool) -> usize {
        self.answers.iter().filter(|a| f(a)).count()
    }
}

impl From<Vec<NodeAnswer>> for Nodes {
    /// The report of answers given in node order.
    fn from(answers: Vec<NodeAnswer>) -> Self {
        Self { answers }
    }
}

impl fmt::Display for Nodes {
    /// `node 0: done, node 1: timed out, ...`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, answer) in self.answers.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "node {i}: {answer}")?;
        }
        Ok(())
    }
}

/// An outcome a [`Redlock`](super::Redlock) decided by quorum, with what each node
/// answered: the release and renewal answer it, so an operator learns which masters could
/// not be reached (and may hold a stale key until its TTL) even when the quorum decided.
///
/// ```no_run
/// # async fn run(redlock: redkit::lock::Redlock<redis::aio::MultiplexedConnection>, guard: redkit::lock::RedlockGuard) -> redkit::Result<()> {
/// use redkit::lock::Release;
/// let released = redlock.release(guard).await?;
/// assert_eq!(released.outcome, Release::Released);
/// for node in released.nodes.unreached() {
///     eprintln!("master {node} may keep the key until its TTL");
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Quorum<T> {
    /// What the quorum decided.
    pub outcome: T,
    /// Each node's answer.
    pub nodes: Nodes,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_lists_by_node_index() {
        let nodes = Nodes::from(vec![
            NodeAnswer::Done,
            NodeAnswer::NotOwner,
            NodeAnswer::Failed("reset".into()),
            NodeAnswer::Done,
            NodeAnswer::TimedOut,
        ]);
        assert_eq!((nodes.done(), nodes.not_owner()), (2, 1));
        assert_eq!(nodes.unreached().collect::<Vec<_>>(), [2, 4]);
        assert_eq!(
            nodes.failed(),
            [
                (1, "not the owner".to_owned()),
                (2, "failed: reset".to_owned()),
                (4, "timed out".to_owned())
            ]
        );
        assert_eq!(
            nodes.to_string(),
            "node 0: done, node 1: not the owner, node 2: failed: reset, node 3: done, \
             node 4: timed out"
        );
    }
}
