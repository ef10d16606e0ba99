//! [`Coalescing`]: the concurrent commands of many tasks on one connection sent together,
//! as pipelines.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use redis::aio::ConnectionLike;
use redis::{Cmd, RedisFuture, RedisResult, Value};
use tokio::sync::oneshot;

use crate::error::{Error, Result};

/// A connection that sends the commands its clones receive concurrently as **pipelines**: a
/// command that arrives while `in_flight` pipelines are already out waits, and the next
/// pipeline carries every command waiting then (up to `max_batch`). Alone, a command goes out
/// at once, by itself: no timer, no added latency.
///
/// Why: redis-rs's `MultiplexedConnection` handles each request on its own (a message to its
/// driver task, a reply channel, a write), and with many tasks on one connection that
/// per-request work on the client, not Redis, is the limit. Measured in `cargo bench --bench
/// lean` (case `pipe`, README "Benchmarks"): the same script reaches about 0.5x of the
/// `redis-benchmark -c 8 -P 16` ceiling from 64 tasks sending one command each, and 0.9x to
/// 1.1x from a few tasks sending pipelines of 16.
///
/// What stays the same: each command gets its own reply, server errors included (a pipeline is
/// not a transaction: commands of other callers run whatever one of them answers); the
/// commands of one task that awaits each reply run in that task's order. A transport error
/// or a response timeout of a pipeline is every member's error (each may have run: the
/// failure contract's "maybe ran", exactly as for a single command). Pipelines and
/// transactions sent through it (`req_packed_commands`, e.g. redkit's batches) go straight to
/// the inner connection. A blocking command (e.g. `BLPOP`) holds up the commands queued behind
/// it, as on any one connection: give blocking waiters a connection of their own.
///
/// For a single server's `MultiplexedConnection` (or [`connect::manager`](super::manager)'s
/// `ConnectionManager`); on a Cluster the inner connection splits a pipeline by node itself.
/// Cheap to clone: clones share the queue.
///
/// ```no_run
/// # async fn run() -> redkit::Result<()> {
/// use redkit::connect::{self, Coalescing, Timeouts};
/// use redkit::rate_limit::{FixedWindow, LimitKey, Rate};
/// use std::time::Duration;
///
/// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
/// let conn = Coalescing::new(connect::multiplexed(&client, Timeouts::default()).await?);
/// let limiter = FixedWindow::new("api", Rate::per_minute(redkit::nonzero!(100)))?;
/// // Each request handler uses a clone; concurrent checks share pipelines.
/// let mut c = conn.clone();
/// let d = limiter.check(&mut c, &LimitKey::text("user-1")?).await?;
/// # let _ = d; Ok(()) }
/// ```
pub struct Coalescing<C> {
    inner: C,
    shared: Arc<Shared>,
}

struct Shared {
    max_batch: usize,
    max_in_flight: usize,
    state: Mutex<State>,
    /// Sends (pipelines, and commands sent alone) and the commands they carried.
    sends: AtomicU64,
    commands: AtomicU64,
}

/// What a [`Coalescing`] connection sent so far: `commands / sends` is the mean pipeline size.
///
/// ```no_run
/// # fn f(conn: redkit::connect::Coalescing<redis::aio::MultiplexedConnection>) {
/// let s = conn.stats();
/// println!("{} commands in {} sends", s.commands, s.sends);
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct CoalescingStats {
    /// Pipelines sent, plus commands sent alone.
    pub sends: u64,
    /// Commands sent (one per `req_packed_command`).
    pub commands: u64,
}

#[derive(Default)]
struct State {
    in_flight: usize,
    queue: VecDeque<Pending>,
}

struct Pending {
    cmd: Cmd,
    tx: oneshot::Sender<RedisResult<Value>>,
}

