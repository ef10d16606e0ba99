//! What every acquire checks once the server granted a hold: validity left after the round
//! trip, and the replicas [`LockOptions::require_replicas`] asks for. One place for the
//! rule, so every primitive gives a hold back for the same reasons ([`settle`]).

use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use redis::FromRedisValue;

use crate::error::{Error, Result};
use crate::lock::lease::guard::LockGuard;
use crate::lock::lease::wait::{Attempts, Step};
use crate::lock::lease::{self, LeaseGuard, LeaseKind};
use crate::lock::metrics::LockKind;
use crate::lock::options::{LockOptions, Settings};
use crate::lock::outcome::{Acquire, Held};
use crate::script::{Acked, Call, Replication, Script};

/// One acquire's request and what a grant makes of it: every attempt sends the same `call`
/// (with the `WAIT` the options require), and a grant with a fencing token becomes a
/// [`LockGuard`] on `key` for `token`, checked by [`settle`]. Shared by the kinds whose
/// scripts answer `[1, fence, …]` for a hold ([`Granting`]) and by the
/// [`FairLock`](crate::lock::FairLock)'s turns, which read their busy answers differently.
pub(in crate::lock) struct Grant<'a, K> {
    pub(in crate::lock) kind: &'a K,
    call: Call<'a>,
    pub(in crate::lock) key: &'a str,
    pub(in crate::lock) token: &'a str,
    ttl_ms: u64,
    options: &'a Settings,
    replication: Option<Replication>,
}

impl<'a, K: LeaseKind<Extra = ()>> Grant<'a, K> {
    /// The request `call` of an acquire by `kind` of `key` for `token`, a lease of `ttl_ms`
    /// (validated), with `options`.
    pub(in crate::lock) fn new(
        kind: &'a K,
        call: Call<'a>,
        (key, token): (&'a str, &'a str),
        ttl_ms: u64,
        options: &'a LockOptions<K>,
    ) -> Self {
        Self {
            kind,
            call,
            key,
            token,
            ttl_ms,
            options: options.settings(),
            replication: options.get_replication(),
        }
    }

    /// The script the request runs.
    pub(in crate::lock) fn script(&self) -> &'a Script {
        self.call.script()
    }

    /// Sends the request once: its reply, when it was sent, and what the `WAIT` answered
    /// (`None`: not sent).
    pub(in crate::lock) async fn send<T: FromRedisValue, C: ConnectionLike>(
        &self,
        conn: &mut C,
    ) -> Result<(T, Instant, Option<Acked<()>>)> {
        self.kind
            .base()
            .attempt(conn, &self.call, self.replication)
            .await
    }

    /// The answer to a hold granted with `fence` to the request sent at `started`, whose
    /// `WAIT` answered `replicas`: the guard, or the hold given back and why ([`settle`]).
    pub(in crate::lock) async fn granted<C: ConnectionLike>(
        &self,
        conn: &mut C,
        fence: i64,
        started: Instant,
        replicas: Option<&Acked<()>>,
    ) -> Result<Acquire<LockGuard<K>>> {
        let (key, token) = (self.key.to_owned(), self.token.to_owned());
        let (ttl_ms, options) = (self.ttl_ms, self.options);
        let guard = LockGuard::granted(self.script(), key, token, fence, ttl_ms, options, started)?;
        settle(self.kind, conn, guard, started, options, replicas).await
    }
}

/// The attempts of a kind whose script answers `[1, fence, …]` (`granted` values) for a
/// hold and `[0, ms]` while held elsewhere ([`RwLock`](crate::lock::RwLock),
/// [`ReentrantLock`](crate::lock::ReentrantLock)).
pub(in crate::lock) struct Granting<'a, K> {
    pub(in crate::lock) grant: Grant<'a, K>,
    /// The length of a granted reply, and the replies expected (for the error).
    pub(in crate::lock) granted: (usize, &'static str),
}

impl<K: LeaseKind<Extra = ()>, C: ConnectionLike> Attempts<C> for Granting<'_, K> {
    type Guard = LockGuard<K>;
    type Held = Held;

    const KIND: LockKind = K::KIND;

    async fn attempt(&mut self, conn: &mut C) -> Result<Step<LockGuard<K>>> {
        let (reply, started, replicas): (Vec<i64>, _, _) = self.grant.send(conn).await?;
        let (granted, expected) = self.granted;
        match Reply::read(&reply, granted) {
            Some(Reply::Granted(fence)) => {
                let answer = self.grant.granted(conn, fence, started, replicas.as_ref());
                // Not confirmed by the replicas: given back, tried again while retries allow.
                Ok(Step::unless_acquired(answer.await?))
            }
            Some(Reply::Busy(ms)) => Ok(Step::Again(Acquire::Busy(Held::until_ms(ms)))),
            None => Err(Error::unexpected(
                self.grant.script().id(),
                format!("reply {reply:?} is neither {expected} nor [0, ms]"),
            )),
        }
    }
}

