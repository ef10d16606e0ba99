//! The lock's failure contract against real Redis: nothing half-applied (poisoned keys, ACL
//! denial of every inner command), idempotent acquire for a caller-supplied owner token,
//! fencing tokens that never go backwards (expiry, DEL, restart, failover to a lagging
//! replica), replication acknowledgement, and no panic on extreme options.

#[path = "support/harness.rs"]
mod harness;
mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redkit::lock::{
    Acquire, Fence, FencedWrite, FencingToken, Held, Lock, LockGuard, LockOptions, Renew,
};
use redkit::script::Replication;
use redkit::Error;
use support::{RedisServer, ReplicatedPair};

const TOKEN: &str = "owner-token-0123456789";
const OTHER: &str = "other-token-0123456789";

fn lock() -> Lock {
    Lock::new()
}

fn with_token(token: &str) -> LockOptions<Lock> {
    LockOptions::new()
        .fencing(true)
        .ttl(Duration::from_secs(200))
        .token(token)
}

async fn acquired<C: ConnectionLike>(
    lock: &Lock,
    conn: &mut C,
    resource: &str,
    options: &LockOptions<Lock>,
) -> LockGuard<Lock> {
    match lock.acquire(conn, resource, options).await.unwrap() {
        Acquire::Acquired(guard) => guard,
        other => panic!("expected the lock, got {other:?}"),
    }
}

/// Same keys, same values, same TTL presence, and no TTL moved forward (time only lowers it).
fn assert_unchanged(
    before: &BTreeMap<Vec<u8>, (Vec<u8>, i64)>,
    after: &BTreeMap<Vec<u8>, (Vec<u8>, i64)>,
    case: &str,
) {
    let keys = |m: &BTreeMap<Vec<u8>, (Vec<u8>, i64)>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(before), keys(after), "{case}: key set changed");
    for (key, (dump, pttl)) in before {
        let (dump2, pttl2) = &after[key];
        let name = String::from_utf8_lossy(key);
        assert_eq!(dump, dump2, "{case}: {name} changed");
        assert_eq!(
            *pttl == -1,
            *pttl2 == -1,
            "{case}: {name} TTL presence changed"
        );
        assert!(
            pttl2 <= pttl,
            "{case}: {name} TTL refreshed ({pttl} -> {pttl2})"
        );
    }
}

/// Puts `bad` at `key`: a string, or a wrong type.
async fn poison(conn: &mut MultiplexedConnection, key: &str, bad: &str) {
    let mut cmd = match bad {
        "<hash>" => redis::cmd("HSET"),
        "<list>" => redis::cmd("RPUSH"),
        _ => redis::cmd("SET"),
    };
    match bad {
        "<hash>" => cmd.arg(key).arg("f").arg("1"),
        "<list>" => cmd.arg(key).arg("1"),
        _ => cmd.arg(key).arg(bad),
    };
    let _: () = cmd.query_async(conn).await.unwrap();
    let _: () = redis::cmd("PEXPIRE")
        .arg(key)
        .arg(100_000)
        .query_async(conn)
        .await
        .unwrap();
}

const BAD_VALUES: [&str; 9] = [
    "<hash>",
    "<list>",
    "007",
    "99999999999999999999",
    "1.5",
    "-0",
    "+5",
    " 5",
    "1e3",
];

async fn a_poisoned_fence_key_is_refused_before_any_write() {
    let server = RedisServer::spawn().await;
    let mut admin = server.conn().await;
    let mut conn = server.conn().await;
    let lock = lock();
    for bad in BAD_VALUES {
        // Free lock, poisoned fence: v1 did SET NX, then INCR failed (an orphan lock).
        // Held by this token (a retry): no lease refresh either.
        for held in [false, true] {
            let _: () = redis::cmd("FLUSHALL")
                .query_async(&mut admin)
                .await
                .unwrap();
            let resource = "res";
            if held {
                let _: () = redis::cmd("SET")
                    .arg(lock.key(resource).unwrap())
                    .arg(TOKEN)
                    .arg("PX")
                    .arg(100_000)
                    .query_async(&mut admin)
                    .await
                    .unwrap();
            }
            poison(&mut admin, &lock.fence_key(resource).unwrap(), bad).await;
            let before = support::snapshot(&mut admin).await;
            let case = format!("fence = {bad:?}, held = {held}");
            match lock.acquire(&mut conn, resource, &with_token(TOKEN)).await {
                Err(Error::CorruptData { .. }) | Err(Error::WrongType { .. }) => {}
                other => panic!("{case}: {other:?}"),
            }
            assert_unchanged(&before, &support::snapshot(&mut admin).await, &case);
        }
    }
}

