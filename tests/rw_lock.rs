//! `RwLock` against real Redis (single node and Cluster): 64 tasks mixing reads and writes on a
//! shared key (no reader sees a write in progress, exact count of writes, writers' fencing
//! tokens increasing), a writer gets in under continuous readers, a crashed reader's or
//! writer's hold ends with its lease, a writer giving up lets readers in at once, bad input
//! refused before sending, nothing half-applied (poisoned keys, ACL denial of every inner
//! command).

mod support;

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redkit::lock::{Acquire, LockGuard, LockOptions, Mode, Release, Renew, RwLock};
use redkit::Error;
use support::{RedisCluster, RedisServer};

const TOKEN: &str = "owner-token-0123456789";

fn wait(ttl_ms: u64) -> LockOptions<RwLock> {
    LockOptions::new()
        .ttl(Duration::from_millis(ttl_ms))
        .retries(100_000)
        .retry_delay(Duration::from_millis(2))
        .jitter(Duration::from_millis(3))
        .max_wait(Duration::from_secs(60))
}

async fn held<C: ConnectionLike>(
    rw: &RwLock,
    conn: &mut C,
    resource: &str,
    write: bool,
    options: &LockOptions<RwLock>,
) -> LockGuard<RwLock> {
    let outcome = if write {
        rw.acquire(conn, resource, Mode::Write, options).await
    } else {
        rw.acquire(conn, resource, Mode::Read, options).await
    };
    match outcome.unwrap() {
        Acquire::Acquired(guard) => guard,
        other => panic!("expected the lock, got {other:?}"),
    }
}

#[derive(Default)]
struct Inside {
    readers: AtomicI64,
    writers: AtomicI64,
    fences: Mutex<Vec<u64>>,
}

