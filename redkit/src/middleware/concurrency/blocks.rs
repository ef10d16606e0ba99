//! Leased slots: each instance holds a block of a client's slots in Redis (one
//! [`Semaphore`] block, renewed in the background) and admits and releases requests against
//! it in process. Redis is called only to grow, shrink, renew or give back a block.
//!
//! Why the limit holds: a block's members are counted by every acquire of the semaphore, so
//! the blocks of all instances together never pass `permits`; an instance admits a request
//! only while its block (as last granted) has a slot left and its lease has not ended by
//! this clock (the lease from the call's start, minus the drift allowance); it shrinks its
//! block locally before it asks Redis to, and never below the requests it has in flight.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;

use crate::error::Result;
use crate::lock::semaphore::block::Block as Granted;
use crate::lock::Semaphore;
use crate::rate_limit::QuotaLease;

/// How long slots of a block stay unused before they are given back.
pub(super) const IDLE_RETURN: Duration = Duration::from_secs(1);
/// How long a semaphore stays marked contended after a block got less than it asked for.
const CONTENTION: Duration = Duration::from_secs(2);
/// After a call that could not grow the block, requests of the block are refused here
/// without calling Redis for this long.
const REFUSED: Duration = Duration::from_millis(25);

/// The blocks of one layer, one per client resource.
pub(super) struct Blocks {
    lease: QuotaLease,
    permits: u32,
    ttl: Duration,
    ttl_ms: u64,
    drift: Duration,
    /// This layer's owner token: one per instance, the members of each block are
    /// `<token>#1..#k`.
    token: String,
    table: Arc<Table>,
    /// Wakes the background task early: a block holds slots above its fair share that no
    /// request uses.
    nudge: Arc<tokio::sync::Notify>,
    tending: AtomicBool,
    closed: AtomicBool,
}

/// Read on every request, written when a block comes or goes.
type Table = RwLock<HashMap<String, Arc<Block>>>;

/// One client's block.
pub(super) struct Block {
    key: String,
    /// The block's share while the semaphore is contended: `ceil(permits / instances)`.
    fair: u32,
    state: Mutex<State>,
    /// One Redis call per block at a time.
    refill: tokio::sync::Mutex<()>,
    /// Requests waiting for the block to grow.
    waiting: AtomicU32,
    nudge: Arc<tokio::sync::Notify>,
}

#[derive(Debug)]
struct State {
    /// Slots the block holds, as last granted (or shrunk to, before the call that shrinks it).
    size: u32,
    /// Requests admitted on the block and not finished.
    in_use: u32,
    /// The most in use since the idle period began.
    peak: u32,
    period_start: Instant,
    /// Admissions stop here (the lease from the last call's start, minus the drift).
    valid_until: Option<Instant>,
    last_call: Option<Instant>,
    /// Free permits of the semaphore at the last call.
    free_seen: u32,
    /// Until then some block of the semaphore was refused slots: this one keeps to its
    /// fair share.
    contended_until: Option<Instant>,
    /// Until then the block does not call Redis to grow (a call just could not).
    refused_until: Option<Instant>,
    /// Out of the table: a request that finds it goes back for the current one.
    removed: bool,
}

/// What an admission on a block gave.
pub(super) enum Admit {
    /// A slot of the block: given back when dropped.
    Slot(BlockSlot),
    /// Every slot is held elsewhere; retry after this long (until the earliest other lease
    /// ends, at most [`IDLE_RETURN`]: unused slots come back sooner than leases end).
    Full(Duration),
}

/// A request's slot in a block: in process only, given back when dropped.
pub(super) struct BlockSlot {
    block: Arc<Block>,
}

