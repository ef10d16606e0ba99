//! Sentinel failover (issue 8 fault suite): 1 primary + 1 replica + 3 sentinels, a buyer
//! decrementing with request ids through redis-rs's sentinel support
//! (`redkit::connect::sentinel_primary`), across `SENTINEL FAILOVER` and then a SIGKILL of the
//! new primary. Counted: attempted / succeeded / errored / lost / doubled, and the time until
//! calls succeed again after each fault.

mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::sentinel::{SentinelClient, SentinelServerType};
use redkit::connect::{self, Timeouts};
use redkit::inventory::{Decrement, Inventory, Store};
use support::sentinel::{SentinelSet, SERVICE};

const STOCK: u64 = 10_000_000;

fn store() -> Store {
    Inventory::new("fsn").unwrap().store("s").unwrap()
}

fn timeouts() -> Timeouts {
    Timeouts::new(Duration::from_millis(300), Duration::from_millis(300)).unwrap()
}

#[derive(Debug, Default)]
struct Run {
    attempted: u64,
    errored: u64,
    acked: Vec<String>,
    /// The id being retried when the run stopped (may or may not have run).
    pending: Option<String>,
}

/// Decrements with one request id per purchase, retrying an id until it succeeds; on an
/// error asks the sentinels for the primary again.
async fn buyer(
    mut sentinel: SentinelClient,
    successes: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) -> Run {
    let s = store();
    let mut run = Run::default();
    let mut conn = None;
    let mut id = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let c = match &mut conn {
            Some(c) => c,
            None => match connect::sentinel_primary(&mut sentinel, timeouts()).await {
                Ok(c) => conn.insert(c),
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let rid = format!("p-{id}");
        run.attempted += 1;
        match s.decrement(c, "sku", 1, Some(&rid)).await {
            Ok(d) => {
                assert!(d.is_applied(), "{d:?}");
                run.acked.push(rid);
                run.pending = None;
                id += 1;
                successes.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            Err(_) => {
                run.errored += 1;
                run.pending = Some(rid);
                conn = None; // ask the sentinels again
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    run
}

/// Waits until the sentinels name a primary other than `old` and the buyer succeeded again;
/// returns how long that took from `since`.
async fn recovered(
    set: &SentinelSet,
    old: u16,
    successes: &AtomicU64,
    since: Instant,
    within: Duration,
) -> Duration {
    let mut switched = false;
    let mut base = successes.load(Ordering::Relaxed);
    while since.elapsed() < within {
        if !switched {
            if let Some(port) = set.primary_port().await {
                if port != old {
                    switched = true;
                    base = successes.load(Ordering::Relaxed);
                }
            }
        } else if successes.load(Ordering::Relaxed) > base {
            return since.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no failover + successful call within {within:?} (switched: {switched})");
}

/// Until `n` more purchases than now have succeeded, at most 10 s.
async fn more_successes(successes: &AtomicU64, n: u64) {
    let target = successes.load(Ordering::Relaxed) + n;
    support::bounded(10, "the buyer's purchases", async {
        while successes.load(Ordering::Relaxed) < target {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

/// How many purchases the two servers' stocks differ by: those one of them took that the other
/// never saw.
async fn split(set: &SentinelSet) -> u64 {
    let old = store()
        .stock(&mut set.pair.primary.conn().await, "sku")
        .await;
    let new = store()
        .stock(&mut set.pair.replica.conn().await, "sku")
        .await;
    match (old, new) {
        (Ok(old), Ok(new)) => new.abs_diff(old),
        other => panic!("{other:?}"),
    }
}

/// Until the two servers' stocks differ by at least `n` purchases (see [`split`]), at most
/// 10 s; returns the difference.
async fn until_split(set: &SentinelSet, n: u64) -> u64 {
    support::bounded(10, "a split brain of the buyer's purchases", async {
        loop {
            let split = split(set).await;
            if split >= n {
                return split;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

#[tokio::test]
async fn sentinel_failover_and_primary_kill_are_counted() {
    let mut set = SentinelSet::spawn(1_000).await;
    let mut setup = set.pair.primary.conn().await;
    store().set(&mut setup, "sku", STOCK).await.unwrap();
    set.pair.wait_in_sync(Duration::from_secs(10)).await;

    let sentinel = SentinelClient::build(
        set.urls(),
        String::from(SERVICE),
        None,
        SentinelServerType::Master,
    )
    .unwrap();
    let successes = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let task = tokio::spawn(buyer(sentinel, successes.clone(), stop.clone()));
    more_successes(&successes, 10).await; // the buyer is running before the first fault

    // 1. SENTINEL FAILOVER (planned switch).
    let first = set.pair.primary.port();
    let t0 = Instant::now();
    let _: String = set.sentinels[0]
        .cmd(&["SENTINEL", "FAILOVER", SERVICE])
        .await
        .unwrap();
    let after_failover = recovered(&set, first, &successes, t0, Duration::from_secs(20)).await;

    // 2. SIGKILL of the new primary.
    let second = set.primary_port().await.unwrap();
    assert_ne!(second, first);
    // Where the buyer's purchases went: the buyer asks the sentinels again only after an
    // error, and SENTINEL FAILOVER gives it none, so it keeps buying on the old primary, which
    // stays a primary (with no replica) until the sentinels demote it some seconds later.
    // The kill comes once that split brain (the README's; measured: hundreds) has taken
    // purchases, before the demotion; counted here and asserted below.
    let orphaned = until_split(&set, 10).await;
    let t1 = Instant::now();
    if set.pair.replica.port() == second {
        set.pair.replica.stop().await;
    } else {
        set.pair.primary.stop().await;
    }
    let after_kill = recovered(&set, second, &successes, t1, Duration::from_secs(30)).await;
    more_successes(&successes, 10).await; // calls on the new primary, counted in the run
    stop.store(true, Ordering::Relaxed);
    let run = task.await.unwrap();

    // Count against the final primary: an acknowledged id whose retry is not a Duplicate
    // was lost (its deduction and record were not on the replica that got promoted).
    let final_port = set.primary_port().await.unwrap();
    let client = redis::Client::open(format!("redis://127.0.0.1:{final_port}/")).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let s = store();
    let mut lost = 0u64;
    for id in &run.acked {
        if !matches!(
            s.decrement(&mut conn, "sku", 1, Some(id)).await.unwrap(),
            Decrement::Duplicate { .. }
        ) {
            lost += 1; // now re-applied once by this retry
        }
    }
    if let Some(id) = &run.pending {
        s.decrement(&mut conn, "sku", 1, Some(id)).await.unwrap();
    }
    let ids = run.acked.len() as u64 + u64::from(run.pending.is_some());
    let applied = STOCK - s.stock(&mut conn, "sku").await.unwrap();
    let doubled = applied.saturating_sub(ids);
    eprintln!(
        "sentinel (down-after 1 s): attempted {}, succeeded {}, errored {}, lost {lost}, \
         doubled {doubled}; calls succeed again {after_failover:?} after SENTINEL FAILOVER, \
         {after_kill:?} after SIGKILL of the primary; {orphaned} purchases acknowledged by \
         the old primary after SENTINEL FAILOVER, before the kill",
        run.attempted,
        run.acked.len(),
        run.errored
    );
    // With every sentinel frozen, asking for the primary is bounded too.
    for s in &set.sentinels {
        s.pause();
    }
    let mut sentinel = SentinelClient::build(
        set.urls(),
        String::from(SERVICE),
        None,
        SentinelServerType::Master,
    )
    .unwrap();
    let started = Instant::now();
    let r = connect::sentinel_primary(&mut sentinel, timeouts()).await;
    let took = started.elapsed();
    for s in &set.sentinels {
        s.resume();
    }
    eprintln!(
        "sentinels frozen: sentinel_primary answered in {took:?}: {:?}",
        r.as_ref().err()
    );
    assert!(r.is_err());
    assert!(
        took <= timeouts().call_bound() + Duration::from_millis(100),
        "{took:?}"
    );

    assert!(run.errored > 0, "the faults hit the run");
    // The README's split brain: after SENTINEL FAILOVER the buyer got no error and kept
    // buying on the old primary, which took purchases the new one never saw.
    assert!(
        orphaned > 0,
        "no purchase acknowledged by the old primary after SENTINEL FAILOVER: the split brain \
         the README describes did not happen"
    );
    // Lost acknowledged purchases (README, failure semantics, "failover with replication lag":
    // 0 lost in the measured run; nothing guarantees 0 without WAIT). In this sequence the
    // kill hits the primary the sentinels named, and the old primary, which took the buyer's
    // purchases after SENTINEL FAILOVER (`orphaned`), is promoted back with all of them. What
    // the kill can lose is a purchase the killed node acknowledged but had not yet written to
    // its replica link: Redis writes a command to the link in the same event-loop pass as its
    // reply, and the one buyer has one call in flight: at most 1.
    assert!(
        lost <= 1,
        "{lost} acknowledged purchases lost (at most the one in flight at the kill)"
    );
    assert_eq!(doubled, 0, "a request id applied twice");
    assert_eq!(
        applied, ids,
        "after retrying every id, each applied exactly once"
    );
}
