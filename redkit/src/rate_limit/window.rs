//! [`FixedWindow`]: one atomic script call per check.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use redis::Value;

use super::aligned::Slot;
use super::decision::Decision;
use super::deny_cache::DenyCache;
use super::flight::Turn;
use super::key::LimitKey;
use super::key_space::{delete, KeySpace};
use super::lease::{Ask, Leases, Local, QuotaLease};
use super::rate::Rate;
use super::rate_limiter::{delegate_rate_limiter, push_cost, sealed::Hooks, RateLimiter};
use super::window_group::{GroupSender, WindowGroups};
use crate::error::{Error, Result};
use crate::group_commit::GroupCommit;
use crate::script::{embedded, Call, CallOutcome, Script, ScriptManager};

mod reply;

/// A fixed-window rate limiter shared by every instance of a service.
///
/// Each check is one `EVALSHA` of `lua/fixed_window.v8.lua`, which atomically reads the
/// counter's TTL, adds the cost if it fits under the limit (`INCRBY`, undone when it does
/// not), gives a new counter (or one found without a TTL) its expiry, and answers the count
/// and the remaining milliseconds (PTTL).
/// Limit, remaining and reset all come from that one round trip; time comes from Redis.
///
/// **Window semantics.** A window starts at the first counted hit of a key and lasts
/// `window`; then the key expires and the next hit starts a new window (the classic
/// `INCR` + `EXPIRE` design, done atomically). Windows are not aligned to the clock, and a
/// client can get up to `2 x limit` through in a short span around a window edge (`limit` at
/// the end of one window and `limit` again at the start of the next). Requests that are
/// limited are not counted, so a client that keeps retrying is not locked out longer.
///
/// **Windows aligned to the clock** ([`aligned_to_clock`](Self::aligned_to_clock)): every
/// client's windows start at multiples of `window` since the Unix epoch (by the calling
/// process's clock), each in its own key, and a check is ONE `INCRBY` on the server
/// (`lua/fixed_window_aligned.v2.lua`): about the cost of the hand-written `INCR` + `EXPIRE`
/// script, against two commands (PTTL + INCRBY) for windows that start at the first hit.
/// The reset is the window's end by the caller's clock, so it needs the clocks of your
/// service's instances to agree (NTP): a clock that is off by `d` moves that instance's
/// window edges by `d`.
///
/// **Keys.** `<prefix>:<name>:{<canonical key>}` (prefix [`DEFAULT_PREFIX`](Self::DEFAULT_PREFIX)
/// unless [`with_prefix`](Self::with_prefix) chooses another): limiters with different names never share a
/// counter, and the client part is the hash tag, so every call is a single-slot call on a
/// Cluster. Cheap to clone.
///
/// ```no_run
/// # async fn run() -> redkit::Result<()> {
/// use std::time::Duration;
/// use redkit::rate_limit::{FixedWindow, LimitKey, Rate};
///
/// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
/// let mut conn = client.get_multiplexed_async_connection().await?;
/// let limiter = FixedWindow::new("api", Rate::per_minute(100)?)?;
/// let decision = limiter.check(&mut conn, &LimitKey::ip([192, 0, 2, 1].into())).await?;
/// if !decision.is_allowed() {
///     println!("retry after {:?}", decision.retry_after());
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct FixedWindow {
    keys: KeySpace,
    /// The rate, its period in whole milliseconds.
    rate: Rate,
    limit: u32,
    window_ms: u64,
    /// `fixed_window.v8` (windows from the first hit) or, aligned to the clock,
    /// `fixed_window_aligned.v2`.
    script: &'static Script,
    /// `fixed_window_aligned.v2`, resolved up front.
    aligned_script: &'static Script,
    aligned: bool,
    manager: ScriptManager,
    deny_cache: Option<DenyCache>,
    /// The script of a group: `fixed_window_group.v2`, or aligned to the clock
    /// `fixed_window_aligned_group.v3`.
    group_script: &'static Script,
    /// `fixed_window_aligned_group.v3`, resolved up front.
    aligned_group_script: &'static Script,
    /// The queues of group commit, when enabled (shared by clones).
    groups: Option<Arc<WindowGroups>>,
    /// Leased quota, when enabled (shared by clones).
    leases: Option<Arc<Leases>>,
}

