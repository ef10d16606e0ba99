//! [`ConcurrencyPolicy`]: what a [`ConcurrencyLimitLayer`](super::ConcurrencyLimitLayer) limits.

use crate::error::{Error, Result};
use crate::keys::{validate_prefix, Prefix};
use crate::lock::Semaphore;

/// What a [`ConcurrencyLimitLayer`](super::ConcurrencyLimitLayer) limits: a name (its slots are its own), the requests in
/// flight per client, and the key prefix. Valid once built, so the layer's `new` cannot fail.
///
/// Keys: `<prefix>:<name>:{<client>}` (a sorted set of holders) and `...:wake`, the prefix
/// [`DEFAULT_PREFIX`](Self::DEFAULT_PREFIX) unless [`with_prefix`](Self::with_prefix) chooses
/// another; a client key longer than 256 bytes is replaced by its SHA-1 (`h:<hex>`).
///
/// ```
/// use redkit::middleware::ConcurrencyPolicy;
/// let policy = ConcurrencyPolicy::new("reports", 4)?;
/// assert_eq!((policy.name(), policy.permits()), ("reports", 4));
/// assert_eq!(policy.prefix(), ConcurrencyPolicy::DEFAULT_PREFIX);
/// assert!(ConcurrencyPolicy::new("reports", 0).is_err());
/// assert!(ConcurrencyPolicy::new("a b", 1).is_err());
/// # Ok::<(), redkit::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct ConcurrencyPolicy {
    pub(super) name: String,
    prefix: String,
    permits: u32,
    pub(super) semaphore: Semaphore,
}

impl ConcurrencyPolicy {
    /// Prefix of every key unless [`with_prefix`](Self::with_prefix) chooses another.
    ///
    /// ```
    /// use redkit::middleware::ConcurrencyPolicy;
    /// let policy = ConcurrencyPolicy::new("uploads", 2)?;
    /// assert_eq!(policy.prefix(), ConcurrencyPolicy::DEFAULT_PREFIX);
    /// assert_eq!(policy.key("k:a")?, "redkit:cc:uploads:{k:a}");
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub const DEFAULT_PREFIX: &'static str = "redkit:cc";

    /// At most `permits` (1..=[`Semaphore::MAX_PERMITS`]) requests in flight per client,
    /// named `name` (1 to 64 bytes of `[A-Za-z0-9_:.-]`).
    /// Errors: [`Error::InvalidInput`] for either out of range.
    ///
    /// ```
    /// let policy = redkit::middleware::ConcurrencyPolicy::new("uploads", 2)?;
    /// # let _ = policy; Ok::<(), redkit::Error>(())
    /// ```
    pub fn new(name: &str, permits: u32) -> Result<Self> {
        if permits == 0 || permits > Semaphore::MAX_PERMITS {
            return Err(Error::invalid(
                "permits",
                format!("must be 1 to {}", Semaphore::MAX_PERMITS),
            ));
        }
        validate_prefix("name", name)?;
        Ok(Self::under(
            Prefix::new(Self::DEFAULT_PREFIX)?,
            name.to_owned(),
            permits,
        ))
    }

    /// The policy's keys under `prefix` instead of [`DEFAULT_PREFIX`](Self::DEFAULT_PREFIX)
    /// (a [`Prefix`], checked where it was made, so this cannot fail).
    /// `with_prefix(Prefix::new("rk:cc")?)` keeps the keys used before 0.2.
    ///
    /// ```
    /// use redkit::{keys::Prefix, middleware::ConcurrencyPolicy};
    /// let policy = ConcurrencyPolicy::new("uploads", 2)?.with_prefix(Prefix::new("app:cc")?);
    /// assert_eq!(policy.prefix(), "app:cc");
    /// assert_eq!(policy.key("k:a")?, "app:cc:uploads:{k:a}");
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn with_prefix(self, prefix: Prefix) -> Self {
        Self::under(prefix, self.name, self.permits)
    }

    fn under(prefix: Prefix, name: String, permits: u32) -> Self {
        let semaphore = Semaphore::new().with_prefix(prefix.join(&name));
        Self {
            name,
            prefix: prefix.into_string(),
            permits,
            semaphore,
        }
    }

    /// The name.
    ///
    /// ```
    /// assert_eq!(redkit::middleware::ConcurrencyPolicy::new("api", 1)?.name(), "api");
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Requests in flight allowed per client.
    ///
    /// ```
    /// assert_eq!(redkit::middleware::ConcurrencyPolicy::new("api", 3)?.permits(), 3);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// The key prefix.
    ///
    /// ```
    /// let p = redkit::middleware::ConcurrencyPolicy::new("api", 3)?;
    /// assert_eq!(p.prefix(), "redkit:cc");
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The Redis key holding the slots of the client `resource` (see
    /// [`ConcurrencyLimitLayer::resource`](super::ConcurrencyLimitLayer::resource)).
    ///
    /// ```
    /// let p = redkit::middleware::ConcurrencyPolicy::new("api", 3)?;
    /// assert_eq!(p.key("ip:10.0.0.1")?, "redkit:cc:api:{ip:10.0.0.1}");
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn key(&self, resource: &str) -> Result<String> {
        self.semaphore.key(resource)
    }
}
