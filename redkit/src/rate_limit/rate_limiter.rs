//! [`RateLimiter`]: what every rate-limiting algorithm provides.

use std::fmt;
use std::future::Future;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;

use super::decision::{Decision, Quota};
use super::deny_cache::DenyCache;
use super::key::LimitKey;
use super::rate::Rate;
use super::wait;
use crate::error::Result;
use crate::script::Call;

/// Adds a check's `cost` as the last argument of a limiter script's call, unless it is 1:
/// every limiter script counts 1 without it, and an argument left out is one less for Redis
/// to parse per call.
pub(super) fn push_cost(call: &mut Call<'_>, cost: u32) {
    if cost != 1 {
        call.arg(cost);
    }
}

/// What a rate-limiting algorithm provides: a name, a [`Rate`], keys under a prefix, and
/// checks answered as a [`Decision`] whose `retry_after` is a lower bound a cache can trust
/// (a refusal does not turn into an allow before it elapses, unless the key is reset), in one
/// round trip.
///
/// Implemented by [`FixedWindow`](super::FixedWindow), [`AlignedWindow`](super::AlignedWindow),
/// [`Gcra`](super::Gcra), [`SlidingWindow`](super::SlidingWindow), the wrappers
/// [`Grouped`](super::Grouped) and [`Leased`](super::Leased) of the windows they allow, and
/// [`Limiter`](super::Limiter) (any of them as one type: what the middleware's policies
/// hold), and sealed. Each algorithm also has the accessors, `check`, `check_n` and `reset`
/// as its own, so calling them needs no import of the trait (a wrapper's come from this
/// trait, its window's accessors also from its `limiter()`); waiting for a permit
/// ([`check_within`](Self::check_within)) comes from the trait. Write code generic over the
/// algorithm with it.
///
/// ```no_run
/// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
/// use redkit::rate_limit::{FixedWindow, Gcra, LimitKey, Rate, RateLimiter};
///
/// async fn show<L: RateLimiter>(l: &L, conn: &mut redis::aio::MultiplexedConnection) -> redkit::Result<()> {
///     let d = l.check(conn, &LimitKey::text("user-42")?).await?;
///     println!("{} ({:?} under {}): {d:?}", l.name(), l.rate(), l.prefix());
///     Ok(())
/// }
/// show(&FixedWindow::new("daily", Rate::new(redkit::nonzero!(10_000), std::time::Duration::from_secs(86_400))?)?, &mut conn).await?;
/// show(&Gcra::new("smooth", Rate::per_second(redkit::nonzero!(10)))?, &mut conn).await?;
/// # Ok(()) }
/// ```
pub trait RateLimiter:
    sealed::Hooks + Into<super::Limiter> + Clone + fmt::Debug + Send + Sync + 'static
{
    /// The limiter's name (its keys are its own).
    ///
    /// ```
    /// use redkit::rate_limit::{Gcra, Limiter, Rate, RateLimiter};
    /// fn label<L: RateLimiter>(l: &L) -> String {
    ///     format!("limiter {}", l.name())
    /// }
    /// let api = Gcra::new("api", Rate::per_second(redkit::nonzero!(10)))?;
    /// assert_eq!(label(&api), "limiter api");
    /// assert_eq!(label(&Limiter::from(api)), "limiter api");
    /// # Ok::<(), redkit::Error>(())
    /// ```
    fn name(&self) -> &str;

    /// The rate it was built with, its period as the algorithm holds it (whole milliseconds
    /// for the windows, whole microseconds for GCRA).
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::rate_limit::{FixedWindow, Rate, RateLimiter};
    /// fn per_second<L: RateLimiter>(l: &L) -> f64 {
    ///     f64::from(l.rate().limit()) / l.rate().period().as_secs_f64()
    /// }
    /// let exports = FixedWindow::new("exports", Rate::new(redkit::nonzero!(120), Duration::from_secs(60))?)?;
    /// assert_eq!(per_second(&exports), 2.0);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    fn rate(&self) -> &Rate;

    /// The key prefix (the algorithm's `DEFAULT_PREFIX` unless `with_prefix` chose another).
    ///
    /// ```
    /// use redkit::rate_limit::{FixedWindow, Rate, RateLimiter};
    /// let login = FixedWindow::new("login", Rate::per_minute(redkit::nonzero!(5)))?;
    /// assert_eq!(RateLimiter::prefix(&login), FixedWindow::DEFAULT_PREFIX);
    /// let scoped = login.with_prefix(redkit::keys::Prefix::new("shop:rl")?);
    /// assert_eq!(RateLimiter::prefix(&scoped), "shop:rl");
    /// # Ok::<(), redkit::Error>(())
    /// ```
    fn prefix(&self) -> &str;

    /// The most units that pass at once: a window's limit, or GCRA's burst.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::rate_limit::{FixedWindow, Gcra, Rate, RateLimiter};
    /// let window = FixedWindow::new("w", Rate::new(redkit::nonzero!(100), Duration::from_secs(60))?)?;
    /// assert_eq!(RateLimiter::limit(&window), 100);
    /// let gcra = Gcra::bursting("g", Rate::per_second(redkit::nonzero!(10)), redkit::nonzero!(20))?;
    /// assert_eq!(RateLimiter::limit(&gcra), 20); // the burst
    /// # Ok::<(), redkit::Error>(())
    /// ```
    fn limit(&self) -> u32 {
        self.rate().limit()
    }

    /// The time in which [`limit`](Self::limit) units are granted: the window, or for GCRA
    /// the time a bucket takes to refill from empty (emission interval x burst).
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::rate_limit::{FixedWindow, Gcra, Rate, RateLimiter};
    /// let window = FixedWindow::new("w", Rate::new(redkit::nonzero!(100), Duration::from_secs(60))?)?;
    /// assert_eq!(RateLimiter::window(&window), Duration::from_secs(60));
    /// // 10 per second, bursts of 20: an empty bucket refills in 20 x 100 ms
    /// let gcra = Gcra::bursting("g", Rate::per_second(redkit::nonzero!(10)), redkit::nonzero!(20))?;
    /// assert_eq!(RateLimiter::window(&gcra), Duration::from_secs(2));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    fn window(&self) -> Duration {
        self.rate().period()
    }

    /// The Redis key holding `key`'s state: `<prefix>:<name>:{<client>}` (the client is the
    /// hash tag: every call is a single-slot call on a Cluster).
    ///
    /// ```
    /// use redkit::rate_limit::{FixedWindow, LimitKey, Rate, RateLimiter};
    /// let login = FixedWindow::new("login", Rate::per_minute(redkit::nonzero!(5)))?;
    /// let key = RateLimiter::redis_key(&login, &LimitKey::text("user-42")?);
    /// assert!(key.starts_with("redkit:rl:login:{") && key.ends_with('}'));
    /// assert!(key.contains("user-42"));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    fn redis_key(&self, key: &LimitKey) -> String;

    /// The deny cache checks are answered from, when one is attached.
    ///
    /// ```
    /// use redkit::rate_limit::{DenyCache, FixedWindow, Rate, RateLimiter};
    /// let login = FixedWindow::new("login", Rate::per_minute(redkit::nonzero!(5)))?;
    /// assert!(RateLimiter::deny_cache(&login).is_none());
    /// let cached = login.with_deny_cache(DenyCache::new(10_000)?);
    /// assert!(RateLimiter::deny_cache(&cached).is_some());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    fn deny_cache(&self) -> Option<&DenyCache> {
        None
    }

    /// Counts `cost` units for `key` in one round trip, if they fit. A cost above
    /// [`limit`](Self::limit) is [`Decision::CostExceedsLimit`]. The cost is a [`NonZeroU32`]: write a
    /// constant with [`nonzero!`](crate::nonzero).
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use redkit::rate_limit::{Decision, FixedWindow, LimitKey, Rate, RateLimiter};
    /// // a budget of 500 MB a minute per tenant; this upload is 40 MB
    /// let megabytes = FixedWindow::new("upload-mb", Rate::per_minute(redkit::nonzero!(500)))?;
    /// let tenant = LimitKey::text("tenant-3")?;
    /// let upload_mb: u32 = 40; // known at run time
    /// // an empty upload costs nothing: no check at all
    /// let Some(cost) = std::num::NonZeroU32::new(upload_mb) else { return Ok(()) };
    /// match RateLimiter::check_n(&megabytes, &mut conn, &tenant, cost).await? {
    ///     Decision::Allowed(_) => { /* accept the upload */ }
    ///     Decision::Limited { retry_after, .. } => println!("over budget: retry in {retry_after:?}"),
    ///     _ => println!("40 MB can never pass in one minute"),
    /// }
    /// # Ok(()) }
    /// ```
    fn check_n<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        key: &LimitKey,
        cost: NonZeroU32,
    ) -> impl Future<Output = Result<Decision>> + Send;

    /// Counts one unit for `key`. See [`check_n`](Self::check_n).
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use redkit::rate_limit::{Gcra, LimitKey, Rate, RateLimiter};
    /// let api = Gcra::new("api", Rate::per_second(redkit::nonzero!(10)))?;
    /// let decision = RateLimiter::check(&api, &mut conn, &LimitKey::text("user-42")?).await?;
    /// if !decision.is_allowed() {
    ///     println!("429: {decision:?}");
    /// }
    /// # Ok(()) }
    /// ```
    fn check<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        key: &LimitKey,
    ) -> impl Future<Output = Result<Decision>> + Send {
        self.check_n(conn, key, NonZeroU32::MIN)
    }

    /// Waits for `cost` units for `key`, up to `max_wait`: checks, and while refused sleeps
    /// the refusal's exact `retry_after` plus a random jitter of up to a tenth of it (so
    /// waiters refused together do not all come back in one instant), then checks again.
    /// Answers [`Decision::Allowed`] once the units fit, or the last
    /// [`Decision::Limited`] at once when its `retry_after` would end after `max_wait` (it
    /// never sleeps past the deadline, and never checks before a refusal's `retry_after`).
    /// [`Decision::CostExceedsLimit`] and errors come back at once. Each check is one round
    /// trip; nothing is held in Redis while waiting (no blocking command), so one multiplexed
    /// connection serves any number of waiters.
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use std::time::Duration;
    /// use redkit::rate_limit::{Decision, Gcra, LimitKey, Rate, RateLimiter};
    ///
    /// let outbound = Gcra::new("partner-api", Rate::per_second(redkit::nonzero!(20)))?;
    /// let key = LimitKey::text("partner-7")?;
    /// match outbound.check_n_within(&mut conn, &key, redkit::nonzero!(2), Duration::from_secs(5)).await? {
    ///     Decision::Allowed(_) => { /* call the partner */ }
    ///     Decision::Limited { retry_after, .. } => println!("no room within 5 s ({retry_after:?} more)"),
    ///     _ => println!("2 units can never pass"),
    /// }
    /// # Ok(()) }
    /// ```
    fn check_n_within<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        key: &LimitKey,
        cost: NonZeroU32,
        max_wait: Duration,
    ) -> impl Future<Output = Result<Decision>> + Send {
        async move {
            // Beyond what an Instant can hold: no deadline.
            let deadline = Instant::now().checked_add(max_wait);
            loop {
                let decision = self.check_n(conn, key, cost).await?;
                let Decision::Limited { retry_after, .. } = decision else {
                    return Ok(decision);
                };
                let remaining = deadline.map_or(Duration::MAX, |d| {
                    d.saturating_duration_since(Instant::now())
                });
                match wait::pause(retry_after, remaining, wait::jitter(retry_after)) {
                    Some(pause) => tokio::time::sleep(pause).await,
                    None => return Ok(decision),
                }
            }
        }
    }

    /// Waits for one unit for `key`, up to `max_wait`. See
    /// [`check_n_within`](Self::check_n_within).
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use std::time::Duration;
    /// use redkit::rate_limit::{FixedWindow, LimitKey, Rate, RateLimiter};
    ///
    /// let mails = FixedWindow::new("mails", Rate::per_minute(redkit::nonzero!(60)))?;
    /// let allowed = mails
    ///     .check_within(&mut conn, &LimitKey::text("tenant-3")?, Duration::from_secs(30))
    ///     .await?
    ///     .is_allowed();
    /// # let _ = allowed; Ok(()) }
    /// ```
    fn check_within<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        key: &LimitKey,
        max_wait: Duration,
    ) -> impl Future<Output = Result<Decision>> + Send {
        self.check_n_within(conn, key, NonZeroU32::MIN, max_wait)
    }

    /// `key`'s state as a check would find it, read without counting: the [`Quota`] a
    /// check of cost 1 would start from (`used`, `remaining`, `reset_after`, and
    /// [`would_allow`](Quota::would_allow) for any cost). One read-only script call
    /// (`EVALSHA_RO` / `FCALL_RO`: a replica may serve it); it writes nothing, and touches
    /// neither the deny cache nor leases. A diagnostic by nature: another process may count
    /// between a peek and a check, so never decide admission with it. A wrapper peeks its
    /// window's counter (under [`Leased`](super::Leased), `used` counts the units leased to
    /// every instance, spent or not).
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use redkit::rate_limit::{FixedWindow, LimitKey, Rate, RateLimiter};
    /// let login = FixedWindow::new("login", Rate::per_minute(redkit::nonzero!(5)))?;
    /// let user = LimitKey::text("user-42")?;
    /// let q = RateLimiter::peek(&login, &mut conn, &user).await?;
    /// println!("{} of {} attempts used, window ends in {:?}", q.used(), q.limit(), q.reset_after());
    /// # Ok(()) }
    /// ```
    fn peek<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        key: &LimitKey,
    ) -> impl Future<Output = Result<Quota>> + Send;

    /// Deletes `key`'s state (and this process's deny-cache entry). Returns whether it
    /// existed. Other processes can lag it: a deny cache elsewhere keeps refusing the client
    /// until the refusal it holds ends (at most the refusal's `retry_after`: a window, or
    /// GCRA's exact wait), and units already leased to an instance stay usable until spent.
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use redkit::rate_limit::{FixedWindow, LimitKey, Rate, RateLimiter};
    /// let login = FixedWindow::new("login", Rate::per_minute(redkit::nonzero!(5)))?;
    /// let user = LimitKey::text("user-42")?;
    /// // after a successful password reset, forget the failed attempts
    /// RateLimiter::reset(&login, &mut conn, &user).await?;
    /// assert!(!RateLimiter::reset(&login, &mut conn, &user).await?); // nothing left
    /// # Ok(()) }
    /// ```
    fn reset<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        key: &LimitKey,
    ) -> impl Future<Output = Result<bool>> + Send;
}

