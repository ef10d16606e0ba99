//! The fixed-window family, each behaviour a type: [`FixedWindow`] (windows from a client's
//! first hit), [`AlignedWindow`] (windows aligned to the clock), and two wrappers:
//! [`Grouped`] (group commit, for either kind) and [`Leased`](crate::rate_limit::Leased) (leased quota, for windows
//! from the first hit: what `fixed_window_lease` runs). A combination no script can run has
//! no constructor, and no setter's effect depends on the order of setters.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use redis::Value;

use self::aligned::Slot;
use self::queue::{GroupSender, WindowGroups};
use super::basics::limiter_basics;
use super::decision::{Decision, Quota};
use super::deny_cache::DenyCache;
use super::key::LimitKey;
use super::key_space::{delete, KeySpace};
use super::lease::{lease_target, LeaseScript};
use super::rate::Rate;
use super::rate_limiter::{delegate_rate_limiter, push_cost, sealed::Hooks, RateLimiter};
use super::reply::{int, ints, non_negative};
use crate::error::{Error, Result};
use crate::group_commit::GroupCommit;
use crate::script::{embedded, Call, CallOutcome, Script, ScriptManager};

mod aligned;
mod grouped;
mod queue;
mod reply;

pub use grouped::Grouped;

/// A fixed-window limiter whose windows start at each client's first counted hit: the
/// classic `INCR` + `EXPIRE` design, done atomically (a [`Window`] of kind [`FirstHit`]).
///
/// Each check is one `EVALSHA` of `lua/fixed_window.v9.lua`, which atomically reads the
/// counter's TTL, adds the cost if it fits under the limit (`INCRBY`, undone when it does
/// not), gives a new counter (or one found without a TTL) its expiry, and answers the count
/// and the remaining milliseconds (PTTL). Limit, remaining and reset all come from that one
/// round trip; time comes from Redis.
///
/// **Window semantics.** A window starts at the first counted hit of a key and lasts
/// `window`; then the key expires and the next hit starts a new window. Windows are not
/// aligned to the clock (see [`AlignedWindow`] for that), and a client can get up to
/// `2 x limit` through in a short span around a window edge (`limit` at the end of one window
/// and `limit` again at the start of the next). Requests that are limited are not counted, so
/// a client that keeps retrying is not locked out longer.
///
/// **Keys.** `<prefix>:<name>:{<canonical key>}` (prefix
/// [`DEFAULT_PREFIX`](Window::DEFAULT_PREFIX) unless [`with_prefix`](Window::with_prefix)
/// chooses another): limiters with different names never share a counter, and the client
/// part is the hash tag, so every call is a single-slot call on a Cluster. Cheap to clone.
///
/// Group commit: [`grouped`](Window::grouped); leased quota: [`leased`](Window::leased).
///
/// ```no_run
/// # async fn run() -> redkit::Result<()> {
/// use redkit::rate_limit::{FixedWindow, LimitKey, Rate};
///
/// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
/// let mut conn = client.get_multiplexed_async_connection().await?;
/// let limiter = FixedWindow::new("api", Rate::per_minute(redkit::nonzero!(100)))?;
/// let decision = limiter.check(&mut conn, &LimitKey::ip([192, 0, 2, 1].into())).await?;
/// if !decision.is_allowed() {
///     println!("retry after {:?}", decision.retry_after());
/// }
/// # Ok(()) }
/// ```
pub type FixedWindow = Window<FirstHit>;

