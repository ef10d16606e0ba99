//! The script manager against real Redis: EVALSHA, the NOSCRIPT fallback, batches, preload,
//! typed errors, on MultiplexedConnection, ConnectionManager and ClusterConnection.

#[path = "fixtures/mod.rs"]
mod fixtures;
mod support;

use redis::aio::ConnectionLike;
use redis::Value;
use redkit::script::Replication;
use redkit::{Call, CallOutcome, Error, Registry, Script, ScriptManager};
use support::{RedisCluster, RedisServer, ReplicatedPair};

fn counter() -> &'static Script {
    fixtures::sample()
}

/// `preload` and the sample script, which is not embedded (a retired version).
async fn preload_with_sample<C: ConnectionLike>(m: &ScriptManager, conn: &mut C) {
    m.preload(conn).await.unwrap();
    m.preload_scripts(conn, std::slice::from_ref(counter()))
        .await
        .unwrap();
}

/// One fixed-window hit with a huge limit: a counter stored by the script.
fn hit(key: &str) -> Call<'static> {
    let mut call = Call::new(counter());
    call.key(key).arg(1_000_000).arg(600_000).arg(1);
    call
}

async fn count<C: ConnectionLike>(m: &ScriptManager, conn: &mut C, key: &str) -> i64 {
    let (n, _ttl, allowed): (i64, i64, i64) = m.invoke(conn, &hit(key)).await.unwrap();
    assert_eq!(allowed, 1);
    n
}

#[tokio::test]
async fn script_flush_between_calls_falls_back_once_and_keeps_state() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let m = ScriptManager::new();
    assert_eq!(count(&m, &mut conn, "{t}:c").await, 1);
    // First call already needed the fallback (nothing was loaded).
    assert_eq!(m.stats().noscript_fallbacks, 1);
    assert_eq!(count(&m, &mut conn, "{t}:c").await, 2);
    assert_eq!(m.stats().noscript_fallbacks, 1, "steady state: no fallback");

    let _: () = server.cmd(&["SCRIPT", "FLUSH"]).await;
    assert_eq!(count(&m, &mut conn, "{t}:c").await, 3, "n+1, not 1");
    assert_eq!(m.stats().noscript_fallbacks, 2);
    assert_eq!(count(&m, &mut conn, "{t}:c").await, 4);
    assert_eq!(m.stats().noscript_fallbacks, 2);
}

/// `calls=` of one command in `INFO commandstats` (0 when absent).
async fn calls(server: &RedisServer, command: &str) -> u64 {
    let stats: String = server.cmd(&["INFO", "commandstats"]).await;
    let prefix = format!("cmdstat_{command}:calls=");
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

#[tokio::test]
async fn a_burst_of_fallbacks_loads_the_script_once_and_then_hits() {
    let server = RedisServer::spawn().await;
    let conn = server.conn().await;
    let m = ScriptManager::new();
    for round in 1..=3u64 {
        let _: () = server.cmd(&["SCRIPT", "FLUSH"]).await;
        let _: () = server.cmd(&["CONFIG", "RESETSTAT"]).await;
        let mut tasks = Vec::new();
        for i in 0..8 {
            let (m, mut conn) = (m.clone(), conn.clone());
            tasks.push(tokio::spawn(async move {
                count(&m, &mut conn, &format!("{{t}}:burst:{i}")).await
            }));
        }
        for task in tasks {
            assert_eq!(task.await.unwrap(), i64::try_from(round).unwrap());
        }
        // All 8 were in flight before any reply: 8 EVALs, but one SCRIPT LOAD.
        assert_eq!(calls(&server, "eval").await, 8);
        assert_eq!(calls(&server, "script|load").await, 1, "round {round}");
        assert_eq!(m.stats().fallback_loads, round);
        // The next calls are EVALSHA hits.
        let mut c = conn.clone();
        count(&m, &mut c, "{t}:after").await;
        assert_eq!(calls(&server, "eval").await, 8);
        assert_eq!(m.stats().noscript_fallbacks, 8 * round);
    }
}

#[tokio::test]
async fn a_user_without_script_load_still_gets_every_fallback_reply() {
    let server = RedisServer::spawn().await;
    let mut conn = support::denied_conn(&server, "script|load").await;
    let m = ScriptManager::new();
    for n in 1..=3 {
        let _: () = server.cmd(&["SCRIPT", "FLUSH"]).await;
        assert_eq!(count(&m, &mut conn, "{t}:acl").await, n);
    }
    assert_eq!(m.stats().noscript_fallbacks, 3);
    assert_eq!(m.stats().fallback_loads, 0, "every load was refused");
}

#[tokio::test]
async fn steady_state_is_one_evalsha_per_call() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let m = ScriptManager::new();
    preload_with_sample(&m, &mut conn).await;
    let _: () = server.cmd(&["CONFIG", "RESETSTAT"]).await;
    for _ in 0..10 {
        count(&m, &mut conn, "{t}:steady").await;
    }
    let stats: String = server.cmd(&["INFO", "commandstats"]).await;
    assert!(stats.contains("cmdstat_evalsha:calls=10,"), "{stats}");
    assert!(!stats.contains("cmdstat_eval:"), "{stats}");
    assert!(
        !stats.contains("cmdstat_script"),
        "no SCRIPT EXISTS/LOAD: {stats}"
    );
    assert_eq!(m.stats().noscript_fallbacks, 0);
}

