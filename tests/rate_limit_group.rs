//! Group commit of fixed-window checks (`FixedWindow::grouped`, `Grouped`) against real Redis:
//! `fixed_window_group.v3` answers and writes per key exactly what `fixed_window.v9` does, a
//! group answers each check as if sent alone, a bad counter fails only its own check (nothing
//! written), counts hold under a flood, and a Cluster run (groups spanning slots are refused
//! by Redis before they run, then formed per slot).
//!
//! A group is forced as in tests/inventory_hot.rs: the server is frozen (SIGSTOP) while the
//! first check is in flight, every check polled meanwhile queues behind it, and
//! `INFO commandstats` shows the queue settled by ONE more `EVALSHA`.

mod support;

use std::time::Duration;

use futures_util::future::join_all;
use redis::aio::MultiplexedConnection;
use redis::Value;
use redkit::rate_limit::{
    AlignedWindow, Decision, FixedWindow, Grouped, LimitKey, Rate, RateLimiter,
};
use redkit::script::{Call, Registry};
use redkit::{Error, GroupCommit, ScriptManager};
use support::{RedisCluster, RedisServer};

const WINDOW: Duration = Duration::from_secs(600);

/// Group commit with ONE call in flight: every check queued behind a frozen first call joins
/// one group, in arrival order.
fn grouped(name: &str, limit: u32) -> Grouped<FixedWindow> {
    FixedWindow::new(name, Rate::new(support::nz(limit), WINDOW).unwrap())
        .unwrap()
        .grouped(GroupCommit::new(64, 1).unwrap())
}

fn key(k: &str) -> LimitKey {
    LimitKey::text(k).unwrap()
}

async fn preloaded(server: &RedisServer) -> MultiplexedConnection {
    let mut conn = server.conn().await;
    ScriptManager::new().preload(&mut conn).await.unwrap();
    conn
}

/// What a decision says, without its reset (which moves by the millisecond).
fn gist(d: &Decision) -> (&'static str, u32, u32) {
    let kind = match d {
        Decision::Allowed(_) => "allowed",
        Decision::Limited { .. } => "limited",
        Decision::CostExceedsLimit { .. } => "cost exceeds limit",
        _ => "other",
    };
    (kind, d.quota().limit(), d.quota().remaining())
}

/// Runs a first check alone and then `checks` while the server is frozen, so all of `checks`
/// queue behind the first; returns every outcome (the first first) and the `EVALSHA` calls
/// the server answered for them.
async fn frozen_group<L: RateLimiter>(
    server: &mut RedisServer,
    limiter: &L,
    conn: &MultiplexedConnection,
    checks: &[(&str, u32)],
) -> (Vec<redkit::Result<Decision>>, u64) {
    let before = server.evalsha_calls().await;
    server.pause().await;
    let calls = std::iter::once(("first", 1))
        .chain(checks.iter().copied())
        .map(|(k, cost)| {
            let mut c = conn.clone();
            async move { limiter.check_n(&mut c, &key(k), support::nz(cost)).await }
        });
    // join_all polls in order: the first call is sent, the others queue in this order (all
    // in its first poll). Resumed once the first call has reached the frozen server.
    let unread = server.unread_bytes();
    let (outcomes, ()) = tokio::join!(
        support::bounded(10, "every queued check answered", join_all(calls)),
        async {
            server.wait_unread_above(unread).await;
            server.resume().await;
        }
    );
    let after = server.evalsha_calls().await;
    (outcomes, after - before)
}

