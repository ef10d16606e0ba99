//! [`ConcurrencyLimitLayer`]: at most N requests in flight per client, across every instance,
//! on leased [`Semaphore`] permits.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::header::{HeaderValue, RETRY_AFTER};
use http::{Request, Response, StatusCode};
use redis::aio::ConnectionLike;
use tower::{Layer, Service};

use super::future::ResponseFuture;
use super::headers::retry_after_secs;
use super::key::{ClientId, KeyExtractor, PeerIp, RequestInfo};
use super::rate_limit_layer::{Counters, FailMode, UnknownClient};
use super::respond::{DefaultResponses, Rejection, Respond, RespondWith};
use crate::error::{Error, Result};
use crate::keys::{validate_prefix, MAX_PART_LEN};
use crate::lock::{Acquire, LockOptions, PermitGuard, Semaphore};
use crate::rate_limit::{validate_ipv6_prefix, LimitKey, DEFAULT_IPV6_PREFIX};

/// Counters of a [`ConcurrencyLimitLayer`] (shared by all its clones).
///
/// ```
/// # fn show<C, K>(layer: &redkit::middleware::ConcurrencyLimitLayer<C, K>) {
/// let s = layer.stats();
/// println!("{} in flight, {} refused", s.admitted - s.finished, s.rejected);
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConcurrencyStats {
    /// Requests that got a permit and reached the inner service.
    pub admitted: u64,
    /// Admitted requests whose response future completed or was dropped (permit given back).
    pub finished: u64,
    /// Requests refused because every permit of their client was held.
    pub rejected: u64,
    /// Acquires or releases that failed (Redis error or timeout), whatever the fail mode.
    pub redis_failures: u64,
    /// Requests let through without a permit because of [`FailMode::Open`].
    pub failed_open: u64,
    /// Requests refused because of [`FailMode::Closed`].
    pub failed_closed: u64,
    /// Requests whose client could not be determined.
    pub unknown_clients: u64,
}

#[derive(Debug, Default)]
struct Stats {
    admitted: AtomicU64,
    finished: AtomicU64,
    rejected: AtomicU64,
    redis_failures: AtomicU64,
    failed_open: AtomicU64,
    failed_closed: AtomicU64,
    unknown_clients: AtomicU64,
}

/// What a [`ConcurrencyLimitLayer`] limits: a name (its slots are its own), the requests in
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
    name: String,
    prefix: String,
    permits: u32,
    semaphore: Semaphore,
}

impl ConcurrencyPolicy {
    /// Prefix of every key unless [`with_prefix`](Self::with_prefix) chooses another.
    pub const DEFAULT_PREFIX: &'static str = "redkit:cc";