impl FixedWindow {
    /// Prefix of every key unless [`with_prefix`](Self::with_prefix) chooses another.
    ///
    /// ```
    /// use redkit::rate_limit::{FixedWindow, LimitKey, Rate};
    /// let limiter = FixedWindow::new("api", Rate::per_second(10)?)?;
    /// assert_eq!(limiter.prefix(), FixedWindow::DEFAULT_PREFIX);
    /// assert_eq!(limiter.redis_key(&LimitKey::text("u")?), "redkit:rl:api:{k:u}");
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub const DEFAULT_PREFIX: &'static str = "redkit:rl";
    /// The shortest window: 1 ms (windows are counted in whole milliseconds).
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::rate_limit::{FixedWindow, Rate};
    /// assert!(FixedWindow::new("burst", Rate::new(1, FixedWindow::MIN_WINDOW)?).is_ok());
    /// // Sub-millisecond parts are dropped: 999 us is no window at all.
    /// assert!(FixedWindow::new("burst", Rate::new(1, Duration::from_micros(999))?).is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub const MIN_WINDOW: Duration = Duration::from_millis(1);
    /// The longest window: 2^53 - 1 ms (what a Lua number holds exactly).
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::rate_limit::{FixedWindow, Rate};
    /// assert!(FixedWindow::new("epoch", Rate::new(1, FixedWindow::MAX_WINDOW)?).is_ok());
    /// let longer = FixedWindow::MAX_WINDOW + Duration::from_millis(1);
    /// assert!(FixedWindow::new("epoch", Rate::new(1, longer)?).is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub const MAX_WINDOW: Duration = Duration::from_millis((1 << 53) - 1);
    /// A limiter named `name` (1..=64 bytes of `[A-Za-z0-9_:.-]`) allowing
    /// [`rate.limit()`](Rate::limit) units per window of [`rate.period()`](Rate::period) (at
    /// least 1 ms; sub-millisecond parts are dropped), with keys under
    /// [`DEFAULT_PREFIX`](Self::DEFAULT_PREFIX).
    ///
    /// Errors: [`Error::InvalidInput`] for a window outside
    /// [`MIN_WINDOW`](Self::MIN_WINDOW)..=[`MAX_WINDOW`](Self::MAX_WINDOW), a rate with a
    /// burst (only [`Gcra`](super::Gcra) has one) or a bad name.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::rate_limit::{FixedWindow, Rate};
    /// assert!(FixedWindow::new("login", Rate::per_minute(5)?).is_ok());
    /// assert!(FixedWindow::new("login", Rate::new(5, Duration::from_micros(10))?).is_err());
    /// assert!(FixedWindow::new("login", Rate::per_minute(5)?.with_burst(10)?).is_err());
    /// assert!(FixedWindow::new("a{b}", Rate::per_second(5)?).is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn new(name: &str, rate: Rate) -> Result<Self> {
        let keys = KeySpace::new(Self::DEFAULT_PREFIX, name)?;
        let rate = rate.without_burst("fixed window")?;
        let window_ms = rate.period_in(
            Duration::from_millis(1),
            Self::MAX_WINDOW,
            "window",
            "must be between 1 ms and 2^53 - 1 ms",
        )?;
        let script = embedded::FIXED_WINDOW.script();
        Ok(Self {
            keys,
            rate: rate.with_period(Duration::from_millis(window_ms)),
            limit: rate.limit(),
            window_ms,
            script,
            aligned_script: embedded::FIXED_WINDOW_ALIGNED.script(),
            aligned: false,
            manager: ScriptManager::new(),
            deny_cache: None,
            group_script: embedded::FIXED_WINDOW_GROUP.script(),
            aligned_group_script: embedded::FIXED_WINDOW_ALIGNED_GROUP.script(),
            groups: None,
            leases: None,
        })
    }

    /// Puts the keys under `prefix` (1..=64 bytes of `[A-Za-z0-9_:.-]`) instead of
    /// [`DEFAULT_PREFIX`](Self::DEFAULT_PREFIX): `<prefix>:<name>:{<client>}`.
    /// `with_prefix("rk:rl")` keeps the keys used before 0.2.
    ///
    /// ```
    /// use redkit::rate_limit::{FixedWindow, LimitKey, Rate};
    /// let l = FixedWindow::new("api", Rate::per_second(10)?)?.with_prefix("app:rl")?;
    /// assert_eq!(l.prefix(), "app:rl");
    /// assert_eq!(l.redis_key(&LimitKey::text("u")?), "app:rl:api:{k:u}");
    /// assert!(FixedWindow::new("api", Rate::per_second(10)?)?.with_prefix("bad prefix").is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn with_prefix(mut self, prefix: &str) -> Result<Self> {
        self.keys = self.keys.with_prefix(prefix)?;
        // Leases are held per client key: units of the old prefix's counters are not these.
        if let Some(leases) = &self.leases {
            self.leases = Some(Leases::new(leases.settings()));
        }
        Ok(self)
    }

    /// The key prefix.
    ///
    /// ```
    /// use redkit::rate_limit::{FixedWindow, Rate};
    /// let l = FixedWindow::new("api", Rate::per_second(10)?)?;
    /// assert_eq!(l.prefix(), FixedWindow::DEFAULT_PREFIX);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn prefix(&self) -> &str {
        self.keys.prefix()
    }

    /// The rate: [`limit`](Self::limit) per [`window`](Self::window).
    ///
    /// ```
    /// use redkit::rate_limit::{FixedWindow, Rate};
    /// let l = FixedWindow::new("api", Rate::per_second(10)?)?;
    /// assert_eq!(*l.rate(), Rate::per_second(10)?);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn rate(&self) -> &Rate {
        &self.rate
    }

    /// Group commit (off by default) with `settings` ([`GroupCommit::for_checks()`] is the
    /// recommended one): concurrent checks through this limiter (or any clone of it) are
    /// coalesced, each still on its own counter. A check alone goes straight through (the
    /// ordinary call, no timer, no added latency); checks arriving while
    /// [`max_in_flight`](GroupCommit::max_in_flight) calls are in flight queue up, and when one
    /// returns the first of them sends ONE script call (`lua/fixed_window_group.v2.lua`;
    /// aligned to the clock `lua/fixed_window_aligned_group.v3.lua`) settling the next
    /// [`max_batch`](GroupCommit::max_batch) in arrival order: each gets the decision it would
    /// have got alone (the script runs `fixed_window.v8`'s, or `fixed_window_aligned.v2`'s,
    /// steps per key). Under a flood the limiter then keeps up with a hand-written `INCR` +
    /// `EXPIRE` script (measured in `docs/benchmarks.md`, "Group commit for the limiter").
    ///
    /// The group's call uses the connection of the caller that leads it, so every caller of
    /// one limiter must use connections to the same Redis deployment. If the call fails,
    /// every check in it gets the error (a lost reply: each may have been counted, as for a
    /// single check); if the leading caller's future is dropped while the call is in flight,
    /// the others get [`Error::Interrupted`]: where futures may be dropped (a request whose
    /// client went away), run each check in a task of its own (`tokio::spawn`), as the
    /// middleware (feature `tower`) does. On a Cluster the first group whose keys span
    /// hash slots is refused by Redis before it runs (nothing counted); its checks are then
    /// sent one by one and from then on groups are formed per hash slot. The batch calls
    /// ([`check_batch`](Self::check_batch), [`check_batch_by_slot`](Self::check_batch_by_slot))
    /// are never grouped.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::rate_limit::{FixedWindow, Rate};
    /// use redkit::GroupCommit;
    /// let limiter = FixedWindow::new("api", Rate::per_minute(100)?)?
    ///     .with_group_commit(GroupCommit::for_checks());
    /// assert_eq!(limiter.group_commit(), Some(GroupCommit::for_checks()));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn with_group_commit(mut self, settings: GroupCommit) -> Self {
        self.groups = Some(Arc::new(WindowGroups::new(settings)));
        self
    }

    /// The settings of [group commit](Self::with_group_commit), or `None` when checks are not
    /// grouped (the default).
    ///
    /// ```
    /// # use redkit::rate_limit::Rate;
    /// # use std::time::Duration;
    /// let l = redkit::rate_limit::FixedWindow::new("api", Rate::per_second(10)?)?;
    /// assert_eq!(l.group_commit(), None);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn group_commit(&self) -> Option<GroupCommit> {
        self.groups.as_ref().map(|g| g.settings())
    }

    /// Aligns windows to the clock: each window starts at a multiple of
    /// [`window`](Self::window) since the Unix epoch (the calling process's clock) and has its
    /// own counter key, `<prefix>:<name>:{<client>}:<window number>`. A check is then one
    /// `INCRBY` on the server (plus `PEXPIRE` on a window's first hit): the cheapest design,
    /// and every client's windows end together (like `X-RateLimit-Reset` of most public
    /// APIs). The reset comes from the caller's clock, so run NTP on your instances: an
    /// instance whose clock is off by `d` counts in the right window only `d` late or early.
    /// A window's counter expires at most `min(window, 5 s)` after the window ends, so an
    /// instance whose clock lags by up to that still finds it.
    ///
    /// The counters are different keys from those of the default windows (which start at a
    /// client's first hit): switching a limiter between the two starts every client afresh.
    /// It drops a [`QuotaLease`] (leasing needs windows that start at the first hit).
    ///
    /// ```
    /// # use std::time::Duration;
    /// use redkit::rate_limit::{FixedWindow, LimitKey, Rate};
    /// let l = FixedWindow::new("api", Rate::per_minute(100)?)?.aligned_to_clock();
    /// assert!(l.is_aligned_to_clock());
    /// // The key names the current minute since the epoch.
    /// assert!(l.redis_key(&LimitKey::text("u")?).starts_with("redkit:rl:api:{k:u}:"));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn aligned_to_clock(mut self) -> Self {
        self.aligned = true;
        self.leases = None;
        self.script = self.aligned_script;
        self.group_script = self.aligned_group_script;
        self
    }

    /// Answers checks from **leased quota**: a check that finds no units held here takes up
    /// to `lease.max_units()` units of the key's window from Redis in one call (counted there
    /// at once: the sum over every instance never passes the limit) and answers the key's next
    /// checks from them in process, with no round trip, until they are spent or the window
    /// ends. How leases grow and what they cost (units unused at a window's end are not
    /// admitted by anyone): [`QuotaLease`]. Checks of a cost above the limit, batches and
    /// [`reset`](Self::reset) are as without leasing; group commit no longer applies to the
    /// checks leasing answers. A [`DenyCache`] still answers known-limited clients.
    ///
    /// Errors: [`Error::InvalidInput`] for windows aligned to the clock.
    ///
    /// ```
    /// use redkit::rate_limit::{FixedWindow, QuotaLease, Rate};
    /// let l = FixedWindow::new("api", Rate::per_second(1_000)?)?.with_lease(QuotaLease::new(32)?.instances(4)?)?;
    /// assert_eq!(l.lease().map(|l| l.max_units()), Some(32));
    /// let aligned = FixedWindow::new("api", Rate::per_second(1_000)?)?.aligned_to_clock();
    /// assert!(aligned.with_lease(QuotaLease::new(32)?).is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn with_lease(mut self, lease: QuotaLease) -> Result<Self> {
        if self.aligned {
            return Err(Error::invalid(
                "lease",
                "leasing needs windows that start at the first hit, not aligned to the clock",
            ));
        }
        self.leases = Some(Leases::new(lease));
        Ok(self)
    }

    /// The lease settings, when leasing is on ([`with_lease`](Self::with_lease)).
    ///
    /// ```
    /// # use redkit::rate_limit::Rate;
    /// let l = redkit::rate_limit::FixedWindow::new("api", Rate::per_second(10)?)?;
    /// assert!(l.lease().is_none());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn lease(&self) -> Option<QuotaLease> {
        self.leases.as_ref().map(|l| l.settings())
    }

    /// Whether windows are aligned to the clock ([`aligned_to_clock`](Self::aligned_to_clock)).
    ///
    /// ```
    /// # use redkit::rate_limit::Rate;
    /// # use std::time::Duration;
    /// let l = redkit::rate_limit::FixedWindow::new("api", Rate::per_second(10)?)?;
    /// assert!(!l.is_aligned_to_clock());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn is_aligned_to_clock(&self) -> bool {
        self.aligned
    }

    /// Answers checks of clients known to be limited from `cache`, without a Redis call,
    /// until their window resets (see [`DenyCache`] for why this is exact). Applies to
    /// [`check`](Self::check), [`check_n`](Self::check_n) and both batch calls (keys answered
    /// locally are left out of the round trip); [`reset`](Self::reset) clears the key's entry.
    /// One cache may be shared by many limiters.
    ///
    /// ```
    /// # use std::time::Duration;
    /// use redkit::rate_limit::{DenyCache, FixedWindow, Rate};
    /// let cache = DenyCache::new(100_000)?;
    /// let limiter = FixedWindow::new("api", Rate::per_minute(100)?)?.with_deny_cache(cache.clone());
    /// assert_eq!(cache.stats().hits, 0);
    /// # let _ = limiter; Ok::<(), redkit::Error>(())
    /// ```
    pub fn with_deny_cache(mut self, cache: DenyCache) -> Self {
        self.deny_cache = Some(cache);
        self
    }

    /// The deny cache, when one is attached.
    ///
    /// ```
    /// # use redkit::rate_limit::Rate;
    /// # use std::time::Duration;
    /// let l = redkit::rate_limit::FixedWindow::new("api", Rate::per_second(10)?)?;
    /// assert!(l.deny_cache().is_none());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn deny_cache(&self) -> Option<&DenyCache> {
        self.deny_cache.as_ref()
    }

    /// Uses `manager` (e.g. one shared by the whole application, for its stats).
    ///
    /// ```
    /// # use redkit::rate_limit::Rate;
    /// # use std::time::Duration;
    /// use redkit::{rate_limit::FixedWindow, ScriptManager};
    /// let shared = ScriptManager::new();
    /// let limiter = FixedWindow::new("api", Rate::per_second(10)?)?.with_manager(shared.clone());
    /// assert_eq!(limiter.manager().stats().noscript_fallbacks, 0);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn with_manager(mut self, manager: ScriptManager) -> Self {
        self.manager = manager;
        self
    }

    /// The script manager running the checks (for its [`Stats`](crate::Stats)).
    ///
    /// ```
    /// # use redkit::rate_limit::Rate;
    /// # use std::time::Duration;
    /// let limiter = redkit::rate_limit::FixedWindow::new("api", Rate::per_second(10)?)?;
    /// let _stats = limiter.manager().stats();
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn manager(&self) -> &ScriptManager {
        &self.manager
    }

    /// The limiter's name.
    ///
    /// ```
    /// # use redkit::rate_limit::Rate;
    /// # use std::time::Duration;
    /// # let l = redkit::rate_limit::FixedWindow::new("api", Rate::per_second(10)?)?;
    /// assert_eq!(l.name(), "api");
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        self.keys.name()
    }

    /// Units allowed per window.
    ///
    /// ```
    /// # use redkit::rate_limit::Rate;
    /// # use std::time::Duration;
    /// # let l = redkit::rate_limit::FixedWindow::new("api", Rate::per_second(10)?)?;
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
    /// # use std::time::Duration;
    /// # let l = redkit::rate_limit::FixedWindow::new("api", Rate::new(10, Duration::from_micros(1500))?)?;
    /// assert_eq!(l.window(), Duration::from_millis(1));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn window(&self) -> Duration {
        self.rate.period()
    }

    /// The Redis key holding `key`'s counter (for inspection and operations).
    ///
    /// ```
    /// # use std::time::Duration;
    /// use redkit::rate_limit::{FixedWindow, LimitKey, Rate};
    /// let l = FixedWindow::new("api", Rate::per_second(10)?)?;
    /// assert_eq!(l.redis_key(&LimitKey::ip([10, 0, 0, 1].into())), "redkit:rl:api:{ip:10.0.0.1}");
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn redis_key(&self, key: &LimitKey) -> String {
        self.counter_key(key, self.slot().ok().flatten().as_ref())
    }

    /// The current window, when windows are aligned to the clock.
    fn slot(&self) -> Result<Option<Slot>> {
        if self.aligned {
            Slot::now(self.window_ms).map(Some)
        } else {
            Ok(None)
        }
    }

    /// Counts one unit for `key`. See [`check_n`](Self::check_n).
    ///
    /// ```no_run
    /// # async fn run(l: redkit::rate_limit::FixedWindow, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use redkit::rate_limit::LimitKey;
    /// let d = l.check(&mut conn, &LimitKey::text("user-42")?).await?;
    /// # let _ = d; Ok(()) }
    /// ```
    pub async fn check<C: ConnectionLike>(&self, conn: &mut C, key: &LimitKey) -> Result<Decision> {
        self.check_n(conn, key, 1).await
    }

    /// Counts `cost` units for `key` in one round trip, if they fit in the current window.
    ///
    /// A cost above the limit is [`Decision::CostExceedsLimit`] (it can never pass; nothing is
    /// counted). With a [`DenyCache`] attached, a client known to be limited for this cost is
    /// answered locally (no round trip). Errors: [`Error::InvalidInput`] for a zero cost (nothing sent),
    /// [`Error::WrongType`] / [`Error::CorruptData`] when the counter key holds something that
    /// is not a counter (nothing written), and connection errors.
    ///
    /// ```no_run
    /// # async fn run(l: redkit::rate_limit::FixedWindow, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use redkit::rate_limit::LimitKey;
    /// let upload_cost = 5;
    /// let d = l.check_n(&mut conn, &LimitKey::text("user-42")?, upload_cost).await?;
    /// # let _ = d; Ok(()) }
    /// ```
    pub async fn check_n<C: ConnectionLike>(
        &self,
        conn: &mut C,
        key: &LimitKey,
        cost: u32,
    ) -> Result<Decision> {
        let slot = self.slot()?;
        let redis_key = self.target(key, cost, slot.as_ref())?;
        if let Some(leases) = self.leases.as_ref().filter(|_| cost <= self.limit) {
            return self
                .check_leased(leases, conn, (key.as_str(), &redis_key), cost)
                .await;
        }
        let Some(cache) = self.cache_for(cost) else {
            let reply = self.send(conn, &redis_key, cost, slot.as_ref()).await?;
            return self.decode(reply, cost, slot.as_ref());
        };
        if let Some(decision) = cache.lookup(&redis_key, self.limit, cost) {
            return Ok(decision);
        }
        let sent = Instant::now();
        let reply = self.send(conn, &redis_key, cost, slot.as_ref()).await?;
        let decision = self.decode(reply, cost, slot.as_ref())?;
        remember(cache, &redis_key, sent, &decision);
        Ok(decision)
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
        leases: &Leases,
        conn: &mut C,
        (client, redis_key): (&str, &str),
        cost: u32,
    ) -> Result<Decision> {
        const MOST_WAITS: u32 = 2;
        let cache = self.cache_for(cost);
        let (mut waits, mut demand) = (0, cost);
        let mut refill = false;
        let leader = loop {
            match leases.take_local(client, (self.limit, cost), cache) {
                Local::Taken(decision) | Local::Refused(decision) => return Ok(decision),
                Local::Refill(leader) => {
                    refill = true;
                    break Some(leader);
                }
                Local::Empty => {}
            }
            if let Some(decision) = cache.and_then(|c| c.lookup(redis_key, self.limit, cost)) {
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
                &self.manager,
                conn,
                (client, redis_key),
                (self.limit, self.window_ms),
                Ask {
                    cost,
                    demand,
                    cache: cache.map(DenyCache::generation),
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
            if let Local::Taken(decision) = leases.take_local(client, (self.limit, cost), None) {
                return Ok(decision);
            }
        }
        let granted = granted?;
        if let Some(cache) = cache {
            remember(cache, redis_key, sent, &granted.decision);
        }
        if let (Some(leader), Decision::Limited { .. }) = (&leader, granted.decision) {
            leader.refused(cost, granted.decision);
        }
        Ok(granted.decision)
    }

    /// Sends one check of `cost` on `redis_key` (`slot` its window when aligned to the
    /// clock): grouped when group commit is on, else alone.
    async fn send<C: ConnectionLike>(
        &self,
        conn: &mut C,
        redis_key: &str,
        cost: u32,
        slot: Option<&Slot>,
    ) -> Result<Value> {
        let ttl_ms = self.window_arg(slot);
        match &self.groups {
            Some(groups) => {
                let window = slot.map_or(0, |slot| slot.number);
                groups
                    .send(self, conn, redis_key, cost, (ttl_ms, window))
                    .await
            }
            None => {
                let call = self.single_call(redis_key, cost, ttl_ms);
                self.manager.invoke(conn, &call).await
            }
        }
    }

    /// The deny cache, when it may answer a check of `cost` (a cost above the limit is
    /// answered by Redis as [`Decision::CostExceedsLimit`], never from the cache).
    fn cache_for(&self, cost: u32) -> Option<&DenyCache> {
        self.deny_cache.as_ref().filter(|_| cost <= self.limit)
    }

    /// Runs a batch of one-unit checks through `send`, leaving out the keys the deny cache
    /// answers, and stores the refusals it sees.
    async fn batch<F, Fut>(&self, keys: &[LimitKey], send: F) -> Result<Vec<CallOutcome<Decision>>>
    where
        F: FnOnce(Vec<Call<'static>>) -> Fut,
        Fut: Future<Output = Result<Vec<CallOutcome<Value>>>>,
    {
        // One clock reading for the whole batch: every key is checked in the same window.
        let slot = self.slot()?;
        let calls = keys
            .iter()
            .map(|k| self.call(k, 1, slot.as_ref()))
            .collect::<Result<Vec<_>>>()?;
        let Some(cache) = self.cache_for(1) else {
            let calls = calls.into_iter().map(|(call, _)| call).collect();
            return Ok(self.decode_all(send(calls).await?, slot.as_ref()));
        };
        let mut answers: Vec<Option<CallOutcome<Decision>>> = Vec::with_capacity(keys.len());
        let mut sent_keys = Vec::new();
        let mut to_send = Vec::new();
        for (call, redis_key) in calls {
            match cache.lookup(&redis_key, self.limit, 1) {
                Some(decision) => answers.push(Some(CallOutcome::Ran(Ok(decision)))),
                None => {
                    answers.push(None);
                    sent_keys.push(redis_key);
                    to_send.push(call);
                }
            }
        }
        if !to_send.is_empty() {
            let sent = Instant::now();
            let mut replies = self
                .decode_all(send(to_send).await?, slot.as_ref())
                .into_iter();
            let mut sent_keys = sent_keys.iter();
            for slot in answers.iter_mut().filter(|a| a.is_none()) {
                let (Some(reply), Some(redis_key)) = (replies.next(), sent_keys.next()) else {
                    break;
                };
                if let CallOutcome::Ran(Ok(decision)) = &reply {
                    remember(cache, redis_key, sent, decision);
                }
                *slot = Some(reply);
            }
        }
        // The manager answers one outcome per call; should one be missing, say so.
        let missing = || Error::unexpected(self.script.id(), "a batch reply is missing");
        Ok(answers
            .into_iter()
            .map(|a| a.unwrap_or_else(|| CallOutcome::MaybeRan(missing())))
            .collect())
    }

    /// Checks many keys (one unit each) in one `MULTI`/`EXEC` transaction: one round trip.
    /// Each key gets its own [`CallOutcome`], in order: [`CallOutcome::Ran`] with its
    /// [`Decision`] (or the script's error, e.g. a corrupt counter), [`CallOutcome::NotRun`]
    /// (nothing counted, e.g. the slot is being migrated) or [`CallOutcome::MaybeRan`] (the
    /// reply was lost: the unit may have been counted). An empty slice returns an empty `Vec`
    /// without a round trip. On a Cluster the keys usually live in many slots: use
    /// [`check_batch_by_slot`](Self::check_batch_by_slot) there.
    ///
    /// ```no_run
    /// # async fn run(l: redkit::rate_limit::FixedWindow, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use redkit::rate_limit::LimitKey;
    /// let keys: Vec<LimitKey> = (1..=3u8).map(|i| LimitKey::ip([10, 0, 0, i].into())).collect();
    /// for outcome in l.check_batch(&mut conn, &keys).await? {
    ///     match outcome.into_result() {
    ///         Ok(decision) => println!("{}", decision.is_allowed()),
    ///         Err(e) => println!("unknown: {e}"),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn check_batch<C: ConnectionLike>(
        &self,
        conn: &mut C,
        keys: &[LimitKey],
    ) -> Result<Vec<CallOutcome<Decision>>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        self.batch(keys, |calls| self.manager.invoke_batch(conn, calls))
            .await
    }

    /// Like [`check_batch`](Self::check_batch) for a Cluster: keys are grouped by hash slot
    /// and each group is sent as one transaction, concurrently, over clones of `conn`. A
    /// group that fails reports only its own keys as not run / may have run.
    ///
    /// ```no_run
    /// # async fn run(l: redkit::rate_limit::FixedWindow, conn: redis::cluster_async::ClusterConnection) -> redkit::Result<()> {
    /// use redkit::rate_limit::LimitKey;
    /// let keys = [LimitKey::text("a")?, LimitKey::text("b")?];
    /// let outcomes = l.check_batch_by_slot(&conn, &keys).await?;
    /// # let _ = outcomes; Ok(()) }
    /// ```
    pub async fn check_batch_by_slot<C: ConnectionLike + Clone>(
        &self,
        conn: &C,
        keys: &[LimitKey],
    ) -> Result<Vec<CallOutcome<Decision>>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        self.batch(keys, |calls| self.manager.invoke_batch_by_slot(conn, calls))
            .await
    }

    /// Deletes `key`'s counter: its next check starts a new window. Returns whether a counter
    /// existed. Clears the key's entry in this limiter's [`DenyCache`] (other processes' caches
    /// keep refusing it until the window they saw ends).
    ///
    /// ```no_run
    /// # async fn run(l: redkit::rate_limit::FixedWindow, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use redkit::rate_limit::LimitKey;
    /// l.reset(&mut conn, &LimitKey::ip([10, 0, 0, 1].into())).await?;
    /// # Ok(()) }
    /// ```
    pub async fn reset<C: ConnectionLike>(&self, conn: &mut C, key: &LimitKey) -> Result<bool> {
        let redis_key = self.redis_key(key);
        if let Some(leases) = &self.leases {
            leases.forget(key.as_str());
        }
        delete(conn, redis_key, self.deny_cache.as_ref()).await
    }

    /// The call checking `cost` units of `key` (in `slot`, when windows are aligned to the
    /// clock), and the counter's key.
    fn call(
        &self,
        key: &LimitKey,
        cost: u32,
        slot: Option<&Slot>,
    ) -> Result<(Call<'static>, String)> {
        let redis_key = self.target(key, cost, slot)?;
        let call = self.single_call(&redis_key, cost, self.window_arg(slot));
        Ok((call, redis_key))
    }

    /// The counter checking `cost` units of `key` (in `slot`, when windows are aligned to the
    /// clock). A zero cost is refused.
    fn target(&self, key: &LimitKey, cost: u32, slot: Option<&Slot>) -> Result<String> {
        if cost == 0 {
            return Err(Error::invalid("cost", "must be at least 1"));
        }
        Ok(self.counter_key(key, slot))
    }

    /// The window's argument of a check in `slot`: the window, or aligned to the clock the
    /// TTL of a new counter (to the window's end, plus grace).
    fn window_arg(&self, slot: Option<&Slot>) -> u64 {
        slot.map_or(self.window_ms, |slot| slot.ttl_ms)
    }

    /// The call checking `cost` units on the counter `redis_key`, `ttl_ms` the window (or
    /// aligned to the clock, a new counter's TTL): what [`call`](Self::call) builds. A cost of
    /// 1 is not sent (the scripts' default: one argument less to parse per call).
    fn single_call(&self, redis_key: &str, cost: u32, ttl_ms: u64) -> Call<'static> {
        let mut call = Call::new(self.script);
        call.key(redis_key).arg(self.limit).arg(ttl_ms);
        push_cost(&mut call, cost);
        call
    }

    /// `key`'s counter: `<prefix>:<name>:{<client>}`, with `:<window number>` in `slot`.
    fn counter_key(&self, key: &LimitKey, slot: Option<&Slot>) -> String {
        let tagged = self.keys.key(key);
        match slot {
            Some(slot) => slot.key(tagged),
            None => tagged,
        }
    }

    fn decode_all(
        &self,
        replies: Vec<CallOutcome<Value>>,
        slot: Option<&Slot>,
    ) -> Vec<CallOutcome<Decision>> {
        replies
            .into_iter()
            .map(|r| r.and_then(|v| self.decode(v, 1, slot)))
            .collect()
    }

    /// The script's reply -> [`Decision`], without trusting its shape: aligned to the clock,
    /// see [`Slot::decode`]; otherwise see [`reply::decode`].
    fn decode(&self, reply: Value, cost: u32, slot: Option<&Slot>) -> Result<Decision> {
        match slot {
            Some(slot) => slot.decode(self.script, reply, self.limit, cost),
            None => reply::decode(self.script, self.limit, self.window(), reply, cost),
        }
    }
}

