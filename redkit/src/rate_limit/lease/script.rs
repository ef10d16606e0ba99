//! The lease scripts, one per algorithm that leases, and their replies read as one [`Grant`].

use std::time::{Duration, Instant};

use redis::Value;

use crate::error::{Error, Result};
use crate::rate_limit::{Decision, DenyCache};
use crate::script::{embedded, Script};

/// Not nameable outside the crate: what the sealed `LeaseTarget` names.
pub(crate) mod sealed {
    /// Which lease script a limiter's leases run (named by the sealed
    /// [`LeaseTarget`](super::LeaseTarget), so not nameable outside the crate either).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    #[allow(unreachable_pub)]
    pub enum LeaseScript {
        /// `fixed_window_lease`: `{granted, count, pttl_ms}`.
        FixedWindow,
        /// `sliding_window_lease`: `{granted, used, counter, valid_ms, reset_ms, retry_ms}`.
        SlidingWindow,
        /// `gcra_lease`: `{granted, used, tat, valid_us, reset_us, retry_us}`; each unit held
        /// is usable one emission interval longer than the one before it.
        Gcra,
    }
}

pub(crate) use sealed::LeaseScript;

/// A lease call's answer, whatever the algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Grant {
    /// The units granted: 0 when fewer than the cost were left (nothing was written).
    pub(crate) granted: u64,
    /// What counts toward the limit now, this grant included (a sliding window's weighted
    /// estimate).
    pub(crate) used: u64,
    /// The current window's own counter, which only grows within the window: lower in the
    /// answer to a later call means it was lost (a restart, a flush, a reset).
    pub(crate) counter: u64,
    /// How long the granted units may be used: until the window they were counted in ends
    /// (measured by the server).
    pub(crate) valid: Duration,
    /// How much longer each next unit held may be used than the one before it: zero for a
    /// window's (all end with it), the emission interval for GCRA's.
    pub(crate) step: Duration,
    /// The quota's [`reset_after`](crate::rate_limit::Quota::reset_after).
    pub(crate) reset: Duration,
    /// A refusal's `retry_after`.
    pub(crate) retry: Duration,
}