    /// At most `permits` (1..=[`Semaphore::MAX_PERMITS`]) requests in flight per client,
    /// named `name` (`[A-Za-z0-9_:.-]`, at most 64 bytes with the prefix and a `:`).
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
        Self::under(Self::DEFAULT_PREFIX, name, permits)
    }

    /// The policy's keys under `prefix` instead of [`DEFAULT_PREFIX`](Self::DEFAULT_PREFIX)
    /// (`[A-Za-z0-9_:.-]`; at most 64 bytes with the name and a `:`).
    /// `with_prefix("rk:cc")` keeps the keys used before 0.2.
    ///
    /// ```
    /// use redkit::middleware::ConcurrencyPolicy;
    /// let policy = ConcurrencyPolicy::new("uploads", 2)?.with_prefix("app:cc")?;
    /// assert_eq!(policy.prefix(), "app:cc");
    /// assert_eq!(policy.key("k:a")?, "app:cc:uploads:{k:a}");
    /// assert!(ConcurrencyPolicy::new("uploads", 2)?.with_prefix("bad prefix").is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn with_prefix(self, prefix: &str) -> Result<Self> {
        validate_prefix("prefix", prefix)?;
        Self::under(prefix, &self.name, self.permits)
    }

    fn under(prefix: &str, name: &str, permits: u32) -> Result<Self> {
        let semaphore = Semaphore::new().with_prefix(&format!("{prefix}:{name}"))?;
        Ok(Self {
            name: name.to_owned(),
            prefix: prefix.to_owned(),
            permits,
            semaphore,
        })
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
    /// [`ConcurrencyLimitLayer::resource`]).
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

struct Shared<C, K, H> {
    policy: ConcurrencyPolicy,
    options: LockOptions<Semaphore>,
    conn: C,
    extractor: K,
    fail_mode: FailMode,
    timeout: Duration,
    ipv6_prefix: u8,
    unknown: UnknownClient,
    full_status: StatusCode,
    stats: Stats,
    respond: H,
}

/// Tower layer allowing at most `permits` requests in flight per client, counted in Redis so
/// that every instance of a service shares the limit.
///
/// Per request: the [`KeyExtractor`] finds the client (as in
/// [`RateLimitLayer`](super::RateLimitLayer)), then one [`Semaphore`] permit of the client's
/// resource is taken (one round trip, bounded by the timeout) with a lease (default 30 s).
/// - a permit: a watchdog renews its lease about every lease/3 while the inner service runs;
///   the permit is given back when the response future completes (before the response is
///   returned) or is dropped (a cancelled request: the release is sent from a spawned task);
/// - every permit held: [`DEFAULT_FULL_STATUS`](Self::DEFAULT_FULL_STATUS) (429, or the
///   builder's `full_status`, e.g. 503) with `Retry-After` = when the earliest lease ends
///   (whole seconds, rounded up, at least 1); the inner service does not run;
/// - Redis failed or timed out: [`FailMode`] (as `RateLimitLayer`: open lets the request
///   through without a permit, closed answers 503 with `Retry-After: 1`).
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
    shared: Arc<Shared<C, K, H>>,
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
            respond: DefaultResponses,
            policy,
            conn,
            extractor: PeerIp,
            lease: ConcurrencyLimitBuilder::<C, PeerIp>::DEFAULT_LEASE,
            fail_mode: FailMode::default(),
            timeout: ConcurrencyLimitBuilder::<C, PeerIp>::DEFAULT_TIMEOUT,
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
            unknown: UnknownClient::default(),
            full_status: ConcurrencyLimitLayer::<C>::DEFAULT_FULL_STATUS,
        }
    }
}

impl<C, K, H> ConcurrencyLimitLayer<C, K, H> {
    /// Status when every permit of the client is held (unless the builder says otherwise).
    pub const DEFAULT_FULL_STATUS: StatusCode = StatusCode::TOO_MANY_REQUESTS;

