//! Group commit of hot SKUs (`InventoryBuilder::with_group_commit`) against real Redis: the same
//! per-buyer outcomes as one call each (compared with a sequential run of the ungrouped
//! store), no oversell under 512 concurrent buyers, request ids honoured across the grouped
//! and the single script, a failing group changes nothing and every member sees the error, a
//! cancelled leader does not strand its group, and a Cluster run.
//!
//! A group is forced by freezing the server (SIGSTOP) while the first caller's call is in
//! flight: every caller polled meanwhile queues behind it, and `INFO commandstats` shows the
//! whole queue settled by ONE more `EVALSHA`.

mod support;

use std::time::Duration;

use futures_util::future::join_all;
use redis::aio::MultiplexedConnection;
use redkit::inventory::{Decrement, Inventory, Store};
use redkit::{Error, GroupCommit};
use support::{RedisCluster, RedisServer};

const PREFIX: &str = "t:hot";

/// Asserts that every outcome of `outcomes` matches `pattern` (`context` names the case).
macro_rules! assert_every {
    ($outcomes:expr, $pattern:pat, $context:expr) => {
        for outcome in $outcomes {
            assert!(matches!(outcome, $pattern), "{}: {outcome:?}", $context);
        }
    };
}

/// Group commit with ONE call of a SKU in flight: batches go strictly in arrival order, so
/// every buyer queued behind a frozen first call joins one group.
fn hot() -> Inventory {
    hot_pipelined(1)
}

/// Group commit as a user gets it who switches it on with the default settings.
fn hot_default() -> Inventory {
    let inventory = Inventory::builder()
        .prefix(PREFIX)
        .with_group_commit(GroupCommit::default())
        .build()
        .unwrap();
    let settings = inventory.group_commit().unwrap();
    assert_eq!(settings.max_in_flight(), 8, "the README's default");
    assert_eq!(settings.max_batch(), 256);
    inventory
}

fn plain() -> Inventory {
    Inventory::new(PREFIX).unwrap()
}

async fn preloaded(server: &RedisServer) -> MultiplexedConnection {
    preload(server.conn().await).await
}

/// `conn`, with redkit's scripts loaded on its server.
async fn preload(mut conn: MultiplexedConnection) -> MultiplexedConnection {
    redkit::ScriptManager::new()
        .preload(&mut conn)
        .await
        .unwrap();
    conn
}

/// A store of `inventory` with `stock` units of `mug`, and a preloaded connection.
async fn hot_mug(
    server: &RedisServer,
    inventory: Inventory,
    stock: u64,
) -> (Store, MultiplexedConnection) {
    mug_on(preloaded(server).await, inventory, stock).await
}

/// [`hot_mug`] over `conn` (already preloaded).
async fn mug_on(
    conn: MultiplexedConnection,
    inventory: Inventory,
    stock: u64,
) -> (Store, MultiplexedConnection) {
    let store = inventory.store("w1").unwrap();
    store.set(&mut conn.clone(), "mug", stock).await.unwrap();
    (store, conn)
}

type Bought = (u64, Option<String>, Decrement);

/// Units sold by `results`; checks every refusal was truly short.
fn sold(results: &[Bought]) -> u64 {
    let mut sold = 0;
    for (quantity, _, outcome) in results {
        match outcome {
            Decrement::Decremented { .. } => sold += quantity,
            Decrement::Insufficient { available } => assert!(available < quantity),
            other => panic!("{other:?}"),
        }
    }
    sold
}

/// Every buyer with an id, retried through the ungrouped store, is answered its outcome.
async fn replay<C: redis::aio::ConnectionLike>(store: &Store, conn: &mut C, results: Vec<Bought>) {
    let store = plain().store(store.id()).unwrap();
    for (quantity, id, outcome) in results {
        let Some(id) = id else { continue };
        let again = store
            .decrement(conn, "mug", quantity, Some(&id))
            .await
            .unwrap();
        assert_eq!(again.original(), Some(&outcome), "{id}");
    }
}

/// `(quantity, request id)` of each buyer after the first (who buys 1 without an id).
const BUYERS: [(u64, Option<&str>); 11] = [
    (5, Some("a")),
    (3, None),
    (7, Some("b")),
    (5, Some("a")), // the same request again: Duplicate of a
    (9, None),      // 4 left: Insufficient
    (3, Some("d")), // Decremented, 1 left
    (2, Some("b")), // b for another quantity: IdReused
    (2, None),      // 1 left: Insufficient
    (1, Some("e")), // Decremented, 0 left
    (1, Some("f")), // Insufficient, recorded
    (1, Some("f")), // Duplicate of an Insufficient
];

