//! Response headers: `Retry-After` and the IETF httpapi `RateLimit-Policy` / `RateLimit`
//! fields (draft-ietf-httpapi-ratelimit-headers, structured-field form).

use std::time::Duration;

use http::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};

use crate::rate_limit::{Decision, Limiter};

/// `RateLimit-Policy: "<name>";q=<limit>;w=<window seconds>`.
///
/// ```no_run
/// # async fn run(conn: redis::aio::ConnectionManager) -> Result<(), Box<dyn std::error::Error>> {
/// use std::net::SocketAddr;
/// use axum::extract::ConnectInfo;
/// use http::{Request, Response};
/// use redkit::rate_limit::{FixedWindow, Rate};
/// use tower::{service_fn, Layer, ServiceExt};
/// use redkit::middleware::{RateLimitLayer, RATELIMIT_POLICY};
///
/// let layer = RateLimitLayer::new(FixedWindow::new("api", Rate::per_minute(redkit::nonzero!(100)))?, conn);
/// let app = layer.layer(service_fn(|_req: Request<String>| async {
///     Ok::<_, std::convert::Infallible>(Response::new(String::new()))
/// }));
/// let peer: SocketAddr = "192.0.2.7:50000".parse()?;
/// let req = Request::builder().extension(ConnectInfo(peer)).body(String::new())?;
/// let res = app.oneshot(req).await?;
/// assert_eq!(res.headers()[RATELIMIT_POLICY], r#""api";q=100;w=60"#);
/// # Ok(()) }
/// ```
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit: "<name>";r=<remaining>;t=<seconds until reset>`.
///
/// ```no_run
/// # async fn run(conn: redis::aio::ConnectionManager) -> Result<(), Box<dyn std::error::Error>> {
/// use std::net::SocketAddr;
/// use axum::extract::ConnectInfo;
/// use http::{Request, Response};
/// use redkit::rate_limit::{FixedWindow, Rate};
/// use tower::{service_fn, Layer, ServiceExt};
/// use redkit::middleware::{RateLimitLayer, RATELIMIT};
///
/// let layer = RateLimitLayer::new(FixedWindow::new("api", Rate::per_minute(redkit::nonzero!(100)))?, conn);
/// let app = layer.layer(service_fn(|_req: Request<String>| async {
///     Ok::<_, std::convert::Infallible>(Response::new(String::new()))
/// }));
/// let peer: SocketAddr = "192.0.2.7:50000".parse()?;
/// let req = Request::builder().extension(ConnectInfo(peer)).body(String::new())?;
/// let res = app.oneshot(req).await?;
/// // The first request of this client in a fresh window: 99 left.
/// let quota = res.headers()[RATELIMIT].to_str()?;
/// assert!(quota.starts_with(r#""api";r=99;t="#), "{quota}");
/// # Ok(()) }
/// ```
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// Which answers of the rate-limit layer carry the `RateLimit-Policy` / `RateLimit`
/// headers ([`RateLimitBuilder::quota_headers`](super::RateLimitBuilder::quota_headers)).
/// A refusal (429) always carries them, with `Retry-After`.
///
/// ```
/// use redkit::middleware::QuotaHeaders;
/// assert_eq!(QuotaHeaders::default(), QuotaHeaders::Always);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum QuotaHeaders {
    /// On every answer: allowed requests learn what is left (the default).
    #[default]
    Always,
    /// Only on refusals: an allowed response is the inner service's own. Two header fields
    /// fewer per response, for APIs whose clients do not pace themselves by them (measured
    /// in `docs/benchmarks.md`: 6-8 % of a small response's cost over loopback).
    OnRefusal,
}

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
    Answer::of(policy, limiter, decision).insert(headers);
}

/// The headers of one decision, built before the response exists (a check answered in
/// process builds them while the inner service runs nothing yet) and added to it after.
pub(crate) struct Answer {
    policy: Option<HeaderValue>,
    state: Option<HeaderValue>,
    retry_after: Option<HeaderValue>,
}

impl Answer {
    /// `RateLimit-Policy`, `RateLimit`, and `Retry-After` when limited.
    pub(crate) fn of(policy: Option<&HeaderValue>, limiter: &Limiter, decision: &Decision) -> Self {
        let quota = decision.quota();
        let state = state_value(
            limiter.name(),
            u64::from(quota.remaining()),
            ceil_secs(quota.reset_after()),
        );
        Self {
            policy: policy.cloned(),
            // From the String itself: no second copy.
            state: HeaderValue::try_from(state).ok(),
            retry_after: decision
                .retry_after()
                .map(|wait| HeaderValue::from(retry_after_secs(wait))),
        }
    }

    /// Adds them to `headers`.
    pub(crate) fn insert(self, headers: &mut HeaderMap) {
        if let Some(v) = self.policy {
            headers.insert(RATELIMIT_POLICY, v);
        }
        if let Some(v) = self.state {
            headers.insert(RATELIMIT, v);
        }
        if let Some(v) = self.retry_after {
            headers.insert(RETRY_AFTER, v);
        }
    }
}