    /// A snapshot of the counters.
    ///
    /// ```
    /// # fn show<C, K>(layer: &redkit::middleware::ConcurrencyLimitLayer<C, K>) {
    /// assert!(layer.stats().finished <= layer.stats().admitted);
    /// # }
    /// ```
    pub fn stats(&self) -> ConcurrencyStats {
        let s = &self.shared.stats;
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ConcurrencyStats {
            admitted: get(&s.admitted),
            finished: get(&s.finished),
            rejected: get(&s.rejected),
            redis_failures: get(&s.redis_failures),
            failed_open: get(&s.failed_open),
            failed_closed: get(&s.failed_closed),
            unknown_clients: get(&s.unknown_clients),
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
fn resource_of(key: &LimitKey) -> String {
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
            .field("extractor", &s.extractor)
            .field("fail_mode", &s.fail_mode)
            .field("timeout", &s.timeout)
            .field("full_status", &s.full_status)
            .finish_non_exhaustive()
    }
}

impl<S, C, K, H> Layer<S> for ConcurrencyLimitLayer<C, K, H> {
    type Service = ConcurrencyLimit<S, C, K, H>;

    fn layer(&self, inner: S) -> Self::Service {
        ConcurrencyLimit {
            inner,
            shared: Arc::clone(&self.shared),
        }
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
    respond: H,
    policy: ConcurrencyPolicy,
    conn: C,
    extractor: K,
    lease: Duration,
    fail_mode: FailMode,
    timeout: Duration,
    ipv6_prefix: u8,
    unknown: UnknownClient,
    full_status: StatusCode,
}

impl<C, K, H> ConcurrencyLimitBuilder<C, K, H> {
    /// Default lease of a slot: how long a crashed instance's slot stays taken.
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
    /// Longest wait for Redis per acquire before the [`FailMode`] applies.
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
            respond: self.respond,
            policy: self.policy,
            conn: self.conn,
            extractor,
            lease: self.lease,
            fail_mode: self.fail_mode,
            timeout: self.timeout,
            ipv6_prefix: self.ipv6_prefix,
            unknown: self.unknown,
            full_status: self.full_status,
        }
    }

    /// Lease of each slot (default [`DEFAULT_LEASE`](Self::DEFAULT_LEASE); whole milliseconds,
    /// at most [`LockOptions::MAX_TTL`]). Renewed while the request runs.
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

    /// Behaviour when Redis fails (default [`FailMode::Open`]).
    ///
    /// ```no_run
    /// # async fn run(b: redkit::middleware::ConcurrencyLimitBuilder<redis::aio::ConnectionManager, redkit::middleware::PeerIp>) {
    /// let b = b.fail_mode(redkit::middleware::FailMode::Closed);
    /// # }
    /// ```
    pub fn fail_mode(mut self, mode: FailMode) -> Self {
        self.fail_mode = mode;
        self
    }

    /// Longest wait for Redis per acquire (default
    /// [`DEFAULT_TIMEOUT`](Self::DEFAULT_TIMEOUT)); must be non-zero.
    ///
    /// ```no_run
    /// # async fn run(b: redkit::middleware::ConcurrencyLimitBuilder<redis::aio::ConnectionManager, redkit::middleware::PeerIp>) {
    /// let b = b.timeout(std::time::Duration::from_millis(100));
    /// # }
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// IPv6 addresses are grouped by this many leading bits (1..=128, default 64).
    ///
    /// ```no_run
    /// # async fn run(b: redkit::middleware::ConcurrencyLimitBuilder<redis::aio::ConnectionManager, redkit::middleware::PeerIp>) {
    /// let b = b.ipv6_prefix(48);
    /// # }
    /// ```
    pub fn ipv6_prefix(mut self, bits: u8) -> Self {
        self.ipv6_prefix = bits;
        self
    }

    /// Behaviour for requests whose client cannot be determined (default
    /// [`UnknownClient::SharedBucket`]: they share one pool of slots).
    ///
    /// ```no_run
    /// # async fn run(b: redkit::middleware::ConcurrencyLimitBuilder<redis::aio::ConnectionManager, redkit::middleware::PeerIp>) {
    /// let b = b.unknown_client(redkit::middleware::UnknownClient::Reject);
    /// # }
    /// ```
    pub fn unknown_client(mut self, unknown: UnknownClient) -> Self {
        self.unknown = unknown;
        self
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
    /// client is held, 503 when Redis fails under [`FailMode::Closed`], 400 for
    /// [`UnknownClient::Reject`]), as [`RateLimitBuilder::respond_with`](super::RateLimitBuilder::respond_with)
    /// does: `f` gets the [`Rejection`] (here [`Rejection::Full`] when the slots are taken) and
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
            respond: RespondWith::new(f),
            policy: self.policy,
            conn: self.conn,
            extractor: self.extractor,
            lease: self.lease,
            fail_mode: self.fail_mode,
            timeout: self.timeout,
            ipv6_prefix: self.ipv6_prefix,
            unknown: self.unknown,
            full_status: self.full_status,
        }
    }

    /// Validates and builds the layer. Errors: [`Error::InvalidInput`] for a bad lease, a
    /// zero timeout, an IPv6 prefix outside 1..=128 or a full status that is not 4xx / 5xx.
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
        validate_ipv6_prefix(self.ipv6_prefix)?;
        if self.timeout.is_zero() {
            return Err(Error::invalid("timeout", "must be non-zero"));
        }
        if !(self.full_status.is_client_error() || self.full_status.is_server_error()) {
            return Err(Error::invalid("full_status", "must be a 4xx or 5xx status"));
        }
        Ok(self.into_layer(options))
    }

    fn into_layer(self, options: LockOptions<Semaphore>) -> ConcurrencyLimitLayer<C, K, H> {
        ConcurrencyLimitLayer {
            shared: Arc::new(Shared {
                policy: self.policy,
                options,
                conn: self.conn,
                extractor: self.extractor,
                fail_mode: self.fail_mode,
                timeout: self.timeout,
                ipv6_prefix: self.ipv6_prefix,
                unknown: self.unknown,
                full_status: self.full_status,
                stats: Stats::default(),
                respond: self.respond,
            }),
        }
    }
}

