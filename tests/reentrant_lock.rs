//! `ReentrantLock` against real Redis (single node and Cluster): nested holds counted and the
//! lock freed only at zero, another owner refused until then, 64 owners with nested holds
//! (exact count, strictly increasing fencing tokens), the shared lease renewed while a
//! hold is live, mutual exclusion with an exact count on a Cluster, bad input refused before
//! sending, nothing half-applied (poisoned keys, ACL denial of every inner command).

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redkit::lock::{Acquire, Held, LockGuard, LockOptions, Owner, ReentrantLock, Release, Renew};
use redkit::Error;
use support::{RedisCluster, RedisServer};

fn ttl(ms: u64) -> LockOptions<ReentrantLock> {
    LockOptions::new().ttl(Duration::from_millis(ms))
}

async fn held<C: ConnectionLike>(
    lock: &ReentrantLock,
    conn: &mut C,
    resource: &str,
    owner: &Owner,
    options: &LockOptions<ReentrantLock>,
) -> LockGuard<ReentrantLock> {
    match lock.acquire(conn, resource, owner, options).await.unwrap() {
        Acquire::Acquired(guard) => guard,
        other => panic!("expected the lock, got {other:?}"),
    }
}

#[tokio::test]
async fn nested_holds_are_counted_and_another_owner_waits_until_zero() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let lock = ReentrantLock::new();
    let (me, other) = (Owner::new(), Owner::new());
    let first = held(&lock, &mut conn, "r", &me, &ttl(10_000)).await;
    let second = held(&lock, &mut conn, "r", &me.clone(), &ttl(10_000)).await;
    let third = held(&lock, &mut conn, "r", &me, &ttl(10_000)).await;
    assert_eq!(lock.holds(&mut conn, "r", &me).await.unwrap(), 3);
    assert_eq!(
        first.fencing_token().unwrap(),
        third.fencing_token().unwrap(),
        "nested holds share the token"
    );
    for (guard, left) in [(third, 2), (second, 1)] {
        assert!(matches!(
            lock.acquire(&mut conn, "r", &other, &ttl(10_000))
                .await
                .unwrap(),
            Acquire::Busy(Held { ttl: Some(_), .. })
        ));
        assert!(matches!(
            lock.try_acquire(&mut conn, "r", &other, &ttl(10_000).retries(100))
                .await
                .unwrap(),
            Acquire::Busy(Held { ttl: Some(_), .. })
        ));
        assert_eq!(
            lock.release(&mut conn, guard).await.unwrap(),
            Release::Released
        );
        assert_eq!(lock.holds(&mut conn, "r", &me).await.unwrap(), left);
    }
    assert!(matches!(
        lock.acquire(&mut conn, "r", &other, &ttl(10_000))
            .await
            .unwrap(),
        Acquire::Busy { .. }
    ));
    let token = first.fencing_token().unwrap();
    assert_eq!(
        lock.release(&mut conn, first).await.unwrap(),
        Release::Released
    );
    let exists: i64 = server.cmd(&["EXISTS", &lock.key("r").unwrap()]).await;
    assert_eq!(exists, 0, "free at zero");
    let theirs = held(&lock, &mut conn, "r", &other, &ttl(10_000)).await;
    assert!(
        theirs.fencing_token().unwrap() > token,
        "the next owner's token is larger"
    );
    // A hold of a lock that is no longer ours: NotOwner, and the new owner's holds untouched.
    let stale = held(&lock, &mut conn, "r", &other, &ttl(10_000)).await;
    let _: () = server.cmd(&["DEL", &lock.key("r").unwrap()]).await;
    let again = held(&lock, &mut conn, "r", &me, &ttl(10_000)).await;
    assert_eq!(
        lock.release(&mut conn, stale).await.unwrap(),
        Release::NotOwner
    );
    assert_eq!(
        lock.release(&mut conn, theirs).await.unwrap(),
        Release::NotOwner
    );
    assert_eq!(lock.holds(&mut conn, "r", &me).await.unwrap(), 1);
    lock.release(&mut conn, again).await.unwrap();
}

