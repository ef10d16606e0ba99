//! The single-node lock against real Redis: mutual exclusion, stale holders, the watchdog,
//! fenced writes, Cluster, bad input.

#[path = "fixtures/mod.rs"]
mod fixtures;
mod support;

use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use redkit::lock::{
    Acquire, FencedWrite, FencingToken, Held, LeaseLoss, Lock, LockGuard, LockOptions, Release,
    Renew, WithLock,
};
use redkit::{Call, Error, Registry, ScriptManager};
use support::{RedisCluster, RedisServer};

fn lock() -> Lock {
    Lock::new()
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

/// Waits (up to 10 s) until `key` no longer exists.
async fn wait_gone(server: &RedisServer, key: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.cmd::<i64>(&["EXISTS", key]).await == 1 {
        assert!(Instant::now() < deadline, "{key} never expired");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mutual_exclusion_over_64_tasks_and_strictly_increasing_fences() {
    let server = RedisServer::spawn().await;
    let lock = lock();
    let mut conns = Vec::new();
    for _ in 0..4 {
        conns.push(server.conn().await);
    }
    let options = LockOptions::new()
        .fencing(true)
        .ttl(Duration::from_secs(20))
        .retries(1_000_000)
        .retry_delay(Duration::from_millis(1))
        .jitter(Duration::from_millis(4))
        .max_wait(Duration::from_secs(120));
    let mut tasks = Vec::new();
    for i in 0..64 {
        let lock = lock.clone();
        let mut conn = conns[i % conns.len()].clone();
        let options = options.clone();
        tasks.push(tokio::spawn(async move {
            let mut seen = Vec::with_capacity(25);
            for _ in 0..25 {
                let guard = acquired(&lock, &mut conn, "counter", &options).await;
                let value = support::bump(&mut conn, "plain-counter").await;
                seen.push((value, guard.fencing_token().unwrap()));
                assert_eq!(
                    lock.release(&mut conn, guard).await.unwrap(),
                    Release::Released
                );
            }
            seen
        }));
    }
    let mut seen = Vec::new();
    for task in tasks {
        seen.extend(task.await.unwrap());
    }
    let total: u64 = server.cmd::<u64>(&["GET", "plain-counter"]).await;
    assert_eq!(total, 1_600, "lost updates: the lock did not exclude");
    // Ordered by the counter value each holder read, the fencing tokens strictly increase.
    seen.sort_by_key(|&(value, _)| value);
    let values: Vec<u64> = seen.iter().map(|&(v, _)| v).collect();
    assert_eq!(values, (0..1_600).collect::<Vec<u64>>());
    for pair in seen.windows(2) {
        assert!(pair[0].1 < pair[1].1, "fences not increasing: {pair:?}");
    }
    // The fence key holds the last token issued, with an expiry of 2 × lease + 10 s.
    let fence_key = lock.fence_key("counter").unwrap();
    let stored: u64 = server.cmd(&["GET", &fence_key]).await;
    assert_eq!(
        seen.last().map(|s| s.1),
        Some(FencingToken::new(stored).unwrap())
    );
    let fence_ttl: i64 = server.cmd(&["PTTL", &fence_key]).await;
    assert!(fence_ttl > 40_000 && fence_ttl <= 50_000, "{fence_ttl}");
}

#[tokio::test]
async fn stale_holder_cannot_release_or_renew_the_new_owners_lock() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let lock = lock();
    let key = lock.key("report").unwrap();
    let short = LockOptions::new()
        .fencing(true)
        .ttl(Duration::from_millis(500));
    let mut stale = acquired(&lock, &mut conn, "report", &short).await;
    assert!(matches!(
        lock.try_acquire(&mut conn, "report", &short).await.unwrap(),
        Acquire::Busy(Held { ttl: Some(_), .. })
    ));
    wait_gone(&server, &key).await;
    assert!(!stale.is_valid(), "local validity ran out before the key");

    let long = LockOptions::new()
        .fencing(true)
        .ttl(Duration::from_secs(30));
    let owner = acquired(&lock, &mut conn, "report", &long).await;
    assert!(owner.fencing_token().unwrap() > stale.fencing_token().unwrap());

    assert_eq!(
        lock.renew(&mut conn, &mut stale).await.unwrap(),
        Renew::Lost
    );
    assert_eq!(
        lock.release(&mut conn, stale).await.unwrap(),
        Release::NotOwner
    );
    assert_eq!(server.cmd::<i64>(&["EXISTS", &key]).await, 1);
    let pttl: i64 = server.cmd(&["PTTL", &key]).await;
    assert!(
        pttl > 20_000,
        "the stale renew must not touch the TTL: {pttl}"
    );
    assert_eq!(
        lock.release(&mut conn, owner).await.unwrap(),
        Release::Released
    );
    assert_eq!(server.cmd::<i64>(&["EXISTS", &key]).await, 0);
}

#[tokio::test]
async fn renew_moves_the_ttl_and_the_local_validity_forward() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let lock = lock();
    let options = LockOptions::new().fencing(true).ttl(Duration::from_secs(2));
    let mut guard = acquired(&lock, &mut conn, "r", &options).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = guard.validity();
    assert_eq!(
        lock.renew(&mut conn, &mut guard).await.unwrap(),
        Renew::Renewed
    );
    assert!(guard.validity() > before);
    assert!(guard.validity() <= Duration::from_secs(2) - options.drift_allowance());
    let pttl: i64 = server.cmd(&["PTTL", guard.key()]).await;
    assert!(pttl > 1_500, "{pttl}");
    lock.release(&mut conn, guard).await.unwrap();
}

#[tokio::test]
async fn watchdog_keeps_a_300ms_lease_through_2s_of_work_and_stops_after_release() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let lock = lock();
    let options = LockOptions::new()
        .fencing(true)
        .ttl(Duration::from_millis(300));
    let mut guard = acquired(&lock, &mut conn, "job", &options).await;
    let key = guard.key().to_owned();
    let signal = lock.watch(&conn, &mut guard).unwrap();

    let work_until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < work_until {
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !signal.is_lost(),
            "lease lost while renewed: {:?}",
            signal.loss()
        );
        assert_eq!(server.cmd::<i64>(&["EXISTS", &key]).await, 1);
    }
    assert!(guard.is_valid());
    assert_eq!(
        lock.release(&mut conn, guard).await.unwrap(),
        Release::Released
    );
    assert_eq!(server.cmd::<i64>(&["EXISTS", &key]).await, 0);
    // No renewal is sent any more: the task stopped with the guard.
    let calls = server.evalsha_calls().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        server.evalsha_calls().await,
        calls,
        "watchdog still renewing"
    );
    assert_eq!(server.cmd::<i64>(&["EXISTS", &key]).await, 0);
    assert!(!signal.is_lost(), "a release is not a loss");
}