/// What a [`Granting`] kind's script answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reply {
    /// `[1, fence, …]`: held, with this fencing token.
    Granted(i64),
    /// `[0, ms]`: held elsewhere, for `ms` more (negative: no TTL).
    Busy(i64),
}

impl Reply {
    /// `reply` read for a kind whose granted replies have `granted` values; `None` for any
    /// other shape (a script that is not the kind's).
    fn read(reply: &[i64], granted: usize) -> Option<Self> {
        match reply {
            [1, fence, ..] if reply.len() == granted => Some(Self::Granted(*fence)),
            [0, ms] => Some(Self::Busy(*ms)),
            _ => None,
        }
    }
}

/// The answer to a hold granted by `kind` to a request sent at `started`:
/// [`Acquire::Acquired`] with `guard`, or, when [`Refused::check`] refuses the hold, the
/// guard given back at once and the refusal's answer. What every kind's acquire does with a
/// grant.
pub(in crate::lock) async fn settle<G: LeaseGuard, H, C: ConnectionLike>(
    kind: &G::Kind,
    conn: &mut C,
    guard: G,
    started: Instant,
    options: &Settings,
    replicas: Option<&Acked<()>>,
) -> Result<Acquire<G, H>> {
    let held = guard.held();
    let valid = !held.remaining().is_zero();
    let Some(refused) = Refused::check(&held.key, valid, started, options, replicas) else {
        return Ok(Acquire::Acquired(guard));
    };
    // Boxed: the future of an acquire stays small on its usual path.
    Box::pin(lease::release(kind, conn, held, guard.extra())).await?;
    refused.acquire()
}

/// Why a granted hold must be given back at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::lock) enum Refused {
    /// The acquire took the whole lease (elapsed since the request was sent).
    Timeout(Duration),
    /// Fewer replicas than required acknowledged the grant.
    NotReplicated { replicas: u32, requested: u32 },
}

impl Refused {
    /// The check of a hold on `key` granted to a request sent at `started`: `valid` is the
    /// guard's local validity, `replicas` what the wait answered (`None`: not sent).
    pub(in crate::lock) fn check(
        key: &str,
        valid: bool,
        started: Instant,
        options: &Settings,
        replicas: Option<&Acked<()>>,
    ) -> Option<Self> {
        if !valid {
            let elapsed = started.elapsed();
            tracing::warn!(key, ?elapsed, "acquire took the whole lease: releasing");
            return Some(Self::Timeout(elapsed));
        }
        let (replicas, requested) = options.replication_shortfall(replicas)?;
        tracing::warn!(
            key,
            replicas,
            requested,
            "acquire not replicated: releasing"
        );
        Some(Self::NotReplicated {
            replicas,
            requested,
        })
    }

    /// The answer of an acquire whose hold was given back for this reason.
    pub(in crate::lock) fn acquire<G, H>(self) -> Result<Acquire<G, H>> {
        match self {
            Self::Timeout(elapsed) => Err(Error::Timeout(elapsed)),
            Self::NotReplicated {
                replicas,
                requested,
            } => Ok(Acquire::NotReplicated {
                replicas,
                requested,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Reply;

    #[test]
    fn a_reply_is_granted_only_with_the_kinds_length_and_busy_only_as_0_ms() {
        assert_eq!(Reply::read(&[1, 7], 2), Some(Reply::Granted(7)));
        assert_eq!(Reply::read(&[1, 7, 2], 3), Some(Reply::Granted(7)));
        assert_eq!(Reply::read(&[0, 250], 2), Some(Reply::Busy(250)));
        assert_eq!(Reply::read(&[0, -1], 3), Some(Reply::Busy(-1)));
        // A granted reply longer or shorter than the kind's, or of another shape.
        assert_eq!(Reply::read(&[1, 7, 2], 2), None);
        assert_eq!(Reply::read(&[1, 7], 3), None);
        assert_eq!(Reply::read(&[1], 1), None);
        assert_eq!(Reply::read(&[2, 7], 2), None);
        assert_eq!(Reply::read(&[0, 5, 1], 3), None);
        assert_eq!(Reply::read(&[], 2), None);
    }
}
