//! The validated pair of timeouts every [`crate::connect`] setup is built from.

use std::time::Duration;

use crate::{Error, Result};

/// Connect and response timeouts; together they bound the time of every call made through a
/// [`crate::connect`] setup ([`call_bound`](Self::call_bound)).
///
/// ```
/// use std::time::Duration;
/// use redkit::connect::Timeouts;
///
/// let t = Timeouts::new(Duration::from_millis(500), Duration::from_millis(300))?;
/// assert_eq!(t.call_bound(), Duration::from_millis(800));
/// assert!(Timeouts::new(Duration::ZERO, Duration::from_millis(300)).is_err());
/// # Ok::<(), redkit::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    connect: Duration,
    response: Duration,
}

impl Timeouts {
    /// Default connect timeout (TCP connect + handshake): 1 s.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::connect::Timeouts;
    ///
    /// assert_eq!(Timeouts::default().connect(), Timeouts::DEFAULT_CONNECT);
    /// // The default connect timeout with a tighter response timeout.
    /// let t = Timeouts::new(Timeouts::DEFAULT_CONNECT, Duration::from_millis(200))?;
    /// assert_eq!(t.call_bound(), Duration::from_millis(1200));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub const DEFAULT_CONNECT: Duration = Duration::from_secs(1);
    /// Default response timeout (one request to its reply): 500 ms.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::connect::Timeouts;
    ///
    /// assert_eq!(Timeouts::default().response(), Timeouts::DEFAULT_RESPONSE);
    /// // A quick connect attempt, the default wait for a reply.
    /// let t = Timeouts::new(Duration::from_millis(300), Timeouts::DEFAULT_RESPONSE)?;
    /// assert_eq!(t.call_bound(), Duration::from_millis(800));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub const DEFAULT_RESPONSE: Duration = Duration::from_millis(500);
    /// Smallest accepted timeout: 1 ms.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::connect::Timeouts;
    ///
    /// assert!(Timeouts::new(Timeouts::MIN, Timeouts::MIN).is_ok());
    /// assert!(Timeouts::new(Duration::from_micros(999), Timeouts::MIN).is_err());
    /// ```
    pub const MIN: Duration = Duration::from_millis(1);
    /// Largest accepted timeout: 1 hour.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::connect::Timeouts;
    ///
    /// let t = Timeouts::new(Timeouts::MAX, Timeouts::MAX)?;
    /// assert_eq!(t.call_bound(), Duration::from_secs(2 * 3600));
    /// assert!(Timeouts::new(Timeouts::MIN, Timeouts::MAX + Duration::from_millis(1)).is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub const MAX: Duration = Duration::from_secs(3600);

    /// Both timeouts, each within [`MIN`](Self::MIN)`..=`[`MAX`](Self::MAX), else
    /// `Error::InvalidInput`.
    ///
    /// ```
    /// use std::time::Duration;
    /// let t = redkit::connect::Timeouts::new(Duration::from_secs(1), Duration::from_millis(250))?;
    /// assert_eq!(t.response(), Duration::from_millis(250));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn new(connect: Duration, response: Duration) -> Result<Self> {
        Ok(Self {
            connect: check("connect timeout", connect)?,
            response: check("response timeout", response)?,
        })
    }

    /// The connect timeout: one connection attempt (TCP + handshake).
    ///
    /// ```
    /// use redkit::connect::Timeouts;
    /// assert_eq!(Timeouts::default().connect(), Timeouts::DEFAULT_CONNECT);
    /// ```
    pub fn connect(&self) -> Duration {
        self.connect
    }

    /// The response timeout: one request until its reply.
    ///
    /// ```
    /// use redkit::connect::Timeouts;
    /// assert_eq!(Timeouts::default().response(), Timeouts::DEFAULT_RESPONSE);
    /// ```
    pub fn response(&self) -> Duration {
        self.response
    }

    /// The most one call can take through a [`crate::connect`] setup: connect + response
    /// timeout (a call may first wait for one connection attempt, then for its reply).
    ///
    /// ```
    /// use redkit::connect::Timeouts;
    /// assert_eq!(Timeouts::default().call_bound(), std::time::Duration::from_millis(1500));
    /// ```
    pub fn call_bound(&self) -> Duration {
        // Both are at most MAX (1 h): the sum cannot overflow; saturate anyway.
        self.connect.saturating_add(self.response)
    }
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: Self::DEFAULT_CONNECT,
            response: Self::DEFAULT_RESPONSE,
        }
    }
}

fn check(what: &'static str, d: Duration) -> Result<Duration> {
    if d < Timeouts::MIN || d > Timeouts::MAX {
        return Err(Error::InvalidInput {
            what,
            reason: format!("must be within 1 ms ..= 1 h, got {d:?}"),
        });
    }
    Ok(d)
}