impl LeaseScript {
    /// The script a lease call runs.
    pub(crate) fn script(self) -> &'static Script {
        match self {
            Self::FixedWindow => embedded::FIXED_WINDOW_LEASE.script(),
            Self::SlidingWindow => embedded::SLIDING_WINDOW_LEASE.script(),
            Self::Gcra => embedded::GCRA_LEASE.script(),
        }
    }

    /// What a lease call is sent after the limit, from the limiter's
    /// [`window`](crate::rate_limit::RateLimiter::window) and
    /// [`limit`](crate::rate_limit::RateLimiter::limit): a window's length in whole ms, GCRA's
    /// emission interval in µs (its window is the bucket, interval x burst).
    pub(crate) fn span(self, window: Duration, limit: u32) -> u64 {
        match self {
            Self::FixedWindow | Self::SlidingWindow => {
                u64::try_from(window.as_millis()).unwrap_or(u64::MAX)
            }
            Self::Gcra => {
                u64::try_from(window.as_micros()).unwrap_or(u64::MAX) / u64::from(limit.max(1))
            }
        }
    }

    /// Stores a lease call's answer (for `cost` units, sent at `sent`) in the limiter's deny
    /// cache, as the limiter's own check would.
    pub(crate) fn remember(
        self,
        cache: &DenyCache,
        key: &str,
        (sent, cost): (Instant, u32),
        decision: &Decision,
    ) {
        match self {
            Self::Gcra => cache.remember_bucket(key, sent, cost, decision),
            Self::FixedWindow | Self::SlidingWindow => cache.remember(key, sent, decision),
        }
    }

    /// Whether a refused lease call is kept with the units held, for the deny cache (a
    /// window's refusal stands until the window ends). GCRA's is the deny cache's own: a
    /// refusal of `cost` units ends when they are in the bucket, sooner for fewer.
    pub(crate) fn keeps_refusals(self) -> bool {
        !matches!(self, Self::Gcra)
    }

    /// The script's reply -> [`Grant`], without trusting its shape (`span`: what the call was
    /// sent after the limit: a window's length in ms, the fixed window's reset for a counter
    /// found without a TTL; GCRA's emission interval in µs).
    pub(crate) fn decode(self, reply: Value, span: u64) -> Result<Grant> {
        let script = self.script();
        let bad = |detail: &str| Error::unexpected(script.id(), detail);
        let ints: Vec<i64> = match reply {
            Value::Array(items) => items
                .into_iter()
                .map(|v| match v {
                    Value::Int(i) => Ok(i),
                    _ => Err(bad("expected an array of integers")),
                })
                .collect::<Result<_>>()?,
            _ => return Err(bad("expected an array of integers")),
        };
        let unsigned = |i: i64, what: &str| u64::try_from(i).map_err(|_| bad(what));
        match (self, ints.as_slice()) {
            (Self::FixedWindow, [granted, count, pttl]) => {
                let count = unsigned(*count, "negative count")?;
                // A refused counter found without a TTL answers -1: its window is unknown.
                let left = Duration::from_millis(u64::try_from(*pttl).map_or(span, |ms| ms.max(1)));
                Ok(Grant {
                    granted: unsigned(*granted, "negative grant")?,
                    used: count,
                    counter: count,
                    valid: left,
                    step: Duration::ZERO,
                    reset: left,
                    retry: left,
                })
            }
            (Self::SlidingWindow, [granted, used, counter, valid, reset, retry]) => Ok(Grant {
                granted: unsigned(*granted, "negative grant")?,
                used: unsigned(*used, "negative count")?,
                counter: unsigned(*counter, "negative counter")?,
                valid: Duration::from_millis(unsigned(*valid, "negative validity")?),
                step: Duration::ZERO,
                reset: Duration::from_millis(unsigned(*reset, "negative reset")?.max(1)),
                retry: Duration::from_millis(unsigned(*retry, "negative retry")?),
            }),
            (Self::Gcra, [granted, used, tat, valid, reset, retry]) => Ok(Grant {
                granted: unsigned(*granted, "negative grant")?,
                used: unsigned(*used, "negative count")?,
                counter: unsigned(*tat, "negative TAT")?,
                valid: Duration::from_micros(unsigned(*valid, "negative validity")?),
                step: Duration::from_micros(span),
                reset: Duration::from_micros(unsigned(*reset, "negative reset")?.max(1)),
                retry: Duration::from_micros(unsigned(*retry, "negative retry")?),
            }),
            (Self::FixedWindow, _) => Err(bad("expected an array of 3 integers")),
            (Self::SlidingWindow | Self::Gcra, _) => Err(bad("expected an array of 6 integers")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate_limit::reply::int_reply as reply;
    use crate::rate_limit::Quota;

    #[test]
    fn a_fixed_window_grant_is_valid_until_its_window_ends() {
        let g = LeaseScript::FixedWindow
            .decode(reply([5, 40, 900]), 1_000)
            .unwrap();
        let ms = Duration::from_millis(900);
        assert_eq!(
            g,
            Grant {
                granted: 5,
                used: 40,
                counter: 40,
                valid: ms,
                step: Duration::ZERO,
                reset: ms,
                retry: ms
            }
        );
        let unknown = LeaseScript::FixedWindow
            .decode(reply([0, 100, -1]), 1_000)
            .unwrap();
        assert_eq!(
            unknown.retry,
            Duration::from_millis(1_000),
            "no TTL: a window"
        );
        let ending = LeaseScript::FixedWindow
            .decode(reply([0, 100, 0]), 1_000)
            .unwrap();
        assert_eq!(ending.retry, Duration::from_millis(1), "never zero");
    }

    #[test]
    fn a_sliding_window_grant_is_valid_until_the_current_window_ends() {
        let g = LeaseScript::SlidingWindow
            .decode(reply([8, 70, 30, 400, 1_400, 0]), 1_000)
            .unwrap();
        assert_eq!((g.granted, g.used, g.counter), (8, 70, 30));
        assert_eq!(
            (g.valid, g.reset, g.retry),
            (
                Duration::from_millis(400),
                Duration::from_millis(1_400),
                Duration::ZERO
            )
        );
        let refused = LeaseScript::SlidingWindow
            .decode(reply([0, 100, 60, 0, 0, 250]), 1_000)
            .unwrap();
        assert_eq!(
            refused.valid,
            Duration::ZERO,
            "an ended window holds nothing"
        );
        assert_eq!(refused.reset, Duration::from_millis(1), "never zero");
        assert_eq!(refused.retry, Duration::from_millis(250));
    }

    #[test]
    fn a_gcra_grant_holds_units_that_end_one_interval_apart() {
        let g = LeaseScript::Gcra
            .decode(
                reply([6, 9, 1_700_000_000_000_000, 150_000, 300_000, 0]),
                10_000,
            )
            .unwrap();
        assert_eq!(
            (g.granted, g.used, g.counter),
            (6, 9, 1_700_000_000_000_000)
        );
        assert_eq!(
            (g.valid, g.step, g.reset, g.retry),
            (
                Duration::from_millis(150),
                Duration::from_millis(10),
                Duration::from_millis(300),
                Duration::ZERO
            )
        );
        let refused = LeaseScript::Gcra
            .decode(reply([0, 10, 5, 0, 0, 2_500]), 10_000)
            .unwrap();
        assert_eq!(
            (refused.valid, refused.reset, refused.retry),
            (
                Duration::ZERO,
                Duration::from_micros(1),
                Duration::from_micros(2_500)
            ),
            "a reset is never zero"
        );
    }

    #[test]
    fn each_script_is_sent_its_span_and_keeps_its_refusals_its_way() {
        let second = Duration::from_secs(1);
        assert_eq!(LeaseScript::FixedWindow.span(second, 50), 1_000);
        assert_eq!(LeaseScript::SlidingWindow.span(second, 50), 1_000);
        assert_eq!(LeaseScript::Gcra.span(second, 50), 20_000, "µs per unit");
        assert!(LeaseScript::FixedWindow.keeps_refusals());
        assert!(LeaseScript::SlidingWindow.keeps_refusals());
        assert!(!LeaseScript::Gcra.keeps_refusals());
        let (cache, sent) = (DenyCache::new(1_000).unwrap(), Instant::now());
        let refused = Decision::Limited {
            quota: Quota::new(10, 8, second),
            retry_after: second,
        };
        LeaseScript::Gcra.remember(&cache, "g", (sent, 3), &refused);
        LeaseScript::FixedWindow.remember(&cache, "w", (sent, 3), &refused);
        assert!(
            cache.lookup("g", 10, 2).is_none(),
            "a bucket refills: 2 may fit before 3 do"
        );
        assert!(cache.lookup("w", 10, 3).is_some() && cache.lookup("g", 10, 3).is_some());
    }

    #[test]
    fn replies_of_another_shape_are_refused() {
        for (script, bad) in [
            (LeaseScript::FixedWindow, reply([1, 2])),
            (LeaseScript::FixedWindow, reply([-1, 2, 3])),
            (LeaseScript::FixedWindow, reply([1, -2, 3])),
            (LeaseScript::FixedWindow, reply([1, 2, 3, 4, 5, 6])),
            (LeaseScript::SlidingWindow, reply([1, 2, 3])),
            (LeaseScript::SlidingWindow, reply([1, 2, 3, 4, 5, -6])),
            (LeaseScript::SlidingWindow, reply([1, 2, 3, -4, 5, 6])),
            (LeaseScript::SlidingWindow, reply([1, 2, -3, 4, 5, 6])),
            (LeaseScript::SlidingWindow, reply([1, -2, 3, 4, 5, 6])),
            (LeaseScript::SlidingWindow, reply([-1, 2, 3, 4, 5, 6])),
            (LeaseScript::SlidingWindow, reply([1, 2, 3, 4, -5, 6])),
            (LeaseScript::SlidingWindow, Value::Nil),
            (LeaseScript::Gcra, reply([1, 2, 3])),
            (LeaseScript::Gcra, reply([-1, 2, 3, 4, 5, 6])),
            (LeaseScript::Gcra, reply([1, -2, 3, 4, 5, 6])),
            (LeaseScript::Gcra, reply([1, 2, -3, 4, 5, 6])),
            (LeaseScript::Gcra, reply([1, 2, 3, -4, 5, 6])),
            (LeaseScript::Gcra, reply([1, 2, 3, 4, -5, 6])),
            (LeaseScript::Gcra, reply([1, 2, 3, 4, 5, -6])),
            (
                LeaseScript::FixedWindow,
                Value::Array(vec![Value::Int(1), Value::Nil, Value::Int(3)]),
            ),
        ] {
            assert!(
                matches!(
                    script.decode(bad.clone(), 1_000),
                    Err(Error::UnexpectedReply { .. })
                ),
                "{bad:?}"
            );
        }
    }
}
