//! One block's state and every decision made on it, without Redis: admit, give back, how
//! much to ask for, what a reply means, and what the background round does.

use std::time::{Duration, Instant};

use crate::lock::semaphore::block::Block as Granted;
use crate::rate_limit::QuotaLease;

/// How long slots of a block stay unused before they are given back.
pub(in crate::middleware::concurrency) const IDLE_RETURN: Duration = Duration::from_secs(1);
/// After a call that could not grow the block, requests of the block are refused here
/// without calling Redis for this long.
pub(super) const REFUSED: Duration = Duration::from_millis(25);

/// The settings every block of a layer shares.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sizing {
    pub(super) lease: QuotaLease,
    pub(super) permits: u32,
    pub(super) ttl: Duration,
    pub(super) drift: Duration,
}

impl Sizing {
    /// A block's share while the semaphore is contended: `ceil(permits / instances)`.
    pub(super) fn fair(&self) -> u32 {
        self.permits
            .div_ceil(self.lease.expected_instances().max(1))
    }

    /// How often the background round runs: half the idle period, at most a quarter of the
    /// lease (a renewal, due a third of the lease after the last call, then comes at most a
    /// quarter later).
    pub(super) fn tick(&self) -> Duration {
        (IDLE_RETURN / 2).min(self.ttl / 4)
    }

    /// The size to ask for when `need` slots are wanted and the block holds `size`: twice
    /// the block, at most `max_units` more per call and a `1 / (2 x instances)` share of the
    /// free slots last seen, at least `need`, at most `permits`.
    pub(super) fn grown(&self, size: u32, need: u32, free_seen: u32) -> u32 {
        let share = free_seen / self.lease.expected_instances().saturating_mul(2).max(1);
        size.max(1)
            .saturating_mul(2)
            .min(size.saturating_add(self.lease.max_units()))
            .min(size.saturating_add(share))
            .max(need)
            .min(self.permits)
    }
}

#[derive(Debug)]
pub(super) struct State {
    /// Slots the block holds, as last granted (or shrunk to, before the call that shrinks it).
    pub(super) size: u32,
    /// Requests admitted on the block and not finished.
    pub(super) in_use: u32,
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
    pub(super) removed: bool,
}

/// `true` while `until` lies after `now`.
fn before(now: Instant, until: Option<Instant>) -> bool {
    until.is_some_and(|until| now < until)
}

impl State {
    /// An empty block, made at `now`, with every permit thought free.
    pub(super) fn new(now: Instant, permits: u32) -> Self {
        Self {
            size: 0,
            in_use: 0,
            peak: 0,
            period_start: now,
            valid_until: None,
            last_call: None,
            free_seen: permits,
            contended_until: None,
            refused_until: None,
            removed: false,
        }
    }

    /// The slots requests may use at `now`: the block, or its fair share of it while the
    /// semaphore is contended.
    pub(super) fn cap(&self, now: Instant, fair: u32) -> u32 {
        if before(now, self.contended_until) {
            self.size.min(fair)
        } else {
            self.size
        }
    }

    /// Takes a slot when the block has one below its cap and its lease holds at `now`.
    pub(super) fn take(&mut self, now: Instant, fair: u32) -> bool {
        if !before(now, self.valid_until) || self.removed || self.in_use >= self.cap(now, fair) {
            return false;
        }
        self.in_use += 1;
        self.peak = self.peak.max(self.in_use);
        true
    }

    /// Gives a slot back; `true` when the block, contended, is now back at its share with
    /// slots above it (the background round gives those back at once). `now` is read only
    /// then.
    pub(super) fn give_back(&mut self, fair: u32, now: impl FnOnce() -> Instant) -> bool {
        self.in_use = self.in_use.saturating_sub(1);
        self.contended_until.is_some()
            && self.in_use < self.size
            && self.in_use == self.cap(now(), fair)
    }

    /// The size to ask Redis for when a request found no slot at `now` (`waiting` more
    /// wait behind it), or `None` when a call would be futile: the block is valid and may
    /// not grow (at the limit, or at its share while contended), or a call just failed to.
    pub(super) fn ask(&self, now: Instant, waiting: u32, sizing: &Sizing) -> Option<u32> {
        let need = self.in_use.saturating_add(1).saturating_add(waiting);
        let mut want = sizing.grown(self.size, need, self.free_seen);
        if before(now, self.contended_until) {
            want = want.min(sizing.fair());
        }
        let futile = before(now, self.valid_until) && want <= self.size;
        (!futile && !before(now, self.refused_until)).then_some(want)
    }

    /// Before a call setting the block to `want`: no admission passes the smaller size from
    /// here. Returns the size believed held before.
    pub(super) fn shrink_to(&mut self, want: u32) -> u32 {
        let believed = self.size;
        self.size = self.size.min(want);
        believed
    }

