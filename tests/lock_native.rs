//! A plain (unfenced) `Lock` on a server with native conditional commands (Valkey 9:
//! `DELIFEQ`, `SET ... IFEQ`) and on one without (Redis 7: the scripts): the same outcomes on
//! both (renewal, release, another owner's key, a lost lease, a key of another type, the
//! watchdog's loss signal, the wake-up of blocked acquirers); no script at all for a plain
//! cycle on Valkey (`INFO commandstats`); a renamed `DELIFEQ` or one the ACL refuses falls
//! back to the script without the caller seeing the refusal. On a Valkey Cluster the same
//! cycle, wake-up included, runs no script either; on a Cluster half-way through an upgrade
//! (one primary without `DELIFEQ`) every call answers as on one server.

#[path = "support/harness.rs"]
mod harness;
mod support;

use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redkit::lock::{Acquire, LeaseLoss, Lock, LockGuard, LockOptions, Release, Renew};
use redkit::script::RecheckInterval;
use redkit::{Error, ScriptManager};
use support::{RedisCluster, RedisServer, Valkey};

fn plain(ms: u64) -> LockOptions<Lock> {
    LockOptions::new().ttl(Duration::from_millis(ms))
}

/// `resource`, acquired with a plain lease of `ms` (the test expects it free).
async fn held<C: ConnectionLike>(
    lock: &Lock,
    conn: &mut C,
    resource: &str,
    ms: u64,
) -> LockGuard<Lock> {
    let outcome = lock.acquire(conn, resource, &plain(ms)).await.unwrap();
    outcome.acquired().expect("the lock is free")
}

/// Renews `guard` (`Renewed`), then releases it (`Released`).
async fn renew_and_release<C: ConnectionLike>(
    lock: &Lock,
    conn: &mut C,
    mut guard: LockGuard<Lock>,
) {
    assert_eq!(lock.renew(conn, &mut guard).await.unwrap(), Renew::Renewed);
    assert_eq!(lock.release(conn, guard).await.unwrap(), Release::Released);
}

async fn pttl(server: &RedisServer, key: &str) -> i64 {
    server.cmd(&["PTTL", key]).await
}

/// A task acquiring `resource` with `acquire_blocking` (a 5 s wait) over a connection of its
/// own; it answers the outcome, when it came, and its lock and connection.
type Waiter = tokio::task::JoinHandle<(
    redkit::Result<Acquire<LockGuard<Lock>>>,
    Instant,
    Lock,
    MultiplexedConnection,
)>;

async fn waiter(
    server: &RedisServer,
    lock: &Lock,
    resource: &str,
    options: LockOptions<Lock>,
) -> Waiter {
    let (lock, resource, mut own) = (lock.clone(), resource.to_owned(), server.conn().await);
    tokio::spawn(async move {
        let outcome = lock
            .acquire_blocking(
                &mut own,
                &resource,
                &options.clone().max_wait(Duration::from_secs(5)),
            )
            .await;
        (outcome, Instant::now(), lock, own)
    })
}

/// Releases `holder` (`Released`), then awaits `waiter`: the guard it acquired, how long
/// after the release, and its lock and connection.
async fn hand_over<C: ConnectionLike>(
    lock: &Lock,
    conn: &mut C,
    holder: LockGuard<Lock>,
    waiter: Waiter,
) -> (LockGuard<Lock>, Duration, Lock, MultiplexedConnection) {
    let released = Instant::now();
    assert_eq!(lock.release(conn, holder).await.unwrap(), Release::Released);
    let (outcome, woke, lock, own) = waiter.await.unwrap();
    let Acquire::Acquired(next) = outcome.unwrap() else {
        panic!("not acquired")
    };
    (next, woke - released, lock, own)
}

/// `EVALSHA` + `EVAL` calls the server has answered so far.
async fn script_calls(server: &RedisServer) -> u64 {
    server.command_calls("evalsha").await + server.command_calls("eval").await
}

/// Renewal and release of a plain lock answer the same on both servers: renewed (the TTL
/// reset, by hand and followed by a `WAIT`), released (the key gone), another owner's key
/// (`NotOwner` / `Lost`, its key untouched), a deleted key (`Lost`), a key of another type
/// (`WrongType`, nothing written).
async fn same_outcomes(server: RedisServer) {
    outcomes_of(&server, &Lock::new()).await;
}

/// The same outcomes from a lock whose blocking acquires poll (the same release).
async fn same_outcomes_without_wake_ups(server: RedisServer) {
    outcomes_of(&server, &Lock::new().wake_on_release(false)).await;
}

