//! The rate-limit layer in front of a tonic gRPC server: the README's recipe, run for real.
//! tonic puts the socket peer in `TcpConnectInfo` (not axum's `ConnectInfo`), so the key
//! comes from an `FnKey` reading it; refusals are answered as gRPC statuses
//! (`RESOURCE_EXHAUSTED` / `UNAVAILABLE`) through the `respond_with` hook, since a gRPC client
//! reads `grpc-status`, not the HTTP status.

mod support;

use std::convert::Infallible;
use std::future::{ready, Ready};
use std::task::{Context, Poll};
use std::time::Duration;

use redis::aio::ConnectionManager;
use redkit::middleware::{
    ClientId, FailMode, FnKey, LimitOutcome, RateLimitLayer, Rejection, RequestInfo, Unchecked,
};
use redkit::rate_limit::{FixedWindow, Rate};
use support::RedisServer;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::server::{NamedService, UnaryService};
use tonic::transport::server::{TcpConnectInfo, TcpIncoming};
use tonic::{Code, Status};
use tonic_prost::ProstCodec;

/// The recipe: a key extractor for tonic's connect info.
fn tonic_peer() -> FnKey<impl Fn(&RequestInfo<'_>) -> Option<ClientId> + Clone> {
    FnKey::new(|req| {
        let info = req.extensions().get::<TcpConnectInfo>()?;
        Some(ClientId::Ip(info.remote_addr()?.ip()))
    })
}

/// The recipe: refusals as gRPC statuses, keeping the layer's headers as metadata.
fn grpc_status(
    rejection: &Rejection<'_>,
    default: http::Response<tonic::body::Body>,
) -> http::Response<tonic::body::Body> {
    let status = match rejection {
        Rejection::Limited { limiter, .. } => {
            Status::resource_exhausted(format!("rate limited by {limiter}"))
        }
        Rejection::RedisUnavailable => Status::unavailable("rate limiter unavailable"),
        _ => Status::invalid_argument("client not identified"),
    };
    let mut grpc = status.into_http::<tonic::body::Body>();
    for (name, value) in default.headers() {
        if name != http::header::CONTENT_TYPE && name != http::header::CONTENT_LENGTH {
            grpc.headers_mut().insert(name.clone(), value.clone());
        }
    }
    grpc
}

/// A unary method `/redkit.test.Echo/Remaining` answering with the limiter's outcome in the
/// response metadata (the layer puts it in the request extensions, tonic keeps them).
#[derive(Clone)]
struct Echo;

impl NamedService for Echo {
    const NAME: &'static str = "redkit.test.Echo";
}

struct Remaining;

impl UnaryService<()> for Remaining {
    type Response = ();
    type Future = Ready<Result<tonic::Response<()>, Status>>;

    fn call(&mut self, request: tonic::Request<()>) -> Self::Future {
        let outcome = match request.extensions().get::<LimitOutcome>() {
            Some(LimitOutcome::Checked(d)) => format!("remaining={}", d.quota().remaining()),
            Some(LimitOutcome::Unchecked(Unchecked::RedisUnavailable)) => "unchecked".to_owned(),
            other => format!("unexpected {other:?}"),
        };
        let mut response = tonic::Response::new(());
        response
            .metadata_mut()
            .insert("x-outcome", outcome.parse().unwrap());
        ready(Ok(response))
    }
}

impl tower::Service<http::Request<tonic::body::Body>> for Echo {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Infallible>> + Send>,
    >;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(ProstCodec::<(), ()>::default());
            Ok(grpc.unary(Remaining, req).await)
        })
    }
}

/// Serves the echo service behind `layer` on a loopback port; returns the endpoint.
async fn serve<L>(layer: L) -> String
where
    L: tower::Layer<tonic::service::Routes> + Clone + Send + 'static,
    L::Service: tower::Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
            Error = Infallible,
        > + Clone
        + Send
        + 'static,
    <L::Service as tower::Service<http::Request<tonic::body::Body>>>::Future: Send,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = TcpIncoming::from(listener);
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .layer(layer)
            .add_service(Echo)
            .serve_with_incoming(incoming)
            .await
            .unwrap();
    });
    format!("http://{addr}")
}

