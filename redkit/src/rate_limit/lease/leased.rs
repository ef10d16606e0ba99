//! [`Leased`]: a limiter answering most checks of a hot key from quota leased in process.

use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;

use self::sealed::LeaseTarget;
use super::flight::Turn;
use super::held::{Ask, Leases, Local};
use super::settings::QuotaLease;
use crate::error::Result;
use crate::keys::Prefix;
use crate::rate_limit::rate_limiter::sealed::Hooks;
use crate::rate_limit::{Decision, DenyCache, LimitKey};

/// Not nameable outside the crate: the bound of [`Leased`]'s methods.
pub(crate) mod sealed {
    use std::future::Future;
    use std::num::NonZeroU32;

    use redis::aio::ConnectionLike;

    use crate::error::Result;
    use crate::keys::Prefix;
    use crate::rate_limit::lease::LeaseScript;
    use crate::rate_limit::rate_limiter::RateLimiter;
    use crate::rate_limit::{Decision, LimitKey};
    use crate::script::ScriptManager;

    /// What a limiter gives [`Leased`]: its lease script and what the calls need beside
    /// [`RateLimiter`]'s accessors. Implemented next to each limiter that leases; not nameable
    /// outside the crate (a sealed bound of [`Leased`]'s methods).
    #[allow(unreachable_pub)]
    pub trait LeaseTarget: RateLimiter + Clone {
        /// The script of a lease call.
        const SCRIPT: LeaseScript;
        /// The manager the lease calls run through.
        fn lease_manager(&self) -> &ScriptManager;
        /// The same limiter with keys under `prefix`.
        fn prefixed(self, prefix: Prefix) -> Self;
        /// The limiter's own check, without leasing (a cost above the limit).
        fn check_unleased<C: ConnectionLike>(
            &self,
            conn: &mut C,
            key: &LimitKey,
            cost: NonZeroU32,
        ) -> impl Future<Output = Result<Decision>>;
        /// The limiter's own reset.
        fn reset_unleased<C: ConnectionLike>(
            &self,
            conn: &mut C,
            key: &LimitKey,
        ) -> impl Future<Output = Result<bool>>;
    }

    /// A limiter whose counter can hold a block: the bound of [`Leased::block_for`](super::Leased::block_for).
    #[allow(unreachable_pub)]
    pub trait BlockTarget {
        /// The limiter's own `block_for`.
        fn block_counter<C: ConnectionLike>(
            &self,
            conn: &mut C,
            key: &LimitKey,
            block: std::time::Duration,
        ) -> impl Future<Output = Result<std::time::Duration>>;
    }

    /// The limiters whose `block_for` a lease wraps.
    macro_rules! block_target {
        ($($ty:ty),+) => {$(
            impl BlockTarget for $ty {
                fn block_counter<C: ConnectionLike>(
                    &self,
                    conn: &mut C,
                    key: &LimitKey,
                    block: std::time::Duration,
                ) -> impl Future<Output = Result<std::time::Duration>> {
                    self.block_for(conn, key, block)
                }
            }
        )+};
    }
    block_target!(crate::rate_limit::FixedWindow, crate::rate_limit::Gcra);
}