#[tokio::test]
async fn watchdog_signals_an_external_delete_within_one_renewal_period() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let lock = lock();
    // Period ttl/3 = 1 s; the lease itself would last 3 s, so a signal well before that
    // can only come from a renewal answering Lost.
    let options = LockOptions::new().fencing(true).ttl(Duration::from_secs(3));
    let mut guard = acquired(&lock, &mut conn, "job", &options).await;
    let signal = lock.watch(&conn, &mut guard).unwrap();
    let token = signal.cancellation_token();
    assert!(!signal.is_lost() && signal.loss().is_none());
    let _: i64 = server.cmd(&["DEL", guard.key()]).await;
    let deleted = Instant::now();
    let loss = tokio::time::timeout(Duration::from_millis(2_500), signal.lost())
        .await
        .expect("loss signalled within one renewal period (+ margin)");
    assert_eq!(loss, LeaseLoss::NotOwner);
    assert!(signal.is_lost());
    assert_eq!(signal.loss(), Some(LeaseLoss::NotOwner));
    assert!(
        deleted.elapsed() < Duration::from_millis(2_500),
        "{:?}",
        deleted.elapsed()
    );
    assert!(token.is_cancelled());
    assert!(!guard.is_valid());
    assert_eq!(
        lock.release(&mut conn, guard).await.unwrap(),
        Release::NotOwner
    );
}

