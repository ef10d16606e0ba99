//! Shared by the benches: a private redis-server and the redis-benchmark ceiling.
#![allow(dead_code)]

use std::process::Command;

/// Runs `redis-benchmark -c 8 -P 16` with `args` against `port` and returns requests/s,
/// or `None` when redis-benchmark is not installed or its output cannot be read.
pub fn redis_benchmark_ceiling(port: u16, args: &[&str]) -> Option<f64> {
    let port = port.to_string();
    let out = Command::new("redis-benchmark")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-c",
            "8",
            "-P",
            "16",
            "-n",
            "300000",
            "-q",
        ])
        .args(args)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    // "<command>: 123456.78 requests per second, p50=..."
    let rps = text
        .split("requests per second")
        .next()?
        .rsplit(|c: char| c == ':' || c.is_whitespace())
        .find(|s| !s.is_empty())?
        .parse()
        .ok()?;
    Some(rps)
}

/// Prints the ceiling next to the criterion output.
pub fn report_ceiling(name: &str, rps: Option<f64>) {
    match rps {
        Some(rps) => eprintln!("ceiling: redis-benchmark -c 8 -P 16 {name}: {rps:.0} calls/s"),
        None => eprintln!("ceiling: redis-benchmark not available, no ceiling for {name}"),
    }
}