async fn call(endpoint: &str) -> Result<tonic::Response<()>, Status> {
    let channel = tonic::transport::Channel::from_shared(endpoint.to_owned())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    grpc.unary(
        tonic::Request::new(()),
        PathAndQuery::from_static("/redkit.test.Echo/Remaining"),
        ProstCodec::<(), ()>::default(),
    )
    .await
}

fn metadata<'a>(map: &'a tonic::metadata::MetadataMap, name: &str) -> Option<&'a str> {
    map.get(name).and_then(|v| v.to_str().ok())
}

#[tokio::test]
async fn tonic_peers_are_limited_by_their_socket_address_and_refused_as_grpc_statuses() {
    let mut server = RedisServer::spawn().await;
    let conn = ConnectionManager::new(server.client()).await.unwrap();
    let limiter = FixedWindow::new("grpc", Rate::per_minute(redkit::nonzero!(3))).unwrap();
    let layer = RateLimitLayer::builder(limiter, conn)
        .key_extractor(tonic_peer())
        .fail_mode(FailMode::Closed)
        .timeout(Duration::from_millis(300))
        .respond_with(grpc_status)
        .build()
        .unwrap();
    let endpoint = serve(layer).await;

    for left in (0..3).rev() {
        let ok = call(&endpoint).await.expect("within the limit");
        let expected = format!("remaining={left}");
        assert_eq!(
            metadata(ok.metadata(), "x-outcome"),
            Some(expected.as_str())
        );
    }
    let refused = call(&endpoint).await.expect_err("over the limit");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert_eq!(refused.message(), "rate limited by grpc");
    let retry: u64 = metadata(refused.metadata(), "retry-after")
        .expect("Retry-After kept as metadata")
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry), "retry-after {retry}");
    assert!(metadata(refused.metadata(), "ratelimit").is_some());

    // The key is the peer's IP from tonic's connect info (the client runs on loopback).
    let keys: Vec<String> = server.cmd(&["KEYS", "redkit:rl:*"]).await;
    assert_eq!(keys, ["redkit:rl:grpc:{ip:127.0.0.1}"]);

    // Redis down with fail-closed: UNAVAILABLE, not an HTTP 503 the client would misread.
    server.stop().await;
    let down = call(&endpoint).await.expect_err("fail closed");
    assert_eq!(down.code(), Code::Unavailable, "{down:?}");
    assert_eq!(down.message(), "rate limiter unavailable");
}

#[tokio::test]
async fn without_the_recipe_every_tonic_client_shares_one_bucket() {
    // The default extractor (axum's ConnectInfo or a SocketAddr extension) finds no peer under
    // tonic, so every client lands in the shared unknown-client bucket and is counted there.
    // This is why the recipe is needed; the test fails if tonic ever inserts a peer the
    // default extractor reads (then the recipe is no longer needed and the README must say so).
    let server = RedisServer::spawn().await;
    let conn = ConnectionManager::new(server.client()).await.unwrap();
    let limiter = FixedWindow::new("grpc", Rate::per_minute(redkit::nonzero!(2))).unwrap();
    let layer = RateLimitLayer::builder(limiter, conn)
        .respond_with(grpc_status)
        .build()
        .unwrap();
    let stats = layer.clone();
    let endpoint = serve(layer).await;
    call(&endpoint).await.expect("first");
    call(&endpoint).await.expect("second");
    let refused = call(&endpoint)
        .await
        .expect_err("the shared bucket is full");
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert_eq!(stats.stats().unknown_clients, 3);
    let keys: Vec<String> = server.cmd(&["KEYS", "redkit:rl:*"]).await;
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert!(!keys[0].contains("127.0.0.1"), "{keys:?}");
}