/// When `count` (polled every 2 ms, at most 10 s) has risen by `n`, from `from`.
async fn when_risen<F, Fut>(count: F, from: u64, n: u64) -> Instant
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = u64>,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    while count().await < from + n {
        assert!(Instant::now() < deadline, "not {n} more after 10 s");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Instant::now()
}

/// The watchdog's pace, read from the server: it renews every third of the lease (3 s: a
/// renewal each second), and after a failed renewal (the ACL now refuses the script) tries
/// again after a third of that (333 ms). Timed between the first and third of each, so the
/// start of the watch does not count; the bounds allow 0.6 s of lateness (a loaded machine)
/// on two intervals, and a timer never fires early.
#[tokio::test]
async fn a_watchdog_renews_every_third_of_the_lease_and_retries_a_failure_sooner() {
    let server = RedisServer::spawn().await;
    let _: () = server
        .cmd(&["ACL", "SETUSER", "w", "on", ">pw", "~*", "&*", "+@all"])
        .await;
    let url = format!("redis://w:pw@127.0.0.1:{}/", server.port());
    let mut conn = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let lock = lock();
    let options = LockOptions::new().fencing(true).ttl(Duration::from_secs(3));
    let mut guard = acquired(&lock, &mut conn, "paced", &options).await;
    let renewals = || server.command_calls("evalsha");
    let before = renewals().await;
    let signal = lock.watch(&conn, &mut guard).unwrap();
    let first = when_risen(renewals, before, 1).await;
    let third = when_risen(renewals, before, 3).await;
    let between = third - first;
    println!("two renewal periods: {between:?}");
    assert!(
        between >= Duration::from_millis(1_950) && between < Duration::from_millis(2_600),
        "{between:?}"
    );

    let _: () = server
        .cmd(&["ACL", "SETUSER", "w", "-evalsha", "-eval"])
        .await;
    let refusals = || server.error_count("NOPERM");
    let before = refusals().await;
    let first = when_risen(refusals, before, 1).await;
    let third = when_risen(refusals, before, 3).await;
    let between = third - first;
    println!("two retries after failed renewals: {between:?}");
    assert!(
        between >= Duration::from_millis(600) && between < Duration::from_millis(1_250),
        "{between:?}"
    );
    assert!(!signal.is_lost(), "the lease has not run out yet");
}

#[tokio::test]
async fn watchdog_signals_expiry_when_renewals_keep_failing() {
    let mut server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let lock = lock();
    let options = LockOptions::new()
        .fencing(true)
        .ttl(Duration::from_millis(600));
    let mut guard = acquired(&lock, &mut conn, "job", &options).await;
    let signal = lock.watch(&conn, &mut guard).unwrap();
    server.pause().await;
    let loss = tokio::time::timeout(Duration::from_secs(10), signal.lost())
        .await
        .expect("loss signalled once the validity ran out");
    server.resume().await;
    assert_eq!(loss, LeaseLoss::Expired);
    assert!(!guard.is_valid());
}

#[tokio::test]
async fn dropping_a_guard_stops_its_watchdog_and_the_lease_ends_by_ttl() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let lock = lock();
    let options = LockOptions::new()
        .fencing(true)
        .ttl(Duration::from_millis(300));
    let mut guard = acquired(&lock, &mut conn, "job", &options).await;
    let key = guard.key().to_owned();
    lock.watch(&conn, &mut guard).unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(server.cmd::<i64>(&["EXISTS", &key]).await, 1, "renewed");
    drop(guard);
    wait_gone(&server, &key).await;
    let calls = server.evalsha_calls().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(server.evalsha_calls().await, calls);
}

