//! Renewals of a hold acquired with `LockOptions::require_replicas`, against a real primary +
//! replica: a renewal is the renewal script and `WAIT` in one round trip; it moves the guard's
//! validity only when the replica acknowledged it (the replica's TTL is then reset too); with
//! the replica's link cut it answers `Renew::NotReplicated` and the validity does not grow, and
//! a watchdog signals `LeaseLoss::Expired` when the validity runs out instead of renewing on
//! the primary forever. The failover that motivated it (the replica promoted while the primary
//! kept renewing alone) leaves no overlap between the old holder's validity and a new owner on
//! the promoted node; the same scenario without the requirement is measured and printed.

#[path = "support/harness.rs"]
mod harness;
mod support;

// Connections to the primary are `patient_conn`s (10 s response timeout): a renewal and its
// `WAIT` are one round trip, which must not time out on redis-rs's 500 ms default.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use redkit::lock::{
    Acquire, FairLock, LeaseLoss, Lock, LockGuard, LockOptions, Mode, Owner, ReentrantLock, Renew,
    Replicable, RwLock, Semaphore,
};
use redkit::script::Replication;
use support::{RedisServer, ReplicatedPair, Valkey};

const NOT_REPLICATED: Renew = Renew::NotReplicated {
    replicas: 0,
    requested: 1,
};

fn required<K: Replicable>(ttl: Duration, wait_ms: u64) -> LockOptions<K> {
    let one = Replication::new(1, Duration::from_millis(wait_ms)).unwrap();
    LockOptions::new().ttl(ttl).require_replicas(one)
}

fn granted<G: std::fmt::Debug, H: std::fmt::Debug>(outcome: redkit::Result<Acquire<G, H>>) -> G {
    match outcome.unwrap() {
        Acquire::Acquired(guard) => guard,
        other => panic!("expected the lock, got {other:?}"),
    }
}

/// The calls a client sends to run a script and wait for replicas, or to renew a plain lock
/// natively (`SET ... IFEQ` on Valkey) (`INFO commandstats` also counts the commands a script
/// runs, the replica's `REPLCONF` and the probes' own).
const SENT: [&str; 8] = [
    "set",
    "evalsha",
    "eval",
    "fcall",
    "wait",
    "waitaof",
    "script|exists",
    "script|load",
];

/// `INFO commandstats` as `command -> calls`, for the commands in [`SENT`].
async fn command_counts(server: &RedisServer) -> BTreeMap<String, u64> {
    let stats: String = server.cmd(&["INFO", "commandstats"]).await;
    stats
        .lines()
        .filter_map(|l| l.strip_prefix("cmdstat_"))
        .filter_map(|l| {
            let (name, rest) = l.split_once(":calls=")?;
            let calls = rest.split(',').next()?.parse().ok()?;
            Some((name.to_owned(), calls))
        })
        .filter(|(name, _)| SENT.contains(&name.as_str()))
        .collect()
}

/// The commands `server` answered between two [`command_counts`].
fn sent_between(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(name, n)| (name.clone(), n - before.get(name).copied().unwrap_or(0)))
        .filter(|&(_, n)| n > 0)
        .collect()
}

fn calls(list: &[(&str, u64)]) -> BTreeMap<String, u64> {
    list.iter().map(|&(c, n)| (c.to_owned(), n)).collect()
}

async fn a_renewal_moves_the_validity_only_when_the_replica_acknowledged_it() {
    renewal_moves_the_validity_only_when_acknowledged(ReplicatedPair::spawn().await).await;
}

/// The same on Valkey 9, where a plain lock's renewal is `SET ... IFEQ ... PX` and `WAIT`.
async fn a_native_renewal_moves_the_validity_only_when_the_replica_acknowledged_it(valkey: Valkey) {
    renewal_moves_the_validity_only_when_acknowledged(ReplicatedPair::spawn_valkey(&valkey).await)
        .await;
}

