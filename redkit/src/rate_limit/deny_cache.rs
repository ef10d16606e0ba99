//! [`DenyCache`]: clients found limited are answered locally until their window resets.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::decision::{Decision, Quota};
use crate::error::{Error, Result};
use crate::padded::{Padded, Striped};

/// Shards of a cache: enough that tasks on different cores rarely wait on each other.
const SHARDS: usize = 16;

/// A bounded, shared, local cache of refusals: while a client is known to be limited, its
/// checks are answered without a Redis round trip.
///
/// Attach it with [`FixedWindow::with_deny_cache`](super::FixedWindow::with_deny_cache) (or
/// the middleware's `deny_cache_capacity`). When a check comes back
/// [`Decision::Limited`], the cache remembers the counter it saw and the window's end, and
/// until then answers every check of that client whose cost cannot fit either, with a
/// `Limited` decision whose `retry_after` / `reset_after` count down.
///
/// **Exact for the fixed window.** A counter only grows until its key expires, and the window
/// end is measured as `Instant` *before the request was sent* + the `PTTL` Redis answered, so
/// the cached end is never later than the real one: the cache never refuses a request Redis
/// would allow (a refusal cannot turn into an allow before reset, and an allow cannot turn
/// into a refusal). The price is at most one extra Redis call per window, when the cache
/// entry ends a round trip before the key does. Two things it cannot see: a
/// [`reset`](super::FixedWindow::reset) made by *another* process (this process's resets clear
/// the entry), and units counted by other instances (the cached `remaining` is then an upper
/// bound; the decision itself stays right, since a counter never shrinks within a window).
///
/// **Bounded.** At most [`capacity`](Self::capacity) entries, in up to 16 shards each with
/// its own mutex (held only for a map operation, never across an `.await`). A full shard first
/// drops its expired entries, then the entry that would expire soonest: a flood of distinct
/// keys costs at most `capacity` entries and, for evicted ones, a Redis call. Keys are the
/// limiter's full Redis keys, so one cache may serve many limiters.
///
/// Cheap to clone (an `Arc`): clones share entries and counters.
///
/// ```
/// use redkit::rate_limit::DenyCache;
/// let cache = DenyCache::new(10_000)?;
/// assert_eq!(cache.capacity(), 10_000);
/// assert!(DenyCache::new(0).is_err());
/// assert_eq!(cache.stats().hits, 0);
/// # Ok::<(), redkit::Error>(())
/// ```
#[derive(Clone)]
pub struct DenyCache {
    inner: Arc<Inner>,
}

struct Inner {
    /// Each shard's lock on lines of its own, and the counters every check writes one copy
    /// per stripe of threads: the fields every check reads (the shards, the hasher, the
    /// generation) are then not pulled from one core to the other with them.
    shards: Box<[Padded<Mutex<Shard>>]>,
    hasher: RandomState,
    capacity: usize,
    counts: Striped<Counts>,
    /// Moves with every `clear`: a refusal kept elsewhere for this cache (a lease's) is void
    /// once it moved.
    generation: AtomicU64,
}

/// The counters of a cache.
#[derive(Default)]
struct Counts {
    hits: AtomicU64,
    misses: AtomicU64,
    inserts: AtomicU64,
    evictions: AtomicU64,
}

/// A refusal: the counter seen (a lower bound of the current one) and when the window ends.
#[derive(Debug, Clone, Copy)]
struct Entry {
    count: u64,
    until: Instant,
    /// When the quota resets (the window end; for GCRA, when the bucket is full again).
    reset: Instant,
    seq: u64,
}

#[derive(Default)]
struct Shard {
    capacity: usize,
    entries: HashMap<Arc<str>, Entry>,
    /// Every entry once, ordered by its end (then insertion): the eviction order.
    by_end: BTreeMap<(Instant, u64), Arc<str>>,
    next_seq: u64,
}

impl Shard {
    fn remove(&mut self, key: &str) -> Option<Entry> {
        let entry = self.entries.remove(key)?;
        self.by_end.remove(&(entry.until, entry.seq));
        Some(entry)
    }

    /// Drops entries ended at `now`; then, if still full, the one ending first. Returns how
    /// many live entries were evicted.
    fn make_room(&mut self, now: Instant) -> u64 {
        while let Some(entry) = self.by_end.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let key = entry.remove();
            self.entries.remove(&key);
        }
        let mut evicted = 0;
        while self.entries.len() >= self.capacity {
            let Some((_, key)) = self.by_end.pop_first() else {
                break;
            };
            self.entries.remove(&key);
            evicted += 1;
        }
        evicted
    }
}

