//! A redis-server child process with its own data directory.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

pub(super) struct Process {
    bin: String,
    args: Vec<String>,
    dir: super::temp_dir::TempDir,
    child: Option<Child>,
}

impl Process {
    pub(super) fn start(bin: &str, port: u16, extra: &[&str]) -> Result<Self, String> {
        let dir =
            super::temp_dir::TempDir::new("redkit-test-").map_err(|e| format!("temp dir: {e}"))?;
        let mut args: Vec<String> = vec![
            "--port".into(),
            port.to_string(),
            "--bind".into(),
            "127.0.0.1".into(),
            "--save".into(),
            "".into(),
            "--appendonly".into(),
            "no".into(),
            "--daemonize".into(),
            "no".into(),
            "--protected-mode".into(),
            "no".into(),
            "--logfile".into(),
            "redis.log".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut p = Self {
            bin: bin.to_owned(),
            args,
            dir,
            child: None,
        };
        p.restart()?;
        Ok(p)
    }

    /// A Sentinel: `redis-server sentinel.conf --sentinel` with `conf` written to its own
    /// directory (Sentinel rewrites that file; `redis-sentinel` need not be installed).
    pub(super) fn start_sentinel(bin: &str, conf: &str) -> Result<Self, String> {
        let dir = super::temp_dir::TempDir::new("redkit-sentinel-")
            .map_err(|e| format!("temp dir: {e}"))?;
        std::fs::write(dir.path().join("sentinel.conf"), conf)
            .map_err(|e| format!("write sentinel.conf: {e}"))?;
        let mut p = Self {
            bin: bin.to_owned(),
            args: vec!["sentinel.conf".into(), "--sentinel".into()],
            dir,
            child: None,
        };
        p.restart()?;
        Ok(p)
    }

    pub(super) fn restart(&mut self) -> Result<(), String> {
        // A cluster node must forget nothing across a restart: keep nodes.conf in `dir`.
        let child = Command::new(&self.bin)
            .args(&self.args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", self.bin))?;
        watch_for_orphan(child.id(), self.dir.path());
        self.child = Some(child);
        Ok(())
    }

    /// The server's pid while it runs (`None` once killed).
    pub(super) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub(super) fn exited(&self) -> bool {
        match &self.child {
            Some(c) => {
                // try_wait needs &mut; probe the pid instead.
                !PathBuf::from(format!("/proc/{}", c.id())).exists()
                    || std::fs::read_to_string(format!("/proc/{}/stat", c.id()))
                        .map(|s| s.contains(") Z "))
                        .unwrap_or(true)
            }
            None => true,
        }
    }

    pub(super) fn signal(&self, sig: &str) {
        if let Some(c) = &self.child {
            let _ = Command::new("kill")
                .arg(format!("-{sig}"))
                .arg(c.id().to_string())
                .status();
        }
    }

    pub(super) fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Kills the server `pid` and removes its directory `dir` if this test process ends without
/// dropping it (killed by a timeout, aborted): a detached shell (its parent is init at once, so
/// nothing waits on it) polls both pids each second and, once this process is gone while the
/// server still runs, kills the server only if its working directory is still `dir`. A pid the
/// system has since given to another process has another working directory and is left alone;
/// a server dropped normally has already exited (or its directory is gone).
///
/// `REDKIT_TEST_NO_ORPHAN_WATCH` set turns the watch off: the negative control of
/// `tests/harness_orphans.rs`, which shows the server outliving its killed process without it.
fn watch_for_orphan(pid: u32, dir: &std::path::Path) {
    if std::env::var_os("REDKIT_TEST_NO_ORPHAN_WATCH").is_some() {
        return;
    }
    let Ok(dir) = dir.canonicalize() else { return };
    let script = r#"(
        while kill -0 "$1" 2>/dev/null && kill -0 "$2" 2>/dev/null; do sleep 1; done
        if kill -0 "$2" 2>/dev/null && [ "$(readlink "/proc/$2/cwd")" = "$3" ]; then
            kill -9 "$2"; rm -rf "$3"
        fi
    ) </dev/null >/dev/null 2>&1 &"#;
    let _ = Command::new("sh")
        .args(["-c", script, "redkit-orphan-watch"])
        .arg(std::process::id().to_string())
        .arg(pid.to_string())
        .arg(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}
