//! Smooth limiters (GCRA, sliding window) against a real Redis: decisions against a Rust model
//! fed with the server's time, the admitted-units bound over every span, Retry-After to the
//! millisecond, and the failure contract (bad stored values, wrong types, ACL denials: nothing
//! written). Every test runs in a few seconds with short periods.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redkit::rate_limit::{Decision, Gcra, LimitKey, Rate, SlidingWindow};
use redkit::{Call, Error, Registry, ScriptManager};
use support::RedisServer;

/// splitmix64: a seeded generator, so a failing sequence can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The keyspace with TTLs reduced to "has one": equal before and after a call that wrote
/// nothing, whatever milliseconds passed.
async fn keyspace(conn: &mut MultiplexedConnection) -> BTreeMap<Vec<u8>, (Vec<u8>, bool)> {
    support::snapshot(conn)
        .await
        .into_iter()
        .map(|(k, (dump, pttl))| (k, (dump, pttl > 0)))
        .collect()
}

// ---------------------------------------------------------------- GCRA

/// The GCRA of `lua/gcra.v4.lua` in Rust: the same integer arithmetic on microseconds.
struct GcraModel {
    interval: i64,
    burst: i64,
    stored: Option<i64>,
}

impl GcraModel {
    fn units(&self, room: i64) -> i64 {
        if room < 0 {
            0
        } else {
            room / self.interval
        }
    }

    /// `[allowed, remaining, retry_after_us, reset_after_us]` of a request at `now`.
    fn step(&mut self, now: i64, cost: i64) -> [i64; 4] {
        let tau = self.interval * self.burst;
        let tat = self.stored.map_or(now, |s| s.max(now));
        if cost > self.burst {
            return [0, self.units(tau - (tat - now)), 0, tat - now];
        }
        let new_tat = tat + self.interval * cost;
        if new_tat - now > tau {
            return [
                0,
                self.units(tau - (tat - now)),
                new_tat - tau - now,
                tat - now,
            ];
        }
        self.stored = Some(new_tat);
        [1, self.units(tau - (new_tat - now)), 0, new_tat - now]
    }
}

/// One raw call of the GCRA script with the arguments [`Gcra`] sends:
/// `[allowed, remaining, retry_after_us, reset_after_us, now_us]`.
async fn gcra_raw(
    conn: &mut MultiplexedConnection,
    key: &str,
    interval_us: i64,
    burst: i64,
    cost: i64,
) -> [i64; 5] {
    let script = Registry::global().require("gcra", 4).unwrap();
    let mut call = Call::new(script);
    call.key(key).arg(interval_us).arg(burst);
    // A cost of 1 left out, as the limiter sends it.
    if cost != 1 {
        call.arg(cost);
    }
    let v: Vec<i64> = ScriptManager::new().invoke(conn, &call).await.unwrap();
    v.try_into().unwrap()
}

