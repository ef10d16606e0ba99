//! [`RateLimitLayer`], its builder, and the settings and counters its services share.

use std::fmt;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock, RwLockReadGuard};
use std::time::Duration;

use http::HeaderValue;

use super::fallback::LocalLimits;
use super::policy::Policies;
use crate::error::Result;
use crate::middleware::common::{common_setters, Common, CommonCounters, FailMode};
use crate::middleware::headers::{self, QuotaHeaders};
use crate::middleware::key::{KeyExtractor, PeerIp};
use crate::middleware::metrics::PolicyMetrics;
use crate::middleware::respond::{DefaultResponses, RespondWith};
use crate::padded::Striped;
use crate::rate_limit::DenyCache;

/// Counters of a layer (shared by all its clones), for metrics and tests.
///
/// ```
/// # fn show<C, K>(layer: &redkit::middleware::RateLimitLayer<C, K>) {
/// let s = layer.stats();
/// println!("allowed {} limited {} failed open {}", s.allowed, s.limited, s.failed_open);
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MiddlewareStats {
    /// Requests let through after a check.
    pub allowed: u64,
    /// Requests answered 429.
    pub limited: u64,
    /// Checks that failed (Redis error or timeout), whatever the fail mode.
    pub redis_failures: u64,
    /// Requests let through unchecked because of [`FailMode::Open`](crate::middleware::FailMode::Open).
    pub failed_open: u64,
    /// Requests refused because of [`FailMode::Closed`](crate::middleware::FailMode::Closed).
    pub failed_closed: u64,
    /// Requests whose client could not be determined.
    pub unknown_clients: u64,
    /// Requests let through unchecked: the client is in the allow list.
    pub allowlisted: u64,
    /// Requests refused unchecked (403): the client is in the deny list.
    pub denied: u64,
    /// Requests a policy in shadow mode would have refused (let through).
    pub shadow_limited: u64,
    /// Requests [`FailMode::Local`] let through while Redis failed.
    pub fallback_allowed: u64,
    /// Requests [`FailMode::Local`] refused (429) while Redis failed.
    pub fallback_limited: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) allowed: AtomicU64,
    pub(crate) limited: AtomicU64,
    pub(crate) allowlisted: AtomicU64,
    pub(crate) denied: AtomicU64,
    pub(crate) shadow_limited: AtomicU64,
    pub(crate) fallback_allowed: AtomicU64,
    pub(crate) fallback_limited: AtomicU64,
    pub(crate) common: CommonCounters,
}

/// The policies in force and what is built from them: replaced as one value
/// ([`RateLimitLayer::replace_policies`]), so a request sees one set from start to end.
#[derive(Debug)]
pub(crate) struct Live {
    /// Shared by every stripe's copy (an access list may be large).
    pub(crate) policies: Arc<Policies>,
    /// `RateLimit-Policy` of each limiter, by index ([`Policies::route_for`]), built once
    /// per set.
    pub(crate) policy_headers: Vec<Option<HeaderValue>>,
    /// The metric keys of each limiter, by index ([`Policies::route_for`]), built once per
    /// set.
    pub(crate) metrics: Vec<PolicyMetrics>,
}

impl Live {
    fn new(policies: Arc<Policies>) -> Self {
        Self {
            policy_headers: policies.limiters().map(headers::policy_value).collect(),
            metrics: policies
                .limiters()
                .map(|l| PolicyMetrics::rate_limiting(l.name()))
                .collect(),
            policies,
        }
    }
}

/// What the layer and its services share (behind one `Arc`).
pub(crate) struct Shared<C, K, H> {
    /// One copy per stripe of threads, as are `stats`: every request writes both (the read
    /// lock's count, a counter, the count of a `RateLimit-Policy` value it copies into its
    /// answer) from whichever core serves it, so each core writes lines of its own. The
    /// copies are built from one set of policies and replaced one after another by
    /// [`RateLimitLayer::replace_policies`], all before it returns (a request sees one set
    /// from start to end, the old or the new one).
    live: Striped<RwLock<Arc<Live>>>,
    /// Held while the stripes are replaced: two replacements at once would otherwise leave
    /// some stripes with one set and the rest with the other.
    replacing: std::sync::Mutex<()>,
    /// The deny cache the builder made ([`RateLimitBuilder::deny_cache_capacity`]), attached
    /// to replacement policies that bring none.
    builder_cache: Option<DenyCache>,
    /// The in-process limits of [`FailMode::Local`].
    pub(crate) local: Option<LocalLimits>,
    /// Which answers carry the quota headers.
    pub(crate) quota_headers: QuotaHeaders,
    pub(crate) common: Common<C, K, H>,
    pub(crate) stats: Striped<Counters>,
}

