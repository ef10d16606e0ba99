//! [`Decision`]: the outcome of one check, and the quota state it observed.

use std::num::NonZeroU32;
use std::time::Duration;

/// The state of one client's quota as Redis saw it during a check (a window's, or for
/// [`Gcra`](super::Gcra) a bucket's: `limit` is the burst, `reset_after` the time until the
/// bucket is full).
///
/// ```
/// # fn show(d: redkit::rate_limit::Decision) {
/// let q = d.quota();
/// println!("{} of {} left, window resets in {:?}", q.remaining(), q.limit(), q.reset_after());
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    limit: u32,
    remaining: u32,
    reset_after: Duration,
}

impl Quota {
    pub(crate) fn new(limit: u32, used: u64, reset_after: Duration) -> Self {
        let remaining = u64::from(limit).saturating_sub(used);
        Self {
            limit,
            remaining: u32::try_from(remaining).unwrap_or(u32::MAX),
            reset_after,
        }
    }

    /// A quota whose remaining units the script computed itself (GCRA, sliding window).
    pub(crate) fn with_remaining(limit: u32, remaining: u64, reset_after: Duration) -> Self {
        Self {
            limit,
            remaining: u32::try_from(remaining).unwrap_or(u32::MAX).min(limit),
            reset_after,
        }
    }

    /// The limit of the window.
    ///
    /// ```
    /// # fn show(q: redkit::rate_limit::Quota) { assert!(q.limit() >= 1); }
    /// ```
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Units left in the current window after this check.
    ///
    /// ```
    /// # fn show(q: redkit::rate_limit::Quota) { assert!(q.remaining() <= q.limit()); }
    /// ```
    pub fn remaining(&self) -> u32 {
        self.remaining
    }

    /// Time until the current window ends and the counter starts again from zero
    /// (the key's PTTL in Redis; for a window not started yet, the full window).
    ///
    /// ```
    /// # fn show(q: redkit::rate_limit::Quota) { let _secs = q.reset_after().as_secs_f64(); }
    /// ```
    pub fn reset_after(&self) -> Duration {
        self.reset_after
    }

    /// Units counted against the limit: `limit - remaining` (for GCRA, the cost-1 requests
    /// the bucket is short of full; for the sliding window, the weighted count).
    ///
    /// ```
    /// # fn show(q: redkit::rate_limit::Quota) { assert_eq!(q.used() + q.remaining(), q.limit()); }
    /// ```
    pub fn used(&self) -> u32 {
        self.limit.saturating_sub(self.remaining)
    }

    /// Whether a check of `cost` would pass against this state: `cost <= remaining`, exact
    /// for every algorithm (a window's count plus the cost within the limit, a GCRA bucket
    /// holding the cost, a sliding window's weighted count plus the cost within the limit).
    /// What a [`peek`](super::RateLimiter::peek) answers is a diagnostic: another process may
    /// count before a real check.
    ///
    /// ```
    /// # fn show(q: redkit::rate_limit::Quota) {
    /// if q.would_allow(redkit::nonzero!(5)) {
    ///     println!("an upload of 5 would pass now");
    /// }
    /// # }
    /// ```
    pub fn would_allow(&self, cost: NonZeroU32) -> bool {
        cost.get() <= self.remaining
    }
}

/// The outcome of a check ([`FixedWindow`](super::FixedWindow), [`Gcra`](super::Gcra),
/// [`SlidingWindow`](super::SlidingWindow) or [`Limiter`](super::Limiter)): a value, not an
/// error.
///
/// ```no_run
/// # async fn run(limiter: redkit::rate_limit::FixedWindow, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
/// use redkit::rate_limit::{Decision, LimitKey};
/// match limiter.check(&mut conn, &LimitKey::ip([10, 0, 0, 1].into())).await? {
///     Decision::Allowed(q) => println!("ok, {} left", q.remaining()),
///     Decision::Limited { retry_after, .. } => println!("retry in {retry_after:?}"),
///     Decision::CostExceedsLimit { cost, .. } => println!("{cost} can never pass"),
///     _ => {}
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Decision {
    /// The request was counted and may proceed.
    Allowed(Quota),
    /// The window is exhausted; nothing was counted. Retry after `retry_after`.
    Limited {
        /// The window's state.
        quota: Quota,
        /// When the request would pass, if nothing else is counted meanwhile (fixed window:
        /// when the window resets; GCRA: exact; sliding window: to the millisecond). A lower
        /// bound: a refusal does not turn into an allow earlier (unless the key is reset).
        retry_after: Duration,
    },
    /// The cost asked for is larger than the limit: this request can never pass, in any
    /// window. Nothing was counted.
    CostExceedsLimit {
        /// The window's state.
        quota: Quota,
        /// The cost that was asked for.
        cost: u32,
    },
}

impl Decision {
    /// `true` for [`Decision::Allowed`].
    ///
    /// ```
    /// # fn show(d: redkit::rate_limit::Decision) { if !d.is_allowed() { /* 429 */ } }
    /// ```
    pub fn is_allowed(&self) -> bool {
        matches!(self, Self::Allowed(_))
    }

    /// The window's state, whatever the outcome.
    ///
    /// ```
    /// # fn show(d: redkit::rate_limit::Decision) { let _ = d.quota().remaining(); }
    /// ```
    pub fn quota(&self) -> &Quota {
        match self {
            Self::Allowed(q) => q,
            Self::Limited { quota, .. } | Self::CostExceedsLimit { quota, .. } => quota,
        }
    }

    /// How long to wait before retrying: `Some` only for [`Decision::Limited`]
    /// (`None` when allowed, and when the request can never pass).
    ///
    /// ```
    /// # fn show(d: redkit::rate_limit::Decision) { if let Some(wait) = d.retry_after() { let _ = wait; } }
    /// ```
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Limited { retry_after, .. } => Some(*retry_after),
            _ => None,
        }
    }
}
