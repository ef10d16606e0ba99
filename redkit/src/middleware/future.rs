//! [`ResponseFuture`]: the future of a [`RateLimit`](super::RateLimit) call.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use http::Response;
use pin_project_lite::pin_project;

use super::headers::Answer;

type Boxed<T> = Pin<Box<dyn Future<Output = T> + Send>>;

pin_project! {
    /// The response future of [`RateLimit`](super::RateLimit) (and of
    /// [`ConcurrencyLimit`](super::ConcurrencyLimit)) over an inner service whose future is
    /// `F`. A check answered in process (leased units, a deny-cache refusal, an allowlisted
    /// client) is settled before it exists: it is then the inner service's own future (with
    /// the quota headers added to its response), or the layer's refusal, allocating nothing.
    /// A check that goes to Redis is a boxed future: the check (bounded by the layer's
    /// timeout), then the inner service or a response of the layer's own.
    ///
    /// ```no_run
    /// # fn show<F: std::future::Future>(f: redkit::middleware::ResponseFuture<F>) { let _ = f; }
    /// ```
    pub struct ResponseFuture<F>
    where
        F: Future,
    {
        #[pin]
        kind: Kind<F>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F>
    where
        F: Future,
    {
        // The inner service's future; `headers` go on its response.
        Inner {
            #[pin]
            future: F,
            headers: Option<Answer>,
        },
        // An answer made already (taken out when polled).
        Ready {
            output: Option<F::Output>,
        },
        // The check over Redis, then the inner service.
        Boxed {
            future: Boxed<F::Output>,
        },
    }
}

impl<F: Future> ResponseFuture<F> {
    /// The inner service's future, `headers` added to its response.
    pub(crate) fn inner(future: F, headers: Option<Answer>) -> Self {
        Self {
            kind: Kind::Inner { future, headers },
        }
    }

    /// An answer already made (a refusal settled in process).
    pub(crate) fn ready(output: F::Output) -> Self {
        Self {
            kind: Kind::Ready {
                output: Some(output),
            },
        }
    }

    /// A future of the layer's own (a check over Redis, then the inner service).
    pub(crate) fn boxed(future: impl Future<Output = F::Output> + Send + 'static) -> Self {
        Self {
            kind: Kind::Boxed {
                future: Box::pin(future),
            },
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Inner { future, headers } => {
                let mut output = ready!(future.poll(cx));
                if let (Ok(response), Some(answer)) = (&mut output, headers.take()) {
                    answer.insert(response.headers_mut());
                }
                Poll::Ready(output)
            }
            KindProj::Ready { output } => match output.take() {
                Some(output) => Poll::Ready(output),
                // Polled after it answered: a misuse of the future, answered as a future
                // that never completes rather than with a panic.
                None => Poll::Pending,
            },
            KindProj::Boxed { future } => future.as_mut().poll(cx),
        }
    }
}

impl<F: Future> fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ResponseFuture(..)")
    }
}
