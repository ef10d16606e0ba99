//! The goal rows of issue 9, paired (case `paired`): redkit and the seed script take turns in
//! short slices (`REDKIT_LEAN_SLICE` s each, default 1) for `REDKIT_LEAN_PAIRS` pairs (default
//! 9), the order alternating pair by pair (redkit first, then the seed first), and every pair
//! gives its own ratios: throughput, server CPU per op, client CPU per op. The row prints the
//! median over the pairs and the lowest and highest pair.
//!
//! Why: the plain rows compare two runs of a few seconds each, one after the other; a drift of
//! the shared host between them moves their ratio by 10-30 %. Within a pair the two slices are
//! a second apart, so a drift that lasts seconds hits both alike, and the median discards the
//! pairs a burst fell on.

use std::pin::Pin;

use super::*;

/// One bench operation: `op(connection, task, i)`, the i-th call of task `task`.
pub(crate) type Op = Arc<
    dyn Fn(MultiplexedConnection, u64, u64) -> Pin<Box<dyn Future<Output = ()> + Send>>
        + Send
        + Sync,
>;

/// Numbers every slice run by [`pair_ratios`], so the request ids of two slices never meet.
static SLICE: AtomicU64 = AtomicU64::new(0);

/// Wraps an async closure as an [`Op`].
fn op<F, Fut>(f: F) -> Op
where
    F: Fn(MultiplexedConnection, u64, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    Arc::new(move |c, t, i| Box::pin(f(c, t, i)))
}

/// Runs `op` for `secs` as [`run`] does.
async fn run_op(conn: &MultiplexedConnection, pid: Option<u32>, secs: f64, op: &Op) -> Measured {
    SLICE.fetch_add(1, Ordering::Relaxed);
    let op = op.clone();
    run(conn.clone(), pid, secs, move |c, t, i| op(c, t, i)).await
}

/// The ratios of one pair (redkit / seed).
struct Ratios {
    throughput: f64,
    server: Option<f64>,
    client: Option<f64>,
}

/// One redis-server the comparisons run on.
pub(crate) struct Side<'a> {
    pub(crate) server: &'a support::RedisServer,
    pub(crate) conn: MultiplexedConnection,
    pub(crate) pid: Option<u32>,
}

/// `pairs` pairs of slices of `secs`. One side: redkit and the seed take turns on it, the
/// order alternating pair by pair. Two sides (twins): both run AT ONCE, redkit on one server
/// and the seed on the other, swapping servers pair by pair, so the host's drift hits both
/// in the same second.
async fn pair_ratios(
    sides: &[Side<'_>],
    secs: f64,
    pairs: u64,
    redkit: &Op,
    seed: &Op,
) -> Vec<Ratios> {
    let mut out = Vec::new();
    for pair in 0..pairs {
        let first = &sides[0];
        let (r, s) = match sides {
            [_, second] => {
                let (a, b) = if pair % 2 == 0 {
                    (first, second)
                } else {
                    (second, first)
                };
                tokio::join!(
                    run_op(&a.conn, a.pid, secs, redkit),
                    run_op(&b.conn, b.pid, secs, seed)
                )
            }
            _ if pair % 2 == 0 => {
                let r = run_op(&first.conn, first.pid, secs, redkit).await;
                (r, run_op(&first.conn, first.pid, secs, seed).await)
            }
            _ => {
                let s = run_op(&first.conn, first.pid, secs, seed).await;
                (run_op(&first.conn, first.pid, secs, redkit).await, s)
            }
        };
        let ratio = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a / b);
        // Twins share this process: its CPU cannot be split between them.
        let twins = sides.len() == 2;
        out.push(Ratios {
            throughput: r.ops_per_sec() / s.ops_per_sec(),
            server: ratio(r.cpu_us_per_op(), s.cpu_us_per_op()),
            client: ratio(r.client_us_per_op(), s.client_us_per_op()).filter(|_| !twins),
        });
    }
    out
}

/// "median [lowest-highest]" of `values` (all present), or "n/a".
fn spread(values: impl Iterator<Item = Option<f64>>) -> String {
    let Some(mut v) = values.collect::<Option<Vec<f64>>>() else {
        return "n/a".to_owned();
    };
    if v.is_empty() {
        return "n/a".to_owned();
    }
    v.sort_by(f64::total_cmp);
    let median = if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    };
    format!("{median:.2}x [{:.2}-{:.2}]", v[0], v[v.len() - 1])
}

/// Prints the row of one comparison.
fn paired_row(name: &str, ratios: &[Ratios]) {
    println!(
        "| {name} | {} | {} | {} | {} |",
        ratios.len(),
        spread(ratios.iter().map(|r| Some(r.throughput))),
        spread(ratios.iter().map(|r| r.server)),
        spread(ratios.iter().map(|r| r.client)),
    );
}

/// The limiter ops: `limiter.check` over the 10k IPs, and the seed limiter (key per call).
fn limiter_ops(limiter: &Arc<FixedWindow>, ips: &Arc<Vec<LimitKey>>) -> (Op, Op) {
    let (l, k) = (limiter.clone(), ips.clone());
    let redkit = op(move |mut c, t, i| {
        let (l, k) = (l.clone(), k.clone());
        async move {
            let key = &k[((t * 7919 + i * 64) as usize) % IPS];
            let d = l.check(&mut c, key).await.unwrap();
            assert!(matches!(d, Decision::Allowed { .. }), "{d:?}");
        }
    });
    let (s, k) = (Arc::new(redis::Script::new(SEED_LIMITER)), ips.clone());
    let seed = op(move |mut c, t, i| {
        let (s, k) = (s.clone(), k.clone());
        async move {
            let key = format!("seed:rl:{}", k[((t * 7919 + i * 64) as usize) % IPS]);
            let allowed: i64 = s
                .key(key)
                .arg(LIMIT)
                .arg(WINDOW_MS / 1000)
                .invoke_async(&mut c)
                .await
                .unwrap();
            assert_eq!(allowed, 1);
        }
    });
    (redkit, seed)
}

