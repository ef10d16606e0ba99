//! `LockOptions::require_replicas` on `FairLock`, `RwLock` and `ReentrantLock` against a real
//! primary + replica: with the replica in sync the hold is granted and the replica has it;
//! with the replica's link cut, `WAIT` times out, the hold is given back on the primary (a
//! fair lock's turn goes to the next in line, a nested reentrant hold leaves the count as it
//! was) and the answer is `Acquire::NotReplicated { replicas: 0, requested: 1 }`, tried again
//! (a `WAIT` each) while retries allow.
//! (`Lock` and `Semaphore`: tests/lock_contract.rs, tests/semaphore.rs; renewals of such holds:
//! tests/replicated_renew.rs.)

mod support;

// Connections to the primary are `patient_conn`s (10 s response timeout): a call and its
// `WAIT` are one round trip, which must not time out on redis-rs's 500 ms default while a
// loaded machine's replica takes long to acknowledge (see `Replication::new`).

use std::time::Duration;

use redkit::lock::{
    Acquire, FairLock, LockOptions, Mode, Owner, ReentrantLock, Replicable, RwLock,
};
use support::ReplicatedPair;

/// Options of any kind that can wait for replicas.
fn required<K: Replicable>(wait_ms: u64) -> LockOptions<K> {
    let one = redkit::script::Replication::new(1, Duration::from_millis(wait_ms)).unwrap();
    LockOptions::new()
        .ttl(Duration::from_secs(10))
        .require_replicas(one)
}

fn granted<G: std::fmt::Debug, H: std::fmt::Debug>(outcome: redkit::Result<Acquire<G, H>>) -> G {
    match outcome.unwrap() {
        Acquire::Acquired(guard) => guard,
        other => panic!("expected the lock, got {other:?}"),
    }
}

fn not_replicated<G: std::fmt::Debug, H: std::fmt::Debug>(outcome: redkit::Result<Acquire<G, H>>) {
    match outcome.unwrap() {
        Acquire::NotReplicated {
            replicas: 0,
            requested: 1,
        } => {}
        other => panic!("expected NotReplicated (0 of 1), got {other:?}"),
    }
}

#[tokio::test]
async fn fair_lock_gives_an_unconfirmed_turn_to_the_next_in_line() {
    let pair = ReplicatedPair::spawn().await;
    let mut conn = pair.primary.patient_conn().await;
    let fair = FairLock::new();
    let wait = Duration::from_secs(5);
    let guard = granted(
        fair.acquire(&mut conn, "payouts", &required(1_000).max_wait(wait))
            .await,
    );
    let on_replica: i64 = pair.replica.cmd(&["ZCARD", guard.key()]).await;
    assert_eq!(on_replica, 1, "the replica has the holder");
    fair.release(&mut conn, guard).await.unwrap();

    pair.cut_link().await;
    // A caller without the requirement queues behind the one that requires it.
    let mut other = pair.primary.patient_conn().await;
    let unreplicated = LockOptions::new()
        .ttl(Duration::from_secs(10))
        .max_wait(wait);
    let short = required(150).max_wait(wait);
    let first = fair.acquire(&mut conn, "payouts", &short);
    let second = async {
        // Arrives after the first has joined the queue.
        tokio::time::sleep(Duration::from_millis(50)).await;
        fair.acquire(&mut other, "payouts", &unreplicated).await
    };
    let (first, second) = tokio::join!(first, second);
    not_replicated(first);
    let next = granted(second);
    let key = fair.key("payouts").unwrap();
    let queued: i64 = pair.primary.cmd(&["ZCARD", &key]).await;
    assert_eq!(queued, 1, "only the next in line is left in the queue");
    fair.release(&mut other, next).await.unwrap();
}