#[tokio::test]
async fn with_lock_reports_completion_and_loss() {
    let server = RedisServer::spawn().await;
    let conn = server.conn().await;
    let lock = lock();
    let options = LockOptions::new()
        .fencing(true)
        .ttl(Duration::from_millis(300));
    let key = lock.key("batch").unwrap();

    let done = lock
        .with_lock(&conn, "batch", &options, |lease| async move {
            tokio::time::sleep(Duration::from_millis(700)).await;
            lease.fencing_token().unwrap()
        })
        .await
        .unwrap();
    match done {
        WithLock::Completed {
            value,
            fencing_token,
        } => assert_eq!(Some(value), fencing_token),
        other => panic!("{other:?}"),
    }
    assert_eq!(server.cmd::<i64>(&["EXISTS", &key]).await, 0, "released");

    let mut del = server.conn().await;
    let lost = lock
        .with_lock(&conn, "batch", &options, |lease| async move {
            let _: i64 = redis::cmd("DEL")
                .arg(lock_key_of("batch"))
                .query_async(&mut del)
                .await
                .unwrap();
            tokio::select! {
                loss = lease.signal().lost() => Some(loss),
                _ = tokio::time::sleep(Duration::from_secs(10)) => None,
            }
        })
        .await
        .unwrap();
    match lost {
        WithLock::LeaseLost { value, loss } => {
            assert_eq!(value, Some(LeaseLoss::NotOwner));
            assert_eq!(loss, LeaseLoss::NotOwner);
        }
        other => panic!("{other:?}"),
    }

    // Busy: someone else holds it.
    let mut c = server.conn().await;
    let holder = acquired(&lock, &mut c, "batch", &LockOptions::new().fencing(true)).await;
    let busy = lock
        .with_lock(&conn, "batch", &options, |_| async { unreachable!() })
        .await
        .unwrap();
    assert!(matches!(busy, WithLock::Busy));
    lock.release(&mut c, holder).await.unwrap();
}

fn lock_key_of(resource: &str) -> String {
    lock().key(resource).unwrap()
}

#[tokio::test]
async fn fenced_write_with_an_older_token_is_rejected() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let lock = lock();
    let short = LockOptions::new()
        .fencing(true)
        .ttl(Duration::from_millis(100));
    let stale = acquired(&lock, &mut conn, "doc", &short).await;
    let data = "doc:{42}:content";
    assert_eq!(
        lock.fenced_set(&mut conn, data, stale.fencing_token().unwrap(), "v1")
            .await
            .unwrap(),
        FencedWrite::Written
    );
    // The holder pauses past its lease; a new owner acquires and writes.
    wait_gone(&server, stale.key()).await;
    let owner = acquired(&lock, &mut conn, "doc", &LockOptions::new().fencing(true)).await;
    assert!(owner.fencing_token().unwrap() > stale.fencing_token().unwrap());
    assert_eq!(
        lock.fenced_set(&mut conn, data, owner.fencing_token().unwrap(), "v2")
            .await
            .unwrap(),
        FencedWrite::Written
    );
    // The paused holder wakes up and writes: refused, the newer value stays.
    assert_eq!(
        lock.fenced_set(&mut conn, data, stale.fencing_token().unwrap(), "stale")
            .await
            .unwrap(),
        FencedWrite::Stale {
            newer: owner.fencing_token().unwrap()
        }
    );
    assert_eq!(
        lock.fenced_get(&mut conn, data).await.unwrap(),
        Some((b"v2".to_vec(), owner.fencing_token().unwrap()))
    );
    // The same token may write again.
    assert!(lock
        .fenced_set(&mut conn, data, owner.fencing_token().unwrap(), "v3")
        .await
        .unwrap()
        .is_written());
    assert_eq!(
        lock.fenced_get(&mut conn, data).await.unwrap(),
        Some((b"v3".to_vec(), owner.fencing_token().unwrap()))
    );
    // Token numbers are compared as integers, not strings ("10" > "9").
    let other = "doc:{43}:content";
    lock.fenced_set(&mut conn, other, FencingToken::new(10).unwrap(), "ten")
        .await
        .unwrap();
    assert_eq!(
        lock.fenced_set(&mut conn, other, FencingToken::new(9).unwrap(), "nine")
            .await
            .unwrap(),
        FencedWrite::Stale {
            newer: FencingToken::new(10).unwrap()
        }
    );
    assert_eq!(
        lock.fenced_get(&mut conn, "doc:{none}").await.unwrap(),
        None
    );
    lock.release(&mut conn, owner).await.unwrap();

    // The negative control: the same pause without fencing (a plain write after holding the
    // lock) lets the paused holder overwrite the new owner's value. The lock alone cannot
    // stop it; the fenced write above did.
    let plain = "doc:{44}:content";
    let stale = acquired(&lock, &mut conn, "doc", &short).await;
    let _: () = server.cmd(&["SET", plain, "v1"]).await;
    wait_gone(&server, stale.key()).await;
    let owner = acquired(&lock, &mut conn, "doc", &LockOptions::new()).await;
    let _: () = server.cmd(&["SET", plain, "v2"]).await;
    let _: () = server.cmd(&["SET", plain, "stale"]).await; // the paused holder wakes up
    let value: String = server.cmd(&["GET", plain]).await;
    assert_eq!(value, "stale", "unfenced, the stale holder's write wins");
    lock.release(&mut conn, owner).await.unwrap();
}