/// `Store::decrement` of SKU `hot` by 1, with a request id (unique per slice, task and call)
/// when `with_id`.
fn decrement_op(store: &Arc<redkit::inventory::Store>, with_id: bool) -> Op {
    let st = store.clone();
    op(move |mut c, t, i| {
        let st = st.clone();
        async move {
            let id = with_id.then(|| format!("p{}-{t}-{i}", SLICE.load(Ordering::Relaxed)));
            let d = st.decrement(&mut c, "hot", 1, id.as_deref()).await.unwrap();
            assert!(matches!(d, Decrement::Decremented { .. }), "{d:?}");
        }
    })
}

/// The seed stock script on `seed:stock:hot`, and the seed with its own `SET NX PX` record.
fn seed_stock_ops() -> (Op, Op) {
    let s = Arc::new(redis::Script::new(SEED_STOCK));
    let plain = op(move |mut c, _, _| {
        let s = s.clone();
        async move { seed_take(&s, &mut c, "seed:stock:hot").await }
    });
    let s = Arc::new(redis::Script::new(SEED_STOCK_ID));
    let with_record = op(move |mut c, t, i| {
        let s = s.clone();
        async move {
            let slice = SLICE.load(Ordering::Relaxed);
            let r: i64 = s
                .key("seed:stock:hot")
                .key(format!("seed:req:p{slice}-{t}-{i}"))
                .arg(1)
                .arg(86_400_000)
                .invoke_async(&mut c)
                .await
                .unwrap();
            assert_eq!(r, 1);
        }
    });
    (plain, with_record)
}

/// The lock cycles: redkit's default `Lock` on `pres-<task>`, and the seed's `SET NX PX` +
/// compare-and-delete on `seed:plock:<task>` with the same lease.
fn lock_ops() -> (Op, Op) {
    let (lk, o) = (Arc::new(Lock::new()), Arc::new(LockOptions::new()));
    let redkit = op(move |mut c, t, _| {
        let (lk, o) = (lk.clone(), o.clone());
        async move {
            let resource = format!("pres-{t}");
            match lk.acquire(&mut c, &resource, &o).await.unwrap() {
                Acquire::Acquired(guard) => {
                    let r = lk.release(&mut c, guard).await.unwrap();
                    assert_eq!(r, Release::Released);
                }
                other => panic!("{other:?}"),
            }
        }
    });
    let u = Arc::new(redis::Script::new(SEED_UNLOCK));
    let ttl_ms = LockOptions::DEFAULT_TTL.as_millis() as u64;
    let seed = op(move |mut c, t, _| {
        let u = u.clone();
        async move { seed_lock_cycle(&u, &mut c, &format!("seed:plock:{t}"), ttl_ms).await }
    });
    (redkit, seed)
}

/// The goal rows, paired: on one server taking turns (`sides` of one), or on twin servers at
/// once (`sides` of two).
pub(crate) async fn paired_case(sides: &[Side<'_>], ips: &Arc<Vec<LimitKey>>) {
    let secs = env_num("REDKIT_LEAN_SLICE").unwrap_or(1.0);
    let pairs = env_num("REDKIT_LEAN_PAIRS").unwrap_or(9);
    let how = if sides.len() == 2 {
        "at once on twin redis-servers, swapping servers pair by pair"
    } else {
        "taking turns on one redis-server"
    };
    println!();
    println!("Paired ({how}): {pairs} pairs of {secs} s slices; redkit / seed per pair, median [lowest-highest]");
    println!();
    println!("| operation | pairs | throughput | server CPU per op | client CPU per op |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    let window = Duration::from_millis(WINDOW_MS);
    let default = Arc::new(FixedWindow::new("pair", LIMIT, window).unwrap());
    let aligned = Arc::new(
        FixedWindow::new("pair-al", LIMIT, window)
            .unwrap()
            .aligned_to_clock(),
    );
    let store = Arc::new(Inventory::new("lean:inv").unwrap().store("w1").unwrap());
    let seed_limiter = limiter_ops(&default, ips).1;
    let (seed_stock, seed_record) = seed_stock_ops();
    let (lock, seed_lock) = lock_ops();
    // (name, redkit, seed, whether the stocks are set first)
    let comparisons = [
        (
            "fixed-window check, 10k IPs",
            limiter_ops(&default, ips).0,
            &seed_limiter,
            false,
        ),
        (
            "fixed-window check, 10k IPs, aligned_to_clock()",
            limiter_ops(&aligned, ips).0,
            &seed_limiter,
            false,
        ),
        (
            "decrement, 64 buyers on ONE SKU",
            decrement_op(&store, false),
            &seed_stock,
            true,
        ),
        (
            "decrement with a request id, ONE SKU",
            decrement_op(&store, true),
            &seed_stock,
            true,
        ),
        (
            "decrement with a request id, vs seed + SET NX PX record",
            decrement_op(&store, true),
            &seed_record,
            true,
        ),
        (
            "lock acquire + release, default options (no fencing)",
            lock,
            &seed_lock,
            false,
        ),
    ];
    for (name, redkit, seed, stocked) in comparisons {
        for side in sides {
            if stocked {
                restock(side.server, &side.conn, &store).await;
            } else {
                fresh(side.server).await;
            }
        }
        let ratios = pair_ratios(sides, secs, pairs, &redkit, seed).await;
        paired_row(name, &ratios);
    }
}
