//! [`ConcurrencyLimit`]: the service built by [`ConcurrencyLimitLayer`](super::ConcurrencyLimitLayer).

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response, StatusCode};
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

/// Gives a block's slot back in process (no Redis call) and counts the request as finished.
fn give_back<C, K, H>(shared: &Shared<C, K, H>, slot: BlockSlot) {
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

fn refuse<B: Default>(status: StatusCode, retry_after: u64) -> Response<B> {
    refusal(status, Some(retry_after))
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
            let policy = &shared.policy;
            // A slot of this instance's block when it has one: no Redis call, and no large
            // future in this one (the other paths are boxed).
            let in_block = shared.blocks.as_ref().and_then(|b| b.try_admit(&resource));
            let acquired = match in_block {
                Some(slot) => Ok(Acquire::Acquired(Held::Block(slot))),
                None => Box::pin(acquire(&shared, &resource)).await,
            };
            match acquired {
                Ok(Acquire::Acquired(permit)) => {
                    bump(&stats.admitted);
                    metrics::concurrency_limited(&shared.metrics, Verdict::Allowed);
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
                Ok(Acquire::Busy(held)) => {
                    bump(&stats.rejected);
                    metrics::concurrency_limited(&shared.metrics, Verdict::Limited);
                    let retry_after = held.ttl.unwrap_or_default();
                    let response = refuse(shared.full_status, retry_after_secs(retry_after));
                    let rejection = Rejection::Full {
                        limiter: &policy.name,
                        retry_after,
                    };
                    Ok(shared.common.respond.respond(&rejection, response))
                }
                // Only with `require_replicas` in the options: the permit was given back.
                Ok(_) => {
                    bump(&stats.rejected);
                    metrics::concurrency_limited(&shared.metrics, Verdict::Limited);
                    let rejection = Rejection::Full {
                        limiter: &policy.name,
                        retry_after: Duration::from_secs(1),
                    };
                    Ok(shared
                        .common
                        .respond
                        .respond(&rejection, refuse(shared.full_status, 1)))
                }
                Err(error) => {
                    bump(&stats.common.redis_failures);
                    match shared.common.fail_mode {
                        FailMode::Closed => {
                            metrics::concurrency_limited(&shared.metrics, Verdict::FailClosed);
                            tracing::warn!(%error, name = %policy.name, "concurrency limit failed: refusing (fail-closed)");
                            Ok(shared.common.fail_closed(&stats.common))
                        }
                        _ => {
                            bump(&stats.common.failed_open);
                            metrics::concurrency_limited(&shared.metrics, Verdict::FailOpen);
                            tracing::warn!(%error, name = %policy.name, "concurrency limit failed: letting request through (fail-open)");
                            inner.call(req).await
                        }
                    }
                }
            }
        })
    }
}
