//! [`ConcurrencyLimit`]: the service built by [`ConcurrencyLimitLayer`](super::ConcurrencyLimitLayer).

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use redis::aio::ConnectionLike;
use tower::Service;

use crate::error::{Error, Result};
use crate::lock::{Acquire, HeldPermits, PermitGuard};
use crate::middleware::client::Client;
use crate::middleware::common::{bump, limit_service, refusal, FailMode};
use crate::middleware::future::ResponseFuture;
use crate::middleware::headers::retry_after_secs;
use crate::middleware::key::{KeyExtractor, RequestInfo};
use crate::middleware::metrics::{self, Verdict};
use crate::middleware::respond::{DefaultResponses, Rejection, Respond};

use super::blocks::{Admit, BlockSlot};
use super::fallback::LocalSlot;
use super::layer::{resource_of, ConcurrencyLimitLayer, Shared};
use super::Stats;

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

limit_service!(ConcurrencyLimitLayer => ConcurrencyLimit);

/// A held slot: given back by [`release`](Self::release), or from a spawned task when dropped
/// (a cancelled request).
struct Slot<C, K, H>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
    K: Send + Sync + 'static,
    H: Send + Sync + 'static,
{
    shared: Arc<Shared<C, K, H>>,
    permit: Option<Held>,
}

/// What a slot holds: a permit of its own in Redis, or a slot of this instance's block.
/// (The permit is boxed: a block's slot, the common case with a lease, moves a small value.)
enum Held {
    Permit(Box<PermitGuard>),
    Block(BlockSlot),
    /// Taken in process while Redis failed ([`FailMode::Local`]).
    Local(LocalSlot),
}

impl<C, K, H> Slot<C, K, H>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
    K: Send + Sync + 'static,
    H: Send + Sync + 'static,
{
    async fn release(mut self) {
        match self.permit.take() {
            // Boxed: a block's slot does not carry the release's large future.
            Some(Held::Permit(permit)) => {
                Box::pin(release(Arc::clone(&self.shared), *permit)).await
            }
            Some(Held::Block(slot)) => give_back(&self.shared, slot),
            Some(Held::Local(slot)) => give_back(&self.shared, slot),
            None => {}
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
        let permit = match self.permit.take() {
            Some(Held::Permit(permit)) => permit,
            Some(Held::Block(slot)) => return give_back(&self.shared, slot),
            Some(Held::Local(slot)) => return give_back(&self.shared, slot),
            None => return,
        };
        let shared = Arc::clone(&self.shared);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(release(shared, *permit))),
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
    metrics::concurrency_active(&shared.metrics, -1.0);
    let mut conn = shared.common.conn.clone();
    let outcome = tokio::time::timeout(
        shared.common.timeout,
        shared.policy.semaphore.release(&mut conn, permit),
    )
    .await;
    finish(
        &shared.stats,
        outcome.map_err(|_| Error::Timeout(shared.common.timeout)),
    );
}

/// Gives a slot held in process back (a block's, or one taken while Redis failed: no Redis
/// call) and counts the request as finished.
fn give_back<C, K, H, T>(shared: &Shared<C, K, H>, slot: T) {
    drop(slot);
    metrics::concurrency_active(&shared.metrics, -1.0);
    finish::<()>(&shared.stats, Ok(Ok(())));
}

fn finish<T>(stats: &Stats, outcome: std::result::Result<Result<T>, Error>) {
    bump(&stats.finished);
    if let Err(error) | Ok(Err(error)) = outcome {
        bump(&stats.common.redis_failures);
        tracing::warn!(%error, "concurrency limit: release failed (the slot comes back when its lease ends)");
    }
}

/// A slot for a request of `resource` that found none free in this instance's block (or has
/// no lease): from the block after a call that grows it, or a plain permit with its
/// watchdog; bounded by the timeout.
async fn acquire<C, K, H>(
    shared: &Shared<C, K, H>,
    resource: &str,
) -> Result<Acquire<Held, HeldPermits>>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    if let Some(leased) = leased(shared, resource).await {
        return leased;
    }
    let policy = &shared.policy;
    let mut conn = shared.common.conn.clone();
    let acquire = policy
        .semaphore
        .acquire(&mut conn, resource, policy.permits(), &shared.options);
    let acquired = tokio::time::timeout(shared.common.timeout, acquire)
        .await
        .unwrap_or(Err(Error::Timeout(shared.common.timeout)))?;
    Ok(match acquired {
        Acquire::Acquired(mut permit) => {
            if let Err(error) = policy.semaphore.watch(&shared.common.conn, &mut permit) {
                tracing::warn!(%error, "concurrency limit: no watchdog for the slot");
            }
            Acquire::Acquired(Held::Permit(Box::new(permit)))
        }
        Acquire::Busy(held) => Acquire::Busy(held),
        Acquire::NotReplicated {
            replicas,
            requested,
        } => Acquire::NotReplicated {
            replicas,
            requested,
        },
    })
}

