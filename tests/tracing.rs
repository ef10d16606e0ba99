//! Observability: one span per call naming the script and version, an event per NOSCRIPT
//! fallback, and never a key value (keys often hold client IPs or secrets).

#[path = "fixtures/mod.rs"]
mod fixtures;
mod support;

use std::io::Write;
use std::sync::{Arc, Mutex};

use redkit::{Call, ScriptManager};
use tracing_subscriber::fmt::format::FmtSpan;

#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn spans_name_the_script_and_never_the_keys() {
    let server = support::RedisServer::spawn().await;
    let mut conn = server.conn().await;

    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_span_events(FmtSpan::CLOSE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let manager = ScriptManager::new();
    let script = fixtures::sample();
    let secret = "203.0.113.77";
    for _ in 0..2 {
        let mut call = Call::new(script);
        call.key(format!("rl:{{{secret}}}"))
            .arg(10)
            .arg(1000)
            .arg(1);
        let _: redis::Value = manager.invoke(&mut conn, &call).await.unwrap();
    }

    let out = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
    let spans = out.matches("redkit.invoke").count();
    assert!(spans >= 2, "one span per call:\n{out}");
    assert!(
        out.contains("script=\"fixed_window\"") || out.contains("script=fixed_window"),
        "{out}"
    );
    assert!(out.contains("version=1"), "{out}");
    assert_eq!(
        out.matches("NOSCRIPT").count(),
        1,
        "one fallback event:\n{out}"
    );
    assert!(
        !out.contains(secret),
        "key values must not be logged:\n{out}"
    );
}
