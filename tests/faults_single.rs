//! Single-server faults (issue 8 fault suite), each bounded in time and counted: a client
//! timeout with the server frozen after the command was sent (no connection re-sends it),
//! AOF restart with `appendfsync always` (nothing acknowledged lost), OOM under `noeviction`
//! (typed error, nothing written), writes on a replica (READONLY, typed error, nothing written).

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redkit::connect::{self, Timeouts};
use redkit::inventory::{Decrement, Inventory, Store};
use redkit::lock::{Lock, LockOptions};
use redkit::rate_limit::{FixedWindow, LimitKey, Rate};
use redkit::{Error, ScriptManager};
use support::{RedisServer, ReplicatedPair};

fn store() -> Store {
    Inventory::new("fs").unwrap().store("s").unwrap()
}

fn timeouts() -> Timeouts {
    Timeouts::new(Duration::from_millis(300), Duration::from_millis(200)).unwrap()
}

/// Every key with its DUMP and whether it has a TTL.
async fn keyspace(server: &RedisServer) -> BTreeMap<Vec<u8>, (Vec<u8>, bool)> {
    let mut conn = server.conn().await;
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut out = BTreeMap::new();
    for key in keys {
        let dump: Vec<u8> = redis::cmd("DUMP")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        let pttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        out.insert(key, (dump, pttl >= 0));
    }
    out
}

/// GETs `key` every 10 ms until `stop` (other callers on the same connection); errors ignored.
fn traffic<C: ConnectionLike + Send + 'static>(
    mut conn: C,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while !stop.load(Ordering::Relaxed) {
            let _: redis::RedisResult<Option<String>> = redis::cmd("GET")
                .arg("fs:other")
                .query_async(&mut conn)
                .await;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
}

#[tokio::test]
async fn a_call_timed_out_on_a_frozen_server_is_never_resent_by_the_connection() {
    let mut server = RedisServer::spawn().await;
    let url = format!("{}?protocol=resp3", server.url());
    let client = redis::Client::open(url).unwrap();
    let mut default_manager = redis::aio::ConnectionManager::new(client.clone())
        .await
        .unwrap();
    let mut manager = connect::manager(client.clone(), timeouts()).await.unwrap();
    let mut multiplexed = connect::multiplexed(&client, timeouts()).await.unwrap();
    let s = store();
    for sku in ["default-manager", "manager", "multiplexed"] {
        s.set(&mut manager, sku, 1_000).await.unwrap();
        s.decrement(&mut manager, sku, 1, None).await.unwrap();
    }

    let stop = Arc::new(AtomicBool::new(false));
    let traffic = [
        traffic(default_manager.clone(), stop.clone()),
        traffic(manager.clone(), stop.clone()),
        traffic(multiplexed.clone(), stop.clone()),
    ];
    let calls = server.evalsha_calls().await;
    server.pause().await;
    let (s1, s2, s3) = (store(), store(), store());
    let (a, b, c) = tokio::join!(
        s1.decrement(&mut default_manager, "default-manager", 1, None),
        s2.decrement(&mut manager, "manager", 1, None),
        s3.decrement(&mut multiplexed, "multiplexed", 1, None),
    );
    // Let the connections see more traffic (and time out) while the caller was told "failed".
    tokio::time::sleep(Duration::from_millis(600)).await;
    stop.store(true, Ordering::Relaxed);
    for t in traffic {
        t.await.unwrap();
    }
    assert!(a.is_err() && b.is_err() && c.is_err(), "{a:?} {b:?} {c:?}");
    // The caller is told the outcome is unknown: retry only with a request id.
    for r in [&a, &b, &c] {
        assert!(connect::may_have_applied(r.as_ref().unwrap_err()), "{r:?}");
    }
    server.resume().await;
    // The three calls ran (and any copy a connection re-sent while the server was frozen
    // was in the server's input before them: it ran in the same pass).
    server.wait_command_calls("evalsha", calls + 3).await;

    let mut conn = server.conn().await;
    let mut counts = Vec::new();
    for sku in ["default-manager", "manager", "multiplexed"] {
        let applied = 999 - s.stock(&mut conn, sku).await.unwrap();
        counts.push((sku, applied));
    }
    eprintln!("frozen after send, 1 call each, errored 1 each; applied: {counts:?}");
    for (sku, applied) in counts {
        // The command reached the server before the freeze: it ran, once, not more.
        assert_eq!(applied, 1, "{sku}");
    }
}

