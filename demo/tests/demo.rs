//! The demo binary: it runs to the end against a private server, and a closed pipe ends it
//! quietly with 141.

#[path = "../../tests/support/mod.rs"]
mod support;

use std::process::{Command, Output};

use support::RedisServer;

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Which output stream of a child is a closed pipe.
#[derive(Clone, Copy, Debug)]
enum Closed {
    Stdout,
    Stderr,
}

/// Runs `command` with its stdout (or stderr) a pipe whose read end is closed before it
/// starts: its first write there fails with EPIPE, every time (no race with a reader).
fn run_with_closed(mut command: Command, closed: Closed) -> Output {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    match closed {
        Closed::Stdout => command.stdout(writer),
        Closed::Stderr => command.stderr(writer),
    };
    command.output().expect("run")
}

/// The status of a process that stopped quietly on a closed pipe (exit 141, as a shell shows
/// a process killed by SIGPIPE), with nothing on the other stream: no panic, no backtrace.
fn assert_quiet_broken_pipe(out: &Output, what: &str) {
    assert_eq!(
        out.status.code(),
        Some(141),
        "{what}: {}{}",
        stdout(out),
        stderr(out)
    );
    assert_eq!(stderr(out), "", "{what}");
    assert_eq!(stdout(out), "", "{what}");
}

/// `redkit-demo | head -1` ends quietly too (after stopping its own server, if any).
#[tokio::test]
async fn a_closed_pipe_ends_the_demo_quietly_with_141() {
    let server = RedisServer::spawn().await;
    let demo = || {
        let mut command = Command::new(env!("CARGO_BIN_EXE_redkit-demo"));
        command.env("REDIS_URL", server.url());
        command
    };
    // It runs to the end against this server when someone reads...
    let out = demo().output().expect("run the demo");
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let first = format!("using Redis at 127.0.0.1:{}", server.port());
    assert!(stdout(&out).starts_with(&first), "{}", stdout(&out));
    // ...and stops at its first line when nobody does.
    let out = run_with_closed(demo(), Closed::Stdout);
    assert_quiet_broken_pipe(&out, "demo, stdout closed");
    // An error it reports on a closed stderr (REDIS_URL names no server).
    let mut unreachable = demo();
    unreachable.env(
        "REDIS_URL",
        format!("redis://127.0.0.1:{}/", support::free_port()),
    );
    let out = unreachable.output().expect("run the demo");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no Redis answered"),
        "{}",
        stderr(&out)
    );
    let out = run_with_closed(unreachable, Closed::Stderr);
    assert_quiet_broken_pipe(&out, "demo, stderr closed");
}
