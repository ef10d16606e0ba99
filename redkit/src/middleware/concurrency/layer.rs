//! [`ConcurrencyLimitLayer`] and its builder, and the state their services share.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;

use crate::error::{Error, Result};
use crate::keys::MAX_PART_LEN;
use crate::lock::{LockOptions, Semaphore};
use crate::middleware::common::{common_setters, read, Common, FailMode};
use crate::middleware::key::{KeyExtractor, PeerIp};
use crate::middleware::metrics::PolicyMetrics;
use crate::middleware::respond::{DefaultResponses, RespondWith};
use crate::rate_limit::{LimitKey, QuotaLease};

use super::blocks::Blocks;
use super::fallback::LocalSlots;
use super::policy::ConcurrencyPolicy;
use super::{ConcurrencyStats, Stats};

pub(super) struct Shared<C, K, H> {
    pub(super) policy: ConcurrencyPolicy,
    /// The policy's metric keys, built with the layer.
    pub(super) metrics: PolicyMetrics,
    pub(super) options: LockOptions<Semaphore>,
    pub(super) common: Common<C, K, H>,
    pub(super) full_status: StatusCode,
    pub(super) stats: Stats,
    /// This instance's blocks of slots, when leased.
    pub(super) blocks: Option<Arc<Blocks>>,
    /// The slots admitted in process under [`FailMode::Local`].
    pub(super) local: Option<Arc<LocalSlots>>,
}

/// Tower layer allowing at most `permits` requests in flight per client, counted in Redis so
/// that every instance of a service shares the limit.
///
/// Per request: the [`KeyExtractor`] finds the client (as in
/// [`RateLimitLayer`](crate::middleware::RateLimitLayer)), then one [`Semaphore`] permit of the client's
/// resource is taken (one round trip, bounded by the timeout) with a lease (default 30 s).
/// - a permit: a watchdog renews its lease about every lease/3 while the inner service runs;
///   the permit is given back when the response future completes (before the response is
///   returned) or is dropped (a cancelled request: the release is sent from a spawned task);
/// - every permit held: [`DEFAULT_FULL_STATUS`](Self::DEFAULT_FULL_STATUS) (429, or the
///   builder's `full_status`, e.g. 503) with `Retry-After` = when the earliest lease ends
///   (whole seconds, rounded up, at least 1); the inner service does not run;
/// - Redis failed or timed out: [`FailMode`](crate::middleware::FailMode) (as `RateLimitLayer`: open lets the request
///   through without a permit, closed answers 503 with `Retry-After: 1`, local admits this
///   instance's share of the client's slots, `permits / instances` (at least 1), counted in
///   process until the request finishes, and answers the full status past it with
///   `Retry-After: 1`; every request still asks Redis first). Under a lease, the slots of a
///   block this instance holds keep admitting until the block's lease ends, beside the share.
///
/// **Leased slots** ([`ConcurrencyLimitBuilder::leased`], off unless set): each instance holds
/// a block of every busy client's slots and admits and releases in process, calling Redis
/// only to grow, shrink, renew or give back a block; the limit across instances holds the
/// same ([`shutdown`](Self::shutdown) gives the blocks back).
///
/// **A crashed instance's slots come back** when their lease ends (nothing renews them any
/// more), never later: choose the lease as the longest a crashed slot may stay taken; it does
/// not bound how long a request may run (the watchdog extends it). An acquire cut by the
/// timeout after Redis ran it also holds its slot until the lease ends.
///
/// The limit covers the inner service's future, not the streaming of a response body after
/// it. Keys: see [`ConcurrencyPolicy`]. The responses the layer writes itself (full, fail
/// closed, unknown client) can be reshaped with
/// [`respond_with`](ConcurrencyLimitBuilder::respond_with), as for `RateLimitLayer`.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use std::net::SocketAddr;
/// use axum::{routing::get, Router};
/// use redkit::middleware::{ConcurrencyLimitLayer, ConcurrencyPolicy};
///
/// let client = redis::Client::open("redis://127.0.0.1:6379/?protocol=resp3")?;
/// let conn = redis::aio::ConnectionManager::new(client).await?;
/// // At most 4 requests per client at once, over all instances.
/// let layer = ConcurrencyLimitLayer::new(ConcurrencyPolicy::new("reports", 4)?, conn);
/// let app: Router = Router::new().route("/report", get(|| async { "done" })).layer(layer);
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
/// axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
/// # Ok(()) }
/// ```
pub struct ConcurrencyLimitLayer<C, K = PeerIp, H = DefaultResponses> {
    pub(super) shared: Arc<Shared<C, K, H>>,
}

