//! [`LimitOutcome`]: what the layer decided for a request that reaches the handler.

use crate::rate_limit::Decision;

/// What the rate-limit layer did with a request that reached the inner service.
///
/// The layer puts exactly one `LimitOutcome` in the request extensions of **every** request it
/// lets through, so a handler can always extract it (axum: `Extension<LimitOutcome>`), also
/// during a Redis outage under [`FailMode::Open`](crate::middleware::FailMode::Open), which is exactly the
/// time a missing extension must not turn into a 500.
///
/// ```
/// use redkit::middleware::{LimitOutcome, Unchecked};
///
/// fn greeting(outcome: &LimitOutcome) -> String {
///     match outcome {
///         LimitOutcome::Checked(d) => format!("{} requests left", d.quota().remaining()),
///         LimitOutcome::Unchecked(Unchecked::RedisUnavailable) => "not counted (limiter down)".into(),
///         LimitOutcome::Unchecked(_) => "not counted".into(),
///         _ => String::new(),
///     }
/// }
/// assert_eq!(greeting(&LimitOutcome::Unchecked(Unchecked::UnknownClient)), "not counted");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LimitOutcome {
    /// The limiter was asked and allowed the request (always [`Decision::Allowed`]); the
    /// decision carries the quota left.
    Checked(Decision),
    /// The request was let through without a decision.
    Unchecked(Unchecked),
    /// A policy in shadow mode ([`PolicySpec::shadow`](crate::middleware::PolicySpec::shadow)) would have
    /// refused the request (the decision says why) and let it through: it was counted as a
    /// refused request is (not at all, for a window or bucket that was full).
    WouldLimit(Decision),
}

impl LimitOutcome {
    /// The limiter's decision, when there was one.
    ///
    /// ```
    /// use redkit::middleware::{LimitOutcome, Unchecked};
    /// assert!(LimitOutcome::Unchecked(Unchecked::RedisUnavailable).decision().is_none());
    /// ```
    pub fn decision(&self) -> Option<&Decision> {
        match self {
            Self::Checked(d) | Self::WouldLimit(d) => Some(d),
            Self::Unchecked(_) => None,
        }
    }

    /// `true` when the limiter was asked (a policy in shadow mode included).
    ///
    /// ```
    /// use redkit::middleware::{LimitOutcome, Unchecked};
    /// assert!(!LimitOutcome::Unchecked(Unchecked::UnknownClient).is_checked());
    /// ```
    pub fn is_checked(&self) -> bool {
        matches!(self, Self::Checked(_) | Self::WouldLimit(_))
    }
}

/// Why a request went through without a limiter decision.
///
/// ```
/// use redkit::middleware::Unchecked;
/// assert_ne!(Unchecked::RedisUnavailable, Unchecked::UnknownClient);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unchecked {
    /// Redis failed or did not answer within the layer's timeout, and the layer is
    /// [`FailMode::Open`](crate::middleware::FailMode::Open).
    RedisUnavailable,
    /// The client could not be identified and the layer is
    /// [`UnknownClient::Allow`](crate::middleware::UnknownClient::Allow).
    UnknownClient,
    /// The client's address is in the policies' allow list
    /// ([`AccessList`](crate::middleware::AccessList)): never limited, no Redis call.
    Allowlisted,
    /// Redis failed and [`FailMode::Local`](crate::middleware::FailMode::Local) let the request through
    /// on this instance's share of the limit.
    LocalFallback,
}
