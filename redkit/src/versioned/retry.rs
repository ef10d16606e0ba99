//! [`RetryPolicy`]: how often and how patiently a read-modify-write retries on conflicts.

use std::time::Duration;

use crate::error::{Error, Result};

/// Bounded attempts with exponential backoff and full jitter: the pause after the `n`-th
/// conflict is uniformly random in `0..=min(max_backoff, backoff × 2^(n-1))`.
///
/// ```
/// use std::time::Duration;
/// use redkit::versioned::RetryPolicy;
/// let p = RetryPolicy::new().attempts(20).backoff(Duration::from_millis(1), Duration::from_millis(50));
/// assert_eq!(p.max_attempts(), 20);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    attempts: u32,
    backoff: Duration,
    max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self::new()
    }
}

impl RetryPolicy {
    /// Default number of compare-and-set attempts.
    ///
    /// ```
    /// use redkit::versioned::RetryPolicy;
    /// assert_eq!(RetryPolicy::new().max_attempts(), RetryPolicy::DEFAULT_ATTEMPTS);
    /// // Twice the default attempts for a hot value.
    /// let patient = RetryPolicy::new().attempts(2 * RetryPolicy::DEFAULT_ATTEMPTS);
    /// assert_eq!(patient.max_attempts(), 20);
    /// ```
    pub const DEFAULT_ATTEMPTS: u32 = 10;
    /// Default first backoff.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::versioned::RetryPolicy;
    /// let default = RetryPolicy::new();
    /// assert_eq!(default.backoff(RetryPolicy::DEFAULT_BACKOFF, RetryPolicy::DEFAULT_MAX_BACKOFF), default);
    /// // The default first pause, a lower cap.
    /// let capped = default.backoff(RetryPolicy::DEFAULT_BACKOFF, Duration::from_millis(20));
    /// assert_ne!(capped, default);
    /// ```
    pub const DEFAULT_BACKOFF: Duration = Duration::from_millis(2);
    /// Default longest backoff.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::versioned::RetryPolicy;
    /// // Start at 10 ms, still capped at the default 100 ms.
    /// let p = RetryPolicy::new().backoff(Duration::from_millis(10), RetryPolicy::DEFAULT_MAX_BACKOFF);
    /// assert_eq!(RetryPolicy::DEFAULT_MAX_BACKOFF, Duration::from_millis(100));
    /// assert_ne!(p, RetryPolicy::new());
    /// ```
    pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_millis(100);

    /// 10 attempts, backoff from 2 ms up to 100 ms.
    ///
    /// ```
    /// assert_eq!(redkit::versioned::RetryPolicy::new().max_attempts(), 10);
    /// ```
    pub fn new() -> Self {
        Self {
            attempts: Self::DEFAULT_ATTEMPTS,
            backoff: Self::DEFAULT_BACKOFF,
            max_backoff: Self::DEFAULT_MAX_BACKOFF,
        }
    }

    /// Compare-and-set attempts in all (at least 1, checked when used).
    ///
    /// ```
    /// let p = redkit::versioned::RetryPolicy::new().attempts(3);
    /// # let _ = p;
    /// ```
    pub fn attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts;
        self
    }

    /// First backoff and the cap of the doubling.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let p = redkit::versioned::RetryPolicy::new().backoff(Duration::ZERO, Duration::ZERO);
    /// # let _ = p;
    /// ```
    pub fn backoff(mut self, first: Duration, max: Duration) -> Self {
        self.backoff = first;
        self.max_backoff = max;
        self
    }

    /// The number of attempts.
    ///
    /// ```
    /// assert_eq!(redkit::versioned::RetryPolicy::new().attempts(4).max_attempts(), 4);
    /// ```
    pub fn max_attempts(&self) -> u32 {
        self.attempts
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.attempts == 0 {
            return Err(Error::invalid("attempts", "must be at least 1"));
        }
        Ok(())
    }

    /// The pause after the `conflicts`-th conflict (1-based). Never panics.
    pub(crate) fn pause(&self, conflicts: u32) -> Duration {
        let shift = conflicts.saturating_sub(1).min(31);
        let cap = self
            .backoff
            .checked_mul(1u32 << shift)
            .unwrap_or(Duration::MAX)
            .min(self.max_backoff);
        let cap_us = u64::try_from(cap.as_micros()).unwrap_or(u64::MAX);
        if cap_us == 0 {
            return Duration::ZERO;
        }
        Duration::from_micros(rand::random_range(0..=cap_us))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_stay_within_the_cap_and_never_overflow() {
        let p = RetryPolicy::new().backoff(Duration::from_millis(1), Duration::from_millis(8));
        for n in [0, 1, 2, 5, 100, u32::MAX] {
            assert!(p.pause(n) <= Duration::from_millis(8));
        }
        let huge = RetryPolicy::new().backoff(Duration::MAX, Duration::MAX);
        let _ = huge.pause(u32::MAX);
        assert!(RetryPolicy::new().attempts(0).validate().is_err());
    }
}
