//! Leased quota for the sliding window (`SlidingWindow::leased`) against a real Redis: 4
//! instances (their own managers and connections) hammering one key never admit more than
//! the limit in a window, and in the next window no more than the weighted estimate leaves;
//! a lease is never used after the window it was counted in; bad stored data is a typed error
//! that writes nothing; a reset forgets the units held; a restart drops what was held of the
//! lost state; one instance admits exactly the limit.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redkit::rate_limit::{Leased, LimitKey, QuotaLease, Rate, RateLimiter, SlidingWindow};
use redkit::ScriptManager;
use support::demand::demand;
use support::RedisServer;

const MAX_UNITS: u32 = 8;

fn leased(limit: u32, window_ms: u64) -> Leased<SlidingWindow> {
    SlidingWindow::new(
        "lease",
        Rate::new(support::nz(limit), Duration::from_millis(window_ms)).unwrap(),
    )
    .unwrap()
    .with_manager(ScriptManager::new())
    .leased(QuotaLease::new(MAX_UNITS).unwrap().instances(4).unwrap())
}

/// The state `"<current>:<previous>"` of `redis_key`.
async fn state(server: &RedisServer, redis_key: &str) -> (u64, u64) {
    let raw: String = server.cmd(&["GET", redis_key]).await;
    let (cur, prev) = raw.split_once(':').expect("two counters");
    (cur.parse().unwrap(), prev.parse().unwrap())
}

/// 32 tasks over 4 instances checking one key for `burst`: (admitted, attempted).
async fn burst(
    instances: &[Leased<SlidingWindow>],
    conns: &[redis::aio::MultiplexedConnection],
    key: &LimitKey,
    burst: Duration,
) -> (u64, u64) {
    let admitted = Arc::new(Mutex::new(Vec::new()));
    let attempted = demand(instances, conns, key, (burst, Duration::ZERO), &admitted).await;
    let admitted = admitted.lock().unwrap().len();
    (u64::try_from(admitted).unwrap(), attempted)
}

