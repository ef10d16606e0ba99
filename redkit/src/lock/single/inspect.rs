//! Looking at a [`Lock`] from outside (who holds it, for how long, the last fencing token,
//! whether someone waits) and freeing a stuck one: an operator's tools, diagnostic by nature.

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::Value;

use super::Lock;
use crate::error::{Error, Result};
use crate::lock::lease::schema;
use crate::lock::repair;
use crate::lock::single::wake_release_call;
use crate::lock::FencingToken;
use crate::script::{embedded, script_error, Call, Script};

/// What a lock's keys hold at one instant ([`Lock::inspect`]). A diagnostic: a holder may
/// release, expire or be replaced right after it was read; never decide ownership with it.
///
/// ```no_run
/// # async fn run(lock: redkit::lock::Lock, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
/// let state = lock.inspect(&mut conn, "nightly-export").await?;
/// match &state.holder {
///     Some(h) => println!("held by {} for {:?} more", h.token, h.ttl),
///     None => println!("free"),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockState {
    /// The current holder, `None` when the lock is free.
    pub holder: Option<Holder>,
    /// The last fencing token issued for the resource (kept after a release, so the next
    /// holder's is higher), `None` when none was issued or its key expired.
    pub last_fencing_token: Option<FencingToken>,
    /// Whether an acquirer blocked in [`acquire_blocking`](Lock::acquire_blocking) has marked
    /// the current hold (its release will wake it).
    pub waiters: bool,
}

/// Who holds a lock, and for how long ([`LockState::holder`]).
///
/// ```
/// # fn show(h: &redkit::lock::Holder) {
/// println!("{} ({:?} left)", h.token, h.ttl);
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The holder's owner token ([`LockOptions::token`](crate::lock::LockOptions::token),
    /// or the random one an acquire made).
    pub token: String,
    /// The lease left, `None` when the key has no TTL (written by something else).
    pub ttl: Option<Duration>,
}

/// The resources a lock has keys for ([`Lock::scan_resources`]).
///
/// ```
/// # fn show(found: redkit::lock::ResourceScan) {
/// for resource in &found.resources { println!("{resource}"); }
/// # }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResourceScan {
    /// The resources held when the scan passed their key, as the application names them.
    pub resources: Vec<String>,
    /// Whether the scan stopped at the cap before visiting every key.
    pub truncated: bool,
    /// Keys matching the pattern that do not read back as a resource: left out.
    pub skipped: usize,
}

/// Whose hold [`Lock::force_release`] may end.
///
/// ```
/// use redkit::lock::ExpectedHolder;
/// let only = ExpectedHolder::Token("worker-7:0f3a9c2e61d84b57");
/// let any = ExpectedHolder::Any;
/// # let _ = (only, any);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpectedHolder<'a> {
    /// Only the hold of this owner token (what [`Lock::inspect`] showed): if another took
    /// the lock since, nothing is released.
    Token(&'a str),
    /// Whoever holds it when the call reads it (said explicitly: the riskier choice).
    Any,
}

/// What [`Lock::force_release`] did.
///
/// ```no_run
/// # async fn run(lock: redkit::lock::Lock, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
/// use redkit::lock::{ExpectedHolder, ForceRelease};
/// match lock.force_release(&mut conn, "nightly-export", ExpectedHolder::Any).await? {
///     ForceRelease::Released { token } => println!("released {token}'s hold"),
///     ForceRelease::NotHeld => println!("it was free"),
///     ForceRelease::Changed { holder } => println!("the state changed: now {holder:?}"),
///     _ => {}
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ForceRelease {
    /// The hold of `token` was deleted (and a blocked acquirer woken); the fence key stays,
    /// so the next holder's fencing token is higher than the evicted one's.
    Released {
        /// The evicted holder's owner token.
        token: String,
    },
    /// The lock was free: nothing was done.
    NotHeld,
    /// Someone else holds it than expected (or took it between the read and the release):
    /// nothing was done.
    Changed {
        /// The holder read after the attempt (`None`: it is free now).
        holder: Option<Holder>,
    },
}

