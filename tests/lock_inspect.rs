//! Looking at a lock from outside and freeing a stuck one: `Lock::inspect` reads the holder,
//! its lease, the last fencing token and the waiter flag without writing (a read-only replica
//! serves it); `Lock::force_release` ends only the expected hold, wakes a blocked acquirer,
//! and leaves the evicted holder a lost lease and stale fenced writes.

mod support;

use std::time::{Duration, Instant};

use redkit::lock::{Acquire, ExpectedHolder, FencedWrite, ForceRelease, Lock, LockOptions, Renew};
use support::{same_dumps, snapshot, RedisServer, ReplicatedPair};

const OWNER: &str = "worker-7:0f3a9c2e61d84b57";

fn options(token: &str) -> LockOptions<Lock> {
    LockOptions::new()
        .fencing(true)
        .token(token)
        .ttl(Duration::from_secs(30))
}

#[tokio::test]
async fn inspect_reads_the_holder_and_writes_nothing() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let lock = Lock::new();
    let free = lock.inspect(&mut conn, "report").await.unwrap();
    assert_eq!(
        (&free.holder, free.last_fencing_token, free.waiters),
        (&None, None, false)
    );

    let Acquire::Acquired(guard) = lock
        .acquire(&mut conn, "report", &options(OWNER))
        .await
        .unwrap()
    else {
        panic!("a free lock was not acquired");
    };
    let before = snapshot(&mut conn).await;
    let ro = server.command_calls("evalsha_ro").await;
    let state = lock.inspect(&mut conn, "report").await.unwrap();
    let holder = state.holder.expect("held");
    assert_eq!(holder.token, OWNER);
    let ttl = holder.ttl.expect("a lease");
    assert!(
        ttl > Duration::from_secs(25) && ttl <= Duration::from_secs(30),
        "{ttl:?}"
    );
    assert_eq!(state.last_fencing_token, guard.fencing_token());
    assert!(!state.waiters);
    assert_eq!(server.command_calls("evalsha_ro").await - ro, 1);
    same_dumps(&before, &snapshot(&mut conn).await, "inspect");

    // After a release the lock is free and the fence stays.
    lock.release(&mut conn, guard).await.unwrap();
    let after = lock.inspect(&mut conn, "report").await.unwrap();
    assert!(after.holder.is_none());
    assert_eq!(after.last_fencing_token, state.last_fencing_token);
}

#[tokio::test]
async fn inspect_is_served_by_a_read_only_replica() {
    let pair = ReplicatedPair::spawn().await;
    let mut primary = pair.primary.conn().await;
    let mut replica = pair.replica.conn().await;
    let lock = Lock::new();
    let Acquire::Acquired(_guard) = lock
        .acquire(&mut primary, "job", &options(OWNER))
        .await
        .unwrap()
    else {
        panic!("not acquired");
    };
    support::until_replicated(&mut primary).await;
    let state = lock.inspect(&mut replica, "job").await.unwrap();
    assert_eq!(state.holder.map(|h| h.token), Some(OWNER.to_string()));
    // The negative control: the replica refuses what writes.
    let refused = lock.acquire(&mut replica, "other", &options(OWNER)).await;
    assert!(
        refused.is_err(),
        "a read-only replica took a lock: {refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_ends_only_the_expected_hold_and_wakes_a_waiter() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let lock = Lock::new();
    assert_eq!(
        lock.force_release(&mut conn, "ledger", ExpectedHolder::Any)
            .await
            .unwrap(),
        ForceRelease::NotHeld
    );
    let Acquire::Acquired(mut stuck) = lock
        .acquire(&mut conn, "ledger", &options(OWNER))
        .await
        .unwrap()
    else {
        panic!("not acquired");
    };
    let evicted_token = stuck.fencing_token().expect("fenced");

    // Another token: nothing released, the holder reported.
    let before = snapshot(&mut conn).await;
    let other = lock
        .force_release(
            &mut conn,
            "ledger",
            ExpectedHolder::Token("someone-else-00000000"),
        )
        .await
        .unwrap();
    let ForceRelease::Changed { holder: Some(h) } = other else {
        panic!("{other:?}");
    };
    assert_eq!(h.token, OWNER);
    same_dumps(
        &before,
        &snapshot(&mut conn).await,
        "a release of another token",
    );

    // A blocked acquirer, on its own connection, waiting well past what a poll would need.
    let mut own = server.conn().await;
    let waiter_lock = lock.clone();
    let waits_from = server.command_calls("blpop").await;
    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        let options = options("waiter-0000000000000001").max_wait(Duration::from_secs(20));
        let got = waiter_lock
            .acquire_blocking(&mut own, "ledger", &options)
            .await
            .unwrap();
        (matches!(got, Acquire::Acquired(_)), started.elapsed())
    });
    server.wait_command_calls("blpop", waits_from + 1).await;
    assert!(
        lock.inspect(&mut conn, "ledger").await.unwrap().waiters,
        "the waiter's flag"
    );

    let pushes = server.command_calls("lpush").await;
    let done = lock
        .force_release(&mut conn, "ledger", ExpectedHolder::Any)
        .await
        .unwrap();
    // The release pushed the waiter its wake-up.
    assert_eq!(
        server.command_calls("lpush").await - pushes,
        1,
        "no wake-up pushed"
    );
    assert_eq!(
        done,
        ForceRelease::Released {
            token: OWNER.to_string()
        }
    );
    let (acquired, waited) = waiter.await.unwrap();
    assert!(acquired, "the waiter did not get the lock");
    assert!(
        waited < Duration::from_secs(10),
        "woken, not timed out: {waited:?}"
    );

    // The evicted holder: its renewal reports the loss, and once the new holder has written,
    // its fenced write is refused.
    assert_eq!(
        lock.renew(&mut conn, &mut stuck).await.unwrap(),
        Renew::Lost
    );
    let now = lock.inspect(&mut conn, "ledger").await.unwrap();
    let newer = now.last_fencing_token.expect("a fence");
    assert!(newer > evicted_token, "{newer:?} after {evicted_token:?}");
    assert_eq!(
        lock.fenced_set(&mut conn, "ledger:data", newer, "new")
            .await
            .unwrap(),
        FencedWrite::Written
    );
    let stale = lock
        .fenced_set(&mut conn, "ledger:data", evicted_token, "old")
        .await
        .unwrap();
    assert!(matches!(stale, FencedWrite::Stale { .. }), "{stale:?}");
}

