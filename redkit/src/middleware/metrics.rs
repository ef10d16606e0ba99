//! The middleware's metrics (feature `metrics`): the requests each layer decided on, by
//! policy and result, and the requests holding a concurrency-limit slot. A policy's name is a
//! label, so its keys are built once, with the policy ([`PolicyMetrics`]). Without the feature
//! every recording function is empty.

// Without the feature the recording functions are empty: their arguments, the names and the
// label enums' tables go unused.
#![cfg_attr(not(feature = "metrics"), allow(dead_code, unused_variables))]

#[cfg(feature = "metrics")]
use ::metrics::{Key, Label, SharedString};

#[cfg(feature = "metrics")]
use crate::telemetry::metric::{count, gauge};
use crate::telemetry::metric::{label_values, Description};

/// Counter: requests the rate-limit layer decided on, by policy and result.
pub(crate) const RATE_LIMITING_REQUESTS: &str = "redkit.rate_limiting.requests";
/// Counter: requests the concurrency-limit layer decided on, by policy and result.
pub(crate) const CONCURRENCY_REQUESTS: &str = "redkit.concurrency_limiting.requests";
/// Gauge: requests holding a concurrency-limit slot of this process.
pub(crate) const CONCURRENCY_ACTIVE: &str = "redkit.concurrency_limiting.active_requests";

/// The middleware's metrics, for [`describe`](crate::telemetry::catalog::describe).
pub(crate) const METRICS: &[Description] = &[
    Description::counter(
        RATE_LIMITING_REQUESTS,
        "Requests the rate-limit layer decided on, by policy and result",
    ),
    Description::counter(
        CONCURRENCY_REQUESTS,
        "Requests the concurrency-limit layer decided on, by policy and result",
    ),
    Description::gauge(
        CONCURRENCY_ACTIVE,
        "Requests holding a concurrency-limit slot of this process",
    ),
];

label_values! {
    /// What a layer did with a request (`redkit.rate_limiting.result` /
    /// `redkit.concurrency_limiting.result`).
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
pub(crate) struct PolicyMetrics {
    /// The requests counter, one key per [`Verdict`] (by index).
    #[cfg(feature = "metrics")]
    requests: Box<[Key]>,
    /// The active-requests gauge (the concurrency layer's).
    #[cfg(feature = "metrics")]
    active: Option<Key>,
}

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
pub(crate) fn rate_limited(policy: &PolicyMetrics, verdict: Verdict) {
    #[cfg(feature = "metrics")]
    count(&policy.requests[verdict as usize]);
}

/// Counts one concurrency-limit decision of a policy.
pub(crate) fn concurrency_limited(policy: &PolicyMetrics, verdict: Verdict) {
    #[cfg(feature = "metrics")]
    count(&policy.requests[verdict as usize]);
}

/// One more (`+1`) or one fewer (`-1`) request holding a slot of a policy.
pub(crate) fn concurrency_active(policy: &PolicyMetrics, delta: f64) {
    #[cfg(feature = "metrics")]
    if let Some(key) = &policy.active {
        gauge(key).increment(delta);
    }
}

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use super::*;
    use crate::telemetry::metric::test_support::{assert_same, built};

    #[test]
    fn a_variant_indexes_its_own_value() {
        assert_eq!(Verdict::Denied.label(), "denied");
        assert_eq!(Verdict::Denied as usize, Verdict::COUNT - 1);
    }

    #[test]
    fn policy_keys_are_the_keys_their_labels_name() {
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
    }
}
