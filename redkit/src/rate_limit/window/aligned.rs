//! Windows aligned to the clock ([`AlignedWindow`](super::AlignedWindow)):
//! which window a check falls in, its key, its reset, and the decoding of
//! `fixed_window_aligned.v3`'s one-integer reply.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::Value;

use crate::error::{Error, Result};
use crate::rate_limit::decision::{Decision, Quota};
use crate::script::{script_error, Script};

/// How long a window's counter outlives the window, at most: clients whose clocks lag by up to
/// this much still find it (a counter recreated after its expiry would count from zero again).
pub(crate) const GRACE_MS: u64 = 5_000;

/// The largest integer a Lua number holds exactly (what the script accepts).
const MAX_LUA_INT: u64 = (1 << 53) - 1;

/// The window a check at `now_ms` (ms since the Unix epoch) falls in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot {
    /// The window's number: `now_ms / window_ms`.
    pub(crate) number: u64,
    /// Until the window ends (1..=window_ms).
    pub(crate) reset_after_ms: u64,
    /// The TTL a new counter gets: the reset plus `min(window, GRACE_MS)`, at most 2^53 - 1.
    pub(crate) ttl_ms: u64,
}

impl Slot {
    /// The window of `window_ms` (>= 1) that holds `now_ms`.
    pub(crate) fn at(now_ms: u64, window_ms: u64) -> Option<Self> {
        let number = now_ms.checked_div(window_ms)?;
        let end = number.checked_add(1)?.checked_mul(window_ms)?;
        let reset_after_ms = end.checked_sub(now_ms)?;
        let ttl_ms = reset_after_ms
            .saturating_add(window_ms.min(GRACE_MS))
            .min(MAX_LUA_INT);
        Some(Self {
            number,
            reset_after_ms,
            ttl_ms,
        })
    }

    /// The window holding the system clock's now.
    pub(crate) fn now(window_ms: u64) -> Result<Self> {
        let clock = || Error::invalid("clock", "the system clock is before 1970 or past 2^64 ms");
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_err(|_| clock())?;
        let now_ms = u64::try_from(since.as_millis()).map_err(|_| clock())?;
        Self::at(now_ms, window_ms).ok_or_else(clock)
    }

    /// The counter key of this window for the client key `tagged` (already hash-tagged),
    /// appended in place.
    pub(crate) fn key(&self, mut tagged: String) -> String {
        use std::fmt::Write as _;
        let _ = write!(tagged, ":{}", self.number);
        tagged
    }

    /// `fixed_window_aligned.v3`'s reply -> [`Decision`]: `c >= 0` counted (the counter
    /// afterwards, at most `limit`), `c < 0` not counted (the counter is `-c - 1`).
    pub(crate) fn decode(
        &self,
        script: &Script,
        reply: Value,
        limit: u32,
        cost: u32,
    ) -> Result<Decision> {
        let bad = |detail: &str| Error::unexpected(script.id(), detail);
        let n = match reply {
            Value::Int(n) => n,
            Value::ServerError(e) => return Err(script_error(script, e.into())),
            _ => return Err(bad("expected an integer")),
        };
        let reset_after = Duration::from_millis(self.reset_after_ms);
        if n >= 0 {
            let count = u64::try_from(n).map_err(|_| bad("negative count"))?;
            if count > u64::from(limit) || count < u64::from(cost) {
                return Err(bad("a counted request outside cost..=limit"));
            }
            return Ok(Decision::Allowed(Quota::new(limit, count, reset_after)));
        }
        let count = n
            .checked_add(1)
            .and_then(i64::checked_neg)
            .and_then(|c| u64::try_from(c).ok())
            .ok_or_else(|| bad("a bad refusal"))?;
        let quota = Quota::new(limit, count, reset_after);
        Ok(if cost > limit {
            Decision::CostExceedsLimit { quota, cost }
        } else {
            Decision::Limited {
                quota,
                retry_after: reset_after,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::embedded::FIXED_WINDOW_ALIGNED as SCRIPT;

    #[test]
    fn windows_are_aligned_to_the_epoch() {
        let s = Slot::at(125_000, 60_000).unwrap();
        assert_eq!(s.number, 2);
        assert_eq!(s.reset_after_ms, 55_000);
        assert_eq!(s.ttl_ms, 60_000);
        // At the first ms of a window, the whole window is left.
        let s = Slot::at(120_000, 60_000).unwrap();
        assert_eq!((s.number, s.reset_after_ms), (2, 60_000));
        // The last ms of a window: 1 ms left; a short window's grace is the window.
        let s = Slot::at(999, 10).unwrap();
        assert_eq!((s.number, s.reset_after_ms, s.ttl_ms), (99, 1, 11));
        assert_eq!(s.key("rk:rl:a:{k:x}".to_owned()), "rk:rl:a:{k:x}:99");
        // Extremes never panic.
        assert!(Slot::at(u64::MAX, 1).is_none());
        assert!(Slot::at(1, 0).is_none());
        let s = Slot::at(u64::MAX / 2, MAX_LUA_INT).unwrap();
        assert!(s.ttl_ms <= MAX_LUA_INT);
        // A TTL past what a Lua number holds exactly is capped at 2^53 - 1.
        let s = Slot::at(0, u64::MAX / 2).unwrap();
        assert_eq!(s.ttl_ms, (1 << 53) - 1);
    }

    #[test]
    fn a_server_error_in_place_of_the_reply_is_the_scripts_own_error() {
        let slot = Slot::at(1_500, 1_000).unwrap();
        let wrong_type = redis::parse_redis_value(b"-WRONGTYPE Operation against a key\r\n")
            .expect("RESP error parses");
        assert!(matches!(
            slot.decode(SCRIPT.script(), wrong_type, 10, 1),
            Err(Error::WrongType { .. })
        ));
    }

    #[test]
    fn decodes_the_integer_reply() {
        let slot = Slot::at(1_500, 1_000).unwrap();
        let d = slot.decode(SCRIPT.script(), Value::Int(3), 10, 1).unwrap();
        assert!(d.is_allowed());
        assert_eq!(d.quota().remaining(), 7);
        assert_eq!(d.quota().reset_after(), Duration::from_millis(500));
        let d = slot
            .decode(SCRIPT.script(), Value::Int(-11), 10, 1)
            .unwrap();
        assert_eq!(d.retry_after(), Some(Duration::from_millis(500)));
        assert_eq!(d.quota().remaining(), 0);
        let d = slot
            .decode(SCRIPT.script(), Value::Int(-1), 10, 11)
            .unwrap();
        assert!(matches!(d, Decision::CostExceedsLimit { cost: 11, .. }));
        // The most negative reply is a refusal with a saturated count, not a panic.
        let d = slot
            .decode(SCRIPT.script(), Value::Int(i64::MIN), 10, 1)
            .unwrap();
        assert_eq!(d.quota().remaining(), 0);
        for bad in [
            Value::Int(11),
            Value::Int(0),
            Value::Nil,
            Value::Array(vec![]),
        ] {
            assert!(
                matches!(
                    slot.decode(SCRIPT.script(), bad.clone(), 10, 1),
                    Err(Error::UnexpectedReply { .. })
                ),
                "{bad:?}"
            );
        }
    }
}
