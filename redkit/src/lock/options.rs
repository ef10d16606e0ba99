//! [`LockOptions`]: lease length, waiting (bounded retries, jitter, overall deadline), the
//! clock-drift allowance and an optional caller-supplied owner token; typed by the lock kind,
//! so a setting the kind cannot honour cannot be set.

use std::fmt;
use std::marker::PhantomData;
use std::time::{Duration, Instant};

use super::lease::token::owner_token;
use super::limits;
use crate::error::{Error, Result};
use crate::script::{Acked, Replication};

/// How a lock of kind `K` is acquired and how long its lease lasts: `LockOptions<Lock>`,
/// `LockOptions<FairLock>`, `LockOptions<Semaphore>`, ... Only the settings kind `K` honours
/// have a setter; the others do not compile:
///
/// | setting | honoured by |
/// | --- | --- |
/// | [`ttl`](Self::ttl), [`max_wait`](Self::max_wait), [`drift`](Self::drift) | every kind |
/// | [`retries`](Self::retries), [`retry_delay`](Self::retry_delay), [`jitter`](Self::jitter) | kinds that wait by retrying ([`Polling`]): all but [`FairLock`](super::FairLock), which waits in its queue |
/// | [`token`](Self::token) | kinds with caller-supplied owner tokens ([`OwnerToken`]): [`Lock`](super::Lock), [`FairLock`](super::FairLock), [`RwLock`](super::RwLock), [`Semaphore`](super::Semaphore) |
/// | [`require_replicas`](Self::require_replicas) | single-server kinds ([`Replicable`]): all but [`Redlock`](super::Redlock) |
/// | [`fencing`](Self::fencing) | [`Lock`](super::Lock) only (the others always issue a fencing token, or never can) |
///
/// Private fields, defaults as associated consts, by-value setters. Checked when used: an
/// invalid combination is an [`Error::InvalidInput`] before anything is sent to Redis. The
/// kind is usually inferred from the call the options are passed to.
///
/// ```
/// use std::time::Duration;
/// use redkit::lock::{Lock, LockOptions};
/// let options: LockOptions<Lock> = LockOptions::new()
///     .ttl(Duration::from_secs(10))
///     .retries(20)
///     .retry_delay(Duration::from_millis(25))
///     .jitter(Duration::from_millis(25))
///     .max_wait(Duration::from_secs(2));
/// // drift allowance: 1 % of the ttl + 2 ms
/// assert_eq!(options.drift_allowance(), Duration::from_millis(102));
/// ```
///
/// A setting the kind cannot honour is a compile error, e.g. retries for a fair lock (it
/// waits in its queue, woken by its predecessor):
///
/// ```compile_fail,E0277
/// use redkit::lock::{FairLock, LockOptions};
/// let options: LockOptions<FairLock> = LockOptions::new().retries(3);
/// ```
pub struct LockOptions<K> {
    settings: Settings,
    kind: PhantomData<fn() -> K>,
}

pub(super) mod sealed {
    /// Only redkit's lock kinds implement the option markers.
    pub trait Sealed {}
}

/// A kind whose `acquire` waits by retrying: it honours [`LockOptions::retries`],
/// [`LockOptions::retry_delay`] and [`LockOptions::jitter`] (sealed).
///
/// ```
/// use std::time::Duration;
/// use redkit::lock::{Lock, LockOptions, Polling, Semaphore};
/// // one retry policy for every kind that waits by retrying
/// fn patient<K: Polling>(options: LockOptions<K>) -> LockOptions<K> {
///     options
///         .retries(100)
///         .retry_delay(Duration::from_millis(20))
///         .jitter(Duration::from_millis(20))
/// }
/// let lock_options = patient(LockOptions::<Lock>::new());
/// let permit_options = patient(LockOptions::<Semaphore>::new());
/// assert_ne!(lock_options, LockOptions::new());
/// assert_ne!(permit_options, LockOptions::new());
/// ```
pub trait Polling: sealed::Sealed {}