/// A fixed-window limiter whose windows are aligned to the clock (a [`Window`] of kind
/// [`ClockAligned`]): every client's windows start at multiples of `window` since the Unix
/// epoch (by the calling process's clock), each in its own key,
/// `<prefix>:<name>:{<client>}:<window number>`.
///
/// A check is ONE `INCRBY` on the server (plus `PEXPIRE` on a window's first hit;
/// `lua/fixed_window_aligned.v3.lua`): about the cost of the hand-written `INCR` + `EXPIRE`
/// script, against two commands (PTTL + INCRBY) for a [`FixedWindow`], and every client's
/// windows end together (like `X-RateLimit-Reset` of most public APIs). The reset comes from
/// the caller's clock, so run NTP on your instances: an instance whose clock is off by `d`
/// counts in the right window only `d` late or early. A window's counter expires at most
/// `min(window, 5 s)` after the window ends, so an instance whose clock lags by up to that
/// still finds it.
///
/// The counters are different keys from those of a [`FixedWindow`] of the same name:
/// switching a limiter between the two starts every client afresh. Aligned windows can be
/// [grouped](Window::grouped), not leased (leasing needs windows that start at the first hit).
///
/// ```
/// use redkit::rate_limit::{AlignedWindow, LimitKey, Rate};
/// let l = AlignedWindow::new("api", Rate::per_minute(redkit::nonzero!(100)))?;
/// // The key names the current minute since the epoch.
/// assert!(l.redis_key(&LimitKey::text("u")?).starts_with("redkit:rl:api:{k:u}:"));
/// # Ok::<(), redkit::Error>(())
/// ```
pub type AlignedWindow = Window<ClockAligned>;

/// Windows that start at a client's first counted hit ([`FixedWindow`]).
///
/// ```
/// use redkit::rate_limit::{FirstHit, FixedWindow, Rate, Window};
/// let l: Window<FirstHit> = FixedWindow::new("api", Rate::per_second(redkit::nonzero!(10)))?;
/// # let _ = l; Ok::<(), redkit::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstHit {}

/// Windows aligned to the clock ([`AlignedWindow`]).
///
/// ```
/// use redkit::rate_limit::{AlignedWindow, ClockAligned, Rate, Window};
/// let l: Window<ClockAligned> = AlignedWindow::new("api", Rate::per_second(redkit::nonzero!(10)))?;
/// # let _ = l; Ok::<(), redkit::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockAligned {}

/// Where a [`Window`]'s windows start: [`FirstHit`] or [`ClockAligned`]. Sealed: each kind
/// is one script (and one group script).
///
/// ```
/// use redkit::rate_limit::{LimitKey, Window, WindowKind};
/// fn key_of<K: WindowKind>(l: &Window<K>) -> String {
///     l.redis_key(&LimitKey::text("u").unwrap())
/// }
/// let l = redkit::rate_limit::FixedWindow::new("api", redkit::rate_limit::Rate::per_second(redkit::nonzero!(1)))?;
/// assert_eq!(key_of(&l), "redkit:rl:api:{k:u}");
/// # Ok::<(), redkit::Error>(())
/// ```
pub trait WindowKind: sealed::Kind {}

impl WindowKind for FirstHit {}
impl WindowKind for ClockAligned {}

pub(crate) mod sealed {
    use super::Script;

    /// What a kind of window is made of: its scripts.
    #[allow(unreachable_pub)]
    pub trait Kind: Sized + Send + Sync + 'static {
        /// The type's name in `Debug`.
        const NAME: &'static str;
        /// Whether windows are aligned to the clock (each check then has its own window).
        const ALIGNED: bool;
        /// The script of one check.
        fn script() -> &'static Script;
        /// The script of a group of checks.
        fn group_script() -> &'static Script;
    }
}

impl sealed::Kind for FirstHit {
    const NAME: &'static str = "FixedWindow";
    const ALIGNED: bool = false;
    fn script() -> &'static Script {
        embedded::FIXED_WINDOW.script()
    }
    fn group_script() -> &'static Script {
        embedded::FIXED_WINDOW_GROUP.script()
    }
}

impl sealed::Kind for ClockAligned {
    const NAME: &'static str = "AlignedWindow";
    const ALIGNED: bool = true;
    fn script() -> &'static Script {
        embedded::FIXED_WINDOW_ALIGNED.script()
    }
    fn group_script() -> &'static Script {
        embedded::FIXED_WINDOW_ALIGNED_GROUP.script()
    }
}