impl Drop for BlockSlot {
    fn drop(&mut self) {
        let mut st = lock(&self.block.state);
        st.in_use = st.in_use.saturating_sub(1);
        let capped = st.contended_until.is_some() && st.in_use < st.size;
        if capped && st.in_use == st.cap(Instant::now(), self.block.fair) {
            // Contended, and back to its share: the slots above it go back now.
            self.block.nudge.notify_one();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn read<T>(m: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn write<T>(m: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl State {
    /// The slots requests may use at `now`: the block, or its fair share of it while the
    /// semaphore is contended.
    fn cap(&self, now: Instant, fair: u32) -> u32 {
        if self.contended_until.is_some_and(|until| now < until) {
            self.size.min(fair)
        } else {
            self.size
        }
    }

    fn contended(&self, now: Instant) -> bool {
        self.contended_until.is_some_and(|until| now < until)
    }
}

impl Block {
    /// Takes a slot when the block has one left and its lease holds at `now`.
    fn try_take(self: &Arc<Self>, now: Instant) -> Option<BlockSlot> {
        let mut st = lock(&self.state);
        let valid = st.valid_until.is_some_and(|until| now < until);
        if !valid || st.removed || st.in_use >= st.cap(now, self.fair) {
            return None;
        }
        st.in_use += 1;
        st.peak = st.peak.max(st.in_use);
        Some(BlockSlot {
            block: Arc::clone(self),
        })
    }
}

impl Blocks {
    pub(super) fn new(
        lease: QuotaLease,
        permits: u32,
        ttl: Duration,
        drift: Duration,
        token: String,
    ) -> Self {
        Self {
            lease,
            permits,
            ttl,
            ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
            drift,
            token,
            table: Arc::default(),
            nudge: Arc::default(),
            tending: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        }
    }

    pub(super) fn lease(&self) -> QuotaLease {
        self.lease
    }

    /// The block of `resource` (keyed `key`), made when absent; `None` once closed or when
    /// [`QuotaLease::MAX_KEYS`] blocks exist (the request then takes a plain permit).
    fn block(&self, resource: &str, key: &str) -> Option<Arc<Block>> {
        if self.closed.load(Ordering::Acquire) {
            return None;
        }
        if let Some(block) = read(&self.table).get(resource) {
            return Some(Arc::clone(block));
        }
        let mut table = write(&self.table);
        if let Some(block) = table.get(resource) {
            return Some(Arc::clone(block));
        }
        if table.len() >= QuotaLease::MAX_KEYS {
            return None;
        }
        let block = Arc::new(Block {
            key: key.to_owned(),
            fair: self.fair(),
            state: Mutex::new(State {
                size: 0,
                in_use: 0,
                peak: 0,
                period_start: Instant::now(),
                valid_until: None,
                last_call: None,
                free_seen: self.permits,
                contended_until: None,
                refused_until: None,
                removed: false,
            }),
            refill: tokio::sync::Mutex::new(()),
            waiting: AtomicU32::new(0),
            nudge: Arc::clone(&self.nudge),
        });
        table.insert(resource.to_owned(), Arc::clone(&block));
        Some(block)
    }

    /// A slot of the block of `resource` when it has one now: in process, no Redis call.
    pub(super) fn try_admit(&self, resource: &str) -> Option<BlockSlot> {
        // The table, then the block's state: the order every path takes them in.
        read(&self.table).get(resource)?.try_take(Instant::now())
    }

    /// Admits a request of `resource` (semaphore key `key`) on this instance's block: in
    /// process while it has a slot, else after one call that grows it. `None` when the
    /// request must take a plain permit instead (closed, or too many blocks).
    pub(super) async fn admit<C>(
        self: &Arc<Self>,
        sem: &Semaphore,
        conn: &C,
        resource: &str,
        key: &str,
    ) -> Option<Result<Admit>>
    where
        C: ConnectionLike + Clone + Send + Sync + 'static,
    {
        loop {
            let block = self.block(resource, key)?;
            if let Some(slot) = block.try_take(Instant::now()) {
                return Some(Ok(Admit::Slot(slot)));
            }
            self.tend_in_background(sem, conn);
            block.waiting.fetch_add(1, Ordering::AcqRel);
            let refill = block.refill.lock().await;
            block.waiting.fetch_sub(1, Ordering::AcqRel);
            if lock(&block.state).removed {
                continue;
            }
            if let Some(slot) = block.try_take(Instant::now()) {
                return Some(Ok(Admit::Slot(slot)));
            }
            let now = Instant::now();
            let want = {
                let st = lock(&block.state);
                let need = st
                    .in_use
                    .saturating_add(1)
                    .saturating_add(block.waiting.load(Ordering::Acquire));
                let mut want = self.grown(st.size, need, st.free_seen);
                if st.contended(now) {
                    want = want.min(block.fair);
                }
                let valid = st.valid_until.is_some_and(|until| now < until);
                let futile = valid && want <= st.size;
                if futile || st.refused_until.is_some_and(|until| now < until) {
                    return Some(Ok(Admit::Full(REFUSED)));
                }
                want
            };
            let granted = self.call(sem, &mut conn.clone(), &block, want).await;
            drop(refill);
            return Some(match granted {
                Err(error) => Err(error),
                Ok(granted) => Ok(match block.try_take(Instant::now()) {
                    Some(slot) => Admit::Slot(slot),
                    None => {
                        lock(&block.state).refused_until = Some(now + REFUSED);
                        Admit::Full(granted.retry_after.clamp(REFUSED, IDLE_RETURN))
                    }
                }),
            });
        }
    }

    /// A block's share while the semaphore is contended: `ceil(permits / instances)`.
    fn fair(&self) -> u32 {
        self.permits
            .div_ceil(self.lease.expected_instances().max(1))
    }

    /// The size to ask for when `need` slots are wanted and the block holds `size`: twice
    /// the block, at most `max_units` more per call and a `1 / (2 x instances)` share of the
    /// free slots last seen, at least `need`, at most `permits`.
    fn grown(&self, size: u32, need: u32, free_seen: u32) -> u32 {
        let share = free_seen / self.lease.expected_instances().saturating_mul(2).max(1);
        size.max(1)
            .saturating_mul(2)
            .min(size.saturating_add(self.lease.max_units()))
            .min(size.saturating_add(share))
            .max(need)
            .min(self.permits)
    }

    /// Sets `block` to `want` slots in Redis (shrinking it here first, so no admission
    /// passes the smaller size), then records what Redis granted. Holds the block's refill
    /// lock (the caller's).
    async fn call<C: ConnectionLike>(
        &self,
        sem: &Semaphore,
        conn: &mut C,
        block: &Block,
        want: u32,
    ) -> Result<Granted> {
        let believed = {
            let mut st = lock(&block.state);
            let believed = st.size;
            st.size = st.size.min(want);
            believed
        };
        let started = Instant::now();
        let granted = sem
            .set_block(
                conn,
                &block.key,
                &self.token,
                self.permits,
                self.ttl_ms,
                want,
                CONTENTION.as_millis() as u64,
            )
            .await?;
        if granted.had < believed.min(want) {
            tracing::warn!(
                key = %block.key,
                held = granted.had,
                believed,
                "concurrency limit: a leased block had lost slots (lease ended or server restarted)"
            );
        }
        let mut st = lock(&block.state);
        st.size = granted.size;
        st.free_seen = self.permits.saturating_sub(granted.holders);
        st.last_call = Some(started);
        st.contended_until = (!granted.contended.is_zero()).then(|| started + granted.contended);
        st.valid_until = (granted.size > 0)
            .then(|| started + self.ttl.saturating_sub(self.drift))
            .filter(|until| *until > started);
        let cap = st.cap(Instant::now(), block.fair);
        if cap < st.size && st.in_use <= cap {
            block.nudge.notify_one();
        }
        Ok(granted)
    }

    /// Starts the background task that renews blocks, gives back idle slots and removes
    /// idle blocks (once per layer, on the first admission).
    fn tend_in_background<C>(self: &Arc<Self>, sem: &Semaphore, conn: &C)
    where
        C: ConnectionLike + Clone + Send + Sync + 'static,
    {
        if self.tending.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.tending.store(false, Ordering::Release);
            return;
        };
        let tick = (IDLE_RETURN / 2).min(self.ttl / 4);
        let weak: Weak<Blocks> = Arc::downgrade(self);
        let (sem, mut conn) = (sem.clone(), conn.clone());
        let nudge = Arc::clone(&self.nudge);
        drop(runtime.spawn(async move {
            loop {
                tokio::select! {
                    () = tokio::time::sleep(tick) => {}
                    () = nudge.notified() => {}
                }
                let Some(blocks) = weak.upgrade() else {
                    return;
                };
                let closing = blocks.closed.load(Ordering::Acquire);
                if blocks.tend(&sem, &mut conn, closing).await == 0 && closing {
                    return;
                }
            }
        }));
    }

    /// One round over every block: renews those due, gives back slots unused for an idle
    /// period (every slot not in use when `closing`), removes empty blocks. Returns how many
    /// blocks remain.
    async fn tend<C: ConnectionLike>(&self, sem: &Semaphore, conn: &mut C, closing: bool) -> usize {
        let all: Vec<(String, Arc<Block>)> = read(&self.table)
            .iter()
            .map(|(r, b)| (r.clone(), Arc::clone(b)))
            .collect();
        for (resource, block) in all {
            let refill = block.refill.lock().await;
            let now = Instant::now();
            let (want, due) = {
                let mut st = lock(&block.state);
                let idle_over = now.saturating_duration_since(st.period_start) >= IDLE_RETURN;
                // Never below the requests in flight; above them, what was used in the idle
                // period (all of the block until one ends), at most the fair share while
                // contended.
                let cap = st.cap(now, block.fair);
                let keep = if closing {
                    st.in_use
                } else if idle_over {
                    st.in_use.max(st.peak.min(cap))
                } else {
                    st.in_use.max(cap)
                };
                if idle_over {
                    st.peak = st.in_use;
                    st.period_start = now;
                }
                let since = |t: Option<Instant>| t.map(|t| now.saturating_duration_since(t));
                let renew_due =
                    st.size > 0 && since(st.last_call).is_none_or(|d| d >= self.ttl / 3);
                // A block above its fair share of a full semaphore asks every idle period
                // whether others are refused (the reply says), so that it shrinks to its share.
                let probe_due = st.size > block.fair
                    && st.free_seen == 0
                    && since(st.last_call).is_none_or(|d| d >= IDLE_RETURN);
                (keep, keep != st.size || renew_due || probe_due)
            };
            if due {
                if let Err(error) = self.call(sem, conn, &block, want).await {
                    tracing::warn!(%error, key = %block.key, "concurrency limit: a leased block was not renewed");
                }
            }
            drop(refill);
            let mut table = write(&self.table);
            let mut st = lock(&block.state);
            if st.size == 0 && st.in_use == 0 && !st.removed {
                st.removed = true;
                table.remove(&resource);
            }
        }
        read(&self.table).len()
    }

    /// Stops leasing (later requests take plain permits) and gives back every block's slots
    /// as its requests finish; returns once every block is given back.
    pub(super) async fn close<C: ConnectionLike>(&self, sem: &Semaphore, conn: &mut C) {
        self.closed.store(true, Ordering::Release);
        let tick = (IDLE_RETURN / 2).min(self.ttl / 4);
        while self.tend(sem, conn, true).await > 0 {
            tokio::time::sleep(tick).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocks(max_units: u32, instances: u32, permits: u32) -> Blocks {
        let lease = QuotaLease::new(max_units)
            .unwrap()
            .instances(instances)
            .unwrap();
        Blocks::new(
            lease,
            permits,
            Duration::from_secs(30),
            Duration::from_millis(2),
            "t".repeat(32),
        )
    }

    #[test]
    fn a_block_grows_by_doubling_within_its_caps() {
        let b = blocks(8, 2, 100);
        assert_eq!(b.grown(0, 1, 100), 2, "an empty block asks for two");
        assert_eq!(b.grown(2, 3, 100), 4);
        assert_eq!(b.grown(8, 9, 100), 16, "at most max_units more");
        assert_eq!(b.grown(16, 17, 100), 24, "at most max_units more");
        assert_eq!(
            b.grown(16, 17, 8),
            18,
            "at most a quarter of the free slots more"
        );
        assert_eq!(b.grown(16, 20, 0), 20, "at least what is needed");
        assert_eq!(b.grown(90, 91, 100), 98, "at most max_units more");
        assert_eq!(b.grown(99, 100, 100), 100, "at most the permits");
        assert_eq!(b.grown(100, 101, 100), 100, "at most the permits");
        let big = blocks(1 << 20, 1, u32::MAX);
        assert_eq!(big.grown(u32::MAX, u32::MAX, u32::MAX), u32::MAX);
    }

    #[test]
    fn a_slot_is_taken_only_inside_a_valid_block_and_given_back_on_drop() {
        let now = Instant::now();
        let block = Arc::new(Block {
            key: "k".into(),
            fair: 1,
            state: Mutex::new(State {
                size: 2,
                in_use: 0,
                peak: 0,
                period_start: now,
                valid_until: Some(now + Duration::from_secs(1)),
                last_call: Some(now),
                free_seen: 0,
                contended_until: None,
                refused_until: None,
                removed: false,
            }),
            refill: tokio::sync::Mutex::new(()),
            waiting: AtomicU32::new(0),
            nudge: Arc::default(),
        });
        let a = block.try_take(now).expect("a slot");
        let b = block.try_take(now).expect("a second slot");
        assert!(block.try_take(now).is_none(), "the block is full");
        drop(a);
        assert_eq!(lock(&block.state).in_use, 1);
        assert_eq!(lock(&block.state).peak, 2);
        let c = block.try_take(now).expect("the slot given back");
        assert!(
            block.try_take(now + Duration::from_secs(1)).is_none(),
            "not at the lease's end"
        );
        drop((b, c));
        assert!(
            block.try_take(now + Duration::from_secs(1)).is_none(),
            "not after it either, even with slots free"
        );
        // While contended, the block keeps to its fair share (1 here).
        lock(&block.state).contended_until = Some(now + Duration::from_millis(10));
        let d = block.try_take(now).expect("one slot: the fair share");
        assert!(block.try_take(now).is_none(), "not beyond the fair share");
        assert!(
            block.try_take(now + Duration::from_millis(10)).is_some(),
            "the whole block once the contention ends"
        );
        drop(d);
        lock(&block.state).removed = true;
        assert!(block.try_take(now).is_none(), "not on a removed block");
    }
}
