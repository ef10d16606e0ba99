//! The Redis Functions backend against real Redis: FCALL of versioned libraries, the reload
//! on "Function not found", the typed API unchanged, read-only calls, persistence.

#[path = "fixtures/mod.rs"]
mod fixtures;
mod support;

use std::time::Duration;

use redis::Value;
use redkit::inventory::{Decrement, Inventory};
use redkit::lock::{Acquire, Lock, LockOptions, Release};
use redkit::rate_limit::{Decision, FixedWindow, LimitKey, Rate};
use redkit::script::{Backend, Library};
use redkit::versioned::{Cas, Versioned};
use redkit::{Call, Error, Registry, Script, ScriptManager};
use support::{RedisCluster, RedisServer};

fn functions() -> ScriptManager {
    ScriptManager::new().with_backend(Backend::Functions)
}

async fn calls(server: &RedisServer, command: &str) -> u64 {
    let stats: String = server.cmd(&["INFO", "commandstats"]).await;
    let prefix = format!("cmdstat_{command}:calls=");
    stats
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

async fn hit(limiter: &FixedWindow, conn: &mut redis::aio::MultiplexedConnection) -> u32 {
    let key = LimitKey::ip("192.0.2.7".parse().unwrap());
    match limiter.check(conn, &key).await.unwrap() {
        Decision::Allowed(q) => q.remaining(),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn redkit_library_loads_every_embedded_script() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let library = Library::redkit();
    let name: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(library.code())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(name, library.name());
    let list: Value = server.cmd(&["FUNCTION", "LIST"]).await;
    let text = format!("{list:?}");
    for script in Registry::global().scripts() {
        let function = library.function_name(script).unwrap();
        assert!(text.contains(function), "{function} not listed");
    }
    assert_eq!(library.functions(), Registry::global().scripts().len());
}

#[tokio::test]
async fn limiter_runs_as_fcall_and_a_flushed_library_is_reloaded_once() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let manager = functions();
    let limiter = FixedWindow::new("fn", Rate::per_minute(redkit::nonzero!(100)))
        .unwrap()
        .with_manager(manager.clone());
    // Nothing loaded yet: the first call loads the library once.
    assert_eq!(hit(&limiter, &mut conn).await, 99);
    assert_eq!(manager.stats().function_reloads, 1);
    for expected in (95..99).rev() {
        assert_eq!(hit(&limiter, &mut conn).await, expected);
    }
    assert_eq!(
        manager.stats().function_reloads,
        1,
        "steady state: no reload"
    );
    assert_eq!(calls(&server, "evalsha").await, 0);
    assert_eq!(calls(&server, "eval").await, 0);
    assert_eq!(calls(&server, "fcall").await, 6, "5 calls + 1 retry");

    let _: () = server.cmd(&["FUNCTION", "FLUSH"]).await;
    assert_eq!(
        hit(&limiter, &mut conn).await,
        94,
        "state kept across the reload"
    );
    assert_eq!(manager.stats().function_reloads, 2);
    assert_eq!(hit(&limiter, &mut conn).await, 93);
    assert_eq!(manager.stats().function_reloads, 2);
    assert_eq!(calls(&server, "function|load").await, 2);
    assert_eq!(manager.stats().noscript_fallbacks, 0);
}

#[tokio::test]
async fn typed_api_is_unchanged_on_functions() {
    // Scripts using redis.acl_check_cmd, TIME, PTTL and error replies inside functions.
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let manager = functions();

    let lock = Lock::new().with_manager(manager.clone());
    let options = LockOptions::new().ttl(Duration::from_secs(5));
    let Acquire::Acquired(guard) = lock.try_acquire(&mut conn, "job", &options).await.unwrap()
    else {
        panic!("free lock not acquired")
    };
    assert!(matches!(
        lock.try_acquire(&mut conn, "job", &options).await.unwrap(),
        Acquire::Busy { .. }
    ));
    assert_eq!(
        lock.release(&mut conn, guard).await.unwrap(),
        Release::Released
    );

    let inventory = Inventory::builder()
        .prefix("fn:inv")
        .with_manager(manager.clone())
        .build()
        .unwrap();
    let store = inventory.store("s1").unwrap();
    store.set(&mut conn, "mug", 3).await.unwrap();
    assert!(matches!(
        store
            .decrement(&mut conn, "mug", 2, Some("o1"))
            .await
            .unwrap(),
        Decrement::Decremented { remaining: 1 }
    ));
    assert!(matches!(
        store
            .decrement(&mut conn, "mug", 2, Some("o2"))
            .await
            .unwrap(),
        Decrement::Insufficient { available: 1 }
    ));
    assert_eq!(store.stock(&mut conn, "mug").await.unwrap(), 1);
    // A take of 1 goes out in the short forms (no argument; with a request id, only the
    // record's two): through FCALL as through EVALSHA.
    assert!(matches!(
        store
            .decrement(&mut conn, "mug", 1, Some("o3"))
            .await
            .unwrap(),
        Decrement::Decremented { remaining: 0 }
    ));
    assert!(matches!(
        store.decrement(&mut conn, "mug", 1, None).await.unwrap(),
        Decrement::Insufficient { available: 0 }
    ));
    let again = store
        .decrement(&mut conn, "mug", 1, Some("o3"))
        .await
        .unwrap();
    assert!(
        matches!(
            again.original(),
            Some(Decrement::Decremented { remaining: 0 })
        ),
        "{again:?}"
    );
    store.set(&mut conn, "mug", 2).await.unwrap();
    assert!(matches!(
        store.decrement(&mut conn, "mug", 1, None).await.unwrap(),
        Decrement::Decremented { remaining: 1 }
    ));

    // A script's own error reply keeps its type through FCALL.
    let v = Versioned::new().with_manager(manager.clone());
    assert!(matches!(
        v.compare_and_set(&mut conn, "cfg", 0, b"a").await.unwrap(),
        Cas::Set { version: 1 }
    ));
    let snap = v.read(&mut conn, "cfg").await.unwrap();
    assert_eq!((snap.version, snap.value.as_deref()), (1, Some(&b"a"[..])));
    let key = v.key("corrupt").unwrap();
    let _: i64 = server
        .cmd(&["HSET", &key, "value", "a", "version", "05"])
        .await;
    assert!(matches!(
        v.read(&mut conn, "corrupt").await,
        Err(Error::CorruptData { .. })
    ));

    assert_eq!(manager.stats().function_reloads, 1, "one library for all");
    assert_eq!(
        calls(&server, "evalsha").await + calls(&server, "eval").await,
        0
    );
    assert!(calls(&server, "fcall").await > 0);
}

#[tokio::test]
async fn scripts_outside_every_library_still_run_as_evalsha() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let manager = functions();
    let own = Script::new("own", 1, 1, "return redis.call('INCR', KEYS[1])").unwrap();
    let mut call = Call::new(&own);
    call.key("{o}:n");
    let n: i64 = manager.invoke(&mut conn, &call).await.unwrap();
    assert_eq!(n, 1);
    assert_eq!(manager.stats().noscript_fallbacks, 1);
    assert_eq!(manager.stats().function_reloads, 0);
}