async fn outcomes_of(server: &RedisServer, lock: &Lock) {
    let mut conn = server.conn().await;
    let lock = lock.clone();
    let key = lock.key("r").unwrap();

    let mut guard = held(&lock, &mut conn, "r", 5_000).await;
    let _: i64 = server.cmd(&["PEXPIRE", &key, "300"]).await;
    assert_eq!(
        lock.renew(&mut conn, &mut guard).await.unwrap(),
        Renew::Renewed
    );
    let ms = pttl(server, &key).await;
    assert!(ms > 1_000 && ms <= 5_000, "renewed to the lease: {ms}");
    assert_eq!(
        lock.release(&mut conn, guard).await.unwrap(),
        Release::Released
    );
    assert_eq!(server.cmd::<i64>(&["EXISTS", &key]).await, 0);

    // Marked by a blocked acquirer: still this guard's, renewed (the mark kept) and released
    // (on Valkey the native command leaves a marked key to the script).
    let mut guard = held(&lock, &mut conn, "r", 5_000).await;
    support::mark_lock(&mut conn, &key).await;
    let _: i64 = server.cmd(&["PEXPIRE", &key, "300"]).await;
    assert_eq!(
        lock.renew(&mut conn, &mut guard).await.unwrap(),
        Renew::Renewed
    );
    let ms = pttl(server, &key).await;
    assert!(
        ms > 1_000 && ms <= 5_000,
        "a marked hold renewed to the lease: {ms}"
    );
    let value: Vec<u8> = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(value.last(), Some(&0xff), "the mark kept");
    assert_eq!(
        lock.release(&mut conn, guard).await.unwrap(),
        Release::Released
    );
    assert_eq!(server.cmd::<i64>(&["EXISTS", &key]).await, 0);
    assert_eq!(
        server.cmd::<i64>(&["LLEN", &format!("{key}:wake")]).await,
        1,
        "woken"
    );
    let _: i64 = server.cmd(&["DEL", &format!("{key}:wake")]).await;

    // Another owner's key: neither released nor renewed, left as it is.
    let mut stale = held(&lock, &mut conn, "r", 5_000).await;
    let other = "another-owner-token-0123456789";
    let _: () = server.cmd(&["SET", &key, other, "PX", "5000"]).await;
    assert_eq!(
        lock.renew(&mut conn, &mut stale).await.unwrap(),
        Renew::Lost
    );
    assert!(!stale.is_valid());
    assert_eq!(
        lock.release(&mut conn, stale).await.unwrap(),
        Release::NotOwner
    );
    assert_eq!(server.cmd::<String>(&["GET", &key]).await, other);
    let _: i64 = server.cmd(&["DEL", &key]).await;

    // A lease that is gone: Lost; its release NotOwner; nothing created.
    let mut gone = held(&lock, &mut conn, "r", 5_000).await;
    let _: i64 = server.cmd(&["DEL", &key]).await;
    assert_eq!(lock.renew(&mut conn, &mut gone).await.unwrap(), Renew::Lost);
    assert_eq!(
        lock.release(&mut conn, gone).await.unwrap(),
        Release::NotOwner
    );
    assert_eq!(server.cmd::<i64>(&["EXISTS", &key]).await, 0);

    // A key of another type: WrongType for both verbs, nothing written.
    let mut guard = held(&lock, &mut conn, "r", 5_000).await;
    let _: i64 = server.cmd(&["DEL", &key]).await;
    let _: i64 = server.cmd(&["HSET", &key, "f", "1"]).await;
    let before = support::snapshot(&mut conn).await;
    let r = lock.renew(&mut conn, &mut guard).await;
    assert!(matches!(r, Err(Error::WrongType { .. })), "{r:?}");
    let native = ScriptManager::new()
        .capabilities(&mut conn)
        .await
        .unwrap()
        .delifeq;
    let scripts = script_calls(server).await;
    let r = lock.release(&mut conn, guard).await;
    assert!(matches!(r, Err(Error::WrongType { .. })), "{r:?}");
    if native {
        // `DELIFEQ`'s own refusal is the answer: the script is not sent after it.
        assert_eq!(
            script_calls(server).await,
            scripts,
            "a script after WRONGTYPE"
        );
    }
    support::same_dumps(&before, &support::snapshot(&mut conn).await, "hash key");
}

/// The watchdog of a plain lock signals the loss within about one renewal period when its
/// key is deleted, and when it is overwritten by another owner.
async fn watchdog_loss(server: RedisServer) {
    let mut conn = server.conn().await;
    let lock = Lock::new();
    let key = lock.key("w").unwrap();
    // Period ttl/3 = 500 ms; the lease would last 1.5 s: a signal before that comes from a
    // renewal answering Lost.
    for overwrite in [false, true] {
        let mut guard = held(&lock, &mut conn, "w", 1_500).await;
        let signal = lock.watch(&conn, &mut guard).unwrap();
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert!(guard.is_valid(), "renewed by the watchdog so far");
        if overwrite {
            let _: () = server
                .cmd(&["SET", &key, "another-owner-token-0123456789"])
                .await;
        } else {
            let _: i64 = server.cmd(&["DEL", &key]).await;
        }
        let changed = Instant::now();
        let loss = tokio::time::timeout(Duration::from_millis(1_400), signal.lost())
            .await
            .expect("loss signalled within about one renewal period");
        assert_eq!(loss, LeaseLoss::NotOwner, "overwrite: {overwrite}");
        println!("overwrite {overwrite}: loss after {:?}", changed.elapsed());
        assert!(!guard.is_valid());
        assert_eq!(
            lock.release(&mut conn, guard).await.unwrap(),
            Release::NotOwner
        );
        let _: i64 = server.cmd(&["DEL", &key]).await;
    }
}

