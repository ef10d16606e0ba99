//! The units leased to this instance, per client key: taken in process until spent or their
//! window ends, refilled by one lease call at a time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use redis::Value;

use super::flight::{Flights, Leader, Turn};
use super::script::{Grant, LeaseScript};
use super::settings::QuotaLease;
use crate::error::Result;
use crate::rate_limit::decision::{Decision, Quota};
use crate::rate_limit::deny_cache::DenyCache;
use crate::script::{Call, ScriptManager};

/// What this instance holds of one key's window.
#[derive(Debug, Clone, Copy)]
struct Held {
    /// Units leased and not used yet.
    units: u64,
    /// When the window ends at the latest (measured from before the lease call was sent, so
    /// never after the server's window): no unit is used from then on. With a `step`, when
    /// the first unit held may last be used.
    until: Instant,
    /// How much longer each next unit held may be used than the one before it (unit `i`,
    /// from 0, until `until + i * step`): zero for a window's units, which all end with it;
    /// GCRA's emission interval (each unit conforms until its slot is one interval away).
    step: Duration,
    /// When the quota resets as the last lease call saw it (the fixed window's end; for a
    /// sliding window, when every counted unit has left it).
    reset: Instant,
    /// What counted toward the limit in the answer that saw the highest `counter` (this
    /// instance's units included).
    count: u64,
    /// The highest window counter a lease call of this window answered.
    counter: u64,
    /// When the call that answered `count` was sent: a lower counter in the answer of a call
    /// sent before it is only a reply handled out of order, not a lost counter.
    count_sent: Instant,
    /// The last ask of this window.
    last_want: u32,
    /// The units granted to this instance in this window (used and held): what a key's next
    /// window starts its asks from.
    taken: u64,
    /// A lease call of this window was refused, and the limiter has a deny cache, at this
    /// [generation](DenyCache::generation) of it: once the units held are spent, checks that
    /// cannot fit beside `count` are refused here until `until`, as the cache would, without
    /// building the cache's key (the refusal is in the cache too).
    refused: Option<u64>,
}

/// A limiter's leases, shared by its clones.
#[derive(Debug)]
pub(super) struct Leases {
    settings: QuotaLease,
    script: LeaseScript,
    held: Mutex<HashMap<String, Held>>,
    flights: Flights,
}

/// What the units held here answer for a check ([`Leases::take_local`]).
pub(super) enum Local<'a> {
    /// Taken: the check's decision.
    Taken(Decision),
    /// Spent, and a refusal of this window stands for the deny cache: the check's decision.
    Refused(Decision),
    /// Running low: this check sends the next lease call (the others keep taking units).
    Refill(Leader<'a>),
    /// Not enough held (or the window has ended): ask Redis.
    Empty,
}

/// What a lease call asks for.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ask {
    /// The units of the check that sends it.
    pub(super) cost: u32,
    /// The units this instance's checks waiting for it need (at least `cost`).
    pub(super) demand: u32,
    /// The deny cache's generation when the call was sent, when the limiter has one: a
    /// refusal is then kept with the units.
    pub(super) cache: Option<u64>,
}

/// How a lease call ended.
pub(super) struct Granted {
    pub(super) decision: Decision,
}

impl Leases {
    pub(super) fn new(settings: QuotaLease, script: LeaseScript) -> Arc<Self> {
        Arc::new(Self {
            settings,
            script,
            held: Mutex::new(HashMap::new()),
            flights: Flights::default(),
        })
    }

    pub(super) fn settings(&self) -> QuotaLease {
        self.settings
    }

    /// Joins the lease call in flight for `client` (a [`LimitKey`](crate::rate_limit::LimitKey)'s text: the
    /// leases are one limiter's, so it names one counter), or becomes it.
    pub(super) fn join(&self, client: &str) -> Turn<'_> {
        self.flights.join(client)
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Held>> {
        // Plain data: a panic elsewhere cannot leave it inconsistent.
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `cost` units from what this instance holds of `client`'s window, when it holds
    /// enough and the window has not ended: the decision, with no round trip. When taking
    /// them would leave fewer than a quarter of the last ask and no lease call of the key is
    /// in flight, the check does not take them: it leads the next lease call while the other
    /// checks go on taking what is left (refreshed ahead, so a hot key's checks do not all
    /// stop and wait when its units run out).
    /// With `cache` (the limiter's deny cache), a spent lease whose window a lease call found
    /// full answers the refusal (counted as the cache's hit).
    pub(super) fn take_local(
        &self,
        client: &str,
        (limit, cost): (u32, u32),
        cache: Option<&DenyCache>,
    ) -> Local<'_> {
        self.take(client, (limit, cost), cache, true)
    }

