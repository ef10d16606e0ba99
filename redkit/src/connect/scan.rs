//! [`ScanKeys`]: walking the keys that match a pattern on every primary, with `SCAN` (never
//! `KEYS`, never a scan inside a script), a cap on the keys visited, and "truncated" said.

use std::future::Future;
use std::num::NonZeroU32;

use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{FromRedisValue, Value};

use super::Cluster;
use crate::error::{Error, Result};

/// Keys per `SCAN` call: a hint to Redis (each call does about this much work).
const SCAN_COUNT: u32 = 256;

/// The keys a scan found ([`ScanKeys::scan_keys`]).
///
/// ```
/// # fn show(found: redkit::connect::KeyScan) {
/// for key in &found.keys { println!("{key}"); }
/// if found.truncated { println!("(stopped at the cap: there are more)"); }
/// # }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyScan {
    /// The keys found, at most the cap (a key may be missing if it was written during the
    /// scan, or appear once per node that held it while its slot migrated: `SCAN`'s own
    /// guarantees).
    pub keys: Vec<String>,
    /// Whether the scan stopped at the cap before visiting every key.
    pub truncated: bool,
}

/// The Redis type of the keys a scan keeps (`SCAN ... TYPE`): Redis skips the others itself.
///
/// ```
/// use redkit::connect::KeyType;
/// assert_eq!(KeyType::String.as_str(), "string");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyType {
    /// A string (counters, lock keys, GCRA TATs).
    String,
    /// A hash.
    Hash,
    /// A sorted set.
    SortedSet,
    /// A list.
    List,
}

impl KeyType {
    /// The name `SCAN ... TYPE` takes.
    ///
    /// ```
    /// assert_eq!(redkit::connect::KeyType::SortedSet.as_str(), "zset");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Self::String => "string",
            Self::Hash => "hash",
            Self::SortedSet => "zset",
            Self::List => "list",
        }
    }
}

/// A connection whose keys can be walked: one server, or every primary of a Redis Cluster.
/// Sealed; implemented for redis-rs's `MultiplexedConnection`, `ConnectionManager` and
/// `ClusterConnection`, and for redkit's [`Cluster`].
///
/// ```no_run
/// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
/// use redkit::connect::ScanKeys;
/// use redkit::connect::KeyType;
/// let found = conn
///     .scan_keys("redkit:lock:{*}", Some(KeyType::String), redkit::nonzero!(1000))
///     .await?;
/// println!("{} locks{}", found.keys.len(), if found.truncated { " (at least)" } else { "" });
/// # Ok(()) }
/// ```
pub trait ScanKeys: ConnectionLike + Send + sealed::Sealed {
    /// The keys matching the glob `pattern` (`SCAN MATCH`), of `key_type` when given
    /// (`SCAN ... TYPE`), on every primary, visiting at most `cap` matching keys in all (then
    /// [`KeyScan::truncated`]). Each `SCAN` call does
    /// bounded work, so Redis is never blocked; a Cluster's primaries are read from
    /// `CLUSTER SLOTS` and scanned one after the other.
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::cluster_async::ClusterConnection) -> redkit::Result<()> {
    /// use redkit::connect::ScanKeys;
    /// let found = conn.scan_keys("redkit:rl:api:{*}", None, redkit::nonzero!(10_000)).await?;
    /// assert!(found.keys.len() <= 10_000);
    /// # Ok(()) }
    /// ```
    fn scan_keys(
        &mut self,
        pattern: &str,
        key_type: Option<KeyType>,
        cap: NonZeroU32,
    ) -> impl Future<Output = Result<KeyScan>> + Send;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for redis::aio::MultiplexedConnection {}
    impl Sealed for redis::aio::ConnectionManager {}
    impl Sealed for redis::cluster_async::ClusterConnection {}
    impl Sealed for super::Cluster {}
}

/// `SCAN <cursor> MATCH <pattern> COUNT .. [TYPE <type>]`.
fn scan_cmd(cursor: u64, pattern: &str, key_type: Option<KeyType>) -> redis::Cmd {
    let mut cmd = redis::cmd("SCAN");
    cmd.arg(cursor)
        .arg("MATCH")
        .arg(pattern)
        .arg("COUNT")
        .arg(SCAN_COUNT);
    if let Some(t) = key_type {
        cmd.arg("TYPE").arg(t.as_str());
    }
    cmd
}

