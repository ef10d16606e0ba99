//! Not public API (features `bench` and `metrics`): each recording function called as redkit
//! calls it on its hot paths, for `benches/metrics.rs` (what a recording costs with the
//! feature on and no recorder installed).

use std::time::Duration;

use super::metric;
use super::metric::{
    GroupOperation, InventoryOp, InventoryOutcome, LockKind, LockOp, LockOutcome, Operation,
    PolicyMetrics, Verdict,
};
use super::round_trip::RoundTrip;
use crate::Script;

/// What the recordings need, made once (a policy's keys, a script).
#[derive(Debug)]
pub struct Recordings {
    rate_limiting: PolicyMetrics,
    concurrency: PolicyMetrics,
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
            rate_limiting: PolicyMetrics::rate_limiting("api"),
            concurrency: PolicyMetrics::concurrency_limiting("api"),
            script: Script::new("bench_probe", 1, 1, "return 1").expect("a valid script"),
        }
    }

    /// One rate-limit decision (`allowed`).
    pub fn rate_limited(&self) {
        metric::rate_limited(&self.rate_limiting, Verdict::Allowed);
    }

    /// One concurrency-limit decision (`allowed`) and the slot taken (`+1`).
    pub fn concurrency_limited(&self) {
        metric::concurrency_limited(&self.concurrency, Verdict::Allowed);
        metric::concurrency_active(&self.concurrency, 1.0);
    }

    /// One lock renewal as a lock kind's lease code records it (`Lock`, `renew`,
    /// `renewed`).
    pub fn lock_operation(&self) {
        metric::lock_operation(LockKind::Lock, LockOp::Renew, LockOutcome::Renewed);
    }

    /// One inventory write (`decrement`, `applied`).
    pub fn inventory_operation(&self) {
        metric::inventory_operation(InventoryOp::Decrement, InventoryOutcome::Applied);
    }

    /// The duration of one successful `EVALSHA` of the script, the recording alone.
    pub fn round_trip(&self) {
        metric::round_trip(
            Operation::EvalSha,
            Some(&self.script),
            None,
            Duration::from_micros(50),
        );
    }

    /// One successful `EVALSHA` round trip's telemetry whole, without the round trip: its
    /// span (no subscriber: disabled), its clock reads and its duration recorded.
    pub fn round_trip_whole(&self) {
        RoundTrip::call(Operation::EvalSha, &self.script, None).finish(None);
    }

    /// One group sent (`decrement`, 8 calls).
    pub fn group_sent(&self) {
        metric::group_sent(GroupOperation::Decrement, 8);
    }

    /// One deny-cache lookup (a hit) and the entries gauge set.
    pub fn deny_cache(&self) {
        metric::deny_cache_lookup(true);
        metric::deny_cache_entries(|| 1);
    }
}
