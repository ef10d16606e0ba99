//! Response headers: `Retry-After` and the IETF httpapi `RateLimit-Policy` / `RateLimit`
//! fields (draft-ietf-httpapi-ratelimit-headers, structured-field form).

use std::time::Duration;

use http::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};

use crate::rate_limit::{Decision, FixedWindow};

/// `RateLimit-Policy: "<name>";q=<limit>;w=<window seconds>`.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit: "<name>";r=<remaining>;t=<seconds until reset>`.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// Whole seconds, rounded up.
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// `Retry-After` seconds: rounded up, at least 1 (0 would invite an immediate retry).
pub(crate) fn retry_after_secs(d: Duration) -> u64 {
    ceil_secs(d).max(1)
}

/// Adds `RateLimit-Policy` and `RateLimit` (and `Retry-After` when limited).
pub(crate) fn apply(headers: &mut HeaderMap, limiter: &FixedWindow, decision: &Decision) {
    let quota = decision.quota();
    // Names are [A-Za-z0-9_:.-] (checked by FixedWindow::new): always a valid sf-string.
    let policy = format!(
        "\"{}\";q={};w={}",
        limiter.name(),
        quota.limit(),
        ceil_secs(limiter.window()).max(1)
    );
    let state = format!(
        "\"{}\";r={};t={}",
        limiter.name(),
        quota.remaining(),
        ceil_secs(quota.reset_after())
    );
    if let Ok(v) = HeaderValue::from_str(&policy) {
        headers.insert(RATELIMIT_POLICY, v);
    }
    if let Ok(v) = HeaderValue::from_str(&state) {
        headers.insert(RATELIMIT, v);
    }
    if let Some(wait) = decision.retry_after() {
        headers.insert(RETRY_AFTER, HeaderValue::from(retry_after_secs(wait)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding() {
        assert_eq!(ceil_secs(Duration::ZERO), 0);
        assert_eq!(ceil_secs(Duration::from_millis(1)), 1);
        assert_eq!(ceil_secs(Duration::from_millis(1000)), 1);
        assert_eq!(ceil_secs(Duration::from_millis(1001)), 2);
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(2500)), 3);
    }
}