impl<C, K: fmt::Debug, H> fmt::Debug for ConcurrencyLimitBuilder<C, K, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConcurrencyLimitBuilder")
            .field("policy", &self.policy)
            .field("extractor", &self.extractor)
            .field("lease", &self.lease)
            .field("fail_mode", &self.fail_mode)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// The service built by [`ConcurrencyLimitLayer`].
///
/// ```no_run
/// # async fn run(conn: redis::aio::ConnectionManager) -> redkit::Result<()> {
/// use tower::Layer;
/// use redkit::middleware::{ConcurrencyLimitLayer, ConcurrencyPolicy};
/// let layer = ConcurrencyLimitLayer::new(ConcurrencyPolicy::new("api", 4)?, conn);
/// let service = layer.layer(tower::service_fn(|_req: http::Request<String>| async {
///     Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
/// }));
/// # let _ = service; Ok(()) }
/// ```
pub struct ConcurrencyLimit<S, C, K, H = DefaultResponses> {
    inner: S,
    shared: Arc<Shared<C, K, H>>,
}

impl<S, C, K, H> ConcurrencyLimit<S, C, K, H> {
    /// The wrapped service.
    ///
    /// ```no_run
    /// # fn show<S, C, K>(service: &redkit::middleware::ConcurrencyLimit<S, C, K>) { let _inner: &S = service.get_ref(); }
    /// ```
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    ///
    /// ```no_run
    /// # fn show<S, C, K>(service: &mut redkit::middleware::ConcurrencyLimit<S, C, K>) { let _inner: &mut S = service.get_mut(); }
    /// ```
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The wrapped service, unwrapped.
    ///
    /// ```no_run
    /// # fn show<S, C, K>(service: redkit::middleware::ConcurrencyLimit<S, C, K>) { let _inner: S = service.into_inner(); }
    /// ```
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: Clone, C, K, H> Clone for ConcurrencyLimit<S, C, K, H> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S: fmt::Debug, C, K, H> fmt::Debug for ConcurrencyLimit<S, C, K, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConcurrencyLimit")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

/// A held slot: given back by [`release`](Self::release), or from a spawned task when dropped
/// (a cancelled request).
struct Slot<C, K, H>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
    K: Send + Sync + 'static,
    H: Send + Sync + 'static,
{
    shared: Arc<Shared<C, K, H>>,
    permit: Option<PermitGuard>,
}

impl<C, K, H> Slot<C, K, H>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
    K: Send + Sync + 'static,
    H: Send + Sync + 'static,
{
    async fn release(mut self) {
        if let Some(permit) = self.permit.take() {
            release(Arc::clone(&self.shared), permit).await;
        }
    }
}

impl<C, K, H> Drop for Slot<C, K, H>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
    K: Send + Sync + 'static,
    H: Send + Sync + 'static,
{
    fn drop(&mut self) {
        let Some(permit) = self.permit.take() else {
            return;
        };
        let shared = Arc::clone(&self.shared);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(release(shared, permit))),
            // No runtime any more: the lease ends the slot.
            Err(_) => finish::<()>(&shared.stats, Ok(Err(Error::invalid("runtime", "gone")))),
        }
    }
}

/// Gives `permit` back (bounded by the timeout) and counts the request as finished.
async fn release<C, K, H>(shared: Arc<Shared<C, K, H>>, permit: PermitGuard)
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    let mut conn = shared.conn.clone();
    let outcome = tokio::time::timeout(
        shared.timeout,
        shared.policy.semaphore.release(&mut conn, permit),
    )
    .await;
    finish(
        &shared.stats,
        outcome.map_err(|_| Error::Timeout(shared.timeout)),
    );
}

fn finish<T>(stats: &Stats, outcome: std::result::Result<Result<T>, Error>) {
    Counters::bump(&stats.finished);
    if let Err(error) | Ok(Err(error)) = outcome {
        Counters::bump(&stats.redis_failures);
        tracing::warn!(%error, "concurrency limit: release failed (the slot comes back when its lease ends)");
    }
}

