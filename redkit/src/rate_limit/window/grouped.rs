//! [`Grouped`]: a fixed window (either kind) whose concurrent checks are settled together.

use std::fmt;
use std::sync::Arc;

use redis::aio::ConnectionLike;

use super::queue::WindowGroups;
use super::{Window, WindowKind};
use crate::error::Result;
use crate::group_commit::GroupCommit;
use crate::rate_limit::rate_limiter::{sealed::Hooks, RateLimiter};
use crate::rate_limit::{Decision, DenyCache, LimitKey, Limiter, Rate};
use crate::script::ScriptManager;

/// A fixed-window limiter with **group commit**: concurrent checks through it (or any clone
/// of it) are coalesced, each still on its own counter. Built by
/// [`Window::grouped`] (or [`Grouped::new`]) from a [`FixedWindow`](super::FixedWindow) or
/// an [`AlignedWindow`](super::AlignedWindow): the two kinds with a group script.
///
/// A check alone goes straight through (the ordinary call, no timer, no added latency);
/// checks arriving while [`max_in_flight`](GroupCommit::max_in_flight) calls are in flight
/// queue up, and when one returns the first of them sends ONE script call
/// (`lua/fixed_window_group.v2.lua`; aligned to the clock
/// `lua/fixed_window_aligned_group.v3.lua`) settling the next
/// [`max_batch`](GroupCommit::max_batch) in arrival order: each gets the decision it would
/// have got alone (the script runs `fixed_window.v8`'s, or `fixed_window_aligned.v2`'s,
/// steps per key). Under a flood the limiter then keeps up with a hand-written `INCR` +
/// `EXPIRE` script (measured in `docs/benchmarks.md`, "Group commit for the limiter").
///
/// The group's call uses the connection of the caller that leads it, so every caller of
/// one limiter must use connections to the same Redis deployment. If the call fails,
/// every check in it gets the error (a lost reply: each may have been counted, as for a
/// single check); if the leading caller's future is dropped while the call is in flight,
/// the others get [`Error::Interrupted`](crate::Error::Interrupted): where futures may be
/// dropped (a request whose client went away), run each check in a task of its own
/// (`tokio::spawn`), as the middleware (feature `tower`) does. On a Cluster the first group
/// whose keys span hash slots is refused by Redis before it runs (nothing counted); its
/// checks are then sent one by one and from then on groups are formed per hash slot. The
/// batch calls of the [`limiter`](Self::limiter) are never grouped.
///
/// The accessors (`name`, `limit`, `redis_key`, ...) are the [`limiter`](Self::limiter)'s,
/// and [`RateLimiter`]'s.
///
/// ```no_run
/// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
/// use redkit::rate_limit::{FixedWindow, LimitKey, Rate};
/// use redkit::GroupCommit;
/// let limiter = FixedWindow::new("api", Rate::per_minute(100)?)?.grouped(GroupCommit::for_checks());
/// let decision = limiter.check(&mut conn, &LimitKey::text("user-42")?).await?;
/// # let _ = decision; Ok(()) }
/// ```
///
/// Only the fixed windows group (GCRA and the sliding window have no group script):
///
/// ```compile_fail
/// use redkit::rate_limit::{Gcra, Rate};
/// let g = Gcra::new("api", Rate::per_second(10)?)?.grouped(redkit::GroupCommit::for_checks());
/// # Ok::<(), redkit::Error>(())
/// ```
#[derive(Clone)]
pub struct Grouped<W> {
    limiter: W,
    /// The queues (shared by clones).
    groups: Arc<WindowGroups>,
}

