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

/// Describes every metric to the installed recorder (type, unit, help text), e.g. for the
/// `# HELP` / `# TYPE` lines of a Prometheus exporter. Call it once after installing the
/// recorder; recording works without it.
#[cfg(feature = "metrics")]
pub(crate) fn describe() {
    metrics::describe_histogram!(
        OPERATION_DURATION,
        metrics::Unit::Seconds,
        "Duration of one Redis round trip of a script call or batch"
    );
    metrics::describe_counter!(
        SCRIPT_RELOADS,
        metrics::Unit::Count,
        "Recoveries of a script or function the server lacked"
    );
}