/// A release of an unmarked hold writes no wake-up; of a hold a blocked acquirer marked, it
/// deletes the key and the wake-up list holds one entry with a TTL of at most 60 s; a stale
/// holder neither deletes nor wakes; a blocked acquire is handed the lock by the release, not
/// at the lease end.
async fn wake_ups(server: RedisServer) {
    let mut conn = server.conn().await;
    let lock = Lock::new();
    let key = lock.key("h").unwrap();
    let wake = format!("{key}:wake");
    let guard = held(&lock, &mut conn, "h", 10_000).await;
    lock.release(&mut conn, guard).await.unwrap();
    let keys: Vec<String> = server.cmd(&["KEYS", "*"]).await;
    assert!(keys.is_empty(), "{keys:?}");

    for _ in 0..3 {
        let guard = held(&lock, &mut conn, "h", 10_000).await;
        support::mark_lock(&mut conn, &key).await;
        assert_eq!(
            lock.release(&mut conn, guard).await.unwrap(),
            Release::Released
        );
    }
    assert_eq!(server.cmd::<i64>(&["LLEN", &wake]).await, 1, "one entry");
    let ms = pttl(&server, &wake).await;
    assert!(ms > 0 && ms <= 60_000, "{ms}");

    let _: i64 = server.cmd(&["DEL", &wake]).await;
    let stale = held(&lock, &mut conn, "h", 10_000).await;
    let _: () = server
        .cmd(&["SET", &key, "another-owner-token-0123456789"])
        .await;
    assert_eq!(
        lock.release(&mut conn, stale).await.unwrap(),
        Release::NotOwner
    );
    assert_eq!(server.cmd::<i64>(&["EXISTS", &wake]).await, 0, "no wake-up");
    let _: i64 = server.cmd(&["DEL", &key]).await;

    // Hand-over: the lease is 10 s, the waiter holds the lock well within 1 s of the release.
    // Blocked, it has marked the hold (on Valkey by `GET` + `SET IFEQ KEEPTTL`, on Redis 7 by
    // `lock_mark`): the owner token and 0xFF, the lease kept.
    let held = held(&lock, &mut conn, "h", 10_000).await;
    let get = || {
        let mut get = redis::cmd("GET");
        get.arg(&key);
        get
    };
    let mut marked: Vec<u8> = get().query_async(&mut conn).await.unwrap();
    marked.push(0xff);
    let waiter = waiter(&server, &lock, "h", plain(10_000)).await;
    server.wait_command_calls("blpop", 1).await;
    let value: Vec<u8> = get().query_async(&mut conn).await.unwrap();
    assert_eq!(value, marked, "marked by the blocked waiter");
    let ms = pttl(&server, &key).await;
    assert!(ms > 5_000 && ms <= 10_000, "the lease kept: {ms}");
    let (next, after, waiter_lock, mut own) = hand_over(&lock, &mut conn, held, waiter).await;
    println!("release -> blocked waiter holds: {after:?}");
    assert!(after < Duration::from_secs(1), "{after:?}");
    assert_eq!(
        waiter_lock.release(&mut own, next).await.unwrap(),
        Release::Released
    );
    two_waiters(&server, &lock, &mut conn).await;
}

/// Two callers blocked on one hold: marked once, released, and both served in turn, each
/// well within its 10 s lease (the first marks its own hold for the second). On Valkey no
/// script runs for any of it.
async fn two_waiters(server: &RedisServer, lock: &Lock, conn: &mut MultiplexedConnection) {
    let key = lock.key("h").unwrap();
    let get = || {
        let mut get = redis::cmd("GET");
        get.arg(&key);
        get
    };
    let native = ScriptManager::new()
        .capabilities(conn)
        .await
        .unwrap()
        .delifeq;
    let scripts = script_calls(server).await;
    let blpops = server.command_calls("blpop").await;
    let holder = held(lock, conn, "h", 10_000).await;
    let mut marked: Vec<u8> = get().query_async(conn).await.unwrap();
    marked.push(0xff);
    let (first, second) = (
        waiter(server, lock, "h", plain(10_000)).await,
        waiter(server, lock, "h", plain(10_000)).await,
    );
    server.wait_command_calls("blpop", blpops + 2).await;
    let value: Vec<u8> = get().query_async(conn).await.unwrap();
    assert_eq!(value, marked, "marked once by two waiters");
    let released = Instant::now();
    assert_eq!(lock.release(conn, holder).await.unwrap(), Release::Released);
    // Whichever holds it releases at once; the other is woken by that release.
    let mut served = 0;
    let mut pending = vec![first, second];
    while !pending.is_empty() {
        let (done, _, rest) = futures_util::future::select_all(pending).await;
        pending = rest;
        let (outcome, woke, waiter_lock, mut own) = done.unwrap();
        if let Acquire::Acquired(guard) = outcome.unwrap() {
            assert_eq!(
                waiter_lock.release(&mut own, guard).await.unwrap(),
                Release::Released
            );
            served += 1;
        }
        assert!(
            woke - released < Duration::from_secs(2),
            "{:?}",
            woke - released
        );
    }
    assert_eq!(served, 2, "both waiters held the lock");
    if native {
        assert_eq!(script_calls(server).await, scripts, "no script on Valkey");
    }
}

