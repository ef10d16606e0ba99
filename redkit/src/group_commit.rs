//! Group commit: concurrent calls that can share one script call are queued per key (an
//! inventory's SKU, a limiter's queue); the first caller leads and goes straight through
//! alone (the ordinary single call, no timer); callers arriving while `max_in_flight` calls of
//! that key are in flight wait in the queue. When a call returns, the next (up to
//! `max_batch`) waiters are handed to the first of them, which sends ONE call settling all of
//! them in arrival order and hands each waiter its own outcome. A caller that takes a free
//! slot while another call is in flight gathers: it yields once, callers arriving meanwhile
//! queue behind it, and it takes them into its call. A `std::sync::Mutex` guards the queues;
//! it is never held across an `.await`. Switched on with one [`GroupCommit`] value:
//! [`InventoryBuilder::with_group_commit`](crate::inventory::InventoryBuilder::with_group_commit)
//! and [`FixedWindow::grouped`](crate::rate_limit::Window::grouped).

use std::collections::{HashMap, VecDeque};
use std::fmt::Debug;
use std::hash::Hash;
use std::ops::Deref;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use self::metrics::GroupOperation;
use crate::error::{Error, Result};

/// The settings of group commit, validated once: at most `max_batch` calls settled by one
/// script call, and at most `max_in_flight` such calls of one key (an inventory's SKU, a
/// limiter) travelling at once. The one switch of both components that group:
/// [`InventoryBuilder::with_group_commit`](crate::inventory::InventoryBuilder::with_group_commit)
/// (concurrent decrements of one SKU) and
/// [`FixedWindow::grouped`](crate::rate_limit::Window::grouped)
/// (concurrent checks of one limiter); each reads it back with `group_commit()`.
///
/// [`GroupCommit::default()`] is the setting recommended for both: batches of up to
/// [`DEFAULT_MAX_BATCH`](Self::DEFAULT_MAX_BATCH) (256) calls, up to
/// [`DEFAULT_MAX_IN_FLIGHT`](Self::DEFAULT_MAX_IN_FLIGHT) (8) calls in flight. With `k > 1`
/// calls in flight the round trips overlap, which is what lifts a hot key past one batch per
/// round trip (measured for hot SKUs in `docs/benchmarks.md`, "Hot SKUs: group commit"; for
/// a flood of limiter checks 2, 4 and 8 in flight measured within noise of each other). A
/// batch only fills up to the callers that are waiting, so the batch bound matters only under
/// a backlog of hundreds of callers of one key; 256 keeps one script call short.
///
/// With 1 call in flight, batches run strictly in arrival order, one round trip after
/// another (slower); with more, two calls in flight may run in either order, as two ungrouped
/// calls would. Nobody is oversold and no limit is exceeded either way.
///
/// ```
/// use redkit::GroupCommit;
/// let group = GroupCommit::default();
/// assert_eq!((group.max_batch(), group.max_in_flight()), (256, 8));
/// let strict = GroupCommit::new(64, 1)?; // batches strictly in arrival order
/// assert_eq!(strict.max_in_flight(), 1);
/// assert!(GroupCommit::new(1, 8).is_err()); // a batch of one groups nothing
/// assert!(GroupCommit::new(64, 0).is_err());
/// assert!(GroupCommit::new(GroupCommit::MAX_BATCH + 1, 8).is_err());
/// assert!(GroupCommit::new(64, GroupCommit::MAX_IN_FLIGHT + 1).is_err());
/// # Ok::<(), redkit::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GroupCommit {
    max_batch: usize,
    max_in_flight: usize,
}

