//! What every lock kind promises alike, against real Redis: its keys live under the prefix
//! it was given (and nothing under the default one), and every script call of a hold
//! (acquire, renew, release) runs on the `ScriptManager` it was given, so that manager's
//! `Stats` count each call's `NOSCRIPT` recovery after a `SCRIPT FLUSH` (Redlock: its renewal;
//! it acquires with a plain `SET` and releases with `EVAL`, which needs no cache).

mod support;

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redkit::keys::Prefix;
use redkit::lock::{
    Acquire, FairLock, Lock, LockOptions, Mode, Owner, Redlock, ReentrantLock, Release, Renew,
    RwLock, Semaphore,
};
use redkit::ScriptManager;
use support::{RedisMasters, RedisServer};

fn options<K>() -> LockOptions<K> {
    LockOptions::new().ttl(Duration::from_secs(30))
}

/// `options()` waiting up to 200 ms.
fn waiting<K>() -> LockOptions<K> {
    options().max_wait(Duration::from_millis(200))
}

/// Every key on the server.
async fn keys(server: &RedisServer) -> Vec<String> {
    let mut keys: Vec<String> = server.cmd(&["KEYS", "*"]).await;
    keys.sort();
    keys
}

/// Empties the script cache: the next call of every script is answered `NOSCRIPT`.
async fn flush(server: &RedisServer) {
    let _: () = server.cmd(&["SCRIPT", "FLUSH"]).await;
}

/// The keys a hold left are all under `prefix`, and at least one is.
async fn assert_under(server: &RedisServer, prefix: &str, kind: &str) {
    let keys = keys(server).await;
    assert!(!keys.is_empty(), "{kind}: the hold wrote no key");
    for key in &keys {
        assert!(
            key.starts_with(&format!("{prefix}:")),
            "{kind}: {key} is not under {prefix}"
        );
    }
}

/// One `NOSCRIPT` recovery per call: acquire, renew and release each after a `SCRIPT FLUSH`.
fn assert_counted(manager: &ScriptManager, kind: &str) {
    assert_eq!(
        manager.stats().noscript_fallbacks,
        3,
        "{kind}: acquire, renew and release each recovered on the shared manager"
    );
}

async fn conn_and_manager(server: &RedisServer) -> (MultiplexedConnection, ScriptManager) {
    flush(server).await;
    (server.conn().await, ScriptManager::new())
}

#[tokio::test]
async fn a_lock_keeps_to_its_prefix_and_its_manager() {
    let server = RedisServer::spawn().await;
    let (mut conn, manager) = conn_and_manager(&server).await;
    let lock = Lock::new()
        .with_prefix(Prefix::new("t:lock").unwrap())
        .with_manager(manager.clone());
    assert_eq!(lock.prefix(), "t:lock");
    assert!(lock.key("r").unwrap().starts_with("t:lock:"));
    let options = options().fencing(true);
    let Acquire::Acquired(mut guard) = lock.acquire(&mut conn, "r", &options).await.unwrap() else {
        panic!("a free lock")
    };
    assert_under(&server, "t:lock", "Lock").await;
    flush(&server).await;
    assert_eq!(
        lock.renew(&mut conn, &mut guard).await.unwrap(),
        Renew::Renewed
    );
    flush(&server).await;
    assert_eq!(
        lock.release(&mut conn, guard).await.unwrap(),
        Release::Released
    );
    assert_counted(&manager, "Lock");
    assert_eq!(lock.manager().stats(), manager.stats());
}

#[tokio::test]
async fn a_fair_lock_keeps_to_its_prefix_and_its_manager() {
    let server = RedisServer::spawn().await;
    let (mut conn, manager) = conn_and_manager(&server).await;
    let lock = FairLock::new()
        .with_prefix(Prefix::new("t:fair").unwrap())
        .with_manager(manager.clone());
    assert!(lock.key("r").unwrap().starts_with("t:fair:"));
    let acquired = lock
        .acquire(&mut conn, "r", &options().max_wait(Duration::from_secs(5)))
        .await
        .unwrap();
    let Acquire::Acquired(mut guard) = acquired else {
        panic!("a free lock")
    };
    assert_under(&server, "t:fair", "FairLock").await;
    flush(&server).await;
    assert_eq!(
        lock.renew(&mut conn, &mut guard).await.unwrap(),
        Renew::Renewed
    );
    flush(&server).await;
    assert_eq!(
        lock.release(&mut conn, guard).await.unwrap(),
        Release::Released
    );
    assert_counted(&manager, "FairLock");
}

