//! `FairLock` against real Redis (single node and Cluster): 32 waiters served in arrival
//! order (hand-over latency printed), 64 tasks under churn (exact count, strictly increasing
//! fencing tokens, no lost wake-up), a killed waiter skipped after its own short lease, a
//! killed holder handed over after its lease, a blocked waiter renewing its place, the
//! deadline (the waiter leaves the queue), mutual exclusion with an exact count on a Cluster,
//! renew/watchdog, bad input refused before sending, and nothing half-applied (poisoned keys,
//! ACL denial of every inner command).

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redkit::lock::{Acquire, FairLock, Held, LockGuard, LockOptions, Release, Renew, WaiterLease};
use redkit::Error;
use support::{RedisCluster, RedisServer};

const TOKEN: &str = "owner-token-0123456789";

fn ttl(ms: u64) -> LockOptions<FairLock> {
    LockOptions::new().ttl(Duration::from_millis(ms))
}

fn fair() -> FairLock {
    FairLock::new().with_waiter_lease(WaiterLease::new(Duration::from_millis(300)).unwrap())
}

/// `fair.acquire` with `options` and `max_wait`, bounded at `max_wait` + 5 s: an acquire that
/// waits past its deadline fails the test here instead of hanging it.
async fn bounded_acquire<C: ConnectionLike>(
    fair: &FairLock,
    conn: &mut C,
    resource: &str,
    options: &LockOptions<FairLock>,
    max_wait: Duration,
) -> redkit::Result<Acquire<LockGuard<FairLock>>> {
    let options = options.clone().max_wait(max_wait);
    let bound = (max_wait + Duration::from_secs(5)).as_secs();
    let what = format!("an acquire with a {max_wait:?} max wait");
    support::bounded(bound, &what, fair.acquire(conn, resource, &options)).await
}

async fn acquired<C: ConnectionLike>(
    fair: &FairLock,
    conn: &mut C,
    resource: &str,
    options: &LockOptions<FairLock>,
) -> LockGuard<FairLock> {
    match bounded_acquire(fair, conn, resource, options, Duration::from_secs(30))
        .await
        .unwrap()
    {
        Acquire::Acquired(guard) => guard,
        other => panic!("expected the lock, got {other:?}"),
    }
}

async fn queued(server: &RedisServer, key: &str) -> i64 {
    server.cmd(&["ZCARD", key]).await
}

