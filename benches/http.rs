//! End-to-end HTTP: axum on loopback with no limiter, with tower_governor (local, in-process)
//! and with redkit's layers (Redis on loopback), loaded by `wrk`; requests/s, p50 and p99 of each,
//! and this process's CPU per request (the server and its layer, not wrk or Redis), in one
//! run, printed as a Markdown table.
//!
//! `cargo bench --bench http` (needs `wrk` on PATH: `apt-get install wrk`).
//! `HTTP_BENCH_SECS` (default 5) per case, `HTTP_BENCH_CONNECTIONS` (default 64),
//! `HTTP_BENCH_ONLY` (cases whose stack names contain one of these comma-separated words;
//! `=<name>`: the one stack of that whole name),
//! `HTTP_BENCH_REVERSE=1` (run the cases in reverse order, to see what order costs).
//!
//! `HTTP_BENCH_LAYER=<n>` (e.g. 200000) measures each layer alone instead, without a network
//! (`benches/http/layer_cost.rs`): CPU ns per request over `n` requests, median of 9 rounds
//! (`HTTP_BENCH_ONLY` picks stacks there too).
//!
//! `HTTP_BENCH_PAIRS=<n>` (e.g. 9) then runs the goal comparisons **paired**: each pair of
//! stacks (leased quota, of the fixed and of the sliding window and of GCRA, against tower_governor under the limit, with and without quota headers
//! on allowed answers; the concurrency limit's leased slots against tower's
//! `GlobalConcurrencyLimitLayer`; leased + deny cache against the deny cache alone under the
//! flood) in
//! `n` pairs of back-to-back slices of `HTTP_BENCH_SLICE` seconds (default 1), which side goes
//! first alternating pair by pair, and prints the median of the per-pair ratios (requests/s,
//! this process's CPU per request) with the lowest and highest pair. The machine's speed
//! moves by tens of percent within a minute on shared cores; two slices a second apart share
//! its phase far more often than two cases a minute apart.
//!
//! Two loads, one client (127.0.0.1), so one key for every limiter:
//! - **under the limit**: every request allowed (what the limiter costs an honest client);
//! - **flood**: the limit is 100 requests/s and wrk sends as fast as it can, so nearly every
//!   request is refused (what an abusive client costs; the deny cache's case).

#[path = "common/cpu.rs"]
mod cpu;
#[path = "http/layer_cost.rs"]
mod layer_cost;
#[path = "../tests/support/mod.rs"]
mod support;

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use axum::{routing::get, Router};
use redis::aio::ConnectionManager;
use redkit::middleware::{ConcurrencyLimitLayer, QuotaHeaders, RateLimitLayer};
use redkit::rate_limit::{FixedWindow, Gcra, QuotaLease, Rate, SlidingWindow};
use redkit::GroupCommit;
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;

/// The most units one lease call takes (`QuotaLease::new`).
const LEASE_UNITS: u32 = 256;