impl<C> ConcurrencyLimitLayer<C, PeerIp, DefaultResponses> {
    /// A layer enforcing `policy` with default settings (see [`builder`](Self::builder)).
    ///
    /// ```no_run
    /// # async fn run(conn: redis::aio::ConnectionManager) -> redkit::Result<()> {
    /// use redkit::middleware::{ConcurrencyLimitLayer, ConcurrencyPolicy};
    /// let layer = ConcurrencyLimitLayer::new(ConcurrencyPolicy::new("uploads", 2)?, conn);
    /// # Ok(()) }
    /// ```
    pub fn new(policy: ConcurrencyPolicy, conn: C) -> Self {
        Self::builder(policy, conn).into_layer(
            LockOptions::new()
                .ttl(ConcurrencyLimitBuilder::<C, PeerIp>::DEFAULT_LEASE)
                .retries(0),
        )
    }

    /// A builder: socket peer as key, 30 s lease, 429 when full, fail open, 250 ms timeout,
    /// IPv6 grouped by /64, unknown clients share a slot pool.
    ///
    /// ```no_run
    /// # async fn run(conn: redis::aio::ConnectionManager) -> redkit::Result<()> {
    /// use std::time::Duration;
    /// use redkit::middleware::{ConcurrencyLimitLayer, ConcurrencyPolicy, FailMode, TrustedProxies};
    /// let layer = ConcurrencyLimitLayer::builder(ConcurrencyPolicy::new("exports", 2)?, conn)
    ///     .key_extractor(TrustedProxies::hops(1))
    ///     .lease(Duration::from_secs(10))
    ///     .full_status(http::StatusCode::SERVICE_UNAVAILABLE)
    ///     .fail_mode(FailMode::Closed)
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn builder(policy: ConcurrencyPolicy, conn: C) -> ConcurrencyLimitBuilder<C, PeerIp> {
        ConcurrencyLimitBuilder {
            policy,
            common: Common::new(conn, ConcurrencyLimitBuilder::<C, PeerIp>::DEFAULT_TIMEOUT),
            lease: ConcurrencyLimitBuilder::<C, PeerIp>::DEFAULT_LEASE,
            full_status: ConcurrencyLimitLayer::<C>::DEFAULT_FULL_STATUS,
            leased: None,
        }
    }
}

impl<C, K, H> ConcurrencyLimitLayer<C, K, H> {
    /// Status when every permit of the client is held (unless the builder says otherwise).
    ///
    /// ```
    /// use http::StatusCode;
    /// use redis::aio::ConnectionManager;
    /// use redkit::middleware::ConcurrencyLimitLayer;
    ///
    /// // 429, with `Retry-After`, unless the builder's `full_status` chose another status.
    /// assert_eq!(
    ///     ConcurrencyLimitLayer::<ConnectionManager>::DEFAULT_FULL_STATUS,
    ///     StatusCode::TOO_MANY_REQUESTS
    /// );
    /// ```
    pub const DEFAULT_FULL_STATUS: StatusCode = StatusCode::TOO_MANY_REQUESTS;

    pub(super) fn shared(&self) -> &Arc<Shared<C, K, H>> {
        &self.shared
    }

    /// A snapshot of the counters.
    ///
    /// ```
    /// # fn show<C, K>(layer: &redkit::middleware::ConcurrencyLimitLayer<C, K>) {
    /// assert!(layer.stats().finished <= layer.stats().admitted);
    /// # }
    /// ```
    pub fn stats(&self) -> ConcurrencyStats {
        let s = &self.shared.stats;
        ConcurrencyStats {
            admitted: read(&s.admitted),
            finished: read(&s.finished),
            rejected: read(&s.rejected),
            redis_failures: read(&s.common.redis_failures),
            failed_open: read(&s.common.failed_open),
            failed_closed: read(&s.common.failed_closed),
            unknown_clients: read(&s.common.unknown_clients),
            fallback_allowed: read(&s.fallback_allowed),
            fallback_limited: read(&s.fallback_limited),
        }
    }

