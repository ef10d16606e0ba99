//! [`Grouped`]: a fixed window (either kind) whose concurrent checks are settled together.

use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;

use redis::aio::ConnectionLike;

use super::queue::WindowGroups;
use super::{AlignedWindow, FixedWindow, Window, WindowKind};
use crate::error::Result;
use crate::group_commit::GroupCommit;
use crate::keys::Prefix;
use crate::rate_limit::rate_limiter::{delegate_rate_limiter, sealed::Hooks, RateLimiter};
use crate::rate_limit::{Decision, DenyCache, LimitKey};

/// A fixed-window limiter with **group commit**: concurrent checks through it (or any clone
/// of it) are coalesced, each still on its own counter. Built by
/// [`Window::grouped`] (or [`Grouped::new`]) from a [`FixedWindow`](super::FixedWindow) or
/// an [`AlignedWindow`](super::AlignedWindow): the two kinds with a group script.
///
/// A check alone goes straight through (the ordinary call, no timer, no added latency);
/// checks arriving while [`max_in_flight`](GroupCommit::max_in_flight) calls are in flight
/// queue up, and when one returns the first of them sends ONE script call
/// (`lua/fixed_window_group.v3.lua`; aligned to the clock
/// `lua/fixed_window_aligned_group.v4.lua`) settling the next
/// [`max_batch`](GroupCommit::max_batch) in arrival order: each gets the decision it would
/// have got alone (the script runs `fixed_window.v9`'s, or `fixed_window_aligned.v3`'s,
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
/// Its checks (`check`, `check_n`, `check_within`), `reset` and accessors (`name`, `limit`,
/// `redis_key`, ...) are [`RateLimiter`]'s; the accessors are also the
/// [`limiter`](Self::limiter)'s. Configure the window (`with_prefix`, `with_deny_cache`,
/// `with_manager`), then group it: one order, so no setter's effect depends on it.
///
/// ```no_run
/// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
/// use redkit::rate_limit::{FixedWindow, LimitKey, Rate, RateLimiter};
/// use redkit::GroupCommit;
/// let limiter = FixedWindow::new("api", Rate::per_minute(redkit::nonzero!(100)))?.grouped(GroupCommit::for_checks());
/// let decision = limiter.check(&mut conn, &LimitKey::text("user-42")?).await?;
/// # let _ = decision; Ok(()) }
/// ```
///
/// Only the fixed windows group (GCRA and the sliding window have no group script):
///
/// ```compile_fail
/// use redkit::rate_limit::{Gcra, Rate};
/// let g = Gcra::new("api", Rate::per_second(redkit::nonzero!(10)))?.grouped(redkit::GroupCommit::for_checks());
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
    /// let l = Grouped::new(AlignedWindow::new("api", Rate::per_minute(redkit::nonzero!(100)))?, GroupCommit::for_checks());
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
    /// let l = FixedWindow::new("api", Rate::per_minute(redkit::nonzero!(100)))?.grouped(GroupCommit::for_checks());
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
    /// let l = FixedWindow::new("api", Rate::per_minute(redkit::nonzero!(100)))?.grouped(settings);
    /// assert_eq!(l.group_commit(), settings);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn group_commit(&self) -> GroupCommit {
        self.groups.settings()
    }

    /// The same with the limiter's keys under `prefix` (for [`Limiter::with_prefix`]): queues
    /// of its own, as when the prefix is set before grouping.
    pub(crate) fn with_prefix(self, prefix: Prefix) -> Self {
        let settings = self.group_commit();
        Self::new(self.limiter.with_prefix(prefix), settings)
    }

    /// [`RateLimiter::check_n`]: `cost` units for `key` as [`Window::check_n`] counts them,
    /// the call grouped with the concurrent checks of this limiter.
    pub(crate) async fn count<C: ConnectionLike>(
        &self,
        conn: &mut C,
        key: &LimitKey,
        cost: NonZeroU32,
    ) -> Result<Decision> {
        self.limiter
            .check_through(conn, key, cost.get(), Some(&self.groups))
            .await
    }

    /// [`RateLimiter::reset`]: [`Window::reset`].
    pub(crate) async fn forget<C: ConnectionLike>(
        &self,
        conn: &mut C,
        key: &LimitKey,
    ) -> Result<bool> {
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

impl RateLimiter for Grouped<FixedWindow> {
    delegate_rate_limiter!(via limiter: FixedWindow, Grouped<FixedWindow>);
}

impl RateLimiter for Grouped<AlignedWindow> {
    delegate_rate_limiter!(via limiter: AlignedWindow, Grouped<AlignedWindow>);
}

impl<K: WindowKind> Hooks for Grouped<Window<K>> {
    fn attach_deny_cache(self, cache: DenyCache) -> Self {
        Self {
            limiter: self.limiter.with_deny_cache(cache),
            ..self
        }
    }

    fn is_grouped(&self) -> bool {
        true
    }

    /// From a refusal the deny cache holds.
    fn answer_locally(&self, key: &LimitKey) -> Option<Decision> {
        self.limiter.cached_refusal(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate_limit::{AlignedWindow, FixedWindow};

    #[test]
    fn each_kind_groups_with_its_own_script_and_its_own_queues() {
        let rate = crate::rate_limit::Rate::per_minute(crate::nonzero!(100));
        let settings = GroupCommit::for_checks();
        let cache = DenyCache::new(8).unwrap();
        let fixed = FixedWindow::new("t", rate)
            .unwrap()
            .with_prefix(Prefix::new("p").unwrap())
            .grouped(settings);
        let k = LimitKey::text("u").unwrap();
        assert_eq!(fixed.redis_key(&k), "p:t:{k:u}");
        let cached = Hooks::attach_deny_cache(fixed.clone(), cache);
        assert!(cached.deny_cache().is_some() && fixed.deny_cache().is_none());
        assert!(
            Arc::ptr_eq(&cached.groups, &fixed.groups),
            "the same queues"
        );
        // A new prefix: queues of its own.
        let moved = fixed.clone().with_prefix(Prefix::new("q").unwrap());
        assert!(!Arc::ptr_eq(&fixed.groups, &moved.groups));
        assert_eq!(moved.group_commit(), settings);
        let aligned = AlignedWindow::new("t", rate).unwrap().grouped(settings);
        assert_eq!(
            aligned.groups.script().id().to_string(),
            "fixed_window_aligned_group.v4"
        );
        assert_eq!(
            fixed.groups.script().id().to_string(),
            "fixed_window_group.v3"
        );
        assert!(Hooks::is_grouped(&aligned));
    }
}