/// Waits (test-side polling) until the queue holds `n` entries.
async fn until_queued(server: &RedisServer, key: &str, n: i64) {
    let start = Instant::now();
    while queued(server, key).await != n {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "never {n} queued"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// (waiter index, acquired at, released at, fencing token), in the order of holding.
type Log = Arc<Mutex<Vec<(usize, Instant, Instant, u64)>>>;

/// A waiter task: acquires, records (index, acquired at, fence), holds `hold`, releases.
fn waiter(
    server_conn: MultiplexedConnection,
    fair: FairLock,
    resource: &'static str,
    index: usize,
    hold: Duration,
    log: Log,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut own = server_conn;
        let guard = acquired(&fair, &mut own, resource, &ttl(10_000)).await;
        let at = Instant::now();
        let fence = guard.fencing_token().unwrap().get();
        tokio::time::sleep(hold).await;
        let released = Instant::now();
        log.lock().unwrap().push((index, at, released, fence));
        assert_eq!(
            fair.release(&mut own, guard).await.unwrap(),
            Release::Released
        );
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_two_waiters_are_served_in_arrival_order() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    // Waiter lease 3 s: a waiter that polled at its heartbeat (1 s) instead of being woken
    // would show in the hand-over times.
    let fair = FairLock::new().with_waiter_lease(WaiterLease::new(Duration::from_secs(3)).unwrap());
    let key = fair.key("fifo").unwrap();
    let holder = acquired(&fair, &mut conn, "fifo", &ttl(10_000)).await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..32 {
        let own = server.conn().await;
        tasks.push(waiter(
            own,
            fair.clone(),
            "fifo",
            i,
            Duration::from_millis(2),
            Arc::clone(&log),
        ));
        until_queued(&server, &key, i as i64 + 2).await; // arrival order is spawn order
    }
    tokio::time::sleep(Duration::from_millis(400)).await; // waiters renew their places
    let released = Instant::now();
    fair.release(&mut conn, holder).await.unwrap();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("bounded")
            .unwrap();
    }
    let log = log.lock().unwrap().clone();
    let order: Vec<usize> = log.iter().map(|e| e.0).collect();
    assert_eq!(
        order,
        (0..32).collect::<Vec<_>>(),
        "served in arrival order"
    );
    assert!(
        log.windows(2).all(|w| w[0].3 < w[1].3),
        "fencing tokens increase"
    );
    let mut handovers: Vec<Duration> = log.windows(2).map(|w| w[1].1 - w[0].2).collect();
    handovers.push(log[0].1 - released);
    handovers.sort();
    println!(
        "fair lock hand-over (previous holder's release starts -> next holds): median {:?}, max {:?} over {}",
        handovers[handovers.len() / 2],
        handovers[handovers.len() - 1],
        handovers.len()
    );
    // Leases were 10 s, waiter heartbeats 1 s (a third of the 3 s waiter lease): a waiter
    // that missed its wake-up is served at its next heartbeat, up to 1 s later (then the
    // median is about 500 ms). Bounds from the heartbeat, with slack for a loaded machine:
    // the median under a quarter of it, every one under it less 100 ms.
    let heartbeat = Duration::from_secs(3) / 3;
    let median = handovers[handovers.len() / 2];
    assert!(median < heartbeat / 4, "median hand-over {median:?}");
    let max = handovers[handovers.len() - 1];
    assert!(max < heartbeat - Duration::from_millis(100), "{max:?}");
    assert_eq!(queued(&server, &key).await, 0, "queue empty");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_tasks_under_churn_exclude_with_increasing_fences_and_lose_no_wake_up() {
    let server = RedisServer::spawn().await;
    // Waiter lease 30 s: a waiter renews (and re-checks its turn) every 10 s, and holder
    // leases are 20 s, so a lost wake-up would stall the run by seconds.
    let fair =
        FairLock::new().with_waiter_lease(WaiterLease::new(Duration::from_secs(30)).unwrap());
    let (tasks, cycles) = (64, 4);
    let mut handles = Vec::new();
    let started = Instant::now();
    for _ in 0..tasks {
        let mut own = server.conn().await; // BLPOP holds it
        let fair = fair.clone();
        handles.push(tokio::spawn(async move {
            let mut seen = Vec::with_capacity(cycles);
            for _ in 0..cycles {
                let guard = acquired(&fair, &mut own, "churn", &ttl(20_000)).await;
                let at = Instant::now();
                let n = support::bump(&mut own, "n:{churn}").await;
                seen.push((n, guard.fencing_token().unwrap().get(), at));
                assert_eq!(
                    fair.release(&mut own, guard).await.unwrap(),
                    Release::Released
                );
            }
            seen
        }));
    }
    let mut seen = Vec::new();
    for h in handles {
        let mine = tokio::time::timeout(Duration::from_secs(60), h)
            .await
            .expect("bounded")
            .unwrap();
        seen.extend(mine);
    }
    let took = started.elapsed();
    let total = (tasks * cycles) as u64;
    assert_eq!(server.cmd::<u64>(&["GET", "n:{churn}"]).await, total);
    // The longest wait between one holder and the next (in holding order): a lost wake-up
    // leaves the lock free until the next waiter's heartbeat (a third of the 30 s waiter
    // lease, 10 s): bounded by a quarter of that, not by the run's total time on a machine
    // of unknown load.
    let mut holds: Vec<Instant> = seen.iter().map(|&(_, _, at)| at).collect();
    holds.sort();
    let gap = holds.windows(2).map(|w| w[1] - w[0]).max().unwrap();
    support::assert_exclusive_and_fenced(seen.into_iter().map(|(n, f, _)| (n, f)).collect(), total);
    let key = fair.key("churn").unwrap();
    assert_eq!(queued(&server, &key).await, 0, "queue empty");
    println!("{tasks} tasks x {cycles} fair critical sections in {took:?}, longest gap {gap:?}");
    let heartbeat = Duration::from_secs(30) / 3;
    assert!(gap < heartbeat / 4, "a wake-up was lost: a {gap:?} gap");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_waiter_is_skipped_after_its_own_lease_and_a_killed_holder_after_its_lease() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let fair = fair();
    let key = fair.key("k").unwrap();
    let holder = acquired(&fair, &mut conn, "k", &ttl(10_000)).await;
    let log = Arc::new(Mutex::new(Vec::new()));
    let first = waiter(
        server.conn().await,
        fair.clone(),
        "k",
        1,
        Duration::ZERO,
        Arc::clone(&log),
    );
    until_queued(&server, &key, 2).await;
    let killed = waiter(
        server.conn().await,
        fair.clone(),
        "k",
        2,
        Duration::ZERO,
        Arc::clone(&log),
    );
    until_queued(&server, &key, 3).await;
    let third = waiter(
        server.conn().await,
        fair.clone(),
        "k",
        3,
        Duration::ZERO,
        Arc::clone(&log),
    );
    until_queued(&server, &key, 4).await;
    killed.abort(); // its connection is dropped: no more renewals, no release
    let killed_at = Instant::now();
    fair.release(&mut conn, holder).await.unwrap();
    first.await.unwrap();
    third.await.unwrap();
    let log = log.lock().unwrap().clone();
    assert_eq!(log.iter().map(|e| e.0).collect::<Vec<_>>(), vec![1, 3]);
    let skipped_after = log[1].1 - killed_at;
    println!("killed waiter skipped after {skipped_after:?} (waiter lease 300 ms)");
    assert!(
        skipped_after <= Duration::from_millis(300 + 300),
        "{skipped_after:?}"
    );
    // A holder that dies: the next one holds right after its lease, not later. The lease
    // starts after `sent` and before `granted` (a slow reply cannot make it look early).
    let sent = Instant::now();
    let crashed = acquired(&fair, &mut conn, "k", &ttl(400)).await;
    let granted = Instant::now();
    drop(crashed);
    let log = Arc::new(Mutex::new(Vec::new()));
    waiter(
        server.conn().await,
        fair.clone(),
        "k",
        4,
        Duration::ZERO,
        Arc::clone(&log),
    )
    .await
    .unwrap();
    let at = log.lock().unwrap()[0].1;
    let (after_send, after) = (at - sent, at - granted);
    println!("killed holder handed over after {after:?} (lease 400 ms)");
    // Redis counts the lease in whole ms: 10 ms of clock slack.
    assert!(
        after_send >= Duration::from_millis(400 - 10),
        "too early: {after_send:?}"
    );
    // The waiter's BLPOP times out at the lease end, answered up to 1000 / hz = 100 ms late,
    // and 150 ms stated slack for a loaded machine.
    assert!(
        after <= Duration::from_millis(400 + 100 + 150),
        "too late: {after:?}"
    );
}

#[tokio::test]
async fn the_deadline_is_honoured_and_the_waiter_leaves_the_queue() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let fair = fair();
    let key = fair.key("d").unwrap();
    let mut holder = acquired(&fair, &mut conn, "d", &ttl(10_000)).await;
    let mut own = server.conn().await;
    let started = Instant::now();
    let outcome = bounded_acquire(
        &fair,
        &mut own,
        "d",
        &ttl(10_000),
        Duration::from_millis(300),
    )
    .await
    .unwrap();
    let waited = started.elapsed();
    assert!(
        matches!(outcome, Acquire::Busy(Held { ttl: None, .. })),
        "{outcome:?}"
    );
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(1),
        "{waited:?}"
    );
    assert_eq!(queued(&server, &key).await, 1, "the waiter left");
    // try_acquire (and acquire without max_wait): one attempt, the queue left at once.
    for once in [
        fair.try_acquire(&mut own, "d", &ttl(10_000).max_wait(Duration::from_secs(5)))
            .await,
        fair.acquire(&mut own, "d", &ttl(10_000)).await,
    ] {
        assert!(
            matches!(once.unwrap(), Acquire::Busy(Held { ttl: None, .. })),
            "behind the holder"
        );
        assert_eq!(queued(&server, &key).await, 1, "the caller left");
    }
    // Renew and watchdog: the holder keeps it past several leases; once released, Lost.
    assert_eq!(
        fair.renew(&mut conn, &mut holder).await.unwrap(),
        Renew::Renewed
    );
    fair.release(&mut conn, holder).await.unwrap();
    let mut short = acquired(&fair, &mut conn, "d", &ttl(300)).await;
    let lost = fair.watch(&conn, &mut short).unwrap();
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert!(short.is_valid() && !lost.is_lost(), "watchdog renewed");
    let stale = LockOptions::new().ttl(Duration::from_secs(5));
    let mut other = server.conn().await;
    let busy = bounded_acquire(&fair, &mut other, "d", &stale, Duration::from_millis(100))
        .await
        .unwrap();
    assert!(matches!(busy, Acquire::Busy { .. }));
    assert_eq!(
        fair.release(&mut conn, short).await.unwrap(),
        Release::Released
    );
}