/// Gives a limiter type its public `leased` (documented by the attributes given), implements
/// [`LeaseTarget`] for it with its public accessors, and [`RateLimiter`] for its `Leased`
/// (checks and reset leased, the rest the limiter's).
macro_rules! lease_target {
    ($(#[$doc:meta])* $ty:ty => $script:expr) => {
        impl $ty {
            $(#[$doc])*
            pub fn leased(
                self,
                lease: $crate::rate_limit::QuotaLease,
            ) -> $crate::rate_limit::Leased<Self> {
                $crate::rate_limit::Leased::new(self, lease)
            }
        }

        impl $crate::rate_limit::lease::LeaseTarget for $ty {
            const SCRIPT: $crate::rate_limit::lease::LeaseScript = $script;

            fn lease_manager(&self) -> &$crate::ScriptManager {
                self.manager()
            }

            fn prefixed(self, prefix: $crate::keys::Prefix) -> Self {
                self.with_prefix(prefix)
            }

            fn check_unleased<C: redis::aio::ConnectionLike>(
                &self,
                conn: &mut C,
                key: &$crate::rate_limit::LimitKey,
                cost: std::num::NonZeroU32,
            ) -> impl std::future::Future<Output = $crate::Result<$crate::rate_limit::Decision>> {
                self.check_n(conn, key, cost)
            }

            fn reset_unleased<C: redis::aio::ConnectionLike>(
                &self,
                conn: &mut C,
                key: &$crate::rate_limit::LimitKey,
            ) -> impl std::future::Future<Output = $crate::Result<bool>> {
                self.reset(conn, key)
            }
        }

        impl $crate::rate_limit::RateLimiter for $crate::rate_limit::Leased<$ty> {
            delegate_rate_limiter!(via limiter: $ty, $crate::rate_limit::Leased<$ty>);
        }
    };
}
pub(crate) use lease_target;

/// A limiter answering checks from **leased quota** (a [`FixedWindow`](crate::rate_limit::FixedWindow),
/// a [`SlidingWindow`](crate::rate_limit::SlidingWindow) or a [`Gcra`](crate::rate_limit::Gcra)):
/// a check that finds no units held here takes up to [`max_units`](QuotaLease::max_units)
/// units of the key's current window (GCRA: of its bucket) from Redis in one call
/// (`lua/fixed_window_lease.v2.lua`, `lua/sliding_window_lease.v1.lua`,
/// `lua/gcra_lease.v1.lua`; counted there at once: the sum over every instance never passes
/// the limit) and answers the key's next checks from them in process, with no round trip,
/// until they are spent or the window they were counted in ends (GCRA: each unit until it
/// stops conforming, below). How leases grow and what they cost (units unused at a
/// window's end are not admitted by anyone): [`QuotaLease`]. Checks of a cost above the limit,
/// the [`limiter`](Self::limiter)'s batches and [`reset`](crate::rate_limit::RateLimiter::reset) are as without
/// leasing. A fixed window's or GCRA's [`DenyCache`] still answers known-limited clients. Built by
/// [`FixedWindow::leased`](crate::rate_limit::Window::leased),
/// [`SlidingWindow::leased`](crate::rate_limit::SlidingWindow::leased) and
/// [`Gcra::leased`](crate::rate_limit::Gcra::leased) (or [`Leased::new`]).
///
/// **Sliding windows: exact.** A sliding window's lease counts its units in the current
/// window's counter at once, so every estimate Redis makes from then on (the previous
/// window's count weighted by the time left, plus the current count) counts them, used or
/// not; the instance uses them only until that window ends (measured from before the call
/// was sent, so never after the server's end). At any instant the units actually used are a
/// part of the units Redis counted, in the same windows, and the weight of the previous
/// window only falls as its window slides out: the estimate over what was used at each
/// admission is at most the estimate Redis granted under. Never over the limit, as for one
/// in-process sliding window. A unit is never carried into the next window, where it would
/// weigh less than 1.
///
/// **GCRA: exact.** A GCRA lease moves the bucket's TAT past every unit it grants at once: with
/// `T` the emission interval, `B` the burst and `base = max(TAT, now)` as the call found them,
/// unit `j` takes the slot `base + j x T`, as `j` checks in a row would. A unit conforms while
/// its slot is at most `B x T` ahead of the clock (true from the grant on) and at least `T`
/// ahead, so unit `j` is used only until `base + (j - 1) x T` (the call's own check takes the
/// first `cost` units at once; each next unit held ends one interval after the one before,
/// measured from before the call was sent). Every unit admitted anywhere then has a slot of
/// its own, at least `T` after the last, at most `B x T` and at least `T` after the instant it
/// was admitted: the units admitted in any interval `[s, e]` have slots in
/// `[s + T, e + B x T]`, at most `B + (e - s) / T` of them, the bound of one in-process GCRA.
/// The price: units end one by one, so an instance checking a key below the rate sees part of
/// each lease end unused (admitted by nobody). A refusal is Redis's, and the deny cache keeps
/// it as GCRA's own check does.
///
/// Its checks (`check`, `check_n`, `check_within`), `reset` and accessors (`name`, `limit`,
/// `redis_key`, ...) are [`RateLimiter`](crate::rate_limit::RateLimiter)'s; the accessors are also the
/// [`limiter`](Self::limiter)'s. Configure the window (`with_prefix`, `with_deny_cache`,
/// `with_manager`), then lease: one order, so no setter's effect depends on it.
///
/// ```no_run
/// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
/// use redkit::rate_limit::{FixedWindow, LimitKey, QuotaLease, Rate, RateLimiter};
/// let limiter = FixedWindow::new("api", Rate::per_second(redkit::nonzero!(1_000)))?.leased(QuotaLease::new(32)?.instances(4)?);
/// let decision = limiter.check(&mut conn, &LimitKey::text("tenant-3")?).await?;
/// # let _ = decision; Ok(()) }
/// ```
///
/// Leasing needs windows that start at the first hit (the lease script's), or GCRA: windows
/// aligned to the clock do not lease, and a leased limiter is not grouped (its checks are answered
/// in process):
///
/// ```compile_fail
/// use redkit::rate_limit::{AlignedWindow, QuotaLease, Rate};
/// let l = AlignedWindow::new("api", Rate::per_second(redkit::nonzero!(10)))?.leased(QuotaLease::new(8)?);
/// # Ok::<(), redkit::Error>(())
/// ```
///
/// ```compile_fail
/// use redkit::rate_limit::{AlignedWindow, Leased, QuotaLease, Rate};
/// let l = Leased::new(AlignedWindow::new("api", Rate::per_second(redkit::nonzero!(10)))?, QuotaLease::new(8)?);
/// # Ok::<(), redkit::Error>(())
/// ```
///
/// ```compile_fail
/// use redkit::rate_limit::{FixedWindow, QuotaLease, Rate};
/// let l = FixedWindow::new("api", Rate::per_second(redkit::nonzero!(10)))?
///     .grouped(redkit::GroupCommit::for_checks())
///     .leased(QuotaLease::new(8)?);
/// # Ok::<(), redkit::Error>(())
/// ```
#[derive(Clone)]
pub struct Leased<W> {
    limiter: W,
    /// The units held here, per client (shared by clones).
    leases: Arc<Leases>,
}

impl<W: LeaseTarget> Leased<W> {
    /// `limiter` answering from leased quota with `lease`; the same as `limiter.leased(lease)`
    /// ([`FixedWindow::leased`](crate::rate_limit::Window::leased),
    /// [`SlidingWindow::leased`](crate::rate_limit::SlidingWindow::leased)).
    ///
    /// ```
    /// use redkit::rate_limit::{FixedWindow, Leased, QuotaLease, Rate, SlidingWindow};
    /// let fixed = Leased::new(FixedWindow::new("api", Rate::per_second(redkit::nonzero!(1_000)))?, QuotaLease::new(32)?);
    /// assert_eq!(fixed.lease(), QuotaLease::new(32)?);
    /// let sliding = Leased::new(SlidingWindow::new("api", Rate::per_second(redkit::nonzero!(1_000)))?, QuotaLease::new(32)?);
    /// assert_eq!(sliding.limiter().limit(), 1_000);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn new(limiter: W, lease: QuotaLease) -> Self {
        Self {
            limiter,
            leases: Leases::new(lease, W::SCRIPT),
        }
    }
}

impl<W> Leased<W> {
    /// The limiter whose quota is leased (its accessors, and its batch calls, which do not
    /// lease).
    ///
    /// ```
    /// use redkit::rate_limit::{FixedWindow, QuotaLease, Rate};
    /// let l = FixedWindow::new("api", Rate::per_second(redkit::nonzero!(1_000)))?.leased(QuotaLease::new(32)?);
    /// assert_eq!(l.limiter().limit(), 1_000);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn limiter(&self) -> &W {
        &self.limiter
    }

    /// The lease settings.
    ///
    /// ```
    /// use redkit::rate_limit::{FixedWindow, QuotaLease, Rate};
    /// let lease = QuotaLease::new(32)?.instances(4)?;
    /// let l = FixedWindow::new("api", Rate::per_second(redkit::nonzero!(1_000)))?.leased(lease);
    /// assert_eq!(l.lease(), lease);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn lease(&self) -> QuotaLease {
        self.leases.settings()
    }
}

