//! Release, renewal and the waiter's mark of a plain, unfenced [`Lock`](crate::lock::Lock) lease
//! with the server's own commands instead of scripts, where the server offers them
//! ([`Capabilities`](crate::script::Capabilities), probed once per manager):
//!
//! - release: `DELIFEQ key token`: one command when nobody waits. When it deletes nothing,
//!   `DELIFEQ key <token + 0xFF>`: the hold a blocked acquirer marked (see `lock_mark`), and
//!   only when that deletes it, the wake-up the release script pushes (`TYPE` of the list,
//!   then `MULTI`, `LPUSH wake 1`, `LTRIM wake 0 0`, `PEXPIRE wake 60000`, `EXEC`: the same
//!   list, one entry, 60 s); when it deletes nothing either, the lease was lost: `NotOwner`.
//! - renewal: `SET key token IFEQ token PX ttl`, with `WAIT` behind it in the same pipeline
//!   when the lease requires replicas (as the script path sends it); when it renews nothing,
//!   the same for the marked token (the mark kept); when that renews nothing either, `Lost`.
//! - mark: `GET key`, then `SET key <holder + 0xFF> IFEQ <holder> KEEPTTL` and `PTTL key` in
//!   one pipeline: the hold read is the hold marked (another one in between fails the
//!   `IFEQ`, and the mark reads again).
//!
//! Each answers what the script would: [`Release::Released`] / [`Release::NotOwner`],
//! [`Renew::Renewed`] / [`Renew::Lost`], the hold's PTTL, `WRONGTYPE` as
//! [`Error::WrongType`]. A native command answered "unknown command", "syntax error" or
//! `NOPERM` did not run: `None`, and the caller runs its script (see
//! [`ScriptManager::capabilities`]). A fenced lease never comes here: its renewal also keeps
//! the fence key alive, which only its script does. An unfenced lease does not need that:
//! a fencing token is never below the server clock in µs, whether or not the fence key lives.
//! So a plain lock sends no script on Valkey 9, with or without waiters.
//!
//! Two differences with the scripts, both outside a lock's contract: the wake-up is a step
//! after the delete, so a release whose wake-up list was overwritten by something else than a
//! list (`WRONGTYPE`), or whose wake-up commands the ACL refuses, has deleted the lock key
//! when the wake-up fails: it answers [`Release::Released`] (what the key holds), writes
//! nothing to the wake-up list, and reports the failed wake-up on its own (a `WARN` event, and
//! `redkit.lock.operations` with operation `wake` and outcome `error`); the blocked acquirer
//! finds the lock free when its block ends (at the marked lease's end). The script refuses
//! before deleting: an error there means the key is still held. Either way the answer
//! matches what the key holds. And a renewal rewrites the key with the same value where the
//! script sends `PEXPIRE` (keyspace notifications differ).

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
/// What the errors of a native mark name.
const MARK: &str = "lock mark (SET IFEQ KEEPTTL)";
/// How often a native mark reads the hold again when it changed under it, before it lets
/// the waiter attempt again instead (safe: an attempt never loses a wake-up).
const MARK_TRIES: usize = 4;

/// `token` followed by the waiter's mark, the byte 0xFF (`lock_mark`; text never holds it).
fn marked(token: &[u8]) -> Vec<u8> {
    let mut value = Vec::with_capacity(token.len() + 1);
    value.extend_from_slice(token);
    value.push(schema::MARK);
    value
}

/// The release of the lease of `key` held with `token` by `DELIFEQ` (the marked token too,
/// then the wake-up, when the token alone deleted nothing); `None` when the server does not
/// offer `DELIFEQ` (or no longer does): run the script.
pub(crate) async fn release<C: ConnectionLike>(
    manager: &ScriptManager,
    conn: &mut C,
    (key, token): (&str, &str),
) -> Option<Result<Release>> {
    if !manager.native_usable(conn, Native::DelIfEq).await {
        return None;
    }
    match delifeq(conn, key, token.as_bytes()).await {
        Err(e) if manager.native_falls_back(Native::DelIfEq, &e) => None,
        Err(e) => Some(Err(typed(RELEASE, e))),
        Ok(1) => Some(Ok(Release::Released)),
        // Boxed: only a release with a waiter (or of a lost lease) takes this path.
        Ok(0) => Some(Box::pin(release_marked(conn, key, token)).await),
        Ok(other) => Some(Err(unexpected_delifeq(other))),
    }
}

/// The second step of a release whose token deleted nothing: the marked token, and the
/// wake-up when that deleted the key.
async fn release_marked<C: ConnectionLike>(
    conn: &mut C,
    key: &str,
    token: &str,
) -> Result<Release> {
    match delifeq(conn, key, &marked(token.as_bytes())).await {
        Err(e) => Err(typed(RELEASE, e)),
        Ok(0) => Ok(Release::NotOwner),
        Ok(1) => Ok(woken(conn, key).await),
        Ok(other) => Err(unexpected_delifeq(other)),
    }
}

