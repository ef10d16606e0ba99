//! Redlock over 5 independent masters against real Redis, with frozen (SIGSTOP) nodes.

mod support;

use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redkit::lock::{
    Acquire, HeldOnNodes, LockOptions, NodeAnswer, Redlock, RedlockGuard, Release, Renew,
};
use redkit::Error;
use support::RedisMasters;

const NODE_TIMEOUT: Duration = Duration::from_millis(250);

/// Connections with connect/response timeouts, made while every node is healthy.
async fn connect(masters: &RedisMasters) -> Vec<MultiplexedConnection> {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(2)));
    let mut conns = Vec::new();
    for node in &masters.nodes {
        conns.push(
            node.client()
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .unwrap(),
        );
    }
    conns
}

async fn redlock(masters: &RedisMasters) -> Redlock<MultiplexedConnection> {
    Redlock::new(connect(masters).await)
        .unwrap()
        .with_node_timeout(NODE_TIMEOUT)
}

async fn held(
    redlock: &Redlock<MultiplexedConnection>,
    resource: &str,
    options: &LockOptions<Redlock<MultiplexedConnection>>,
) -> RedlockGuard {
    match redlock.acquire(resource, options).await.unwrap() {
        Acquire::Acquired(guard) => guard,
        other => panic!("expected the lock, got {other:?}"),
    }
}

async fn exists(masters: &RedisMasters, nodes: &[usize], key: &str) -> Vec<i64> {
    let mut out = Vec::new();
    for &i in nodes {
        out.push(masters.nodes[i].cmd::<i64>(&["EXISTS", key]).await);
    }
    out
}