impl Lock {
    /// Reads what `resource`'s keys hold: the holder's owner token and lease left, the last
    /// fencing token issued, and whether an acquirer is blocked. One read-only script call
    /// (`EVALSHA_RO` / `FCALL_RO`: a replica may serve it); it writes nothing. A diagnostic:
    /// see [`LockState`].
    ///
    /// Errors: [`Error::InvalidInput`] for a bad resource (nothing sent),
    /// [`Error::WrongType`] / [`Error::CorruptData`] when the keys hold something a lock
    /// does not write, [`Error::PermissionDenied`], and connection errors.
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// let lock = redkit::lock::Lock::new();
    /// let state = lock.inspect(&mut conn, "invoice-17").await?;
    /// if state.waiters {
    ///     println!("someone is waiting for invoice-17");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn inspect<C: ConnectionLike>(
        &self,
        conn: &mut C,
        resource: &str,
    ) -> Result<LockState> {
        let call = inspect_call(&self.key(resource)?);
        let reply = self.manager().invoke(conn, &call).await?;
        decode(embedded::LOCK_INSPECT.script(), reply)
    }

    /// The resources this lock holds now (their lock keys exist), found by `SCAN MATCH
    /// <prefix>:{*}` on every primary ([`ScanKeys`](crate::connect::ScanKeys)), visiting
    /// at most `cap` keys; nothing written. A diagnostic: locks come and go while it runs.
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// let lock = redkit::lock::Lock::new();
    /// let found = lock.scan_resources(&mut conn, redkit::nonzero!(1_000)).await?;
    /// for resource in &found.resources {
    ///     println!("{resource}: {:?}", lock.inspect(&mut conn, resource).await?.holder);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn scan_resources<S: crate::connect::ScanKeys>(
        &self,
        conn: &mut S,
        cap: std::num::NonZeroU32,
    ) -> Result<ResourceScan> {
        let head = format!("{}:{{", self.prefix());
        let pattern = format!("{head}*}}");
        let string = Some(crate::connect::KeyType::String);
        let found = conn.scan_keys(&pattern, string, cap).await?;
        let mut out = ResourceScan {
            truncated: found.truncated,
            ..ResourceScan::default()
        };
        for key in &found.keys {
            let resource = key
                .strip_prefix(&head)
                .and_then(|rest| rest.strip_suffix('}'))
                .and_then(crate::keys::unescape_part);
            match resource {
                Some(r) => out.resources.push(r),
                None => out.skipped += 1,
            }
        }
        Ok(out)
    }

    /// Ends `resource`'s hold from outside, for an operator freeing a stuck lock: a
    /// compare-and-delete against `expected` ([`ExpectedHolder::Token`] as
    /// [`inspect`](Self::inspect) showed it, or [`ExpectedHolder::Any`]), with the release's
    /// own script, so a blocked acquirer is woken and the fence key stays (the next holder's
    /// fencing token is higher than the evicted one's: its fenced writes are refused once
    /// the next holder has written). The evicted holder learns it at its next renewal
    /// ([`Renew::Lost`](crate::lock::Renew::Lost); a watchdog signals the loss). Each
    /// release is written as a `WARN` trace event with the resource and the evicted token.
    ///
    /// Errors: as [`inspect`](Self::inspect) and [`release`](Self::release).
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use redkit::lock::{ExpectedHolder, ForceRelease, Lock};
    /// let lock = Lock::new();
    /// let state = lock.inspect(&mut conn, "nightly-export").await?;
    /// if let Some(stuck) = &state.holder {
    ///     let done = lock.force_release(&mut conn, "nightly-export", ExpectedHolder::Token(&stuck.token)).await?;
    ///     assert!(matches!(done, ForceRelease::Released { .. } | ForceRelease::Changed { .. } | ForceRelease::NotHeld));
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn force_release<C: ConnectionLike>(
        &self,
        conn: &mut C,
        resource: &str,
        expected: ExpectedHolder<'_>,
    ) -> Result<ForceRelease> {
        let key = self.key(resource)?;
        let token = match expected {
            ExpectedHolder::Token(token) => token.to_owned(),
            ExpectedHolder::Any => match self.inspect(conn, resource).await?.holder {
                Some(holder) => holder.token,
                None => return Ok(ForceRelease::NotHeld),
            },
        };
        repair::checked_token(&token)?;
        let call = wake_release_call(&key, &token);
        let what = "force-released a lock";
        let removed = repair::remove(self.manager(), conn, &call, what, resource, &key, &token);
        if removed.await? == crate::lock::Release::Released {
            return Ok(ForceRelease::Released { token });
        }
        let now = self.inspect(conn, resource).await?.holder;
        Ok(match (now, expected) {
            (None, ExpectedHolder::Token(_)) => ForceRelease::NotHeld,
            (holder, _) => ForceRelease::Changed { holder },
        })
    }
}

