//! Leased concurrency slots against a real Redis: four instances (separate layers and
//! connections) on one client never have more than N requests in flight together, read from
//! the handlers themselves and from the server's count of holders; idle slots go back to a
//! starving instance within the stated bound; a crashed instance's block comes back when its
//! lease ends; shutdown gives every block back; a restart of Redis mid-lease is survived;
//! bad input to the block script writes nothing.

mod support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::routing::get;
use axum::Router;
use http::{Request, StatusCode};
use redis::aio::ConnectionManager;
use redkit::middleware::{ClientId, ConcurrencyLimitLayer, ConcurrencyPolicy, FnKey, PeerIp};
use redkit::rate_limit::{LimitKey, QuotaLease};
use support::RedisServer;
use tower::ServiceExt;

/// Every request is one client's.
type OneClient =
    Box<dyn Fn(&redkit::middleware::RequestInfo<'_>) -> Option<ClientId> + Send + Sync>;
type Layer = ConcurrencyLimitLayer<ConnectionManager, FnKey<OneClient>>;

/// The idle period after which unused slots go back, and the background tick (half of it).
const IDLE: Duration =
    redkit::middleware::ConcurrencyLimitBuilder::<ConnectionManager, PeerIp>::IDLE_RETURN;
/// A tick late by this much, or a poll, on a loaded 2-core machine.
const SLACK: Duration = Duration::from_millis(750);

async fn layer(server: &RedisServer, name: &str, permits: u32, lease: Duration) -> Layer {
    layer_at(&server.url(), name, permits, lease).await
}

/// A layer of its own (its own connection), as one instance of a service.
async fn layer_at(url: &str, name: &str, permits: u32, lease: Duration) -> Layer {
    let client = redis::Client::open(format!("{url}?protocol=resp3")).unwrap();
    let conn = ConnectionManager::new(client).await.unwrap();
    let one_client: OneClient = Box::new(|_| Some(ClientId::Key(LimitKey::text("c").unwrap())));
    ConcurrencyLimitLayer::builder(ConcurrencyPolicy::new(name, permits).unwrap(), conn)
        .key_extractor(FnKey::new(one_client))
        .lease(lease)
        .leased(QuotaLease::new(4).unwrap().instances(4).unwrap())
        .build()
        .unwrap()
}

/// Holders of the client's slots whose lease has not ended, as Redis counts them (block
/// members included), by the server's clock.
async fn holders(server: &RedisServer, layer: &Layer) -> i64 {
    live(&mut server.conn().await, &key_of(layer)).await
}

fn key_of(layer: &Layer) -> String {
    layer
        .semaphore()
        .key(&layer.resource(&LimitKey::text("c").unwrap()))
        .unwrap()
}

async fn live(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    redis::Script::new(
        "local t = redis.call('TIME') \
         local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) \
         return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')",
    )
    .key(key)
    .invoke_async(conn)
    .await
    .unwrap()
}

/// The longest any step of these tests may take: a hang fails the test instead of stalling it.
const STEP: Duration = Duration::from_secs(10);

async fn status_of(app: &Router) -> StatusCode {
    let req = Request::get("/").body(Body::empty()).unwrap();
    let answer = tokio::time::timeout(STEP, app.clone().oneshot(req)).await;
    answer.expect("an answer in time").unwrap().status()
}

/// Counts the requests in its handlers (across every instance) and the most at once.
#[derive(Clone, Default)]
struct InFlight {
    now: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
}

impl InFlight {
    fn app(&self, layer: &Layer, work: Duration) -> Router {
        let counter = self.clone();
        Router::new()
            .route(
                "/",
                get(move || {
                    let counter = counter.clone();
                    async move {
                        let now = counter.now.fetch_add(1, Ordering::SeqCst) + 1;
                        counter.most.fetch_max(now, Ordering::SeqCst);
                        tokio::time::sleep(work).await;
                        counter.now.fetch_sub(1, Ordering::SeqCst);
                        "done"
                    }
                }),
            )
            .layer(layer.clone())
    }
}

/// Four instances, 16 concurrent callers each for 3 s, on one client with N = 8: the handlers
/// never count more than 8 at once and the server never counts more than 8 holders, while
/// demand far above the limit keeps all 8 in use at some point, and every instance gets its
/// share (the instances keep to `ceil(8 / 4)` each while some are refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_instances_never_pass_the_limit_together() {
    let server = RedisServer::spawn().await;
    let flight = InFlight::default();
    let mut layers = Vec::new();
    for _ in 0..4 {
        layers.push(layer(&server, "four", 8, Duration::from_secs(30)).await);
    }
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (done, key) = (Arc::clone(&done), key_of(&layers[0]));
        let mut conn = server.conn().await;
        tokio::spawn(async move {
            let mut most = 0;
            while !done.load(Ordering::SeqCst) {
                most = most.max(live(&mut conn, &key).await);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            most
        })
    };
    let mut callers = Vec::new();
    for layer in &layers {
        let app = flight.app(layer, Duration::from_millis(3));
        for _ in 0..16 {
            let app = app.clone();
            callers.push(tokio::spawn(async move {
                let mut ok = 0u32;
                let until = Instant::now() + Duration::from_secs(3);
                while Instant::now() < until {
                    match status_of(&app).await {
                        StatusCode::OK => ok += 1,
                        StatusCode::TOO_MANY_REQUESTS => {
                            tokio::time::sleep(Duration::from_millis(1)).await
                        }
                        other => panic!("{other}"),
                    }
                }
                ok
            }));
        }
    }
    let mut admitted = 0;
    for caller in callers {
        admitted += caller.await.unwrap();
    }
    done.store(true, Ordering::SeqCst);
    let most_holders = sampler.await.unwrap();
    let most = flight.most.load(Ordering::SeqCst);
    let stats: Vec<_> = layers.iter().map(|l| l.stats()).collect();
    eprintln!("admitted {admitted}, most in flight {most}, most holders {most_holders}, {stats:?}");
    assert!(
        most <= 8,
        "{most} requests in flight at once, over the limit of 8"
    );
    assert!(most_holders <= 8, "{most_holders} holders in Redis");
    assert_eq!(most, 8, "demand far above the limit never used every slot");
    // Busy instances share: each keeps to ceil(8 / 4) while others are refused, so each
    // admits at least half its fair quarter.
    assert!(
        stats.iter().all(|s| s.admitted * 8 >= u64::from(admitted)),
        "an instance got less than an eighth: {stats:?}"
    );
    assert_eq!(
        u64::from(admitted),
        stats.iter().map(|s| s.admitted).sum::<u64>()
    );
}