    /// Gives back every leased block (see [`ConcurrencyLimitBuilder::leased`]): leasing stops
    /// (later requests take plain permits), each block's unused slots go back at once and
    /// its other slots as their requests finish. Returns when every block is back in Redis's
    /// free count: call it after the server stopped taking requests (for example after
    /// axum's graceful shutdown), bounded by a timeout of your choice. Without a lease it
    /// returns at once. A block a failed call could not give back ends with its lease.
    ///
    /// ```no_run
    /// # async fn run(layer: redkit::middleware::ConcurrencyLimitLayer<redis::aio::ConnectionManager>) {
    /// use std::time::Duration;
    /// // ... axum::serve(..).with_graceful_shutdown(..).await ...
    /// let _ = tokio::time::timeout(Duration::from_secs(5), layer.shutdown()).await;
    /// # }
    /// ```
    pub async fn shutdown(&self)
    where
        C: redis::aio::ConnectionLike + Clone,
    {
        if let Some(blocks) = &self.shared.blocks {
            let mut conn = self.shared.common.conn.clone();
            blocks.close(&self.shared.policy.semaphore, &mut conn).await;
        }
    }

    /// The semaphore holding the slots (for inspection and operations).
    ///
    /// ```no_run
    /// # fn show<C, K>(layer: &redkit::middleware::ConcurrencyLimitLayer<C, K>) -> redkit::Result<()> {
    /// let sem = layer.semaphore();
    /// # let _ = sem; Ok(()) }
    /// ```
    pub fn semaphore(&self) -> &Semaphore {
        &self.shared.policy.semaphore
    }

    /// The policy: name, permits per client and key prefix.
    ///
    /// ```no_run
    /// # fn show<C, K>(layer: &redkit::middleware::ConcurrencyLimitLayer<C, K>) {
    /// println!("{} in flight per client", layer.policy().permits());
    /// # }
    /// ```
    pub fn policy(&self) -> &ConcurrencyPolicy {
        &self.shared.policy
    }

    /// The semaphore resource of `key` (what [`semaphore`](Self::semaphore) calls take).
    ///
    /// ```no_run
    /// # fn show<C, K>(layer: &redkit::middleware::ConcurrencyLimitLayer<C, K>) -> redkit::Result<()> {
    /// use redkit::rate_limit::LimitKey;
    /// let resource = layer.resource(&LimitKey::ip([10, 0, 0, 1].into()));
    /// println!("{}", layer.semaphore().key(&resource)?);
    /// # Ok(()) }
    /// ```
    pub fn resource(&self, key: &LimitKey) -> String {
        resource_of(key)
    }

    /// The layer's name.
    ///
    /// ```no_run
    /// # fn show<C, K>(layer: &redkit::middleware::ConcurrencyLimitLayer<C, K>) { println!("{}", layer.name()); }
    /// ```
    pub fn name(&self) -> &str {
        &self.shared.policy.name
    }
}

/// The client key as a semaphore resource: as is, or its SHA-1 when too long for a key part.
pub(super) fn resource_of(key: &LimitKey) -> String {
    let text = key.as_str();
    if text.len() <= MAX_PART_LEN {
        text.to_owned()
    } else {
        format!("h:{}", sha1_smol::Sha1::from(text).digest())
    }
}

impl<C, K, H> Clone for ConcurrencyLimitLayer<C, K, H> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<C, K: fmt::Debug, H> fmt::Debug for ConcurrencyLimitLayer<C, K, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.shared;
        f.debug_struct("ConcurrencyLimitLayer")
            .field("policy", &s.policy)
            .field("extractor", &s.common.extractor)
            .field("fail_mode", &s.common.fail_mode)
            .field("timeout", &s.common.timeout)
            .field("full_status", &s.full_status)
            .field("leased", &s.blocks.as_ref().map(|b| b.lease()))
            .finish_non_exhaustive()
    }
}