/// A lock built with `wake_on_release(false)` releases as the default lock does: a release
/// of an unmarked hold reads only the lock key (no `EXISTS`, counted by `INFO commandstats`
/// also when a script calls it) and pushes no wake-up; on Valkey it is `DELIFEQ` alone, no
/// script, for both locks; fenced, it is the release script. Its `acquire_blocking` polls at
/// the options' pace (no mark, no `BLPOP`), holds the lock well within a second of the
/// release (lease 10 s), and gives up at its deadline.
async fn without_wake_ups(server: RedisServer) {
    let mut conn = server.conn().await;
    let manager = ScriptManager::new();
    let lock = Lock::new()
        .with_manager(manager.clone())
        .wake_on_release(false);
    let waking = Lock::new().with_manager(manager.clone());
    let key = lock.key("n").unwrap();
    let wake = format!("{key}:wake");
    let native = manager.capabilities(&mut conn).await.unwrap().delifeq;

    // Loaded and probed before the count (a first call may meet NOSCRIPT).
    let guard = held(&lock, &mut conn, "n", 10_000).await;
    lock.release(&mut conn, guard).await.unwrap();

    for lock in [&lock, &waking] {
        let (exists, scripts) = (
            server.command_calls("exists").await,
            script_calls(&server).await,
        );
        let delifeq = server.command_calls("delifeq").await;
        for _ in 0..3 {
            let guard = held(lock, &mut conn, "n", 10_000).await;
            assert_eq!(
                lock.release(&mut conn, guard).await.unwrap(),
                Release::Released
            );
        }
        assert_eq!(server.command_calls("exists").await, exists, "no flag read");
        assert_eq!(server.cmd::<i64>(&["EXISTS", &wake]).await, 0, "no wake-up");
        assert_eq!(server.cmd::<i64>(&["EXISTS", &key]).await, 0, "released");
        let (scripts, delifeq) = (
            script_calls(&server).await - scripts,
            server.command_calls("delifeq").await - delifeq,
        );
        println!("3 unmarked releases: {scripts} script calls, {delifeq} DELIFEQ");
        if native {
            assert_eq!((scripts, delifeq), (0, 3));
        } else {
            assert_eq!((scripts, delifeq), (3, 0));
        }
    }

    // Fenced, the release is the script on both servers.
    let fenced = plain(10_000).fencing(true);
    let guard = lock.acquire(&mut conn, "n", &fenced).await.unwrap();
    let guard = guard.acquired().expect("the lock is free");
    assert!(guard.fencing_token().is_some());
    let (exists, scripts) = (
        server.command_calls("exists").await,
        script_calls(&server).await,
    );
    assert_eq!(
        lock.release(&mut conn, guard).await.unwrap(),
        Release::Released
    );
    assert_eq!(server.command_calls("exists").await, exists, "no flag read");
    assert!(
        script_calls(&server).await > scripts,
        "released by a script"
    );
    assert_eq!(server.cmd::<i64>(&["EXISTS", &key]).await, 0, "released");
    assert_eq!(server.cmd::<i64>(&["EXISTS", &wake]).await, 0, "no wake-up");

    // A blocked acquire polls: the holder's lease is 10 s, the waiter holds the lock soon
    // after the release, without a mark or a BLPOP.
    let holder = held(&lock, &mut conn, "n", 10_000).await;
    let options = plain(10_000)
        .retry_delay(Duration::from_millis(20))
        .jitter(Duration::ZERO);
    let blpops = server.command_calls("blpop").await;
    let sets = server.command_calls("set").await;
    let waiter = waiter(&server, &lock, "n", options).await;
    // Three SETs from the waiter: three attempts.
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.command_calls("set").await < sets + 3 {
        assert!(Instant::now() < deadline, "the waiter never tried again");
        tokio::task::yield_now().await;
    }
    let value: Vec<u8> = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_ne!(value.last(), Some(&0xff), "no mark");
    let (next, after, waiter_lock, mut own) = hand_over(&lock, &mut conn, holder, waiter).await;
    println!("release -> polling waiter holds: {after:?}");
    assert!(after < Duration::from_secs(1), "{after:?}");
    assert_eq!(server.command_calls("blpop").await, blpops, "no BLPOP");

    // Held for 10 s: a 300 ms wait gives up with Busy at its deadline, not much later, also
    // with no retry delay and no jitter (its attempts bounded; the 1 ms floor between them
    // is unit-tested in src/lock/lock_wait.rs).
    let started = Instant::now();
    let options = plain(10_000)
        .retry_delay(Duration::ZERO)
        .jitter(Duration::ZERO);
    let sets = server.command_calls("set").await;
    let outcome = lock
        .acquire_blocking(
            &mut conn,
            "n",
            &options.clone().max_wait(Duration::from_millis(300)),
        )
        .await
        .unwrap();
    let waited = started.elapsed();
    let attempts = server.command_calls("set").await - sets;
    println!("a 300 ms wait with no retry delay: {attempts} attempts");
    assert!(matches!(outcome, Acquire::Busy { .. }), "{outcome:?}");
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(1),
        "{waited:?}"
    );
    assert!((2..=301).contains(&attempts), "{attempts}");
    assert_eq!(
        waiter_lock.release(&mut own, next).await.unwrap(),
        Release::Released
    );
}