/// Waits until `key` is gone from `nodes`, failing at `deadline` (chosen well before any TTL
/// that could end the key: only a command removes it in time).
async fn gone_before(masters: &RedisMasters, nodes: &[usize], key: &str, deadline: Instant) {
    loop {
        let left = exists(masters, nodes, key).await;
        if left.iter().all(|&n| n == 0) {
            return;
        }
        assert!(Instant::now() < deadline, "still there: {left:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn succeeds_with_two_of_five_masters_paused_and_validity_counts_elapsed_time() {
    let mut masters = RedisMasters::spawn(5).await;
    let redlock = redlock(&masters).await;
    assert_eq!(redlock.quorum(), 3);
    masters.nodes[1].pause().await;
    masters.nodes[3].pause().await;

    let ttl = Duration::from_secs(10);
    let options = LockOptions::new().ttl(ttl);
    let before = Instant::now();
    let guard = held(&redlock, "payout", &options).await;
    let validity = guard.validity();
    let took = before.elapsed(); // read after the validity: bounds it from below
                                 // The acquire waited for the frozen nodes' timeout: that time is not counted as held.
    assert!(
        validity <= ttl - options.drift_allowance() - NODE_TIMEOUT,
        "{validity:?}"
    );
    assert!(
        validity + took >= ttl - options.drift_allowance(),
        "{validity:?} {took:?}"
    );
    assert_eq!(exists(&masters, &[0, 2, 4], guard.key()).await, [1, 1, 1]);

    // Renew with the same quorum.
    // Each node's answer, by index: the frozen ones timed out.
    let paused = [
        NodeAnswer::Done,
        NodeAnswer::TimedOut,
        NodeAnswer::Done,
        NodeAnswer::TimedOut,
        NodeAnswer::Done,
    ];
    assert_eq!(guard.nodes().answers(), paused);
    assert_eq!(guard.nodes().unreached().collect::<Vec<_>>(), [1, 3]);
    let mut guard = guard;
    let renewed = redlock.renew(&mut guard).await.unwrap();
    assert_eq!(renewed.outcome, Renew::Renewed);
    assert_eq!(renewed.nodes.answers(), paused, "renewed on 0, 2, 4 only");
    assert!(guard.is_valid());

    // A second contender finds it held on 3 nodes: no quorum possible even if the 2 frozen
    // nodes had agreed, so the answer is the Busy outcome, not an error.
    // Its give-back found another owner's key on 0, 2, 4 (left untouched) and could not
    // reach 1 and 3.
    match redlock.acquire("payout", &options).await {
        Ok(Acquire::Busy(HeldOnNodes {
            held_on: 3,
            nodes: 5,
            rollback,
            ..
        })) => {
            let n = NodeAnswer::NotOwner;
            assert_eq!(
                rollback.answers(),
                [
                    n.clone(),
                    NodeAnswer::TimedOut,
                    n.clone(),
                    NodeAnswer::TimedOut,
                    n
                ]
            );
        }
        other => panic!("{other:?}"),
    }

    let key = guard.key().to_owned();
    // Released on the quorum of 3 (nodes 1 and 3 are frozen: their keys end by TTL, or by
    // the queued release once they wake).
    let released = redlock.release(guard).await.unwrap();
    assert_eq!(released.outcome, Release::Released);
    assert_eq!(released.nodes.answers(), paused, "the report names 1 and 3");
    assert_eq!(exists(&masters, &[0, 2, 4], &key).await, [0, 0, 0]);

    masters.nodes[1].resume().await;
    masters.nodes[3].resume().await;
    // The keys go well before their 10 s TTL could end them: the queued release ran.
    gone_before(&masters, &[1, 3], &key, before + ttl / 2).await;
}

#[tokio::test]
async fn fails_with_three_of_five_paused_and_leaves_no_key_on_the_healthy_ones() {
    let mut masters = RedisMasters::spawn(5).await;
    let redlock = redlock(&masters).await;
    for i in [0, 2, 4] {
        masters.nodes[i].pause().await;
    }
    let options = LockOptions::new().ttl(Duration::from_secs(10));
    let key = redlock.key("payout").unwrap();
    match redlock.acquire("payout", &options).await {
        Err(Error::NoQuorum {
            agreed,
            needed,
            total,
            failed,
            rollback: Some(rollback),
        }) => {
            assert_eq!((agreed, needed, total), (2, 3, 5));
            let nodes: Vec<usize> = failed.iter().map(|(i, _)| *i).collect();
            assert_eq!(nodes, [0, 2, 4]);
            assert!(failed.iter().all(|(_, why)| why.contains("timed out")));
            // Given back on 1 and 3; 0, 2, 4 may keep a queued SET until they resume.
            assert_eq!(rollback.done(), 2);
            assert_eq!(rollback.unreached().collect::<Vec<_>>(), [0, 2, 4]);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        exists(&masters, &[1, 3], &key).await,
        [0, 0],
        "key left behind"
    );

    // Once the frozen nodes wake up, their queued SET is followed by the queued release.
    let sent = Instant::now();
    for i in [0, 2, 4] {
        masters.nodes[i].resume().await;
    }
    // Gone well before the 10 s TTL of the queued SET could end them.
    gone_before(
        &masters,
        &[0, 1, 2, 3, 4],
        &key,
        sent + Duration::from_secs(5),
    )
    .await;
    // And the lock is free again.
    let guard = held(&redlock, "payout", &options).await;
    assert_eq!(
        redlock.release(guard).await.unwrap().outcome,
        Release::Released
    );
    assert_eq!(exists(&masters, &[0, 1, 2, 3, 4], &key).await, [0; 5]);
}

#[tokio::test]
async fn renew_needs_a_quorum_and_a_lost_lease_is_an_outcome() {
    let masters = RedisMasters::spawn(3).await;
    let redlock = redlock(&masters).await;
    let options = LockOptions::new().ttl(Duration::from_secs(5));
    let mut guard = held(&redlock, "job", &options).await;
    let key = guard.key().to_owned();
    assert_eq!(
        redlock.renew(&mut guard).await.unwrap().outcome,
        Renew::Renewed
    );
    // Two of three nodes lose the key: a renewal can no longer reach a quorum.
    for i in [0, 2] {
        let _: i64 = masters.nodes[i].cmd(&["DEL", &key]).await;
    }
    assert_eq!(
        redlock.renew(&mut guard).await.unwrap().outcome,
        Renew::Lost
    );
    assert!(!guard.is_valid());
    // The key is left on node 1 only: not the owner on a majority.
    assert_eq!(exists(&masters, &[0, 1, 2], &key).await, [0, 1, 0]);
    assert_eq!(
        redlock.release(guard).await.unwrap().outcome,
        Release::NotOwner
    );
    assert_eq!(
        exists(&masters, &[0, 1, 2], &key).await,
        [0, 0, 0],
        "deleted on node 1"
    );
}

#[tokio::test]
async fn bad_input_is_a_typed_error_and_writes_nothing() {
    let masters = RedisMasters::spawn(3).await;
    let conns = connect(&masters).await;
    assert!(matches!(
        Redlock::new(conns[..2].to_vec()),
        Err(Error::InvalidInput { what: "nodes", .. })
    ));
    let redlock = redlock(&masters).await;
    let cases = [
        ("", LockOptions::new(), "resource"),
        ("r", LockOptions::new().ttl(Duration::ZERO), "ttl"),
        (
            "r",
            LockOptions::new().ttl(Duration::from_millis(200)),
            "node timeout",
        ),
    ];
    for (resource, options, what) in cases {
        match redlock.acquire(resource, &options).await {
            Err(Error::InvalidInput { what: got, .. }) => assert_eq!(got, what),
            other => panic!("{what}: {other:?}"),
        }
    }
    assert!(matches!(
        redkit::keys::Prefix::new("no spaces"),
        Err(Error::InvalidInput { what: "prefix", .. })
    ));
    drop(redlock);
    for node in &masters.nodes {
        assert_eq!(node.cmd::<i64>(&["DBSIZE"]).await, 0);
    }
}

#[tokio::test]
async fn busy_is_an_outcome_and_no_quorum_stays_an_error_when_unreachable_nodes_decide() {
    let mut masters = RedisMasters::spawn(3).await;
    let redlock = redlock(&masters).await;
    let options = LockOptions::new().ttl(Duration::from_secs(5)).retries(2);
    let guard = held(&redlock, "job", &options).await;
    match redlock.acquire("job", &options).await {
        Ok(Acquire::Busy(HeldOnNodes {
            held_on: 3,
            nodes: 3,
            ..
        })) => {}
        other => panic!("{other:?}"),
    }
    // try_acquire: the same answer after one attempt (the options' retries not used).
    let slow = options
        .clone()
        .retries(1_000)
        .retry_delay(Duration::from_secs(1));
    let started = Instant::now();
    assert!(matches!(
        redlock.try_acquire("job", &slow).await,
        Ok(Acquire::Busy(HeldOnNodes { held_on: 3, .. }))
    ));
    assert!(started.elapsed() < Duration::from_millis(900), "no retry");
    let key = guard.key().to_owned();
    assert_eq!(
        redlock.release(guard).await.unwrap().outcome,
        Release::Released
    );
    // Another owner on node 0, node 1 frozen, node 2 agrees: 1 yes, 1 held, 1 unknown. The
    // frozen node could have decided either way: an error, not Busy.
    let _: () = masters.nodes[0]
        .cmd(&["SET", &key, "someone-else-token", "PX", "5000"])
        .await;
    masters.nodes[1].pause().await;
    match redlock.acquire("job", &options.clone().retries(0)).await {
        Err(Error::NoQuorum {
            agreed: 1,
            needed: 2,
            total: 3,
            failed,
            rollback: Some(rollback),
        }) => {
            assert_eq!(failed.iter().map(|(i, _)| *i).collect::<Vec<_>>(), [0, 1]);
            // Node 0 holds another owner's key (untouched), node 1 is frozen, 2 gave it back.
            let answers = [NodeAnswer::NotOwner, NodeAnswer::TimedOut, NodeAnswer::Done];
            assert_eq!(rollback.answers(), answers);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(exists(&masters, &[2], &key).await, [0], "released again");
    masters.nodes[1].resume().await;
}

/// Kleppmann's scenario: A holds on masters 0, 1, 2 (3 and 4 are down), master 2 crashes and
/// restarts, then B asks all five. What B gets depends only on whether master 2 kept A's key.
async fn second_contender_after_a_restart(
    persistence: &[&str],
) -> Acquire<RedlockGuard, HeldOnNodes> {
    let mut nodes = Vec::new();
    for _ in 0..5 {
        nodes.push(support::RedisServer::spawn_with(persistence).await);
    }
    let mut masters = RedisMasters { nodes };
    let options = LockOptions::new().ttl(Duration::from_secs(30));
    let a = redlock(&masters).await;
    masters.nodes[3].stop().await;
    masters.nodes[4].stop().await;
    let guard_a = held(&a, "payout", &options).await;
    assert_eq!(exists(&masters, &[0, 1, 2], guard_a.key()).await, [1, 1, 1]);
    masters.nodes[3].start().await;
    masters.nodes[4].start().await;
    masters.nodes[2].restart().await; // SIGKILL: a crash, then the same config and directory

    let b = redlock(&masters).await;
    let outcome = b.acquire("payout", &options).await;
    assert!(
        guard_a.is_valid(),
        "A's lease still runs: {:?}",
        guard_a.validity()
    );
    match outcome {
        Ok(outcome) => outcome,
        Err(e) => panic!("{e}"),
    }
}

/// Without persistence (the harness default: no RDB, no AOF) a restarted master forgets A's key
/// and votes again: two holders at once. Redis cannot prevent this; the README says so and
/// gives the levers (fsync-always AOF, or keep a crashed master down for one TTL).
#[tokio::test]
async fn a_master_restarted_without_persistence_lets_a_second_holder_in() {
    match second_contender_after_a_restart(&[]).await {
        Acquire::Acquired(guard_b) => assert!(guard_b.is_valid()),
        other => panic!("expected the documented double grant, got {other:?}"),
    }
}

/// With `appendonly yes` + `appendfsync always` the restarted master still holds A's key (with
/// its TTL), so B finds it held on a majority.
#[tokio::test]
async fn a_master_restarted_with_fsync_always_keeps_its_vote() {
    let aof = ["--appendonly", "yes", "--appendfsync", "always"];
    match second_contender_after_a_restart(&aof).await {
        Acquire::Busy(HeldOnNodes {
            held_on: 3,
            nodes: 5,
            ..
        }) => {}
        other => panic!("expected Busy (held on 3 of 5), got {other:?}"),
    }
}

/// Five nodes: another owner on two, one frozen, two agree. Two refusals do not rule out a
/// quorum of three (the frozen node could have agreed), so the answer is an error naming the
/// nodes that failed, not `Busy`; three refusals are `Busy`.
#[tokio::test]
async fn two_refusals_of_five_with_a_frozen_node_are_no_quorum_three_are_busy() {
    let mut masters = RedisMasters::spawn(5).await;
    let redlock = redlock(&masters).await;
    assert_eq!(
        format!("{redlock:?}"),
        format!(
            "Redlock {{ nodes: 5, prefix: \"{}\", node_timeout: {NODE_TIMEOUT:?}, .. }}",
            Redlock::<MultiplexedConnection>::DEFAULT_PREFIX
        )
    );
    let options = LockOptions::new().ttl(Duration::from_secs(10));
    let key = redlock.key("ledger").unwrap();
    for i in [0, 1] {
        let _: () = masters.nodes[i]
            .cmd(&["SET", &key, "someone-else-token", "PX", "30000"])
            .await;
    }
    masters.nodes[2].pause().await;
    match redlock.try_acquire("ledger", &options).await {
        Err(Error::NoQuorum {
            agreed: 2,
            needed: 3,
            total: 5,
            failed,
            ..
        }) => assert_eq!(
            failed.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
            [0, 1, 2]
        ),
        other => panic!("{other:?}"),
    }
    masters.nodes[2].resume().await;
    assert_eq!(
        exists(&masters, &[3, 4], &key).await,
        [0, 0],
        "released again"
    );
    let _: () = masters.nodes[2]
        .cmd(&["SET", &key, "someone-else-token", "PX", "30000"])
        .await;
    assert!(matches!(
        redlock.try_acquire("ledger", &options).await,
        Ok(Acquire::Busy(HeldOnNodes {
            held_on: 3,
            nodes: 5,
            ..
        }))
    ));
}

/// Puts another owner's token in `key` on `nodes` (our hold there is gone).
async fn steal(masters: &RedisMasters, nodes: &[usize], key: &str) {
    for &i in nodes {
        let _: () = masters.nodes[i]
            .cmd(&["SET", key, "someone-else-token", "PX", "30000"])
            .await;
    }
}

/// Renew and release decide like acquire: with five nodes, another owner on two and one node
/// frozen, the frozen node could still make a quorum, so both answer `NoQuorum`; with the
/// other owner on three, `Lost` and `NotOwner`.
#[tokio::test]
async fn renew_and_release_count_refusals_against_what_the_unreachable_could_decide() {
    let mut masters = RedisMasters::spawn(5).await;
    let redlock = redlock(&masters).await;
    let options = LockOptions::new().ttl(Duration::from_secs(10));
    let undecided = |outcome: &str| {
        assert!(
            outcome.starts_with("Err(NoQuorum { agreed: 2, needed: 3, total: 5"),
            "two refusals and a frozen node cannot decide: {outcome}"
        )
    };

    let mut guard = held(&redlock, "books", &options).await;
    steal(&masters, &[0, 1], guard.key()).await;
    masters.nodes[2].pause().await;
    undecided(&format!("{:?}", redlock.renew(&mut guard).await));
    masters.nodes[2].resume().await;

    let guard = held(&redlock, "shelf", &options).await;
    steal(&masters, &[0, 1], guard.key()).await;
    masters.nodes[2].pause().await;
    undecided(&format!("{:?}", redlock.release(guard).await));
    masters.nodes[2].resume().await;

    let mut guard = held(&redlock, "desk", &options).await;
    steal(&masters, &[0, 1, 2], guard.key()).await;
    assert_eq!(
        redlock.renew(&mut guard).await.unwrap().outcome,
        Renew::Lost
    );
    assert_eq!(
        redlock.release(guard).await.unwrap().outcome,
        Release::NotOwner
    );
}

/// An attempt that reaches too few nodes (`NoQuorum`) is tried again, like a busy lock,
/// while the retries allow: with two of three nodes frozen and thawed 700 ms later, an
/// acquire with retries gets the lock; with no retries, the same freeze is the error. (The
/// frozen nodes run the queued `SET`s and clean-ups of the failed attempts in order when
/// thawed, so the key is free again for the attempt after.)
#[tokio::test]
async fn no_quorum_is_tried_again_while_the_retries_allow() {
    let mut masters = RedisMasters::spawn(3).await;
    let redlock = redlock(&masters).await;
    let options = LockOptions::new()
        .ttl(Duration::from_secs(5))
        .retries(100)
        .retry_delay(Duration::from_millis(50));
    masters.nodes[0].pause().await;
    masters.nodes[1].pause().await;
    let once = redlock.acquire("thaw", &options.clone().retries(0)).await;
    assert!(matches!(once, Err(Error::NoQuorum { .. })), "{once:?}");
    let (nodes, _) = masters.nodes.split_at_mut(2);
    let (acquired, ()) = tokio::join!(redlock.acquire("thaw", &options), async {
        tokio::time::sleep(Duration::from_millis(700)).await;
        for node in nodes.iter_mut() {
            node.resume().await;
        }
    });
    match acquired {
        Ok(Acquire::Acquired(guard)) => {
            assert_eq!(
                redlock.release(guard).await.unwrap().outcome,
                Release::Released
            )
        }
        other => panic!("thawed nodes within the retries: {other:?}"),
    }
}

#[tokio::test]
async fn inspect_reads_every_master_and_says_which_did_not_answer() {
    use redkit::lock::NodeState;
    let mut masters = RedisMasters::spawn(3).await;
    let redlock = redlock(&masters).await;
    let free = redlock.inspect("audit").await.unwrap();
    assert_eq!(free.nodes, vec![NodeState::Free; 3]);
    assert_eq!(free.held_on(), None);
    let guard = held(
        &redlock,
        "audit",
        &LockOptions::new().ttl(Duration::from_secs(30)),
    )
    .await;
    let state = redlock.inspect("audit").await.unwrap();
    let (token, k) = state.held_on().expect("held");
    assert_eq!(k, 3, "{state:?}");
    assert!(state.nodes.iter().all(
        |n| matches!(n, NodeState::Held(h) if h.token == token && h.ttl.is_some_and(|t| t > Duration::from_secs(25)))
    ));
    // A frozen master: reported, the others still read.
    masters.nodes[2].pause().await;
    let state = redlock.inspect("audit").await.unwrap();
    assert!(matches!(state.nodes[2], NodeState::Failed(_)), "{state:?}");
    assert_eq!(state.held_on().map(|(_, k)| k), Some(2));
    masters.nodes[2].resume().await;
    redlock.release(guard).await.unwrap();
    let after = redlock.inspect("audit").await.unwrap();
    assert_eq!(after.held_on(), None, "{after:?}");
}