/// A kind that acquires with a caller-supplied owner token: it honours
/// [`LockOptions::token`] (sealed).
///
/// ```
/// use redkit::lock::{FairLock, Lock, LockOptions, OwnerToken};
/// // the request id as owner token, for any kind: a retried request finds its own hold
/// fn for_request<K: OwnerToken>(request_id: &str) -> LockOptions<K> {
///     LockOptions::new().token(format!("req-{request_id}"))
/// }
/// let lock_options: LockOptions<Lock> = for_request("7f3a9c2e51d04b8a");
/// let fair_options: LockOptions<FairLock> = for_request("7f3a9c2e51d04b8a");
/// assert_ne!(lock_options, LockOptions::new());
/// assert_ne!(fair_options, LockOptions::new());
/// ```
pub trait OwnerToken: sealed::Sealed {}

/// A kind on one server (or Cluster) that can wait for replicas: it honours
/// [`LockOptions::require_replicas`] (sealed).
///
/// ```
/// use std::time::Duration;
/// use redkit::lock::{LockOptions, Replicable, RwLock, Semaphore};
/// use redkit::script::Replication;
/// // holds that survive a failover, for any single-server kind
/// fn durable<K: Replicable>(options: LockOptions<K>) -> redkit::Result<LockOptions<K>> {
///     Ok(options.require_replicas(Replication::new(1, Duration::from_millis(100))?))
/// }
/// let rw_options = durable(LockOptions::<RwLock>::new())?;
/// let permit_options = durable(LockOptions::<Semaphore>::new())?;
/// assert_ne!(rw_options, LockOptions::new());
/// assert_ne!(permit_options, LockOptions::new());
/// # Ok::<(), redkit::Error>(())
/// ```
pub trait Replicable: sealed::Sealed {}

impl<K> Clone for LockOptions<K> {
    fn clone(&self) -> Self {
        Self {
            settings: self.settings.clone(),
            kind: PhantomData,
        }
    }
}

impl<K> PartialEq for LockOptions<K> {
    fn eq(&self, other: &Self) -> bool {
        self.settings == other.settings
    }
}

impl<K> Eq for LockOptions<K> {}

impl<K> fmt::Debug for LockOptions<K> {
    /// The owner token is a secret (it allows releasing the lock): never printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.settings.fmt(f)
    }
}

impl<K> Default for LockOptions<K> {
    /// [`LockOptions::new`].
    fn default() -> Self {
        Self::new()
    }
}

impl<K> LockOptions<K> {
    /// The defaults: a 30 s lease, one attempt, no overall deadline.
    ///
    /// ```
    /// use redkit::lock::{LockOptions, Semaphore};
    /// let options = LockOptions::<Semaphore>::new();
    /// assert_eq!(options, LockOptions::default());
    /// ```
    pub fn new() -> Self {
        Self {
            settings: Settings::new(),
            kind: PhantomData,
        }
    }

    fn with(mut self, f: impl FnOnce(Settings) -> Settings) -> Self {
        self.settings = f(self.settings);
        self
    }

    /// Lease length (whole milliseconds, 1 ms to [`MAX_TTL`](super::limits::MAX_TTL)).
    ///
    /// ```
    /// # use std::time::Duration;
    /// use redkit::lock::{Lock, LockOptions};
    /// let o = LockOptions::<Lock>::new().ttl(Duration::from_secs(5));
    /// assert_ne!(o, LockOptions::new());
    /// ```
    pub fn ttl(self, ttl: Duration) -> Self {
        self.with(|s| s.ttl(ttl))
    }

    /// Overall deadline for waiting, the one every way of waiting reads: retries stop when it
    /// has passed, a [`FairLock`](super::FairLock) leaves its queue, and the blocking acquires
    /// (`Lock::acquire_blocking`, `Semaphore::acquire_blocking` and `acquire_fair`) stop
    /// blocking. None set (or zero): a blocking acquire or a fair lock makes one attempt. An
    /// attempt in flight is not cut short (its result would be unknown and the lock possibly
    /// held). [`Duration::MAX`] means no deadline.
    ///
    /// ```
    /// # use std::time::Duration;
    /// use redkit::lock::{FairLock, LockOptions};
    /// let o = LockOptions::<FairLock>::new().max_wait(Duration::from_secs(3));
    /// # let _ = o;
    /// ```
    pub fn max_wait(self, max_wait: Duration) -> Self {
        self.with(|s| s.max_wait(max_wait))
    }