/// A release whose wake-up cannot be pushed answers what the key holds, on both servers.
/// Two causes: the wake-up list overwritten by another type, and an ACL that refuses `LPUSH`.
/// Redis 7 (the script) refuses before deleting: the typed error, the key still held. Valkey
/// (`DELIFEQ`, then the wake-up as a second step): `Released`, the key gone. On both, nothing
/// is written to the wake-up key.
async fn failed_wake_ups(server: RedisServer) {
    let mut conn = server.conn().await;
    let manager = ScriptManager::new();
    let native = manager.capabilities(&mut conn).await.unwrap().delifeq;
    let _: String = server
        .cmd(&[
            "ACL", "SETUSER", "nolpush", "on", ">pw", "~*", "+@all", "-lpush",
        ])
        .await;
    let url = format!("redis://nolpush:pw@127.0.0.1:{}/", server.port());
    let mut denied = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let lock = Lock::new().with_manager(manager);
    for cause in ["wrong type", "acl"] {
        let resource = format!("w-{cause}");
        let key = lock.key(&resource).unwrap();
        let wake = format!("{key}:wake");
        let conn: &mut MultiplexedConnection = if cause == "acl" {
            &mut denied
        } else {
            let _: () = server.cmd(&["SET", &wake, "not a list"]).await;
            &mut conn
        };
        let guard = held(&lock, conn, &resource, 10_000).await;
        // A blocked acquirer marked it: the release must wake it.
        support::mark_lock(conn, &key).await;
        let outcome = lock.release(conn, guard).await;
        let held_now: i64 = server.cmd(&["EXISTS", &key]).await;
        match (&outcome, cause) {
            (Ok(Release::Released), _) => assert_eq!(held_now, 0, "{cause}: Released, key gone"),
            (Err(Error::WrongType { .. }), "wrong type")
            | (Err(Error::PermissionDenied { .. }), "acl") => {
                assert_eq!(held_now, 1, "{cause}: an error, and the key still held")
            }
            other => panic!("{cause}: {other:?}"),
        }
        assert_eq!(
            outcome.is_ok(),
            native,
            "{cause}: Released where DELIFEQ deleted it, refused where the script checked first"
        );
        if cause == "wrong type" {
            let kept: String = server.cmd(&["GET", &wake]).await;
            assert_eq!(kept, "not a list", "nothing written to the wake-up key");
            assert_eq!(pttl(&server, &wake).await, -1, "no expiry set on it");
        } else {
            assert_eq!(
                server.cmd::<i64>(&["EXISTS", &wake]).await,
                0,
                "no wake-up pushed"
            );
        }
        let _: i64 = server.cmd(&["DEL", &key, &wake]).await;
    }
}

/// `EVALSHA` + `EVAL` calls of one plain cycle (acquire, renew, release) on `server`, through
/// a fresh manager whose capabilities are returned too.
async fn cycle(server: &RedisServer) -> (u64, redkit::script::Capabilities) {
    let mut conn = server.conn().await;
    let manager = ScriptManager::new();
    let lock = Lock::new().with_manager(manager.clone());
    let before = script_calls(server).await;
    let guard = held(&lock, &mut conn, "cycle", 5_000).await;
    renew_and_release(&lock, &mut conn, guard).await;
    let calls = script_calls(server).await - before;
    (calls, manager.capabilities(&mut conn).await.unwrap())
}

