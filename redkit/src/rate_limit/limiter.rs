//! [`Limiter`] and [`Algorithm`]: the registry of the algorithms, one line each.

use std::num::NonZeroU32;
use std::time::Duration;

use redis::aio::ConnectionLike;
use serde::{Deserialize, Serialize};

use super::decision::{Decision, Quota};
use super::deny_cache::DenyCache;
use super::gcra::Gcra;
use super::key::LimitKey;
use super::lease::Leased;
use super::rate::Rate;
use super::rate_limiter::{delegate_rate_limiter, sealed::Hooks, RateLimiter};
use super::sliding::SlidingWindow;
use super::window::{AlignedWindow, FixedWindow, Grouped};
use crate::error::{Error, Result};
use crate::keys::Prefix;

/// Declares [`Limiter`] (one variant per algorithm, and one per wrapper of an algorithm),
/// [`Algorithm`] (its name in configuration) and their dispatch: a new algorithm is its file
/// (a type implementing [`RateLimiter`]) plus one line here.
macro_rules! limiters {
    (
        algorithms {$(
            $(#[$doc:meta])*
            $variant:ident($ty:ty) = $kind:ident, $config:literal;
        )+}
        wrapped {$(
            $(#[$wdoc:meta])*
            $wvariant:ident($wty:ty) = $wkind:ident;
        )+}
    ) => {
        /// One of redkit's rate-limiting algorithms, as one type: a match per call, no
        /// allocation, and the middleware's `Policies` (feature `tower`) stays one concrete
        /// type whatever the mix of algorithms per route. Build it with `.into()` from any
        /// limiter (grouped and leased windows included), or with [`Limiter::new`] from an
        /// [`Algorithm`]. Every method is the algorithm's own ([`RateLimiter`]).
        ///
        /// ```no_run
        /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
        /// use std::{num::NonZeroU32, time::Duration};
        /// use redkit::rate_limit::{FixedWindow, Gcra, LimitKey, Limiter, Rate};
        ///
        /// let limiters: Vec<Limiter> = vec![
        ///     FixedWindow::new("daily", Rate::new(redkit::nonzero!(10_000), Duration::from_secs(86_400))?)?.into(),
        ///     Gcra::bursting("burst", Rate::per_second(redkit::nonzero!(10)), redkit::nonzero!(20))?.into(),
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
            $( $(#[$doc])* $variant($ty), )+
            $( $(#[$wdoc])* $wvariant($wty), )+
        }

        /// The name of an algorithm in configuration (`algorithm = "fixed_window" |
        /// "aligned_window" | "gcra" | "sliding_window"` in a policy's TOML; fixed window when
        /// left out).
        ///
        /// ```
        /// use redkit::rate_limit::Algorithm;
        /// assert_eq!(Algorithm::default(), Algorithm::FixedWindow);
        /// let gcra: Algorithm = serde_json::from_str(r#""gcra""#).unwrap();
        /// assert_eq!(gcra, Algorithm::Gcra);
        /// assert!(serde_json::from_str::<Algorithm>(r#""leaky""#).is_err());
        /// ```
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[non_exhaustive]
        pub enum Algorithm {
            $( $(#[$doc])* #[serde(rename = $config)] $kind, )+
        }

        impl Algorithm {
            /// The algorithm's name in configuration.
            ///
            /// ```
            /// use redkit::rate_limit::Algorithm;
            /// assert_eq!(Algorithm::AlignedWindow.as_str(), "aligned_window");
            /// ```
            pub fn as_str(self) -> &'static str {
                match self {
                    $( Self::$kind => $config, )+
                }
            }
        }

        $(
            impl From<$ty> for Limiter {
                fn from(l: $ty) -> Self {
                    Self::$variant(l)
                }
            }
        )+
        $(
            impl From<$wty> for Limiter {
                fn from(l: $wty) -> Self {
                    Self::$wvariant(l)
                }
            }
        )+

        impl Limiter {
            /// A limiter of `algorithm` named `name`: the algorithm's own `new(name, rate)`.
            ///
            /// ```
            /// use redkit::rate_limit::{Algorithm, Limiter, Rate};
            /// let l = Limiter::new(Algorithm::SlidingWindow, "api", Rate::per_second(redkit::nonzero!(10)))?;
            /// assert!(matches!(l, Limiter::Sliding(_)));
            /// # Ok::<(), redkit::Error>(())
            /// ```
            pub fn new(algorithm: Algorithm, name: &str, rate: Rate) -> Result<Self> {
                match algorithm {
                    $( Algorithm::$kind => <$ty>::new(name, rate).map(Self::$variant), )+
                }
            }

            /// The limiter's algorithm (a grouped or leased window's is its window's).
            ///
            /// ```
            /// use redkit::rate_limit::{Algorithm, FixedWindow, Gcra, Limiter, Rate};
            /// let l: Limiter = Gcra::new("api", Rate::per_second(redkit::nonzero!(10)))?.into();
            /// assert_eq!(l.algorithm(), Algorithm::Gcra);
            /// let grouped = FixedWindow::new("api", Rate::per_second(redkit::nonzero!(10)))?.grouped(redkit::GroupCommit::for_checks());
            /// assert_eq!(Limiter::from(grouped).algorithm(), Algorithm::FixedWindow);
            /// # Ok::<(), redkit::Error>(())
            /// ```
            pub fn algorithm(&self) -> Algorithm {
                match self {
                    $( Self::$variant(_) => Algorithm::$kind, )+
                    $( Self::$wvariant(_) => Algorithm::$wkind, )+
                }
            }

            /// The same limiter with keys under `prefix` (the algorithm's `with_prefix`).
            ///
            /// ```
            /// use redkit::rate_limit::{LimitKey, Limiter, Rate, SlidingWindow};
            /// let l: Limiter = SlidingWindow::new("api", Rate::per_second(redkit::nonzero!(10)))?.into();
            /// let l = l.with_prefix(redkit::keys::Prefix::new("app:sw")?);
            /// assert_eq!(l.redis_key(&LimitKey::text("a")?), "app:sw:api:{k:a}");
            /// # Ok::<(), redkit::Error>(())
            /// ```
            pub fn with_prefix(self, prefix: Prefix) -> Self {
                match self {
                    $( Self::$variant(l) => Self::$variant(l.with_prefix(prefix)), )+
                    $( Self::$wvariant(l) => Self::$wvariant(l.with_prefix(prefix)), )+
                }
            }

            /// The algorithm behind it, as the [`RateLimiter`] trait.
            fn inner(&self) -> &dyn Dispatch {
                match self {
                    $( Self::$variant(l) => l, )+
                    $( Self::$wvariant(l) => l, )+
                }
            }

            /// Counts `cost` units for `key` with the algorithm's own `check_n`.
            ///
            /// ```no_run
            /// # async fn run(l: redkit::rate_limit::Limiter, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
            /// let d = l.check_n(&mut conn, &redkit::rate_limit::LimitKey::text("user-42")?, redkit::nonzero!(3)).await?;
            /// # let _ = d; Ok(()) }
            /// ```
            pub async fn check_n<C: ConnectionLike>(
                &self,
                conn: &mut C,
                key: &LimitKey,
                cost: NonZeroU32,
            ) -> Result<Decision> {
                match self {
                    $( Self::$variant(l) => l.check_n(conn, key, cost).await, )+
                    $( Self::$wvariant(l) => l.count(conn, key, cost).await, )+
                }
            }

            /// `key`'s state read without counting: the algorithm's own `peek` (a wrapper's,
            /// its window's). See [`RateLimiter::peek`].
            ///
            /// ```no_run
            /// # async fn run(l: redkit::rate_limit::Limiter, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
            /// let q = l.peek(&mut conn, &redkit::rate_limit::LimitKey::text("user-42")?).await?;
            /// # let _ = q; Ok(()) }
            /// ```
            pub async fn peek<C: ConnectionLike>(&self, conn: &mut C, key: &LimitKey) -> Result<Quota> {
                match self {
                    $( Self::$variant(l) => l.peek(conn, key).await, )+
                    $( Self::$wvariant(l) => l.limiter().peek(conn, key).await, )+
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
                    $( Self::$variant(l) => l.reset(conn, key).await, )+
                    $( Self::$wvariant(l) => l.forget(conn, key).await, )+
                }
            }

            /// The same limiter answering from `cache` where its algorithm can.
            #[cfg_attr(not(feature = "tower"), allow(dead_code))]
            pub(crate) fn attach_deny_cache(self, cache: DenyCache) -> Self {
                match self {
                    $( Self::$variant(l) => Self::$variant(l.attach_deny_cache(cache)), )+
                    $( Self::$wvariant(l) => Self::$wvariant(l.attach_deny_cache(cache)), )+
                }
            }
        }
    };
}

limiters! {
    algorithms {
        /// [`FixedWindow`]: counter per window from the first hit; up to 2 x limit around a
        /// window edge.
        Fixed(FixedWindow) = FixedWindow, "fixed_window";
        /// [`AlignedWindow`]: counter per window aligned to the clock.
        Aligned(AlignedWindow) = AlignedWindow, "aligned_window";
        /// [`Gcra`]: token bucket (rate and burst), exact retry-after.
        Gcra(Gcra) = Gcra, "gcra";
        /// [`SlidingWindow`]: two-counter weighted sliding window.
        Sliding(SlidingWindow) = SlidingWindow, "sliding_window";
    }
    wrapped {
        /// A [`FixedWindow`] with group commit.
        FixedGrouped(Grouped<FixedWindow>) = FixedWindow;
        /// An [`AlignedWindow`] with group commit.
        AlignedGrouped(Grouped<AlignedWindow>) = AlignedWindow;
        /// A [`FixedWindow`] answering from leased quota.
        FixedLeased(Leased<FixedWindow>) = FixedWindow;
        /// A [`SlidingWindow`] answering from leased quota.
        SlidingLeased(Leased<SlidingWindow>) = SlidingWindow;
        /// A [`Gcra`] answering from leased quota.
        GcraLeased(Leased<Gcra>) = Gcra;
    }
}

impl Limiter {
    /// Blocks `key` for `block` where the algorithm can express it with the state its check
    /// already reads: [`FixedWindow::block_for`] (also under group commit: the same counter)
    /// and [`Gcra::block_for`]; leased, [`Leased::block_for`](crate::rate_limit::Leased::block_for)
    /// (the units held in this process dropped too). Returns the block's length.
    ///
    /// Errors: [`Error::UnsupportedOption`] (option `"block_for"`, nothing sent) for an
    /// [`AlignedWindow`] (its counter is per window: a block would span several) and a
    /// [`SlidingWindow`] (a count weighted down over time cannot hold a client out for a
    /// set time); else as the algorithm's.
    ///
    /// ```no_run
    /// # async fn run(l: redkit::rate_limit::Limiter, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use std::time::Duration;
    /// let key = redkit::rate_limit::LimitKey::text("user-42")?;
    /// match l.block_for(&mut conn, &key, Duration::from_secs(600)).await {
    ///     Ok(blocked) => println!("blocked for {blocked:?}"),
    ///     Err(redkit::Error::UnsupportedOption { algorithm, .. }) => println!("{algorithm:?} cannot block"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn block_for<C: ConnectionLike>(
        &self,
        conn: &mut C,
        key: &LimitKey,
        block: Duration,
    ) -> Result<Duration> {
        let reason = match self {
            Self::Fixed(l) => return l.block_for(conn, key, block).await,
            Self::FixedGrouped(l) => return l.limiter().block_for(conn, key, block).await,
            Self::FixedLeased(l) => return l.block_for(conn, key, block).await,
            Self::Gcra(l) => return l.block_for(conn, key, block).await,
            Self::GcraLeased(l) => return l.block_for(conn, key, block).await,
            Self::Aligned(_) | Self::AlignedGrouped(_) => {
                "a counter per window aligned to the clock cannot hold a block across windows"
            }
            Self::Sliding(_) | Self::SlidingLeased(_) => {
                "a count weighted down over time cannot hold a client out for a set time"
            }
        };
        Err(Error::UnsupportedOption {
            policy: self.name().to_owned(),
            option: "block_for",
            algorithm: self.algorithm(),
            reason,
        })
    }
}

// By hand: the variants come from the registry above.
#[allow(clippy::derivable_impls)]
impl Default for Algorithm {
    fn default() -> Self {
        Self::FixedWindow
    }
}

/// The synchronous part of [`RateLimiter`], object safe: what [`Limiter`]'s accessors
/// dispatch to in one place.
trait Dispatch {
    fn name(&self) -> &str;
    fn rate(&self) -> &Rate;
    fn prefix(&self) -> &str;
    fn limit(&self) -> u32;
    fn window(&self) -> Duration;
    fn redis_key(&self, key: &LimitKey) -> String;
    fn deny_cache(&self) -> Option<&DenyCache>;
    fn is_grouped(&self) -> bool;
    fn answer_locally(&self, key: &LimitKey) -> Option<Decision>;
}

impl<L: RateLimiter> Dispatch for L {
    fn name(&self) -> &str {
        RateLimiter::name(self)
    }
    fn rate(&self) -> &Rate {
        RateLimiter::rate(self)
    }
    fn prefix(&self) -> &str {
        RateLimiter::prefix(self)
    }
    fn limit(&self) -> u32 {
        RateLimiter::limit(self)
    }
    fn window(&self) -> Duration {
        RateLimiter::window(self)
    }
    fn redis_key(&self, key: &LimitKey) -> String {
        RateLimiter::redis_key(self, key)
    }
    fn deny_cache(&self) -> Option<&DenyCache> {
        RateLimiter::deny_cache(self)
    }
    fn is_grouped(&self) -> bool {
        Hooks::is_grouped(self)
    }
    fn answer_locally(&self, key: &LimitKey) -> Option<Decision> {
        Hooks::answer_locally(self, key)
    }
}

impl Limiter {
    /// The limiter's name.
    ///
    /// ```
    /// use redkit::rate_limit::{Gcra, Limiter, Rate};
    /// let l: Limiter = Gcra::new("api", Rate::per_second(redkit::nonzero!(10)))?.into();
    /// assert_eq!(l.name(), "api");
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        self.inner().name()
    }

    /// The rate the limiter was built with.
    ///
    /// ```
    /// use redkit::rate_limit::{Gcra, Limiter, Rate};
    /// let l: Limiter = Gcra::new("api", Rate::per_second(redkit::nonzero!(10)))?.into();
    /// assert_eq!(l.rate(), &Rate::per_second(redkit::nonzero!(10)));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn rate(&self) -> &Rate {
        self.inner().rate()
    }

    /// The key prefix.
    ///
    /// ```
    /// use redkit::rate_limit::{FixedWindow, Limiter, Rate};
    /// let l: Limiter = FixedWindow::new("api", Rate::per_second(redkit::nonzero!(10)))?.into();
    /// assert_eq!(l.prefix(), FixedWindow::DEFAULT_PREFIX);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn prefix(&self) -> &str {
        self.inner().prefix()
    }

    /// The most units that pass at once: the limit of a window, or GCRA's burst.
    ///
    /// ```
    /// use redkit::rate_limit::{Gcra, Limiter, Rate};
    /// let burst = redkit::nonzero!(25);
    /// let l: Limiter = Gcra::bursting("api", Rate::per_second(redkit::nonzero!(10)), burst)?.into();
    /// assert_eq!(l.limit(), 25);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn limit(&self) -> u32 {
        self.inner().limit()
    }

    /// The time in which [`limit`](Self::limit) units are granted: the window, or for GCRA
    /// the time a bucket takes to refill from empty (emission interval x burst).
    ///
    /// ```
    /// # use std::time::Duration;
    /// use redkit::rate_limit::{Gcra, Limiter, Rate};
    /// let burst = redkit::nonzero!(20);
    /// let l: Limiter = Gcra::bursting("api", Rate::per_second(redkit::nonzero!(10)), burst)?.into();
    /// assert_eq!(l.window(), Duration::from_secs(2));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn window(&self) -> Duration {
        self.inner().window()
    }

    /// The Redis key holding `key`'s state.
    ///
    /// ```
    /// use redkit::rate_limit::{LimitKey, Limiter, Rate, SlidingWindow};
    /// let l: Limiter = SlidingWindow::new("api", Rate::per_second(redkit::nonzero!(10)))?.into();
    /// assert_eq!(l.redis_key(&LimitKey::text("a")?), "redkit:sw:api:{k:a}");
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn redis_key(&self, key: &LimitKey) -> String {
        self.inner().redis_key(key)
    }

    /// The deny cache this limiter answers from, when one is attached (fixed window and
    /// GCRA; the sliding window always asks Redis: its refusals can end before the
    /// retry-after it reports).
    ///
    /// ```
    /// use redkit::rate_limit::{DenyCache, FixedWindow, Limiter, Rate};
    /// let fixed = FixedWindow::new("api", Rate::per_second(redkit::nonzero!(10)))?;
    /// let l: Limiter = fixed.with_deny_cache(DenyCache::new(1000)?).into();
    /// assert!(l.deny_cache().is_some());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn deny_cache(&self) -> Option<&DenyCache> {
        self.inner().deny_cache()
    }

    /// Whether concurrent checks are grouped (see [`Grouped`]).
    #[cfg_attr(not(feature = "tower"), allow(dead_code))]
    pub(crate) fn is_grouped(&self) -> bool {
        self.inner().is_grouped()
    }

    /// A one-unit check answered in process, when the algorithm can (see
    /// [`Hooks::answer_locally`]).
    #[cfg_attr(not(feature = "tower"), allow(dead_code))]
    pub(crate) fn answer_locally(&self, key: &LimitKey) -> Option<Decision> {
        self.inner().answer_locally(key)
    }

    /// Counts one unit for `key`. See [`check_n`](Self::check_n).
    ///
    /// ```no_run
    /// # async fn run(l: redkit::rate_limit::Limiter, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// let d = l.check(&mut conn, &redkit::rate_limit::LimitKey::text("user-42")?).await?;
    /// # let _ = d; Ok(()) }
    /// ```
    pub async fn check<C: ConnectionLike>(&self, conn: &mut C, key: &LimitKey) -> Result<Decision> {
        self.check_n(conn, key, NonZeroU32::MIN).await
    }

    /// Whether `other` is the same algorithm with the same rate (names and prefixes aside).
    #[cfg_attr(not(feature = "tower"), allow(dead_code))]
    pub(crate) fn same_config(&self, other: &Self) -> bool {
        self.algorithm() == other.algorithm()
            && self.rate() == other.rate()
            && self.limit() == other.limit()
    }
}