#[tokio::test]
async fn the_lease_renews_while_a_hold_is_live() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let lock = ReentrantLock::new();
    let (me, other) = (Owner::new(), Owner::new());
    let outer = held(&lock, &mut conn, "w", &me, &ttl(300)).await;
    let mut inner = held(&lock, &mut conn, "w", &me, &ttl(300)).await;
    let lost = lock.watch(&conn, &mut inner).unwrap();
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert!(!lost.is_lost() && inner.is_valid());
    assert!(matches!(
        lock.acquire(&mut conn, "w", &other, &ttl(300))
            .await
            .unwrap(),
        Acquire::Busy { .. }
    ));
    assert_eq!(
        lock.release(&mut conn, inner).await.unwrap(),
        Release::Released
    );
    let mut outer = outer;
    assert_eq!(
        lock.renew(&mut conn, &mut outer).await.unwrap(),
        Renew::Renewed
    );
    assert_eq!(
        lock.release(&mut conn, outer).await.unwrap(),
        Release::Released
    );
    // Unwatched and unreleased: the lock is free after the lease.
    let dropped = held(&lock, &mut conn, "w", &me, &ttl(300)).await;
    drop(dropped);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let theirs = held(&lock, &mut conn, "w", &other, &ttl(300)).await;
    lock.release(&mut conn, theirs).await.unwrap();
}