async fn a_plain_cycle_sends_no_script_on_valkey(valkey: Valkey) {
    let server = RedisServer::spawn_valkey(&valkey, &[]).await;
    let (calls, found) = cycle(&server).await;
    println!("Valkey 9: EVALSHA + EVAL calls of acquire + renew + release: {calls}; {found:?}");
    assert!(found.delifeq && found.set_ifeq, "{found:?}");
    assert_eq!(calls, 0);
    let native = (
        server.command_calls("delifeq").await,
        server.command_calls("set").await,
    );
    println!("DELIFEQ calls {}, SET calls {}", native.0, native.1);
    assert_eq!(native.0, 1);

    // Fenced later (`Lock::fence`): its renewal is the script again (it keeps the fence key).
    let mut conn = server.conn().await;
    let lock = Lock::new();
    let mut guard = held(&lock, &mut conn, "later", 5_000).await;
    let fenced = lock.fence(&mut conn, &mut guard).await.unwrap();
    assert!(
        matches!(fenced, redkit::lock::Fence::Issued(_)),
        "{fenced:?}"
    );
    let before = script_calls(&server).await;
    renew_and_release(&lock, &mut conn, guard).await;
    let after = script_calls(&server).await;
    assert!(
        after > before,
        "renewed and released by scripts: {before} -> {after}"
    );
}

async fn a_plain_cycle_runs_scripts_on_redis_7() {
    let server = RedisServer::spawn().await;
    let (calls, found) = cycle(&server).await;
    println!("Redis 7: EVALSHA + EVAL calls of acquire + renew + release: {calls}; {found:?}");
    assert!(!found.delifeq && !found.set_ifeq, "{found:?}");
    assert!(calls >= 2, "{calls}");
}

/// A manager that probed a server with `DELIFEQ`, used against one where it is renamed away
/// (a stale probe): the release answers `Released` through the script, the probe is
/// refreshed (no `DELIFEQ` now), and the next release goes straight to the script. A fresh
/// manager on the renamed server never claims `DELIFEQ`.
async fn a_renamed_delifeq_falls_back_to_the_script_and_a_stale_probe_recovers(valkey: Valkey) {
    let full = RedisServer::spawn_valkey(&valkey, &[]).await;
    let renamed = RedisServer::spawn_valkey(&valkey, &["--rename-command", "DELIFEQ", ""]).await;
    let manager = ScriptManager::new();
    let lock = Lock::new().with_manager(manager.clone());
    let found = manager.capabilities(&mut full.conn().await).await.unwrap();
    assert!(found.delifeq && found.set_ifeq, "{found:?}");

    let mut conn = renamed.conn().await;
    let key = lock.key("s").unwrap();
    let guard = held(&lock, &mut conn, "s", 5_000).await;
    assert_eq!(
        lock.release(&mut conn, guard).await.unwrap(),
        Release::Released
    );
    assert_eq!(renamed.cmd::<i64>(&["EXISTS", &key]).await, 0);
    let unknown = renamed.error_count("ERR").await;
    let scripts = script_calls(&renamed).await;
    println!("after the stale release: ERR replies {unknown}, script calls {scripts}");
    assert_eq!(
        unknown, 1,
        "one unknown-command reply, not shown to the caller"
    );
    assert!(scripts >= 1, "the release ran the script");

    let found = manager.capabilities(&mut conn).await.unwrap();
    assert!(!found.delifeq && found.set_ifeq, "re-probed: {found:?}");
    let guard = held(&lock, &mut conn, "s", 5_000).await;
    renew_and_release(&lock, &mut conn, guard).await;
    assert_eq!(
        renamed.error_count("ERR").await,
        1,
        "DELIFEQ not sent again"
    );

    let fresh = ScriptManager::new().capabilities(&mut conn).await.unwrap();
    assert!(!fresh.delifeq && fresh.set_ifeq, "{fresh:?}");

    // A lock without wake-ups releases by `DELIFEQ` alone: a stale probe falls back the same.
    let manager = ScriptManager::new();
    let bare = Lock::new()
        .with_manager(manager.clone())
        .wake_on_release(false);
    let found = manager.capabilities(&mut full.conn().await).await.unwrap();
    assert!(found.delifeq, "{found:?}");
    let unknown = renamed.error_count("ERR").await;
    let guard = held(&bare, &mut conn, "b", 5_000).await;
    assert_eq!(
        bare.release(&mut conn, guard).await.unwrap(),
        Release::Released
    );
    assert_eq!(renamed.error_count("ERR").await, unknown + 1);
    let key = bare.key("b").unwrap();
    assert_eq!(renamed.cmd::<i64>(&["EXISTS", &key]).await, 0);
}

/// A user whose ACL refuses `DELIFEQ` (but allows the script): the release answers
/// `Released` through the script, and the manager stops sending `DELIFEQ`.
async fn a_delifeq_refused_by_the_acl_falls_back_to_the_script(valkey: Valkey) {
    let server = RedisServer::spawn_valkey(&valkey, &[]).await;
    let mut conn = support::denied_conn(&server, "delifeq").await;
    // With and without wake-ups (two release paths), each with a manager of its own.
    let locks = [Lock::new(), Lock::new().wake_on_release(false)];
    for (refusals, lock) in (1..).zip(locks) {
        let lock = lock.with_manager(ScriptManager::new());
        for round in 0..2 {
            let guard = held(&lock, &mut conn, "a", 5_000).await;
            assert_eq!(
                lock.release(&mut conn, guard).await.unwrap(),
                Release::Released,
                "round {round}"
            );
            assert_eq!(
                server.error_count("NOPERM").await,
                refusals,
                "round {round}"
            );
        }
        let key = lock.key("a").unwrap();
        assert_eq!(server.cmd::<i64>(&["EXISTS", &key]).await, 0);
    }
    assert!(script_calls(&server).await >= 4);
}