/// The answer of this instance's leased blocks after a call that grows one, bounded by the
/// timeout; `None` without a lease, or when the request must take a plain permit (see
/// [`Blocks`](super::blocks::Blocks)).
async fn leased<C, K, H>(
    shared: &Shared<C, K, H>,
    resource: &str,
) -> Option<Result<Acquire<Held, HeldPermits>>>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    let blocks = shared.blocks.as_ref()?;
    let sem = &shared.policy.semaphore;
    let key = match sem.key(resource) {
        Ok(key) => key,
        Err(error) => return Some(Err(error)),
    };
    let admit = blocks.admit(sem, &shared.common.conn, resource, &key);
    let admitted = match tokio::time::timeout(shared.common.timeout, admit).await {
        Ok(admitted) => admitted?,
        Err(_) => Err(Error::Timeout(shared.common.timeout)),
    };
    Some(admitted.map(|admit| match admit {
        Admit::Slot(slot) => Acquire::Acquired(Held::Block(slot)),
        Admit::Full(retry_after) => {
            Acquire::Busy(HeldPermits::by(shared.policy.permits(), Some(retry_after)))
        }
    }))
}

/// The full status with `Retry-After` (whole seconds, at least 1), shaped by the layer's
/// [`Respond`].
fn full<C, K, H: Respond<B>, B: Default>(
    shared: &Shared<C, K, H>,
    retry_after: Duration,
) -> Response<B> {
    let response = refusal(shared.full_status, Some(retry_after_secs(retry_after)));
    let rejection = Rejection::Full {
        limiter: &shared.policy.name,
        retry_after,
    };
    shared.common.respond.respond(&rejection, response)
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
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<std::result::Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let mut inner = self.take_ready();
        let shared = Arc::clone(&self.shared);
        ResponseFuture::boxed(async move {
            let stats = &shared.stats;
            let id = shared.common.extractor.extract(&RequestInfo::new(&req));
            let unknown = || metrics::concurrency_limited(&shared.metrics, Verdict::UnknownClient);
            let key = match shared.common.client(id, &stats.common, unknown) {
                Client::Key(key) => key,
                Client::Pass => return inner.call(req).await,
                Client::Refused(response) => return Ok(response),
            };
            let resource = resource_of(&key);
            // A slot of this instance's block when it has one: no Redis call, and no large
            // future in this one (the other paths are boxed).
            let in_block = shared.blocks.as_ref().and_then(|b| b.try_admit(&resource));
            let acquired = match in_block {
                Some(slot) => Ok(Acquire::Acquired(Held::Block(slot))),
                None => Box::pin(acquire(&shared, &resource)).await,
            };
            let acquired = match acquired {
                Ok(acquired) => acquired,
                Err(error) => match fall_back(&shared, &resource, error) {
                    Ok(slot) => Acquire::Acquired(Held::Local(slot)),
                    Err(Fallen::Open) => return inner.call(req).await,
                    Err(Fallen::Closed) => return Ok(shared.common.fail_closed(&stats.common)),
                    Err(Fallen::Full) => return Ok(full(&shared, Duration::from_secs(1))),
                },
            };
            match acquired {
                Acquire::Acquired(permit) => {
                    bump(&stats.admitted);
                    if !matches!(permit, Held::Local(_)) {
                        metrics::concurrency_limited(&shared.metrics, Verdict::Allowed);
                    }
                    metrics::concurrency_active(&shared.metrics, 1.0);
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
                Acquire::Busy(held) => {
                    bump(&stats.rejected);
                    metrics::concurrency_limited(&shared.metrics, Verdict::Limited);
                    Ok(full(&shared, held.ttl.unwrap_or_default()))
                }
                // Only with `require_replicas` in the options: the permit was given back.
                _ => {
                    bump(&stats.rejected);
                    metrics::concurrency_limited(&shared.metrics, Verdict::Limited);
                    Ok(full(&shared, Duration::from_secs(1)))
                }
            }
        })
    }
}

/// What a failed acquire comes to when no slot is taken in process.
enum Fallen {
    Open,
    Closed,
    /// [`FailMode::Local`]: this instance's share of the client's slots is in flight.
    Full,
}

/// The fail mode's answer to `error` (counted and logged here): a slot taken in process
/// ([`FailMode::Local`] under its share), or how to answer without one.
fn fall_back<C, K, H>(
    shared: &Shared<C, K, H>,
    resource: &str,
    error: Error,
) -> std::result::Result<LocalSlot, Fallen> {
    let stats = &shared.stats;
    let name = &shared.policy.name;
    bump(&stats.common.redis_failures);
    match (shared.common.fail_mode, &shared.local) {
        (FailMode::Closed, _) => {
            metrics::concurrency_limited(&shared.metrics, Verdict::FailClosed);
            tracing::warn!(%error, %name, "concurrency limit failed: refusing (fail-closed)");
            Err(Fallen::Closed)
        }
        (FailMode::Local { .. }, Some(local)) => match local.try_take(resource) {
            Some(slot) => {
                bump(&stats.fallback_allowed);
                metrics::concurrency_limited(&shared.metrics, Verdict::FallbackAllowed);
                tracing::warn!(%error, %name, "concurrency limit failed: a slot of this instance's share, in process (local fallback)");
                Ok(slot)
            }
            None => {
                bump(&stats.fallback_limited);
                metrics::concurrency_limited(&shared.metrics, Verdict::FallbackLimited);
                tracing::warn!(%error, %name, "concurrency limit failed: this instance's share is in flight (local fallback)");
                Err(Fallen::Full)
            }
        },
        _ => {
            bump(&stats.common.failed_open);
            metrics::concurrency_limited(&shared.metrics, Verdict::FailOpen);
            tracing::warn!(%error, %name, "concurrency limit failed: letting request through (fail-open)");
            Err(Fallen::Open)
        }
    }
}
