//! What both layers hold besides their limit ([`Common`]): the connection, how to find the
//! client ([`KeyExtractor`](super::KeyExtractor), [`UnknownClient`]), what to do when Redis
//! fails ([`FailMode`], timeout) and how to answer a refusal ([`Respond`](super::Respond));
//! the builder setters of those settings (`common_setters!`) and the service that wraps an
//! inner one (`limit_service!`), written once for both.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use http::header::{HeaderValue, RETRY_AFTER};
use http::{Response, StatusCode};

use super::key::PeerIp;
use super::respond::{DefaultResponses, Rejection, Respond};
use crate::error::{Error, Result};
use crate::rate_limit::{validate_ipv6_prefix, DEFAULT_IPV6_PREFIX};

/// What to do when Redis cannot answer within the timeout (down, unreachable, too slow) or
/// answers with an error.
///
/// ```
/// use redkit::middleware::FailMode;
/// assert_eq!(FailMode::default(), FailMode::Open);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum FailMode {
    /// Let the request through unlimited (the default: an outage of the limiter is not an
    /// outage of the service). Logged at `warn` and counted in [`MiddlewareStats::failed_open`](super::MiddlewareStats::failed_open).
    #[default]
    Open,
    /// Answer [`RateLimitLayer::FAIL_CLOSED_STATUS`](super::RateLimitLayer::FAIL_CLOSED_STATUS) (503) with `Retry-After: 1`. Logged and
    /// counted in [`MiddlewareStats::failed_closed`](super::MiddlewareStats::failed_closed).
    Closed,
    /// Enforce this instance's share of each policy's limit in process while Redis fails or
    /// is slower than the timeout: `limit / instances` (at least 1) per client, as a bucket of
    /// that size refilling over the policy's window (governor's keyed GCRA limiter), so over
    /// an outage of length `t` one instance lets at most `share + share x t / window` requests
    /// of a client through. Every request still asks Redis first: the layer is back on Redis
    /// with the first answer. Refusals are 429 with `Retry-After`; counted in
    /// [`MiddlewareStats::fallback_allowed`](super::MiddlewareStats::fallback_allowed) /
    /// [`fallback_limited`](super::MiddlewareStats::fallback_limited). The concurrency layer
    /// admits `permits / instances` (at least 1) of each client's requests at once in
    /// process instead ([`ConcurrencyLimitLayer`](super::ConcurrencyLimitLayer)). `instances` 0
    /// is refused at `build`.
    ///
    /// ```
    /// use redkit::middleware::FailMode;
    /// let four = FailMode::Local { instances: 4 }; // each instance a quarter of the limit
    /// # let _ = four;
    /// ```
    Local {
        /// How many instances share the limit.
        instances: u32,
    },
}

/// What to do with a request whose client the key extractor cannot determine (e.g. axum
/// served without `into_make_service_with_connect_info`). Never a 500.
///
/// ```
/// use redkit::middleware::UnknownClient;
/// assert_eq!(UnknownClient::default(), UnknownClient::SharedBucket);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum UnknownClient {
    /// All such requests share one bucket (the default: still limited, and a misconfigured
    /// deployment shows up fast). Counted in [`MiddlewareStats::unknown_clients`](super::MiddlewareStats::unknown_clients).
    #[default]
    SharedBucket,
    /// Let them through unlimited.
    Allow,
    /// Answer [`RateLimitLayer::UNKNOWN_CLIENT_STATUS`](super::RateLimitLayer::UNKNOWN_CLIENT_STATUS) (400).
    Reject,
}

/// What both layers hold besides their limit, set by their builders.
pub(crate) struct Common<C, K, H> {
    pub(crate) conn: C,
    pub(crate) extractor: K,
    pub(crate) fail_mode: FailMode,
    pub(crate) timeout: Duration,
    pub(crate) ipv6_prefix: u8,
    pub(crate) unknown: UnknownClient,
    pub(crate) respond: H,
}

