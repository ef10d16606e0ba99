//! Replication acknowledgement on demand: `WAIT` after a script, in the same round trip.
//!
//! Redis replicates asynchronously: a write the primary acknowledged can be lost when the
//! primary dies before a replica received it, and the replica is promoted. `WAIT n timeout`
//! blocks the caller until `n` replicas acknowledged every write this connection made so far,
//! or the timeout passes, and answers how many did. redkit sends it in the same pipeline as the
//! script, so it costs no extra round trip, and reports the count in [`Acked`]: a caller can
//! refuse to confirm an order (or to use a fencing token) whose write might still be lost.
//!
//! `WAIT` does not make Redis strongly consistent: a write acknowledged by fewer replicas than
//! asked was still applied on the primary (it is not rolled back), and a replica that
//! acknowledged can still lose it if it is not the one promoted. See the README's "Failure
//! semantics" section for what is measured.
//!
//! This file holds the values ([`Replication`], [`Acked`]) and the wait commands; the call
//! path (`path.rs`) sends them behind the script.

use std::time::Duration;

use redis::{Pipeline, Value};

use crate::error::{Error, Result};

/// How many replicas must acknowledge a write, and how long to wait for them: `WAIT`, or
/// `WAITAOF` (Redis 7.2+, Valkey) when the write must also be on disk.
///
/// - [`Replication::new`]: `WAIT n timeout`, `n` replicas received the write (in memory);
/// - [`Replication::fsynced`]: `WAITAOF 0 n timeout`, `n` replicas wrote it to their
///   append-only file and fsynced it (it survives a replica's restart too);
/// - [`Replication::with_local_fsync`]: `WAITAOF 1 n timeout`, and the primary fsynced it to its
///   own append-only file (it survives the primary's restart; needs `appendonly yes` there).
///
/// ```
/// use std::time::Duration;
/// use redkit::script::Replication;
/// let r = Replication::new(1, Duration::from_millis(100))?;
/// assert_eq!((r.replicas(), r.timeout()), (1, Duration::from_millis(100)));
/// assert!(Replication::new(0, Duration::from_millis(100)).is_err());
/// assert!(Replication::new(1, Duration::ZERO).is_err()); // WAIT 1 0 would block forever
/// let disk = Replication::fsynced(1, Duration::from_millis(100))?.with_local_fsync();
/// assert!(disk.is_fsynced() && disk.local_fsync());
/// # Ok::<(), redkit::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Replication {
    replicas: u32,
    timeout: Duration,
    fsync: Fsync,
}

/// What a [`Replication`] waits for besides the replicas' memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Fsync {
    /// `WAIT`: replicas received the write.
    No,
    /// `WAITAOF 0 n`: replicas fsynced it.
    Replicas,
    /// `WAITAOF 1 n`: the primary fsynced it, and `n` replicas did.
    LocalAndReplicas,
}

impl Replication {
    /// The longest timeout accepted: a call must stay bounded.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::script::Replication;
    /// assert!(Replication::new(1, Replication::MAX_TIMEOUT).is_ok());
    /// assert!(Replication::new(1, Replication::MAX_TIMEOUT + Duration::from_millis(1)).is_err());
    /// ```
    pub const MAX_TIMEOUT: Duration = Duration::from_secs(60);

    /// Wait for `replicas` (>= 1) replicas, at most `timeout` (1 ms ..= [`Self::MAX_TIMEOUT`],
    /// rounded down to whole milliseconds).
    ///
    /// The script and its wait are one round trip, so the connection's response timeout
    /// (redis-rs's default: 500 ms) must be longer than `timeout` plus a round trip: with a
    /// shorter one, a replica slow to acknowledge turns into a timeout error for a call that
    /// ran. Set it with `redis::AsyncConnectionConfig::set_response_timeout`.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let r = redkit::script::Replication::new(2, Duration::from_secs(1))?;
    /// # let _ = r; Ok::<(), redkit::Error>(())
    /// ```
    pub fn new(replicas: u32, timeout: Duration) -> Result<Self> {
        if replicas == 0 {
            return Err(Error::invalid("replicas", "must be at least 1"));
        }
        Self::checked(replicas, timeout, Fsync::No)
    }