#[tokio::test]
async fn bad_input_and_foreign_data_are_typed_errors() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let lock = Lock::new();
    assert!(matches!(
        lock.inspect(&mut conn, "").await,
        Err(redkit::Error::InvalidInput { .. })
    ));
    assert!(matches!(
        lock.force_release(&mut conn, "r", ExpectedHolder::Token("short"))
            .await,
        Err(redkit::Error::InvalidInput { .. })
    ));
    let _: () = server
        .cmd(&["SET", &lock.fence_key("r").unwrap(), "not-a-token"])
        .await;
    assert!(matches!(
        lock.inspect(&mut conn, "r").await,
        Err(redkit::Error::CorruptData { .. })
    ));
    let _: i64 = server
        .cmd(&["HSET", &lock.key("h").unwrap(), "f", "v"])
        .await;
    assert!(matches!(
        lock.inspect(&mut conn, "h").await,
        Err(redkit::Error::WrongType { .. })
    ));
}

#[tokio::test]
async fn a_semaphores_holders_are_read_and_one_permit_evicted() {
    use redkit::lock::{Release, Semaphore};
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let sem = Semaphore::new();
    let long = Duration::from_secs(60);
    let mut guards = Vec::new();
    for (token, ttl) in [
        ("holder-a-0000000001", long),
        ("holder-b-0000000002", long),
        ("holder-c-0000000003", Duration::from_millis(100)),
    ] {
        let options = LockOptions::new().token(token).ttl(ttl);
        let Acquire::Acquired(g) = sem.acquire(&mut conn, "export", 3, &options).await.unwrap()
        else {
            panic!("a free permit was not taken");
        };
        guards.push(g);
    }
    // The short lease ends (the time is what is tested: its TTL plus slack).
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = snapshot(&mut conn).await;
    let state = sem
        .inspect(&mut conn, "export", redkit::nonzero!(10))
        .await
        .unwrap();
    same_dumps(&before, &snapshot(&mut conn).await, "semaphore inspect");
    assert_eq!((state.live, state.expired), (2, 1), "{state:?}");
    let tokens: Vec<&str> = state.holders.iter().map(|h| h.token.as_str()).collect();
    assert_eq!(tokens.len(), 2);
    assert!(tokens.contains(&"holder-a-0000000001") && tokens.contains(&"holder-b-0000000002"));
    assert!(state
        .holders
        .iter()
        .all(|h| h.lease_left > Duration::from_secs(50) && h.lease_left <= long));
    let one = sem
        .inspect(&mut conn, "export", redkit::nonzero!(1))
        .await
        .unwrap();
    assert_eq!((one.live, one.holders.len()), (2, 1));

    // Evict one: its permit comes back (a wake-up pushed), its holder's renewal says lost.
    let pushes = server.command_calls("lpush").await;
    assert_eq!(
        sem.evict(&mut conn, "export", "holder-a-0000000001")
            .await
            .unwrap(),
        Release::Released
    );
    assert_eq!(server.command_calls("lpush").await - pushes, 1);
    assert_eq!(
        sem.evict(&mut conn, "export", "holder-a-0000000001")
            .await
            .unwrap(),
        Release::NotOwner
    );
    let after = sem
        .inspect(&mut conn, "export", redkit::nonzero!(10))
        .await
        .unwrap();
    assert_eq!(after.live, 1);
    let mut evicted = guards.remove(0);
    assert_eq!(
        sem.renew(&mut conn, &mut evicted).await.unwrap(),
        Renew::Lost
    );
    assert!(matches!(
        sem.evict(&mut conn, "export", "short").await,
        Err(redkit::Error::InvalidInput { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_locks_queue_is_read_and_a_stuck_holder_evicted() {
    use redkit::lock::{FairLock, Release};
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let fair = FairLock::new();
    let holder = "fair-holder-00000000001";
    let options = LockOptions::new()
        .token(holder)
        .ttl(Duration::from_secs(30));
    let Acquire::Acquired(mut stuck) = fair
        .try_acquire(&mut conn, "ledger", &options)
        .await
        .unwrap()
    else {
        panic!("a free fair lock was not taken");
    };
    let mut own = server.conn().await;
    let waiter_lock = fair.clone();
    let waiter = tokio::spawn(async move {
        let started = Instant::now();
        let options = LockOptions::new()
            .token("fair-waiter-00000000002")
            .ttl(Duration::from_secs(30))
            .max_wait(Duration::from_secs(20));
        let got = waiter_lock
            .acquire(&mut own, "ledger", &options)
            .await
            .unwrap();
        (matches!(got, Acquire::Acquired(_)), started.elapsed())
    });
    // Until the waiter has joined the queue (bounded: the waiter joins at once).
    let deadline = Instant::now() + Duration::from_secs(10);
    let state = loop {
        let state = fair
            .inspect(&mut conn, "ledger", redkit::nonzero!(10))
            .await
            .unwrap();
        if state.queued == 2 {
            break state;
        }
        assert!(
            Instant::now() < deadline,
            "the waiter never joined: {state:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let order: Vec<&str> = state.entries.iter().map(|e| e.token.as_str()).collect();
    assert_eq!(order, [holder, "fair-waiter-00000000002"]);
    assert!(state.entries[0]
        .lease_left
        .is_some_and(|l| l > Duration::from_secs(25)));
    assert!(state.entries[0].arrival < state.entries[1].arrival);
    assert_eq!(
        state.last_fencing_token.map(|t| t.get()),
        Some(state.entries[1].arrival)
    );
    assert_eq!(
        Some(state.entries[0].arrival),
        stuck.fencing_token().map(|t| t.get())
    );

    // Evict the stuck holder: the waiter behind it is woken and takes the lock.
    assert_eq!(
        fair.evict(&mut conn, "ledger", holder).await.unwrap(),
        Release::Released
    );
    let (acquired, waited) = waiter.await.unwrap();
    assert!(acquired, "the waiter did not get the lock");
    assert!(
        waited < Duration::from_secs(10),
        "woken, not timed out: {waited:?}"
    );
    assert_eq!(
        fair.renew(&mut conn, &mut stuck).await.unwrap(),
        Renew::Lost
    );
    assert_eq!(
        fair.evict(&mut conn, "ledger", "absent-token-000000000")
            .await
            .unwrap(),
        Release::NotOwner
    );
}

#[tokio::test]
async fn a_reentrant_locks_owner_and_hold_count_are_read() {
    use redkit::lock::{Owner, ReentrantLock};
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let lock = ReentrantLock::new();
    let free = lock.inspect(&mut conn, "account").await.unwrap();
    assert_eq!(
        (free.holder, free.holds, free.last_fencing_token),
        (None, 0, None)
    );
    let me = Owner::new();
    let options = LockOptions::new().ttl(Duration::from_secs(30));
    let mut guards = Vec::new();
    for _ in 0..3 {
        let Acquire::Acquired(g) = lock
            .acquire(&mut conn, "account", &me, &options)
            .await
            .unwrap()
        else {
            panic!("the owner did not take its lock again");
        };
        guards.push(g);
    }
    let before = snapshot(&mut conn).await;
    let state = lock.inspect(&mut conn, "account").await.unwrap();
    same_dumps(&before, &snapshot(&mut conn).await, "reentrant inspect");
    assert_eq!(state.holds, 3);
    let holder = state.holder.expect("held");
    assert!(holder.ttl.is_some_and(|t| t > Duration::from_secs(25)));
    assert_eq!(state.last_fencing_token, guards[0].fencing_token());
    lock.release(&mut conn, guards.pop().unwrap())
        .await
        .unwrap();
    assert_eq!(lock.inspect(&mut conn, "account").await.unwrap().holds, 2);
}

#[tokio::test]
async fn a_read_write_locks_readers_and_waiting_writer_are_read() {
    use redkit::lock::{Mode, RwLock};
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let rw = RwLock::new();
    let options = LockOptions::<RwLock>::new().ttl(Duration::from_secs(30));
    let mut readers = Vec::new();
    for _ in 0..2 {
        let Acquire::Acquired(g) = rw
            .try_acquire(&mut conn, "catalog", Mode::Read, &options)
            .await
            .unwrap()
        else {
            panic!("a reader was refused");
        };
        readers.push(g);
    }
    let before = snapshot(&mut conn).await;
    let state = rw
        .inspect(&mut conn, "catalog", redkit::nonzero!(1))
        .await
        .unwrap();
    same_dumps(&before, &snapshot(&mut conn).await, "rw inspect");
    assert_eq!(
        (state.live_readers, state.readers.len()),
        (2, 1),
        "{state:?}"
    );
    assert!(
        state.writer.is_none() && state.waiting_writer.is_none(),
        "{state:?}"
    );
    assert!(state.readers[0]
        .ttl
        .is_some_and(|t| t > Duration::from_secs(25)));
    assert_eq!(state.last_fencing_token, readers[1].fencing_token());

    // A waiting writer's intent (which holds new readers back), as rw_acquire writes it.
    let intent = format!("{}:intent", rw.key("catalog").unwrap());
    let _: () = server
        .cmd(&["SET", &intent, "waiting-writer-0000001", "PX", "5000"])
        .await;
    let state = rw
        .inspect(&mut conn, "catalog", redkit::nonzero!(1))
        .await
        .unwrap();
    let waiting = state.waiting_writer.expect("the intent");
    assert_eq!(waiting.token, "waiting-writer-0000001");
    assert!(waiting.ttl.is_some_and(|t| t <= Duration::from_secs(5)));
}

/// Every lock kind's inspection is a read-only script: a read-only replica serves each.
#[tokio::test]
async fn every_inspection_is_served_by_a_read_only_replica() {
    use redkit::lock::{FairLock, Mode, Owner, ReentrantLock, RwLock, Semaphore};
    let pair = ReplicatedPair::spawn().await;
    let mut primary = pair.primary.conn().await;
    let mut replica = pair.replica.conn().await;
    let ttl = Duration::from_secs(30);
    let sem = Semaphore::new();
    let fair = FairLock::new();
    let rw = RwLock::new();
    let reentrant = ReentrantLock::new();
    let _permit = sem
        .try_acquire(&mut primary, "r", 2, &LockOptions::new().ttl(ttl))
        .await
        .unwrap();
    let _turn = fair
        .try_acquire(&mut primary, "r", &LockOptions::new().ttl(ttl))
        .await
        .unwrap();
    let _reader = rw
        .try_acquire(&mut primary, "r", Mode::Read, &LockOptions::new().ttl(ttl))
        .await
        .unwrap();
    let _hold = reentrant
        .try_acquire(
            &mut primary,
            "r",
            &Owner::new(),
            &LockOptions::new().ttl(ttl),
        )
        .await
        .unwrap();
    support::until_replicated(&mut primary).await;
    let n = redkit::nonzero!(5);
    assert_eq!(sem.inspect(&mut replica, "r", n).await.unwrap().live, 1);
    assert_eq!(fair.inspect(&mut replica, "r", n).await.unwrap().queued, 1);
    assert_eq!(
        rw.inspect(&mut replica, "r", n).await.unwrap().live_readers,
        1
    );
    assert_eq!(reentrant.inspect(&mut replica, "r").await.unwrap().holds, 1);
}
