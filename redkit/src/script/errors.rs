//! What a server's error for a script call means: the typed [`Error`] of a script's refusal,
//! the two errors the call path recovers from (`NOSCRIPT`, "Function not found"), and a
//! server without Functions or without Lua scripting ([`Error::Unsupported`]). A leaf.

use std::sync::atomic::{AtomicBool, Ordering};

use redis::{RedisError, ServerErrorKind};

use super::registry::Script;
use crate::error::{Error, Result};

/// Error code a script uses (`redis.error_reply("REDKIT_DATA ...")`) for data it refuses.
pub(crate) const DATA_ERROR_CODE: &str = "REDKIT_DATA";
/// Error code a script uses for an argument it rejects (second line of defence).
pub(crate) const INPUT_ERROR_CODE: &str = "REDKIT_INPUT";
/// Error code a script uses when `redis.acl_check_cmd` denies a command it would run.
pub(crate) const NOPERM_ERROR_CODE: &str = "REDKIT_NOPERM";

/// `true` when Redis answered `NOSCRIPT`.
pub(crate) fn is_noscript(err: &RedisError) -> bool {
    err.kind() == redis::ErrorKind::Server(ServerErrorKind::NoScript)
}

/// `true` when the server does not know the function (its library was never loaded, or was
/// flushed or deleted).
pub(crate) fn is_function_missing(err: &RedisError) -> bool {
    err.code() == Some("ERR")
        && err
            .detail()
            .is_some_and(|d| d.starts_with("Function not found"))
}

/// The command a server answered "unknown command" to (`ERR unknown command 'EVALSHA', with
/// args beginning with: ...`): a server without it, or with it renamed away.
fn unknown_command(err: &RedisError) -> Option<&str> {
    if err.code() != Some("ERR") {
        return None;
    }
    let rest = err.detail()?.strip_prefix("unknown command '")?;
    rest.split('\'').next()
}

fn unknown_one_of(err: &RedisError, commands: &[&str]) -> bool {
    unknown_command(err).is_some_and(|c| commands.iter().any(|k| c.eq_ignore_ascii_case(k)))
}

/// `true` when the server has no Functions (Redis < 7.0, or the command is renamed away).
pub(crate) fn is_unsupported(err: &RedisError) -> bool {
    unknown_one_of(err, &["FCALL", "FCALL_RO", "FUNCTION"])
}

/// `true` when the server has no Lua scripting: `EVAL`, `EVALSHA` or `SCRIPT` unknown (a
/// server built or configured without its Lua engine, or the commands renamed away).
pub(crate) fn is_scripting_absent(err: &RedisError) -> bool {
    unknown_one_of(err, &["EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "SCRIPT"])
}

/// The feature named by [`Error::Unsupported`] on a server without Lua scripting.
pub(crate) const LUA_SCRIPTING: &str = "Lua scripting (EVAL, EVALSHA, SCRIPT)";

/// [`Error::Unsupported`] for a server without Lua scripting; said once per process in the
/// log (every later call gets the same typed error, without a log line of its own).
pub(crate) fn scripting_absent(err: RedisError) -> Error {
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        tracing::error!(
            error = %err,
            "the Redis server has no Lua scripting: every redkit script call fails with \
             Error::Unsupported until scripting is back"
        );
    }
    Error::Unsupported {
        feature: LUA_SCRIPTING,
        detail: err.to_string(),
    }
}

/// [`Error::Unsupported`] for a server without Functions or without Lua scripting, else the
/// Redis error.
pub(crate) fn unsupported_or(err: RedisError) -> Error {
    if is_unsupported(&err) {
        unsupported(err)
    } else if is_scripting_absent(&err) {
        scripting_absent(err)
    } else {
        Error::Redis(err)
    }
}

/// The error for a server without Functions.
pub(crate) fn unsupported(err: RedisError) -> Error {
    Error::Unsupported {
        feature: "Redis Functions (FCALL, Redis 7.0+)",
        detail: err.to_string(),
    }
}

/// [`script_error`], and [`Error::Unsupported`] for a server without Functions.
pub(crate) fn function_error(script: &Script, err: RedisError) -> Error {
    if is_unsupported(&err) {
        unsupported_or(err)
    } else {
        script_error(script, err)
    }
}

/// `Ok` when the SHA1 the server returned for a `SCRIPT LOAD` is the script's own.
pub(crate) fn check_sha(script: &Script, server: &str) -> Result<()> {
    if server.eq_ignore_ascii_case(script.sha1()) {
        Ok(())
    } else {
        Err(Error::ShaMismatch {
            script: script.id().to_owned(),
            local: script.sha1().to_owned(),
            server: server.to_owned(),
        })
    }
}

/// Turns a server error from a script into a typed [`Error`].
pub(crate) fn script_error(script: &Script, err: RedisError) -> Error {
    if is_scripting_absent(&err) {
        return scripting_absent(err);
    }
    let detail = || err.detail().unwrap_or_default().to_owned();
    match err.code() {
        Some("WRONGTYPE") => Error::WrongType {
            script: script.id().to_owned(),
        },
        Some(DATA_ERROR_CODE) => Error::CorruptData {
            script: script.id().to_owned(),
            detail: detail(),
        },
        Some(NOPERM_ERROR_CODE) | Some("NOPERM") => Error::PermissionDenied {
            script: script.id().to_owned(),
            detail: detail(),
        },
        Some(INPUT_ERROR_CODE) => Error::InvalidInput {
            what: "argument",
            reason: format!("{}: {}", script.id(), detail()),
        },
        _ => Error::Redis(err),
    }
}
