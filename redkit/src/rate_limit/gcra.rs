//! [`Gcra`]: smooth rate limiting with token-bucket semantics, one key per client.

use std::fmt;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;

use super::basics::limiter_basics;
use super::decision::{Decision, Quota};
use super::deny_cache::DenyCache;
use super::key::LimitKey;
use super::key_space::{delete, KeySpace};
use super::lease::{lease_target, LeaseScript};
use super::rate::Rate;
use super::rate_limiter::{delegate_rate_limiter, push_cost, sealed::Hooks, RateLimiter};
use super::reply::{int, ints, non_negative, quota_of, timed_decision};
use crate::error::{Error, Result};
use crate::script::{embedded, Call, Script, ScriptManager};

/// A GCRA (generic cell rate algorithm) limiter: token-bucket semantics, shared by every
/// instance of a service.
///
/// **Semantics.** A bucket holds `burst` units and refills at `rate` units per `period`, one
/// unit every *emission interval* (`period / rate`, in whole microseconds, rounded up so the
/// rate is never exceeded). A request of cost `n` passes when `n` units are in the bucket and
/// takes them; otherwise nothing changes and
/// [`Decision::Limited::retry_after`](Decision::Limited) is the exact time until it would pass
/// (to the microsecond of the server clock, if nothing else is counted meanwhile). Over any
/// span of length `t`, at most `burst + rate * t / period` units pass. A cost above `burst` can
/// never pass ([`Decision::CostExceedsLimit`]).
///
/// In the [`Quota`](super::Quota), [`limit`](super::Quota::limit) is `burst`, [`remaining`](super::Quota::remaining) is
/// how many cost-1 requests would pass right now, and [`reset_after`](super::Quota::reset_after) is
/// the time until the bucket is full again.
///
/// **Storage and time.** One key per client, `<prefix>:<name>:{<canonical key>}` (prefix [`DEFAULT_PREFIX`](Self::DEFAULT_PREFIX) unless [`with_prefix`](Self::with_prefix) chooses another), holding the
/// theoretical arrival time (TAT) in microseconds of the server's `TIME`, with a TTL equal to
/// the time until the bucket is full (a full bucket is no key). Each check is one `EVALSHA`
/// of `lua/gcra.v4.lua`: no client clock is involved. Cheap to clone.
///
/// ```no_run
/// # async fn run() -> redkit::Result<()> {
/// use std::num::NonZeroU32;
/// use redkit::rate_limit::{Gcra, LimitKey, Rate};
///
/// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
/// let mut conn = client.get_multiplexed_async_connection().await?;
/// // 10 requests per second on average, bursts of up to 20.
/// let limiter = Gcra::bursting("api", Rate::per_second(redkit::nonzero!(10)), redkit::nonzero!(20))?;
/// let decision = limiter.check(&mut conn, &LimitKey::ip([192, 0, 2, 1].into())).await?;
/// if let Some(wait) = decision.retry_after() {
///     println!("retry after {wait:?}");
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Gcra {
    keys: KeySpace,
    /// The rate, its period in whole microseconds.
    rate: Rate,
    burst: u32,
    interval_us: u64,
    script: &'static Script,
    manager: ScriptManager,
    deny_cache: Option<DenyCache>,
}

impl Gcra {
    limiter_basics!("Gcra", deny_cache);

