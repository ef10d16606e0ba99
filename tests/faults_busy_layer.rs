//! BUSY with the tower layer (issue 8 fault suite): while another client's read-only script
//! blocks Redis, the layer answers within its timeout by its fail mode (open: the request goes
//! through unchecked; closed: 503 + `Retry-After: 1`), and checks again once `Admin::kill`
//! stopped the script. Counted.

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::routing::get;
use axum::{Extension, Router};
use redkit::connect::{self, Timeouts};
use redkit::middleware::{FailMode, LimitOutcome, RateLimitLayer, Unchecked};
use redkit::rate_limit::{FixedWindow, Rate};
use redkit::script::admin::{Admin, KillOutcome};
use reqwest::StatusCode;
use support::RedisServer;

async fn handler(Extension(outcome): Extension<LimitOutcome>) -> String {
    match outcome {
        LimitOutcome::Checked(_) => "checked".to_owned(),
        LimitOutcome::Unchecked(Unchecked::RedisUnavailable) => "unchecked".to_owned(),
        other => format!("unexpected {other:?}"),
    }
}

async fn serve(mode: FailMode, conn: redis::aio::ConnectionManager) -> String {
    let limiter = FixedWindow::new(
        "fbl",
        Rate::new(redkit::nonzero!(1_000), Duration::from_secs(600)).unwrap(),
    )
    .unwrap();
    let layer = RateLimitLayer::builder(limiter, conn)
        .fail_mode(mode)
        .timeout(Duration::from_millis(250))
        .build()
        .unwrap();
    let app: Router = Router::new().route("/", get(handler)).layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    format!("http://{addr}/")
}

/// (status, body, took)
async fn get_once(http: &reqwest::Client, url: &str) -> (StatusCode, String, Duration) {
    let started = Instant::now();
    let r = http.get(url).send().await.unwrap();
    let status = r.status();
    let retry_after = r.headers().get("retry-after").cloned();
    let body = r.text().await.unwrap();
    if status == StatusCode::SERVICE_UNAVAILABLE {
        assert_eq!(retry_after.unwrap(), "1");
    }
    (status, body, started.elapsed())
}

#[tokio::test]
async fn busy_redis_answers_by_fail_mode_within_the_layer_timeout() {
    let server = RedisServer::spawn_with(&["--busy-reply-threshold", "100"]).await;
    let t = Timeouts::new(Duration::from_millis(300), Duration::from_millis(200)).unwrap();
    let conn = connect::manager(server.client(), t).await.unwrap();
    let open = serve(FailMode::Open, conn.clone()).await;
    let closed = serve(FailMode::Closed, conn).await;
    let http = reqwest::Client::new();
    assert_eq!(get_once(&http, &open).await.1, "checked");
    assert_eq!(get_once(&http, &closed).await.1, "checked");

    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    let mut other = server
        .client()
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap();
    let mut probe = server.patient_conn().await;
    let looping = tokio::spawn(async move {
        redis::cmd("EVAL")
            .arg(
                "local s = tonumber(redis.call('TIME')[1]) \
                 while tonumber(redis.call('TIME')[1]) - s < 20 do end return 1",
            )
            .arg(0)
            .query_async::<i64>(&mut other)
            .await
    });
    // The script runs past the threshold: the server answers BUSY (a PING sent before the
    // script arrived is answered PONG, and the probe asks again).
    support::bounded(10, "the looping script to make the server BUSY", async {
        loop {
            match redis::cmd("PING").query_async::<String>(&mut probe).await {
                Err(e) if e.code() == Some("BUSY") => break,
                _ => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    })
    .await;

    let (mut through, mut refused) = (0, 0);
    for _ in 0..5 {
        let (status, body, took) = get_once(&http, &open).await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "unchecked"));
        assert!(took < Duration::from_millis(250 + 200), "{took:?}");
        through += 1;
        let (status, _, took) = get_once(&http, &closed).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(took < Duration::from_millis(250 + 200), "{took:?}");
        refused += 1;
    }

    let killed = Admin::single(server.url()).unwrap().kill().await.unwrap();
    assert!(killed[0].value == Some(KillOutcome::Killed), "{killed:?}");
    assert!(looping.await.unwrap().is_err());
    assert_eq!(get_once(&http, &open).await.1, "checked");
    assert_eq!(get_once(&http, &closed).await.1, "checked");
    eprintln!(
        "BUSY + tower layer: 10 requests during BUSY, fail-open let {through} through \
         unchecked, fail-closed refused {refused} with 503; checked again after SCRIPT KILL"
    );
}
