//! The metrics of Redis round trips (feature `metrics`): each round trip's duration
//! (`db.client.operation.duration`, recorded by [`round_trip`](super::round_trip)) and each
//! recovery of a script the server lacked (`redkit.script.reloads`). A script's keys carry its
//! `name.vN`, so they are built once per script, on its first recording ([`ScriptMetrics`]).

// Without the feature the recording functions are empty: their arguments, the names and the
// label enums' tables go unused.
#![cfg_attr(not(feature = "metrics"), allow(dead_code, unused_variables))]

use std::time::Duration;

#[cfg(feature = "metrics")]
use metrics::{Key, Label, SharedString};

#[cfg(feature = "metrics")]
use super::metric::{count, observe};
use super::metric::{key_table, label_values, Description, Unit};
use crate::Script;

/// Histogram, seconds: one Redis round trip of a script call or batch (OpenTelemetry's
/// database-client metric).
pub(crate) const OPERATION_DURATION: &str = "db.client.operation.duration";
/// Counter: recoveries of a script the server lacked.
pub(crate) const SCRIPT_RELOADS: &str = "redkit.script.reloads";

/// The round trips' metrics, for [`describe`](super::catalog::describe).
pub(crate) const METRICS: &[Description] = &[
    Description::histogram(
        OPERATION_DURATION,
        Unit::Seconds,
        "Duration of one Redis round trip of a script call or batch",
    ),
    Description::counter(
        SCRIPT_RELOADS,
        "Recoveries of a script or function the server lacked",
    ),
];

label_values! {
    /// A reload kind (`redkit.reload` label of [`SCRIPT_RELOADS`]).
    pub(crate) enum Reload {
        /// `NOSCRIPT` answered, the call re-sent as `EVAL`.
        EvalFallback => "eval_fallback",
        /// `SCRIPT LOAD` after an `EVAL` fallback (or at the head of a batch's re-run).
        ScriptLoad => "script_load",
        /// `FUNCTION LOAD REPLACE` of a library whose function was missing.
        FunctionLoad => "function_load",
    }
}

label_values! {
    /// The command of a round trip (`db.operation.name`).
    pub(crate) enum Operation {
        /// `EVALSHA`.
        EvalSha => "EVALSHA",
        /// `EVALSHA_RO`.
        EvalShaRo => "EVALSHA_RO",
        /// `EVAL`.
        Eval => "EVAL",
        /// `EVAL_RO`.
        EvalRo => "EVAL_RO",
        /// `FCALL`.
        Fcall => "FCALL",
        /// `FCALL_RO`.
        FcallRo => "FCALL_RO",
        /// `SCRIPT` (`LOAD`, `EXISTS`).
        Script => "SCRIPT",
        /// `FUNCTION` (`LOAD`, `LIST`).
        Function => "FUNCTION",
        /// A batch: `MULTI` .. `EXEC`.
        Multi => "MULTI",
        /// Any other command.
        Other => "other",
    }
}

key_table! {
    /// `db.client.operation.duration` of a successful round trip of no script (a batch).
    static TRIP_KEYS = OPERATION_DURATION, [
        "db.system.name": &["redis"],
        "db.operation.name": Operation::VALUES,
    ];
}

/// The keys of one script's metrics (its `name.vN` is a label), built on the script's first
/// recording and kept with it. Empty without the feature.
#[derive(Clone, Default)]
pub(crate) struct ScriptMetrics {
    #[cfg(feature = "metrics")]
    keys: std::sync::OnceLock<std::sync::Arc<ScriptKeys>>,
}

/// A script's keys: a successful round trip's duration per [`Operation`], a reload per
/// [`Reload`] (by index).
#[cfg(feature = "metrics")]
struct ScriptKeys {
    trips: [Key; Operation::COUNT],
    reloads: [Key; Reload::COUNT],
}

