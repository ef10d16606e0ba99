//! What the operator's repairs of every lock kind share (`Lock::force_release`,
//! `FairLock::evict`, `Semaphore::evict`): the owner token they name, the removal itself
//! ([`remove`]: one compare-and-delete call, its reply typed), and the trace event that
//! records what they removed.

use std::num::NonZeroU32;

use redis::aio::ConnectionLike;
use redis::Value;

use crate::error::{Error, Result};
use crate::lock::outcome::status;
use crate::lock::{FencingToken, Release};
use crate::script::{script_error, Call, Script, ScriptManager};

/// The most entries an inspection lists.
const MOST_LISTED: u32 = 10_000;

/// How many entries an inspection lists: at most 10,000.
pub(crate) fn checked_list(list: NonZeroU32) -> Result<u32> {
    if list.get() > MOST_LISTED {
        return Err(Error::invalid("list", "must be at most 10000"));
    }
    Ok(list.get())
}

/// An inspection script's reply as its array, the script's own error mapped, or an
/// unexpected-reply error saying what was `expected`.
pub(crate) fn inspected(script: &Script, reply: Value, expected: &str) -> Result<Vec<Value>> {
    match reply {
        Value::Array(items) => Ok(items),
        Value::ServerError(e) => Err(script_error(script, e.into())),
        _ => Err(Error::unexpected(
            script.id(),
            format!("expected {expected}"),
        )),
    }
}

/// An owner token as acquires write them (16 to 128 bytes): any other cannot be a holder's.
pub(crate) fn checked_token(token: &str) -> Result<()> {
    if (16..=128).contains(&token.len()) {
        Ok(())
    } else {
        Err(Error::invalid("token", "must be 16 to 128 bytes"))
    }
}

/// The `WARN` event of a repair: `what` was done to `token`'s hold of `resource` at `key`.
pub(crate) fn record(what: &str, resource: &str, key: &str, token: &str) {
    tracing::warn!(target: "redkit::lock", resource, key, token, "{what}");
}

/// Runs a repair's compare-and-delete `call` of `token`'s hold of `resource` at `key` (its
/// script answers 1 removed, 0 not there): [`Release::Released`] when it removed the hold,
/// then recorded as `what` ([`record`]); [`Release::NotOwner`] when the hold was not there.
/// The script's own error is typed (by the manager), any other answer an unexpected one
/// ([`status`]).
pub(crate) async fn remove<C: ConnectionLike>(
    manager: &ScriptManager,
    conn: &mut C,
    call: &Call<'_>,
    what: &str,
    resource: &str,
    key: &str,
    token: &str,
) -> Result<Release> {
    let answer: i64 = manager.invoke(conn, call).await?;
    if !status(call.script(), answer)? {
        return Ok(Release::NotOwner);
    }
    record(what, resource, key, token);
    Ok(Release::Released)
}

/// A fence key's value as an inspection read it: the last fencing token issued (`None`
/// when there is none), or [`Error::CorruptData`] for a value no lock writes.
pub(crate) fn fence(script: &Script, value: Value) -> Result<Option<FencingToken>> {
    let text = match value {
        Value::Nil => return Ok(None),
        Value::BulkString(b) => b,
        _ => return Err(Error::unexpected(script.id(), "a fence that is not text")),
    };
    std::str::from_utf8(&text)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .and_then(FencingToken::new)
        .map(Some)
        .ok_or_else(|| Error::CorruptData {
            script: script.id().to_string(),
            detail: "the fence key is not a token".to_owned(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_tokens_an_acquire_writes_are_named() {
        assert!(checked_token(&"t".repeat(16)).is_ok());
        assert!(checked_token(&"t".repeat(128)).is_ok());
        assert!(checked_token(&"t".repeat(15)).is_err());
        assert!(checked_token(&"t".repeat(129)).is_err());
    }
}
