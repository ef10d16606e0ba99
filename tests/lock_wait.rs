//! `Lock::acquire_blocking` against real Redis (single node and Cluster): a blocked waiter
//! wakes on release (hand-over latency printed), a crashed holder's lock is taken right after
//! its lease, the deadline is honoured, no wake-up is lost under churn (exact count of critical
//! sections, fencing tokens strictly increasing), a release without waiters writes no wake-up,
//! the wake-up path of the release script is all-or-nothing (poisoned key, ACL denial), and
//! the waiter's mark marks an owner token once and writes nothing else.

#[path = "support/harness.rs"]
mod harness;
mod support;

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redkit::lock::{Acquire, Lock, LockGuard, LockOptions, Release};
use redkit::{Call, Error, Registry, ScriptManager};
use support::{RedisCluster, RedisServer};

fn ttl(ms: u64) -> LockOptions<Lock> {
    LockOptions::new()
        .fencing(true)
        .ttl(Duration::from_millis(ms))
}

async fn acquired<C: ConnectionLike>(
    lock: &Lock,
    conn: &mut C,
    resource: &str,
    options: &LockOptions<Lock>,
) -> LockGuard<Lock> {
    match lock.acquire(conn, resource, options).await.unwrap() {
        Acquire::Acquired(guard) => guard,
        other => panic!("expected the lock, got {other:?}"),
    }
}

async fn blocked_acquire(
    server: &RedisServer,
    resource: &str,
    lease_ms: u64,
    wait: Duration,
) -> tokio::task::JoinHandle<(redkit::Result<Acquire<LockGuard<Lock>>>, Instant)> {
    let lock = Lock::new();
    let mut own = server.conn().await;
    let resource = resource.to_owned();
    tokio::spawn(async move {
        // Bounded: a wait that never ends (its deadline ignored) fails here, not by hanging.
        let outcome = support::bounded(
            10,
            "a blocking acquire (max wait at most 5 s)",
            lock.acquire_blocking(&mut own, &resource, &ttl(lease_ms).max_wait(wait)),
        )
        .await;
        (outcome, Instant::now())
    })
}

async fn a_blocked_acquire_wakes_on_release_not_at_the_lease_end() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let lock = Lock::new();
    let mut latencies = Vec::new();
    for _ in 0..20 {
        let held = acquired(&lock, &mut conn, "handoff", &ttl(10_000)).await;
        let waiter = blocked_acquire(&server, "handoff", 10_000, Duration::from_secs(5)).await;
        server.until_blocked(1).await;
        let released = Instant::now();
        assert_eq!(
            lock.release(&mut conn, held).await.unwrap(),
            Release::Released
        );
        let (outcome, woke) = waiter.await.unwrap();
        let Acquire::Acquired(next) = outcome.unwrap() else {
            panic!("not acquired")
        };
        latencies.push(woke - released);
        assert_eq!(
            lock.release(&mut conn, next).await.unwrap(),
            Release::Released
        );
    }
    latencies.sort();
    let (median, max) = (latencies[10], latencies[19]);
    println!("lock release -> blocked waiter holds: median {median:?}, max {max:?}");
    // The lease was 10 s: a hand-over in well under a second came from the wake-up.
    assert!(max < Duration::from_secs(1), "{max:?}");
}

