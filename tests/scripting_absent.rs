//! A server without Lua scripting (here Redis 7 with `EVAL`, `EVALSHA` and `SCRIPT` renamed
//! away, as an operator can do, and as a server built without its Lua engine answers): every
//! script call is `Error::Unsupported` naming Lua scripting, not a generic Redis error, and
//! nothing is written. (A plain lock's acquire is a single `SET NX PX` and works.)
//!
//! On Valkey 9 without scripting, a plain lock's whole cycle works: its release and renewal
//! use the server's `DELIFEQ` and `SET ... IFEQ`, and the release wakes blocked acquirers.

#[path = "support/harness.rs"]
mod harness;
mod support;

use std::time::Duration;

use redkit::inventory::Inventory;
use std::time::Instant;

use redkit::lock::{Acquire, Lock, LockGuard, LockOptions, Release, Renew};
use redkit::rate_limit::{FixedWindow, LimitKey, Rate};
use redkit::{Error, ScriptManager};
use support::{RedisServer, Valkey};

/// `--rename-command C ""` for every scripting command.
fn no_scripting_args() -> Vec<&'static str> {
    let mut args = Vec::new();
    for command in ["EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "SCRIPT"] {
        args.extend(["--rename-command", command, ""]);
    }
    args
}

async fn without_scripting() -> RedisServer {
    RedisServer::spawn_with(&no_scripting_args()).await
}

fn assert_no_scripting<T: std::fmt::Debug>(what: &str, outcome: redkit::Result<T>) {
    match outcome {
        Err(Error::Unsupported { feature, detail }) => {
            assert!(feature.contains("Lua scripting"), "{what}: {feature}");
            assert!(detail.contains("unknown command"), "{what}: {detail}");
        }
        other => panic!("{what}: expected Error::Unsupported (Lua scripting), got {other:?}"),
    }
}

async fn every_component_says_the_server_has_no_lua_scripting_and_writes_nothing() {
    let server = without_scripting().await;
    let mut conn = server.conn().await;
    let probe: redis::RedisResult<redis::Value> = redis::cmd("EVALSHA")
        .arg("0000000000000000000000000000000000000000")
        .arg(0)
        .query_async(&mut conn)
        .await;
    assert!(
        probe.is_err_and(|e| e.to_string().contains("unknown command")),
        "the server under test has no EVALSHA"
    );

    let limiter = FixedWindow::new("api", Rate::per_minute(redkit::nonzero!(10))).unwrap();
    let key = LimitKey::text("client").unwrap();
    assert_no_scripting("rate limit", limiter.check(&mut conn, &key).await);
    assert_no_scripting("rate limit, again", limiter.check(&mut conn, &key).await);

    // A plain lock's acquire is one `SET NX PX`, no script: it works. Its release is a
    // compare-and-delete script: refused, and the lock stays until its lease ends.
    let lock = Lock::new();
    let options = LockOptions::new().ttl(Duration::from_secs(5));
    let guard = match lock.try_acquire(&mut conn, "job", &options).await.unwrap() {
        redkit::lock::Acquire::Acquired(guard) => guard,
        other => panic!("acquire: {other:?}"),
    };
    assert_no_scripting("lock release", lock.release(&mut conn, guard).await);
    let held: i64 = server.cmd(&["EXISTS", &lock.key("job").unwrap()]).await;
    assert_eq!(held, 1, "not released: it ends with its lease");
    assert_no_scripting(
        "fenced lock",
        lock.try_acquire(&mut conn, "fenced", &options.clone().fencing(true))
            .await,
    );

    let store = Inventory::builder()
        .build()
        .unwrap()
        .store("berlin")
        .unwrap();
    assert_no_scripting(
        "inventory",
        store
            .decrement(&mut conn, "sku-1", 1, Some("order-1"))
            .await,
    );

    assert_no_scripting("preload", ScriptManager::new().preload(&mut conn).await);

    let keys: i64 = server.cmd(&["DBSIZE"]).await;
    assert_eq!(keys, 1, "nothing written but the plain lock's key");
}