/// Takes one `SCAN` reply into `found` (up to `cap` keys): the cursor to go on from, or
/// `None` when this node is done or the cap is reached.
fn take_page(found: &mut KeyScan, cap: usize, reply: Value) -> Result<Option<u64>> {
    let (next, keys): (u64, Vec<String>) = FromRedisValue::from_redis_value(reply)
        .map_err(|e| Error::unexpected("SCAN", e.to_string()))?;
    for key in keys {
        if found.keys.len() == cap {
            found.truncated = true;
            return Ok(None);
        }
        found.keys.push(key);
    }
    Ok((next != 0).then_some(next))
}

/// One node's keys through a plain connection.
async fn scan_one<C: ConnectionLike + Send>(
    conn: &mut C,
    pattern: &str,
    key_type: Option<KeyType>,
    cap: NonZeroU32,
) -> Result<KeyScan> {
    let mut found = KeyScan::default();
    let cap = usize::try_from(cap.get()).unwrap_or(usize::MAX);
    let mut cursor = 0;
    loop {
        let reply = scan_cmd(cursor, pattern, key_type)
            .query_async(conn)
            .await?;
        match take_page(&mut found, cap, reply)? {
            Some(next) => cursor = next,
            None => return Ok(found),
        }
    }
}

/// Every primary's keys through a cluster connection: `CLUSTER SLOTS`, then `SCAN` routed to
/// each primary by its address.
async fn scan_cluster(
    conn: &mut ClusterConnection,
    pattern: &str,
    key_type: Option<KeyType>,
    cap: NonZeroU32,
) -> Result<KeyScan> {
    let slots: Vec<Vec<Value>> = redis::cmd("CLUSTER").arg("SLOTS").query_async(conn).await?;
    let mut primaries: Vec<(String, u16)> = Vec::new();
    for range in slots {
        let Some(Value::Array(node)) = range.get(2) else {
            return Err(Error::unexpected(
                "CLUSTER SLOTS",
                "a range without a primary",
            ));
        };
        let (Some(host), Some(Value::Int(port))) = (node.first(), node.get(1)) else {
            return Err(Error::unexpected(
                "CLUSTER SLOTS",
                "a primary without host and port",
            ));
        };
        let host = String::from_redis_value(host.clone())
            .map_err(|_| Error::unexpected("CLUSTER SLOTS", "a host that is not text"))?;
        let port = u16::try_from(*port)
            .map_err(|_| Error::unexpected("CLUSTER SLOTS", "a port out of range"))?;
        if !primaries.contains(&(host.clone(), port)) {
            primaries.push((host, port));
        }
    }
    let mut found = KeyScan::default();
    let cap = usize::try_from(cap.get()).unwrap_or(usize::MAX);
    for (host, port) in primaries {
        let mut cursor = 0;
        loop {
            let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                host: host.clone(),
                port,
            });
            let reply = conn
                .route_command(scan_cmd(cursor, pattern, key_type), routing)
                .await?;
            match take_page(&mut found, cap, reply)? {
                Some(next) => cursor = next,
                None => break,
            }
        }
        if found.truncated {
            break;
        }
    }
    Ok(found)
}

/// `ScanKeys` for a connection type, scanning with `$scan` (one server, or every master).
macro_rules! scan_keys_with {
    ($($conn:ty => $scan:ident),+ $(,)?) => {$(
        impl ScanKeys for $conn {
            fn scan_keys(
                &mut self,
                pattern: &str,
                key_type: Option<KeyType>,
                cap: NonZeroU32,
            ) -> impl Future<Output = Result<KeyScan>> + Send {
                $scan(self, pattern, key_type, cap)
            }
        }
    )+};
}

scan_keys_with! {
    MultiplexedConnection => scan_one,
    ConnectionManager => scan_one,
    ClusterConnection => scan_cluster,
}

impl ScanKeys for Cluster {
    fn scan_keys(
        &mut self,
        pattern: &str,
        key_type: Option<KeyType>,
        cap: NonZeroU32,
    ) -> impl Future<Output = Result<KeyScan>> + Send {
        let mut conn = self.connection();
        let pattern = pattern.to_owned();
        async move { scan_cluster(&mut conn, &pattern, key_type, cap).await }
    }
}