/// A fixed-window rate limiter shared by every instance of a service: [`FixedWindow`]
/// (windows from the first hit) or [`AlignedWindow`] (windows aligned to the clock), one
/// atomic script call per check, batches and reset. Build it with the alias's `new`.
///
/// ```
/// use redkit::rate_limit::{AlignedWindow, FixedWindow, Rate};
/// let plain = FixedWindow::new("api", Rate::per_minute(redkit::nonzero!(100)))?;
/// let aligned = AlignedWindow::new("api", Rate::per_minute(redkit::nonzero!(100)))?;
/// assert_eq!((plain.limit(), aligned.limit()), (100, 100));
/// # Ok::<(), redkit::Error>(())
/// ```
pub struct Window<K> {
    keys: KeySpace,
    /// The rate, its period in whole milliseconds.
    rate: Rate,
    limit: u32,
    window_ms: u64,
    /// The kind's script, resolved up front.
    script: &'static Script,
    manager: ScriptManager,
    deny_cache: Option<DenyCache>,
    kind: PhantomData<fn() -> K>,
}

impl<K> Clone for Window<K> {
    fn clone(&self) -> Self {
        Self {
            keys: self.keys.clone(),
            rate: self.rate,
            limit: self.limit,
            window_ms: self.window_ms,
            script: self.script,
            manager: self.manager.clone(),
            deny_cache: self.deny_cache.clone(),
            kind: PhantomData,
        }
    }
}

impl<K: WindowKind> Window<K> {
    limiter_basics!("FixedWindow", deny_cache);

    /// Prefix of every key unless [`with_prefix`](Self::with_prefix) chooses another.
    ///
    /// ```
    /// use redkit::rate_limit::{FixedWindow, LimitKey, Rate};
    /// let limiter = FixedWindow::new("api", Rate::per_second(redkit::nonzero!(10)))?;
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
    /// assert!(FixedWindow::new("burst", Rate::new(redkit::nonzero!(1), FixedWindow::MIN_WINDOW)?).is_ok());
    /// // Sub-millisecond parts are dropped: 999 us is no window at all.
    /// assert!(FixedWindow::new("burst", Rate::new(redkit::nonzero!(1), Duration::from_micros(999))?).is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub const MIN_WINDOW: Duration = Duration::from_millis(1);
    /// The longest window: 2^53 - 1 ms (what a Lua number holds exactly).
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::rate_limit::{FixedWindow, Rate};
    /// assert!(FixedWindow::new("epoch", Rate::new(redkit::nonzero!(1), FixedWindow::MAX_WINDOW)?).is_ok());
    /// let longer = FixedWindow::MAX_WINDOW + Duration::from_millis(1);
    /// assert!(FixedWindow::new("epoch", Rate::new(redkit::nonzero!(1), longer)?).is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub const MAX_WINDOW: Duration = Duration::from_millis((1 << 53) - 1);

