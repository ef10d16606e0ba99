//! [`Respond`]: a hook that shapes the responses the layer writes itself (429, 503, 400, 403).

use http::Response;

use crate::rate_limit::Decision;

/// Why a layer ([`RateLimitLayer`](super::RateLimitLayer) or
/// [`ConcurrencyLimitLayer`](super::ConcurrencyLimitLayer)) answers a request itself instead
/// of calling the inner service.
///
/// ```
/// use redkit::middleware::Rejection;
/// fn title(r: &Rejection<'_>) -> &'static str {
///     match r {
///         Rejection::Limited { .. } | Rejection::Full { .. } => "Too Many Requests",
///         Rejection::RedisUnavailable => "Service Unavailable",
///         Rejection::UnknownClient => "Bad Request",
///         _ => "Error",
///     }
/// }
/// assert_eq!(title(&Rejection::UnknownClient), "Bad Request");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rejection<'a> {
    /// Over the limit: `429` with `Retry-After` and the `RateLimit` headers.
    Limited {
        /// The name of the limiter that refused (the policy of the route).
        limiter: &'a str,
        /// The limiter's decision (quota, retry after).
        decision: &'a Decision,
    },
    /// Redis failed or timed out and the layer is
    /// [`FailMode::Closed`](super::FailMode::Closed): `503` with `Retry-After: 1`.
    RedisUnavailable,
    /// The client could not be identified and the layer is
    /// [`UnknownClient::Reject`](super::UnknownClient::Reject): `400`.
    UnknownClient,
    /// The client's address is in the policies' deny list
    /// ([`AccessList`](super::AccessList)): `403 Forbidden`, no Redis call.
    Denied,
    /// Every slot of the client is held ([`ConcurrencyLimitLayer`](super::ConcurrencyLimitLayer)):
    /// the full status (429 by default) with `Retry-After`.
    Full {
        /// The name of the concurrency policy.
        limiter: &'a str,
        /// When the earliest held slot's lease ends (a lower bound of when one frees).
        retry_after: std::time::Duration,
    },
}

/// Shapes the responses the layer writes itself. The layer first builds its default response
/// (status and headers set, empty body) and hands it to the hook, which may change anything:
/// body, content type, extra headers, even the status.
///
/// Implemented for [`DefaultResponses`] (keeps the default) and, through
/// [`RateLimitBuilder::respond_with`](super::RateLimitBuilder::respond_with) and
/// [`ConcurrencyLimitBuilder::respond_with`](super::ConcurrencyLimitBuilder::respond_with), for
/// any `Fn(&Rejection<'_>, Response<B>) -> Response<B>`.
///
/// ```
/// use http::Response;
/// use redkit::middleware::{Rejection, Respond};
///
/// struct Plain;
/// impl Respond<String> for Plain {
///     fn respond(&self, r: &Rejection<'_>, mut res: Response<String>) -> Response<String> {
///         *res.body_mut() = format!("{r:?}");
///         res
///     }
/// }
/// let res = Plain.respond(&Rejection::UnknownClient, Response::new(String::new()));
/// assert_eq!(res.body(), "UnknownClient");
/// ```
pub trait Respond<B>: Send + Sync + 'static {
    /// Returns the response to send for `rejection`, given the layer's default one.
    ///
    /// ```
    /// use http::{Response, StatusCode};
    /// use redkit::middleware::{DefaultResponses, Rejection, Respond};
    /// // the layer's default answer to a denied client, as it hands it to the hook
    /// let mut default = Response::new(());
    /// *default.status_mut() = StatusCode::FORBIDDEN;
    /// let res = DefaultResponses.respond(&Rejection::Denied, default);
    /// assert_eq!(res.status(), StatusCode::FORBIDDEN); // kept as it was
    /// ```
    fn respond(&self, rejection: &Rejection<'_>, response: Response<B>) -> Response<B>;
}

/// The layer's own responses, unchanged: empty bodies, status and headers only.
///
/// ```
/// use redkit::middleware::{DefaultResponses, Rejection, Respond};
/// let res = DefaultResponses.respond(&Rejection::UnknownClient, http::Response::new(()));
/// assert_eq!(res.status(), http::StatusCode::OK); // the layer sets the status before
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DefaultResponses;

impl<B> Respond<B> for DefaultResponses {
    fn respond(&self, _rejection: &Rejection<'_>, response: Response<B>) -> Response<B> {
        response
    }
}

/// A closure as a [`Respond`] hook (see
/// [`RateLimitBuilder::respond_with`](super::RateLimitBuilder::respond_with)).
///
/// ```
/// use redkit::middleware::{Rejection, Respond, RespondWith};
/// let hook = RespondWith::new(|_r: &Rejection<'_>, mut res: http::Response<String>| {
///     res.body_mut().push_str("slow down");
///     res
/// });
/// let res = hook.respond(&Rejection::RedisUnavailable, http::Response::new(String::new()));
/// assert_eq!(res.body(), "slow down");
/// ```
#[derive(Clone, Copy)]
pub struct RespondWith<F>(F);

impl<F> RespondWith<F> {
    /// Wraps `f`.
    ///
    /// ```
    /// let _hook = redkit::middleware::RespondWith::new(
    ///     |_r: &redkit::middleware::Rejection<'_>, res: http::Response<()>| res,
    /// );
    /// ```
    pub fn new(f: F) -> Self {
        Self(f)
    }
}

impl<F> std::fmt::Debug for RespondWith<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RespondWith(..)")
    }
}

impl<B, F> Respond<B> for RespondWith<F>
where
    F: Fn(&Rejection<'_>, Response<B>) -> Response<B> + Send + Sync + 'static,
{
    fn respond(&self, rejection: &Rejection<'_>, response: Response<B>) -> Response<B> {
        (self.0)(rejection, response)
    }
}
