//! The inventory metrics (feature `metrics`): `redkit.inventory.operations`, by operation
//! and outcome, one key per combination built at compile time. Without the feature
//! [`inventory_operation`] is empty.

// Without the feature the recording functions are empty: their arguments, the names and the
// label enums' tables go unused.
#![cfg_attr(not(feature = "metrics"), allow(dead_code, unused_variables))]

#[cfg(feature = "metrics")]
use crate::telemetry::metric::count;
use crate::telemetry::metric::{key_table, label_values, Description};

/// Counter: inventory writes by operation and outcome.
pub(crate) const INVENTORY_OPERATIONS: &str = "redkit.inventory.operations";

/// The inventory metrics, for [`describe`](crate::telemetry::catalog::describe).
pub(crate) const METRICS: &[Description] = &[Description::counter(
    INVENTORY_OPERATIONS,
    "Inventory writes by operation and outcome",
)];

label_values! {
    /// An inventory write (`redkit.operation` of `redkit.inventory.operations`).
    pub(crate) enum InventoryOp {
        /// [`Store::decrement`](crate::inventory::Store::decrement) and its replicated form.
        Decrement => "decrement",
        /// [`Store::restock`](crate::inventory::Store::restock) and its replicated form.
        Restock => "restock",
        /// [`Inventory::place_order`](crate::inventory::Inventory::place_order) and its replicated form.
        Order => "order",
        /// [`Store::reserve`](crate::inventory::Store::reserve) and its replicated form.
        Reserve => "reserve",
        /// [`Store::commit`](crate::inventory::Store::commit) and its replicated form.
        Commit => "commit",
        /// [`Store::cancel`](crate::inventory::Store::cancel) and its replicated form.
        Cancel => "cancel",
    }
}

label_values! {
    /// How an inventory write ended (`redkit.outcome` of `redkit.inventory.operations`): one
    /// per variant of the operation's outcome enum, the variant's name in snake case but
    /// `applied` for the write done as asked; for an error `not_found` (a SKU never set) or
    /// `error` (any other, bad input included).
    pub(crate) enum InventoryOutcome {
        /// Done as asked (decremented, restocked, placed, reserved, committed, cancelled).
        Applied => "applied",
        /// The stock did not cover it.
        Insufficient => "insufficient",
        /// A repeated request id: the first outcome answered.
        Duplicate => "duplicate",
        /// A request id already used for another request.
        IdReused => "id_reused",
        /// A live reservation with this id exists.
        AlreadyReserved => "already_reserved",
        /// The SKU holds the most live reservations.
        Full => "full",
        /// The reservation was committed before.
        AlreadyCommitted => "already_committed",
        /// The reservation was cancelled before.
        AlreadyCancelled => "already_cancelled",
        /// No such reservation (never made, or expired).
        Unknown => "unknown",
        /// [`Error::NotFound`](crate::Error::NotFound): a SKU never set.
        NotFound => "not_found",
        /// Any other error.
        Error => "error",
    }
}

key_table! {
    /// `redkit.inventory.operations`, by operation and outcome.
    static INVENTORY_KEYS = INVENTORY_OPERATIONS, [
        "redkit.operation": InventoryOp::VALUES,
        "redkit.outcome": InventoryOutcome::VALUES,
    ];
}

/// Counts one inventory write.
pub(crate) fn inventory_operation(operation: InventoryOp, outcome: InventoryOutcome) {
    #[cfg(feature = "metrics")]
    count(&INVENTORY_KEYS[operation as usize * InventoryOutcome::COUNT + outcome as usize]);
}

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use super::*;
    use crate::telemetry::metric::test_support::{assert_same, built};

    #[test]
    fn every_static_key_is_the_key_its_labels_name() {
        for (o, operation) in InventoryOp::VALUES.iter().enumerate() {
            for (r, outcome) in InventoryOutcome::VALUES.iter().enumerate() {
                let expected = built(
                    INVENTORY_OPERATIONS,
                    &[("redkit.operation", operation), ("redkit.outcome", outcome)],
                );
                assert_same(&INVENTORY_KEYS[o * InventoryOutcome::COUNT + r], &expected);
            }
        }
    }

    #[test]
    fn a_variant_indexes_its_own_value() {
        assert_eq!(
            InventoryOutcome::AlreadyCancelled.label(),
            "already_cancelled"
        );
    }
}
