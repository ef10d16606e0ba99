//! [`Limiter`]: any of the algorithms, behind one type the middleware is generic over.

use std::time::Duration;

use redis::aio::ConnectionLike;

use super::decision::Decision;
use super::deny_cache::DenyCache;
use super::key::LimitKey;
use super::{FixedWindow, Gcra, SlidingWindow};
use crate::error::Result;

/// One of redkit's rate-limiting algorithms. Every one answers the same [`Decision`], with a
/// `retry_after` that is a lower bound a cache can trust (a refusal does not turn into an
/// allow before it elapses, unless the key is reset), in one round trip.
///
/// An enum rather than a trait object: a match per call, no allocation, and
/// the middleware's `Policies` (feature `tower`) stays one concrete type whatever the mix of
/// algorithms per route. Build it with `.into()` from any limiter.
///
/// ```no_run
/// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
/// use std::time::Duration;
/// use redkit::rate_limit::{FixedWindow, Gcra, LimitKey, Limiter};
///
/// let limiters: Vec<Limiter> = vec![
///     FixedWindow::new("daily", 10_000, Duration::from_secs(86_400))?.into(),
///     Gcra::new("burst", 10, Duration::from_secs(1))?.with_burst(20)?.into(),
/// ];
/// let key = LimitKey::text("user-42")?;
/// for l in &limiters {
///     println!("{}: {:?}", l.name(), l.check(&mut conn, &key).await?);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Limiter {
    /// [`FixedWindow`]: counter per window; up to 2 x limit around a window edge.
    Fixed(FixedWindow),
    /// [`Gcra`]: token bucket (rate and burst), exact retry-after.
    Gcra(Gcra),
    /// [`SlidingWindow`]: two-counter weighted sliding window.
    Sliding(SlidingWindow),
}

