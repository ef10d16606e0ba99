//! Decoding of the limiter scripts' integer-array replies, without trusting their shape.

use std::time::Duration;

use redis::Value;

use super::decision::{Decision, Quota};

use crate::error::{Error, Result};
use crate::script::{script_error, Script};

/// A script's reply of the integers `v`, as the decoders' tests feed them.
#[cfg(test)]
pub(crate) fn int_reply(v: impl AsRef<[i64]>) -> Value {
    Value::Array(v.as_ref().iter().map(|i| Value::Int(*i)).collect())
}

/// `reply` as exactly `N` integers, or the script's own error mapped to [`Error`].
pub(crate) fn ints<const N: usize>(script: &Script, reply: Value) -> Result<[i64; N]> {
    let bad = || Error::unexpected(script.id(), format!("expected an array of {N} integers"));
    let items = match reply {
        Value::Array(items) => items,
        Value::ServerError(e) => return Err(script_error(script, e.into())),
        _ => return Err(bad()),
    };
    if items.len() != N {
        return Err(bad());
    }
    let mut out = [0i64; N];
    for (slot, item) in out.iter_mut().zip(items) {
        match item {
            Value::Int(i) => *slot = i,
            _ => return Err(bad()),
        }
    }
    Ok(out)
}

/// `reply` as one integer, or the script's own error mapped to [`Error`].
pub(crate) fn int(script: &Script, reply: Value) -> Result<i64> {
    match reply {
        Value::Int(i) => Ok(i),
        Value::ServerError(e) => Err(script_error(script, e.into())),
        _ => Err(Error::unexpected(script.id(), "expected an integer")),
    }
}

/// A non-negative reply field, or an unexpected-reply error naming it.
pub(crate) fn non_negative(script: &Script, what: &str, v: i64) -> Result<u64> {
    u64::try_from(v).map_err(|_| Error::unexpected(script.id(), format!("negative {what}")))
}

/// The `remaining` and `reset_after` fields of GCRA's and the sliding window's replies (a
/// check's or a peek's) as the [`Quota`] of `limit`, times in whole units made a `Duration`
/// by `unit`.
pub(crate) fn quota_of(
    script: &Script,
    [remaining, reset]: [i64; 2],
    unit: fn(u64) -> Duration,
    limit: u32,
) -> Result<Quota> {
    let remaining = non_negative(script, "remaining", remaining)?;
    let reset = unit(non_negative(script, "reset_after", reset)?);
    Ok(Quota::with_remaining(limit, remaining, reset))
}

/// The `{allowed, remaining, retry_after, reset_after}` fields of GCRA's and the sliding
/// window's replies as a [`Decision`]: times in whole units made a `Duration` by `unit`
/// (`Duration::from_micros`, `from_millis`), `limit` the most units that pass at once. A
/// refusal without a retry time, or an `allowed` flag that is neither 0 nor 1, is an
/// unexpected reply.
pub(crate) fn timed_decision(
    script: &Script,
    [allowed, remaining, retry, reset]: [i64; 4],
    unit: fn(u64) -> Duration,
    limit: u32,
    cost: u32,
) -> Result<Decision> {
    let quota = quota_of(script, [remaining, reset], unit, limit)?;
    let retry = unit(non_negative(script, "retry_after", retry)?);
    Ok(match allowed {
        1 => Decision::Allowed(quota),
        0 if cost > limit => Decision::CostExceedsLimit { quota, cost },
        0 if !retry.is_zero() => Decision::Limited {
            quota,
            retry_after: retry,
        },
        _ => {
            return Err(Error::unexpected(
                script.id(),
                "inconsistent allowed/retry fields",
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::embedded::SLIDING_WINDOW as SCRIPT;

    #[test]
    fn a_server_error_in_place_of_the_reply_is_the_scripts_own_error() {
        let wrong_type = redis::parse_redis_value(b"-WRONGTYPE Operation against a key\r\n")
            .expect("RESP error parses");
        assert!(matches!(wrong_type, Value::ServerError(_)));
        assert!(matches!(
            ints::<2>(SCRIPT.script(), wrong_type),
            Err(Error::WrongType { .. })
        ));
    }

    #[test]
    fn only_exactly_n_integers_decode() {
        let ok = Value::Array(vec![Value::Int(1), Value::Int(-2)]);
        assert_eq!(ints::<2>(SCRIPT.script(), ok).unwrap(), [1, -2]);
        for bad in [
            Value::Array(vec![Value::Int(1)]),
            Value::Array(vec![Value::Int(1), Value::Int(2), Value::Int(3)]),
            Value::Array(vec![Value::Int(1), Value::Nil]),
            Value::Int(1),
        ] {
            assert!(matches!(
                ints::<2>(SCRIPT.script(), bad),
                Err(Error::UnexpectedReply { .. })
            ));
        }
        assert_eq!(non_negative(SCRIPT.script(), "x", 0).unwrap(), 0);
        assert!(non_negative(SCRIPT.script(), "x", -1).is_err());
    }

    #[test]
    fn one_integer_decodes_and_anything_else_is_an_error() {
        for i in [0, 7, -3] {
            assert_eq!(int(SCRIPT.script(), Value::Int(i)).unwrap(), i);
        }
        let wrong_type = redis::parse_redis_value(b"-WRONGTYPE Operation against a key\r\n")
            .expect("RESP error parses");
        assert!(matches!(
            int(SCRIPT.script(), wrong_type),
            Err(Error::WrongType { .. })
        ));
        for bad in [Value::Nil, Value::Array(vec![Value::Int(1)]), Value::Okay] {
            assert!(matches!(
                int(SCRIPT.script(), bad),
                Err(Error::UnexpectedReply { .. })
            ));
        }
    }
}