    /// A limiter named `name` (1..=64 bytes of `[A-Za-z0-9_:.-]`) allowing
    /// [`rate.limit()`](Rate::limit) units per window of [`rate.period()`](Rate::period) (at
    /// least 1 ms; sub-millisecond parts are dropped), with keys under
    /// [`DEFAULT_PREFIX`](Self::DEFAULT_PREFIX).
    ///
    /// Errors: [`Error::InvalidInput`] for a window outside
    /// [`MIN_WINDOW`](Self::MIN_WINDOW)..=[`MAX_WINDOW`](Self::MAX_WINDOW) or a bad name.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::rate_limit::{AlignedWindow, FixedWindow, Rate};
    /// assert!(FixedWindow::new("login", Rate::per_minute(redkit::nonzero!(5))).is_ok());
    /// assert!(AlignedWindow::new("login", Rate::per_minute(redkit::nonzero!(5))).is_ok());
    /// assert!(FixedWindow::new("login", Rate::new(redkit::nonzero!(5), Duration::from_micros(10))?).is_err());
    /// assert!(FixedWindow::new("a{b}", Rate::per_second(redkit::nonzero!(5))).is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn new(name: &str, rate: Rate) -> Result<Self> {
        let keys = KeySpace::new(Self::DEFAULT_PREFIX, name)?;
        let (held, window_ms) =
            rate.as_window(Self::MAX_WINDOW, "must be between 1 ms and 2^53 - 1 ms")?;
        Ok(Self {
            keys,
            rate: held,
            limit: rate.limit(),
            window_ms,
            script: K::script(),
            manager: ScriptManager::new(),
            deny_cache: None,
            kind: PhantomData,
        })
    }

    /// Group commit with `settings` ([`GroupCommit::for_checks()`] is the recommended one):
    /// the same limiter, its concurrent checks coalesced into one script call. What it
    /// changes: [`Grouped`].
    ///
    /// ```
    /// use redkit::rate_limit::{AlignedWindow, FixedWindow, Rate};
    /// use redkit::GroupCommit;
    /// let limiter = FixedWindow::new("api", Rate::per_minute(redkit::nonzero!(100)))?.grouped(GroupCommit::for_checks());
    /// assert_eq!(limiter.group_commit(), GroupCommit::for_checks());
    /// let aligned = AlignedWindow::new("api", Rate::per_minute(redkit::nonzero!(100)))?.grouped(GroupCommit::for_checks());
    /// # let _ = aligned; Ok::<(), redkit::Error>(())
    /// ```
    pub fn grouped(self, settings: GroupCommit) -> Grouped<Self> {
        Grouped::new(self, settings)
    }

    /// Units allowed per window.
    ///
    /// ```
    /// # use redkit::rate_limit::Rate;
    /// # let l = redkit::rate_limit::FixedWindow::new("api", Rate::per_second(redkit::nonzero!(10)))?;
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
    /// # let l = redkit::rate_limit::FixedWindow::new("api", Rate::new(redkit::nonzero!(10), Duration::from_micros(1500))?)?;
    /// assert_eq!(l.window(), Duration::from_millis(1));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn window(&self) -> Duration {
        self.rate.period()
    }

    /// The Redis key holding `key`'s counter (for inspection and operations); for an
    /// [`AlignedWindow`], the counter of the current window.
    ///
    /// ```
    /// use redkit::rate_limit::{FixedWindow, LimitKey, Rate};
    /// let l = FixedWindow::new("api", Rate::per_second(redkit::nonzero!(10)))?;
    /// assert_eq!(l.redis_key(&LimitKey::ip([10, 0, 0, 1].into())), "redkit:rl:api:{ip:10.0.0.1}");
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn redis_key(&self, key: &LimitKey) -> String {
        self.counter_key(key, self.slot().ok().flatten().as_ref())
    }

    /// [`check_n`](Self::check_n): counts `cost` units for `key` in one round trip, if they
    /// fit in the current window.
    async fn count<C: ConnectionLike>(
        &self,
        conn: &mut C,
        key: &LimitKey,
        cost: u32,
    ) -> Result<Decision> {
        self.check_through(conn, key, cost, None).await
    }

    /// A check of `cost` units for `key`, sent through `groups` when given (a [`Grouped`]
    /// limiter's queues), else alone.
    async fn check_through<C: ConnectionLike>(
        &self,
        conn: &mut C,
        key: &LimitKey,
        cost: u32,
        groups: Option<&WindowGroups>,
    ) -> Result<Decision> {
        let slot = self.slot()?;
        let redis_key = self.counter_key(key, slot.as_ref());
        let Some(cache) = self.cache_for(cost) else {
            let reply = self
                .send(conn, &redis_key, cost, slot.as_ref(), groups)
                .await?;
            return self.decode(reply, cost, slot.as_ref());
        };
        if let Some(decision) = cache.lookup(&redis_key, self.limit, cost) {
            return Ok(decision);
        }
        let sent = Instant::now();
        let reply = self
            .send(conn, &redis_key, cost, slot.as_ref(), groups)
            .await?;
        let decision = self.decode(reply, cost, slot.as_ref())?;
        cache.remember(&redis_key, sent, &decision);
        Ok(decision)
    }

    /// The current window, when windows are aligned to the clock.
    fn slot(&self) -> Result<Option<Slot>> {
        if K::ALIGNED {
            Slot::now(self.window_ms).map(Some)
        } else {
            Ok(None)
        }
    }

    /// Sends one check of `cost` on `redis_key` (`slot` its window when aligned to the
    /// clock): through `groups` when given, else alone.
    async fn send<C: ConnectionLike>(
        &self,
        conn: &mut C,
        redis_key: &str,
        cost: u32,
        slot: Option<&Slot>,
        groups: Option<&WindowGroups>,
    ) -> Result<Value> {
        let ttl_ms = self.window_arg(slot);
        match groups {
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
            .collect::<Vec<_>>();
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
                    cache.remember(redis_key, sent, decision);
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

    /// `key`'s counter in the current window as a check would find it, read without
    /// counting: `used` the units counted, `remaining` what would still pass, `reset_after`
    /// the time until the window ends (a full window when none has started). One read-only
    /// script call (`EVALSHA_RO`: a replica may serve it); it writes nothing and does not
    /// touch the deny cache. A diagnostic: another process may count before a real check.
    /// Under leased quota ([`Leased`](crate::rate_limit::Leased)), `used` counts the units leased to every instance,
    /// spent or not.
    ///
    /// ```no_run
    /// # async fn run(l: redkit::rate_limit::FixedWindow, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// let q = l.peek(&mut conn, &redkit::rate_limit::LimitKey::text("user-42")?).await?;
    /// if !q.would_allow(redkit::nonzero!(3)) {
    ///     println!("3 more would be refused for {:?}", q.reset_after());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn peek<C: ConnectionLike>(&self, conn: &mut C, key: &LimitKey) -> Result<Quota> {
        let script = embedded::FIXED_WINDOW_PEEK.script();
        let slot = self.slot()?;
        let mut call = Call::new(script);
        call.key(self.counter_key(key, slot.as_ref()));
        let reply = self.manager.invoke(conn, &call).await?;
        let [count, pttl] = ints::<2>(script, reply)?;
        let count = non_negative(script, "count", count)?;
        let reset_after = match (slot, u64::try_from(pttl)) {
            // Aligned to the clock: the window's end (the counter's TTL adds a grace).
            (Some(slot), _) => Duration::from_millis(slot.reset_after_ms),
            // PTTL 0: less than a millisecond left.
            (None, Ok(ms)) => Duration::from_millis(ms.max(1)),
            // No counter (or none with a TTL): the window a check would start.
            (None, Err(_)) => Duration::from_millis(self.window_ms),
        };
        Ok(Quota::new(self.limit, count, reset_after))
    }

    /// Deletes `key`'s counter (for an [`AlignedWindow`], the current window's): its next
    /// check starts a new window. Returns whether a counter existed. Clears the key's entry
    /// in this limiter's [`DenyCache`] (other processes' caches keep refusing it until the
    /// window they saw ends).
    ///
    /// ```no_run
    /// # async fn run(l: redkit::rate_limit::FixedWindow, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use redkit::rate_limit::LimitKey;
    /// l.reset(&mut conn, &LimitKey::ip([10, 0, 0, 1].into())).await?;
    /// # Ok(()) }
    /// ```
    pub async fn reset<C: ConnectionLike>(&self, conn: &mut C, key: &LimitKey) -> Result<bool> {
        delete(conn, self.redis_key(key), self.deny_cache.as_ref()).await
    }

    /// The call checking `cost` units of `key` (in `slot`, when windows are aligned to the
    /// clock), and the counter's key.
    fn call(&self, key: &LimitKey, cost: u32, slot: Option<&Slot>) -> (Call<'static>, String) {
        let redis_key = self.counter_key(key, slot);
        let call = self.single_call(&redis_key, cost, self.window_arg(slot));
        (call, redis_key)
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

    /// A one-unit check answered from the deny cache, when it holds a refusal of `key`.
    fn cached_refusal(&self, key: &LimitKey) -> Option<Decision> {
        let cache = self.cache_for(1)?;
        let slot = self.slot().ok()?;
        let redis_key = self.counter_key(key, slot.as_ref());
        cache.lookup(&redis_key, self.limit, 1)
    }
}

impl FixedWindow {
    /// Blocks `key` for `block`: its counter holds at least the limit until the block ends,
    /// so every check of it is refused with the block's end as its `retry_after` (the check
    /// costs nothing more), and afterwards a new window starts. A block never shortens what
    /// the client already waits for: it ends at the later of the block and the current
    /// window's end, and that length is returned. One script call. What other processes
    /// hold locally can lag it: units already leased to an instance ([`Leased`](crate::rate_limit::Leased)) stay
    /// usable until spent, at most the lease's size per instance ([`Leased::block_for`](crate::rate_limit::Leased::block_for)
    /// drops this process's at once); deny caches only refuse,
    /// so they never let a blocked client through.
    ///
    /// Errors: [`Error::InvalidInput`] for a block outside 1 ms..=[`MAX_WINDOW`](Self::MAX_WINDOW)
    /// (nothing sent), [`Error::WrongType`] / [`Error::CorruptData`] when the counter holds
    /// something else, [`Error::PermissionDenied`] (nothing written in each case).
    ///
    /// ```no_run
    /// # async fn run(l: redkit::rate_limit::FixedWindow, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use std::time::Duration;
    /// let abuser = redkit::rate_limit::LimitKey::ip("203.0.113.9".parse().unwrap());
    /// let blocked = l.block_for(&mut conn, &abuser, Duration::from_secs(15 * 60)).await?;
    /// assert!(blocked >= Duration::from_secs(15 * 60));
    /// # Ok(()) }
    /// ```
    pub async fn block_for<C: ConnectionLike>(
        &self,
        conn: &mut C,
        key: &LimitKey,
        block: Duration,
    ) -> Result<Duration> {
        let ms = u64::try_from(block.as_millis())
            .ok()
            .filter(|ms| *ms >= 1 && block <= Self::MAX_WINDOW)
            .ok_or_else(|| Error::invalid("block", "must be between 1 ms and MAX_WINDOW"))?;
        let script = embedded::FIXED_WINDOW_BLOCK.script();
        let mut call = Call::new(script);
        call.key(self.counter_key(key, None))
            .arg(self.limit)
            .arg(ms);
        let reply = self.manager.invoke(conn, &call).await?;
        let blocked = non_negative(script, "block", int(script, reply)?)?;
        Ok(Duration::from_millis(blocked))
    }
}

impl<K: WindowKind> fmt::Debug for Window<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(K::NAME)
            .field("name", &self.name())
            .field("prefix", &self.prefix())
            .field("limit", &self.limit)
            .field("window", &self.window())
            .field("script", &self.script.id())
            .field("deny_cache", &self.deny_cache)
            .finish()
    }
}

