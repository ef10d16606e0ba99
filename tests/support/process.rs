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
        self.child = Some(child);
        Ok(())
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