#[tokio::test]
async fn user_library_is_called_by_its_own_function_names() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let set = Registry::from_files([
        (
            "bump.v1.lua",
            "--! keys: 1\nreturn redis.call('INCRBY', KEYS[1], ARGV[1])",
        ),
        (
            "peek.v1.lua",
            "--! keys: 1\n--! flags: no-writes\nreturn redis.call('GET', KEYS[1])",
        ),
    ]);
    let library = Library::new("myapp", &set).unwrap();
    let manager = ScriptManager::new().with_library(library.clone());
    let mut bump = Call::new(set.require("bump", 1).unwrap());
    bump.key("{u}:n").arg(5);
    let n: i64 = manager.invoke(&mut conn, &bump).await.unwrap();
    assert_eq!(n, 5);
    let mut peek = Call::new(set.require("peek", 1).unwrap());
    peek.key("{u}:n");
    let seen: String = manager.invoke(&mut conn, &peek).await.unwrap();
    assert_eq!(seen, "5");
    assert_eq!(calls(&server, "fcall").await, 2, "one call + one retry");
    assert_eq!(calls(&server, "fcall_ro").await, 1);
    assert_eq!(manager.stats().function_reloads, 1);
    // Only the library that was missing was loaded.
    let list: Value = server.cmd(&["FUNCTION", "LIST"]).await;
    let text = format!("{list:?}");
    assert!(text.contains(library.name()));
    assert!(!text.contains(Library::redkit().name()));

    // A no-writes function cannot write, even when its body tries.
    let sneaky = Registry::from_files([(
        "sneaky.v1.lua",
        "--! keys: 1\n--! flags: no-writes\nreturn redis.call('SET', KEYS[1], 'x')",
    )]);
    let m2 = ScriptManager::new().with_library(Library::new("sneaky", &sneaky).unwrap());
    let mut call = Call::new(sneaky.require("sneaky", 1).unwrap());
    call.key("{u}:s");
    let err = m2.invoke::<Value, _>(&mut conn, &call).await.unwrap_err();
    // Refused as a write from a read-only function (not as a write-flagged function sent
    // with FCALL_RO): the flag was registered.
    assert!(
        matches!(&err, Error::Redis(e) if e.to_string().contains("read-only")),
        "{err:?}"
    );
    let exists: i64 = server.cmd(&["EXISTS", "{u}:s"]).await;
    assert_eq!(exists, 0);
}

