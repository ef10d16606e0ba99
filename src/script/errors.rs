//! What a server's error for a script call means: the typed [`Error`] of a script's refusal,
//! and the two errors the call path recovers from (`NOSCRIPT`, "Function not found"). A leaf.

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

/// `true` when the server has no Functions (Redis < 7.0, or the command is renamed away).
pub(crate) fn is_unsupported(err: &RedisError) -> bool {
    err.code() == Some("ERR")
        && err.detail().is_some_and(|d| {
            d.starts_with("unknown command") && (d.contains("FCALL") || d.contains("FUNCTION"))
        })
}

/// [`Error::Unsupported`] for a server without Functions, else the Redis error.
pub(crate) fn unsupported_or(err: RedisError) -> Error {
    if is_unsupported(&err) {
        unsupported(err)
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
