//! The one acquire loop every lock kind shares ([`acquire`]): attempts paced either by
//! polling (bounded retries with jittered pauses and an overall deadline, [`Retry`], from
//! [`LockOptions`]) or by waiting for a notification until a deadline ([`Pace::Until`]: the
//! kind blocks on its wake-up list with [`block_on`]). A leaf but for the options and the
//! outcomes.

use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;

use crate::error::{Error, Result};
use crate::lock::metrics::{self, LockKind, LockOp};
use crate::lock::options::Settings;
use crate::lock::outcome::{acquire_label, Acquire, Held};

/// A duration in whole milliseconds for a script argument (saturating; leases are validated
/// to at most 30 days before they get here).
pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The retry policy of one acquire: up to [`LockOptions::retries`] more attempts, each
/// after [`LockOptions::retry_delay`] plus random jitter, none started after
/// [`LockOptions::max_wait`]: the pace of [`Pace::Poll`].
struct Retry<'a> {
    options: &'a Settings,
    give_up: Option<Instant>,
    attempt: u32,
}

impl<'a> Retry<'a> {
    /// Starts the clock of `options`' overall deadline (read only when `max_wait` is set).
    fn new(options: &'a Settings) -> Self {
        Self {
            options,
            give_up: options.give_up_from_now(),
            attempt: 0,
        }
    }

    /// After an attempt that did not acquire: pauses and answers `true` when another
    /// attempt is allowed, `false` (at once) when the retries are used up or the pause would
    /// end after the deadline.
    async fn again(&mut self) -> bool {
        if self.attempt >= self.options.get_retries() {
            return false;
        }
        let pause = self.options.pause();
        if Settings::pause_ends_too_late(pause, self.give_up) {
            return false;
        }
        tokio::time::sleep(pause).await;
        self.attempt += 1;
        true
    }
}

/// What one attempt of an acquire answered, for [`acquire`].
pub(in crate::lock) enum Step<G, H = Held> {
    /// The acquire's answer: no other attempt follows.
    Done(Acquire<G, H>),
    /// The acquire's answer unless the pace allows another attempt (e.g. the lock is held
    /// elsewhere).
    Again(Acquire<G, H>),
    /// The acquire's error unless the pace allows another attempt (Redlock: too few nodes
    /// answered, which a later attempt may cure).
    Failed(Error),
}

impl<G, H> Step<G, H> {
    /// Done when `answer` is a hold; any other answer may be tried again.
    pub(in crate::lock) fn unless_acquired(answer: Acquire<G, H>) -> Self {
        if answer.is_acquired() {
            Self::Done(answer)
        } else {
            Self::Again(answer)
        }
    }
}

/// How an acquire paces its attempts.
#[derive(Clone, Copy)]
pub(in crate::lock) enum Pace<'a> {
    /// Polling: up to [`LockOptions::retries`] more attempts, each after a jittered pause,
    /// none started after [`LockOptions::max_wait`] ([`Retry`]).
    Poll(&'a Settings),
    /// Waiting for a notification ([`Attempts::wait`]) until the deadline (`None`: none).
    Until(Option<Instant>),
}

/// One acquire's attempts, as a kind sends them over a `C` (see [`acquire`]).
pub(in crate::lock) trait Attempts<C> {
    /// The guard of a hold.
    type Guard;
    /// What a busy answer tells of the holders ([`Held`], or the kind's own).
    type Held;

    /// The lock kind (a metric label).
    const KIND: LockKind;

    /// One attempt.
    async fn attempt(&mut self, conn: &mut C) -> Result<Step<Self::Guard, Self::Held>>;

    /// Under [`Pace::Until`], after `answer` (not a hold): waits at most `left` for a
    /// notification that the hold may have ended, and answers `true` to attempt again, or
    /// `false` when `answer` ends the acquire. A kind that only polls keeps this default.
    async fn wait(
        &mut self,
        _conn: &mut C,
        _answer: &Acquire<Self::Guard, Self::Held>,
        _left: Duration,
    ) -> Result<bool> {
        Ok(false)
    }

    /// The acquire's answer when it ends with `answer` (not a hold): a kind that queued
    /// leaves its queue here. Default: `answer`.
    async fn give_up(
        &mut self,
        _conn: &mut C,
        answer: Acquire<Self::Guard, Self::Held>,
    ) -> Result<Acquire<Self::Guard, Self::Held>> {
        Ok(answer)
    }
}