#[tokio::test]
async fn aof_always_keeps_every_acknowledged_decrement_across_a_crash() {
    let mut server =
        RedisServer::spawn_with(&["--appendonly", "yes", "--appendfsync", "always"]).await;
    let url = format!("{}?protocol=resp3", server.url());
    let conn = connect::manager(redis::Client::open(url).unwrap(), timeouts())
        .await
        .unwrap();
    let s = store();
    s.set(&mut conn.clone(), "aof", 1_000_000).await.unwrap();

    // 4 buyers with distinct request ids; the server is SIGKILLed mid-run and restarted.
    let stop = Arc::new(AtomicBool::new(false));
    let mut buyers = Vec::new();
    for b in 0..4 {
        let (mut conn, stop) = (conn.clone(), stop.clone());
        buyers.push(tokio::spawn(async move {
            let s = store();
            let (mut acked, mut errored) = (Vec::new(), Vec::new());
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let id = format!("b{b}-{i}");
                match s.decrement(&mut conn, "aof", 1, Some(&id)).await {
                    Ok(d) => {
                        assert!(d.is_applied(), "{d:?}");
                        acked.push(id);
                    }
                    Err(_) => {
                        errored.push(id);
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
                i += 1;
            }
            (acked, errored)
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.stop().await; // SIGKILL: no shutdown save
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.start().await; // same port, same dir: loads the AOF
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let (mut acked, mut errored) = (Vec::new(), Vec::new());
    for b in buyers {
        let (a, e) = b.await.unwrap();
        acked.extend(a);
        errored.extend(e);
    }

    // Every acknowledged id is remembered: retrying it answers Duplicate and changes nothing.
    let mut conn = server.conn().await;
    let mut lost = 0;
    // A retry is what a client does after an error: bounded, on a machine slow to fsync.
    async fn retried(
        s: &Store,
        conn: &mut redis::aio::MultiplexedConnection,
        id: &str,
    ) -> Decrement {
        let mut last = None;
        for _ in 0..20 {
            match s.decrement(conn, "aof", 1, Some(id)).await {
                Ok(d) => return d,
                Err(e) => last = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("{id}: 20 retries failed, last {last:?}")
    }
    for id in &acked {
        match retried(&s, &mut conn, id).await {
            Decrement::Duplicate { .. } => {}
            _ => lost += 1,
        }
    }
    // The errored ids may or may not have run: retrying each with its id applies it once.
    for id in &errored {
        retried(&s, &mut conn, id).await;
    }
    let applied = 1_000_000 - s.stock(&mut conn, "aof").await.unwrap();
    let expected = (acked.len() + errored.len()) as u64 - lost;
    eprintln!(
        "AOF always + SIGKILL: attempted {}, succeeded {}, errored {}, lost {lost}, \
         applied after retries {applied} (doubled {})",
        acked.len() + errored.len(),
        acked.len(),
        errored.len(),
        applied.saturating_sub(expected)
    );
    assert!(
        !acked.is_empty() && !errored.is_empty(),
        "the crash hit the run"
    );
    assert_eq!(lost, 0, "acknowledged decrements lost");
    assert_eq!(applied, expected, "a decrement applied twice");
}

#[tokio::test]
async fn oom_under_noeviction_refuses_each_script_with_a_typed_error_and_writes_nothing() {
    let server = RedisServer::spawn_with(&["--maxmemory-policy", "noeviction"]).await;
    let mut conn = server.conn().await;
    let manager = ScriptManager::new();
    manager.preload(&mut conn).await.unwrap();
    let s = Inventory::new("fs").unwrap().store("s").unwrap();
    s.set(&mut conn, "oom", 100).await.unwrap();
    let lock = Lock::new().with_manager(manager.clone());
    let limiter = FixedWindow::new("fs", Rate::per_minute(redkit::nonzero!(100))).unwrap();

    // Fill up to the limit.
    let used: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut conn)
        .await
        .unwrap();
    let used: u64 = used
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let limit = used + 512 * 1024;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(limit)
        .query_async(&mut conn)
        .await
        .unwrap();
    let junk = vec![b'x'; 64 * 1024];
    for i in 0.. {
        let r: redis::RedisResult<()> = redis::cmd("SET")
            .arg(format!("fs:junk:{i}"))
            .arg(&junk)
            .query_async(&mut conn)
            .await;
        if let Err(e) = r {
            assert_eq!(e.code(), Some("OOM"), "{e:?}");
            break;
        }
        assert!(i < 1_000, "never reached maxmemory");
    }

    let before = keyspace(&server).await;
    let is_oom = |e: &Error| {
        matches!(e, Error::Redis(r) if r.code() == Some("OOM")) && !connect::may_have_applied(e)
    };
    let mut refused = 0;
    let d = s.decrement(&mut conn, "oom", 1, Some("order-1")).await;
    assert!(d.as_ref().is_err_and(is_oom), "{d:?}");
    refused += 1;
    let r = s
        .reserve(&mut conn, "oom", 1, Duration::from_secs(60), "cart-1")
        .await;
    assert!(r.as_ref().is_err_and(is_oom), "{r:?}");
    refused += 1;
    let c = limiter
        .check(&mut conn, &LimitKey::text("c").unwrap())
        .await;
    assert!(c.as_ref().is_err_and(is_oom), "{c:?}");
    refused += 1;
    let l = lock
        .try_acquire(&mut conn, "job", &LockOptions::new())
        .await;
    assert!(l.as_ref().is_err_and(is_oom), "{l:?}");
    refused += 1;
    assert_eq!(keyspace(&server).await, before, "a refused script wrote");
    eprintln!("OOM noeviction: attempted 4, refused with OOM {refused}, keyspace unchanged");
}

#[tokio::test]
async fn writes_on_a_replica_are_refused_with_readonly_and_write_nothing() {
    let pair = ReplicatedPair::spawn().await;
    let mut primary = pair.primary.conn().await;
    let s = store();
    s.set(&mut primary, "ro", 10).await.unwrap();
    // Wait until the replica has the stock.
    let mut replica = pair.replica.conn().await;
    for _ in 0..100 {
        let v: Option<String> = redis::cmd("GET")
            .arg("fs:{s}:sku:ro")
            .query_async(&mut replica)
            .await
            .unwrap();
        if v.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before = keyspace(&pair.replica).await;
    let d = s.decrement(&mut replica, "ro", 1, Some("order-1")).await;
    assert!(
        matches!(&d, Err(Error::Redis(e)) if e.code() == Some("READONLY")),
        "{d:?}"
    );
    assert!(!connect::may_have_applied(d.as_ref().unwrap_err()));
    let l = Lock::new()
        .try_acquire(&mut replica, "job", &LockOptions::new())
        .await;
    assert!(
        matches!(&l, Err(Error::Redis(e)) if e.code() == Some("READONLY")),
        "{l:?}"
    );
    assert_eq!(keyspace(&pair.replica).await, before);
    assert_eq!(s.stock(&mut primary, "ro").await.unwrap(), 10);
    eprintln!("replica writes: attempted 2, refused READONLY 2, keyspace unchanged");
}