#[tokio::test]
async fn works_on_a_cluster_with_lock_and_fence_in_one_slot() {
    let cluster = RedisCluster::spawn().await;
    let mut conn = cluster.conn().await;
    let lock = lock();
    for resource in ["alpha", "beta", "gamma{x}"] {
        let key = lock.key(resource).unwrap();
        let fence = lock.fence_key(resource).unwrap();
        assert_eq!(
            redis::cluster_routing::Slot::for_key(key.as_bytes()),
            redis::cluster_routing::Slot::for_key(fence.as_bytes())
        );
        let options = LockOptions::new()
            .fencing(true)
            .ttl(Duration::from_millis(600));
        let mut first = acquired(&lock, &mut conn, resource, &options).await;
        let node = cluster.primary_for(&key).await;
        assert_eq!(
            node.port(),
            cluster.primary_for(&fence).await.port(),
            "same node"
        );
        assert_eq!(node.cmd::<i64>(&["EXISTS", &key, &fence]).await, 2);
        let first_token = first.fencing_token().unwrap();
        let signal = lock.watch(&conn, &mut first).unwrap();
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        assert!(!signal.is_lost());
        assert_eq!(
            lock.renew(&mut conn, &mut first).await.unwrap(),
            Renew::Renewed
        );
        // One attempt, answered at once (bounded: a retry loop would wait on the watchdog).
        let attempt = lock.try_acquire(&mut conn, resource, &options);
        let busy = support::bounded(10, "one attempt on a held lock", attempt).await;
        assert!(matches!(busy.unwrap(), Acquire::Busy { .. }));
        assert_eq!(
            lock.release(&mut conn, first).await.unwrap(),
            Release::Released
        );
        let second = acquired(&lock, &mut conn, resource, &options).await;
        assert!(second.fencing_token().unwrap() > first_token);
        let data = format!("{key}:data");
        assert!(lock
            .fenced_set(&mut conn, &data, second.fencing_token().unwrap(), "x")
            .await
            .unwrap()
            .is_written());
        assert!(!lock
            .fenced_set(&mut conn, &data, first_token, "old")
            .await
            .unwrap()
            .is_written());
        lock.release(&mut conn, second).await.unwrap();
    }
}

