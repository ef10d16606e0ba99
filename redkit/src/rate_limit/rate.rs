//! [`Rate`]: "N units per period", the one argument every limiter is built from.

use std::fmt;
use std::num::NonZeroU32;
use std::time::Duration;

use crate::error::{Error, Result};

/// How much a limiter lets through: `limit` units per `period`. (A burst belongs to the one
/// algorithm that has one: [`Gcra::bursting`](super::Gcra::bursting).)
///
/// A `Rate` cannot be built invalid: the limit is a [`NonZeroU32`] (write a literal with
/// [`nonzero!`](crate::nonzero), which refuses 0 at compile time) and the period is not zero.
/// The shorthands are `const`, as governor's `Quota`. Each algorithm checks the range it can
/// honour when it is built (a window of at least 1 ms, a GCRA bucket below
/// [`Gcra::MAX_BUCKET`](super::Gcra::MAX_BUCKET)) and answers [`Error::InvalidInput`]
/// otherwise.
///
/// ```
/// use std::time::Duration;
/// use redkit::nonzero;
/// use redkit::rate_limit::Rate;
///
/// const API: Rate = Rate::per_minute(nonzero!(100));
/// assert_eq!((API.limit(), API.period()), (100, Duration::from_secs(60)));
/// assert_eq!(Rate::new(nonzero!(5), Duration::from_secs(60))?, Rate::per_minute(nonzero!(5)));
///
/// assert!(Rate::new(nonzero!(1), Duration::ZERO).is_err());
/// # Ok::<(), redkit::Error>(())
/// ```
///
/// A zero limit does not compile:
///
/// ```compile_fail
/// let never = redkit::rate_limit::Rate::per_second(redkit::nonzero!(0));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    limit: NonZeroU32,
    period: Duration,
}

impl Rate {
    /// `limit` units per `period`. Errors: [`Error::InvalidInput`] for a zero period.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::{nonzero, rate_limit::Rate};
    /// let rate = Rate::new(nonzero!(5), Duration::from_millis(1500))?;
    /// assert_eq!(rate.period(), Duration::from_millis(1500));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn new(limit: NonZeroU32, period: Duration) -> Result<Self> {
        if period.is_zero() {
            return Err(Error::invalid("period", "must not be zero"));
        }
        Ok(Self { limit, period })
    }

    /// `limit` units per second.
    ///
    /// ```
    /// use redkit::{nonzero, rate_limit::Rate};
    /// const SEARCH: Rate = Rate::per_second(nonzero!(10));
    /// assert_eq!(SEARCH.limit(), 10);
    /// ```
    pub const fn per_second(limit: NonZeroU32) -> Self {
        Self {
            limit,
            period: Duration::from_secs(1),
        }
    }

    /// `limit` units per minute.
    ///
    /// ```
    /// use redkit::{nonzero, rate_limit::Rate};
    /// let rate = Rate::per_minute(nonzero!(100));
    /// assert_eq!(rate.period(), std::time::Duration::from_secs(60));
    /// ```
    pub const fn per_minute(limit: NonZeroU32) -> Self {
        Self {
            limit,
            period: Duration::from_secs(60),
        }
    }

    /// `limit` units per hour.
    ///
    /// ```
    /// use redkit::{nonzero, rate_limit::Rate};
    /// let rate = Rate::per_hour(nonzero!(1_000));
    /// assert_eq!(rate.period(), std::time::Duration::from_secs(3_600));
    /// ```
    pub const fn per_hour(limit: NonZeroU32) -> Self {
        Self {
            limit,
            period: Duration::from_secs(3_600),
        }
    }

    /// Units per [`period`](Self::period).
    ///
    /// ```
    /// assert_eq!(redkit::rate_limit::Rate::per_second(redkit::nonzero!(3)).limit(), 3);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn limit(&self) -> u32 {
        self.limit.get()
    }

    /// The period of the limit (a window, or GCRA's refill period).
    ///
    /// ```
    /// let period = redkit::rate_limit::Rate::per_second(redkit::nonzero!(3)).period();
    /// assert_eq!(period, std::time::Duration::from_secs(1));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn period(&self) -> Duration {
        self.period
    }

    /// The limit, as the type holds it.
    pub(crate) fn limit_nonzero(&self) -> NonZeroU32 {
        self.limit
    }

    /// The same rate with `period` (already checked non-zero by the caller's truncation).
    pub(crate) fn with_period(mut self, period: Duration) -> Self {
        if !period.is_zero() {
            self.period = period;
        }
        self
    }

    /// The rate as a window holds it: its period truncated to whole milliseconds, at least
    /// 1 ms and at most `max` (else [`Error::InvalidInput`] for `"window"`, saying `range`),
    /// with that number of milliseconds.
    pub(crate) fn as_window(&self, max: Duration, range: &'static str) -> Result<(Self, u64)> {
        let ms = self.period_in(Duration::from_millis(1), max, "window", range)?;
        Ok((self.with_period(Duration::from_millis(ms)), ms))
    }

    /// The period in whole units of `unit` (ms or us, truncated), at least one unit and at
    /// most `max`, else an error naming `what`: what a window or GCRA holds.
    pub(crate) fn period_in(
        &self,
        unit: Duration,
        max: Duration,
        what: &'static str,
        range: &'static str,
    ) -> Result<u64> {
        let n = self.period.as_nanos() / unit.as_nanos().max(1);
        u64::try_from(n)
            .ok()
            .filter(|n| *n >= 1 && self.period <= max)
            .ok_or_else(|| Error::invalid(what, range))
    }
}

impl fmt::Debug for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rate")
            .field("limit", &self.limit)
            .field("period", &self.period)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_what_cannot_be_a_rate() {
        assert!(matches!(
            Rate::new(crate::nonzero!(1), Duration::ZERO),
            Err(Error::InvalidInput { what: "period", .. })
        ));
        assert!(Rate::new(crate::nonzero!(1), Duration::from_nanos(1)).is_ok());
        assert!(Rate::new(NonZeroU32::MAX, Duration::MAX).is_ok());
    }

    #[test]
    fn the_shorthands_are_their_periods() {
        assert_eq!(
            Rate::per_second(crate::nonzero!(7)),
            Rate::new(crate::nonzero!(7), Duration::from_secs(1)).unwrap()
        );
        assert_eq!(
            Rate::per_minute(crate::nonzero!(7)),
            Rate::new(crate::nonzero!(7), Duration::from_secs(60)).unwrap()
        );
        assert_eq!(
            Rate::per_hour(crate::nonzero!(7)),
            Rate::new(crate::nonzero!(7), Duration::from_secs(3600)).unwrap()
        );
    }

    #[test]
    fn periods_in_units_are_truncated_and_bounded() {
        let ms = Duration::from_millis(1);
        let r = Rate::new(crate::nonzero!(1), Duration::from_micros(2_500)).unwrap();
        let max = Duration::from_millis(10);
        assert_eq!(r.period_in(ms, max, "window", "x").unwrap(), 2);
        // The longest period is compared before truncation: 1 ns more is too long.
        assert!(r
            .period_in(ms, Duration::from_micros(2_500), "window", "x")
            .is_ok());
        assert!(r
            .period_in(ms, Duration::from_micros(2_499), "window", "x")
            .is_err());
        let tiny = Rate::new(crate::nonzero!(1), Duration::from_micros(999)).unwrap();
        assert!(tiny.period_in(ms, max, "window", "x").is_err());
        assert_eq!(
            r.with_period(Duration::from_millis(2)).period(),
            Duration::from_millis(2)
        );
        assert_eq!(r.with_period(Duration::ZERO).period(), r.period());
    }
}