impl<C> Common<C, PeerIp, DefaultResponses> {
    /// The defaults: the socket peer as key, default responses, fail open, `timeout`, IPv6
    /// grouped by [`DEFAULT_IPV6_PREFIX`] bits, unknown clients in one shared bucket.
    pub(crate) fn new(conn: C, timeout: Duration) -> Self {
        Self {
            conn,
            extractor: PeerIp,
            fail_mode: FailMode::default(),
            timeout,
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
            unknown: UnknownClient::default(),
            respond: DefaultResponses,
        }
    }
}

impl<C, K, H> Common<C, K, H> {
    /// The same settings, the client found by `extractor`.
    pub(crate) fn key_extractor<K2>(self, extractor: K2) -> Common<C, K2, H> {
        Common {
            conn: self.conn,
            extractor,
            fail_mode: self.fail_mode,
            timeout: self.timeout,
            ipv6_prefix: self.ipv6_prefix,
            unknown: self.unknown,
            respond: self.respond,
        }
    }

    /// The same settings, refusals shaped by `respond`.
    pub(crate) fn respond_with<H2>(self, respond: H2) -> Common<C, K, H2> {
        Common {
            conn: self.conn,
            extractor: self.extractor,
            fail_mode: self.fail_mode,
            timeout: self.timeout,
            ipv6_prefix: self.ipv6_prefix,
            unknown: self.unknown,
            respond,
        }
    }

    /// [`Error::InvalidInput`] for an IPv6 prefix outside 1..=128 or a zero timeout.
    pub(crate) fn validate(&self) -> Result<()> {
        validate_ipv6_prefix(self.ipv6_prefix)?;
        if self.timeout.is_zero() {
            return Err(Error::invalid("timeout", "must be non-zero"));
        }
        if self.fail_mode == (FailMode::Local { instances: 0 }) {
            return Err(Error::invalid(
                "fail_mode",
                "Local needs at least 1 instance",
            ));
        }
        Ok(())
    }
}

impl<C, K, H> Common<C, K, H> {
    /// The answer of [`FailMode::Closed`] to a request Redis could not answer for, counted in
    /// `counters`: 503 with `Retry-After: 1`, shaped by the layer's [`Respond`].
    pub(crate) fn fail_closed<B: Default>(&self, counters: &CommonCounters) -> Response<B>
    where
        H: Respond<B>,
    {
        bump(&counters.failed_closed);
        let response = refusal(StatusCode::SERVICE_UNAVAILABLE, Some(1));
        self.respond.respond(&Rejection::RedisUnavailable, response)
    }
}

/// What both layers count of the settings they share: Redis failures, how the fail mode
/// answered them, and requests whose client was unknown.
#[derive(Debug, Default)]
pub(crate) struct CommonCounters {
    pub(crate) redis_failures: AtomicU64,
    pub(crate) failed_open: AtomicU64,
    pub(crate) failed_closed: AtomicU64,
    pub(crate) unknown_clients: AtomicU64,
}