/// Builder of a [`ConcurrencyLimitLayer`]: by-value setters, validated by [`build`](Self::build).
///
/// ```no_run
/// # async fn run(conn: redis::aio::ConnectionManager) -> redkit::Result<()> {
/// use redkit::middleware::{ConcurrencyLimitLayer, ConcurrencyPolicy, UnknownClient};
/// let layer = ConcurrencyLimitLayer::builder(ConcurrencyPolicy::new("api", 8)?, conn)
///     .ipv6_prefix(56)
///     .unknown_client(UnknownClient::Reject)
///     .build()?;
/// # Ok(()) }
/// ```
pub struct ConcurrencyLimitBuilder<C, K, H = DefaultResponses> {
    policy: ConcurrencyPolicy,
    common: Common<C, K, H>,
    lease: Duration,
    full_status: StatusCode,
    leased: Option<QuotaLease>,
}

impl<C, K, H> ConcurrencyLimitBuilder<C, K, H> {
    /// Default lease of a slot: how long a crashed instance's slot stays taken.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redkit::Result<()> {
    /// # let client = redis::Client::open("redis://127.0.0.1:1/")?;
    /// # let conn = redis::aio::ConnectionManager::new_lazy_with_config(client, redkit::connect::manager_config(Default::default()))?;
    /// use std::time::Duration;
    /// use redis::aio::ConnectionManager;
    /// use redkit::middleware::{ConcurrencyLimitBuilder, ConcurrencyLimitLayer, ConcurrencyPolicy, PeerIp};
    ///
    /// type Builder = ConcurrencyLimitBuilder<ConnectionManager, PeerIp>;
    /// assert_eq!(Builder::DEFAULT_LEASE, Duration::from_secs(30));
    /// // Slots of a crashed instance come back after 10 s instead.
    /// let layer = ConcurrencyLimitLayer::builder(ConcurrencyPolicy::new("uploads", 2)?, conn)
    ///     .lease(Builder::DEFAULT_LEASE / 3)
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
    /// Longest wait for Redis per acquire before the [`FailMode`](crate::middleware::FailMode) applies.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redkit::Result<()> {
    /// # let client = redis::Client::open("redis://127.0.0.1:1/")?;
    /// # let conn = redis::aio::ConnectionManager::new_lazy_with_config(client, redkit::connect::manager_config(Default::default()))?;
    /// use std::time::Duration;
    /// use redis::aio::ConnectionManager;
    /// use redkit::middleware::{ConcurrencyLimitBuilder, ConcurrencyLimitLayer, ConcurrencyPolicy, PeerIp};
    ///
    /// type Builder = ConcurrencyLimitBuilder<ConnectionManager, PeerIp>;
    /// assert_eq!(Builder::DEFAULT_TIMEOUT, Duration::from_millis(250));
    /// // Give up on Redis after 50 ms instead (then the fail mode decides).
    /// let layer = ConcurrencyLimitLayer::builder(ConcurrencyPolicy::new("api", 8)?, conn)
    ///     .timeout(Builder::DEFAULT_TIMEOUT / 5)
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(250);

    /// How to find the client (default [`PeerIp`]).
    ///
    /// ```no_run
    /// # async fn run(conn: redis::aio::ConnectionManager) -> redkit::Result<()> {
    /// use redkit::middleware::{ConcurrencyLimitLayer, ConcurrencyPolicy, TrustedProxies};
    /// let b = ConcurrencyLimitLayer::builder(ConcurrencyPolicy::new("api", 8)?, conn)
    ///     .key_extractor(TrustedProxies::hops(1));
    /// # Ok(()) }
    /// ```
    pub fn key_extractor<K2: KeyExtractor>(
        self,
        extractor: K2,
    ) -> ConcurrencyLimitBuilder<C, K2, H> {
        ConcurrencyLimitBuilder {
            policy: self.policy,
            common: self.common.key_extractor(extractor),
            lease: self.lease,
            full_status: self.full_status,
            leased: self.leased,
        }
    }

