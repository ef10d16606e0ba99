//! The state of [`FailMode::Local`](crate::middleware::FailMode::Local): while Redis cannot answer, each
//! instance enforces its share of every policy's limit in process, with governor's keyed GCRA
//! limiter (the ecosystem's in-process limiter, as tower_governor uses it).

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota as GovernorQuota};

use crate::rate_limit::{Decision, LimitKey, Limiter, Quota};

/// How often (in checks) the keyed limiters drop the clients whose state is back to fresh:
/// memory stays bounded by the clients seen within about one window.
const SWEEP_EVERY: u64 = 4096;

/// Per policy (limiter name): a keyed in-process limiter of `limit / instances` per window.
#[derive(Debug)]
pub(crate) struct LocalLimits {
    instances: u32,
    by_policy: Mutex<HashMap<String, Arc<DefaultKeyedRateLimiter<String>>>>,
    checks: AtomicU64,
    clock: DefaultClock,
}

impl LocalLimits {
    /// Shares of `1 / instances` (at least 1).
    pub(crate) fn new(instances: u32) -> Self {
        Self {
            instances: instances.max(1),
            by_policy: Mutex::new(HashMap::new()),
            checks: AtomicU64::new(0),
            clock: DefaultClock::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<DefaultKeyedRateLimiter<String>>>> {
        // Plain data: a panic elsewhere cannot leave it inconsistent.
        self.by_policy.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// This instance's share of `limiter`'s limit: at least 1.
    pub(crate) fn share(&self, limiter: &Limiter) -> u32 {
        (limiter.limit() / self.instances).max(1)
    }

    /// The in-process decision for one request of `key` under `limiter`: its share as a
    /// bucket of `share` that refills over the limiter's window (so over any stretch `t`, at
    /// most `share + share x t / window` pass).
    pub(crate) fn check(&self, limiter: &Limiter, key: &LimitKey) -> Decision {
        let share = self.share(limiter);
        let keyed = {
            let mut by_policy = self.lock();
            let keyed = by_policy
                .entry(limiter.name().to_owned())
                .or_insert_with(|| {
                    let per_unit = limiter.window() / share;
                    let quota = GovernorQuota::with_period(per_unit.max(Duration::from_nanos(1)))
                        .unwrap_or_else(|| GovernorQuota::per_second(NonZeroU32::MIN))
                        .allow_burst(NonZeroU32::new(share).unwrap_or(NonZeroU32::MIN));
                    Arc::new(DefaultKeyedRateLimiter::keyed(quota))
                });
            Arc::clone(keyed)
        };
        if self.checks.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            keyed.retain_recent();
        }
        let quota = |left: u64| {
            Quota::new(
                share,
                u64::from(share).saturating_sub(left),
                limiter.window(),
            )
        };
        match keyed.check_key(&key.as_str().to_owned()) {
            Ok(()) => Decision::Allowed(quota(1)),
            Err(not_until) => Decision::Limited {
                quota: quota(0),
                retry_after: not_until
                    .wait_time_from(self.clock.now())
                    .max(Duration::from_millis(1)),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate_limit::{FixedWindow, Rate};

    #[test]
    fn each_instance_takes_its_share_then_waits_for_the_refill() {
        let limiter: Limiter = FixedWindow::new(
            "api",
            Rate::new(crate::nonzero!(100), Duration::from_secs(10)).unwrap(),
        )
        .unwrap()
        .into();
        let local = LocalLimits::new(4);
        assert_eq!(local.share(&limiter), 25);
        let key = LimitKey::text("client").unwrap();
        let allowed = (0..40)
            .filter(|_| local.check(&limiter, &key).is_allowed())
            .count();
        assert_eq!(allowed, 25, "a quarter of the limit at once");
        match local.check(&limiter, &key) {
            Decision::Limited { retry_after, .. } => {
                // One unit refills every 10 s / 25 = 400 ms.
                assert!(
                    retry_after <= Duration::from_millis(400)
                        && retry_after > Duration::from_millis(300),
                    "{retry_after:?}"
                );
            }
            other => panic!("{other:?}"),
        }
        let other = LimitKey::text("another").unwrap();
        assert!(local.check(&limiter, &other).is_allowed(), "per client");
        assert_eq!(LocalLimits::new(1000).share(&limiter), 1, "at least one");
    }
}