async fn a_crashed_holders_lock_is_taken_right_after_its_lease_and_the_deadline_is_honoured() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let lock = Lock::new();
    // 1.2 s: longer than redis-rs's default 500 ms response timeout, which the wait (several
    // BLPOPs of at most 250 ms, each answered up to 100 ms late by Redis's timer at hz 10)
    // must not run into on a default connection.
    let lease = Duration::from_millis(1_200);
    let crashed = acquired(&lock, &mut conn, "c", &ttl(1_200)).await;
    let granted = Instant::now();
    drop(crashed); // never released: its key expires after the lease
    let (outcome, woke) = blocked_acquire(&server, "c", 10_000, Duration::from_secs(5))
        .await
        .await
        .unwrap();
    assert!(matches!(outcome.unwrap(), Acquire::Acquired(_)));
    let after = woke - granted;
    assert!(
        // Redis's timer may end the last BLPOP 100 ms late; the rest is a loaded machine.
        after <= lease + Duration::from_millis(400),
        "too late: {after:?}"
    );
    assert!(
        after >= lease - Duration::from_millis(50),
        "too early: {after:?}"
    );
    // Held for 10 s now: a 300 ms wait gives up with Busy after its deadline, not much later.
    let started = Instant::now();
    let (outcome, gave_up) = blocked_acquire(&server, "c", 1_000, Duration::from_millis(300))
        .await
        .await
        .unwrap();
    assert!(matches!(outcome.unwrap(), Acquire::Busy { .. }));
    let waited = gave_up - started;
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(1),
        "{waited:?}"
    );
}

/// A `BLPOP` whose reply misses the connection's response timeout ends that block, not the
/// acquire. The server is frozen (SIGSTOP) while a waiter blocks, for longer than the
/// waiter's 1 s response timeout: its `BLPOP` times out on the client, and its next attempt,
/// sent while the server is still frozen, is answered within the timeout once it runs again
/// (the freeze lasts 1.5 s from the block, so that attempt waits about 0.5 s). The lock is
/// held for 30 s: the acquire answers `Busy` at its 3 s deadline, not an error.
async fn a_blpop_past_the_response_timeout_ends_the_block_not_the_acquire() {
    let mut server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let lock = Lock::new();
    let _held = acquired(&lock, &mut conn, "t", &ttl(30_000)).await;
    let url = format!("redis://127.0.0.1:{}/", server.port());
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(5)))
        .set_response_timeout(Some(Duration::from_secs(1)));
    let mut own = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap();
    let waiter = tokio::spawn(async move {
        let options = ttl(10_000).max_wait(Duration::from_secs(3));
        Lock::new().acquire_blocking(&mut own, "t", &options).await
    });
    server.until_blocked(1).await;
    server.pause().await;
    // The time is what is tested: longer than the response timeout (the BLPOP in flight
    // times out), shorter than two (the attempt after it does not).
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    server.resume().await;
    let outcome = support::bounded(10, "the blocked acquire", waiter)
        .await
        .unwrap();
    assert!(matches!(outcome, Ok(Acquire::Busy { .. })), "{outcome:?}");
}

/// A `BLPOP` the server refuses (the wake-up list holds a hash: `WRONGTYPE`) ends the acquire
/// with that error at once, instead of attempting again and again until the deadline.
async fn a_refused_blpop_ends_the_acquire_with_its_error() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let lock = Lock::new();
    let key = lock.key("x").unwrap();
    let _held = acquired(&lock, &mut conn, "x", &ttl(30_000)).await;
    run(
        redis::cmd("HSET")
            .arg(format!("{key}:wake"))
            .arg("f")
            .arg(1),
        &mut conn,
    )
    .await;
    let started = Instant::now();
    let options = ttl(10_000).max_wait(Duration::from_secs(5));
    let outcome = support::bounded(
        10,
        "the acquire",
        lock.acquire_blocking(&mut conn, "x", &options),
    )
    .await;
    assert!(outcome.is_err(), "{outcome:?}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(server.command_calls("blpop").await, 1, "one BLPOP, refused");
}

async fn bad_input_is_refused_before_anything_is_sent() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let lock = Lock::new();
    let cases: [(&str, LockOptions<Lock>, Duration, &str); 2] = [
        ("", ttl(1_000), Duration::from_secs(1), "resource"),
        (
            "r",
            LockOptions::new().fencing(true).ttl(Duration::ZERO),
            Duration::from_secs(1),
            "ttl",
        ),
    ];
    for (resource, options, wait, what) in cases {
        match lock
            .acquire_blocking(&mut conn, resource, &options.clone().max_wait(wait))
            .await
        {
            Err(Error::InvalidInput { what: w, .. }) => assert_eq!(w, what),
            other => panic!("{what}: {other:?}"),
        }
    }
    assert!(
        support::snapshot(&mut conn).await.is_empty(),
        "nothing written"
    );
}