    /// Prefix of every key unless [`with_prefix`](Self::with_prefix) chooses another.
    ///
    /// ```
    /// use redkit::rate_limit::{Gcra, LimitKey, Rate};
    /// let limiter = Gcra::new("api", Rate::per_second(redkit::nonzero!(10)))?;
    /// assert_eq!(limiter.prefix(), Gcra::DEFAULT_PREFIX);
    /// assert_eq!(limiter.redis_key(&LimitKey::text("u")?), "redkit:gcra:api:{k:u}");
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub const DEFAULT_PREFIX: &'static str = "redkit:gcra";
    /// The largest bucket: `emission interval x burst` stays below 10^15 us (about 31.7
    /// years), so every time the script handles is exact as a Lua number.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::rate_limit::{Gcra, Rate};
    ///
    /// assert!(Gcra::new("slow", Rate::new(redkit::nonzero!(1), Gcra::MAX_BUCKET)?).is_ok());
    /// let longer = Gcra::MAX_BUCKET + Duration::from_micros(1);
    /// assert!(Gcra::new("slow", Rate::new(redkit::nonzero!(1), longer)?).is_err());
    /// // One unit a day: a bucket of 11,574 days fits, one day more does not.
    /// let daily = Rate::new(redkit::nonzero!(1), Duration::from_secs(86_400))?;
    /// let days = |n| std::num::NonZeroU32::new(n).unwrap();
    /// assert!(Gcra::bursting("daily", daily, days(11_574)).is_ok());
    /// assert!(Gcra::bursting("daily", daily, days(11_575)).is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub const MAX_BUCKET: Duration = Duration::from_micros(999_999_999_999_999);

