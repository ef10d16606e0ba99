//! [`SlidingWindow`]: the two-counter weighted approximation of a sliding window.

use std::fmt;
use std::time::Duration;

use redis::aio::ConnectionLike;

use super::basics::limiter_basics;
use super::decision::{Decision, Quota};
use super::key::LimitKey;
use super::key_space::{delete, KeySpace};
use super::lease::{lease_target, LeaseScript};
use super::rate::Rate;
use super::rate_limiter::{delegate_rate_limiter, push_cost, sealed::Hooks, RateLimiter};
use super::reply::{ints, quota_of, timed_decision};
use crate::error::Result;
use crate::script::{embedded, Call, Script, ScriptManager};

/// A sliding-window limiter (the two-counter approximation of python `limits`' moving window
/// and Cloudflare's), shared by every instance of a service.
///
/// **Semantics.** Windows of length `window` follow each other from a client's first hit. A
/// request passes when `floor(previous x left / window) + current + cost <= limit`, where
/// `current` and `previous` count the units admitted in the current and the previous window
/// and `left` is the time left in the current window: the previous window's count is assumed
/// to have arrived evenly and slides out linearly. Refused requests are not counted.
///
/// **Error bound.** Each window admits at most `limit`. A span of one `window` that starts
/// `e` into one window and ends `e` into the next admits at most
/// `limit + ceil(previous x e / window)` units, where `previous` is what the earlier window
/// admitted: exactly `limit` when that window's units arrived evenly (the approximation's
/// assumption), and at worst `2 x limit` (a full window's units all at its very end). Unlike
/// the fixed window, a client sending steadily is held at `limit` per sliding window, and one
/// refused at a window edge is not let through with a fresh `limit` at once.
/// `tests/rate_limit_accuracy.rs` checks the per-span bound for random arrivals.
///
/// In the [`Quota`](super::Quota), [`remaining`](super::Quota::remaining) is the cost-1 requests that would pass
/// now and [`reset_after`](super::Quota::reset_after) the time until every counted unit has left the
/// window (the key's TTL). [`Decision::Limited`]'s `retry_after` is the time until the request
/// would pass if nothing else is counted meanwhile (whole milliseconds).
///
/// **Storage and time.** One key per client, `<prefix>:<name>:{<canonical key>}` (prefix [`DEFAULT_PREFIX`](Self::DEFAULT_PREFIX) unless [`with_prefix`](Self::with_prefix) chooses another), a string
/// `"<current>:<previous>"` whose TTL (end of the current window plus one window) tells the
/// script where in the window it is: no clock at all, neither client nor server. Each check is
/// one `EVALSHA` of `lua/sliding_window.v4.lua`. Cheap to clone.
///
/// ```no_run
/// # async fn run() -> redkit::Result<()> {
/// use std::time::Duration;
/// use redkit::rate_limit::{LimitKey, Rate, SlidingWindow};
///
/// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
/// let mut conn = client.get_multiplexed_async_connection().await?;
/// let limiter = SlidingWindow::new("api", Rate::per_minute(redkit::nonzero!(100)))?;
/// let decision = limiter.check(&mut conn, &LimitKey::ip([192, 0, 2, 1].into())).await?;
/// println!("{} left", decision.quota().remaining());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SlidingWindow {
    keys: KeySpace,
    /// The rate, its period in whole milliseconds.
    rate: Rate,
    limit: u32,
    window_ms: u64,
    script: &'static Script,
    manager: ScriptManager,
}

impl SlidingWindow {
    limiter_basics!("SlidingWindow");

    /// Prefix of every key unless [`with_prefix`](Self::with_prefix) chooses another.
    ///
    /// ```
    /// use redkit::rate_limit::{LimitKey, Rate, SlidingWindow};
    /// let limiter = SlidingWindow::new("api", Rate::per_second(redkit::nonzero!(10)))?;
    /// assert_eq!(limiter.prefix(), SlidingWindow::DEFAULT_PREFIX);
    /// assert_eq!(limiter.redis_key(&LimitKey::text("u")?), "redkit:sw:api:{k:u}");
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub const DEFAULT_PREFIX: &'static str = "redkit:sw";
    /// The shortest window: 1 ms.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::rate_limit::{Rate, SlidingWindow};
    /// assert!(SlidingWindow::new("burst", Rate::new(redkit::nonzero!(1), SlidingWindow::MIN_WINDOW)?).is_ok());
    /// // Sub-millisecond parts are dropped: 999 us is no window at all.
    /// assert!(SlidingWindow::new("burst", Rate::new(redkit::nonzero!(1), Duration::from_micros(999))?).is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub const MIN_WINDOW: Duration = Duration::from_millis(1);
    /// The longest window: two of them stay below 10^15 ms (exact as Lua numbers).
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::rate_limit::{Rate, SlidingWindow};
    /// assert!(SlidingWindow::new("epoch", Rate::new(redkit::nonzero!(1), SlidingWindow::MAX_WINDOW)?).is_ok());
    /// let longer = SlidingWindow::MAX_WINDOW + Duration::from_millis(1);
    /// assert!(SlidingWindow::new("epoch", Rate::new(redkit::nonzero!(1), longer)?).is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub const MAX_WINDOW: Duration = Duration::from_millis(499_999_999_999_999);

