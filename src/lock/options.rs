//! [`LockOptions`]: lease length, waiting (bounded retries, jitter, overall deadline), the
//! clock-drift allowance and an optional caller-supplied owner token.

use std::fmt;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::script::{Acked, Replication};

/// How a lock is acquired and how long its lease lasts.
///
/// Private fields, defaults as associated consts, by-value setters. Checked when used: an
/// invalid combination is an [`Error::InvalidInput`] before anything is sent to Redis.
///
/// ```
/// use std::time::Duration;
/// use redkit::lock::LockOptions;
/// let options = LockOptions::new()
///     .ttl(Duration::from_secs(10))
///     .retries(20)
///     .retry_delay(Duration::from_millis(25))
///     .jitter(Duration::from_millis(25))
///     .max_wait(Duration::from_secs(2));
/// // drift allowance: 1 % of the ttl + 2 ms
/// assert_eq!(options.drift_allowance(), Duration::from_millis(102));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct LockOptions {
    ttl: Duration,
    retries: u32,
    retry_delay: Duration,
    jitter: Duration,
    max_wait: Option<Duration>,
    drift: Option<Duration>,
    token: Option<String>,
    replication: Option<Replication>,
    fencing: bool,
}

impl fmt::Debug for LockOptions {
    /// The owner token is a secret (it allows releasing the lock): never printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockOptions")
            .field("ttl", &self.ttl)
            .field("retries", &self.retries)
            .field("retry_delay", &self.retry_delay)
            .field("jitter", &self.jitter)
            .field("max_wait", &self.max_wait)
            .field("drift", &self.drift)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("replication", &self.replication)
            .field("fencing", &self.fencing)
            .finish()
    }
}

impl Default for LockOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl LockOptions {
    /// Default lease length.
    pub const DEFAULT_TTL: Duration = Duration::from_secs(30);
    /// Default number of retries after the first attempt (0: try once).
    pub const DEFAULT_RETRIES: u32 = 0;
    /// Default pause between attempts (before jitter).
    pub const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(50);
    /// Default upper bound of the random delay added to each pause.
    pub const DEFAULT_JITTER: Duration = Duration::from_millis(50);
    /// Longest lease accepted (30 days).
    pub const MAX_TTL: Duration = Duration::from_secs(30 * 24 * 3600);
    /// Fixed part of the default drift allowance (the variable part is 1 % of the ttl).
    pub const DRIFT_FLOOR: Duration = Duration::from_millis(2);

    /// The defaults: a 30 s lease, one attempt, no overall deadline.
    pub fn new() -> Self {
        Self {
            ttl: Self::DEFAULT_TTL,
            retries: Self::DEFAULT_RETRIES,
            retry_delay: Self::DEFAULT_RETRY_DELAY,
            jitter: Self::DEFAULT_JITTER,
            max_wait: None,
            drift: None,
            token: None,
            replication: None,
            fencing: false,
        }
    }

    /// Shortest owner token accepted by [`token`](Self::token), in bytes.
    pub const MIN_TOKEN_LEN: usize = 16;
    /// Longest owner token accepted by [`token`](Self::token), in bytes.
    pub const MAX_TOKEN_LEN: usize = 128;

    /// Lease length (whole milliseconds, 1 ms to [`MAX_TTL`](Self::MAX_TTL)).
    ///
    /// ```
    /// # use std::time::Duration;
    /// let o = redkit::lock::LockOptions::new().ttl(Duration::from_secs(5));
    /// assert_ne!(o, redkit::lock::LockOptions::new());
    /// ```
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Retries after a first attempt that found the lock held (0: try once).
    ///
    /// ```
    /// let o = redkit::lock::LockOptions::new().retries(10);
    /// # let _ = o;
    /// ```
    pub fn retries(mut self, retries: u32) -> Self {
        self.retries = retries;
        self
    }