/// Two bursts over 4 instances, 5 times: the first inside a key's first window (nothing before
/// it, so the estimate is the current counter): admitted <= limit and >= limit - 4 x
/// max_units. The second inside the next window once the first has ended: what it admits plus
/// the first window's admitted units weighted by the time left in the second window (read from
/// Redis after the burst, so never more than at any admission) is at most the limit, as for
/// one in-process sliding window over the units actually used.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_instances_never_admit_past_the_weighted_estimate() {
    let server = RedisServer::spawn().await;
    let (limit, window_ms) = (60, 600);
    let instances: Vec<_> = (0..4).map(|_| leased(limit, window_ms)).collect();
    let mut conns = Vec::new();
    for _ in 0..4 {
        conns.push(server.conn().await);
    }
    for round in 0..5 {
        // A fresh key per round: nothing counted before its first burst.
        let key = LimitKey::text(&format!("hot-{round}")).unwrap();
        let redis_key = instances[0].redis_key(&key);
        let (first, attempted) = burst(&instances, &conns, &key, Duration::from_millis(150)).await;
        // The negative control: without the limit every request would have passed.
        assert!(
            attempted > u64::from(limit),
            "only {attempted} requests: the burst never pressed on the limit"
        );
        let (counted, _) = state(&server, &redis_key).await;
        assert!(counted <= u64::from(limit), "Redis counted {counted}");
        assert!(
            first <= counted,
            "admitted {first}, Redis counted {counted}"
        );
        assert!(
            first >= u64::from(limit - 4 * MAX_UNITS),
            "demand exceeded the limit, yet only {first} admitted"
        );
        // Into the next window: the key's TTL is the current window's end plus one window.
        let waited = Instant::now();
        while server.cmd::<i64>(&["PTTL", &redis_key]).await
            > i64::try_from(window_ms).unwrap() - 20
        {
            assert!(
                waited.elapsed() < Duration::from_secs(5),
                "the window never ended"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let (second, attempted) = burst(&instances, &conns, &key, Duration::from_millis(100)).await;
        let pttl: i64 = server.cmd(&["PTTL", &redis_key]).await;
        let left = u64::try_from(pttl).unwrap() - window_ms;
        let weighted = first * left / window_ms;
        assert!(
            second + weighted <= u64::from(limit),
            "second window: {second} admitted beside {first} weighted to {weighted} ({left} ms left)"
        );
        assert!(
            attempted > u64::from(limit) - weighted,
            "only {attempted} requests in the second window"
        );
    }
}

/// A lease is never used after the window it was counted in: an instance holding units sleeps
/// past that window's end, and its next check goes to Redis and counts in the new window.
#[tokio::test]
async fn a_lease_is_never_used_after_its_window() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    ScriptManager::new().preload(&mut conn).await.unwrap();
    let window_ms = 300;
    let limiter = leased(100, window_ms);
    let key = LimitKey::text("edge").unwrap();
    let redis_key = limiter.redis_key(&key);
    let calls = server.evalsha_calls().await;
    // The first check takes what it needs (1), the second asks for 2: one unit held.
    for _ in 0..2 {
        assert!(limiter.check(&mut conn, &key).await.unwrap().is_allowed());
    }
    assert_eq!(server.evalsha_calls().await - calls, 2);
    assert_eq!(state(&server, &redis_key).await, (3, 0), "1 + 2 leased");
    // The held unit answers the third check in process.
    assert!(limiter.check(&mut conn, &key).await.unwrap().is_allowed());
    assert_eq!(server.evalsha_calls().await - calls, 2, "no round trip");
    // The fourth leases 4 (3 held), then the window ends with them held.
    assert!(limiter.check(&mut conn, &key).await.unwrap().is_allowed());
    assert_eq!(state(&server, &redis_key).await, (7, 0));
    let waited = Instant::now();
    while server.cmd::<i64>(&["PTTL", &redis_key]).await > i64::try_from(window_ms).unwrap() - 20 {
        assert!(
            waited.elapsed() < Duration::from_secs(5),
            "the window never ended"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let before = server.evalsha_calls().await;
    assert!(limiter.check(&mut conn, &key).await.unwrap().is_allowed());
    assert_eq!(
        server.evalsha_calls().await - before,
        1,
        "the held units were not used"
    );
    assert_eq!(
        state(&server, &redis_key).await,
        (1, 7),
        "a new window: one unit, the last window's 7 behind it"
    );
}

/// A restart mid-window loses the state: the units held of it are used up to what was held
/// (the same over-admission a restart causes without leasing: the count is gone), then the
/// next lease call sees a lower counter and drops what is left; Redis never counts past the
/// limit.
#[tokio::test]
async fn a_restart_mid_window_drops_what_was_held_of_the_lost_state() {
    let mut server = RedisServer::spawn().await;
    let limiter = leased(20, 60_000);
    let key = LimitKey::text("restart").unwrap();
    let redis_key = limiter.redis_key(&key);
    let mut conn = server.patient_conn().await;
    // Leases of 1, 2 and 2 (a quarter of what is left, with 4 instances): one unit held.
    let mut admitted = 0;
    for _ in 0..4 {
        admitted += u64::from(limiter.check(&mut conn, &key).await.unwrap().is_allowed());
    }
    let (counted_before, _) = state(&server, &redis_key).await;
    assert_eq!(admitted, 4);
    assert!(
        counted_before > admitted,
        "units were held in process: {counted_before}"
    );
    server.restart().await;
    let mut conn = server.patient_conn().await;
    let mut after = 0;
    for _ in 0..40 {
        after += u64::from(limiter.check(&mut conn, &key).await.unwrap().is_allowed());
    }
    let (counted, prev) = state(&server, &redis_key).await;
    assert_eq!(
        (counted, prev),
        (20, 0),
        "the new state is full, never past the limit"
    );
    let held_before = counted_before - admitted;
    assert!(
        after <= 20 + held_before,
        "{after} admitted after the restart; at most the new limit plus the {held_before} held"
    );
    assert!(after >= 20 - u64::from(MAX_UNITS), "{after}");
}

/// Bad stored data is a typed error and nothing is written: a key of another type
/// (`WrongType`), a state that is not two counters (`CorruptData`).
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
    for bad in ["abc", "01:0", "1:2:3", "1"] {
        let _: () = server.cmd(&["SET", &redis_key, bad]).await;
        let err = limiter.check(&mut conn, &key).await.unwrap_err();
        assert!(
            matches!(err, redkit::Error::CorruptData { .. }),
            "{bad}: {err:?}"
        );
        assert_eq!(server.cmd::<String>(&["GET", &redis_key]).await, bad);
        assert_eq!(
            server.cmd::<i64>(&["PTTL", &redis_key]).await,
            -1,
            "no TTL set either"
        );
    }
}

/// A reset deletes the state and forgets the units held here: the next check goes to Redis.
#[tokio::test]
async fn a_reset_forgets_the_units_held_of_the_deleted_state() {
    let server = RedisServer::spawn().await;
    let limiter = leased(1_000, 60_000);
    let key = LimitKey::text("reset").unwrap();
    let redis_key = limiter.redis_key(&key);
    let mut conn = server.conn().await;
    let mut checks = 0;
    loop {
        assert!(limiter.check(&mut conn, &key).await.unwrap().is_allowed());
        checks += 1;
        let (counted, _) = state(&server, &redis_key).await;
        if counted - checks >= u64::from(MAX_UNITS / 2) {
            break;
        }
        assert!(checks < 100, "no lease ever held {} units", MAX_UNITS / 2);
    }
    assert!(limiter.reset(&mut conn, &key).await.unwrap());
    assert_eq!(server.cmd::<i64>(&["EXISTS", &redis_key]).await, 0);
    assert!(limiter.check(&mut conn, &key).await.unwrap().is_allowed());
    assert_eq!(
        state(&server, &redis_key).await,
        (1, 0),
        "the check after the reset went to Redis"
    );
}

/// One instance checking one key until refused admits exactly the limit: every unit a lease
/// call counted is used once here; the refusal carries the sliding window's retry-after.
#[tokio::test]
async fn one_instance_admits_exactly_the_limit_of_a_window() {
    let server = RedisServer::spawn().await;
    let limit = 100;
    let limiter = leased(limit, 60_000);
    let key = LimitKey::text("exact").unwrap();
    let mut conn = server.conn().await;
    let mut admitted = 0;
    let refusal = loop {
        let decision = limiter.check(&mut conn, &key).await.unwrap();
        if !decision.is_allowed() {
            break decision;
        }
        admitted += 1;
        assert!(admitted <= limit, "admitted past the limit of {limit}");
    };
    assert_eq!(admitted, limit, "every unit counted in Redis was admitted");
    assert_eq!(
        state(&server, &limiter.redis_key(&key)).await,
        (u64::from(limit), 0)
    );
    let redkit::rate_limit::Decision::Limited { quota, retry_after } = refusal else {
        panic!("{refusal:?}")
    };
    assert_eq!(quota.remaining(), 0);
    // Nothing in the window before: the units leave when the current window ends, up to
    // 60 s from now, and the state's TTL is that end plus one window.
    assert!(
        retry_after > Duration::from_secs(59) && retry_after <= Duration::from_millis(60_001),
        "{retry_after:?}"
    );
    assert!(quota.reset_after() > Duration::from_secs(119), "{quota:?}");
}