#[tokio::test]
async fn bad_input_is_refused_before_anything_is_sent() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let fair = fair();
    let cases: [(&str, LockOptions<FairLock>, Duration, &str); 2] = [
        ("", ttl(1_000), Duration::from_secs(1), "resource"),
        (
            "r",
            LockOptions::new().ttl(Duration::ZERO),
            Duration::from_secs(1),
            "ttl",
        ),
    ];
    for (resource, options, wait, what) in cases {
        match fair
            .acquire(&mut conn, resource, &options.max_wait(wait))
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
    for bad in [
        Duration::ZERO,
        Duration::from_millis(29),
        Duration::from_secs(31 * 24 * 3600),
    ] {
        assert!(matches!(
            WaiterLease::new(bad),
            Err(Error::InvalidInput {
                what: "waiter_lease",
                ..
            })
        ));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_on_a_cluster_with_an_exact_count() {
    let cluster = RedisCluster::spawn().await;
    let (tasks, cycles) = (8, 3);
    let inside = Arc::new(Mutex::new(0));
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let mut own = cluster.conn().await;
        let inside = Arc::clone(&inside);
        handles.push(tokio::spawn(async move {
            let fair = fair();
            let mut fences = Vec::new();
            for _ in 0..cycles {
                let guard = acquired(&fair, &mut own, "cx", &ttl(20_000)).await;
                {
                    let mut n = inside.lock().unwrap();
                    assert_eq!(*n, 0, "two holders");
                    *n += 1;
                }
                fences.push(guard.fencing_token().unwrap().get());
                let n: Option<i64> = redis::cmd("GET")
                    .arg("n:{cx}")
                    .query_async(&mut own)
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(2)).await;
                let _: () = redis::cmd("SET")
                    .arg("n:{cx}")
                    .arg(n.unwrap_or(0) + 1)
                    .query_async(&mut own)
                    .await
                    .unwrap();
                *inside.lock().unwrap() -= 1;
                assert_eq!(
                    fair.release(&mut own, guard).await.unwrap(),
                    Release::Released
                );
            }
            fences
        }));
    }
    let started = Instant::now();
    for h in handles {
        let fences = tokio::time::timeout(Duration::from_secs(60), h)
            .await
            .expect("bounded")
            .unwrap();
        assert!(fences.windows(2).all(|w| w[0] < w[1]));
    }
    let mut conn = cluster.conn().await;
    let n: i64 = redis::cmd("GET")
        .arg("n:{cx}")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(n, tasks * cycles);
    println!(
        "cluster: {tasks} x {cycles} fair critical sections in {:?}",
        started.elapsed()
    );
    assert!(started.elapsed() < Duration::from_secs(20));
}