impl<K: WindowKind> Grouped<Window<K>> {
    /// `limiter` with group commit with `settings` ([`GroupCommit::for_checks()`] is the
    /// recommended one); the same as [`limiter.grouped(settings)`](Window::grouped).
    ///
    /// ```
    /// use redkit::rate_limit::{AlignedWindow, Grouped, Rate};
    /// use redkit::GroupCommit;
    /// let l = Grouped::new(AlignedWindow::new("api", Rate::per_minute(100)?)?, GroupCommit::for_checks());
    /// assert_eq!(l.group_commit(), GroupCommit::for_checks());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn new(limiter: Window<K>, settings: GroupCommit) -> Self {
        Self {
            limiter,
            groups: Arc::new(WindowGroups::new(settings, K::group_script())),
        }
    }

    /// The limiter whose checks are grouped (its accessors, and its batch calls, which are
    /// never grouped).
    ///
    /// ```
    /// use redkit::rate_limit::{FixedWindow, Rate};
    /// use redkit::GroupCommit;
    /// let l = FixedWindow::new("api", Rate::per_minute(100)?)?.grouped(GroupCommit::for_checks());
    /// assert_eq!((l.limiter().name(), l.limiter().limit()), ("api", 100));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn limiter(&self) -> &Window<K> {
        &self.limiter
    }

    /// The settings of group commit.
    ///
    /// ```
    /// use redkit::rate_limit::{FixedWindow, Rate};
    /// use redkit::GroupCommit;
    /// let settings = GroupCommit::new(64, 4)?;
    /// let l = FixedWindow::new("api", Rate::per_minute(100)?)?.grouped(settings);
    /// assert_eq!(l.group_commit(), settings);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn group_commit(&self) -> GroupCommit {
        self.groups.settings()
    }

    /// The same with the limiter's keys under `prefix` (see [`Window::with_prefix`]); its
    /// queues are its own (not shared with clones under the old prefix), as when the prefix
    /// is set before grouping.
    ///
    /// ```
    /// use redkit::rate_limit::{FixedWindow, LimitKey, Rate, RateLimiter};
    /// use redkit::GroupCommit;
    /// let l = FixedWindow::new("api", Rate::per_minute(100)?)?
    ///     .grouped(GroupCommit::for_checks())
    ///     .with_prefix("app:rl")?;
    /// assert_eq!(l.redis_key(&LimitKey::text("u")?), "app:rl:api:{k:u}");
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn with_prefix(self, prefix: &str) -> Result<Self> {
        let settings = self.group_commit();
        Ok(Self::new(self.limiter.with_prefix(prefix)?, settings))
    }

    /// The same answering known-limited clients from `cache` (see
    /// [`Window::with_deny_cache`]).
    ///
    /// ```
    /// use redkit::rate_limit::{DenyCache, FixedWindow, Rate, RateLimiter};
    /// use redkit::GroupCommit;
    /// let l = FixedWindow::new("api", Rate::per_minute(100)?)?
    ///     .grouped(GroupCommit::for_checks())
    ///     .with_deny_cache(DenyCache::new(1_000)?);
    /// assert!(l.deny_cache().is_some());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn with_deny_cache(mut self, cache: DenyCache) -> Self {
        self.limiter = self.limiter.with_deny_cache(cache);
        self
    }

    /// The same running its calls with `manager` (see [`Window::with_manager`]).
    ///
    /// ```
    /// use redkit::rate_limit::{FixedWindow, Rate};
    /// use redkit::{GroupCommit, ScriptManager};
    /// let l = FixedWindow::new("api", Rate::per_minute(100)?)?
    ///     .grouped(GroupCommit::for_checks())
    ///     .with_manager(ScriptManager::new());
    /// assert_eq!(l.limiter().manager().stats().noscript_fallbacks, 0);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn with_manager(mut self, manager: ScriptManager) -> Self {
        self.limiter = self.limiter.with_manager(manager);
        self
    }

    /// Counts one unit for `key`. See [`check_n`](Self::check_n).
    ///
    /// ```no_run
    /// # async fn run(l: redkit::rate_limit::Grouped<redkit::rate_limit::FixedWindow>, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// let d = l.check(&mut conn, &redkit::rate_limit::LimitKey::text("user-42")?).await?;
    /// # let _ = d; Ok(()) }
    /// ```
    pub async fn check<C: ConnectionLike>(&self, conn: &mut C, key: &LimitKey) -> Result<Decision> {
        self.check_n(conn, key, 1).await
    }

    /// Counts `cost` units for `key` as [`Window::check_n`] does, the call grouped with the
    /// concurrent checks of this limiter.
    ///
    /// ```no_run
    /// # async fn run(l: redkit::rate_limit::Grouped<redkit::rate_limit::AlignedWindow>, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// let d = l.check_n(&mut conn, &redkit::rate_limit::LimitKey::text("user-42")?, 3).await?;
    /// # let _ = d; Ok(()) }
    /// ```
    pub async fn check_n<C: ConnectionLike>(
        &self,
        conn: &mut C,
        key: &LimitKey,
        cost: u32,
    ) -> Result<Decision> {
        self.limiter
            .check_through(conn, key, cost, Some(&self.groups))
            .await
    }

    /// Deletes `key`'s counter (see [`Window::reset`]).
    ///
    /// ```no_run
    /// # async fn run(l: redkit::rate_limit::Grouped<redkit::rate_limit::FixedWindow>, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// l.reset(&mut conn, &redkit::rate_limit::LimitKey::text("user-42")?).await?;
    /// # Ok(()) }
    /// ```
    pub async fn reset<C: ConnectionLike>(&self, conn: &mut C, key: &LimitKey) -> Result<bool> {
        self.limiter.reset(conn, key).await
    }
}

