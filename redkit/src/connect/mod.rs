//! Connection setups under which every call has a bounded time and nothing is re-sent behind
//! the caller's back.
//!
//! redis-rs's defaults are built for availability, not for a bound on one call:
//!
//! - `ConnectionManager` makes a call wait for its reconnection, which retries 6 times with
//!   exponential backoff (about 9.5 s with the server down, whatever the response timeout);
//! - `ClusterConnection` has no response timeout by default (a frozen node hangs a call forever),
//!   and re-sends a request up to 16 times after a response timeout or a dropped connection,
//!   although the first copy may already have run (a non-idempotent script then runs twice);
//!   and it keeps routing to a hung primary after the cluster promoted its replica.
//!
//! The constructors here configure redis-rs so that every call returns within
//! [`Timeouts::call_bound`] (connect timeout + response timeout), and no request that may have
//! reached a server is sent again by the connection:
//!
//! | constructor | returns | with the server down or frozen |
//! | --- | --- | --- |
//! | [`multiplexed`] | `MultiplexedConnection` | error within the response timeout; never reconnects |
//! | [`manager`] | `ConnectionManager` | error within connect + response timeout; one reconnect attempt per failed call, no command re-sent |
//! | [`cluster`] | [`Cluster`] | error within connect + response timeout; redirects (`MOVED`/`ASK`/`TRYAGAIN`/`CLUSTERDOWN`/`READONLY`, which mean "did not run") followed, timeouts and dropped connections never re-sent; a timeout rebuilds the slot map so a promoted replica is found |
//!
//! ```no_run
//! # async fn run() -> redkit::Result<()> {
//! use std::time::Duration;
//! use redkit::connect::{self, Timeouts};
//!
//! let timeouts = Timeouts::new(Duration::from_millis(500), Duration::from_millis(300))?;
//! let client = redis::Client::open("redis://127.0.0.1:6379/?protocol=resp3")?;
//! let mut conn = connect::manager(client, timeouts).await?; // each call <= 800 ms
//! let _: () = redis::cmd("PING").query_async(&mut conn).await?;
//! # Ok(()) }
//! ```
mod cluster;
mod coalesce;
mod scan;
pub(crate) mod slots;
mod timeouts;

pub use cluster::{cluster, cluster_builder, Cluster};
pub use coalesce::{Coalescing, CoalescingStats};
pub use scan::{KeyScan, KeyType, ScanKeys};
pub use timeouts::Timeouts;

use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::AsyncConnectionConfig;

use crate::error::refused_before_running;
use crate::Result;

/// The `AsyncConnectionConfig` of [`multiplexed`]: connect and response timeouts set.
///
/// ```
/// use redkit::connect::{self, Timeouts};
/// let config = connect::multiplexed_config(Timeouts::default());
/// # let _ = config;
/// ```
pub fn multiplexed_config(timeouts: Timeouts) -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeouts.connect()))
        .set_response_timeout(Some(timeouts.response()))
}

/// A `MultiplexedConnection` whose connection attempt is bounded by the connect timeout and
/// each call by the response timeout. It never reconnects: after the server went away every call
/// fails at once; open a new one (or use [`manager`]).
///
/// ```no_run
/// # async fn run() -> redkit::Result<()> {
/// use redkit::connect::{self, Timeouts};
/// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
/// let mut conn = connect::multiplexed(&client, Timeouts::default()).await?;
/// # let _ = &mut conn;
/// # Ok(()) }
/// ```
pub async fn multiplexed(
    client: &redis::Client,
    timeouts: Timeouts,
) -> Result<MultiplexedConnection> {
    Ok(client
        .get_multiplexed_async_connection_with_config(&multiplexed_config(timeouts))
        .await?)
}

/// The `ConnectionManagerConfig` of [`manager`]: connect and response timeouts set and **no
/// reconnection retries inside a call** (`number_of_retries(0)`): a call waits for at most one
/// connection attempt (bounded by the connect timeout), then for its reply (bounded by the
/// response timeout). A call that fails on a broken connection starts the next reconnection;
/// `ConnectionManager` never re-sends a command.
///
/// ```
/// use redkit::connect::{self, Timeouts};
/// let config = connect::manager_config(Timeouts::default());
/// assert_eq!(config.number_of_retries(), 0);
/// ```
pub fn manager_config(timeouts: Timeouts) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeouts.connect()))
        .set_response_timeout(Some(timeouts.response()))
        .set_number_of_retries(0)
}