impl GroupCommit {
    /// The largest batch accepted: 1024 calls in one script call.
    ///
    /// ```
    /// use redkit::GroupCommit;
    /// let widest = GroupCommit::new(GroupCommit::MAX_BATCH, 8)?;
    /// assert_eq!(widest.max_batch(), 1024);
    /// assert!(GroupCommit::new(GroupCommit::MAX_BATCH + 1, 8).is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub const MAX_BATCH: usize = 1024;
    /// The most calls of one key in flight accepted: 16.
    ///
    /// ```
    /// use redkit::GroupCommit;
    /// let busiest = GroupCommit::new(64, GroupCommit::MAX_IN_FLIGHT)?;
    /// assert_eq!(busiest.max_in_flight(), 16);
    /// assert!(GroupCommit::new(64, GroupCommit::MAX_IN_FLIGHT + 1).is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub const MAX_IN_FLIGHT: usize = 16;
    /// The batch bound of [`GroupCommit::default()`]: 256.
    ///
    /// ```
    /// use redkit::GroupCommit;
    /// assert_eq!(GroupCommit::default().max_batch(), GroupCommit::DEFAULT_MAX_BATCH);
    /// // The default batch bound, with batches strictly in arrival order.
    /// let strict = GroupCommit::new(GroupCommit::DEFAULT_MAX_BATCH, 1)?;
    /// assert_eq!((strict.max_batch(), strict.max_in_flight()), (256, 1));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub const DEFAULT_MAX_BATCH: usize = 256;
    /// The calls in flight of [`GroupCommit::default()`]: 8.
    ///
    /// ```
    /// use redkit::GroupCommit;
    /// assert_eq!(GroupCommit::default().max_in_flight(), GroupCommit::DEFAULT_MAX_IN_FLIGHT);
    /// // Shorter script calls, as many in flight as the default.
    /// let short = GroupCommit::new(32, GroupCommit::DEFAULT_MAX_IN_FLIGHT)?;
    /// assert_eq!((short.max_batch(), short.max_in_flight()), (32, 8));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub const DEFAULT_MAX_IN_FLIGHT: usize = 8;

    /// Group commit with batches of at most `max_batch` calls (2 ..=
    /// [`MAX_BATCH`](Self::MAX_BATCH)) and at most `max_in_flight` calls of one key in flight
    /// (1 ..= [`MAX_IN_FLIGHT`](Self::MAX_IN_FLIGHT)).
    ///
    /// Errors: [`Error::InvalidInput`] for a value outside its range.
    ///
    /// ```
    /// let group = redkit::GroupCommit::new(64, 4)?;
    /// assert_eq!((group.max_batch(), group.max_in_flight()), (64, 4));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn new(max_batch: usize, max_in_flight: usize) -> Result<Self> {
        if !(2..=Self::MAX_BATCH).contains(&max_batch) {
            return Err(Error::invalid(
                "max_batch",
                format!("must be 2..={}", Self::MAX_BATCH),
            ));
        }
        if !(1..=Self::MAX_IN_FLIGHT).contains(&max_in_flight) {
            return Err(Error::invalid(
                "max_in_flight",
                format!("must be 1..={}", Self::MAX_IN_FLIGHT),
            ));
        }
        Ok(Self {
            max_batch,
            max_in_flight,
        })
    }

    /// The most calls one script call settles.
    ///
    /// ```
    /// assert_eq!(redkit::GroupCommit::default().max_batch(), 256);
    /// ```
    pub fn max_batch(&self) -> usize {
        self.max_batch
    }

    /// The most calls of one key in flight at once.
    ///
    /// ```
    /// assert_eq!(redkit::GroupCommit::default().max_in_flight(), 8);
    /// ```
    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight
    }
}

impl GroupCommit {
    /// The setting measured for a flood of rate-limit checks (the tower layer included):
    /// batches of at most 64, 4 calls in flight. What `group_commit = true` in a policy file
    /// means. With 8 in flight, 200 concurrent requests of one client through the layer took
    /// seconds on a 2-core machine (checks then passed its timeout and went by its fail mode);
    /// with 4, a fraction of a second.
    ///
    /// ```
    /// let g = redkit::GroupCommit::for_checks();
    /// assert_eq!((g.max_batch(), g.max_in_flight()), (64, 4));
    /// ```
    pub fn for_checks() -> Self {
        Self {
            max_batch: 64,
            max_in_flight: 4,
        }
    }
}