impl<C> Coalescing<C> {
    /// The largest pipeline by default.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redkit::Result<()> {
    /// use redis::aio::ConnectionManager;
    /// use redkit::connect::{self, Coalescing, Timeouts};
    ///
    /// // A lazy manager connects on its first command: nothing here needs a server.
    /// let client = redis::Client::open("redis://127.0.0.1:1/")?;
    /// let conn = ConnectionManager::new_lazy_with_config(client, connect::manager_config(Timeouts::default()))?;
    /// let conn = Coalescing::new(conn);
    /// assert_eq!(conn.max_batch(), Coalescing::<ConnectionManager>::DEFAULT_MAX_BATCH);
    /// assert_eq!(conn.max_batch(), 64);
    /// # Ok(()) }
    /// ```
    pub const DEFAULT_MAX_BATCH: usize = 64;
    /// Pipelines out at once by default: two, so that one is filled while the other travels.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redkit::Result<()> {
    /// # let client = redis::Client::open("redis://127.0.0.1:1/")?;
    /// # let conn = ConnectionManager::new_lazy_with_config(client, redkit::connect::manager_config(Default::default()))?;
    /// use redis::aio::ConnectionManager;
    /// use redkit::connect::Coalescing;
    ///
    /// // `conn`: a ConnectionManager (or a MultiplexedConnection).
    /// let conn = Coalescing::new(conn);
    /// assert_eq!(conn.in_flight(), Coalescing::<ConnectionManager>::DEFAULT_IN_FLIGHT);
    /// assert_eq!(conn.in_flight(), 2);
    /// # Ok(()) }
    /// ```
    pub const DEFAULT_IN_FLIGHT: usize = 2;
    /// The largest `max_batch` accepted.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redkit::Result<()> {
    /// # let client = redis::Client::open("redis://127.0.0.1:1/")?;
    /// # let conn = ConnectionManager::new_lazy_with_config(client, redkit::connect::manager_config(Default::default()))?;
    /// use redis::aio::ConnectionManager;
    /// use redkit::connect::Coalescing;
    ///
    /// type Coalesced = Coalescing<ConnectionManager>;
    /// // `conn`: a ConnectionManager (or a MultiplexedConnection).
    /// let widest = Coalesced::with_limits(conn.clone(), Coalesced::MAX_BATCH, 1)?;
    /// assert_eq!(widest.max_batch(), 4096);
    /// assert!(Coalesced::with_limits(conn, Coalesced::MAX_BATCH + 1, 1).is_err());
    /// # Ok(()) }
    /// ```
    pub const MAX_BATCH: usize = 4096;
    /// The largest `in_flight` accepted.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redkit::Result<()> {
    /// # let client = redis::Client::open("redis://127.0.0.1:1/")?;
    /// # let conn = ConnectionManager::new_lazy_with_config(client, redkit::connect::manager_config(Default::default()))?;
    /// use redis::aio::ConnectionManager;
    /// use redkit::connect::Coalescing;
    ///
    /// type Coalesced = Coalescing<ConnectionManager>;
    /// // `conn`: a ConnectionManager (or a MultiplexedConnection).
    /// let busiest = Coalesced::with_limits(conn.clone(), 16, Coalesced::MAX_IN_FLIGHT)?;
    /// assert_eq!(busiest.in_flight(), 64);
    /// assert!(Coalesced::with_limits(conn, 16, Coalesced::MAX_IN_FLIGHT + 1).is_err());
    /// # Ok(()) }
    /// ```
    pub const MAX_IN_FLIGHT: usize = 64;

    /// Coalesces the commands sent through clones of `inner`, with
    /// [`DEFAULT_MAX_BATCH`](Self::DEFAULT_MAX_BATCH) and
    /// [`DEFAULT_IN_FLIGHT`](Self::DEFAULT_IN_FLIGHT).
    ///
    /// ```no_run
    /// # async fn run(conn: redis::aio::MultiplexedConnection) {
    /// let conn = redkit::connect::Coalescing::new(conn);
    /// assert_eq!(conn.max_batch(), 64);
    /// # }
    /// ```
    pub fn new(inner: C) -> Self {
        Self::build(inner, Self::DEFAULT_MAX_BATCH, Self::DEFAULT_IN_FLIGHT)
    }

    /// With at most `max_batch` commands per pipeline (1..=[`MAX_BATCH`](Self::MAX_BATCH))
    /// and at most `in_flight` pipelines out at once (1..=[`MAX_IN_FLIGHT`](Self::MAX_IN_FLIGHT)).
    /// [`Error::InvalidInput`] outside those ranges.
    ///
    /// ```no_run
    /// # async fn run(conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use redkit::connect::Coalescing;
    /// let conn = Coalescing::with_limits(conn.clone(), 16, 4)?;
    /// assert_eq!((conn.max_batch(), conn.in_flight()), (16, 4));
    /// assert!(Coalescing::with_limits(conn, 0, 1).is_err());
    /// # Ok(()) }
    /// ```
    pub fn with_limits(inner: C, max_batch: usize, in_flight: usize) -> Result<Self> {
        if !(1..=Self::MAX_BATCH).contains(&max_batch) {
            return Err(Error::invalid("max_batch", "must be 1..=4096"));
        }
        if !(1..=Self::MAX_IN_FLIGHT).contains(&in_flight) {
            return Err(Error::invalid("in_flight", "must be 1..=64"));
        }
        Ok(Self::build(inner, max_batch, in_flight))
    }

    fn build(inner: C, max_batch: usize, max_in_flight: usize) -> Self {
        Self {
            inner,
            shared: Arc::new(Shared {
                max_batch,
                max_in_flight,
                state: Mutex::new(State::default()),
                sends: AtomicU64::new(0),
                commands: AtomicU64::new(0),
            }),
        }
    }

    /// The most commands in one pipeline.
    ///
    /// ```no_run
    /// # fn f(conn: redkit::connect::Coalescing<redis::aio::MultiplexedConnection>) { let _ = conn.max_batch(); }
    /// ```
    pub fn max_batch(&self) -> usize {
        self.shared.max_batch
    }