    /// Lease of each slot (default [`DEFAULT_LEASE`](Self::DEFAULT_LEASE); whole milliseconds,
    /// at most [`limits::MAX_TTL`](crate::lock::limits::MAX_TTL)). Renewed while the request runs.
    ///
    /// ```no_run
    /// # async fn run(b: redkit::middleware::ConcurrencyLimitBuilder<redis::aio::ConnectionManager, redkit::middleware::PeerIp>) {
    /// let b = b.lease(std::time::Duration::from_secs(5));
    /// # }
    /// ```
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Leases the slots in blocks (off unless set): each instance holds a block of every busy
    /// client's slots in Redis and admits and releases that client's requests in process, so
    /// a request costs no Redis call while its instance's block has a slot. Redis is called
    /// to grow a block (twice its size, at most `max_units` more per call and a
    /// `1 / (2 x instances)` share of the free slots, at least what the waiting requests
    /// need), to renew it (every lease/3), and to give back slots no request used for
    /// [`IDLE_RETURN`](Self::IDLE_RETURN) (a whole idle block then leaves Redis and memory).
    /// While some instance's block is refused slots, every instance keeps its block to
    /// `ceil(permits / instances)` (set `instances` to their number), so busy instances share
    /// the limit.
    ///
    /// What holds: the slots of every instance's blocks and plain permits together never pass
    /// the policy's `permits`, and an instance admits a request only inside its block while
    /// the block's lease holds by its own clock, so **the requests in flight never pass the
    /// limit** (as without leasing, a request that outlives a lease its instance could not
    /// renew may overlap the slot's next holder). What it costs: a client refused on one
    /// instance while another holds unused slots waits for those to be given back, at most
    /// twice `IDLE_RETURN` plus one tick (half of it) after they were last used; a crashed
    /// instance's blocks come back when their lease ends, as plain slots do. Blocks are kept
    /// for at most [`QuotaLease::MAX_KEYS`] clients at once (further clients take plain
    /// permits). On shutdown call [`ConcurrencyLimitLayer::shutdown`] to give every block
    /// back at once (a layer dropped while its runtime runs gives them back at its next
    /// tick).
    ///
    /// ```no_run
    /// # async fn run(conn: redis::aio::ConnectionManager) -> redkit::Result<()> {
    /// use redkit::middleware::{ConcurrencyLimitLayer, ConcurrencyPolicy};
    /// use redkit::rate_limit::QuotaLease;
    /// // 1000 requests in flight per client over 4 instances, leased 64 slots at a time.
    /// let layer = ConcurrencyLimitLayer::builder(ConcurrencyPolicy::new("api", 1000)?, conn)
    ///     .leased(QuotaLease::new(64)?.instances(4)?)
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn leased(mut self, lease: QuotaLease) -> Self {
        self.leased = Some(lease);
        self
    }

    /// How long slots of a leased block stay unused before they are given back (see
    /// [`leased`](Self::leased)).
    ///
    /// ```
    /// use std::time::Duration;
    /// use redis::aio::ConnectionManager;
    /// use redkit::middleware::{ConcurrencyLimitBuilder, PeerIp};
    /// type Builder = ConcurrencyLimitBuilder<ConnectionManager, PeerIp>;
    /// // Slots another instance holds unused come back within 2 x 1 s + 0.5 s of their last use.
    /// assert_eq!(Builder::IDLE_RETURN, Duration::from_secs(1));
    /// ```
    pub const IDLE_RETURN: Duration = super::blocks::IDLE_RETURN;

    common_setters! {
        layer = ConcurrencyLimitLayer;
        policy = "redkit::middleware::ConcurrencyPolicy::new(\"api\", 8)?";
        /// Behaviour when Redis fails (default [`FailMode::Open`](crate::middleware::FailMode::Open)).
        fail_mode;
        /// Longest wait for Redis per acquire (default
        /// [`DEFAULT_TIMEOUT`](Self::DEFAULT_TIMEOUT)); must be non-zero.
        timeout;
        /// IPv6 addresses are grouped by this many leading bits (1..=128, default 64).
        ipv6_prefix;
        /// Behaviour for requests whose client cannot be determined (default
        /// [`UnknownClient::SharedBucket`](crate::middleware::UnknownClient::SharedBucket): they share one pool of slots).
        unknown_client;
    }

    /// Status when every slot of the client is held (default 429; a 4xx or 5xx).
    ///
    /// ```no_run
    /// # async fn run(b: redkit::middleware::ConcurrencyLimitBuilder<redis::aio::ConnectionManager, redkit::middleware::PeerIp>) {
    /// let b = b.full_status(http::StatusCode::SERVICE_UNAVAILABLE);
    /// # }
    /// ```
    pub fn full_status(mut self, status: StatusCode) -> Self {
        self.full_status = status;
        self
    }