/// One instance's block is all N slots, unused: another instance is refused at first and
/// gets slots once they have been unused for the idle period (at most twice it plus a tick
/// after their last use), and a block nobody uses leaves Redis.
#[tokio::test]
async fn idle_slots_go_back_to_a_starving_instance() {
    let server = RedisServer::spawn().await;
    let (a, b) = (
        layer(&server, "starve", 4, Duration::from_secs(30)).await,
        layer(&server, "starve", 4, Duration::from_secs(30)).await,
    );
    let flight = InFlight::default();
    let (app_a, app_b) = (
        flight.app(&a, Duration::from_millis(100)),
        flight.app(&b, Duration::from_millis(1)),
    );
    // Four at once on A: its block grows to all four slots.
    let wave: Vec<_> = (0..4).map(|_| status_of(&app_a)).collect();
    let statuses = futures_util::future::join_all(wave).await;
    let last_use = Instant::now();
    assert!(
        statuses.iter().all(|s| *s == StatusCode::OK),
        "{statuses:?}"
    );
    assert_eq!(holders(&server, &a).await, 4, "A's block holds every slot");
    assert_eq!(status_of(&app_b).await, StatusCode::TOO_MANY_REQUESTS);

    let bound = IDLE * 2 + IDLE / 2 + SLACK;
    let back = loop {
        match status_of(&app_b).await {
            StatusCode::OK => break last_use.elapsed(),
            StatusCode::TOO_MANY_REQUESTS => {
                assert!(last_use.elapsed() < bound, "B starved for {bound:?}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => panic!("{other}"),
        }
    };
    eprintln!("B got a slot {back:?} after A's last use");
    // Both idle now: every block goes back and Redis holds nothing.
    let idle_since = Instant::now();
    while holders(&server, &a).await > 0 {
        assert!(idle_since.elapsed() < bound, "idle blocks stayed in Redis");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// An instance holding its block with every slot in use crashes (its runtime dropped: no
/// release, no renewal): its slots come back when the block's lease ends, not before.
#[tokio::test]
async fn a_crashed_instance_block_comes_back_when_its_lease_ends() {
    let server = RedisServer::spawn().await;
    let lease = Duration::from_millis(1500);
    let url = server.url();
    let (entered_tx, entered_rx) = std::sync::mpsc::channel::<()>();
    let (crash_tx, crash_rx) = tokio::sync::oneshot::channel::<()>();
    let instance_a = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let layer = layer_at(&url, "crash", 3, lease).await;
            let app = Router::new()
                .route(
                    "/",
                    get(move || {
                        let entered_tx = entered_tx.clone();
                        async move {
                            entered_tx.send(()).unwrap();
                            std::future::pending::<()>().await;
                            "never"
                        }
                    }),
                )
                .layer(layer);
            for _ in 0..3 {
                let app = app.clone();
                tokio::spawn(async move { status_of(&app).await });
            }
            crash_rx.await.unwrap();
        });
        // Dropped with the requests in flight: their tasks, the background renewals and the
        // connection vanish as with a killed process.
        drop(runtime);
    });
    for _ in 0..3 {
        entered_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    }
    let b = layer(&server, "crash", 3, lease).await;
    let app_b = InFlight::default().app(&b, Duration::from_millis(1));
    // Past two leases: A's block is renewed while A lives.
    tokio::time::sleep(lease * 2).await;
    assert_eq!(status_of(&app_b).await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(holders(&server, &b).await, 3);

    crash_tx.send(()).unwrap();
    let crashed = Instant::now();
    tokio::task::spawn_blocking(move || instance_a.join().unwrap())
        .await
        .unwrap();
    let back = loop {
        match status_of(&app_b).await {
            StatusCode::OK => break crashed.elapsed(),
            StatusCode::TOO_MANY_REQUESTS => {
                assert!(
                    crashed.elapsed() < lease + SLACK,
                    "the crashed block never came back"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => panic!("{other}"),
        }
    };
    eprintln!("the crashed block came back {back:?} after the crash (lease {lease:?})");
    // A renewed every lease/3 at most a tick late: at the crash at least a third of the lease
    // had passed since, so the block could not be back before lease/3 (minus that tick).
    assert!(
        back + IDLE / 2 >= lease / 3,
        "came back {back:?} after the crash: before its lease could have ended"
    );
}

/// `shutdown` gives every block back at once (unused slots at once, used ones as their
/// requests finish); afterwards requests take plain permits. A plain acquire of the same
/// semaphore counts the block's members as holders.
#[tokio::test]
async fn shutdown_gives_every_block_back() {
    let server = RedisServer::spawn().await;
    let a = layer(&server, "shut", 4, Duration::from_secs(30)).await;
    let flight = InFlight::default();
    let app = flight.app(&a, Duration::from_millis(50));
    let wave: Vec<_> = (0..4).map(|_| status_of(&app)).collect();
    let statuses = futures_util::future::join_all(wave).await;
    assert!(
        statuses.iter().all(|s| *s == StatusCode::OK),
        "{statuses:?}"
    );
    assert_eq!(holders(&server, &a).await, 4);
    let mut conn = server.conn().await;
    let sem = a.semaphore();
    let resource = a.resource(&LimitKey::text("c").unwrap());
    let options = redkit::lock::LockOptions::new();
    let plain = sem
        .try_acquire(&mut conn, &resource, 4, &options)
        .await
        .unwrap();
    assert!(!plain.is_acquired(), "the block's members are holders");

    // One request still in flight: shutdown gives back the three unused slots at once and
    // the fourth when that request ends, and returns only then.
    let support::gate::Gated {
        gate,
        mut entered,
        app: held_app,
    } = support::gate::gated();
    let held_app = held_app.layer(a.clone());
    let held = tokio::spawn(async move { status_of(&held_app).await });
    tokio::time::timeout(STEP, entered.recv())
        .await
        .expect("the request entered its handler");
    let closing = {
        let a = a.clone();
        tokio::spawn(async move { a.shutdown().await })
    };
    let since = Instant::now();
    while holders(&server, &a).await > 1 {
        assert!(
            since.elapsed() < STEP,
            "the unused slots were not given back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Two rounds of the background task later the request still runs: so does shutdown.
    tokio::time::sleep(IDLE).await;
    assert!(
        !closing.is_finished(),
        "shutdown returned with a request in flight"
    );
    assert_eq!(holders(&server, &a).await, 1, "the slot in use stays held");
    gate.send(true).unwrap();
    assert_eq!(held.await.unwrap(), StatusCode::OK);
    tokio::time::timeout(STEP, closing)
        .await
        .expect("shutdown returned in time")
        .unwrap();
    assert_eq!(holders(&server, &a).await, 0, "every block given back");
    // Leasing stopped: a request takes a plain permit and gives it back.
    assert_eq!(status_of(&app).await, StatusCode::OK);
    assert_eq!(holders(&server, &a).await, 0);
    assert_eq!(a.stats().admitted, a.stats().finished);

    // A layer dropped without `shutdown` (its runtime still running): its background task
    // gives its blocks back at its next tick, long before their 30 s lease ends.
    let b = layer(&server, "shut", 4, Duration::from_secs(30)).await;
    let app_b = InFlight::default().app(&b, Duration::from_millis(1));
    assert_eq!(status_of(&app_b).await, StatusCode::OK);
    assert!(holders(&server, &b).await > 0, "a block is held");
    let key = key_of(&b);
    drop((app_b, b));
    let dropped = Instant::now();
    while live(&mut conn, &key).await > 0 {
        assert!(
            dropped.elapsed() < IDLE + SLACK,
            "a dropped layer's block stayed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Redis restarts (no persistence) while requests hold slots of a block: the instance
/// learns its block is gone at its next call, takes a new one and serves again; Redis then
/// counts exactly the slots it holds.
#[tokio::test]
async fn a_redis_restart_mid_lease_is_survived() {
    let mut server = RedisServer::spawn().await;
    let lease = Duration::from_millis(1200);
    let a = layer(&server, "restart", 4, lease).await;
    let support::gate::Gated {
        gate: release,
        mut entered,
        app,
    } = support::gate::gated();
    let app = app.layer(a.clone());
    let held: Vec<_> = (0..2)
        .map(|_| {
            let app = app.clone();
            tokio::spawn(async move { status_of(&app).await })
        })
        .collect();
    for _ in 0..2 {
        let got = tokio::time::timeout(STEP, entered.recv()).await;
        got.expect("the request entered its handler").unwrap();
    }
    assert!(holders(&server, &a).await >= 2);
    server.restart().await;
    assert_eq!(
        holders(&server, &a).await,
        0,
        "the restart forgot every slot"
    );
    // Within one lease the instance renews, finds the block gone and takes it again for the
    // two requests still in flight.
    let since = Instant::now();
    while holders(&server, &a).await < 2 {
        assert!(
            since.elapsed() < lease + SLACK,
            "the block was not taken again"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    release.send(true).unwrap();
    for h in held {
        assert_eq!(h.await.unwrap(), StatusCode::OK);
    }
    let app2 = InFlight::default().app(&a, Duration::from_millis(1));
    assert_eq!(status_of(&app2).await, StatusCode::OK);
    assert!(holders(&server, &a).await <= 4);
}

/// The block script refuses bad input with a typed error and writes nothing.
#[tokio::test]
async fn bad_input_to_the_block_script_writes_nothing() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let manager = redkit::ScriptManager::new();
    let script = redkit::script::Registry::global()
        .require("semaphore_block", 1)
        .unwrap();
    let token = "t".repeat(32);
    let cases: [[&str; 5]; 9] = [
        ["short", "4", "1000", "1", "2000"],
        [&token, "0", "1000", "1", "2000"],
        [&token, "4", "0", "1", "2000"],
        [&token, "4", "1000", "5", "2000"],
        [&token, "4", "1000", "-1", "2000"],
        [&token, "4", "1000", "1", "0"],
        [&token, "4", "1000", "1", "x"],
        [&token, "4", "1000", "1", "2592000001"],
        ["bad token with spaces!!", "4", "1000", "1", "2000"],
    ];
    for args in cases {
        let mut call = redkit::script::Call::new(script);
        call.key("sem:{r}")
            .key("sem:{r}:wake")
            .key("sem:{r}:contended");
        for arg in args {
            call.arg(arg);
        }
        let error = manager
            .invoke::<Vec<i64>, _>(&mut conn, &call)
            .await
            .unwrap_err();
        assert!(
            matches!(error, redkit::Error::InvalidInput { .. }),
            "{args:?}: {error:?}"
        );
    }
    server.cmd::<()>(&["SET", "sem:{r}", "x"]).await;
    let mut call = redkit::script::Call::new(script);
    call.key("sem:{r}")
        .key("sem:{r}:wake")
        .key("sem:{r}:contended")
        .arg(&token)
        .arg("4")
        .arg("1000")
        .arg("2")
        .arg("2000");
    let error = manager
        .invoke::<Vec<i64>, _>(&mut conn, &call)
        .await
        .unwrap_err();
    assert!(
        matches!(error, redkit::Error::WrongType { .. }),
        "{error:?}"
    );
    let keys: Vec<String> = server.cmd(&["KEYS", "*"]).await;
    assert_eq!(keys, vec!["sem:{r}".to_owned()], "nothing else written");
}

/// A lease shorter than the idle period (400 ms) is renewed in time: the background round
/// runs at least every quarter of the lease, so while a request is in flight its slot never
/// lapses in Redis (which would let another instance take it).
#[tokio::test]
async fn a_short_lease_is_renewed_before_it_ends() {
    let server = RedisServer::spawn().await;
    let lease = Duration::from_millis(400);
    let a = layer(&server, "short", 2, lease).await;
    let support::gate::Gated {
        gate,
        mut entered,
        app,
    } = support::gate::gated();
    let app = app.layer(a.clone());
    let held = tokio::spawn(async move { status_of(&app).await });
    tokio::time::timeout(STEP, entered.recv())
        .await
        .expect("the request entered its handler");
    let (key, mut conn) = (key_of(&a), server.conn().await);
    let until = Instant::now() + lease * 4;
    let mut fewest = i64::MAX;
    while Instant::now() < until {
        fewest = fewest.min(live(&mut conn, &key).await);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    gate.send(true).unwrap();
    assert_eq!(held.await.unwrap(), StatusCode::OK);
    assert!(
        fewest >= 1,
        "the slot in use lapsed in Redis during four leases"
    );
}