/// Any algorithm is a [`RateLimiter`] too, so code generic over the trait (and
/// [`check_within`](RateLimiter::check_within)) takes a [`Limiter`] as well.
impl RateLimiter for Limiter {
    delegate_rate_limiter!(Limiter, deny_cache, limit, window);
}

impl Hooks for Limiter {
    fn attach_deny_cache(self, cache: DenyCache) -> Self {
        Limiter::attach_deny_cache(self, cache)
    }

    fn is_grouped(&self) -> bool {
        Limiter::is_grouped(self)
    }

    fn answer_locally(&self, key: &LimitKey) -> Option<Decision> {
        Limiter::answer_locally(self, key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn each(rate: Rate) -> Vec<Limiter> {
        [
            Algorithm::FixedWindow,
            Algorithm::Gcra,
            Algorithm::SlidingWindow,
        ]
        .into_iter()
        .map(|a| Limiter::new(a, "t", rate).unwrap())
        .collect()
    }

    #[test]
    fn every_algorithm_is_built_from_its_name_and_answers_as_itself() {
        let rate = Rate::new(crate::nonzero!(4), Duration::from_secs(2)).unwrap();
        let key = LimitKey::text("u").unwrap();
        let prefixes = ["redkit:rl", "redkit:gcra", "redkit:sw"];
        for (l, prefix) in each(rate).into_iter().zip(prefixes) {
            assert_eq!(l.name(), "t");
            assert_eq!(*l.rate(), rate);
            assert_eq!(l.prefix(), prefix);
            assert_eq!(l.limit(), 4);
            assert_eq!(l.window(), Duration::from_secs(2));
            assert_eq!(l.redis_key(&key), format!("{prefix}:t:{{k:u}}"));
            assert!(l.deny_cache().is_none() && !l.is_grouped());
            let moved = l.clone().with_prefix(Prefix::new("p").unwrap());
            assert_eq!(moved.redis_key(&key), "p:t:{k:u}");
            assert_eq!(moved.algorithm(), l.algorithm());
            assert!(moved.same_config(&l));
        }
    }

    #[test]
    fn as_a_rate_limiter_it_answers_as_its_algorithm() {
        // GCRA's window is its bucket (interval x burst), not the rate's period.
        let rate = Rate::new(crate::nonzero!(4), Duration::from_secs(2)).unwrap();
        let gcra = Gcra::bursting("g", rate, crate::nonzero!(6)).unwrap();
        let cache = DenyCache::new(8).unwrap();
        let l: Limiter = gcra.clone().with_deny_cache(cache).into();
        assert_eq!(RateLimiter::window(&l), RateLimiter::window(&gcra));
        assert_eq!(RateLimiter::window(&l), Duration::from_secs(3));
        assert_eq!(RateLimiter::limit(&l), 6);
        assert!(RateLimiter::deny_cache(&l).is_some());
        assert_eq!(RateLimiter::name(&l), "g");
        assert_eq!(RateLimiter::prefix(&l), "redkit:gcra");
        assert!(!Hooks::is_grouped(&l));
        let fixed: Limiter = FixedWindow::new("f", Rate::per_second(crate::nonzero!(3)))
            .unwrap()
            .into();
        let fixed = Hooks::attach_deny_cache(fixed, DenyCache::new(8).unwrap());
        assert!(RateLimiter::deny_cache(&fixed).is_some());
        assert_eq!(RateLimiter::window(&fixed), Duration::from_secs(1));
    }

    #[test]
    fn a_deny_cache_attaches_where_the_algorithm_has_one() {
        let cache = DenyCache::new(8).unwrap();
        let attached: Vec<bool> = each(Rate::per_second(crate::nonzero!(1)))
            .into_iter()
            .map(|l| l.attach_deny_cache(cache.clone()).deny_cache().is_some())
            .collect();
        assert_eq!(attached, [true, true, false]);
    }

    #[test]
    fn same_config_compares_algorithm_and_rate() {
        let one = Rate::per_second(crate::nonzero!(1));
        let [f, g, s] = <[Limiter; 3]>::try_from(each(one)).unwrap();
        assert!(!f.same_config(&g) && !f.same_config(&s) && !g.same_config(&s));
        let g2: Limiter = Gcra::bursting("x", one, crate::nonzero!(2)).unwrap().into();
        assert!(!g.same_config(&g2));
        let f2 = Limiter::new(
            Algorithm::FixedWindow,
            "x",
            Rate::per_second(crate::nonzero!(2)),
        )
        .unwrap();
        assert!(!f.same_config(&f2));
    }

    #[test]
    fn algorithm_names_in_configuration() {
        for (a, name) in [
            (Algorithm::FixedWindow, "\"fixed_window\""),
            (Algorithm::Gcra, "\"gcra\""),
            (Algorithm::SlidingWindow, "\"sliding_window\""),
        ] {
            assert_eq!(serde_json::to_string(&a).unwrap(), name);
            assert_eq!(serde_json::from_str::<Algorithm>(name).unwrap(), a);
        }
    }
}