    /// A limiter named `name` (1..=64 bytes of `[A-Za-z0-9_:.-]`) refilling
    /// [`rate.limit()`](Rate::limit) units per [`rate.period()`](Rate::period) (whole
    /// microseconds), with a bucket of [`rate.limit()`](Rate::limit) units (a full bucket is
    /// one period's worth; [`bursting`](Self::bursting) chooses another), keys under
    /// [`DEFAULT_PREFIX`](Self::DEFAULT_PREFIX).
    ///
    /// Errors: [`Error::InvalidInput`] for a period under 1 us, a bucket
    /// (`emission interval x burst`) above [`MAX_BUCKET`](Self::MAX_BUCKET) or a bad name.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::rate_limit::{Gcra, Rate};
    /// let l = Gcra::new("login", Rate::per_minute(redkit::nonzero!(5)))?;
    /// assert_eq!(l.emission_interval(), Duration::from_secs(12));
    /// assert_eq!(l.burst(), 5);
    /// assert!(Gcra::new("login", Rate::new(redkit::nonzero!(5), Duration::from_nanos(999))?).is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn new(name: &str, rate: Rate) -> Result<Self> {
        Self::bursting(name, rate, rate.limit_nonzero())
    }

    /// As [`new`](Self::new), with a bucket of `burst` units: at most `burst` pass at once,
    /// refilled at the rate (only GCRA has a burst: a window lets its limit through at once).
    ///
    /// Errors: as [`new`](Self::new), the bucket being `emission interval x burst`.
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use redkit::rate_limit::{Gcra, Rate};
    /// // 10 per second on average, at most 20 at once.
    /// let api = Gcra::bursting("api", Rate::per_second(redkit::nonzero!(10)), redkit::nonzero!(20))?;
    /// assert_eq!((api.rate().limit(), api.burst()), (10, 20));
    /// // One request per second, never two in a row without waiting.
    /// let strict = Gcra::bursting("strict", Rate::per_second(redkit::nonzero!(1)), NonZeroU32::MIN)?;
    /// assert_eq!(strict.burst(), 1);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn bursting(name: &str, rate: Rate, burst: NonZeroU32) -> Result<Self> {
        let keys = KeySpace::new(Self::DEFAULT_PREFIX, name)?;
        let max_us = u64::try_from(Self::MAX_BUCKET.as_micros()).unwrap_or(u64::MAX);
        let period_us = rate.period_in(
            Duration::from_micros(1),
            Duration::MAX,
            "period",
            "must be between 1 us and MAX_BUCKET",
        )?;
        let interval_us = period_us.div_ceil(u64::from(rate.limit()));
        let burst = burst.get();
        match interval_us.checked_mul(u64::from(burst)) {
            Some(bucket) if bucket <= max_us => {}
            _ => {
                return Err(Error::invalid(
                    "burst",
                    "emission interval x burst must be below 10^15 us",
                ))
            }
        }
        Ok(Self {
            keys,
            rate: rate.with_period(Duration::from_micros(period_us)),
            burst,
            interval_us,
            script: embedded::GCRA.script(),
            manager: ScriptManager::new(),
            deny_cache: None,
        })
    }

    /// The most units that pass at once: a full bucket (the rate's limit unless built with
    /// [`bursting`](Self::bursting)).
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use redkit::rate_limit::{Gcra, Rate};
    /// assert_eq!(Gcra::new("api", Rate::per_second(redkit::nonzero!(10)))?.burst(), 10);
    /// let bursty = Gcra::bursting("api", Rate::per_second(redkit::nonzero!(10)), redkit::nonzero!(20))?;
    /// assert_eq!(bursty.burst(), 20);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn burst(&self) -> u32 {
        self.burst
    }

    /// The time a bucket takes to refill from empty: emission interval x burst.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::rate_limit::{Gcra, Rate};
    /// let l = Gcra::bursting("api", Rate::per_second(redkit::nonzero!(10)), redkit::nonzero!(20))?;
    /// assert_eq!(l.bucket(), Duration::from_secs(2));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn bucket(&self) -> Duration {
        self.emission_interval() * self.burst
    }

    /// Time to refill one unit: `period / rate` in whole microseconds, rounded up.
    ///
    /// ```
    /// # use redkit::rate_limit::Rate;
    /// # use std::time::Duration;
    /// let l = redkit::rate_limit::Gcra::new("api", Rate::new(redkit::nonzero!(3), Duration::from_millis(1))?)?;
    /// assert_eq!(l.emission_interval(), Duration::from_micros(334));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn emission_interval(&self) -> Duration {
        Duration::from_micros(self.interval_us)
    }

    /// The Redis key holding `key`'s TAT (for inspection and operations).
    ///
    /// ```
    /// # use std::time::Duration;
    /// use redkit::rate_limit::{Gcra, LimitKey, Rate};
    /// let l = Gcra::new("api", Rate::per_second(redkit::nonzero!(10)))?;
    /// assert_eq!(l.redis_key(&LimitKey::ip([10, 0, 0, 1].into())), "redkit:gcra:api:{ip:10.0.0.1}");
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn redis_key(&self, key: &LimitKey) -> String {
        self.keys.key(key)
    }

    /// [`check_n`](Self::check_n): takes `cost` units for `key` in one round trip, if the
    /// bucket holds them (a cost above the [`burst`](Self::burst) is answered
    /// `CostExceedsLimit` by the script; the script reads the server's `TIME`).
    async fn count<C: ConnectionLike>(
        &self,
        conn: &mut C,
        key: &LimitKey,
        cost: u32,
    ) -> Result<Decision> {
        let redis_key = self.redis_key(key);
        // A cost above the burst is answered by Redis (CostExceedsLimit), never cached.
        let cache = self.deny_cache.as_ref().filter(|_| cost <= self.burst);
        if let Some(decision) = cache.and_then(|c| c.lookup(&redis_key, self.burst, cost)) {
            return Ok(decision);
        }
        let mut call = Call::new(self.script);
        call.key(&redis_key).arg(self.interval_us).arg(self.burst);
        push_cost(&mut call, cost);
        let sent = Instant::now();
        let reply = self.manager.invoke(conn, &call).await?;
        let decision = self.decode(reply, cost)?;
        if let Some(cache) = cache {
            cache.remember_bucket(&redis_key, sent, cost, &decision);
        }
        Ok(decision)
    }

    /// `key`'s bucket as a check would find it, read without taking from it: `remaining` the
    /// cost-1 requests that would conform now, `reset_after` the time until the bucket is
    /// full, `limit` the burst. One read-only script call (`EVALSHA_RO`: a replica may serve
    /// it); it writes nothing and does not touch the deny cache. A diagnostic: another
    /// process may take units before a real check.
    ///
    /// ```no_run
    /// # async fn run(l: redkit::rate_limit::Gcra, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// let q = l.peek(&mut conn, &redkit::rate_limit::LimitKey::text("user-42")?).await?;
    /// println!("{} of {} left, full again in {:?}", q.remaining(), q.limit(), q.reset_after());
    /// # Ok(()) }
    /// ```
    pub async fn peek<C: ConnectionLike>(&self, conn: &mut C, key: &LimitKey) -> Result<Quota> {
        let script = embedded::GCRA_PEEK.script();
        let mut call = Call::new(script);
        call.key(self.redis_key(key))
            .arg(self.interval_us)
            .arg(self.burst);
        let reply = self.manager.invoke(conn, &call).await?;
        let [remaining, reset, _now] = ints::<3>(script, reply)?;
        quota_of(
            script,
            [remaining, reset],
            Duration::from_micros,
            self.burst,
        )
    }

    /// Blocks `key` for `block`: its TAT moves so that every check is refused until the
    /// block ends, with the exact `retry_after` (the check costs nothing more); afterwards
    /// the bucket refills from empty. A block never shortens what the client already waits
    /// for (a later TAT stays), and the block's length is returned: the time until a cost-1
    /// request conforms. One script call, timed by the server's clock. Other processes' deny
    /// caches only refuse, so they never let a blocked client through; units leased to an
    /// instance stay usable until spent or ended ([`Leased::block_for`](crate::rate_limit::Leased::block_for)
    /// drops this process's at once).
    ///
    /// Errors: [`Error::InvalidInput`] for a zero block or one that, with the bucket, reaches
    /// 10^15 µs (nothing sent), [`Error::WrongType`] / [`Error::CorruptData`] when the key
    /// holds something else, [`Error::PermissionDenied`] (nothing written in each case).
    ///
    /// ```no_run
    /// # async fn run(l: redkit::rate_limit::Gcra, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use std::time::Duration;
    /// let key = redkit::rate_limit::LimitKey::text("tenant-9")?;
    /// let blocked = l.block_for(&mut conn, &key, Duration::from_secs(60)).await?;
    /// assert!(blocked >= Duration::from_secs(60));
    /// # Ok(()) }
    /// ```
    pub async fn block_for<C: ConnectionLike>(
        &self,
        conn: &mut C,
        key: &LimitKey,
        block: Duration,
    ) -> Result<Duration> {
        let bucket_us = self.interval_us.saturating_mul(u64::from(self.burst));
        let us = u64::try_from(block.as_micros())
            .ok()
            .filter(|us| {
                *us >= 1
                    && us
                        .checked_add(bucket_us)
                        .is_some_and(|t| t < 1_000_000_000_000_000)
            })
            .ok_or_else(|| {
                Error::invalid(
                    "block",
                    "must be at least 1 µs, and below 10^15 µs with the bucket",
                )
            })?;
        let script = embedded::GCRA_BLOCK.script();
        let mut call = Call::new(script);
        call.key(self.redis_key(key))
            .arg(self.interval_us)
            .arg(self.burst)
            .arg(us);
        let reply = self.manager.invoke(conn, &call).await?;
        let blocked = non_negative(script, "block", int(script, reply)?)?;
        Ok(Duration::from_micros(blocked))
    }

    /// Deletes `key`'s TAT: its bucket is full again. Returns whether a key existed.
    ///
    /// ```no_run
    /// # async fn run(l: redkit::rate_limit::Gcra, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// l.reset(&mut conn, &redkit::rate_limit::LimitKey::text("user-42")?).await?;
    /// # Ok(()) }
    /// ```
    pub async fn reset<C: ConnectionLike>(&self, conn: &mut C, key: &LimitKey) -> Result<bool> {
        delete(conn, self.redis_key(key), self.deny_cache.as_ref()).await
    }

    /// `{allowed, remaining, retry_after_us, reset_after_us, now_us}` -> [`Decision`].
    fn decode(&self, reply: redis::Value, cost: u32) -> Result<Decision> {
        let [allowed, remaining, retry, reset, _now] = ints::<5>(self.script, reply)?;
        let fields = [allowed, remaining, retry, reset];
        timed_decision(self.script, fields, Duration::from_micros, self.burst, cost)
    }
}

