//! Response headers: `Retry-After` and the IETF httpapi `RateLimit-Policy` / `RateLimit`
//! fields (draft-ietf-httpapi-ratelimit-headers, structured-field form).

use std::time::Duration;

use http::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};

use crate::rate_limit::{Decision, Limiter};

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

/// The `RateLimit-Policy` value of a limiter: built once per limiter when the layer is built.
///
/// `q` is [`Limiter::limit`] (GCRA: the burst) and `w` [`Limiter::window`] (GCRA: the time
/// to refill a full bucket, so `q / w` is the sustained rate). `w` is an integer in the draft;
/// a window that is not a whole number of seconds is not rounded into a false claim: `w` is
/// left out (it is optional) and `q` alone is sent.
pub(crate) fn policy_value(limiter: &Limiter) -> Option<HeaderValue> {
    let window = limiter.window();
    // Names are [A-Za-z0-9_:.-] (checked by every constructor): always a valid sf-string.
    let text = if window.subsec_nanos() == 0 && window.as_secs() > 0 {
        format!(
            "\"{}\";q={};w={}",
            limiter.name(),
            limiter.limit(),
            window.as_secs()
        )
    } else {
        format!("\"{}\";q={}", limiter.name(), limiter.limit())
    };
    HeaderValue::from_str(&text).ok()
}

/// Adds `RateLimit-Policy` (prebuilt, see [`policy_value`]) and `RateLimit` (and `Retry-After`
/// when limited).
pub(crate) fn apply(
    headers: &mut HeaderMap,
    policy: Option<&HeaderValue>,
    limiter: &Limiter,
    decision: &Decision,
) {
    let quota = decision.quota();
    let state = format!(
        "\"{}\";r={};t={}",
        limiter.name(),
        quota.remaining(),
        ceil_secs(quota.reset_after())
    );
    if let Some(v) = policy {
        headers.insert(RATELIMIT_POLICY, v.clone());
    }
    // From the String itself: no second copy.
    if let Ok(v) = HeaderValue::try_from(state) {
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

    #[test]
    fn policy_states_the_window_only_when_it_is_whole_seconds() {
        use crate::rate_limit::{FixedWindow, Gcra, Rate, SlidingWindow};
        let v = |l: Limiter| policy_value(&l).unwrap().to_str().unwrap().to_owned();
        let fw = |ms| {
            FixedWindow::new("api", Rate::new(5, Duration::from_millis(ms)).unwrap())
                .unwrap()
                .into()
        };
        assert_eq!(v(fw(60_000)), "\"api\";q=5;w=60");
        assert_eq!(v(fw(1_000)), "\"api\";q=5;w=1");
        assert_eq!(v(fw(500)), "\"api\";q=5");
        assert_eq!(v(fw(1_500)), "\"api\";q=5");
        let sw = SlidingWindow::new("s", Rate::new(7, Duration::from_secs(10)).unwrap()).unwrap();
        assert_eq!(v(sw.into()), "\"s\";q=7;w=10");
        // GCRA: 10/s with bursts of 20: q=20 per w=2 s.
        let g = |burst| {
            let rate = Rate::per_second(10).unwrap().with_burst(burst).unwrap();
            Gcra::new("g", rate).unwrap().into()
        };
        assert_eq!(v(g(20)), "\"g\";q=20;w=2");
        assert_eq!(v(g(5)), "\"g\";q=5");
    }
}