impl Default for GroupCommit {
    /// [`DEFAULT_MAX_BATCH`](Self::DEFAULT_MAX_BATCH) and
    /// [`DEFAULT_MAX_IN_FLIGHT`](Self::DEFAULT_MAX_IN_FLIGHT).
    fn default() -> Self {
        Self {
            max_batch: Self::DEFAULT_MAX_BATCH,
            max_in_flight: Self::DEFAULT_MAX_IN_FLIGHT,
        }
    }
}

/// What one kind of grouped call queues and answers.
pub(crate) trait Grouped: Sized + 'static {
    /// What the queues are keyed by (the calls of one key can share a script call).
    type Key: Clone + Eq + Hash + Debug;
    /// One caller's request.
    type Payload: Debug;
    /// One caller's outcome.
    type Outcome: Debug;
    /// What a call is, for error messages ("decrement") and the group-size metric.
    const WHAT: GroupOperation;
}

/// One queued call; derefs to its payload.
#[derive(Debug)]
pub(crate) struct Member<G: Grouped> {
    payload: G::Payload,
    /// Where the outcome goes; `None` for the member that leads.
    tx: Option<oneshot::Sender<Turn<G>>>,
}

impl<G: Grouped> Member<G> {
    pub(crate) fn new(payload: G::Payload) -> Self {
        Self { payload, tx: None }
    }
}

impl<G: Grouped> Deref for Member<G> {
    type Target = G::Payload;
    fn deref(&self) -> &G::Payload {
        &self.payload
    }
}

/// What a waiting caller receives.
#[derive(Debug)]
pub(crate) enum Turn<G: Grouped> {
    /// Its outcome, settled by a leader.
    Done(Result<G::Outcome>),
    /// It leads the next batch.
    Lead(Lead<G>),
}

/// The queues of one inventory or limiter. A key present in the map has a call in flight.
#[derive(Debug)]
pub(crate) struct Groups<G: Grouped> {
    settings: GroupCommit,
    queues: Mutex<HashMap<G::Key, Queue<G>>>,
}

/// One key's calls in flight and the callers waiting for a turn. Callers wait while
/// `in_flight == max_in_flight`, or while a leader gathers its batch.
#[derive(Debug)]
struct Queue<G: Grouped> {
    in_flight: usize,
    /// A leader holds a slot and has not taken its batch yet: newcomers queue behind it.
    gathering: bool,
    waiting: VecDeque<Member<G>>,
}

impl<G: Grouped> Queue<G> {
    /// Forgets the callers that gave up while queued: their decrement is never sent.
    fn drop_gone(&mut self) {
        self.waiting
            .retain(|m| m.tx.as_ref().is_some_and(|tx| !tx.is_closed()));
    }
}

/// What [`Groups::join`] tells a caller.
enum Joined<G: Grouped> {
    /// Send the call for these members (the caller is the first).
    Lead(Lead<G>),
    /// Wait for the leader.
    Wait(Waiting<G>),
}

/// A caller waiting in a queue.
struct Waiting<G: Grouped>(oneshot::Receiver<Turn<G>>);

impl<G: Grouped> Waiting<G> {
    /// Waits for its outcome, or to be made the leader of the next batch.
    async fn wait(self) -> Turn<G> {
        self.0
            .await
            .unwrap_or_else(|_| Turn::Done(Err(interrupted::<G>())))
    }
}

