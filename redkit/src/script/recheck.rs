//! [`RecheckInterval`]: how long what [`ScriptManager::capabilities`](super::ScriptManager::capabilities)
//! found stands, checked once where it is made.

use std::time::Duration;

use super::capabilities::REPROBE_AFTER;
use crate::error::{Error, Result};

/// How long what [`ScriptManager::capabilities`](super::ScriptManager::capabilities) found
/// stands before the next call that needs it probes again: any duration longer than zero
/// (used in whole milliseconds, at least 1 ms). Checked here, so
/// [`ScriptManager::with_capabilities_recheck`](super::ScriptManager::with_capabilities_recheck)
/// cannot fail.
///
/// ```
/// use std::time::Duration;
/// use redkit::script::RecheckInterval;
/// let every = RecheckInterval::new(Duration::from_secs(5))?;
/// let manager = redkit::ScriptManager::new().with_capabilities_recheck(every);
/// # let _ = manager;
/// assert!(RecheckInterval::new(Duration::ZERO).is_err());
/// # Ok::<(), redkit::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecheckInterval(Duration);

impl RecheckInterval {
    /// The interval of a manager that was given none (one minute).
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::script::RecheckInterval;
    /// assert_eq!(RecheckInterval::DEFAULT.get(), Duration::from_secs(60));
    /// assert_eq!(RecheckInterval::default(), RecheckInterval::DEFAULT);
    /// ```
    pub const DEFAULT: Self = Self(REPROBE_AFTER);

    /// `every` as a re-check interval. Fails with
    /// [`Error::InvalidInput`] (`what`: `"capabilities_recheck"`) for zero.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::script::RecheckInterval;
    /// assert!(RecheckInterval::new(Duration::from_millis(250)).is_ok());
    /// assert!(RecheckInterval::new(Duration::ZERO).is_err());
    /// ```
    pub fn new(every: Duration) -> Result<Self> {
        if every.is_zero() {
            return Err(Error::invalid(
                "capabilities_recheck",
                "must be longer than zero",
            ));
        }
        Ok(Self(every))
    }

    /// The interval.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::script::RecheckInterval;
    /// let every = RecheckInterval::new(Duration::from_secs(5))?;
    /// assert_eq!(every.get(), Duration::from_secs(5));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub const fn get(self) -> Duration {
        self.0
    }
}

impl Default for RecheckInterval {
    /// [`RecheckInterval::DEFAULT`].
    fn default() -> Self {
        Self::DEFAULT
    }
}