/// `tasks` tasks each enter the critical section `cycles` times through `acquire_blocking`,
/// doing a read-modify-write of a shared counter that a second holder would corrupt.
async fn churn<C>(
    conns: Vec<C>,
    cycles: usize,
    counter: &str,
    options: &LockOptions<Lock>,
) -> (Duration, Vec<u64>)
where
    C: ConnectionLike + Send + 'static,
{
    let fences = Arc::new(Mutex::new(Vec::new()));
    let inside = Arc::new(AtomicI64::new(0));
    let mut tasks = Vec::new();
    for mut own in conns {
        let (fences, inside) = (Arc::clone(&fences), Arc::clone(&inside));
        let (counter, options) = (counter.to_owned(), options.clone());
        tasks.push(tokio::spawn(async move {
            let lock = Lock::new();
            for _ in 0..cycles {
                let outcome = lock
                    .acquire_blocking(
                        &mut own,
                        "churn",
                        &options.clone().max_wait(Duration::from_secs(60)),
                    )
                    .await
                    .unwrap();
                let Acquire::Acquired(guard) = outcome else {
                    panic!("{outcome:?}")
                };
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                // Unfenced options: no token to record.
                if let Some(token) = guard.fencing_token() {
                    fences.lock().unwrap().push(token.get());
                }
                let n: i64 = redis::cmd("GET")
                    .arg(&counter)
                    .query_async::<Option<i64>>(&mut own)
                    .await
                    .unwrap()
                    .unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(2)).await;
                let _: () = redis::cmd("SET")
                    .arg(&counter)
                    .arg(n + 1)
                    .query_async(&mut own)
                    .await
                    .unwrap();
                inside.fetch_sub(1, Ordering::SeqCst);
                assert_eq!(
                    lock.release(&mut own, guard).await.unwrap(),
                    Release::Released
                );
            }
        }));
    }
    let started = Instant::now();
    for task in tasks {
        // A whole churn takes a few seconds; a wait that never ends fails within 30 s.
        support::bounded(30, "a churn task's cycles", task)
            .await
            .unwrap();
    }
    let took = started.elapsed();
    let fences = fences.lock().unwrap().clone();
    (took, fences)
}

fn strictly_increasing(fences: &[u64]) {
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fencing tokens not strictly increasing"
    );
}

async fn no_wake_up_is_lost_under_churn() {
    let server = RedisServer::spawn().await;
    let (tasks, cycles) = (16, 8);
    let mut conns = Vec::new();
    for _ in 0..tasks {
        conns.push(server.conn().await);
    }
    let (took, fences) = churn(conns, cycles, "counter:{churn}", &ttl(20_000)).await;
    let count: i64 = server.cmd(&["GET", "counter:{churn}"]).await;
    println!("{tasks} blocked acquirers x {cycles} cycles: {took:?}");
    assert_eq!(
        count,
        (tasks * cycles) as i64,
        "exact count of critical sections"
    );
    assert_eq!(fences.len(), tasks * cycles);
    strictly_increasing(&fences);
    // Leases were 20 s: finishing well before one lease means no waiter missed its wake-up
    // (a lost wake-up is only rescued at the holder's lease end or the waiter's deadline).
    assert!(took < Duration::from_secs(20), "{took:?}");
}

/// The same churn with plain (unfenced) locks: on Redis 7 the release script pushes the
/// wake-ups, on Valkey 9 the native release (`DELIFEQ` + `EXISTS`, then the push).
async fn plain_churn(server: RedisServer) {
    let (tasks, cycles) = (8, 8);
    let mut conns = Vec::new();
    for _ in 0..tasks {
        conns.push(server.conn().await);
    }
    let plain = LockOptions::new().ttl(Duration::from_secs(20));
    let (took, _) = churn(conns, cycles, "counter:{churn}", &plain).await;
    let count: i64 = server.cmd(&["GET", "counter:{churn}"]).await;
    println!("plain: {tasks} blocked acquirers x {cycles} cycles: {took:?}");
    assert_eq!(count, (tasks * cycles) as i64, "exact count");
    assert!(took < Duration::from_secs(20), "{took:?}");
}