async fn a_poisoned_lock_key_or_fenced_value_changes_nothing() {
    let server = RedisServer::spawn().await;
    let mut admin = server.conn().await;
    let mut conn = server.conn().await;
    let lock = lock();
    for bad in BAD_VALUES {
        let _: () = redis::cmd("FLUSHALL")
            .query_async(&mut admin)
            .await
            .unwrap();
        let key = lock.key("res").unwrap();
        poison(&mut admin, &key, bad).await;
        let before = support::snapshot(&mut admin).await;
        let case = format!("lock key = {bad:?}");
        // A string there is another owner's token (Busy); a wrong type is an error.
        match lock.acquire(&mut conn, "res", &with_token(TOKEN)).await {
            Ok(Acquire::Busy { .. }) if !bad.starts_with('<') => {}
            Err(Error::WrongType { .. }) if bad.starts_with('<') => {}
            other => panic!("{case}: {other:?}"),
        }
        assert_unchanged(&before, &support::snapshot(&mut admin).await, &case);

        // fenced_set over a poisoned stored fence (or a wrong type at the value key).
        let _: () = redis::cmd("FLUSHALL")
            .query_async(&mut admin)
            .await
            .unwrap();
        let data = "doc:{1}";
        if bad.starts_with('<') {
            poison(
                &mut admin,
                data,
                if bad == "<hash>" { "<list>" } else { bad },
            )
            .await;
        } else {
            let _: () = redis::cmd("HSET")
                .arg(data)
                .arg("value")
                .arg("v")
                .arg("fence")
                .arg(bad)
                .query_async(&mut admin)
                .await
                .unwrap();
        }
        let before = support::snapshot(&mut admin).await;
        let case = format!("stored fence = {bad:?}");
        match lock
            .fenced_set(
                &mut conn,
                data,
                FencingToken::new(u64::MAX >> 1).unwrap(),
                "w",
            )
            .await
        {
            Err(Error::CorruptData { .. }) | Err(Error::WrongType { .. }) => {}
            other => panic!("{case}: {other:?}"),
        }
        assert_unchanged(&before, &support::snapshot(&mut admin).await, &case);
    }
}

