//! Decoding of the limiter scripts' integer-array replies, without trusting their shape.

use redis::Value;

use crate::error::{Error, Result};
use crate::script::{script_error, Script};

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

/// A non-negative reply field, or an unexpected-reply error naming it.
pub(crate) fn non_negative(script: &Script, what: &str, v: i64) -> Result<u64> {
    u64::try_from(v).map_err(|_| Error::unexpected(script.id(), format!("negative {what}")))
}