/// `DELIFEQ key value`: 1 deleted, 0 not.
async fn delifeq<C: ConnectionLike>(
    conn: &mut C,
    key: &str,
    value: &[u8],
) -> std::result::Result<i64, RedisError> {
    redis::cmd("DELIFEQ")
        .arg(key)
        .arg(value)
        .query_async::<i64>(conn)
        .await
}

fn unexpected_delifeq(answer: i64) -> Error {
    Error::unexpected(
        RELEASE,
        format!("DELIFEQ answered {answer}, neither 0 nor 1"),
    )
}

/// A release that deleted a marked hold: `Released`, after the wake-up. A wake-up that fails
/// (its list overwritten by another type, its commands refused by the ACL) is reported on its
/// own; the blocked acquirer then finds the lock free when its block ends.
async fn woken<C: ConnectionLike>(conn: &mut C, key: &str) -> Release {
    if let Err(e) = wake(conn, key).await {
        metrics::lock_operation(LockKind::Lock, LockOp::Wake, LockOutcome::Error);
        tracing::warn!(
            key,
            error = %e,
            "lock released, but its wake-up could not be pushed: a blocked acquirer \
             takes the lock when its block ends"
        );
    }
    Release::Released
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

/// The renewal of the lease of `key` held with `token` to `ttl` by `SET ... IFEQ ... PX` (the
/// marked token too, when the token alone renewed nothing), followed by `WAIT` for `wait` in
/// the same round trip when given (after the same check of the wait as a script call). The
/// outcome and what the wait answered (`None`: not sent); `None` when the server does not
/// offer `SET ... IFEQ` (or no longer does): run the script.
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
    match set_ifeq(manager, conn, key, token.as_bytes(), ttl, wait).await? {
        // Boxed: only the renewal of a marked hold (or of a lost lease) takes this path.
        Ok((Renew::Lost, _)) => {
            Box::pin(set_ifeq(
                manager,
                conn,
                key,
                &marked(token.as_bytes()),
                ttl,
                wait,
            ))
            .await
        }
        renewed => Some(renewed),
    }
}

/// `SET key value IFEQ value PX ttl` (and `WAIT`): `Renewed` / `Lost` and the wait's answer.
async fn set_ifeq<C: ConnectionLike>(
    manager: &ScriptManager,
    conn: &mut C,
    key: &str,
    value: &[u8],
    ttl: Duration,
    wait: Option<Replication>,
) -> Option<Result<(Renew, Option<Acked<()>>)>> {
    let mut set = redis::cmd("SET");
    // The ttl was validated at acquire: at most 30 days of ms.
    set.arg(key)
        .arg(value)
        .arg("IFEQ")
        .arg(value)
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

/// Marks the hold of lock key `key` as waited for, as `lock_mark` does: the hold's PTTL in ms
/// ([`schema::FREE`]: free, nothing written; -1: no TTL); a value already marked, or of another length than
/// an owner token's, is left as it is. `None` when the server does not offer `SET ... IFEQ`
/// (or no longer does): run the script.
pub(crate) async fn mark<C: ConnectionLike>(
    manager: &ScriptManager,
    conn: &mut C,
    key: &str,
) -> Option<Result<i64>> {
    if !manager.native_usable(conn, Native::SetIfEq).await {
        return None;
    }
    for _ in 0..MARK_TRIES {
        let holder = redis::cmd("GET")
            .arg(key)
            .query_async::<Option<Vec<u8>>>(conn)
            .await;
        let holder = match holder {
            Ok(Some(holder)) => holder,
            Ok(None) => return Some(Ok(schema::FREE)),
            Err(e) => return Some(Err(typed(MARK, e))),
        };
        if !(16..=128).contains(&holder.len()) || holder.last() == Some(&schema::MARK) {
            let pttl = redis::cmd("PTTL").arg(key).query_async::<i64>(conn).await;
            return Some(pttl.map_err(|e| typed(MARK, e)));
        }
        let mut pipe = redis::pipe();
        pipe.cmd("SET")
            .arg(key)
            .arg(marked(&holder))
            .arg("IFEQ")
            .arg(&holder)
            .arg("KEEPTTL")
            .cmd("PTTL")
            .arg(key);
        match pipe.query_async::<(Value, i64)>(conn).await {
            Ok((Value::Okay, pttl)) => return Some(Ok(pttl)),
            // Another hold since the read: read again.
            Ok((Value::Nil, _)) => {}
            Ok((other, _)) => {
                return Some(Err(Error::unexpected(
                    MARK,
                    format!("SET IFEQ answered {other:?}, neither OK nor nil"),
                )))
            }
            Err(e) => {
                let e = first_error(e);
                if manager.native_falls_back(Native::SetIfEq, &e) {
                    return None;
                }
                return Some(Err(typed(MARK, e)));
            }
        }
    }
    // The hold kept changing: attempt again at once (an attempt never loses a wake-up).
    Some(Ok(schema::FREE))
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