    /// The most pipelines out at once.
    ///
    /// ```no_run
    /// # fn f(conn: redkit::connect::Coalescing<redis::aio::MultiplexedConnection>) { let _ = conn.in_flight(); }
    /// ```
    pub fn in_flight(&self) -> usize {
        self.shared.max_in_flight
    }

    /// Sends and commands so far (shared by all clones).
    ///
    /// ```no_run
    /// # fn f(conn: redkit::connect::Coalescing<redis::aio::MultiplexedConnection>) {
    /// assert!(conn.stats().sends <= conn.stats().commands);
    /// # }
    /// ```
    pub fn stats(&self) -> CoalescingStats {
        CoalescingStats {
            sends: self.shared.sends.load(Ordering::Relaxed),
            commands: self.shared.commands.load(Ordering::Relaxed),
        }
    }

    /// The connection the pipelines go through.
    ///
    /// ```no_run
    /// # fn f(conn: redkit::connect::Coalescing<redis::aio::MultiplexedConnection>) { let _inner = conn.inner(); }
    /// ```
    pub fn inner(&self) -> &C {
        &self.inner
    }
}

impl<C: Clone> Clone for Coalescing<C> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<C> fmt::Debug for Coalescing<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Coalescing")
            .field("max_batch", &self.shared.max_batch)
            .field("in_flight", &self.shared.max_in_flight)
            .finish_non_exhaustive()
    }
}

impl<C> ConnectionLike for Coalescing<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let (tx, rx) = oneshot::channel();
            let lead = {
                let mut state = self.shared.lock();
                state.queue.push_back(Pending {
                    cmd: cmd.clone(),
                    tx,
                });
                let lead = state.in_flight < self.shared.max_in_flight;
                if lead {
                    state.in_flight += 1;
                }
                lead
            };
            if lead {
                let sender = send(self.inner.clone(), Arc::clone(&self.shared));
                // A task of its own: the pipeline goes on for the others if this caller's
                // future is dropped.
                match tokio::runtime::Handle::try_current() {
                    Ok(runtime) => drop(runtime.spawn(sender)),
                    Err(_) => sender.await,
                }
            }
            rx.await.unwrap_or_else(|_| Err(lost()))
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.inner.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next pipeline's commands; none (and one sender fewer) when the queue is empty.
    fn next_batch(&self) -> Vec<Pending> {
        let mut state = self.lock();
        if state.queue.is_empty() {
            state.in_flight = state.in_flight.saturating_sub(1);
            return Vec::new();
        }
        let n = state.queue.len().min(self.max_batch);
        self.sends.fetch_add(1, Ordering::Relaxed);
        self.commands
            .fetch_add(u64::try_from(n).unwrap_or(u64::MAX), Ordering::Relaxed);
        state.queue.drain(..n).collect()
    }
}

/// Sends pipelines until the queue is empty.
async fn send<C: ConnectionLike>(mut conn: C, shared: Arc<Shared>) {
    let mut turn = Turn {
        shared,
        given_back: false,
    };
    loop {
        let batch = turn.shared.next_batch();
        if batch.is_empty() {
            turn.given_back = true; // by next_batch
            return;
        }
        if batch.len() == 1 {
            if let Some(Pending { cmd, tx }) = batch.into_iter().next() {
                let _ = tx.send(conn.req_packed_command(&cmd).await);
            }
            continue;
        }
        let n = batch.len();
        let mut pipe = redis::pipe();
        let mut txs = Vec::with_capacity(n);
        for Pending { cmd, tx } in batch {
            pipe.add_command(cmd);
            txs.push(tx);
        }
        match conn.req_packed_commands(&pipe, 0, n).await {
            Ok(values) if values.len() == n => {
                for (tx, value) in txs.into_iter().zip(values) {
                    let _ = tx.send(Ok(value));
                }
            }
            Ok(_) => {
                for tx in txs {
                    let _ = tx.send(Err(short_reply()));
                }
            }
            Err(err) => {
                for tx in txs {
                    let _ = tx.send(Err(err.clone()));
                }
            }
        }
    }
}

/// A sender's place among the `in_flight` ones. Given back by `next_batch` when the queue
/// is empty; should the sender be dropped before (its runtime shut down, a panic below it),
/// given back here, so that the next caller starts a sender for the commands still queued
/// (those of the dropped pipeline get the "may have run" error of their dropped reply).
struct Turn {
    shared: Arc<Shared>,
    given_back: bool,
}

impl Drop for Turn {
    fn drop(&mut self) {
        if !self.given_back {
            let mut state = self.shared.lock();
            state.in_flight = state.in_flight.saturating_sub(1);
        }
    }
}

/// The sender of a pipeline went away before answering (its runtime shut down): the command
/// may have run.
fn lost() -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::ConnectionAborted,
        "redkit::connect::Coalescing: the pipeline carrying this command was dropped; it may have run",
    ))
}

fn short_reply() -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::Client,
        "redkit::connect::Coalescing: a pipeline reply had fewer replies than commands",
    ))
}
