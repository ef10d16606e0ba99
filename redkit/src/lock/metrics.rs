//! The lock metrics (feature `metrics`): `redkit.lock.operations`, by kind, operation and
//! outcome, one key per combination built at compile time. Without the feature
//! [`lock_operation`] is empty.

// Without the feature the recording functions are empty: their arguments, the names and the
// label enums' tables go unused.
#![cfg_attr(not(feature = "metrics"), allow(dead_code, unused_variables))]

#[cfg(feature = "metrics")]
use crate::telemetry::metric::count;
use crate::telemetry::metric::{key_table, label_values, Description};

/// Counter: lock operations by kind, operation and outcome.
pub(crate) const LOCK_OPERATIONS: &str = "redkit.lock.operations";

/// The lock metrics, for [`describe`](crate::telemetry::catalog::describe).
pub(crate) const METRICS: &[Description] = &[Description::counter(
    LOCK_OPERATIONS,
    "Lock operations by kind, operation and outcome",
)];

label_values! {
    /// A lock kind (`redkit.lock.kind`).
    pub(crate) enum LockKind {
        /// [`Lock`](crate::lock::Lock).
        Lock => "Lock",
        /// [`FairLock`](crate::lock::FairLock).
        FairLock => "FairLock",
        /// [`RwLock`](crate::lock::RwLock).
        RwLock => "RwLock",
        /// [`ReentrantLock`](crate::lock::ReentrantLock).
        ReentrantLock => "ReentrantLock",
        /// [`Semaphore`](crate::lock::Semaphore).
        Semaphore => "Semaphore",
        /// [`Redlock`](crate::lock::Redlock).
        Redlock => "Redlock",
    }
}

label_values! {
    /// A lock operation (`redkit.operation` of `redkit.lock.operations`).
    pub(crate) enum LockOp {
        /// An acquire (all its attempts).
        Acquire => "acquire",
        /// A renewal.
        Renew => "renew",
        /// A release.
        Release => "release",
        /// A watchdog found its lease lost.
        LeaseLost => "lease_lost",
        /// The wake-up of a blocked acquirer, pushed after a native release deleted the key
        /// (counted only when it fails: outcome `error`).
        Wake => "wake",
    }
}

label_values! {
    /// How a lock operation ended (`redkit.outcome` of `redkit.lock.operations`).
    pub(crate) enum LockOutcome {
        /// Acquired.
        Acquired => "acquired",
        /// Held by another owner.
        Busy => "busy",
        /// Acquired, but fewer replicas acknowledged it than asked (given back).
        NotReplicated => "not_replicated",
        /// Renewed.
        Renewed => "renewed",
        /// Not renewed: the lease was gone or another owner's.
        Lost => "lost",
        /// Released.
        Released => "released",
        /// Not the owner (any more).
        NotOwner => "not_owner",
        /// The lease ran out before a renewal succeeded.
        Expired => "expired",
        /// An error.
        Error => "error",
    }
}

key_table! {
    /// `redkit.lock.operations`, by kind, operation and outcome.
    static LOCK_KEYS = LOCK_OPERATIONS, [
        "redkit.lock.kind": LockKind::VALUES,
        "redkit.operation": LockOp::VALUES,
        "redkit.outcome": LockOutcome::VALUES,
    ];
}

/// Counts one lock operation.
pub(crate) fn lock_operation(kind: LockKind, operation: LockOp, outcome: LockOutcome) {
    #[cfg(feature = "metrics")]
    count(
        &LOCK_KEYS[(kind as usize * LockOp::COUNT + operation as usize) * LockOutcome::COUNT
            + outcome as usize],
    );
}

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use super::*;
    use crate::telemetry::metric::test_support::{assert_same, built};

    #[test]
    fn every_static_key_is_the_key_its_labels_name() {
        for (k, kind) in LockKind::VALUES.iter().enumerate() {
            for (o, operation) in LockOp::VALUES.iter().enumerate() {
                for (r, outcome) in LockOutcome::VALUES.iter().enumerate() {
                    let index = (k * LockOp::COUNT + o) * LockOutcome::COUNT + r;
                    let expected = built(
                        LOCK_OPERATIONS,
                        &[
                            ("redkit.lock.kind", kind),
                            ("redkit.operation", operation),
                            ("redkit.outcome", outcome),
                        ],
                    );
                    assert_same(&LOCK_KEYS[index], &expected);
                }
            }
        }
        assert_eq!(LOCK_KEYS.len(), 6 * 5 * 9);
    }

    #[test]
    fn a_variant_indexes_its_own_value() {
        assert_eq!(LockOutcome::Error.label(), "error");
    }
}