    /// A limiter named `name` (1..=64 bytes of `[A-Za-z0-9_:.-]`) allowing
    /// [`rate.limit()`](Rate::limit) units per sliding window of
    /// [`rate.period()`](Rate::period) (sub-millisecond parts are dropped), keys under
    /// [`DEFAULT_PREFIX`](Self::DEFAULT_PREFIX).
    ///
    /// Errors: [`Error::InvalidInput`](crate::Error::InvalidInput) for a window outside
    /// [`MIN_WINDOW`](Self::MIN_WINDOW)..=[`MAX_WINDOW`](Self::MAX_WINDOW) or a bad name.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::rate_limit::{Rate, SlidingWindow};
    /// assert!(SlidingWindow::new("login", Rate::per_minute(redkit::nonzero!(5))).is_ok());
    /// assert!(SlidingWindow::new("login", Rate::new(redkit::nonzero!(5), Duration::from_micros(1))?).is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn new(name: &str, rate: Rate) -> Result<Self> {
        let keys = KeySpace::new(Self::DEFAULT_PREFIX, name)?;
        let (held, window_ms) =
            rate.as_window(Self::MAX_WINDOW, "must be between 1 ms and MAX_WINDOW")?;
        Ok(Self {
            keys,
            rate: held,
            limit: rate.limit(),
            window_ms,
            script: embedded::SLIDING_WINDOW.script(),
            manager: ScriptManager::new(),
        })
    }

    /// Units allowed per sliding window.
    ///
    /// ```
    /// # use redkit::rate_limit::Rate;
    /// # let l = redkit::rate_limit::SlidingWindow::new("api", Rate::per_second(redkit::nonzero!(10)))?;
    /// assert_eq!(l.limit(), 10);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// The window length (whole milliseconds).
    ///
    /// ```
    /// # use redkit::rate_limit::Rate;
    /// # let l = redkit::rate_limit::SlidingWindow::new("api", Rate::per_second(redkit::nonzero!(10)))?;
    /// assert_eq!(l.window(), std::time::Duration::from_secs(1));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn window(&self) -> Duration {
        self.rate.period()
    }

    /// The Redis key holding `key`'s counters (for inspection and operations).
    ///
    /// ```
    /// # use std::time::Duration;
    /// use redkit::rate_limit::{LimitKey, Rate, SlidingWindow};
    /// let l = SlidingWindow::new("api", Rate::per_second(redkit::nonzero!(10)))?;
    /// assert_eq!(l.redis_key(&LimitKey::ip([10, 0, 0, 1].into())), "redkit:sw:api:{ip:10.0.0.1}");
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn redis_key(&self, key: &LimitKey) -> String {
        self.keys.key(key)
    }

    /// [`check_n`](Self::check_n): counts `cost` units for `key` in one round trip, if they
    /// fit in the weighted window.
    async fn count<C: ConnectionLike>(
        &self,
        conn: &mut C,
        key: &LimitKey,
        cost: u32,
    ) -> Result<Decision> {
        let mut call = Call::new(self.script);
        call.key(self.redis_key(key))
            .arg(self.limit)
            .arg(self.window_ms);
        push_cost(&mut call, cost);
        let reply = self.manager.invoke(conn, &call).await?;
        self.decode(reply, cost)
    }

    /// `key`'s window as a check would find it, read without counting: `used` the weighted
    /// count, `remaining` the cost-1 requests that would pass now, `reset_after` the time
    /// until every counted unit has left the window. One read-only script call
    /// (`EVALSHA_RO`: a replica may serve it); it writes nothing. A diagnostic: another
    /// process may count before a real check.
    ///
    /// ```no_run
    /// # async fn run(l: redkit::rate_limit::SlidingWindow, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// let q = l.peek(&mut conn, &redkit::rate_limit::LimitKey::text("user-42")?).await?;
    /// println!("{} used, {} left", q.used(), q.remaining());
    /// # Ok(()) }
    /// ```
    pub async fn peek<C: ConnectionLike>(&self, conn: &mut C, key: &LimitKey) -> Result<Quota> {
        let script = embedded::SLIDING_WINDOW_PEEK.script();
        let mut call = Call::new(script);
        call.key(self.redis_key(key))
            .arg(self.limit)
            .arg(self.window_ms);
        let reply = self.manager.invoke(conn, &call).await?;
        let [_used, remaining, reset] = ints::<3>(script, reply)?;
        quota_of(
            script,
            [remaining, reset],
            Duration::from_millis,
            self.limit,
        )
    }

    /// Deletes `key`'s counters. Returns whether they existed.
    ///
    /// ```no_run
    /// # async fn run(l: redkit::rate_limit::SlidingWindow, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// l.reset(&mut conn, &redkit::rate_limit::LimitKey::text("user-42")?).await?;
    /// # Ok(()) }
    /// ```
    pub async fn reset<C: ConnectionLike>(&self, conn: &mut C, key: &LimitKey) -> Result<bool> {
        delete(conn, self.redis_key(key), None).await
    }

    /// `{allowed, remaining, retry_after_ms, reset_after_ms}` -> [`Decision`].
    fn decode(&self, reply: redis::Value, cost: u32) -> Result<Decision> {
        let fields = ints::<4>(self.script, reply)?;
        timed_decision(self.script, fields, Duration::from_millis, self.limit, cost)
    }
}