/// `LEASE_UNITS`, or `HTTP_BENCH_LEASE_UNITS` (e.g. to see what the lease calls cost).
fn lease_units() -> u32 {
    std::env::var("HTTP_BENCH_LEASE_UNITS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(LEASE_UNITS)
}

fn base() -> Router {
    Router::new().route("/", get(|| async { "hello" }))
}

/// What wrk measured.
struct Run {
    rps: f64,
    p50: String,
    p99: String,
    non_2xx: u64,
    requests: u64,
}

fn wrk(addr: SocketAddr, secs: u64, connections: u32) -> Run {
    let out = Command::new("wrk")
        .args([
            // wrk needs at least one connection per thread.
            &format!("-t{}", connections.clamp(1, 2)),
            &format!("-c{connections}"),
            &format!("-d{secs}s"),
            "--latency",
            &format!("http://{addr}/"),
        ])
        .output()
        .expect("wrk on PATH (apt-get install wrk)");
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |prefix: &str| {
        text.lines()
            .map(str::trim)
            .find_map(|l| l.strip_prefix(prefix))
            .map(|rest| rest.trim().to_owned())
    };
    Run {
        rps: field("Requests/sec:")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0),
        p50: field("50%").unwrap_or_else(|| "?".to_owned()),
        p99: field("99%").unwrap_or_else(|| "?".to_owned()),
        non_2xx: field("Non-2xx or 3xx responses:")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        requests: text
            .lines()
            .find_map(|l| l.trim().split_once(" requests in "))
            .and_then(|(n, _)| n.trim().parse().ok())
            .unwrap_or(0),
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let secs: u64 = std::env::var("HTTP_BENCH_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let connections: u32 = std::env::var("HTTP_BENCH_CONNECTIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    runtime.block_on(async move {
        let server = support::RedisServer::spawn().await;
        let client = redis::Client::open(format!("{}?protocol=resp3", server.url())).unwrap();
        let conn = ConnectionManager::new(client).await.unwrap();
        let window = Duration::from_secs(1);
        let fw = |name: &str, limit: u32| FixedWindow::new(name, Rate::new(support::nz(limit), window).unwrap()).unwrap();
        let governor = |per_ms: u64, burst: u32| {
            let config = GovernorConfigBuilder::default()
                .per_millisecond(per_ms)
                .burst_size(burst)
                .finish()
                .unwrap();
            GovernorLayer::new(config)
        };
        // With `x-ratelimit-limit` / `x-ratelimit-remaining` on every answer: the work
        // redkit's `RateLimit` headers do, for a like-for-like row.
        let governor_headers = |per_ms: u64, burst: u32| {
            let config = GovernorConfigBuilder::default()
                .per_millisecond(per_ms)
                .burst_size(burst)
                .use_headers()
                .finish()
                .unwrap();
            GovernorLayer::new(config)
        };
        let grouped = |name: &str, limit: u32| {
            let limiter = fw(name, limit).grouped(GroupCommit::new(64, 4).unwrap());
            RateLimitLayer::new(limiter, conn.clone())
        };
        let redkit = |name: &str, limit: u32, cache: bool| {
            let builder = RateLimitLayer::builder(fw(name, limit), conn.clone());
            let builder = if cache {
                builder.deny_cache_capacity(100_000)
            } else {
                builder
            };
            builder.build().unwrap()
        };
        // Leased quota: one instance here, at most `LEASE_UNITS` units per lease call.
        let leased_with = |name: &str, limit: u32, cache: bool, headers: QuotaHeaders| {
            let limiter = fw(name, limit).leased(QuotaLease::new(lease_units()).unwrap());
            let builder = RateLimitLayer::builder(limiter, conn.clone()).quota_headers(headers);
            let builder = if cache {
                builder.deny_cache_capacity(100_000)
            } else {
                builder
            };
            builder.build().unwrap()
        };
        let leased = |name: &str, limit: u32, cache: bool| {
            leased_with(name, limit, cache, QuotaHeaders::Always)
        };
        // The sliding window's lease: the same lease settings, the same header policy.
        let sliding_leased_with = |name: &str, limit: u32, headers: QuotaHeaders| {
            let limiter = SlidingWindow::new(name, Rate::new(support::nz(limit), window).unwrap())
                .unwrap()
                .leased(QuotaLease::new(lease_units()).unwrap());
            RateLimitLayer::builder(limiter, conn.clone()).quota_headers(headers).build().unwrap()
        };
        let sliding_leased = |name: &str, limit: u32| sliding_leased_with(name, limit, QuotaHeaders::Always);
        // GCRA's lease: governor's own algorithm and settings (one unit per ms, a burst of
        // `burst`), the same lease settings and header policy.
        let gcra_leased_with = |name: &str, burst: u32, headers: QuotaHeaders| {
            let limiter = Gcra::bursting(name, Rate::per_second(support::nz(1_000)), support::nz(burst))
                .unwrap()
                .leased(QuotaLease::new(lease_units()).unwrap());
            RateLimitLayer::builder(limiter, conn.clone()).quota_headers(headers).build().unwrap()
        };
        let gcra_leased = |name: &str, burst: u32| gcra_leased_with(name, burst, QuotaHeaders::Always);
        // The concurrency limit's leased slots: the same lease settings (one instance here,
        // at most `LEASE_UNITS` slots more per call), 1000 in flight per client.
        let cc_leased = |name: &str| {
            ConcurrencyLimitLayer::builder(
                redkit::middleware::ConcurrencyPolicy::new(name, 1000).unwrap(),
                conn.clone(),
            )
            .leased(QuotaLease::new(lease_units()).unwrap())
            .build()
            .unwrap()
        };
        // tower's in-process limit shared by every clone of the service (its
        // `ConcurrencyLimitLayer` counts per clone: per connection under axum).
        let tower_cc = || tower::limit::GlobalConcurrencyLimitLayer::new(1000);
        let big = 1_000_000_000;
        // A limiter's name goes into its `RateLimit` headers: the two sides of a comparison
        // between redkit stacks have names of one length, so their answers weigh the same.
        let cases: Vec<(&str, &str, Router)> = vec![
            ("under the limit", "no limiter", base()),
            ("under the limit", "tower_governor", base().layer(governor(1, big))),
            (
                "under the limit",
                "tower_governor, with headers",
                base().layer(governor_headers(1, big)),
            ),
            ("under the limit", "redkit fixed window", base().layer(redkit("u", big, false))),
            (
                "under the limit",
                "redkit fixed window + deny cache",
                base().layer(redkit("uc", big, true)),
            ),
            (
                "under the limit",
                "redkit fixed window, group commit",
                base().layer(grouped("ug", big)),
            ),
            (
                "under the limit",
                "redkit fixed window, leased (256 units)",
                base().layer(leased("ul", big, false)),
            ),
            (
                "under the limit",
                "redkit sliding window, leased (256 units)",
                base().layer(sliding_leased("sl", big)),
            ),
            (
                "under the limit",
                "redkit GCRA, leased (256 units)",
                base().layer(gcra_leased("gl", big)),
            ),
            (
                "under the limit",
                "redkit fixed window, leased (256 units), quota headers on refusals only",
                base().layer(leased_with("uln", big, false, QuotaHeaders::OnRefusal)),
            ),
            (
                "under the limit",
                "redkit concurrency limit (N = 1000)",
                base().layer(ConcurrencyLimitLayer::new(
                    redkit::middleware::ConcurrencyPolicy::new("cc", 1000).unwrap(),
                    conn.clone(),
                )),
            ),
            (
                "under the limit",
                "tower GlobalConcurrencyLimitLayer (N = 1000)",
                base().layer(tower_cc()),
            ),
            (
                "under the limit",
                "redkit concurrency limit (N = 1000), leased (256 slots)",
                base().layer(cc_leased("cl")),
            ),
            ("flood (100/s allowed)", "tower_governor", base().layer(governor(10, 100))),
            (
                "flood (100/s allowed)",
                "redkit fixed window",
                base().layer(redkit("f", 100, false)),
            ),
            (
                "flood (100/s allowed)",
                "redkit fixed window, group commit",
                base().layer(grouped("fg", 100)),
            ),
            (
                "flood (100/s allowed)",
                "redkit fixed window + deny cache",
                base().layer(redkit("fc", 100, true)),
            ),
            (
                "flood (100/s allowed)",
                "redkit fixed window, leased (256 units) + deny cache",
                base().layer(leased("fl", 100, true)),
            ),
        ];
        let only: Vec<String> = std::env::var("HTTP_BENCH_ONLY")
            .map(|v| match v.starts_with('=') {
                // One whole name (it may hold commas).
                true => vec![v],
                false => v.split(',').map(str::to_owned).collect(),
            })
            .unwrap_or_default();
        let mut cases: Vec<_> = cases
            .into_iter()
            .filter(|(_, name, _)| picked(&only, name))
            .filter(|_| std::env::var("HTTP_BENCH_LAYER").is_err())
            .collect();
        if std::env::var("HTTP_BENCH_REVERSE").is_ok_and(|v| v == "1") {
            cases.reverse();
        }
        println!(
            "wrk -t{} -c{connections} -d{secs}s, one client, axum + Redis 7 on loopback (2 shared cores)\n",
            connections.clamp(1, 2)
        );
        println!("| load | stack | requests/s | p50 | p99 | non-2xx | Redis EVALSHA | requests per EVALSHA | server CPU per request |");
        println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
        for (load, name, app) in cases {
            let addr = support::serve_axum(app).await;
            let before = server.evalsha_calls().await;
            let cpu_before = cpu::process_cpu_ns();
            let run = tokio::task::spawn_blocking(move || wrk(addr, secs, connections))
                .await
                .unwrap();
            let cpu = cpu_before.zip(cpu::process_cpu_ns()).map(|(a, b)| b.saturating_sub(a));
            let calls = server.evalsha_calls().await - before;
            let cpu_per_request = match cpu {
                Some(ns) if run.requests > 0 => {
                    format!("{:.2} us", ns as f64 / run.requests as f64 / 1000.0)
                }
                _ => "n/a".to_owned(),
            };
            let per_call = if calls == 0 {
                "-".to_owned()
            } else {
                format!("{:.1}", run.requests as f64 / calls as f64)
            };
            println!(
                "| {load} | {name} | {:.0} | {} | {} | {} of {} | {calls} | {per_call} | {cpu_per_request} |",
                run.rps, run.p50, run.p99, run.non_2xx, run.requests
            );
        }
        let pairs: usize = std::env::var("HTTP_BENCH_PAIRS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let layer_requests: u64 = std::env::var("HTTP_BENCH_LAYER")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if layer_requests > 0 {
            use layer_cost::{hello, stack};
            use tower::Layer;
            let stacks: Vec<(&str, layer_cost::Stack)> = vec![
                ("no layer", stack(hello())),
                ("tower_governor", stack(governor(1, big).layer(hello()))),
                (
                    "tower_governor, with headers",
                    stack(governor_headers(1, big).layer(hello())),
                ),
                (
                    "redkit fixed window, leased (256 units)",
                    stack(leased("ll", big, false).layer(hello())),
                ),
                (
                    "redkit fixed window, leased (256 units), quota headers on refusals only",
                    stack(leased_with("lln", big, false, QuotaHeaders::OnRefusal).layer(hello())),
                ),
                (
                    "redkit sliding window, leased (256 units)",
                    stack(sliding_leased("ls", big).layer(hello())),
                ),
                (
                    "redkit GCRA, leased (256 units)",
                    stack(gcra_leased("lg", big).layer(hello())),
                ),
                (
                    "tower GlobalConcurrencyLimitLayer (N = 1000)",
                    stack(tower_cc().layer(hello())),
                ),
                (
                    "redkit concurrency limit (N = 1000), leased (256 slots)",
                    stack(cc_leased("lc").layer(hello())),
                ),
                (
                    "flood: redkit fixed window + deny cache",
                    stack(redkit("lfc", 100, true).layer(hello())),
                ),
                (
                    "flood: redkit fixed window, leased (256 units) + deny cache",
                    stack(leased("lfl", 100, true).layer(hello())),
                ),
            ];
            // `HTTP_BENCH_ONLY` words pick stacks here too ("no layer" always runs).
            let stacks: Vec<_> = stacks
                .into_iter()
                .enumerate()
                .filter(|(i, (name, _))| {
                    *i == 0 || picked(&only, name)
                })
                .map(|(_, stack)| stack)
                .collect();
            println!(
                "\nThe layer alone (no network): CPU ns per request, median of 9 rounds of {layer_requests} requests; the stack's own share above `no layer`\n"
            );
            println!("| stack | 1 task | above no layer | 8 tasks at once | above no layer |");
            println!("|---|---:|---:|---:|---:|");
            let one = layer_cost::measure(&stacks, layer_requests, 9, 1).await;
            let two = layer_cost::measure(&stacks, layer_requests / 8, 9, 8).await;
            for (i, (name, _)) in stacks.iter().enumerate() {
                println!(
                    "| {name} | {:.0} | {:.0} | {:.0} | {:.0} |",
                    one[i],
                    one[i] - one[0],
                    two[i],
                    two[i] - two[0]
                );
            }
        }
        if pairs == 0 {
            return;
        }
        let slice: u64 = std::env::var("HTTP_BENCH_SLICE")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1)
            .max(1);
        let goals: Vec<(&str, &str, Router, &str, Router)> = vec![
            (
                "under the limit",
                "redkit fixed window, leased (256 units)",
                base().layer(leased("pl", big, false)),
                "tower_governor",
                base().layer(governor(1, big)),
            ),
            (
                "under the limit",
                "redkit sliding window, leased (256 units)",
                base().layer(sliding_leased("ps", big)),
                "tower_governor",
                base().layer(governor(1, big)),
            ),
            (
                "under the limit",
                "redkit GCRA, leased (256 units)",
                base().layer(gcra_leased("pg", big)),
                "tower_governor",
                base().layer(governor(1, big)),
            ),
            (
                "under the limit",
                "redkit fixed window, leased (256 units), quota headers on refusals only",
                base().layer(leased_with("pln", big, false, QuotaHeaders::OnRefusal)),
                "tower_governor",
                base().layer(governor(1, big)),
            ),
            (
                "under the limit",
                "redkit sliding window, leased (256 units), quota headers on refusals only",
                base().layer(sliding_leased_with("psn", big, QuotaHeaders::OnRefusal)),
                "tower_governor",
                base().layer(governor(1, big)),
            ),
            (
                "under the limit",
                "redkit GCRA, leased (256 units), quota headers on refusals only",
                base().layer(gcra_leased_with("pgn", big, QuotaHeaders::OnRefusal)),
                "tower_governor",
                base().layer(governor(1, big)),
            ),
            (
                "under the limit",
                "redkit fixed window, leased (256 units)",
                base().layer(leased("plh", big, false)),
                "tower_governor, with headers",
                base().layer(governor_headers(1, big)),
            ),
            (
                "under the limit",
                "redkit sliding window, leased (256 units)",
                base().layer(sliding_leased("psh", big)),
                "tower_governor, with headers",
                base().layer(governor_headers(1, big)),
            ),
            (
                "under the limit",
                "redkit GCRA, leased (256 units)",
                base().layer(gcra_leased("pgh", big)),
                "tower_governor, with headers",
                base().layer(governor_headers(1, big)),
            ),
            (
                "under the limit",
                "redkit concurrency limit (N = 1000), leased (256 slots)",
                base().layer(cc_leased("pc")),
                "tower GlobalConcurrencyLimitLayer (N = 1000)",
                base().layer(tower_cc()),
            ),
            (
                "flood (100/s allowed)",
                "redkit fixed window, leased (256 units) + deny cache",
                base().layer(leased("pfl", 100, true)),
                "redkit fixed window + deny cache",
                base().layer(redkit("pfc", 100, true)),
            ),
        ];
        println!(
            "\nPaired: {pairs} pairs of {slice} s slices, the side that goes first alternating; median [lowest-highest pair]\n"
        );
        println!("| load | stack | against | requests/s | CPU per request | requests per EVALSHA |");
        println!("|---|---|---|---:|---:|---:|");
        for (load, name, app, against, other) in goals {
            let (a, b) = (support::serve_axum(app).await, support::serve_axum(other).await);
            let (mut rps, mut cpu) = (Vec::new(), Vec::new());
            let (mut requests, mut calls) = (0u64, 0u64);
            for pair in 0..pairs {
                let order = if pair % 2 == 0 { [a, b] } else { [b, a] };
                let mut slices = Vec::new();
                for addr in order {
                    let before = server.evalsha_calls().await;
                    let cpu_before = cpu::process_cpu_ns();
                    let run = tokio::task::spawn_blocking(move || wrk(addr, slice, connections))
                        .await
                        .unwrap();
                    let ns = cpu_before.zip(cpu::process_cpu_ns()).map(|(x, y)| y.saturating_sub(x));
                    let made = server.evalsha_calls().await - before;
                    slices.push((addr, run, ns, made));
                }
                let side = |want| slices.iter().find(|(addr, ..)| *addr == want).unwrap();
                let (_, ra, ca, made) = side(a);
                let (_, rb, cb, _) = side(b);
                requests += ra.requests;
                calls += made;
                if rb.rps > 0.0 {
                    rps.push(ra.rps / rb.rps);
                }
                if let (Some(ca), Some(cb)) = (ca, cb) {
                    if ra.requests > 0 && rb.requests > 0 && *cb > 0 {
                        let per = |ns: u64, n: u64| ns as f64 / n as f64;
                        cpu.push(per(*ca, ra.requests) / per(*cb, rb.requests));
                    }
                }
            }
            let per_call = if calls == 0 {
                "-".to_owned()
            } else {
                format!("{:.1}", requests as f64 / calls as f64)
            };
            println!(
                "| {load} | {name} | {against} | {} | {} | {per_call} |",
                summary(&mut rps),
                summary(&mut cpu)
            );
        }
    });
}

/// Whether `HTTP_BENCH_ONLY`'s words pick the stack `name`: a word it contains, or (`=` and
/// a name) its whole name; every stack when there are none.
fn picked(only: &[String], name: &str) -> bool {
    only.is_empty()
        || only.iter().any(|w| match w.strip_prefix('=') {
            Some(whole) => name == whole,
            None => name.contains(w.as_str()),
        })
}

/// `median [lowest-highest]` of per-pair ratios.
fn summary(ratios: &mut [f64]) -> String {
    if ratios.is_empty() {
        return "n/a".to_owned();
    }
    ratios.sort_by(f64::total_cmp);
    let median = ratios[ratios.len() / 2];
    format!(
        "{median:.2}x [{:.2}-{:.2}]",
        ratios[0],
        ratios[ratios.len() - 1]
    )
}