async fn renewal_moves_the_validity_only_when_acknowledged(pair: ReplicatedPair) {
    // The command a plain lock's renewal sends: the script, or the native conditional SET.
    let renewal = match pair.primary.has_command("DELIFEQ").await {
        true => "set",
        false => "evalsha",
    };
    let mut conn = pair.primary.patient_conn().await;
    let lock = Lock::new();
    let ttl = Duration::from_secs(3);
    let options = required::<Lock>(ttl, 500);
    let mut guard = granted(lock.acquire(&mut conn, "ledger", &options).await);
    let key = guard.key().to_owned();

    // In sync: renewed, the validity grew, and the replica's TTL was reset too.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let replica_before: i64 = pair.replica.cmd(&["PTTL", &key]).await;
    let before = guard.validity();
    assert_eq!(
        lock.renew(&mut conn, &mut guard).await.unwrap(),
        Renew::Renewed
    );
    let after = guard.validity();
    let replica_after: i64 = pair.replica.cmd(&["PTTL", &key]).await;
    assert!(after > before, "validity {before:?} -> {after:?}");
    assert!(
        replica_after > replica_before + 200,
        "the replica's PTTL was reset: {replica_before} -> {replica_after}"
    );

    // One round trip's commands: the renewal (script or native) and WAIT, nothing else (the
    // script is known cached now).
    let stats = command_counts(&pair.primary).await;
    assert_eq!(
        lock.renew(&mut conn, &mut guard).await.unwrap(),
        Renew::Renewed
    );
    let sent = sent_between(&stats, &command_counts(&pair.primary).await);
    assert_eq!(sent, calls(&[(renewal, 1), ("wait", 1)]), "renewal");

    // Without the requirement nothing changed: the renewal alone, no WAIT.
    let mut plain = granted(
        lock.acquire(&mut conn, "plain", &LockOptions::new().ttl(ttl))
            .await,
    );
    let stats = command_counts(&pair.primary).await;
    assert_eq!(
        lock.renew(&mut conn, &mut plain).await.unwrap(),
        Renew::Renewed
    );
    let sent = sent_between(&stats, &command_counts(&pair.primary).await);
    assert_eq!(
        sent,
        calls(&[(renewal, 1)]),
        "renewal without require_replicas"
    );
    lock.release(&mut conn, plain).await.unwrap();

    // Link cut: the renewal ran on the primary but WAIT timed out: NotReplicated, and the
    // validity did not grow.
    pair.cut_link().await;
    let replica_before: i64 = pair.replica.cmd(&["PTTL", &key]).await;
    let before = guard.validity();
    assert_eq!(
        lock.renew(&mut conn, &mut guard).await.unwrap(),
        NOT_REPLICATED
    );
    let after = guard.validity();
    assert!(after <= before, "validity grew: {before:?} -> {after:?}");
    assert!(guard.is_valid(), "still ours until the validity runs out");
    let primary_pttl: i64 = pair.primary.cmd(&["PTTL", &key]).await;
    let replica_after: i64 = pair.replica.cmd(&["PTTL", &key]).await;
    assert!(
        replica_after <= replica_before,
        "the replica was not reset: {replica_before} -> {replica_after}"
    );
    assert!(
        primary_pttl > replica_after,
        "renewed on the primary only: primary {primary_pttl}, replica {replica_after}"
    );

    // The watchdog keeps trying but never extends the validity, and signals Expired once it
    // runs out (no later than its end + a small margin).
    let waits = pair.primary.command_calls("wait").await;
    let end = Instant::now() + guard.validity();
    let signal = lock.watch(&conn, &mut guard).unwrap();
    let mut last = guard.validity();
    let loss = loop {
        tokio::select! {
            loss = signal.lost() => break loss,
            _ = tokio::time::sleep(Duration::from_millis(5)) => {
                let now = guard.validity();
                assert!(now <= last, "validity grew while not replicated: {last:?} -> {now:?}");
                last = now;
                assert!(Instant::now() < end + Duration::from_secs(2), "no loss signalled");
            }
        }
    };
    let late = Instant::now().saturating_duration_since(end);
    eprintln!("watchdog signalled {loss:?} {late:?} after the validity's end");
    assert_eq!(loss, LeaseLoss::Expired);
    assert!(
        late <= Duration::from_millis(100),
        "signalled {late:?} late"
    );
    assert!(!guard.is_valid());
    let tried = pair.primary.command_calls("wait").await - waits;
    assert!(tried >= 1, "the watchdog renewed (with WAIT) {tried} times");
}