impl fmt::Debug for Gcra {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gcra")
            .field("name", &self.name())
            .field("prefix", &self.prefix())
            .field("rate", &self.rate)
            .field("burst", &self.burst)
            .field("script", &self.script.id())
            .field("deny_cache", &self.deny_cache)
            .finish()
    }
}

impl RateLimiter for Gcra {
    delegate_rate_limiter!(Gcra, deny_cache);

    fn limit(&self) -> u32 {
        self.burst
    }

    fn window(&self) -> Duration {
        self.bucket()
    }
}

impl Hooks for Gcra {
    fn attach_deny_cache(self, cache: DenyCache) -> Self {
        self.with_deny_cache(cache)
    }

    /// From a refusal the deny cache holds.
    fn answer_locally(&self, key: &LimitKey) -> Option<Decision> {
        let cache = self.deny_cache.as_ref()?;
        cache.lookup(&self.redis_key(key), self.burst, 1)
    }
}

lease_target! {
    /// Answers checks from **leased quota** with `lease`: the same rate and burst, exact
    /// (never more than one in-process GCRA would admit, across every instance), most checks
    /// of a hot key answered in process. Each lease call is one `EVALSHA` of
    /// `lua/gcra_lease.v1.lua`, which moves the TAT past every unit it grants at once; each
    /// unit is used only while it still conforms (the `j`-th of a grant until `j - 1`
    /// emission intervals after the bucket's TAT as the call found it). What it changes, and
    /// why it stays exact: [`Leased`](crate::rate_limit::Leased).
    ///
    /// ```
    /// use redkit::rate_limit::{Gcra, QuotaLease, Rate};
    /// let l = Gcra::new("api", Rate::per_second(redkit::nonzero!(1_000)))?.leased(QuotaLease::new(32)?.instances(4)?);
    /// assert_eq!((l.lease().max_units(), l.limiter().burst()), (32, 1_000));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    Gcra => LeaseScript::Gcra
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate_limit::reply::int_reply as reply;
    use redis::Value;

    #[test]
    fn accessors_return_what_was_set() {
        use crate::rate_limit::DenyCache;
        use crate::script::{Backend, ScriptManager};
        let l = Gcra::new(
            "t",
            Rate::new(crate::nonzero!(10), Duration::from_millis(1500)).unwrap(),
        )
        .unwrap();
        assert!(l.deny_cache().is_none());
        assert_eq!(l.manager().backend(), Backend::Scripts);
        let l = l
            .with_manager(ScriptManager::new().with_backend(Backend::Functions))
            .with_deny_cache(DenyCache::new(16).unwrap());
        assert_eq!(l.manager().backend(), Backend::Functions);
        assert!(l.deny_cache().is_some());
        assert_eq!(l.rate().period(), Duration::from_millis(1500));
        assert_eq!(l.rate().limit(), 10);
        assert_eq!(l.burst(), 10);
        assert_eq!(l.emission_interval(), Duration::from_millis(150));
        assert_eq!(l.bucket(), Duration::from_millis(1500));
    }

    #[test]
    fn a_refused_cost_of_exactly_the_burst_is_limited_not_impossible() {
        let l = Gcra::new("t", Rate::per_second(crate::nonzero!(10))).unwrap();
        let d = l.decode(reply([0, 0, 100_000, 100_000, 5]), 10).unwrap();
        assert!(matches!(d, Decision::Limited { .. }), "{d:?}");
        let d = l.decode(reply([0, 0, 0, 100_000, 5]), 11).unwrap();
        assert!(
            matches!(d, Decision::CostExceedsLimit { cost: 11, .. }),
            "{d:?}"
        );
    }

    #[test]
    fn debug_shows_the_settings() {
        let l = Gcra::bursting(
            "api",
            Rate::per_second(crate::nonzero!(10)),
            crate::nonzero!(20),
        )
        .unwrap();
        let debug = format!("{l:?}");
        for part in [
            "Gcra",
            "\"api\"",
            "limit: 10",
            "burst: 20",
            "1s",
            "gcra.v4",
            "redkit:gcra",
        ] {
            assert!(debug.contains(part), "{part} in {debug}");
        }
    }

    #[test]
    fn decodes_outcomes() {
        let l = Gcra::new("t", Rate::per_second(crate::nonzero!(10))).unwrap();
        let d = l.decode(reply([1, 9, 0, 100_000, 5]), 1).unwrap();
        assert!(d.is_allowed());
        assert_eq!(d.quota().remaining(), 9);
        assert_eq!(d.quota().limit(), 10);
        assert_eq!(d.quota().reset_after(), Duration::from_millis(100));
        let d = l.decode(reply([0, 0, 1_500, 1_000_000, 5]), 1).unwrap();
        assert_eq!(d.retry_after(), Some(Duration::from_micros(1_500)));
        let d = l.decode(reply([0, 3, 0, 700_000, 5]), 11).unwrap();
        assert!(matches!(d, Decision::CostExceedsLimit { cost: 11, .. }));
    }

    #[test]
    fn rejects_bad_replies_without_panicking() {
        let l = Gcra::new("t", Rate::per_second(crate::nonzero!(10))).unwrap();
        for v in [
            Value::Nil,
            reply([2, 0, 0, 0, 0]),
            reply([1, -1, 0, 0, 0]),
            reply([0, 0, 0, 10, 0]),
            reply([0, 0, -5, 10, 0]),
            Value::Array(vec![Value::Int(1)]),
        ] {
            assert!(matches!(l.decode(v, 1), Err(Error::UnexpectedReply { .. })));
        }
    }

    #[test]
    fn validates_before_sending() {
        let s = Duration::from_secs(1);
        assert!(Rate::new(crate::nonzero!(1), Duration::from_nanos(999))
            .and_then(|r| Gcra::new("t", r))
            .is_err());
        assert!(Rate::new(NonZeroU32::MAX, Duration::from_micros(1))
            .and_then(|r| Gcra::new("t", r))
            .is_ok());
        assert!(Rate::new(crate::nonzero!(1), Gcra::MAX_BUCKET)
            .and_then(|r| Gcra::new("t", r))
            .is_ok());
        assert!(Rate::new(
            crate::nonzero!(1),
            Gcra::MAX_BUCKET + Duration::from_micros(1)
        )
        .and_then(|r| Gcra::new("t", r))
        .is_err());
        let us = Duration::from_micros(1);
        let max_burst = |period| {
            Gcra::bursting(
                "t",
                Rate::new(crate::nonzero!(1), period).unwrap(),
                NonZeroU32::MAX,
            )
        };
        assert!(max_burst(us).is_ok());
        assert!(matches!(
            max_burst(Duration::from_secs(1_000_000)),
            Err(Error::InvalidInput { what: "burst", .. })
        ));
        // The period is kept in whole microseconds.
        let l = Gcra::new(
            "t",
            Rate::new(crate::nonzero!(3), Duration::from_nanos(1_999)).unwrap(),
        )
        .unwrap();
        assert_eq!(l.rate().period(), us);
        assert!(Rate::new(crate::nonzero!(1), s)
            .and_then(|r| Gcra::new("a{b}", r))
            .is_err());
    }
}
