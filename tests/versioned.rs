//! Versioned values (optimistic concurrency) against real Redis, single node and Cluster:
//! compare-and-set under 64 contending tasks (final value exact, every conflict reported),
//! conflicts carrying the current value, fenced writes, the bounded retry helper, bad input
//! refused before sending, nothing half-applied (poisoned keys, ACL denial).

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redkit::lock::{Acquire, FencingToken, Lock, LockOptions};
use redkit::versioned::{Cas, RetryPolicy, Snapshot, Update, Versioned};
use redkit::Error;
use support::{RedisCluster, RedisServer};

fn ver() -> Versioned {
    Versioned::new()
}

fn increment(old: Option<&[u8]>) -> Vec<u8> {
    let n: u64 = old
        .map(|b| std::str::from_utf8(b).unwrap().parse().unwrap())
        .unwrap_or(0);
    (n + 1).to_string().into_bytes()
}

/// 64 tasks increment one counter through `update`; 64 more through raw read + CAS loops.
async fn contend<C>(conn: C, name: &str)
where
    C: ConnectionLike + Clone + Send + 'static,
{
    let v = ver();
    let policy = RetryPolicy::new()
        .attempts(10_000)
        .backoff(Duration::from_micros(100), Duration::from_millis(5));
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let (v, mut conn, name) = (v.clone(), conn.clone(), name.to_owned());
        tasks.push(tokio::spawn(async move {
            let mut calls = 0u32;
            let outcome = v
                .update(&mut conn, &name, &policy, |old| {
                    calls += 1;
                    increment(old)
                })
                .await
                .unwrap();
            (outcome, calls)
        }));
    }
    let mut versions = Vec::new();
    let mut total_conflicts = 0;
    for task in tasks {
        let (outcome, calls) = tokio::time::timeout(Duration::from_secs(90), task)
            .await
            .expect("bounded")
            .unwrap();
        match outcome {
            Update::Updated {
                version,
                attempts,
                conflicts,
            } => {
                assert_eq!(attempts, calls, "one CAS per computed value");
                assert_eq!(conflicts + 1, attempts);
                versions.push(version);
                total_conflicts += conflicts;
            }
            other => panic!("{other:?}"),
        }
    }
    versions.sort_unstable();
    assert_eq!(
        versions,
        (1..=64).collect::<Vec<u64>>(),
        "each version won once"
    );
    assert!(total_conflicts > 0, "no contention happened");
    let mut admin = conn.clone();
    let snap = v.read(&mut admin, name).await.unwrap();
    assert_eq!(
        snap,
        Snapshot {
            value: Some(b"64".to_vec()),
            version: 64
        }
    );

    // Raw loops: every attempt is a success or a reported conflict, and conflicts carry the
    // value that the winner wrote (value == version offset).
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let (v, mut conn, name) = (v.clone(), conn.clone(), name.to_owned());
        tasks.push(tokio::spawn(async move {
            let (mut attempts, mut conflicts) = (0u32, 0u32);
            let mut pauses = Vec::new();
            let mut seen = v.read(&mut conn, &name).await.unwrap();
            loop {
                attempts += 1;
                let new = increment(seen.value.as_deref());
                match v
                    .compare_and_set(&mut conn, &name, seen.version, &new)
                    .await
                    .unwrap()
                {
                    Cas::Set { version } => {
                        assert_eq!(version, seen.version + 1);
                        return (attempts, conflicts, pauses);
                    }
                    Cas::Conflict(now) => {
                        assert!(
                            now.version > seen.version,
                            "a conflict means a newer version"
                        );
                        assert_eq!(now.value, Some(now.version.to_string().into_bytes()));
                        conflicts += 1;
                        seen = now;
                        let pause = rand_pause();
                        pauses.push(pause);
                        tokio::time::sleep(pause).await;
                    }
                    other => panic!("{other:?}"),
                }
            }
        }));
    }
    let (mut attempts, mut conflicts) = (0, 0);
    let mut pauses = std::collections::BTreeSet::new();
    for task in tasks {
        let (a, c, p) = tokio::time::timeout(Duration::from_secs(90), task)
            .await
            .expect("bounded")
            .unwrap();
        attempts += a;
        conflicts += c;
        pauses.extend(p);
    }
    // The back-off is jittered: conflicting tasks do not all wait the same time (which would
    // line them up for the next collision). Every pause lies in PAUSE_MIN..=PAUSE_MAX.
    assert!(
        pauses.iter().all(|p| (PAUSE_MIN..=PAUSE_MAX).contains(p)),
        "{pauses:?}"
    );
    if conflicts >= 2 {
        assert!(
            pauses.len() >= 2,
            "{conflicts} conflicts all backed off by the same pause: {pauses:?}"
        );
    }
    assert_eq!(
        conflicts + 64,
        attempts,
        "successes + conflicts == attempts"
    );
    let snap = v.read(&mut admin, name).await.unwrap();
    assert_eq!(
        snap,
        Snapshot {
            value: Some(b"128".to_vec()),
            version: 128
        }
    );
}

