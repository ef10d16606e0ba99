//! [`WaiterLease`]: how long a [`FairLock`](super::FairLock) waiter that stopped renewing
//! keeps its place, checked once where it is made.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::lock::limits;

/// How long a waiter of a [`FairLock`](super::FairLock) that stopped renewing (crashed, cut
/// off) keeps its place in the queue: [`MIN`](Self::MIN) (30 ms) to [`MAX`](Self::MAX)
/// (30 days, the longest lease), sent in whole milliseconds. A blocked acquire renews it about
/// every third of it, so shorter means faster skipping of dead waiters and more calls.
/// Checked here, so [`FairLock::with_waiter_lease`](super::FairLock::with_waiter_lease)
/// cannot fail.
///
/// ```
/// use std::time::Duration;
/// use redkit::lock::{FairLock, WaiterLease};
/// let lease = WaiterLease::new(Duration::from_millis(500))?;
/// assert_eq!(lease.get(), Duration::from_millis(500));
/// let fair = FairLock::new().with_waiter_lease(lease);
/// # let _ = fair;
/// assert!(WaiterLease::new(Duration::from_millis(5)).is_err());
/// # Ok::<(), redkit::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WaiterLease(Duration);

impl WaiterLease {
    /// The shortest waiter lease (30 ms).
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::lock::WaiterLease;
    /// assert_eq!(WaiterLease::MIN.get(), Duration::from_millis(30));
    /// assert!(WaiterLease::new(Duration::from_millis(29)).is_err());
    /// ```
    pub const MIN: Self = Self(Duration::from_millis(30));

    /// The longest waiter lease: [`limits::MAX_TTL`] (30 days).
    ///
    /// ```
    /// use redkit::lock::{limits, WaiterLease};
    /// assert_eq!(WaiterLease::MAX.get(), limits::MAX_TTL);
    /// // a lease from configuration, kept within what is accepted
    /// let configured = limits::MAX_TTL * 2;
    /// let lease = WaiterLease::new(configured.clamp(WaiterLease::MIN.get(), WaiterLease::MAX.get()))?;
    /// assert_eq!(lease, WaiterLease::MAX);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub const MAX: Self = Self(limits::MAX_TTL);

    /// The default waiter lease (2 s, [`FairLock::DEFAULT_WAITER_LEASE`](super::FairLock::DEFAULT_WAITER_LEASE)).
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::lock::WaiterLease;
    /// assert_eq!(WaiterLease::DEFAULT.get(), Duration::from_secs(2));
    /// assert_eq!(WaiterLease::default(), WaiterLease::DEFAULT);
    /// ```
    pub const DEFAULT: Self = Self(Duration::from_secs(2));

    /// `lease` as a waiter lease. Fails with [`Error::InvalidInput`] (`what`:
    /// `"waiter_lease"`) outside [`MIN`](Self::MIN) to [`MAX`](Self::MAX).
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::lock::WaiterLease;
    /// assert!(WaiterLease::new(Duration::from_secs(1)).is_ok());
    /// assert!(WaiterLease::new(Duration::ZERO).is_err());
    /// assert!(WaiterLease::new(Duration::from_secs(31 * 24 * 3600)).is_err());
    /// ```
    pub fn new(lease: Duration) -> Result<Self> {
        if lease < Self::MIN.0 || lease > Self::MAX.0 {
            return Err(Error::invalid("waiter_lease", "must be 30 ms to 30 days"));
        }
        Ok(Self(lease))
    }

    /// The lease length.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::lock::WaiterLease;
    /// assert_eq!(WaiterLease::new(Duration::from_secs(1))?.get(), Duration::from_secs(1));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub const fn get(self) -> Duration {
        self.0
    }
}

impl Default for WaiterLease {
    /// [`WaiterLease::DEFAULT`].
    fn default() -> Self {
        Self::DEFAULT
    }
}