    /// Wait until `replicas` (>= 0) replicas have written the write to their append-only file
    /// and fsynced it (`WAITAOF`, Redis 7.2+ or Valkey), at most `timeout` (1 ms ..=
    /// [`Self::MAX_TIMEOUT`]). `0` replicas only makes sense with
    /// [`with_local_fsync`](Self::with_local_fsync) (a call asks for something to wait for:
    /// `fsynced(0, ..)` alone is answered [`Error::InvalidInput`] when used). On an older server
    /// a call asking for it is answered [`Error::Unsupported`] before anything is written.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let r = redkit::script::Replication::fsynced(1, Duration::from_millis(200))?;
    /// assert!(r.is_fsynced() && !r.local_fsync());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn fsynced(replicas: u32, timeout: Duration) -> Result<Self> {
        Self::checked(replicas, timeout, Fsync::Replicas)
    }

    /// Also wait for the primary's own fsync of the write to its append-only file
    /// (`WAITAOF 1 n timeout`): the write then survives a restart of the primary. The primary
    /// must run with `appendonly yes`; where it does not, a call is answered
    /// [`Error::Unsupported`] before anything is written. Turns a `WAIT` into a `WAITAOF`.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let r = redkit::script::Replication::fsynced(0, Duration::from_millis(200))?.with_local_fsync();
    /// assert!(r.local_fsync() && r.replicas() == 0);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn with_local_fsync(mut self) -> Self {
        self.fsync = Fsync::LocalAndReplicas;
        self
    }

    fn checked(replicas: u32, timeout: Duration, fsync: Fsync) -> Result<Self> {
        if timeout < Duration::from_millis(1) || timeout > Self::MAX_TIMEOUT {
            return Err(Error::invalid(
                "timeout",
                format!(
                    "must be 1 ms ..= {:?} (0 would make WAIT block forever)",
                    Self::MAX_TIMEOUT
                ),
            ));
        }
        Ok(Self {
            replicas,
            timeout,
            fsync,
        })
    }

    /// Replicas that must acknowledge.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let r = redkit::script::Replication::new(2, Duration::from_secs(1))?;
    /// assert_eq!(r.replicas(), 2);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn replicas(&self) -> u32 {
        self.replicas
    }

    /// How long `WAIT` may block.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let r = redkit::script::Replication::new(1, Duration::from_millis(250))?;
    /// assert_eq!(r.timeout(), Duration::from_millis(250));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// `true` when the wait is a `WAITAOF` (replicas' fsync, and the primary's with
    /// [`with_local_fsync`](Self::with_local_fsync)).
    ///
    /// ```
    /// # use std::time::Duration;
    /// use redkit::script::Replication;
    /// assert!(!Replication::new(1, Duration::from_secs(1))?.is_fsynced());
    /// assert!(Replication::new(1, Duration::from_secs(1))?.with_local_fsync().is_fsynced());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn is_fsynced(&self) -> bool {
        self.fsync != Fsync::No
    }

    /// `true` when the primary's own fsync is waited for.
    ///
    /// ```
    /// # use std::time::Duration;
    /// use redkit::script::Replication;
    /// assert!(!Replication::fsynced(1, Duration::from_secs(1))?.local_fsync());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn local_fsync(&self) -> bool {
        self.fsync == Fsync::LocalAndReplicas
    }

    /// `true` when a write this wait acknowledged is also acknowledged as `other` asks: at
    /// least as many replicas, and at least as much fsync (a `WAIT` covers no `WAITAOF`;
    /// the timeouts do not matter).
    pub(crate) fn covers(&self, other: &Replication) -> bool {
        let rank = |f: Fsync| match f {
            Fsync::No => 0,
            Fsync::Replicas => 1,
            Fsync::LocalAndReplicas => 2,
        };
        self.replicas >= other.replicas && rank(self.fsync) >= rank(other.fsync)
    }

    /// The same wait with what is left of its timeout once `spent` has passed (at least 1 ms:
    /// `WAIT n 0` would block forever). A call whose first wait went behind a command that did
    /// not run waits only for the rest of its budget after the recovery: at most about its
    /// timeout in all.
    pub(crate) fn after(&self, spent: Duration) -> Replication {
        Replication {
            timeout: self
                .timeout
                .saturating_sub(spent)
                .max(Duration::from_millis(1)),
            ..*self
        }
    }

    /// Refuses a wait that waits for nothing (`fsynced(0, ..)` without the local fsync).
    pub(crate) fn validate(&self) -> Result<()> {
        if self.replicas == 0 && !self.local_fsync() {
            return Err(Error::invalid(
                "replicas",
                "must be at least 1, or ask for the local fsync (with_local_fsync)",
            ));
        }
        Ok(())
    }

    /// The commands to send after the write, in the same pipeline; the last one's reply is
    /// the acknowledgement.
    ///
    /// A replica acknowledges its fsync only when the primary asks it for an offset, which a
    /// blocked `WAITAOF` does right away: pipelined behind the write, that question reaches
    /// the replica with the write itself, before the replica fsynced it, and the next chance
    /// is the replica's periodic ack, about a second later (measured on Valkey 9.1: 1.00 s
    /// per call). So a `WAITAOF` with replicas is sent behind a `WAIT` for the same replicas
    /// with half the timeout: once the replicas received the write, the `WAITAOF`'s question
    /// finds it fsynced (measured: under 2 ms, worst of 50). The two share the timeout.
    fn wait_cmds(&self) -> Vec<redis::Cmd> {
        let ms = u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX);
        let wait = |replicas: u32, ms: u64| {
            let mut cmd = redis::cmd("WAIT");
            cmd.arg(replicas).arg(ms);
            cmd
        };
        let waitaof = |ms: u64| {
            let mut cmd = redis::cmd("WAITAOF");
            cmd.arg(u8::from(self.local_fsync()))
                .arg(self.replicas)
                .arg(ms);
            cmd
        };
        match self.fsync {
            Fsync::No => vec![wait(self.replicas, ms)],
            _ if !self.wait_first(ms) => vec![waitaof(ms)],
            _ => vec![wait(self.replicas, ms / 2), waitaof(ms - ms / 2)],
        }
    }

    /// Whether a `WAITAOF` of `ms` milliseconds goes behind a `WAIT` (replicas asked for, and
    /// a timeout that halves into two non-zero waits).
    fn wait_first(&self, ms: u64) -> bool {
        self.fsync != Fsync::No && self.replicas > 0 && ms >= 2
    }

    /// `first`, then the wait commands, in one pipeline whose errors stay per command (a
    /// refused wait must not hide that `first` ran).
    pub(crate) fn pipeline(&self, first: redis::Cmd) -> Pipeline {
        let waits = self.wait_cmds();
        let mut pipe = Pipeline::with_capacity(1 + waits.len());
        pipe.ignore_errors();
        pipe.add_command(first);
        for wait in waits {
            pipe.add_command(wait);
        }
        pipe
    }

    /// The reply of the pipeline's first command and the wait's (the last), or `None` when
    /// there are not exactly as many replies as [`pipeline`](Self::pipeline) sent commands.
    pub(crate) fn split_replies(&self, mut replies: Vec<Value>) -> Option<(Value, Value)> {
        let ms = u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX);
        let sent = 2 + usize::from(self.wait_first(ms));
        if replies.len() != sent {
            return None;
        }
        let wait = replies.pop()?;
        replies.into_iter().next().map(|first| (first, wait))
    }

    /// The acknowledgement of an outcome from the wait command's reply. A reply that is not the
    /// expected shape (an error: `WAIT` denied by an ACL, say) counts as no acknowledgement:
    /// the outcome stands (the script ran), it is only not confirmed.
    pub(crate) fn acked<T>(&self, outcome: T, reply: &Value) -> Acked<T> {
        let count = |v: &Value| match v {
            Value::Int(n) => u32::try_from(*n).ok(),
            _ => None,
        };
        let (local, replicas) = match (self.fsync, reply) {
            (Fsync::No, v) => (None, count(v)),
            (_, Value::Array(items)) if items.len() == 2 => (
                self.local_fsync().then(|| count(&items[0]) == Some(1)),
                count(&items[1]),
            ),
            _ => (self.local_fsync().then_some(false), None),
        };
        if replicas.is_none() {
            tracing::warn!(
                ?reply,
                "replication wait not answered with a count: counted as 0"
            );
        }
        Acked {
            outcome,
            replicas: replicas.unwrap_or(0),
            requested: self.replicas,
            local_fsync: local,
        }
    }
}

