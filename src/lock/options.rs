//! [`LockOptions`]: lease length, waiting (bounded retries, jitter, overall deadline) and the
//! clock-drift allowance.

use std::time::Duration;

use crate::error::{Error, Result};

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
/// assert_eq!(options.get_ttl(), Duration::from_secs(10));
/// // drift allowance: 1 % of the ttl + 2 ms
/// assert_eq!(options.drift_allowance(), Duration::from_millis(102));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockOptions {
    ttl: Duration,
    retries: u32,
    retry_delay: Duration,
    jitter: Duration,
    max_wait: Option<Duration>,
    drift: Option<Duration>,
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
        }
    }

    /// Lease length (whole milliseconds, 1 ms to [`MAX_TTL`](Self::MAX_TTL)).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Retries after a first attempt that found the lock held (0: try once).
    pub fn retries(mut self, retries: u32) -> Self {
        self.retries = retries;
        self
    }

    /// Pause between attempts, before jitter.
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = delay;
        self
    }

    /// Upper bound of a uniformly random delay added to every pause, so contenders spread out.
    pub fn jitter(mut self, jitter: Duration) -> Self {
        self.jitter = jitter;
        self
    }

    /// Overall deadline for waiting: no new attempt starts after it has passed. An attempt
    /// in flight is not cut short (its result would be unknown and the lock possibly held).
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = Some(max_wait);
        self
    }

    /// Overrides the clock-drift allowance subtracted from the local validity (default:
    /// 1 % of the ttl + [`DRIFT_FLOOR`](Self::DRIFT_FLOOR)).
    pub fn drift(mut self, drift: Duration) -> Self {
        self.drift = Some(drift);
        self
    }

    /// The lease length.
    pub fn get_ttl(&self) -> Duration {
        self.ttl
    }

    /// The drift allowance in effect.
    pub fn drift_allowance(&self) -> Duration {
        self.drift
            .unwrap_or_else(|| self.ttl / 100 + Self::DRIFT_FLOOR)
    }

    pub(crate) fn get_retries(&self) -> u32 {
        self.retries
    }

    pub(crate) fn get_max_wait(&self) -> Option<Duration> {
        self.max_wait
    }

    /// The next pause: retry delay plus a uniformly random jitter.
    pub(crate) fn pause(&self) -> Duration {
        let jitter_ms = u64::try_from(self.jitter.as_millis()).unwrap_or(u64::MAX);
        let extra = if jitter_ms == 0 {
            0
        } else {
            rand::random_range(0..=jitter_ms)
        };
        self.retry_delay + Duration::from_millis(extra)
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
        // At most 30 days: fits any integer type.
        Ok(self.ttl.as_millis() as u64)
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
