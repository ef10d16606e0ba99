//! BUSY (issue 8 fault suite): another client's script runs past `busy-reply-threshold`; a
//! redkit call is refused with `BUSY` (it did not run), `Admin::kill` stops a script that has
//! not written, and a script that wrote is `Unkillable` until it ends. Counted.

mod support;

use std::time::{Duration, Instant};

use redkit::connect::{self, Timeouts};
use redkit::rate_limit::{Decision, FixedWindow, LimitKey, Rate};
use redkit::script::admin::{Admin, KillOutcome};
use redkit::Error;
use support::RedisServer;

/// Busy-loops for `secs` seconds of server time; writes `fb:w` first when `write`.
fn long_script(secs: u32, write: bool) -> String {
    let first = if write {
        "redis.call('SET', 'fb:w', '1') "
    } else {
        ""
    };
    format!(
        "{first}local s = tonumber(redis.call('TIME')[1]) \
         while tonumber(redis.call('TIME')[1]) - s < {secs} do end return 1"
    )
}

/// A connection without response timeout (the long script's own caller waits for it).
async fn patient(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    server
        .client()
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap()
}

/// Waits until the server really is busy with another client's script: a probe `GET` on its
/// own connection is answered `BUSY` (before the script has run `busy-reply-threshold`, the
/// probe waits for it or is answered normally: then it asks again). Returns the probes sent.
async fn wait_until_busy(server: &RedisServer) -> u32 {
    let mut probe = patient(server).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut probes = 0;
    loop {
        probes += 1;
        let r = redis::cmd("GET")
            .arg("fb:probe")
            .query_async::<Option<String>>(&mut probe)
            .await;
        match r {
            Err(e) if e.code() == Some("BUSY") => return probes,
            Err(e) => panic!("probe: {e}"),
            Ok(_) => {
                assert!(
                    Instant::now() < deadline,
                    "the script never made the server BUSY"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

fn is_busy(r: &redkit::Result<Decision>) -> bool {
    matches!(r, Err(Error::Redis(e)) if e.code() == Some("BUSY"))
        && !connect::may_have_applied(r.as_ref().unwrap_err())
}

#[tokio::test]
async fn busy_server_refuses_calls_until_the_script_is_killed_or_ends() {
    let server = RedisServer::spawn_with(&["--busy-reply-threshold", "100"]).await;
    let t = Timeouts::new(Duration::from_millis(300), Duration::from_millis(300)).unwrap();
    let mut conn = connect::manager(server.client(), t).await.unwrap();
    let limiter = FixedWindow::new(
        "fb",
        Rate::new(redkit::nonzero!(1_000), Duration::from_secs(600)).unwrap(),
    )
    .unwrap();
    let client = LimitKey::text("c").unwrap();
    let hits = |d: Decision| match d {
        Decision::Allowed(q) => 1_000 - q.remaining(),
        other => panic!("{other:?}"),
    };
    assert_eq!(hits(limiter.check(&mut conn, &client).await.unwrap()), 1);

    // 1. A read-only script loops: calls are refused with BUSY; SCRIPT KILL stops it.
    let mut other = patient(&server).await;
    let looping = tokio::spawn(async move {
        redis::cmd("EVAL")
            .arg(long_script(20, false))
            .arg(0)
            .query_async::<i64>(&mut other)
            .await
    });
    wait_until_busy(&server).await;
    let started = Instant::now();
    let r = limiter.check(&mut conn, &client).await;
    assert!(is_busy(&r), "{r:?}");
    // BUSY is a reply, so it came within the response timeout (300 ms); the bound adds the
    // connect timeout's 300 ms (the connection is already up) as the scheduling slack.
    let elapsed = started.elapsed();
    assert!(elapsed <= t.call_bound(), "BUSY after {elapsed:?}");
    let admin = Admin::single(server.url()).unwrap();
    let killed = admin.kill().await.unwrap();
    assert!(killed[0].value == Some(KillOutcome::Killed), "{killed:?}");
    let script = looping.await.unwrap();
    assert!(
        script
            .as_ref()
            .is_err_and(|e| e.to_string().contains("killed")),
        "{script:?}"
    );
    // The refused call did not run.
    assert_eq!(hits(limiter.check(&mut conn, &client).await.unwrap()), 2);

    // 2. A script that wrote cannot be killed: BUSY until it ends by itself.
    let mut other = patient(&server).await;
    let writing = tokio::spawn(async move {
        redis::cmd("EVAL")
            .arg(long_script(2, true))
            .arg(0)
            .query_async::<i64>(&mut other)
            .await
    });
    // BUSY means the script runs, so its first command (the SET) has run: it wrote.
    wait_until_busy(&server).await;
    let killed = admin.kill().await.unwrap();
    assert!(
        killed[0].value == Some(KillOutcome::Unkillable),
        "{killed:?}"
    );
    let (mut busy, mut attempted) = (0u64, 0u64);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        attempted += 1;
        let r = limiter.check(&mut conn, &client).await;
        if is_busy(&r) {
            busy += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert!(Instant::now() < deadline, "still BUSY after 10 s");
            continue;
        }
        assert_eq!(hits(r.unwrap()), 3, "a BUSY call ran");
        break;
    }
    assert_eq!(writing.await.unwrap().unwrap(), 1);
    assert!(busy > 0);
    eprintln!(
        "BUSY: read-only script killed (1 call refused, did not run); writing script \
         UNKILLABLE: {attempted} calls attempted, {busy} refused BUSY, 1 succeeded, none ran twice"
    );
}