#[tokio::test]
async fn server_without_functions_gives_a_typed_error() {
    // What Redis < 7.0 answers: "unknown command 'FCALL'".
    let server = RedisServer::spawn_with(&["--rename-command", "FCALL", "\"\""]).await;
    let mut conn = server.conn().await;
    let limiter = FixedWindow::new("old", Rate::per_second(redkit::nonzero!(10)))
        .unwrap()
        .with_manager(functions());
    let err = limiter
        .check(&mut conn, &LimitKey::ip("192.0.2.1".parse().unwrap()))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
}

/// The replica of the primary that serves `key`, and that primary.
async fn replica_of<'c>(cluster: &'c RedisCluster, key: &str) -> &'c RedisServer {
    let primary = cluster.primary_for(key).await.port();
    for node in &cluster.nodes {
        let repl: String = node.cmd(&["INFO", "replication"]).await;
        if repl.contains("role:slave") && repl.contains(&format!("master_port:{primary}\r")) {
            return node;
        }
    }
    panic!("no replica of {primary}");
}

/// A plain connection to a Cluster replica that accepts reads (`READONLY`).
async fn readonly_conn(replica: &RedisServer) -> redis::aio::MultiplexedConnection {
    let mut conn = replica.conn().await;
    let _: () = redis::cmd("READONLY").query_async(&mut conn).await.unwrap();
    conn
}