/// `tasks` tasks, each doing `ops` holds; task i writes on every op when i % 4 == 0.
async fn mix<C>(conns: Vec<C>, ops: usize) -> (i64, Duration)
where
    C: ConnectionLike + Send + 'static,
{
    let inside = Arc::new(Inside::default());
    let mut handles = Vec::new();
    let mut writes = 0;
    for (i, mut own) in conns.into_iter().enumerate() {
        let write = i % 4 == 0;
        if write {
            writes += ops as i64;
        }
        let inside = Arc::clone(&inside);
        handles.push(tokio::spawn(async move {
            let rw = RwLock::new();
            for _ in 0..ops {
                let guard = held(&rw, &mut own, "mix", write, &wait(20_000)).await;
                if write {
                    assert_eq!(
                        inside.writers.fetch_add(1, Ordering::SeqCst),
                        0,
                        "two writers"
                    );
                    assert_eq!(
                        inside.readers.load(Ordering::SeqCst),
                        0,
                        "writer with readers"
                    );
                    inside
                        .fences
                        .lock()
                        .unwrap()
                        .push(guard.fencing_token().unwrap().get());
                    let n: Option<i64> = redis::cmd("GET")
                        .arg("data:{mix}")
                        .query_async(&mut own)
                        .await
                        .unwrap();
                    let _: () = redis::cmd("SET")
                        .arg("data:{mix}")
                        .arg("writing")
                        .query_async(&mut own)
                        .await
                        .unwrap();
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    let _: () = redis::cmd("SET")
                        .arg("data:{mix}")
                        .arg(n.unwrap_or(0) + 1)
                        .query_async(&mut own)
                        .await
                        .unwrap();
                    inside.writers.fetch_sub(1, Ordering::SeqCst);
                } else {
                    inside.readers.fetch_add(1, Ordering::SeqCst);
                    assert_eq!(
                        inside.writers.load(Ordering::SeqCst),
                        0,
                        "reader with a writer"
                    );
                    let v: Option<String> = redis::cmd("GET")
                        .arg("data:{mix}")
                        .query_async(&mut own)
                        .await
                        .unwrap();
                    assert_ne!(
                        v.as_deref(),
                        Some("writing"),
                        "a reader saw a write in progress"
                    );
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    inside.readers.fetch_sub(1, Ordering::SeqCst);
                }
                assert_eq!(
                    rw.release(&mut own, guard).await.unwrap(),
                    Release::Released
                );
            }
        }));
    }
    let started = Instant::now();
    for h in handles {
        tokio::time::timeout(Duration::from_secs(120), h)
            .await
            .expect("bounded")
            .unwrap();
    }
    let fences = inside.fences.lock().unwrap().clone();
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "writers' fencing tokens increase"
    );
    (writes, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_tasks_mixing_reads_and_writes_on_one_node() {
    let server = RedisServer::spawn().await;
    let mut conns = Vec::new();
    for _ in 0..64 {
        conns.push(server.conn().await);
    }
    let (writes, took) = mix(conns, 4).await;
    let n: i64 = server.cmd(&["GET", "data:{mix}"]).await;
    println!("64 tasks x 4 holds ({writes} writes): {took:?}");
    assert_eq!(n, writes, "exact count of writes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_on_a_cluster() {
    let cluster = RedisCluster::spawn().await;
    let mut conns = Vec::new();
    for _ in 0..12 {
        conns.push(cluster.conn().await);
    }
    let (writes, took) = mix(conns, 3).await;
    let mut conn = cluster.conn().await;
    let n: i64 = redis::cmd("GET")
        .arg("data:{mix}")
        .query_async(&mut conn)
        .await
        .unwrap();
    println!("cluster: 12 tasks x 3 holds ({writes} writes): {took:?}");
    assert_eq!(n, writes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_writer_gets_in_under_continuous_readers() {
    let server = RedisServer::spawn().await;
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let mut readers = Vec::new();
    for _ in 0..6 {
        let mut own = server.conn().await;
        let (stop, done) = (Arc::clone(&stop), Arc::clone(&done));
        readers.push(tokio::spawn(async move {
            let rw = RwLock::new();
            let mut reads = 0;
            while !stop.load(Ordering::SeqCst) {
                let guard = held(&rw, &mut own, "hot", false, &wait(10_000)).await;
                tokio::time::sleep(Duration::from_millis(30)).await;
                rw.release(&mut own, guard).await.unwrap();
                reads += 1;
                done.fetch_add(1, Ordering::SeqCst);
            }
            reads
        }));
    }
    // The readers overlap continuously once each has read at least once and one holds now.
    let readers_key = format!("{}:readers", RwLock::new().key("hot").unwrap());
    let deadline = Instant::now() + Duration::from_secs(10);
    while done.load(Ordering::SeqCst) < 6 || server.cmd::<i64>(&["ZCARD", &readers_key]).await == 0
    {
        assert!(Instant::now() < deadline, "the readers never got going");
        tokio::task::yield_now().await;
    }
    let rw = RwLock::new();
    let mut conn = server.conn().await;
    let started = Instant::now();
    let guard = held(&rw, &mut conn, "hot", true, &wait(10_000)).await;
    let waited = started.elapsed();
    let readers_now: i64 = server
        .cmd(&["ZCARD", &format!("{}:readers", rw.key("hot").unwrap())])
        .await;
    assert_eq!(readers_now, 0, "no reader while the writer holds");
    rw.release(&mut conn, guard).await.unwrap();
    stop.store(true, Ordering::SeqCst);
    let mut reads = 0;
    for r in readers {
        reads += r.await.unwrap();
    }
    println!("writer under continuous readers got in after {waited:?} ({reads} reads meanwhile)");
    // Readers' leases were 10 s: the writer got in because its intent drained them.
    assert!(waited < Duration::from_secs(2), "{waited:?}");
}

#[tokio::test]
async fn a_crashed_writers_hold_ends_with_its_lease_not_later() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let rw = RwLock::new();
    let crashed = held(&rw, &mut conn, "w", true, &wait(500)).await;
    let granted = Instant::now();
    drop(crashed); // no release, no watchdog: as if the process died
    let reader = held(&rw, &mut conn, "w", false, &wait(10_000)).await;
    let after = granted.elapsed();
    assert!(
        after >= Duration::from_millis(450) && after < Duration::from_millis(1_500),
        "{after:?}"
    );
    rw.release(&mut conn, reader).await.unwrap();
    let crashed = held(&rw, &mut conn, "w", true, &wait(500)).await;
    let granted = Instant::now();
    drop(crashed);
    let writer = held(&rw, &mut conn, "w", true, &wait(10_000)).await;
    let after = granted.elapsed();
    assert!(
        after >= Duration::from_millis(450) && after < Duration::from_millis(1_500),
        "{after:?}"
    );
    rw.release(&mut conn, writer).await.unwrap();
}

#[tokio::test]
async fn a_crashed_reader_ends_with_its_lease_and_a_writer_giving_up_lets_readers_in() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let rw = RwLock::new();
    let crashed = held(&rw, &mut conn, "c", false, &wait(500)).await;
    let granted = Instant::now();
    drop(crashed);
    let writer = held(&rw, &mut conn, "c", true, &wait(10_000)).await;
    let after = granted.elapsed();
    assert!(
        after >= Duration::from_millis(450) && after < Duration::from_millis(1_500),
        "{after:?}"
    );
    // A reader waits while the writer holds; once released, it gets in.
    let quick = LockOptions::new().ttl(Duration::from_secs(5));
    assert!(matches!(
        rw.acquire(&mut conn, "c", Mode::Read, &quick)
            .await
            .unwrap(),
        Acquire::Busy { .. }
    ));
    rw.release(&mut conn, writer).await.unwrap();
    let mut reader = held(&rw, &mut conn, "c", false, &quick).await;
    assert_eq!(
        rw.renew(&mut conn, &mut reader).await.unwrap(),
        Renew::Renewed
    );
    // A writer that gives up (its intent kept new readers out meanwhile) withdraws the intent.
    let patient = LockOptions::new().ttl(Duration::from_secs(5)).retries(3);
    assert!(matches!(
        rw.acquire(&mut conn, "c", Mode::Write, &patient)
            .await
            .unwrap(),
        Acquire::Busy { .. }
    ));
    let intent: i64 = server
        .cmd(&["EXISTS", &format!("{}:intent", rw.key("c").unwrap())])
        .await;
    assert_eq!(intent, 0, "intent withdrawn");
    let second = held(&rw, &mut conn, "c", false, &quick).await;
    rw.release(&mut conn, second).await.unwrap();
    // try_acquire: one attempt, the write intent withdrawn at once, readers still get in.
    let started = Instant::now();
    assert!(matches!(
        rw.try_acquire(&mut conn, "c", Mode::Write, &patient)
            .await
            .unwrap(),
        Acquire::Busy { .. }
    ));
    assert!(
        started.elapsed() < Duration::from_millis(50),
        "no retry pause"
    );
    let intent: i64 = server
        .cmd(&["EXISTS", &format!("{}:intent", rw.key("c").unwrap())])
        .await;
    assert_eq!(intent, 0, "try_acquire withdrew its intent");
    let third = match rw
        .try_acquire(&mut conn, "c", Mode::Read, &quick)
        .await
        .unwrap()
    {
        Acquire::Acquired(guard) => guard,
        other => panic!("{other:?}"),
    };
    rw.release(&mut conn, third).await.unwrap();
    assert_eq!(
        rw.release(&mut conn, reader).await.unwrap(),
        Release::Released
    );
}

#[tokio::test]
async fn bad_input_is_refused_before_anything_is_sent() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let rw = RwLock::new();
    let long = "r".repeat(10_000);
    let cases: [(&str, LockOptions<RwLock>, &str); 3] = [
        ("", LockOptions::new(), "resource"),
        (&long, LockOptions::new(), "resource"),
        ("r", LockOptions::new().ttl(Duration::ZERO), "ttl"),
    ];
    for (resource, options, what) in cases {
        for outcome in [
            rw.acquire(&mut conn, resource, Mode::Read, &options).await,
            rw.acquire(&mut conn, resource, Mode::Write, &options).await,
        ] {
            match outcome {
                Err(Error::InvalidInput { what: w, .. }) => assert_eq!(w, what),
                other => panic!("{what}: {other:?}"),
            }
        }
    }
    assert!(
        support::snapshot(&mut conn).await.is_empty(),
        "nothing written"
    );
}

async fn run(cmd: &mut redis::Cmd, conn: &mut MultiplexedConnection) {
    let _: redis::Value = cmd.query_async(conn).await.unwrap();
}

/// A reader (not TOKEN) holding, an expired reader to drop, and a fence.
async fn seed(admin: &mut MultiplexedConnection, key: &str) {
    run(redis::cmd("FLUSHALL").arg("SYNC"), admin).await;
    let t: (String, String) = redis::cmd("TIME").query_async(admin).await.unwrap();
    let now: u64 = t.0.parse::<u64>().unwrap() * 1000;
    run(
        redis::cmd("ZADD")
            .arg(format!("{key}:readers"))
            .arg(now - 1000)
            .arg("dead-token-0123456789")
            .arg(now + 50_000)
            .arg("reader-token-0123456789"),
        admin,
    )
    .await;
    run(
        redis::cmd("PEXPIRE")
            .arg(format!("{key}:readers"))
            .arg(100_000),
        admin,
    )
    .await;
    run(
        redis::cmd("SET")
            .arg(format!("{key}:fence"))
            .arg(7)
            .arg("PX")
            .arg(100_000),
        admin,
    )
    .await;
}

#[tokio::test]
async fn poisoned_keys_and_acl_denials_change_nothing() {
    let server = RedisServer::spawn().await;
    let mut admin = server.conn().await;
    let rw = RwLock::new();
    let key = rw.key("p").unwrap();
    let once = LockOptions::new().ttl(Duration::from_secs(60)).token(TOKEN);
    for (suffix, bad) in [
        ("readers", "<string>"),
        ("writer", "<hash>"),
        ("intent", "<hash>"),
        ("fence", "abc"),
        ("readers", "<inf>"),
    ] {
        seed(&mut admin, &key).await;
        let target = format!("{key}:{suffix}");
        run(redis::cmd("DEL").arg(&target), &mut admin).await;
        let mut poison = match bad {
            "<hash>" => redis::cmd("HSET"),
            "<inf>" => redis::cmd("ZADD"),
            _ => redis::cmd("SET"),
        };
        match bad {
            "<hash>" => poison.arg(&target).arg("f").arg("1"),
            "<inf>" => poison.arg(&target).arg("+inf").arg("x-token-0123456789"),
            "<string>" => poison.arg(&target).arg("x"),
            _ => poison.arg(&target).arg(bad),
        };
        run(&mut poison, &mut admin).await;
        let before = support::snapshot(&mut admin).await;
        let case = format!("{suffix} = {bad}");
        for outcome in [
            rw.acquire(&mut admin, "p", Mode::Read, &once).await,
            rw.acquire(&mut admin, "p", Mode::Write, &once).await,
        ] {
            match (bad, outcome) {
                ("<string>" | "<hash>", Err(Error::WrongType { script })) => {
                    assert_eq!(script, "rw_acquire.v1")
                }
                ("abc" | "<inf>", Err(Error::CorruptData { script, .. })) => {
                    assert_eq!(script, "rw_acquire.v1")
                }
                (_, other) => panic!("{case}: {other:?}"),
            }
            support::same_dumps(&before, &support::snapshot(&mut admin).await, &case);
        }
    }
    let acquire_uses = [
        "type",
        "get",
        "time",
        "zrange",
        "zremrangebyscore",
        "zcard",
        "pttl",
        "zadd",
        "pexpire",
        "set",
        "del",
    ];
    let release_uses = ["type", "time", "get", "zscore", "zrem", "del"];
    let renew_uses = ["type", "time", "get", "pexpire", "zscore", "zadd", "pttl"];
    for denied in acquire_uses.iter().chain(["zscore", "zrem"].iter()) {
        let mut conn = support::denied_conn(&server, denied).await;
        let check = |outcome: Result<(), Error>, uses: bool, script: &str, case: &str| match outcome
        {
            Err(Error::PermissionDenied { script: s, detail }) if uses => {
                assert_eq!(s, script, "{case}");
                assert!(!detail.contains("{p}"), "{case}: {detail}");
            }
            Ok(()) if !uses => {}
            other => panic!("{case}: {other:?}"),
        };
        for write in [false, true] {
            seed(&mut admin, &key).await;
            let before = support::snapshot(&mut admin).await;
            let case = format!("-{denied}, acquire (write: {write})");
            let outcome = if write {
                rw.acquire(&mut conn, "p", Mode::Write, &once).await
            } else {
                rw.acquire(&mut conn, "p", Mode::Read, &once).await
            };
            let uses = acquire_uses.contains(denied);
            if !uses && write {
                // The writer waited behind the reader and gave up: withdrawing its intent
                // (rw_release) is what the ACL refuses.
                check(outcome.map(|_| ()), true, "rw_release.v1", &case);
                continue;
            }
            check(outcome.map(|_| ()), uses, "rw_acquire.v1", &case);
            if uses {
                support::same_dumps(&before, &support::snapshot(&mut admin).await, &case);
            }
        }
        seed(&mut admin, &key).await;
        let mut guard = held(&rw, &mut admin, "p", false, &once).await;
        let before = support::snapshot(&mut admin).await;
        let case = format!("-{denied}, renew");
        let uses = renew_uses.contains(denied);
        check(
            rw.renew(&mut conn, &mut guard).await.map(|_| ()),
            uses,
            "rw_renew.v1",
            &case,
        );
        if uses {
            support::same_dumps(&before, &support::snapshot(&mut admin).await, &case);
        }
        let before = support::snapshot(&mut admin).await;
        let case = format!("-{denied}, release");
        let uses = release_uses.contains(denied);
        check(
            rw.release(&mut conn, guard).await.map(|_| ()),
            uses,
            "rw_release.v1",
            &case,
        );
        if uses {
            support::same_dumps(&before, &support::snapshot(&mut admin).await, &case);
        }
    }
}
