//! [`QuotaLease`]: how much one lease call takes, and how many instances share the limit.

use crate::error::{Error, Result};

/// The settings of leased quota ([`FixedWindow::leased`](crate::rate_limit::Window::leased),
/// [`SlidingWindow::leased`](crate::rate_limit::SlidingWindow::leased),
/// [`Gcra::leased`](crate::rate_limit::Gcra::leased)):
/// at most `max_units` units taken by one lease call, and how many instances share the limit
/// (each takes at most a `1 / (2 x instances)` share of what is left, so a busy window is not
/// starved by units held idle elsewhere).
///
/// How a lease grows: the first check of a key in a window takes only what it needs (a key
/// checked once per window never leases more); each further lease call of the key in the same
/// window asks for twice the last, up to `max_units` and the share of what is left, down to
/// the cost near the limit. What it costs: units leased and not used die with their window, so
/// when demand exceeds the limit a window admits at least `limit - instances x max_units`
/// (never more than `limit`). For GCRA, read "window" as the bucket: a key's leases grow while
/// units held here have not all ended, and a lease of `k` units lasts `k` emission intervals
/// (each unit ends one interval after the one before: size `max_units` by that time);
/// `RateLimit` remaining comes from the lease's view (what is left
/// in Redis as last seen, plus the units this instance holds).
///
/// ```
/// use redkit::rate_limit::*;
/// use redkit::lock::*; // no name clashes: both modules glob-import together
/// let lease = QuotaLease::new(32)?.instances(4)?;
/// let _with_lock_lease: Option<Lease> = None; // redkit::lock::Lease
/// assert_eq!((lease.max_units(), lease.expected_instances()), (32, 4));
/// assert!(QuotaLease::new(1).is_err()); // a lease of one unit is a plain check
/// assert!(QuotaLease::new(32)?.instances(0).is_err());
/// # Ok::<(), redkit::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "LeaseSpec", into = "LeaseSpec")]
pub struct QuotaLease {
    max_units: u32,
    instances: u32,
}

/// [`QuotaLease`] as configuration: `{ max_units = 32, instances = 4 }` (`instances` 1 when left
/// out), checked by [`QuotaLease::new`] while parsing.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct LeaseSpec {
    max_units: u32,
    #[serde(default = "one")]
    instances: u32,
}

fn one() -> u32 {
    1
}

impl TryFrom<LeaseSpec> for QuotaLease {
    type Error = Error;

    fn try_from(spec: LeaseSpec) -> Result<Self> {
        QuotaLease::new(spec.max_units)?.instances(spec.instances)
    }
}

impl From<QuotaLease> for LeaseSpec {
    fn from(lease: QuotaLease) -> Self {
        Self {
            max_units: lease.max_units,
            instances: lease.instances,
        }
    }
}

impl QuotaLease {
    /// The largest `max_units`.
    ///
    /// ```
    /// use redkit::rate_limit::QuotaLease;
    /// let lease = QuotaLease::new(QuotaLease::MAX_UNITS)?;
    /// assert_eq!(lease.max_units(), 1 << 20);
    /// assert!(QuotaLease::new(QuotaLease::MAX_UNITS + 1).is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub const MAX_UNITS: u32 = 1 << 20;
    /// The most keys one limiter holds leases for at once (then further keys are checked
    /// without leasing until some of those windows end): bounded memory.
    ///
    /// ```
    /// use redkit::rate_limit::QuotaLease;
    /// // Per limiter and process: the 10,001st key checked in a window goes to Redis on
    /// // every check, as without a lease, until a leased key's window ends.
    /// assert_eq!(QuotaLease::MAX_KEYS, 10_000);
    /// ```
    pub const MAX_KEYS: usize = 10_000;

    /// At most `max_units` (2 to [`MAX_UNITS`](Self::MAX_UNITS)) units per lease call, for one
    /// instance.
    ///
    /// ```
    /// assert!(redkit::rate_limit::QuotaLease::new(64).is_ok());
    /// ```
    pub fn new(max_units: u32) -> Result<Self> {
        if !(2..=Self::MAX_UNITS).contains(&max_units) {
            return Err(Error::invalid(
                "lease",
                format!("max_units must be 2..={}", Self::MAX_UNITS),
            ));
        }
        Ok(Self {
            max_units,
            instances: 1,
        })
    }