    /// Overrides the clock-drift allowance subtracted from the local validity (default:
    /// 1 % of the ttl + [`DRIFT_FLOOR`](super::limits::DRIFT_FLOOR)).
    ///
    /// ```
    /// # use std::time::Duration;
    /// use redkit::lock::{Lock, LockOptions};
    /// let o = LockOptions::<Lock>::new().drift(Duration::from_millis(5));
    /// assert_eq!(o.drift_allowance(), Duration::from_millis(5));
    /// ```
    pub fn drift(self, drift: Duration) -> Self {
        self.with(|s| s.drift(drift))
    }

    /// The drift allowance in effect.
    ///
    /// ```
    /// use redkit::lock::{Lock, LockOptions};
    /// assert!(LockOptions::<Lock>::new().drift_allowance() > std::time::Duration::ZERO);
    /// ```
    pub fn drift_allowance(&self) -> Duration {
        self.settings.drift_allowance()
    }

    /// The settings, for the kind's own code.
    pub(crate) fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Checks the options; returns the ttl in whole milliseconds.
    pub(crate) fn validate(&self) -> Result<u64> {
        self.settings.validate()
    }

    /// The caller's owner token, if one was set.
    pub(crate) fn get_token(&self) -> Option<&str> {
        self.settings.get_token()
    }

    /// The owner token of every attempt of one acquire: the caller's
    /// ([`LockOptions::token`]) when set, else a fresh random one.
    pub(crate) fn owner_token(&self) -> String {
        match self.get_token() {
            Some(token) => token.to_owned(),
            None => owner_token(),
        }
    }

    /// The replication required at acquire, if any.
    pub(crate) fn get_replication(&self) -> Option<Replication> {
        self.settings.get_replication()
    }

    /// The overall deadline for waiting, if one was set.
    pub(crate) fn get_max_wait(&self) -> Option<Duration> {
        self.settings.get_max_wait()
    }

    /// The lease length.
    pub(crate) fn lease(&self) -> Duration {
        self.settings.lease()
    }

    /// These options for one attempt only (no retries, no `max_wait`): a `try_acquire`.
    pub(crate) fn once(&self) -> Self {
        self.clone().with(Settings::once)
    }

    /// The options with `f` applied to the settings (the kind's own code).
    pub(crate) fn adjusted(self, f: impl FnOnce(Settings) -> Settings) -> Self {
        self.with(f)
    }
}

impl<K: Polling> LockOptions<K> {
    /// Retries after a first attempt that found the lock held (0: try once).
    ///
    /// ```
    /// use redkit::lock::{Lock, LockOptions};
    /// let o = LockOptions::<Lock>::new().retries(10);
    /// # let _ = o;
    /// ```
    pub fn retries(self, retries: u32) -> Self {
        self.with(|s| s.retries(retries))
    }

    /// Pause between attempts, before jitter. Any value is accepted (a pause that would end
    /// after [`max_wait`](Self::max_wait) is not started).
    ///
    /// ```
    /// # use std::time::Duration;
    /// use redkit::lock::{Lock, LockOptions};
    /// let o = LockOptions::<Lock>::new().retry_delay(Duration::from_millis(20));
    /// # let _ = o;
    /// ```
    pub fn retry_delay(self, delay: Duration) -> Self {
        self.with(|s| s.retry_delay(delay))
    }

    /// Upper bound of a uniformly random delay added to every pause, so contenders spread out.
    ///
    /// ```
    /// # use std::time::Duration;
    /// use redkit::lock::{Lock, LockOptions};
    /// let o = LockOptions::<Lock>::new().jitter(Duration::from_millis(20));
    /// # let _ = o;
    /// ```
    pub fn jitter(self, jitter: Duration) -> Self {
        self.with(|s| s.jitter(jitter))
    }
}