impl<C, K, H> Shared<C, K, H> {
    /// The policies in force (one consistent set for the caller to use to the end).
    pub(crate) fn live(&self) -> Arc<Live> {
        Arc::clone(&self.live_ref())
    }

    /// The policies in force, borrowed: for work done before the caller returns (no count
    /// of the `Arc` moves); [`live`](Self::live) to keep them longer.
    pub(crate) fn live_ref(&self) -> RwLockReadGuard<'_, Arc<Live>> {
        // Only ever replaced whole: a panic elsewhere cannot leave it half-written.
        self.live.mine().read().unwrap_or_else(|e| e.into_inner())
    }

    /// Puts `policies` in force: every stripe's copy replaced before this returns.
    fn set_live(&self, policies: Policies) {
        // Plain data (none): a panic elsewhere leaves nothing to repair.
        let _one_at_a_time = self.replacing.lock().unwrap_or_else(|e| e.into_inner());
        let policies = Arc::new(policies);
        for stripe in self.live.iter() {
            let live = Arc::new(Live::new(Arc::clone(&policies)));
            *stripe.write().unwrap_or_else(|e| e.into_inner()) = live;
        }
    }
}

/// Tower layer that rate-limits requests per client with a [`Limiter`](crate::rate_limit::Limiter)
/// (fixed window, GCRA or sliding window, chosen per route) in Redis. Usable in axum, hyper
/// and tonic stacks.
///
/// Cheap to clone: one `Arc` of policies + connection + configuration, shared by every
/// service it builds. The connection must be `Clone + Send + Sync + 'static`; use
/// `redis::aio::ConnectionManager` (reconnects by itself) or a `MultiplexedConnection`.
///
/// Per request: the [`KeyExtractor`] finds the client, the policy for the path is checked
/// (one round trip, bounded by the timeout), and then
/// - allowed: [`LimitOutcome::Checked`](crate::middleware::LimitOutcome) with the
///   [`Decision`](crate::rate_limit::Decision) is put in the request extensions, the inner
///   service runs, and `RateLimit-Policy` / `RateLimit` headers are added (unless
///   [`quota_headers`](RateLimitBuilder::quota_headers) says refusals only);
/// - limited: `429 Too Many Requests` with `Retry-After` (whole seconds, rounded up, never
///   below one second) and the same two headers; the inner service does not run;
/// - Redis failed or timed out: [`FailMode`](crate::middleware::FailMode); under [`FailMode::Open`](crate::middleware::FailMode::Open) the request goes
///   through with [`LimitOutcome::Unchecked`](crate::middleware::LimitOutcome) in its extensions.
///
/// Every request that reaches the inner service carries exactly one
/// [`LimitOutcome`](crate::middleware::LimitOutcome) extension, so handlers can extract it unconditionally.
///
/// ```no_run
/// # use redkit::rate_limit::Rate;
/// # async fn run() -> redkit::Result<()> {
/// use std::{net::SocketAddr, time::Duration};
/// use axum::{routing::get, Router};
/// use redkit::{middleware::RateLimitLayer, rate_limit::FixedWindow};
///
/// let client = redis::Client::open("redis://127.0.0.1:6379/?protocol=resp3")?;
/// let conn = redis::aio::ConnectionManager::new(client).await?;
/// let layer = RateLimitLayer::new(FixedWindow::new("api", Rate::per_minute(redkit::nonzero!(100)))?, conn);
/// let app: Router = Router::new().route("/", get(|| async { "hi" })).layer(layer);
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await.unwrap();
/// axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await.unwrap();
/// # Ok(()) }
/// ```
pub struct RateLimitLayer<C, K = PeerIp, H = DefaultResponses> {
    shared: Arc<Shared<C, K, H>>,
}