/// The calls of a replicated call's commands in `counted`: `SCRIPT EXISTS`, `EVALSHA`,
/// `EVAL`, `SCRIPT LOAD`, `WAIT`.
fn replicated_calls(counted: Counted) -> (u64, u64, u64, u64, u64) {
    (
        counted.exists,
        counted.evalsha,
        counted.eval,
        counted.load,
        counted.wait,
    )
}

/// A replicated call asks whether the server holds its script (`SCRIPT EXISTS`) until its
/// manager knows it cached, so a `WAIT` never goes behind a call answered `NOSCRIPT` on a
/// cold cache; a plain call never asks. Counted command by command.
#[tokio::test]
async fn a_replicated_call_asks_for_its_script_only_until_the_manager_knows_it_cached() {
    let pair = ReplicatedPair::spawn().await;
    let server = &pair.primary;
    let mut conn = server.conn().await;
    let mut probe = server.conn().await;
    let wait = Replication::new(1, std::time::Duration::from_secs(5)).unwrap();
    let shared = conn.clone();
    let replicated = |m: &ScriptManager, key: &'static str| {
        let (m, mut conn) = (m.clone(), shared.clone());
        async move {
            let acked = m
                .replicated(wait)
                .invoke::<(i64, i64, i64), _>(&mut conn, &hit(key))
                .await
                .unwrap();
            assert!(acked.is_replicated(), "{acked:?}");
        }
    };

    // A plain call on a cold cache: NOSCRIPT, EVAL, SCRIPT LOAD; it never asks.
    let before = Counted::of(&mut probe).await;
    count(&ScriptManager::new(), &mut conn, "{t}:a").await;
    assert_eq!(
        replicated_calls(Counted::of(&mut probe).await.since(before)),
        (0, 1, 1, 1, 0)
    );

    // A manager that saw the script answer a plain EVALSHA still asks once before its first
    // replicated call (the server holds it: EVALSHA + WAIT), then no more.
    let m = ScriptManager::new();
    let before = Counted::of(&mut probe).await;
    count(&m, &mut conn, "{t}:a").await;
    replicated(&m, "{t}:a").await;
    assert_eq!(
        replicated_calls(Counted::of(&mut probe).await.since(before)),
        (1, 2, 0, 0, 1)
    );
    let before = Counted::of(&mut probe).await;
    replicated(&m, "{t}:a").await;
    assert_eq!(
        replicated_calls(Counted::of(&mut probe).await.since(before)),
        (0, 1, 0, 0, 1)
    );

    // Cold again: a manager that has not seen it asks, and goes straight to EVAL + WAIT (one
    // WAIT in all), then SCRIPT LOAD; no EVALSHA.
    let _: () = server.cmd(&["SCRIPT", "FLUSH"]).await;
    let before = Counted::of(&mut probe).await;
    replicated(&ScriptManager::new(), "{t}:a").await;
    assert_eq!(
        replicated_calls(Counted::of(&mut probe).await.since(before)),
        (1, 0, 1, 1, 1)
    );

    // A manager that preloaded the script knows it cached: it never asks.
    let _: () = server.cmd(&["SCRIPT", "FLUSH"]).await;
    let preloaded = ScriptManager::new();
    preload_with_sample(&preloaded, &mut conn).await;
    let before = Counted::of(&mut probe).await;
    replicated(&preloaded, "{t}:a").await;
    assert_eq!(
        replicated_calls(Counted::of(&mut probe).await.since(before)),
        (0, 1, 0, 0, 1)
    );

    // A batch after a flush loads each script once, however many of its calls were refused.
    let _: () = server.cmd(&["SCRIPT", "FLUSH"]).await;
    let before = Counted::of(&mut probe).await;
    let calls: Vec<Call> = (0..5).map(|_| hit("{t}:b")).collect();
    let outcomes = ScriptManager::new()
        .invoke_batch(&mut conn, calls)
        .await
        .unwrap();
    assert!(outcomes
        .iter()
        .all(|o| matches!(o, CallOutcome::Ran(Ok(_)))));
    assert_eq!(Counted::of(&mut probe).await.since(before).load, 1);
}

