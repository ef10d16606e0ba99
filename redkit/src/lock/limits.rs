//! The bounds and defaults every lock kind's options share: one place to read them, without
//! naming a kind (`redkit::lock::limits::MAX_TTL`, not `LockOptions::<Lock>::MAX_TTL`).
//!
//! ```
//! use std::time::Duration;
//! use redkit::lock::{limits, LockOptions, Semaphore};
//! // a lease from configuration, kept within what an acquire accepts, for any kind
//! let configured = Duration::from_secs(90 * 24 * 3600);
//! let options = LockOptions::<Semaphore>::new().ttl(configured.min(limits::MAX_TTL));
//! assert_eq!(options, LockOptions::new().ttl(limits::MAX_TTL));
//! ```

use std::time::Duration;

/// Default lease length.
///
/// ```
/// use std::time::Duration;
/// use redkit::lock::{limits, Lock, LockOptions};
/// type Options = LockOptions<Lock>;
/// assert_eq!(limits::DEFAULT_TTL, Duration::from_secs(30));
/// assert_eq!(Options::new(), Options::new().ttl(limits::DEFAULT_TTL));
/// // a slow job: twice the default lease
/// let slow = Options::new().ttl(limits::DEFAULT_TTL * 2);
/// assert_ne!(slow, Options::new());
/// ```
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// Default number of retries after the first attempt (0: try once).
///
/// ```
/// use redkit::lock::{limits, Lock, LockOptions};
/// type Options = LockOptions<Lock>;
/// // by default a busy lock answers `Acquire::Busy` after one attempt
/// assert_eq!(limits::DEFAULT_RETRIES, 0);
/// assert_eq!(Options::new(), Options::new().retries(limits::DEFAULT_RETRIES));
/// ```
pub const DEFAULT_RETRIES: u32 = 0;

/// Default pause between attempts (before jitter).
///
/// ```
/// use std::time::Duration;
/// use redkit::lock::{limits, Lock, LockOptions};
/// type Options = LockOptions<Lock>;
/// assert_eq!(limits::DEFAULT_RETRY_DELAY, Duration::from_millis(50));
/// // wait about 2 s for the lock at the default pace (plus jitter)
/// let retries = (Duration::from_secs(2).as_millis() / limits::DEFAULT_RETRY_DELAY.as_millis()) as u32;
/// assert_eq!(retries, 40);
/// let options = Options::new().retries(retries);
/// # let _ = options;
/// ```
pub const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(50);

/// Default upper bound of the random delay added to each pause.
///
/// ```
/// use std::time::Duration;
/// use redkit::lock::{limits, Lock, LockOptions};
/// type Options = LockOptions<Lock>;
/// assert_eq!(limits::DEFAULT_JITTER, Duration::from_millis(50));
/// // many contenders on one hot lock: spread them out more than the default does
/// let spread = Options::new().retries(20).jitter(limits::DEFAULT_JITTER * 4);
/// assert_ne!(spread, Options::new().retries(20));
/// ```
pub const DEFAULT_JITTER: Duration = Duration::from_millis(50);

/// Longest lease accepted (30 days).
///
/// ```
/// use std::time::Duration;
/// use redkit::lock::{limits, Lock, LockOptions};
/// type Options = LockOptions<Lock>;
/// assert_eq!(limits::MAX_TTL, Duration::from_secs(30 * 24 * 3600));
/// // a lease from configuration, kept within what an acquire accepts
/// let configured = Duration::from_secs(90 * 24 * 3600);
/// let options = Options::new().ttl(configured.min(limits::MAX_TTL));
/// assert_eq!(options, Options::new().ttl(limits::MAX_TTL));
/// ```
pub const MAX_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// Fixed part of the default drift allowance (the variable part is 1 % of the ttl).
///
/// ```
/// use std::time::Duration;
/// use redkit::lock::{limits, Lock, LockOptions};
/// type Options = LockOptions<Lock>;
/// assert_eq!(limits::DRIFT_FLOOR, Duration::from_millis(2));
/// // a 1 s lease: 1 % of it (10 ms) plus the floor
/// let options = Options::new().ttl(Duration::from_secs(1));
/// assert_eq!(options.drift_allowance(), Duration::from_millis(10) + limits::DRIFT_FLOOR);
/// ```
pub const DRIFT_FLOOR: Duration = Duration::from_millis(2);

/// Shortest owner token accepted by [`LockOptions::token`](super::LockOptions::token), in bytes.
///
/// ```
/// use redkit::lock::{limits, Lock, LockOptions};
/// type Options = LockOptions<Lock>;
/// assert_eq!(limits::MIN_TOKEN_LEN, 16);
/// // a request id as owner token: long enough to be accepted at acquire
/// let token = format!("req-{}", "7f3a9c2e51d04b8a");
/// assert!((limits::MIN_TOKEN_LEN..=limits::MAX_TOKEN_LEN).contains(&token.len()));
/// let options = Options::new().token(token);
/// # let _ = options;
/// ```
pub const MIN_TOKEN_LEN: usize = 16;

/// Longest owner token accepted by [`LockOptions::token`](super::LockOptions::token), in bytes.
///
/// ```
/// use redkit::lock::{limits, Lock, LockOptions};
/// type Options = LockOptions<Lock>;
/// assert_eq!(limits::MAX_TOKEN_LEN, 128);
/// // too long to be a token (refused at acquire): use a shorter unique id instead
/// let caller_id = "tenant-42/".repeat(20);
/// assert!(caller_id.len() > limits::MAX_TOKEN_LEN);
/// ```
pub const MAX_TOKEN_LEN: usize = 128;