/// A connection as a user allowed everything but `denied`.
async fn denied_conn(server: &RedisServer, user: &str, denied: &str) -> MultiplexedConnection {
    let minus = format!("-{denied}");
    let _: () = server
        .cmd(&[
            "ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", &minus,
        ])
        .await;
    let url = format!("redis://{user}:pw@127.0.0.1:{}/", server.port());
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

async fn every_inner_command_denied_by_acl_is_permission_denied_and_writes_nothing() {
    let server = RedisServer::spawn().await;
    let mut admin = server.conn().await;
    let lock = lock();
    let key = lock.key("res").unwrap();
    let fence = lock.fence_key("res").unwrap();
    // acquire: free, held by this token (retry), held by another (busy); renew; release;
    // fenced_set. Each denied command of each script, in each state.
    for denied in [
        "get", "time", "pttl", "set", "pexpire", "del", "hget", "hset", "exists",
    ] {
        let mut conn = denied_conn(&server, &format!("u-{denied}"), denied).await;
        for state in ["free", "mine", "other"] {
            let _: () = redis::cmd("FLUSHALL")
                .query_async(&mut admin)
                .await
                .unwrap();
            let _: () = redis::cmd("SET")
                .arg(&fence)
                .arg("5")
                .arg("PX")
                .arg(100_000)
                .query_async(&mut admin)
                .await
                .unwrap();
            let _: () = redis::cmd("HSET")
                .arg("doc:{1}")
                .arg("value")
                .arg("v")
                .arg("fence")
                .arg("5")
                .query_async(&mut admin)
                .await
                .unwrap();
            if state != "free" {
                let owner = if state == "mine" { TOKEN } else { OTHER };
                let _: () = redis::cmd("SET")
                    .arg(&key)
                    .arg(owner)
                    .arg("PX")
                    .arg(100_000)
                    .query_async(&mut admin)
                    .await
                    .unwrap();
            }
            let before = support::snapshot(&mut admin).await;
            let case = format!("-{denied}, {state}");
            let acquire = lock.acquire(&mut conn, "res", &with_token(TOKEN)).await;
            // v3 runs only what its path needs (v2 prechecked all five in every state):
            // free: get, time, set; a retry by the owner: + pexpire; busy: + pttl.
            let path: &[&str] = match state {
                "free" => &["get", "time", "set"],
                "mine" => &["get", "time", "set", "pexpire"],
                _ => &["get", "time", "set", "pttl"],
            };
            let uses = path.contains(&denied);
            match acquire {
                Err(Error::PermissionDenied {
                    ref script,
                    ref detail,
                }) if uses => {
                    assert_eq!(script, "lock_acquire.v5", "{case}");
                    assert!(!detail.contains("res"), "{case}: no key in {detail}");
                }
                Ok(_) if !uses => {}
                other => panic!("{case}: acquire {other:?}"),
            }
            if uses {
                assert_unchanged(
                    &before,
                    &support::snapshot(&mut admin).await,
                    &format!("{case}, acquire"),
                );
            }
            let _: () = redis::cmd("FLUSHALL")
                .query_async(&mut admin)
                .await
                .unwrap();
            for (k, v) in [(&key, TOKEN), (&fence, "5")] {
                let _: () = redis::cmd("SET")
                    .arg(k)
                    .arg(v)
                    .arg("PX")
                    .arg(100_000)
                    .query_async(&mut admin)
                    .await
                    .unwrap();
            }
            let _: () = redis::cmd("HSET")
                .arg("doc:{1}")
                .arg("value")
                .arg("v")
                .arg("fence")
                .arg("5")
                .query_async(&mut admin)
                .await
                .unwrap();
            let before = support::snapshot(&mut admin).await;
            // renew (get, pexpire), fenced_set (hget, hset), release (get, del): a guard
            // for the held key, built by an idempotent acquire as the admin.
            let mut guard = acquired(&lock, &mut admin, "res", &with_token(TOKEN)).await;
            let before_ops = support::snapshot(&mut admin).await;
            assert_eq!(before.len(), before_ops.len());
            let renew = lock.renew(&mut conn, &mut guard).await;
            match renew {
                Err(Error::PermissionDenied { .. }) if ["get", "pexpire"].contains(&denied) => {
                    assert_unchanged(
                        &before_ops,
                        &support::snapshot(&mut admin).await,
                        &format!("{case}, renew"),
                    )
                }
                Ok(Renew::Renewed) if !["get", "pexpire"].contains(&denied) => {}
                other => panic!("{case}: renew {other:?}"),
            }
            let before_ops = support::snapshot(&mut admin).await;
            let write = lock
                .fenced_set(&mut conn, "doc:{1}", FencingToken::new(7).unwrap(), "w")
                .await;
            match write {
                Err(Error::PermissionDenied { .. }) if ["hget", "hset"].contains(&denied) => {
                    assert_unchanged(
                        &before_ops,
                        &support::snapshot(&mut admin).await,
                        &format!("{case}, fenced_set"),
                    )
                }
                Ok(FencedWrite::Written) if !["hget", "hset"].contains(&denied) => {}
                other => panic!("{case}: fenced_set {other:?}"),
            }
            let before_ops = support::snapshot(&mut admin).await;
            let release = lock.release(&mut conn, guard).await;
            match release {
                Err(Error::PermissionDenied { ref script, .. })
                    if ["get", "del"].contains(&denied) =>
                {
                    assert_eq!(script, "lock_release.v5", "{case}");
                    assert_unchanged(
                        &before_ops,
                        &support::snapshot(&mut admin).await,
                        &format!("{case}, release"),
                    )
                }
                Ok(_) if !["get", "del"].contains(&denied) => {}
                other => panic!("{case}: release {other:?}"),
            }
            // A lock whose blocking acquires poll releases with the same script (get, del).
            let quiet = Lock::new().wake_on_release(false);
            let guard = acquired(&quiet, &mut admin, "res", &with_token(TOKEN)).await;
            let before_ops = support::snapshot(&mut admin).await;
            match quiet.release(&mut conn, guard).await {
                Err(Error::PermissionDenied { ref script, .. })
                    if ["get", "del"].contains(&denied) =>
                {
                    assert_eq!(script, "lock_release.v5", "{case}");
                    assert_unchanged(
                        &before_ops,
                        &support::snapshot(&mut admin).await,
                        &format!("{case}, release without wake-ups"),
                    )
                }
                Ok(redkit::lock::Release::Released) if !["get", "del"].contains(&denied) => {}
                other => panic!("{case}: release without wake-ups {other:?}"),
            }
        }
    }
}

async fn a_retry_with_the_same_owner_token_finds_its_own_lock() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let lock = lock();
    let key = lock.key("job").unwrap();
    let options = LockOptions::new()
        .fencing(true)
        .ttl(Duration::from_secs(30))
        .token(TOKEN);
    let first = acquired(&lock, &mut conn, "job", &options).await;
    let t1 = first.fencing_token().unwrap();
    // The reply is "lost": the caller never sees this guard.
    drop(first);
    let _: () = server.cmd(&["PEXPIRE", &key, "5000"]).await;
    let retry = acquired(&lock, &mut conn, "job", &options).await;
    assert_eq!(
        retry.fencing_token().unwrap(),
        t1,
        "same fencing token as stored"
    );
    let pttl: i64 = server.cmd(&["PTTL", &key]).await;
    assert!(pttl > 25_000, "lease refreshed: {pttl}");
    // With retries too (the loop must not wait for its own lock).
    let again = acquired(&lock, &mut conn, "job", &options.clone().retries(3)).await;
    assert_eq!(again.fencing_token().unwrap(), t1);
    // Held by this token but the fence key is gone: a new, larger token is issued and stored.
    let fence = lock.fence_key("job").unwrap();
    let _: () = server.cmd(&["DEL", &fence]).await;
    let renewed = acquired(&lock, &mut conn, "job", &options).await;
    assert!(renewed.fencing_token().unwrap() > t1);
    let stored: u64 = server.cmd(&["GET", &fence]).await;
    assert_eq!(
        FencingToken::new(stored).unwrap(),
        renewed.fencing_token().unwrap()
    );
    assert!(server.cmd::<i64>(&["PTTL", &fence]).await > 60_000);
    let t1 = renewed.fencing_token().unwrap();
    // Another token: busy, and the holder's key is untouched.
    let other = LockOptions::new().fencing(true).token(OTHER);
    assert!(matches!(
        lock.try_acquire(&mut conn, "job", &other).await.unwrap(),
        Acquire::Busy { .. }
    ));
    let holder: String = server.cmd(&["GET", &key]).await;
    assert_eq!(holder, TOKEN);
    // A random token (no `token` set) is busy as well.
    assert!(matches!(
        lock.try_acquire(&mut conn, "job", &LockOptions::new().fencing(true))
            .await
            .unwrap(),
        Acquire::Busy { .. }
    ));
    // After the release, the same token acquires anew with a larger fencing token.
    lock.release(&mut conn, retry).await.unwrap();
    let next = acquired(&lock, &mut conn, "job", &options).await;
    assert!(next.fencing_token().unwrap() > t1);
    // Bad tokens are refused before the round trip.
    for bad in ["short", &"x".repeat(129)] {
        assert!(matches!(
            lock.acquire(
                &mut conn,
                "job",
                &LockOptions::new().fencing(true).token(bad)
            )
            .await,
            Err(Error::InvalidInput { what: "token", .. })
        ));
    }
    lock.release(&mut conn, next).await.unwrap();
}