    /// How many instances share the limit (1 to 10,000; 1 unless set).
    ///
    /// ```
    /// let lease = redkit::rate_limit::QuotaLease::new(64)?.instances(8)?;
    /// assert_eq!(lease.expected_instances(), 8);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn instances(mut self, instances: u32) -> Result<Self> {
        if !(1..=10_000).contains(&instances) {
            return Err(Error::invalid("lease", "instances must be 1..=10000"));
        }
        self.instances = instances;
        Ok(self)
    }

    /// The most units one lease call takes.
    ///
    /// ```
    /// assert_eq!(redkit::rate_limit::QuotaLease::new(64)?.max_units(), 64);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn max_units(&self) -> u32 {
        self.max_units
    }

    /// How many instances share the limit.
    ///
    /// ```
    /// assert_eq!(redkit::rate_limit::QuotaLease::new(64)?.expected_instances(), 1);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn expected_instances(&self) -> u32 {
        self.instances
    }

    /// The units to ask for: `cost` on a key's first lease call of a window, then twice the
    /// last ask, at least `demand` (the checks of this instance waiting for it now), at most
    /// `max_units` and a `1 / (2 x instances)` share of what was left (`left`), never below
    /// `cost`.
    pub(super) fn want(&self, cost: u32, last: Option<u32>, left: u64, demand: u32) -> u32 {
        let share = left / (2 * u64::from(self.instances));
        let share = u32::try_from(share).unwrap_or(u32::MAX);
        last.map_or(cost, |last| last.saturating_mul(2))
            .max(demand)
            .min(self.max_units)
            .min(share)
            .max(cost)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_grows_by_doubling_within_its_caps() {
        let lease = QuotaLease::new(64).unwrap().instances(2).unwrap();
        assert_eq!(
            lease.want(1, None, 1_000, 1),
            1,
            "first of a window: what it needs"
        );
        assert_eq!(lease.want(3, None, 1_000, 3), 3);
        assert_eq!(lease.want(1, Some(1), 1_000, 1), 2);
        assert_eq!(lease.want(1, Some(16), 1_000, 1), 32);
        assert_eq!(lease.want(1, Some(64), 1_000, 1), 64, "at most max_units");
        assert_eq!(
            lease.want(1, Some(64), 100, 1),
            25,
            "at most a quarter of 100 left (2 instances)"
        );
        assert_eq!(lease.want(1, Some(64), 3, 1), 1, "near the limit: the cost");
        assert_eq!(lease.want(5, Some(64), 3, 5), 5, "never below the cost");
        assert_eq!(lease.want(1, Some(u32::MAX), u64::MAX, 1), 64);
        assert_eq!(
            lease.want(1, Some(2), 1_000, 40),
            40,
            "what the waiting checks need"
        );
        assert_eq!(lease.want(1, None, 1_000, 40), 40);
        assert_eq!(lease.want(1, Some(2), 1_000, 500), 64, "at most max_units");
        assert_eq!(lease.want(1, Some(2), 60, 40), 15, "at most the share");
        // The share is 1 / (2 x instances) of what is left, for any number of instances.
        let alone = QuotaLease::new(64).unwrap();
        assert_eq!(
            alone.want(1, None, 100, 60),
            50,
            "half of 100 left (1 instance)"
        );
        let three = QuotaLease::new(64).unwrap().instances(3).unwrap();
        assert_eq!(
            three.want(1, None, 120, 60),
            20,
            "a sixth of 120 left (3 instances)"
        );
    }

    #[test]
    fn a_lease_reads_back_as_configured() {
        let lease = QuotaLease::new(32).unwrap();
        assert_eq!((lease.max_units(), lease.expected_instances()), (32, 1));
        let shared = QuotaLease::new(QuotaLease::MAX_UNITS)
            .unwrap()
            .instances(7)
            .unwrap();
        assert_eq!(
            (shared.max_units(), shared.expected_instances()),
            (QuotaLease::MAX_UNITS, 7)
        );
        // As configuration: `instances` is 1 when left out, and each field is checked.
        let read: QuotaLease = serde_json::from_str(r#"{"max_units": 32}"#).unwrap();
        assert_eq!(read, lease);
        let read: QuotaLease =
            serde_json::from_str(r#"{"max_units": 32, "instances": 4}"#).unwrap();
        assert_eq!(read, lease.instances(4).unwrap());
        assert_eq!(serde_json::to_value(read).unwrap()["instances"], 4);
        for bad in [
            r#"{"max_units": 1}"#,
            r#"{"max_units": 32, "instances": 0}"#,
            r#"{"max_units": 32, "shards": 2}"#,
        ] {
            assert!(serde_json::from_str::<QuotaLease>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn settings_are_bounded() {
        assert!(QuotaLease::new(0).is_err() && QuotaLease::new(1).is_err());
        assert!(
            QuotaLease::new(QuotaLease::MAX_UNITS).is_ok()
                && QuotaLease::new(QuotaLease::MAX_UNITS + 1).is_err()
        );
        let lease = QuotaLease::new(8).unwrap();
        assert!(lease.instances(0).is_err() && lease.instances(10_001).is_err());
        assert_eq!(
            lease.instances(10_000).unwrap().expected_instances(),
            10_000
        );
    }
}