#[tokio::test]
async fn a_rw_lock_keeps_to_its_prefix_and_its_manager() {
    let server = RedisServer::spawn().await;
    let (mut conn, manager) = conn_and_manager(&server).await;
    let lock = RwLock::new()
        .with_prefix(Prefix::new("t:rw").unwrap())
        .with_manager(manager.clone());
    assert!(lock.key("r").unwrap().starts_with("t:rw:"));
    let Acquire::Acquired(mut guard) = lock
        .acquire(&mut conn, "r", Mode::Read, &options())
        .await
        .unwrap()
    else {
        panic!("a free lock")
    };
    assert_under(&server, "t:rw", "RwLock").await;
    flush(&server).await;
    assert_eq!(
        lock.renew(&mut conn, &mut guard).await.unwrap(),
        Renew::Renewed
    );
    flush(&server).await;
    assert_eq!(
        lock.release(&mut conn, guard).await.unwrap(),
        Release::Released
    );
    assert_counted(&manager, "RwLock");
}

#[tokio::test]
async fn a_reentrant_lock_keeps_to_its_prefix_and_its_manager() {
    let server = RedisServer::spawn().await;
    let (mut conn, manager) = conn_and_manager(&server).await;
    let lock = ReentrantLock::new()
        .with_prefix(Prefix::new("t:re").unwrap())
        .with_manager(manager.clone());
    assert!(lock.key("r").unwrap().starts_with("t:re:"));
    let owner = Owner::new();
    let acquired = lock
        .acquire(&mut conn, "r", &owner, &options())
        .await
        .unwrap();
    let Acquire::Acquired(mut guard) = acquired else {
        panic!("a free lock")
    };
    assert_under(&server, "t:re", "ReentrantLock").await;
    flush(&server).await;
    assert_eq!(
        lock.renew(&mut conn, &mut guard).await.unwrap(),
        Renew::Renewed
    );
    flush(&server).await;
    assert_eq!(
        lock.release(&mut conn, guard).await.unwrap(),
        Release::Released
    );
    assert_counted(&manager, "ReentrantLock");
}

#[tokio::test]
async fn a_semaphore_keeps_to_its_prefix_and_its_manager() {
    let server = RedisServer::spawn().await;
    let (mut conn, manager) = conn_and_manager(&server).await;
    let sem = Semaphore::new()
        .with_prefix(Prefix::new("t:sem").unwrap())
        .with_manager(manager.clone());
    assert!(sem.key("r").unwrap().starts_with("t:sem:"));
    let acquired = sem
        .try_acquire(&mut conn, "r", Semaphore::MAX_PERMITS, &options())
        .await
        .unwrap();
    let Acquire::Acquired(mut permit) = acquired else {
        panic!("the largest capacity is taken (one more is refused: tests/semaphore.rs)")
    };
    assert_eq!(permit.ttl(), Duration::from_secs(30));
    let shown = format!("{permit:?}");
    assert!(
        shown.starts_with("PermitGuard {") && shown.contains(&sem.key("r").unwrap()),
        "{shown}"
    );
    assert_under(&server, "t:sem", "Semaphore").await;
    flush(&server).await;
    assert_eq!(
        sem.renew(&mut conn, &mut permit).await.unwrap(),
        Renew::Renewed
    );
    flush(&server).await;
    assert_eq!(
        sem.release(&mut conn, permit).await.unwrap(),
        Release::Released
    );
    assert_counted(&manager, "Semaphore");

    // The fair path: its gate (a fair lock) keeps to the prefix and the manager too.
    flush(&server).await;
    let acquired = sem
        .acquire_fair(
            &mut conn,
            "q",
            1,
            &options().max_wait(Duration::from_secs(5)),
        )
        .await
        .unwrap();
    let Acquire::Acquired(permit) = acquired else {
        panic!("a free permit, through the gate")
    };
    assert_under(&server, "t:sem", "Semaphore (fair)").await;
    assert_eq!(
        manager.stats().noscript_fallbacks,
        3 + 3,
        "the gate's acquire, the permit's acquire and the gate's release recovered on it"
    );
    sem.release(&mut conn, permit).await.unwrap();
}

#[tokio::test]
async fn a_redlock_keeps_to_its_prefix_and_its_manager() {
    let masters = RedisMasters::spawn(3).await;
    let mut conns = Vec::new();
    for node in &masters.nodes {
        flush(node).await;
        conns.push(node.conn().await);
    }
    let manager = ScriptManager::new();
    let redlock = Redlock::new(conns)
        .unwrap()
        .with_prefix(Prefix::new("t:red").unwrap())
        .with_manager(manager.clone());
    assert!(redlock.key("r").unwrap().starts_with("t:red:"));
    let Acquire::Acquired(mut guard) = redlock.acquire("r", &options()).await.unwrap() else {
        panic!("a free lock")
    };
    for node in &masters.nodes {
        assert_under(node, "t:red", "Redlock").await;
    }
    assert_eq!(manager.stats().noscript_fallbacks, 0, "acquired with SET");
    for node in &masters.nodes {
        flush(node).await;
    }
    assert_eq!(
        redlock.renew(&mut guard).await.unwrap().outcome,
        Renew::Renewed
    );
    assert_eq!(
        manager.stats().noscript_fallbacks,
        3,
        "renew recovered on each node, on the shared manager"
    );
    assert_eq!(redlock.manager().stats(), manager.stats());
    for node in &masters.nodes {
        flush(node).await;
    }
    // Sent as EVAL (a queued release must not depend on a node's cache): no recovery.
    assert_eq!(
        redlock.release(guard).await.unwrap().outcome,
        Release::Released
    );
    assert_eq!(manager.stats().noscript_fallbacks, 3);
    for node in &masters.nodes {
        assert!(keys(node).await.is_empty(), "released on every node");
    }
}