async fn run(cmd: &mut redis::Cmd, conn: &mut MultiplexedConnection) {
    let _: redis::Value = cmd.query_async(conn).await.unwrap();
}

/// A queue with TOKEN waiting behind another holder, so acquire has pruning and queuing to do.
async fn seed(admin: &mut MultiplexedConnection, fair: &FairLock) {
    run(redis::cmd("FLUSHALL").arg("SYNC"), admin).await;
    let key = fair.key("p").unwrap();
    let t: (String, String) = redis::cmd("TIME").query_async(admin).await.unwrap();
    let now: u64 = t.0.parse::<u64>().unwrap() * 1000;
    run(
        redis::cmd("ZADD")
            .arg(&key)
            .arg(1)
            .arg("dead-token-0123456789")
            .arg(2)
            .arg("holder-token-0123456789"),
        admin,
    )
    .await;
    run(
        redis::cmd("ZADD")
            .arg(format!("{key}:leases"))
            .arg(now - 1000)
            .arg("dead-token-0123456789")
            .arg(now + 50_000)
            .arg("holder-token-0123456789"),
        admin,
    )
    .await;
    run(
        redis::cmd("SET")
            .arg(format!("{key}:fence"))
            .arg(2)
            .arg("PX")
            .arg(100_000),
        admin,
    )
    .await;
    for k in [key.clone(), format!("{key}:leases")] {
        run(redis::cmd("PEXPIRE").arg(k).arg(100_000), admin).await;
    }
}

