//! The semaphore against real Redis (single node and Cluster): never more than N holders
//! under 64 contending tasks, a crashed holder's permit back after its lease (not later), the
//! watchdog, idempotent acquire by owner token, bad input refused before sending, and
//! nothing half-applied (poisoned keys, ACL denial of every inner command).

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redkit::lock::{
    Acquire, HeldPermits, LeaseLoss, LockOptions, PermitGuard, Release, Renew, Semaphore,
};
use redkit::script::Replication;
use redkit::Error;
use support::{RedisCluster, RedisServer, ReplicatedPair};

const TOKEN: &str = "owner-token-0123456789";
const OTHER: &str = "other-token-0123456789";

fn sem() -> Semaphore {
    Semaphore::new()
}

fn ttl(ms: u64) -> LockOptions<Semaphore> {
    LockOptions::new().ttl(Duration::from_millis(ms))
}

async fn acquired<C: ConnectionLike>(
    sem: &Semaphore,
    conn: &mut C,
    resource: &str,
    permits: u32,
    options: &LockOptions<Semaphore>,
) -> PermitGuard {
    match sem.acquire(conn, resource, permits, options).await.unwrap() {
        Acquire::Acquired(guard) => guard,
        other => panic!("expected a permit, got {other:?}"),
    }
}

