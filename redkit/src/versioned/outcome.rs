//! Outcomes of versioned-value operations: values, not errors.

use crate::lock::FencingToken;

/// A versioned value as read: its bytes (`None` when it does not exist) and its version
/// (0 when it does not exist; every successful compare-and-set adds one).
///
/// ```
/// let empty = redkit::versioned::Snapshot { value: None, version: 0 };
/// assert!(!empty.exists());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The stored value, `None` when the key does not exist.
    pub value: Option<Vec<u8>>,
    /// The stored version, 0 when the key does not exist.
    pub version: u64,
}

impl Snapshot {
    /// `true` when the value exists (version ≥ 1).
    ///
    /// ```
    /// let s = redkit::versioned::Snapshot { value: Some(b"7".to_vec()), version: 3 };
    /// assert!(s.exists());
    /// ```
    pub fn exists(&self) -> bool {
        self.version > 0
    }
}

/// Result of a compare-and-set.
///
/// ```no_run
/// # async fn run(v: redkit::versioned::Versioned, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
/// use redkit::versioned::Cas;
/// match v.compare_and_set(&mut conn, "config", 4, b"new").await? {
///     Cas::Set { version } => println!("now at version {version}"),
///     Cas::Conflict(current) => println!("someone wrote version {} first", current.version),
///     _ => {}
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cas {
    /// Written: the version was the expected one and is now one higher.
    Set {
        /// The new version.
        version: u64,
    },
    /// Not written: the version had changed. The current value and version, read in the same
    /// script, are returned so the caller can retry without another read.
    Conflict(Snapshot),
    /// Not written ([`compare_and_set_fenced`](super::Versioned::compare_and_set_fenced)
    /// only): a write with a newer fencing token came first.
    Stale {
        /// The fencing token stored with the current value.
        newer: FencingToken,
    },
}

impl Cas {
    /// `true` for [`Cas::Set`].
    ///
    /// ```
    /// assert!(redkit::versioned::Cas::Set { version: 1 }.is_set());
    /// ```
    pub fn is_set(&self) -> bool {
        matches!(self, Self::Set { .. })
    }
}

/// Result of a read-modify-write with retries ([`Versioned::update`](super::Versioned::update)).
///
/// ```no_run
/// # async fn run(v: redkit::versioned::Versioned, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
/// use redkit::versioned::{RetryPolicy, Update};
/// let outcome = v.update(&mut conn, "hits", &RetryPolicy::new(), |old| {
///     let n: u64 = old.and_then(|b| std::str::from_utf8(b).ok()?.parse().ok()).unwrap_or(0);
///     (n + 1).to_string().into_bytes()
/// }).await?;
/// if let Update::Updated { version, conflicts, .. } = outcome {
///     println!("version {version} after {conflicts} conflict(s)");
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Update {
    /// Written at the `attempts`-th compare-and-set.
    Updated {
        /// The new version.
        version: u64,
        /// Compare-and-set attempts made (conflicts + 1).
        attempts: u32,
        /// Attempts that found the version changed.
        conflicts: u32,
    },
    /// Every attempt the policy allowed found the version changed (or a newer fencing token).
    GaveUp {
        /// Compare-and-set attempts made (all conflicts).
        attempts: u32,
        /// The value and version the last attempt found.
        current: Snapshot,
    },
}