#[tokio::test]
async fn rw_lock_gives_back_unconfirmed_read_and_write_holds() {
    let pair = ReplicatedPair::spawn().await;
    let mut conn = pair.primary.patient_conn().await;
    let rw = RwLock::new();
    let key = rw.key("catalog").unwrap();
    let (readers, writer) = (format!("{key}:readers"), format!("{key}:writer"));
    let guard = granted(
        rw.acquire(&mut conn, "catalog", Mode::Write, &required(1_000))
            .await,
    );
    let on_replica: i64 = pair.replica.cmd(&["EXISTS", &writer]).await;
    assert_eq!(on_replica, 1, "the replica has the writer");
    rw.release(&mut conn, guard).await.unwrap();
    let guard = granted(
        rw.acquire(&mut conn, "catalog", Mode::Read, &required(1_000))
            .await,
    );
    let on_replica: i64 = pair.replica.cmd(&["ZCARD", &readers]).await;
    assert_eq!(on_replica, 1, "the replica has the reader");
    rw.release(&mut conn, guard).await.unwrap();

    pair.cut_link().await;
    not_replicated(
        rw.acquire(&mut conn, "catalog", Mode::Write, &required(150))
            .await,
    );
    not_replicated(
        rw.acquire(&mut conn, "catalog", Mode::Read, &required(150))
            .await,
    );
    // Tried again while retries allow, like a busy answer: 3 attempts, 3 `WAIT`s.
    let waits = pair.primary.command_calls("wait").await;
    // Bounded: a retry count that never advances would try again forever.
    let options = required(100).retries(2);
    let three = rw.acquire(&mut conn, "catalog", Mode::Write, &options);
    not_replicated(support::bounded(10, "three attempts", three).await);
    assert_eq!(pair.primary.command_calls("wait").await - waits, 3);
    for k in [&readers, &writer, &format!("{key}:intent")] {
        let left: i64 = pair.primary.cmd(&["EXISTS", k]).await;
        assert_eq!(left, 0, "{k}: given back");
    }
    // Given back at once: a writer without the requirement gets in on its first attempt.
    let guard = granted(
        rw.acquire(&mut conn, "catalog", Mode::Write, &LockOptions::new())
            .await,
    );
    rw.release(&mut conn, guard).await.unwrap();
}

#[tokio::test]
async fn reentrant_lock_gives_back_an_unconfirmed_hold_and_keeps_the_count() {
    let pair = ReplicatedPair::spawn().await;
    let mut conn = pair.primary.patient_conn().await;
    let lock = ReentrantLock::new();
    let me = Owner::new();
    let outer = granted(
        lock.acquire(&mut conn, "account-9", &me, &required(1_000))
            .await,
    );
    let on_replica: i64 = pair.replica.cmd(&["HLEN", outer.key()]).await;
    assert_eq!(on_replica, 1, "the replica has the hold");

    pair.cut_link().await;
    // A nested hold not confirmed: given back, the outer hold stays.
    not_replicated(
        lock.acquire(&mut conn, "account-9", &me, &required(150))
            .await,
    );
    assert_eq!(lock.holds(&mut conn, "account-9", &me).await.unwrap(), 1);
    lock.release(&mut conn, outer).await.unwrap();
    // A first hold not confirmed: the lock is free again.
    not_replicated(
        lock.acquire(&mut conn, "account-9", &me, &required(150))
            .await,
    );
    let key = lock.key("account-9").unwrap();
    let left: i64 = pair.primary.cmd(&["EXISTS", &key]).await;
    assert_eq!(left, 0, "given back");
    // Tried again while retries allow, like a busy answer: 3 attempts, 3 `WAIT`s.
    let waits = pair.primary.command_calls("wait").await;
    // Bounded: a retry count that never advances would try again forever.
    let options = required(100).retries(2);
    let three = lock.acquire(&mut conn, "account-9", &me, &options);
    not_replicated(support::bounded(10, "three attempts", three).await);
    assert_eq!(pair.primary.command_calls("wait").await - waits, 3);
    let left: i64 = pair.primary.cmd(&["EXISTS", &key]).await;
    assert_eq!(left, 0, "given back");
}