/// An outcome together with how many replicas acknowledged the write behind it.
///
/// `replicas >= requested` means the write reached that many replicas before the reply;
/// fewer means it is applied on the primary but could still be lost in a failover.
/// With [`Replication::with_local_fsync`], `local_fsync` says whether the primary fsynced it.
///
/// ```
/// use redkit::script::Acked;
/// let a = Acked::new("placed", 0, 1);
/// assert!(!a.is_replicated()); // applied, but no replica has it yet
/// assert!(a.map(|s| s.len()).outcome == 6);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Acked<T> {
    /// The outcome of the operation, exactly as without acknowledgement.
    pub outcome: T,
    /// Replicas that acknowledged (the reply of `WAIT`, or `WAITAOF`'s replica count).
    pub replicas: u32,
    /// Replicas that were asked for.
    pub requested: u32,
    /// With [`Replication::with_local_fsync`]: whether the primary fsynced the write to its
    /// append-only file in time (`None`: not asked).
    pub local_fsync: Option<bool>,
}

impl<T> Acked<T> {
    /// An outcome with its acknowledgement count.
    ///
    /// ```
    /// let a = redkit::script::Acked::new(7, 1, 1);
    /// assert!(a.is_replicated());
    /// ```
    pub fn new(outcome: T, replicas: u32, requested: u32) -> Self {
        Self {
            outcome,
            replicas,
            requested,
            local_fsync: None,
        }
    }