#[tokio::test]
async fn gcra_decisions_equal_the_model_and_never_exceed_the_bound() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    // The arguments the public type would send: 10 per 200 ms (20 ms interval), burst 4.
    let limiter = Gcra::bursting(
        "model",
        Rate::new(redkit::nonzero!(10), Duration::from_millis(200)).unwrap(),
        redkit::nonzero!(4),
    )
    .unwrap();
    let interval = i64::try_from(limiter.emission_interval().as_micros()).unwrap();
    assert_eq!(interval, 20_000);
    let burst = i64::from(limiter.burst());
    for seed in [1u64, 2, 3] {
        let mut rng = Rng(seed);
        let key = format!("redkit:gcra:model:{{seed{seed}}}");
        let mut model = GcraModel {
            interval,
            burst,
            stored: None,
        };
        let mut admitted: Vec<(i64, i64)> = Vec::new();
        let mut limited = 0;
        for i in 0..120 {
            // Bursts of back-to-back requests and pauses up to 1.5 intervals.
            if rng.below(3) == 0 {
                tokio::time::sleep(Duration::from_micros(rng.below(30_000))).await;
            }
            let cost = match rng.below(10) {
                0 => 5, // above the burst: can never pass
                1..=3 => 2,
                _ => 1,
            };
            let [allowed, remaining, retry, reset, now] =
                gcra_raw(&mut conn, &key, interval, burst, cost).await;
            let expected = model.step(now, cost);
            assert_eq!(
                [allowed, remaining, retry, reset],
                expected,
                "seed {seed} request {i} at {now} cost {cost}"
            );
            if allowed == 1 {
                admitted.push((now, cost));
            } else {
                limited += 1;
            }
            // The key lives until the bucket is full (PX rounded up to the ms), or is gone.
            if allowed == 1 {
                let pttl: i64 = redis::cmd("PTTL")
                    .arg(&key)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                assert!(
                    pttl == -2 || (pttl > 0 && pttl <= (reset + 999) / 1000),
                    "{pttl} vs {reset}"
                );
            }
        }
        assert!(
            limited > 0 && admitted.len() > 20,
            "the sequence exercises both outcomes"
        );
        // Over every span [a, b] between admissions: at most burst + (b - a) / interval units.
        for i in 0..admitted.len() {
            let mut sum = 0;
            for j in i..admitted.len() {
                sum += admitted[j].1;
                let span = admitted[j].0 - admitted[i].0;
                assert!(
                    sum <= burst + span / interval,
                    "seed {seed}: {sum} units in {span} us"
                );
            }
        }
    }
}

#[tokio::test]
async fn gcra_retry_after_is_exact_to_the_millisecond() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    // 100 ms interval, burst 2.
    let limiter = Gcra::bursting(
        "exact",
        Rate::new(redkit::nonzero!(5), Duration::from_millis(500)).unwrap(),
        redkit::nonzero!(2),
    )
    .unwrap();
    let key = LimitKey::text("client").unwrap();
    const EARLY: Duration = Duration::from_millis(15);
    let mut conclusive_early = 0;
    // 8 rounds, and on a machine too loaded for an early call to come back in time in those,
    // more (at most 64): the claim needs at least one conclusive early call.
    for round in 0..64 {
        if round >= 8 && conclusive_early >= 1 {
            break;
        }
        // Take everything the bucket holds, then one more: refused with an exact wait.
        let (sent, decision) = loop {
            let sent = Instant::now();
            let d = limiter.check(&mut conn, &key).await.unwrap();
            if !d.is_allowed() {
                break (sent, d);
            }
        };
        let received = Instant::now();
        let retry = decision.retry_after().expect("limited");
        assert!(retry <= Duration::from_millis(100), "{retry:?}");
        // EARLY before the end (by the client's clock, from before the refused call was
        // sent): the server saw less than `retry` pass only if this call also came back in
        // time. (A call after a 100 ms pause was measured taking 5 ms on an idle VM.)
        if retry > EARLY + Duration::from_millis(1) {
            std::thread::sleep((sent + retry - EARLY) - Instant::now());
            let early = limiter.check(&mut conn, &key).await.unwrap();
            let back = Instant::now();
            if sent.elapsed() < retry {
                conclusive_early += 1;
                assert!(
                    !early.is_allowed(),
                    "round {round}: allowed {EARLY:?} early"
                );
                let left = early.retry_after().unwrap();
                // The early call left after `sent + retry - EARLY`; the refusal was decided
                // before `received`: so at most EARLY + that round trip remain (+1 ms slack).
                let bound = EARLY + Duration::from_millis(1) + (received - sent);
                assert!(left <= bound, "round {round}: {left:?} > {bound:?}");
                // And at least what was left when it came back: the refusal ends no earlier
                // than `sent + retry` (-1 ms slack), so a retry-after too long by more than
                // the round trips shows here, however early the call was.
                let floor = (sent + retry).saturating_duration_since(back);
                assert!(
                    left + Duration::from_millis(1) >= floor,
                    "round {round}: {left:?} < {floor:?}"
                );
            } else if early.is_allowed() {
                continue; // late (loaded machine): it took the unit; nothing to learn
            }
        }
        // Right after Retry-After (counted from when the answer arrived): allowed.
        let wait = (received + retry).saturating_duration_since(Instant::now());
        std::thread::sleep(wait);
        let d = limiter.check(&mut conn, &key).await.unwrap();
        assert!(
            d.is_allowed(),
            "round {round}: refused after retry_after: {d:?}"
        );
        tokio::time::sleep(Duration::from_millis((round % 3) * 30)).await;
    }
    assert!(conclusive_early >= 1, "no early request came back in time");
}