    /// Shapes the responses the layer writes itself (the full status when every slot of the
    /// client is held, 503 when Redis fails under [`FailMode::Closed`](crate::middleware::FailMode::Closed), 400 for
    /// [`UnknownClient::Reject`](crate::middleware::UnknownClient::Reject)), as [`RateLimitBuilder::respond_with`](crate::middleware::RateLimitBuilder::respond_with)
    /// does: `f` gets the [`Rejection`](crate::middleware::Rejection) (here [`Rejection::Full`](crate::middleware::Rejection::Full) when the slots are taken) and
    /// the default response, and returns the response to send.
    ///
    /// ```no_run
    /// # async fn run(conn: redis::aio::ConnectionManager) -> redkit::Result<()> {
    /// use axum::body::Body;
    /// use http::Response;
    /// use redkit::middleware::{ConcurrencyLimitLayer, ConcurrencyPolicy, Rejection};
    /// let layer = ConcurrencyLimitLayer::builder(ConcurrencyPolicy::new("exports", 2)?, conn)
    ///     .respond_with(|rejection: &Rejection<'_>, mut res: Response<Body>| {
    ///         if let Rejection::Full { retry_after, .. } = rejection {
    ///             *res.body_mut() = Body::from(format!("busy, retry in {retry_after:?}"));
    ///         }
    ///         res
    ///     })
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn respond_with<F>(self, f: F) -> ConcurrencyLimitBuilder<C, K, RespondWith<F>> {
        ConcurrencyLimitBuilder {
            policy: self.policy,
            common: self.common.respond_with(RespondWith::new(f)),
            lease: self.lease,
            full_status: self.full_status,
            leased: self.leased,
        }
    }

    /// Validates and builds the layer. Errors: [`Error::InvalidInput`] for a bad lease, a
    /// zero timeout, an IPv6 prefix outside 1..=128, a full status that is not 4xx / 5xx or
    /// [`FailMode::Local`](crate::middleware::FailMode::Local) with 0 instances.
    ///
    /// ```no_run
    /// # async fn run(conn: redis::aio::ConnectionManager) -> redkit::Result<()> {
    /// use redkit::middleware::{ConcurrencyLimitLayer, ConcurrencyPolicy};
    /// let policy = ConcurrencyPolicy::new("api", 1)?;
    /// assert!(ConcurrencyLimitLayer::builder(policy, conn).ipv6_prefix(0).build().is_err());
    /// # Ok(()) }
    /// ```
    pub fn build(self) -> Result<ConcurrencyLimitLayer<C, K, H>> {
        let options = LockOptions::new().ttl(self.lease).retries(0);
        options.validate()?;
        self.common.validate()?;
        if !(self.full_status.is_client_error() || self.full_status.is_server_error()) {
            return Err(Error::invalid("full_status", "must be a 4xx or 5xx status"));
        }
        Ok(self.into_layer(options))
    }

    fn into_layer(self, options: LockOptions<Semaphore>) -> ConcurrencyLimitLayer<C, K, H> {
        let blocks = self.leased.map(|lease| {
            Arc::new(Blocks::new(
                lease,
                self.policy.permits(),
                self.lease,
                options.drift_allowance(),
                options.owner_token(),
            ))
        });
        let local = match self.common.fail_mode {
            FailMode::Local { instances } => {
                Some(LocalSlots::new(self.policy.permits(), instances))
            }
            _ => None,
        };
        ConcurrencyLimitLayer {
            shared: Arc::new(Shared {
                blocks,
                local,
                metrics: PolicyMetrics::concurrency_limiting(&self.policy.name),
                policy: self.policy,
                options,
                common: self.common,
                full_status: self.full_status,
                stats: Stats::default(),
            }),
        }
    }
}

impl<C, K: fmt::Debug, H> fmt::Debug for ConcurrencyLimitBuilder<C, K, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConcurrencyLimitBuilder")
            .field("policy", &self.policy)
            .field("extractor", &self.common.extractor)
            .field("lease", &self.lease)
            .field("leased", &self.leased)
            .field("fail_mode", &self.common.fail_mode)
            .field("timeout", &self.common.timeout)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_keys_become_their_hash() {
        let short = LimitKey::text("a").unwrap();
        assert_eq!(resource_of(&short), "k:a");
        let long = LimitKey::text(&"{".repeat(256)).unwrap();
        let r = resource_of(&long);
        assert!(r.starts_with("h:") && r.len() == 42, "{r}");
        assert!(Semaphore::new().key(&r).is_ok());
    }
}