/// Runs the first buyer and then `buyers` while the server is frozen, so that all of
/// `buyers` queue behind the first; returns every outcome (first buyer first) and the
/// `EVALSHA` calls the server answered for them.
async fn frozen_group(
    server: &mut RedisServer,
    store: &Store,
    conn: &MultiplexedConnection,
    sku: &str,
    buyers: &[(u64, Option<&str>)],
) -> (Vec<redkit::Result<Decrement>>, u64) {
    frozen_group_polled(server, store, conn, sku, buyers, 1).await
}

/// [`frozen_group`], resumed only once the buyers were polled `polls` times (2 when a
/// gathering leader must send its batch first: it yields once before sending) and the first
/// call has reached the frozen server.
async fn frozen_group_polled(
    server: &mut RedisServer,
    store: &Store,
    conn: &MultiplexedConnection,
    sku: &str,
    buyers: &[(u64, Option<&str>)],
    polls: u32,
) -> (Vec<redkit::Result<Decrement>>, u64) {
    let before = server.evalsha_calls().await;
    server.pause().await;
    let calls = std::iter::once((1, None))
        .chain(buyers.iter().copied())
        .map(|(quantity, id)| {
            let mut c = conn.clone();
            async move { store.decrement(&mut c, sku, quantity, id).await }
        });
    // join_all polls in order: the first call is sent, the others queue in this order (all
    // in its first poll).
    let mut all = join_all(calls);
    let polled = std::cell::Cell::new(0u32);
    let counted = std::future::poll_fn(|cx| {
        let r = std::future::Future::poll(std::pin::Pin::new(&mut all), cx);
        polled.set(polled.get() + 1);
        r
    });
    let unread = server.unread_bytes();
    let (outcomes, ()) = support::bounded(10, "the group's buyers answered", async {
        tokio::join!(counted, async {
            server.wait_unread_above(unread).await;
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while polled.get() < polls {
                assert!(
                    std::time::Instant::now() < deadline,
                    "not polled {polls} times"
                );
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            server.resume().await;
        })
    })
    .await;
    let after = server.evalsha_calls().await;
    (outcomes, after - before)
}

/// The outcomes of the first buyer (1, no id) and then `buyers`, sent one call each in order
/// through `store`: the reference a group's outcomes are compared with.
async fn one_by_one(
    store: &Store,
    conn: &mut MultiplexedConnection,
    buyers: &[(u64, Option<&str>)],
) -> Vec<Decrement> {
    let mut outcomes = Vec::new();
    for &(quantity, id) in std::iter::once(&(1, None)).chain(buyers) {
        outcomes.push(store.decrement(conn, "mug", quantity, id).await.unwrap());
    }
    outcomes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_answers_each_buyer_as_if_sent_alone() {
    let mut server = RedisServer::spawn().await;
    let conn = preloaded(&server).await;
    let mut c = conn.clone();
    let grouped = hot().store("w1").unwrap();
    let sequential = plain().store("w2").unwrap();
    grouped.set(&mut c, "mug", 20).await.unwrap();
    sequential.set(&mut c, "mug", 20).await.unwrap();

    let (outcomes, calls) = frozen_group(&mut server, &grouped, &conn, "mug", &BUYERS).await;
    assert_eq!(
        calls, 2,
        "the first alone, then ONE call for the eleven queued"
    );

    // The reference: the same buyers one call each, in the same order.
    let expected = one_by_one(&sequential, &mut c, &BUYERS).await;
    let outcomes: Vec<Decrement> = outcomes.into_iter().map(Result::unwrap).collect();
    assert_eq!(outcomes, expected);
    let remaining = |r| Decrement::Decremented { remaining: r };
    let short = |a| Decrement::Insufficient { available: a };
    assert_eq!(outcomes[0], remaining(19));
    assert_eq!(outcomes[1], remaining(14));
    assert_eq!(outcomes[4].original(), Some(&remaining(14)));
    assert_eq!(outcomes[5], short(4));
    assert_eq!(outcomes[7], Decrement::IdReused);
    assert_eq!(outcomes[10], short(0));
    assert_eq!(outcomes[11].original(), Some(&short(0)));
    assert_eq!(grouped.stock(&mut c, "mug").await.unwrap(), 0);

    // The records the group wrote answer retries through the ungrouped script, and the other
    // way round: the same text in both.
    for (quantity, id) in BUYERS {
        let Some(id) = id else { continue };
        let first = BUYERS.iter().position(|b| b.1 == Some(id)).unwrap() + 1;
        let original = outcomes[first].clone();
        for inventory in [plain(), hot()] {
            let again = inventory
                .store("w1")
                .unwrap()
                .decrement(&mut c, "mug", quantity, Some(id))
                .await
                .unwrap();
            if quantity == BUYERS[first - 1].0 {
                assert_eq!(again.original(), Some(&original), "{id}");
            } else {
                assert_eq!(again, Decrement::IdReused, "{id}");
            }
        }
    }
    assert_eq!(grouped.stock(&mut c, "mug").await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_that_fails_changes_nothing_and_every_member_sees_the_error() {
    let mut server = RedisServer::spawn().await;
    let (store, conn) = hot_mug(&server, hot(), 20).await;
    let mut c = conn.clone();
    let key = store.key("mug").unwrap();
    // A recorded request, so the snapshot holds a record too.
    store
        .decrement(&mut c, "mug", 1, Some("old"))
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("05")
        .query_async(&mut c)
        .await
        .unwrap();
    let before = support::snapshot(&mut c).await;
    let (outcomes, calls) = frozen_group(&mut server, &store, &conn, "mug", &BUYERS).await;
    assert_eq!(calls, 2);
    assert_eq!(outcomes.len(), 12);
    assert_every!(outcomes, Err(Error::CorruptData { .. }), "poisoned stock");
    support::same_dumps(&before, &support::snapshot(&mut c).await, "poisoned stock");

    // A user who may not run DECRBY: refused before the first write (the record's SET).
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg(20)
        .query_async(&mut c)
        .await
        .unwrap();
    let denied = support::denied_conn(&server, "decrby").await;
    let before = support::snapshot(&mut c).await;
    let (outcomes, calls) = frozen_group(&mut server, &store, &denied, "mug", &BUYERS).await;
    assert_eq!(calls, 2);
    assert_every!(outcomes, Err(Error::PermissionDenied { .. }), "no DECRBY");
    support::same_dumps(&before, &support::snapshot(&mut c).await, "no DECRBY");
    assert_eq!(store.stock(&mut c, "mug").await.unwrap(), 20);

    // An unknown SKU: every member NotFound, nothing written.
    let (outcomes, _) = frozen_group(&mut server, &store, &conn, "nope", &BUYERS).await;
    assert_every!(outcomes, Err(Error::NotFound { .. }), "unknown sku");
    support::same_dumps(&before, &support::snapshot(&mut c).await, "unknown sku");

    // A user who may not run SET: the group's first write (a request record's SET, run under
    // pcall) is refused, so every member of the group sees the denial and nothing of the
    // group is written. The lone first call (no request id: no SET) goes through.
    let denied = support::denied_conn(&server, "set").await;
    let (outcomes, calls) = frozen_group(&mut server, &store, &denied, "mug", &BUYERS).await;
    assert_eq!(calls, 2);
    assert!(
        matches!(outcomes[0], Ok(Decrement::Decremented { remaining: 19 })),
        "{:?}",
        outcomes[0]
    );
    assert_every!(
        &outcomes[1..],
        Err(Error::PermissionDenied { .. }),
        "no SET"
    );
    assert_eq!(store.stock(&mut c, "mug").await.unwrap(), 19);
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg(20)
        .query_async(&mut c)
        .await
        .unwrap();
    support::same_dumps(&before, &support::snapshot(&mut c).await, "no SET");
}

/// Buyers without request ids (the group script's fast path: no records), after a first
/// buyer of 1: with 20 in stock, 19 -> 14 -> 11, 9 short, 2 -> 9, 12 short, 9 -> 0, 1 short.
const ANONYMOUS: [(u64, Option<&str>); 7] = [
    (5, None),
    (3, None),
    (12, None),
    (2, None),
    (12, None),
    (9, None),
    (1, None),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_without_request_ids_answers_each_buyer_as_if_sent_alone() {
    let mut server = RedisServer::spawn().await;
    let conn = preloaded(&server).await;
    let mut c = conn.clone();
    let grouped = hot().store("w1").unwrap();
    let sequential = plain().store("w2").unwrap();
    let remaining = |r| Decrement::Decremented { remaining: r };
    let short = |a| Decrement::Insufficient { available: a };
    // 20: some members are short (the script settles them and puts back what they did not
    // take); 1000: every member is served; 0: nobody is.
    for stock in [20, 1000, 0] {
        grouped.set(&mut c, "mug", stock).await.unwrap();
        sequential.set(&mut c, "mug", stock).await.unwrap();
        let (outcomes, calls) = frozen_group(&mut server, &grouped, &conn, "mug", &ANONYMOUS).await;
        assert_eq!(
            calls, 2,
            "the first alone, then ONE call for the seven queued"
        );
        let expected = one_by_one(&sequential, &mut c, &ANONYMOUS).await;
        let outcomes: Vec<Decrement> = outcomes.into_iter().map(Result::unwrap).collect();
        assert_eq!(outcomes, expected, "stock {stock}");
        assert_eq!(
            grouped.stock(&mut c, "mug").await.unwrap(),
            sequential.stock(&mut c, "mug").await.unwrap(),
            "stock {stock}"
        );
        if stock == 20 {
            assert_eq!(
                outcomes,
                [
                    remaining(19),
                    remaining(14),
                    remaining(11),
                    short(11),
                    remaining(9),
                    short(9),
                    remaining(0),
                    short(0)
                ]
            );
        }
    }
    assert_eq!(grouped.stock(&mut c, "mug").await.unwrap(), 0);
}

/// A group of buyers of 1 without request ids (a flash sale's common call) sends no
/// quantities (`inventory_group.v7` then counts 1 per member; read from the server's slow
/// log), and each buyer is answered as if sent alone: all served, some short, none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_of_single_units_sends_no_quantities_and_answers_each_as_alone() {
    let mut server = RedisServer::spawn().await;
    let conn = preloaded(&server).await;
    let mut c = conn.clone();
    let grouped = hot().store("w1").unwrap();
    let sequential = plain().store("w2").unwrap();
    let ones = [(1, None); 7];
    let group_sha = redkit::Registry::global()
        .require("inventory_group", 7)
        .unwrap()
        .sha1()
        .to_owned();
    for stock in [20, 5, 0] {
        grouped.set(&mut c, "mug", stock).await.unwrap();
        sequential.set(&mut c, "mug", stock).await.unwrap();
        let _: () = server
            .cmd(&["CONFIG", "SET", "slowlog-log-slower-than", "0"])
            .await;
        let _: () = server.cmd(&["SLOWLOG", "RESET"]).await;
        let (outcomes, calls) = frozen_group(&mut server, &grouped, &conn, "mug", &ones).await;
        let _: () = server
            .cmd(&["CONFIG", "SET", "slowlog-log-slower-than", "10000"])
            .await;
        assert_eq!(
            calls, 2,
            "the first alone, then ONE call for the seven queued"
        );
        // Each slow log entry: [id, time, duration, [command, args..], ..].
        let log: Vec<Vec<redis::Value>> = server.cmd(&["SLOWLOG", "GET", "100"]).await;
        let group_calls: Vec<Vec<String>> = log
            .iter()
            .filter_map(|entry| match entry.get(3) {
                Some(redis::Value::Array(args)) => Some(
                    args.iter()
                        .map(|a| redis::from_redis_value::<String>(a.clone()).unwrap())
                        .collect::<Vec<String>>(),
                ),
                _ => None,
            })
            .filter(|args| args.get(1).map(String::as_str) == Some(group_sha.as_str()))
            .collect();
        assert_eq!(group_calls.len(), 1, "stock {stock}: {group_calls:?}");
        // EVALSHA sha 3 stock holds expiry '0' 7: no quantities.
        assert_eq!(
            group_calls[0].len(),
            8,
            "stock {stock}: {:?}",
            group_calls[0]
        );
        assert_eq!(group_calls[0][6..], ["0", "7"], "stock {stock}");
        let expected = one_by_one(&sequential, &mut c, &ones).await;
        let outcomes: Vec<Decrement> = outcomes.into_iter().map(Result::unwrap).collect();
        assert_eq!(outcomes, expected, "stock {stock}");
        assert_eq!(
            grouped.stock(&mut c, "mug").await.unwrap(),
            sequential.stock(&mut c, "mug").await.unwrap(),
            "stock {stock}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_without_request_ids_that_fails_changes_nothing() {
    let mut server = RedisServer::spawn().await;
    let (store, conn) = hot_mug(&server, hot(), 20).await;
    let mut c = conn.clone();
    let key = store.key("mug").unwrap();
    // Stored stocks the script refuses: forms DECRBY will not parse, and integers it parses
    // but outside 0..=99999999999999 (taken, then put back, then refused on the strict path).
    for bad in [
        "05",
        "abc",
        "1e3",
        "-3",
        "100000000000000",
        "-9223372036854775800",
    ] {
        let _: () = server.cmd(&["SET", &key, bad]).await;
        let before = support::snapshot(&mut c).await;
        let (outcomes, calls) = frozen_group(&mut server, &store, &conn, "mug", &ANONYMOUS).await;
        assert_eq!(calls, 2, "{bad}");
        assert_every!(outcomes, Err(Error::CorruptData { .. }), bad);
        support::same_dumps(&before, &support::snapshot(&mut c).await, bad);
    }

    // A hash where the stock should be: WRONGTYPE for every member.
    let _: () = server.cmd(&["DEL", &key]).await;
    let _: u64 = server.cmd(&["HSET", &key, "a", "1"]).await;
    let before = support::snapshot(&mut c).await;
    let (outcomes, _) = frozen_group(&mut server, &store, &conn, "mug", &ANONYMOUS).await;
    assert_every!(outcomes, Err(Error::WrongType { .. }), "hash");
    support::same_dumps(&before, &support::snapshot(&mut c).await, "hash");

    // A user who may not run DECRBY (the fast path's only write) or EXISTS (its only read):
    // refused, nothing written, every member told.
    let _: () = server.cmd(&["DEL", &key]).await;
    let _: () = server.cmd(&["SET", &key, "20"]).await;
    let before = support::snapshot(&mut c).await;
    let denied = support::denied_conn(&server, "decrby").await;
    let (outcomes, _) = frozen_group(&mut server, &store, &denied, "mug", &ANONYMOUS).await;
    assert_every!(
        outcomes,
        Err(Error::PermissionDenied { .. }),
        "no DECRBY, no ids"
    );
    support::same_dumps(&before, &support::snapshot(&mut c).await, "no DECRBY");
    let no_exists = support::denied_conn(&server, "exists").await;
    let (outcomes, _) = frozen_group(&mut server, &store, &no_exists, "mug", &ANONYMOUS).await;
    // Without EXISTS both scripts take their general path (GET, ZCARD, DECRBY): served.
    let outcomes: Vec<Decrement> = outcomes.into_iter().map(Result::unwrap).collect();
    assert_eq!(outcomes[0], Decrement::Decremented { remaining: 19 });
    assert_eq!(outcomes[7], Decrement::Insufficient { available: 0 });
    assert_eq!(store.stock(&mut c, "mug").await.unwrap(), 0);

    // A quantity in another form than canonical decimal, sent by hand: the general path
    // answers REDKIT_INPUT, nothing written.
    let _: () = server.cmd(&["SET", &key, "20"]).await;
    let script = redkit::Registry::global()
        .require("inventory_group", 7)
        .unwrap();
    let bad_quantities = ["05", "1.0", "0x10", " 1", "0", "100000000000000"]
        .map(|quantity| vec!["0", "2", "1", quantity]);
    // Quantities left out (each 1) for more members than the largest batch, or for none:
    // REDKIT_INPUT too (the member count bounds the script's work).
    let above = (GroupCommit::MAX_BATCH + 1).to_string();
    let bad_counts = [above.as_str(), "0", "-1", "1.5"].map(|members| vec!["0", members]);
    for args in bad_quantities.iter().chain(&bad_counts) {
        let err: redis::RedisResult<redis::Value> = redis::cmd("EVAL")
            .arg(script.source())
            .arg(3)
            .arg(&key)
            .arg(store.reservation_key("mug").unwrap())
            .arg(store.reservation_expiry_key("mug").unwrap())
            .arg(args)
            .query_async(&mut c)
            .await;
        assert!(
            format!("{err:?}").contains("REDKIT_INPUT"),
            "{args:?}: {err:?}"
        );
        assert_eq!(store.stock(&mut c, "mug").await.unwrap(), 20, "{args:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_leader_interrupts_its_group_and_the_queue_moves_on() {
    // The group's call goes through its leader's connection: here the leader's connection
    // points at a second, frozen server, so its call hangs until the leader gives up.
    let mut server = RedisServer::spawn().await;
    let mut frozen = RedisServer::spawn().await;
    let (store, conn) = hot_mug(&server, hot(), 20).await;
    // A 10 s response timeout: the leader's call can only end by the 600 ms cancel (with
    // redis-rs's default 500 ms it failed by itself when the leader sent early enough).
    let stuck = frozen.patient_conn().await;
    let mut c = conn.clone();
    server.pause().await;
    frozen.pause().await;
    let mut first_conn = conn.clone();
    let first = store.decrement(&mut first_conn, "mug", 1, Some("first"));
    let mut leader_conn = stuck.clone();
    let leader = tokio::time::timeout(
        Duration::from_millis(600),
        store.decrement(&mut leader_conn, "mug", 1, Some("lead")),
    );
    let members = join_all((0..3).map(|i| {
        let (mut c, store) = (conn.clone(), &store);
        async move {
            store
                .decrement(&mut c, "mug", 1, Some(&format!("m{i}")))
                .await
        }
    }));
    // Resumed once the first call has reached the server (the others queued behind it in
    // the same poll), well within the leader's 600 ms.
    let unread = server.unread_bytes();
    // Bounded: a queue that is never handed on must fail here, not hang the suite (the
    // leader gives up at 600 ms; 10 s of slack for a loaded machine).
    let answered = async {
        tokio::join!(first, leader, members, async {
            server.wait_unread_above(unread).await;
            server.resume().await;
        })
    };
    let what = "the members' answers: the queue was not handed on";
    let (first, leader, members, ()) = support::bounded(10, what, answered).await;
    assert_eq!(first.unwrap(), Decrement::Decremented { remaining: 19 });
    assert!(leader.is_err(), "the leader timed out");
    for outcome in members {
        assert!(
            matches!(&outcome, Err(e @ Error::Interrupted { .. }) if e.is_unavailable()),
            "{outcome:?}"
        );
    }
    // The queue was handed on: a new buyer is served, and the ids retried on the live server
    // (the group's call never reached it) are applied once.
    assert_eq!(
        store.decrement(&mut c, "mug", 1, None).await.unwrap(),
        Decrement::Decremented { remaining: 18 }
    );
    for i in 0..3 {
        let id = format!("m{i}");
        let outcome = store.decrement(&mut c, "mug", 1, Some(&id)).await.unwrap();
        assert!(
            matches!(outcome, Decrement::Decremented { .. }),
            "{outcome:?}"
        );
        let again = store.decrement(&mut c, "mug", 1, Some(&id)).await.unwrap();
        assert_eq!(again.original(), Some(&outcome));
    }
    assert_eq!(store.stock(&mut c, "mug").await.unwrap(), 15);
    frozen.resume().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_buyers_never_oversell_and_every_id_replays() {
    five_hundred_buyers(hot()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_buyers_with_two_calls_in_flight_never_oversell_and_every_id_replays() {
    five_hundred_buyers(hot_pipelined(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_buyers_with_the_default_calls_in_flight_never_oversell_and_every_id_replays()
{
    five_hundred_buyers(hot_default()).await;
}

/// [`hot`] with up to `calls` grouped calls of one SKU in flight.
fn hot_pipelined(calls: usize) -> Inventory {
    Inventory::builder()
        .prefix(PREFIX)
        .with_group_commit(GroupCommit::new(GroupCommit::DEFAULT_MAX_BATCH, calls).unwrap())
        .build()
        .unwrap()
}

/// 512 concurrent buyers of one SKU through `inventory` over four connections: stock and
/// units sold add up, buyers were grouped, every request id replays its outcome.
async fn five_hundred_buyers(inventory: Inventory) {
    let server = RedisServer::spawn().await;
    let mut conns = Vec::new();
    for _ in 0..4 {
        conns.push(server.conn().await);
    }
    let store = inventory.store("w1").unwrap();
    store.set(&mut conns[0], "mug", 600).await.unwrap();
    let before = server.evalsha_calls().await;
    let mut tasks = Vec::new();
    for i in 0..512u64 {
        let (store, mut c) = (store.clone(), conns[(i % 4) as usize].clone());
        tasks.push(tokio::spawn(async move {
            let quantity = 1 + i % 3;
            let id = (i % 2 == 0).then(|| format!("o{i}"));
            let outcome = store
                .decrement(&mut c, "mug", quantity, id.as_deref())
                .await
                .unwrap();
            (quantity, id, outcome)
        }));
    }
    let results = support::bounded(10, "512 buyers answered", async {
        let mut results = Vec::new();
        for t in tasks {
            results.push(t.await.unwrap());
        }
        results
    })
    .await;
    let calls = server.evalsha_calls().await - before;
    let mut c = conns[0].clone();
    let stock = store.stock(&mut c, "mug").await.unwrap();
    assert_eq!(stock + sold(&results), 600, "nobody oversold, nothing lost");
    assert!(
        calls < 512,
        "buyers were grouped: {calls} calls for 512 buyers"
    );
    replay(&store, &mut c, results).await;
    assert_eq!(store.stock(&mut c, "mug").await.unwrap(), stock);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_calls_in_flight_the_second_caller_gathers_the_callers_after_it() {
    second_caller_gathers(hot_pipelined(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_default_calls_in_flight_the_second_caller_gathers_the_callers_after_it() {
    second_caller_gathers(hot_default()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_keeps_eight_calls_of_one_sku_in_flight() {
    let mut server = RedisServer::spawn().await;
    // The first call waits for the whole test (1 s): longer than redis-rs's default
    // response timeout.
    let patient = preload(server.patient_conn().await).await;
    let (store, conn) = mug_on(patient, hot_default(), 10).await;
    let before = server.evalsha_calls().await;
    server.pause().await;
    // Ten buyers, each arriving after the one before it has sent its call (the server is
    // frozen, so none returns): the first eight each find a free slot and go (a gathering
    // leader finds nobody behind it), the last two queue and go as ONE batch when a call
    // returns. With one call in flight they would be 2 calls, with two 3.
    // The first eight: each is seen sent (the frozen server's unread bytes grow) before the
    // next one starts.
    let mut buyers = Vec::new();
    let mut unread = server.unread_bytes();
    for _ in 0..8 {
        let (store, mut c) = (store.clone(), conn.clone());
        buyers.push(tokio::spawn(async move {
            store.decrement(&mut c, "mug", 1, None).await
        }));
        unread = server.wait_unread_above(unread).await;
    }
    // The last two: polled twice each, one after the other, they have joined the queue
    // (pending, nothing sent). A buyer that took a slot instead (as if fewer than eight were
    // counted in flight) would lead a gathering batch: it yields on its first poll and sends
    // on its second, so the ninth would go alone and the tenth after it (10 calls, not 9).
    let mut queued = Vec::new();
    for _ in 0..2 {
        let (store, mut c) = (store.clone(), conn.clone());
        let mut buyer = Box::pin(async move { store.decrement(&mut c, "mug", 1, None).await });
        assert!(pending_after_one_poll(&mut buyer).await);
        assert!(pending_after_one_poll(&mut buyer).await);
        queued.push(buyer);
    }
    assert_eq!(server.unread_bytes(), unread, "the last two sent nothing");
    server.resume().await;
    let outcomes = support::bounded(10, "ten buyers answered after the resume", async {
        let mut outcomes = join_all(queued).await;
        for buyer in buyers {
            outcomes.push(buyer.await.unwrap());
        }
        outcomes
    })
    .await;
    let mut remaining = Vec::new();
    for outcome in outcomes {
        match outcome.unwrap() {
            Decrement::Decremented { remaining: r } => remaining.push(r),
            other => panic!("ten buyers of ten units: {other:?}"),
        }
    }
    assert_eq!(
        server.evalsha_calls().await - before,
        9,
        "8 in flight, then one batch of 2"
    );
    remaining.sort_unstable();
    assert_eq!(remaining, (0..10).collect::<Vec<_>>());
    let mut c = conn.clone();
    assert_eq!(store.stock(&mut c, "mug").await.unwrap(), 0);
}

/// The first buyer goes alone; with a free slot, the second gathers the eight after it.
async fn second_caller_gathers(inventory: Inventory) {
    let mut server = RedisServer::spawn().await;
    let (store, conn) = hot_mug(&server, inventory, 9).await;
    let mut c = conn.clone();
    // The first buyer (alone) and nine more: the second takes the free slot while the first
    // is in flight, so it gathers: it yields once, the eight after it queue behind it, and
    // it sends all nine in ONE call (before gathering, it went alone and the eight waited
    // for a third call).
    let buyers = [(1, None); 9];
    let (outcomes, calls) =
        frozen_group_polled(&mut server, &store, &conn, "mug", &buyers, 2).await;
    assert_eq!(calls, 2, "the first alone, then one call for the nine");
    let outcomes: Vec<Decrement> = outcomes.into_iter().map(Result::unwrap).collect();
    let mut remaining: Vec<u64> = outcomes
        .iter()
        .filter_map(|d| match d {
            Decrement::Decremented { remaining } => Some(*remaining),
            _ => None,
        })
        .collect();
    remaining.sort_unstable();
    assert_eq!(remaining, (0..9).collect::<Vec<_>>(), "{outcomes:?}");
    let short = outcomes
        .iter()
        .filter(|d| **d == Decrement::Insufficient { available: 0 })
        .count();
    assert_eq!(short, 1, "ten buyers of nine units: {outcomes:?}");
    assert_eq!(store.stock(&mut c, "mug").await.unwrap(), 0);
    // The queue is idle again: a lone buyer goes straight through.
    store.set(&mut c, "mug", 1).await.unwrap();
    let before = server.evalsha_calls().await;
    let lone = support::bounded(10, "a lone buyer", store.decrement(&mut c, "mug", 1, None));
    assert_eq!(lone.await.unwrap(), Decrement::Decremented { remaining: 0 });
    assert_eq!(server.evalsha_calls().await - before, 1);
}

/// Polls `f` once (it keeps its place: a queued buyer stays queued); whether it is pending.
async fn pending_after_one_poll<F: std::future::Future + Unpin>(f: &mut F) -> bool {
    std::future::poll_fn(|cx| {
        std::task::Poll::Ready(std::pin::Pin::new(&mut *f).poll(cx).is_pending())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gathering_leader_that_gives_up_hands_its_queue_on() {
    let mut server = RedisServer::spawn().await;
    let (store, conn) = hot_mug(&server, hot_pipelined(2), 10).await;
    let mut c = conn.clone();
    let before = server.evalsha_calls().await;
    server.pause().await;
    // The first buyer's call is in flight (frozen server); the second takes the free slot
    // and gathers (polled once: it yields); three buyers queue behind it; then the second
    // is dropped before it sent anything.
    let mut first_conn = conn.clone();
    let mut first = Box::pin(store.decrement(&mut first_conn, "mug", 1, Some("first")));
    assert!(pending_after_one_poll(&mut first).await);
    let mut second_conn = conn.clone();
    let mut second = Box::pin(store.decrement(&mut second_conn, "mug", 1, Some("second")));
    assert!(pending_after_one_poll(&mut second).await);
    let mut queued = Vec::new();
    for i in 0..3 {
        let (mut c, store) = (conn.clone(), &store);
        let mut buyer = Box::pin(async move {
            store
                .decrement(&mut c, "mug", 1, Some(&format!("q{i}")))
                .await
        });
        assert!(pending_after_one_poll(&mut buyer).await);
        queued.push(buyer);
    }
    drop(second);
    server.resume().await;
    // The queue was handed on: the three are served (one call), the dropped one never ran.
    // Bounded: a queue left behind a dropped leader must fail here, not hang the suite.
    let what = "the queued buyers' answers: the queue was not handed on";
    let (first, queued) =
        support::bounded(10, what, async { tokio::join!(first, join_all(queued)) }).await;
    assert_eq!(first.unwrap(), Decrement::Decremented { remaining: 9 });
    assert_every!(queued, Ok(Decrement::Decremented { .. }), "queued");
    assert_eq!(server.evalsha_calls().await - before, 2);
    assert_eq!(store.stock(&mut c, "mug").await.unwrap(), 6);
    // "second" was never applied: sent now, it is new, not a duplicate.
    assert_eq!(
        store
            .decrement(&mut c, "mug", 1, Some("second"))
            .await
            .unwrap(),
        Decrement::Decremented { remaining: 5 }
    );
    // And the SKU is idle again: a lone buyer goes straight through, one call.
    let before = server.evalsha_calls().await;
    store.decrement(&mut c, "mug", 1, None).await.unwrap();
    assert_eq!(server.evalsha_calls().await - before, 1);
}

#[test]
fn group_commit_settings_are_checked_once_and_read_back_as_set() {
    // The bounds live in GroupCommit: a value out of range is refused there, before any
    // inventory exists.
    let build = |batch, k| GroupCommit::new(batch, k);
    assert!(matches!(build(8, 0), Err(Error::InvalidInput { .. })));
    assert!(matches!(
        build(8, GroupCommit::MAX_IN_FLIGHT + 1),
        Err(Error::InvalidInput { .. })
    ));
    assert!(matches!(build(1, 8), Err(Error::InvalidInput { .. })));
    assert!(matches!(
        build(GroupCommit::MAX_BATCH + 1, 8),
        Err(Error::InvalidInput { .. })
    ));
    let edge = build(GroupCommit::MAX_BATCH, GroupCommit::MAX_IN_FLIGHT).unwrap();
    let inventory = Inventory::builder()
        .prefix(PREFIX)
        .with_group_commit(edge)
        .build()
        .unwrap();
    assert_eq!(inventory.group_commit(), Some(edge));
    // Clones and stores share the queues and the settings; without the switch, none.
    assert_eq!(inventory.clone().group_commit(), Some(edge));
    assert_eq!(plain().group_commit(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_reservations_are_reclaimed_before_a_group_settles() {
    let mut server = RedisServer::spawn().await;
    let (store, conn) = hot_mug(&server, hot(), 20).await;
    let mut c = conn.clone();
    // Twenty holds of one unit; a call reclaims at most 16 expired ones, so the first buyer
    // (alone, inventory_apply) reclaims 16 and the group (inventory_group) the last 4.
    for i in 0..20 {
        store
            .reserve(
                &mut c,
                "mug",
                1,
                Duration::from_millis(300),
                &format!("cart-{i}"),
            )
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    let buyers = [(3, Some("x")), (10, None), (7, None)];
    let (outcomes, calls) = frozen_group(&mut server, &store, &conn, "mug", &buyers).await;
    assert_eq!(calls, 2);
    let outcomes: Vec<Decrement> = outcomes.into_iter().map(Result::unwrap).collect();
    assert_eq!(
        outcomes,
        [
            Decrement::Decremented { remaining: 15 },
            Decrement::Decremented { remaining: 16 },
            Decrement::Decremented { remaining: 6 },
            Decrement::Insufficient { available: 6 },
        ]
    );
    assert_eq!(store.stock(&mut c, "mug").await.unwrap(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_work_on_a_cluster() {
    let cluster = RedisCluster::spawn().await;
    let conn = cluster.conn().await;
    let inventory = hot();
    for w in ["w1", "w2", "w3"] {
        let store = inventory.store(w).unwrap();
        let mut c = conn.clone();
        store.set(&mut c, "mug", 100).await.unwrap();
        let calls = (0..64u64).map(|i| {
            let (store, mut c) = (store.clone(), conn.clone());
            async move {
                let quantity = 1 + i % 3;
                let id = format!("o{i}");
                let outcome = store
                    .decrement(&mut c, "mug", quantity, Some(&id))
                    .await
                    .unwrap();
                (quantity, Some(id), outcome)
            }
        });
        let primary = cluster.primary_for(&store.key("mug").unwrap()).await;
        let before = primary.evalsha_calls().await;
        let results = support::bounded(15, "64 buyers answered", join_all(calls)).await;
        let evalsha = primary.evalsha_calls().await - before;
        // All 64 are polled before the first reply: the first goes alone, the others queue
        // behind it and go grouped (2 calls seen). At most half the buyers: groups did form.
        assert!(
            evalsha <= 32,
            "{w}: {evalsha} EVALSHA on the owning primary for 64 buyers: no group formed"
        );
        let stock = store.stock(&mut c, "mug").await.unwrap();
        assert_eq!(stock + sold(&results), 100, "{w}");
        replay(&store, &mut c, results).await;
    }
}