#[tokio::test]
async fn gcra_token_bucket_semantics_through_the_public_api() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    // 1 per 10 s: nothing refills during the test.
    let limiter = Gcra::bursting(
        "bucket",
        Rate::new(redkit::nonzero!(1), Duration::from_secs(10)).unwrap(),
        redkit::nonzero!(5),
    )
    .unwrap();
    let key = LimitKey::ip([192, 0, 2, 7].into());
    let mut remaining = Vec::new();
    for _ in 0..5 {
        let d = limiter.check(&mut conn, &key).await.unwrap();
        assert!(d.is_allowed());
        assert_eq!(d.quota().limit(), 5);
        remaining.push(d.quota().remaining());
    }
    assert_eq!(remaining, [4, 3, 2, 1, 0]);
    let d = limiter.check(&mut conn, &key).await.unwrap();
    let retry = d.retry_after().unwrap();
    assert!(retry > Duration::from_secs(9) && retry <= Duration::from_secs(10));
    // Full again 5 intervals after the first take (minus what passed).
    let reset = d.quota().reset_after();
    assert!(reset > Duration::from_secs(49) && reset <= Duration::from_secs(50));
    let pttl: i64 = server.cmd(&["PTTL", &limiter.redis_key(&key)]).await;
    assert!(pttl > 49_000 && pttl <= 50_000, "{pttl}");
    // Costs: above the burst can never pass, nothing changes.
    let before = keyspace(&mut conn).await;
    let d = limiter
        .check_n(&mut conn, &key, redkit::nonzero!(6))
        .await
        .unwrap();
    assert!(
        matches!(d, Decision::CostExceedsLimit { cost: 6, .. }),
        "{d:?}"
    );
    assert_eq!(d.retry_after(), None);
    assert_eq!(keyspace(&mut conn).await, before);
    // A cost of 3 on a fresh key leaves 2; reset empties it.
    let other = LimitKey::text("other").unwrap();
    let d = limiter
        .check_n(&mut conn, &other, redkit::nonzero!(3))
        .await
        .unwrap();
    assert_eq!(d.quota().remaining(), 2);
    assert!(limiter.reset(&mut conn, &other).await.unwrap());
    let d = limiter
        .check_n(&mut conn, &other, redkit::nonzero!(5))
        .await
        .unwrap();
    assert!(d.is_allowed());
}

