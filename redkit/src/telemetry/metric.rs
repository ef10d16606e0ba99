//! Metrics through the [`metrics`](https://docs.rs/metrics) facade (feature `metrics`): their
//! names, and one recording function per event. Without the feature every function is empty.
//!
//! With it, a recording builds nothing: every key (name and labels) is built beforehand, at
//! compile time where every label comes from code (a `static` table per metric, indexed by
//! the label enums below), once per policy ([`PolicyMetrics`]) or once per script
//! ([`ScriptMetrics`], on its first recording) where a label is a configured name. A
//! recording hands its key by reference to the facade (`metrics::with_recorder`, what the
//! facade's macros expand to); with no recorder installed that is the facade's no-op
//! recorder: a thread-local read, an atomic load and a call returning an empty handle. The
//! facade (0.24) has no public way to ask whether a recorder is installed, so that is the
//! floor. Still built when recorded: the key of a failed round trip (its `error.type`). And a
//! round trip reads the clock twice for its duration ([`round_trip`](super::round_trip)).
//! Measured: `benches/metrics.rs`, recorded in `docs/benchmarks.md`.

// Without the feature the recording functions are empty: their arguments, the names and the
// label enums' tables go unused.
#![cfg_attr(not(feature = "metrics"), allow(dead_code, unused_variables))]

use std::time::Duration;

#[cfg(feature = "metrics")]
use metrics::{Key, Label, SharedString};

use crate::Script;

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