impl<K: WindowKind> fmt::Debug for Grouped<Window<K>> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Grouped")
            .field("limiter", &self.limiter)
            .field("group_commit", &self.group_commit())
            .finish()
    }
}

impl<K: WindowKind> RateLimiter for Grouped<Window<K>> {
    fn name(&self) -> &str {
        self.limiter.name()
    }

    fn rate(&self) -> &Rate {
        self.limiter.rate()
    }

    fn prefix(&self) -> &str {
        self.limiter.prefix()
    }

    fn redis_key(&self, key: &LimitKey) -> String {
        self.limiter.redis_key(key)
    }

    fn deny_cache(&self) -> Option<&DenyCache> {
        self.limiter.deny_cache()
    }

    fn check_n<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        key: &LimitKey,
        cost: u32,
    ) -> impl std::future::Future<Output = Result<Decision>> + Send {
        Grouped::check_n(self, conn, key, cost)
    }

    fn reset<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        key: &LimitKey,
    ) -> impl std::future::Future<Output = Result<bool>> + Send {
        Grouped::reset(self, conn, key)
    }
}

impl<K: WindowKind> Hooks for Grouped<Window<K>> {
    fn attach_deny_cache(self, cache: DenyCache) -> Self {
        self.with_deny_cache(cache)
    }

    fn is_grouped(&self) -> bool {
        true
    }

    /// From a refusal the deny cache holds.
    fn answer_locally(&self, key: &LimitKey) -> Option<Decision> {
        self.limiter.cached_refusal(key)
    }
}

impl<K: WindowKind> From<Grouped<Window<K>>> for Limiter {
    fn from(grouped: Grouped<Window<K>>) -> Self {
        K::grouped(grouped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate_limit::{AlignedWindow, FixedWindow};

    #[test]
    fn setters_have_the_same_effect_in_any_order() {
        let rate = Rate::per_minute(100).unwrap();
        let settings = GroupCommit::for_checks();
        let cache = DenyCache::new(8).unwrap();
        let before = FixedWindow::new("t", rate)
            .unwrap()
            .with_prefix("p")
            .unwrap()
            .with_deny_cache(cache.clone())
            .grouped(settings);
        let after = FixedWindow::new("t", rate)
            .unwrap()
            .grouped(settings)
            .with_deny_cache(cache)
            .with_prefix("p")
            .unwrap();
        assert_eq!(format!("{before:?}"), format!("{after:?}"));
        let k = LimitKey::text("u").unwrap();
        assert_eq!(before.redis_key(&k), "p:t:{k:u}");
        // A new prefix: queues of its own.
        let moved = before.clone().with_prefix("q").unwrap();
        assert!(Arc::ptr_eq(&before.groups, &before.clone().groups));
        assert!(!Arc::ptr_eq(&before.groups, &moved.groups));
        let aligned = AlignedWindow::new("t", rate).unwrap().grouped(settings);
        assert_eq!(
            aligned.groups.script().id().to_string(),
            "fixed_window_aligned_group.v3"
        );
        assert_eq!(
            before.groups.script().id().to_string(),
            "fixed_window_group.v2"
        );
        assert!(Hooks::is_grouped(&aligned));
    }
}