    /// Like [`take_local`](Self::take_local), but never leads a lease call: `None` where it
    /// would (or where too few units are held), so the caller's check goes to Redis. While a
    /// refill is in flight it takes what is left, as the checks of `take_local` do.
    pub(super) fn take_held(
        &self,
        client: &str,
        (limit, cost): (u32, u32),
        cache: Option<&DenyCache>,
    ) -> Option<Decision> {
        match self.take(client, (limit, cost), cache, false) {
            Local::Taken(decision) | Local::Refused(decision) => Some(decision),
            Local::Refill(_) | Local::Empty => None,
        }
    }

    fn take(
        &self,
        client: &str,
        (limit, cost): (u32, u32),
        cache: Option<&DenyCache>,
        lead: bool,
    ) -> Local<'_> {
        let mut held = self.lock();
        let Some(entry) = held.get_mut(client) else {
            return Local::Empty;
        };
        // Units that end one by one are dropped as their time passes (the clock read under
        // the lock: never earlier than the check began).
        let staggered = (!entry.step.is_zero()).then(|| {
            let now = Instant::now();
            entry.expire(now);
            now
        });
        if entry.units < u64::from(cost) {
            // Spent (a limited client's every check): a refusal of this window, when one
            // stands, else Redis. Decided after the lock is let go (the clock read then, so
            // never earlier than the entry was seen): the other checks of the key wait for
            // no clock and no shared counter.
            let (Some(generation), Some(cache)) = (entry.refused, cache) else {
                return Local::Empty;
            };
            let seen = *entry;
            drop(held);
            if generation != cache.generation() {
                return Local::Empty;
            }
            return refusal(limit, cost, &seen, Instant::now()).map_or(Local::Empty, |d| {
                cache.hit();
                Local::Refused(d)
            });
        }
        // The clock is read under the lock, so never earlier than the check began: a unit
        // is never taken after its window ended.
        let now = staggered.unwrap_or_else(Instant::now);
        if entry.until <= now {
            return Local::Empty;
        }
        let left = entry.units - u64::from(cost);
        if left < u64::from(entry.last_want / 4) {
            if lead {
                if let Some(leader) = self.flights.lead_if_idle(client) {
                    return Local::Refill(leader);
                }
            } else if self.flights.is_idle(client) {
                // No refill on its way: the check's round trip leads one.
                return Local::Empty;
            }
            // A refill is on its way: this check takes from what is left, in process.
        }
        entry.spend(u64::from(cost));
        Local::Taken(allowed(limit, entry, now))
    }

    /// One lease call for `ask.cost` units of `client`'s counter `redis_key` (`span`: a
    /// window's length in ms, GCRA's emission interval in µs): the decision for this check, the rest of the grant kept for the
    /// next ones.
    pub(super) async fn lease<C: ConnectionLike>(
        &self,
        manager: &ScriptManager,
        conn: &mut C,
        (client, redis_key): (&str, &str),
        (limit, span): (u32, u64),
        ask: Ask,
    ) -> Result<Granted> {
        let Ask {
            cost,
            demand,
            cache,
        } = ask;
        let now = Instant::now();
        let held = self.lock().get(client).map(|h| {
            let mut h = *h;
            h.expire(now);
            h
        });
        let (last, left) = match held {
            Some(h) if h.until > now => {
                (Some(h.last_want), u64::from(limit).saturating_sub(h.count))
            }
            // A new window of a key used before: its first ask starts from a quarter of what
            // the last window used here (as if that were the last ask, so it doubles to
            // half), never less than the cost. A key used once a window asks the cost.
            Some(h) => (carried(&h), u64::from(limit)),
            None => (None, u64::from(limit)),
        };
        let want = self.settings.want(cost, last, left, demand);
        let mut call = Call::new(self.script.script());
        call.key(redis_key).arg(limit).arg(span).arg(cost).arg(want);
        let sent = Instant::now();
        let reply: Value = manager.invoke(conn, &call).await?;
        let grant = self.script.decode(reply, span)?;
        if grant.granted < u64::from(cost) {
            if let Some(generation) = cache {
                self.keep_refusal(client, generation, sent, &grant);
            }
            return Ok(Granted {
                decision: Decision::Limited {
                    quota: Quota::new(limit, grant.used, grant.reset),
                    retry_after: grant.retry,
                },
            });
        }
        let Grant {
            granted,
            used: count,
            counter,
            ..
        } = grant;
        let fresh = Held {
            units: granted - u64::from(cost),
            until: sent.checked_add(grant.valid).unwrap_or(sent),
            step: grant.step,
            reset: sent.checked_add(grant.reset).unwrap_or(sent),
            count,
            counter,
            count_sent: sent,
            last_want: want,
            taken: granted,
            refused: None,
        };
        let now = Instant::now();
        let entry = self.keep_grant(client, fresh, now);
        Ok(Granted {
            decision: allowed(limit, &entry, now),
        })
    }

    /// Test support: `units` held of `client`'s window until `until`, as if one lease call
    /// had just granted them.
    #[cfg(test)]
    pub(super) fn hold(&self, client: &str, units: u64, until: Instant) {
        let now = Instant::now();
        let granted = Held {
            units,
            until,
            step: Duration::ZERO,
            reset: until,
            count: units,
            counter: units,
            count_sent: now,
            last_want: 8,
            taken: units,
            refused: None,
        };
        self.keep_grant(client, granted, now);
    }

    /// Keeps what a lease call granted `client` beyond its own check (`fresh`: the units, the
    /// window's end, the counter and when the call was sent) and answers the entry its check
    /// is decided from. A new key is kept while fewer than [`QuotaLease::MAX_KEYS`] are
    /// (expired ones are evicted first when full).
    fn keep_grant(&self, client: &str, fresh: Held, now: Instant) -> Held {
        let mut held = self.lock();
        if !held.contains_key(client) && held.len() >= QuotaLease::MAX_KEYS {
            held.retain(|_, h| h.until > now);
        }
        let room = held.len() < QuotaLease::MAX_KEYS;
        let Some(h) = held.get_mut(client) else {
            // Full: this grant's rest dies with its window (counted, never over-admitted).
            if room {
                held.insert(client.to_owned(), fresh);
            }
            return fresh;
        };
        h.expire(now);
        // Same window (it has not ended here, so not in Redis either): add the units. A
        // counter lower than last seen, answered to a call sent after the one that saw it,
        // was lost (a restart, a flush, a reset): the units held of it are dropped with it.
        // Lower in the answer to an earlier call is a reply handled late (many checks of a
        // hot key lease at once): its units count.
        if h.until > now && (fresh.counter >= h.counter || fresh.count_sent < h.count_sent) {
            h.merge(&fresh);
            if fresh.counter >= h.counter {
                h.count = fresh.count;
                h.counter = fresh.counter;
                h.count_sent = fresh.count_sent;
                h.reset = fresh.reset;
            }
            h.last_want = h.last_want.max(fresh.last_want);
            h.taken = h.taken.saturating_add(fresh.taken);
        } else {
            *h = fresh;
        }
        *h
    }

    /// Keeps a refused lease call's answer (sent at `sent`) beside the units of `client`'s
    /// window, for the deny cache at `generation`, until the window ends. A counter lower than
    /// the one already seen is left to Redis (it was lost, or the reply is late).
    fn keep_refusal(&self, client: &str, generation: u64, sent: Instant, grant: &Grant) {
        let until = sent.checked_add(grant.valid).unwrap_or(sent);
        let mut held = self.lock();
        let now = Instant::now();
        if until <= now {
            return;
        }
        let fresh = Held {
            units: 0,
            until,
            step: grant.step,
            reset: sent.checked_add(grant.reset).unwrap_or(sent),
            count: grant.used,
            counter: grant.counter,
            count_sent: sent,
            last_want: 0,
            taken: 0,
            refused: Some(generation),
        };
        if let Some(h) = held.get_mut(client) {
            if h.until <= now {
                *h = fresh;
            } else if grant.counter >= h.counter {
                h.count = grant.used;
                h.counter = grant.counter;
                h.count_sent = sent;
                h.until = h.until.min(until);
                h.reset = fresh.reset;
                h.refused = Some(generation);
            }
            return;
        }
        if held.len() < QuotaLease::MAX_KEYS {
            held.insert(client.to_owned(), fresh);
        }
    }

    /// Forgets what this instance holds of `client` (after a reset of its counter).
    pub(super) fn forget(&self, client: &str) {
        self.lock().remove(client);
    }
}