/// 64 tasks take a permit each (waiting as needed), INCR a shared counter inside, hold for a
/// while, DECR, release. The counter never exceeds `permits`, and does reach it.
async fn contend<C>(conn: C, resource: &str, permits: u32)
where
    C: ConnectionLike + Clone + Send + 'static,
{
    let sem = sem();
    let inside = format!("inside:{{{resource}}}");
    let peak = Arc::new(AtomicI64::new(0));
    let options = LockOptions::new()
        .ttl(Duration::from_secs(20))
        .retries(u32::MAX)
        .retry_delay(Duration::from_millis(2))
        .jitter(Duration::from_millis(4))
        .max_wait(Duration::from_secs(60));
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let (sem, mut conn, inside, peak, options) = (
            sem.clone(),
            conn.clone(),
            inside.clone(),
            Arc::clone(&peak),
            options.clone(),
        );
        let resource = resource.to_owned();
        tasks.push(tokio::spawn(async move {
            let permit = acquired(&sem, &mut conn, &resource, permits, &options).await;
            let now: i64 = redis::cmd("INCR")
                .arg(&inside)
                .query_async(&mut conn)
                .await
                .unwrap();
            assert!(
                now >= 1 && now <= i64::from(permits),
                "{now} holders at once"
            );
            peak.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(15)).await;
            let _: i64 = redis::cmd("DECR")
                .arg(&inside)
                .query_async(&mut conn)
                .await
                .unwrap();
            assert_eq!(
                sem.release(&mut conn, permit).await.unwrap(),
                Release::Released
            );
        }));
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(90), task)
            .await
            .expect("bounded")
            .unwrap();
    }
    let mut conn = conn;
    assert_eq!(
        peak.load(Ordering::SeqCst),
        i64::from(permits),
        "never saturated"
    );
    let left: i64 = redis::cmd("GET")
        .arg(&inside)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(left, 0);
    let holders: i64 = redis::cmd("ZCARD")
        .arg(sem.key(resource).unwrap())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(holders, 0, "every permit released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_contenders_never_exceed_the_permits_on_one_node() {
    let server = RedisServer::spawn().await;
    contend(server.conn().await, "jobs-4", 4).await;
    contend(server.conn().await, "jobs-1", 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_contenders_never_exceed_the_permits_on_a_cluster() {
    let cluster = RedisCluster::spawn().await;
    contend(cluster.conn().await, "jobs-3", 3).await;
}

/// When a polled permit came back, as the client can bound it whatever the machine's load:
/// the server refused the last `Full` poll at some instant after `last_full_sent` and granted
/// the `Acquired` one at some instant before `acquired`.
struct CameBack {
    last_full_sent: Option<Instant>,
    acquired: Instant,
}

/// How far the server's clock (the lease's) and the test's `Instant`s may disagree on a span:
/// Redis counts leases in whole milliseconds.
const CLOCK_SLACK: Duration = Duration::from_millis(10);

/// Polls every 5 ms until a permit of `resource` is free.
async fn poll_until_acquired(
    sem: &Semaphore,
    conn: &mut MultiplexedConnection,
    resource: &str,
    permits: u32,
) -> CameBack {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last_full_sent = None;
    loop {
        let sent = Instant::now();
        match sem
            .try_acquire(conn, resource, permits, &ttl(5_000))
            .await
            .unwrap()
        {
            Acquire::Acquired(_) => {
                return CameBack {
                    last_full_sent,
                    acquired: Instant::now(),
                }
            }
            Acquire::Busy(HeldPermits { holders, .. }) => assert_eq!(holders, permits),
            other => panic!("{other:?}"),
        }
        last_full_sent = Some(sent);
        assert!(Instant::now() < deadline, "the permit never came back");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// "Not later than `lease` after `from`": no poll sent later than that was refused (a loaded
/// machine only delays replies, which cannot make this fail).
fn not_refused_after(back: &CameBack, from: Instant, lease: Duration) {
    if let Some(sent) = back.last_full_sent {
        let refused = sent.saturating_duration_since(from);
        assert!(
            refused <= lease + CLOCK_SLACK,
            "too late: a poll sent {refused:?} after was still refused (lease {lease:?})"
        );
    }
}

#[tokio::test]
async fn a_dropped_permit_comes_back_after_its_lease_not_later() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let sem = sem();
    let lease = Duration::from_millis(600);
    let sent = Instant::now();
    let permit = acquired(&sem, &mut conn, "crash", 1, &ttl(600)).await;
    let granted = Instant::now();
    drop(permit); // a crash: nothing sent
    match sem
        .try_acquire(&mut conn, "crash", 1, &ttl(5_000))
        .await
        .unwrap()
    {
        Acquire::Busy(HeldPermits {
            holders,
            ttl: Some(retry_after),
            ..
        }) => {
            assert_eq!(holders, 1);
            assert!(
                retry_after <= lease && retry_after >= lease / 2,
                "{retry_after:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    let back = poll_until_acquired(&sem, &mut conn, "crash", 1).await;
    // Granted by the server after `sent`, so free again no earlier than `sent` + lease, and
    // the reply came after that.
    let after_send = back.acquired - sent;
    assert!(
        after_send >= lease - CLOCK_SLACK,
        "too early: {after_send:?}"
    );
    // Granted before `granted`, so free by `granted` + lease: no later poll is refused.
    not_refused_after(&back, granted, lease);
}

#[tokio::test]
async fn a_watched_permit_outlives_its_ttl_and_a_killed_holder_gives_it_back_within_one_lease() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let sem = sem();
    let lease = Duration::from_millis(300);
    let (tx, rx) = tokio::sync::oneshot::channel();
    let holder = {
        let (sem, mut conn) = (sem.clone(), server.conn().await);
        tokio::spawn(async move {
            let mut permit = acquired(&sem, &mut conn, "watched", 2, &ttl(300)).await;
            let signal = sem.watch(&conn, &mut permit).unwrap();
            tx.send(signal).unwrap();
            std::future::pending::<()>().await;
            drop(permit);
        })
    };
    let signal = rx.await.unwrap();
    let second = acquired(&sem, &mut conn, "watched", 2, &ttl(60_000)).await;
    tokio::time::sleep(lease * 4).await;
    assert!(!signal.is_lost());
    assert!(!sem
        .try_acquire(&mut conn, "watched", 2, &ttl(5_000))
        .await
        .unwrap()
        .is_acquired());
    holder.abort(); // the holder dies mid-lease: its watchdog stops with it
    let killed = Instant::now();
    let _ = holder.await;
    let came_back = poll_until_acquired(&sem, &mut conn, "watched", 2).await;
    // Renewed at the latest just before the kill: free within one lease of it.
    not_refused_after(&came_back, killed, lease);
    let back = came_back.acquired - killed;
    assert!(back >= lease / 3, "too early: {back:?}");
    assert_eq!(
        sem.release(&mut conn, second).await.unwrap(),
        Release::Released
    );
}

#[tokio::test]
async fn renew_release_and_the_watchdog_report_a_lost_lease() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let sem = sem();
    // Expired and taken by someone else: renew is Lost, release is NotOwner.
    let mut old = acquired(&sem, &mut conn, "r", 1, &ttl(100)).await;
    assert_eq!(
        sem.renew(&mut conn, &mut old).await.unwrap(),
        Renew::Renewed
    );
    assert!(old.is_valid());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let new = acquired(&sem, &mut conn, "r", 1, &ttl(10_000)).await;
    assert_eq!(sem.renew(&mut conn, &mut old).await.unwrap(), Renew::Lost);
    assert!(!old.is_valid());
    assert_eq!(
        sem.release(&mut conn, old).await.unwrap(),
        Release::NotOwner
    );
    assert_eq!(
        sem.release(&mut conn, new).await.unwrap(),
        Release::Released
    );
    // A watched permit whose entry disappears: the signal fires within about ttl/3.
    let mut permit = acquired(&sem, &mut conn, "w", 1, &ttl(600)).await;
    let signal = sem.watch(&conn, &mut permit).unwrap();
    let _: () = redis::cmd("DEL")
        .arg(sem.key("w").unwrap())
        .query_async(&mut conn)
        .await
        .unwrap();
    // Checked every ttl/3 = 200 ms: within the 600 ms lease, plus a stated 250 ms slack for
    // a loaded machine.
    let loss = tokio::time::timeout(Duration::from_millis(600 + 250), signal.lost())
        .await
        .expect("loss signalled within the lease");
    assert_eq!(loss, LeaseLoss::NotOwner);
    assert!(!permit.is_valid());
}

#[tokio::test]
async fn the_same_owner_token_finds_its_own_permit() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let sem = sem();
    let mine = ttl(10_000).token(TOKEN);
    let first = acquired(&sem, &mut conn, "idem", 1, &mine).await;
    let again = acquired(&sem, &mut conn, "idem", 1, &mine).await;
    assert_eq!((first.holders(), again.holders()), (1, 1));
    match sem
        .try_acquire(&mut conn, "idem", 1, &ttl(10_000).token(OTHER))
        .await
        .unwrap()
    {
        Acquire::Busy(HeldPermits { holders: 1, .. }) => {}
        other => panic!("{other:?}"),
    }
    let members: Vec<String> = redis::cmd("ZRANGE")
        .arg(sem.key("idem").unwrap())
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(members, vec![TOKEN.to_owned()]);
    assert!(!format!("{first:?}").contains(TOKEN));
    assert_eq!(
        sem.release(&mut conn, again).await.unwrap(),
        Release::Released
    );
    assert_eq!(
        sem.release(&mut conn, first).await.unwrap(),
        Release::NotOwner
    );
}

#[tokio::test]
async fn bad_input_is_refused_before_anything_is_sent() {
    let mut server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    server.stop().await; // anything sent now would fail with an I/O error
    let sem = sem();
    let ok = ttl(1_000);
    let cases: Vec<(&str, String, u32, LockOptions<Semaphore>)> = vec![
        ("permits 0", "r".into(), 0, ok.clone()),
        (
            "too many permits",
            "r".into(),
            Semaphore::MAX_PERMITS + 1,
            ok.clone(),
        ),
        ("empty resource", String::new(), 1, ok.clone()),
        ("long resource", "x".repeat(257), 1, ok.clone()),
        ("zero ttl", "r".into(), 1, ttl(0)),
        (
            "sub-ms ttl",
            "r".into(),
            1,
            LockOptions::new().ttl(Duration::from_micros(1500)),
        ),
        (
            "huge ttl",
            "r".into(),
            1,
            LockOptions::new().ttl(Duration::MAX),
        ),
        ("short token", "r".into(), 1, ok.clone().token("short")),
    ];
    for (case, resource, permits, options) in cases {
        match sem.acquire(&mut conn, &resource, permits, &options).await {
            Err(Error::InvalidInput { .. }) => {}
            other => panic!("{case}: {other:?}"),
        }
    }
    // Control: valid input does reach the (dead) connection.
    match sem.acquire(&mut conn, "r", 1, &ok).await {
        Err(Error::InvalidInput { .. }) | Ok(_) => panic!("valid input was not sent"),
        Err(_) => {}
    }
}

/// Same keys, same values, same TTL presence, no TTL moved forward.
fn assert_unchanged(
    before: &BTreeMap<Vec<u8>, (Vec<u8>, i64)>,
    after: &BTreeMap<Vec<u8>, (Vec<u8>, i64)>,
    case: &str,
) {
    let keys = |m: &BTreeMap<Vec<u8>, (Vec<u8>, i64)>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(before), keys(after), "{case}: key set changed");
    for (key, (dump, pttl)) in before {
        let (dump2, pttl2) = &after[key];
        assert_eq!(dump, dump2, "{case}: value changed");
        assert_eq!(*pttl == -1, *pttl2 == -1, "{case}: TTL presence changed");
        assert!(pttl2 <= pttl, "{case}: TTL refreshed");
    }
}

async fn run(cmd: &mut redis::Cmd, conn: &mut MultiplexedConnection) {
    let _: redis::Value = cmd.query_async(conn).await.unwrap();
}

/// A holders set with an expired entry (so acquire would trim it) and TOKEN holding a permit.
async fn seed(admin: &mut MultiplexedConnection, key: &str) {
    run(redis::cmd("FLUSHALL").arg("SYNC"), admin).await;
    let t: (String, String) = redis::cmd("TIME").query_async(admin).await.unwrap();
    let now: u64 = t.0.parse::<u64>().unwrap() * 1000;
    run(
        redis::cmd("ZADD")
            .arg(key)
            .arg(1)
            .arg("expired-token-0123456789")
            .arg(now + 50_000)
            .arg(TOKEN),
        admin,
    )
    .await;
    run(redis::cmd("PEXPIRE").arg(key).arg(50_000), admin).await;
}

#[tokio::test]
async fn poisoned_keys_change_nothing() {
    let server = RedisServer::spawn().await;
    let mut admin = server.conn().await;
    let mut conn = server.conn().await;
    let sem = sem();
    let key = sem.key("p").unwrap();
    let t: (String, String) = redis::cmd("TIME").query_async(&mut admin).await.unwrap();
    let far = (t.0.parse::<u64>().unwrap() + 40 * 24 * 3600) * 1000;
    for bad in ["<string>", "<hash>", "<list>", "<inf>", "<40 days>"] {
        run(redis::cmd("FLUSHALL").arg("SYNC"), &mut admin).await;
        let mut poison = match bad {
            "<string>" => redis::cmd("SET"),
            "<hash>" => redis::cmd("HSET"),
            "<list>" => redis::cmd("RPUSH"),
            _ => redis::cmd("ZADD"),
        };
        match bad {
            "<string>" => poison.arg(&key).arg("7"),
            "<hash>" => poison.arg(&key).arg("f").arg("1"),
            "<list>" => poison.arg(&key).arg("1"),
            "<inf>" => poison.arg(&key).arg("+inf").arg(OTHER),
            _ => poison.arg(&key).arg(far).arg(OTHER),
        };
        run(&mut poison, &mut admin).await;
        run(redis::cmd("PEXPIRE").arg(&key).arg(100_000), &mut admin).await;
        let before = support::snapshot(&mut admin).await;
        let outcome = sem
            .acquire(&mut conn, "p", 5, &ttl(1_000).token(TOKEN))
            .await;
        match (bad, outcome) {
            ("<inf>" | "<40 days>", Err(Error::CorruptData { script, .. })) => {
                assert_eq!(script, "semaphore_acquire.v1")
            }
            ("<string>" | "<hash>" | "<list>", Err(Error::WrongType { script })) => {
                assert_eq!(script, "semaphore_acquire.v1")
            }
            (_, other) => panic!("{bad}: {other:?}"),
        }
        assert_unchanged(&before, &support::snapshot(&mut admin).await, bad);
    }
    // renew and release on a key of the wrong type: WrongType, nothing changed.
    let mut permit = acquired(&sem, &mut conn, "q", 1, &ttl(10_000)).await;
    let qkey = sem.key("q").unwrap();
    run(redis::cmd("DEL").arg(&qkey), &mut admin).await;
    run(
        redis::cmd("SET").arg(&qkey).arg("x").arg("PX").arg(100_000),
        &mut admin,
    )
    .await;
    let before = support::snapshot(&mut admin).await;
    assert!(matches!(
        sem.renew(&mut conn, &mut permit).await,
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(
        sem.release(&mut conn, permit).await,
        Err(Error::WrongType { .. })
    ));
    assert_unchanged(
        &before,
        &support::snapshot(&mut admin).await,
        "renew/release on a string",
    );
    // A wake-up key of the wrong type: release refuses before removing the permit.
    let permit = acquired(&sem, &mut conn, "w", 1, &ttl(10_000)).await;
    let wake = format!("{}:wake", sem.key("w").unwrap());
    run(redis::cmd("HSET").arg(&wake).arg("f").arg("1"), &mut admin).await;
    let before = support::snapshot(&mut admin).await;
    match sem.release(&mut conn, permit).await {
        Err(Error::WrongType { script }) => assert_eq!(script, "semaphore_release.v2"),
        other => panic!("{other:?}"),
    }
    assert_unchanged(
        &before,
        &support::snapshot(&mut admin).await,
        "release with a hash wake key",
    );
}

/// A connection as a user allowed everything but `denied`.
async fn denied_conn(server: &RedisServer, user: &str, denied: &str) -> MultiplexedConnection {
    let minus = format!("-{denied}");
    let _: () = server
        .cmd(&[
            "ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", &minus,
        ])
        .await;
    let url = format!("redis://{user}:pw@127.0.0.1:{}/", server.port());
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

fn check<T: std::fmt::Debug>(outcome: redkit::Result<T>, uses: bool, script: &str, case: &str) {
    match outcome {
        Err(Error::PermissionDenied { script: s, detail }) if uses => {
            assert_eq!(s, script, "{case}");
            assert!(!detail.contains("{p}"), "{case}: no key in {detail}");
        }
        Ok(_) if !uses => {}
        other => panic!("{case}: {other:?}"),
    }
}

#[tokio::test]
async fn every_inner_command_denied_by_acl_is_permission_denied_and_writes_nothing() {
    let server = RedisServer::spawn().await;
    let mut admin = server.conn().await;
    let sem = sem();
    let key = sem.key("p").unwrap();
    let acquire_uses = [
        "type",
        "time",
        "zrange",
        "zremrangebyscore",
        "zscore",
        "zcard",
        "zadd",
        "pttl",
        "pexpire",
    ];
    let renew_uses = ["type", "time", "zscore", "zadd", "pttl", "pexpire"];
    let release_uses = [
        "type", "time", "zscore", "zrem", "lpush", "ltrim", "pexpire",
    ];
    for denied in acquire_uses.iter().chain(["zrem", "lpush", "ltrim"].iter()) {
        let mut conn = denied_conn(&server, &format!("u-{denied}"), denied).await;
        // acquire: a new owner (trims, adds) and the holder's retry (refreshes).
        for token in [OTHER, TOKEN] {
            seed(&mut admin, &key).await;
            let before = support::snapshot(&mut admin).await;
            let case = format!("-{denied}, acquire as {token}");
            let outcome = sem
                .acquire(&mut conn, "p", 5, &ttl(60_000).token(token))
                .await;
            let uses = acquire_uses.contains(denied);
            check(outcome, uses, "semaphore_acquire.v1", &case);
            if uses {
                assert_unchanged(&before, &support::snapshot(&mut admin).await, &case);
            }
        }
        // renew and release of TOKEN's permit (taken by an allowed connection).
        seed(&mut admin, &key).await;
        let mut permit = acquired(&sem, &mut admin, "p", 5, &ttl(60_000).token(TOKEN)).await;
        let before = support::snapshot(&mut admin).await;
        let case = format!("-{denied}, renew");
        let uses = renew_uses.contains(denied);
        check(
            sem.renew(&mut conn, &mut permit).await,
            uses,
            "semaphore_renew.v1",
            &case,
        );
        if uses {
            assert_unchanged(&before, &support::snapshot(&mut admin).await, &case);
        }
        let before = support::snapshot(&mut admin).await;
        let case = format!("-{denied}, release");
        let uses = release_uses.contains(denied);
        check(
            sem.release(&mut conn, permit).await,
            uses,
            "semaphore_release.v2",
            &case,
        );
        if uses {
            assert_unchanged(&before, &support::snapshot(&mut admin).await, &case);
        }
    }
}

async fn blocked_acquire(
    server: &RedisServer,
    resource: &str,
    permits: u32,
    wait: Duration,
) -> tokio::task::JoinHandle<(redkit::Result<Acquire<PermitGuard, HeldPermits>>, Instant)> {
    let sem = sem();
    let mut own = server.conn().await;
    let resource = resource.to_owned();
    tokio::spawn(async move {
        let outcome = sem
            .acquire_blocking(&mut own, &resource, permits, &ttl(10_000).max_wait(wait))
            .await;
        (outcome, Instant::now())
    })
}

#[tokio::test]
async fn a_blocked_acquire_wakes_on_release_not_at_the_lease_end() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let sem = sem();
    let mut latencies = Vec::new();
    for _ in 0..20 {
        let held = acquired(&sem, &mut conn, "handoff", 1, &ttl(10_000)).await;
        let blpops = server.command_calls("blpop").await;
        let waiter = blocked_acquire(&server, "handoff", 1, Duration::from_secs(5)).await;
        // It blocks: found the permit held and sent its BLPOP.
        server.wait_command_calls("blpop", blpops + 1).await;
        let released = Instant::now();
        assert_eq!(
            sem.release(&mut conn, held).await.unwrap(),
            Release::Released
        );
        let (outcome, woke) = waiter.await.unwrap();
        let Acquire::Acquired(next) = outcome.unwrap() else {
            panic!("not acquired")
        };
        latencies.push(woke - released);
        assert_eq!(
            sem.release(&mut conn, next).await.unwrap(),
            Release::Released
        );
    }
    latencies.sort();
    let (median, max) = (
        latencies[latencies.len() / 2],
        latencies[latencies.len() - 1],
    );
    println!("release -> blocked waiter holds: median {median:?}, max {max:?}");
    // The lease was 10 s: a wake-up in well under a second came from the notification.
    assert!(max < Duration::from_secs(1), "{max:?}");
}

#[tokio::test]
async fn a_blocked_acquire_takes_a_crashed_holders_permit_at_its_lease_end_and_honours_its_deadline(
) {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let sem = sem();
    let lease = Duration::from_millis(400);
    let crashed = acquired(&sem, &mut conn, "c", 1, &ttl(400)).await;
    let granted = Instant::now();
    drop(crashed);
    let (outcome, woke) = blocked_acquire(&server, "c", 1, Duration::from_secs(5))
        .await
        .await
        .unwrap();
    assert!(outcome.unwrap().is_acquired());
    // The waiter's BLPOP ends when the lease does, and Redis answers a BLPOP timeout up to
    // 1000 / hz = 100 ms late; 150 ms more is the stated slack for a loaded machine.
    let after = woke - granted;
    assert!(
        after <= lease + Duration::from_millis(100 + 150),
        "too late: {after:?}"
    );
    assert!(
        after >= lease - Duration::from_millis(50),
        "too early: {after:?}"
    );
    // Held for 10 s: a 300 ms wait gives up with Full after its deadline, not much later.
    let started = Instant::now();
    let (outcome, gave_up) = blocked_acquire(&server, "c", 1, Duration::from_millis(300))
        .await
        .await
        .unwrap();
    assert!(matches!(
        outcome.unwrap(),
        Acquire::Busy(HeldPermits { holders: 1, .. })
    ));
    let waited = gave_up - started;
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(1),
        "{waited:?}"
    );
    // No time to wait (a zero max_wait, or none set): one attempt, answered Busy at once.
    for options in [ttl(1_000).max_wait(Duration::ZERO), ttl(1_000)] {
        let asked = Instant::now();
        let once = sem.acquire_blocking(&mut conn, "c", 1, &options).await;
        assert!(
            matches!(once, Ok(Acquire::Busy(HeldPermits { holders: 1, .. }))),
            "{once:?}"
        );
        assert!(asked.elapsed() < Duration::from_millis(250), "did not wait");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_blocked_acquirers_under_churn_all_get_a_permit_and_never_exceed_it() {
    let server = RedisServer::spawn().await;
    let permits = 3;
    let peak = Arc::new(AtomicI64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let sem = sem();
        let mut own = server.conn().await;
        let peak = Arc::clone(&peak);
        tasks.push(tokio::spawn(async move {
            let outcome = sem
                .acquire_blocking(
                    &mut own,
                    "churn",
                    permits,
                    &ttl(20_000).max_wait(Duration::from_secs(60)),
                )
                .await
                .unwrap();
            let Acquire::Acquired(permit) = outcome else {
                panic!("{outcome:?}")
            };
            let now: i64 = redis::cmd("INCR")
                .arg("inside")
                .query_async(&mut own)
                .await
                .unwrap();
            assert!(now <= i64::from(permits), "{now} holders at once");
            peak.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(5)).await;
            let _: i64 = redis::cmd("DECR")
                .arg("inside")
                .query_async(&mut own)
                .await
                .unwrap();
            assert_eq!(
                sem.release(&mut own, permit).await.unwrap(),
                Release::Released
            );
        }));
    }
    let started = Instant::now();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(90), task)
            .await
            .expect("bounded")
            .unwrap();
    }
    // Leases were 20 s: finishing well before one lease means no waiter missed its wake-up
    // (a lost wake-up would only be rescued at a lease end).
    let took = started.elapsed();
    println!("64 blocked acquirers, 3 permits: {took:?}");
    assert!(took < Duration::from_secs(20), "{took:?}");
    assert_eq!(peak.load(Ordering::SeqCst), i64::from(permits));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_acquire_on_a_cluster_wakes_on_release() {
    let cluster = RedisCluster::spawn().await;
    let mut conn = cluster.conn().await;
    let sem = sem();
    let held = acquired(&sem, &mut conn, "c-handoff", 1, &ttl(10_000)).await;
    let mut waiters = Vec::new();
    for _ in 0..4 {
        let (sem, mut own) = (sem.clone(), cluster.conn().await);
        waiters.push(tokio::spawn(async move {
            let outcome = sem
                .acquire_blocking(
                    &mut own,
                    "c-handoff",
                    1,
                    &ttl(10_000).max_wait(Duration::from_secs(8)),
                )
                .await
                .unwrap();
            let Acquire::Acquired(permit) = outcome else {
                panic!("{outcome:?}")
            };
            let at = Instant::now();
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert_eq!(
                sem.release(&mut own, permit).await.unwrap(),
                Release::Released
            );
            at
        }));
    }
    // All four block: each found the permit held and sent a BLPOP to the resource's owner.
    let owner = cluster.primary_for(&sem.key("c-handoff").unwrap()).await;
    owner.wait_command_calls("blpop", 4).await;
    let released = Instant::now();
    assert_eq!(
        sem.release(&mut conn, held).await.unwrap(),
        Release::Released
    );
    let mut last = released;
    for waiter in waiters {
        last = last.max(waiter.await.unwrap());
    }
    // Four hand-overs, each on a release: far below one 10 s lease.
    let took = last - released;
    assert!(took < Duration::from_secs(2), "{took:?}");
}

#[tokio::test]
async fn require_replicas_gives_back_a_permit_the_replica_did_not_confirm() {
    let pair = ReplicatedPair::spawn().await;
    let mut conn = pair.primary.patient_conn().await;
    let sem = sem();
    let one = Replication::new(1, Duration::from_millis(1_000)).unwrap();
    let options = ttl(10_000).require_replicas(one);
    // In sync: acquired, and the replica has the holder.
    let permit = acquired(&sem, &mut conn, "acct", 2, &options).await;
    let on_replica: i64 = pair.replica.cmd(&["ZCARD", permit.key()]).await;
    assert_eq!(on_replica, 1);
    sem.release(&mut conn, permit).await.unwrap();
    // Replica link down: not confirmed in time -> given back, NotReplicated.
    pair.cut_link().await;
    let short = Replication::new(1, Duration::from_millis(150)).unwrap();
    match sem
        .acquire(&mut conn, "acct", 2, &ttl(10_000).require_replicas(short))
        .await
        .unwrap()
    {
        Acquire::NotReplicated {
            replicas: 0,
            requested: 1,
        } => {}
        other => panic!("{other:?}"),
    }
    let key = sem.key("acct").unwrap();
    assert_eq!(
        pair.primary.cmd::<i64>(&["ZCARD", &key]).await,
        0,
        "given back"
    );
}

// One runtime thread: a task records its place right after its grant, before the next waiter
// (which needs two more round trips after that grant) can; with worker threads, a descheduled
// worker let a later grant be recorded first (seen once, on a loaded machine).
#[tokio::test]
async fn fair_acquirers_get_permits_in_arrival_order_and_never_exceed_them() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let sem = sem();
    let (permits, waiters) = (2, 24);
    let gate = format!("{}:gate:{{fifo}}", Semaphore::DEFAULT_PREFIX);
    // Every permit held: the waiters queue at the gate, the first one waits for a permit.
    let mut held = Vec::new();
    for _ in 0..permits {
        held.push(acquired(&sem, &mut conn, "fifo", permits, &ttl(10_000)).await);
    }
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let inside = Arc::new(AtomicI64::new(0));
    let mut tasks = Vec::new();
    for i in 0..waiters {
        let (sem, order, inside) = (sem.clone(), Arc::clone(&order), Arc::clone(&inside));
        let mut own = server.conn().await; // BLPOP holds it
        tasks.push(tokio::spawn(async move {
            let outcome = sem
                .acquire_fair(
                    &mut own,
                    "fifo",
                    permits,
                    &ttl(10_000).max_wait(Duration::from_secs(30)),
                )
                .await
                .unwrap();
            let Acquire::Acquired(permit) = outcome else {
                panic!("{i}: {outcome:?}")
            };
            order.lock().unwrap().push(i);
            let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
            assert!(now <= i64::from(permits), "{now} holders");
            tokio::time::sleep(Duration::from_millis(5)).await;
            inside.fetch_sub(1, Ordering::SeqCst);
            sem.release(&mut own, permit).await.unwrap();
        }));
        // Arrival order is spawn order: wait until this one has joined the gate.
        let deadline = Instant::now() + Duration::from_secs(10);
        while server.cmd::<i64>(&["ZCARD", &gate]).await < i as i64 + 1 {
            assert!(Instant::now() < deadline, "waiter {i} did not queue");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    for permit in held {
        sem.release(&mut conn, permit).await.unwrap();
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("bounded")
            .unwrap();
    }
    let order = order.lock().unwrap().clone();
    assert_eq!(order, (0..waiters).collect::<Vec<_>>(), "arrival order");
    assert_eq!(server.cmd::<i64>(&["EXISTS", &gate]).await, 0, "gate empty");
    // Bad input is refused before anything is sent (not even the gate).
    let before = support::snapshot(&mut conn).await;
    for (permits, options, what) in [
        (0, ttl(1_000).max_wait(Duration::from_secs(1)), "permits"),
        (1, ttl(0).max_wait(Duration::from_secs(1)), "ttl"),
    ] {
        match sem.acquire_fair(&mut conn, "fifo", permits, &options).await {
            Err(Error::InvalidInput { what: w, .. }) => assert_eq!(w, what),
            other => panic!("{what}: {other:?}"),
        }
    }
    assert_unchanged(&before, &support::snapshot(&mut conn).await, "bad input");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_acquirer_killed_at_the_head_of_the_gate_is_skipped_after_its_place_lease() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let sem = sem();
    let gate = format!("{}:gate:{{kill}}", Semaphore::DEFAULT_PREFIX);
    let held = acquired(&sem, &mut conn, "kill", 1, &ttl(20_000)).await;
    let fair = |sem: Semaphore, mut own: MultiplexedConnection| async move {
        let outcome = sem
            .acquire_fair(
                &mut own,
                "kill",
                1,
                &ttl(20_000).max_wait(Duration::from_secs(30)),
            )
            .await
            .unwrap();
        (outcome, Instant::now())
    };
    // A heads the gate (waiting for the permit), B queues behind it; A's process dies.
    let a = tokio::spawn(fair(sem.clone(), server.conn().await));
    while server.cmd::<i64>(&["ZCARD", &gate]).await < 1 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let b = tokio::spawn(fair(sem.clone(), server.conn().await));
    while server.cmd::<i64>(&["ZCARD", &gate]).await < 2 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    a.abort();
    let killed = Instant::now();
    sem.release(&mut conn, held).await.unwrap();
    let (outcome, at) = tokio::time::timeout(Duration::from_secs(10), b)
        .await
        .expect("bounded")
        .unwrap();
    let Acquire::Acquired(permit) = outcome else {
        panic!("{outcome:?}")
    };
    // A's place lease is 2 s (renewed at most every 2/3 s): B goes ahead after it, not later.
    let after = at - killed;
    assert!(after < Duration::from_millis(3_500), "{after:?}");
    println!("killed gate head skipped after {after:?}");
    sem.release(&mut conn, permit).await.unwrap();
}
