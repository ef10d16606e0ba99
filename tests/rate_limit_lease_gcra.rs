//! Leased quota for GCRA (`Gcra::leased`) against a real Redis: 4 instances (their own
//! managers and connections) on one key never admit more in any interval than one GCRA would
//! (burst + rate x its length), through bursts, idle spells and paced demand; a leased unit
//! is used only while it still conforms (until its slot is one emission interval away), never
//! later; one instance admits the burst, then the rate; bad stored data is a typed error that
//! writes nothing; a reset forgets the units held; a restart drops what was held of the lost
//! TAT.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redkit::rate_limit::{Decision, Gcra, Leased, LimitKey, QuotaLease, Rate, RateLimiter};
use redkit::ScriptManager;
use support::demand::{demand, Admission};
use support::RedisServer;

const MAX_UNITS: u32 = 8;

/// `per_second` units a second, bursts of `burst`, leased by one of 4 instances.
fn leased(per_second: u32, burst: u32) -> Leased<Gcra> {
    leased_by(per_second, burst, 4)
}

/// As [`leased`], by one of `instances`.
fn leased_by(per_second: u32, burst: u32, instances: u32) -> Leased<Gcra> {
    Gcra::bursting(
        "lease",
        Rate::per_second(support::nz(per_second)),
        support::nz(burst),
    )
    .unwrap()
    .with_manager(ScriptManager::new())
    .leased(
        QuotaLease::new(MAX_UNITS)
            .unwrap()
            .instances(instances)
            .unwrap(),
    )
}

/// The server's clock, in µs.
async fn server_us(server: &RedisServer) -> u64 {
    let time: Vec<String> = server.cmd(&["TIME"]).await;
    time[0].parse::<u64>().unwrap() * 1_000_000 + time[1].parse::<u64>().unwrap()
}

/// The stored TAT of `redis_key`, in µs of the server's clock.
async fn tat(server: &RedisServer, redis_key: &str) -> u64 {
    server
        .cmd::<String>(&["GET", redis_key])
        .await
        .parse()
        .unwrap()
}

/// The most admissions surely inside one interval beyond what GCRA allows there: for every
/// interval from one call's start to another's end, the calls wholly inside it (each was
/// admitted at an instant inside it) against burst + its length / interval. Positive: over.
fn worst_excess(admitted: &[Admission], burst: u64, interval: Duration) -> (f64, usize) {
    let interval = interval.as_secs_f64();
    let mut worst = (f64::MIN, 0);
    for &(s, _) in admitted {
        let mut ends: Vec<Instant> = admitted
            .iter()
            .filter(|(start, _)| *start >= s)
            .map(|(_, end)| *end)
            .collect();
        ends.sort();
        for (rank, e) in ends.iter().enumerate() {
            let allowed = burst as f64 + e.duration_since(s).as_secs_f64() / interval;
            let excess = (rank + 1) as f64 - allowed;
            if excess > worst.0 {
                worst = (excess, rank + 1);
            }
        }
    }
    worst
}

/// 4 instances x 8 tasks on one key through six phases (one instance alone, left holding
/// units, an idle spell in which they end, a burst from a full bucket, an idle spell, paced
/// demand, another idle spell, a last burst), 3 rounds: no interval ever admits
/// more than burst + rate x its length, as for one in-process GCRA over every request. Each
/// burst from a full bucket admits at least the burst less what the other instances may hold.
/// The negative control: far more was asked than admitted in every phase that pressed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_instances_never_admit_more_than_one_gcra_in_any_interval() {
    let server = RedisServer::spawn().await;
    let (per_second, burst) = (200, 40);
    let interval = Duration::from_millis(5);
    let instances: Vec<_> = (0..4).map(|_| leased(per_second, burst)).collect();
    let mut conns = Vec::new();
    for _ in 0..4 {
        conns.push(server.conn().await);
    }
    let ms = Duration::from_millis;
    for round in 0..3 {
        // A fresh key per round: its bucket starts full.
        let key = LimitKey::text(&format!("hot-{round}")).unwrap();
        let admitted = Arc::new(Mutex::new(Vec::new()));
        // One instance alone: leases of 1, 2 and 4, 3 units held, ending 5 to 20 ms
        // after the last; by the burst below they have ended, the bucket has refilled, and
        // none of them may be used there.
        let mut conn = conns[0].clone();
        for _ in 0..4 {
            let start = Instant::now();
            assert!(instances[0]
                .check(&mut conn, &key)
                .await
                .unwrap()
                .is_allowed());
            admitted.lock().unwrap().push((start, Instant::now()));
        }
        tokio::time::sleep(ms(250)).await;
        let attempted = demand(&instances, &conns, &key, (ms(250), ms(0)), &admitted).await;
        let first = admitted.lock().unwrap().len() as u64 - 4;
        assert!(
            first >= u64::from(burst - 4 * MAX_UNITS),
            "a full bucket of {burst}, yet only {first} admitted"
        );
        assert!(attempted > 2 * first, "{attempted} attempts for {first}");
        // Idle: the bucket refills; then demand paced at 32 x 100/s, 16 x the rate.
        tokio::time::sleep(ms(250)).await;
        let paced = demand(&instances, &conns, &key, (ms(400), ms(10)), &admitted).await;
        tokio::time::sleep(ms(250)).await;
        let before = admitted.lock().unwrap().len() as u64;
        let last = demand(&instances, &conns, &key, (ms(200), ms(0)), &admitted).await;
        let admitted = admitted.lock().unwrap().clone();
        assert!(
            admitted.len() as u64 - before >= u64::from(burst - 4 * MAX_UNITS),
            "a refilled bucket, yet only {} admitted",
            admitted.len() as u64 - before
        );
        let total = admitted.len() as u64;
        assert!(
            paced + last > 2 * (total - first),
            "the later phases never pressed on the limit"
        );
        let (excess, inside) = worst_excess(&admitted, u64::from(burst), interval);
        assert!(
            excess <= 0.0,
            "round {round}: {inside} admitted in an interval that allows {excess:.2} fewer"
        );
    }
}