impl Limiter {
    /// The limiter's name.
    ///
    /// ```
    /// # use std::time::Duration;
    /// use redkit::rate_limit::{Gcra, Limiter};
    /// let l: Limiter = Gcra::new("api", 10, Duration::from_secs(1))?.into();
    /// assert_eq!(l.name(), "api");
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        match self {
            Self::Fixed(l) => l.name(),
            Self::Gcra(l) => l.name(),
            Self::Sliding(l) => l.name(),
        }
    }

    /// The most units that pass at once: the limit of a window, or GCRA's burst.
    ///
    /// ```
    /// # use std::time::Duration;
    /// use redkit::rate_limit::{Gcra, Limiter};
    /// let l: Limiter = Gcra::new("api", 10, Duration::from_secs(1))?.with_burst(25)?.into();
    /// assert_eq!(l.limit(), 25);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn limit(&self) -> u32 {
        match self {
            Self::Fixed(l) => l.limit(),
            Self::Gcra(l) => l.burst(),
            Self::Sliding(l) => l.limit(),
        }
    }

    /// The time in which [`limit`](Self::limit) units are granted: the window, or for GCRA
    /// the time a bucket takes to refill from empty (emission interval x burst).
    ///
    /// ```
    /// # use std::time::Duration;
    /// use redkit::rate_limit::{Gcra, Limiter};
    /// let l: Limiter = Gcra::new("api", 10, Duration::from_secs(1))?.with_burst(20)?.into();
    /// assert_eq!(l.window(), Duration::from_secs(2));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn window(&self) -> Duration {
        match self {
            Self::Fixed(l) => l.window(),
            Self::Gcra(l) => l.emission_interval() * l.burst(),
            Self::Sliding(l) => l.window(),
        }
    }

    /// The Redis key holding `key`'s state.
    ///
    /// ```
    /// # use std::time::Duration;
    /// use redkit::rate_limit::{LimitKey, Limiter, SlidingWindow};
    /// let l: Limiter = SlidingWindow::new("api", 10, Duration::from_secs(1))?.into();
    /// assert_eq!(l.redis_key(&LimitKey::text("a")?), "rk:sw:api:{k:a}");
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn redis_key(&self, key: &LimitKey) -> String {
        match self {
            Self::Fixed(l) => l.redis_key(key),
            Self::Gcra(l) => l.redis_key(key),
            Self::Sliding(l) => l.redis_key(key),
        }
    }

    /// The deny cache this limiter answers from, when one is attached (fixed window and
    /// GCRA; the sliding window always asks Redis: its refusals can end before the
    /// retry-after it reports).
    ///
    /// ```
    /// # use std::time::Duration;
    /// use redkit::rate_limit::{DenyCache, FixedWindow, Limiter};
    /// let fixed = FixedWindow::new("api", 10, Duration::from_secs(1))?;
    /// let l: Limiter = fixed.with_deny_cache(DenyCache::new(1000)?).into();
    /// assert!(l.deny_cache().is_some());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn deny_cache(&self) -> Option<&DenyCache> {
        match self {
            Self::Fixed(l) => l.deny_cache(),
            Self::Gcra(l) => l.deny_cache(),
            Self::Sliding(_) => None,
        }
    }

    /// Counts one unit for `key`. See [`check_n`](Self::check_n).
    ///
    /// ```no_run
    /// # async fn run(l: redkit::rate_limit::Limiter, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// let d = l.check(&mut conn, &redkit::rate_limit::LimitKey::text("user-42")?).await?;
    /// # let _ = d; Ok(()) }
    /// ```
    pub async fn check<C: ConnectionLike>(&self, conn: &mut C, key: &LimitKey) -> Result<Decision> {
        self.check_n(conn, key, 1).await
    }

    /// Counts `cost` units for `key` with the algorithm's own `check_n`
    /// ([`FixedWindow::check_n`], [`Gcra::check_n`], [`SlidingWindow::check_n`]).
    ///
    /// ```no_run
    /// # async fn run(l: redkit::rate_limit::Limiter, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// let d = l.check_n(&mut conn, &redkit::rate_limit::LimitKey::text("user-42")?, 3).await?;
    /// # let _ = d; Ok(()) }
    /// ```
    pub async fn check_n<C: ConnectionLike>(
        &self,
        conn: &mut C,
        key: &LimitKey,
        cost: u32,
    ) -> Result<Decision> {
        match self {
            Self::Fixed(l) => l.check_n(conn, key, cost).await,
            Self::Gcra(l) => l.check_n(conn, key, cost).await,
            Self::Sliding(l) => l.check_n(conn, key, cost).await,
        }
    }

    /// Deletes `key`'s state. Returns whether it existed.
    ///
    /// ```no_run
    /// # async fn run(l: redkit::rate_limit::Limiter, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// l.reset(&mut conn, &redkit::rate_limit::LimitKey::text("user-42")?).await?;
    /// # Ok(()) }
    /// ```
    pub async fn reset<C: ConnectionLike>(&self, conn: &mut C, key: &LimitKey) -> Result<bool> {
        match self {
            Self::Fixed(l) => l.reset(conn, key).await,
            Self::Gcra(l) => l.reset(conn, key).await,
            Self::Sliding(l) => l.reset(conn, key).await,
        }
    }

    /// Whether `other` is the same algorithm with the same parameters (names aside).
    #[cfg(feature = "tower")]
    pub(crate) fn same_config(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Fixed(_), Self::Fixed(_)) | (Self::Sliding(_), Self::Sliding(_)) => {
                self.limit() == other.limit() && self.window() == other.window()
            }
            (Self::Gcra(a), Self::Gcra(b)) => {
                a.rate() == b.rate() && a.period() == b.period() && a.burst() == b.burst()
            }
            _ => false,
        }
    }
}

impl From<FixedWindow> for Limiter {
    fn from(l: FixedWindow) -> Self {
        Self::Fixed(l)
    }
}

impl From<Gcra> for Limiter {
    fn from(l: Gcra) -> Self {
        Self::Gcra(l)
    }
}

impl From<SlidingWindow> for Limiter {
    fn from(l: SlidingWindow) -> Self {
        Self::Sliding(l)
    }
}