async fn fencing_tokens_grow_across_fence_loss_restart_and_expiry_and_the_fence_key_expires() {
    let mut server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let lock = lock();
    let fence = lock.fence_key("r").unwrap();
    let short = LockOptions::new()
        .fencing(true)
        .ttl(Duration::from_millis(100));
    let g1 = acquired(&lock, &mut conn, "r", &short).await;
    let t1 = g1.fencing_token().unwrap();
    let pttl: i64 = server.cmd(&["PTTL", &fence]).await;
    assert!(
        pttl > 0 && pttl <= 10_200,
        "fence TTL = 2 × lease + 10 s: {pttl}"
    );
    lock.release(&mut conn, g1).await.unwrap();
    // The fence key is lost (DEL): the time floor still gives a larger token.
    let _: () = server.cmd(&["DEL", &fence]).await;
    let g2 = acquired(&lock, &mut conn, "r", &short).await;
    assert!(
        g2.fencing_token().unwrap() > t1,
        "{} > {t1}",
        g2.fencing_token().unwrap()
    );
    // Lease expiry (no release): the next holder is larger again.
    let t2 = g2.fencing_token().unwrap();
    drop(g2);
    tokio::time::sleep(Duration::from_millis(150)).await;
    let g3 = acquired(&lock, &mut conn, "r", &short).await;
    assert!(g3.fencing_token().unwrap() > t2);
    let t3 = g3.fencing_token().unwrap();
    // Restart without persistence: empty dataset, still larger.
    server.restart().await;
    let mut conn = server.conn().await;
    let g4 = acquired(&lock, &mut conn, "r", &short).await;
    assert!(g4.fencing_token().unwrap() > t3);
    // Renewal refreshes the fence key's TTL too; after the lease, the fence key expires.
    let mut g4 = g4;
    let _: () = server.cmd(&["PEXPIRE", &fence, "150"]).await;
    assert_eq!(
        lock.renew(&mut conn, &mut g4).await.unwrap(),
        Renew::Renewed
    );
    let pttl: i64 = server.cmd(&["PTTL", &fence]).await;
    assert!(pttl > 10_000, "renew refreshed the fence TTL: {pttl}");
    lock.release(&mut conn, g4).await.unwrap();
    let _: () = server.cmd(&["PEXPIRE", &fence, "50"]).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    // KEYS skips expired keys (DBSIZE would count those not yet evicted).
    let left: Vec<String> = server.cmd(&["KEYS", "*"]).await;
    assert!(left.is_empty(), "no forever-key left: {left:?}");
}

async fn failover_to_a_lagging_replica_still_issues_a_larger_fencing_token() {
    let mut pair = ReplicatedPair::spawn().await;
    let mut conn = pair.primary.patient_conn().await;
    let lock = lock();
    let options = LockOptions::new()
        .fencing(true)
        .ttl(Duration::from_secs(10));
    let one = Replication::new(1, Duration::from_millis(2_000)).unwrap();
    // t0: acknowledged by the replica (the acquire requires it).
    let required = options.clone().require_replicas(one);
    let Acquire::Acquired(g0) = lock.acquire(&mut conn, "acct", &required).await.unwrap() else {
        panic!("expected the lock");
    };
    let t0 = g0.fencing_token().unwrap();
    let data = "acct:{data}";
    let w = lock
        .replicated(one)
        .fenced_set(&mut conn, data, t0, "v0")
        .await
        .unwrap();
    assert!(w.outcome.is_written() && w.is_replicated());
    lock.release(&mut conn, g0).await.unwrap();
    // The replica's link goes down (see cut_link): an acquire requiring the replica is
    // refused (the loss is detectable); t1 is then acquired on the primary only, without the
    // requirement.
    pair.cut_link().await;
    let short = Replication::new(1, Duration::from_millis(200)).unwrap();
    let refused = lock
        .acquire(&mut conn, "acct", &options.clone().require_replicas(short))
        .await
        .unwrap();
    assert!(
        matches!(
            refused,
            Acquire::NotReplicated {
                replicas: 0,
                requested: 1
            }
        ),
        "{refused:?}"
    );
    let Acquire::Acquired(mut g1) = lock.acquire(&mut conn, "acct", &options).await.unwrap() else {
        panic!("expected the lock");
    };
    let t1 = g1.fencing_token().unwrap();
    assert!(t1 > t0);
    let r = lock.renew(&mut conn, &mut g1).await.unwrap();
    assert_eq!(r, Renew::Renewed);
    let w = lock
        .replicated(short)
        .fenced_set(&mut conn, data, t1, "v1")
        .await
        .unwrap();
    assert!(w.outcome.is_written());
    assert_eq!(w.replicas, 0);
    // The primary dies; the lagging replica is promoted.
    pair.primary.stop().await;
    let _: () = pair.replica.cmd(&["REPLICAOF", "NO", "ONE"]).await;
    let mut promoted = pair.replica.conn().await;
    let stale: u64 = pair
        .replica
        .cmd(&["GET", &lock.fence_key("acct").unwrap()])
        .await;
    assert_eq!(
        FencingToken::new(stale).unwrap(),
        t0,
        "the replica is behind: it has t0 only"
    );
    // The lock is free there (lost with the primary): the next holder gets t2 > t1, so the
    // paused holder's t1 loses against it on the promoted node's data.
    let g2 = acquired(&lock, &mut promoted, "acct", &options).await;
    let t2 = g2.fencing_token().unwrap();
    assert!(
        t2 > t1,
        "t2 = {t2} must exceed t1 = {t1} (v1 issued t0 + 1)"
    );
    assert!(lock
        .fenced_set(&mut promoted, data, t2, "v2")
        .await
        .unwrap()
        .is_written());
    assert_eq!(
        lock.fenced_set(&mut promoted, data, t1, "stale")
            .await
            .unwrap(),
        FencedWrite::Stale { newer: t2 }
    );
    let fence_ttl: i64 = pair
        .replica
        .cmd(&["PTTL", &lock.fence_key("acct").unwrap()])
        .await;
    assert!(fence_ttl > 0, "the fence key has a TTL: {fence_ttl}");
    lock.release(&mut promoted, g2).await.unwrap();
}