#[tokio::test]
async fn gcra_refuses_bad_stored_values_and_wrong_types_writing_nothing() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let limiter = Gcra::new("poison", Rate::per_second(redkit::nonzero!(100))).unwrap();
    let key = LimitKey::text("victim").unwrap();
    let rk = limiter.redis_key(&key);
    let _: () = server.cmd(&["SET", "rk:other", "untouched"]).await;
    for with_ttl in [false, true] {
        for bad in [
            "05",
            "-0",
            "+5",
            " 5",
            "5 ",
            "5.0",
            "1e3",
            "0x10",
            "",
            "-5",
            "abc",
            "9007199254740992",
            "99999999999999999999",
        ] {
            let _: () = server.cmd(&["DEL", &rk]).await;
            let _: () = server.cmd(&["SET", &rk, bad]).await;
            if with_ttl {
                let _: i64 = server.cmd(&["PEXPIRE", &rk, "60000"]).await;
            }
            let before = keyspace(&mut conn).await;
            let r = limiter.check(&mut conn, &key).await;
            assert!(
                matches!(r, Err(Error::CorruptData { .. })),
                "{bad:?} ttl={with_ttl}: {r:?}"
            );
            assert_eq!(keyspace(&mut conn).await, before, "{bad:?} ttl={with_ttl}");
        }
        for args in [
            vec!["HSET", &rk, "f", "1"],
            vec!["RPUSH", &rk, "1"],
            vec!["SADD", &rk, "1"],
        ] {
            let _: () = server.cmd(&["DEL", &rk]).await;
            let _: i64 = server.cmd(&args).await;
            if with_ttl {
                let _: i64 = server.cmd(&["PEXPIRE", &rk, "60000"]).await;
            }
            let before = keyspace(&mut conn).await;
            let r = limiter.check(&mut conn, &key).await;
            assert!(matches!(r, Err(Error::WrongType { .. })), "{args:?}: {r:?}");
            assert_eq!(keyspace(&mut conn).await, before);
        }
    }
    // The valid extremes: 2^53 - 1 is a TAT far in the future (refused, unchanged), 0 is past.
    let _: () = server.cmd(&["SET", &rk, "9007199254740991"]).await;
    let before = keyspace(&mut conn).await;
    let d = limiter.check(&mut conn, &key).await.unwrap();
    assert!(!d.is_allowed() && d.quota().remaining() == 0, "{d:?}");
    assert_eq!(keyspace(&mut conn).await, before);
    let _: () = server.cmd(&["SET", &rk, "0"]).await;
    let d = limiter.check(&mut conn, &key).await.unwrap();
    assert!(d.is_allowed() && d.quota().remaining() == 99, "{d:?}");
    let pttl: i64 = server.cmd(&["PTTL", &rk]).await;
    assert!(pttl > 0 && pttl <= 10, "one interval (10 ms): {pttl}");

    // The script validates its arguments again (second line of defence), as numbers: nothing
    // written for a value that is not an integer 1..10^15 (cost included, on its own path
    // when it is not "1"), or a bucket of 10^15 us or more.
    let script = Registry::global().require("gcra", 4).unwrap();
    for (interval, burst, cost) in [
        ("0", "1", "1"),
        ("1", "0", "1"),
        ("1", "1", "0"),
        ("1.5", "1", "1"),
        ("1", "2.5", "1"),
        ("1", "1", "1.5"),
        ("1", "1", "-1"),
        ("1", "1", "01x"),
        ("inf", "1", "1"),
        ("nan", "1", "1"),
        ("1", "1", "1e15"),
        ("1000000000000000", "1", "1"),
        ("999999999999999", "2", "1"),
        ("x", "1", "1"),
        ("1", "", "1"),
        ("1", "1", ""),
    ] {
        let mut call = Call::new(script);
        call.key("redkit:gcra:raw:{k:x}")
            .arg(interval)
            .arg(burst)
            .arg(cost);
        let r = ScriptManager::new()
            .invoke::<redis::Value, _>(&mut conn, &call)
            .await;
        assert!(
            matches!(r, Err(Error::InvalidInput { .. })),
            "{interval} {burst} {cost}: {r:?}"
        );
    }
    let exists: i64 = server.cmd(&["EXISTS", "redkit:gcra:raw:{k:x}"]).await;
    assert_eq!(exists, 0);
    // Other spellings of a valid number are that number (none is written as given).
    for (interval, burst, cost) in [
        ("05", "1", "1"),
        ("1e3", "1", "1"),
        ("1", " 1", "1"),
        ("1", "1", "+1"),
    ] {
        let _: () = server.cmd(&["DEL", "redkit:gcra:raw:{k:y}"]).await;
        let mut call = Call::new(script);
        call.key("redkit:gcra:raw:{k:y}")
            .arg(interval)
            .arg(burst)
            .arg(cost);
        let r: Vec<i64> = ScriptManager::new().invoke(&mut conn, &call).await.unwrap();
        assert_eq!(r[0], 1, "{interval} {burst} {cost}: allowed");
    }
}