    /// `true` when at least the requested number of replicas acknowledged (and, where it was
    /// asked for, the primary fsynced).
    ///
    /// ```
    /// assert!(!redkit::script::Acked::new((), 1, 2).is_replicated());
    /// ```
    pub fn is_replicated(&self) -> bool {
        self.replicas >= self.requested && self.local_fsync != Some(false)
    }

    /// The outcome, and the acknowledgement without it (to map it by a fallible step).
    pub(crate) fn split(self) -> (T, Acked<()>) {
        let ack = Acked {
            outcome: (),
            replicas: self.replicas,
            requested: self.requested,
            local_fsync: self.local_fsync,
        };
        (self.outcome, ack)
    }

    /// Maps the outcome, keeping the counts.
    ///
    /// ```
    /// let a = redkit::script::Acked::new(2, 1, 1).map(|n| n * 10);
    /// assert_eq!(a.outcome, 20);
    /// ```
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Acked<U> {
        Acked {
            outcome: f(self.outcome),
            replicas: self.replicas,
            requested: self.requested,
            local_fsync: self.local_fsync,
        }
    }
}

/// A view of a component whose writes wait for replication: the same verbs with the same
/// arguments, each followed by `WAIT` (or `WAITAOF`) in the same round trip and answering
/// [`Acked`] (the outcome and how many replicas have it). Made by `replicated(wait)` on the
/// component: [`ScriptManager`](super::ScriptManager),
/// [`Store`](crate::inventory::Store), [`Inventory`](crate::inventory::Inventory),
/// [`Lock`](crate::lock::Lock) (its fenced writes). A lock's own acquire and renewals wait for
/// replicas through [`LockOptions::require_replicas`](crate::lock::LockOptions::require_replicas)
/// instead, which also refuses what fewer replicas acknowledged.
///
/// ```no_run
/// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
/// use std::time::Duration;
/// use redkit::script::Replication;
/// let store = redkit::inventory::Inventory::new("inv")?.store("s1")?;
/// let wait = Replication::new(1, Duration::from_millis(200))?;
/// let acked = store.replicated(wait).decrement(&mut conn, "sku-1", 1, Some("order-17")).await?;
/// if !acked.is_replicated() { /* applied on the primary only: could be lost in a failover */ }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Replicated<'a, T> {
    of: &'a T,
    wait: Replication,
}

