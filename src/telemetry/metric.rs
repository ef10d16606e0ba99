//! Metrics through the [`metrics`](https://docs.rs/metrics) facade (feature `metrics`): their
//! names, and one recording function per event. Without the feature every function is empty.
//! With it but no recorder installed, a recording is the facade's no-op (a label list built
//! and dropped: no I/O, no lock).

use std::time::Duration;

/// Whether metrics are compiled in.
pub(crate) const ENABLED: bool = cfg!(feature = "metrics");

/// Histogram, seconds: one Redis round trip of a script call or batch (OpenTelemetry's
/// database-client metric).
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) const OPERATION_DURATION: &str = "db.client.operation.duration";
/// Counter: recoveries of a script the server lacked.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) const SCRIPT_RELOADS: &str = "redkit.script.reloads";

/// Histogram, calls: the calls one group-commit script call settled (1: a call alone).
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) const GROUP_SIZE: &str = "redkit.group_commit.size";
/// Counter: deny-cache lookups, by result (`hit`: answered locally; `miss`: asked Redis).
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) const DENY_CACHE_LOOKUPS: &str = "redkit.deny_cache.lookups";
/// Gauge: refusals a deny cache holds.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) const DENY_CACHE_ENTRIES: &str = "redkit.deny_cache.entries";

/// A reload kind (`redkit.reload` label of [`SCRIPT_RELOADS`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Reload {
    /// `NOSCRIPT` answered, the call re-sent as `EVAL`.
    EvalFallback,
    /// `SCRIPT LOAD` after an `EVAL` fallback (or at the head of a batch's re-run).
    ScriptLoad,
    /// `FUNCTION LOAD REPLACE` of a library whose function was missing.
    FunctionLoad,
}

impl Reload {
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    fn label(self) -> &'static str {
        match self {
            Self::EvalFallback => "eval_fallback",
            Self::ScriptLoad => "script_load",
            Self::FunctionLoad => "function_load",
        }
    }
}

/// Records one round trip's duration.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn round_trip(
    operation: &'static str,
    procedure: Option<&str>,
    error_type: Option<&'static str>,
    elapsed: Duration,
) {
    #[cfg(feature = "metrics")]
    {
        let mut labels = vec![
            metrics::Label::from_static_parts("db.system.name", "redis"),
            metrics::Label::from_static_parts("db.operation.name", operation),
        ];
        if let Some(procedure) = procedure {
            labels.push(metrics::Label::new(
                "db.stored_procedure.name",
                procedure.to_owned(),
            ));
        }
        if let Some(error_type) = error_type {
            labels.push(metrics::Label::from_static_parts("error.type", error_type));
        }
        metrics::histogram!(OPERATION_DURATION, labels).record(elapsed.as_secs_f64());
    }
}

/// Counts one recovery of `script` (its `name.vN`).
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn reload(kind: Reload, script: &str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(
        SCRIPT_RELOADS,
        "redkit.reload" => kind.label(),
        "db.stored_procedure.name" => script.to_owned()
    )
    .increment(1);
}

/// Records the size of one group sent (`operation`: what its calls are, e.g. `decrement`).
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn group_sent(operation: &'static str, size: usize) {
    #[cfg(feature = "metrics")]
    metrics::histogram!(GROUP_SIZE, "redkit.operation" => operation).record(size as f64);
}

/// Counts one deny-cache lookup.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn deny_cache_lookup(hit: bool) {
    #[cfg(feature = "metrics")]
    metrics::counter!(DENY_CACHE_LOOKUPS, "redkit.result" => if hit { "hit" } else { "miss" })
        .increment(1);
}

/// Sets the number of refusals a deny cache holds (`len` is only called with the feature).
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
pub(crate) fn deny_cache_entries(len: impl FnOnce() -> usize) {
    #[cfg(feature = "metrics")]
    metrics::gauge!(DENY_CACHE_ENTRIES).set(len() as f64);
}

/// Describes every metric to the installed recorder (type, unit, help text), e.g. for the
/// `# HELP` / `# TYPE` lines of a Prometheus exporter. Call it once after installing the
/// recorder; recording works without it.
#[cfg(feature = "metrics")]
pub(crate) fn describe() {
    use metrics::Unit::{Count, Seconds};
    #[derive(Clone, Copy)]
    enum Kind {
        Counter,
        Gauge,
        Histogram,
    }
    let all = [
        (
            Kind::Histogram,
            OPERATION_DURATION,
            Seconds,
            "Duration of one Redis round trip of a script call or batch",
        ),
        (
            Kind::Counter,
            SCRIPT_RELOADS,
            Count,
            "Recoveries of a script or function the server lacked",
        ),
        (
            Kind::Histogram,
            GROUP_SIZE,
            Count,
            "Calls settled by one group-commit script call",
        ),
        (
            Kind::Counter,
            DENY_CACHE_LOOKUPS,
            Count,
            "Deny-cache lookups: hit (answered locally) or miss (asked Redis)",
        ),
        (
            Kind::Gauge,
            DENY_CACHE_ENTRIES,
            Count,
            "Refusals held by the deny cache",
        ),
    ];
    for (kind, name, unit, help) in all {
        match kind {
            Kind::Counter => metrics::describe_counter!(name, unit, help),
            Kind::Gauge => metrics::describe_gauge!(name, unit, help),
            Kind::Histogram => metrics::describe_histogram!(name, unit, help),
        }
    }
}
