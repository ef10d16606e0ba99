//! Observability: one span per call naming the script and version, one client span per Redis
//! round trip in OpenTelemetry's database conventions (operation, stored procedure, batch
//! size, status code and error type on failure, server address and port), an event per
//! NOSCRIPT fallback, and never a key value (keys often hold client IPs or secrets).

#[path = "fixtures/mod.rs"]
mod fixtures;
mod support;

use redkit::{Call, ScriptManager};
use tracing_subscriber::fmt::format::FmtSpan;

/// The tests of this file run one at a time. `tracing` caches each callsite's interest
/// process-wide: a span first reached on a thread with no subscriber (another test's set-up)
/// while a test's subscriber is being installed can stay disabled for that test, and its
/// round trips go missing from the capture.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn spans_name_the_script_and_never_the_keys() {
    let _serial = SERIAL.lock().await;
    let server = support::RedisServer::spawn().await;
    let mut conn = server.conn().await;

    let manager = ScriptManager::new();
    let script = fixtures::sample();
    let secret = "203.0.113.77";
    let out = captured(async {
        for _ in 0..2 {
            let mut call = Call::new(script);
            call.key(format!("rl:{{{secret}}}"))
                .arg(10)
                .arg(1000)
                .arg(1);
            let _: redis::Value = manager.invoke(&mut conn, &call).await.unwrap();
        }
    })
    .await;
    let spans = out.matches("redkit.invoke").count();
    assert!(spans >= 2, "one span per call:\n{out}");
    assert!(
        out.contains("script=\"fixed_window\"") || out.contains("script=fixed_window"),
        "{out}"
    );
    assert!(out.contains("version=1"), "{out}");
    assert_eq!(
        out.matches("NOSCRIPT: falling back to EVAL").count(),
        1,
        "one fallback event:\n{out}"
    );
    assert!(
        !out.contains(secret),
        "key values must not be logged:\n{out}"
    );
}

