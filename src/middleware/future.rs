//! [`ResponseFuture`]: the future of a [`RateLimit`](super::RateLimit) call.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Response;

type Boxed<B, E> = Pin<Box<dyn Future<Output = Result<Response<B>, E>> + Send>>;

/// The response future of [`RateLimit`](super::RateLimit): the Redis check (bounded by the
/// layer's timeout), then the inner service or a response of the layer's own.
/// Also the future of [`ConcurrencyLimit`](super::ConcurrencyLimit).
///
/// ```no_run
/// # fn show<B, E>(f: redkit::middleware::ResponseFuture<B, E>) { let _ = f; }
/// ```
pub struct ResponseFuture<B, E> {
    inner: Boxed<B, E>,
}

impl<B, E> ResponseFuture<B, E> {
    pub(crate) fn new<F>(future: F) -> Self
    where
        F: Future<Output = Result<Response<B>, E>> + Send + 'static,
    {
        Self {
            inner: Box::pin(future),
        }
    }

    /// A response already made (a refusal settled in process).
    pub(crate) fn ready(response: Response<B>) -> Self
    where
        B: Send + 'static,
        E: 'static,
    {
        // Holds no `E` (`std::future::ready` would, and so need `E: Send`).
        Self::new(async move { Ok(response) })
    }
}

impl<B, E> Future for ResponseFuture<B, E> {
    type Output = Result<Response<B>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

impl<B, E> fmt::Debug for ResponseFuture<B, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ResponseFuture(..)")
    }
}