/// A leased unit is used only while it conforms: the `j`-th unit of a grant until `j - 1`
/// intervals after the TAT the call found (its slot then one interval away), each next one
/// interval later. One instance holds 7 units ending 100 ms apart; once 4 have ended, the next
/// checks take what is left, never an ended one, and go to Redis for more.
#[tokio::test]
async fn a_leased_unit_is_never_used_after_it_stops_conforming() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    ScriptManager::new().preload(&mut conn).await.unwrap();
    // 10 a second (one unit per 100 ms), bursts of 40, one instance.
    let limiter = leased_by(10, 40, 1);
    let interval = 100_000;
    let key = LimitKey::text("slots").unwrap();
    let redis_key = limiter.redis_key(&key);
    let calls = server.evalsha_calls().await;
    // The first check of a key asks its cost (5); the next asks twice that, at most 8: one
    // unit for itself, 7 held.
    let five = support::nz(5);
    assert!(limiter
        .check_n(&mut conn, &key, five)
        .await
        .unwrap()
        .is_allowed());
    assert!(limiter.check(&mut conn, &key).await.unwrap().is_allowed());
    assert_eq!(server.evalsha_calls().await - calls, 2);
    // The 8 units took the slots up to the TAT: the held ones (2nd to 8th) end at TAT - 7,
    // ..., TAT - 1 intervals.
    let tat = tat(&server, &redis_key).await;
    // Past the 4th end, 50 ms before the 5th: three are left.
    let after_fourth = tat - 4 * interval + interval / 2;
    while server_us(&server).await < after_fourth {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let before = server.evalsha_calls().await;
    let mut local = 0;
    loop {
        assert!(limiter.check(&mut conn, &key).await.unwrap().is_allowed());
        if server.evalsha_calls().await > before {
            break;
        }
        local += 1;
        assert!(local <= 7, "held units never ran out");
    }
    let done = server_us(&server).await;
    // Of the 3 left, one is taken here; the next check leads the refill (a quarter of the
    // last ask, 2, would be left otherwise). Units used after their end would have answered
    // more checks here (5, with all 7 usable until the last one's end).
    assert!(
        local <= 1,
        "{local} checks answered from units that had ended"
    );
    if done < tat - 3 * interval {
        assert_eq!(local, 1, "the unit that still conformed was not used");
    }
}

/// One instance checking one key until refused admits the burst (and what the bucket refilled
/// meanwhile); the refusal says when one unit is back, within one interval.
#[tokio::test]
async fn one_instance_admits_the_burst_then_waits_for_the_rate() {
    let server = RedisServer::spawn().await;
    let (per_second, burst) = (10, 30);
    let limiter = leased(per_second, burst);
    let key = LimitKey::text("exact").unwrap();
    let mut conn = server.conn().await;
    let started = Instant::now();
    let mut admitted = 0u64;
    let refusal = loop {
        let decision = limiter.check(&mut conn, &key).await.unwrap();
        if !decision.is_allowed() {
            break decision;
        }
        admitted += 1;
        assert!(admitted <= 1_000, "never refused");
    };
    let refilled = started.elapsed().as_millis() as u64 / 100;
    assert!(
        admitted >= u64::from(burst) && admitted <= u64::from(burst) + refilled + 1,
        "{admitted} admitted in {:?}",
        started.elapsed()
    );
    let Decision::Limited { quota, retry_after } = refusal else {
        panic!("{refusal:?}")
    };
    assert_eq!((quota.limit(), quota.remaining()), (burst, 0));
    assert!(
        retry_after > Duration::ZERO && retry_after <= Duration::from_millis(100),
        "{retry_after:?}"
    );
}

