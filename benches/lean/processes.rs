//! Case `processes`: the goal rows on twin redis-servers at once, like case `twin`, but each
//! side in a process of its own (this bench binary again, started with `REDKIT_LEAN_CHILD`),
//! so each side's client CPU is measured apart: case `twin` shares one process between the
//! sides and cannot split its CPU. Both children inherit this process's CPUs
//! (`REDKIT_LEAN_PIN`), so pinned they share the client CPU as the servers share theirs, and
//! whatever the host does hits both sides in the same second. Each child connects to its
//! server, runs its op for one slice with 64 tasks on one multiplexed connection (as every
//! row does) and prints what it measured; the parent pairs the two lines.

use std::process::{Command, Stdio};

use super::ops::{run_op, start_slices_at};
use super::paired::{comparisons, paired_header, paired_row, prepare, Ratios, Side};
use super::*;

/// The environment variable that makes this binary a child: `<row>,<redkit|seed>,<port>,<slice>`.
const CHILD: &str = "REDKIT_LEAN_CHILD";

/// The goal rows, each side in its own process at once, swapping servers pair by pair.
pub(crate) async fn processes_case(sides: &[Side<'_>; 2]) {
    let secs = env_num("REDKIT_LEAN_SLICE").unwrap_or(1.0);
    let pairs = env_num("REDKIT_LEAN_PAIRS").unwrap_or(9);
    paired_header(
        "at once on twin redis-servers, each side in its own process, swapping servers pair by pair",
        pairs,
        secs,
    );
    // Every child numbers its request ids from its own base: none meets another's.
    let mut slice = 1_000_000u64;
    let ports = [sides[0].server.port(), sides[1].server.port()];
    for (row, c) in comparisons(&client_ips(0x0a00_0000)).iter().enumerate() {
        prepare(sides, c.stocked).await;
        let mut ratios = Vec::new();
        for pair in 0..pairs {
            let (r, s) = if pair % 2 == 0 { (0, 1) } else { (1, 0) };
            slice += 2;
            let redkit = spawn_child(row, "redkit", ports[r], slice);
            let seed = spawn_child(row, "seed", ports[s], slice + 1);
            let (redkit, seed) = (child_result(redkit), child_result(seed));
            ratios.push(Ratios::of(&redkit, &seed, true));
        }
        paired_row(c.name, &ratios);
    }
}

/// Starts this binary as the child running `side`'s op of row `row` against `port`.
fn spawn_child(row: usize, side: &str, port: u16, slice: u64) -> std::process::Child {
    Command::new(std::env::current_exe().expect("the bench binary's path"))
        .arg("--bench")
        .env(CHILD, format!("{row},{side},{port},{slice}"))
        .stdout(Stdio::piped())
        .spawn()
        .expect("the bench binary starts as a child")
}

/// What a child measured (its server's CPU too, read by the child over its run).
fn child_result(child: std::process::Child) -> Measured {
    let out = child.wait_with_output().expect("the child runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed: {text}");
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("child "))
        .unwrap_or_else(|| panic!("no result from the child: {text}"));
    let field = |name: &str| {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .unwrap_or_else(|| panic!("no {name} in {line}"))
    };
    Measured {
        ops: field("ops").parse().unwrap(),
        secs: field("secs").parse().unwrap(),
        cpu_ns: field("server_ns").parse().ok(),
        client_ns: field("client_ns").parse().ok(),
        reads: None,
    }
}

/// In a child (`REDKIT_LEAN_CHILD` set): runs its op for one slice and prints
/// `child ops=.. secs=.. server_ns=.. client_ns=..` (`-` for a figure it could not read).
/// `None` when this process is not a child.
pub(crate) fn child_main(secs: f64) -> Option<()> {
    let spec = std::env::var(CHILD).ok()?;
    let parts: Vec<&str> = spec.split(',').collect();
    let [row, side, port, slice] = parts[..] else {
        panic!("{CHILD}=<row>,<redkit|seed>,<port>,<slice>, got {spec}");
    };
    let (row, port, slice): (usize, u16, u64) = (
        row.parse().unwrap(),
        port.parse().unwrap(),
        slice.parse().unwrap(),
    );
    let secs = env_num("REDKIT_LEAN_SLICE").unwrap_or(secs.min(1.0));
    runtime().block_on(async move {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let pid = server_pid(&mut conn).await;
        let rows = comparisons(&client_ips(0x0a00_0000));
        let c = &rows[row];
        let op = if side == "redkit" { &c.redkit } else { &c.seed };
        start_slices_at(slice);
        let m = run_op(&conn, pid, secs, op).await;
        let text = |v: Option<u64>| v.map_or("-".to_owned(), |v| v.to_string());
        println!(
            "child ops={} secs={} server_ns={} client_ns={}",
            m.ops,
            m.secs,
            text(m.cpu_ns),
            text(m.client_ns)
        );
    });
    Some(())
}