#[tokio::test]
async fn bad_input_is_a_typed_error_and_writes_nothing() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let lock = lock();
    let ok = LockOptions::new().fencing(true);
    let cases: Vec<(&str, LockOptions<Lock>, &str)> = vec![
        (
            "zero ttl",
            LockOptions::new().fencing(true).ttl(Duration::ZERO),
            "ttl",
        ),
        (
            "sub-ms ttl",
            LockOptions::new()
                .fencing(true)
                .ttl(Duration::from_micros(2_500)),
            "ttl",
        ),
        (
            "ttl within drift",
            LockOptions::new()
                .fencing(true)
                .ttl(Duration::from_millis(10))
                .drift(Duration::from_millis(10)),
            "ttl",
        ),
        ("empty key", ok.clone(), "resource"),
        ("long key", ok.clone(), "resource"),
    ];
    let long = "x".repeat(redkit::keys::MAX_PART_LEN + 1);
    for (case, options, what) in cases {
        let resource = match case {
            "empty key" => "",
            "long key" => long.as_str(),
            _ => "res",
        };
        for result in [
            lock.acquire(&mut conn, resource, &options).await,
            lock.try_acquire(&mut conn, resource, &options).await,
        ] {
            match result {
                Err(Error::InvalidInput { what: got, .. }) => assert_eq!(got, what, "{case}"),
                other => panic!("{case}: {other:?}"),
            }
        }
    }
    assert!(matches!(
        lock.fenced_set(&mut conn, "", FencingToken::new(1).unwrap(), "v")
            .await,
        Err(Error::InvalidInput { what: "key", .. })
    ));
    // A token is never 0: there is no value for "none issued" to pass.
    assert_eq!(FencingToken::new(0), None);
    assert!(matches!(
        redkit::keys::Prefix::new("bad{prefix}"),
        Err(Error::InvalidInput { what: "prefix", .. })
    ));
    // The scripts check again (a caller going around the Rust API).
    let manager = ScriptManager::new();
    for version in [2, 5] {
        let acquire = Registry::global()
            .require("lock_acquire", version)
            .unwrap_or_else(|_| fixtures::script("lock_acquire", version));
        for (token, ttl, fence_ttl) in [
            ("0123456789abcdef0123", "0", "1000"),
            ("short", "100", "1000"),
            ("0123456789abcdef", "1.5", "1000"),
            ("0123456789abcdef", "100", "99"),
            ("0123456789abcdef", "100", "01000"),
            ("0123456789abcdef", "100", "1e4"),
        ] {
            let mut call = Call::new(acquire);
            call.key("l:{r}")
                .key("l:{r}:fence")
                .arg(token)
                .arg(ttl)
                .arg(fence_ttl);
            assert!(
                matches!(
                    manager.invoke::<redis::Value, _>(&mut conn, &call).await,
                    Err(Error::InvalidInput { .. })
                ),
                "v{version} {token} {ttl} {fence_ttl}"
            );
        }
    }
    let fenced = Registry::global().require("fenced_set", 2).unwrap();
    for fence in [
        "0",
        "-1",
        "01",
        "1.5",
        "abc",
        "99999999999999999999",
        "9223372036854775808",
        "+5",
        " 5",
    ] {
        let mut call = Call::new(fenced);
        call.key("f").arg(fence).arg("v");
        assert!(
            matches!(
                manager.invoke::<redis::Value, _>(&mut conn, &call).await,
                Err(Error::InvalidInput { .. })
            ),
            "{fence}"
        );
    }
    assert_eq!(server.cmd::<i64>(&["DBSIZE"]).await, 0, "nothing written");
}

#[tokio::test]
async fn corrupt_data_is_refused_without_writing() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let lock = lock();
    let fence = lock.fence_key("res").unwrap();
    let _: () = server.cmd(&["SET", &fence, "not-a-number"]).await;
    assert!(matches!(
        lock.acquire(&mut conn, "res", &LockOptions::new().fencing(true))
            .await,
        Err(Error::CorruptData { .. })
    ));
    assert_eq!(
        server
            .cmd::<i64>(&["EXISTS", &lock.key("res").unwrap()])
            .await,
        0
    );
    let _: () = server
        .cmd(&["HSET", "data", "value", "v", "fence", "x1"])
        .await;
    assert!(matches!(
        lock.fenced_set(&mut conn, "data", FencingToken::new(3).unwrap(), "w")
            .await,
        Err(Error::CorruptData { .. })
    ));
    assert!(matches!(
        lock.fenced_get(&mut conn, "data").await,
        Err(Error::CorruptData { .. })
    ));
    let _: () = server.cmd(&["SET", "plain", "v"]).await;
    assert!(matches!(
        lock.fenced_set(&mut conn, "plain", FencingToken::new(3).unwrap(), "w")
            .await,
        Err(Error::WrongType { .. })
    ));
    // A stored token ahead of the clock (here 2^53 - 2) is continued: + 1.
    let _: () = server.cmd(&["SET", &fence, "9007199254740990"]).await;
    let guard = acquired(&lock, &mut conn, "res", &LockOptions::new().fencing(true)).await;
    assert_eq!(
        guard.fencing_token().unwrap(),
        FencingToken::new(9_007_199_254_740_991).unwrap()
    );
    lock.release(&mut conn, guard).await.unwrap();
    // The next one would not fit a Lua number exactly: refused, nothing written.
    assert!(matches!(
        lock.acquire(&mut conn, "res", &LockOptions::new().fencing(true))
            .await,
        Err(Error::CorruptData { .. })
    ));
    // A stored token behind the clock gives way to the time floor.
    let _: () = server.cmd(&["SET", &fence, "41"]).await;
    let guard = acquired(&lock, &mut conn, "res", &LockOptions::new().fencing(true)).await;
    assert!(guard.fencing_token().unwrap() > FencingToken::new(1_700_000_000_000_000).unwrap());
}