impl fmt::Debug for SlidingWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlidingWindow")
            .field("name", &self.name())
            .field("prefix", &self.prefix())
            .field("limit", &self.limit)
            .field("window", &self.window())
            .field("script", &self.script.id())
            .finish()
    }
}

impl RateLimiter for SlidingWindow {
    delegate_rate_limiter!(SlidingWindow);
}

/// Always asks Redis: a sliding window's refusal can end before the retry-after it reports.
impl Hooks for SlidingWindow {}

lease_target! {
    /// Answers checks from **leased quota** with `lease`: the same limit, exact (never over it
    /// across every instance), most checks of a hot key answered in process. Each lease call
    /// is one `EVALSHA` of `lua/sliding_window_lease.v1.lua`, which counts the units it grants
    /// in the current window at once; they are used only until that window ends. What it
    /// changes, and why it stays exact: [`Leased`](crate::rate_limit::Leased).
    ///
    /// ```
    /// use redkit::rate_limit::{QuotaLease, Rate, SlidingWindow};
    /// let l = SlidingWindow::new("api", Rate::per_second(redkit::nonzero!(1_000)))?.leased(QuotaLease::new(32)?.instances(4)?);
    /// assert_eq!(l.lease().max_units(), 32);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    SlidingWindow => LeaseScript::SlidingWindow
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate_limit::reply::int_reply as reply;
    use redis::Value;

    #[test]
    fn debug_shows_the_settings() {
        let l = SlidingWindow::new(
            "api",
            Rate::new(crate::nonzero!(5), Duration::from_secs(2)).unwrap(),
        )
        .unwrap();
        let debug = format!("{l:?}");
        for part in [
            "SlidingWindow",
            "\"api\"",
            "limit: 5",
            "2s",
            "sliding_window.v4",
        ] {
            assert!(debug.contains(part), "{part} in {debug}");
        }
    }

    #[test]
    fn accessors_return_what_was_set() {
        use crate::script::{Backend, ScriptManager};
        let l = SlidingWindow::new(
            "t",
            Rate::new(crate::nonzero!(5), Duration::from_secs(2)).unwrap(),
        )
        .unwrap();
        assert_eq!(l.manager().backend(), Backend::Scripts);
        let l = l.with_manager(ScriptManager::new().with_backend(Backend::Functions));
        assert_eq!(l.manager().backend(), Backend::Functions);
        assert_eq!((l.limit(), l.window()), (5, Duration::from_secs(2)));
    }

    #[test]
    fn decodes_outcomes_and_rejects_bad_replies() {
        let l = SlidingWindow::new("t", Rate::per_second(crate::nonzero!(10))).unwrap();
        let d = l.decode(reply([1, 4, 0, 1500]), 1).unwrap();
        assert!(d.is_allowed() && d.quota().remaining() == 4);
        assert_eq!(d.quota().reset_after(), Duration::from_millis(1500));
        let d = l.decode(reply([0, 0, 250, 1500]), 1).unwrap();
        assert_eq!(d.retry_after(), Some(Duration::from_millis(250)));
        let d = l.decode(reply([0, 0, 0, 1500]), 11).unwrap();
        assert!(matches!(d, Decision::CostExceedsLimit { cost: 11, .. }));
        for v in [
            Value::Nil,
            reply([0, 0, 0, 1]),
            reply([3, 0, 0, 1]),
            reply([1, -1, 0, 1]),
            reply([1, 0, 0, -1]),
        ] {
            assert!(matches!(
                l.decode(v, 1),
                Err(crate::Error::UnexpectedReply { .. })
            ));
        }
        assert!(Rate::new(crate::nonzero!(1), SlidingWindow::MAX_WINDOW)
            .and_then(|r| SlidingWindow::new("t", r))
            .is_ok());
        let too_long = SlidingWindow::MAX_WINDOW + Duration::from_millis(1);
        assert!(Rate::new(crate::nonzero!(1), too_long)
            .and_then(|r| SlidingWindow::new("t", r))
            .is_err());
    }
}
