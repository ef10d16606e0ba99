//! The layers' own cost per request, without a network: each stack's service called in a loop
//! on requests as axum hands them over (`ConnectInfo` of the peer set), the inner service a
//! `service_fn` answering "hello", boxed as axum boxes a route. Every stack runs its round in turn, rounds
//! alternate in order, and the median round is kept: this process's CPU time per request
//! (every thread, so a lease call's share too, but not the time a check waits for Redis),
//! what wrk's requests/s leaves in the machine's noise. Two shapes: one task, and 8 tasks at
//! once on the 2 worker threads (what shared state costs when both cores use it).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::ConnectInfo;
use http::{Request, Response};
use tower::util::BoxCloneSyncService;
use tower::{Service, ServiceExt};

/// One stack: calls its service once per request, `n` times, on `tasks` tasks at once.
pub type Stack = Arc<dyn Fn(u64) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// The inner service every stack wraps: "hello", boxed as axum boxes a route's handler (a
/// `BoxCloneSyncService`, whose clone allocates).
pub fn hello() -> BoxCloneSyncService<Request<Body>, Response<Body>, Infallible> {
    BoxCloneSyncService::new(tower::service_fn(|_req: Request<Body>| async {
        Ok(Response::new(Body::from("hello")))
    }))
}

/// A request as axum's `into_make_service_with_connect_info` hands it over.
pub fn request() -> Request<Body> {
    let mut req = Request::builder().uri("/").body(Body::empty()).unwrap();
    let peer: SocketAddr = "127.0.0.1:40000".parse().unwrap();
    req.extensions_mut().insert(ConnectInfo(peer));
    req
}

/// A [`Stack`] calling a clone of `svc` per request, as hyper does per connection.
pub fn stack<S>(svc: S) -> Stack
where
    S: Service<Request<Body>, Response = Response<Body>> + Clone + Send + Sync + 'static,
    S::Future: Send,
    S::Error: std::fmt::Debug,
{
    Arc::new(move |n| {
        let svc = svc.clone();
        Box::pin(async move {
            let mut svc = svc;
            for _ in 0..n {
                let response = svc.ready().await.unwrap().call(request()).await.unwrap();
                std::hint::black_box(response);
            }
        })
    })
}

/// CPU ns per request of each stack (median of `rounds` rounds of `n` requests on each of
/// `tasks` tasks).
pub async fn measure(stacks: &[(&str, Stack)], n: u64, rounds: usize, tasks: u64) -> Vec<f64> {
    let mut samples = vec![Vec::new(); stacks.len()];
    for round in 0..rounds {
        let order: Vec<usize> = if round % 2 == 0 {
            (0..stacks.len()).collect()
        } else {
            (0..stacks.len()).rev().collect()
        };
        for i in order {
            let run = &stacks[i].1;
            let start = super::cpu::process_cpu_ns().unwrap_or(0);
            let handles: Vec<_> = (0..tasks).map(|_| tokio::spawn(run(n))).collect();
            for handle in handles {
                handle.await.unwrap();
            }
            let used = super::cpu::process_cpu_ns()
                .unwrap_or(0)
                .saturating_sub(start);
            let per = used as f64 / (n * tasks) as f64;
            samples[i].push(per);
        }
    }
    samples
        .into_iter()
        .map(|mut s| {
            s.sort_by(f64::total_cmp);
            s[s.len() / 2]
        })
        .collect()
}