/// The batch one caller sends. Dropped before it was [sent](Self::sending) (a handed-over
/// batch whose caller was cancelled before it ran), its other members go back to the front
/// of the queue, in order, and nothing of it was sent; dropped after (the leader's future
/// cancelled with its call in flight), every member not yet answered gets
/// [`Error::Interrupted`] (it may have run). Either way the next batch of the queue is handed
/// on, so no waiter waits forever.
#[derive(Debug)]
pub(crate) struct Lead<G: Grouped> {
    groups: Arc<Groups<G>>,
    key: G::Key,
    members: Vec<Member<G>>,
    armed: bool,
    /// Leads a batch that is still open: the callers queueing behind it join it when it
    /// [gathers](Self::gather).
    gathering: bool,
    /// The batch's call may have been sent.
    sent: bool,
}

impl<G: Grouped> Lead<G> {
    /// The members, the leader first, in arrival order.
    pub(crate) fn members(&self) -> &[Member<G>] {
        &self.members
    }

    /// For a leader that took a free slot while another call of its key was in flight:
    /// yields to the runtime once, so the callers woken with it (by that call's settlement)
    /// queue behind it, then takes them (up to the batch size, in arrival order, skipping
    /// those that gave up) as members. Any other leader returns at once.
    pub(crate) async fn gather(&mut self) {
        if !self.gathering {
            return;
        }
        tokio::task::yield_now().await;
        self.gathering = false;
        let mut queues = self.groups.queues();
        let Some(queue) = queues.get_mut(&self.key) else {
            return;
        };
        queue.gathering = false;
        queue.drop_gone();
        let room = self
            .groups
            .settings
            .max_batch
            .saturating_sub(self.members.len());
        let take = queue.waiting.len().min(room);
        self.members.extend(queue.waiting.drain(..take));
    }

    /// Marks the batch as about to be sent (call it right before the call, with no `.await`
    /// between): from here, a cancelled leader leaves its members
    /// [`Error::Interrupted`] instead of queued.
    pub(crate) fn sending(&mut self) {
        self.sent = true;
        metrics::group_sent(G::WHAT, self.members.len());
    }

    /// Answers the members with `outcomes` (one per member, in order) and returns the
    /// leader's own; then hands the queue on (on drop).
    pub(crate) fn settle(mut self, outcomes: Vec<Result<G::Outcome>>) -> Result<G::Outcome> {
        let mut own = Err(Error::unexpected(
            G::WHAT.label(),
            "no outcome for the leader",
        ));
        for (i, (member, outcome)) in self.members.drain(..).zip(outcomes).enumerate() {
            match member.tx {
                Some(tx) => {
                    let _ = tx.send(Turn::Done(outcome));
                }
                None if i == 0 => own = outcome,
                None => {}
            }
        }
        own
    }

    /// Answers every member with `error` and returns it for the leader.
    pub(crate) fn fail(self, error: Error) -> Result<G::Outcome> {
        let outcomes = self.members.iter().map(|_| Err(error.clone())).collect();
        self.settle(outcomes)
    }

    fn disarm(&mut self) -> Vec<Member<G>> {
        self.armed = false;
        std::mem::take(&mut self.members)
    }
}

impl<G: Grouped> Drop for Lead<G> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if !self.sent {
            // Nothing was sent: the members still waiting go back to the front of the queue
            // (the leader itself, whose future is gone, has no sender).
            let waiting: Vec<Member<G>> =
                self.members.drain(..).filter(|m| m.tx.is_some()).collect();
            self.groups.requeue(&self.key, waiting);
        }
        for member in self.members.drain(..) {
            if let Some(tx) = member.tx {
                let _ = tx.send(Turn::Done(Err(interrupted::<G>())));
            }
        }
        self.groups.next(&self.key, self.gathering);
    }
}

fn interrupted<G: Grouped>() -> Error {
    Error::Interrupted {
        detail: format!(
            "the task leading a grouped {} stopped before its outcome was known; it may have run",
            G::WHAT.label()
        ),
    }
}

impl<G: Grouped> Groups<G> {
    pub(crate) fn new(settings: GroupCommit) -> Self {
        Self {
            settings,
            queues: Mutex::new(HashMap::new()),
        }
    }