impl<C> RateLimitLayer<C, PeerIp, DefaultResponses> {
    /// A layer with default settings: socket peer as key, fail open, 250 ms timeout,
    /// IPv6 grouped by /64, unknown clients share a bucket.
    ///
    /// ```no_run
    /// # use redkit::rate_limit::Rate;
    /// # async fn run(conn: redis::aio::ConnectionManager) -> redkit::Result<()> {
    /// # use std::time::Duration;
    /// use redkit::{middleware::RateLimitLayer, rate_limit::FixedWindow};
    /// let layer = RateLimitLayer::new(FixedWindow::new("api", Rate::per_minute(redkit::nonzero!(100)))?, conn);
    /// # Ok(()) }
    /// ```
    pub fn new(policies: impl Into<Policies>, conn: C) -> Self {
        Self::builder(policies, conn).into_layer()
    }

    /// A builder to change the defaults.
    ///
    /// ```no_run
    /// # async fn run(conn: redis::aio::ConnectionManager) -> redkit::Result<()> {
    /// # use std::time::Duration;
    /// use redkit::middleware::{FailMode, RateLimitLayer, TrustedProxies};
    /// use redkit::rate_limit::{FixedWindow, Rate};
    /// let layer = RateLimitLayer::builder(FixedWindow::new("api", Rate::per_minute(redkit::nonzero!(100)))?, conn)
    ///     .key_extractor(TrustedProxies::parse_cidrs(["10.0.0.0/8"])?)
    ///     .fail_mode(FailMode::Closed)
    ///     .timeout(Duration::from_millis(100))
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn builder(policies: impl Into<Policies>, conn: C) -> RateLimitBuilder<C, PeerIp> {
        RateLimitBuilder {
            policies: policies.into(),
            common: Common::new(conn, RateLimitBuilder::<C, PeerIp>::DEFAULT_TIMEOUT),
            deny_cache: None,
            quota_headers: QuotaHeaders::Always,
        }
    }
}

impl<C, K, H> RateLimitLayer<C, K, H> {
    /// Status of a request refused by [`FailMode::Closed`](crate::middleware::FailMode::Closed).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # // Lazy, and nothing listens there: every Redis call fails.
    /// # let client = redis::Client::open("redis://127.0.0.1:1/")?;
    /// # let conn = redis::aio::ConnectionManager::new_lazy_with_config(client, redkit::connect::manager_config(Default::default()))?;
    /// use http::{Request, Response};
    /// use redis::aio::ConnectionManager;
    /// use redkit::middleware::{FailMode, RateLimitLayer};
    /// use redkit::rate_limit::{FixedWindow, Rate};
    /// use tower::{service_fn, Layer, ServiceExt};
    ///
    /// // `conn`: a connection to a Redis that is down.
    /// let layer = RateLimitLayer::builder(FixedWindow::new("api", Rate::per_second(redkit::nonzero!(10)))?, conn)
    ///     .fail_mode(FailMode::Closed)
    ///     .build()?;
    /// let app = layer.layer(service_fn(|_req: Request<String>| async {
    ///     Ok::<_, std::convert::Infallible>(Response::new(String::from("hello")))
    /// }));
    /// let res = app.oneshot(Request::new(String::new())).await?;
    /// assert_eq!(res.status(), RateLimitLayer::<ConnectionManager>::FAIL_CLOSED_STATUS); // 503
    /// # Ok(()) }
    /// ```
    pub const FAIL_CLOSED_STATUS: http::StatusCode = http::StatusCode::SERVICE_UNAVAILABLE;
    /// Status of a request refused by [`UnknownClient::Reject`](crate::middleware::UnknownClient::Reject).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let client = redis::Client::open("redis://127.0.0.1:1/")?;
    /// # let conn = redis::aio::ConnectionManager::new_lazy_with_config(client, redkit::connect::manager_config(Default::default()))?;
    /// use http::{Request, Response};
    /// use redis::aio::ConnectionManager;
    /// use redkit::middleware::{RateLimitLayer, UnknownClient};
    /// use redkit::rate_limit::{FixedWindow, Rate};
    /// use tower::{service_fn, Layer, ServiceExt};
    ///
    /// let layer = RateLimitLayer::builder(FixedWindow::new("api", Rate::per_second(redkit::nonzero!(10)))?, conn)
    ///     .unknown_client(UnknownClient::Reject)
    ///     .build()?;
    /// let app = layer.layer(service_fn(|_req: Request<String>| async {
    ///     Ok::<_, std::convert::Infallible>(Response::new(String::from("hello")))
    /// }));
    /// // No peer address (a server without `ConnectInfo`): refused without a Redis call.
    /// let res = app.oneshot(Request::new(String::new())).await?;
    /// assert_eq!(res.status(), RateLimitLayer::<ConnectionManager>::UNKNOWN_CLIENT_STATUS); // 400
    /// # Ok(()) }
    /// ```
    pub const UNKNOWN_CLIENT_STATUS: http::StatusCode = http::StatusCode::BAD_REQUEST;