const PAUSE_MIN: Duration = Duration::from_micros(50);
const PAUSE_MAX: Duration = Duration::from_micros(750);

/// A random back-off after a conflict, drawn per conflict (per task and per retry) from
/// PAUSE_MIN..=PAUSE_MAX.
fn rand_pause() -> Duration {
    rand::random_range(PAUSE_MIN..=PAUSE_MAX)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_tasks_incrementing_by_cas_on_one_node_end_exact() {
    let server = RedisServer::spawn().await;
    contend(server.patient_conn().await, "counter").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_tasks_incrementing_by_cas_on_a_cluster_end_exact() {
    let cluster = RedisCluster::spawn().await;
    contend(cluster.conn().await, "counter").await;
}

#[tokio::test]
async fn compare_and_set_follows_the_version() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let v = ver();
    let absent = Snapshot {
        value: None,
        version: 0,
    };
    assert_eq!(v.read(&mut conn, "x").await.unwrap(), absent);
    assert_eq!(
        v.compare_and_set(&mut conn, "x", 1, b"a").await.unwrap(),
        Cas::Conflict(absent)
    );
    assert_eq!(
        v.compare_and_set(&mut conn, "x", 0, b"a").await.unwrap(),
        Cas::Set { version: 1 }
    );
    let one = Snapshot {
        value: Some(b"a".to_vec()),
        version: 1,
    };
    assert_eq!(
        v.compare_and_set(&mut conn, "x", 0, b"b").await.unwrap(),
        Cas::Conflict(one)
    );
    assert_eq!(
        v.compare_and_set(&mut conn, "x", 1, b"").await.unwrap(),
        Cas::Set { version: 2 }
    );
    let two = Snapshot {
        value: Some(Vec::new()),
        version: 2,
    };
    assert_eq!(v.read(&mut conn, "x").await.unwrap(), two);
    let binary = [0u8, 255, b'{', b'}', 0];
    assert!(v
        .compare_and_set(&mut conn, "x", 2, &binary)
        .await
        .unwrap()
        .is_set());
    assert_eq!(v.read(&mut conn, "x").await.unwrap().value.unwrap(), binary);
    let ttl: i64 = redis::cmd("PTTL")
        .arg(v.key("x").unwrap())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(ttl, -1);
}

#[tokio::test]
async fn fenced_writes_refuse_older_tokens_and_accept_a_locks_token() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let v = ver();
    let f = |n: u64| FencingToken::new(n).unwrap();
    assert!(v
        .compare_and_set_fenced(&mut conn, "d", 0, b"a", f(10))
        .await
        .unwrap()
        .is_set());
    let before: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg(v.key("d").unwrap())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        v.compare_and_set_fenced(&mut conn, "d", 1, b"old", f(9))
            .await
            .unwrap(),
        Cas::Stale { newer: f(10) }
    );
    let after: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg(v.key("d").unwrap())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(before, after);
    // Same token again, then a newer one; a stale version still conflicts.
    assert!(v
        .compare_and_set_fenced(&mut conn, "d", 1, b"b", f(10))
        .await
        .unwrap()
        .is_set());
    assert!(matches!(
        v.compare_and_set_fenced(&mut conn, "d", 1, b"c", f(11))
            .await
            .unwrap(),
        Cas::Conflict(Snapshot { version: 2, .. })
    ));
    let lock = Lock::new();
    let Acquire::Acquired(guard) = lock
        .acquire(&mut conn, "d", &LockOptions::new().fencing(true))
        .await
        .unwrap()
    else {
        panic!("lock")
    };
    let token = guard.fencing_token().unwrap();
    assert!(token > f(11));
    assert_eq!(
        v.compare_and_set_fenced(&mut conn, "d", 2, b"locked", token)
            .await
            .unwrap(),
        Cas::Set { version: 3 }
    );
    assert_eq!(
        v.compare_and_set_fenced(&mut conn, "d", 3, b"late", f(11))
            .await
            .unwrap(),
        Cas::Stale { newer: token }
    );
    lock.release(&mut conn, guard).await.unwrap();
}

