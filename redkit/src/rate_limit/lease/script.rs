//! The lease scripts, one per algorithm that leases, and their replies read as one [`Grant`].

use std::time::Duration;

use redis::Value;

use crate::error::{Error, Result};
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
        }
    }

    /// The script's reply -> [`Grant`], without trusting its shape (`window_ms`: the window's
    /// length, the fixed window's reset for a counter found without a TTL).
    pub(crate) fn decode(self, reply: Value, window_ms: u64) -> Result<Grant> {
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
                let left =
                    Duration::from_millis(u64::try_from(*pttl).map_or(window_ms, |ms| ms.max(1)));
                Ok(Grant {
                    granted: unsigned(*granted, "negative grant")?,
                    used: count,
                    counter: count,
                    valid: left,
                    reset: left,
                    retry: left,
                })
            }
            (Self::SlidingWindow, [granted, used, counter, valid, reset, retry]) => Ok(Grant {
                granted: unsigned(*granted, "negative grant")?,
                used: unsigned(*used, "negative count")?,
                counter: unsigned(*counter, "negative counter")?,
                valid: Duration::from_millis(unsigned(*valid, "negative validity")?),
                reset: Duration::from_millis(unsigned(*reset, "negative reset")?.max(1)),
                retry: Duration::from_millis(unsigned(*retry, "negative retry")?),
            }),
            (Self::FixedWindow, _) => Err(bad("expected an array of 3 integers")),
            (Self::SlidingWindow, _) => Err(bad("expected an array of 6 integers")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(v: &[i64]) -> Value {
        Value::Array(v.iter().map(|i| Value::Int(*i)).collect())
    }

    #[test]
    fn a_fixed_window_grant_is_valid_until_its_window_ends() {
        let g = LeaseScript::FixedWindow
            .decode(reply(&[5, 40, 900]), 1_000)
            .unwrap();
        let ms = Duration::from_millis(900);
        assert_eq!(
            g,
            Grant {
                granted: 5,
                used: 40,
                counter: 40,
                valid: ms,
                reset: ms,
                retry: ms
            }
        );
        let unknown = LeaseScript::FixedWindow
            .decode(reply(&[0, 100, -1]), 1_000)
            .unwrap();
        assert_eq!(
            unknown.retry,
            Duration::from_millis(1_000),
            "no TTL: a window"
        );
        let ending = LeaseScript::FixedWindow
            .decode(reply(&[0, 100, 0]), 1_000)
            .unwrap();
        assert_eq!(ending.retry, Duration::from_millis(1), "never zero");
    }

    #[test]
    fn a_sliding_window_grant_is_valid_until_the_current_window_ends() {
        let g = LeaseScript::SlidingWindow
            .decode(reply(&[8, 70, 30, 400, 1_400, 0]), 1_000)
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
            .decode(reply(&[0, 100, 60, 0, 0, 250]), 1_000)
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
    fn replies_of_another_shape_are_refused() {
        for (script, bad) in [
            (LeaseScript::FixedWindow, reply(&[1, 2])),
            (LeaseScript::FixedWindow, reply(&[-1, 2, 3])),
            (LeaseScript::FixedWindow, reply(&[1, -2, 3])),
            (LeaseScript::FixedWindow, reply(&[1, 2, 3, 4, 5, 6])),
            (LeaseScript::SlidingWindow, reply(&[1, 2, 3])),
            (LeaseScript::SlidingWindow, reply(&[1, 2, 3, 4, 5, -6])),
            (LeaseScript::SlidingWindow, reply(&[1, 2, 3, -4, 5, 6])),
            (LeaseScript::SlidingWindow, reply(&[1, 2, -3, 4, 5, 6])),
            (LeaseScript::SlidingWindow, reply(&[1, -2, 3, 4, 5, 6])),
            (LeaseScript::SlidingWindow, reply(&[-1, 2, 3, 4, 5, 6])),
            (LeaseScript::SlidingWindow, reply(&[1, 2, 3, 4, -5, 6])),
            (LeaseScript::SlidingWindow, Value::Nil),
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
