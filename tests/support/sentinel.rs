//! Redis Sentinel for tests: a primary, one replica and three sentinels (quorum 2), each
//! sentinel started as `redis-server sentinel.conf --sentinel` on its own free port.

use std::time::{Duration, Instant};

use super::process::Process;
use super::{free_port, local_binary, ReplicatedPair};

/// The name the sentinels monitor.
pub const SERVICE: &str = "mymaster";

/// One sentinel process.
pub struct Sentinel {
    port: u16,
    process: Process,
}

impl Sentinel {
    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>/`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Runs one command on a fresh connection to this sentinel.
    pub async fn cmd<T: redis::FromRedisValue>(&self, args: &[&str]) -> redis::RedisResult<T> {
        let client = redis::Client::open(self.url())?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query_async(&mut conn).await
    }
}

impl Sentinel {
    /// Freezes this sentinel (SIGSTOP); it is killed (SIGKILL works on a stopped process) on drop.
    pub fn pause(&self) {
        self.process.signal("STOP");
    }

    /// Undoes [`pause`](Self::pause).
    pub fn resume(&self) {
        self.process.signal("CONT");
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        self.process.kill();
    }
}

/// 1 primary + 1 replica (a [`ReplicatedPair`]) watched by 3 sentinels.
pub struct SentinelSet {
    pub pair: ReplicatedPair,
    pub sentinels: Vec<Sentinel>,
}

impl SentinelSet {
    /// Spawns the pair and three sentinels (`down-after-milliseconds` = `down_after_ms`) and
    /// waits until every sentinel knows the replica and the two other sentinels.
    pub async fn spawn(down_after_ms: u64) -> Self {
        let bin = local_binary().expect(
            "the Sentinel harness needs a local redis-server (apt-get install redis-server)",
        );
        let pair = ReplicatedPair::spawn().await;
        let mut sentinels = Vec::new();
        for _ in 0..3 {
            let port = free_port();
            let conf = format!(
                "port {port}\nbind 127.0.0.1\ndaemonize no\nprotected-mode no\n\
                 logfile sentinel.log\n\
                 sentinel monitor {SERVICE} 127.0.0.1 {primary} 2\n\
                 sentinel down-after-milliseconds {SERVICE} {down_after_ms}\n\
                 sentinel failover-timeout {SERVICE} 10000\n\
                 sentinel parallel-syncs {SERVICE} 1\n",
                primary = pair.primary.port(),
            );
            let process = Process::start_sentinel(&bin, &conf).expect("start sentinel");
            sentinels.push(Sentinel { port, process });
        }
        let set = Self { pair, sentinels };
        set.wait_ready(Duration::from_secs(30)).await;
        set
    }

    async fn wait_ready(&self, within: Duration) {
        let deadline = Instant::now() + within;
        'outer: while Instant::now() < deadline {
            for s in &self.sentinels {
                let replicas: redis::RedisResult<Vec<redis::Value>> =
                    s.cmd(&["SENTINEL", "REPLICAS", SERVICE]).await;
                let others: redis::RedisResult<Vec<redis::Value>> =
                    s.cmd(&["SENTINEL", "SENTINELS", SERVICE]).await;
                let ok =
                    matches!((&replicas, &others), (Ok(r), Ok(o)) if r.len() == 1 && o.len() == 2);
                if !ok {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue 'outer;
                }
            }
            return;
        }
        panic!("sentinels did not discover the replica and each other within {within:?}");
    }

    /// Sentinel URLs.
    pub fn urls(&self) -> Vec<String> {
        self.sentinels.iter().map(Sentinel::url).collect()
    }

    /// The primary's port according to the first sentinel that answers.
    pub async fn primary_port(&self) -> Option<u16> {
        for s in &self.sentinels {
            let addr: redis::RedisResult<(String, u16)> = s
                .cmd(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE])
                .await;
            if let Ok((_, port)) = addr {
                return Some(port);
            }
        }
        None
    }
}
