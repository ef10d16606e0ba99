//! Release and renewal of a plain, unfenced [`Lock`](crate::lock::Lock) lease with the server's own
//! commands instead of a script, where the server offers them
//! ([`Capabilities`](crate::script::Capabilities), probed once per manager):
//!
//! - release: `DELIFEQ key token` and `EXISTS <waiter flag>` in one round trip: on one
//!   server a plain pipeline, on a Cluster in a transaction (`MULTI` ... `EXEC`);
//!   only when it deleted the key and a blocked acquirer has set the flag, the wake-up the
//!   release script pushes (`TYPE` of the list, then `MULTI`, `LPUSH wake 1`,
//!   `LTRIM wake 0 0`, `PEXPIRE wake 60000`, `EXEC`: the same list, one entry, 60 s); for a
//!   lock that does not wake waiters ([`Lock::wake_on_release`](crate::lock::Lock::wake_on_release)),
//!   `DELIFEQ key token` alone;
//! - renewal: `SET key token IFEQ token PX ttl`, with `WAIT` behind it in the same pipeline
//!   when the lease requires replicas (as the script path sends it).
//!
//! Each answers what the script would: [`Release::Released`] / [`Release::NotOwner`],
//! [`Renew::Renewed`] / [`Renew::Lost`], `WRONGTYPE` as [`Error::WrongType`]. A native command
//! answered "unknown command", "syntax error" or `NOPERM` did not run (in a transaction the
//! server discards all of it): `None`, and the caller runs its script (see
//! [`ScriptManager::capabilities`]). A fenced lease never comes here: its renewal also keeps
//! the fence key alive, which only its script does. An unfenced lease does not need that:
//! a fencing token is never below the server clock in µs, whether or not the fence key lives.
//!
//! Two differences with the scripts, both outside a lock's contract: the transaction is
//! atomic but the wake-up is a second step, so a release whose wake-up list was overwritten
//! by something else than a list (`WRONGTYPE`), or whose wake-up commands the ACL refuses,
//! has deleted the lock key when the wake-up fails: it answers [`Release::Released`] (what
//! the key holds), writes nothing to the wake-up list, and reports the failed wake-up on its
//! own (a `WARN` event, and `redkit.lock.operations` with operation `wake` and outcome
//! `error`); the blocked acquirer finds the lock free at its next poll (its `BLPOP` times
//! out, or fails). The script refuses before deleting: an error there means the key is still
//! held. Either way the answer matches what the key holds. And a renewal rewrites the key
//! with the same value where the script sends `PEXPIRE` (keyspace notifications differ).

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{RedisError, Value};

use crate::error::{Error, Result};
use crate::lock::lease::schema;
use crate::lock::lease::wait::ms;
use crate::lock::metrics::{self, LockKind, LockOp, LockOutcome};
use crate::lock::outcome::{Release, Renew};
use crate::script::{Acked, Native, Replication, ScriptManager};

/// What the errors of a native release name (the script path names its script).
const RELEASE: &str = "lock release (DELIFEQ)";
/// What the errors of a native renewal name.
const RENEW: &str = "lock renewal (SET IFEQ PX)";

/// The release of the lease of `key` held with `token` by `DELIFEQ`, waking a blocked
/// acquirer when one registered (`wakes`; without it, `DELIFEQ` alone); `None` when the server
/// does not offer `DELIFEQ` (or no longer does): run the script.
pub(crate) async fn release<C: ConnectionLike>(
    manager: &ScriptManager,
    conn: &mut C,
    (key, token): (&str, &str),
    wakes: bool,
) -> Option<Result<Release>> {
    if !manager.native_usable(conn, Native::DelIfEq).await {
        return None;
    }
    if !wakes {
        let deleted = redis::cmd("DELIFEQ")
            .arg(key)
            .arg(token)
            .query_async::<i64>(conn)
            .await;
        return match deleted {
            Err(e) if manager.native_falls_back(Native::DelIfEq, &e) => None,
            Err(e) => Some(Err(typed(RELEASE, e))),
            Ok(deleted) => Some(deleted_or_not(deleted)),
        };
    }
    let waiting = schema::waiting(key);
    if manager.native_one_server() {
        return Some(
            match release_pipelined(manager, conn, (key, token), &waiting).await? {
                Ok((1, waiters)) => woken(conn, key, waiters).await,
                Ok((deleted, _)) => deleted_or_not(deleted),
                Err(e) => Err(e),
            },
        );
    }
    // No wake-up is lost: a blocked acquirer sets the waiter flag *before* its last attempt
    // and only then blocks. The `EXISTS` runs after the `DELIFEQ` (in one transaction): when
    // it finds no flag, the acquirer's attempt comes after the delete and finds the lock free;
    // when it finds one, the wake-up below is pushed. A transaction, not a bare pipeline: on
    // a Cluster redirect it ran whole or not at all, so a resend cannot answer `NotOwner` for
    // a key the first send deleted.
    let mut tx = redis::pipe();
    tx.atomic()
        .cmd("DELIFEQ")
        .arg(key)
        .arg(token)
        .cmd("EXISTS")
        .arg(&waiting);
    let replies = match tx.query_async::<(i64, i64)>(conn).await {
        Ok(replies) => replies,
        Err(e) => {
            let e = first_error(e);
            if manager.native_falls_back(Native::DelIfEq, &e) {
                return None;
            }
            return Some(Err(typed(RELEASE, e)));
        }
    };
    if replies.0 == 1 {
        return Some(woken(conn, key, Ok(replies.1 == 1)).await);
    }
    Some(deleted_or_not(replies.0))
}