/// The same verbs answer the same outcomes on every kind: `try_acquire` takes a free lock
/// (`Acquired`) and finds a held one `Busy` (with what the kind knows of the holders), `release` answers `Released`, then
/// `NotOwner` for a guard whose hold is gone; `acquire` waits up to `max_wait`.
#[tokio::test]
async fn every_kind_answers_the_same_verbs_with_the_same_outcomes() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let busy =
        |outcome: &str, kind: &str| assert!(outcome.starts_with("Busy(Held"), "{kind}: {outcome}");

    let lock = Lock::new();
    let Acquire::Acquired(g) = lock.try_acquire(&mut conn, "v", &options()).await.unwrap() else {
        panic!("Lock: free")
    };
    busy(
        &format!(
            "{:?}",
            lock.acquire(&mut conn, "v", &waiting()).await.unwrap()
        ),
        "Lock",
    );
    assert_eq!(lock.release(&mut conn, g).await.unwrap(), Release::Released);

    let fair = FairLock::new();
    let Acquire::Acquired(g) = fair.try_acquire(&mut conn, "v", &options()).await.unwrap() else {
        panic!("FairLock: free")
    };
    let mut other = server.conn().await;
    busy(
        &format!(
            "{:?}",
            fair.acquire(&mut other, "v", &waiting()).await.unwrap()
        ),
        "FairLock",
    );
    assert_eq!(fair.release(&mut conn, g).await.unwrap(), Release::Released);

    let rw = RwLock::new();
    let took = rw
        .try_acquire(&mut conn, "v", Mode::Write, &options())
        .await;
    let Acquire::Acquired(g) = took.unwrap() else {
        panic!("RwLock: free")
    };
    let read = rw
        .acquire(&mut conn, "v", Mode::Read, &waiting())
        .await
        .unwrap();
    busy(&format!("{read:?}"), "RwLock");
    assert_eq!(rw.release(&mut conn, g).await.unwrap(), Release::Released);

    let re = ReentrantLock::new();
    let (me, them) = (Owner::new(), Owner::new());
    let took = re.try_acquire(&mut conn, "v", &me, &options()).await;
    let Acquire::Acquired(g) = took.unwrap() else {
        panic!("ReentrantLock: free")
    };
    let theirs = re.acquire(&mut conn, "v", &them, &waiting()).await.unwrap();
    busy(&format!("{theirs:?}"), "ReentrantLock");
    assert_eq!(re.release(&mut conn, g).await.unwrap(), Release::Released);

    let sem = Semaphore::new();
    let Acquire::Acquired(g) = sem
        .try_acquire(&mut conn, "v", 1, &options())
        .await
        .unwrap()
    else {
        panic!("Semaphore: free")
    };
    busy(
        &format!(
            "{:?}",
            sem.acquire(&mut conn, "v", 1, &waiting()).await.unwrap()
        ),
        "Semaphore",
    );
    assert_eq!(sem.release(&mut conn, g).await.unwrap(), Release::Released);

    // A guard whose hold was taken away answers NotOwner, on every kind alike.
    let Acquire::Acquired(g) = lock.acquire(&mut conn, "w", &waiting()).await.unwrap() else {
        panic!("Lock: free again")
    };
    let _: () = server.cmd(&["DEL", &lock.key("w").unwrap()]).await;
    assert_eq!(lock.release(&mut conn, g).await.unwrap(), Release::NotOwner);
    let Acquire::Acquired(g) = sem.acquire(&mut conn, "w", 1, &waiting()).await.unwrap() else {
        panic!("Semaphore: free again")
    };
    let _: () = server.cmd(&["DEL", &sem.key("w").unwrap()]).await;
    assert_eq!(sem.release(&mut conn, g).await.unwrap(), Release::NotOwner);
}

#[test]
fn an_owner_never_shows_its_token() {
    let owner = Owner::from_token("a-secret-owner-token-42").unwrap();
    assert_eq!(format!("{owner:?}"), "Owner { .. }");
}
