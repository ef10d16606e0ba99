//! Redis 7.0.15 in Docker through testcontainers, used when no redis-server binary is installed.
//! The tag is pinned (not the floating `redis:7`) so the fallback is the same server as
//! Debian 12's `redis-server` package: tests that depend on the version probe it anyway.
//! Containers use the host network so ports (and Cluster bus ports) are the same as local.
//!
//! Only with the `docker-tests` feature (`cargo test --all-features` has it): testcontainers is
//! an optional dependency so that examples and the default dev build do not compile it.
//! Without the feature, a missing redis-server is reported with what to install.

/// The pinned image tag: Debian 12's Redis.
pub(super) const REDIS_TAG: &str = "7.0.15";

#[cfg(feature = "docker-tests")]
pub(super) use docker::Container;

#[cfg(not(feature = "docker-tests"))]
pub(super) use absent::Container;

#[cfg(not(feature = "docker-tests"))]
mod absent {
    /// No Docker fallback in this build: never constructed.
    pub(in super::super) enum Container {}

    impl Container {
        pub(in super::super) async fn launch(_port: u16, _extra: &[&str]) -> Result<Self, String> {
            Err(
                "no redis-server found on PATH (and the Docker fallback is off: build the tests \
                 with `--features docker-tests` or `--all-features` to use it). Install Redis 7 \
                 (Debian/Ubuntu: `apt-get install redis-server`), or set REDKIT_REDIS_SERVER to \
                 its path."
                    .to_string(),
            )
        }

        pub(in super::super) async fn stop(&mut self) {
            match *self {}
        }

        pub(in super::super) async fn start(&mut self) {
            match *self {}
        }

        pub(in super::super) async fn pause(&self) {
            match *self {}
        }

        pub(in super::super) async fn unpause(&self) {
            match *self {}
        }

        pub(in super::super) async fn exec(&self, _argv: &[&str]) -> std::process::Output {
            match *self {}
        }
    }
}

#[cfg(feature = "docker-tests")]
mod docker {
    use testcontainers::core::{ExecCommand, WaitFor};
    use testcontainers::runners::AsyncRunner;
    use testcontainers::{ContainerAsync, GenericImage, ImageExt};

    use super::REDIS_TAG;

    pub(in super::super) struct Container {
        inner: ContainerAsync<GenericImage>,
    }

    impl Container {
        pub(in super::super) async fn launch(port: u16, extra: &[&str]) -> Result<Self, String> {
            let mut cmd: Vec<String> = vec![
                "redis-server".into(),
                "--port".into(),
                port.to_string(),
                "--bind".into(),
                "127.0.0.1".into(),
                "--save".into(),
                "".into(),
                "--appendonly".into(),
                "no".into(),
                "--protected-mode".into(),
                "no".into(),
            ];
            cmd.extend(extra.iter().map(|s| s.to_string()));
            let inner = GenericImage::new("redis", REDIS_TAG)
                .with_wait_for(WaitFor::message_on_stdout("Ready to accept connections"))
                .with_network("host")
                .with_cmd(cmd)
                .start()
                .await
                .map_err(|e| {
                    format!(
                        "no redis-server on PATH and Docker could not start redis:{REDIS_TAG} ({e}). \
                         Install Redis 7 (Debian/Ubuntu: `apt-get install redis-server`), \
                         or set REDKIT_REDIS_SERVER to its path, or run a Docker engine."
                    )
                })?;
            Ok(Self { inner })
        }

        pub(in super::super) async fn stop(&mut self) {
            self.inner.stop().await.expect("docker stop");
        }

        pub(in super::super) async fn start(&mut self) {
            self.inner.start().await.expect("docker start");
        }

        pub(in super::super) async fn pause(&self) {
            self.inner.pause().await.expect("docker pause");
        }

        pub(in super::super) async fn unpause(&self) {
            self.inner.unpause().await.expect("docker unpause");
        }

        pub(in super::super) async fn exec(&self, argv: &[&str]) -> std::process::Output {
            use std::os::unix::process::ExitStatusExt;
            let mut result = self
                .inner
                .exec(ExecCommand::new(argv.iter().map(|s| s.to_string())))
                .await
                .expect("docker exec");
            let stdout = result.stdout_to_vec().await.unwrap_or_default();
            let stderr = result.stderr_to_vec().await.unwrap_or_default();
            let code = result.exit_code().await.ok().flatten().unwrap_or(1);
            std::process::Output {
                status: std::process::ExitStatus::from_raw((code as i32) << 8),
                stdout,
                stderr,
            }
        }
    }
}
