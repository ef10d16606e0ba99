//! Metrics through the [`metrics`](https://docs.rs/metrics) facade (feature `metrics`): their
//! names, and one recording function per event. Without the feature every function is empty.
//! With it but no recorder installed, a recording is the facade's no-op (a label list built
//! and dropped: no I/O, no lock).

// Without the feature the recording functions are empty: their arguments and the names go
// unused.
#![cfg_attr(not(feature = "metrics"), allow(dead_code, unused_variables))]

use std::time::Duration;

/// Whether metrics are compiled in.
pub(crate) const ENABLED: bool = cfg!(feature = "metrics");

/// Histogram, seconds: one Redis round trip of a script call or batch (OpenTelemetry's
/// database-client metric).
pub(crate) const OPERATION_DURATION: &str = "db.client.operation.duration";
/// Counter: recoveries of a script the server lacked.
pub(crate) const SCRIPT_RELOADS: &str = "redkit.script.reloads";

/// Histogram, calls: the calls one group-commit script call settled (1: a call alone).
pub(crate) const GROUP_SIZE: &str = "redkit.group_commit.size";
/// Counter: deny-cache lookups, by result (`hit`: answered locally; `miss`: asked Redis).
pub(crate) const DENY_CACHE_LOOKUPS: &str = "redkit.deny_cache.lookups";
/// Gauge: refusals a deny cache holds.
pub(crate) const DENY_CACHE_ENTRIES: &str = "redkit.deny_cache.entries";

/// Counter: requests the rate-limit layer decided on, by policy and result.
pub(crate) const RATE_LIMITING_REQUESTS: &str = "redkit.rate_limiting.requests";
/// Counter: requests the concurrency-limit layer decided on, by policy and result.
pub(crate) const CONCURRENCY_REQUESTS: &str = "redkit.concurrency_limiting.requests";
/// Gauge: requests holding a concurrency-limit slot of this process.
pub(crate) const CONCURRENCY_ACTIVE: &str = "redkit.concurrency_limiting.active_requests";
/// Counter: lock operations by kind, operation and outcome.
pub(crate) const LOCK_OPERATIONS: &str = "redkit.lock.operations";
/// Counter: inventory writes by operation and outcome.
pub(crate) const INVENTORY_OPERATIONS: &str = "redkit.inventory.operations";

/// What a layer did with a request (`redkit.rate_limiting.result` /
/// `redkit.concurrency_limiting.result`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "tower"), allow(dead_code))]
pub(crate) enum Verdict {
    /// Checked and let through.
    Allowed,
    /// Refused by the limiter.
    Limited,
    /// A shadow policy would have refused it; let through.
    ShadowLimited,
    /// Redis failed, let through ([`FailMode::Open`](crate::middleware::FailMode::Open)).
    FailOpen,
    /// Redis failed, refused ([`FailMode::Closed`](crate::middleware::FailMode::Closed)).
    FailClosed,
    /// Redis failed, let through by this instance's share in process.
    FallbackAllowed,
    /// Redis failed, refused by this instance's share in process.
    FallbackLimited,
    /// The client could not be identified.
    UnknownClient,
    /// In the allow list: let through unchecked.
    Allowlisted,
    /// In the deny list: refused unchecked.
    Denied,
}

impl Verdict {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Allowed => "allowed",
            Self::Limited => "limited",
            Self::ShadowLimited => "shadow_limited",
            Self::FailOpen => "fail_open",
            Self::FailClosed => "fail_closed",
            Self::FallbackAllowed => "fallback_allowed",
            Self::FallbackLimited => "fallback_limited",
            Self::UnknownClient => "unknown_client",
            Self::Allowlisted => "allowlisted",
            Self::Denied => "denied",
        }
    }
}

/// Counts one rate-limit decision of `policy` (a limiter name: from configuration, bounded).
pub(crate) fn rate_limited(policy: &str, verdict: Verdict) {
    #[cfg(feature = "metrics")]
    metrics::counter!(
        RATE_LIMITING_REQUESTS,
        "redkit.rate_limiting.policy" => policy.to_owned(),
        "redkit.rate_limiting.result" => verdict.label()
    )
    .increment(1);
}

/// Counts one concurrency-limit decision of `policy`.
pub(crate) fn concurrency_limited(policy: &str, verdict: Verdict) {
    #[cfg(feature = "metrics")]
    metrics::counter!(
        CONCURRENCY_REQUESTS,
        "redkit.concurrency_limiting.policy" => policy.to_owned(),
        "redkit.concurrency_limiting.result" => verdict.label()
    )
    .increment(1);
}

/// One more (`+1`) or one fewer (`-1`) request holding a slot of `policy`.
pub(crate) fn concurrency_active(policy: &str, delta: f64) {
    #[cfg(feature = "metrics")]
    metrics::gauge!(CONCURRENCY_ACTIVE, "redkit.concurrency_limiting.policy" => policy.to_owned())
        .increment(delta);
}