    /// The deny cache of the policies' limiters (from
    /// [`RateLimitBuilder::deny_cache_capacity`] or the [`PolicyConfig`](crate::middleware::PolicyConfig)),
    /// for its hit / miss counters. `None` when there is none.
    ///
    /// ```
    /// # fn show<C, K>(layer: &redkit::middleware::RateLimitLayer<C, K>) {
    /// if let Some(cache) = layer.deny_cache() {
    ///     println!("{} requests refused without a Redis call", cache.stats().hits);
    /// }
    /// # }
    /// ```
    pub fn deny_cache(&self) -> Option<DenyCache> {
        self.shared
            .live()
            .policies
            .limiters()
            .find_map(|l| l.deny_cache().cloned())
    }

    /// The policies in force.
    ///
    /// ```
    /// # fn show<C, K>(layer: &redkit::middleware::RateLimitLayer<C, K>) {
    /// println!("{} on /login", layer.policies().for_path("/login").name());
    /// # }
    /// ```
    pub fn policies(&self) -> Policies {
        Policies::clone(&self.shared.live().policies)
    }

    /// Replaces the policies of this layer and of every service built from it (and from its
    /// clones), while they serve: limits, routes, algorithms, allow and deny lists, shadow
    /// flags. Each request uses one set from start to end, the old or the new, never parts
    /// of both. Counters are keyed by limiter name, so a policy that keeps its name keeps its
    /// counters: a client mid-window keeps what it has used, measured against the new limit
    /// from its next request (a limit that shrinks below what the client used refuses it
    /// until the window ends; one that grows lets it on at once). A new window length applies
    /// to windows that start after the swap. New policies without a deny cache get the one
    /// the builder made ([`RateLimitBuilder::deny_cache_capacity`]), if any.
    ///
    /// ```
    /// # fn show<C, K>(layer: &redkit::middleware::RateLimitLayer<C, K>) -> redkit::Result<()> {
    /// use redkit::middleware::{Policies, PolicyConfig};
    /// let config: PolicyConfig = toml::from_str(r#"
    ///     [default]
    ///     name = "api"
    ///     limit = 200
    ///     window_ms = 60000
    /// "#).unwrap();
    /// layer.replace_policies(Policies::from_config(&config)?); // e.g. on SIGHUP
    /// # Ok(()) }
    /// ```
    pub fn replace_policies(&self, policies: impl Into<Policies>) {
        let mut policies = policies.into();
        if let Some(cache) = &self.shared.builder_cache {
            if policies.limiters().all(|l| l.deny_cache().is_none()) {
                policies = policies.with_deny_cache(cache.clone());
            }
        }
        self.shared.set_live(policies);
    }

    /// What the layer's services share.
    pub(crate) fn shared(&self) -> &Arc<Shared<C, K, H>> {
        &self.shared
    }

