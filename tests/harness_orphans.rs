//! The harness's own promise: a server a test started does not outlive the test process, even
//! when that process is killed (a timeout of the runner or of a mutation run, an abort) and no
//! `Drop` runs. Each test runs this binary again as a child that starts a server, prints the
//! server's pid and waits; the test kills the child with `SIGKILL` and watches the server.
//!
//! Its own harness (`harness = false`): the child is this binary with `REDKIT_TEST_ORPHAN_CHILD`
//! set, which starts no test.

mod support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use libtest_mimic::{Arguments, Failed, Trial};

const CHILD: &str = "REDKIT_TEST_ORPHAN_CHILD";

/// The watch polls each second: the server is gone well within this after its process died.
const GONE_WITHIN: Duration = Duration::from_secs(10);

fn main() -> ExitCode {
    if std::env::var_os(CHILD).is_some() {
        child();
    }
    let trials = vec![
        Trial::test("a_killed_test_process_leaves_no_server_behind", || {
            orphan(true)
        }),
        Trial::test(
            "without_the_watch_the_server_outlives_its_killed_process",
            || orphan(false),
        ),
    ];
    libtest_mimic::run(&Arguments::from_args(), trials).exit_code()
}

/// The child: starts a server, prints its pid, and waits to be killed.
fn child() -> ! {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a Tokio runtime");
    let server = runtime.block_on(support::RedisServer::spawn());
    match server.pid() {
        Some(pid) => println!("{pid}"),
        None => println!("container"),
    }
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}

/// The working directory of `pid` while it runs (not a zombie), else `None`.
fn running_in(pid: u32) -> Option<PathBuf> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    if stat.contains(") Z ") {
        return None;
    }
    std::fs::read_link(format!("/proc/{pid}/cwd")).ok()
}

/// Kills a child started with the watch on (`watch`) or off, then checks that its server is
/// gone (with the watch) or still runs 3 s later, three periods of the watch (without it: the
/// fault the watch removes is real; the test then kills the server itself).
fn orphan(watch: bool) -> Result<(), Failed> {
    let mut command = Command::new(std::env::current_exe().map_err(|e| e.to_string())?);
    command
        .env(CHILD, "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    if !watch {
        command.env("REDKIT_TEST_NO_ORPHAN_WATCH", "1");
    }
    let mut child = command.spawn().map_err(|e| e.to_string())?;
    let mut line = String::new();
    let read = BufReader::new(child.stdout.take().expect("piped"))
        .read_line(&mut line)
        .map_err(|e| e.to_string());
    let pid = line.trim().parse::<u32>();
    let Ok(pid) = pid else {
        let _ = child.kill();
        let _ = child.wait();
        return match line.trim() {
            // The Docker back-end: the container is removed by testcontainers' own reaper.
            "container" => Ok(()),
            _ => Err(format!("the child printed {line:?} ({read:?}), not a pid").into()),
        };
    };
    let dir = running_in(pid).ok_or("the server runs")?;
    assert!(
        dir.starts_with(
            std::env::temp_dir()
                .canonicalize()
                .map_err(|e| e.to_string())?
        ),
        "{dir:?}"
    );
    child.kill().map_err(|e| e.to_string())?;
    child.wait().map_err(|e| e.to_string())?;
    if watch {
        let since = Instant::now();
        while running_in(pid).as_deref() == Some(dir.as_path()) || dir.exists() {
            if since.elapsed() > GONE_WITHIN {
                kill_server(pid, &dir);
                return Err(
                    format!("server {pid} or {dir:?} still there after {GONE_WITHIN:?}").into(),
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    } else {
        std::thread::sleep(Duration::from_secs(3));
        let still = running_in(pid).as_deref() == Some(dir.as_path());
        kill_server(pid, &dir);
        match still {
            true => Ok(()),
            false => Err("without the watch the server was gone all the same".into()),
        }
    }
}

/// Kills the server `pid` if it still runs in `dir`, and removes `dir`.
fn kill_server(pid: u32, dir: &Path) {
    if running_in(pid).as_deref() == Some(dir) {
        let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
    }
    let _ = std::fs::remove_dir_all(dir);
}