    /// What Redis granted to a call started at `started`; `true` when the block had lost
    /// slots (its lease ended, or the server restarted) of the `believed` ones.
    pub(super) fn record(
        &mut self,
        granted: &Granted,
        started: Instant,
        believed: u32,
        sizing: &Sizing,
    ) -> bool {
        self.size = granted.size;
        self.free_seen = sizing.permits.saturating_sub(granted.holders);
        self.last_call = Some(started);
        self.contended_until = (!granted.contended.is_zero()).then(|| started + granted.contended);
        self.valid_until = (granted.size > 0)
            .then(|| started + sizing.ttl.saturating_sub(sizing.drift))
            .filter(|until| *until > started);
        granted.had < believed
    }

    /// A call just could not give the block what a request needed: refuse in process for
    /// a while.
    pub(super) fn refused(&mut self, now: Instant) {
        self.refused_until = Some(now + REFUSED);
    }

    /// `true` when the block, contended at `now`, holds slots above its share that no
    /// request uses (they can go back at once).
    pub(super) fn above_share(&self, now: Instant, fair: u32) -> bool {
        let cap = self.cap(now, fair);
        cap < self.size && self.in_use <= cap
    }

    /// The background round at `now`: the size to set the block to when a call is due,
    /// else `None`. Never below the requests in flight; above them, what was used in the
    /// idle period (all of the block until one ends), at most the share while contended;
    /// every slot not in use when `closing`. A call is due to change the size, to renew
    /// (every ttl/3), and, for a block above its share of a full semaphore, once per idle
    /// period to learn whether others are refused.
    pub(super) fn plan(
        &mut self,
        now: Instant,
        fair: u32,
        ttl: Duration,
        closing: bool,
    ) -> Option<u32> {
        let idle_over = now.saturating_duration_since(self.period_start) >= IDLE_RETURN;
        let cap = self.cap(now, fair);
        let keep = if closing {
            self.in_use
        } else if idle_over {
            self.in_use.max(self.peak.min(cap))
        } else {
            self.in_use.max(cap)
        };
        if idle_over {
            self.peak = self.in_use;
            self.period_start = now;
        }
        let since_call = self.last_call.map(|t| now.saturating_duration_since(t));
        let renew_due = self.size > 0 && since_call.is_none_or(|d| d >= ttl / 3);
        let probe_due =
            self.size > fair && self.free_seen == 0 && since_call.is_none_or(|d| d >= IDLE_RETURN);
        (keep != self.size || renew_due || probe_due).then_some(keep)
    }