#[tokio::test]
async fn preload_loads_every_embedded_script_and_is_idempotent() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let m = ScriptManager::new();
    let n = m.preload(&mut conn).await.unwrap();
    assert_eq!(n, Registry::global().scripts().len());
    assert_eq!(m.preload(&mut conn).await.unwrap(), n);
    for s in Registry::global().scripts() {
        let exists: Vec<bool> = server.cmd(&["SCRIPT", "EXISTS", s.sha1()]).await;
        assert_eq!(exists, vec![true], "{}", s.id());
    }
}

#[tokio::test]
async fn connection_manager_survives_a_server_restart() {
    let mut server = RedisServer::spawn().await;
    // RESP3 lets the manager notice the disconnect and reconnect on its own.
    let client = redis::Client::open(format!("{}?protocol=resp3", server.url())).unwrap();
    let mut conn = redis::aio::ConnectionManager::new(client).await.unwrap();
    let m = ScriptManager::new();
    assert_eq!(count(&m, &mut conn, "{t}:r").await, 1);
    server.restart().await;
    // The restarted server is empty (no persistence) and has no scripts cached.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(count(&m, &mut conn, "{t}:r").await, 1);
    assert_eq!(count(&m, &mut conn, "{t}:r").await, 2);
    assert_eq!(m.stats().noscript_fallbacks, 2);
}

#[tokio::test]
async fn batch_of_1000_after_flush_runs_every_call_exactly_once() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let m = ScriptManager::new();
    m.preload(&mut conn).await.unwrap();
    let _: () = server.cmd(&["SCRIPT", "FLUSH"]).await;
    let calls: Vec<Call> = (0..1000)
        .map(|i| hit(&format!("{{t}}:b{}", i % 10)))
        .collect();
    let results = m.invoke_batch(&mut conn, calls).await.unwrap();
    assert_eq!(results.len(), 1000);
    assert!(results.iter().all(|r| matches!(r, CallOutcome::Ran(Ok(_)))));
    for k in 0..10 {
        let v: i64 = server.cmd(&["GET", &format!("{{t}}:b{k}")]).await;
        assert_eq!(v, 100, "each of the 100 calls on key {k} ran exactly once");
    }
    assert_eq!(m.stats().batch_reruns, 1000);
    // The last reply on each key saw 100: ordering within the pipeline was kept.
    let last = results[999].value().unwrap();
    assert!(matches!(last, Value::Array(v) if v[0] == Value::Int(100)));
}

