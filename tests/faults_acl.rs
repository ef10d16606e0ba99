//! The minimal ACL the README documents ("Failure semantics" -> "Minimal ACL"): a user with
//! exactly those permissions runs a limiter check, inventory set + decrement and a full lock
//! cycle; preload needs `SCRIPT LOAD` on top; one permission less is refused.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use redkit::inventory::{Decrement, Inventory};
use redkit::lock::{Acquire, FencedWrite, Lock, LockOptions, Release, Renew};
use redkit::rate_limit::{Decision, FixedWindow, Gcra, LimitKey, Rate};
use redkit::{Registry, ScriptManager};
use support::RedisServer;

/// Every call: EVALSHA, and EVAL for the NOSCRIPT fallback; their `_ro` forms for read-only
/// scripts (`--! flags: no-writes`).
const BASE: &[&str] = &["evalsha", "eval", "evalsha_ro", "eval_ro"];
/// Commands the rate-limiter scripts (fixed window, GCRA, sliding window) call.
const LIMITER: &[&str] = &["get", "set", "incrby", "pexpire", "pttl", "time"];
/// Commands the inventory scripts call.
const INVENTORY: &[&str] = &[
    "get",
    "set",
    "del",
    "exists",
    "type",
    "incrby",
    "decrby",
    "time",
    "hget",
    "hset",
    "hdel",
    "hgetall",
    "hlen",
    "hmget",
    "hscan",
    "zadd",
    "zrem",
    "zcard",
    "zrange",
    "zrangebyscore",
    "zscore",
];
/// Commands the lock scripts (acquire, release, renew, fenced_set) call, plus what
/// `acquire_blocking` sends (`set`, `pexpire` of the waiter flag, `blpop`).
const LOCK: &[&str] = &[
    "get", "set", "del", "incr", "pttl", "pexpire", "time", "hget", "hset", "exists", "type",
    "lpush", "ltrim", "blpop",
];
/// Commands the semaphore scripts call (plus `blpop`, sent by `acquire_blocking`).
const SEMAPHORE: &[&str] = &[
    "type",
    "time",
    "zrange",
    "zremrangebyscore",
    "zscore",
    "zcard",
    "zadd",
    "zrem",
    "pttl",
    "pexpire",
    "lpush",
    "ltrim",
    "blpop",
];
/// Commands the fair lock scripts call (plus `blpop`, sent by a waiting `FairLock::acquire`).
const FAIR: &[&str] = &[
    "type",
    "get",
    "set",
    "time",
    "zrange",
    "zrangebyscore",
    "zscore",
    "zrank",
    "zrem",
    "zadd",
    "pttl",
    "pexpire",
    "lpush",
    "ltrim",
    "blpop",
];
/// Commands the read-write lock scripts call.
const RW: &[&str] = &[
    "type",
    "get",
    "set",
    "del",
    "time",
    "zrange",
    "zremrangebyscore",
    "zcard",
    "zscore",
    "zrem",
    "zadd",
    "pttl",
    "pexpire",
];
/// Commands the reentrant lock scripts call (plus `hget`, sent by `holds`).
const REENTRANT: &[&str] = &[
    "type", "hgetall", "hget", "hexists", "get", "time", "hset", "pexpire", "set", "del", "pttl",
];
/// Commands the versioned-value scripts call.
const VERSIONED: &[&str] = &["type", "hmget", "hset"];

fn area(script: &str) -> &'static [&'static str] {
    if script.starts_with("fixed_window")
        || script.starts_with("gcra")
        || script.starts_with("sliding_window")
    {
        LIMITER
    } else if script.starts_with("inventory_") {
        INVENTORY
    } else if script.starts_with("lock_") || script.starts_with("fenced_set") {
        LOCK
    } else if script.starts_with("semaphore_") {
        SEMAPHORE
    } else if script.starts_with("fair_") {
        FAIR
    } else if script.starts_with("rw_") {
        RW
    } else if script.starts_with("reentrant_") {
        REENTRANT
    } else if script.starts_with("versioned_") {
        VERSIONED
    } else {
        panic!("script {script} belongs to no documented area: document its ACL")
    }
}

