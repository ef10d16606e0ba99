//! Since Redis 8.0 (and in Valkey) scripts cached only by `EVAL` sit in a 500-entry eviction
//! list, while `SCRIPT LOAD`ed ones stay. redkit loads a script after its `NOSCRIPT` -> `EVAL`
//! fallback, so it cannot be evicted by other clients' `EVAL`s. Run against Valkey 9 (the
//! harness's server with that eviction; the machines' Redis 7.0 has none), with a control:
//! a user who may not `SCRIPT LOAD` gets only the `EVAL` copy, which is evicted. Without a
//! Valkey server the tests are SKIPPED with a notice (a failure when `CI` is set).

#[path = "fixtures/mod.rs"]
mod fixtures;
#[path = "support/harness.rs"]
mod harness;
mod support;

use redkit::{Call, ScriptManager};
use support::{RedisServer, Valkey};

fn hit() -> Call<'static> {
    let script = fixtures::sample();
    let mut call = Call::new(script);
    call.key("{e}:c").arg(1_000_000).arg(600_000).arg(1);
    call
}

/// 600 distinct scripts run with `EVAL` by someone else: more than the 500 the server keeps.
async fn flood_with_evals(server: &RedisServer) {
    let mut conn = server.conn().await;
    let mut pipe = redis::pipe();
    for i in 0..600 {
        pipe.cmd("EVAL").arg(format!("return {i}")).arg(0).ignore();
    }
    let _: () = pipe.query_async(&mut conn).await.unwrap();
}

async fn cached(server: &RedisServer) -> bool {
    let sha = hit().script().sha1().to_owned();
    let exists: Vec<i64> = server.cmd(&["SCRIPT", "EXISTS", &sha]).await;
    exists == [1]
}

async fn a_script_loaded_after_its_eval_fallback_survives_the_eval_eviction(valkey: Valkey) {
    let server = RedisServer::spawn_valkey(&valkey, &[]).await;
    let mut conn = server.conn().await;
    let m = ScriptManager::new();
    let _: (i64, i64, i64) = m.invoke(&mut conn, &hit()).await.unwrap();
    assert_eq!(
        (m.stats().noscript_fallbacks, m.stats().fallback_loads),
        (1, 1)
    );
    flood_with_evals(&server).await;
    let stats: String = server.cmd(&["INFO", "stats"]).await;
    let evicted: u64 = stats
        .lines()
        .find_map(|l| l.strip_prefix("evicted_scripts:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("INFO stats has evicted_scripts");
    assert!(evicted >= 100, "the flood evicted EVAL scripts: {evicted}");
    assert!(cached(&server).await, "loaded: never evicted");
    let (n, _, _): (i64, i64, i64) = m.invoke(&mut conn, &hit()).await.unwrap();
    assert_eq!(n, 2);
    assert_eq!(m.stats().noscript_fallbacks, 1, "still an EVALSHA hit");
}

async fn without_script_load_the_eval_copy_is_evicted_control(valkey: Valkey) {
    let server = RedisServer::spawn_valkey(&valkey, &[]).await;
    let mut conn = support::denied_conn(&server, "script|load").await;
    let m = ScriptManager::new();
    let _: (i64, i64, i64) = m.invoke(&mut conn, &hit()).await.unwrap();
    assert_eq!(
        (m.stats().noscript_fallbacks, m.stats().fallback_loads),
        (1, 0)
    );
    assert!(cached(&server).await, "cached by the EVAL");
    flood_with_evals(&server).await;
    assert!(!cached(&server).await, "an EVAL-only copy is evicted");
    let (n, _, _): (i64, i64, i64) = m.invoke(&mut conn, &hit()).await.unwrap();
    assert_eq!(n, 2, "still answered, through the fallback");
    assert_eq!(m.stats().noscript_fallbacks, 2);
}

fn main() -> std::process::ExitCode {
    let mut tests = harness::Tests::new();
    harness::add!(tests, valkey: a_script_loaded_after_its_eval_fallback_survives_the_eval_eviction, without_script_load_the_eval_copy_is_evicted_control);
    tests.run()
}