    /// The settings the queues were made with.
    pub(crate) fn settings(&self) -> GroupCommit {
        self.settings
    }

    fn queues(&self) -> std::sync::MutexGuard<'_, HashMap<G::Key, Queue<G>>> {
        // A poisoned lock only means a panic elsewhere; the queues stay consistent.
        self.queues.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Joins `key`'s queue with `member` and waits for its turn: [`Turn::Lead`] to send a
    /// batch (at once when fewer than `max_in_flight` calls of `key` are in flight), or
    /// [`Turn::Done`] with the outcome a leader settled for it.
    pub(crate) async fn turn(self: &Arc<Self>, key: &G::Key, member: Member<G>) -> Turn<G> {
        match self.join(key, member) {
            Joined::Lead(lead) => Turn::Lead(lead),
            Joined::Wait(waiting) => waiting.wait().await,
        }
    }

    /// Queues `member` behind the calls of `key` in flight (or behind a leader gathering its
    /// batch), or makes it a leader when fewer than `max_in_flight` are: alone when none is
    /// (no added latency), gathering when another is.
    fn join(self: &Arc<Self>, key: &G::Key, mut member: Member<G>) -> Joined<G> {
        let mut queues = self.queues();
        let mut gathering = false;
        match queues.get_mut(key) {
            Some(queue) if queue.in_flight >= self.settings.max_in_flight || queue.gathering => {
                let (tx, rx) = oneshot::channel();
                member.tx = Some(tx);
                queue.waiting.push_back(member);
                return Joined::Wait(Waiting(rx));
            }
            Some(queue) => {
                queue.in_flight += 1;
                // Only an empty queue: everyone it gathers then arrived after it, so the batch
                // stays in arrival order (a backlog beyond `max_batch` goes as before).
                gathering = queue.waiting.is_empty();
                queue.gathering = gathering;
            }
            None => {
                queues.insert(
                    key.clone(),
                    Queue {
                        in_flight: 1,
                        gathering: false,
                        waiting: VecDeque::new(),
                    },
                );
            }
        }
        Joined::Lead(Lead {
            groups: self.clone(),
            key: key.clone(),
            members: vec![member],
            armed: true,
            gathering,
            sent: false,
        })
    }

    /// Puts `members` (in arrival order) back at the front of `key`'s queue.
    fn requeue(&self, key: &G::Key, members: Vec<Member<G>>) {
        if members.is_empty() {
            return;
        }
        let mut queues = self.queues();
        if let Some(queue) = queues.get_mut(key) {
            for member in members.into_iter().rev() {
                queue.waiting.push_front(member);
            }
        } else {
            // Cannot happen (a lead's key has a call in flight); answer rather than strand them.
            for member in members {
                if let Some(tx) = member.tx {
                    let _ = tx.send(Turn::Done(Err(interrupted::<G>())));
                }
            }
        }
    }

    /// A call of `key` is over (or its leader went away, still `gathering` or not): hands the
    /// next batch to its first live waiter, or marks the key idle when no call is left in
    /// flight.
    fn next(self: &Arc<Self>, key: &G::Key, gathering: bool) {
        let mut queues = self.queues();
        let Some(queue) = queues.get_mut(key) else {
            return;
        };
        queue.in_flight = queue.in_flight.saturating_sub(1);
        if gathering {
            queue.gathering = false;
        }
        loop {
            queue.drop_gone();
            let waiting = &mut queue.waiting;
            if waiting.is_empty() {
                if queue.in_flight == 0 {
                    queues.remove(key);
                }
                return;
            }
            let take = waiting.len().min(self.settings.max_batch);
            let mut members: Vec<Member<G>> = waiting.drain(..take).collect();
            let Some(tx) = members.first_mut().and_then(|m| m.tx.take()) else {
                continue;
            };
            let lead = Lead {
                groups: self.clone(),
                key: key.clone(),
                members,
                armed: true,
                gathering: false,
                sent: false,
            };
            match tx.send(Turn::Lead(lead)) {
                Ok(()) => {
                    queue.in_flight += 1;
                    return;
                }
                Err(turn) => {
                    // The first waiter left just now: put the others back, in order.
                    if let Turn::Lead(mut lead) = turn {
                        let members = lead.disarm();
                        for member in members.into_iter().skip(1).rev() {
                            queue.waiting.push_front(member);
                        }
                    }
                }
            }
        }
    }
}

