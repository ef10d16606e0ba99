//! Optimistic concurrency, the "version column" on Redis: a value stored with a version,
//! read as `(value, version)`, written by compare-and-set only when the version is unchanged
//! (bumping it in the same script), with a bounded retry helper and a fenced variant that
//! also refuses writes older than a lock's [`FencingToken`].
//!
//! Key: `<prefix>:{<name>}`, a HASH `{value, version[, fence]}` (no TTL). The name is
//! escaped and bounded (see [`crate::keys`]); one key per value, so Cluster-safe.

mod outcome;
mod retry;

use std::sync::Arc;

use redis::aio::ConnectionLike;
use redis::Value;

use crate::error::{Error, Result};
use crate::keys;
use crate::lock::FencingToken;
use crate::script::{embedded, Call, Script, ScriptManager};

pub use outcome::{Cas, Snapshot, Update};
pub use retry::RetryPolicy;

/// Versioned values under one key prefix. Cheap to clone (an `Arc`); generic over any
/// [`ConnectionLike`] (one server or a Cluster).
///
/// ```no_run
/// # async fn run() -> redkit::Result<()> {
/// use redkit::versioned::{Cas, Versioned};
/// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
/// let mut conn = client.get_multiplexed_async_connection().await?;
/// let v = Versioned::new();
/// let seen = v.read(&mut conn, "profile:7").await?;
/// match v.compare_and_set(&mut conn, "profile:7", seen.version, b"{\"name\":\"Ada\"}").await? {
///     Cas::Set { version } => println!("written as version {version}"),
///     Cas::Conflict(now) => println!("lost the race to version {}", now.version),
///     _ => {}
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Versioned {
    inner: Arc<Inner>,
}

#[derive(Debug, Clone)]
struct Inner {
    prefix: String,
    manager: ScriptManager,
    read: &'static Script,
    cas: &'static Script,
}

impl Versioned {
    /// Prefix of every key unless another is chosen.
    ///
    /// ```
    /// use redkit::versioned::Versioned;
    /// assert_eq!(Versioned::new().key("settings")?, format!("{}:{{settings}}", Versioned::DEFAULT_PREFIX));
    /// assert_eq!(Versioned::new().key("settings")?, "redkit:ver:{settings}");
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub const DEFAULT_PREFIX: &'static str = "redkit:ver";
    /// Highest version (and fencing token) a value can carry: 2^53 − 1.
    ///
    /// A value at this version takes no more writes: an expected version this high is refused
    /// before anything is sent.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redkit::Result<()> {
    /// # let client = redis::Client::open("redis://127.0.0.1:1/")?;
    /// # let mut conn = redis::aio::ConnectionManager::new_lazy_with_config(client, redkit::connect::manager_config(Default::default()))?;
    /// use redkit::versioned::Versioned;
    /// let v = Versioned::new();
    /// assert_eq!(Versioned::MAX_VERSION, 9_007_199_254_740_991);
    /// // `conn`: any connection; nothing reaches Redis.
    /// let refused = v.compare_and_set(&mut conn, "seq", Versioned::MAX_VERSION, b"x").await;
    /// assert!(matches!(refused, Err(redkit::Error::InvalidInput { what: "expected", .. })));
    /// # Ok(()) }
    /// ```
    pub const MAX_VERSION: u64 = (1 << 53) - 1;
    /// Longest value accepted, in bytes (Redis's own limit: 512 MiB).
    ///
    /// A longer value is refused before anything is sent (not run here: it allocates 512 MiB):
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use redkit::versioned::Versioned;
    /// let v = Versioned::new();
    /// let too_long = vec![0u8; Versioned::MAX_VALUE_LEN + 1];
    /// let refused = v.compare_and_set(&mut conn, "blob", 0, &too_long).await;
    /// assert!(matches!(refused, Err(redkit::Error::InvalidInput { what: "value", .. })));
    /// # Ok(()) }
    /// ```
    pub const MAX_VALUE_LEN: usize = 512 * 1024 * 1024;