async fn wait_until<F, Fut>(mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..200 {
        if done().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("condition not reached within 5 s");
}

#[tokio::test]
async fn read_only_calls_are_served_by_a_replica_where_writing_calls_are_refused() {
    let cluster = RedisCluster::spawn().await;
    let mut conn = cluster.conn().await;
    let scripts = Versioned::new();
    let functions = Versioned::new().with_manager(functions());
    assert!(matches!(
        functions
            .compare_and_set(&mut conn, "cfg", 0, b"a")
            .await
            .unwrap(),
        Cas::Set { version: 1 }
    ));
    let key = scripts.key("cfg").unwrap();
    let replica = replica_of(&cluster, &key).await;
    let library = Library::redkit().name().to_owned();
    let mut ro = readonly_conn(replica).await;
    wait_until(|| {
        let mut ro = ro.clone();
        let (key, library) = (key.clone(), library.clone());
        async move {
            let exists: i64 = redis::cmd("EXISTS")
                .arg(&key)
                .query_async(&mut ro)
                .await
                .unwrap();
            let list: Value = redis::cmd("FUNCTION")
                .arg("LIST")
                .query_async(&mut ro)
                .await
                .unwrap();
            exists == 1 && format!("{list:?}").contains(&library)
        }
    })
    .await;

    // versioned_read.v3 is declared read-only: EVALSHA_RO (EVAL_RO after NOSCRIPT) runs here.
    let snap = scripts.read(&mut ro, "cfg").await.unwrap();
    assert_eq!((snap.version, snap.value.as_deref()), (1, Some(&b"a"[..])));
    let snap = functions.read(&mut ro, "cfg").await.unwrap();
    assert_eq!(snap.version, 1);
    assert_eq!(calls(replica, "eval_ro").await, 1);
    assert_eq!(calls(replica, "fcall_ro").await, 1);
    // A function that may write is redirected to the primary; a writing script fails here.
    let cas = Registry::global().require("versioned_cas", 1).unwrap();
    let function = Library::redkit().function_name(cas).unwrap();
    let refused: redis::RedisResult<Value> = redis::cmd("FCALL")
        .arg(function)
        .arg(1)
        .arg(&key)
        .arg(1)
        .arg("b")
        .arg("")
        .query_async(&mut ro)
        .await;
    assert_eq!(refused.unwrap_err().code(), Some("MOVED"));
    assert!(scripts
        .compare_and_set(&mut ro, "cfg", 1, b"b")
        .await
        .is_err());
    assert_eq!(scripts.read(&mut conn, "cfg").await.unwrap().version, 1);
}

/// On each node: (is a replica, how many embedded scripts are cached, has redkit's library).
async fn warm(cluster: &RedisCluster) -> Vec<(bool, usize, bool)> {
    let mut out = Vec::new();
    for node in &cluster.nodes {
        let repl: String = node.cmd(&["INFO", "replication"]).await;
        let mut conn = node.conn().await;
        let mut exists = redis::cmd("SCRIPT");
        exists.arg("EXISTS");
        for s in Registry::global().scripts() {
            exists.arg(s.sha1());
        }
        let cached: Vec<bool> = exists.query_async(&mut conn).await.unwrap();
        let list: Value = node.cmd(&["FUNCTION", "LIST"]).await;
        let library = format!("{list:?}").contains(Library::redkit().name());
        out.push((
            repl.contains("role:slave"),
            cached.iter().filter(|c| **c).count(),
            library,
        ));
    }
    out
}

#[tokio::test]
async fn preload_reaches_primaries_libraries_replicate_and_admin_load_warms_replicas() {
    let cluster = RedisCluster::spawn().await;
    let mut conn = cluster.conn().await;
    let all = Registry::global().scripts().len();
    functions().preload(&mut conn).await.unwrap();
    // Libraries reach replicas by replication (asynchronously): wait for them.
    for node in &cluster.nodes {
        wait_until(|| async {
            let list: Value = node.cmd(&["FUNCTION", "LIST"]).await;
            format!("{list:?}").contains(Library::redkit().name())
        })
        .await;
    }
    let after_preload = warm(&cluster).await;
    for &(replica, cached, library) in &after_preload {
        assert!(library, "{after_preload:?}");
        assert_eq!(cached, if replica { 0 } else { all }, "{after_preload:?}");
    }
    assert_eq!(after_preload.iter().filter(|n| n.0).count(), 3);

    let reports = redkit::script::admin::Admin::cluster(cluster.urls())
        .unwrap()
        .load()
        .await
        .unwrap();
    assert_eq!(reports.len(), 6);
    assert!(reports.iter().all(|r| r.is_ok()), "{reports:?}");
    for (replica, cached, _) in warm(&cluster).await {
        assert_eq!(cached, all, "replica: {replica}");
    }
}

fn counter_set(versions: u32) -> Registry {
    let files = (1..=versions).map(|v| {
        (
            format!("counter.v{v}.lua"),
            format!("--! keys: 1\nreturn redis.call('INCRBY', KEYS[1], ARGV[1]) * {v}"),
        )
    });
    Registry::from_files(files)
}

#[tokio::test]
async fn blue_green_load_n_plus_1_beside_n_switch_then_delete_n() {
    use redkit::script::admin::{Admin, FlushMode, LibraryState};
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let admin = Admin::single(server.url().as_str()).unwrap();
    let (blue_set, green_set) = (counter_set(1), counter_set(2));
    let blue = Library::new("app", &blue_set).unwrap();
    let green = Library::new("app", &green_set).unwrap();
    assert_ne!(blue.name(), green.name(), "a new version is a new library");

    assert!(admin.load_library(&blue).await.unwrap()[0].is_ok());
    let old = ScriptManager::new().with_library(blue.clone());
    let mut call = Call::new(blue_set.require("counter", 1).unwrap());
    call.key("{bg}:n").arg(1);
    assert_eq!(old.invoke::<i64, _>(&mut conn, &call).await.unwrap(), 1);

    // Rolling deploy: green loaded beside blue; old and new callers run side by side.
    assert!(admin.load_library(&green).await.unwrap()[0].is_ok());
    let new = ScriptManager::new().with_library(green.clone());
    let mut call_v2 = Call::new(green_set.require("counter", 2).unwrap());
    call_v2.key("{bg}:n").arg(1);
    let mut call_v1_on_green = Call::new(green_set.require("counter", 1).unwrap());
    call_v1_on_green.key("{bg}:n").arg(1);
    assert_eq!(new.invoke::<i64, _>(&mut conn, &call_v2).await.unwrap(), 4);
    assert_eq!(old.invoke::<i64, _>(&mut conn, &call).await.unwrap(), 3);
    assert_eq!(
        new.invoke::<i64, _>(&mut conn, &call_v1_on_green)
            .await
            .unwrap(),
        4
    );
    assert_eq!(
        old.stats().function_reloads + new.stats().function_reloads,
        0
    );
    let listed = admin.libraries().await.unwrap();
    let names = listed[0].value.clone().unwrap();
    assert!(names.contains(&blue.name().to_owned()) && names.contains(&green.name().to_owned()));

    // Every caller switched: delete blue.
    assert_eq!(
        admin.delete_library(blue.name()).await.unwrap()[0].value,
        Some(true)
    );
    assert_eq!(
        admin.delete_library(blue.name()).await.unwrap()[0].value,
        Some(false)
    );
    let state = |r: Vec<redkit::script::admin::NodeReport<LibraryState>>| r[0].value;
    assert_eq!(
        state(admin.verify_library(&blue).await.unwrap()),
        Some(LibraryState::Missing)
    );
    assert_eq!(
        state(admin.verify_library(&green).await.unwrap()),
        Some(LibraryState::Loaded)
    );
    assert_eq!(new.invoke::<i64, _>(&mut conn, &call_v2).await.unwrap(), 10);
    assert_eq!(new.stats().function_reloads, 0);

    // Same name, other code: reported, not taken for loaded.
    let forged = format!(
        "#!lua name={}\nredis.register_function('x_{}', function() return 1 end)",
        green.name(),
        green.name()
    );
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(&forged)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        state(admin.verify_library(&green).await.unwrap()),
        Some(LibraryState::Different)
    );
    assert!(admin.flush_functions(FlushMode::Sync).await.unwrap()[0].is_ok());
    assert_eq!(admin.libraries().await.unwrap()[0].value, Some(vec![]));
}