/// `"<name>";r=<remaining>;t=<seconds>`, written piece by piece: built for every answer,
/// and several times cheaper than `format!`. Allocated at its exact length, so the header
/// value takes the buffer over as it is (a buffer with spare room would cost `Bytes` a
/// second allocation).
fn state_value(name: &str, remaining: u64, reset_secs: u64) -> String {
    let len = name.len() + "\"\";r=;t=".len() + digits(remaining) + digits(reset_secs);
    let mut text = String::with_capacity(len);
    text.push('"');
    text.push_str(name);
    text.push_str("\";r=");
    push_decimal(&mut text, remaining);
    text.push_str(";t=");
    push_decimal(&mut text, reset_secs);
    text
}

/// How many decimal digits `n` has.
fn digits(n: u64) -> usize {
    // At most 20: the cast cannot truncate.
    n.checked_ilog10().map_or(1, |log| log as usize + 1)
}

/// Appends `n` in decimal.
fn push_decimal(text: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        // `n % 10` < 10: the cast cannot truncate.
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    // ASCII digits: always UTF-8 (the fallback is never taken). One copy, not a push each.
    text.push_str(std::str::from_utf8(&digits[at..]).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_value_is_the_formatted_text() {
        for (remaining, secs) in [
            (0, 0),
            (1, 1),
            (9, 10),
            (99, 100),
            (999_999, 1_000_000),
            (1_000_000_000, 60),
            (u64::MAX, u64::MAX),
        ] {
            let text = state_value("api.v1", remaining, secs);
            assert_eq!(text, format!("\"api.v1\";r={remaining};t={secs}"));
            assert_eq!(text.len(), text.capacity(), "exact length: one allocation");
        }
    }

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
            FixedWindow::new(
                "api",
                Rate::new(crate::nonzero!(5), Duration::from_millis(ms)).unwrap(),
            )
            .unwrap()
            .into()
        };
        assert_eq!(v(fw(60_000)), "\"api\";q=5;w=60");
        assert_eq!(v(fw(1_000)), "\"api\";q=5;w=1");
        assert_eq!(v(fw(500)), "\"api\";q=5");
        assert_eq!(v(fw(1_500)), "\"api\";q=5");
        let sw = SlidingWindow::new(
            "s",
            Rate::new(crate::nonzero!(7), Duration::from_secs(10)).unwrap(),
        )
        .unwrap();
        assert_eq!(v(sw.into()), "\"s\";q=7;w=10");
        // GCRA: 10/s with bursts of 20: q=20 per w=2 s.
        let g = |burst| {
            let burst = std::num::NonZeroU32::new(burst).unwrap();
            Gcra::bursting("g", Rate::per_second(crate::nonzero!(10)), burst)
                .unwrap()
                .into()
        };
        assert_eq!(v(g(20)), "\"g\";q=20;w=2");
        assert_eq!(v(g(5)), "\"g\";q=5");
    }

    #[test]
    fn apply_adds_the_policy_the_state_and_retry_after_only_when_limited() {
        use crate::rate_limit::Quota;
        use crate::rate_limit::{FixedWindow, Rate};
        let limiter: Limiter = FixedWindow::new("api", Rate::per_minute(crate::nonzero!(100)))
            .unwrap()
            .into();
        let policy = policy_value(&limiter);
        let quota = Quota::new(100, 97, Duration::from_millis(2_500));

        let mut headers = HeaderMap::new();
        apply(
            &mut headers,
            policy.as_ref(),
            &limiter,
            &Decision::Allowed(quota),
        );
        assert_eq!(headers[RATELIMIT_POLICY], "\"api\";q=100;w=60");
        assert_eq!(headers[RATELIMIT], "\"api\";r=3;t=3");
        assert!(!headers.contains_key(RETRY_AFTER), "{headers:?}");

        let limited = Decision::Limited {
            quota,
            retry_after: Duration::from_millis(1_200),
        };
        let mut headers = HeaderMap::new();
        apply(&mut headers, policy.as_ref(), &limiter, &limited);
        assert_eq!(headers[RATELIMIT_POLICY], "\"api\";q=100;w=60");
        assert_eq!(headers[RATELIMIT], "\"api\";r=3;t=3");
        assert_eq!(headers[RETRY_AFTER], "2");

        // Without a policy value (a window of no whole seconds builds none): the other two.
        let mut headers = HeaderMap::new();
        Answer::of(None, &limiter, &limited).insert(&mut headers);
        assert!(!headers.contains_key(RATELIMIT_POLICY));
        assert_eq!(headers[RATELIMIT], "\"api\";r=3;t=3");
        assert_eq!(headers[RETRY_AFTER], "2");
    }
}