/// The read-only call reading lock key `key` (its holder, and whether a blocked acquirer marked
/// it) and its fence (`lock_inspect`):
/// what [`Lock::inspect`] sends, and a Redlock's inspection on each master.
pub(crate) fn inspect_call(key: &str) -> Call<'static> {
    let mut call = Call::new(embedded::LOCK_INSPECT.script());
    call.key(key).key(schema::fence(key));
    call
}

/// Data at a lock key that no lock writes (the script wrote nothing: it only reads).
fn corrupt(script: &Script, detail: &str) -> Error {
    Error::CorruptData {
        script: script.id().to_string(),
        detail: detail.to_owned(),
    }
}

/// `{holder, pttl_ms, fence, waiting}` -> [`LockState`], without trusting its shape.
pub(crate) fn decode(script: &Script, reply: Value) -> Result<LockState> {
    let bad = |what: &str| Error::unexpected(script.id(), format!("a bad {what}"));
    let items = match reply {
        Value::Array(items) => items,
        Value::ServerError(e) => return Err(script_error(script, e.into())),
        _ => return Err(bad("reply")),
    };
    let [holder, pttl, fence, waiting] = <[Value; 4]>::try_from(items).map_err(|_| bad("reply"))?;
    let text = |v: Value, what: &'static str| -> Result<Option<String>> {
        match v {
            Value::Nil => Ok(None),
            Value::BulkString(b) => String::from_utf8(b)
                .map(Some)
                .map_err(|_| corrupt(script, &format!("{what} is not UTF-8"))),
            _ => Err(bad(what)),
        }
    };
    let Value::Int(pttl) = pttl else {
        return Err(bad("pttl"));
    };
    let holder = text(holder, "holder")?.map(|token| Holder {
        token,
        ttl: u64::try_from(pttl).ok().map(Duration::from_millis),
    });
    let last_fencing_token = repair::fence(script, fence)?;
    let waiters = match waiting {
        Value::Int(n) => n > 0,
        _ => return Err(bad("waiter mark")),
    };
    Ok(LockState {
        holder,
        last_fencing_token,
        waiters,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(items: Vec<Value>) -> Value {
        Value::Array(items)
    }

    #[test]
    fn decodes_a_held_a_free_and_a_bad_state() {
        let s = embedded::LOCK_INSPECT.script();
        let held = decode(
            s,
            reply(vec![
                Value::BulkString(b"owner-token-0123456789".to_vec()),
                Value::Int(2_500),
                Value::BulkString(b"42".to_vec()),
                Value::Int(1),
            ]),
        )
        .unwrap();
        let h = held.holder.unwrap();
        assert_eq!(
            (h.token.as_str(), h.ttl),
            ("owner-token-0123456789", Some(Duration::from_millis(2_500)))
        );
        assert_eq!(held.last_fencing_token, FencingToken::new(42));
        assert!(held.waiters);
        let free = decode(
            s,
            reply(vec![Value::Nil, Value::Int(-2), Value::Nil, Value::Int(0)]),
        )
        .unwrap();
        assert_eq!(
            (free.holder, free.last_fencing_token, free.waiters),
            (None, None, false)
        );
        let no_ttl = decode(
            s,
            reply(vec![
                Value::BulkString(b"x".to_vec()),
                Value::Int(-1),
                Value::Nil,
                Value::Int(0),
            ]),
        )
        .unwrap();
        assert_eq!(no_ttl.holder.unwrap().ttl, None);
        for bad in [
            Value::Nil,
            reply(vec![Value::Nil, Value::Int(-2), Value::Nil]),
            reply(vec![Value::Nil, Value::Nil, Value::Nil, Value::Int(0)]),
            reply(vec![
                Value::Nil,
                Value::Int(-2),
                Value::BulkString(b"0".to_vec()),
                Value::Int(0),
            ]),
            reply(vec![
                Value::Nil,
                Value::Int(-2),
                Value::BulkString(b"x".to_vec()),
                Value::Int(0),
            ]),
            reply(vec![
                Value::BulkString(vec![0xff]),
                Value::Int(1),
                Value::Nil,
                Value::Int(0),
            ]),
            reply(vec![Value::Nil, Value::Int(-2), Value::Nil, Value::Nil]),
        ] {
            assert!(decode(s, bad.clone()).is_err(), "{bad:?}");
        }
    }
}
