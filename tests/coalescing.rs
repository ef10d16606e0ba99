//! `connect::Coalescing` against a real Redis: concurrent commands share pipelines, each caller
//! gets its own reply (server errors included), a transport failure reaches every member, and
//! redkit's typed calls (scripts, NOSCRIPT recovery, batches) work through it.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use redkit::connect::{self, Coalescing, Timeouts};
use redkit::inventory::{Decrement, Inventory};
use redkit::rate_limit::{FixedWindow, LimitKey, Rate};
use support::RedisServer;

#[tokio::test]
async fn every_caller_gets_its_own_reply_including_server_errors() {
    let server = RedisServer::spawn().await;
    let conn = Coalescing::new(server.conn().await);
    let _: () = server.cmd(&["HSET", "not-a-counter", "f", "1"]).await;
    let mut tasks = Vec::new();
    for t in 0..200u32 {
        let mut c = conn.clone();
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for i in 0..20u32 {
                if (t + i) % 17 == 0 {
                    // A command the server refuses: only this caller sees the error.
                    let r: redis::RedisResult<i64> = redis::cmd("INCR")
                        .arg("not-a-counter")
                        .query_async(&mut c)
                        .await;
                    let e = r.expect_err("WRONGTYPE");
                    assert_eq!(e.code(), Some("WRONGTYPE"), "{e}");
                } else {
                    let n: i64 = redis::cmd("INCR")
                        .arg(format!("c:{t}"))
                        .query_async(&mut c)
                        .await
                        .unwrap();
                    out.push(n);
                }
            }
            (t, out)
        }));
    }
    for task in tasks {
        let (t, out) = task.await.unwrap();
        // Each task's own commands ran in its order: 1, 2, 3, ...
        let expected: Vec<i64> = (1..=out.len() as i64).collect();
        assert_eq!(out, expected, "task {t}");
    }
    let s = conn.stats();
    assert_eq!(s.commands, 200 * 20);
    assert!(
        s.sends < s.commands,
        "concurrent commands shared pipelines: {s:?}"
    );
}