/// The spans' closing lines, captured while `run` runs.
async fn captured<F: std::future::Future<Output = ()>>(run: F) -> String {
    let buffer = support::Captured::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_span_events(FmtSpan::CLOSE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let guard = tracing::subscriber::set_default(subscriber);
    run.await;
    drop(guard);
    buffer.text()
}

/// The closing lines of the `redis` round-trip spans, in order.
fn round_trips(out: &str) -> Vec<&str> {
    out.lines()
        .filter(|l| l.contains("db.system.name=\"redis\"") && l.contains("close"))
        .collect()
}

#[tokio::test]
async fn every_round_trip_is_a_client_span_in_opentelemetry_database_conventions() {
    let _serial = SERIAL.lock().await;
    let server = support::RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let addr = redis::ConnectionAddr::Tcp("127.0.0.1".into(), server.port());
    let manager = ScriptManager::new().with_server_address(&addr);
    let script = fixtures::sample();
    let call = |key: &str| {
        let mut call = Call::new(script);
        call.key(format!("t:{{{key}}}")).arg(10).arg(1000).arg(1);
        call
    };
    let port = server.port();
    let out = captured(async {
        let _: redis::Value = manager.invoke(&mut conn, &call("a")).await.unwrap(); // NOSCRIPT
        let _: redis::Value = manager.invoke(&mut conn, &call("a")).await.unwrap(); // EVALSHA
        let batch = vec![call("b"), call("b")];
        manager.invoke_batch(&mut conn, batch).await.unwrap();
        let mut refused = Call::new(script);
        refused.key("t:{c}").arg("not a number").arg(1000).arg(1);
        let _ = manager.invoke::<redis::Value, _>(&mut conn, &refused).await;
    })
    .await;
    let trips = round_trips(&out);
    let expect: [(&str, &[&str]); 6] = [
        // The first call: NOSCRIPT, EVAL, then SCRIPT LOAD (eviction-safe).
        (
            "EVALSHA fixed_window.v1",
            &[
                "db.response.status_code=\"NOSCRIPT\"",
                "error.type=\"NOSCRIPT\"",
                "otel.status_code=\"ERROR\"",
            ],
        ),
        ("EVAL fixed_window.v1", &[]),
        ("SCRIPT fixed_window.v1", &[]),
        ("EVALSHA fixed_window.v1", &[]),
        ("MULTI", &["db.operation.batch.size=2"]),
        // A script's refusal is the server's error reply, its code the status code.
        (
            "EVALSHA fixed_window.v1",
            &[
                "db.response.status_code=\"REDKIT_INPUT\"",
                "error.type=\"REDKIT_INPUT\"",
            ],
        ),
    ];
    assert_eq!(trips.len(), expect.len(), "{out}");
    for (line, (name, fields)) in trips.iter().zip(expect) {
        assert!(
            line.contains(&format!("otel.name={name}"))
                || line.contains(&format!("otel.name=\"{name}\"")),
            "{name}: {line}"
        );
        assert!(line.contains("otel.kind=\"client\""), "{line}");
        assert!(line.contains("server.address=\"127.0.0.1\""), "{line}");
        assert!(line.contains(&format!("server.port={port}")), "{line}");
        for field in fields {
            assert!(line.contains(field), "{field}: {line}");
        }
        if fields.is_empty() {
            assert!(
                !line.contains("error.type"),
                "a success has no error: {line}"
            );
        }
    }
    assert!(
        trips[0].contains("db.operation.name=\"EVALSHA\""),
        "{}",
        trips[0]
    );
    assert!(
        trips[0].contains("db.stored_procedure.name=\"fixed_window.v1\""),
        "{}",
        trips[0]
    );
    assert!(
        trips[4].contains("db.operation.name=\"MULTI\""),
        "{}",
        trips[4]
    );
}

/// Every operator's repair writes a WARN event naming the resource and what it removed.
#[tokio::test]
async fn every_repair_writes_a_warn_event_with_what_it_removed() {
    use redkit::lock::{Acquire, ExpectedHolder, FairLock, Lock, LockOptions, Semaphore};
    use std::time::Duration;
    let _serial = SERIAL.lock().await;
    let server = support::RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let ttl = Duration::from_secs(30);
    let (lock, fair, sem) = (Lock::new(), FairLock::new(), Semaphore::new());
    assert!(matches!(
        lock.acquire(
            &mut conn,
            "r-lock",
            &LockOptions::<Lock>::new()
                .token("lock-holder-00000001")
                .ttl(ttl)
        )
        .await
        .unwrap(),
        Acquire::Acquired(_)
    ));
    assert!(matches!(
        fair.try_acquire(
            &mut conn,
            "r-fair",
            &LockOptions::<FairLock>::new()
                .token("fair-holder-00000002")
                .ttl(ttl)
        )
        .await
        .unwrap(),
        Acquire::Acquired(_)
    ));
    assert!(matches!(
        sem.try_acquire(
            &mut conn,
            "r-sem",
            1,
            &LockOptions::<Semaphore>::new()
                .token("sem-holder-000000003")
                .ttl(ttl)
        )
        .await
        .unwrap(),
        Acquire::Acquired(_)
    ));
    let out = captured(async {
        lock.force_release(&mut conn, "r-lock", ExpectedHolder::Any)
            .await
            .unwrap();
        fair.evict(&mut conn, "r-fair", "fair-holder-00000002")
            .await
            .unwrap();
        sem.evict(&mut conn, "r-sem", "sem-holder-000000003")
            .await
            .unwrap();
    })
    .await;
    for (what, resource, token) in [
        ("force-released a lock", "r-lock", "lock-holder-00000001"),
        (
            "evicted a fair lock entry",
            "r-fair",
            "fair-holder-00000002",
        ),
        (
            "evicted a semaphore permit",
            "r-sem",
            "sem-holder-000000003",
        ),
    ] {
        let line = out
            .lines()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("no event {what:?} in:\n{out}"));
        assert!(line.contains("WARN"), "{line}");
        assert!(line.contains(resource) && line.contains(token), "{line}");
    }
}