impl<W: sealed::BlockTarget> Leased<W> {
    /// The limiter's own `block_for` ([`FixedWindow::block_for`](crate::rate_limit::Window::block_for), [`Gcra::block_for`](crate::rate_limit::Gcra::block_for)), and
    /// the units this process holds of `key` dropped: its next check goes to Redis and is
    /// refused. Other instances' leases stay usable until spent (at most a lease's units
    /// each). A lease call answered after the block (sent before it) can still bring back
    /// what it was granted before the block: at most one lease, as for another instance.
    ///
    /// Errors: as the limiter's `block_for` (on an error nothing held here is dropped).
    ///
    /// ```no_run
    /// # async fn run(l: redkit::rate_limit::Leased<redkit::rate_limit::Gcra>, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
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
        let blocked = self.limiter.block_counter(conn, key, block).await?;
        self.leases.forget(key.as_str());
        Ok(blocked)
    }
}

impl<W: LeaseTarget> Leased<W> {
    /// The same with the limiter's keys under `prefix` (for [`Limiter::with_prefix`]). Leases
    /// are held per client key, so the units held under the old prefix are not these: the
    /// new limiter holds none yet, as when the prefix is set before leasing.
    pub(crate) fn with_prefix(self, prefix: Prefix) -> Self {
        let lease = self.lease();
        Self::new(self.limiter.prefixed(prefix), lease)
    }