async fn mutual_exclusion_and_wake_ups_on_a_cluster() {
    let cluster = RedisCluster::spawn().await;
    let (tasks, cycles) = (8, 4);
    let mut conns = Vec::new();
    for _ in 0..tasks {
        conns.push(cluster.conn().await);
    }
    let (took, fences) = churn(conns, cycles, "counter:{churn}", &ttl(20_000)).await;
    let mut conn = cluster.conn().await;
    let count: i64 = redis::cmd("GET")
        .arg("counter:{churn}")
        .query_async(&mut conn)
        .await
        .unwrap();
    println!("cluster: {tasks} blocked acquirers x {cycles} cycles: {took:?}");
    assert_eq!(count, (tasks * cycles) as i64);
    strictly_increasing(&fences);
    assert!(took < Duration::from_secs(20), "{took:?}");
}

async fn run(cmd: &mut redis::Cmd, conn: &mut MultiplexedConnection) {
    let _: redis::Value = cmd.query_async(conn).await.unwrap();
}

async fn a_release_without_waiters_writes_no_wake_up_and_one_with_a_waiter_does() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let lock = Lock::new();
    let key = lock.key("w").unwrap();
    let guard = acquired(&lock, &mut conn, "w", &ttl(10_000)).await;
    lock.release(&mut conn, guard).await.unwrap();
    let keys: Vec<String> = server.cmd(&["KEYS", "*"]).await;
    assert_eq!(
        keys,
        vec![format!("{key}:fence")],
        "only the fence key is left"
    );
    // Holds a blocked acquirer marked: each release pushes, and the list keeps one entry,
    // with a TTL.
    for _ in 0..3 {
        let guard = acquired(&lock, &mut conn, "w", &ttl(10_000)).await;
        support::mark_lock(&mut conn, &key).await;
        lock.release(&mut conn, guard).await.unwrap();
    }
    let len: i64 = server.cmd(&["LLEN", &format!("{key}:wake")]).await;
    let pttl: i64 = server.cmd(&["PTTL", &format!("{key}:wake")]).await;
    assert_eq!(len, 1, "bounded to one entry");
    assert!(pttl > 0 && pttl <= 60_000, "{pttl}");
    // A stale holder (lease over, another owner now) neither deletes nor wakes.
    run(redis::cmd("DEL").arg(format!("{key}:wake")), &mut conn).await;
    let stale = acquired(&lock, &mut conn, "w", &ttl(10_000)).await;
    run(
        redis::cmd("SET").arg(&key).arg("other-owner-0123456789"),
        &mut conn,
    )
    .await;
    assert_eq!(
        lock.release(&mut conn, stale).await.unwrap(),
        Release::NotOwner
    );
    let exists: i64 = server.cmd(&["EXISTS", &format!("{key}:wake")]).await;
    assert_eq!(exists, 0);
    // Nor when the other owner's hold is marked: it is theirs to release and wake.
    run(redis::cmd("DEL").arg(&key), &mut conn).await;
    let stale = acquired(&lock, &mut conn, "w", &ttl(10_000)).await;
    run(
        redis::cmd("SET").arg(&key).arg("other-owner-0123456789"),
        &mut conn,
    )
    .await;
    support::mark_lock(&mut conn, &key).await;
    assert_eq!(
        lock.release(&mut conn, stale).await.unwrap(),
        Release::NotOwner
    );
    let exists: i64 = server.cmd(&["EXISTS", &key, &format!("{key}:wake")]).await;
    assert_eq!(exists, 1, "the other owner's key kept, no wake-up");
}