#[tokio::test]
async fn poisoned_keys_and_acl_denials_change_nothing() {
    let server = RedisServer::spawn().await;
    let mut admin = server.conn().await;
    let fair = fair();
    let key = fair.key("p").unwrap();
    let once = ttl(60_000).token(TOKEN);
    let short = Duration::from_millis(50);
    for (target, bad) in [
        (key.clone(), "<string>"),
        (format!("{key}:leases"), "<string>"),
        (format!("{key}:fence"), "<hash>"),
        (format!("{key}:fence"), "abc"),
        (format!("{key}:leases"), "<inf>"),
    ] {
        seed(&mut admin, &fair).await;
        run(redis::cmd("DEL").arg(&target), &mut admin).await;
        let mut poison = match bad {
            "<hash>" => redis::cmd("HSET"),
            "<inf>" => redis::cmd("ZADD"),
            _ => redis::cmd("SET"),
        };
        match bad {
            "<hash>" => poison.arg(&target).arg("f").arg("1"),
            "<inf>" => poison
                .arg(&target)
                .arg("+inf")
                .arg("holder-token-0123456789"),
            "<string>" => poison.arg(&target).arg("x"),
            _ => poison.arg(&target).arg(bad),
        };
        run(&mut poison, &mut admin).await;
        let before = support::snapshot(&mut admin).await;
        let outcome = bounded_acquire(&fair, &mut admin, "p", &once, short).await;
        let case = format!("{target} = {bad}");
        match (bad, outcome) {
            ("<string>" | "<hash>", Err(Error::WrongType { script })) => {
                assert_eq!(script, "fair_acquire.v1")
            }
            ("abc" | "<inf>", Err(Error::CorruptData { script, .. })) => {
                assert_eq!(script, "fair_acquire.v1")
            }
            (_, other) => panic!("{case}: {other:?}"),
        }
        support::same_dumps(&before, &support::snapshot(&mut admin).await, &case);
    }
    // Each inner command denied: PermissionDenied, nothing written, for acquire (queued
    // behind the holder), renew and release of the holder.
    let acquire_uses = [
        "type",
        "get",
        "time",
        "zrange",
        "zrangebyscore",
        "zscore",
        "zrank",
        "zrem",
        "zadd",
        "set",
        "pttl",
        "pexpire",
    ];
    let renew_uses = [
        "type", "time", "zrange", "zscore", "zadd", "pttl", "pexpire",
    ];
    let release_uses = [
        "type", "time", "zrange", "zscore", "zrem", "lpush", "ltrim", "pexpire",
    ];
    for denied in acquire_uses.iter().chain(["lpush", "ltrim"].iter()) {
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
        seed(&mut admin, &fair).await;
        let before = support::snapshot(&mut admin).await;
        let case = format!("-{denied}, acquire");
        let uses = acquire_uses.contains(denied);
        let outcome = bounded_acquire(&fair, &mut conn, "p", &once, short)
            .await
            .map(|_| ());
        if !uses {
            // Queued, then the give-up's leave (fair_release) is refused: the entry stays
            // until its waiter lease ends.
            check(outcome, true, "fair_release.v1", &case);
        } else {
            check(outcome, uses, "fair_acquire.v1", &case);
        }
        if uses {
            support::same_dumps(&before, &support::snapshot(&mut admin).await, &case);
        }
        run(redis::cmd("FLUSHALL").arg("SYNC"), &mut admin).await;
        let mut guard = acquired(&fair, &mut admin, "p", &once).await;
        let before = support::snapshot(&mut admin).await;
        let case = format!("-{denied}, renew");
        let uses = renew_uses.contains(denied);
        check(
            fair.renew(&mut conn, &mut guard).await.map(|_| ()),
            uses,
            "fair_renew.v1",
            &case,
        );
        if uses {
            support::same_dumps(&before, &support::snapshot(&mut admin).await, &case);
        }
        let before = support::snapshot(&mut admin).await;
        let case = format!("-{denied}, release");
        let uses = release_uses.contains(denied);
        check(
            fair.release(&mut conn, guard).await.map(|_| ()),
            uses,
            "fair_release.v1",
            &case,
        );
        if uses {
            support::same_dumps(&before, &support::snapshot(&mut admin).await, &case);
        }
    }
}