impl<K: OwnerToken> LockOptions<K> {
    /// The owner token to acquire with, instead of a fresh random one
    /// ([`MIN_TOKEN_LEN`](super::limits::MIN_TOKEN_LEN) to [`MAX_TOKEN_LEN`](super::limits::MAX_TOKEN_LEN)
    /// bytes, checked at acquire).
    ///
    /// An acquire finding the lock held by **this same token** answers
    /// [`Acquire::Acquired`](super::Acquire::Acquired) (with the fencing token already issued)
    /// and refreshes the lease, instead of [`Acquire::Busy`](super::Acquire::Busy): a retry
    /// after a lost reply (timeout, dropped connection) finds its own lock. The token must
    /// therefore be unique per owner and unguessable (it allows releasing the lock): use e.g.
    /// a random request id, and never share one options value with a token between concurrent
    /// tasks (they would all "hold" the lock).
    ///
    /// ```
    /// use redkit::lock::{Lock, LockOptions};
    /// let o = LockOptions::<Lock>::new().token("req-7f3a9c2e51d04b8a");
    /// assert!(!format!("{o:?}").contains("7f3a")); // Debug never prints it
    /// ```
    pub fn token(self, token: impl Into<String>) -> Self {
        self.with(|s| s.token(token))
    }
}

impl<K: Replicable> LockOptions<K> {
    /// Requires `replication` for an acquisition: every attempt is followed by `WAIT` in the
    /// same round trip, and an acquisition that fewer replicas than requested acknowledged in
    /// time is released again and answered with
    /// [`Acquire::NotReplicated`](super::Acquire::NotReplicated), as it could be lost in a
    /// failover and another owner could then acquire. Like a hold refused as busy, it is tried
    /// again while [`retries`](Self::retries) and `max_wait` allow (a [`FairLock`](super::FairLock),
    /// which has no retries, gives its turn to the next in line and answers at once).
    ///
    /// The requirement stays with the guard: every renewal (the kind's `renew`, or its
    /// watchdog) is followed by the same `WAIT` in the same round trip, and moves the guard's
    /// validity only when acknowledged; one that is not answers
    /// [`Renew::NotReplicated`](super::Renew::NotReplicated), and a watchdog whose renewals
    /// stay unacknowledged until the validity runs out signals
    /// [`LeaseLoss::Expired`](super::LeaseLoss::Expired). So a failover to a replica that
    /// acknowledged does not end the lease there before the guard's validity ends (barring
    /// clock jumps beyond the drift allowance). `WAIT` holds its connection until the replicas
    /// answer or the timeout passes: commands sent behind a renewal on the same multiplexed
    /// connection (a watchdog uses a clone of yours) wait as long while a replica lags, and
    /// the connection's response timeout must be longer than the `WAIT` timeout (see
    /// [`Replication::new`]).
    ///
    /// ```
    /// # use std::time::Duration;
    /// use redkit::lock::{LockOptions, RwLock};
    /// use redkit::script::Replication;
    /// let o = LockOptions::<RwLock>::new()
    ///     .require_replicas(Replication::new(1, Duration::from_millis(100))?);
    /// # let _ = o; Ok::<(), redkit::Error>(())
    /// ```
    pub fn require_replicas(self, replication: Replication) -> Self {
        self.with(|s| s.require_replicas(replication))
    }
}

