//! [`RateLimit`]: the service built by [`RateLimitLayer`](crate::middleware::RateLimitLayer).

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::header::{HeaderValue, RETRY_AFTER};
use http::{Request, Response, StatusCode};
use redis::aio::ConnectionLike;
use tower::Service;

use super::layer::{Live, RateLimitLayer, Shared};
use super::outcome::{LimitOutcome, Unchecked};
use crate::error::{Error, Result};
use crate::middleware::access::Access;
use crate::middleware::client::Client;
use crate::middleware::common::{bump, limit_service, refusal, FailMode};
use crate::middleware::future::ResponseFuture;
use crate::middleware::headers::{self, QuotaHeaders};
use crate::middleware::key::{ClientId, KeyExtractor, RequestInfo};
use crate::middleware::metrics::{self, Verdict};
use crate::middleware::respond::{DefaultResponses, Rejection, Respond};
use crate::rate_limit::{Decision, LimitKey, Limiter};

/// The rate-limiting service wrapping `S` (see [`RateLimitLayer`](crate::middleware::RateLimitLayer)).
///
/// ```no_run
/// # use redkit::rate_limit::Rate;
/// # async fn run(conn: redis::aio::ConnectionManager) -> redkit::Result<()> {
/// # use std::time::Duration;
/// use tower::Layer;
/// use redkit::{middleware::RateLimitLayer, rate_limit::FixedWindow};
/// let layer = RateLimitLayer::new(FixedWindow::new("api", Rate::per_second(redkit::nonzero!(10)))?, conn);
/// let service = layer.layer(tower::service_fn(|_req: http::Request<String>| async {
///     Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
/// }));
/// # let _ = service; Ok(()) }
/// ```
pub struct RateLimit<S, C, K, H = DefaultResponses> {
    inner: S,
    shared: Arc<Shared<C, K, H>>,
}

limit_service!(RateLimitLayer => RateLimit);

/// Checks `key` within `timeout`: in process when the limiter can answer so (leased units,
/// a deny-cache refusal: no timer, no connection), else over a clone of `conn`. A grouped check (a fixed window with
/// [group commit](crate::rate_limit::Grouped)) runs in a task of its
/// own: the request's future is dropped when its client goes away, and a check that leads a
/// group must still read the reply that settles the other requests in it. That task is
/// given twice `timeout`, so the reply is read for the others even after the leader's own
/// request gave up (at `timeout`: the request never waits longer), as long as it comes
/// within twice the leader's `timeout`; a task stays bounded in time.
async fn check<C>(limiter: &Limiter, conn: &C, key: LimitKey, timeout: Duration) -> Result<Decision>
where
    C: ConnectionLike + Clone + Send + 'static,
{
    if let Some(decision) = limiter.answer_locally(&key) {
        return Ok(decision);
    }
    let mut conn = conn.clone();
    let grouped = limiter.is_grouped();
    if !grouped {
        return tokio::time::timeout(timeout, limiter.check(&mut conn, &key))
            .await
            .unwrap_or(Err(Error::Timeout(timeout)));
    }
    let limiter = limiter.clone();
    let bound = timeout.saturating_mul(2);
    let task = tokio::spawn(async move {
        tokio::time::timeout(bound, limiter.check(&mut conn, &key))
            .await
            .unwrap_or(Err(Error::Timeout(bound)))
    });
    match tokio::time::timeout(timeout, task).await {
        Ok(Ok(checked)) => checked,
        Ok(Err(stopped)) => Err(Error::Interrupted {
            detail: format!("the task of a grouped rate-limit check stopped: {stopped}"),
        }),
        Err(_) => Err(Error::Timeout(timeout)),
    }
}