    /// [`RateLimiter::check_n`]: `cost` units for `key` from the units held here, else
    /// (unless the deny cache knows the client is limited) by one lease call. A cost above
    /// the limit is checked as without leasing (the limiter's own `check_n`).
    pub(crate) async fn count<C: ConnectionLike>(
        &self,
        conn: &mut C,
        key: &LimitKey,
        cost: NonZeroU32,
    ) -> Result<Decision> {
        if cost.get() > self.limiter.limit() {
            return self.limiter.check_unleased(conn, key, cost).await;
        }
        let redis_key = self.limiter.redis_key(key);
        let cost = cost.get();
        self.check_leased(conn, (key.as_str(), &redis_key), cost)
            .await
    }

    /// A check answered from leased quota: from the units held here, else (unless the deny
    /// cache knows the client is limited) by one lease call. One lease call per key is in
    /// flight at a time: a check that finds another on its way waits for it and looks again
    /// (taking its refusal when it asked at least as much); the next call asks for at least
    /// what the checks that waited need. After two waits a check asks on its own (a bounded
    /// wait, also near the limit where grants are small). A check that finds the units running
    /// low sends the next call while the others take what is left.
    async fn check_leased<C: ConnectionLike>(
        &self,
        conn: &mut C,
        (client, redis_key): (&str, &str),
        cost: u32,
    ) -> Result<Decision> {
        const MOST_WAITS: u32 = 2;
        let (leases, limiter) = (&self.leases, &self.limiter);
        let limit = limiter.limit();
        let cache = limiter.deny_cache();
        let (mut waits, mut demand) = (0, cost);
        let mut refill = false;
        let leader = loop {
            match leases.take_local(client, (limit, cost), cache) {
                Local::Taken(decision) | Local::Refused(decision) => return Ok(decision),
                Local::Refill(leader) => {
                    refill = true;
                    break Some(leader);
                }
                Local::Empty => {}
            }
            if let Some(decision) = cache.and_then(|c| c.lookup(redis_key, limit, cost)) {
                return Ok(decision);
            }
            match leases.join(client) {
                Turn::Lead(leader) => break Some(leader),
                Turn::Follow(_) if waits == MOST_WAITS => break None,
                Turn::Follow(flight) => {
                    flight.wait().await;
                    if let Some(refusal) = flight.refusal_for(cost) {
                        return Ok(refusal);
                    }
                    waits += 1;
                    demand = flight.followers().saturating_mul(cost).max(cost);
                }
            }
        };
        let sent = Instant::now();
        let granted = leases
            .lease(
                limiter.lease_manager(),
                conn,
                (client, redis_key),
                (limit, W::SCRIPT.span(limiter.window(), limit)),
                Ask {
                    cost,
                    demand,
                    cache: cache
                        .filter(|_| W::SCRIPT.keeps_refusals())
                        .map(DenyCache::generation),
                },
            )
            .await;
        let refused = match &granted {
            Ok(g) => matches!(g.decision, Decision::Limited { .. }),
            Err(_) => true,
        };
        if refill && refused {
            // A refill refused or failed: this check still has the units held here (its own
            // call is in flight, so it takes them without leading another).
            if let Local::Taken(decision) = leases.take_local(client, (limit, cost), None) {
                return Ok(decision);
            }
        }
        let granted = granted?;
        if let Some(cache) = cache {
            W::SCRIPT.remember(cache, redis_key, (sent, cost), &granted.decision);
        }
        if let (Some(leader), Decision::Limited { .. }) = (&leader, granted.decision) {
            leader.refused(cost, granted.decision);
        }
        Ok(granted.decision)
    }