fn refuse<B: Default>(status: StatusCode, retry_after: u64) -> Response<B> {
    let mut response = Response::new(B::default());
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from(retry_after));
    response
}

impl<S, C, K, H, ReqBody, ResBody> Service<Request<ReqBody>> for ConcurrencyLimit<S, C, K, H>
where
    H: Respond<ResBody>,
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: Default + Send + 'static,
    C: ConnectionLike + Clone + Send + Sync + 'static,
    K: KeyExtractor,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<std::result::Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        // The ready service goes into the future; a fresh clone stays for the next call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let shared = Arc::clone(&self.shared);
        ResponseFuture::new(async move {
            let stats = &shared.stats;
            let key = match shared.extractor.extract(&RequestInfo::new(&req)) {
                Some(ClientId::Ip(ip)) => LimitKey::ip_grouped(ip, shared.ipv6_prefix),
                Some(ClientId::Key(key)) => key,
                None => {
                    Counters::bump(&stats.unknown_clients);
                    match shared.unknown {
                        UnknownClient::Allow => return inner.call(req).await,
                        UnknownClient::Reject => {
                            let mut response = Response::new(ResBody::default());
                            *response.status_mut() = StatusCode::BAD_REQUEST;
                            return Ok(shared.respond.respond(&Rejection::UnknownClient, response));
                        }
                        _ => LimitKey::unknown_client(),
                    }
                }
            };
            let resource = resource_of(&key);
            let mut conn = shared.conn.clone();
            let policy = &shared.policy;
            let acquire =
                policy
                    .semaphore
                    .acquire(&mut conn, &resource, policy.permits, &shared.options);
            let acquired = tokio::time::timeout(shared.timeout, acquire)
                .await
                .unwrap_or(Err(Error::Timeout(shared.timeout)));
            match acquired {
                Ok(Acquire::Acquired(mut permit)) => {
                    if let Err(error) = policy.semaphore.watch(&shared.conn, &mut permit) {
                        tracing::warn!(%error, "concurrency limit: no watchdog for the slot");
                    }
                    Counters::bump(&stats.admitted);
                    let slot = Slot {
                        shared: Arc::clone(&shared),
                        permit: Some(permit),
                    };
                    let response = match inner.call(req).await {
                        Ok(response) => response,
                        // Released from a spawned task (the error need not be `Send`).
                        Err(error) => {
                            drop(slot);
                            return Err(error);
                        }
                    };
                    // Given back before the response leaves: a client that sends its next
                    // request on receipt finds its slot free.
                    slot.release().await;
                    Ok(response)
                }
                Ok(Acquire::Busy(held)) => {
                    Counters::bump(&stats.rejected);
                    let retry_after = held.ttl.unwrap_or_default();
                    let response = refuse(shared.full_status, retry_after_secs(retry_after));
                    let rejection = Rejection::Full {
                        limiter: &policy.name,
                        retry_after,
                    };
                    Ok(shared.respond.respond(&rejection, response))
                }
                // Only with `require_replicas` in the options: the permit was given back.
                Ok(_) => {
                    Counters::bump(&stats.rejected);
                    let rejection = Rejection::Full {
                        limiter: &policy.name,
                        retry_after: Duration::from_secs(1),
                    };
                    Ok(shared
                        .respond
                        .respond(&rejection, refuse(shared.full_status, 1)))
                }
                Err(error) => {
                    Counters::bump(&stats.redis_failures);
                    match shared.fail_mode {
                        FailMode::Closed => {
                            Counters::bump(&stats.failed_closed);
                            tracing::warn!(%error, name = %policy.name, "concurrency limit failed: refusing (fail-closed)");
                            let response = refuse(StatusCode::SERVICE_UNAVAILABLE, 1);
                            Ok(shared
                                .respond
                                .respond(&Rejection::RedisUnavailable, response))
                        }
                        _ => {
                            Counters::bump(&stats.failed_open);
                            tracing::warn!(%error, name = %policy.name, "concurrency limit failed: letting request through (fail-open)");
                            inner.call(req).await
                        }
                    }
                }
            }
        })
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
