//! Business outcomes of lock operations: values, not errors.

use super::token::FencingToken;
use crate::error::{Error, Result};
use crate::script::Script;

/// Result of a compare-and-delete release.
///
/// ```
/// use redkit::lock::Release;
/// assert_ne!(Release::Released, Release::NotOwner);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Release {
    /// The key held our token and was deleted.
    Released,
    /// The key was gone or held another owner's token; nothing was deleted.
    NotOwner,
}

/// Result of a compare-and-PEXPIRE lease renewal.
///
/// ```
/// use redkit::lock::Renew;
/// assert_ne!(Renew::Renewed, Renew::Lost);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Renew {
    /// The key held our token; its TTL was reset to the lease length.
    Renewed,
    /// The key was gone or held another owner's token: the lease is lost.
    Lost,
}

/// Result of [`Lock::fence`](super::Lock::fence): a fencing token for a lock held now.
///
/// ```
/// use redkit::lock::{Fence, FencingToken};
/// assert_ne!(Fence::Issued(FencingToken::new(7)), Fence::Lost);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fence {
    /// The token (issued now, or earlier for this guard): pass it to the storage.
    Issued(FencingToken),
    /// The lock key is gone or holds another owner's token: no token was issued and nothing
    /// was written; the lease is lost.
    Lost,
}

/// Result of a fenced write ([`Lock::fenced_set`](super::Lock::fenced_set)).
///
/// ```
/// use redkit::lock::{FencedWrite, FencingToken};
/// let refused = FencedWrite::Stale { newer: FencingToken::new(9) };
/// assert!(!refused.is_written());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FencedWrite {
    /// Written: the presented token was not older than the last one stored.
    Written,
    /// Refused: a newer token has already written; the stored value is unchanged.
    Stale {
        /// The token of the last accepted write.
        newer: FencingToken,
    },
}

impl FencedWrite {
    /// `true` for [`FencedWrite::Written`].
    pub fn is_written(&self) -> bool {
        matches!(self, Self::Written)
    }
}

/// Why a lease was lost while it was being watched.
///
/// ```
/// use redkit::lock::LeaseLoss;
/// assert_ne!(LeaseLoss::NotOwner, LeaseLoss::Expired);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseLoss {
    /// Redis said the key is gone or held by another owner (a renewal answered
    /// [`Renew::Lost`], or the final release answered [`Release::NotOwner`]).
    NotOwner,
    /// Renewals kept failing (errors, timeouts) until the local validity ran out: the lease
    /// must be assumed lost.
    Expired,
}

/// Reads the 1/0 status a lock script answers (1 = done, 0 = not the owner / refused).
/// A renewal script's 1/0 answer as a [`Renew`].
pub(crate) fn renew_status(script: &Script, answer: i64) -> Result<Renew> {
    Ok(if status(script, answer)? {
        Renew::Renewed
    } else {
        Renew::Lost
    })
}

pub(crate) fn status(script: &Script, status: i64) -> Result<bool> {
    match status {
        1 => Ok(true),
        0 => Ok(false),
        other => Err(Error::unexpected(
            script.id(),
            format!("status {other} is neither 0 nor 1"),
        )),
    }
}