/// A waiter's lease left (ms of server time; negative once it ended), read atomically.
async fn waiter_lease_left(
    conn: &mut MultiplexedConnection,
    leases: &str,
    token: &str,
) -> Option<i64> {
    redis::cmd("EVAL")
        .arg(
            "local t = redis.call('TIME') \
             local s = redis.call('ZSCORE', KEYS[1], ARGV[1]) \
             if not s then return nil end \
             return tonumber(s) - (tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))",
        )
        .arg(1)
        .arg(leases)
        .arg(token)
        .query_async(conn)
        .await
        .unwrap()
}

/// A blocked waiter renews its place about every third of its waiter lease, so behind a
/// long-held lock its lease never ends while it waits (blocking longer than the lease, e.g.
/// a bound of `waiter * 3`, lets the lease end and the waiter be skipped). Sampled from the
/// server every 10 ms for 2.4 s, with a 600 ms waiter lease (renewal every ~200 ms: 400 ms
/// of slack for a late wake-up on a loaded machine).
#[tokio::test]
async fn a_blocked_waiter_keeps_its_place_by_renewing_its_waiter_lease() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let fair =
        FairLock::new().with_waiter_lease(WaiterLease::new(Duration::from_millis(600)).unwrap());
    let key = fair.key("w").unwrap();
    let leases = format!("{key}:leases");
    let holder = acquired(&fair, &mut conn, "w", &ttl(30_000)).await;
    let waiting = {
        let fair = fair.clone();
        let mut own = server.conn().await;
        tokio::spawn(async move {
            let options = ttl(10_000).token(TOKEN).max_wait(Duration::from_secs(20));
            fair.acquire(&mut own, "w", &options).await.unwrap()
        })
    };
    until_queued(&server, &key, 2).await;
    let mut probe = server.conn().await;
    let started = Instant::now();
    let mut lowest = i64::MAX;
    let mut samples = 0;
    while started.elapsed() < Duration::from_millis(2_400) {
        let left = waiter_lease_left(&mut probe, &leases, TOKEN)
            .await
            .expect("the waiter is in the leases");
        lowest = lowest.min(left);
        samples += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(samples > 20, "{samples} samples");
    assert!(
        lowest > 0,
        "the waiter's lease ended while it waited ({lowest} ms left at the lowest)"
    );
    assert!(
        lowest <= 600,
        "a waiter lease, not the holder's: {lowest} ms"
    );
    assert_eq!(queued(&server, &key).await, 2, "the waiter kept its place");
    assert_eq!(
        fair.release(&mut conn, holder).await.unwrap(),
        Release::Released
    );
    match support::bounded(10, "the waiter's turn after the release", waiting)
        .await
        .unwrap()
    {
        Acquire::Acquired(guard) => {
            assert_eq!(
                fair.release(&mut conn, guard).await.unwrap(),
                Release::Released
            )
        }
        other => panic!("the waiter's turn came: {other:?}"),
    }
}