/// The settings every kind reads (what [`LockOptions`] holds for one kind).
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Settings {
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

impl fmt::Debug for Settings {
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

impl Default for Settings {
    fn default() -> Self {
        Self::new()
    }
}

impl Settings {
    pub(crate) const DEFAULT_TTL: Duration = limits::DEFAULT_TTL;
    pub(crate) const DEFAULT_RETRIES: u32 = limits::DEFAULT_RETRIES;
    pub(crate) const DEFAULT_RETRY_DELAY: Duration = limits::DEFAULT_RETRY_DELAY;
    pub(crate) const DEFAULT_JITTER: Duration = limits::DEFAULT_JITTER;
    pub(crate) const MAX_TTL: Duration = limits::MAX_TTL;
    pub(crate) const DRIFT_FLOOR: Duration = limits::DRIFT_FLOOR;

    pub(crate) fn new() -> Self {
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

    pub(crate) const MIN_TOKEN_LEN: usize = limits::MIN_TOKEN_LEN;
    pub(crate) const MAX_TOKEN_LEN: usize = limits::MAX_TOKEN_LEN;

    pub(crate) fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    pub(crate) fn retries(mut self, retries: u32) -> Self {
        self.retries = retries;
        self
    }

    pub(crate) fn retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = delay;
        self
    }

    pub(crate) fn jitter(mut self, jitter: Duration) -> Self {
        self.jitter = jitter;
        self
    }

    pub(crate) fn max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = Some(max_wait);
        self
    }

    /// One attempt only: no retries, no overall wait.
    pub(crate) fn once(mut self) -> Self {
        self.retries = 0;
        self.max_wait = None;
        self
    }

    pub(crate) fn drift(mut self, drift: Duration) -> Self {
        self.drift = Some(drift);
        self
    }

    pub(crate) fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    pub(crate) fn require_replicas(mut self, replication: Replication) -> Self {
        self.replication = Some(replication);
        self
    }

    pub(crate) fn fencing(mut self, fencing: bool) -> Self {
        self.fencing = fencing;
        self
    }

    pub(crate) fn get_fencing(&self) -> bool {
        self.fencing
    }

    pub(crate) fn get_max_wait(&self) -> Option<Duration> {
        self.max_wait
    }

    pub(crate) fn lease(&self) -> Duration {
        self.ttl
    }

    pub(crate) fn drift_allowance(&self) -> Duration {
        self.drift
            .unwrap_or_else(|| (self.ttl / 100).saturating_add(Self::DRIFT_FLOOR))
    }

    pub(crate) fn get_replication(&self) -> Option<Replication> {
        self.replication
    }

    pub(crate) fn replication_shortfall(&self, acked: Option<&Acked<()>>) -> Option<(u32, u32)> {
        let requested = self.replication?.replicas();
        match acked {
            Some(a) if a.is_replicated() => None,
            Some(a) => Some((a.replicas, requested)),
            None => Some((0, requested)),
        }
    }

    pub(crate) fn get_token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    pub(crate) fn get_retries(&self) -> u32 {
        self.retries
    }

    pub(crate) fn give_up_from_now(&self) -> Option<Instant> {
        self.max_wait.and_then(|w| Instant::now().checked_add(w))
    }

    pub(crate) fn pause_ends_too_late(pause: Duration, give_up: Option<Instant>) -> bool {
        give_up.is_some_and(|end| Instant::now().checked_add(pause).is_none_or(|t| t > end))
    }

    pub(crate) fn longest_pause(&self) -> Duration {
        self.retry_delay.saturating_add(self.jitter)
    }

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
            Settings::MAX_TTL + Duration::from_secs(1),
            Duration::from_millis(2),
        ];
        for ttl in bad {
            assert!(
                matches!(
                    Settings::new().ttl(ttl).validate(),
                    Err(Error::InvalidInput { what: "ttl", .. })
                ),
                "{ttl:?}"
            );
        }
        assert_eq!(
            Settings::new()
                .ttl(Duration::from_millis(300))
                .validate()
                .unwrap(),
            300
        );
    }

    #[test]
    fn extreme_durations_do_not_overflow() {
        let o = Settings::new()
            .ttl(Duration::MAX)
            .retry_delay(Duration::MAX)
            .jitter(Duration::MAX)
            .max_wait(Duration::MAX);
        assert_eq!(o.pause(), Duration::MAX);
        assert!(o.drift_allowance() > Duration::ZERO);
        assert!(o.validate().is_err());
        assert_eq!(o.give_up_from_now(), None);
        let soon = Instant::now().checked_add(Duration::from_secs(1));
        assert!(Settings::pause_ends_too_late(Duration::MAX, soon));
        assert!(!Settings::pause_ends_too_late(Duration::MAX, None));
    }

    #[test]
    fn token_length_is_checked() {
        let too_short = Settings::new().token("x".repeat(15));
        assert!(matches!(
            too_short.validate(),
            Err(Error::InvalidInput { what: "token", .. })
        ));
        let too_long = Settings::new().token("x".repeat(129));
        assert!(too_long.validate().is_err());
        assert!(Settings::new().token("x".repeat(16)).validate().is_ok());
    }

    #[test]
    fn pause_stays_within_jitter() {
        let o = Settings::new()
            .retry_delay(Duration::from_millis(10))
            .jitter(Duration::from_millis(5));
        for _ in 0..100 {
            let p = o.pause();
            assert!(p >= Duration::from_millis(10) && p <= Duration::from_millis(15));
        }
    }
}