#[tokio::test]
async fn functions_survive_an_aof_restart_without_a_reload() {
    let mut server =
        RedisServer::spawn_with(&["--appendonly", "yes", "--appendfsync", "always"]).await;
    let manager = functions();
    let limiter = FixedWindow::new(
        "aof",
        Rate::new(redkit::nonzero!(100), Duration::from_secs(600)).unwrap(),
    )
    .unwrap()
    .with_manager(manager.clone());
    let mut conn = server.conn().await;
    assert_eq!(hit(&limiter, &mut conn).await, 99);
    assert_eq!(manager.stats().function_reloads, 1, "first load");
    server.restart().await; // SIGKILL, then start from the AOF
    let mut conn = server.conn().await;
    assert_eq!(
        hit(&limiter, &mut conn).await,
        98,
        "counter restored from the AOF"
    );
    assert_eq!(
        manager.stats().function_reloads,
        1,
        "no reload after the restart"
    );
    assert_eq!(calls(&server, "function|load").await, 0);

    // The script cache, by contrast, is empty after the restart.
    let scripts = ScriptManager::new();
    let plain = FixedWindow::new(
        "aof",
        Rate::new(redkit::nonzero!(100), Duration::from_secs(600)).unwrap(),
    )
    .unwrap()
    .with_manager(scripts.clone());
    scripts.preload(&mut conn).await.unwrap();
    server.restart().await;
    let mut conn = server.conn().await;
    assert_eq!(hit(&plain, &mut conn).await, 97);
    assert_eq!(scripts.stats().noscript_fallbacks, 1);
}