    /// Versioned values with keys under [`DEFAULT_PREFIX`](Self::DEFAULT_PREFIX) and its own
    /// [`ScriptManager`] (share one with [`with_manager`](Self::with_manager)).
    ///
    /// ```
    /// let x = redkit::versioned::Versioned::new();
    /// assert_eq!(x.key("a{b}")?, "redkit:ver:{a%7Bb%7D}");
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Inner {
                prefix: Self::DEFAULT_PREFIX.to_owned(),
                manager: ScriptManager::new(),
                read: embedded::VERSIONED_READ.script(),
                cas: embedded::VERSIONED_CAS.script(),
            }),
        }
    }

    /// Puts the keys under `prefix` (a [`Prefix`](crate::keys::Prefix), checked where it was
    /// made, so this cannot fail).
    ///
    /// ```
    /// use redkit::{keys::Prefix, versioned::Versioned};
    /// let values = Versioned::new().with_prefix(Prefix::new("app:x")?);
    /// assert_eq!(values.key("cfg")?, "app:x:{cfg}");
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn with_prefix(mut self, prefix: keys::Prefix) -> Self {
        Arc::make_mut(&mut self.inner).prefix = prefix.into_string();
        self
    }

    /// Runs every call through `manager` (e.g. one shared by the whole application).
    ///
    /// ```
    /// let x = redkit::versioned::Versioned::new().with_manager(redkit::ScriptManager::new());
    /// # let _ = x;
    /// ```
    pub fn with_manager(mut self, manager: ScriptManager) -> Self {
        Arc::make_mut(&mut self.inner).manager = manager;
        self
    }

    /// The key of the value `name`.
    ///
    /// ```
    /// let v = redkit::versioned::Versioned::new();
    /// assert!(v.key("").is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn key(&self, name: &str) -> Result<String> {
        keys::tagged_part(&self.inner.prefix, "name", name)
    }

    /// Reads `(value, version)` in one script. Fails with [`Error::WrongType`] when the key
    /// is not a hash and [`Error::CorruptData`] when its fields are not a versioned value.
    ///
    /// ```no_run
    /// # async fn run(v: redkit::versioned::Versioned, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// let snap = v.read(&mut conn, "settings").await?;
    /// println!("version {}: {:?}", snap.version, snap.value);
    /// # Ok(()) }
    /// ```
    pub async fn read<C: ConnectionLike>(&self, conn: &mut C, name: &str) -> Result<Snapshot> {
        let key = self.key(name)?;
        let mut call = Call::new(self.inner.read);
        call.key(&key);
        let reply: Value = self.inner.manager.invoke(conn, &call).await?;
        let script = self.inner.read;
        match items(script, &reply)? {
            [Value::Int(0)] => Ok(Snapshot {
                value: None,
                version: 0,
            }),
            [Value::Int(v), Value::BulkString(value)] => Ok(Snapshot {
                value: Some(value.clone()),
                version: version(script, *v)?,
            }),
            other => Err(Error::unexpected(script.id(), format!("reply {other:?}"))),
        }
    }

    /// Writes `value` only if the stored version is still `expected` (0: the value must not
    /// exist yet), bumping the version by one in the same script. On a conflict nothing is
    /// written and [`Cas::Conflict`] carries the current value and version.
    ///
    /// Fails with [`Error::InvalidInput`] (nothing sent) for a bad name, `expected` ≥
    /// [`MAX_VERSION`](Self::MAX_VERSION) or a value over
    /// [`MAX_VALUE_LEN`](Self::MAX_VALUE_LEN); with [`Error::WrongType`],
    /// [`Error::CorruptData`] or [`Error::PermissionDenied`] when the key holds something else
    /// or the ACL user may not run one of the script's commands (nothing written).
    ///
    /// ```no_run
    /// # async fn run(v: redkit::versioned::Versioned, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// // create once: expected version 0 means "must not exist"
    /// let created = v.compare_and_set(&mut conn, "seq", 0, b"1").await?;
    /// println!("{created:?}");
    /// # Ok(()) }
    /// ```
    pub async fn compare_and_set<C: ConnectionLike>(
        &self,
        conn: &mut C,
        name: &str,
        expected: u64,
        value: &[u8],
    ) -> Result<Cas> {
        self.cas(conn, name, expected, value, None).await
    }

    /// Like [`compare_and_set`](Self::compare_and_set), and also refused with [`Cas::Stale`]
    /// when the value was last written with a newer fencing token than `fence` (a lock holder
    /// that paused past its lease cannot overwrite a newer holder's write). The token is
    /// stored with the value. Tokens above [`MAX_VERSION`](Self::MAX_VERSION) are refused
    /// with [`Error::InvalidInput`] (lock tokens never get there).
    ///
    /// ```no_run
    /// # async fn run(v: redkit::versioned::Versioned, lock: redkit::lock::Lock, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use redkit::lock::{Acquire, LockOptions};
    /// let fenced = LockOptions::new().fencing(true);
    /// if let Acquire::Acquired(guard) = lock.acquire(&mut conn, "doc-9", &fenced).await? {
    ///     let seen = v.read(&mut conn, "doc-9").await?;
    ///     if let Some(token) = guard.fencing_token() {
    ///         v.compare_and_set_fenced(&mut conn, "doc-9", seen.version, b"edited", token).await?;
    ///     }
    ///     lock.release(&mut conn, guard).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn compare_and_set_fenced<C: ConnectionLike>(
        &self,
        conn: &mut C,
        name: &str,
        expected: u64,
        value: &[u8],
        fence: FencingToken,
    ) -> Result<Cas> {
        if fence.get() > Self::MAX_VERSION {
            return Err(Error::invalid("fence", "must be in 1..=2^53-1"));
        }
        self.cas(conn, name, expected, value, Some(fence)).await
    }

    async fn cas<C: ConnectionLike>(
        &self,
        conn: &mut C,
        name: &str,
        expected: u64,
        value: &[u8],
        fence: Option<FencingToken>,
    ) -> Result<Cas> {
        let key = self.key(name)?;
        if expected >= Self::MAX_VERSION {
            return Err(Error::invalid("expected", "must be below 2^53-1"));
        }
        if value.len() > Self::MAX_VALUE_LEN {
            return Err(Error::invalid("value", "must be at most 512 MiB"));
        }
        let script = self.inner.cas;
        let mut call = Call::new(script);
        call.key(&key).arg(expected).arg(value);
        match fence {
            Some(f) => call.arg(f.get()),
            None => call.arg(""),
        };
        let reply: Value = self.inner.manager.invoke(conn, &call).await?;
        match items(script, &reply)? {
            [Value::Int(1), Value::Int(v)] => Ok(Cas::Set {
                version: version(script, *v)?,
            }),
            [Value::Int(0), Value::Int(0)] => Ok(Cas::Conflict(Snapshot {
                value: None,
                version: 0,
            })),
            [Value::Int(0), Value::Int(v), Value::BulkString(value)] => {
                Ok(Cas::Conflict(Snapshot {
                    value: Some(value.clone()),
                    version: version(script, *v)?,
                }))
            }
            [Value::Int(2), Value::Int(f)] => Ok(Cas::Stale {
                newer: FencingToken::new(version(script, *f)?)
                    .ok_or_else(|| Error::unexpected(script.id(), "newer fence is 0"))?,
            }),
            other => Err(Error::unexpected(script.id(), format!("reply {other:?}"))),
        }
    }

    /// Read-modify-write with bounded retries: reads once, then for each attempt computes
    /// the new value with `f(current value)` and compare-and-sets it; a conflict hands the
    /// current value (returned by the failed attempt, no extra read) to the next attempt
    /// after a backoff. [`Update::GaveUp`] when every attempt the policy allows conflicted.
    /// `f` runs once per attempt, so it must be free of side effects.
    ///
    /// ```no_run
    /// # async fn run(v: redkit::versioned::Versioned, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use redkit::versioned::RetryPolicy;
    /// let outcome = v
    ///     .update(&mut conn, "tags", &RetryPolicy::new().attempts(5), |old| {
    ///         let mut tags = old.map(<[u8]>::to_vec).unwrap_or_default();
    ///         tags.extend_from_slice(b",new");
    ///         tags
    ///     })
    ///     .await?;
    /// println!("{outcome:?}");
    /// # Ok(()) }
    /// ```
    pub async fn update<C, F>(
        &self,
        conn: &mut C,
        name: &str,
        policy: &RetryPolicy,
        mut f: F,
    ) -> Result<Update>
    where
        C: ConnectionLike,
        F: FnMut(Option<&[u8]>) -> Vec<u8>,
    {
        policy.validate()?;
        self.key(name)?;
        let mut current = self.read(conn, name).await?;
        let mut attempts = 0u32;
        loop {
            let new = f(current.value.as_deref());
            attempts += 1;
            match self.cas(conn, name, current.version, &new, None).await? {
                Cas::Set { version } => {
                    return Ok(Update::Updated {
                        version,
                        attempts,
                        conflicts: attempts - 1,
                    })
                }
                Cas::Conflict(now) => current = now,
                Cas::Stale { .. } => current = self.read(conn, name).await?,
            }
            if attempts >= policy.max_attempts() {
                return Ok(Update::GaveUp { attempts, current });
            }
            tokio::time::sleep(policy.pause(attempts)).await;
        }
    }
}

fn items<'a>(script: &Script, reply: &'a Value) -> Result<&'a [Value]> {
    match reply {
        Value::Array(items) => Ok(items),
        other => Err(Error::unexpected(
            script.id(),
            format!("not an array: {other:?}"),
        )),
    }
}

fn version(script: &Script, v: i64) -> Result<u64> {
    u64::try_from(v)
        .ok()
        .filter(|&v| v <= Versioned::MAX_VERSION)
        .ok_or_else(|| Error::unexpected(script.id(), format!("version {v} out of range")))
}

impl Default for Versioned {
    /// [`Versioned::new`].
    fn default() -> Self {
        Self::new()
    }
}