#[tokio::test]
async fn update_gives_up_after_the_allowed_attempts_and_reports_the_current_version() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let v = ver();
    assert!(v
        .compare_and_set(&mut conn, "busy", 0, b"5")
        .await
        .unwrap()
        .is_set());
    let key = v.key("busy").unwrap();
    let mut rival = server.client().get_connection().unwrap();
    let mut calls = 0;
    let outcome = v
        .update(&mut conn, "busy", &RetryPolicy::new().attempts(3), |old| {
            calls += 1;
            // Another writer bumps the version before every compare-and-set.
            let _: i64 = redis::cmd("HINCRBY")
                .arg(&key)
                .arg("version")
                .arg(1)
                .query(&mut rival)
                .unwrap();
            increment(old)
        })
        .await
        .unwrap();
    assert_eq!(calls, 3);
    assert_eq!(
        outcome,
        Update::GaveUp {
            attempts: 3,
            current: Snapshot {
                value: Some(b"5".to_vec()),
                version: 4
            }
        }
    );
}

#[tokio::test]
async fn bad_input_is_refused_before_anything_is_sent() {
    let mut server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    server.stop().await;
    let v = ver();
    let max = Versioned::MAX_VERSION;
    let invalid = |r: redkit::Result<Cas>, case: &str| match r {
        Err(Error::InvalidInput { .. }) => {}
        other => panic!("{case}: {other:?}"),
    };
    invalid(
        v.compare_and_set(&mut conn, "", 0, b"x").await,
        "empty name",
    );
    invalid(
        v.compare_and_set(&mut conn, &"n".repeat(257), 0, b"x")
            .await,
        "long name",
    );
    invalid(
        v.compare_and_set(&mut conn, "n", max, b"x").await,
        "expected max",
    );
    invalid(
        v.compare_and_set(&mut conn, "n", u64::MAX, b"x").await,
        "expected u64::MAX",
    );
    // Fence 0 cannot be built (FencingToken::new(0) is None); beyond 2^53-1 is refused.
    assert_eq!(FencingToken::new(0), None);
    for fence in [max + 1, u64::MAX] {
        let r = v
            .compare_and_set_fenced(&mut conn, "n", 0, b"x", FencingToken::new(fence).unwrap())
            .await;
        invalid(r, &format!("fence {fence}"));
    }
    assert!(matches!(
        v.read(&mut conn, "").await,
        Err(Error::InvalidInput { .. })
    ));
    let zero = v
        .update(&mut conn, "n", &RetryPolicy::new().attempts(0), increment)
        .await;
    assert!(matches!(zero, Err(Error::InvalidInput { .. })), "{zero:?}");
    // Control: valid input reaches the dead connection.
    match v.compare_and_set(&mut conn, "n", 0, b"x").await {
        Err(Error::InvalidInput { .. }) | Ok(_) => panic!("valid input was not sent"),
        Err(_) => {}
    }
}

/// Same keys, same values, same TTL presence, no TTL moved forward.
fn assert_unchanged(
    before: &BTreeMap<Vec<u8>, (Vec<u8>, i64)>,
    after: &BTreeMap<Vec<u8>, (Vec<u8>, i64)>,
    case: &str,
) {
    let keys = |m: &BTreeMap<Vec<u8>, (Vec<u8>, i64)>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(before), keys(after), "{case}: key set changed");
    for (key, (dump, pttl)) in before {
        let (dump2, pttl2) = &after[key];
        assert_eq!(dump, dump2, "{case}: value changed");
        assert_eq!(*pttl == -1, *pttl2 == -1, "{case}: TTL presence changed");
        assert!(pttl2 <= pttl, "{case}: TTL refreshed");
    }
}

async fn run(cmd: &mut redis::Cmd, conn: &mut MultiplexedConnection) {
    let _: redis::Value = cmd.query_async(conn).await.unwrap();
}