/// A connection as an ACL user allowed everything but `denied`.
async fn conn_without(server: &RedisServer, denied: &str) -> MultiplexedConnection {
    let user = format!("u_{}", denied.to_lowercase());
    let rule = format!("-{}", denied.to_lowercase());
    let _: () = server
        .cmd(&[
            "ACL", "SETUSER", &user, "on", ">pw", "~*", "&*", "+@all", &rule,
        ])
        .await;
    let url = format!("redis://{user}:pw@127.0.0.1:{}/", server.port());
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

#[tokio::test]
async fn gcra_under_an_acl_user_denied_any_inner_command_writes_nothing() {
    let server = RedisServer::spawn().await;
    let mut admin = server.conn().await;
    let limiter = Gcra::new("acl", Rate::per_minute(redkit::nonzero!(1))).unwrap();
    let key = LimitKey::text("u").unwrap();
    let rk = limiter.redis_key(&key);
    let _: () = server.cmd(&["SET", "rk:other", "untouched"]).await;
    ScriptManager::new().preload(&mut admin).await.unwrap();
    // The states a key can be found in, and the commands the script runs in each.
    let states: [(&str, &[&str]); 3] = [
        ("new", &["TIME", "GET", "SET"]),
        ("past", &["TIME", "GET", "SET"]),
        ("limited", &["TIME", "GET"]),
    ];
    for denied in ["TIME", "GET", "SET"] {
        let mut conn = conn_without(&server, denied).await;
        for (state, runs) in states {
            let _: () = server.cmd(&["DEL", &rk]).await;
            match state {
                "past" => server.cmd(&["SET", &rk, "1000"]).await,
                "limited" => server.cmd(&["SET", &rk, "9000000000000000"]).await,
                _ => {}
            }
            let before = keyspace(&mut admin).await;
            let r = limiter.check(&mut conn, &key).await;
            if runs.contains(&denied) {
                assert!(
                    matches!(r, Err(Error::PermissionDenied { .. })),
                    "-{denied} in state {state}: {r:?}"
                );
                assert_eq!(keyspace(&mut admin).await, before, "-{denied} {state}");
            } else {
                let d = r.unwrap_or_else(|e| panic!("-{denied} in state {state}: {e}"));
                assert_eq!(d.is_allowed(), state != "limited", "{state}");
            }
        }
    }
}

// ---------------------------------------------------------------- sliding window

#[tokio::test]
async fn sliding_window_never_admits_more_than_the_bound_over_any_span() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let window = Duration::from_millis(300);
    let limit = 8u32;
    let limiter =
        SlidingWindow::new("span", Rate::new(support::nz(limit), window).unwrap()).unwrap();
    for seed in [11u64, 12] {
        let mut rng = Rng(seed);
        let key = LimitKey::text(&format!("seed{seed}")).unwrap();
        // (sent, received, cost) of each admitted request, by the client's clock.
        let mut admitted: Vec<(Instant, Instant, u32)> = Vec::new();
        let mut limited = 0;
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(1500) {
            if rng.below(2) == 0 {
                tokio::time::sleep(Duration::from_micros(rng.below(40_000))).await;
            }
            let cost = if rng.below(5) == 0 { 2 } else { 1 };
            let sent = Instant::now();
            let d = limiter
                .check_n(&mut conn, &key, support::nz(cost))
                .await
                .unwrap();
            let received = Instant::now();
            assert!(d.quota().remaining() <= limit);
            assert!(d.quota().reset_after() <= 2 * window, "{d:?}");
            match d {
                Decision::Allowed(_) => admitted.push((sent, received, cost)),
                Decision::Limited { retry_after, .. } => {
                    limited += 1;
                    assert!(retry_after > Duration::ZERO && retry_after <= 2 * window);
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(
            limited > 0 && admitted.len() > 2 * limit as usize,
            "both outcomes"
        );
        // Requests certainly decided within one window of request i's decision (j came back
        // before i was sent + window): together at most 2 x limit.
        for (i, (sent_i, _, _)) in admitted.iter().enumerate() {
            let units: u32 = admitted[i..]
                .iter()
                .take_while(|(_, received_j, _)| *received_j - *sent_i < window)
                .map(|(_, _, c)| c)
                .sum();
            assert!(
                units <= 2 * limit,
                "seed {seed}: {units} units within {window:?}"
            );
        }
    }
}

#[tokio::test]
async fn sliding_window_weights_the_previous_window_by_the_time_left() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    // A long window: the few ms the test takes do not move the weights.
    let limiter = SlidingWindow::new("weights", Rate::per_minute(redkit::nonzero!(10))).unwrap();
    let key = LimitKey::text("k").unwrap();
    let rk = limiter.redis_key(&key);
    let pttl = |conn: &mut MultiplexedConnection| {
        let rk = rk.clone();
        let mut conn = conn.clone();
        async move {
            let p: i64 = redis::cmd("PTTL")
                .arg(rk)
                .query_async(&mut conn)
                .await
                .unwrap();
            p
        }
    };
    let get = |conn: &mut MultiplexedConnection| {
        let rk = rk.clone();
        let mut conn = conn.clone();
        async move {
            let v: String = redis::cmd("GET")
                .arg(rk)
                .query_async(&mut conn)
                .await
                .unwrap();
            v
        }
    };

    // A fresh key: a window of 60 s starts, the key lives two windows.
    let d = limiter
        .check_n(&mut conn, &key, redkit::nonzero!(3))
        .await
        .unwrap();
    assert_eq!(d.quota().remaining(), 7);
    assert_eq!(get(&mut conn).await, "3:0");
    let p = pttl(&mut conn).await;
    assert!(p > 119_000 && p <= 120_000, "{p}");

    // 35 s left in a window with 10 in the previous one: weight floor(5.8) = 5, 2 counted.
    let _: () = server.cmd(&["SET", &rk, "2:10", "PX", "95000"]).await;
    let d = limiter.check(&mut conn, &key).await.unwrap();
    assert!(d.is_allowed());
    assert_eq!(d.quota().remaining(), 2);
    assert_eq!(get(&mut conn).await, "3:10");
    assert!(pttl(&mut conn).await > 94_000, "the TTL is kept");
    // Fill it: 5 + 5 = 10; then refused until floor(10 x left / 60 s) drops to 4, i.e.
    // left < 30 s: about 5 s from now.
    for _ in 0..2 {
        assert!(limiter.check(&mut conn, &key).await.unwrap().is_allowed());
    }
    let d = limiter.check(&mut conn, &key).await.unwrap();
    let retry = d.retry_after().expect("limited");
    assert!(
        retry > Duration::from_millis(4_900) && retry <= Duration::from_millis(5_001),
        "{retry:?}"
    );
    assert_eq!(
        get(&mut conn).await,
        "5:10",
        "refused requests are not counted"
    );

    // The current window ended 30 s ago (PTTL <= window): current becomes previous.
    let _: () = server.cmd(&["SET", &rk, "7:1", "PX", "30000"]).await;
    let d = limiter.check(&mut conn, &key).await.unwrap();
    assert_eq!(d.quota().remaining(), 10 - 3 - 1, "floor(7 x ~0.5) + 1");
    assert_eq!(get(&mut conn).await, "1:7");
    let p = pttl(&mut conn).await;
    assert!(p > 89_000 && p <= 90_000, "{p}");

    // A full window followed by a refusal waits for the window's end and then its weight.
    let _: () = server.cmd(&["SET", &rk, "10:0", "PX", "100000"]).await;
    let d = limiter.check(&mut conn, &key).await.unwrap();
    let retry = d.retry_after().unwrap();
    // 40 s to the end; then floor(10 x left / 60 s) + 1 <= 10 once left < 60 s: 1 ms more.
    assert!(
        retry > Duration::from_millis(39_900) && retry <= Duration::from_millis(40_001),
        "{retry:?}"
    );

    // A state without a TTL gets two windows on the next check, allowed or not.
    for (state, allowed) in [("3:0", true), ("10:0", false)] {
        let _: () = server.cmd(&["SET", &rk, state]).await;
        let d = limiter.check(&mut conn, &key).await.unwrap();
        assert_eq!(d.is_allowed(), allowed, "{state}");
        let p = pttl(&mut conn).await;
        assert!(p > 119_000 && p <= 120_000, "{state}: {p}");
    }
    // Costs: above the limit can never pass.
    let d = limiter
        .check_n(&mut conn, &key, redkit::nonzero!(11))
        .await
        .unwrap();
    assert!(
        matches!(d, Decision::CostExceedsLimit { cost: 11, .. }),
        "{d:?}"
    );
    assert!(limiter.reset(&mut conn, &key).await.unwrap());
    assert!(limiter
        .check_n(&mut conn, &key, redkit::nonzero!(10))
        .await
        .unwrap()
        .is_allowed());
}

#[tokio::test]
async fn sliding_window_retry_after_is_enough() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let limiter = SlidingWindow::new(
        "retry",
        Rate::new(redkit::nonzero!(3), Duration::from_millis(200)).unwrap(),
    )
    .unwrap();
    let key = LimitKey::text("k").unwrap();
    for round in 0..6 {
        let d = loop {
            let d = limiter.check(&mut conn, &key).await.unwrap();
            if !d.is_allowed() {
                break d;
            }
        };
        let received = Instant::now();
        let retry = d.retry_after().unwrap();
        std::thread::sleep((received + retry).saturating_duration_since(Instant::now()));
        let d = limiter.check(&mut conn, &key).await.unwrap();
        assert!(
            d.is_allowed(),
            "round {round}: refused after {retry:?}: {d:?}"
        );
    }
}

#[tokio::test]
async fn sliding_window_refuses_bad_state_and_wrong_types_writing_nothing() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let limiter = SlidingWindow::new(
        "poison",
        Rate::new(redkit::nonzero!(1000), Duration::from_secs(10)).unwrap(),
    )
    .unwrap();
    let key = LimitKey::text("victim").unwrap();
    let rk = limiter.redis_key(&key);
    let _: () = server.cmd(&["SET", "rk:other", "untouched"]).await;
    for with_ttl in [false, true] {
        for bad in [
            "5",
            "",
            ":",
            "1:",
            ":1",
            "1:2:3",
            "05:1",
            "1:05",
            "-1:0",
            "1:-0",
            "+1:0",
            " 1:0",
            "1:0 ",
            "1.0:0",
            "1e3:0",
            "a:b",
            "1000000000000000:0",
            "0:1000000000000000",
        ] {
            let _: () = server.cmd(&["DEL", &rk]).await;
            let _: () = server.cmd(&["SET", &rk, bad]).await;
            if with_ttl {
                let _: i64 = server.cmd(&["PEXPIRE", &rk, "15000"]).await;
            }
            let before = keyspace(&mut conn).await;
            let r = limiter.check(&mut conn, &key).await;
            assert!(
                matches!(r, Err(Error::CorruptData { .. })),
                "{bad:?} ttl={with_ttl}: {r:?}"
            );
            assert_eq!(keyspace(&mut conn).await, before, "{bad:?} ttl={with_ttl}");
        }
        for args in [
            vec!["HSET", &rk, "f", "1"],
            vec!["RPUSH", &rk, "1"],
            vec!["SADD", &rk, "1"],
        ] {
            let _: () = server.cmd(&["DEL", &rk]).await;
            let _: i64 = server.cmd(&args).await;
            if with_ttl {
                let _: i64 = server.cmd(&["PEXPIRE", &rk, "15000"]).await;
            }
            let before = keyspace(&mut conn).await;
            let r = limiter.check(&mut conn, &key).await;
            assert!(matches!(r, Err(Error::WrongType { .. })), "{args:?}: {r:?}");
            assert_eq!(keyspace(&mut conn).await, before);
        }
    }
    // Extremes that are valid state: huge counts are refused, unchanged.
    let _: () = server
        .cmd(&["SET", &rk, "999999999999999:999999999999999", "PX", "15000"])
        .await;
    let before = keyspace(&mut conn).await;
    let d = limiter.check(&mut conn, &key).await.unwrap();
    assert!(!d.is_allowed() && d.quota().remaining() == 0, "{d:?}");
    assert_eq!(keyspace(&mut conn).await, before);

    // The script checks its arguments as numbers: an integer 1..10^15, the cost on its own
    // path when it is not "1"; nothing written otherwise.
    let script = Registry::global().require("sliding_window", 4).unwrap();
    for (limit, window, cost) in [
        ("0", "1000", "1"),
        ("5", "0", "1"),
        ("5", "1000", "0"),
        ("5.5", "1000", "1"),
        ("5", "0.5", "1"),
        ("5", "1000", "1.5"),
        ("5", "1000", "-1"),
        ("5", "1000", "x"),
        ("inf", "1000", "1"),
        ("5", "nan", "1"),
        ("5", "1000000000000000", "1"),
        ("", "1000", "1"),
        ("5", "1000", ""),
    ] {
        let mut call = Call::new(script);
        call.key("redkit:sw:raw:{k:x}")
            .arg(limit)
            .arg(window)
            .arg(cost);
        let r = ScriptManager::new()
            .invoke::<redis::Value, _>(&mut conn, &call)
            .await;
        assert!(
            matches!(r, Err(Error::InvalidInput { .. })),
            "{limit} {window} {cost}: {r:?}"
        );
    }
    let exists: i64 = server.cmd(&["EXISTS", "redkit:sw:raw:{k:x}"]).await;
    assert_eq!(exists, 0);
    // Other spellings of a valid number are that number: the state and the TTL the script
    // writes are its own decimal text.
    for (limit, window, cost) in [("05", "1000", "1"), ("5", "1e3", "1"), ("5", "1000", " 2")] {
        let _: () = server.cmd(&["DEL", "redkit:sw:raw:{k:y}"]).await;
        let mut call = Call::new(script);
        call.key("redkit:sw:raw:{k:y}")
            .arg(limit)
            .arg(window)
            .arg(cost);
        let r: Vec<i64> = ScriptManager::new().invoke(&mut conn, &call).await.unwrap();
        assert_eq!(r[0], 1, "{limit} {window} {cost}: allowed");
        let state: String = server.cmd(&["GET", "redkit:sw:raw:{k:y}"]).await;
        let pttl: i64 = server.cmd(&["PTTL", "redkit:sw:raw:{k:y}"]).await;
        let counted = if cost == " 2" { "2:0" } else { "1:0" };
        assert_eq!(state, counted, "{limit} {window} {cost}");
        assert!(
            pttl > 1000 && pttl <= 2000,
            "{limit} {window} {cost}: {pttl}"
        );
    }
}