async fn the_wake_up_path_of_release_is_all_or_nothing() {
    let server = RedisServer::spawn().await;
    let mut admin = server.conn().await;
    let lock = Lock::new();
    let key = lock.key("p").unwrap();
    let wake = format!("{key}:wake");
    // A wake-up key of another type: WRONGTYPE, and the lock is still held.
    let guard = acquired(&lock, &mut admin, "p", &ttl(60_000)).await;
    support::mark_lock(&mut admin, &key).await;
    run(redis::cmd("HSET").arg(&wake).arg("f").arg("1"), &mut admin).await;
    let before = support::snapshot(&mut admin).await;
    match lock.release(&mut admin, guard).await {
        Err(Error::WrongType { script }) => assert_eq!(script, "lock_release_wake.v4"),
        other => panic!("{other:?}"),
    }
    support::same_dumps(
        &before,
        &support::snapshot(&mut admin).await,
        "hash wake key",
    );
    // Each command of the wake-up path denied: PermissionDenied, nothing changed.
    for denied in ["get", "type", "lpush", "ltrim", "pexpire", "del"] {
        run(redis::cmd("FLUSHALL").arg("SYNC"), &mut admin).await;
        let mut conn = support::denied_conn(&server, denied).await;
        let guard = acquired(&lock, &mut admin, "p", &ttl(60_000)).await;
        support::mark_lock(&mut admin, &key).await;
        let before = support::snapshot(&mut admin).await;
        match lock.release(&mut conn, guard).await {
            Err(Error::PermissionDenied { script, detail }) => {
                // GET refused stops the compare-and-delete; the rest, the waking release
                // that follows it.
                let expected = if denied == "get" {
                    "lock_release.v5"
                } else {
                    "lock_release_wake.v4"
                };
                assert_eq!(script, expected, "-{denied}");
                assert!(!detail.contains("{p}"), "no key in {detail}");
            }
            other => panic!("-{denied}: {other:?}"),
        }
        support::same_dumps(&before, &support::snapshot(&mut admin).await, denied);
    }
    // Without a waiter (the common path: GET, DEL): each of them denied is PermissionDenied
    // and the lock is still held; then a permitted release releases it.
    for denied in ["get", "del"] {
        run(redis::cmd("FLUSHALL").arg("SYNC"), &mut admin).await;
        let mut conn = support::denied_conn(&server, denied).await;
        let mine = ttl(60_000).token("release-test-token-0123456789");
        let guard = acquired(&lock, &mut admin, "p", &mine).await;
        let before = support::snapshot(&mut admin).await;
        match lock.release(&mut conn, guard).await {
            Err(Error::PermissionDenied { script, .. }) => {
                assert_eq!(script, "lock_release.v5", "-{denied}")
            }
            other => panic!("-{denied}: {other:?}"),
        }
        support::same_dumps(&before, &support::snapshot(&mut admin).await, denied);
        // Still ours: the same owner token finds its own lock.
        let again = acquired(&lock, &mut admin, "p", &mine).await;
        assert_eq!(
            lock.release(&mut admin, again).await.unwrap(),
            redkit::lock::Release::Released,
            "-{denied}"
        );
    }
}