#[tokio::test]
async fn partial_noscript_in_batch_reruns_only_the_missing_calls() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let m = ScriptManager::new();
    let other = Script::new("other", 1, 1, "return redis.call('INCR', KEYS[1])").unwrap();
    preload_with_sample(&m, &mut conn).await; // fixed_window loaded, `other` not
    let mut calls = vec![hit("{t}:p")];
    let mut c = Call::new(&other);
    c.key("{t}:o");
    calls.push(c);
    calls.push(hit("{t}:p"));
    let results = m.invoke_batch(&mut conn, calls).await.unwrap();
    assert_eq!(results[1].value().unwrap(), &Value::Int(1));
    assert_eq!(m.stats().batch_reruns, 1);
    let p: i64 = server.cmd(&["GET", "{t}:p"]).await;
    assert_eq!(p, 2);
}

#[tokio::test]
async fn errors_are_typed_and_write_nothing() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let m = ScriptManager::new();

    // Wrong key count: rejected before sending.
    let mut bad = Call::new(counter());
    bad.arg(1).arg(2).arg(3);
    let e = m.invoke::<Value, _>(&mut conn, &bad).await.unwrap_err();
    assert!(
        matches!(
            e,
            Error::KeyCount {
                expected: 1,
                got: 0,
                ..
            }
        ),
        "{e}"
    );

    // Corrupt counter: typed error, value untouched.
    let _: () = server.cmd(&["SET", "{t}:x", "abc"]).await;
    let e = m
        .invoke::<Value, _>(&mut conn, &hit("{t}:x"))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::CorruptData { .. }), "{e}");
    let v: String = server.cmd(&["GET", "{t}:x"]).await;
    assert_eq!(v, "abc");
    let ttl: i64 = server.cmd(&["PTTL", "{t}:x"]).await;
    assert_eq!(ttl, -1, "nothing written");

    // Wrong type.
    let _: () = server.cmd(&["HSET", "{t}:h", "f", "1"]).await;
    let e = m
        .invoke::<Value, _>(&mut conn, &hit("{t}:h"))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::WrongType { .. }), "{e}");

    // An argument the script rejects (second line of defence).
    let mut zero = Call::new(counter());
    zero.key("{t}:z").arg(0).arg(1000).arg(1);
    let e = m.invoke::<Value, _>(&mut conn, &zero).await.unwrap_err();
    assert!(matches!(e, Error::InvalidInput { .. }), "{e}");
    let exists: i64 = server.cmd(&["EXISTS", "{t}:z"]).await;
    assert_eq!(exists, 0);

    // A reply that does not decode into the requested type.
    let e = m
        .invoke::<String, _>(&mut conn, &hit("{t}:y"))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::UnexpectedReply { .. }), "{e}");

    // Only the first call found the script missing: the script's own errors after it are
    // answered as they are, never taken for NOSCRIPT and resent as EVAL.
    assert_eq!(m.stats().noscript_fallbacks, 1);
    assert_eq!(calls(&server, "eval").await, 1);
}

#[tokio::test]
async fn cluster_calls_survive_a_flush_on_one_primary() {
    let cluster = RedisCluster::spawn().await;
    let mut conn = cluster.conn().await;
    let m = ScriptManager::new();
    preload_with_sample(&m, &mut conn).await;
    let keys: Vec<String> = (0..30).map(|i| format!("{{k{i}}}:c")).collect();
    for k in &keys {
        assert_eq!(count(&m, &mut conn, k).await, 1);
    }
    assert_eq!(
        m.stats().noscript_fallbacks,
        0,
        "preload reached every primary"
    );

    let victim = cluster.primary_for(&keys[0]).await;
    let _: () = victim.cmd(&["SCRIPT", "FLUSH"]).await;
    for k in &keys {
        assert_eq!(count(&m, &mut conn, k).await, 2);
    }
    assert_eq!(
        m.stats().noscript_fallbacks,
        1,
        "only the flushed node fell back, once"
    );

    // Batches spanning slots.
    let calls: Vec<Call> = keys.iter().map(|k| hit(k)).collect();
    let results = m.invoke_batch_by_slot(&conn, calls).await.unwrap();
    for r in results {
        assert!(matches!(r.into_result().unwrap(), Value::Array(v) if v[0] == Value::Int(3)));
    }
}