    /// A snapshot of the counters.
    ///
    /// ```
    /// # fn show<C, K>(layer: &redkit::middleware::RateLimitLayer<C, K>) {
    /// let stats = layer.stats();
    /// let failures = stats.failed_open + stats.failed_closed;
    /// # let _ = failures;
    /// # }
    /// ```
    pub fn stats(&self) -> MiddlewareStats {
        let sum = |counter: fn(&Counters) -> &AtomicU64| self.shared.stats.sum(counter);
        MiddlewareStats {
            allowed: sum(|s| &s.allowed),
            limited: sum(|s| &s.limited),
            redis_failures: sum(|s| &s.common.redis_failures),
            failed_open: sum(|s| &s.common.failed_open),
            failed_closed: sum(|s| &s.common.failed_closed),
            unknown_clients: sum(|s| &s.common.unknown_clients),
            allowlisted: sum(|s| &s.allowlisted),
            denied: sum(|s| &s.denied),
            shadow_limited: sum(|s| &s.shadow_limited),
            fallback_allowed: sum(|s| &s.fallback_allowed),
            fallback_limited: sum(|s| &s.fallback_limited),
        }
    }
}

impl<C, K, H> Clone for RateLimitLayer<C, K, H> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<C, K: fmt::Debug, H> fmt::Debug for RateLimitLayer<C, K, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug(
            f,
            "RateLimitLayer",
            &self.shared.live().policies,
            &self.shared.common,
        )
    }
}

/// Builder of a [`RateLimitLayer`]: by-value setters, validated by [`build`](Self::build).
///
/// ```no_run
/// # use redkit::rate_limit::Rate;
/// # async fn run(conn: redis::aio::ConnectionManager) -> redkit::Result<()> {
/// # use std::time::Duration;
/// use redkit::{middleware::{RateLimitLayer, UnknownClient}, rate_limit::FixedWindow};
/// let layer = RateLimitLayer::builder(FixedWindow::new("api", Rate::per_second(redkit::nonzero!(10)))?, conn)
///     .ipv6_prefix(56)
///     .unknown_client(UnknownClient::Reject)
///     .build()?;
/// # Ok(()) }
/// ```
pub struct RateLimitBuilder<C, K, H = DefaultResponses> {
    policies: Policies,
    common: Common<C, K, H>,
    deny_cache: Option<usize>,
    quota_headers: QuotaHeaders,
}

impl<C, K, H> RateLimitBuilder<C, K, H> {
    /// Answers clients known to be limited locally, without a Redis call, until their window
    /// resets: one [`DenyCache`] of at most `capacity` entries, shared by every limiter of the
    /// policies (replacing a cache set with
    /// [`PolicyConfig::deny_cache_capacity`](crate::middleware::PolicyConfig::deny_cache_capacity)). Its
    /// counters: [`RateLimitLayer::deny_cache`]. Validated by [`build`](Self::build)
    /// (1..=[`DenyCache::MAX_CAPACITY`]).
    ///
    /// ```no_run
    /// # async fn run(b: redkit::middleware::RateLimitBuilder<redis::aio::ConnectionManager, redkit::middleware::PeerIp>) -> redkit::Result<()> {
    /// let layer = b.deny_cache_capacity(100_000).build()?;
    /// assert_eq!(layer.deny_cache().map(|c| c.capacity()), Some(100_000));
    /// # Ok(()) }
    /// ```
    pub fn deny_cache_capacity(mut self, capacity: usize) -> Self {
        self.deny_cache = Some(capacity);
        self
    }

    /// Which answers carry the `RateLimit-Policy` / `RateLimit` headers (default
    /// [`QuotaHeaders::Always`]); refusals always do.
    ///
    /// ```no_run
    /// # async fn run(b: redkit::middleware::RateLimitBuilder<redis::aio::ConnectionManager, redkit::middleware::PeerIp>) -> redkit::Result<()> {
    /// use redkit::middleware::QuotaHeaders;
    /// let layer = b.quota_headers(QuotaHeaders::OnRefusal).build()?;
    /// # Ok(()) }
    /// ```
    pub fn quota_headers(mut self, which: QuotaHeaders) -> Self {
        self.quota_headers = which;
        self
    }