async fn extreme_options_never_panic_against_a_real_server() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let lock = lock();
    let holder = acquired(&lock, &mut conn, "busy", &LockOptions::new().fencing(true)).await;
    // max_wait(MAX): no deadline (it does not overflow); bounded here by the test's timeout.
    let forever = LockOptions::new()
        .fencing(true)
        .retries(u32::MAX)
        .retry_delay(Duration::from_millis(5))
        .jitter(Duration::ZERO)
        .max_wait(Duration::MAX);
    let waited = tokio::time::timeout(
        Duration::from_millis(300),
        lock.acquire(&mut conn, "busy", &forever),
    )
    .await;
    assert!(waited.is_err(), "still waiting for the busy lock");
    // retry_delay(MAX) and jitter(MAX) with a deadline: the pause would end too late, Busy now.
    for options in [
        LockOptions::new()
            .fencing(true)
            .retries(5)
            .retry_delay(Duration::MAX)
            .max_wait(Duration::from_secs(1)),
        LockOptions::new()
            .fencing(true)
            .retries(5)
            .retry_delay(Duration::ZERO)
            .jitter(Duration::MAX)
            .max_wait(Duration::from_secs(1)),
        LockOptions::new()
            .fencing(true)
            .retries(u32::MAX)
            .retry_delay(Duration::MAX)
            .jitter(Duration::MAX)
            .max_wait(Duration::from_secs(1)),
    ] {
        let outcome = tokio::time::timeout(
            Duration::from_secs(5),
            lock.acquire(&mut conn, "busy", &options),
        )
        .await
        .expect("returns at once: the first pause would pass max_wait")
        .unwrap();
        assert!(matches!(outcome, Acquire::Busy { .. }), "{options:?}");
    }
    // retry_delay(MAX) without a deadline: sleeps (tokio handles the far future), no panic.
    let sleepy = LockOptions::new()
        .fencing(true)
        .retries(1)
        .retry_delay(Duration::MAX);
    assert!(tokio::time::timeout(
        Duration::from_millis(200),
        lock.acquire(&mut conn, "busy", &sleepy)
    )
    .await
    .is_err());
    // Invalid extremes are typed errors before anything is sent.
    for options in [
        LockOptions::new().fencing(true).ttl(Duration::MAX),
        LockOptions::new().fencing(true).drift(Duration::MAX),
        LockOptions::new()
            .fencing(true)
            .ttl(Duration::from_nanos(1)),
    ] {
        assert!(matches!(
            lock.acquire(&mut conn, "free", &options).await,
            Err(Error::InvalidInput { .. })
        ));
    }
    // The longest lease is accepted; its fence key TTL is 2 × 30 days + 10 s.
    let longest = LockOptions::new()
        .fencing(true)
        .ttl(redkit::lock::limits::MAX_TTL);
    let g = acquired(&lock, &mut conn, "long", &longest).await;
    let fence_ttl: i64 = server
        .cmd(&["PTTL", &lock.fence_key("long").unwrap()])
        .await;
    assert!(fence_ttl > 2 * 30 * 24 * 3_600_000, "{fence_ttl}");
    lock.release(&mut conn, g).await.unwrap();
    lock.release(&mut conn, holder).await.unwrap();
    // Fencing tokens beyond i64 are refused before the round trip; i64::MAX is accepted.
    assert!(matches!(
        lock.fenced_set(&mut conn, "d", FencingToken::new(u64::MAX).unwrap(), "v")
            .await,
        Err(Error::InvalidInput { .. })
    ));
    let max = FencingToken::new(i64::MAX as u64).unwrap();
    assert!(lock
        .fenced_set(&mut conn, "d", max, "v")
        .await
        .unwrap()
        .is_written());
    assert_eq!(
        lock.fenced_get(&mut conn, "d").await.unwrap(),
        Some((b"v".to_vec(), max))
    );
}

async fn acked_acquire_and_fenced_write_on_a_cluster() {
    let cluster = support::RedisCluster::spawn().await;
    let mut conn = cluster.conn().await;
    let lock = lock();
    let one = Replication::new(1, Duration::from_millis(2_000)).unwrap();
    for resource in ["a", "b", "c", "d"] {
        // Required: acquired and renewed only when its primary's replica acknowledged.
        let options = LockOptions::new().fencing(true).require_replicas(one);
        let acquired = lock.acquire(&mut conn, resource, &options).await.unwrap();
        let Acquire::Acquired(mut guard) = acquired else {
            panic!("{resource}: expected the lock, got {acquired:?}");
        };
        let r = lock.renew(&mut conn, &mut guard).await.unwrap();
        assert_eq!(r, Renew::Renewed, "{resource}");
        let data = format!("{}:data", guard.key());
        let w = lock
            .replicated(one)
            .fenced_set(&mut conn, &data, guard.fencing_token().unwrap(), "x")
            .await
            .unwrap();
        assert!(w.outcome.is_written() && w.is_replicated());
        lock.release(&mut conn, guard).await.unwrap();
    }
}

fn valid(options_ttl: Duration, drift: Option<Duration>) -> bool {
    let allowance = drift
        .unwrap_or_else(|| (options_ttl / 100).saturating_add(redkit::lock::limits::DRIFT_FLOOR));
    !options_ttl.is_zero()
        && options_ttl <= redkit::lock::limits::MAX_TTL
        && options_ttl.subsec_nanos().is_multiple_of(1_000_000)
        && allowance < options_ttl
}