/// `calls=` of `command` in an `INFO commandstats` reply (0 when never called).
fn command_calls(stats: &str, command: &str) -> u64 {
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// What a server counted: calls of the commands a batch sends, and the read events it
/// processed (one per `read` of a client's socket: a pipeline written at once is one read,
/// each separate round trip at least one more).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Counted {
    multi: u64,
    exec: u64,
    evalsha: u64,
    eval: u64,
    exists: u64,
    load: u64,
    wait: u64,
    reads: u64,
}

impl Counted {
    async fn of(probe: &mut redis::aio::MultiplexedConnection) -> Self {
        // One command, so the probe itself costs one read per snapshot.
        let info: String = redis::cmd("INFO")
            .arg("everything")
            .query_async(probe)
            .await
            .unwrap();
        let reads = info
            .lines()
            .find_map(|l| l.strip_prefix("total_reads_processed:"))
            .and_then(|n| n.trim().parse().ok())
            .expect("INFO stats has total_reads_processed");
        Self {
            multi: command_calls(&info, "multi"),
            exec: command_calls(&info, "exec"),
            evalsha: command_calls(&info, "evalsha"),
            eval: command_calls(&info, "eval"),
            exists: command_calls(&info, "script|exists"),
            load: command_calls(&info, "script|load"),
            wait: command_calls(&info, "wait"),
            reads,
        }
    }

    fn since(self, before: Self) -> Self {
        Self {
            multi: self.multi - before.multi,
            exec: self.exec - before.exec,
            evalsha: self.evalsha - before.evalsha,
            eval: self.eval - before.eval,
            exists: self.exists - before.exists,
            load: self.load - before.load,
            wait: self.wait - before.wait,
            reads: self.reads - before.reads,
        }
    }
}

#[tokio::test]
async fn cluster_batch_in_one_slot_uses_one_pipeline() {
    const CALLS: u64 = 50;
    let cluster = RedisCluster::spawn().await;
    let mut conn = cluster.conn().await;
    let m = ScriptManager::new();
    // Warm: the script is cached and the connection knows the slot's owner, so the batch
    // below is the steady state (no NOSCRIPT reload, no redirect).
    assert_eq!(count(&m, &mut conn, "{same}:warm").await, 1);
    let owner = cluster.primary_index_for("{same}").await;
    let mut probes = Vec::new();
    for node in &cluster.nodes {
        probes.push(node.conn().await);
    }
    let mut before = Vec::new();
    for p in &mut probes {
        before.push(Counted::of(p).await);
    }
    let calls: Vec<Call> = (0..CALLS).map(|i| hit(&format!("{{same}}:{i}"))).collect();
    let results = m.invoke_batch(&mut conn, calls).await.unwrap();
    assert!(results.iter().all(|r| matches!(r, CallOutcome::Ran(Ok(_)))));
    let mut delta = Vec::new();
    for (p, b) in probes.iter_mut().zip(before) {
        delta.push(Counted::of(p).await.since(b));
    }
    eprintln!("per node, counted during the batch: {delta:#?}");
    let on_owner = delta[owner];
    // One transaction on the slot's primary: MULTI, the 50 EVALSHAs, EXEC.
    assert_eq!(
        (
            on_owner.multi,
            on_owner.exec,
            on_owner.evalsha,
            on_owner.eval
        ),
        (1, 1, CALLS, 0),
        "{on_owner:?}"
    );
    // ... sent as one pipeline: the server read it in one go. Allowed besides: the probe's
    // own INFO (1) and the replica's REPLCONF ACK (one a second; at most 2 in this window).
    // 52 separate round trips would be at least 52 reads.
    assert!(
        on_owner.reads <= 1 + 1 + 2,
        "{} reads on the owner for one pipeline",
        on_owner.reads
    );
    // No call went anywhere else (the owner's replica applies the transaction's effects,
    // wrapped in MULTI/EXEC, but runs no script).
    for (i, d) in delta.iter().enumerate().filter(|(i, _)| *i != owner) {
        assert_eq!((d.evalsha, d.eval), (0, 0), "node {i}: {d:?}");
    }
}