/// Counters of a [`DenyCache`] (shared by its clones).
///
/// ```
/// let cache = redkit::rate_limit::DenyCache::new(100)?;
/// let s = cache.stats();
/// println!("{} answered locally, {} went to Redis", s.hits, s.misses);
/// # Ok::<(), redkit::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DenyCacheStats {
    /// Checks answered from the cache (no Redis call).
    pub hits: u64,
    /// Checks the cache could not answer (sent to Redis).
    pub misses: u64,
    /// Refusals stored (new or refreshed entries).
    pub inserts: u64,
    /// Unexpired entries dropped to stay within the capacity.
    pub evictions: u64,
    /// Entries held now (at most the capacity).
    pub len: usize,
}

impl DenyCache {
    /// The largest capacity: 2^24 entries (a few GiB at most would be a mistake, not a cache).
    ///
    /// ```
    /// use redkit::rate_limit::DenyCache;
    /// // Entries take memory as refusals come in, not up front.
    /// let largest = DenyCache::new(DenyCache::MAX_CAPACITY)?;
    /// assert_eq!(largest.capacity(), 1 << 24);
    /// assert!(DenyCache::new(DenyCache::MAX_CAPACITY + 1).is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub const MAX_CAPACITY: usize = 1 << 24;

    /// A cache holding at most `capacity` refusals. Errors: [`Error::InvalidInput`] for 0 or
    /// more than [`MAX_CAPACITY`](Self::MAX_CAPACITY).
    ///
    /// ```
    /// use redkit::rate_limit::DenyCache;
    /// assert!(DenyCache::new(1).is_ok());
    /// assert!(DenyCache::new(DenyCache::MAX_CAPACITY + 1).is_err());
    /// ```
    pub fn new(capacity: usize) -> Result<Self> {
        if capacity == 0 || capacity > Self::MAX_CAPACITY {
            return Err(Error::invalid(
                "deny cache capacity",
                format!("must be 1 to {}", Self::MAX_CAPACITY),
            ));
        }
        let shards = SHARDS.min(capacity);
        let (base, extra) = (capacity / shards, capacity % shards);
        let shards = (0..shards)
            .map(|i| {
                Padded(Mutex::new(Shard {
                    capacity: base + usize::from(i < extra),
                    ..Shard::default()
                }))
            })
            .collect();
        Ok(Self {
            inner: Arc::new(Inner {
                shards,
                hasher: RandomState::new(),
                capacity,
                counts: Striped::default(),
                generation: AtomicU64::new(0),
            }),
        })
    }