impl<K: WindowKind> GroupSender for Window<K> {
    fn limit(&self) -> u32 {
        self.limit
    }

    fn window_ms(&self) -> u64 {
        self.window_ms
    }

    fn is_aligned_to_clock(&self) -> bool {
        K::ALIGNED
    }

    fn manager(&self) -> &ScriptManager {
        &self.manager
    }

    fn single_call(&self, redis_key: &str, cost: u32, ttl_ms: u64) -> Call<'static> {
        Window::single_call(self, redis_key, cost, ttl_ms)
    }
}

// One impl per kind: `RateLimiter` needs the type's place in `Limiter`, which `limiter.rs`
// gives per concrete type (the window module knows nothing of the enum).
impl RateLimiter for FixedWindow {
    delegate_rate_limiter!(FixedWindow, deny_cache);
}

impl RateLimiter for AlignedWindow {
    delegate_rate_limiter!(AlignedWindow, deny_cache);
}

lease_target! {
    /// Answers checks from **leased quota** with `lease`: the same limiter, most checks of a
    /// hot key answered in process. What it changes: [`Leased`](crate::rate_limit::Leased). Only windows that start at
    /// the first hit lease (an [`AlignedWindow`] has no `leased`).
    ///
    /// ```
    /// use redkit::rate_limit::{FixedWindow, QuotaLease, Rate};
    /// let l = FixedWindow::new("api", Rate::per_second(redkit::nonzero!(1_000)))?.leased(QuotaLease::new(32)?.instances(4)?);
    /// assert_eq!(l.lease().max_units(), 32);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    FixedWindow => LeaseScript::FixedWindow
}