    /// Longest wait for Redis per request before the [`FailMode`](crate::middleware::FailMode) applies.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redkit::Result<()> {
    /// # let client = redis::Client::open("redis://127.0.0.1:1/")?;
    /// # let conn = redis::aio::ConnectionManager::new_lazy_with_config(client, redkit::connect::manager_config(Default::default()))?;
    /// use std::time::Duration;
    /// use redis::aio::ConnectionManager;
    /// use redkit::middleware::{PeerIp, RateLimitBuilder, RateLimitLayer};
    /// use redkit::rate_limit::{FixedWindow, Rate};
    ///
    /// type Builder = RateLimitBuilder<ConnectionManager, PeerIp>;
    /// assert_eq!(Builder::DEFAULT_TIMEOUT, Duration::from_millis(250));
    /// // Give up on Redis after 50 ms instead (then the fail mode decides).
    /// let layer = RateLimitLayer::builder(FixedWindow::new("api", Rate::per_second(redkit::nonzero!(10)))?, conn)
    ///     .timeout(Builder::DEFAULT_TIMEOUT / 5)
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(250);

    /// How to find the client (default [`PeerIp`]).
    ///
    /// ```no_run
    /// # use redkit::rate_limit::Rate;
    /// # async fn run(conn: redis::aio::ConnectionManager) -> redkit::Result<()> {
    /// # use std::time::Duration;
    /// use redkit::{middleware::{RateLimitLayer, TrustedProxies}, rate_limit::FixedWindow};
    /// let b = RateLimitLayer::builder(FixedWindow::new("api", Rate::per_second(redkit::nonzero!(10)))?, conn)
    ///     .key_extractor(TrustedProxies::hops(1));
    /// # Ok(()) }
    /// ```
    pub fn key_extractor<K2: KeyExtractor>(self, extractor: K2) -> RateLimitBuilder<C, K2, H> {
        RateLimitBuilder {
            policies: self.policies,
            common: self.common.key_extractor(extractor),
            deny_cache: self.deny_cache,
            quota_headers: self.quota_headers,
        }
    }

    common_setters! {
        layer = RateLimitLayer;
        policy = "redkit::rate_limit::FixedWindow::new(\"api\", redkit::rate_limit::Rate::per_second(redkit::nonzero!(10)))?";
        /// Behaviour when Redis fails (default [`FailMode::Open`](crate::middleware::FailMode::Open)).
        fail_mode;
        /// Longest wait for Redis per request (default [`DEFAULT_TIMEOUT`](Self::DEFAULT_TIMEOUT));
        /// must be non-zero.
        timeout;
        /// IPv6 addresses are grouped by this many leading bits (1..=128, default 64).
        ipv6_prefix;
        /// Behaviour for requests whose client cannot be determined (default
        /// [`UnknownClient::SharedBucket`](crate::middleware::UnknownClient::SharedBucket)).
        unknown_client;
    }

    /// Shapes the responses the layer writes itself (429 over the limit, 503 when Redis
    /// fails under [`FailMode::Closed`](crate::middleware::FailMode::Closed), 400 for [`UnknownClient::Reject`](crate::middleware::UnknownClient::Reject)): `f` gets the
    /// [`Rejection`](crate::middleware::Rejection) and the default response (status and headers set,
    /// empty body) and returns the response to send. `B` is the response body type of the
    /// service stack (`axum::body::Body` in axum).
    ///
    /// ```no_run
    /// # async fn run(conn: redis::aio::ConnectionManager) -> redkit::Result<()> {
    /// # use std::time::Duration;
    /// use axum::body::Body;
    /// use http::{header::CONTENT_TYPE, HeaderValue, Response};
    /// use redkit::middleware::{RateLimitLayer, Rejection};
    /// use redkit::rate_limit::{FixedWindow, Rate};
    ///
    /// let layer = RateLimitLayer::builder(FixedWindow::new("api", Rate::per_minute(redkit::nonzero!(100)))?, conn)
    ///     .respond_with(|rejection: &Rejection<'_>, mut res: Response<Body>| {
    ///         let detail = match rejection {
    ///             Rejection::Limited { limiter, .. } => format!("limit {limiter} exceeded"),
    ///             _ => "try again later".to_owned(),
    ///         };
    ///         let status = res.status().as_u16();
    ///         *res.body_mut() = Body::from(format!(r#"{{"status":{status},"detail":"{detail}"}}"#));
    ///         res.headers_mut()
    ///             .insert(CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
    ///         res
    ///     })
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn respond_with<F>(self, f: F) -> RateLimitBuilder<C, K, RespondWith<F>> {
        RateLimitBuilder {
            policies: self.policies,
            common: self.common.respond_with(RespondWith::new(f)),
            deny_cache: self.deny_cache,
            quota_headers: self.quota_headers,
        }
    }