/// The name of a lock kind as a label: the last segment of its type's path (`Lock`,
/// `FairLock`, `RwLock`, `ReentrantLock`, `Semaphore`).
pub(crate) fn kind_name<K>() -> &'static str {
    let full = std::any::type_name::<K>();
    let base = full.split('<').next().unwrap_or(full);
    base.rsplit("::").next().unwrap_or(base)
}

/// Counts one lock operation: `kind` (see [`kind_name`]), `operation` (`acquire`, `renew`, `release`, `lease_lost`), `outcome`
/// (`acquired`, `busy`, `not_replicated`, `renewed`, `lost`, `released`, `not_owner`, `error`).
pub(crate) fn lock_operation(kind: &'static str, operation: &'static str, outcome: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(
        LOCK_OPERATIONS,
        "redkit.lock.kind" => kind,
        "redkit.operation" => operation,
        "redkit.outcome" => outcome
    )
    .increment(1);
}

/// Counts one inventory write: `operation` (`decrement`, `restock`, `order`, `reserve`,
/// `commit`, `cancel`) and `outcome`: one per variant of the operation's outcome enum, the
/// variant's name in snake case but `applied` for the write done as asked (`applied`,
/// `insufficient`, `duplicate`, `id_reused`; for reservations `already_reserved`, `full`,
/// `already_committed`, `already_cancelled`, `unknown`), or for an error `not_found` (a SKU
/// never set) or `error` (any other, bad input included).
pub(crate) fn inventory_operation(operation: &'static str, outcome: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(
        INVENTORY_OPERATIONS,
        "redkit.operation" => operation,
        "redkit.outcome" => outcome
    )
    .increment(1);
}

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
    fn label(self) -> &'static str {
        match self {
            Self::EvalFallback => "eval_fallback",
            Self::ScriptLoad => "script_load",
            Self::FunctionLoad => "function_load",
        }
    }
}

/// Records one round trip's duration.
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
pub(crate) fn group_sent(operation: &'static str, size: usize) {
    #[cfg(feature = "metrics")]
    metrics::histogram!(GROUP_SIZE, "redkit.operation" => operation).record(size as f64);
}

/// Counts one deny-cache lookup.
pub(crate) fn deny_cache_lookup(hit: bool) {
    #[cfg(feature = "metrics")]
    metrics::counter!(DENY_CACHE_LOOKUPS, "redkit.result" => if hit { "hit" } else { "miss" })
        .increment(1);
}

/// Sets the number of refusals a deny cache holds (`len` is only called with the feature).
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

/// Not public API (features `bench` and `metrics`): each recording function called as redkit
/// calls it on its hot paths, for `benches/metrics.rs` (what a recording costs with the
/// feature on and no recorder installed).
#[cfg(all(feature = "bench", feature = "metrics"))]
pub mod bench {
    use std::time::Duration;

    use super::Verdict;
    use crate::telemetry::round_trip::RoundTrip;
    use crate::Script;

    /// What the recordings need, made once (a policy name, a script).
    #[derive(Debug)]
    pub struct Recordings {
        policy: String,
        script: Script,
    }

    impl Default for Recordings {
        fn default() -> Self {
            Self::new()
        }
    }

    impl Recordings {
        /// Policy `api`, script `bench_probe.v1`.
        pub fn new() -> Self {
            Self {
                policy: "api".to_owned(),
                script: Script::new("bench_probe", 1, 1, "return 1").expect("a valid script"),
            }
        }

        /// One rate-limit decision (`allowed`).
        pub fn rate_limited(&self) {
            super::rate_limited(&self.policy, Verdict::Allowed);
        }

        /// One concurrency-limit decision (`allowed`) and the slot taken (`+1`).
        pub fn concurrency_limited(&self) {
            super::concurrency_limited(&self.policy, Verdict::Allowed);
            super::concurrency_active(&self.policy, 1.0);
        }

        /// One lock renewal as a lock kind's lease code records it (`Lock`, `renew`,
        /// `renewed`).
        pub fn lock_operation(&self) {
            super::lock_operation(super::kind_name::<crate::lock::Lock>(), "renew", "renewed");
        }

        /// One inventory write (`decrement`, `applied`).
        pub fn inventory_operation(&self) {
            super::inventory_operation("decrement", "applied");
        }

        /// The duration of one successful `EVALSHA` of the script, the recording alone.
        pub fn round_trip(&self) {
            super::round_trip(
                "EVALSHA",
                Some(self.script.id()),
                None,
                Duration::from_micros(50),
            );
        }

        /// One successful `EVALSHA` round trip's telemetry whole, without the round trip: its
        /// span (no subscriber: disabled), its clock reads and its duration recorded.
        pub fn round_trip_whole(&self) {
            RoundTrip::call("EVALSHA", self.script.id(), None).finish(None);
        }

        /// One group sent (`decrement`, 8 calls).
        pub fn group_sent(&self) {
            super::group_sent("decrement", 8);
        }

        /// One deny-cache lookup (a hit) and the entries gauge set.
        pub fn deny_cache(&self) {
            super::deny_cache_lookup(true);
            super::deny_cache_entries(|| 1);
        }
    }
}
