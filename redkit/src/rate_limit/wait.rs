//! Waiting for a permit: how long [`RateLimiter::check_within`](super::RateLimiter::check_within)
//! sleeps after a refusal.

use std::time::Duration;

/// A random extra wait of up to a tenth of `retry_after`, so waiters refused together do not
/// all come back in the same instant.
pub(super) fn jitter(retry_after: Duration) -> Duration {
    let cap = u64::try_from(retry_after.as_micros() / 10).unwrap_or(u64::MAX);
    Duration::from_micros(rand::random_range(0..=cap))
}

/// How long to sleep before the next check: `None` (give up now) when the refusal lasts
/// beyond `remaining`; else its `retry_after` (at least 1 ms) plus `jitter`, cut at
/// `remaining` (the last check then comes at the deadline).
pub(super) fn pause(
    retry_after: Duration,
    remaining: Duration,
    jitter: Duration,
) -> Option<Duration> {
    if retry_after > remaining {
        return None;
    }
    let wait = retry_after
        .max(Duration::from_millis(1))
        .saturating_add(jitter);
    Some(wait.min(remaining))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn gives_up_only_when_the_refusal_outlasts_the_deadline() {
        assert_eq!(pause(100 * MS, 99 * MS, Duration::ZERO), None);
        assert_eq!(pause(100 * MS, 100 * MS, Duration::ZERO), Some(100 * MS));
        assert_eq!(pause(100 * MS, 101 * MS, Duration::ZERO), Some(100 * MS));
        assert_eq!(
            pause(100 * MS, Duration::MAX, Duration::MAX),
            Some(Duration::MAX)
        );
    }

    #[test]
    fn sleeps_the_retry_after_plus_jitter_cut_at_the_deadline() {
        assert_eq!(pause(100 * MS, 200 * MS, 7 * MS), Some(107 * MS));
        assert_eq!(pause(100 * MS, 103 * MS, 7 * MS), Some(103 * MS));
        // A zero retry-after still yields: no busy loop.
        assert_eq!(pause(Duration::ZERO, 200 * MS, Duration::ZERO), Some(MS));
        assert_eq!(
            pause(Duration::ZERO, Duration::ZERO, Duration::ZERO),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn jitter_is_at_most_a_tenth() {
        let draws: Vec<Duration> = (0..1_000).map(|_| jitter(100 * MS)).collect();
        assert!(draws.iter().all(|j| *j <= 10 * MS));
        // Spread over the range, not a constant (1,000 draws: the odds of failing are nil).
        assert!(draws.iter().any(|j| *j < 2 * MS) && draws.iter().any(|j| *j > 8 * MS));
        assert_eq!(jitter(Duration::ZERO), Duration::ZERO);
        let _ = jitter(Duration::MAX);
    }
}