impl<'a, T> Replicated<'a, T> {
    pub(crate) fn new(of: &'a T, wait: Replication) -> Self {
        Self { of, wait }
    }

    /// The component viewed.
    pub(crate) fn of(&self) -> &'a T {
        self.of
    }

    /// What every write of this view waits for.
    ///
    /// ```
    /// # use std::time::Duration;
    /// use redkit::script::{Replication, ScriptManager};
    /// let wait = Replication::new(1, Duration::from_millis(100))?;
    /// let manager = ScriptManager::new();
    /// assert_eq!(manager.replicated(wait).wait(), wait);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn wait(&self) -> Replication {
        self.wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_command_is_encoded_in_ms() {
        let r = Replication::new(2, Duration::from_micros(1_500)).unwrap();
        assert_eq!(encoded(&r), vec![vec!["WAIT", "2", "1"]]);
        let r = Replication::fsynced(1, Duration::from_millis(301)).unwrap();
        assert_eq!(
            encoded(&r),
            vec![vec!["WAIT", "1", "150"], vec!["WAITAOF", "0", "1", "151"]]
        );
        let r = Replication::fsynced(0, Duration::from_millis(300))
            .unwrap()
            .with_local_fsync();
        assert_eq!(encoded(&r), vec![vec!["WAITAOF", "1", "0", "300"]]);
        // Never a 0 ms wait (it would block forever).
        let r = Replication::fsynced(1, Duration::from_millis(1)).unwrap();
        assert_eq!(encoded(&r), vec![vec!["WAITAOF", "0", "1", "1"]]);
    }

    #[test]
    fn split_replies_takes_the_first_and_the_last() {
        let r = Replication::fsynced(1, Duration::from_millis(100)).unwrap();
        let replies = vec![Value::Int(7), Value::Int(1), Value::Nil];
        assert_eq!(r.split_replies(replies), Some((Value::Int(7), Value::Nil)));
        assert_eq!(r.split_replies(vec![Value::Int(7), Value::Nil]), None);
        let w = Replication::new(1, Duration::from_millis(100)).unwrap();
        assert_eq!(
            w.split_replies(vec![Value::Int(7), Value::Int(1)]),
            Some((Value::Int(7), Value::Int(1)))
        );
    }

    fn encoded(r: &Replication) -> Vec<Vec<String>> {
        r.wait_cmds()
            .iter()
            .map(|cmd| {
                cmd.args_iter()
                    .map(|a| match a {
                        redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                        _ => String::new(),
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn covers_asks_for_as_many_replicas_and_as_much_fsync() {
        let ms = Duration::from_millis(100);
        let one = Replication::new(1, ms).unwrap();
        let two = Replication::new(2, Duration::from_secs(1)).unwrap();
        let disk = Replication::fsynced(1, ms).unwrap();
        let local = Replication::fsynced(1, ms).unwrap().with_local_fsync();
        let local_only = Replication::fsynced(0, ms).unwrap().with_local_fsync();
        assert!(one.covers(&one) && two.covers(&one) && !one.covers(&two));
        assert!(disk.covers(&one) && !one.covers(&disk));
        assert!(local.covers(&disk) && !disk.covers(&local));
        assert!(!local_only.covers(&one));
    }

    #[test]
    fn extreme_inputs_are_errors_not_panics() {
        assert!(Replication::new(u32::MAX, Duration::MAX).is_err());
        assert!(Replication::new(u32::MAX, Replication::MAX_TIMEOUT).is_ok());
        assert!(Replication::new(1, Duration::from_nanos(999_999)).is_err());
    }
}