/// The futures users spawn are `Send` (checked at compile time).
#[allow(dead_code)]
fn futures_are_send(lock: Lock, conn: redis::aio::MultiplexedConnection, guard: LockGuard<Lock>) {
    fn send<T: Send>(_: T) {}
    let options = LockOptions::new().fencing(true);
    let mut c = conn.clone();
    send(lock.acquire(&mut c, "r", &options));
    send(lock.with_lock(&conn, "r", &options, |_| async {}));
    let mut c2 = conn.clone();
    send(lock.release(&mut c2, guard));
    let redlock = redkit::lock::Redlock::new(vec![conn]).unwrap();
    send(redlock.acquire("r", &LockOptions::new()));
}

#[tokio::test]
async fn a_watchdog_started_late_still_renews_before_the_validity_runs_out() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let lock = lock();
    let options = LockOptions::new()
        .fencing(true)
        .ttl(Duration::from_millis(900));
    let mut guard = acquired(&lock, &mut conn, "late", &options).await;
    // Two thirds of the lease gone: less is left than one renewal period (300 ms).
    tokio::time::sleep(Duration::from_millis(600)).await;
    let signal = lock.watch(&conn, &mut guard).unwrap();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(!signal.is_lost(), "{:?}", signal.loss());
    assert!(guard.is_valid());
    assert_eq!(
        lock.release(&mut conn, guard).await.unwrap(),
        Release::Released
    );
}

/// A guard's `Debug` names the lock (key, fencing token, ttl, validity, whether a watchdog
/// runs) and never prints the owner token, the secret that releases the lock.
#[tokio::test]
async fn a_guard_prints_what_it_holds_and_never_its_owner_token() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let lock = lock();
    let options = LockOptions::new().fencing(true).token("owner-5ec2e7-token");
    let mut guard = acquired(&lock, &mut conn, "printed", &options).await;
    let printed = format!("{guard:?}");
    assert!(printed.starts_with("LockGuard {"), "{printed}");
    assert!(printed.contains(&format!("{:?}", guard.key())), "{printed}");
    assert!(printed.contains("fencing_token: Some("), "{printed}");
    assert!(printed.contains("watchdog: false"), "{printed}");
    assert!(
        !printed.contains("5ec2e7"),
        "the owner token leaked: {printed}"
    );
    let _signal = lock.watch(&conn, &mut guard).unwrap();
    assert!(format!("{guard:?}").contains("watchdog: true"));
    lock.release(&mut conn, guard).await.unwrap();
}

/// Every call of a lock's lease (renewal, release) runs through the lock's own manager:
/// here one on the Functions backend, so the server sees `FCALL` and never a script.
#[tokio::test]
async fn a_leases_calls_run_through_the_locks_own_manager() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let manager = ScriptManager::new().with_backend(redkit::script::Backend::Functions);
    let lock = Lock::new().with_manager(manager);
    let options = LockOptions::new().ttl(Duration::from_secs(5));
    let mut guard = acquired(&lock, &mut conn, "managed", &options).await;
    let renewed = lock.renew(&mut conn, &mut guard).await.unwrap();
    assert_eq!(renewed, Renew::Renewed);
    let released = lock.release(&mut conn, guard).await.unwrap();
    assert_eq!(released, Release::Released);
    let scripts = server.command_calls("evalsha").await + server.command_calls("eval").await;
    assert_eq!(scripts, 0, "every call went through the lock's manager");
    assert!(server.command_calls("fcall").await >= 2);
}