#[cfg(feature = "metrics")]
impl ScriptKeys {
    fn of(script: &Script) -> &Self {
        script.metrics().keys.get_or_init(|| {
            // One copy of the id, shared by every key.
            let id = SharedString::from_shared(std::sync::Arc::from(script.id()));
            let procedure = || Label::new("db.stored_procedure.name", id.clone());
            std::sync::Arc::new(Self {
                trips: std::array::from_fn(|i| {
                    let labels = vec![
                        Label::from_static_parts("db.system.name", "redis"),
                        Label::from_static_parts("db.operation.name", Operation::VALUES[i]),
                        procedure(),
                    ];
                    Key::from_parts(OPERATION_DURATION, labels)
                }),
                reloads: std::array::from_fn(|i| {
                    let kind = Label::from_static_parts("redkit.reload", Reload::VALUES[i]);
                    Key::from_parts(SCRIPT_RELOADS, vec![kind, procedure()])
                }),
            })
        })
    }
}

/// Records one round trip's duration (`script`: the script called, none for a batch).
pub(crate) fn round_trip(
    operation: Operation,
    script: Option<&Script>,
    error_type: Option<&'static str>,
    elapsed: Duration,
) {
    #[cfg(feature = "metrics")]
    {
        let seconds = elapsed.as_secs_f64();
        match (script, error_type) {
            (Some(script), None) => {
                observe(&ScriptKeys::of(script).trips[operation as usize], seconds);
            }
            (None, None) => observe(&TRIP_KEYS[operation as usize], seconds),
            // A failure: its key built now (one per script, operation and error type would
            // be many keys kept for what seldom happens).
            (script, Some(error_type)) => {
                let mut labels = vec![
                    Label::from_static_parts("db.system.name", "redis"),
                    Label::from_static_parts("db.operation.name", operation.label()),
                ];
                if let Some(script) = script {
                    labels.push(Label::new(
                        "db.stored_procedure.name",
                        script.id().to_owned(),
                    ));
                }
                labels.push(Label::from_static_parts("error.type", error_type));
                observe(&Key::from_parts(OPERATION_DURATION, labels), seconds);
            }
        }
    }
}

/// Counts one recovery of `script`.
pub(crate) fn reload(kind: Reload, script: &Script) {
    #[cfg(feature = "metrics")]
    count(&ScriptKeys::of(script).reloads[kind as usize]);
}

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use super::*;
    use crate::telemetry::metric::test_support::{assert_same, built};

    #[test]
    fn every_static_key_is_the_key_its_labels_name() {
        for (i, operation) in Operation::VALUES.iter().enumerate() {
            let expected = built(
                OPERATION_DURATION,
                &[
                    ("db.system.name", "redis"),
                    ("db.operation.name", operation),
                ],
            );
            assert_same(&TRIP_KEYS[i], &expected);
        }
    }

    #[test]
    fn a_variant_indexes_its_own_value() {
        assert_eq!(Operation::Other.label(), "other");
        assert_eq!(Reload::FunctionLoad.label(), "function_load");
    }

    #[test]
    fn script_keys_are_the_keys_their_labels_name() {
        let script = Script::new("probe", 3, 1, "return 1").unwrap();
        let keys = ScriptKeys::of(&script);
        for (i, operation) in Operation::VALUES.iter().enumerate() {
            let expected = built(
                OPERATION_DURATION,
                &[
                    ("db.system.name", "redis"),
                    ("db.operation.name", operation),
                    ("db.stored_procedure.name", "probe.v3"),
                ],
            );
            assert_same(&keys.trips[i], &expected);
        }
        for (i, kind) in Reload::VALUES.iter().enumerate() {
            let expected = built(
                SCRIPT_RELOADS,
                &[
                    ("redkit.reload", kind),
                    ("db.stored_procedure.name", "probe.v3"),
                ],
            );
            assert_same(&keys.reloads[i], &expected);
        }
        assert!(
            std::ptr::eq(ScriptKeys::of(&script), keys),
            "built once per script"
        );
    }
}
