//! The metrics machinery every area shares, through the [`metrics`](https://docs.rs/metrics)
//! facade (feature `metrics`): label enums ([`label_values!`]), key tables built at compile
//! time ([`key_table!`]), the recording calls ([`count`], [`gauge`], [`observe`]) and
//! [`describe`], which describes every area's metrics. Each area declares its own metrics next
//! to its code, in a `metrics` module: their names, labels, key tables, a `METRICS` list of
//! [`Description`]s, and one recording function per event (empty without the feature):
//! [`crate::lock::metrics`], [`crate::inventory::metrics`], `crate::middleware::metrics`
//! (feature `tower`), [`crate::group_commit::metrics`], `crate::rate_limit::deny_cache::metrics`,
//! and the script round trips' in [`super::script_metrics`].
//!
//! With the feature, a recording builds nothing: every key (name and labels) is built
//! beforehand, at compile time where every label comes from code (a `static` table per metric,
//! indexed by the label enums), once per policy or once per script (on its first recording)
//! where a label is a configured name. A recording hands its key by reference to the facade
//! (`metrics::with_recorder`, what the facade's macros expand to); with no recorder installed
//! that is the facade's no-op recorder: a thread-local read, an atomic load and a call
//! returning an empty handle. The facade (0.24) has no public way to ask whether a recorder is
//! installed, so that is the floor. Still built when recorded: the key of a failed round trip
//! (its `error.type`). And a round trip reads the clock twice for its duration
//! ([`round_trip`](super::round_trip)).

// Without the feature the machinery and the descriptions go unused.
#![cfg_attr(not(feature = "metrics"), allow(dead_code, unused_variables))]

#[cfg(feature = "metrics")]
use metrics::{Key, Label};

/// Whether metrics are compiled in.
pub(crate) const ENABLED: bool = cfg!(feature = "metrics");

/// What a metric is, for [`describe`]: its name, type, unit and help text (the README's
/// "Metrics and traces" table). Each area lists its metrics as `METRICS: &[Description]`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Description {
    /// The metric's name.
    pub(crate) name: &'static str,
    /// Its type.
    pub(crate) kind: Kind,
    /// Its unit.
    pub(crate) unit: Unit,
    /// Its help text (a Prometheus exporter's `# HELP`).
    pub(crate) help: &'static str,
}

impl Description {
    /// A counter (unit: a count).
    pub(crate) const fn counter(name: &'static str, help: &'static str) -> Self {
        Self {
            name,
            kind: Kind::Counter,
            unit: Unit::Count,
            help,
        }
    }

    /// A gauge (unit: a count).
    pub(crate) const fn gauge(name: &'static str, help: &'static str) -> Self {
        Self {
            name,
            kind: Kind::Gauge,
            unit: Unit::Count,
            help,
        }
    }

    /// A histogram of values in `unit`.
    pub(crate) const fn histogram(name: &'static str, unit: Unit, help: &'static str) -> Self {
        Self {
            name,
            kind: Kind::Histogram,
            unit,
            help,
        }
    }
}

/// A metric's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Only goes up.
    Counter,
    /// Set, or moved up and down.
    Gauge,
    /// A distribution of recorded values.
    Histogram,
}

/// A metric's unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
    /// A number of things (calls, requests, entries).
    Count,
    /// Seconds.
    Seconds,
}