#[tokio::test]
async fn a_crashed_owners_nested_holds_end_with_the_lease_not_before_not_much_later() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let lock = ReentrantLock::new();
    let (crashed, other) = (Owner::new(), Owner::new());
    let lease = Duration::from_millis(1_000);
    let outer = held(&lock, &mut conn, "k", &crashed, &ttl(1_000)).await;
    let granted = std::time::Instant::now();
    let inner = held(&lock, &mut conn, "k", &crashed, &ttl(1_000)).await;
    drop((outer, inner)); // never released, no watchdog: the owner "crashed" holding twice
    let taken = loop {
        match lock
            .acquire(&mut conn, "k", &other, &ttl(1_000))
            .await
            .unwrap()
        {
            Acquire::Acquired(guard) => break (guard, granted.elapsed()),
            Acquire::Busy { .. } => tokio::time::sleep(Duration::from_millis(10)).await,
            o => panic!("{o:?}"),
        }
    };
    let (guard, after) = taken;
    // The second hold measured its lease from its own grant: up to a few ms later.
    assert!(after >= lease, "before the lease ended: {after:?}");
    assert!(
        after <= lease + Duration::from_millis(300),
        "too late: {after:?}"
    );
    assert_eq!(
        lock.release(&mut conn, guard).await.unwrap(),
        Release::Released
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_owners_with_nested_holds_exclude_with_increasing_fences() {
    let server = RedisServer::spawn().await;
    let mut conns = Vec::new();
    for _ in 0..4 {
        conns.push(server.conn().await);
    }
    let (tasks, cycles) = (64, 4);
    let wait = ttl(20_000)
        .retries(1_000_000)
        .retry_delay(Duration::from_millis(1))
        .jitter(Duration::from_millis(4))
        .max_wait(Duration::from_secs(120));
    let mut handles = Vec::new();
    for i in 0..tasks {
        let mut conn = conns[i % conns.len()].clone();
        let wait = wait.clone();
        handles.push(tokio::spawn(async move {
            let lock = ReentrantLock::new();
            let me = Owner::new();
            let mut seen = Vec::with_capacity(cycles);
            for _ in 0..cycles {
                let outer = held(&lock, &mut conn, "ctr", &me, &wait).await;
                let inner = held(&lock, &mut conn, "ctr", &me, &wait).await;
                assert_eq!(
                    inner.fencing_token().unwrap(),
                    outer.fencing_token().unwrap(),
                    "nested: same fence"
                );
                lock.release(&mut conn, inner).await.unwrap(); // the outer hold remains
                let n = support::bump(&mut conn, "n:{ctr}").await;
                seen.push((n, outer.fencing_token().unwrap().get()));
                assert_eq!(
                    lock.release(&mut conn, outer).await.unwrap(),
                    Release::Released
                );
            }
            seen
        }));
    }
    let mut seen = Vec::new();
    for h in handles {
        let mine = tokio::time::timeout(Duration::from_secs(120), h)
            .await
            .expect("bounded")
            .unwrap();
        seen.extend(mine);
    }
    let total = (tasks * cycles) as u64;
    assert_eq!(server.cmd::<u64>(&["GET", "n:{ctr}"]).await, total);
    support::assert_exclusive_and_fenced(seen, total);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_on_a_cluster_with_nested_holds() {
    let cluster = RedisCluster::spawn().await;
    let inside = Arc::new(Mutex::new(0));
    let mut handles = Vec::new();
    for _ in 0..8 {
        let mut own = cluster.conn().await;
        let inside = Arc::clone(&inside);
        handles.push(tokio::spawn(async move {
            let lock = ReentrantLock::new();
            let me = Owner::new();
            let wait = ttl(20_000)
                .retries(100_000)
                .retry_delay(Duration::from_millis(2))
                .jitter(Duration::from_millis(3));
            for _ in 0..3 {
                let outer = held(&lock, &mut own, "cx", &me, &wait).await;
                let inner = held(&lock, &mut own, "cx", &me, &wait).await;
                {
                    let mut n = inside.lock().unwrap();
                    assert_eq!(*n, 0, "two owners");
                    *n += 1;
                }
                let n: Option<i64> = redis::cmd("GET")
                    .arg("n:{cx}")
                    .query_async(&mut own)
                    .await
                    .unwrap();
                lock.release(&mut own, inner).await.unwrap(); // still held by the outer hold
                tokio::time::sleep(Duration::from_millis(2)).await;
                let _: () = redis::cmd("SET")
                    .arg("n:{cx}")
                    .arg(n.unwrap_or(0) + 1)
                    .query_async(&mut own)
                    .await
                    .unwrap();
                *inside.lock().unwrap() -= 1;
                assert_eq!(
                    lock.release(&mut own, outer).await.unwrap(),
                    Release::Released
                );
            }
        }));
    }
    for h in handles {
        tokio::time::timeout(Duration::from_secs(60), h)
            .await
            .expect("bounded")
            .unwrap();
    }
    let mut conn = cluster.conn().await;
    let n: i64 = redis::cmd("GET")
        .arg("n:{cx}")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(n, 24);
}

#[tokio::test]
async fn bad_input_is_refused_before_anything_is_sent() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let lock = ReentrantLock::new();
    let me = Owner::new();
    for bad in ["", "short", &"x".repeat(129)] {
        assert!(matches!(
            Owner::from_token(bad),
            Err(Error::InvalidInput { what: "owner", .. })
        ));
    }
    // A caller-supplied owner token cannot be set on LockOptions<ReentrantLock> (a compile
    // error, shown by the compile_fail example on ReentrantLock): the Owner is the token.
    let cases: [(&str, LockOptions<ReentrantLock>, &str); 2] = [
        ("", ttl(1_000), "resource"),
        ("r", LockOptions::new().ttl(Duration::ZERO), "ttl"),
    ];
    for (resource, options, what) in cases {
        match lock.acquire(&mut conn, resource, &me, &options).await {
            Err(Error::InvalidInput { what: w, .. }) => assert_eq!(w, what),
            other => panic!("{what}: {other:?}"),
        }
    }
    assert!(
        support::snapshot(&mut conn).await.is_empty(),
        "nothing written"
    );
    assert!(
        !format!("{me:?}").contains(char::is_numeric),
        "no token in Debug"
    );
}

async fn run(cmd: &mut redis::Cmd, conn: &mut MultiplexedConnection) {
    let _: redis::Value = cmd.query_async(conn).await.unwrap();
}

#[tokio::test]
async fn poisoned_keys_and_acl_denials_change_nothing() {
    let server = RedisServer::spawn().await;
    let mut admin = server.conn().await;
    let lock = ReentrantLock::new();
    let me = Owner::from_token("owner-token-0123456789").unwrap();
    let key = lock.key("p").unwrap();
    let fence = format!("{key}:fence");
    for (target, bad) in [
        (&key, "<string>"),
        (&key, "<two>"),
        (&key, "<count>"),
        (&fence, "<hash>"),
        (&fence, "x"),
    ] {
        run(redis::cmd("FLUSHALL").arg("SYNC"), &mut admin).await;
        let mut poison = match bad {
            "<two>" | "<count>" | "<hash>" => redis::cmd("HSET"),
            _ => redis::cmd("SET"),
        };
        match bad {
            "<two>" => poison
                .arg(target)
                .arg("owner-token-0123456789")
                .arg(1)
                .arg("b-token-0123456789")
                .arg(1),
            "<count>" => poison.arg(target).arg("owner-token-0123456789").arg("abc"),
            "<hash>" => poison.arg(target).arg("f").arg(1),
            _ => poison.arg(target).arg("x"),
        };
        run(&mut poison, &mut admin).await;
        let before = support::snapshot(&mut admin).await;
        let case = format!("{target} = {bad}");
        match (bad, lock.acquire(&mut admin, "p", &me, &ttl(60_000)).await) {
            ("<string>" | "<hash>", Err(Error::WrongType { script })) => {
                assert_eq!(script, "reentrant_acquire.v1")
            }
            ("<two>" | "<count>" | "x", Err(Error::CorruptData { script, .. })) => {
                assert_eq!(script, "reentrant_acquire.v1")
            }
            (_, other) => panic!("{case}: {other:?}"),
        }
        support::same_dumps(&before, &support::snapshot(&mut admin).await, &case);
    }
    let acquire_uses = ["type", "hgetall", "get", "time", "hset", "pexpire", "set"];
    let renew_uses = ["type", "hexists", "pexpire"];
    let release_uses = ["type", "hget", "hset", "del"];
    for denied in acquire_uses.iter().chain(["hexists", "hget", "del"].iter()) {
        let mut conn = support::denied_conn(&server, denied).await;
        let check = |outcome: Result<(), Error>, uses: bool, script: &str, case: &str| match outcome
        {
            Err(Error::PermissionDenied { script: s, detail }) if uses => {
                assert_eq!(s, script, "{case}");
                assert!(!detail.contains("{p}"), "{case}: {detail}");
            }
            Ok(()) if !uses => {}
            other => panic!("{case}: {other:?}"),
        };
        // Held once by the owner: acquire is a nested hold, release leaves one.
        run(redis::cmd("FLUSHALL").arg("SYNC"), &mut admin).await;
        let outer = held(&lock, &mut admin, "p", &me, &ttl(60_000)).await;
        let mut inner = held(&lock, &mut admin, "p", &me, &ttl(60_000)).await;
        let before = support::snapshot(&mut admin).await;
        let case = format!("-{denied}, acquire");
        let uses = acquire_uses.contains(denied); // every command is checked first
        let outcome = lock.acquire(&mut conn, "p", &me, &ttl(60_000)).await;
        check(outcome.map(|_| ()), uses, "reentrant_acquire.v1", &case);
        if uses {
            support::same_dumps(&before, &support::snapshot(&mut admin).await, &case);
        }
        run(redis::cmd("FLUSHALL").arg("SYNC"), &mut admin).await;
        let before = support::snapshot(&mut admin).await;
        let case = format!("-{denied}, first acquire");
        let outcome = lock.acquire(&mut conn, "p", &me, &ttl(60_000)).await;
        check(
            outcome.map(|_| ()),
            acquire_uses.contains(denied),
            "reentrant_acquire.v1",
            &case,
        );
        if acquire_uses.contains(denied) {
            support::same_dumps(&before, &support::snapshot(&mut admin).await, &case);
        }
        run(redis::cmd("FLUSHALL").arg("SYNC"), &mut admin).await;
        drop((outer, inner));
        let outer = held(&lock, &mut admin, "p", &me, &ttl(60_000)).await;
        inner = held(&lock, &mut admin, "p", &me, &ttl(60_000)).await;
        let before = support::snapshot(&mut admin).await;
        let case = format!("-{denied}, renew");
        let uses = renew_uses.contains(denied);
        check(
            lock.renew(&mut conn, &mut inner).await.map(|_| ()),
            uses,
            "reentrant_renew.v1",
            &case,
        );
        if uses {
            support::same_dumps(&before, &support::snapshot(&mut admin).await, &case);
        }
        for (guard, what) in [(inner, "nested"), (outer, "last")] {
            let before = support::snapshot(&mut admin).await;
            let case = format!("-{denied}, release {what}");
            let uses = release_uses.contains(denied); // every command is checked first
            let outcome = lock.release(&mut conn, guard).await;
            check(outcome.map(|_| ()), uses, "reentrant_release.v1", &case);
            if uses {
                support::same_dumps(&before, &support::snapshot(&mut admin).await, &case);
            }
        }
    }
}