// ---- Batches: per-call outcomes ----

fn incr_by() -> Script {
    Script::new(
        "incr_by",
        1,
        1,
        "return redis.call('INCRBY', KEYS[1], ARGV[1])",
    )
    .unwrap()
}

fn incr<'s>(script: &'s Script, key: &str) -> Call<'s> {
    let mut c = Call::new(script);
    c.key(key).arg(1);
    c
}

async fn get(server: &RedisServer, key: &str) -> i64 {
    let v: Option<i64> = server.cmd(&["GET", key]).await;
    v.unwrap_or(0)
}

#[tokio::test]
async fn empty_batches_make_no_round_trip() {
    let mut server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    server.stop().await; // any round trip would now fail
    let m = ScriptManager::new();
    assert!(m.invoke_batch(&mut conn, vec![]).await.unwrap().is_empty());
    assert!(m
        .invoke_batch_by_slot(&conn, vec![])
        .await
        .unwrap()
        .is_empty());
    let limiter = redkit::rate_limit::FixedWindow::new(
        "e",
        redkit::rate_limit::Rate::per_second(redkit::nonzero!(1)),
    )
    .unwrap();
    assert!(limiter
        .check_batch(&mut conn, &[])
        .await
        .unwrap()
        .is_empty());
    assert!(limiter
        .check_batch_by_slot(&conn, &[])
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn a_lost_reply_makes_every_call_maybe_ran_and_they_did_run() {
    let mut server = RedisServer::spawn().await;
    let config = redis::AsyncConnectionConfig::new()
        .set_response_timeout(Some(std::time::Duration::from_millis(300)));
    let mut conn = server
        .client()
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap();
    let s = incr_by();
    let m = ScriptManager::new();
    m.preload_scripts(&mut conn, std::slice::from_ref(&s))
        .await
        .unwrap();
    server.pause().await; // the batch reaches the socket; the reply never comes in time
    let calls: Vec<Call> = (0..5).map(|i| incr(&s, &format!("{{t}}:m{i}"))).collect();
    let outcomes = m.invoke_batch(&mut conn, calls).await.unwrap();
    assert!(outcomes.iter().all(|o| o.may_have_run()), "{outcomes:?}");
    server.resume().await;
    // "May have run" is real: the frozen server ran the transaction once it woke up.
    let mut sum = 0;
    for _ in 0..50 {
        sum = 0;
        for i in 0..5 {
            sum += get(&server, &format!("{{t}}:m{i}")).await;
        }
        if sum == 5 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(sum, 5, "each call ran once, after all");
}

#[tokio::test]
async fn a_failed_reload_keeps_the_outcomes_of_calls_that_ran() {
    let server = RedisServer::spawn().await;
    let loaded = incr_by();
    let unloaded =
        Script::new("incr_two", 1, 1, "return redis.call('INCRBY', KEYS[1], 2)").unwrap();
    ScriptManager::new()
        .preload_scripts(&mut server.conn().await, std::slice::from_ref(&loaded))
        .await
        .unwrap();
    // A user who may run scripts but not SCRIPT LOAD: the NOSCRIPT re-run is refused.
    let _: () = server
        .cmd(&[
            "ACL", "SETUSER", "noload", "on", ">pw", "~*", "&*", "+@all", "-script",
        ])
        .await;
    let url = format!("redis://noload:pw@127.0.0.1:{}/", server.port());
    let mut conn = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let m = ScriptManager::new();
    let calls = vec![
        incr(&loaded, "{t}:a"),
        {
            let mut c = Call::new(&unloaded);
            c.key("{t}:b");
            c
        },
        incr(&loaded, "{t}:a"),
    ];
    let outcomes = m.invoke_batch(&mut conn, calls).await.unwrap();
    assert!(
        matches!(outcomes[0], CallOutcome::Ran(Ok(Value::Int(1)))),
        "{outcomes:?}"
    );
    assert!(outcomes[1].is_not_run(), "{outcomes:?}");
    assert!(
        matches!(outcomes[2], CallOutcome::Ran(Ok(Value::Int(2)))),
        "{outcomes:?}"
    );
    assert_eq!(get(&server, "{t}:a").await, 2);
    assert_eq!(get(&server, "{t}:b").await, 0, "not run means not applied");

    // By slot: the group that cannot be reloaded fails alone.
    let mut calls: Vec<Call> = (0..6)
        .map(|i| incr(&loaded, &format!("{{g{i}}}:c")))
        .collect();
    let mut c = Call::new(&unloaded);
    c.key("{lost}:c");
    calls.insert(3, c);
    let outcomes = m.invoke_batch_by_slot(&conn, calls).await.unwrap();
    assert_eq!(outcomes.len(), 7);
    for (i, o) in outcomes.iter().enumerate() {
        if i == 3 {
            assert!(o.is_not_run(), "{o:?}");
        } else {
            assert!(
                matches!(o, CallOutcome::Ran(Ok(Value::Int(1)))),
                "{i}: {o:?}"
            );
        }
    }
    assert_eq!(get(&server, "{lost}:c").await, 0);
}

#[tokio::test]
async fn batches_under_a_user_denied_multi_or_exec_never_claim_not_run_for_calls_that_ran() {
    let server = RedisServer::spawn().await;
    let s = incr_by();
    ScriptManager::new()
        .preload_scripts(&mut server.conn().await, std::slice::from_ref(&s))
        .await
        .unwrap();
    // EXEC denied: Redis aborts the transaction (EXECABORT), nothing ran. MULTI denied: the
    // calls run outside a transaction; redis-rs 1.8.1 then mis-indexes MULTI's error (a debug
    // build panics in its connection task and the connection drops): never "not run".
    for denied in ["exec", "multi"] {
        let user = format!("no{denied}");
        let rule = format!("-{denied}");
        let _: () = server
            .cmd(&[
                "ACL", "SETUSER", &user, "on", ">pw", "~*", "&*", "+@all", &rule,
            ])
            .await;
        let url = format!("redis://{user}:pw@127.0.0.1:{}/", server.port());
        let mut conn = redis::Client::open(url)
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let key = format!("{{t}}:{denied}");
        let outcomes = ScriptManager::new()
            .invoke_batch(&mut conn, vec![incr(&s, &key), incr(&s, &key)])
            .await
            .unwrap();
        let applied = get(&server, &key).await;
        println!("-{denied}: {outcomes:?}, applied {applied}");
        let ran = outcomes.iter().filter(|o| o.ran()).count() as i64;
        let maybe = outcomes.iter().filter(|o| o.may_have_run()).count() as i64;
        assert!(
            applied >= ran && applied <= ran + maybe,
            "-{denied}: applied {applied}, told {outcomes:?}"
        );
        if denied == "exec" {
            assert!(outcomes.iter().all(|o| o.is_not_run()), "{outcomes:?}");
            assert_eq!(applied, 0);
            // The connection is still usable (not left inside MULTI).
            let pong: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
            assert_eq!(pong, "PONG");
        } else {
            assert_eq!(applied, 2, "the calls ran outside a transaction");
            assert!(outcomes.iter().all(|o| o.may_have_run()), "{outcomes:?}");
        }
    }
}