#[tokio::test]
async fn poisoned_keys_change_nothing() {
    let server = RedisServer::spawn().await;
    let mut admin = server.conn().await;
    let mut conn = server.conn().await;
    let v = ver();
    let key = v.key("p").unwrap();
    let mut cases: Vec<(String, Vec<&str>)> = Vec::new();
    for bad in [
        "007",
        "-0",
        "1.5",
        "+5",
        " 5",
        "5 ",
        "1e3",
        "0",
        "-3",
        "9007199254740992",
        "99999999999999999999",
        "",
    ] {
        cases.push((
            format!("version {bad:?}"),
            vec!["value", "v", "version", bad],
        ));
        cases.push((
            format!("fence {bad:?}"),
            vec!["value", "v", "version", "1", "fence", bad],
        ));
    }
    cases.push(("no value".into(), vec!["version", "1"]));
    cases.push(("no version".into(), vec!["value", "v"]));
    for (case, fields) in &cases {
        run(redis::cmd("FLUSHALL").arg("SYNC"), &mut admin).await;
        run(redis::cmd("HSET").arg(&key).arg(fields), &mut admin).await;
        run(redis::cmd("PEXPIRE").arg(&key).arg(100_000), &mut admin).await;
        let before = support::snapshot(&mut admin).await;
        for expected in [0, 1] {
            match v
                .compare_and_set_fenced(
                    &mut conn,
                    "p",
                    expected,
                    b"new",
                    FencingToken::new(5).unwrap(),
                )
                .await
            {
                Err(Error::CorruptData { script, .. }) => assert_eq!(script, "versioned_cas.v1"),
                other => panic!("{case}: {other:?}"),
            }
            match v.compare_and_set(&mut conn, "p", expected, b"new").await {
                Err(Error::CorruptData { .. }) => {}
                other => panic!("{case}: {other:?}"),
            }
        }
        match v.read(&mut conn, "p").await {
            Err(Error::CorruptData { script, .. }) => assert_eq!(script, "versioned_read.v3"),
            other => panic!("{case}: {other:?}"),
        }
        assert_unchanged(&before, &support::snapshot(&mut admin).await, case);
    }
    for kind in ["string", "list", "zset"] {
        run(redis::cmd("FLUSHALL").arg("SYNC"), &mut admin).await;
        let mut poison = match kind {
            "string" => redis::cmd("SET"),
            "list" => redis::cmd("RPUSH"),
            _ => redis::cmd("ZADD"),
        };
        match kind {
            "zset" => poison.arg(&key).arg(1).arg("m"),
            _ => poison.arg(&key).arg("1"),
        };
        run(&mut poison, &mut admin).await;
        let before = support::snapshot(&mut admin).await;
        assert!(
            matches!(
                v.compare_and_set(&mut conn, "p", 0, b"n").await,
                Err(Error::WrongType { .. })
            ),
            "{kind}"
        );
        assert!(
            matches!(v.read(&mut conn, "p").await, Err(Error::WrongType { .. })),
            "{kind}"
        );
        assert_unchanged(&before, &support::snapshot(&mut admin).await, kind);
    }
}

#[tokio::test]
async fn every_inner_command_denied_by_acl_is_permission_denied_and_writes_nothing() {
    let server = RedisServer::spawn().await;
    let mut admin = server.conn().await;
    let v = ver();
    for denied in ["type", "hmget", "hset"] {
        let minus = format!("-{denied}");
        let user = format!("u-{denied}");
        let _: () = server
            .cmd(&[
                "ACL", "SETUSER", &user, "on", ">pw", "~*", "&*", "+@all", &minus,
            ])
            .await;
        let url = format!("redis://{user}:pw@127.0.0.1:{}/", server.port());
        let mut conn = redis::Client::open(url)
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        for exists in [false, true] {
            run(redis::cmd("FLUSHALL").arg("SYNC"), &mut admin).await;
            if exists {
                assert!(v
                    .compare_and_set_fenced(&mut admin, "p", 0, b"v", FencingToken::new(3).unwrap())
                    .await
                    .unwrap()
                    .is_set());
            }
            let before = support::snapshot(&mut admin).await;
            let case = format!("-{denied}, exists {exists}");
            for fenced in [false, true] {
                let expected = u64::from(exists);
                let outcome = if fenced {
                    v.compare_and_set_fenced(
                        &mut conn,
                        "p",
                        expected,
                        b"w",
                        FencingToken::new(4).unwrap(),
                    )
                    .await
                } else {
                    v.compare_and_set(&mut conn, "p", expected, b"w").await
                };
                match outcome {
                    Err(Error::PermissionDenied { script, detail }) => {
                        assert_eq!(script, "versioned_cas.v1", "{case}");
                        assert!(!detail.contains("{p}"), "{case}: {detail}");
                    }
                    other => panic!("{case}: {other:?}"),
                }
                assert_unchanged(&before, &support::snapshot(&mut admin).await, &case);
            }
            let read = v.read(&mut conn, "p").await;
            match (denied, read) {
                ("hset", Ok(_)) => {}
                (_, Err(Error::PermissionDenied { script, .. })) => {
                    assert_eq!(script, "versioned_read.v3")
                }
                (_, other) => panic!("{case}: read {other:?}"),
            }
        }
    }
}
