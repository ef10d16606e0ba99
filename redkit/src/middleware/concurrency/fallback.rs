//! The state of [`FailMode::Local`](crate::middleware::FailMode::Local) for the concurrency
//! limit: while Redis cannot answer, each instance admits up to its share of every client's
//! slots in process, counted here and given back when the request finishes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// Per client: the requests this instance admitted in process while Redis failed and that
/// are still in flight. An entry leaves when its count is back to zero, so memory is bounded
/// by the requests in flight.
#[derive(Debug)]
pub(super) struct LocalSlots {
    share: u32,
    in_flight: Mutex<HashMap<String, u32>>,
}

/// A slot taken in process: given back when dropped.
#[derive(Debug)]
pub(super) struct LocalSlot {
    slots: Arc<LocalSlots>,
    resource: String,
}

impl LocalSlots {
    /// Shares of `permits / instances` (at least 1; `instances` 0 is taken as 1).
    pub(super) fn new(permits: u32, instances: u32) -> Arc<Self> {
        Arc::new(Self {
            share: (permits / instances.max(1)).max(1),
            in_flight: Mutex::new(HashMap::new()),
        })
    }

    /// This instance's share of each client's slots.
    #[cfg(test)]
    fn share(&self) -> u32 {
        self.share
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, u32>> {
        // Plain data: a panic elsewhere cannot leave it inconsistent.
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A slot of `resource` (a client's), when fewer than the share are in flight here.
    pub(super) fn try_take(self: &Arc<Self>, resource: &str) -> Option<LocalSlot> {
        let mut in_flight = self.lock();
        let held = in_flight.entry(resource.to_owned()).or_insert(0);
        if *held >= self.share {
            return None;
        }
        *held += 1;
        Some(LocalSlot {
            slots: Arc::clone(self),
            resource: resource.to_owned(),
        })
    }

    /// The slots of `resource` in flight here.
    #[cfg(test)]
    fn held(&self, resource: &str) -> u32 {
        self.lock().get(resource).copied().unwrap_or(0)
    }
}

impl Drop for LocalSlot {
    fn drop(&mut self) {
        let mut in_flight = self.slots.lock();
        if let Some(held) = in_flight.get_mut(&self.resource) {
            *held = held.saturating_sub(1);
            if *held == 0 {
                in_flight.remove(&self.resource);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_is_taken_per_client_and_given_back_on_drop() {
        let slots = LocalSlots::new(8, 4);
        assert_eq!(slots.share(), 2);
        let a1 = slots.try_take("a").unwrap();
        let _a2 = slots.try_take("a").unwrap();
        assert!(slots.try_take("a").is_none(), "a third slot past the share");
        let _b = slots
            .try_take("b")
            .expect("another client has its own share");
        drop(a1);
        assert_eq!(slots.held("a"), 1);
        let _a3 = slots
            .try_take("a")
            .expect("a slot given back is free again");
        assert!(slots.try_take("a").is_none());
    }

    #[test]
    fn a_share_is_at_least_one_and_idle_clients_leave_memory() {
        let slots = LocalSlots::new(3, 8);
        assert_eq!(slots.share(), 1);
        assert_eq!(LocalSlots::new(5, 0).share(), 5);
        let one = slots.try_take("c").unwrap();
        assert!(slots.try_take("c").is_none());
        // A slot taken and given back leaves no entry either.
        drop(slots.try_take("d").unwrap());
        drop(one);
        assert!(slots.lock().is_empty(), "{:?}", slots.lock());
    }
}