/// A `ConnectionManager` configured with [`manager_config`]: every call returns within
/// [`Timeouts::call_bound`]; it reconnects by itself (add `?protocol=resp3` to the URL so it
/// notices a restart at once).
///
/// ```no_run
/// # async fn run() -> redkit::Result<()> {
/// use redkit::connect::{self, Timeouts};
/// let client = redis::Client::open("redis://127.0.0.1:6379/?protocol=resp3")?;
/// let conn = connect::manager(client, Timeouts::default()).await?;
/// # let _ = conn;
/// # Ok(()) }
/// ```
pub async fn manager(client: redis::Client, timeouts: Timeouts) -> Result<ConnectionManager> {
    Ok(ConnectionManager::new_with_config(client, manager_config(timeouts)).await?)
}

/// (feature `sentinel`) A `MultiplexedConnection` to the primary the sentinels currently name,
/// with [`multiplexed_config`]: asking the sentinels and connecting together take at most
/// [`Timeouts::call_bound`]. Call it again after an error to follow a failover (an old primary
/// that was demoted answers writes with `READONLY`, a dead one with a connection error).
///
/// ```no_run
/// # async fn run() -> redkit::Result<()> {
/// use redis::sentinel::{SentinelClient, SentinelServerType};
/// use redkit::connect::{self, Timeouts};
/// let mut sentinel = SentinelClient::build(
///     vec!["redis://127.0.0.1:26379/"],
///     "mymaster".to_owned(),
///     None,
///     SentinelServerType::Master,
/// )?;
/// let mut conn = connect::sentinel_primary(&mut sentinel, Timeouts::default()).await?;
/// # let _ = &mut conn;
/// # Ok(()) }
/// ```
#[cfg(feature = "sentinel")]
#[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
pub async fn sentinel_primary(
    sentinel: &mut redis::sentinel::SentinelClient,
    timeouts: Timeouts,
) -> Result<MultiplexedConnection> {
    let config = multiplexed_config(timeouts);
    match tokio::time::timeout(
        timeouts.call_bound(),
        sentinel.get_async_connection_with_config(&config),
    )
    .await
    {
        Ok(conn) => Ok(conn?),
        Err(_) => Err(crate::Error::Timeout(timeouts.call_bound())),
    }
}

/// `true` when a failed call **may have been applied** by Redis: a response timeout, a
/// connection lost while the request was in flight, a reply redkit could not decode (the
/// script ran), or an error redkit does not know. Retry such a call only if it is idempotent
/// (the same request id, reservation id or owner token), or check first.
///
/// `false` when the error proves the call changed nothing: rejected before sending (bad
/// input, key count, cross-slot), the connection could not be opened, or Redis refused it
/// before running it or before its first write (`MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`,
/// `MASTERDOWN`, `LOADING`, `READONLY`, `BUSY`, `NOSCRIPT`, `NOPERM`, `OOM`), or a redkit
/// script refused the data or permissions it found (`CorruptData`, `WrongType`,
/// `PermissionDenied`, `NotFound`: documented to write nothing). Such a call may be retried.
///
/// ```
/// use std::time::Duration;
/// use redkit::{connect, Error};
///
/// assert!(connect::may_have_applied(&Error::Timeout(Duration::from_millis(300))));
/// let refused = Error::InvalidInput { what: "ttl", reason: "zero".into() };
/// assert!(!connect::may_have_applied(&refused));
/// ```
pub fn may_have_applied(error: &crate::Error) -> bool {
    use crate::Error;
    match error {
        Error::Redis(e) => redis_may_have_applied(e),
        Error::InvalidInput { .. }
        | Error::KeyCount { .. }
        | Error::CrossSlot { .. }
        | Error::ShaMismatch { .. }
        | Error::CorruptData { .. }
        | Error::WrongType { .. }
        | Error::PermissionDenied { .. }
        | Error::NotFound { .. } => false,
        // Timeout, UnexpectedReply (the script ran), NoQuorum (some nodes may hold the key),
        // and anything added later: assume it may have been applied.
        _ => true,
    }
}

fn redis_may_have_applied(e: &redis::RedisError) -> bool {
    let refused_by_acl = e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm);
    !(e.is_connection_refusal()
        || refused_before_running(e)
        || refused_by_acl
        || matches!(e.code(), Some("OOM" | "NOPERM")))
}