    /// [`RateLimiter::reset`]: deletes `key`'s counter and forgets the units held here of it
    /// (the limiter's own `reset`).
    pub(crate) async fn forget<C: ConnectionLike>(
        &self,
        conn: &mut C,
        key: &LimitKey,
    ) -> Result<bool> {
        self.leases.forget(key.as_str());
        self.limiter.reset_unleased(conn, key).await
    }
}

/// Every leased limiter: the limiter's own deny cache (a fixed window's or GCRA's; a sliding window
/// keeps none), the leases kept.
impl<W: LeaseTarget> Hooks for Leased<W> {
    fn attach_deny_cache(self, cache: DenyCache) -> Self {
        Self {
            limiter: self.limiter.attach_deny_cache(cache),
            ..self
        }
    }

    /// From the units of a lease held here (never leading a refill: that is the round
    /// trip's; looked up by the client's key, so no counter key is built), else from a
    /// refusal the deny cache holds.
    fn answer_locally(&self, key: &LimitKey) -> Option<Decision> {
        let limit = self.limiter.limit();
        let cache = self.limiter.deny_cache();
        self.leases
            .take_held(key.as_str(), (limit, 1), cache)
            .or_else(|| cache?.lookup(&self.limiter.redis_key(key), limit, 1))
    }
}

impl<W: fmt::Debug> fmt::Debug for Leased<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leased")
            .field("limiter", &self.limiter)
            .field("lease", &self.leases.settings())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate_limit::rate_limiter::sealed::Hooks;
    use crate::rate_limit::{FixedWindow, Rate, RateLimiter};

    fn limiter() -> FixedWindow {
        FixedWindow::new("t", Rate::per_second(crate::nonzero!(10))).unwrap()
    }

    #[test]
    fn a_new_prefix_does_not_share_the_leases_of_the_old_one() {
        let leased = limiter().leased(QuotaLease::new(8).unwrap());
        let same = leased.clone();
        let moved = leased.clone().with_prefix(Prefix::new("other").unwrap());
        assert!(Arc::ptr_eq(&same.leases, &leased.leases));
        assert!(!Arc::ptr_eq(&moved.leases, &leased.leases));
        assert_eq!(moved.lease(), leased.lease());
    }

    #[test]
    fn the_middleware_answers_from_the_units_held_here_before_its_round_trip() {
        let leased = limiter().leased(QuotaLease::new(8).unwrap());
        let key = LimitKey::text("k").unwrap();
        assert!(
            Hooks::answer_locally(&leased, &key).is_none(),
            "nothing held: the round trip answers"
        );
        let until = Instant::now() + std::time::Duration::from_secs(60);
        leased.leases.hold(key.as_str(), 6, until);
        for _ in 0..3 {
            let decision = Hooks::answer_locally(&leased, &key).expect("answered in process");
            assert!(decision.is_allowed(), "{decision:?}");
        }
    }

    #[test]
    fn a_deny_cache_attached_later_keeps_the_leases() {
        let leased = limiter().leased(QuotaLease::new(8).unwrap());
        let cached = Hooks::attach_deny_cache(leased.clone(), DenyCache::new(8).unwrap());
        assert!(cached.deny_cache().is_some() && leased.deny_cache().is_none());
        assert!(Arc::ptr_eq(&cached.leases, &leased.leases));
    }
}