async fn every_replicated_kind_renews_only_with_the_replica() {
    let pair = ReplicatedPair::spawn().await;
    let mut conn = pair.primary.patient_conn().await;
    let ttl = Duration::from_secs(10);
    let (fair, rw, reentrant, sem) = (
        FairLock::new(),
        RwLock::new(),
        ReentrantLock::new(),
        Semaphore::new(),
    );
    let me = Owner::new();
    let mut f = granted(fair.acquire(&mut conn, "r", &required(ttl, 500)).await);
    let mut w = granted(
        rw.acquire(&mut conn, "r", Mode::Write, &required(ttl, 500))
            .await,
    );
    let mut r = granted(
        reentrant
            .acquire(&mut conn, "r", &me, &required(ttl, 500))
            .await,
    );
    let mut p = granted(sem.acquire(&mut conn, "r", 2, &required(ttl, 500)).await);
    tokio::time::sleep(Duration::from_millis(200)).await;

    let before = [f.validity(), w.validity(), r.validity(), p.validity()];
    let renewed = [
        fair.renew(&mut conn, &mut f).await.unwrap(),
        rw.renew(&mut conn, &mut w).await.unwrap(),
        reentrant.renew(&mut conn, &mut r).await.unwrap(),
        sem.renew(&mut conn, &mut p).await.unwrap(),
    ];
    let after = [f.validity(), w.validity(), r.validity(), p.validity()];
    assert_eq!(renewed, [Renew::Renewed; 4]);
    for (kind, (b, a)) in ["fair", "rw", "reentrant", "semaphore"]
        .iter()
        .zip(before.iter().zip(after))
    {
        assert!(a > *b, "{kind}: validity {b:?} -> {a:?}");
    }

    pair.cut_link().await;
    let before = after;
    let renewed = [
        fair.renew(&mut conn, &mut f).await.unwrap(),
        rw.renew(&mut conn, &mut w).await.unwrap(),
        reentrant.renew(&mut conn, &mut r).await.unwrap(),
        sem.renew(&mut conn, &mut p).await.unwrap(),
    ];
    let after = [f.validity(), w.validity(), r.validity(), p.validity()];
    assert_eq!(renewed, [NOT_REPLICATED; 4]);
    for (kind, (b, a)) in ["fair", "rw", "reentrant", "semaphore"]
        .iter()
        .zip(before.iter().zip(after))
    {
        assert!(a <= *b, "{kind}: validity grew {b:?} -> {a:?}");
        assert!(!a.is_zero(), "{kind}: still valid until it runs out");
    }
    fair.release(&mut conn, f).await.unwrap();
    rw.release(&mut conn, w).await.unwrap();
    reentrant.release(&mut conn, r).await.unwrap();
    sem.release(&mut conn, p).await.unwrap();
}

/// The latest end of `guard`'s validity seen so far: `now + validity` while it is valid.
fn track(guard: &LockGuard<Lock>, end: &mut Option<Instant>) {
    let left = guard.validity();
    if !left.is_zero() {
        *end = Some(Instant::now() + left);
    }
}

