//! Leased quota (`FixedWindow::leased`, `Leased`) against a real Redis: 4 instances (their own
//! managers and connections) hammering one key never admit more than the limit in a window and
//! admit at least `limit - 4 x max_units` when demand exceeds it; a lease is never used after
//! its window; cold keys take no lease; a restart mid-window drops what was held of the lost
//! counter.

mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redkit::rate_limit::{FixedWindow, Leased, LimitKey, QuotaLease, Rate, RateLimiter};
use redkit::ScriptManager;
use support::RedisServer;

const MAX_UNITS: u32 = 8;

fn leased(limit: u32, window_ms: u64) -> Leased<FixedWindow> {
    FixedWindow::new(
        "lease",
        Rate::new(support::nz(limit), Duration::from_millis(window_ms)).unwrap(),
    )
    .unwrap()
    .with_manager(ScriptManager::new())
    .leased(QuotaLease::new(MAX_UNITS).unwrap().instances(4).unwrap())
}

/// Bursts of 32 tasks over 4 instances, each burst inside one window: it starts once the last
/// window's counter is gone (so every lease held of it has ended too) and stops 150 ms into
/// a 400 ms window. Per burst: admitted <= limit, and >= limit - 4 x max_units.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_instances_never_admit_more_than_the_limit_in_a_window() {
    let server = RedisServer::spawn().await;
    let limit = 60;
    let instances: Vec<Leased<FixedWindow>> = (0..4).map(|_| leased(limit, 400)).collect();
    let key = LimitKey::text("hot").unwrap();
    let redis_key = instances[0].redis_key(&key);
    let mut conns = Vec::new();
    for _ in 0..4 {
        conns.push(server.conn().await);
    }
    let mut admitted_per_window = Vec::new();
    for _ in 0..8 {
        // The last window (and every lease of it) has ended.
        let gone = Instant::now();
        while server.cmd::<i64>(&["EXISTS", &redis_key]).await == 1 {
            assert!(
                gone.elapsed() < Duration::from_secs(5),
                "the counter never expired"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let admitted = Arc::new(AtomicU64::new(0));
        let attempted = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        for t in 0..32 {
            let limiter = instances[t % 4].clone();
            let mut conn = conns[t % 4].clone();
            let (key, admitted, stop) = (key.clone(), admitted.clone(), stop.clone());
            let attempted = attempted.clone();
            tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    attempted.fetch_add(1, Ordering::Relaxed);
                    if limiter.check(&mut conn, &key).await.unwrap().is_allowed() {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
        stop.store(true, Ordering::Relaxed);
        for task in tasks {
            task.await.unwrap();
        }
        let counted: u64 = server
            .cmd::<Option<u64>>(&["GET", &redis_key])
            .await
            .unwrap_or(0);
        let admitted = admitted.load(Ordering::Relaxed);
        // The negative control: without the limit, the burst would have let through every
        // request it made, more than the limit, so the bound below is exercised.
        let attempted = attempted.load(Ordering::Relaxed);
        assert!(
            attempted > u64::from(limit),
            "only {attempted} requests: the burst never pressed on the limit"
        );
        assert!(counted <= u64::from(limit), "Redis counted {counted}");
        assert!(
            admitted <= counted,
            "admitted {admitted}, but Redis counted only {counted}"
        );
        assert!(
            admitted >= u64::from(limit - 4 * MAX_UNITS),
            "demand exceeded the limit, yet only {admitted} admitted"
        );
        admitted_per_window.push(admitted);
    }
    println!("admitted per window (limit {limit}, 4 x {MAX_UNITS} at most unused): {admitted_per_window:?}");
}

/// A lease is never used after its window: an instance holding units sleeps past the
/// window's end, and its next check goes to Redis and counts in the new window.
#[tokio::test]
async fn a_lease_is_never_used_after_its_window() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    ScriptManager::new().preload(&mut conn).await.unwrap();
    let limiter = leased(100, 200);
    let key = LimitKey::text("edge").unwrap();
    let redis_key = limiter.redis_key(&key);
    let calls = server.evalsha_calls().await;
    // The first check takes what it needs (1), the second asks for 2: one unit held.
    for _ in 0..2 {
        assert!(limiter.check(&mut conn, &key).await.unwrap().is_allowed());
    }
    assert_eq!(server.evalsha_calls().await - calls, 2);
    assert_eq!(
        server.cmd::<u64>(&["GET", &redis_key]).await,
        3,
        "1 + 2 leased"
    );
    // The held unit answers the third check in process.
    assert!(limiter.check(&mut conn, &key).await.unwrap().is_allowed());
    assert_eq!(server.evalsha_calls().await - calls, 2, "no round trip");
    // One more unit held? No: 3 used of 3 leased. QuotaLease again (asks for 4), then sleep across
    // the window's edge holding 3 units.
    assert!(limiter.check(&mut conn, &key).await.unwrap().is_allowed());
    assert_eq!(server.cmd::<u64>(&["GET", &redis_key]).await, 7);
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(
        server.cmd::<i64>(&["EXISTS", &redis_key]).await,
        0,
        "the window ended"
    );
    let before = server.evalsha_calls().await;
    assert!(limiter.check(&mut conn, &key).await.unwrap().is_allowed());
    assert_eq!(
        server.evalsha_calls().await - before,
        1,
        "the held units were not used"
    );
    assert_eq!(
        server.cmd::<u64>(&["GET", &redis_key]).await,
        1,
        "a new window, one unit"
    );
}

/// Keys checked once per window (10,000 clients, each below its limit) lease nothing: every
/// counter holds exactly the one check made.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cold_keys_take_no_lease() {
    let server = RedisServer::spawn().await;
    let limiter = leased(100, 60_000);
    let mut tasks = Vec::new();
    for part in 0..16 {
        let limiter = limiter.clone();
        let mut conn = server.conn().await;
        tasks.push(tokio::spawn(async move {
            for i in (part..10_000).step_by(16) {
                let key = LimitKey::ip(std::net::Ipv4Addr::from(0x0a00_0000u32 + i).into());
                assert!(limiter.check(&mut conn, &key).await.unwrap().is_allowed());
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let mut conn = server.conn().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("redkit:rl:lease:*")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(keys.len(), 10_000);
    let counts: Vec<u64> = redis::cmd("MGET")
        .arg(&keys)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        counts.iter().all(|c| *c == 1),
        "a cold key leased more than it used"
    );
}

/// A restart mid-window loses the counter: the units held of it are used up to what was held
/// (the same over-admission a restart causes without leasing: the count is gone), then the
/// next lease sees a lower counter and drops what is left; Redis never counts past the limit.
#[tokio::test]
async fn a_restart_mid_window_drops_what_was_held_of_the_lost_counter() {
    let mut server = RedisServer::spawn().await;
    let limiter = leased(20, 60_000);
    let key = LimitKey::text("restart").unwrap();
    let redis_key = limiter.redis_key(&key);
    let mut conn = server.patient_conn().await;
    let mut admitted = 0;
    for _ in 0..6 {
        admitted += u32::from(limiter.check(&mut conn, &key).await.unwrap().is_allowed());
    }
    let counted_before: u32 = server.cmd(&["GET", &redis_key]).await;
    assert_eq!(admitted, 6);
    server.restart().await;
    let mut conn = server.patient_conn().await;
    let mut after = 0;
    for _ in 0..40 {
        after += u32::from(limiter.check(&mut conn, &key).await.unwrap().is_allowed());
    }
    let counted: u32 = server.cmd(&["GET", &redis_key]).await;
    assert_eq!(counted, 20, "the new counter is full, never past the limit");
    let held_before = counted_before - admitted;
    assert!(
        after <= 20 + held_before,
        "{after} admitted after the restart; at most the new limit plus the {held_before} held"
    );
    assert!(after >= 20 - MAX_UNITS, "{after}");
}

/// Bad stored data is a typed error and nothing is written: a counter key of another type
/// (`WrongType`), a counter that is not a count (`CorruptData`).
#[tokio::test]
async fn bad_stored_data_is_a_typed_error_and_writes_nothing() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let limiter = leased(10, 60_000);
    let key = LimitKey::text("poisoned").unwrap();
    let redis_key = limiter.redis_key(&key);
    let _: () = server.cmd(&["HSET", &redis_key, "f", "v"]).await;
    let err = limiter.check(&mut conn, &key).await.unwrap_err();
    assert!(matches!(err, redkit::Error::WrongType { .. }), "{err:?}");
    assert_eq!(server.cmd::<String>(&["TYPE", &redis_key]).await, "hash");
    let _: () = server.cmd(&["DEL", &redis_key]).await;
    let _: () = server.cmd(&["SET", &redis_key, "abc"]).await;
    let err = limiter.check(&mut conn, &key).await.unwrap_err();
    assert!(matches!(err, redkit::Error::CorruptData { .. }), "{err:?}");
    assert_eq!(server.cmd::<String>(&["GET", &redis_key]).await, "abc");
    assert_eq!(
        server.cmd::<i64>(&["PTTL", &redis_key]).await,
        -1,
        "no TTL set either"
    );
}

/// One instance, 64 tasks checking one hot key far below its limit: checks that find no units
/// held wait for the lease call already on its way instead of each sending their own, and a
/// lease call handled out of order keeps its units. At most one lease call per 20 checks.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hot_key_takes_one_lease_call_per_many_checks() {
    let server = RedisServer::spawn().await;
    let limiter = FixedWindow::new(
        "hot",
        Rate::new(redkit::nonzero!(1_000_000), Duration::from_secs(10)).unwrap(),
    )
    .unwrap()
    .with_manager(ScriptManager::new())
    .leased(QuotaLease::new(64).unwrap());
    let conn = server.conn().await;
    let key = LimitKey::text("hot").unwrap();
    let before = server.evalsha_calls().await;
    let checks_per_task = 100;
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let (limiter, mut conn, key) = (limiter.clone(), conn.clone(), key.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..checks_per_task {
                assert!(limiter.check(&mut conn, &key).await.unwrap().is_allowed());
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let checks = 64 * checks_per_task;
    let calls = server.evalsha_calls().await - before;
    let counted: u64 = server.cmd::<u64>(&["GET", &limiter.redis_key(&key)]).await;
    assert!(
        counted >= checks && counted <= checks + 2 * 64 * 64,
        "Redis counted {counted} for {checks} checks"
    );
    assert!(
        calls * 20 <= checks,
        "{calls} lease calls for {checks} checks (at most one per 20)"
    );
}

/// One lease call of a key in flight at a time: a check that finds one on its way waits for
/// it instead of sending its own, and is answered from what it brings. Deterministic: the
/// checks are futures polled by hand on a frozen server, and what reached the server is read
/// from its unread bytes, with a `PING` on the same connection as the marker (the multiplexer
/// writes in order, so a call the second check sent would come before it).
#[tokio::test(flavor = "current_thread")]
async fn a_check_waits_for_the_lease_call_in_flight_instead_of_sending_its_own() {
    let mut server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    ScriptManager::new().preload(&mut conn).await.unwrap();
    let limiter = leased(1_000, 60_000);
    let key = LimitKey::text("one").unwrap();
    let check = || {
        let (limiter, mut conn, key) = (limiter.clone(), conn.clone(), key.clone());
        Box::pin(async move { limiter.check(&mut conn, &key).await })
    };
    server.pause().await;
    let unread = server.unread_bytes();
    let mut first = check();
    assert!(futures_util::poll!(&mut first).is_pending());
    server.wait_unread_above(unread).await;
    let sent = server.unread_bytes();
    let mut second = check();
    for _ in 0..3 {
        assert!(futures_util::poll!(&mut second).is_pending());
        tokio::task::yield_now().await;
    }
    let (arrived, ping) = server.bytes_through_a_ping(sent, &conn).await;
    assert_eq!(
        arrived,
        support::PING_BYTES,
        "only the PING reached the server: the second check sent no lease call of its own"
    );
    server.resume().await;
    assert_eq!(ping.await.unwrap().unwrap(), "PONG");
    let (first, second) = tokio::join!(first, second);
    assert!(first.unwrap().is_allowed() && second.unwrap().is_allowed());
}

/// A reset deletes the counter and forgets the units held here of it: the next check goes to
/// Redis again (a new counter), never to units leased from the deleted one.
#[tokio::test]
async fn a_reset_forgets_the_units_held_of_the_deleted_counter() {
    let server = RedisServer::spawn().await;
    let limiter = leased(1_000, 60_000);
    let key = LimitKey::text("reset").unwrap();
    let redis_key = limiter.redis_key(&key);
    let mut conn = server.conn().await;
    // Check until at least half a lease is held here (more than a refill waits for).
    let mut checks = 0;
    loop {
        assert!(limiter.check(&mut conn, &key).await.unwrap().is_allowed());
        checks += 1;
        let counted: u32 = server.cmd(&["GET", &redis_key]).await;
        if counted - checks >= MAX_UNITS / 2 {
            break;
        }
        assert!(checks < 100, "no lease ever held {} units", MAX_UNITS / 2);
    }
    assert!(
        limiter.reset(&mut conn, &key).await.unwrap(),
        "a counter was deleted"
    );
    assert_eq!(server.cmd::<i64>(&["EXISTS", &redis_key]).await, 0);
    assert!(
        !limiter.reset(&mut conn, &key).await.unwrap(),
        "nothing left to delete"
    );
    assert!(limiter.check(&mut conn, &key).await.unwrap().is_allowed());
    assert_eq!(
        server.cmd::<i64>(&["EXISTS", &redis_key]).await,
        1,
        "the check after the reset went to Redis"
    );
    assert!(
        format!("{limiter:?}").starts_with("Leased {"),
        "{limiter:?}"
    );
}

/// One instance checking one key until refused admits exactly the limit: every unit a lease
/// call counted in Redis is used once here, also those of the calls that refill a lease (the
/// check that sends a refill is answered by its own call, not also from the units held).
#[tokio::test]
async fn one_instance_admits_exactly_the_limit_of_a_window() {
    let server = RedisServer::spawn().await;
    let limit = 100;
    let limiter = leased(limit, 60_000);
    let key = LimitKey::text("exact").unwrap();
    let mut conn = server.conn().await;
    let mut admitted = 0;
    while limiter.check(&mut conn, &key).await.unwrap().is_allowed() {
        admitted += 1;
        assert!(admitted <= limit, "admitted past the limit of {limit}");
    }
    assert_eq!(admitted, limit, "every unit counted in Redis was admitted");
    let counted: u32 = server.cmd(&["GET", &limiter.redis_key(&key)]).await;
    assert_eq!(counted, limit);
    assert!(!limiter.check(&mut conn, &key).await.unwrap().is_allowed());
}

/// A check costing the whole limit is leased (the lease script counts it); one costing more
/// is checked as without leasing (the window's script). Told apart by the scripts Redis has
/// cached: each server starts with none, and each limiter's manager sends only what it calls.
#[tokio::test]
async fn a_cost_at_the_limit_is_leased_and_one_above_it_is_not() {
    let sha = |name: &str| {
        let script = redkit::Registry::global().scripts().iter();
        script
            .filter(|s| s.name() == name)
            .max_by_key(|s| s.version())
            .map(|s| s.sha1().to_owned())
            .unwrap_or_else(|| panic!("no script named {name}"))
    };
    let (lease_script, window_script) = (sha("fixed_window_lease"), sha("fixed_window"));
    let limit = 10;
    let key = LimitKey::text("whole").unwrap();
    for (cost, allowed, counted_by) in [
        (limit, true, &lease_script),
        (limit + 1, false, &window_script),
    ] {
        let server = RedisServer::spawn().await;
        let mut conn = server.conn().await;
        let decision = leased(limit, 60_000)
            .check_n(&mut conn, &key, support::nz(cost))
            .await
            .unwrap();
        assert_eq!(decision.is_allowed(), allowed, "cost {cost}: {decision:?}");
        let cached: Vec<bool> = server
            .cmd(&["SCRIPT", "EXISTS", &lease_script, &window_script])
            .await;
        let expected = vec![counted_by == &lease_script, counted_by == &window_script];
        assert_eq!(cached, expected, "cost {cost}: which script counted it");
    }
}

/// A check waits for at most two lease calls of other checks, then sends its own: near the
/// limit each call grants little and others may take it first, so waiting must stop.
/// Deterministic as above: a window with 1 unit left (each call for 2 units is refused, and
/// that refusal does not answer the waiting check of 1), three calls each led by a new check
/// of 2 on a frozen server, the waiting check polled after each leader.
#[tokio::test(flavor = "current_thread")]
async fn a_check_waits_for_at_most_two_lease_calls_of_others_then_sends_its_own() {
    let mut server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    ScriptManager::new().preload(&mut conn).await.unwrap();
    let limit = 10;
    let limiter = leased(limit, 60_000);
    let key = LimitKey::text("full").unwrap();
    let filled = limiter
        .limiter()
        .check_n(&mut conn, &key, support::nz(limit - 1));
    assert!(filled.await.unwrap().is_allowed(), "1 unit is left");
    let check = |cost| {
        let (limiter, mut conn, key) = (limiter.clone(), conn.clone(), key.clone());
        Box::pin(async move { limiter.check_n(&mut conn, &key, support::nz(cost)).await })
    };
    let mut waiting = check(1);
    for call in 1..=3 {
        server.pause().await;
        let unread = server.unread_bytes();
        let mut leader = check(2);
        assert!(futures_util::poll!(&mut leader).is_pending());
        let sent = server.wait_unread_above(unread).await;
        for _ in 0..3 {
            assert!(futures_util::poll!(&mut waiting).is_pending());
            tokio::task::yield_now().await;
        }
        let (arrived, ping) = server.bytes_through_a_ping(sent, &conn).await;
        if call < 3 {
            assert_eq!(
                arrived,
                support::PING_BYTES,
                "lease call {call} of another check: the waiting check sent nothing"
            );
        } else {
            assert!(
                arrived > support::PING_BYTES,
                "after two waits the check sent its own lease call ({arrived} bytes arrived)"
            );
        }
        server.resume().await;
        assert_eq!(ping.await.unwrap().unwrap(), "PONG");
        assert!(!leader.await.unwrap().is_allowed(), "2 units do not fit");
    }
    assert!(
        waiting.await.unwrap().is_allowed(),
        "the unit left is this check's"
    );
}