/// Words in quotes that are arguments of commands, not commands.
const OPTIONS: &[&str] = &[
    "limit",
    "nx",
    "xx",
    "px",
    "ex",
    "pxat",
    "exat",
    "keepttl",
    "get",
    "withscores",
    "match",
    "count",
    "ch",
    "gt",
    "lt",
    "incr",
];

/// Command names a Lua source may call: every quoted upper-case word (`'GET'`, `"HSET"`),
/// whether it is passed to `redis.call` directly, assigned to a variable, or listed in a write
/// plan that is checked with `redis.acl_check_cmd` and run later. Option words are skipped
/// unless also called directly (`GET`, `INCR` are both).
fn called(source: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes = source.as_bytes();
    for (i, c) in source.char_indices() {
        if c != '\'' && c != '"' {
            continue;
        }
        let rest = &source[i + 1..];
        let word: String = rest
            .chars()
            .take_while(|c| c.is_ascii_uppercase())
            .collect();
        if word.len() < 2 || rest.as_bytes().get(word.len()) != Some(&bytes[i]) {
            continue;
        }
        let lower = word.to_ascii_lowercase();
        let direct = source.contains(&format!("redis.call('{word}'"))
            || source.contains(&format!("redis.call(\"{word}\""))
            || source.contains(&format!("redis.pcall('{word}'"));
        if direct || !OPTIONS.contains(&lower.as_str()) {
            out.insert(lower);
        }
    }
    out
}

#[test]
fn every_command_a_shipped_script_calls_is_in_the_documented_minimum() {
    for script in Registry::global().scripts() {
        let allowed = area(script.name());
        for cmd in called(script.source()) {
            assert!(
                allowed.contains(&cmd.as_str()),
                "{} calls {cmd}, missing from the README's minimal ACL",
                script.id()
            );
        }
    }
}