#[tokio::test]
async fn a_promoted_replica_answers_the_first_fcall_without_a_reload() {
    let cluster = RedisCluster::spawn_with_node_timeout(1_000).await;
    let mut conn = cluster.conn().await;
    let manager = functions();
    let scripts = ScriptManager::new();
    manager.preload(&mut conn).await.unwrap();
    scripts.preload(&mut conn).await.unwrap();
    let on_functions = FixedWindow::new(
        "fo",
        Rate::new(redkit::nonzero!(100), Duration::from_secs(600)).unwrap(),
    )
    .unwrap()
    .with_manager(manager.clone());
    let on_scripts = FixedWindow::new(
        "fo",
        Rate::new(redkit::nonzero!(100), Duration::from_secs(600)).unwrap(),
    )
    .unwrap()
    .with_manager(scripts.clone());
    let key = LimitKey::ip("192.0.2.9".parse().unwrap());
    let remaining = |d: Decision| match d {
        Decision::Allowed(q) => q.remaining(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        remaining(on_functions.check(&mut conn, &key).await.unwrap()),
        99
    );
    assert_eq!(
        remaining(on_scripts.check(&mut conn, &key).await.unwrap()),
        98
    );

    // The primary of the limiter's key hands over to its replica (CLUSTER FAILOVER waits
    // for the replica to catch up, so nothing is lost).
    let redis_key = on_functions.redis_key(&key);
    let replica = replica_of(&cluster, &redis_key).await;
    let ok: String = replica.cmd(&["CLUSTER", "FAILOVER"]).await;
    assert_eq!(ok, "OK");
    wait_until(|| async {
        let repl: String = replica.cmd(&["INFO", "replication"]).await;
        repl.contains("role:master")
    })
    .await;
    let mut conn = cluster.conn().await;
    let mut first = None;
    for _ in 0..100 {
        match on_functions.check(&mut conn, &key).await {
            Ok(d) => {
                first = Some(d);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    assert_eq!(remaining(first.expect("served after the failover")), 97);
    assert_eq!(
        manager.stats().function_reloads,
        0,
        "no reload on the promoted replica"
    );
    assert_eq!(calls(replica, "fcall").await, 1);
    // The script cache did not follow: the scripts backend needs one EVAL there.
    assert_eq!(
        remaining(on_scripts.check(&mut conn, &key).await.unwrap()),
        96
    );
    assert_eq!(scripts.stats().noscript_fallbacks, 1);
}

/// The Functions backend with the fixtures' library too, where the sample script `bump` runs
/// (`fixed_window.v1`, retired from redkit's own library).
fn functions_with_sample() -> ScriptManager {
    functions().with_library(Library::new("fixtures", fixtures::registry()).unwrap())
}

fn bump(key: &str) -> Call<'static> {
    let script = fixtures::sample();
    let mut call = Call::new(script);
    call.key(key).arg(1_000_000).arg(600_000).arg(1);
    call
}

fn counts(outcomes: Vec<redkit::CallOutcome<Value>>) -> Vec<i64> {
    outcomes
        .into_iter()
        .map(|o| match o {
            redkit::CallOutcome::Ran(Ok(Value::Array(items))) => match items.first() {
                Some(Value::Int(n)) => *n,
                other => panic!("{other:?}"),
            },
            other => panic!("expected a reply, got {other:?}"),
        })
        .collect()
}

#[tokio::test]
async fn batches_run_as_fcall_and_reload_a_flushed_library_once_for_the_missing_calls() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let manager = functions_with_sample();
    let batch = |n: usize| {
        (0..n)
            .map(|i| bump(&format!("{{b}}:{}", i % 4)))
            .collect::<Vec<_>>()
    };
    // Nothing loaded: every call answered "Function not found", re-run once after FUNCTION LOAD.
    let first = counts(manager.invoke_batch(&mut conn, batch(8)).await.unwrap());
    assert_eq!(
        first,
        [1, 1, 1, 1, 2, 2, 2, 2],
        "each call applied exactly once"
    );
    assert_eq!(manager.stats().function_reloads, 1);
    assert_eq!(manager.stats().batch_reruns, 8);
    // Loaded: one transaction, no reload.
    let second = counts(manager.invoke_batch(&mut conn, batch(4)).await.unwrap());
    assert_eq!(second, [3, 3, 3, 3]);
    assert_eq!(manager.stats().function_reloads, 1);
    // Flushed between batches: reloaded once more, nothing applied twice.
    let _: () = server.cmd(&["FUNCTION", "FLUSH"]).await;
    let third = counts(manager.invoke_batch(&mut conn, batch(4)).await.unwrap());
    assert_eq!(third, [4, 4, 4, 4]);
    assert_eq!(manager.stats().function_reloads, 2);
    assert_eq!(calls(&server, "evalsha").await, 0);
    assert_eq!(calls(&server, "eval").await, 0);
    assert_eq!(calls(&server, "script|load").await, 0);
    assert_eq!(calls(&server, "fcall").await, 8 + 8 + 4 + 4 + 4);
}

#[tokio::test]
async fn batches_by_slot_run_as_fcall_on_every_primary() {
    let cluster = RedisCluster::spawn().await;
    let conn = cluster.conn().await;
    let manager = functions_with_sample();
    let keys: Vec<String> = (0..24).map(|i| format!("{{s{i}}}:n")).collect();
    let run = |round| {
        let calls = keys.iter().map(|k| bump(k)).collect::<Vec<_>>();
        let manager = manager.clone();
        let conn = conn.clone();
        async move {
            // Bounded: a batch that never answers fails here instead of hanging the suite.
            let batch = manager.invoke_batch_by_slot(&conn, calls);
            let out = tokio::time::timeout(Duration::from_secs(10), batch)
                .await
                .expect("the batch was not answered within 10 s");
            let out = counts(out.unwrap());
            assert!(out.iter().all(|&n| n == round), "round {round}: {out:?}");
        }
    };
    run(1).await; // each primary loads the library once, on its first batch
    run(2).await;
    let reloads = manager.stats().function_reloads;
    assert!((1..=24).contains(&reloads), "{reloads}");
    let mut fcalls = 0;
    for primary in cluster.primaries().await {
        fcalls += calls(primary, "fcall").await;
        assert_eq!(calls(primary, "evalsha").await, 0);
    }
    assert_eq!(fcalls, 24 + 24 + 24, "missing, re-run, loaded");
}

/// The same reservation story through `EVALSHA` and through the library, where the reclaim
/// block is the shared function `redkit_shared_reclaim_<hash8>`: same outcomes, same keyspace.
async fn reservation_story(
    manager: ScriptManager,
) -> (Vec<String>, std::collections::BTreeMap<Vec<u8>, Vec<u8>>) {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let store = Inventory::builder()
        .prefix("t:fnres")
        .with_manager(manager)
        .build()
        .unwrap()
        .store("s")
        .unwrap();
    let short = Duration::from_millis(50);
    let long = Duration::from_secs(600);
    store.set(&mut conn, "mug", 10).await.unwrap();
    let mut seen = Vec::new();
    for (qty, ttl, id) in [
        (3, short, "cart-1"),
        (2, short, "cart-2"),
        (4, long, "cart-3"),
    ] {
        let r = store.reserve(&mut conn, "mug", qty, ttl, id).await.unwrap();
        seen.push(format!("{:?}", r).split(',').next().unwrap().to_owned());
    }
    seen.push(format!(
        "stock {}",
        store.stock(&mut conn, "mug").await.unwrap()
    ));
    tokio::time::sleep(Duration::from_millis(120)).await;
    // The two short holds expired: reclaimed by the read (get) ...
    seen.push(format!(
        "stock {}",
        store.stock(&mut conn, "mug").await.unwrap()
    ));
    // ... and by a reserve, after a new short hold expires.
    let r = store
        .reserve(&mut conn, "mug", 1, short, "cart-4")
        .await
        .unwrap();
    seen.push(format!("{:?}", r).split(',').next().unwrap().to_owned());
    tokio::time::sleep(Duration::from_millis(120)).await;
    let r = store
        .reserve(&mut conn, "mug", 6, long, "cart-5")
        .await
        .unwrap();
    seen.push(format!("{:?}", r).split(',').next().unwrap().to_owned());
    seen.push(format!(
        "{:?}",
        store.commit(&mut conn, "mug", "cart-3").await.unwrap()
    ));
    seen.push(format!(
        "stock {}",
        store.stock(&mut conn, "mug").await.unwrap()
    ));
    let mut keys = support::snapshot(&mut conn).await;
    // Expiry times differ between runs; the keys and values that do not hold a time must not.
    keys.retain(|k, _| {
        let k = String::from_utf8_lossy(k);
        !k.contains(":resv:") && !k.contains(":resv-exp:")
    });
    assert!(!keys.is_empty());
    let keys = keys.into_iter().map(|(k, (v, _))| (k, v)).collect();
    (seen, keys)
}

#[tokio::test]
async fn the_shared_reclaim_function_behaves_like_the_scripts_copy() {
    let code = Library::redkit().code();
    assert_eq!(
        code.matches("local function redkit_shared_reclaim_")
            .count(),
        1
    );
    let (scripts, scripts_keys) = reservation_story(ScriptManager::new()).await;
    let (library, library_keys) = reservation_story(functions()).await;
    assert_eq!(library, scripts);
    assert_eq!(library_keys, scripts_keys);
    assert_eq!(
        scripts,
        [
            "Reserved { remaining: 7",
            "Reserved { remaining: 5",
            "Reserved { remaining: 1",
            "stock 1",
            "stock 6",
            "Reserved { remaining: 5",
            "Reserved { remaining: 0",
            "Committed { quantity: 4 }",
            "stock 0",
        ]
    );
}

/// A replicated call with the Functions backend goes through the same recovery as a single
/// call: "Function not found" -> one `FUNCTION LOAD REPLACE` -> the `FCALL` and its `WAIT`
/// once more; the call runs once, and the replica acknowledges it.
#[tokio::test]
async fn acked_fcall_after_function_flush_reloads_once_and_runs_once() {
    let pair = support::ReplicatedPair::spawn().await;
    let mut conn = pair.primary.patient_conn().await;
    let manager = functions_with_sample();
    let one = redkit::script::Replication::new(1, Duration::from_secs(2)).unwrap();
    let script = fixtures::sample();
    let mut call = Call::new(script);
    call.key("{fa}:c").arg(1_000_000).arg(600_000).arg(1);
    for expected in 1..=2 {
        let _: () = pair.primary.cmd(&["FUNCTION", "FLUSH"]).await;
        let reloads = manager.stats().function_reloads;
        let acked = manager
            .replicated(one)
            .invoke::<(i64, i64, i64), _>(&mut conn, &call)
            .await
            .unwrap();
        assert_eq!(acked.outcome.0, expected, "applied once");
        assert_eq!((acked.replicas, acked.requested), (1, 1));
        assert_eq!(manager.stats().function_reloads, reloads + 1);
    }
    let on_replica: String = pair.replica.cmd(&["GET", "{fa}:c"]).await;
    assert_eq!(on_replica, "2");
    assert_eq!(manager.stats().noscript_fallbacks, 0);
}