fn acquired(outcome: redkit::Result<Acquire<LockGuard<Lock>>>) -> LockGuard<Lock> {
    match outcome {
        Ok(Acquire::Acquired(guard)) => guard,
        other => panic!("expected the lock, got {other:?}"),
    }
}

async fn a_plain_lock_works_on_valkey_without_scripting(valkey: Valkey) {
    let server = RedisServer::spawn_valkey(&valkey, &no_scripting_args()).await;
    let mut conn = server.conn().await;
    let lock = Lock::new();
    let key = lock.key("job").unwrap();
    let options = LockOptions::new().ttl(Duration::from_secs(5));

    // Acquire, renew (by hand and by a same-token retry), release.
    let mine = options.clone().token("no-scripting-token-0123456789");
    let mut guard = acquired(lock.try_acquire(&mut conn, "job", &mine).await);
    let _: i64 = server.cmd(&["PEXPIRE", &key, "300"]).await;
    assert_eq!(
        lock.renew(&mut conn, &mut guard).await.unwrap(),
        Renew::Renewed
    );
    let _: i64 = server.cmd(&["PEXPIRE", &key, "300"]).await;
    let again = acquired(lock.try_acquire(&mut conn, "job", &mine).await);
    let pttl: i64 = server.cmd(&["PTTL", &key]).await;
    assert!(pttl > 1_000, "the retry refreshed the lease: {pttl}");
    drop(guard);
    assert_eq!(
        lock.release(&mut conn, again).await.unwrap(),
        Release::Released
    );
    let exists: i64 = server.cmd(&["EXISTS", &key]).await;
    assert_eq!(exists, 0);

    // A blocked acquire woken by the release (the lease is 5 s: well before it ends).
    let held = acquired(lock.try_acquire(&mut conn, "job", &options).await);
    let (waiter_lock, waiter_options) = (lock.clone(), options.clone());
    let mut own = server.conn().await;
    let waiter = tokio::spawn(async move {
        let outcome = waiter_lock
            .acquire_blocking(
                &mut own,
                "job",
                &waiter_options.clone().max_wait(Duration::from_secs(4)),
            )
            .await;
        (outcome, Instant::now(), own)
    });
    server.wait_command_calls("blpop", 1).await;
    let released = Instant::now();
    assert_eq!(
        lock.release(&mut conn, held).await.unwrap(),
        Release::Released
    );
    let (outcome, woke, mut own) = waiter.await.unwrap();
    let next = acquired(outcome);
    assert!(
        woke - released < Duration::from_secs(1),
        "{:?}",
        woke - released
    );
    assert_eq!(
        lock.release(&mut own, next).await.unwrap(),
        Release::Released
    );

    // Still no script anywhere: a fenced lock is refused with the typed error.
    assert_no_scripting(
        "fenced lock",
        lock.try_acquire(&mut conn, "fenced", &options.clone().fencing(true))
            .await,
    );
    // Left: the wake-up list the last release pushed (the waiter marked its own hold too, for
    // callers behind it): it expires (60 s).
    let keys: Vec<String> = server.cmd(&["KEYS", "*"]).await;
    assert_eq!(keys, [format!("{key}:wake")]);
    for k in &keys {
        let pttl: i64 = server.cmd(&["PTTL", k]).await;
        assert!(pttl > 0 && pttl <= 60_000, "{k}: {pttl}");
    }
}

fn main() -> std::process::ExitCode {
    let mut tests = harness::Tests::new();
    harness::add!(
        tests,
        every_component_says_the_server_has_no_lua_scripting_and_writes_nothing
    );
    harness::add!(tests, valkey_multi_thread: a_plain_lock_works_on_valkey_without_scripting);
    tests.run()
}