/// A label set for every combination of the values of `dims` (each a label key and its
/// values), the last dimension varying fastest: set `i` holds one label per dimension, in
/// order. Evaluated at compile time (see [`key_table!`]).
#[cfg(feature = "metrics")]
const fn label_sets<const L: usize, const N: usize>(
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
const fn keys<const L: usize, const N: usize>(
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

/// `static $table: [Key; N]`: the keys of metric `$name` for every combination of the label
/// values given (`"label key": values`, the last varying fastest), built at compile time.
macro_rules! key_table {
    (
        $(#[$doc:meta])*
        static $table:ident = $name:expr, [$($label:literal: $values:expr),+ $(,)?];
    ) => {
        $(#[$doc])*
        #[cfg(feature = "metrics")]
        static $table: [Key; 1 $(* $values.len())+] = {
            static SETS: [[Label; <[()]>::len(&[$(key_table!(@unit $values)),+])]; 1 $(* $values.len())+] =
                label_sets([$(($label, $values)),+]);
            keys($name, &SETS)
        };
    };
    (@unit $values:expr) => {
        ()
    };
}

/// Where recordings come from: the facade's macros give this (their call site's module, at
/// level `INFO`).
#[cfg(feature = "metrics")]
static METADATA: metrics::Metadata<'static> =
    metrics::Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

/// Adds 1 to the counter `key`.
#[cfg(feature = "metrics")]
fn count(key: &Key) {
    metrics::with_recorder(|recorder| recorder.register_counter(key, &METADATA).increment(1));
}

/// The gauge `key`.
#[cfg(feature = "metrics")]
fn gauge(key: &Key) -> metrics::Gauge {
    metrics::with_recorder(|recorder| recorder.register_gauge(key, &METADATA))
}

/// Records `value` in the histogram `key`.
#[cfg(feature = "metrics")]
fn observe(key: &Key, value: f64) {
    metrics::with_recorder(|recorder| recorder.register_histogram(key, &METADATA).record(value));
}

label_values! {
    /// What a layer did with a request (`redkit.rate_limiting.result` /
    /// `redkit.concurrency_limiting.result`).
    #[cfg_attr(not(feature = "tower"), allow(dead_code))]
    pub(crate) enum Verdict {
        /// Checked and let through.
        Allowed => "allowed",
        /// Refused by the limiter.
        Limited => "limited",
        /// A shadow policy would have refused it; let through.
        ShadowLimited => "shadow_limited",
        /// Redis failed, let through ([`FailMode::Open`](crate::middleware::FailMode::Open)).
        FailOpen => "fail_open",
        /// Redis failed, refused ([`FailMode::Closed`](crate::middleware::FailMode::Closed)).
        FailClosed => "fail_closed",
        /// Redis failed, let through by this instance's share in process.
        FallbackAllowed => "fallback_allowed",
        /// Redis failed, refused by this instance's share in process.
        FallbackLimited => "fallback_limited",
        /// The client could not be identified.
        UnknownClient => "unknown_client",
        /// In the allow list: let through unchecked.
        Allowlisted => "allowlisted",
        /// In the deny list: refused unchecked.
        Denied => "denied",
    }
}

/// The keys of one policy's metrics (its name is a label), built once with the policy, so
/// that a decision is recorded without building anything. Empty without the feature.
#[derive(Debug)]
#[cfg_attr(not(feature = "tower"), allow(dead_code))]
pub(crate) struct PolicyMetrics {
    /// The requests counter, one key per [`Verdict`] (by index).
    #[cfg(feature = "metrics")]
    requests: Box<[Key]>,
    /// The active-requests gauge (the concurrency layer's).
    #[cfg(feature = "metrics")]
    active: Option<Key>,
}

#[cfg_attr(not(feature = "tower"), allow(dead_code))]
impl PolicyMetrics {
    /// `redkit.rate_limiting.requests` of the limiter named `policy`.
    pub(crate) fn rate_limiting(policy: &str) -> Self {
        Self::new(
            policy,
            RATE_LIMITING_REQUESTS,
            ["redkit.rate_limiting.policy", "redkit.rate_limiting.result"],
            None,
        )
    }

    /// `redkit.concurrency_limiting.requests` and `.active_requests` of the policy named
    /// `policy`.
    pub(crate) fn concurrency_limiting(policy: &str) -> Self {
        Self::new(
            policy,
            CONCURRENCY_REQUESTS,
            [
                "redkit.concurrency_limiting.policy",
                "redkit.concurrency_limiting.result",
            ],
            Some(CONCURRENCY_ACTIVE),
        )
    }

    fn new(
        policy: &str,
        requests: &'static str,
        [policy_label, result_label]: [&'static str; 2],
        active: Option<&'static str>,
    ) -> Self {
        #[cfg(feature = "metrics")]
        {
            // One copy of the name, shared by every key.
            let policy = SharedString::from_shared(std::sync::Arc::from(policy));
            let named = || Label::new(policy_label, policy.clone());
            Self {
                requests: Verdict::VALUES
                    .iter()
                    .map(|result| {
                        let result = Label::from_static_parts(result_label, result);
                        Key::from_parts(requests, vec![named(), result])
                    })
                    .collect(),
                active: active.map(|name| Key::from_parts(name, vec![named()])),
            }
        }
        #[cfg(not(feature = "metrics"))]
        Self {}
    }
}

/// Counts one rate-limit decision of a policy (a limiter name: from configuration, bounded).
#[cfg_attr(not(feature = "tower"), allow(dead_code))]
pub(crate) fn rate_limited(policy: &PolicyMetrics, verdict: Verdict) {
    #[cfg(feature = "metrics")]
    count(&policy.requests[verdict as usize]);
}

/// Counts one concurrency-limit decision of a policy.
#[cfg_attr(not(feature = "tower"), allow(dead_code))]
pub(crate) fn concurrency_limited(policy: &PolicyMetrics, verdict: Verdict) {
    #[cfg(feature = "metrics")]
    count(&policy.requests[verdict as usize]);
}

/// One more (`+1`) or one fewer (`-1`) request holding a slot of a policy.
#[cfg_attr(not(feature = "tower"), allow(dead_code))]
pub(crate) fn concurrency_active(policy: &PolicyMetrics, delta: f64) {
    #[cfg(feature = "metrics")]
    if let Some(key) = &policy.active {
        gauge(key).increment(delta);
    }
}

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

key_table! {
    /// `redkit.deny_cache.lookups`: a hit, a miss.
    static DENY_CACHE_KEYS = DENY_CACHE_LOOKUPS, ["redkit.result": &["hit", "miss"]];
}

/// `redkit.deny_cache.entries`.
#[cfg(feature = "metrics")]
static DENY_CACHE_ENTRIES_KEY: Key = Key::from_static_name(DENY_CACHE_ENTRIES);

/// Counts one deny-cache lookup.
pub(crate) fn deny_cache_lookup(hit: bool) {
    #[cfg(feature = "metrics")]
    count(&DENY_CACHE_KEYS[usize::from(!hit)]);
}

/// Sets the number of refusals a deny cache holds (`len` is only called with the feature).
pub(crate) fn deny_cache_entries(len: impl FnOnce() -> usize) {
    #[cfg(feature = "metrics")]
    gauge(&DENY_CACHE_ENTRIES_KEY).set(len() as f64);
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

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use metrics::{Key, Label};

    use super::*;

    /// The key the facade's macros build for `name` with `labels` (in this order).
    fn built(name: &'static str, labels: &[(&'static str, &str)]) -> Key {
        let labels: Vec<Label> = labels
            .iter()
            .map(|(k, v)| Label::new(*k, (*v).to_owned()))
            .collect();
        Key::from_parts(name, labels)
    }

    /// Equal as keys, with the same hash (what a recorder's registry looks keys up by), the
    /// same labels in the same order.
    fn assert_same(table: &Key, expected: &Key) {
        assert_eq!(table, expected);
        assert_eq!(table.get_hash(), expected.get_hash(), "{expected}");
        assert_eq!(table.to_string(), expected.to_string());
    }

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
        for (o, operation) in InventoryOp::VALUES.iter().enumerate() {
            for (r, outcome) in InventoryOutcome::VALUES.iter().enumerate() {
                let expected = built(
                    INVENTORY_OPERATIONS,
                    &[("redkit.operation", operation), ("redkit.outcome", outcome)],
                );
                assert_same(&INVENTORY_KEYS[o * InventoryOutcome::COUNT + r], &expected);
            }
        }
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
        for (i, operation) in GroupOperation::VALUES.iter().enumerate() {
            assert_same(
                &GROUP_KEYS[i],
                &built(GROUP_SIZE, &[("redkit.operation", operation)]),
            );
        }
        // A hit is 0, a miss 1 (`deny_cache_lookup`).
        assert_same(
            &DENY_CACHE_KEYS[0],
            &built(DENY_CACHE_LOOKUPS, &[("redkit.result", "hit")]),
        );
        assert_same(
            &DENY_CACHE_KEYS[1],
            &built(DENY_CACHE_LOOKUPS, &[("redkit.result", "miss")]),
        );
        assert_same(&DENY_CACHE_ENTRIES_KEY, &built(DENY_CACHE_ENTRIES, &[]));
    }

    #[test]
    fn a_variant_indexes_its_own_value() {
        assert_eq!(Verdict::Denied.label(), "denied");
        assert_eq!(Verdict::Denied as usize, Verdict::COUNT - 1);
        assert_eq!(LockOutcome::Error.label(), "error");
        assert_eq!(
            InventoryOutcome::AlreadyCancelled.label(),
            "already_cancelled"
        );
        assert_eq!(Operation::Other.label(), "other");
        assert_eq!(Reload::FunctionLoad.label(), "function_load");
        assert_eq!(GroupOperation::RateLimitCheck.label(), "rate-limit check");
    }

    #[test]
    fn policy_and_script_keys_are_the_keys_their_labels_name() {
        let policy = PolicyMetrics::concurrency_limiting("reports");
        for (i, result) in Verdict::VALUES.iter().enumerate() {
            let expected = built(
                CONCURRENCY_REQUESTS,
                &[
                    ("redkit.concurrency_limiting.policy", "reports"),
                    ("redkit.concurrency_limiting.result", result),
                ],
            );
            assert_same(&policy.requests[i], &expected);
        }
        let active = built(
            CONCURRENCY_ACTIVE,
            &[("redkit.concurrency_limiting.policy", "reports")],
        );
        assert_same(policy.active.as_ref().unwrap(), &active);
        let policy = PolicyMetrics::rate_limiting("api");
        assert_same(
            &policy.requests[Verdict::ShadowLimited as usize],
            &built(
                RATE_LIMITING_REQUESTS,
                &[
                    ("redkit.rate_limiting.policy", "api"),
                    ("redkit.rate_limiting.result", "shadow_limited"),
                ],
            ),
        );
        assert!(policy.active.is_none());

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