/// Group commit's metric (feature `metrics`): `redkit.group_commit.size`, the calls one
/// group-commit script call settled, by what they are. Without the feature `group_sent` is
/// empty.
pub(crate) mod metrics {
    // Without the feature the recording function is empty: its arguments, the name and the
    // label enum's table go unused.
    #![cfg_attr(not(feature = "metrics"), allow(dead_code, unused_variables))]

    #[cfg(feature = "metrics")]
    use crate::telemetry::metric::observe;
    use crate::telemetry::metric::{key_table, label_values, Description, Unit};

    /// Histogram, calls: the calls one group-commit script call settled (1: a call alone).
    pub(crate) const GROUP_SIZE: &str = "redkit.group_commit.size";

    /// Group commit's metrics, for [`describe`](crate::telemetry::catalog::describe).
    pub(crate) const METRICS: &[Description] = &[Description::histogram(
        GROUP_SIZE,
        Unit::Count,
        "Calls settled by one group-commit script call",
    )];

    label_values! {
        /// What a group-commit group's calls are (`redkit.operation` of [`GROUP_SIZE`]).
        pub(crate) enum GroupOperation {
            /// Rate-limit checks.
            RateLimitCheck => "rate-limit check",
            /// Inventory decrements.
            Decrement => "decrement",
        }
    }

    key_table! {
        /// `redkit.group_commit.size`, by operation.
        static GROUP_KEYS = GROUP_SIZE, ["redkit.operation": GroupOperation::VALUES];
    }

    /// Records the size of one group sent.
    pub(crate) fn group_sent(operation: GroupOperation, size: usize) {
        #[cfg(feature = "metrics")]
        observe(&GROUP_KEYS[operation as usize], size as f64);
    }

    #[cfg(all(test, feature = "metrics"))]
    mod tests {
        use super::*;
        use crate::telemetry::metric::test_support::{assert_same, built};

        #[test]
        fn every_static_key_is_the_key_its_labels_name() {
            for (i, operation) in GroupOperation::VALUES.iter().enumerate() {
                assert_same(
                    &GROUP_KEYS[i],
                    &built(GROUP_SIZE, &[("redkit.operation", operation)]),
                );
            }
        }

        #[test]
        fn a_variant_indexes_its_own_value() {
            assert_eq!(GroupOperation::RateLimitCheck.label(), "rate-limit check");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_settings_are_what_their_docs_say() {
        let checks = GroupCommit::for_checks();
        assert_eq!((checks.max_batch(), checks.max_in_flight()), (64, 4));
        let default = GroupCommit::default();
        assert_eq!(
            (default.max_batch(), default.max_in_flight()),
            (
                GroupCommit::DEFAULT_MAX_BATCH,
                GroupCommit::DEFAULT_MAX_IN_FLIGHT
            )
        );
        assert_eq!((default.max_batch(), default.max_in_flight()), (256, 8));
        let custom = GroupCommit::new(2, GroupCommit::MAX_IN_FLIGHT).unwrap();
        assert_eq!(
            (custom.max_batch(), custom.max_in_flight()),
            (2, GroupCommit::MAX_IN_FLIGHT)
        );
        assert!(GroupCommit::new(1, 1).is_err());
        assert!(GroupCommit::new(GroupCommit::MAX_BATCH + 1, 1).is_err());
        assert!(GroupCommit::new(2, 0).is_err());
        assert!(GroupCommit::new(2, GroupCommit::MAX_IN_FLIGHT + 1).is_err());
    }
}