fn extreme_duration() -> impl proptest::strategy::Strategy<Value = Duration> {
    use proptest::prelude::*;
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::MAX),
        Just(Duration::from_nanos(1)),
        Just(redkit::lock::limits::MAX_TTL),
        (1u64..5_000).prop_map(Duration::from_millis),
        any::<u64>().prop_map(Duration::from_millis),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
    ]
}

/// How long a free lock may take to acquire in [`any_options_against_a_real_server_never_panic`].
const FREE_LOCK_BOUND: Duration = Duration::from_millis(3 * 500 + 1_000);

/// Property: any options, on a free and on a busy lock of a real server, never panic; invalid
/// ones are `InvalidInput` before anything is sent; valid ones acquire the free lock and find
/// the busy one busy (or are still waiting when the test stops waiting).
fn any_options_against_a_real_server_never_panic() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(RedisServer::spawn());
    let mut conn = rt.block_on(server.conn());
    let lock = lock();
    let long = LockOptions::new()
        .fencing(true)
        .ttl(Duration::from_secs(600));
    let holder = rt.block_on(acquired(&lock, &mut conn, "busy", &long));
    let strategy = (
        extreme_duration(),
        prop_oneof![Just(0u32), Just(1), Just(u32::MAX), any::<u32>()],
        extreme_duration(),
        extreme_duration(),
        proptest::option::of(extreme_duration()),
        proptest::option::of(extreme_duration()),
    );
    let mut runner = TestRunner::new(Config {
        cases: 64,
        ..Config::default()
    });
    runner
        .run(
            &strategy,
            |(ttl, retries, delay, jitter, max_wait, drift)| {
                let mut options = LockOptions::new()
                    .fencing(true)
                    .ttl(ttl)
                    .retries(retries)
                    .retry_delay(delay)
                    .jitter(jitter);
                if let Some(w) = max_wait {
                    options = options.max_wait(w);
                }
                if let Some(d) = drift {
                    options = options.drift(d);
                }
                let ok = valid(ttl, drift);
                let mut conn = conn.clone();
                rt.block_on(async {
                    for resource in ["free", "busy"] {
                        let run = lock.acquire(&mut conn, resource, &options);
                        // The busy lock: how long the test watches it wait. The free one is
                        // acquired in one call (at most EVALSHA, EVAL and SCRIPT LOAD on a
                        // cold cache), each bounded by the connection's 500 ms response
                        // timeout: 3 x 500 ms + 1 s stated slack (a fixed 100 ms was seen to
                        // expire on a loaded machine).
                        let watch = if resource == "free" {
                            FREE_LOCK_BOUND
                        } else {
                            Duration::from_millis(100)
                        };
                        match tokio::time::timeout(watch, run).await {
                            Ok(Err(Error::InvalidInput { .. })) => prop_assert!(!ok, "{options:?}"),
                            Ok(Ok(Acquire::Acquired(g))) => {
                                prop_assert!(ok && resource == "free", "{options:?}");
                                lock.release(&mut conn, g).await.unwrap();
                            }
                            Ok(Ok(Acquire::Busy { .. })) => {
                                prop_assert!(ok && resource == "busy", "{options:?}")
                            }
                            // A lease of a few ms can run out during the round trip (then
                            // released again).
                            Ok(Err(Error::Timeout(_))) => {
                                prop_assert!(
                                    ok && resource == "free" && ttl < Duration::from_secs(1)
                                )
                            }
                            Ok(other) => prop_assert!(false, "{options:?}: {other:?}"),
                            // Still waiting for the busy lock (long pauses, no deadline).
                            Err(_) => prop_assert!(
                                ok && resource == "busy",
                                "{resource}: no answer within {watch:?}: {options:?}"
                            ),
                        }
                    }
                    Ok(())
                })
            },
        )
        .unwrap();
    rt.block_on(lock.release(&mut conn, holder)).unwrap();
    assert_eq!(
        rt.block_on(server.cmd::<i64>(&["EXISTS", &lock.key("free").unwrap()])),
        0
    );
}

async fn require_replicas_releases_an_acquisition_the_replica_did_not_confirm() {
    let pair = ReplicatedPair::spawn().await;
    let mut conn = pair.primary.patient_conn().await;
    let lock = lock();
    let one = Replication::new(1, Duration::from_millis(1_000)).unwrap();
    let options = LockOptions::new()
        .fencing(true)
        .ttl(Duration::from_secs(10))
        .require_replicas(one);
    // In sync: acquired, and the replica has the lock key.
    let guard = acquired(&lock, &mut conn, "acct", &options).await;
    let on_replica: String = pair.replica.cmd(&["GET", guard.key()]).await;
    assert!(!on_replica.is_empty());
    lock.release(&mut conn, guard).await.unwrap();
    // Replica link down: not confirmed in time -> released again, NotReplicated.
    pair.cut_link().await;
    let short = Replication::new(1, Duration::from_millis(150)).unwrap();
    let options = options.require_replicas(short);
    match lock.acquire(&mut conn, "acct", &options).await.unwrap() {
        Acquire::NotReplicated {
            replicas: 0,
            requested: 1,
        } => {}
        other => panic!("{other:?}"),
    }
    let key = lock.key("acct").unwrap();
    assert_eq!(
        pair.primary.cmd::<i64>(&["EXISTS", &key]).await,
        0,
        "released"
    );
}