    /// Nothing held and nothing in use: the block can leave the table.
    pub(super) fn empty(&self) -> bool {
        self.size == 0 && self.in_use == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(30);
    const DRIFT: Duration = Duration::from_millis(2);

    fn sizing(max_units: u32, instances: u32, permits: u32) -> Sizing {
        Sizing {
            lease: QuotaLease::new(max_units)
                .unwrap()
                .instances(instances)
                .unwrap(),
            permits,
            ttl: TTL,
            drift: DRIFT,
        }
    }

    fn granted(size: u32, had: u32, holders: u32, contended_ms: u64) -> Granted {
        Granted {
            size,
            had,
            holders,
            retry_after: Duration::ZERO,
            contended: Duration::from_millis(contended_ms),
        }
    }

    /// A block granted `size` slots by a call at `at`, `holders` holding the semaphore's
    /// `permits` in all.
    fn held(at: Instant, size: u32, holders: u32, s: &Sizing) -> State {
        let mut st = State::new(at, s.permits);
        st.record(&granted(size, 0, holders, 0), at, 0, s);
        st
    }

    #[test]
    fn a_block_grows_by_doubling_within_its_caps() {
        let b = sizing(8, 2, 100);
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
        let big = sizing(1 << 20, 1, u32::MAX);
        assert_eq!(big.grown(u32::MAX, u32::MAX, u32::MAX), u32::MAX);
        assert_eq!(
            big.grown(0, 1, 3),
            1,
            "half of 3 free, at least the one needed"
        );
    }

    #[test]
    fn the_round_runs_every_half_idle_period_or_quarter_lease() {
        assert_eq!(sizing(8, 1, 8).tick(), Duration::from_millis(500));
        let mut short = sizing(8, 1, 8);
        short.ttl = Duration::from_millis(400);
        assert_eq!(short.tick(), Duration::from_millis(100));
    }

    #[test]
    fn the_share_is_the_permits_divided_among_the_instances_rounded_up() {
        assert_eq!(sizing(8, 4, 8).fair(), 2);
        assert_eq!(sizing(8, 4, 10).fair(), 3);
        assert_eq!(sizing(8, 4, 3).fair(), 1);
        assert_eq!(sizing(8, 1, 10).fair(), 10);
    }

    #[test]
    fn a_slot_is_taken_only_inside_a_valid_block_and_given_back() {
        let s = sizing(8, 1, 10);
        let now = Instant::now();
        let mut st = held(now, 2, 2, &s);
        let until = now + TTL - DRIFT;
        assert!(st.take(now, 1) && st.take(now, 1));
        assert!(!st.take(now, 1), "the block is full");
        assert!(!st.give_back(1, || panic!("the clock is read only when contended")));
        assert_eq!((st.in_use, st.peak), (1, 2));
        assert!(
            st.take(until - Duration::from_millis(1), 1),
            "to the lease's end"
        );
        assert!(!st.give_back(1, Instant::now));
        assert!(
            !st.take(until, 1),
            "not at the lease's end, with a slot free"
        );
        st.removed = true;
        assert!(!st.take(now, 1), "not on a removed block");
        assert!(!State::new(now, 10).take(now, 1), "not on an empty block");
    }

    #[test]
    fn a_contended_block_keeps_to_its_share() {
        let s = sizing(8, 4, 8);
        let now = Instant::now();
        let mut st = State::new(now, 8);
        st.record(&granted(4, 0, 8, 2_000), now, 0, &s);
        let ends = now + Duration::from_secs(2);
        assert_eq!(
            (st.cap(now, 2), st.cap(ends, 2)),
            (2, 4),
            "the share until the mark ends"
        );
        assert!(st.take(now, 2) && st.take(now, 2));
        assert!(!st.take(now, 2), "not beyond the share");
        assert!(
            st.above_share(now, 2),
            "two slots above the share are unused"
        );
        assert!(st.take(ends, 2), "the whole block once the mark ends");
        assert!(!st.above_share(ends, 2));
        assert!(
            st.give_back(2, || now),
            "back to its share while contended: nudge"
        );
        assert!(!st.give_back(2, || now), "below its share: already nudged");
        assert!(st.take(ends, 2));
        assert!(!st.give_back(2, || ends), "not contended at that time");
        // More in use than held (a lost lease), contended: back down to the block's size is
        // not above its share.
        let mut lost = State::new(now, 8);
        lost.record(&granted(2, 0, 8, 2_000), now, 0, &s);
        lost.in_use = 3;
        assert!(
            !lost.give_back(2, || now),
            "at its size: nothing above the share"
        );
    }

    #[test]
    fn a_call_is_asked_for_only_when_it_can_help() {
        let s = sizing(8, 4, 16);
        let now = Instant::now();
        assert_eq!(
            State::new(now, 16).ask(now, 0, &s),
            Some(2),
            "an empty block"
        );
        assert_eq!(
            State::new(now, 16).ask(now, 5, &s),
            Some(6),
            "what the waiters need"
        );
        let mut st = held(now, 2, 2, &s);
        st.take(now, 4);
        st.take(now, 4);
        assert_eq!(
            st.ask(now, 0, &s),
            Some(3),
            "at most an eighth of the 14 free more"
        );
        // Contended: at most the share (4), and a block at its share does not call.
        st.record(&granted(4, 2, 16, 2_000), now, 2, &s);
        st.take(now, 4);
        st.take(now, 4);
        assert_eq!(st.ask(now, 0, &s), None, "at its share while contended");
        let later = now + Duration::from_secs(2);
        assert_eq!(st.ask(later, 0, &s), Some(5), "the mark ended: one more");
        // At the limit with every permit its own: no call.
        let mut all = held(now, 16, 16, &s);
        for _ in 0..16 {
            all.take(now, 4);
        }
        assert_eq!(
            all.ask(now, 0, &s),
            None,
            "the whole semaphore is this block"
        );
        // An expired block asks again, for what is in use plus one.
        let expired = now + TTL;
        assert_eq!(all.ask(expired, 0, &s), Some(16));
        // Just refused: no call for REFUSED.
        let mut st = held(now, 2, 16, &s);
        st.take(now, 4);
        st.take(now, 4);
        st.refused(now);
        assert_eq!(
            st.ask(now + REFUSED - Duration::from_millis(1), 0, &s),
            None
        );
        assert!(st.ask(now + REFUSED, 0, &s).is_some());
    }

    #[test]
    fn a_reply_is_recorded_and_a_loss_is_told() {
        let s = sizing(8, 4, 10);
        let now = Instant::now();
        let mut st = State::new(now, 10);
        assert!(!st.record(&granted(3, 0, 7, 0), now, 0, &s));
        assert_eq!((st.size, st.free_seen, st.last_call), (3, 3, Some(now)));
        assert_eq!(st.valid_until, Some(now + TTL - DRIFT));
        assert_eq!(st.contended_until, None);
        assert!(
            st.record(&granted(3, 0, 3, 0), now, 3, &s),
            "3 believed, none held"
        );
        assert!(
            st.record(&granted(2, 1, 3, 0), now, 3, &s),
            "3 believed, 1 held"
        );
        assert!(
            !st.record(&granted(1, 2, 10, 500), now, 2, &s),
            "shrunk from 2 held"
        );
        assert_eq!(st.free_seen, 0);
        assert_eq!(st.contended_until, Some(now + Duration::from_millis(500)));
        assert!(!st.record(&granted(0, 1, 9, 0), now, 1, &s), "given back");
        assert_eq!(st.valid_until, None, "an empty block admits nothing");
        let mut short = s;
        short.ttl = DRIFT;
        assert!(!st.record(&granted(1, 0, 1, 0), now, 0, &short));
        assert_eq!(
            st.valid_until, None,
            "a lease within the drift admits nothing"
        );
        // Shrinking first: no admission above the new size while the call runs.
        let mut st = held(now, 4, 4, &s);
        assert_eq!(st.shrink_to(2), 4);
        assert_eq!(st.size, 2);
        assert_eq!(st.shrink_to(3), 2, "never grown before the reply");
        assert_eq!(st.size, 2);
    }

    #[test]
    fn the_background_round_renews_shrinks_and_probes() {
        let s = sizing(8, 4, 8);
        let t0 = Instant::now();
        let mut st = held(t0, 4, 4, &s);
        st.take(t0, 2);
        st.take(t0, 2);
        // Within the idle period: nothing due until ttl/3 after the call.
        assert_eq!(st.plan(t0 + Duration::from_millis(10), 2, TTL, false), None);
        // The idle period ends: the block keeps what was used in it (2).
        let t1 = t0 + IDLE_RETURN;
        assert_eq!(st.plan(t1 - Duration::from_millis(1), 2, TTL, false), None);
        assert_eq!(st.plan(t1, 2, TTL, false), Some(2));
        st.record(&granted(2, 4, 6, 0), t1, 4, &s);
        // Renewal every ttl/3.
        assert_eq!(
            st.plan(t1 + TTL / 3 - Duration::from_millis(1), 2, TTL, false),
            None
        );
        assert_eq!(st.plan(t1 + TTL / 3, 2, TTL, false), Some(2));
        // Unused through an idle period: only what is in use stays.
        let mut st = held(t0, 4, 4, &s);
        st.take(t0, 2);
        st.give_back(2, Instant::now);
        assert_eq!(
            st.plan(t0 + IDLE_RETURN, 2, TTL, false),
            Some(1),
            "the peak of that period"
        );
        assert_eq!(
            st.plan(t0 + IDLE_RETURN * 2, 2, TTL, false),
            Some(0),
            "unused since"
        );
        // Closing: every slot not in use.
        let mut st = held(t0, 4, 4, &s);
        st.take(t0, 2);
        assert_eq!(st.plan(t0, 2, TTL, true), Some(1));
        // Never below the requests in flight, even above the block (a lost lease).
        let mut st = held(t0, 2, 2, &s);
        st.take(t0, 2);
        st.take(t0, 2);
        st.size = 1;
        assert_eq!(st.plan(t0, 2, TTL, true), Some(2));
        // Contended: the block goes to its share as soon as its requests allow.
        let mut st = State::new(t0, 8);
        st.record(&granted(4, 0, 8, 2_000), t0, 0, &s);
        st.take(t0, 2);
        assert_eq!(st.plan(t0, 2, TTL, false), Some(2));
        // Above its share of a full semaphore, and not told of contention: it asks once
        // per idle period.
        let mut st = held(t0, 8, 8, &s);
        assert_eq!(
            st.plan(t0 + IDLE_RETURN - Duration::from_millis(1), 2, TTL, false),
            None
        );
        let probe = t0 + IDLE_RETURN;
        st.period_start = probe;
        assert_eq!(
            st.plan(probe, 2, TTL, false),
            Some(8),
            "a probe keeps the size"
        );
        let mut free = held(t0, 8, 4, &sizing(8, 4, 12));
        free.period_start = probe;
        assert_eq!(
            free.plan(probe, 3, TTL, false),
            None,
            "permits free: no probe"
        );
        let mut share = held(t0, 2, 8, &s);
        share.period_start = probe;
        assert_eq!(
            share.plan(probe, 2, TTL, false),
            None,
            "at its share: no probe"
        );
        let mut refused = State::new(t0, 8);
        refused.record(&granted(0, 0, 8, 0), t0, 0, &s);
        assert_eq!(
            refused.plan(t0 + TTL, 2, TTL, false),
            None,
            "an empty block is not renewed"
        );
        assert!(State::new(t0, 8).empty() && !held(t0, 1, 1, &s).empty());
        let mut busy = State::new(t0, 8);
        busy.in_use = 1;
        assert!(!busy.empty());
    }
}