/// `lock_mark`: a free lock answers -2 and nothing is written; a held one answers its PTTL
/// and holds the owner token followed by 0xFF with its TTL kept; a second mark changes
/// nothing; a value of another length than an owner token's is left as it is; a key without a
/// TTL answers -1 (and is marked); another type is `WrongType`, nothing written; a user that
/// may not run `GET`, `PTTL` or `SET` gets `PermissionDenied`, nothing written.
async fn the_mark_marks_an_owner_token_once_and_keeps_its_ttl() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let manager = ScriptManager::new();
    let script = Registry::global().require("lock_mark", 1).unwrap();
    let mark = |key: &str| {
        let mut call = Call::new(script);
        call.key(key);
        call
    };
    let get = |key: &'static str| {
        let mut cmd = redis::cmd("GET");
        cmd.arg(key);
        cmd
    };
    let free: i64 = manager.invoke(&mut conn, &mark("l:{free}")).await.unwrap();
    assert_eq!(free, -2);
    assert!(server.cmd::<Vec<String>>(&["KEYS", "*"]).await.is_empty());

    let token = "0123456789abcdef0123456789abcdef";
    let _: () = server.cmd(&["SET", "l:{h}", token, "PX", "10000"]).await;
    let ms: i64 = manager.invoke(&mut conn, &mark("l:{h}")).await.unwrap();
    assert!(ms > 0 && ms <= 10_000, "{ms}");
    let mut marked = token.as_bytes().to_vec();
    marked.push(0xff);
    for _ in 0..2 {
        let value: Vec<u8> = get("l:{h}").query_async(&mut conn).await.unwrap();
        assert_eq!(value, marked, "one mark, however often");
        let _: i64 = manager.invoke(&mut conn, &mark("l:{h}")).await.unwrap();
    }
    let left: i64 = server.cmd(&["PTTL", "l:{h}"]).await;
    assert!(left > 5_000 && left <= 10_000, "the TTL kept: {left}");

    for short in ["short", &"x".repeat(129)] {
        let _: () = server.cmd(&["SET", "l:{s}", short, "PX", "10000"]).await;
        let _: i64 = manager.invoke(&mut conn, &mark("l:{s}")).await.unwrap();
        let value: String = get("l:{s}").query_async(&mut conn).await.unwrap();
        assert_eq!(value, short, "not an owner token: left as it is");
    }
    let _: () = server.cmd(&["SET", "l:{n}", token]).await;
    let ms: i64 = manager.invoke(&mut conn, &mark("l:{n}")).await.unwrap();
    assert_eq!(ms, -1);
    let value: Vec<u8> = get("l:{n}").query_async(&mut conn).await.unwrap();
    assert_eq!(value, marked);

    let _: i64 = server.cmd(&["HSET", "l:{t}", "f", "1"]).await;
    let before = support::snapshot(&mut conn).await;
    assert!(matches!(
        manager.invoke::<i64, _>(&mut conn, &mark("l:{t}")).await,
        Err(Error::WrongType { .. })
    ));
    support::same_dumps(&before, &support::snapshot(&mut conn).await, "wrong type");

    // A user that may not run one of its commands: PermissionDenied, nothing written.
    let _: () = server.cmd(&["SET", "l:{a}", token, "PX", "10000"]).await;
    for denied in ["get", "pttl", "set"] {
        let mut conn_denied = support::denied_conn(&server, denied).await;
        let before = support::snapshot(&mut conn).await;
        match manager
            .invoke::<i64, _>(&mut conn_denied, &mark("l:{a}"))
            .await
        {
            Err(Error::PermissionDenied { script, .. }) => assert_eq!(script, "lock_mark.v1"),
            other => panic!("-{denied}: {other:?}"),
        }
        support::same_dumps(&before, &support::snapshot(&mut conn).await, denied);
    }
}

fn main() -> std::process::ExitCode {
    let mut tests = harness::Tests::new();
    harness::add!(
        tests,
        a_blocked_acquire_wakes_on_release_not_at_the_lease_end,
        a_crashed_holders_lock_is_taken_right_after_its_lease_and_the_deadline_is_honoured,
        bad_input_is_refused_before_anything_is_sent,
        a_release_without_waiters_writes_no_wake_up_and_one_with_a_waiter_does,
        the_wake_up_path_of_release_is_all_or_nothing,
        a_blpop_past_the_response_timeout_ends_the_block_not_the_acquire,
        a_refused_blpop_ends_the_acquire_with_its_error,
        the_mark_marks_an_owner_token_once_and_keeps_its_ttl
    );
    harness::add!(tests, multi_thread: no_wake_up_is_lost_under_churn, mutual_exclusion_and_wake_ups_on_a_cluster);
    harness::add!(tests, both: no_wake_up_is_lost_under_churn_without_fencing, plain_churn);
    tests.run()
}