    /// The most entries the cache holds.
    ///
    /// ```
    /// assert_eq!(redkit::rate_limit::DenyCache::new(5)?.capacity(), 5);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn capacity(&self) -> usize {
        self.inner.capacity
    }

    /// Entries held now (expired ones not yet dropped included; never above the capacity).
    ///
    /// ```
    /// assert_eq!(redkit::rate_limit::DenyCache::new(5)?.len(), 0);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.inner
            .shards
            .iter()
            .map(|s| lock(s).entries.len())
            .sum()
    }

    /// `true` when no entry is held.
    ///
    /// ```
    /// assert!(redkit::rate_limit::DenyCache::new(5)?.is_empty());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A snapshot of the counters.
    ///
    /// ```
    /// let cache = redkit::rate_limit::DenyCache::new(5)?;
    /// assert_eq!(cache.stats().len, 0);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn stats(&self) -> DenyCacheStats {
        let sum = |counter: fn(&Counts) -> &AtomicU64| self.inner.counts.sum(counter);
        DenyCacheStats {
            hits: sum(|c| &c.hits),
            misses: sum(|c| &c.misses),
            inserts: sum(|c| &c.inserts),
            evictions: sum(|c| &c.evictions),
            len: self.len(),
        }
    }

    /// Drops every entry (counters are kept), and with them the refusals a
    /// [leased](super::Leased) limiter keeps beside its units for this cache.
    ///
    /// ```
    /// let cache = redkit::rate_limit::DenyCache::new(5)?;
    /// cache.clear();
    /// assert!(cache.is_empty());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn clear(&self) {
        self.inner.generation.fetch_add(1, Ordering::Relaxed);
        for shard in self.inner.shards.iter() {
            let mut shard = lock(shard);
            shard.entries.clear();
            shard.by_end.clear();
        }
    }

    fn shard(&self, key: &str) -> MutexGuard<'_, Shard> {
        let hash = self.inner.hasher.hash_one(key);
        // The remainder is below the shard count, which fits in usize.
        let index = usize::try_from(hash % self.inner.shards.len() as u64).unwrap_or(0);
        lock(&self.inner.shards[index])
    }

    /// The local answer for `cost` units of `key` under `limit`, when a stored refusal
    /// proves it: the window has not ended and the counter seen leaves no room for `cost`.
    pub(crate) fn lookup(&self, key: &str, limit: u32, cost: u32) -> Option<Decision> {
        let now = Instant::now();
        let found = {
            let mut shard = self.shard(key);
            match shard.entries.get(key).copied() {
                Some(entry) if entry.until <= now => {
                    shard.remove(key);
                    None
                }
                other => other,
            }
        };
        let decision = found
            .filter(|e| e.count.saturating_add(u64::from(cost)) > u64::from(limit))
            .map(|e| {
                let left = e.until.saturating_duration_since(now);
                let reset = e.reset.saturating_duration_since(now).max(left);
                Decision::Limited {
                    quota: Quota::new(limit, e.count, reset),
                    retry_after: left,
                }
            });
        self.counted(decision.is_some());
        decision
    }

    /// Counts a check the cache answered (`hit`) or could not: its counters and the metric.
    fn counted(&self, hit: bool) {
        let counts = self.inner.counts.mine();
        let counter = if hit { &counts.hits } else { &counts.misses };
        counter.fetch_add(1, Ordering::Relaxed);
        metrics::deny_cache_lookup(hit);
    }

    /// Which [`clear`](Self::clear) the cache is at: a leased limiter keeps the refusals of its
    /// own lease calls beside its units and answers them for this cache while the generation
    /// they were stored under is still the cache's.
    pub(crate) fn generation(&self) -> u64 {
        self.inner.generation.load(Ordering::Relaxed)
    }

    /// Counts a check answered for this cache elsewhere (a lease's stored refusal) as a hit.
    pub(crate) fn hit(&self) {
        self.counted(true);
    }

    /// Remembers that `key` was refused: the counter was `count` and the window ends
    /// `reset_after` after `sent` (the instant before the request went out).
    pub(crate) fn record(&self, key: &str, count: u64, sent: Instant, reset_after: Duration) {
        self.record_until(key, count, sent, reset_after, reset_after);
    }

    /// Remembers that `key` was refused until `refused_for` after `sent`, with the counter at
    /// `count` and the quota resetting `reset_after` after `sent` (GCRA: the bucket is full
    /// again later than a refused request conforms).
    pub(crate) fn record_until(
        &self,
        key: &str,
        count: u64,
        sent: Instant,
        refused_for: Duration,
        reset_after: Duration,
    ) {
        let Some(until) = sent.checked_add(refused_for) else {
            return;
        };
        let reset = sent.checked_add(reset_after).unwrap_or(until).max(until);
        let now = Instant::now();
        if until <= now {
            return;
        }
        let evicted = {
            let mut shard = self.shard(key);
            shard.remove(key);
            let key: Arc<str> = Arc::from(key);
            let evicted = shard.make_room(now);
            let seq = shard.next_seq;
            shard.next_seq = seq.wrapping_add(1);
            shard.by_end.insert((until, seq), Arc::clone(&key));
            shard.entries.insert(
                key,
                Entry {
                    count,
                    until,
                    reset,
                    seq,
                },
            );
            evicted
        };
        let counts = self.inner.counts.mine();
        counts.inserts.fetch_add(1, Ordering::Relaxed);
        counts.evictions.fetch_add(evicted, Ordering::Relaxed);
        metrics::deny_cache_entries(|| self.len());
    }

    /// Raises the counter stored for `key`, if any, to `count` (an allowed request counted
    /// more units in the same window).
    pub(crate) fn raise(&self, key: &str, count: u64) {
        if let Some(entry) = self.shard(key).entries.get_mut(key) {
            entry.count = entry.count.max(count);
        }
    }

    /// Stores what a check answered: a refusal with the counter it saw (the limit when it saw
    /// more) and the window's end measured from `sent`, the instant before the request went
    /// out; an allowed request moves the counter of a stored refusal (a smaller cost passed
    /// after a larger one was refused) up to what Redis answered.
    pub(crate) fn remember(&self, key: &str, sent: Instant, decision: &Decision) {
        let quota = decision.quota();
        let count = u64::from(quota.limit()).saturating_sub(u64::from(quota.remaining()));
        match decision {
            Decision::Limited { retry_after, .. } => self.record(key, count, sent, *retry_after),
            Decision::Allowed(_) => self.raise(key, count),
            _ => {}
        }
    }

    /// Stores a GCRA refusal of `cost` units (sent at `sent`): every cost of at least `cost`
    /// is refused until `retry_after`, when `cost` units are in the bucket (a smaller cost
    /// may fit sooner, so it is left to Redis); an allowed request stores nothing (the bucket
    /// refills as time passes, so a count seen then says nothing of later).
    pub(crate) fn remember_bucket(&self, key: &str, sent: Instant, cost: u32, decision: &Decision) {
        if let Decision::Limited { quota, retry_after } = decision {
            let count = u64::from(quota.limit()).saturating_sub(u64::from(cost)) + 1;
            self.record_until(key, count, sent, *retry_after, quota.reset_after());
        }
    }

    /// Forgets `key` (after a reset of its counter).
    pub(crate) fn forget(&self, key: &str) {
        self.shard(key).remove(key);
    }
}