impl<K: WindowKind> Hooks for Window<K> {
    fn attach_deny_cache(self, cache: DenyCache) -> Self {
        self.with_deny_cache(cache)
    }

    /// From a refusal the deny cache holds.
    fn answer_locally(&self, key: &LimitKey) -> Option<Decision> {
        self.cached_refusal(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_input_before_sending() {
        assert!(Rate::new(crate::nonzero!(1), Duration::from_micros(999))
            .and_then(|r| FixedWindow::new("t", r))
            .is_err());
        assert!(Rate::new(crate::nonzero!(1), FixedWindow::MAX_WINDOW)
            .and_then(|r| FixedWindow::new("t", r))
            .is_ok());
        assert!(Rate::new(
            crate::nonzero!(1),
            FixedWindow::MAX_WINDOW + Duration::from_millis(1)
        )
        .and_then(|r| FixedWindow::new("t", r))
        .is_err());
        assert!(FixedWindow::new("", Rate::per_second(crate::nonzero!(1))).is_err());
    }

    #[test]
    fn names_never_share_counters() {
        let k = LimitKey::text("x").unwrap();
        let a = FixedWindow::new("a", Rate::per_second(crate::nonzero!(1))).unwrap();
        let ab = FixedWindow::new("a:b", Rate::per_second(crate::nonzero!(1))).unwrap();
        assert_ne!(a.redis_key(&k), ab.redis_key(&k));
        assert_eq!(a.redis_key(&k), "redkit:rl:a:{k:x}");
        let old = a.with_prefix(crate::keys::Prefix::new("rk:rl").unwrap());
        assert_eq!(old.redis_key(&k), "rk:rl:a:{k:x}");
    }

    #[test]
    fn each_kind_runs_its_own_scripts_under_the_same_prefix() {
        let rate = Rate::per_minute(crate::nonzero!(100));
        let plain = FixedWindow::new("t", rate).unwrap();
        let aligned = AlignedWindow::new("t", rate).unwrap();
        assert_eq!(plain.script.id().to_string(), "fixed_window.v9");
        assert_eq!(aligned.script.id().to_string(), "fixed_window_aligned.v3");
        assert_eq!(aligned.prefix(), FixedWindow::DEFAULT_PREFIX);
        let k = LimitKey::text("u").unwrap();
        let key = aligned.redis_key(&k);
        assert!(key.starts_with("redkit:rl:t:{k:u}:"), "{key}");
        assert!(format!("{aligned:?}").starts_with("AlignedWindow"));
        assert!(format!("{plain:?}").starts_with("FixedWindow"));
    }
}