    /// Pause between attempts, before jitter. Any value is accepted (a pause that would end
    /// after [`max_wait`](Self::max_wait) is not started).
    ///
    /// ```
    /// # use std::time::Duration;
    /// let o = redkit::lock::LockOptions::new().retry_delay(Duration::from_millis(20));
    /// # let _ = o;
    /// ```
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = delay;
        self
    }

    /// Upper bound of a uniformly random delay added to every pause, so contenders spread out.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let o = redkit::lock::LockOptions::new().jitter(Duration::from_millis(20));
    /// # let _ = o;
    /// ```
    pub fn jitter(mut self, jitter: Duration) -> Self {
        self.jitter = jitter;
        self
    }

    /// Overall deadline for waiting: no new attempt starts after it has passed. An attempt
    /// in flight is not cut short (its result would be unknown and the lock possibly held).
    /// [`Duration::MAX`] means no deadline.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let o = redkit::lock::LockOptions::new().retries(u32::MAX).max_wait(Duration::from_secs(3));
    /// # let _ = o;
    /// ```
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = Some(max_wait);
        self
    }

    /// Overrides the clock-drift allowance subtracted from the local validity (default:
    /// 1 % of the ttl + [`DRIFT_FLOOR`](Self::DRIFT_FLOOR)).
    ///
    /// ```
    /// # use std::time::Duration;
    /// let o = redkit::lock::LockOptions::new().drift(Duration::from_millis(5));
    /// assert_eq!(o.drift_allowance(), Duration::from_millis(5));
    /// ```
    pub fn drift(mut self, drift: Duration) -> Self {
        self.drift = Some(drift);
        self
    }

    /// The owner token to acquire with, instead of a fresh random one
    /// ([`MIN_TOKEN_LEN`](Self::MIN_TOKEN_LEN) to [`MAX_TOKEN_LEN`](Self::MAX_TOKEN_LEN)
    /// bytes, checked at acquire).
    ///
    /// An acquire finding the lock held by **this same token** answers
    /// [`Acquire::Acquired`](super::Acquire::Acquired) with the fencing token already issued
    /// and refreshes the lease, instead of [`Acquire::Busy`](super::Acquire::Busy): a retry
    /// after a lost reply (timeout, dropped connection) finds its own lock. The token must
    /// therefore be unique per owner and unguessable (it allows releasing the lock): use e.g.
    /// a random request id, and never share one options value with a token between concurrent
    /// tasks (they would all "hold" the lock).
    ///
    /// ```
    /// let o = redkit::lock::LockOptions::new().token("req-7f3a9c2e51d04b8a");
    /// assert!(!format!("{o:?}").contains("7f3a")); // Debug never prints it
    /// ```
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Requires `replication` for an acquisition of a [`Lock`](super::Lock),
    /// [`FairLock`](super::FairLock), [`RwLock`](super::RwLock),
    /// [`ReentrantLock`](super::ReentrantLock) or [`Semaphore`](super::Semaphore): every attempt is
    /// followed by `WAIT` in the same round trip, and an acquisition that fewer replicas than
    /// requested acknowledged in time is released again and answered with
    /// [`Acquire::NotReplicated`](super::Acquire::NotReplicated), as it could be
    /// lost in a failover and another owner could then acquire. `Lock` tries again while
    /// its retries allow; the others answer at once (a fair lock's turn is given to the
    /// next in line). Ignored by [`Redlock`](super::Redlock).
    ///
    /// ```
    /// # use std::time::Duration;
    /// use redkit::script::Replication;
    /// let o = redkit::lock::LockOptions::new()
    ///     .require_replicas(Replication::new(1, Duration::from_millis(100))?);
    /// # let _ = o; Ok::<(), redkit::Error>(())
    /// ```
    pub fn require_replicas(mut self, replication: Replication) -> Self {
        self.replication = Some(replication);
        self
    }

    /// Whether a [`Lock`](super::Lock) acquisition issues a fencing token (default `false`).
    ///
    /// Without fencing (the default) an attempt on a free lock is one plain
    /// `SET key token NX PX ttl GET` command: the cheapest lock Redis offers, the same work as
    /// a hand-written `SET NX PX` lock. The guard then has no fencing token:
    /// [`LockGuard::is_fenced`](super::LockGuard::is_fenced) is `false` and
    /// [`LockGuard::fencing_token`](super::LockGuard::fencing_token) is `0`, which
    /// [`Lock::fenced_set`](super::Lock::fenced_set) and the fenced versioned writes refuse
    /// (`Error::InvalidInput`, nothing written). A busy lock (or a retry by the same owner
    /// token) costs a second round trip (`PTTL`, or the compare-and-`PEXPIRE` renewal).
    ///
    /// `fencing(true)` runs a script that also reads the fence key and the server clock and
    /// writes the next token, in the same round trip: 1.5x to 2.7x the server CPU of the
    /// unfenced acquire + release cycle in the bench runs (README, "Against a hand-written
    /// script"). Ask for it when the lock guards writes to storage that can check the
    /// token: a holder paused past its lease (GC, swap, a network stall) can otherwise still
    /// write after another owner acquired, and only the storage refusing its older token
    /// stops that. A lock that only keeps two workers from duplicating effort does not need
    /// it. Release and renewal are the same either way. Ignored by [`Redlock`](super::Redlock).
    ///
    /// ```
    /// let o = redkit::lock::LockOptions::new().fencing(true);
    /// assert_ne!(o, redkit::lock::LockOptions::new());
    /// assert_eq!(redkit::lock::LockOptions::new().fencing(false), redkit::lock::LockOptions::new());
    /// ```
    pub fn fencing(mut self, fencing: bool) -> Self {
        self.fencing = fencing;
        self
    }

    /// Whether acquisitions issue fencing tokens.
    pub(crate) fn get_fencing(&self) -> bool {
        self.fencing
    }

    /// The overall deadline for waiting, if one was set.
    pub(crate) fn get_max_wait(&self) -> Option<Duration> {
        self.max_wait
    }

    /// The lease length.
    pub(crate) fn lease(&self) -> Duration {
        self.ttl
    }

    /// The drift allowance in effect.
    pub fn drift_allowance(&self) -> Duration {
        self.drift
            .unwrap_or_else(|| (self.ttl / 100).saturating_add(Self::DRIFT_FLOOR))
    }

    /// The replication required at acquire, if any.
    pub(crate) fn get_replication(&self) -> Option<Replication> {
        self.replication
    }

    /// `(replicas, requested)` when replication is required and `acked` (what the wait
    /// answered; `None`: not sent) is short of it: fewer replicas, or no local fsync where
    /// one was asked for.
    pub(crate) fn replication_shortfall(&self, acked: Option<&Acked<()>>) -> Option<(u32, u32)> {
        let requested = self.replication?.replicas();
        match acked {
            Some(a) if a.is_replicated() => None,
            Some(a) => Some((a.replicas, requested)),
            None => Some((0, requested)),
        }
    }

    /// The caller's owner token, if one was set.
    pub(crate) fn get_token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    pub(crate) fn get_retries(&self) -> u32 {
        self.retries
    }

    /// When a wait starting now must stop (`None`: never, also when the deadline lies
    /// beyond what an [`Instant`] can hold). Reads the clock only when `max_wait` is set.
    pub(crate) fn give_up_from_now(&self) -> Option<Instant> {
        self.max_wait.and_then(|w| Instant::now().checked_add(w))
    }

    /// `true` when a pause of `pause` starting now would end after `give_up`.
    pub(crate) fn pause_ends_too_late(pause: Duration, give_up: Option<Instant>) -> bool {
        give_up.is_some_and(|end| Instant::now().checked_add(pause).is_none_or(|t| t > end))
    }

    /// The longest pause between two attempts: retry delay plus the whole jitter.
    pub(crate) fn longest_pause(&self) -> Duration {
        self.retry_delay.saturating_add(self.jitter)
    }

    /// The next pause: retry delay plus a uniformly random jitter.
    pub(crate) fn pause(&self) -> Duration {
        let jitter_ms = u64::try_from(self.jitter.as_millis()).unwrap_or(u64::MAX);
        let extra = if jitter_ms == 0 {
            0
        } else {
            rand::random_range(0..=jitter_ms)
        };
        self.retry_delay
            .saturating_add(Duration::from_millis(extra))
    }

    /// Checks the options; returns the ttl in whole milliseconds.
    pub(crate) fn validate(&self) -> Result<u64> {
        if self.ttl.is_zero() {
            return Err(Error::invalid("ttl", "must not be zero"));
        }
        if self.ttl > Self::MAX_TTL {
            return Err(Error::invalid(
                "ttl",
                format!("must be at most {:?}", Self::MAX_TTL),
            ));
        }
        if !self.ttl.subsec_nanos().is_multiple_of(1_000_000) {
            return Err(Error::invalid(
                "ttl",
                "must be a whole number of milliseconds",
            ));
        }
        if self.drift_allowance() >= self.ttl {
            return Err(Error::invalid(
                "ttl",
                "must be longer than the clock-drift allowance",
            ));
        }
        if let Some(token) = &self.token {
            if token.len() < Self::MIN_TOKEN_LEN || token.len() > Self::MAX_TOKEN_LEN {
                return Err(Error::invalid(
                    "token",
                    format!(
                        "must be {} to {} bytes long",
                        Self::MIN_TOKEN_LEN,
                        Self::MAX_TOKEN_LEN
                    ),
                ));
            }
        }
        // At most 30 days: fits any integer type.
        Ok(u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_ttls() {
        let bad = [
            Duration::ZERO,
            Duration::from_micros(1500),
            LockOptions::MAX_TTL + Duration::from_secs(1),
            Duration::from_millis(2),
        ];
        for ttl in bad {
            assert!(
                matches!(
                    LockOptions::new().ttl(ttl).validate(),
                    Err(Error::InvalidInput { what: "ttl", .. })
                ),
                "{ttl:?}"
            );
        }
        assert_eq!(
            LockOptions::new()
                .ttl(Duration::from_millis(300))
                .validate()
                .unwrap(),
            300
        );
    }

    #[test]
    fn extreme_durations_do_not_overflow() {
        let o = LockOptions::new()
            .ttl(Duration::MAX)
            .retry_delay(Duration::MAX)
            .jitter(Duration::MAX)
            .max_wait(Duration::MAX);
        assert_eq!(o.pause(), Duration::MAX);
        assert!(o.drift_allowance() > Duration::ZERO);
        assert!(o.validate().is_err());
        assert_eq!(o.give_up_from_now(), None);
        let soon = Instant::now().checked_add(Duration::from_secs(1));
        assert!(LockOptions::pause_ends_too_late(Duration::MAX, soon));
        assert!(!LockOptions::pause_ends_too_late(Duration::MAX, None));
    }

    #[test]
    fn token_length_is_checked() {
        let too_short = LockOptions::new().token("x".repeat(15));
        assert!(matches!(
            too_short.validate(),
            Err(Error::InvalidInput { what: "token", .. })
        ));
        let too_long = LockOptions::new().token("x".repeat(129));
        assert!(too_long.validate().is_err());
        assert!(LockOptions::new().token("x".repeat(16)).validate().is_ok());
    }

    #[test]
    fn pause_stays_within_jitter() {
        let o = LockOptions::new()
            .retry_delay(Duration::from_millis(10))
            .jitter(Duration::from_millis(5));
        for _ in 0..100 {
            let p = o.pause();
            assert!(p >= Duration::from_millis(10) && p <= Duration::from_millis(15));
        }
    }
}