async fn a_reply_lost_to_a_client_timeout_is_recovered_by_retrying_with_the_same_token() {
    let mut server = RedisServer::spawn().await;
    let lock = lock();
    let key = lock.key("inv").unwrap();
    let config =
        redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_millis(200)));
    let mut timing_out = server
        .client()
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap();
    // Load the script first so the frozen call is one EVALSHA.
    let mut conn = server.conn().await;
    let warm = acquired(&lock, &mut conn, "warm", &LockOptions::new().fencing(true)).await;
    lock.release(&mut conn, warm).await.unwrap();
    let options = LockOptions::new()
        .fencing(true)
        .ttl(Duration::from_secs(30))
        .token(TOKEN);
    // The server freezes after the command was sent: the client gives up (timeout), the
    // server runs the acquire when it wakes up. The caller does not know it holds the lock.
    server.pause().await;
    let lost = lock.acquire(&mut timing_out, "inv", &options).await;
    assert!(lost.is_err(), "{lost:?}");
    server.resume().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while server.cmd::<i64>(&["EXISTS", &key]).await == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the queued acquire never ran"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let stored: u64 = server.cmd(&["GET", &lock.fence_key("inv").unwrap()]).await;
    // The retry with the same token finds its own lock (v1 answered Busy here).
    let mut fresh = server.conn().await;
    let guard = acquired(&lock, &mut fresh, "inv", &options).await;
    assert_eq!(
        guard.fencing_token().unwrap(),
        FencingToken::new(stored).unwrap()
    );
    assert!(matches!(
        lock.try_acquire(
            &mut fresh,
            "inv",
            &LockOptions::new().fencing(true).token(OTHER)
        )
        .await
        .unwrap(),
        Acquire::Busy { .. }
    ));
    assert_eq!(
        lock.release(&mut fresh, guard).await.unwrap(),
        redkit::lock::Release::Released
    );
}

/// Keys, values and whether each has a TTL (the TTL itself ticks).
async fn shape(conn: &mut MultiplexedConnection) -> BTreeMap<Vec<u8>, (Vec<u8>, bool)> {
    support::snapshot(conn)
        .await
        .into_iter()
        .map(|(k, (dump, pttl))| (k, (dump, pttl >= 0)))
        .collect()
}