impl Held {
    /// Drops the units whose time has passed at `now`: with a `step`, those of the front
    /// that ended (a window's units all end at `until`, which the checks compare).
    fn expire(&mut self, now: Instant) {
        if self.step.is_zero() || self.units == 0 || self.until > now {
            return;
        }
        let past = now.duration_since(self.until).as_nanos() / self.step.as_nanos() + 1;
        self.spend(u64::try_from(past).unwrap_or(u64::MAX).min(self.units));
    }

    /// Takes `n` units from the front: with a `step`, the next unit held is the one `n`
    /// steps later (none left when its end is beyond the clock's range).
    fn spend(&mut self, n: u64) {
        self.units = self.units.saturating_sub(n);
        if self.step.is_zero() {
            return;
        }
        match steps(self.step, n).and_then(|d| self.until.checked_add(d)) {
            Some(until) => self.until = until,
            None => self.units = 0,
        }
    }

    /// Adds a grant's units (of the same window, or for GCRA of the same bucket, which only
    /// moves forward). A window's units end with the earlier end. Units that end one by one
    /// stay one run, so both runs' units must fit it: the run starts at the earlier of this
    /// one's start and the grant's start moved back by this one's units, so the `i`-th unit
    /// of the run never ends later than the `i`-th of the two (each unit keeps the slot it
    /// was granted, used no later than that slot allows). The grant's units end sooner when
    /// its slots come after a gap (other instances' units in between), never later.
    fn merge(&mut self, fresh: &Self) {
        if self.step.is_zero() {
            self.until = self.until.min(fresh.until);
        } else if self.units == 0 {
            self.until = fresh.until;
        } else {
            match steps(self.step, self.units).and_then(|d| fresh.until.checked_sub(d)) {
                Some(start) => self.until = self.until.min(start),
                None => (self.units, self.until) = (0, fresh.until),
            }
        }
        self.units = self.units.saturating_add(fresh.units);
    }
}

