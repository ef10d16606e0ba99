//! One lease call in flight per key: checks of a hot key that find no units held wait for the
//! call already on its way instead of each sending its own (which would take `max_units` each
//! and hold many leases' worth on one instance).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use crate::rate_limit::decision::Decision;

/// A lease call on its way, as its followers see it.
#[derive(Debug, Default)]
pub(super) struct Flight {
    done: Notify,
    finished: AtomicBool,
    /// The checks that waited for it: what the next call should ask for at least.
    followers: AtomicU32,
    /// The refusal it got, with the cost refused: a follower asking at least as much gets the
    /// same answer (the window had less than that left).
    refused: Mutex<Option<(u32, Decision)>>,
}

impl Flight {
    /// Waits until the call has ended (answered, failed or dropped).
    pub(super) async fn wait(&self) {
        let notified = self.done.notified();
        tokio::pin!(notified);
        // Registered before the check: an end between the two still wakes this waiter.
        notified.as_mut().enable();
        if self.finished.load(Ordering::Acquire) {
            return;
        }
        notified.await;
    }

    /// The checks that waited for this call.
    pub(super) fn followers(&self) -> u32 {
        self.followers.load(Ordering::Relaxed)
    }

    /// The refusal the call got, when it answers a check of `cost`.
    pub(super) fn refusal_for(&self, cost: u32) -> Option<Decision> {
        let refused = *self.refused.lock().unwrap_or_else(|e| e.into_inner());
        refused.and_then(|(refused_cost, d)| (cost >= refused_cost).then_some(d))
    }

    fn finish(&self) {
        self.finished.store(true, Ordering::Release);
        self.done.notify_waiters();
    }
}

/// The calls in flight of one limiter's leases, by Redis key.
#[derive(Debug, Default)]
pub(super) struct Flights {
    calls: Mutex<HashMap<String, Arc<Flight>>>,
}

/// Whose turn it is to ask Redis.
pub(super) enum Turn<'a> {
    /// No call in flight for the key: this check sends one; the guard ends the flight when
    /// dropped (also when the check is cancelled or fails).
    Lead(Leader<'a>),
    /// A call is in flight: wait for it, then look at the units again.
    Follow(Arc<Flight>),
}

/// The check whose call the others wait for.
pub(super) struct Leader<'a> {
    flights: &'a Flights,
    key: String,
    flight: Arc<Flight>,
}

impl Leader<'_> {
    /// Lets the followers that ask at least `cost` take this refusal as theirs.
    pub(super) fn refused(&self, cost: u32, decision: Decision) {
        *self
            .flight
            .refused
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some((cost, decision));
    }
}

impl Drop for Leader<'_> {
    fn drop(&mut self) {
        let mut calls = self.flights.lock();
        if calls
            .get(&self.key)
            .is_some_and(|f| Arc::ptr_eq(f, &self.flight))
        {
            calls.remove(&self.key);
        }
        drop(calls);
        self.flight.finish();
    }
}

impl Flights {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Flight>>> {
        // Plain data: a panic elsewhere cannot leave it inconsistent.
        self.calls.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Joins the call in flight for `key`, or becomes it.
    pub(super) fn join(&self, key: &str) -> Turn<'_> {
        let mut calls = self.lock();
        match calls.get(key) {
            Some(flight) => {
                flight.followers.fetch_add(1, Ordering::Relaxed);
                Turn::Follow(Arc::clone(flight))
            }
            None => Turn::Lead(self.lead(&mut calls, key)),
        }
    }

    /// Whether no call for `key` is in flight.
    pub(super) fn is_idle(&self, key: &str) -> bool {
        !self.lock().contains_key(key)
    }

    /// Becomes the call for `key` when none is in flight (`None` when one is).
    pub(super) fn lead_if_idle(&self, key: &str) -> Option<Leader<'_>> {
        let mut calls = self.lock();
        (!calls.contains_key(key)).then(|| self.lead(&mut calls, key))
    }

    /// Registers a new call for `key` (none is in flight: the caller holds the map).
    fn lead(&self, calls: &mut HashMap<String, Arc<Flight>>, key: &str) -> Leader<'_> {
        let flight = Arc::new(Flight::default());
        calls.insert(key.to_owned(), Arc::clone(&flight));
        Leader {
            flights: self,
            key: key.to_owned(),
            flight,
        }
    }

    #[cfg(test)]
    fn in_flight(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::rate_limit::Quota;

    fn limited() -> Decision {
        Decision::Limited {
            quota: Quota::new(10, 10, Duration::from_millis(50)),
            retry_after: Duration::from_millis(50),
        }
    }

    #[test]
    fn every_check_that_joins_a_call_in_flight_counts_as_a_follower() {
        let flights = Flights::default();
        let Turn::Lead(leader) = flights.join("k") else {
            panic!("the first check leads");
        };
        let mut flight = None;
        for joined in 1..=3 {
            let Turn::Follow(f) = flights.join("k") else {
                panic!("a check follows while the call is in flight");
            };
            assert_eq!(f.followers(), joined);
            flight = Some(f);
        }
        drop(leader);
        // The next call asks for the followers' demand: a new flight starts from none.
        assert_eq!(flight.map(|f| f.followers()), Some(3));
        let Turn::Lead(_next) = flights.join("k") else {
            panic!("the next check leads a new call");
        };
        let Turn::Follow(f) = flights.join("k") else {
            panic!("and the one after follows it");
        };
        assert_eq!(f.followers(), 1);
    }

    #[tokio::test]
    async fn followers_wait_for_the_leader_and_share_its_refusal_by_cost() {
        let flights = Flights::default();
        let Turn::Lead(leader) = flights.join("k") else {
            panic!("the first check leads");
        };
        let Turn::Follow(flight) = flights.join("k") else {
            panic!("a second check follows");
        };
        assert!(matches!(flights.join("other"), Turn::Lead(_)), "per key");
        assert_eq!(flight.followers(), 1);
        let waiter = tokio::spawn({
            let flight = Arc::clone(&flight);
            async move { flight.wait().await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished(), "waits while the call is in flight");
        leader.refused(3, limited());
        drop(leader);
        tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .expect("woken when the leader ends")
            .unwrap();
        assert_eq!(flights.in_flight(), 0);
        assert_eq!(flight.refusal_for(3), Some(limited()));
        assert_eq!(
            flight.refusal_for(5),
            Some(limited()),
            "asks more: refused too"
        );
        assert_eq!(
            flight.refusal_for(2),
            None,
            "asks less: may fit, asks again"
        );
        // Waiting on a flight that has already ended returns at once.
        tokio::time::timeout(Duration::from_millis(100), flight.wait())
            .await
            .expect("an ended flight does not block");
        assert!(
            matches!(flights.join("k"), Turn::Lead(_)),
            "the next call leads"
        );
    }

    #[tokio::test]
    async fn a_dropped_leader_wakes_its_followers() {
        let flights = Flights::default();
        let lead = flights.join("k");
        let Turn::Follow(flight) = flights.join("k") else {
            panic!("follows");
        };
        drop(lead); // a cancelled or failed check
        tokio::time::timeout(Duration::from_millis(100), flight.wait())
            .await
            .expect("woken");
        assert_eq!(flight.refusal_for(1), None, "nothing to share");
    }
}