/// Bad stored data is a typed error and nothing is written: a key of another type
/// (`WrongType`), a TAT that is not a canonical integer (`CorruptData`).
#[tokio::test]
async fn bad_stored_data_is_a_typed_error_and_writes_nothing() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let limiter = leased(10, 10);
    let key = LimitKey::text("poisoned").unwrap();
    let redis_key = limiter.redis_key(&key);
    let _: () = server.cmd(&["HSET", &redis_key, "f", "v"]).await;
    let err = limiter.check(&mut conn, &key).await.unwrap_err();
    assert!(matches!(err, redkit::Error::WrongType { .. }), "{err:?}");
    assert_eq!(server.cmd::<String>(&["TYPE", &redis_key]).await, "hash");
    let _: () = server.cmd(&["DEL", &redis_key]).await;
    for bad in ["abc", "01", "-5", "1.5", "99999999999999999"] {
        let _: () = server.cmd(&["SET", &redis_key, bad]).await;
        let err = limiter.check(&mut conn, &key).await.unwrap_err();
        assert!(
            matches!(err, redkit::Error::CorruptData { .. }),
            "{bad}: {err:?}"
        );
        assert_eq!(server.cmd::<String>(&["GET", &redis_key]).await, bad);
        assert_eq!(server.cmd::<i64>(&["PTTL", &redis_key]).await, -1);
    }
}

/// A reset deletes the TAT and forgets the units held here: the next check goes to Redis.
#[tokio::test]
async fn a_reset_forgets_the_units_held_of_the_deleted_bucket() {
    let server = RedisServer::spawn().await;
    let limiter = leased(10, 1_000);
    let key = LimitKey::text("reset").unwrap();
    let redis_key = limiter.redis_key(&key);
    let mut conn = server.conn().await;
    let calls = server.evalsha_calls().await;
    for _ in 0..3 {
        assert!(limiter.check(&mut conn, &key).await.unwrap().is_allowed());
    }
    assert_eq!(
        server.evalsha_calls().await - calls,
        2,
        "the third check was answered from a held unit"
    );
    assert!(limiter.reset(&mut conn, &key).await.unwrap());
    assert_eq!(server.cmd::<i64>(&["EXISTS", &redis_key]).await, 0);
    let before = server.evalsha_calls().await;
    assert!(limiter.check(&mut conn, &key).await.unwrap().is_allowed());
    assert_eq!(
        server.evalsha_calls().await - before,
        1,
        "the check after the reset went to Redis"
    );
}

/// A restart loses the TAT: the units held of it are used up to what was held (the same
/// over-admission a restart causes without leasing), then the next lease call sees a lower
/// TAT and drops what is left; the new bucket is never overdrawn.
#[tokio::test]
async fn a_restart_drops_what_was_held_of_the_lost_bucket() {
    let mut server = RedisServer::spawn().await;
    // One unit a minute, bursts of 20: nothing refills during the test.
    let limiter = Gcra::bursting("lease", Rate::per_minute(support::nz(1)), support::nz(20))
        .unwrap()
        .with_manager(ScriptManager::new())
        .leased(QuotaLease::new(MAX_UNITS).unwrap().instances(4).unwrap());
    let key = LimitKey::text("restart").unwrap();
    let mut conn = server.patient_conn().await;
    let calls = server.evalsha_calls().await;
    let mut admitted = 0;
    for _ in 0..4 {
        admitted += u64::from(limiter.check(&mut conn, &key).await.unwrap().is_allowed());
    }
    assert_eq!(admitted, 4);
    let leased_calls = server.evalsha_calls().await - calls;
    assert!(leased_calls < 4, "units were held in process");
    server.restart().await;
    let mut conn = server.patient_conn().await;
    let mut after = 0;
    for _ in 0..40 {
        after += u64::from(limiter.check(&mut conn, &key).await.unwrap().is_allowed());
    }
    assert!(
        (20..=20 + u64::from(MAX_UNITS)).contains(&after),
        "{after} admitted after the restart: the new burst plus at most what was held"
    );
    // The new bucket is empty: its TAT is 20 intervals (20 minutes) ahead, not more.
    let pttl: i64 = server.cmd(&["PTTL", &limiter.redis_key(&key)]).await;
    assert!(pttl > 19 * 60_000 && pttl <= 20 * 60_000, "{pttl}");
}