impl<S, C, K, H, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S, C, K, H>
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
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqBody>) -> Self::Future {
        // One set of policies from here to the end, whatever replaces it meanwhile. The read
        // guard is let go before the inner service is called.
        let guard = self.shared.live_ref();
        let (route, limiter) = guard.policies.route_for(req.uri().path());
        let key = match client(&self.shared, &guard, route, &mut req) {
            Client::Key(key) => key,
            Client::Pass => {
                drop(guard);
                return ResponseFuture::inner(self.inner.call(req), None);
            }
            Client::Refused(response) => return ResponseFuture::ready(Ok(response)),
        };
        // Answered in process (leased units, a deny-cache refusal): settled here, before any
        // future of the round trip exists; the inner service (made ready by `poll_ready`) is
        // called here too, so it is not cloned.
        if let Some(decision) = limiter.answer_locally(&key) {
            if let Some(refused) = settle(&self.shared, &guard, route, &decision, &mut req) {
                return ResponseFuture::ready(Ok(refused));
            }
            let answer = (self.shared.quota_headers == QuotaHeaders::Always).then(|| {
                headers::Answer::of(guard.policy_headers[route].as_ref(), limiter, &decision)
            });
            drop(guard);
            return ResponseFuture::inner(self.inner.call(req), answer);
        }
        let live = Arc::clone(&guard);
        drop(guard);
        let mut inner = self.take_ready();
        let shared = Arc::clone(&self.shared);
        ResponseFuture::boxed(async move {
            let stats = shared.stats.mine();
            let limiter = live.policies.limiter(route);
            let name = limiter.name();
            let decide = |verdict| decided(&live, route, verdict);
            let policy = live.policy_headers[route].as_ref();
            // The key again only for the local fallback (no copy per request otherwise).
            let fallback_key = shared.local.as_ref().map(|_| key.clone());
            let checked = check(limiter, &shared.common.conn, key, shared.common.timeout).await;
            let decision = match checked {
                Ok(decision) => decision,
                Err(error) => {
                    bump(&stats.common.redis_failures);
                    match (shared.common.fail_mode, &shared.local) {
                        (FailMode::Closed, _) => {
                            decide(Verdict::FailClosed);
                            tracing::warn!(%error, limiter = name, "rate limit check failed: refusing (fail-closed)");
                            return Ok(shared.common.fail_closed(&stats.common));
                        }
                        (FailMode::Local { .. }, Some(local)) => {
                            tracing::warn!(%error, limiter = name, "rate limit check failed: this instance's share, in process (local fallback)");
                            let key = fallback_key.unwrap_or_else(LimitKey::unknown_client);
                            let decision = local.check(limiter, &key);
                            let (counter, verdict) = if decision.is_allowed() {
                                (&stats.fallback_allowed, Verdict::FallbackAllowed)
                            } else {
                                (&stats.fallback_limited, Verdict::FallbackLimited)
                            };
                            bump(counter);
                            decide(verdict);
                            if decision.is_allowed() {
                                req.extensions_mut()
                                    .insert(LimitOutcome::Unchecked(Unchecked::LocalFallback));
                                return inner.call(req).await;
                            }
                            return Ok(limited(&shared, policy, limiter, &decision));
                        }
                        _ => {
                            bump(&stats.common.failed_open);
                            decide(Verdict::FailOpen);
                            tracing::warn!(%error, limiter = name, "rate limit check failed: letting request through (fail-open)");
                            req.extensions_mut()
                                .insert(LimitOutcome::Unchecked(Unchecked::RedisUnavailable));
                            return inner.call(req).await;
                        }
                    }
                }
            };
            if let Some(refused) = settle(&shared, &live, route, &decision, &mut req) {
                return Ok(refused);
            }
            let mut response = inner.call(req).await?;
            if shared.quota_headers == QuotaHeaders::Always {
                headers::apply(response.headers_mut(), policy, limiter, &decision);
            }
            Ok(response)
        })
    }
}