/// Declares an enum of label values: `label()` (the value of a variant), `VALUES` (every
/// value in declaration order, so that a variant's index is `variant as usize`) and `COUNT`.
macro_rules! label_values {
    (
        $(#[$doc:meta])*
        $vis:vis enum $name:ident {
            $($(#[$variant_doc:meta])* $variant:ident => $value:literal,)+
        }
    ) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        $vis enum $name {
            $($(#[$variant_doc])* $variant,)+
        }

        impl $name {
            /// Every label value, in declaration order (a variant's index: `variant as usize`).
            pub(crate) const VALUES: &'static [&'static str] = &[$($value),+];
            /// How many values.
            // Not every enum needs both: some are only read through their key tables.
            #[allow(dead_code)]
            pub(crate) const COUNT: usize = Self::VALUES.len();

            /// The label value.
            #[allow(dead_code)]
            pub(crate) const fn label(self) -> &'static str {
                Self::VALUES[self as usize]
            }
        }
    };
}
pub(crate) use label_values;

/// A label set for every combination of the values of `dims` (each a label key and its
/// values), the last dimension varying fastest: set `i` holds one label per dimension, in
/// order. Evaluated at compile time (see [`key_table!`]).
#[cfg(feature = "metrics")]
pub(crate) const fn label_sets<const L: usize, const N: usize>(
    dims: [(&'static str, &'static [&'static str]); L],
) -> [[Label; L]; N] {
    let mut combinations = 1;
    let mut d = 0;
    while d < L {
        combinations *= dims[d].1.len();
        d += 1;
    }
    assert!(combinations == N, "N is the number of combinations");
    let mut sets = [const { [const { Label::from_static_parts("", "") }; L] }; N];
    let mut i = 0;
    while i < N {
        let mut rest = i;
        let mut d = L;
        while d > 0 {
            d -= 1;
            let (key, values) = dims[d];
            let label = Label::from_static_parts(key, values[rest % values.len()]);
            // The placeholder only borrows static strings: forgetting it frees nothing (and
            // no destructor may run at compile time).
            std::mem::forget(std::mem::replace(&mut sets[i][d], label));
            rest /= values.len();
        }
        i += 1;
    }
    sets
}

/// The key of metric `name` with each of `sets` (its hash computed here, at compile time).
#[cfg(feature = "metrics")]
pub(crate) const fn keys<const L: usize, const N: usize>(
    name: &'static str,
    sets: &'static [[Label; L]; N],
) -> [Key; N] {
    let mut keys = [const { Key::from_static_name("") }; N];
    let mut i = 0;
    while i < N {
        let key = Key::from_static_parts(name, &sets[i]);
        std::mem::forget(std::mem::replace(&mut keys[i], key));
        i += 1;
    }
    keys
}

/// `$vis static $table: [Key; N]`: the keys of metric `$name` for every combination of the
/// label values given (`"label key": values`, the last varying fastest), built at compile
/// time. Compiled with the feature only.
macro_rules! key_table {
    (
        $(#[$doc:meta])*
        $vis:vis static $table:ident = $name:expr, [$($label:literal: $values:expr),+ $(,)?];
    ) => {
        $(#[$doc])*
        #[cfg(feature = "metrics")]
        $vis static $table: [::metrics::Key; 1 $(* $values.len())+] = {
            static SETS: [
                [::metrics::Label; <[()]>::len(&[$($crate::telemetry::metric::key_table!(@unit $values)),+])];
                1 $(* $values.len())+
            ] = $crate::telemetry::metric::label_sets([$(($label, $values)),+]);
            $crate::telemetry::metric::keys($name, &SETS)
        };
    };
    (@unit $values:expr) => {
        ()
    };
}
pub(crate) use key_table;

/// Where recordings come from: the facade's macros give this (their call site's module, at
/// level `INFO`).
#[cfg(feature = "metrics")]
pub(crate) static METADATA: metrics::Metadata<'static> =
    metrics::Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

/// Adds 1 to the counter `key`.
#[cfg(feature = "metrics")]
pub(crate) fn count(key: &Key) {
    metrics::with_recorder(|recorder| recorder.register_counter(key, &METADATA).increment(1));
}

/// The gauge `key`.
#[cfg(feature = "metrics")]
pub(crate) fn gauge(key: &Key) -> metrics::Gauge {
    metrics::with_recorder(|recorder| recorder.register_gauge(key, &METADATA))
}

/// Records `value` in the histogram `key`.
#[cfg(feature = "metrics")]
pub(crate) fn observe(key: &Key, value: f64) {
    metrics::with_recorder(|recorder| recorder.register_histogram(key, &METADATA).record(value));
}

/// What the areas' key-table tests share.
#[cfg(all(test, feature = "metrics"))]
pub(crate) mod test_support {
    use metrics::{Key, Label};

    /// The key the facade's macros build for `name` with `labels` (in this order).
    pub(crate) fn built(name: &'static str, labels: &[(&'static str, &str)]) -> Key {
        let labels: Vec<Label> = labels
            .iter()
            .map(|(k, v)| Label::new(*k, (*v).to_owned()))
            .collect();
        Key::from_parts(name, labels)
    }

    /// Equal as keys, with the same hash (what a recorder's registry looks keys up by), the
    /// same labels in the same order.
    pub(crate) fn assert_same(table: &Key, expected: &Key) {
        assert_eq!(table, expected);
        assert_eq!(table.get_hash(), expected.get_hash(), "{expected}");
        assert_eq!(table.to_string(), expected.to_string());
    }
}
