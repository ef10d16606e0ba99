//! What every acquire checks once the server granted a hold: validity left after the round
//! trip, and the replicas [`LockOptions::require_replicas`] asks for. One place for the
//! rule, so every primitive gives a hold back for the same reasons ([`settle`]).

use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;

use crate::error::{Error, Result};
use crate::lock::lease::guard::LockGuard;
use crate::lock::lease::kind::Base;
use crate::lock::lease::wait::{Attempts, Step};
use crate::lock::lease::{self, LeaseGuard, LeaseKind};
use crate::lock::metrics::LockKind;
use crate::lock::options::Settings;
use crate::lock::outcome::{Acquire, Held};
use crate::script::{Acked, Call, Replication};

/// The attempts of a kind whose script answers `[1, fence, …]` (`granted` values) for a
/// hold and `[0, ms]` while held elsewhere ([`RwLock`](crate::lock::RwLock),
/// [`ReentrantLock`](crate::lock::ReentrantLock)): every attempt sends the same `call`.
pub(in crate::lock) struct Granting<'a, K> {
    pub(in crate::lock) kind: &'a K,
    pub(in crate::lock) base: &'a Base,
    pub(in crate::lock) call: Call<'a>,
    pub(in crate::lock) key: &'a str,
    pub(in crate::lock) token: &'a str,
    pub(in crate::lock) ttl_ms: u64,
    pub(in crate::lock) options: &'a Settings,
    pub(in crate::lock) replication: Option<Replication>,
    /// The length of a granted reply, and the replies expected (for the error).
    pub(in crate::lock) granted: (usize, &'static str),
}

impl<K: LeaseKind<Extra = ()>, C: ConnectionLike> Attempts<C> for Granting<'_, K> {
    type Guard = LockGuard<K>;
    type Held = Held;

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