#[tokio::test]
async fn commands_waiting_behind_a_frozen_send_go_out_as_one_pipeline() {
    let mut server = RedisServer::spawn().await;
    let conn = Coalescing::with_limits(server.conn().await, 64, 1).unwrap();
    // Warm up: one command alone.
    let mut c = conn.clone();
    let _: String = redis::cmd("PING").query_async(&mut c).await.unwrap();
    assert_eq!(conn.stats().sends, 1);
    server.pause().await;
    // The first goes out alone (its send counted) and hangs on the frozen server.
    let mut first = conn.clone();
    let first = tokio::spawn(async move {
        let v: String = redis::cmd("ECHO")
            .arg("m0")
            .query_async(&mut first)
            .await
            .unwrap();
        assert_eq!(v, "m0");
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while conn.stats().sends < 2 {
        assert!(
            Instant::now() < deadline,
            "the first command was never sent"
        );
        tokio::task::yield_now().await;
    }
    // The next nine are polled once each here: a first poll puts the command in the queue,
    // so all nine wait behind the first before the server resumes.
    let mut clones: Vec<_> = (1..10).map(|_| conn.clone()).collect();
    let mut queued: Vec<_> = clones
        .iter_mut()
        .enumerate()
        .map(|(i, c)| {
            Box::pin(async move {
                let v: String = redis::cmd("ECHO")
                    .arg(format!("m{}", i + 1))
                    .query_async(c)
                    .await
                    .unwrap();
                (i + 1, v)
            })
        })
        .collect();
    for f in &mut queued {
        assert!(futures_util::poll!(f.as_mut()).is_pending(), "queued");
    }
    assert_eq!(conn.stats().sends, 2, "the nine wait behind the first");
    server.resume().await;
    first.await.unwrap();
    for (i, v) in futures_util::future::join_all(queued).await {
        assert_eq!(v, format!("m{i}"));
    }
    let s = conn.stats();
    assert_eq!(s.commands, 11);
    assert_eq!(
        s.sends, 3,
        "the warm-up, the first alone, then one pipeline of 9: {s:?}"
    );
}

#[tokio::test]
async fn a_dead_server_fails_every_member_within_the_response_timeout() {
    let mut server = RedisServer::spawn().await;
    let timeouts = Timeouts::new(Duration::from_millis(500), Duration::from_millis(300)).unwrap();
    let inner = connect::multiplexed(&server.client(), timeouts)
        .await
        .unwrap();
    let conn = Coalescing::with_limits(inner, 64, 1).unwrap();
    server.pause().await;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..20 {
        let mut c = conn.clone();
        tasks.push(tokio::spawn(async move {
            redis::cmd("ECHO")
                .arg(i)
                .query_async::<String>(&mut c)
                .await
        }));
    }
    for t in tasks {
        let r = t.await.unwrap();
        assert!(r.is_err(), "{r:?}");
    }
    // The first send times out, then the pipeline of the others: two response timeouts.
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    server.resume().await;
}

/// Polls `fut` once (the first poll of a `Coalescing` call queues its command, under the
/// lock, before it returns) and hands back the future to finish, with whether it is still
/// pending.
async fn poll_once<F: std::future::Future + Unpin>(mut fut: F) -> (F, bool) {
    let pending = std::future::poll_fn(|cx| {
        std::task::Poll::Ready(std::pin::Pin::new(&mut fut).poll(cx).is_pending())
    })
    .await;
    (fut, pending)
}

/// Waits (polling, bounded) until `conn.stats()` satisfies `ok`.
async fn until_stats<C>(
    conn: &Coalescing<C>,
    what: &str,
    ok: impl Fn(connect::CoalescingStats) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ok(conn.stats()) {
        assert!(Instant::now() < deadline, "{what}: {:?}", conn.stats());
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn a_dropped_caller_does_not_hold_up_the_others() {
    let mut server = RedisServer::spawn().await;
    // A 10 s response timeout: the leader's call is still out (not timed out) when it is
    // aborted, however slow this machine is.
    let conn = Coalescing::with_limits(server.patient_conn().await, 64, 1).unwrap();
    server.pause().await;
    // The leader's caller goes away while its command is out.
    let mut c = conn.clone();
    let leader = tokio::spawn(async move {
        let _: redis::RedisResult<String> = redis::cmd("ECHO").arg("x").query_async(&mut c).await;
    });
    // The leader's command has left the queue: its sender (the only one, in_flight = 1) took
    // it and is waiting for the frozen server.
    until_stats(&conn, "the leader's command never went out", |s| {
        s.sends == 1 && s.commands == 1
    })
    .await;
    // The follower's first poll queues its command behind the busy sender (no turn left, so
    // it cannot send it itself).
    let mut c = conn.clone();
    let (follower, pending) = poll_once(Box::pin(async move {
        redis::cmd("ECHO")
            .arg("y")
            .query_async::<String>(&mut c)
            .await
    }))
    .await;
    assert!(pending, "the follower was answered by a frozen server");
    let before = conn.stats();
    assert_eq!(
        (before.sends, before.commands),
        (1, 1),
        "the follower's command is queued, not sent"
    );
    leader.abort();
    assert!(
        leader.await.unwrap_err().is_cancelled(),
        "the leader was cut off mid-call"
    );
    server.resume().await;
    let r = tokio::time::timeout(Duration::from_secs(5), follower)
        .await
        .expect("the follower was answered");
    assert_eq!(r.unwrap(), "y");
    // The case was exercised: the follower's command went out in a send of its own, after
    // the dropped leader's, by the sender the leader had started.
    let after = conn.stats();
    assert_eq!((after.sends, after.commands), (2, 2), "{after:?}");
}

#[tokio::test]
async fn redkit_calls_work_through_it_and_recover_from_noscript() {
    let server = RedisServer::spawn().await;
    let conn = Coalescing::new(server.conn().await);
    let store = Arc::new(Inventory::new("co:inv").unwrap().store("w").unwrap());
    store.set(&mut conn.clone(), "sku", 1_000).await.unwrap();
    let limiter = Arc::new(
        FixedWindow::new(
            "co",
            Rate::new(redkit::nonzero!(50), Duration::from_secs(600)).unwrap(),
        )
        .unwrap(),
    );
    // The scripts are not loaded yet: the first calls answer NOSCRIPT and fall back.
    let _: () = server.cmd(&["SCRIPT", "FLUSH"]).await;
    let mut tasks = Vec::new();
    for t in 0..100u32 {
        let (store, limiter, mut c) = (store.clone(), limiter.clone(), conn.clone());
        tasks.push(tokio::spawn(async move {
            let d = store.decrement(&mut c, "sku", 1, None).await.unwrap();
            assert!(matches!(d, Decrement::Decremented { .. }), "{d:?}");
            let key = LimitKey::text("one").unwrap();
            let allowed = limiter.check(&mut c, &key).await.unwrap().is_allowed();
            (t, allowed)
        }));
    }
    let mut allowed = 0;
    for t in tasks {
        allowed += usize::from(t.await.unwrap().1);
    }
    assert_eq!(allowed, 50, "exactly the limit");
    assert_eq!(store.stock(&mut conn.clone(), "sku").await.unwrap(), 900);
    // A batch (MULTI/EXEC pipeline) goes straight through.
    let keys: Vec<LimitKey> = (0..3)
        .map(|i| LimitKey::text(&format!("b{i}")).unwrap())
        .collect();
    let outcomes = limiter.check_batch(&mut conn.clone(), &keys).await.unwrap();
    assert!(outcomes
        .into_iter()
        .all(|o| o.into_result().unwrap().is_allowed()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sender_dropped_with_its_runtime_gives_its_turn_back() {
    let mut server = RedisServer::spawn().await;
    let conn = Coalescing::with_limits(server.conn().await, 64, 1).unwrap();
    server.pause().await;
    let c = conn.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut c = c;
            // Goes out (its sender is a task of this runtime) and hangs on the frozen server.
            let cmd = redis::cmd("ECHO").arg("x").clone();
            let call = cmd.query_async::<String>(&mut c);
            let _ = tokio::time::timeout(Duration::from_millis(100), call).await;
        });
        drop(rt); // drops that sender mid-send
    })
    .join()
    .unwrap();
    server.resume().await;
    // With in_flight = 1, a turn never given back would leave this queued forever.
    let mut c = conn.clone();
    let cmd = redis::cmd("ECHO").arg("y").clone();
    let r = tokio::time::timeout(Duration::from_secs(5), cmd.query_async::<String>(&mut c)).await;
    assert_eq!(
        r.expect("answered: the dropped sender gave its turn back")
            .unwrap(),
        "y"
    );
}