/// Implements the [`RateLimiter`] methods an algorithm has as its own (`name`, `rate`,
/// `prefix`, `redis_key`, `peek`, `check_n`, `reset`, and those listed after the type among
/// `deny_cache`, `limit`, `window`) by calling them; inside an `impl RateLimiter`. A wrapper
/// of a limiter (`via limiter: Inner, Wrapper`) takes the accessors (and `deny_cache`) from
/// the limiter its method `limiter()` returns, `check_n` and `reset` from its own `count`
/// and `forget`.
macro_rules! delegate_rate_limiter {
    (@ $ty:ty, $view:expr, deny_cache) => {
        fn deny_cache(&self) -> Option<&$crate::rate_limit::DenyCache> {
            <$ty>::deny_cache(($view)(self))
        }
    };
    (@ $ty:ty, $view:expr, limit) => {
        fn limit(&self) -> u32 {
            <$ty>::limit(($view)(self))
        }
    };
    (@ $ty:ty, $view:expr, window) => {
        fn window(&self) -> std::time::Duration {
            <$ty>::window(($view)(self))
        }
    };
    (@accessors $ty:ty, $view:expr) => {
        fn name(&self) -> &str {
            <$ty>::name(($view)(self))
        }

        fn rate(&self) -> &$crate::rate_limit::Rate {
            <$ty>::rate(($view)(self))
        }

        fn prefix(&self) -> &str {
            <$ty>::prefix(($view)(self))
        }

        fn redis_key(&self, key: &$crate::rate_limit::LimitKey) -> String {
            <$ty>::redis_key(($view)(self), key)
        }
    };
    (@peek $ty:ty, $view:expr) => {
        fn peek<C: redis::aio::ConnectionLike + Send>(
            &self,
            conn: &mut C,
            key: &$crate::rate_limit::LimitKey,
        ) -> impl std::future::Future<Output = $crate::Result<$crate::rate_limit::Quota>> + Send {
            <$ty>::peek(($view)(self), conn, key)
        }
    };
    (@checks $ty:ty, $check_n:ident, $reset:ident) => {
        fn check_n<C: redis::aio::ConnectionLike + Send>(
            &self,
            conn: &mut C,
            key: &$crate::rate_limit::LimitKey,
            cost: std::num::NonZeroU32,
        ) -> impl std::future::Future<Output = $crate::Result<$crate::rate_limit::Decision>> + Send
        {
            <$ty>::$check_n(self, conn, key, cost)
        }

        fn reset<C: redis::aio::ConnectionLike + Send>(
            &self,
            conn: &mut C,
            key: &$crate::rate_limit::LimitKey,
        ) -> impl std::future::Future<Output = $crate::Result<bool>> + Send {
            <$ty>::$reset(self, conn, key)
        }
    };
    (via limiter: $inner:ty, $ty:ty) => {
        delegate_rate_limiter!(@ $inner, <$ty>::limiter, deny_cache);
        delegate_rate_limiter!(@accessors $inner, <$ty>::limiter);
        delegate_rate_limiter!(@peek $inner, <$ty>::limiter);
        delegate_rate_limiter!(@checks $ty, count, forget);
    };
    ($ty:ty $(, $own:ident)*) => {
        $( delegate_rate_limiter!(@ $ty, std::convert::identity, $own); )*
        delegate_rate_limiter!(@accessors $ty, std::convert::identity);
        delegate_rate_limiter!(@peek $ty, std::convert::identity);
        delegate_rate_limiter!(@checks $ty, check_n, reset);
    };
}
pub(super) use delegate_rate_limiter;

pub(super) mod sealed {
    use super::DenyCache;
    use crate::rate_limit::{Decision, LimitKey};

    /// What the crate asks of an algorithm besides [`RateLimiter`](super::RateLimiter): not
    /// nameable outside it, so only its algorithms implement the trait.
    #[allow(unreachable_pub)]
    pub trait Hooks: Sized {
        /// The limiter answering from `cache`, when its refusals hold until their
        /// `retry_after` (else unchanged: it always asks Redis).
        fn attach_deny_cache(self, cache: DenyCache) -> Self {
            let _ = cache;
            self
        }

        /// Whether concurrent checks are grouped (a grouped check must run to its end even
        /// when the caller's future is dropped).
        fn is_grouped(&self) -> bool {
            false
        }

        /// A one-unit check of `key` answered in this process, without Redis or a
        /// connection (units of a lease held here, a refusal the deny cache holds), when it
        /// can be; `None`: the check must ask Redis. What a middleware tries before a round
        /// trip, so the request skips the timer and the connection a round trip needs.
        fn answer_locally(&self, key: &LimitKey) -> Option<Decision> {
            let _ = key;
            None
        }
    }
}