/// `n` times `step`, when it fits a `Duration` of whole nanoseconds in a `u64`.
fn steps(step: Duration, n: u64) -> Option<Duration> {
    let nanos = step.as_nanos().checked_mul(u128::from(n))?;
    u64::try_from(nanos).ok().map(Duration::from_nanos)
}

/// The ask a key's new window continues from: a quarter of the units the last window used
/// here, when that was more than one ask's cost.
fn carried(last: &Held) -> Option<u32> {
    let used = last.taken.saturating_sub(last.units);
    let quarter = u32::try_from(used / 4).unwrap_or(u32::MAX);
    (quarter > 1).then_some(quarter)
}

/// A refusal of `cost` units as a spent lease whose window was found full sees it: `None`
/// when the window has ended here or `cost` fits beside the counter seen.
fn refusal(limit: u32, cost: u32, held: &Held, now: Instant) -> Option<Decision> {
    if held.until <= now || held.count.saturating_add(u64::from(cost)) <= u64::from(limit) {
        return None;
    }
    let left = held.until.saturating_duration_since(now);
    Some(Decision::Limited {
        quota: Quota::new(limit, held.count, left),
        retry_after: left,
    })
}

/// An allowed check as the lease sees it: what is left in Redis as last seen, plus the units
/// held here (at most the limit), until the window ends.
fn allowed(limit: u32, held: &Held, now: Instant) -> Decision {
    let left = u64::from(limit)
        .saturating_sub(held.count)
        .saturating_add(held.units);
    Decision::Allowed(Quota::with_remaining(
        limit,
        left,
        held.reset
            .saturating_duration_since(now)
            .max(Duration::from_millis(1)),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fixed window's refusal: `count` in Redis, the window ending `left` after the call.
    fn refusal_of(count: u64, left: Duration) -> Grant {
        Grant {
            step: Duration::ZERO,
            granted: 0,
            used: count,
            counter: count,
            valid: left,
            reset: left,
            retry: left,
        }
    }

    #[test]
    fn a_grant_adds_to_its_window_and_a_lost_counter_drops_what_was_held() {
        let leases = Leases::new(QuotaLease::new(64).unwrap(), LeaseScript::FixedWindow);
        let now = Instant::now();
        let (early, late) = (
            now - Duration::from_millis(20),
            now - Duration::from_millis(10),
        );
        let grant = |units, count, sent, until| Held {
            count,
            counter: count,
            count_sent: sent,
            taken: units + 1,
            ..staggered(units, until, Duration::ZERO)
        };
        let end = now + Duration::from_secs(10);
        let first = leases.keep_grant("k", grant(7, 10, early, end), now);
        assert_eq!(
            (first.units, first.count, first.taken),
            (7, 10, 8),
            "a new key"
        );
        // Same window, a higher counter: the units add up, the earlier end stays.
        let sooner = now + Duration::from_secs(9);
        let more = leases.keep_grant("k", grant(5, 20, late, sooner), now);
        assert_eq!((more.units, more.count, more.taken), (12, 20, 14));
        assert_eq!((more.until, more.count_sent), (sooner, late));
        let later_end = leases.keep_grant("k", grant(1, 21, late, end), now);
        assert_eq!(later_end.until, sooner, "the window never grows");
        // A lower counter answered to a call sent before the one that saw 21: a late reply,
        // its units count and the counter stays.
        let late_reply = leases.keep_grant("k", grant(3, 15, early, end), now);
        assert_eq!((late_reply.units, late_reply.count), (16, 21));
        assert_eq!(late_reply.count_sent, late);
        // A lower counter answered to a call sent at the same instant as the one that saw 21
        // (not before it): the counter was lost, what was held of it goes with it.
        let same_instant = leases.keep_grant("k", grant(4, 9, late, end), now);
        assert_eq!((same_instant.units, same_instant.count), (4, 9));
        leases.keep_grant("k", grant(12, 21, late, sooner), now);
        // A lower counter answered to a call sent after: the counter was lost in Redis, and
        // what was held of it goes with it.
        let lost = leases.keep_grant("k", grant(2, 3, now, end), now);
        assert_eq!((lost.units, lost.count, lost.until), (2, 3, end));
        // Another key's ended window stays while there is room: what it used starts that
        // key's next window (evicted only to make room, below).
        leases.keep_grant("old", grant(1, 1, early, now), now);
        leases.keep_grant("another", grant(1, 1, late, end), now);
        assert!(leases.lock().contains_key("old"));
        // A window that ended here: the grant starts afresh, whatever its counter.
        leases.lock().get_mut("k").unwrap().until = now;
        let next = leases.keep_grant("k", grant(4, 50, now, end), now);
        assert_eq!((next.units, next.count, next.taken), (4, 50, 5));
    }

    #[test]
    fn at_most_max_keys_are_held_and_ended_windows_make_room() {
        let leases = Leases::new(QuotaLease::new(64).unwrap(), LeaseScript::FixedWindow);
        let now = Instant::now();
        let held = |until| Held {
            count: 1,
            counter: 1,
            count_sent: now,
            last_want: 2,
            taken: 2,
            ..staggered(1, until, Duration::ZERO)
        };
        let live = now + Duration::from_secs(10);
        {
            let mut map = leases.lock();
            for i in 0..QuotaLease::MAX_KEYS - 1 {
                map.insert(format!("k{i}"), held(live));
            }
        }
        leases.keep_grant("last", held(live), now);
        assert_eq!(
            leases.lock().len(),
            QuotaLease::MAX_KEYS,
            "the last one that fits"
        );
        // Full of live windows: a new key's grant is answered but not kept.
        let answered = leases.keep_grant("over", held(live), now);
        assert_eq!(answered.units, 1);
        assert!(!leases.lock().contains_key("over"));
        assert_eq!(leases.lock().len(), QuotaLease::MAX_KEYS);
        // A key already held is still served when full.
        assert_eq!(leases.keep_grant("k0", held(live), now).units, 2);
        // A refusal of a new key is not kept either when full (Redis answers its checks).
        leases.keep_refusal("refused", 1, now, &refusal_of(5, Duration::from_secs(10)));
        assert!(!leases.lock().contains_key("refused"));
        assert_eq!(leases.lock().len(), QuotaLease::MAX_KEYS);
        // Full, but one window ended: it is evicted and the new key kept.
        leases.lock().get_mut("k1").unwrap().until = now;
        leases.keep_grant("new", held(live), now);
        let map = leases.lock();
        assert!(map.contains_key("new") && !map.contains_key("k1"));
        assert_eq!(map.len(), QuotaLease::MAX_KEYS);
    }

    #[test]
    fn a_new_window_starts_from_what_the_last_one_used() {
        let now = Instant::now();
        let used = |taken, units| Held {
            count: taken,
            counter: taken,
            last_want: 64,
            taken,
            ..staggered(units, now, Duration::ZERO)
        };
        assert_eq!(carried(&used(400, 0)), Some(100), "a quarter of 400 used");
        assert_eq!(
            carried(&used(400, 200)),
            Some(50),
            "units left unused do not count"
        );
        assert_eq!(carried(&used(1, 0)), None, "used once: asks its cost");
        assert_eq!(
            carried(&used(8, 4)),
            None,
            "4 used: a quarter is 1, the cost"
        );
        let lease = QuotaLease::new(64).unwrap();
        assert_eq!(lease.want(1, carried(&used(400, 0)), 1_000, 1), 64);
        assert_eq!(lease.want(1, carried(&used(40, 0)), 1_000, 1), 20);
    }

    #[test]
    fn a_check_that_finds_the_units_low_refills_ahead_while_the_others_take_them() {
        let leases = Leases::new(QuotaLease::new(64).unwrap(), LeaseScript::FixedWindow);
        let now = Instant::now();
        let held = |units| Held {
            count: 100,
            counter: 100,
            count_sent: now,
            last_want: 64,
            taken: 100,
            ..staggered(units, now + Duration::from_secs(10), Duration::ZERO)
        };
        let units = |l: &Leases| l.lock()["k"].units;
        leases.lock().insert("k".to_owned(), held(40));
        assert!(
            matches!(leases.take_local("k", (1_000, 1), None), Local::Taken(_)),
            "plenty"
        );
        assert_eq!(units(&leases), 39);
        leases.lock().insert("k".to_owned(), held(16));
        let Local::Refill(refill) = leases.take_local("k", (1_000, 1), None) else {
            panic!("15 left would be under a quarter of 64: this check refills");
        };
        assert_eq!(units(&leases), 16, "the refilling check takes none");
        for left in (0..16).rev() {
            assert!(
                matches!(leases.take_local("k", (1_000, 1), None), Local::Taken(_)),
                "the others take what is left while the refill is in flight"
            );
            assert_eq!(units(&leases), left);
        }
        assert!(matches!(
            leases.take_local("k", (1_000, 1), None),
            Local::Empty
        ));
        drop(refill);
        leases.lock().insert("k".to_owned(), held(16));
        assert!(matches!(
            leases.take_local("k", (1_000, 1), None),
            Local::Refill(_)
        ));

        // Answering in process (the middleware's first try) never leads the refill: where a
        // check would lead it, it takes nothing and starts no call, and the check's round
        // trip leads it.
        leases.lock().insert("k".to_owned(), held(40));
        assert!(leases.take_held("k", (1_000, 1), None).is_some());
        assert_eq!(units(&leases), 39);
        leases.lock().insert("k".to_owned(), held(16));
        assert!(leases.take_held("k", (1_000, 1), None).is_none());
        assert_eq!(units(&leases), 16, "nothing taken");
        let Local::Refill(refill) = leases.take_local("k", (1_000, 1), None) else {
            panic!("no call was started: the round trip leads it");
        };
        // Once the refill is in flight, the checks answered in process take what is left
        // (no round trip each), down to nothing.
        for left in (0..16).rev() {
            assert!(leases.take_held("k", (1_000, 1), None).is_some());
            assert_eq!(units(&leases), left);
        }
        assert!(leases.take_held("k", (1_000, 1), None).is_none(), "spent");
        drop(refill);
        leases.lock().insert("k".to_owned(), held(16));
        assert!(
            leases.take_held("k", (1_000, 1), None).is_none(),
            "the refill ended: the next low check leads again"
        );
    }

    #[test]
    fn a_spent_lease_answers_the_refusal_it_kept_for_the_deny_cache() {
        let leases = Leases::new(QuotaLease::new(64).unwrap(), LeaseScript::FixedWindow);
        let cache = DenyCache::new(10).unwrap();
        let sent = Instant::now();
        let window = Duration::from_secs(10);
        // A lease call of this window came back refused: 100 counted of a limit of 100.
        leases.keep_refusal("k", cache.generation(), sent, &refusal_of(100, window));
        let refused = leases.take_held("k", (100, 1), Some(&cache)).unwrap();
        assert!(!refused.is_allowed());
        assert!(refused.retry_after().unwrap() <= window);
        assert_eq!(refused.quota().remaining(), 0);
        assert_eq!(cache.stats().hits, 1, "counted as the cache's hit");
        assert!(
            matches!(
                leases.take_local("k", (100, 1), Some(&cache)),
                Local::Refused(_)
            ),
            "the round trip's path answers it too"
        );
        assert!(
            leases.take_held("k", (100, 1), None).is_none(),
            "without a deny cache: Redis"
        );
        assert!(
            leases.take_held("k", (101, 1), Some(&cache)).is_none(),
            "a cost that fits beside the counter seen: Redis"
        );
        cache.clear();
        assert!(
            leases.take_held("k", (100, 1), Some(&cache)).is_none(),
            "cleared with the cache"
        );
        assert_eq!(cache.stats().hits, 2);

        // Kept beside units still held: those are used first.
        leases.lock().get_mut("k").unwrap().units = 2;
        leases.keep_refusal("k", cache.generation(), sent, &refusal_of(100, window));
        assert!(leases
            .take_held("k", (100, 1), Some(&cache))
            .unwrap()
            .is_allowed());
        assert!(leases
            .take_held("k", (100, 1), Some(&cache))
            .unwrap()
            .is_allowed());
        assert!(!leases
            .take_held("k", (100, 1), Some(&cache))
            .unwrap()
            .is_allowed());

        // A lower counter than seen (lost, or a late reply) is left to Redis; a window that
        // has ended is replaced.
        leases.keep_refusal("k", cache.generation(), sent, &refusal_of(50, window));
        assert_eq!(leases.lock()["k"].count, 100);
        leases.lock().get_mut("k").unwrap().until = sent;
        assert!(
            leases.take_held("k", (100, 1), Some(&cache)).is_none(),
            "ended"
        );
        leases.keep_refusal(
            "k",
            cache.generation(),
            Instant::now(),
            &refusal_of(100, window),
        );
        assert!(leases.take_held("k", (100, 1), Some(&cache)).is_some());
        // A refusal whose window already ended is not kept.
        leases.keep_refusal(
            "gone",
            cache.generation(),
            sent,
            &refusal_of(100, Duration::ZERO),
        );
        assert!(!leases.lock().contains_key("gone"));
    }

    /// `units` held from `until`, each next one `step` later.
    fn staggered(units: u64, until: Instant, step: Duration) -> Held {
        Held {
            units,
            until,
            step,
            reset: until,
            count: 0,
            counter: 0,
            count_sent: until,
            last_want: 8,
            taken: units,
            refused: None,
        }
    }

    #[test]
    fn units_that_end_one_by_one_are_dropped_as_their_time_passes() {
        let (t, ms) = (Instant::now(), Duration::from_millis(1));
        // Units ending at t+5, t+15, t+25, t+35, t+45 ms.
        let mut h = staggered(5, t + 5 * ms, 10 * ms);
        h.expire(t);
        assert_eq!((h.units, h.until), (5, t + 5 * ms), "none ended yet");
        h.expire(t + 20 * ms);
        assert_eq!((h.units, h.until), (3, t + 25 * ms), "two ended");
        h.expire(t + 25 * ms);
        assert_eq!(
            (h.units, h.until),
            (2, t + 35 * ms),
            "one ends at its instant"
        );
        h.spend(1);
        assert_eq!((h.units, h.until), (1, t + 45 * ms), "taken from the front");
        h.expire(t + 1_000 * ms);
        assert_eq!(h.units, 0, "all ended");
        // A window's units all end at `until`, which the checks compare: left as they are.
        let mut w = staggered(5, t + 5 * ms, Duration::ZERO);
        w.expire(t + 20 * ms);
        w.spend(2);
        assert_eq!((w.units, w.until), (3, t + 5 * ms));
        // An end beyond the clock's range: nothing is held.
        let mut far = staggered(5, t, Duration::MAX);
        far.spend(2);
        assert_eq!(far.units, 0);
    }

    #[test]
    fn a_grant_joins_the_run_no_unit_ending_later_than_it_was_granted() {
        let (t, ms) = (Instant::now(), Duration::from_millis(1));
        let step = 10 * ms;
        // 2 held (ending t+100, t+110); a grant of 3 after a gap (t+200, t+210, t+220): the
        // run keeps its start, the grant's units end sooner (t+120, t+130, t+140).
        let mut gap = staggered(2, t + 100 * ms, step);
        gap.merge(&staggered(3, t + 200 * ms, step));
        assert_eq!((gap.units, gap.until), (5, t + 100 * ms));
        // A grant starting before the held units would end (its call measured from an
        // earlier instant): the run starts 2 steps before the grant.
        let mut overlap = staggered(2, t + 100 * ms, step);
        overlap.merge(&staggered(3, t + 105 * ms, step));
        assert_eq!((overlap.units, overlap.until), (5, t + 85 * ms));
        // Nothing held: the grant's own run.
        let mut empty = staggered(0, t + 100 * ms, step);
        empty.merge(&staggered(3, t + 300 * ms, step));
        assert_eq!((empty.units, empty.until), (3, t + 300 * ms));
        // The held units' run beyond the clock's range: they go, the grant's run stays.
        let huge = Duration::from_secs(u64::MAX / 4);
        let mut beyond = staggered(2, t + 100 * ms, huge);
        beyond.merge(&staggered(3, t + 300 * ms, huge));
        assert_eq!((beyond.units, beyond.until), (3, t + 300 * ms));
        // A window: the earlier end.
        let mut window = staggered(2, t + 100 * ms, Duration::ZERO);
        window.merge(&staggered(3, t + 50 * ms, Duration::ZERO));
        assert_eq!((window.units, window.until), (5, t + 50 * ms));
    }

    #[test]
    fn a_gcra_lease_takes_only_units_that_have_not_ended() {
        let leases = Leases::new(QuotaLease::new(64).unwrap(), LeaseScript::Gcra);
        let (now, ms) = (Instant::now(), Duration::from_millis(1));
        // 4 held, ending 15 s and 5 s ago and in 5 s and 15 s (no refill led: the last ask
        // was 0).
        let fresh = Held {
            count: 1,
            counter: 1,
            last_want: 0,
            ..staggered(4, now - 15_000 * ms, 10_000 * ms)
        };
        leases.keep_grant("k", fresh, now - 20_000 * ms);
        for _ in 0..2 {
            assert!(matches!(
                leases.take_local("k", (100, 1), None),
                Local::Taken(_)
            ));
        }
        assert!(
            matches!(leases.take_local("k", (100, 1), None), Local::Empty),
            "the two that ended are not taken"
        );
    }

    #[test]
    fn the_view_adds_the_units_held_to_what_redis_has_left() {
        let now = Instant::now();
        let held = Held {
            count: 90,
            counter: 90,
            count_sent: now,
            taken: 15,
            ..staggered(7, now + Duration::from_secs(1), Duration::ZERO)
        };
        let d = allowed(100, &held, now);
        assert_eq!(d.quota().remaining(), 17);
        assert!(d.quota().reset_after() <= Duration::from_secs(1));
        let full = Held {
            step: Duration::ZERO,
            count: 0,
            units: 50,
            ..held
        };
        assert_eq!(allowed(100, &full, now).quota().remaining(), 100);
    }
}