/// The answer of a release whose `DELIFEQ` deleted the key: `Released`, after the wake-up
/// when the flag read found a waiter (`Ok(true)`) or could not be read (`Err`: a waiter is
/// not ruled out, and the wake-up is reported as failed).
async fn woken<C: ConnectionLike>(
    conn: &mut C,
    key: &str,
    waiters: std::result::Result<bool, RedisError>,
) -> Result<Release> {
    // Released: the key is gone, whatever the wake-up meets. A wake-up that fails (its list
    // overwritten by another type, its commands refused by the ACL, the flag unreadable) is
    // reported on its own; the blocked acquirer then finds the lock free at its next poll.
    // The wake-up is boxed: only a release with a waiter runs it.
    let failed = match waiters {
        Ok(false) => None,
        Ok(true) => Box::pin(wake(conn, key)).await.err(),
        Err(e) => Some(typed(RELEASE, e)),
    };
    if let Some(e) = failed {
        metrics::lock_operation(LockKind::Lock, LockOp::Wake, LockOutcome::Error);
        tracing::warn!(
            key,
            error = %e,
            "lock released, but its wake-up could not be pushed: a blocked acquirer \
             takes the lock at its next poll"
        );
    }
    Ok(Release::Released)
}

/// On one server (no Cluster: nothing redirects a command), `DELIFEQ key token` and `EXISTS
/// <waiter flag>` as a plain pipeline: one round trip without `MULTI` / `EXEC` (in the bench
/// the transaction's two more commands and replies cost more than the release itself). No
/// wake-up is lost without the transaction: one connection's commands run in order, so the
/// `EXISTS` reads the flag after the delete, as in the transaction (a flag set between the
/// two only adds a stale wake-up, which makes a waiter try once more). Each reply is read on
/// its own: what `DELIFEQ` answered, and the flag or the error of its read. `None`:
/// `DELIFEQ` did not run (not offered, refused by the ACL): run the script.
async fn release_pipelined<C: ConnectionLike>(
    manager: &ScriptManager,
    conn: &mut C,
    (key, token): (&str, &str),
    waiting: &str,
) -> Option<Result<(i64, std::result::Result<bool, RedisError>)>> {
    let mut pipe = redis::pipe();
    pipe.cmd("DELIFEQ")
        .arg(key)
        .arg(token)
        .cmd("EXISTS")
        .arg(waiting)
        .ignore_errors();
    let replies = match pipe.query_async::<Vec<redis::RedisResult<i64>>>(conn).await {
        Ok(replies) => replies,
        Err(e) => return Some(Err(typed(RELEASE, e))),
    };
    let mut replies = replies.into_iter();
    let (Some(deleted), Some(waiters)) = (replies.next(), replies.next()) else {
        return Some(Err(Error::unexpected(
            RELEASE,
            "DELIFEQ + EXISTS: missing replies",
        )));
    };
    match deleted {
        Err(e) if manager.native_falls_back(Native::DelIfEq, &e) => None,
        Err(e) => Some(Err(typed(RELEASE, e))),
        Ok(deleted) => Some(Ok((deleted, waiters.map(|n| n == 1)))),
    }
}