/// A shard's lock; a panic while it was held cannot leave the maps inconsistent with each
/// other in a way that matters (at worst an entry is missed), so poisoning is ignored.
fn lock(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    shard
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl fmt::Debug for DenyCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DenyCache")
            .field("capacity", &self.inner.capacity)
            .field("stats", &self.stats())
            .finish()
    }
}

/// The deny cache's metrics (feature `metrics`): its lookups, by result, and the refusals it
/// holds. Without the feature the recording functions are empty.
pub(crate) mod metrics {
    // Without the feature the recording functions are empty: their arguments, the names and
    // the tables go unused.
    #![cfg_attr(not(feature = "metrics"), allow(dead_code, unused_variables))]

    #[cfg(feature = "metrics")]
    use ::metrics::Key;

    #[cfg(feature = "metrics")]
    use crate::telemetry::metric::{count, gauge};
    use crate::telemetry::metric::{key_table, Description};

    /// Counter: deny-cache lookups, by result (`hit`: answered locally; `miss`: asked Redis).
    pub(crate) const DENY_CACHE_LOOKUPS: &str = "redkit.deny_cache.lookups";
    /// Gauge: refusals a deny cache holds.
    pub(crate) const DENY_CACHE_ENTRIES: &str = "redkit.deny_cache.entries";

    /// The deny cache's metrics, for [`describe`](crate::telemetry::catalog::describe).
    pub(crate) const METRICS: &[Description] = &[
        Description::counter(
            DENY_CACHE_LOOKUPS,
            "Deny-cache lookups: hit (answered locally) or miss (asked Redis)",
        ),
        Description::gauge(DENY_CACHE_ENTRIES, "Refusals held by the deny cache"),
    ];

    key_table! {
        /// `redkit.deny_cache.lookups`: a hit, a miss.
        static DENY_CACHE_KEYS = DENY_CACHE_LOOKUPS, ["redkit.result": &["hit", "miss"]];
    }

    /// `redkit.deny_cache.entries`.
    #[cfg(feature = "metrics")]
    static DENY_CACHE_ENTRIES_KEY: Key = Key::from_static_name(DENY_CACHE_ENTRIES);

    /// Counts one deny-cache lookup.
    pub(crate) fn deny_cache_lookup(hit: bool) {
        #[cfg(feature = "metrics")]
        count(&DENY_CACHE_KEYS[usize::from(!hit)]);
    }

    /// Sets the number of refusals a deny cache holds (`len` is only called with the feature).
    pub(crate) fn deny_cache_entries(len: impl FnOnce() -> usize) {
        #[cfg(feature = "metrics")]
        gauge(&DENY_CACHE_ENTRIES_KEY).set(len() as f64);
    }

    #[cfg(all(test, feature = "metrics"))]
    mod tests {
        use super::*;
        use crate::telemetry::metric::test_support::{assert_same, built};

