//! Group commit's metric (feature `metrics`): `redkit.group_commit.size`, the calls one
//! group-commit script call settled, by what they are. Without the feature [`group_sent`] is
//! empty.

// Without the feature the recording functions are empty: their arguments, the names and the
// label enums' tables go unused.
#![cfg_attr(not(feature = "metrics"), allow(dead_code, unused_variables))]

#[cfg(feature = "metrics")]
use crate::telemetry::metric::observe;
use crate::telemetry::metric::{key_table, label_values, Description, Kind, Unit};

/// Histogram, calls: the calls one group-commit script call settled (1: a call alone).
pub(crate) const GROUP_SIZE: &str = "redkit.group_commit.size";

/// Group commit's metrics, for [`describe`](crate::telemetry::metric::describe).
pub(crate) const METRICS: &[Description] = &[Description {
    name: GROUP_SIZE,
    kind: Kind::Histogram,
    unit: Unit::Count,
    help: "Calls settled by one group-commit script call",
}];

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