/// A holder with a watchdog on the primary; the replica's link cut; the holder's watchdog
/// left renewing for `renewing`; the primary killed and the replica promoted; a second owner
/// acquiring there as soon as it can (the lock key on the replica expires by the TTL of the
/// last write it received). Answers the overlap in ms: how long the holder's guard still
/// claimed validity after the second owner's successful attempt was sent (negative: the
/// holder's validity had ended that long before).
async fn failover_overlap(require: bool, renewing: Duration) -> f64 {
    let mut pair = ReplicatedPair::spawn().await;
    let mut conn = pair.primary.patient_conn().await;
    let lock = Lock::new();
    let ttl = Duration::from_secs(2);
    let options = if require {
        required::<Lock>(ttl, 200)
    } else {
        LockOptions::new().ttl(ttl)
    };
    let mut holder = granted(lock.acquire(&mut conn, "job", &options).await);
    let signal = lock.watch(&conn, &mut holder).unwrap();
    let mut end = None;
    track(&holder, &mut end);
    let first_end = end;
    // In sync for a while: the watchdog renews (a third of the ttl).
    let in_sync = Instant::now() + Duration::from_millis(1_000);
    while Instant::now() < in_sync {
        track(&holder, &mut end);
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(end > first_end, "the watchdog renewed while in sync");
    assert!(!signal.is_lost());

    pair.cut_link().await;
    let cut = Instant::now();
    while cut.elapsed() < renewing {
        track(&holder, &mut end);
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    track(&holder, &mut end);
    pair.primary.stop().await; // SIGKILL
    let _: () = pair.replica.cmd(&["REPLICAOF", "NO", "ONE"]).await;
    let mut promoted = pair.replica.conn().await;
    let second = LockOptions::new().ttl(ttl);
    let (sent, guard) = loop {
        track(&holder, &mut end);
        let sent = Instant::now();
        if let Acquire::Acquired(g) = lock
            .try_acquire(&mut promoted, "job", &second)
            .await
            .unwrap()
        {
            break (sent, g);
        }
        assert!(cut.elapsed() < Duration::from_secs(20), "never acquired");
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    track(&holder, &mut end);
    let end = end.expect("the holder was valid at first");
    let overlap_ms = if end >= sent {
        end.duration_since(sent).as_secs_f64() * 1e3
    } else {
        -(sent.duration_since(end).as_secs_f64() * 1e3)
    };
    eprintln!(
        "failover (require_replicas: {require}, renewing {renewing:?} after the cut): \
         overlap {overlap_ms:.1} ms; second owner in after {:?}; holder's signal: {:?}",
        sent.duration_since(cut),
        signal.loss()
    );
    lock.release(&mut promoted, guard).await.unwrap();
    overlap_ms
}

async fn failover_after_renewing_longer_than_the_ttl_leaves_no_overlap() {
    let overlap = failover_overlap(true, Duration::from_millis(2_500)).await;
    assert!(overlap <= 0.0, "overlap {overlap:.1} ms");
}

async fn failover_right_after_the_cut_leaves_no_overlap() {
    // The second owner waits for the key to expire on the promoted replica: the holder's
    // validity must have ended first.
    let overlap = failover_overlap(true, Duration::from_millis(100)).await;
    assert!(overlap <= 0.0, "overlap {overlap:.1} ms");
}

/// The negative control of the two tests above: the same scenario without the lever (the
/// holder renewed on the primary alone) produces the overlap they rule out, so they are known
/// to exercise it (the README: 1.81 s measured).
async fn failover_without_require_replicas_overlaps() {
    let overlap = failover_overlap(false, Duration::from_millis(2_500)).await;
    assert!(
        overlap > 0.0,
        "without require_replicas the holder's guard still claims the lock when the second \
         owner acquires: overlap {overlap:.1} ms"
    );
}

fn main() -> std::process::ExitCode {
    let mut tests = harness::Tests::new();
    harness::add!(
        tests,
        a_renewal_moves_the_validity_only_when_the_replica_acknowledged_it,
        every_replicated_kind_renews_only_with_the_replica,
        failover_after_renewing_longer_than_the_ttl_leaves_no_overlap,
        failover_right_after_the_cut_leaves_no_overlap,
        failover_without_require_replicas_overlaps
    );
    harness::add!(tests, valkey: a_native_renewal_moves_the_validity_only_when_the_replica_acknowledged_it);
    tests.run()
}