impl fmt::Debug for FixedWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FixedWindow")
            .field("name", &self.name())
            .field("prefix", &self.prefix())
            .field("limit", &self.limit)
            .field("window", &self.window())
            .field("aligned_to_clock", &self.aligned)
            .field("script", &self.script.id())
            .field("deny_cache", &self.deny_cache)
            .field("group_commit", &self.group_commit())
            .field("lease", &self.lease())
            .finish()
    }
}

impl GroupSender for FixedWindow {
    fn limit(&self) -> u32 {
        self.limit
    }

    fn window_ms(&self) -> u64 {
        self.window_ms
    }

    fn is_aligned_to_clock(&self) -> bool {
        self.aligned
    }

    fn group_script(&self) -> &'static Script {
        self.group_script
    }

    fn manager(&self) -> &ScriptManager {
        &self.manager
    }

    fn single_call(&self, redis_key: &str, cost: u32, ttl_ms: u64) -> Call<'static> {
        FixedWindow::single_call(self, redis_key, cost, ttl_ms)
    }
}

impl RateLimiter for FixedWindow {
    delegate_rate_limiter!(FixedWindow, deny_cache);
}

impl Hooks for FixedWindow {
    fn attach_deny_cache(self, cache: DenyCache) -> Self {
        self.with_deny_cache(cache)
    }