/// On Redis 7 the lease's release and renewal run scripts; on Valkey 9 the native
/// `DELIFEQ` / `SET ... IFEQ`: the same contract on both.
async fn default_acquire_contract(server: RedisServer) {
    let mut conn = server.conn().await;
    let lock = lock();
    // The default options: no fencing.
    let cheap = LockOptions::new().ttl(Duration::from_secs(5));
    let key = lock.key("r").unwrap();

    // A free lock: the lock key only (no fence key), no fencing token to pass to fenced_set.
    let guard = acquired(&lock, &mut conn, "r", &cheap).await;
    assert!(guard.fencing_token().is_none());
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(keys.as_slice(), std::slice::from_ref(&key));
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(pttl > 0 && pttl <= 5_000, "{pttl}");

    // Another owner: Busy with the holder's TTL, nothing changed.
    let before = shape(&mut conn).await;
    match lock.acquire(&mut conn, "r", &cheap).await.unwrap() {
        Acquire::Busy(Held {
            ttl: holder_ttl, ..
        }) => {
            let ttl = holder_ttl.expect("the holder has a TTL");
            assert!(
                ttl > Duration::ZERO && ttl <= Duration::from_secs(5),
                "{ttl:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(shape(&mut conn).await, before);
    assert_eq!(
        lock.release(&mut conn, guard).await.unwrap(),
        redkit::lock::Release::Released
    );
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(keys.is_empty(), "{keys:?}");

    // The same owner token again (a retry after a lost reply): Acquired, lease refreshed.
    let mine = cheap.clone().token(TOKEN);
    let first = acquired(&lock, &mut conn, "r", &mine).await;
    let _: i64 = redis::cmd("PEXPIRE")
        .arg(&key)
        .arg(300)
        .query_async(&mut conn)
        .await
        .unwrap();
    let again = acquired(&lock, &mut conn, "r", &mine).await;
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(pttl > 1_000, "the retry refreshed the lease: {pttl}");
    drop(first);
    lock.release(&mut conn, again).await.unwrap();

    // A key of another type: WrongType, nothing written.
    let _: () = redis::cmd("HSET")
        .arg(&key)
        .arg("f")
        .arg("1")
        .query_async(&mut conn)
        .await
        .unwrap();
    let before = shape(&mut conn).await;
    let r = lock.acquire(&mut conn, "r", &cheap).await;
    assert!(matches!(r, Err(Error::WrongType { .. })), "{r:?}");
    assert_eq!(shape(&mut conn).await, before);
    let _: () = redis::cmd("DEL")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();

    // A user denied SET: PermissionDenied, nothing written.
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "noset", "on", ">pw", "~*", "&*", "+@all", "-set"])
        .query_async(&mut conn)
        .await
        .unwrap();
    let url = format!("redis://noset:pw@127.0.0.1:{}/", server.port());
    let mut denied = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let before = shape(&mut conn).await;
    let r = lock.acquire(&mut denied, "r", &cheap).await;
    assert!(matches!(r, Err(Error::PermissionDenied { .. })), "{r:?}");
    assert_eq!(shape(&mut conn).await, before);

    // The default (fenced) lock still issues tokens on the same key.
    let fenced = acquired(&lock, &mut conn, "r", &LockOptions::new().fencing(true)).await;
    assert!(fenced.fencing_token().is_some());
}

/// `Lock::fence`: a lock acquired without fencing gets a token later, only while it is held,
/// in one increasing sequence with fenced acquisitions; refusals write nothing.
async fn fence_issues_a_token_only_to_the_holder_in_one_sequence_with_fenced_acquires() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let lock = lock();
    let plain = LockOptions::new().ttl(Duration::from_secs(200));
    let key = lock.key("f").unwrap();
    let fence_key = lock.fence_key("f").unwrap();

    // A fenced acquisition first, then an unfenced holder asks for its token: larger.
    let first = acquired(&lock, &mut conn, "f", &LockOptions::new().fencing(true)).await;
    let t0 = first.fencing_token().unwrap();
    lock.release(&mut conn, first).await.unwrap();
    let mut a = acquired(&lock, &mut conn, "f", &plain).await;
    assert!(a.fencing_token().is_none());
    let Fence::Issued(t1) = lock.fence(&mut conn, &mut a).await.unwrap() else {
        panic!("the holder gets a token")
    };
    assert!(t1 > t0, "{t1} > {t0}");
    assert_eq!(a.fencing_token(), Some(t1));
    let stored: String = redis::cmd("GET")
        .arg(&fence_key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(stored, t1.get().to_string());
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&fence_key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(pttl > 200_000, "2 x lease + 10 s: {pttl}");
    // Asked again: the same token, no round trip.
    let calls = server.evalsha_calls().await;
    assert_eq!(
        lock.fence(&mut conn, &mut a).await.unwrap(),
        Fence::Issued(t1)
    );
    assert_eq!(server.evalsha_calls().await, calls);
    assert_eq!(
        lock.fenced_set(&mut conn, "data:{f}", t1, "a")
            .await
            .unwrap(),
        FencedWrite::Written
    );

    // A's lease runs out (its key is gone) and B acquires without fencing: A gets no token and
    // nothing is written; B's token is larger, and A's writes are refused after B's.
    let mut stale = acquired(&lock, &mut conn, "g", &plain).await;
    let _: () = redis::cmd("DEL")
        .arg(lock.key("g").unwrap())
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut b = acquired(&lock, &mut conn, "g", &plain).await;
    let before = support::snapshot(&mut conn).await;
    assert_eq!(
        lock.fence(&mut conn, &mut stale).await.unwrap(),
        Fence::Lost
    );
    assert!(stale.fencing_token().is_none());
    support::same_dumps(&before, &support::snapshot(&mut conn).await, "stale fence");
    let Fence::Issued(tb) = lock.fence(&mut conn, &mut b).await.unwrap() else {
        panic!("B holds the lock")
    };
    assert!(
        tb > t1,
        "one sequence across resources' time floor: {tb} > {t1}"
    );
    lock.release(&mut conn, b).await.unwrap();
    let c = acquired(&lock, &mut conn, "g", &LockOptions::new().fencing(true)).await;
    assert!(
        c.fencing_token().unwrap() > tb,
        "a fenced acquire after it is larger"
    );
    lock.release(&mut conn, c).await.unwrap();

    // A poisoned fence key: CorruptData, nothing written.
    let mut d = acquired(&lock, &mut conn, "h", &plain).await;
    let _: () = redis::cmd("SET")
        .arg(lock.fence_key("h").unwrap())
        .arg("12x")
        .query_async(&mut conn)
        .await
        .unwrap();
    let before = support::snapshot(&mut conn).await;
    let r = lock.fence(&mut conn, &mut d).await;
    assert!(matches!(r, Err(Error::CorruptData { .. })), "{r:?}");
    support::same_dumps(
        &before,
        &support::snapshot(&mut conn).await,
        "poisoned fence",
    );

    // Each command denied: PermissionDenied, nothing written; the guard stays unfenced.
    for denied in ["get", "time", "set"] {
        let mut limited = support::denied_conn(&server, denied).await;
        let mut e = acquired(&lock, &mut conn, &format!("i-{denied}"), &plain).await;
        let before = support::snapshot(&mut conn).await;
        let r = lock.fence(&mut limited, &mut e).await;
        assert!(
            matches!(r, Err(Error::PermissionDenied { .. })),
            "-{denied}: {r:?}"
        );
        assert!(e.fencing_token().is_none());
        support::same_dumps(&before, &support::snapshot(&mut conn).await, denied);
    }
    drop((a, key));
}

fn main() -> std::process::ExitCode {
    let mut tests = harness::Tests::new();
    harness::add!(
        tests,
        a_poisoned_fence_key_is_refused_before_any_write,
        a_poisoned_lock_key_or_fenced_value_changes_nothing,
        every_inner_command_denied_by_acl_is_permission_denied_and_writes_nothing,
        a_retry_with_the_same_owner_token_finds_its_own_lock,
        fencing_tokens_grow_across_fence_loss_restart_and_expiry_and_the_fence_key_expires,
        failover_to_a_lagging_replica_still_issues_a_larger_fencing_token,
        extreme_options_never_panic_against_a_real_server,
        acked_acquire_and_fenced_write_on_a_cluster,
        require_replicas_releases_an_acquisition_the_replica_did_not_confirm,
        a_reply_lost_to_a_client_timeout_is_recovered_by_retrying_with_the_same_token,
        fence_issues_a_token_only_to_the_holder_in_one_sequence_with_fenced_acquires
    );
    harness::add!(tests, sync: any_options_against_a_real_server_never_panic);
    harness::add!(tests, both: by_default_acquire_is_one_set_without_fencing_and_keeps_the_contract, default_acquire_contract);
    tests.run()
}