/// On a Valkey Cluster: a plain cycle and a release of a hold a blocked acquirer marked (its
/// wake-up pushed, one entry) run no script on any node; the key's primary answered the
/// `DELIFEQ`s.
async fn a_plain_lock_on_a_valkey_cluster_runs_no_script(valkey: Valkey) {
    let cluster = RedisCluster::spawn_valkey(&valkey).await;
    let mut conn = cluster.conn().await;
    let manager = ScriptManager::new();
    let lock = Lock::new().with_manager(manager.clone());
    let key = lock.key("c").unwrap();
    let guard = held(&lock, &mut conn, "c", 5_000).await;
    renew_and_release(&lock, &mut conn, guard).await;
    let wake = format!("{key}:wake");
    let none: i64 = redis::cmd("EXISTS")
        .arg(&wake)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(none, 0, "no waiter: no wake-up pushed");
    let mut scripts = 0;
    for node in cluster.primaries().await {
        scripts += script_calls(node).await;
    }
    assert_eq!(scripts, 0, "a plain cycle runs no script");
    let guard = held(&lock, &mut conn, "c", 5_000).await;
    support::mark_lock(&mut conn, &key).await;
    assert_eq!(
        lock.release(&mut conn, guard).await.unwrap(),
        Release::Released
    );
    let len: i64 = redis::cmd("LLEN")
        .arg(format!("{key}:wake"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(len, 1, "the wake-up was pushed");
    let found = manager.capabilities(&mut conn).await.unwrap();
    assert!(found.delifeq && found.set_ifeq, "{found:?}");
    let mut scripts = 0;
    for node in cluster.primaries().await {
        scripts += script_calls(node).await;
    }
    let owner = cluster.primary_for(&key).await;
    let delifeq = owner.command_calls("delifeq").await;
    println!("Valkey Cluster: script calls {scripts}, DELIFEQ on the key's primary {delifeq}");
    assert_eq!(scripts, 0);
    // The plain release (1), the marked one (the token, then the marked token: 2), and the
    // probe's own (one on every primary).
    assert_eq!(delifeq, 4);
}

/// A Cluster half-way through an upgrade: one primary without `DELIFEQ` (renamed away), two
/// with it. The probe asks every primary and keeps the lowest common set (`SET IFEQ`, not
/// `DELIFEQ`), so plain locks on keys of every primary release by script and answer as on
/// one server (renewed, released, another owner's key not released): no "unknown command"
/// is ever sent by a lock call, let alone seen by its caller.
async fn a_cluster_half_way_through_an_upgrade_uses_what_every_primary_offers(valkey: Valkey) {
    let cluster =
        RedisCluster::spawn_valkey_first_with(&valkey, &["--rename-command", "DELIFEQ", ""]).await;
    let primaries = cluster.primaries().await;
    let mut old = None;
    for node in &primaries {
        let info: redis::Value = node.cmd(&["COMMAND", "INFO", "DELIFEQ"]).await;
        if info == redis::Value::Array(vec![redis::Value::Nil]) {
            assert!(old.is_none(), "one primary without DELIFEQ");
            old = Some(node.port());
        }
    }
    let old_port = old.expect("the first node is a primary without DELIFEQ");
    let mut conn = cluster.conn().await;
    let manager = ScriptManager::new();
    let lock = Lock::new().with_manager(manager.clone());
    let found = manager.capabilities(&mut conn).await.unwrap();
    assert!(!found.delifeq && found.set_ifeq, "{found:?}");
    let mut before = Vec::new();
    for node in &primaries {
        before.push(script_calls(node).await);
    }
    let mut keys_on = vec![0u64; primaries.len()];
    for i in 0..24 {
        let resource = format!("upgrade-{i}");
        let key = lock.key(&resource).unwrap();
        let owner = cluster.primary_for(&key).await.port();
        let at = primaries.iter().position(|p| p.port() == owner).unwrap();
        keys_on[at] += 1;
        let guard = held(&lock, &mut conn, &resource, 5_000).await;
        renew_and_release(&lock, &mut conn, guard).await;
        // Another owner's key: not released, left as it is, wherever it lives.
        let guard = held(&lock, &mut conn, &resource, 5_000).await;
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg("someone-else")
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(
            lock.release(&mut conn, guard).await.unwrap(),
            Release::NotOwner,
            "{resource}"
        );
        let value: String = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(value, "someone-else");
    }
    let mut probes = 0;
    for (at, node) in primaries.iter().enumerate() {
        let scripts = script_calls(node).await - before[at];
        let delifeq = node.command_calls("delifeq").await;
        println!(
            "primary {} (DELIFEQ {}): {} keys, {scripts} scripts, {delifeq} DELIFEQ",
            node.port(),
            if node.port() == old_port {
                "renamed"
            } else {
                "offered"
            },
            keys_on[at]
        );
        assert!(
            scripts >= 2 * keys_on[at],
            "every release ran its script: {scripts} for {} keys",
            keys_on[at]
        );
        probes += delifeq;
    }
    assert!(
        keys_on.iter().all(|&n| n > 0),
        "keys on every primary: {keys_on:?}"
    );
    // The probe's own DELIFEQ on each upgraded primary, and no lock call's.
    assert_eq!(probes, 2);
}

/// Whether a `CLUSTER SLOTS` reply names the node on `port` as the primary of a range.
/// `DELIFEQ` calls every node of `cluster` has answered (the probe's own, here).
async fn delifeq_calls(cluster: &RedisCluster) -> u64 {
    let mut calls = 0;
    for node in &cluster.nodes {
        calls += node.command_calls("delifeq").await;
    }
    calls
}

/// A probe older than the manager's re-check interval is redone by the next call that asks:
/// on a Cluster whose layout has not changed, with `CLUSTER SLOTS` alone (no primary asked
/// again); after a failover changed it, on every primary again.
async fn a_stale_probe_asks_the_primaries_again_only_after_the_layout_changed(valkey: Valkey) {
    let cluster = RedisCluster::spawn_valkey(&valkey).await;
    let mut conn = cluster.conn().await;
    let every = Duration::from_millis(300);
    let manager =
        ScriptManager::new().with_capabilities_recheck(RecheckInterval::new(every).unwrap());
    let found = manager.capabilities(&mut conn).await.unwrap();
    assert!(found.delifeq && found.set_ifeq, "{found:?}");
    let first = delifeq_calls(&cluster).await;
    assert_eq!(first, 3, "one DELIFEQ of the probe on each primary");

    // Fresh: no probe at all. Stale, same layout: CLUSTER SLOTS only.
    manager.capabilities(&mut conn).await.unwrap();
    tokio::time::sleep(every * 2).await;
    let found = manager.capabilities(&mut conn).await.unwrap();
    assert!(found.delifeq && found.set_ifeq, "{found:?}");
    assert_eq!(
        delifeq_calls(&cluster).await,
        first,
        "no primary asked again"
    );

    // A failover changes the layout: the next stale probe asks every primary again.
    let primaries = cluster.primaries().await;
    let port = primaries[0].port();
    let mut promoted = None;
    for node in &cluster.nodes {
        let repl: String = node.cmd(&["INFO", "replication"]).await;
        if repl.contains(&format!("master_port:{port}\r")) {
            promoted = Some(node);
        }
    }
    let promoted = promoted.expect("a replica of the first primary");
    let ok: String = promoted.cmd(&["CLUSTER", "FAILOVER"]).await;
    assert_eq!(ok, "OK");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let repl: String = promoted.cmd(&["INFO", "replication"]).await;
        if repl.contains("role:master") {
            break;
        }
        assert!(Instant::now() < deadline, "the failover did not happen");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Every node's CLUSTER SLOTS shows the new primary before the probe reads one of them.
    cluster
        .until_every_node_shows_primary(promoted.port(), &[])
        .await;
    tokio::time::sleep(every * 2).await;
    let found = manager.capabilities(&mut conn).await.unwrap();
    assert!(found.delifeq && found.set_ifeq, "{found:?}");
    let again = delifeq_calls(&cluster).await;
    println!("probe DELIFEQs: first {first}, after the failover {again}");
    assert_eq!(again, first + 3, "every primary asked again");
}

fn main() -> std::process::ExitCode {
    let mut tests = harness::Tests::new();
    harness::add!(tests, a_plain_cycle_runs_scripts_on_redis_7);
    harness::add!(tests, valkey: a_plain_cycle_sends_no_script_on_valkey, a_renamed_delifeq_falls_back_to_the_script_and_a_stale_probe_recovers, a_delifeq_refused_by_the_acl_falls_back_to_the_script, a_plain_lock_on_a_valkey_cluster_runs_no_script, a_cluster_half_way_through_an_upgrade_uses_what_every_primary_offers, a_stale_probe_asks_the_primaries_again_only_after_the_layout_changed);
    harness::add!(tests, both: renewal_and_release_answer_the_same, same_outcomes);
    harness::add!(tests, both: a_lock_without_wake_ups_answers_the_same, same_outcomes_without_wake_ups);
    harness::add!(tests, both: the_watchdog_signals_loss, watchdog_loss);
    harness::add!(tests, both: blocked_acquirers_are_woken, wake_ups);
    harness::add!(tests, both: a_lock_without_wake_ups_polls_and_releases_as_the_default_lock, without_wake_ups);
    harness::add!(tests, both: a_release_whose_wake_up_fails_answers_what_the_key_holds, failed_wake_ups);
    tests.run()
}