/// Counts one more event on `counter`.
pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// What `counter` has counted.
pub(crate) fn read(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

/// The response a layer answers by itself before [`Respond`](super::Respond) reshapes it:
/// `status`, an empty body, and `Retry-After` in whole seconds when given.
pub(crate) fn refusal<B: Default>(status: StatusCode, retry_after: Option<u64>) -> Response<B> {
    let mut response = Response::new(B::default());
    *response.status_mut() = status;
    if let Some(seconds) = retry_after {
        response
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

/// The setters of [`Common`]'s settings on a builder `$builder` (a struct with
/// `common: Common<C, K, H>`), inside its `impl` block, each with the builder's own docs
/// followed by one example shared by both builders: `builder()` there makes a builder of
/// `$layer` for `$policy` (a Rust expression, in a string) on a connection whose Redis
/// calls all fail.
macro_rules! common_setters {
    (
        layer = $layer:ident;
        policy = $policy:literal;
        $(#[$fail_mode:meta])* fail_mode;
        $(#[$timeout:meta])* timeout;
        $(#[$ipv6_prefix:meta])* ipv6_prefix;
        $(#[$unknown_client:meta])* unknown_client;
    ) => {
        $(#[$fail_mode])*
        ///
        /// With [`FailMode::Closed`](crate::middleware::FailMode::Closed), a request Redis
        /// cannot answer for is refused with `503`:
        ///
        /// ```
        /// # #[tokio::main(flavor = "current_thread")]
        /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
        /// # // Lazy, and nothing listens there: every Redis call fails.
        /// # let client = redis::Client::open("redis://127.0.0.1:1/")?;
        /// # let conn = redis::aio::ConnectionManager::new_lazy_with_config(client, redkit::connect::manager_config(Default::default()))?;
        #[doc = concat!("# let policy = ", $policy, ";")]
        #[doc = concat!("# let builder = || redkit::middleware::", stringify!($layer), "::builder(policy.clone(), conn.clone());")]
        /// use http::{Request, Response, StatusCode};
        /// use redkit::middleware::FailMode;
        /// use tower::{service_fn, Layer, ServiceExt};
        ///
        /// // `builder()`: a builder whose Redis is down.
        /// let layer = builder().fail_mode(FailMode::Closed).build()?;
        /// let app = layer.layer(service_fn(|_req: Request<String>| async {
        ///     Ok::<_, std::convert::Infallible>(Response::new(String::from("hello")))
        /// }));
        /// let res = app.oneshot(Request::new(String::new())).await?;
        /// assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        /// assert_eq!(res.headers()[http::header::RETRY_AFTER], "1");
        /// # Ok(()) }
        /// ```
        pub fn fail_mode(mut self, mode: $crate::middleware::FailMode) -> Self {
            self.common.fail_mode = mode;
            self
        }

        $(#[$timeout])*
        ///
        /// ```
        /// # #[tokio::main(flavor = "current_thread")]
        /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
        /// # // Lazy, and nothing listens there: every Redis call fails.
        /// # let client = redis::Client::open("redis://127.0.0.1:1/")?;
        /// # let conn = redis::aio::ConnectionManager::new_lazy_with_config(client, redkit::connect::manager_config(Default::default()))?;
        #[doc = concat!("# let policy = ", $policy, ";")]
        #[doc = concat!("# let builder = || redkit::middleware::", stringify!($layer), "::builder(policy.clone(), conn.clone());")]
        /// use std::time::Duration;
        ///
        /// let layer = builder().timeout(Duration::from_millis(50)).build()?;
        /// assert!(builder().timeout(Duration::ZERO).build().is_err());
        /// # Ok(()) }
        /// ```
        pub fn timeout(mut self, timeout: ::std::time::Duration) -> Self {
            self.common.timeout = timeout;
            self
        }

        $(#[$ipv6_prefix])*
        ///
        /// ```
        /// # #[tokio::main(flavor = "current_thread")]
        /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
        /// # // Lazy, and nothing listens there: every Redis call fails.
        /// # let client = redis::Client::open("redis://127.0.0.1:1/")?;
        /// # let conn = redis::aio::ConnectionManager::new_lazy_with_config(client, redkit::connect::manager_config(Default::default()))?;
        #[doc = concat!("# let policy = ", $policy, ";")]
        #[doc = concat!("# let builder = || redkit::middleware::", stringify!($layer), "::builder(policy.clone(), conn.clone());")]
        /// let layer = builder().ipv6_prefix(48).build()?; // one client per /48
        /// assert!(builder().ipv6_prefix(0).build().is_err());
        /// assert!(builder().ipv6_prefix(129).build().is_err());
        /// # Ok(()) }
        /// ```
        pub fn ipv6_prefix(mut self, bits: u8) -> Self {
            self.common.ipv6_prefix = bits;
            self
        }

        $(#[$unknown_client])*
        ///
        /// [`UnknownClient::Allow`](crate::middleware::UnknownClient::Allow) lets such a
        /// request through without a Redis call, so even a layer that fails closed while
        /// Redis is down serves it:
        ///
        /// ```
        /// # #[tokio::main(flavor = "current_thread")]
        /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
        /// # // Lazy, and nothing listens there: every Redis call fails.
        /// # let client = redis::Client::open("redis://127.0.0.1:1/")?;
        /// # let conn = redis::aio::ConnectionManager::new_lazy_with_config(client, redkit::connect::manager_config(Default::default()))?;
        #[doc = concat!("# let policy = ", $policy, ";")]
        #[doc = concat!("# let builder = || redkit::middleware::", stringify!($layer), "::builder(policy.clone(), conn.clone());")]
        /// use http::{Request, Response, StatusCode};
        /// use redkit::middleware::{FailMode, UnknownClient};
        /// use tower::{service_fn, Layer, ServiceExt};
        ///
        /// // `builder()`: a builder whose Redis is down.
        /// let layer = builder()
        ///     .fail_mode(FailMode::Closed)
        ///     .unknown_client(UnknownClient::Allow)
        ///     .build()?;
        /// let app = layer.layer(service_fn(|_req: Request<String>| async {
        ///     Ok::<_, std::convert::Infallible>(Response::new(String::from("hello")))
        /// }));
        /// // No peer address (a server without `ConnectInfo`): the client is unknown.
        /// let res = app.oneshot(Request::new(String::new())).await?;
        /// assert_eq!(res.status(), StatusCode::OK);
        /// # Ok(()) }
        /// ```
        pub fn unknown_client(mut self, unknown: $crate::middleware::UnknownClient) -> Self {
            self.common.unknown = unknown;
            self
        }
    };
}

pub(super) use common_setters;

/// The service `$service` (a struct with `inner: S` and `shared: Arc<Shared<C, K, H>>`) that
/// the layer `$layer` wraps around an inner service: `Layer` for the layer (through its
/// `shared()`), the accessors of the inner service, taking the ready inner service for a
/// call, `Clone` and `Debug`.
macro_rules! limit_service {
    ($layer:ident => $service:ident) => {
        impl<S, C, K, H> ::tower::Layer<S> for $layer<C, K, H> {
            type Service = $service<S, C, K, H>;

            fn layer(&self, inner: S) -> Self::Service {
                $service {
                    inner,
                    shared: ::std::sync::Arc::clone(self.shared()),
                }
            }
        }

        impl<S, C, K, H> $service<S, C, K, H> {
            /// The wrapped service.
            ///
            /// ```no_run
            #[doc = concat!("# fn show<S, C, K>(service: &redkit::middleware::", stringify!($service), "<S, C, K>) { let _inner: &S = service.get_ref(); }")]
            /// ```
            pub fn get_ref(&self) -> &S {
                &self.inner
            }

            /// The wrapped service, mutably.
            ///
            /// ```no_run
            #[doc = concat!("# fn show<S, C, K>(service: &mut redkit::middleware::", stringify!($service), "<S, C, K>) { let _inner: &mut S = service.get_mut(); }")]
            /// ```
            pub fn get_mut(&mut self) -> &mut S {
                &mut self.inner
            }

            /// The wrapped service, unwrapped.
            ///
            /// ```no_run
            #[doc = concat!("# fn show<S, C, K>(service: redkit::middleware::", stringify!($service), "<S, C, K>) { let _inner: S = service.into_inner(); }")]
            /// ```
            pub fn into_inner(self) -> S {
                self.inner
            }
        }

        impl<S: Clone, C, K, H> $service<S, C, K, H> {
            /// The inner service made ready by `poll_ready`, for the future of one call; a
            /// fresh clone stays for the next call.
            fn take_ready(&mut self) -> S {
                let clone = self.inner.clone();
                ::std::mem::replace(&mut self.inner, clone)
            }
        }

        impl<S: Clone, C, K, H> Clone for $service<S, C, K, H> {
            fn clone(&self) -> Self {
                Self {
                    inner: self.inner.clone(),
                    shared: ::std::sync::Arc::clone(&self.shared),
                }
            }
        }

        impl<S: ::std::fmt::Debug, C, K, H> ::std::fmt::Debug for $service<S, C, K, H> {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.debug_struct(stringify!($service))
                    .field("inner", &self.inner)
                    .finish_non_exhaustive()
            }
        }
    };
}

pub(super) use limit_service;