    /// Validates and builds the layer. Errors: [`Error::InvalidInput`](crate::Error::InvalidInput)
    /// for a zero timeout, an IPv6 prefix outside 1..=128 or a bad deny cache capacity.
    ///
    /// ```no_run
    /// # async fn run(b: redkit::middleware::RateLimitBuilder<redis::aio::ConnectionManager, redkit::middleware::PeerIp>) {
    /// assert!(b.ipv6_prefix(0).build().is_err());
    /// # }
    /// ```
    pub fn build(mut self) -> Result<RateLimitLayer<C, K, H>> {
        self.common.validate()?;
        let mut builder_cache = None;
        if let Some(capacity) = self.deny_cache.take() {
            let cache = DenyCache::new(capacity)?;
            self.policies = self.policies.with_deny_cache(cache.clone());
            builder_cache = Some(cache);
        }
        let mut layer = self.into_layer();
        if let Some(shared) = Arc::get_mut(&mut layer.shared) {
            shared.builder_cache = builder_cache;
        }
        Ok(layer)
    }

    fn into_layer(self) -> RateLimitLayer<C, K, H> {
        let local = match self.common.fail_mode {
            FailMode::Local { instances } => Some(LocalLimits::new(instances)),
            _ => None,
        };
        let policies = Arc::new(self.policies);
        RateLimitLayer {
            shared: Arc::new(Shared {
                live: Striped::new(|| RwLock::new(Arc::new(Live::new(Arc::clone(&policies))))),
                replacing: std::sync::Mutex::new(()),
                builder_cache: None,
                local,
                quota_headers: self.quota_headers,
                common: self.common,
                stats: Striped::default(),
            }),
        }
    }
}

impl<C, K: fmt::Debug, H> fmt::Debug for RateLimitBuilder<C, K, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        debug(f, "RateLimitBuilder", &self.policies, &self.common)
    }
}

/// How the layer and its builder print: the policies and the settings.
fn debug<C, K: fmt::Debug, H>(
    f: &mut fmt::Formatter<'_>,
    name: &str,
    policies: &Policies,
    common: &Common<C, K, H>,
) -> fmt::Result {
    f.debug_struct(name)
        .field("policies", policies)
        .field("extractor", &common.extractor)
        .field("fail_mode", &common.fail_mode)
        .field("timeout", &common.timeout)
        .field("ipv6_prefix", &common.ipv6_prefix)
        .field("unknown", &common.unknown)
        .finish_non_exhaustive()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate_limit::{FixedWindow, Rate};

    fn policies(limit: u32) -> Policies {
        FixedWindow::new("p", Rate::per_second(limit.try_into().unwrap()))
            .unwrap()
            .into()
    }

    #[test]
    fn replacements_at_once_leave_every_stripe_with_one_set() {
        let layer = RateLimitLayer::new(policies(1), ());
        for round in 0..100 {
            std::thread::scope(|s| {
                for limit in [10, 20, 30, 40] {
                    let layer = &layer;
                    s.spawn(move || layer.replace_policies(policies(limit + round)));
                }
            });
            let limits: Vec<u32> = layer
                .shared
                .live
                .iter()
                .map(|stripe| stripe.read().unwrap().policies.limiter(0).limit())
                .collect();
            assert!(
                limits.windows(2).all(|w| w[0] == w[1]),
                "round {round}: {limits:?}"
            );
            // One set, held once: the stripes share it (an access list may be large).
            let sets: Vec<Arc<Policies>> = layer
                .shared
                .live
                .iter()
                .map(|stripe| Arc::clone(&stripe.read().unwrap().policies))
                .collect();
            assert!(sets.windows(2).all(|w| Arc::ptr_eq(&w[0], &w[1])));
        }
    }
}