        #[test]
        fn every_static_key_is_the_key_its_labels_name() {
            // A hit is 0, a miss 1 (`deny_cache_lookup`).
            assert_same(
                &DENY_CACHE_KEYS[0],
                &built(DENY_CACHE_LOOKUPS, &[("redkit.result", "hit")]),
            );
            assert_same(
                &DENY_CACHE_KEYS[1],
                &built(DENY_CACHE_LOOKUPS, &[("redkit.result", "miss")]),
            );
            assert_same(&DENY_CACHE_ENTRIES_KEY, &built(DENY_CACHE_ENTRIES, &[]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_refusal_refuses_only_costs_at_least_as_large_until_they_fit() {
        let cache = DenyCache::new(10).unwrap();
        let sent = Instant::now();
        let refused = Decision::Limited {
            quota: Quota::new(10, 8, Duration::from_secs(9)),
            retry_after: Duration::from_secs(5),
        };
        cache.remember_bucket("k", sent, 3, &refused);
        // 2 in the bucket, 3 refused: 3 and more are refused until 3 fit; 2 may fit
        // sooner than that (the bucket refills), so it is Redis's to answer.
        assert!(cache.lookup("k", 10, 2).is_none());
        for cost in [3, 4, 10] {
            let d = cache.lookup("k", 10, cost).expect("refused");
            let wait = d.retry_after().unwrap();
            assert!(wait <= Duration::from_secs(5) && wait > Duration::from_secs(4));
        }
        // An allowed answer stores nothing.
        let allowed = Decision::Allowed(Quota::new(10, 9, Duration::from_secs(9)));
        cache.remember_bucket("other", sent, 1, &allowed);
        assert!(cache.lookup("other", 10, 10).is_none());
    }

    #[test]
    fn answers_only_what_the_refusal_proves() {
        let cache = DenyCache::new(10).unwrap();
        let sent = Instant::now();
        cache.record("k", 8, sent, Duration::from_secs(60));
        // limit 10, 8 counted: 2 more would fit, 3 would not.
        assert!(cache.lookup("k", 10, 2).is_none());
        let d = cache.lookup("k", 10, 3).unwrap();
        assert_eq!(d.quota().remaining(), 2);
        assert!(d.retry_after().unwrap() <= Duration::from_secs(60));
        assert!(cache.lookup("other", 10, 3).is_none());
        let s = cache.stats();
        assert_eq!((s.hits, s.misses, s.inserts, s.len), (1, 2, 1, 1));

        // An allowed cost of 1 moved the counter to 9: now 2 cannot fit either.
        cache.raise("k", 9);
        assert_eq!(cache.lookup("k", 10, 2).unwrap().quota().remaining(), 1);
        cache.raise("absent", 9);
        assert_eq!(cache.len(), 1);
        cache.forget("k");
        assert!(cache.lookup("k", 10, 3).is_none());
    }

    #[test]
    fn counts_down_and_expires() {
        let cache = DenyCache::new(10).unwrap();
        cache.record("k", 5, Instant::now(), Duration::from_millis(60));
        let first = cache.lookup("k", 5, 1).unwrap().retry_after().unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let later = cache.lookup("k", 5, 1).unwrap().retry_after().unwrap();
        assert!(later < first, "{later:?} < {first:?}");
        std::thread::sleep(Duration::from_millis(50));
        assert!(cache.lookup("k", 5, 1).is_none());
        assert!(cache.is_empty());
        // An end already past is not stored.
        cache.record("old", 5, Instant::now(), Duration::ZERO);
        assert!(cache.is_empty());
    }

    #[test]
    fn stays_within_capacity_evicting_the_soonest_end() {
        let cache = DenyCache::new(3).unwrap();
        let now = Instant::now();
        for i in 0..100u64 {
            cache.record(&format!("k{i}"), 1, now, Duration::from_secs(1000 - i));
            assert!(cache.len() <= 3);
        }
        assert!(cache.stats().evictions >= 97);
        // Capacity 3 means 3 shards of one entry each: every shard keeps its latest entry.
        assert_eq!(cache.len(), 3);
        let big = DenyCache::new(37).unwrap();
        for i in 0..1000 {
            big.record(&format!("k{i}"), 1, now, Duration::from_secs(100));
        }
        assert_eq!(big.len(), 37);
        // Refreshing an entry replaces it.
        let one = DenyCache::new(1).unwrap();
        one.record("a", 1, now, Duration::from_secs(10));
        one.record("a", 2, now, Duration::from_secs(20));
        assert_eq!(one.len(), 1);
        assert_eq!(one.lookup("a", 2, 1).unwrap().quota().remaining(), 0);
    }
}