/// What `DELIFEQ` answered: 1 deleted, 0 not the owner.
fn deleted_or_not(deleted: i64) -> Result<Release> {
    match deleted {
        1 => Ok(Release::Released),
        0 => Ok(Release::NotOwner),
        other => Err(Error::unexpected(
            RELEASE,
            format!("DELIFEQ answered {other}, neither 0 nor 1"),
        )),
    }
}

/// Pushes one wake-up to the wake-up list of `key`, as the release script does: refused
/// (`WRONGTYPE`, nothing written) when the list key holds something else.
async fn wake<C: ConnectionLike>(conn: &mut C, key: &str) -> Result<()> {
    let wake = schema::wake(key);
    let kind: String = redis::cmd("TYPE")
        .arg(&wake)
        .query_async(conn)
        .await
        .map_err(|e| typed(RELEASE, e))?;
    if kind != "list" && kind != "none" {
        return Err(Error::WrongType {
            script: RELEASE.to_owned(),
        });
    }
    let mut tx = redis::pipe();
    tx.atomic()
        .cmd("LPUSH")
        .arg(&wake)
        .arg(1)
        .ignore()
        .cmd("LTRIM")
        .arg(&wake)
        .arg(0)
        .arg(0)
        .ignore()
        .cmd("PEXPIRE")
        .arg(&wake)
        .arg(60_000)
        .ignore();
    tx.query_async::<()>(conn)
        .await
        .map_err(|e| typed(RELEASE, first_error(e)))
}

/// The renewal of the lease of `key` held with `token` to `ttl` by `SET ... IFEQ ... PX`,
/// followed by `WAIT` for `wait` in the same round trip when given (after the same check of
/// the wait as a script call). The outcome and what the wait answered (`None`: not sent);
/// `None` when the server does not offer `SET ... IFEQ` (or no longer does): run the script.
pub(crate) async fn renew<C: ConnectionLike>(
    manager: &ScriptManager,
    conn: &mut C,
    key: &str,
    token: &str,
    ttl: Duration,
    wait: Option<Replication>,
) -> Option<Result<(Renew, Option<Acked<()>>)>> {
    if !manager.native_usable(conn, Native::SetIfEq).await {
        return None;
    }
    if let Some(r) = &wait {
        if let Err(e) = manager.check_wait(conn, r).await {
            return Some(Err(e));
        }
    }
    let mut set = redis::cmd("SET");
    // The ttl was validated at acquire: at most 30 days of ms.
    set.arg(key)
        .arg(token)
        .arg("IFEQ")
        .arg(token)
        .arg("PX")
        .arg(ms(ttl));
    let sent = match wait {
        None => set
            .query_async::<Value>(conn)
            .await
            .map(|reply| (reply, None)),
        Some(r) => match r.pipeline(set).query_async::<Vec<Value>>(conn).await {
            Ok(replies) => match r.split_replies(replies) {
                Some((Value::ServerError(e), _)) => Err(RedisError::from(e)),
                Some((reply, ack)) => Ok((reply, Some(r.acked((), &ack)))),
                None => return Some(Err(Error::unexpected(RENEW, "SET + WAIT: missing replies"))),
            },
            Err(e) => Err(e),
        },
    };
    let (reply, ack) = match sent {
        Ok(sent) => sent,
        Err(e) => {
            if manager.native_falls_back(Native::SetIfEq, &e) {
                return None;
            }
            return Some(Err(typed(RENEW, e)));
        }
    };
    Some(match reply {
        Value::Okay => Ok((Renew::Renewed, ack)),
        Value::Nil => Ok((Renew::Lost, ack)),
        other => Err(Error::unexpected(
            RENEW,
            format!("SET IFEQ answered {other:?}, neither OK nor nil"),
        )),
    })
}

/// The server's own error inside `err`: the first command's of a failed pipeline, or of a
/// transaction that aborted (`EXECABORT`: a command was refused when queued, nothing ran),
/// else `err`.
fn first_error(err: RedisError) -> RedisError {
    match err.clone().into_server_errors() {
        Some(errors) => errors
            .first()
            .map_or(err, |(_, first)| RedisError::from(first.clone())),
        None => err,
    }
}

/// The typed error of a plain command's refusal, as the script path types its own.
pub(in crate::lock) fn typed(what: &str, err: RedisError) -> Error {
    match err.code() {
        Some("WRONGTYPE") => Error::WrongType {
            script: what.to_owned(),
        },
        Some("NOPERM") => Error::PermissionDenied {
            script: what.to_owned(),
            detail: err.detail().unwrap_or_default().to_owned(),
        },
        _ => Error::Redis(err),
    }
}
