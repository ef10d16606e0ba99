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

mod state;

pub(super) use state::IDLE_RETURN;
use state::{Sizing, State, REFUSED};

/// How long (ms) a semaphore stays marked contended after a block got less than it asked
/// for.
const CONTENTION_MS: u64 = 2_000;

/// The blocks of one layer, one per client resource.
pub(super) struct Blocks {
    sizing: Sizing,
    ttl_ms: u64,
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
        if lock(&self.block.state).give_back(self.block.fair, Instant::now) {
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

impl Block {
    /// Takes a slot when the block has one left and its lease holds at `now`.
    fn try_take(self: &Arc<Self>, now: Instant) -> Option<BlockSlot> {
        lock(&self.state).take(now, self.fair).then(|| BlockSlot {
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
            sizing: Sizing {
                lease,
                permits,
                ttl,
                drift,
            },
            ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
            token,
            table: Arc::default(),
            nudge: Arc::default(),
            tending: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        }
    }

    pub(super) fn lease(&self) -> QuotaLease {
        self.sizing.lease
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
            fair: self.sizing.fair(),
            state: Mutex::new(State::new(Instant::now(), self.sizing.permits)),
            refill: tokio::sync::Mutex::new(()),
            waiting: AtomicU32::new(0),
            nudge: Arc::clone(&self.nudge),
        });
        table.insert(resource.to_owned(), Arc::clone(&block));
        Some(block)
    }

    /// A slot of the block of `resource` when it has one now: in process, no Redis call.
    pub(super) fn try_admit(&self, resource: &str) -> Option<BlockSlot> {
        if self.closed.load(Ordering::Acquire) {
            return None;
        }
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
            let waiting = block.waiting.load(Ordering::Acquire);
            let Some(want) = lock(&block.state).ask(now, waiting, &self.sizing) else {
                return Some(Ok(Admit::Full(REFUSED)));
            };
            let granted = self.call(sem, &mut conn.clone(), &block, want).await;
            drop(refill);
            return Some(match granted {
                Err(error) => Err(error),
                Ok(granted) => Ok(match block.try_take(Instant::now()) {
                    Some(slot) => Admit::Slot(slot),
                    None => {
                        lock(&block.state).refused(now);
                        Admit::Full(granted.retry_after.clamp(REFUSED, IDLE_RETURN))
                    }
                }),
            });
        }
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
        let believed = lock(&block.state).shrink_to(want);
        let started = Instant::now();
        let granted = sem
            .set_block(
                conn,
                &block.key,
                &self.token,
                self.sizing.permits,
                self.ttl_ms,
                want,
                CONTENTION_MS,
            )
            .await?;
        let mut st = lock(&block.state);
        if st.record(&granted, started, believed, &self.sizing) {
            tracing::warn!(
                key = %block.key,
                held = granted.had,
                believed,
                "concurrency limit: a leased block had lost slots (lease ended or server restarted)"
            );
        }
        if st.above_share(Instant::now(), block.fair) {
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
        let tick = self.sizing.tick();
        let weak: Weak<Blocks> = Arc::downgrade(self);
        let (sem, mut conn) = (sem.clone(), conn.clone());
        let nudge = Arc::clone(&self.nudge);
        let (table, token, sizing, ttl_ms) = (
            Arc::clone(&self.table),
            self.token.clone(),
            self.sizing,
            self.ttl_ms,
        );
        drop(runtime.spawn(async move {
            loop {
                tokio::select! {
                    () = tokio::time::sleep(tick) => {}
                    () = nudge.notified() => {}
                }
                let Some(blocks) = weak.upgrade() else {
                    // The layer is gone (no request holds a slot any more): every block
                    // goes back now rather than when its lease ends.
                    let keys: Vec<String> = read(&table).values().map(|b| b.key.clone()).collect();
                    for key in keys {
                        let permits = sizing.permits;
                        let given = sem.set_block(&mut conn, &key, &token, permits, ttl_ms, 0, CONTENTION_MS);
                        if let Err(error) = given.await {
                            tracing::warn!(%error, %key, "concurrency limit: a leased block was not given back (it ends with its lease)");
                        }
                    }
                    return;
                };
                // Until the layer is gone (a closed layer's round finds nothing to do).
                let closing = blocks.closed.load(Ordering::Acquire);
                blocks.tend(&sem, &mut conn, closing).await;
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
            let plan =
                lock(&block.state).plan(Instant::now(), block.fair, self.sizing.ttl, closing);
            if let Some(want) = plan {
                if let Err(error) = self.call(sem, conn, &block, want).await {
                    tracing::warn!(%error, key = %block.key, "concurrency limit: a leased block was not renewed");
                }
            }
            drop(refill);
            let mut table = write(&self.table);
            let mut st = lock(&block.state);
            if st.empty() && !st.removed {
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
        let tick = self.sizing.tick();
        while self.tend(sem, conn, true).await > 0 {
            tokio::time::sleep(tick).await;
        }
    }
}