/// The client of `req` by the layer's key extractor, its access list and its unknown-client
/// rule; what it decides without a check is counted and recorded here.
fn client<C, K, H, ReqBody, B>(
    shared: &Shared<C, K, H>,
    live: &Live,
    route: usize,
    req: &mut Request<ReqBody>,
) -> Client<B>
where
    K: KeyExtractor,
    H: Respond<B>,
    B: Default,
{
    let stats = shared.stats.mine();
    let decide = |verdict| decided(live, route, verdict);
    let id = shared.common.extractor.extract(&RequestInfo::new(req));
    if let Some(ClientId::Ip(ip)) = &id {
        match live.policies.access().decide(*ip) {
            Some(Access::Allowed) => {
                bump(&stats.allowlisted);
                decide(Verdict::Allowlisted);
                req.extensions_mut()
                    .insert(LimitOutcome::Unchecked(Unchecked::Allowlisted));
                return Client::Pass;
            }
            Some(Access::Denied) => {
                bump(&stats.denied);
                decide(Verdict::Denied);
                let response = refusal(StatusCode::FORBIDDEN, None);
                return Client::Refused(
                    shared.common.respond.respond(&Rejection::Denied, response),
                );
            }
            _ => {}
        }
    }
    let unknown = || {
        decide(Verdict::UnknownClient);
        tracing::debug!(path = req.uri().path(), "rate limit: client unknown");
    };
    match shared.common.client(id, &stats.common, unknown) {
        // Only an unknown client passes here (under `UnknownClient::Allow`).
        Client::Pass => {
            req.extensions_mut()
                .insert(LimitOutcome::Unchecked(Unchecked::UnknownClient));
            Client::Pass
        }
        client => client,
    }
}

/// What a decision makes of a request: `None` to let it through (allowed, or limited under
/// shadow mode: its outcome in the request's extensions), else the 429. Counted and recorded.
fn settle<C, K, H, ReqBody, B>(
    shared: &Shared<C, K, H>,
    live: &Live,
    route: usize,
    decision: &Decision,
    req: &mut Request<ReqBody>,
) -> Option<Response<B>>
where
    H: Respond<B>,
    B: Default,
{
    let stats = shared.stats.mine();
    let limiter = live.policies.limiter(route);
    let decide = |verdict| decided(live, route, verdict);
    let shadow = !decision.is_allowed() && live.policies.is_shadow(limiter.name());
    if decision.is_allowed() || shadow {
        let outcome = if shadow {
            bump(&stats.shadow_limited);
            decide(Verdict::ShadowLimited);
            LimitOutcome::WouldLimit(*decision)
        } else {
            bump(&stats.allowed);
            decide(Verdict::Allowed);
            LimitOutcome::Checked(*decision)
        };
        req.extensions_mut().insert(outcome);
        None
    } else {
        bump(&stats.limited);
        decide(Verdict::Limited);
        let policy = live.policy_headers[route].as_ref();
        Some(limited(shared, policy, limiter, decision))
    }
}

/// Records a decision under the limiter of index `route`: the `redkit.rate_limiting.requests`
/// metric (its keys built with the policies), and a `DEBUG` event on the request's span
/// (target `redkit::middleware`).
fn decided(live: &Live, route: usize, verdict: Verdict) {
    let policy = live.policies.limiter(route).name();
    metrics::rate_limited(&live.metrics[route], verdict);
    tracing::event!(
        target: "redkit::middleware",
        tracing::Level::DEBUG,
        { redkit.rate_limiting.policy = policy, redkit.rate_limiting.result = verdict.label() },
        "rate limit decision"
    );
}

/// The 429 of a refused request: `Retry-After` and the `RateLimit` headers, shaped by the
/// layer's [`Respond`].
fn limited<C, K, H: Respond<B>, B: Default>(
    shared: &Shared<C, K, H>,
    policy: Option<&HeaderValue>,
    limiter: &Limiter,
    decision: &Decision,
) -> Response<B> {
    let mut response = refusal(StatusCode::TOO_MANY_REQUESTS, None);
    headers::apply(response.headers_mut(), policy, limiter, decision);
    if decision.retry_after().is_none() {
        // Cost above the limit: it will never pass; still tell clients to back off.
        response.headers_mut().insert(
            RETRY_AFTER,
            HeaderValue::from(headers::retry_after_secs(limiter.window())),
        );
    }
    let rejection = Rejection::Limited {
        limiter: limiter.name(),
        decision,
    };
    shared.common.respond.respond(&rejection, response)
}