#[tokio::test]
async fn sliding_window_under_an_acl_user_denied_any_inner_command_writes_nothing() {
    let server = RedisServer::spawn().await;
    let mut admin = server.conn().await;
    let limiter = SlidingWindow::new("acl", Rate::per_minute(redkit::nonzero!(2))).unwrap();
    let key = LimitKey::text("u").unwrap();
    let rk = limiter.redis_key(&key);
    let _: () = server.cmd(&["SET", "rk:other", "untouched"]).await;
    ScriptManager::new().preload(&mut admin).await.unwrap();
    let states: [(&str, &[&str]); 5] = [
        ("new", &["GET", "SET"]),
        ("counting", &["GET", "PTTL", "SET"]),
        ("shifted", &["GET", "PTTL", "SET"]),
        ("limited", &["GET", "PTTL"]),
        ("limited no ttl", &["GET", "PTTL", "PEXPIRE"]),
    ];
    for denied in ["GET", "SET", "PTTL", "PEXPIRE"] {
        let mut conn = conn_without(&server, denied).await;
        for (state, runs) in states {
            let _: () = server.cmd(&["DEL", &rk]).await;
            match state {
                "counting" => server.cmd(&["SET", &rk, "1:0", "PX", "100000"]).await,
                "shifted" => server.cmd(&["SET", &rk, "2:0", "PX", "50000"]).await,
                "limited" => server.cmd(&["SET", &rk, "2:0", "PX", "100000"]).await,
                "limited no ttl" => server.cmd(&["SET", &rk, "2:0"]).await,
                _ => {}
            }
            let before = keyspace(&mut admin).await;
            let r = limiter.check(&mut conn, &key).await;
            if runs.contains(&denied) {
                assert!(
                    matches!(r, Err(Error::PermissionDenied { .. })),
                    "-{denied} in state {state}: {r:?}"
                );
                assert_eq!(keyspace(&mut admin).await, before, "-{denied} {state}");
            } else {
                let d = r.unwrap_or_else(|e| panic!("-{denied} in state {state}: {e}"));
                assert_eq!(d.is_allowed(), !state.starts_with("limited"), "{state}");
            }
        }
    }
}
