//! Locks you can trust: compare-and-delete release, lease renewal with a watchdog, fencing
//! tokens and fenced writes, and Redlock over independent masters.
//!
//! - [`Lock`]: the single-node lock (one server or a Redis Cluster). [`Lock::acquire`]
//!   returns a [`LockGuard<Lock>`](LockGuard) with a [`FencingToken`]; [`Lock::release`] and
//!   [`Lock::renew`] only act while the key still holds the guard's owner token.
//! - [`Lock::watch`]: a watchdog renewing the lease about every ttl/3, with a
//!   [`LeaseSignal`] fired when the lease is lost; [`Lock::with_lock`] wraps it all.
//! - [`Lock::fenced_set`]: a write that storage refuses when a newer fencing token wrote first.
//! - [`Redlock`]: a quorum lock over N independent masters.
//! - [`Lock::acquire_blocking`]: wait for a release without polling.
//! - [`FairLock`]: callers hold the lock in arrival order (ZooKeeper's guarantee), waiters
//!   keeping their place for a [`WaiterLease`].
//! - [`RwLock`]: many readers or one writer, writers not starved.
//! - [`ReentrantLock`]: counted holds by an explicit [`Owner`].
//! - [`Semaphore`]: N leased permits per resource; a crashed holder's permit comes back when
//!   its lease ends.
//!
//! Every kind has the same verbs: `try_acquire` (one attempt), `acquire` (waiting as the
//! options allow), `release`, `renew` and `watch` (Redlock: no watchdog), and the same
//! accessors (`key`, `prefix`, `manager`, `with_prefix`, `with_manager`). A guard is typed
//! by the kind that granted it, so it cannot be given to another kind.
//!
//! Outcomes are values, the same for every kind ([`Acquire`], busy with what the kind knows:
//! [`Held`], [`HeldPermits`], [`HeldOnNodes`];
//! [`Release`], [`Renew`]; and [`FencedWrite`], [`WithLock`]); errors are for bad input and
//! for not being able to find out.

mod fair;
mod lease;
pub mod limits;
pub(crate) mod metrics;
mod options;
mod outcome;
mod redlock;
mod reentrant;
mod repair;
mod rw;
pub(crate) mod semaphore;
mod single;
mod waiter_lease;

pub use fair::inspect::{FairLockState, QueueEntry};
pub use fair::FairLock;
pub use lease::guard::LockGuard;
pub use lease::token::FencingToken;
pub use lease::watchdog::LeaseSignal;
pub use options::{LockOptions, OwnerToken, Polling, Replicable};
pub use outcome::{
    Acquire, Fence, FencedWrite, Held, HeldOnNodes, HeldPermits, LeaseLoss, Release, Renew,
};
pub use redlock::{NodeAnswer, NodeState, Nodes, Quorum, Redlock, RedlockGuard, RedlockState};
pub use reentrant::inspect::ReentrantState;
pub use reentrant::{Owner, ReentrantLock};
pub use rw::inspect::RwLockState;
pub use rw::{Mode, RwLock};
pub use semaphore::inspect::{PermitHolder, SemaphoreState};
pub use semaphore::permit::PermitGuard;
pub use semaphore::Semaphore;
pub use single::fencing::MAX_FENCED_KEY_LEN;
pub use single::inspect::{ExpectedHolder, ForceRelease, Holder, LockState, ResourceScan};
pub use single::with_lock::{Lease, WithLock};
pub use single::Lock;
pub use waiter_lease::WaiterLease;
