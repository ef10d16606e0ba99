//! `fixed_window`'s reply (windows from the first hit) as a [`Decision`]. Windows aligned to
//! the clock decode theirs in [`Slot::decode`](super::super::aligned::Slot::decode).

use std::time::Duration;

use redis::Value;

use crate::error::{Error, Result};
use crate::rate_limit::decision::{Decision, Quota};
use crate::script::{script_error, Script};

/// `script`'s reply -> [`Decision`] for a counter of `limit` units a `window`, without
/// trusting its shape: `{count, pttl_ms, allowed}`, or the same packed into one integer (see
/// [`unpack`]).
pub(super) fn decode(
    script: &Script,
    limit: u32,
    window: Duration,
    reply: Value,
    cost: u32,
) -> Result<Decision> {
    let bad = |detail: &str| Error::unexpected(script.id(), detail);
    let (count, pttl, allowed) = match reply {
        Value::Int(packed) => unpack(limit, packed).ok_or_else(|| bad("a bad packed reply"))?,
        Value::Array(items) => match items.as_slice() {
            [Value::Int(count), Value::Int(pttl), Value::Int(allowed)] => (*count, *pttl, *allowed),
            _ => return Err(bad("expected an array of 3 integers")),
        },
        Value::ServerError(e) => return Err(script_error(script, e.into())),
        _ => return Err(bad("expected an array of 3 integers")),
    };
    let count = u64::try_from(count).map_err(|_| bad("negative count"))?;
    let reset_after = match u64::try_from(pttl) {
        // PTTL 0: less than a millisecond left (the window ends within 1 ms).
        Ok(ms) => Duration::from_millis(ms.max(1)),
        // -1, no TTL (the script sets one) or -2, no counter: a full window.
        Err(_) => window,
    };
    let quota = Quota::new(limit, count, reset_after);
    Ok(match allowed {
        1 => Decision::Allowed(quota),
        0 if cost > limit => Decision::CostExceedsLimit { quota, cost },
        0 => Decision::Limited {
            quota,
            retry_after: reset_after,
        },
        _ => return Err(bad("allowed flag is neither 0 nor 1")),
    })
}

/// The packed reply (`fixed_window.v5` and later): with `b = limit + 1`, `pttl * b + count`
/// when allowed, `-(pttl * b + count) - 1` when not (`count <= limit`). `(count, pttl,
/// allowed)`.
fn unpack(limit: u32, packed: i64) -> Option<(i64, i64, i64)> {
    let (value, allowed) = if packed >= 0 {
        (packed, 1)
    } else {
        (packed.checked_add(1)?.checked_neg()?, 0)
    };
    let base = i64::from(limit).checked_add(1)?;
    Some((value.checked_rem(base)?, value.checked_div(base)?, allowed))
}

#[cfg(test)]
mod tests {
    use super::super::FixedWindow;
    use super::*;
    use crate::rate_limit::Rate;

    fn limiter() -> FixedWindow {
        FixedWindow::new("t", Rate::per_second(crate::nonzero!(10))).unwrap()
    }

    fn reply(c: i64, p: i64, a: i64) -> Value {
        Value::Array(vec![Value::Int(c), Value::Int(p), Value::Int(a)])
    }

    #[test]
    fn decodes_the_edges() {
        let l = limiter();
        // No TTL (-1) or no counter (-2): the reset is a full window.
        for pttl in [-1, -2] {
            let d = l.decode(reply(3, pttl, 1), 1, None).unwrap();
            assert_eq!(d.quota().reset_after(), l.window(), "pttl {pttl}");
        }
        // PTTL 0 at a window's rollover: less than 1 ms left, not a whole window (a refusal
        // there must not be cached, nor told to retry, for a whole window).
        let d = l.decode(reply(3, 0, 1), 1, None).unwrap();
        assert_eq!(d.quota().reset_after(), Duration::from_millis(1));
        // Packed, limited: -(pttl * (limit + 1) + count) - 1 with pttl 0 and count 10.
        let limited = l.decode(Value::Int(-10 - 1), 1, None).unwrap();
        assert_eq!(limited.quota().remaining(), 0);
        assert!(
            matches!(limited, Decision::Limited { retry_after, .. } if retry_after == Duration::from_millis(1)),
            "{limited:?}"
        );
        let d = l.decode(reply(3, 1, 1), 1, None).unwrap();
        assert_eq!(d.quota().reset_after(), Duration::from_millis(1));
        // A refused cost of exactly the limit may pass later: Limited, not CostExceedsLimit.
        let d = l.decode(reply(1, 400, 0), l.limit(), None).unwrap();
        assert!(matches!(d, Decision::Limited { .. }), "{d:?}");
        // A RESP error in place of the reply is the script's own error.
        let wrong_type = redis::parse_redis_value(b"-WRONGTYPE Operation against a key\r\n")
            .expect("RESP error parses");
        assert!(matches!(
            l.decode(wrong_type, 1, None),
            Err(Error::WrongType { .. })
        ));
    }

    #[test]
    fn decodes_outcomes() {
        let l = limiter();
        let d = l.decode(reply(3, 500, 1), 1, None).unwrap();
        assert_eq!(d.quota().remaining(), 7);
        assert_eq!(d.quota().reset_after(), Duration::from_millis(500));
        assert!(d.is_allowed());
        let d = l.decode(reply(10, 400, 0), 1, None).unwrap();
        assert_eq!(d.retry_after(), Some(Duration::from_millis(400)));
        assert_eq!(d.quota().remaining(), 0);
        let d = l.decode(reply(0, 1000, 0), 11, None).unwrap();
        assert!(matches!(d, Decision::CostExceedsLimit { cost: 11, .. }));
        assert_eq!(d.retry_after(), None);
        // A counter above the limit (limit lowered since) saturates at 0 remaining.
        assert_eq!(
            l.decode(reply(50, 1, 0), 1, None)
                .unwrap()
                .quota()
                .remaining(),
            0
        );
    }

    #[test]
    fn rejects_bad_replies_without_panicking() {
        let l = limiter();
        for v in [
            Value::Nil,
            Value::Array(vec![]),
            Value::Array(vec![Value::Int(1), Value::Int(2)]),
            reply(-1, 5, 1),
            reply(1, 5, 7),
            Value::Array(vec![Value::Nil, Value::Int(1), Value::Int(1)]),
        ] {
            assert!(matches!(
                l.decode(v, 1, None),
                Err(Error::UnexpectedReply { .. })
            ));
        }
    }
}