fn setuser(name: &str, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["ACL", "SETUSER", name, "reset", "on", ">pw", "-@all"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let cmds: BTreeSet<&str> = BASE
        .iter()
        .chain(LIMITER)
        .chain(INVENTORY)
        .chain(LOCK)
        .chain(SEMAPHORE)
        .chain(FAIR)
        .chain(RW)
        .chain(REENTRANT)
        .chain(VERSIONED)
        .copied()
        .collect();
    args.extend(cmds.iter().map(|c| format!("+{c}")));
    args.extend(
        [
            "~redkit:rl:*",
            "~redkit:gcra:*",
            "~redkit:sw:*",
            "~shop:*",
            "~redkit:lock:*",
            "~redkit:sem:*",
            "~redkit:ver:*",
            "~app:*",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

async fn as_user(server: &RedisServer, user: &str) -> redis::aio::MultiplexedConnection {
    let url = format!("redis://{user}:pw@127.0.0.1:{}/", server.port());
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

async fn setuser_on(server: &RedisServer, args: Vec<String>) {
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let ok: String = server.cmd(&refs).await;
    assert_eq!(ok, "OK");
}

#[tokio::test]
async fn a_user_with_exactly_the_minimal_acl_runs_limiter_inventory_and_lock() {
    let server = RedisServer::spawn().await;
    setuser_on(&server, setuser("app", &[])).await;
    setuser_on(&server, setuser("deployer", &["+script|load"])).await;
    let mut conn = as_user(&server, "app").await;

    // The ACL is enforced on this connection: a key outside the patterns is refused.
    let r: redis::RedisResult<Option<String>> = redis::cmd("GET")
        .arg("elsewhere")
        .query_async(&mut conn)
        .await;
    assert_eq!(r.unwrap_err().code(), Some("NOPERM"));

    // Nothing preloaded: every first call goes EVALSHA -> NOSCRIPT -> EVAL.
    let limiter = FixedWindow::new("api", Rate::per_minute(10).unwrap()).unwrap();
    let d = limiter
        .check(&mut conn, &LimitKey::text("c").unwrap())
        .await
        .unwrap();
    assert!(matches!(d, Decision::Allowed(_)), "{d:?}");
    let gcra = Gcra::new("api", Rate::per_minute(10).unwrap()).unwrap();
    let d = gcra
        .check(&mut conn, &LimitKey::text("c").unwrap())
        .await
        .unwrap();
    assert!(matches!(d, Decision::Allowed(_)), "{d:?}");

    let store = Inventory::new("shop").unwrap().store("berlin").unwrap();
    store.set(&mut conn, "mug", 5).await.unwrap();
    let d = store
        .decrement(&mut conn, "mug", 2, Some("order-1"))
        .await
        .unwrap();
    assert_eq!(d, Decrement::Decremented { remaining: 3 });

    let lock = Lock::new();
    let options = LockOptions::new().fencing(true).ttl(Duration::from_secs(5));
    let Acquire::Acquired(mut guard) = lock.try_acquire(&mut conn, "job", &options).await.unwrap()
    else {
        panic!("not acquired")
    };
    assert_eq!(
        lock.renew(&mut conn, &mut guard).await.unwrap(),
        Renew::Renewed
    );
    let w = lock
        .fenced_set(&mut conn, "app:{job}:data", guard.fencing_token(), "v")
        .await
        .unwrap();
    assert_eq!(w, FencedWrite::Written);
    assert_eq!(
        lock.release(&mut conn, guard).await.unwrap(),
        Release::Released
    );

    // Preload needs SCRIPT LOAD on top.
    let denied = ScriptManager::new().preload(&mut conn).await;
    assert!(denied.is_err(), "{denied:?}");
    let mut deployer = as_user(&server, "deployer").await;
    let loaded = ScriptManager::new().preload(&mut deployer).await.unwrap();
    assert_eq!(loaded, Registry::global().scripts().len());
}

#[tokio::test]
async fn one_permission_less_is_refused_and_writes_nothing() {
    let server = RedisServer::spawn().await;
    // A first hit opens the window with one SET PX (fixed_window.v2).
    setuser_on(&server, setuser("app", &["-set"])).await;
    let mut conn = as_user(&server, "app").await;
    let limiter = FixedWindow::new("api", Rate::per_minute(10).unwrap()).unwrap();
    let r = limiter
        .check(&mut conn, &LimitKey::text("c").unwrap())
        .await;
    eprintln!("limiter check without +set: {r:?}");
    assert!(
        matches!(r, Err(redkit::Error::PermissionDenied { .. })),
        "{r:?}"
    );
    let keys: Vec<String> = server.cmd(&["KEYS", "*"]).await;
    assert!(keys.is_empty(), "a refused call wrote {keys:?}");
}

#[tokio::test]
async fn a_user_with_only_the_semaphore_and_versioned_acl_runs_both() {
    let server = RedisServer::spawn().await;
    let mut args: Vec<String> = ["ACL", "SETUSER", "coord", "reset", "on", ">pw", "-@all"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let cmds: BTreeSet<&str> = BASE
        .iter()
        .chain(SEMAPHORE)
        .chain(FAIR)
        .chain(RW)
        .chain(REENTRANT)
        .chain(VERSIONED)
        .copied()
        .collect();
    args.extend(cmds.iter().map(|c| format!("+{c}")));
    args.extend(["~redkit:sem:*".to_string(), "~redkit:ver:*".to_string()]);
    setuser_on(&server, args).await;
    let mut conn = as_user(&server, "coord").await;
    let mut waiter = as_user(&server, "coord").await;

    let sem = redkit::lock::Semaphore::new();
    let options = LockOptions::new().ttl(Duration::from_secs(5));
    let redkit::lock::Acquire::Acquired(mut permit) = sem
        .try_acquire(&mut conn, "job", 1, &options)
        .await
        .unwrap()
    else {
        panic!("not acquired")
    };
    assert_eq!(
        sem.renew(&mut conn, &mut permit).await.unwrap(),
        Renew::Renewed
    );
    let blocked = {
        let sem = sem.clone();
        let options = options.clone();
        tokio::spawn(async move {
            sem.acquire_blocking(&mut waiter, "job", 1, &options, Duration::from_secs(3))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        sem.release(&mut conn, permit).await.unwrap(),
        Release::Released
    );
    assert!(blocked.await.unwrap().unwrap().is_acquired());

    let v = redkit::versioned::Versioned::new();
    assert!(v
        .compare_and_set(&mut conn, "cfg", 0, b"a")
        .await
        .unwrap()
        .is_set());
    assert_eq!(v.read(&mut conn, "cfg").await.unwrap().version, 1);
}