/// The acquire loop of every kind: sends attempts until one answers [`Step::Done`], or
/// answers [`Step::Again`] / [`Step::Failed`] when `pace` allows no further attempt; that
/// answer is the acquire's. Records the acquire's outcome (one metric per acquire).
pub(in crate::lock) async fn acquire<A: Attempts<C>, C>(
    pace: Pace<'_>,
    conn: &mut C,
    attempts: &mut A,
) -> Result<Acquire<A::Guard, A::Held>> {
    let answer = attempt_until(pace, conn, attempts).await;
    let label = acquire_label(&answer);
    metrics::lock_operation(A::KIND, LockOp::Acquire, label);
    answer
}

async fn attempt_until<A: Attempts<C>, C>(
    pace: Pace<'_>,
    conn: &mut C,
    attempts: &mut A,
) -> Result<Acquire<A::Guard, A::Held>> {
    let mut retry = match pace {
        Pace::Poll(options) => Some(Retry::new(options)),
        Pace::Until(_) => None,
    };
    loop {
        let answer = match attempts.attempt(conn).await? {
            Step::Done(answer) => return Ok(answer),
            Step::Again(answer) => Ok(answer),
            Step::Failed(e) => Err(e),
        };
        let again = match (pace, retry.as_mut()) {
            (_, Some(retry)) => retry.again().await,
            (Pace::Until(give_up), None) => {
                let left = give_up.map_or(Duration::MAX, |g| {
                    g.saturating_duration_since(Instant::now())
                });
                match &answer {
                    // Boxed: only a blocking acquire waits; the future of every other acquire
                    // stays small.
                    Ok(held) if !left.is_zero() => {
                        Box::pin(attempts.wait(conn, held, left)).await?
                    }
                    _ => false,
                }
            }
            (Pace::Poll(_), None) => false,
        };
        if !again {
            return attempts.give_up(conn, answer?).await;
        }
    }
}

/// When a wait that may last `max_wait` ([`LockOptions::max_wait`](crate::lock::LockOptions::max_wait))
/// gives up: none set (or zero) is now, after one attempt; `None` is never (a deadline beyond
/// what an [`Instant`] can hold, e.g. [`Duration::MAX`]). Every way of waiting for a lease
/// reads it from here.
pub(in crate::lock) fn give_up(max_wait: Option<Duration>) -> Option<Instant> {
    let now = Instant::now();
    match max_wait {
        None => Some(now),
        Some(wait) => now.checked_add(wait),
    }
}

/// Longest single `BLPOP`: well below redis-rs's default 500 ms response timeout, so a
/// connection with default settings can wait. Redis ends a blocking command's timeout on its
/// event loop's timer, up to `1000 / hz` ms late (100 ms at the default `hz 10`; measured: 1
/// `BLPOP k 0.4` in 20 answered after 500 ms), and a loaded machine adds scheduling delay: 250
/// ms leaves that margin. A longer block is several `BLPOP`s in a row (nothing else is sent
/// between them).
const MAX_BLPOP: Duration = Duration::from_millis(250);

/// Blocks on `key` for up to `block` (at least 1 ms, never "forever"), as `BLPOP`s of at most
/// [`MAX_BLPOP`]; returns as soon as one pops something (only a hint: the caller tries again).
/// A `BLPOP` whose reply misses the connection's response timeout also ends the block: the
/// caller's next attempt tells whether the server is there (it fails if not), and a wake-up
/// popped by the late reply is not lost for this caller, who tries again anyway.
pub(in crate::lock) async fn block_on<C: ConnectionLike, K: redis::ToRedisArgs + Copy>(
    conn: &mut C,
    key: K,
    block: Duration,
) -> Result<()> {
    let until = Instant::now().checked_add(block);
    loop {
        let left = until.map_or(MAX_BLPOP, |u| u.saturating_duration_since(Instant::now()));
        let step = left.min(MAX_BLPOP);
        let seconds = format!("{:.3}", step.as_secs_f64().max(0.001));
        let popped: redis::Value = match redis::cmd("BLPOP")
            .arg(key)
            .arg(seconds)
            .query_async(conn)
            .await
        {
            Ok(popped) => popped,
            Err(e) if e.is_timeout() => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        if !matches!(popped, redis::Value::Nil) || step >= left {
            return Ok(());
        }
    }
}
