//! The rows against the seed script, paired (case `paired`): redkit and the seed script take turns in
//! short slices (`REDKIT_LEAN_SLICE` s each, default 1) for `REDKIT_LEAN_PAIRS` pairs (default
//! 9), the order alternating pair by pair (redkit first, then the seed first), and every pair
//! gives its own ratios: throughput, server CPU per op, client CPU per op. The row prints the
//! median over the pairs and the lowest and highest pair.
//!
//! Case `twin` runs the same rows on twin redis-servers AT ONCE, redkit's calls on one and the
//! seed's on the other, swapping servers pair by pair.
//!
//! Why: the plain rows compare two runs of a few seconds each, one after the other, and a
//! drift of the shared host between them moves their ratio by 10-30 %. Taking turns in 1 s
//! slices did not help on the development machine (pairs still spread +-20 %: the host's
//! noise is faster than a second). Twins pinned to one server CPU (`REDKIT_LEAN_PIN=0/1`) run
//! both sides in the same instant on the same core: pairs spread about +-3 %.

use super::ops::{
    decrement_op, gcra_ops, limiter_ops, lock_ops, run_op, seed_stock_ops, sliding_ops,
    window_version_op, Op,
};
use super::*;

/// The ratios of one pair (redkit / seed).
pub(crate) struct Ratios {
    pub(crate) throughput: f64,
    pub(crate) server: Option<f64>,
    pub(crate) client: Option<f64>,
}

impl Ratios {
    /// redkit's run against the seed's; the client ratio only when `client` (each side's
    /// client CPU measured on its own).
    pub(crate) fn of(r: &Measured, s: &Measured, client: bool) -> Self {
        let ratio = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a / b);
        Self {
            throughput: r.ops_per_sec() / s.ops_per_sec(),
            server: ratio(r.cpu_us_per_op(), s.cpu_us_per_op()),
            client: ratio(r.client_us_per_op(), s.client_us_per_op()).filter(|_| client),
        }
    }
}

/// One goal row: its name, redkit's op and the seed's, and whether the stocks are set first.
pub(crate) struct Comparison {
    pub(crate) name: &'static str,
    pub(crate) redkit: Op,
    pub(crate) seed: Op,
    pub(crate) stocked: bool,
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
        // Twins share this process: its CPU cannot be split between them.
        out.push(Ratios::of(&r, &s, sides.len() == 1));
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
pub(crate) fn paired_row(name: &str, ratios: &[Ratios]) {
    println!(
        "| {name} | {} | {} | {} | {} |",
        ratios.len(),
        spread(ratios.iter().map(|r| Some(r.throughput))),
        spread(ratios.iter().map(|r| r.server)),
        spread(ratios.iter().map(|r| r.client)),
    );
}

/// Prints the header of a paired table: `how` the pairs ran.
pub(crate) fn paired_header(how: &str, pairs: u64, secs: f64) {
    println!();
    println!("Paired ({how}): {pairs} pairs of {secs} s slices; redkit / seed per pair, median [lowest-highest]");
    println!();
    println!("| operation | pairs | throughput | server CPU per op | client CPU per op |");
    println!("| --- | ---: | ---: | ---: | ---: |");
}

/// The rows against the seed script, each redkit's op against the seed's.
pub(crate) fn comparisons(ips: &Arc<Vec<LimitKey>>) -> Vec<Comparison> {
    let window = Duration::from_millis(WINDOW_MS);
    let default = Arc::new(
        FixedWindow::new(
            "pair",
            Rate::new(crate::support::nz(LIMIT), window).unwrap(),
        )
        .unwrap(),
    );
    let aligned = Arc::new(
        AlignedWindow::new(
            "pair-al",
            Rate::new(crate::support::nz(LIMIT), window).unwrap(),
        )
        .unwrap(),
    );
    let grouped = Arc::new(
        FixedWindow::new(
            "pair-gc",
            Rate::new(crate::support::nz(LIMIT), window).unwrap(),
        )
        .unwrap()
        .grouped(GroupCommit::new(64, 4).unwrap()),
    );
    let store = Arc::new(Inventory::new("lean:inv").unwrap().store("w1").unwrap());
    let seed_limiter = limiter_ops(&default, ips).1;
    let (seed_stock, seed_record) = seed_stock_ops();
    let (lock, quiet_lock, seed_lock) = lock_ops();
    let (gcra, sliding) = (gcra_ops(ips), sliding_ops(ips));
    let row = |name, redkit, seed: &Op, stocked| Comparison {
        name,
        redkit,
        seed: seed.clone(),
        stocked,
    };
    vec![
        row(
            "fixed-window check, 10k IPs",
            limiter_ops(&default, ips).0,
            &seed_limiter,
            false,
        ),
        row(
            "fixed-window check, 10k IPs, with_group_commit(64, 4)",
            limiter_ops(&grouped, ips).0,
            &seed_limiter,
            false,
        ),
        // Before and after, the same calls: this row's "seed" is the previous version.
        Comparison {
            name: "fixed-window script alone: v9 (v8's code) / v7 (before), not the seed",
            redkit: window_version_op(&default, ips, 9),
            seed: window_version_op(&default, ips, 7),
            stocked: false,
        },
        row(
            "fixed-window check, 10k IPs, aligned_to_clock()",
            limiter_ops(&aligned, ips).0,
            &seed_limiter,
            false,
        ),
        row(
            "GCRA check, 10k IPs (vs redis_rate)",
            gcra.0,
            &gcra.1,
            false,
        ),
        row(
            "sliding-window check, 10k IPs (vs limits)",
            sliding.0,
            &sliding.1,
            false,
        ),
        row(
            "decrement, 64 buyers on ONE SKU",
            decrement_op(&store, false),
            &seed_stock,
            true,
        ),
        row(
            "decrement with a request id, ONE SKU",
            decrement_op(&store, true),
            &seed_stock,
            true,
        ),
        row(
            "decrement with a request id, vs seed + SET NX PX record",
            decrement_op(&store, true),
            &seed_record,
            true,
        ),
        row(
            "lock acquire + release, default options (no fencing)",
            lock,
            &seed_lock,
            false,
        ),
        row(
            "lock acquire + release, wake_on_release(false)",
            quiet_lock,
            &seed_lock,
            false,
        ),
    ]
}

/// Sets the stocks (a stocked row) or empties the keyspace of every side before a row.
pub(crate) async fn prepare(sides: &[Side<'_>], stocked: bool) {
    let store = Inventory::new("lean:inv").unwrap().store("w1").unwrap();
    for side in sides {
        if stocked {
            restock(side.server, &side.conn, &store).await;
        } else {
            fresh(side.server).await;
        }
    }
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
    paired_header(how, pairs, secs);
    for c in comparisons(ips) {
        prepare(sides, c.stocked).await;
        let ratios = pair_ratios(sides, secs, pairs, &c.redkit, &c.seed).await;
        paired_row(c.name, &ratios);
    }
}