/// Checks of one limiter with limit 3: counted, limited, a cost above the limit, a second
/// cost that no longer fits, a new key.
const CHECKS: [(&str, u32); 9] = [
    ("a", 1),
    ("b", 2),
    ("a", 1),
    ("a", 1),
    ("a", 1), // the 4th of a: limited
    ("c", 5), // above the limit: never fits
    ("b", 2), // 2 + 2 > 3: limited, not counted
    ("b", 1), // fits: 3
    ("d", 3),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_answers_each_check_as_if_sent_alone() {
    let mut server = RedisServer::spawn().await;
    let conn = preloaded(&server).await;
    let limiter = grouped("g", 3);
    let (outcomes, calls) = frozen_group(&mut server, &limiter, &conn, &CHECKS).await;
    assert_eq!(
        calls, 2,
        "the first alone, then ONE call for the nine queued"
    );

    // The reference: the same checks one call each, in the same order, on other counters.
    let alone = FixedWindow::new("s", Rate::new(redkit::nonzero!(3), WINDOW).unwrap()).unwrap();
    let mut c = conn.clone();
    let mut expected = Vec::new();
    for (k, cost) in std::iter::once(("first", 1)).chain(CHECKS) {
        let d = alone
            .check_n(&mut c, &key(k), support::nz(cost))
            .await
            .unwrap();
        expected.push(gist(&d));
    }
    let got: Vec<_> = outcomes.iter().map(|o| gist(o.as_ref().unwrap())).collect();
    assert_eq!(got, expected);
    assert_eq!(got[5], ("limited", 3, 0));
    assert_eq!(got[6], ("cost exceeds limit", 3, 3));
    assert_eq!(got[7], ("limited", 3, 1));
    assert_eq!(got[8], ("allowed", 3, 0));
    // Every reset is the counter's remaining TTL: within the window.
    for o in &outcomes {
        let reset = o.as_ref().unwrap().quota().reset_after();
        assert!(reset > WINDOW - Duration::from_secs(60) && reset <= WINDOW);
    }
    // The counters hold what was counted, with the window's TTL.
    for (k, count) in [("a", "3"), ("b", "3"), ("d", "3")] {
        let redis_key = limiter.redis_key(&key(k));
        let stored: String = server.cmd(&["GET", &redis_key]).await;
        assert_eq!(stored, count, "{k}");
        let ttl: i64 = server.cmd(&["PTTL", &redis_key]).await;
        assert!(ttl > 500_000, "{k}: {ttl}");
    }
    let c_key = limiter.redis_key(&key("c"));
    assert_eq!(server.cmd::<i64>(&["EXISTS", &c_key]).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_counter_fails_only_its_own_check() {
    let mut server = RedisServer::spawn().await;
    let conn = preloaded(&server).await;
    let limiter = grouped("g", 5);
    let corrupt = limiter.redis_key(&key("corrupt"));
    let hash = limiter.redis_key(&key("hash"));
    let _: () = server.cmd(&["SET", &corrupt, "05", "PX", "600000"]).await;
    let _: () = server.cmd(&["HSET", &hash, "f", "v"]).await;
    let checks = [
        ("ok1", 1),
        ("corrupt", 1),
        ("hash", 2),
        ("ok2", 1),
        ("ok1", 1),
    ];
    let (outcomes, calls) = frozen_group(&mut server, &limiter, &conn, &checks).await;
    assert_eq!(calls, 2);
    assert!(matches!(outcomes[1], Ok(Decision::Allowed(_))));
    assert!(
        matches!(&outcomes[2], Err(Error::CorruptData { .. })),
        "{:?}",
        outcomes[2]
    );
    assert!(
        matches!(&outcomes[3], Err(Error::WrongType { .. })),
        "{:?}",
        outcomes[3]
    );
    assert_eq!(gist(outcomes[4].as_ref().unwrap()), ("allowed", 5, 4));
    assert_eq!(gist(outcomes[5].as_ref().unwrap()), ("allowed", 5, 3));
    // Nothing written to the bad counters.
    assert_eq!(server.cmd::<String>(&["GET", &corrupt]).await, "05");
    assert_eq!(
        server.cmd::<Vec<String>>(&["HGETALL", &hash]).await,
        vec!["f", "v"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_hold_under_a_flood() {
    let server = RedisServer::spawn().await;
    let conn = preloaded(&server).await;
    let limiter = FixedWindow::new("flood", Rate::new(redkit::nonzero!(50), WINDOW).unwrap())
        .unwrap()
        .grouped(GroupCommit::new(64, 4).unwrap());
    let before = server.evalsha_calls().await;
    let checks = (0..1200u32).map(|i| {
        let (limiter, mut c) = (limiter.clone(), conn.clone());
        async move {
            let k = format!("ip{}", i % 12);
            let d = limiter.check(&mut c, &key(&k)).await.unwrap();
            (k, d)
        }
    });
    let results = support::bounded(10, "1,200 checks answered", join_all(checks)).await;
    let calls = server.evalsha_calls().await - before;
    assert!(calls < 1200, "checks were grouped: {calls} calls");
    // Per key: exactly 50 allowed, each told a different count 1..=50; 50 limited.
    for k in 0..12 {
        let name = format!("ip{k}");
        let mut counts: Vec<u32> = results
            .iter()
            .filter(|(key, d)| *key == name && d.is_allowed())
            .map(|(_, d)| 50 - d.quota().remaining())
            .collect();
        counts.sort_unstable();
        assert_eq!(counts, (1..=50).collect::<Vec<_>>(), "{name}");
        let limited = results
            .iter()
            .filter(|(key, d)| *key == name && matches!(d, Decision::Limited { .. }))
            .count();
        assert_eq!(limited, 50, "{name}");
        let stored: String = server.cmd(&["GET", &limiter.redis_key(&key(&name))]).await;
        assert_eq!(stored, "50");
    }
}

/// `EVALSHA` calls answered so far by `nodes`, together.
async fn evalsha_on(nodes: &[&RedisServer]) -> u64 {
    let mut calls = 0;
    for node in nodes {
        calls += node.evalsha_calls().await;
    }
    calls
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_work_on_a_cluster() {
    let cluster = RedisCluster::spawn().await;
    let conn = cluster.conn().await;
    let limiter = FixedWindow::new("cl", Rate::new(redkit::nonzero!(3), WINDOW).unwrap())
        .unwrap()
        .grouped(GroupCommit::new(64, 1).unwrap());
    let primaries = cluster.primaries().await;
    // Two rounds: the first meets a group spanning slots (refused, then sent one by one).
    for round in 0..2 {
        let checks = (0..200u32).map(|i| {
            let (limiter, mut c) = (limiter.clone(), conn.clone());
            async move {
                let k = format!("r{round}k{}", i % 40);
                let d = limiter.check(&mut c, &key(&k)).await.unwrap();
                (k, d.is_allowed())
            }
        });
        let before = evalsha_on(&primaries).await;
        let results = support::bounded(10, "200 checks answered", join_all(checks)).await;
        let calls = evalsha_on(&primaries).await - before;
        for k in 0..40 {
            let name = format!("r{round}k{k}");
            let allowed = results.iter().filter(|(n, a)| *n == name && *a).count();
            assert_eq!(allowed, 3, "{name}");
        }
        // The second round's groups are formed per slot: five checks per key, all polled
        // before the first reply, so each key's first goes alone and its other four as ONE
        // group (2 calls a key, 80 seen). At most half the checks: groups did form.
        if round == 1 {
            assert!(
                calls <= 100,
                "{calls} EVALSHA for 200 checks on 40 keys: no groups formed"
            );
        }
    }
}

/// `fixed_window_group.v3` against `fixed_window.v9`, key by key, from the same states:
/// the same reply (count, allowed; the TTL within a second) or the same error, and the same
/// counter afterwards. Twice: every cost sent to both, then the states of cost 1 with no cost
/// sent to either (as the limiter sends them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_group_script_is_the_single_key_script_per_key() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let manager = ScriptManager::new();
    let single = Registry::global().require("fixed_window", 9).unwrap();
    let group = Registry::global().require("fixed_window_group", 3).unwrap();
    let limit = 3i64;
    // (name, setup of the key as a redis-cli line with `K` for the key, cost)
    let states: [(&str, &str, u32); 12] = [
        ("missing", "", 1),
        ("missing, cost 3", "", 3),
        ("missing, cost above the limit", "", 4),
        ("running", "SET K 1 PX 600000", 1),
        ("running, cost 2", "SET K 1 PX 600000", 2),
        ("at the limit", "SET K 3 PX 600000", 1),
        ("above the limit", "SET K 7 PX 600000", 1),
        ("no TTL", "SET K 1", 1),
        ("no TTL, limited", "SET K 3", 1),
        ("not canonical", "SET K 05 PX 600000", 1),
        ("negative", "SET K -1 PX 600000", 1),
        ("a hash", "HSET K f v", 1),
    ];
    let setup = |k: String, line: &str| {
        let args: Vec<String> = line
            .split_whitespace()
            .map(|a| if a == "K" { k.clone() } else { a.to_owned() })
            .collect();
        args
    };
    for send_costs in [true, false] {
        let states: Vec<(&str, &str, u32)> = states
            .iter()
            .copied()
            .filter(|(_, _, cost)| send_costs || *cost == 1)
            .collect();
        let mut gcall = Call::with_key_count(group, states.len());
        for (i, (_, line, _)) in states.iter().enumerate() {
            let (a, b) = (
                format!("single:{send_costs}:{i}"),
                format!("grp:{send_costs}:{i}"),
            );
            for k in [&a, &b] {
                if !line.is_empty() {
                    let args = setup(k.clone(), line);
                    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
                    let _: Value = server.cmd(&refs).await;
                }
            }
            gcall.key(b);
        }
        gcall.arg(limit).arg(600_000);
        if send_costs {
            for (_, _, cost) in &states {
                gcall.arg(*cost);
            }
        }
        let Value::Array(grouped) = manager.invoke::<Value, _>(&mut conn, &gcall).await.unwrap()
        else {
            panic!("not an array")
        };
        assert_eq!(grouped.len(), states.len());
        for (i, ((name, _, cost), got)) in states.iter().zip(grouped).enumerate() {
            let mut call = Call::new(single);
            call.key(format!("single:{send_costs}:{i}"))
                .arg(limit)
                .arg(600_000);
            if send_costs {
                call.arg(*cost);
            }
            let alone = manager.invoke::<Value, _>(&mut conn, &call).await;
            match (alone, got) {
                (Ok(a), g) => {
                    let (x, y) = (reply_gist(&a, limit), reply_gist(&g, limit));
                    assert_eq!((x.0, x.1), (y.0, y.1), "{name}: {a:?} vs {g:?}");
                    assert!((x.2 - y.2).abs() < 1000, "{name}: {a:?} vs {g:?}");
                }
                (Err(e), Value::BulkString(g)) => {
                    let text = String::from_utf8(g).unwrap();
                    let code = text.split(' ').next().unwrap().to_owned();
                    let expected = match e {
                        Error::CorruptData { .. } => "REDKIT_DATA",
                        Error::WrongType { .. } => "WRONGTYPE",
                        other => panic!("{name}: {other:?}"),
                    };
                    assert_eq!(code, expected, "{name}");
                }
                (a, g) => panic!("{name}: {a:?} vs {g:?}"),
            }
            // The same counter afterwards.
            for what in ["TYPE", "GET"] {
                let a = format!("single:{send_costs}:{i}");
                let b = format!("grp:{send_costs}:{i}");
                if what == "GET" && name == &"a hash" {
                    continue;
                }
                let x: Option<String> = server.cmd(&[what, &a]).await;
                let y: Option<String> = server.cmd(&[what, &b]).await;
                assert_eq!(x, y, "{name}: {what}");
            }
            let ta: i64 = server
                .cmd(&["PTTL", &format!("single:{send_costs}:{i}")])
                .await;
            let tb: i64 = server
                .cmd(&["PTTL", &format!("grp:{send_costs}:{i}")])
                .await;
            assert!(
                (ta - tb).abs() < 1000 && (ta < 0) == (tb < 0),
                "{name}: {ta} vs {tb}"
            );
        }
    }
}

/// `(count, allowed, ttl in ms)` of a single-key reply.
fn reply_gist(v: &Value, limit: i64) -> (i64, i64, i64) {
    let (count, ttl, allowed) = match v {
        Value::Int(p) if *p >= 0 => (p % (limit + 1), p / (limit + 1), 1),
        Value::Int(p) => {
            let v = -(p + 1);
            (v % (limit + 1), v / (limit + 1), 0)
        }
        Value::Array(items) => match items.as_slice() {
            [Value::Int(c), Value::Int(t), Value::Int(a)] => (*c, *t, *a),
            _ => panic!("{v:?}"),
        },
        _ => panic!("{v:?}"),
    };
    (count, allowed, ttl)
}

/// A grouped check, as a future to poll by hand.
type Check = std::pin::Pin<Box<dyn std::future::Future<Output = redkit::Result<Decision>> + Send>>;

/// A check of client `k` by `limiter` over `conn`.
fn check_of(
    limiter: &Grouped<FixedWindow>,
    conn: &MultiplexedConnection,
    k: &'static str,
) -> Check {
    let (limiter, mut c) = (limiter.clone(), conn.clone());
    Box::pin(async move { limiter.check(&mut c, &key(k)).await })
}

/// Freezes `server`, then lets a first check take its key's only slot and send its call,
/// which the frozen server holds: the checks made after it queue.
async fn frozen_with_a_call_in_flight(
    server: &mut RedisServer,
    limiter: &Grouped<FixedWindow>,
    conn: &MultiplexedConnection,
) -> tokio::task::JoinHandle<redkit::Result<Decision>> {
    server.pause().await;
    let first = tokio::spawn(check_of(limiter, conn, "first"));
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    first
}

/// A caller handed a group to lead but cancelled before it ran (an HTTP request dropped on
/// client disconnect while it waited) sent nothing: the other checks of that group go back
/// to the queue and are served, none of them gets an error, and the cancelled check is not
/// counted. Deterministic: the waiting checks are futures polled by hand, and the cancelled
/// one is dropped right after the first check's settlement handed it the group, before it
/// is polled again.
#[tokio::test(flavor = "current_thread")]
async fn a_cancelled_caller_handed_a_group_it_never_sent_passes_it_on() {
    let mut server = RedisServer::spawn().await;
    let conn = preloaded(&server).await;
    let limiter = grouped("g", 10);
    let before = server.evalsha_calls().await;
    // The first check takes the only slot and sends its call (the server is frozen).
    let first = frozen_with_a_call_in_flight(&mut server, &limiter, &conn).await;
    let check = |k: &'static str| check_of(&limiter, &conn, k);
    let (mut cancelled, mut w2, mut w3) = (check("cancelled"), check("w2"), check("w3"));
    // Each waits in the queue, in this order.
    for f in [&mut cancelled, &mut w2, &mut w3] {
        assert!(futures_util::poll!(f).is_pending());
    }
    server.resume().await;
    assert!(first.await.unwrap().unwrap().is_allowed());
    // The first call's settlement handed the group (cancelled, w2, w3) to `cancelled`.
    drop(cancelled);
    let (w2, w3) = tokio::join!(w2, w3);
    assert_eq!(gist(&w2.unwrap()), ("allowed", 10, 9));
    assert_eq!(gist(&w3.unwrap()), ("allowed", 10, 9));
    assert_eq!(
        server.evalsha_calls().await - before,
        2,
        "the first check's call, then ONE for w2 and w3"
    );
    let cancelled_key = limiter.redis_key(&key("cancelled"));
    assert_eq!(server.cmd::<i64>(&["EXISTS", &cancelled_key]).await, 0);
}

/// A caller cancelled while it waited in the queue (not handed anything) is forgotten: the
/// batch that would have held it goes without it, and its check never reaches Redis.
/// Deterministic as above: the queued checks are futures polled by hand.
#[tokio::test(flavor = "current_thread")]
async fn a_caller_cancelled_while_queued_is_never_sent() {
    let mut server = RedisServer::spawn().await;
    let conn = preloaded(&server).await;
    let limiter = grouped("q", 10);
    let before = server.evalsha_calls().await;
    // The first check takes the only slot and sends its call (the server is frozen).
    let first = frozen_with_a_call_in_flight(&mut server, &limiter, &conn).await;
    let check = |k: &'static str| check_of(&limiter, &conn, k);
    let (mut w1, mut gone, mut w3) = (check("w1"), check("gone"), check("w3"));
    for f in [&mut w1, &mut gone, &mut w3] {
        assert!(futures_util::poll!(f).is_pending());
    }
    // Gone while queued behind w1, before any batch was handed on.
    drop(gone);
    server.resume().await;
    assert!(first.await.unwrap().unwrap().is_allowed());
    let (w1, w3) = tokio::join!(w1, w3);
    assert_eq!(gist(&w1.unwrap()), ("allowed", 10, 9));
    assert_eq!(gist(&w3.unwrap()), ("allowed", 10, 9));
    assert_eq!(
        server.evalsha_calls().await - before,
        2,
        "the first check's call, then ONE for w1 and w3"
    );
    let gone_key = limiter.redis_key(&key("gone"));
    assert_eq!(server.cmd::<i64>(&["EXISTS", &gone_key]).await, 0);
}

/// A batch handed on counts as its key's call in flight: with one call in flight allowed, a
/// check arriving while that batch's call is out queues behind it instead of sending a call
/// of its own. Deterministic: futures polled by hand on a frozen server; what reached the
/// server is read from its unread bytes, with a `PING` on the same connection as the marker
/// (the multiplexer writes in order, so anything the check sent would come before it).
#[tokio::test(flavor = "current_thread")]
async fn a_batch_handed_on_counts_as_its_keys_call_in_flight() {
    let mut server = RedisServer::spawn().await;
    let conn = preloaded(&server).await;
    let limiter = grouped("h", 10);
    // The first check takes the only slot and sends its call (the server is frozen).
    let first = frozen_with_a_call_in_flight(&mut server, &limiter, &conn).await;
    let check = |k: &'static str| check_of(&limiter, &conn, k);
    let (mut w1, mut w2) = (check("w1"), check("w2"));
    for f in [&mut w1, &mut w2] {
        assert!(futures_util::poll!(f).is_pending());
    }
    server.resume().await;
    assert!(first.await.unwrap().unwrap().is_allowed());
    // The settlement handed the batch (w1, w2) to w1: sent now, on a frozen server.
    server.pause().await;
    let unread = server.unread_bytes();
    assert!(futures_util::poll!(&mut w1).is_pending());
    server.wait_unread_above(unread).await;
    let sent = server.unread_bytes();
    // A newcomer while that call is out: it must wait, not lead a second call.
    let mut late = check("late");
    for _ in 0..3 {
        assert!(futures_util::poll!(&mut late).is_pending());
        tokio::task::yield_now().await;
    }
    let (arrived, ping) = server.bytes_through_a_ping(sent, &conn).await;
    assert_eq!(
        arrived,
        support::PING_BYTES,
        "only the PING reached the server: the late check sent nothing of its own"
    );
    server.resume().await;
    assert_eq!(ping.await.unwrap().unwrap(), "PONG");
    let (w1, w2, late) = tokio::join!(w1, w2, late);
    for d in [w1, w2, late] {
        assert!(d.unwrap().is_allowed());
    }
}

/// The Functions backend (`FCALL` instead of `EVALSHA`): groups form and counts hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_work_with_the_functions_backend() {
    use redkit::script::Backend;
    let server = RedisServer::spawn().await;
    let conn = server.conn().await;
    let fcalls = || async {
        let stats: String = server.cmd(&["INFO", "commandstats"]).await;
        stats
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_fcall:calls="))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let limiter = FixedWindow::new("fn", Rate::new(redkit::nonzero!(20), WINDOW).unwrap())
        .unwrap()
        .with_manager(ScriptManager::new().with_backend(Backend::Functions))
        .grouped(GroupCommit::new(64, 1).unwrap());
    // The library is loaded by the first call.
    let mut c = conn.clone();
    assert!(limiter
        .check(&mut c, &key("warm"))
        .await
        .unwrap()
        .is_allowed());
    let before = fcalls().await;
    let checks = (0..300u32).map(|i| {
        let (limiter, mut c) = (limiter.clone(), conn.clone());
        async move {
            let k = format!("k{}", i % 10);
            (k.clone(), limiter.check(&mut c, &key(&k)).await.unwrap())
        }
    });
    let results = support::bounded(10, "300 checks answered", join_all(checks)).await;
    let calls = fcalls().await - before;
    assert!(calls > 0 && calls < 300, "grouped FCALLs: {calls}");
    assert_eq!(server.evalsha_calls().await, 0, "no EVALSHA with Functions");
    for k in 0..10 {
        let name = format!("k{k}");
        let allowed = results
            .iter()
            .filter(|(n, d)| *n == name && d.is_allowed())
            .count();
        assert_eq!(allowed, 20, "{name}");
    }
}

/// A frozen server (SIGSTOP) past the connection's response timeout: the first check and
/// the group queued behind it each end with an "unavailable" error in bounded time (none is
/// told allowed or limited without Redis having answered, none hangs), and the limiter
/// serves again once the server is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_server_fails_every_check_of_a_group_in_bounded_time() {
    let mut server = RedisServer::spawn().await;
    let conn = preloaded(&server).await; // redis-rs's response timeout: 500 ms
    let limiter = grouped("frozen", 10);
    server.pause().await;
    let started = std::time::Instant::now();
    let checks = join_all((0..6).map(|i| {
        let (limiter, mut c) = (limiter.clone(), conn.clone());
        async move { limiter.check(&mut c, &key(&format!("c{i}"))).await }
    }));
    let outcomes = support::bounded(10, "six checks answered (timed out)", checks).await;
    let took = started.elapsed();
    server.resume().await;
    for outcome in &outcomes {
        assert!(
            matches!(outcome, Err(e) if e.is_unavailable()),
            "{outcome:?}"
        );
    }
    // Two calls timed out one after the other: the first, then the group of five.
    assert!(took < Duration::from_secs(5), "{took:?}");
    let mut c = conn.clone();
    assert!(limiter
        .check(&mut c, &key("after"))
        .await
        .unwrap()
        .is_allowed());
}

/// `fixed_window_aligned_group.v4` against `fixed_window_aligned.v3`, key by key, from the
/// same states: the same reply (one integer) or the same error, and the same counter after.
/// Four times: every cost sent to both, then the states of cost 1 with no cost sent to either
/// (as the limiter sends them); each with a TTL per check, then with one TTL for the group
/// (each state's TTL made that one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_aligned_group_script_is_the_aligned_script_per_key() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let manager = ScriptManager::new();
    let single = Registry::global()
        .require("fixed_window_aligned", 3)
        .unwrap();
    let group = Registry::global()
        .require("fixed_window_aligned_group", 4)
        .unwrap();
    let limit = 3i64;
    // (name, setup with `K` for the key, TTL for a new counter, cost)
    let states: [(&str, &str, u64, u32); 12] = [
        ("missing", "", 60_000, 1),
        ("missing, cost 3", "", 61_000, 3),
        ("missing, cost above the limit", "", 60_000, 4),
        ("running", "SET K 1 PX 600000", 60_000, 1),
        ("running, cost 2", "SET K 1 PX 600000", 60_000, 2),
        ("at the limit", "SET K 3 PX 600000", 60_000, 1),
        (
            "above the limit, cost above it",
            "SET K 7 PX 600000",
            60_000,
            5,
        ),
        ("holding 0", "SET K 0", 62_000, 1),
        ("not canonical", "SET K 05 PX 600000", 60_000, 1),
        ("not canonical, cost above the limit", "SET K 05", 60_000, 4),
        ("negative", "SET K -1 PX 600000", 60_000, 1),
        ("a hash", "HSET K f v", 60_000, 1),
    ];
    for (send_costs, one_ttl) in [(true, false), (false, false), (true, true), (false, true)] {
        let run = format!("{send_costs}:{one_ttl}");
        let states: Vec<(&str, &str, u64, u32)> = states
            .iter()
            .copied()
            .filter(|(_, _, _, cost)| send_costs || *cost == 1)
            .map(|(name, line, ttl, cost)| (name, line, if one_ttl { 63_000 } else { ttl }, cost))
            .collect();
        let mut gcall = Call::with_key_count(group, states.len());
        for (i, (_, line, _, _)) in states.iter().enumerate() {
            for k in [format!("one:{run}:{i}"), format!("grp:{run}:{i}")] {
                if !line.is_empty() {
                    let args: Vec<String> = line
                        .split_whitespace()
                        .map(|a| if a == "K" { k.clone() } else { a.to_owned() })
                        .collect();
                    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
                    let _: Value = server.cmd(&refs).await;
                }
            }
            gcall.key(format!("grp:{run}:{i}"));
        }
        gcall.arg(limit);
        if one_ttl {
            gcall.arg(63_000);
        } else {
            for (_, _, ttl, _) in &states {
                gcall.arg(*ttl);
            }
        }
        if send_costs {
            for (_, _, _, cost) in &states {
                gcall.arg(*cost);
            }
        }
        let Value::Array(grouped) = manager.invoke::<Value, _>(&mut conn, &gcall).await.unwrap()
        else {
            panic!("not an array")
        };
        assert_eq!(grouped.len(), states.len());
        for (i, ((name, _, ttl, cost), got)) in states.iter().zip(grouped).enumerate() {
            let mut call = Call::new(single);
            call.key(format!("one:{run}:{i}")).arg(limit).arg(*ttl);
            if send_costs {
                call.arg(*cost);
            }
            match (manager.invoke::<Value, _>(&mut conn, &call).await, got) {
                (Ok(a), g) => assert_eq!(a, g, "{name}"),
                (Err(e), Value::BulkString(g)) => {
                    let text = String::from_utf8(g).unwrap();
                    let expected = match e {
                        Error::CorruptData { .. } => "REDKIT_DATA",
                        Error::WrongType { .. } => "WRONGTYPE",
                        other => panic!("{name}: {other:?}"),
                    };
                    assert_eq!(text.split(' ').next(), Some(expected), "{name}");
                }
                (a, g) => panic!("{name}: {a:?} vs {g:?}"),
            }
            let (a, b) = (format!("one:{run}:{i}"), format!("grp:{run}:{i}"));
            let ta: String = server.cmd(&["TYPE", &a]).await;
            let tb: String = server.cmd(&["TYPE", &b]).await;
            assert_eq!(ta, tb, "{name}");
            if ta == "string" {
                let va: String = server.cmd(&["GET", &a]).await;
                let vb: String = server.cmd(&["GET", &b]).await;
                assert_eq!(va, vb, "{name}");
            }
            let pa: i64 = server.cmd(&["PTTL", &a]).await;
            let pb: i64 = server.cmd(&["PTTL", &b]).await;
            assert!(
                (pa - pb).abs() < 1000 && (pa < 0) == (pb < 0),
                "{name}: {pa} vs {pb}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aligned_windows_group_too() {
    let mut server = RedisServer::spawn().await;
    let conn = preloaded(&server).await;
    // Day-long windows: no window edge passes during the test (but at midnight UTC).
    const DAY: Duration = Duration::from_secs(86_400);
    let limiter = AlignedWindow::new("al", Rate::new(redkit::nonzero!(3), DAY).unwrap())
        .unwrap()
        .grouped(GroupCommit::new(64, 1).unwrap());
    let (outcomes, calls) = frozen_group(&mut server, &limiter, &conn, &CHECKS).await;
    assert_eq!(
        calls, 2,
        "the first alone, then ONE call for the nine queued"
    );
    let alone = AlignedWindow::new("al-s", Rate::new(redkit::nonzero!(3), DAY).unwrap()).unwrap();
    let mut c = conn.clone();
    let mut expected = Vec::new();
    for (k, cost) in std::iter::once(("first", 1)).chain(CHECKS) {
        expected.push(gist(
            &alone
                .check_n(&mut c, &key(k), support::nz(cost))
                .await
                .unwrap(),
        ));
    }
    let got: Vec<_> = outcomes.iter().map(|o| gist(o.as_ref().unwrap())).collect();
    assert_eq!(got, expected);
    assert_eq!(got[5], ("limited", 3, 0));
    // A new counter got its TTL: the window's end plus the grace, at most.
    let ttl: i64 = server.cmd(&["PTTL", &limiter.redis_key(&key("a"))]).await;
    assert!(ttl > 0 && ttl <= 86_405_000, "{ttl}");
}

/// `rejected_calls` of `command` so far (`INFO commandstats`): calls the server refused before
/// running them (here: an ACL denial).
async fn rejected_calls(server: &RedisServer, command: &str) -> u64 {
    let stats: String = server.cmd(&["INFO", "commandstats"]).await;
    let prefix = format!("cmdstat_{command}:");
    stats
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|fields| {
            fields
                .split(',')
                .find_map(|f| f.strip_prefix("rejected_calls="))
        })
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// A group refused whole for another reason than spanning hash slots fails each of its
/// checks with that error and is NOT re-sent check by check (only a `CROSSSLOT` refusal is,
/// since nothing ran): a user denied `EVALSHA` sends the first check and the queued group as
/// two rejected calls, not one per check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_refused_whole_is_not_resent_check_by_check() {
    let mut server = RedisServer::spawn().await;
    let _ = preloaded(&server).await;
    let conn = support::denied_conn(&server, "evalsha").await;
    let limiter = grouped("g", 3);
    let before = rejected_calls(&server, "evalsha").await;
    let (outcomes, answered) = frozen_group(&mut server, &limiter, &conn, &CHECKS).await;
    let rejected = rejected_calls(&server, "evalsha").await - before;
    assert_eq!(answered, 0, "no EVALSHA ran");
    assert_eq!(outcomes.len(), CHECKS.len() + 1);
    for outcome in &outcomes {
        match outcome {
            Err(Error::PermissionDenied { detail, .. }) => {
                assert!(detail.contains("evalsha"), "{detail}")
            }
            other => panic!("every check fails with the refusal: {other:?}"),
        }
    }
    assert_eq!(
        rejected, 2,
        "the first check alone, then ONE call for the nine queued (not one per check)"
    );
    // Nothing counted.
    for (k, _) in CHECKS {
        let redis_key = limiter.redis_key(&key(k));
        assert_eq!(server.cmd::<i64>(&["EXISTS", &redis_key]).await, 0, "{k}");
    }
}

/// Bad arguments to the aligned group script (a count of them that is none of its forms, a
/// limit, TTL or cost out of range or not a number) refuse the whole call with
/// `InvalidInput` before anything is written, in the one-TTL form and in the per-check form.
#[tokio::test]
async fn the_aligned_group_script_refuses_bad_arguments_and_writes_nothing() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let manager = ScriptManager::new();
    let group = Registry::global()
        .require("fixed_window_aligned_group", 4)
        .unwrap();
    let keys = ["bad:1", "bad:2", "bad:3"];
    let call = |args: &[&str]| {
        let mut call = Call::with_key_count(group, keys.len());
        for key in keys {
            call.key(key);
        }
        for arg in args {
            call.arg(*arg);
        }
        call
    };
    // Three keys: 2 (one TTL), 5 (one TTL, costs), 4 (TTLs), 7 (TTLs, costs) arguments.
    let cases: &[&[&str]] = &[
        &["5"],
        &["5", "60000", "1"],
        &["5", "60000", "1", "1", "1", "1"],
        &["5", "60000", "60000", "60000", "1", "1", "1", "1"],
        &["0", "60000"],
        &["x", "60000"],
        &["5", "0"],
        &["5", "-1"],
        &["5", "1.5"],
        &["5", "x"],
        &["5", "9007199254740992"],
        &["5", "60000", "60000", "0"],
        &["5", "60000", "1", "05", "1"],
        &["5", "60000", "1", "0", "1"],
        &["5", "60000", "60000", "60000", "1", "1", "x"],
    ];
    for args in cases {
        let r = manager.invoke::<Value, _>(&mut conn, &call(args)).await;
        assert!(
            matches!(r, Err(Error::InvalidInput { .. })),
            "{args:?}: {r:?}"
        );
        let written: i64 = server.cmd(&["EXISTS", keys[0], keys[1], keys[2]]).await;
        assert_eq!(written, 0, "{args:?}");
    }
    // The forms themselves run.
    for args in [
        &["5", "60000"][..],
        &["5", "60000", "1", "2", "1"],
        &["5", "60000", "60000", "60000"],
        &["5", "60000", "60000", "60000", "1", "1", "1"],
    ] {
        let r = manager.invoke::<Value, _>(&mut conn, &call(args)).await;
        assert!(
            matches!(&r, Ok(Value::Array(items)) if items.len() == 3),
            "{args:?}: {r:?}"
        );
    }
}
