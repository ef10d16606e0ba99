//! Metrics (feature `metrics`) through a recorder installed in the test, against a real Redis:
//! each count equals what the test did. The names, labels and units are the README's
//! "Metrics and traces" table.
#![cfg(feature = "metrics")]

mod support;

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::MetricKind;
use redkit::{Call, Registry, ScriptManager};

/// Every metric recorded so far in this process, by kind, name and sorted labels (a snapshot
/// drains the recorder, so the tests of this file share one accumulated view).
#[derive(Default)]
struct Seen {
    counters: HashMap<(String, Vec<(String, String)>), u64>,
    histograms: HashMap<(String, Vec<(String, String)>), usize>,
    units: HashMap<String, Option<metrics::Unit>>,
}

fn recorder() -> &'static (Snapshotter, Mutex<Seen>) {
    static RECORDER: OnceLock<(Snapshotter, Mutex<Seen>)> = OnceLock::new();
    RECORDER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("the only recorder of this test binary");
        redkit::describe_metrics();
        (snapshotter, Mutex::new(Seen::default()))
    })
}

/// The metrics recorded so far, accumulated.
fn seen() -> std::sync::MutexGuard<'static, Seen> {
    let (snapshotter, seen) = recorder();
    let mut seen = seen.lock().unwrap();
    for (key, unit, _, value) in snapshotter.snapshot().into_vec() {
        let name = key.key().name().to_owned();
        let mut labels: Vec<(String, String)> = key
            .key()
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        labels.sort();
        seen.units.insert(name.clone(), unit);
        match (key.kind(), value) {
            (MetricKind::Counter, DebugValue::Counter(n)) => {
                *seen.counters.entry((name, labels)).or_default() += n
            }
            (MetricKind::Histogram, DebugValue::Histogram(v)) => {
                *seen.histograms.entry((name, labels)).or_default() += v.len()
            }
            _ => {}
        }
    }
    seen
}

fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    v.sort();
    v
}

#[tokio::test]
async fn script_round_trips_and_reloads_are_counted_as_they_happened() {
    recorder();
    let server = support::RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let scripts = Registry::from_files([(
        "metrics_probe.v1.lua",
        "--! keys: 1\nreturn redis.call('INCR', KEYS[1])",
    )]);
    let manager = ScriptManager::new();
    let mut call = Call::new(scripts.require("metrics_probe", 1).unwrap());
    call.key("m:{probe}");
    for _ in 0..3 {
        let _: i64 = manager.invoke(&mut conn, &call).await.unwrap();
    }
    let _: () = server.cmd(&["SCRIPT", "FLUSH"]).await;
    let _: i64 = manager.invoke(&mut conn, &call).await.unwrap();

    let seen = seen();
    let duration = "db.client.operation.duration";
    let trip = |op: &str, error: Option<&str>| {
        let mut l = vec![
            ("db.system.name", "redis"),
            ("db.operation.name", op),
            ("db.stored_procedure.name", "metrics_probe.v1"),
        ];
        l.extend(error.map(|e| ("error.type", e)));
        seen.histograms
            .get(&(duration.to_owned(), labels(&l)))
            .copied()
            .unwrap_or(0)
    };
    // Two NOSCRIPTs: the first call (a cold server) and the one after the flush.
    assert_eq!(trip("EVALSHA", Some("NOSCRIPT")), 2);
    assert_eq!(trip("EVALSHA", None), 2);
    assert_eq!(trip("EVAL", None), 2);
    assert_eq!(trip("SCRIPT", None), 2, "one SCRIPT LOAD after each EVAL");
    assert_eq!(seen.units[duration], Some(metrics::Unit::Seconds));
    let reloads = |kind: &str| {
        seen.counters
            .get(&(
                "redkit.script.reloads".to_owned(),
                labels(&[
                    ("redkit.reload", kind),
                    ("db.stored_procedure.name", "metrics_probe.v1"),
                ]),
            ))
            .copied()
            .unwrap_or(0)
    };
    assert_eq!(reloads("eval_fallback"), 2);
    assert_eq!(reloads("script_load"), 2);
    assert_eq!(reloads("function_load"), 0);
    assert_eq!(
        manager.stats().noscript_fallbacks,
        2,
        "the same as the manager's own counter"
    );
}
