//! What every acquire checks once the server granted a hold: validity left after the round
//! trip, and the replicas [`LockOptions::require_replicas`] asks for. One place for the
//! rule, so every primitive gives a hold back for the same reasons.

use std::time::{Duration, Instant};

use super::options::Settings;
use super::outcome::Acquire;
use crate::error::{Error, Result};
use crate::script::Acked;

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