    fn is_grouped(&self) -> bool {
        self.groups.is_some()
    }

    /// From the units of a lease held here (never leading a refill: that is the round
    /// trip's; looked up by the client's key, so no counter key is built), else from a
    /// refusal the deny cache holds.
    fn answer_locally(&self, key: &LimitKey) -> Option<Decision> {
        let cache = self.cache_for(1);
        let leased = self.leases.as_ref();
        if let Some(decision) =
            leased.and_then(|l| l.take_held(key.as_str(), (self.limit, 1), cache))
        {
            return Some(decision);
        }
        let cache = cache?;
        let slot = self.slot().ok()?;
        let redis_key = self.target(key, 1, slot.as_ref()).ok()?;
        cache.lookup(&redis_key, self.limit, 1)
    }
}

/// Stores a refusal: the counter it saw (the limit when it saw more) and the window's end
/// measured from `sent`, the instant before the request went out.
/// An allowed request moves the counter of a stored refusal (a smaller cost passed after a
/// larger one was refused) up to what Redis answered.
fn remember(cache: &DenyCache, redis_key: &str, sent: Instant, decision: &Decision) {
    let quota = decision.quota();
    let count = u64::from(quota.limit()).saturating_sub(u64::from(quota.remaining()));
    match decision {
        Decision::Limited { retry_after, .. } => cache.record(redis_key, count, sent, *retry_after),
        Decision::Allowed(_) => cache.raise(redis_key, count),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limiter() -> FixedWindow {
        FixedWindow::new("t", Rate::per_second(10).unwrap()).unwrap()
    }

    #[test]
    fn a_new_prefix_does_not_share_the_leases_of_the_old_one() {
        let leased = limiter().with_lease(QuotaLease::new(8).unwrap()).unwrap();
        let same = leased.clone();
        let moved = leased.clone().with_prefix("other").unwrap();
        let held = |l: &FixedWindow| Arc::as_ptr(l.leases.as_ref().unwrap());
        assert_eq!(held(&same), held(&leased));
        assert_ne!(held(&moved), held(&leased));
        assert_eq!(moved.lease(), leased.lease());
    }

    #[test]
    fn validates_input_before_sending() {
        let l = limiter();
        assert!(matches!(
            l.call(&LimitKey::ip([1, 2, 3, 4].into()), 0, None),
            Err(Error::InvalidInput { what: "cost", .. })
        ));
        assert!(Rate::new(1, Duration::from_micros(999))
            .and_then(|r| FixedWindow::new("t", r))
            .is_err());
        assert!(Rate::new(1, FixedWindow::MAX_WINDOW)
            .and_then(|r| FixedWindow::new("t", r))
            .is_ok());
        assert!(
            Rate::new(1, FixedWindow::MAX_WINDOW + Duration::from_millis(1))
                .and_then(|r| FixedWindow::new("t", r))
                .is_err()
        );
        assert!(Rate::per_second(1)
            .and_then(|r| FixedWindow::new("", r))
            .is_err());
    }

    #[test]
    fn names_never_share_counters() {
        let k = LimitKey::text("x").unwrap();
        let a = FixedWindow::new("a", Rate::per_second(1).unwrap()).unwrap();
        let ab = FixedWindow::new("a:b", Rate::per_second(1).unwrap()).unwrap();
        assert_ne!(a.redis_key(&k), ab.redis_key(&k));
        assert_eq!(a.redis_key(&k), "redkit:rl:a:{k:x}");
        let old = a.with_prefix("rk:rl").unwrap();
        assert_eq!(old.redis_key(&k), "rk:rl:a:{k:x}");
    }
}
