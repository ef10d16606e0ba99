//! What every acquire checks once the server granted a hold: validity left after the round
//! trip, and the replicas [`LockOptions::require_replicas`] asks for. One place for the
//! rule, so every primitive gives a hold back for the same reasons ([`settle`]).

use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;

use super::guard::LockGuard;
use super::kind::Base;
use super::lease::{self, LeaseGuard, LeaseKind};
use super::options::Settings;
use super::outcome::{Acquire, Held};
use super::wait::{Attempts, Step};
use crate::error::{Error, Result};
use crate::script::{Acked, Call, Replication};
use crate::telemetry::metric::LockKind;

/// The attempts of a kind whose script answers `[1, fence, …]` (`granted` values) for a
/// hold and `[0, ms]` while held elsewhere ([`RwLock`](super::RwLock),
/// [`ReentrantLock`](super::ReentrantLock)): every attempt sends the same `call`.
pub(super) struct Granting<'a, K> {
    pub(super) kind: &'a K,
    pub(super) base: &'a Base,
    pub(super) call: Call<'a>,
    pub(super) key: &'a str,
    pub(super) token: &'a str,
    pub(super) ttl_ms: u64,
    pub(super) options: &'a Settings,
    pub(super) replication: Option<Replication>,
    /// The length of a granted reply, and the replies expected (for the error).
    pub(super) granted: (usize, &'static str),
}

impl<K: LeaseKind<Extra = ()>, C: ConnectionLike> Attempts<C> for Granting<'_, K> {
    type Guard = LockGuard<K>;

    const KIND: LockKind = K::KIND;

    async fn attempt(&mut self, conn: &mut C) -> Result<Step<LockGuard<K>>> {
        let (reply, started, replicas): (Vec<i64>, _, _) = self
            .base
            .attempt(conn, &self.call, self.replication)
            .await?;
        let script = self.call.script();
        let (granted, expected) = self.granted;
        match reply.as_slice() {
            [1, fence, ..] if reply.len() == granted => {
                let (key, token) = (self.key.to_owned(), self.token.to_owned());
                let (ttl_ms, options) = (self.ttl_ms, self.options);
                let guard =
                    LockGuard::granted(script, key, token, *fence, ttl_ms, options, started)?;
                let answer = settle(self.kind, conn, guard, started, options, replicas.as_ref());
                // Not confirmed by the replicas: given back, tried again while retries allow.
                Ok(Step::unless_acquired(answer.await?))
            }
            [0, ms] => Ok(Step::Again(Acquire::Busy(Held::until_ms(*ms)))),
            other => Err(Error::unexpected(
                script.id(),
                format!("reply {other:?} is neither {expected} nor [0, ms]"),
            )),
        }
    }
}

/// The answer to a hold granted by `kind` to a request sent at `started`:
/// [`Acquire::Acquired`] with `guard`, or, when [`Refused::check`] refuses the hold, the
/// guard given back at once and the refusal's answer. What every kind's acquire does with a
/// grant.
pub(super) async fn settle<G: LeaseGuard, C: ConnectionLike>(
    kind: &G::Kind,
    conn: &mut C,
    guard: G,
    started: Instant,
    options: &Settings,
    replicas: Option<&Acked<()>>,
) -> Result<Acquire<G>> {
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
pub(super) enum Refused {
    /// The acquire took the whole lease (elapsed since the request was sent).
    Timeout(Duration),
    /// Fewer replicas than required acknowledged the grant.
    NotReplicated { replicas: u32, requested: u32 },
}

impl Refused {
    /// The check of a hold on `key` granted to a request sent at `started`: `valid` is the
    /// guard's local validity, `replicas` what the wait answered (`None`: not sent).
    pub(super) fn check(
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
    pub(super) fn acquire<G>(self) -> Result<Acquire<G>> {
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
