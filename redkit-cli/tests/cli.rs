//! The `redkit` binary end to end, spawned as a process against real Redis servers.

#[path = "../../tests/fixtures/mod.rs"]
mod fixtures;
#[path = "../../tests/support/harness.rs"]
mod harness;
#[path = "../../tests/support/mod.rs"]
mod support;

use std::process::{Command, Output};

use redkit::Registry;
use support::{RedisCluster, RedisServer, Valkey};

fn redkit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_redkit"))
        .args(args)
        .env_remove("REDIS_URL")
        .output()
        .expect("run redkit")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn list_shows_every_embedded_script() {
    let out = redkit(&["scripts", "list"]);
    assert!(out.status.success(), "{}", stderr(&out));
    for s in Registry::global().scripts() {
        let line = stdout(&out)
            .lines()
            .find(|l| l.split_whitespace().next() == Some(s.name()) && l.contains(s.sha1()))
            .map(str::to_owned);
        assert!(line.is_some(), "{} missing from:\n{}", s.id(), stdout(&out));
    }
    let json = redkit(&["scripts", "list", "--json"]);
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(
        (&doc["command"], &doc["ok"]),
        (&"list".into(), &true.into())
    );
    let rows = &doc["scripts"];
    assert_eq!(
        rows.as_array().unwrap().len(),
        Registry::global().scripts().len()
    );
    assert_eq!(rows[0]["sha1"], Registry::global().scripts()[0].sha1());
}

async fn status_verify_load_flush_on_one_server() {
    let server = RedisServer::spawn().await;
    let url = server.url();
    let n = Registry::global().scripts().len();

    let out = redkit(&["--url", &url, "scripts", "verify"]);
    assert_eq!(out.status.code(), Some(4), "{}", stdout(&out));
    assert!(stdout(&out).contains("missing"));

    let out = redkit(&["--url", &url, "scripts", "load"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = redkit(&["--url", &url, "scripts", "load"]);
    assert!(out.status.success(), "load is idempotent: {}", stderr(&out));

    let out = redkit(&["--url", &url, "scripts", "verify"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );

    let out = redkit(&["--url", &url, "--json", "scripts", "status"]);
    assert!(out.status.success());
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(status["command"], "status");
    assert_eq!(
        (&status["ok"], &status["exit_code"]),
        (&true.into(), &0.into())
    );
    let node = &status["nodes"][0];
    assert_eq!(node["addr"], format!("127.0.0.1:{}", server.port()));
    assert_eq!(node["role"], "primary");
    assert_eq!(
        (&node["ok"], &node["error"]),
        (&true.into(), &serde_json::Value::Null)
    );
    assert!(node["version"].as_str().unwrap().starts_with('7'));
    let scripts = node["scripts"].as_array().unwrap();
    assert_eq!(scripts.len(), n);
    assert!(scripts.iter().all(|s| s["loaded"] == true));

    // flush needs --yes, and without it nothing is flushed.
    let out = redkit(&["--url", &url, "scripts", "flush"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--yes"));
    let exists: Vec<bool> = server
        .cmd(&["SCRIPT", "EXISTS", Registry::global().scripts()[0].sha1()])
        .await;
    assert_eq!(exists, vec![true]);

    let out = redkit(&["--url", &url, "scripts", "flush", "--yes"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // ASYNC flush: the cache is emptied immediately for new lookups.
    let out = redkit(&["--url", &url, "scripts", "verify"]);
    assert_eq!(out.status.code(), Some(4));

    let out = redkit(&["--url", &url, "scripts", "kill"]);
    assert!(out.status.success());
    assert!(stdout(&out).contains("not busy"), "{}", stdout(&out));
}

async fn cluster_status_and_verify_see_one_flushed_primary() {
    let cluster = RedisCluster::spawn().await;
    let seed = cluster.nodes[0].url();
    let out = redkit(&["--cluster", "--url", &seed, "scripts", "load"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = redkit(&["--cluster", "--url", &seed, "scripts", "verify"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));

    let victim = cluster.primaries().await[1];
    let victim_addr = format!("127.0.0.1:{}", victim.port());
    let _: () = victim.cmd(&["SCRIPT", "FLUSH"]).await;

    let out = redkit(&["--cluster", "--url", &seed, "--json", "scripts", "status"]);
    assert!(out.status.success());
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let nodes = status["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 6, "every primary and replica");
    assert_eq!(nodes.iter().filter(|n| n["role"] == "primary").count(), 3);
    for n in nodes {
        let all_loaded = n["scripts"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["loaded"] == true);
        assert_eq!(all_loaded, n["addr"] != victim_addr.as_str(), "{n}");
    }

    let out = redkit(&["--cluster", "--url", &seed, "scripts", "verify"]);
    assert_eq!(out.status.code(), Some(4));
    assert!(stdout(&out).contains(&victim_addr), "{}", stdout(&out));

    let out = redkit(&["--cluster", "--url", &seed, "scripts", "load"]);
    assert!(out.status.success());
    let out = redkit(&["--cluster", "--url", &seed, "scripts", "verify"]);
    assert_eq!(out.status.code(), Some(0));
}

fn unreachable_server_gives_exit_3_and_one_line_without_password() {
    // A port nothing listens on.
    let port = support::free_port();
    let url = format!("redis://admin:s3cr3t-pw@127.0.0.1:{port}/");
    let out = redkit(&["--url", &url, "--timeout-ms", "500", "scripts", "status"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(!err.contains("s3cr3t-pw"), "{err}");
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
    assert!(stdout(&out).is_empty());

    // Same through REDIS_URL.
    let out = Command::new(env!("CARGO_BIN_EXE_redkit"))
        .args(["scripts", "verify", "--timeout-ms", "500"])
        .env("REDIS_URL", &url)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(!stderr(&out).contains("s3cr3t-pw"));
}

fn usage_errors_exit_2_and_say_what_is_wrong_with_the_url() {
    let out = redkit(&["scripts", "nonsense"]);
    assert_eq!(out.status.code(), Some(2));
    for (url, says) in [
        ("not a url", "no scheme"),
        ("notaurl", "no scheme"),
        ("http://127.0.0.1:6379/", "unknown scheme \"http\""),
        ("redis://127.0.0.1:99999/", "port"),
        ("redis://:pw@127.0.0.1:6379/abc", "database number"),
    ] {
        let out = redkit(&["--url", url, "scripts", "status"]);
        assert_eq!(out.status.code(), Some(2), "{url}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{url}: {}", stderr(&out));
        assert!(!stderr(&out).contains("pw@"), "{}", stderr(&out));
    }
    // With --json the error is a JSON document on stdout too.
    let out = redkit(&["--url", "notaurl", "--json", "scripts", "status"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON error");
    assert_eq!(doc["ok"], false);
    assert_eq!(doc["exit_code"], 2);
    assert_eq!(doc["error"]["kind"], "usage");
}

async fn one_cluster_node_url_acts_on_the_whole_cluster() {
    let cluster = RedisCluster::spawn().await;
    // No --cluster: the node says cluster_enabled:1, so every node is administered.
    let seed = cluster.nodes[0].url();
    let out = redkit(&["--url", &seed, "scripts", "load"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).lines().count(), 6, "{}", stdout(&out));
    assert!(stderr(&out).contains("Cluster node"), "{}", stderr(&out));
    for node in &cluster.nodes {
        let exists: Vec<bool> = node
            .cmd(&["SCRIPT", "EXISTS", Registry::global().scripts()[0].sha1()])
            .await;
        assert_eq!(exists, vec![true], "node {}", node.port());
    }
    let victim = cluster.primaries().await[2];
    let _: () = victim.cmd(&["SCRIPT", "FLUSH"]).await;
    let out = redkit(&["--url", &seed, "scripts", "verify"]);
    assert_eq!(out.status.code(), Some(4), "{}", stdout(&out));
    assert!(stdout(&out).contains(&format!("127.0.0.1:{}", victim.port())));
}

async fn flush_goes_on_past_a_frozen_primary_and_names_it() {
    let mut cluster = RedisCluster::spawn().await;
    let seed = cluster.nodes[0].url();
    let out = redkit(&["--url", &seed, "scripts", "load"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Freeze a primary that is not the seed.
    let frozen_port = cluster.primaries().await[1].port();
    let frozen = cluster
        .nodes
        .iter_mut()
        .find(|n| n.port() == frozen_port)
        .unwrap();
    frozen.pause().await;
    let frozen_addr = format!("127.0.0.1:{frozen_port}");
    let out = redkit(&[
        "--url",
        &seed,
        "--timeout-ms",
        "700",
        "--json",
        "scripts",
        "flush",
        "--yes",
    ]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(out.status.code(), Some(3), "{doc}");
    let nodes = doc["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 6, "every node reported: {doc}");
    for n in nodes {
        let is_frozen = n["addr"] == frozen_addr.as_str();
        assert_eq!(n["ok"], !is_frozen, "{n}");
        if is_frozen {
            assert_eq!(n["error"]["kind"], "unreachable", "{n}");
        }
    }
    assert!(stderr(&out).contains(&frozen_addr), "{}", stderr(&out));
    // Every other node was flushed despite the frozen one.
    for node in cluster.nodes.iter().filter(|n| n.port() != frozen_port) {
        let exists: Vec<bool> = node
            .cmd(&["SCRIPT", "EXISTS", Registry::global().scripts()[0].sha1()])
            .await;
        assert_eq!(exists, vec![false], "node {}", node.port());
    }
    cluster
        .nodes
        .iter_mut()
        .find(|n| n.port() == frozen_port)
        .unwrap()
        .resume()
        .await;
}

async fn authentication_failures_exit_5_with_a_hint() {
    let server = RedisServer::spawn().await;
    // Set after start: the harness's readiness PING needs no password.
    let _: () = server
        .cmd(&["CONFIG", "SET", "requirepass", "right-pw"])
        .await;
    let port = server.port();
    let good = format!("redis://:right-pw@127.0.0.1:{port}/");
    let out = redkit(&["--url", &good, "scripts", "status"]);
    assert!(out.status.success(), "{}", stderr(&out));
    for url in [
        format!("redis://127.0.0.1:{port}/"),
        format!("redis://:wrong-pw@127.0.0.1:{port}/"),
    ] {
        let out = redkit(&["--url", &url, "scripts", "status"]);
        assert_eq!(out.status.code(), Some(5), "{url}: {}", stderr(&out));
        assert!(stderr(&out).contains("hint"), "{}", stderr(&out));
        assert!(!stderr(&out).contains("wrong-pw"), "{}", stderr(&out));
    }
}

async fn status_of_a_busy_node_is_not_success() {
    let server = RedisServer::spawn_with(&["--busy-reply-threshold", "50"]).await;
    let _task = start_busy_script(&server, false).await;
    let out = redkit(&["--url", &server.url(), "-q", "scripts", "status"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stdout(&out).is_empty(),
        "-q prints nothing: {}",
        stdout(&out)
    );
    assert!(stderr(&out).contains("busy"), "{}", stderr(&out));
    let out = redkit(&["--url", &server.url(), "scripts", "kill"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// Starts a script that never returns on its own connection; `write` makes it unkillable.
async fn start_busy_script(server: &RedisServer, write: bool) -> tokio::task::JoinHandle<()> {
    let mut conn = server.conn().await;
    let body = if write {
        "redis.call('SET', KEYS[1], '1') while true do end"
    } else {
        "while true do end"
    };
    let task = tokio::spawn(async move {
        let _ = redis::cmd("EVAL")
            .arg(body)
            .arg(1)
            .arg("{busy}:k")
            .query_async::<redis::Value>(&mut conn)
            .await;
    });
    // Wait until the server reports itself busy (past busy-reply-threshold).
    for _ in 0..100 {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let mut probe = server.conn().await;
        let busy = redis::cmd("PING")
            .query_async::<String>(&mut probe)
            .await
            .err()
            .is_some_and(|e| e.to_string().contains("BUSY"));
        if busy {
            return task;
        }
    }
    panic!("the busy script never made the server report BUSY");
}

async fn kill_stops_a_read_only_busy_script() {
    let server = RedisServer::spawn_with(&["--busy-reply-threshold", "50"]).await;
    let task = start_busy_script(&server, false).await;
    let out = redkit(&["--url", &server.url(), "scripts", "kill"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(stdout(&out).contains("killed"), "{}", stdout(&out));
    task.await.unwrap();
    let pong: String = server.cmd(&["PING"]).await;
    assert_eq!(pong, "PONG", "the server serves again");
}

async fn kill_reports_unkillable_and_never_shuts_the_server_down() {
    let server = RedisServer::spawn_with(&["--busy-reply-threshold", "50"]).await;
    let _task = start_busy_script(&server, true).await;
    let out = redkit(&["--url", &server.url(), "--json", "scripts", "kill"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(doc["nodes"][0]["outcome"], "unkillable", "{doc}");
    assert_eq!((&doc["ok"], &doc["exit_code"]), (&false.into(), &1.into()));
    assert_eq!(doc["error"]["kind"], "unkillable", "{doc}");
    // Never escalated: the server process is still there (busy, answering BUSY).
    let mut conn = server.conn().await;
    let err = redis::cmd("PING")
        .query_async::<String>(&mut conn)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("BUSY"), "{err}");
    // The harness kills the server when the test ends.
}

async fn functions_load_verify_list_delete_flush_on_every_cluster_node() {
    let cluster = RedisCluster::spawn().await;
    let url = cluster.nodes[0].url();
    let library = redkit::script::Library::redkit().name().to_owned();

    let out = redkit(&["--url", &url, "functions", "verify"]);
    assert_eq!(out.status.code(), Some(4), "{}", stdout(&out));
    assert_eq!(stdout(&out).matches("missing").count(), 6);

    let out = redkit(&["--url", &url, "--json", "functions", "load"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["command"], "functions load");
    assert_eq!(doc["nodes"].as_array().unwrap().len(), 3, "primaries load");

    // Replicas receive the library by replication: verify asks all six nodes.
    let mut verified = None;
    for _ in 0..100 {
        let out = redkit(&["--url", &url, "--json", "functions", "verify"]);
        if out.status.success() {
            verified = Some(out);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let doc: serde_json::Value =
        serde_json::from_slice(&verified.expect("verified").stdout).unwrap();
    let nodes = doc["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 6);
    assert!(nodes.iter().all(|n| n["state"] == "loaded"), "{doc}");
    assert_eq!(nodes.iter().filter(|n| n["role"] == "replica").count(), 3);

    let out = redkit(&["--url", &url, "--json", "functions", "list"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(doc["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .all(|n| n["libraries"] == serde_json::json!([library])));

    let out = redkit(&["--url", &url, "functions", "flush"]);
    assert_eq!(out.status.code(), Some(2), "--yes required");
    let out = redkit(&["--url", &url, "--json", "functions", "delete", &library]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(doc["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .all(|n| n["deleted"] == true));
    let out = redkit(&["--url", &url, "functions", "flush", "--yes", "--sync"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = redkit(&["--url", &url, "--scripts-dir", "lua", "functions", "verify"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "--set needed with --scripts-dir"
    );
}

/// `status` counts the retired redkit scripts a server still caches (SHA1s from the embedded
/// scripts.lock); `prune` drops them (SCRIPT FLUSH + SCRIPT LOAD of the live set) and refuses
/// when there is nothing to prune, unless --force.
async fn status_counts_retired_scripts_and_prune_drops_them() {
    let server = RedisServer::spawn().await;
    let url = server.url();
    let n = Registry::global().scripts().len();
    let retired = Registry::global().retired();
    assert!(retired.len() >= 2);
    let out = redkit(&["--url", &url, "scripts", "load"]);
    assert!(out.status.success(), "{}", stderr(&out));

    // Nothing retired cached: prune refuses and flushes nothing.
    let out = redkit(&["--url", &url, "scripts", "prune"]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("no node") && stderr(&out).contains("--force"),
        "{}",
        stderr(&out)
    );
    let out = redkit(&["--url", &url, "scripts", "verify"]);
    assert_eq!(out.status.code(), Some(0), "nothing was flushed");

    // An older build's scripts in the cache (the fixtures are the retired bodies).
    let old = ["fixed_window.v1", "inventory_apply.v5"];
    for id in old {
        let (name, v) = id.split_once(".v").unwrap();
        let script = fixtures::script(name, v.parse().unwrap());
        assert!(retired
            .iter()
            .any(|r| r.id == id && r.sha1 == script.sha1()));
        let _: String = server.cmd(&["SCRIPT", "LOAD", script.source()]).await;
    }
    let out = redkit(&["--url", &url, "scripts", "status"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!("{n}/{n}  holds 2 retired redkit scripts")),
        "{}",
        stdout(&out)
    );
    let out = redkit(&["--url", &url, "--json", "scripts", "status"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["nodes"][0]["retired"], serde_json::json!(old));
    // verify is about the live set only.
    let out = redkit(&["--url", &url, "scripts", "verify"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));

    let out = redkit(&["--url", &url, "scripts", "prune"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!("flushed (2 retired dropped), loaded {n}")),
        "{}",
        stdout(&out)
    );
    for id in old {
        let sha1 = &retired.iter().find(|r| r.id == id).unwrap().sha1;
        let exists: Vec<bool> = server.cmd(&["SCRIPT", "EXISTS", sha1]).await;
        assert_eq!(exists, vec![false], "{id}");
    }
    let out = redkit(&["--url", &url, "scripts", "verify"]);
    assert_eq!(out.status.code(), Some(0), "the live set is loaded again");
    let out = redkit(&["--url", &url, "--json", "scripts", "status"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["nodes"][0]["retired"], serde_json::json!([]));

    // --force flushes and reloads anyway.
    let out = redkit(&["--url", &url, "--json", "scripts", "prune", "--force"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (&doc["nodes"][0]["flushed"], &doc["nodes"][0]["loaded"]),
        (&true.into(), &n.into())
    );
}

/// Callers during a prune never fail: a flushed script answers NOSCRIPT, and the manager
/// runs it with EVAL once.
async fn calls_during_a_prune_recover_through_eval() {
    let server = RedisServer::spawn().await;
    let url = server.url();
    let limiter = redkit::rate_limit::FixedWindow::new(
        "prune",
        redkit::rate_limit::Rate::new(
            redkit::nonzero!(1_000_000),
            std::time::Duration::from_secs(600),
        )
        .unwrap(),
    )
    .unwrap();
    let manager = redkit::ScriptManager::new();
    let mut conn = server.conn().await;
    manager.preload(&mut conn).await.unwrap();
    let key = redkit::rate_limit::LimitKey::text("k").unwrap();
    let counter = limiter.redis_key(&key);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let caller = {
        let (stop, manager, mut conn) = (stop.clone(), manager.clone(), conn.clone());
        let limiter = limiter.with_manager(manager);
        tokio::spawn(async move {
            let mut calls = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                limiter.check(&mut conn, &key).await.expect("never fails");
                calls += 1;
            }
            calls
        })
    };
    for _ in 0..5 {
        let url = url.clone();
        let out = tokio::task::spawn_blocking(move || {
            redkit(&["--url", &url, "scripts", "prune", "--force"])
        })
        .await
        .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let calls = caller.await.unwrap();
    assert!(calls > 0);
    let counted: u64 = server.cmd(&["GET", &counter]).await;
    assert_eq!(counted, calls, "every call counted once");
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

fn redkit_command(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_redkit"));
    command.args(args).env_remove("REDIS_URL");
    command
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

/// `redkit ... | head -1`: every command, data, help, usage error or failure, ends with exit
/// 141 and no panic text when stdout or stderr is closed.
async fn a_closed_pipe_ends_redkit_quietly_with_141() {
    let server = RedisServer::spawn().await;
    let url = server.url();
    let dead = format!("redis://127.0.0.1:{}/", support::free_port());
    for args in [
        &["scripts", "list"][..],
        &["--json", "scripts", "list"],
        &["--help"],
        &["--json", "scripts", "bogus"],
        &["--url", &url, "scripts", "status"],
        &["--url", &url, "--json", "scripts", "status"],
        &["--url", &url, "scripts", "verify"],
        &[
            "--url",
            &dead,
            "--json",
            "--timeout-ms",
            "500",
            "scripts",
            "status",
        ],
    ] {
        let out = run_with_closed(redkit_command(args), Closed::Stdout);
        assert_quiet_broken_pipe(&out, &format!("stdout closed: {args:?}"));
    }
    // What goes to stderr: a usage error, an unreachable server, a verify failure.
    for args in [
        &["scripts", "bogus"][..],
        &["--url", &dead, "--timeout-ms", "500", "scripts", "status"],
        &["--url", &url, "-q", "scripts", "verify"],
    ] {
        let out = run_with_closed(redkit_command(args), Closed::Stderr);
        assert_quiet_broken_pipe(&out, &format!("stderr closed: {args:?}"));
    }
}

/// `-q` prints nothing on stdout, even with `--json`, in either order; the exit code and
/// stderr still tell.
fn quiet_wins_over_json_in_either_order() {
    let dead = format!("redis://127.0.0.1:{}/", support::free_port());
    for flags in [["-q", "--json"], ["--json", "-q"], ["--quiet", "--json"]] {
        let with = |args: &[&str]| -> Output {
            let mut all = flags.to_vec();
            all.extend_from_slice(args);
            redkit(&all)
        };
        // Success, an unreachable server, a usage error: the code and stderr tell.
        for (args, code, says) in [
            (&["scripts", "list"][..], 0, ""),
            (
                &["--url", &dead, "--timeout-ms", "500", "scripts", "status"],
                3,
                "redkit:",
            ),
            (&["scripts", "bogus"], 2, "bogus"),
        ] {
            let out = with(args);
            assert_eq!(
                out.status.code(),
                Some(code),
                "{flags:?} {args:?}: {}",
                stderr(&out)
            );
            assert_eq!(stdout(&out), "", "{flags:?} {args:?}");
            assert!(stderr(&out).contains(says), "{flags:?}: {}", stderr(&out));
        }
    }
    // Without -q, the same commands print their JSON document.
    let out = redkit(&["--json", "scripts", "list"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(doc["ok"], true);
}

/// Parses stdout as the one JSON document of a command and checks its error part.
fn json_error(out: &Output, kind: &str, code: i32) -> serde_json::Value {
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("one JSON document on stdout ({e}): {}", stdout(out)));
    assert_eq!(out.status.code(), Some(code), "{doc}");
    assert_eq!(doc["ok"], false, "{doc}");
    assert_eq!(doc["exit_code"], code, "{doc}");
    assert_eq!(doc["error"]["kind"], kind, "{doc}");
    assert!(
        doc["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{doc}"
    );
    doc
}

/// Under `--json` every error is one JSON document on stdout with a stable `error.kind`:
/// usage errors found by the argument parser included.
async fn every_error_under_json_is_one_document_with_a_kind() {
    for args in [
        &["--json", "scripts", "bogus"][..],
        &["scripts", "bogus", "--json"],
        &["--json", "scripts"],
        &["--json"],
        &["--json", "--timeout-ms", "soon", "scripts", "list"],
        &[
            "--json",
            "scripts",
            "flush",
            "--url",
            "redis://127.0.0.1:1/",
        ],
    ] {
        let doc = json_error(&redkit(args), "usage", 2);
        assert!(
            args.contains(&"flush") || doc["command"].is_null(),
            "{args:?}: {doc}"
        );
    }
    let doc = json_error(&redkit(&["--json", "scripts", "bogus"]), "usage", 2);
    assert!(
        doc["error"]["message"].as_str().unwrap().contains("bogus"),
        "{doc}"
    );

    let dead = format!("redis://127.0.0.1:{}/", support::free_port());
    let out = redkit(&[
        "--json",
        "--url",
        &dead,
        "--timeout-ms",
        "500",
        "scripts",
        "status",
    ]);
    let doc = json_error(&out, "unreachable", 3);
    assert_eq!(doc["command"], "status");

    let server = RedisServer::spawn().await;
    let _: () = server.cmd(&["CONFIG", "SET", "requirepass", "pw"]).await;
    let out = redkit(&["--json", "--url", &server.url(), "scripts", "verify"]);
    json_error(&out, "auth", 5);

    // A command that ran: a failed verification is an error of its own kind; success has
    // `error: null`.
    let good = format!("redis://:pw@127.0.0.1:{}/", server.port());
    let doc = json_error(
        &redkit(&["--json", "--url", &good, "scripts", "verify"]),
        "verify_failed",
        4,
    );
    assert_eq!(doc["nodes"][0]["ok"], true, "the node answered: {doc}");
    let out = redkit(&["--json", "--url", &good, "scripts", "load"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        (&doc["ok"], &doc["exit_code"], &doc["error"]),
        (&true.into(), &0.into(), &serde_json::Value::Null),
        "{doc}"
    );
}

/// A TCP listener that answers every connection like an HTTP server refusing a request.
fn http_listener() -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut peer in listener.incoming().flatten() {
            // Read the client's first command, answer, then drain until it hangs up (closing
            // with unread data would reset the connection instead).
            let mut buf = [0u8; 4096];
            let _ = peer.read(&mut buf);
            let _ = peer.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n");
            let _ = peer.shutdown(std::net::Shutdown::Write);
            let _ = peer.set_read_timeout(Some(std::time::Duration::from_secs(5)));
            while peer.read(&mut buf).is_ok_and(|n| n > 0) {}
        }
    });
    port
}

/// A peer that does not speak RESP is "not a Redis server", with its own exit code (6) and
/// `error.kind` (`not_redis`), not an unreachable server.
fn a_non_redis_peer_is_not_a_redis_server() {
    let port = http_listener();
    let url = format!("redis://127.0.0.1:{port}/");
    let out = redkit(&["--url", &url, "scripts", "status"]);
    assert_eq!(out.status.code(), Some(6), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("not a Redis server"), "{err}");
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
    assert!(!err.contains("Parse error"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");

    let out = redkit(&["--json", "--url", &url, "scripts", "verify"]);
    let doc = json_error(&out, "not_redis", 6);
    assert_eq!(doc["command"], "verify");
}

/// `scripts status` of a node missing every script prints one short line per node: a count
/// and the first names; `--json` keeps every name.
async fn status_counts_missing_scripts_on_one_short_line() {
    let server = RedisServer::spawn().await;
    let url = server.url();
    let ids: Vec<String> = Registry::global()
        .scripts()
        .iter()
        .map(|s| s.id().to_owned())
        .collect();
    let n = ids.len();
    assert!(n > 3, "the test needs more scripts than a line shows");
    let out = redkit(&["--url", &url, "scripts", "status"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(
        text.lines().count(),
        2,
        "a header and one line per node: {text}"
    );
    let line = text.lines().nth(1).unwrap();
    assert!(line.contains(&format!("0/{n}  missing {n}: ")), "{line}");
    assert!(
        line.contains(&format!(
            "{}, {}, {} and {} more",
            ids[0],
            ids[1],
            ids[2],
            n - 3
        )),
        "{line}"
    );
    assert!(!line.contains(&ids[3]), "{line}");
    assert!(line.len() < 200, "{} chars: {line}", line.len());

    let out = redkit(&["--url", &url, "--json", "scripts", "status"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let scripts = doc["nodes"][0]["scripts"].as_array().unwrap();
    let missing: Vec<&str> = scripts
        .iter()
        .filter(|s| s["loaded"] == false)
        .map(|s| s["script"].as_str().unwrap())
        .collect();
    assert_eq!(missing, ids, "--json lists every missing script");
}

/// `scripts verify` checks the scripts this build calls (the live set), not the retired pins
/// of scripts.lock: a server holding every live script passes, one lacking a live script
/// fails naming it (and `status` names it in full).
async fn verify_checks_the_live_scripts_and_names_a_missing_one() {
    let server = RedisServer::spawn().await;
    let url = server.url();
    let live = Registry::global().scripts();
    let retired: Vec<&str> = Registry::global()
        .retired()
        .iter()
        .map(|r| r.id.as_str())
        .collect();
    assert!(!retired.is_empty());

    // An empty cache: exactly the live set is missing, no retired version.
    let out = redkit(&["--url", &url, "--json", "scripts", "verify"]);
    let doc = json_error(&out, "verify_failed", 4);
    let missing: Vec<String> = serde_json::from_value(doc["nodes"][0]["missing"].clone()).unwrap();
    let ids: Vec<String> = live.iter().map(|s| s.id().to_owned()).collect();
    assert_eq!(missing, ids, "{doc}");
    assert!(missing.iter().all(|m| !retired.contains(&m.as_str())));

    // Every live script but one (SCRIPT LOAD of the very bodies the library sends).
    let (left_out, loaded) = live.split_last().unwrap();
    for script in loaded {
        let sha1: String = server.cmd(&["SCRIPT", "LOAD", script.source()]).await;
        assert_eq!(sha1, script.sha1());
    }
    let out = redkit(&["--url", &url, "scripts", "verify"]);
    assert_eq!(out.status.code(), Some(4), "{}", stdout(&out));
    let addr = format!("127.0.0.1:{}", server.port());
    assert_eq!(
        stdout(&out).lines().collect::<Vec<_>>(),
        [format!("missing\t{addr}\t{}", left_out.id())],
        "{}",
        stdout(&out)
    );
    assert!(
        stderr(&out).contains("1 scripts missing"),
        "{}",
        stderr(&out)
    );
    let out = redkit(&["--url", &url, "scripts", "status"]);
    let n = live.len();
    assert!(
        stdout(&out).contains(&format!("{}/{n}  missing 1: {}", n - 1, left_out.id())),
        "{}",
        stdout(&out)
    );

    let _: String = server.cmd(&["SCRIPT", "LOAD", left_out.source()]).await;
    let out = redkit(&["--url", &url, "scripts", "verify"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(
        stdout(&out).contains(&format!("ok: all {n} scripts loaded on 1 primaries")),
        "{}",
        stdout(&out)
    );
}

/// Another write failure on stdout (a full disk: /dev/full) is said on stderr and exits 1
/// (`io`), without a panic.
fn a_full_stdout_is_an_io_error_not_a_panic() {
    for args in [&["scripts", "list"][..], &["--json", "scripts", "list"]] {
        let full = std::fs::File::create("/dev/full").expect("/dev/full");
        let out = redkit_command(args)
            .stdout(full)
            .output()
            .expect("run redkit");
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        assert_eq!(
            stderr(&out).trim_end(),
            "redkit: cannot write to stdout: No space left on device (os error 28)",
            "{args:?}"
        );
    }
}

/// A node without Lua scripting (`EVAL`, `EVALSHA`, `SCRIPT` renamed away) is reported as such,
/// with its own exit code (7) and `error.kind` (`no_scripting`), by `status`, `verify` and
/// `load` alike.
async fn a_node_without_lua_scripting_is_reported_as_such() {
    let mut args = Vec::new();
    for command in ["EVAL", "EVALSHA", "SCRIPT"] {
        args.extend(["--rename-command", command, ""]);
    }
    let server = RedisServer::spawn_with(&args).await;
    let url = server.url();
    for command in ["status", "verify", "load"] {
        let out = redkit(&["--url", &url, "scripts", command]);
        assert_eq!(out.status.code(), Some(7), "{command}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.contains("no Lua scripting"), "{command}: {err}");
        let out = redkit(&["--json", "--url", &url, "scripts", command]);
        let doc = json_error(&out, "no_scripting", 7);
        assert_eq!(doc["command"], command);
    }
}

/// `scripts status` names the native commands each node offers in place of scripts (what a
/// plain lock releases and renews with): none on Redis 7, `DELIFEQ, SET IFEQ` on Valkey 9;
/// `--json` gives them as `native`.
async fn status_names_the_native_commands_of_each_node(valkey: Valkey) {
    let redis = RedisServer::spawn().await;
    let valkey = RedisServer::spawn_valkey(&valkey, &[]).await;
    for (server, expected) in [(&redis, None), (&valkey, Some("native: DELIFEQ, SET IFEQ"))] {
        let url = server.url();
        let out = redkit(&["--url", &url, "scripts", "status"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let line = stdout(&out).lines().nth(1).unwrap_or_default().to_owned();
        match expected {
            Some(native) => assert!(line.ends_with(native), "{line}"),
            None => assert!(!line.contains("native:"), "{line}"),
        }
        let out = redkit(&["--url", &url, "--json", "scripts", "status"]);
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        let offered = expected.is_some();
        assert_eq!(
            doc["nodes"][0]["native"],
            serde_json::json!({"delifeq": offered, "set_ifeq": offered}),
            "{doc}"
        );
    }
}

/// A command line held as `String`s, as `redkit` takes it.
fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// The JSON document of a `limits` command that succeeded.
fn limits_doc(args: &[&str]) -> serde_json::Value {
    let out = redkit(args);
    assert!(
        out.status.success(),
        "{args:?}: {}{}",
        stdout(&out),
        stderr(&out)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

async fn limits_show_reset_and_block_one_limiter() {
    use redkit::nonzero;
    use redkit::rate_limit::{FixedWindow, LimitKey, Rate};
    let server = RedisServer::spawn().await;
    let url = server.url();
    let mut conn = server.conn().await;
    let limiter = FixedWindow::new("cli-api", Rate::per_minute(nonzero!(5))).unwrap();
    let user = LimitKey::text("user-42").unwrap();
    limiter
        .check_n(&mut conn, &user, nonzero!(2))
        .await
        .unwrap();
    let described = ["--name", "cli-api", "--limit", "5", "--window", "1m"];
    let with = |verb: &str, extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = ["--url", url.as_str(), "--json", "limits", verb]
            .iter()
            .map(|s| s.to_string())
            .collect();
        v.extend(described.iter().chain(extra).map(|s| s.to_string()));
        v
    };

    // show: read-only, each client's state.
    let before = support::snapshot(&mut conn).await;
    let show = with("show", &["text:user-42", "ip:203.0.113.9"]);
    let doc = limits_doc(&args(&show));
    assert_eq!(doc["command"], "limits show");
    let rows = &doc["clients"];
    assert_eq!(
        (&rows[0]["used"], &rows[0]["remaining"], &rows[0]["limit"]),
        (&2.into(), &3.into(), &5.into()),
        "{doc}"
    );
    assert_eq!(rows[0]["key"], limiter.redis_key(&user));
    assert_eq!(
        (&rows[1]["used"], &rows[1]["remaining"]),
        (&0.into(), &5.into()),
        "{doc}"
    );
    support::same_dumps(&before, &support::snapshot(&mut conn).await, "limits show");
    let text = redkit(
        &args(&show)
            .into_iter()
            .filter(|a| *a != "--json")
            .collect::<Vec<_>>(),
    );
    assert!(stdout(&text).contains("used 2/5"), "{}", stdout(&text));

    // The same limiter named by the application's policy file and a request path.
    let file = std::env::temp_dir().join(format!("redkit-cli-policies-{}.toml", server.port()));
    std::fs::write(
        &file,
        "[default]\nname = \"other\"\nlimit = 9\nwindow_ms = 1000\n\n\
         [[routes]]\npath = \"/api\"\nname = \"cli-api\"\nlimit = 5\nwindow_ms = 60000\n",
    )
    .unwrap();
    let by_file = [
        "--url",
        url.as_str(),
        "--json",
        "limits",
        "show",
        "--policies",
        file.to_str().unwrap(),
        "--path",
        "/api/orders",
        "text:user-42",
    ];
    let doc = limits_doc(&by_file);
    assert_eq!(
        (
            &doc["limiter"],
            &doc["clients"][0]["used"],
            &doc["clients"][0]["limit"]
        ),
        (&"cli-api".into(), &2.into(), &5.into()),
        "{doc}"
    );
    let out = redkit(&[
        "--url",
        url.as_str(),
        "limits",
        "show",
        "--policies",
        file.to_str().unwrap(),
        "--name",
        "x",
        "text:a",
    ]);
    assert_eq!(out.status.code(), Some(2), "--policies and --name together");
    std::fs::remove_file(&file).unwrap();

    // top: the busiest clients, found by SCAN, read without counting.
    let other = LimitKey::text("user-7").unwrap();
    limiter.check(&mut conn, &other).await.unwrap();
    let before = support::snapshot(&mut conn).await;
    let doc = limits_doc(&args(&with("top", &["--top", "1"])));
    let mut streamed = with("top", &["--ndjson"]);
    streamed.retain(|a| a != "--json");
    let out = redkit(&args(&streamed));
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0]["client"], "k:user-42");
    assert_eq!(
        (&doc["surveyed"], &doc["truncated"]),
        (&2.into(), &false.into()),
        "{doc}"
    );
    assert_eq!(
        (&doc["clients"][0]["client"], &doc["clients"][0]["used"]),
        (&"k:user-42".into(), &2.into()),
        "{doc}"
    );
    assert_eq!(doc["clients"].as_array().unwrap().len(), 1, "{doc}");
    support::same_dumps(&before, &support::snapshot(&mut conn).await, "limits top");
    // reset: refused without --yes (exit 2, nothing changed), a dry run changes nothing.
    let out = redkit(&args(&with("reset", &["text:user-42"])));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let doc = limits_doc(&args(&with("reset", &["--dry-run", "text:user-42"])));
    assert_eq!(doc["clients"][0]["dry_run"], true);
    support::same_dumps(
        &before,
        &support::snapshot(&mut conn).await,
        "refused and dry-run resets",
    );
    let doc = limits_doc(&args(&with("reset", &["--yes", "text:user-42"])));
    assert_eq!(doc["clients"][0]["existed"], true, "{doc}");
    assert_eq!(limiter.peek(&mut conn, &user).await.unwrap().used(), 0);

    // block: the client is refused until the block ends.
    let doc = limits_doc(&args(&with(
        "block",
        &["--for", "10m", "--yes", "text:user-42"],
    )));
    assert!(
        doc["clients"][0]["blocked_ms"].as_u64().unwrap() >= 600_000,
        "{doc}"
    );
    let d = limiter.check(&mut conn, &user).await.unwrap();
    assert!(d.retry_after().is_some_and(|r| r.as_secs() >= 590), "{d:?}");
    // An algorithm that cannot block: a usage error, nothing sent.
    let mut sliding = with("block", &["--for", "10m", "--yes", "text:user-42"]);
    sliding.extend(["--algorithm".to_string(), "sliding_window".to_string()]);
    let out = redkit(&args(&sliding));
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(stdout(&out).contains("cannot block"), "{}", stdout(&out));
    // A client not written as the limiter keys it.
    let out = redkit(&args(&with("show", &["user-42"])));
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
}

/// The read-only operator ACL of the docs: `limits show` works under it, `reset` and
/// `block` are refused (exit 5) and change nothing.
async fn a_read_only_operator_can_show_and_cannot_change() {
    use redkit::nonzero;
    use redkit::rate_limit::{Gcra, LimitKey, Rate};
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let limiter = Gcra::new("cli-gcra", Rate::per_minute(nonzero!(5))).unwrap();
    let user = LimitKey::text("user-7").unwrap();
    limiter.check(&mut conn, &user).await.unwrap();
    // As docs/cli.md writes it.
    let _: () = server
        .cmd(&[
            "ACL",
            "SETUSER",
            "operator",
            "on",
            ">op-pw",
            "~redkit:*",
            "resetchannels",
            "-@all",
            "+@read",
            "+@connection",
            "+info",
            "+evalsha_ro",
            "+eval_ro",
            "+fcall_ro",
            "+time",
        ])
        .await;
    let url = format!("redis://operator:op-pw@127.0.0.1:{}/", server.port());
    let base = ["--url", url.as_str(), "--json", "limits"];
    let described = [
        "--algorithm",
        "gcra",
        "--name",
        "cli-gcra",
        "--limit",
        "5",
        "--window",
        "1m",
        "text:user-7",
    ];
    let run = |verb: &str, extra: &[&str]| {
        let mut a: Vec<&str> = base.to_vec();
        a.push(verb);
        a.extend(described);
        a.extend(extra);
        redkit(&a)
    };
    let out = run("show", &[]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["clients"][0]["remaining"], 4, "{doc}");
    let before = support::snapshot(&mut conn).await;
    for (verb, extra) in [
        ("reset", &["--yes"][..]),
        ("block", &["--for", "1m", "--yes"][..]),
    ] {
        let out = run(verb, extra);
        assert_eq!(
            out.status.code(),
            Some(5),
            "{verb}: {}{}",
            stdout(&out),
            stderr(&out)
        );
    }
    support::same_dumps(
        &before,
        &support::snapshot(&mut conn).await,
        "refused operator writes",
    );
    // Locks: show works, a release is refused (exit 5) and the holder keeps its lock.
    let lock = redkit::lock::Lock::new();
    let options = redkit::lock::LockOptions::new().token("held-by-app-000000000");
    assert!(matches!(
        lock.acquire(&mut conn, "job", &options).await.unwrap(),
        redkit::lock::Acquire::Acquired(_)
    ));
    let show = redkit(&["--url", url.as_str(), "--json", "locks", "show", "job"]);
    assert!(show.status.success(), "{}{}", stdout(&show), stderr(&show));
    let release = redkit(&[
        "--url",
        url.as_str(),
        "locks",
        "release",
        "job",
        "--any",
        "--yes",
    ]);
    assert_eq!(
        release.status.code(),
        Some(5),
        "{}{}",
        stdout(&release),
        stderr(&release)
    );
    let state = lock.inspect(&mut conn, "job").await.unwrap();
    assert_eq!(
        state.holder.map(|h| h.token),
        Some("held-by-app-000000000".to_owned())
    );
    // The other reads work too; a semaphore eviction is refused.
    let sem = redkit::lock::Semaphore::new();
    let permit = redkit::lock::LockOptions::new().token("permit-of-app-000000");
    sem.acquire(&mut conn, "export", 2, &permit).await.unwrap();
    let gcra = [
        "--algorithm",
        "gcra",
        "--name",
        "cli-gcra",
        "--limit",
        "5",
        "--window",
        "1m",
    ];
    let store = redkit::inventory::Inventory::new("redkit:inv")
        .unwrap()
        .store("s1")
        .unwrap();
    store.set(&mut conn, "sku-1", 3).await.unwrap();
    let inventory = ["--prefix", "redkit:inv", "--store", "s1", "sku-1"];
    let reads: [Vec<&str>; 5] = [
        [&["limits", "top"][..], &gcra[..]].concat(),
        vec!["locks", "list"],
        vec!["semaphore", "show", "export"],
        [&["inventory", "stock"][..], &inventory[..]].concat(),
        [&["inventory", "reservations"][..], &inventory[..]].concat(),
    ];
    for read in &reads {
        let mut a = vec!["--url", url.as_str(), "--json"];
        a.extend(read);
        let out = redkit(&a);
        assert!(
            out.status.success(),
            "{read:?}: {}{}",
            stdout(&out),
            stderr(&out)
        );
    }
    let out = redkit(&[
        "--url",
        url.as_str(),
        "semaphore",
        "evict",
        "export",
        "--token",
        "permit-of-app-000000",
        "--yes",
    ]);
    assert_eq!(
        out.status.code(),
        Some(5),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert_eq!(
        sem.inspect(&mut conn, "export", redkit::nonzero!(5))
            .await
            .unwrap()
            .live,
        1
    );
}

async fn locks_show_and_release_a_stuck_lock() {
    use redkit::lock::{Acquire, Lock, LockOptions, Renew};
    let server = RedisServer::spawn().await;
    let url = server.url();
    let mut conn = server.conn().await;
    let lock = Lock::new();
    let owner = "stuck-worker-0123456789";
    let options = LockOptions::new()
        .fencing(true)
        .token(owner)
        .ttl(std::time::Duration::from_secs(60));
    let Acquire::Acquired(mut guard) = lock.acquire(&mut conn, "export", &options).await.unwrap()
    else {
        panic!("not acquired");
    };
    let run = |extra: &[&str]| {
        let mut a = vec!["--url", url.as_str(), "--json", "locks"];
        a.extend(extra);
        redkit(&a)
    };
    // list: the resources held, found by SCAN (the fence key is not one).
    let out = run(&["list"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (&doc["resources"], &doc["truncated"]),
        (&serde_json::json!(["export"]), &false.into()),
        "{doc}"
    );
    // The same as a stream: one JSON object per line.
    let out = redkit(&["--url", url.as_str(), "locks", "list", "--ndjson"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let rows: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert_eq!(rows, [serde_json::json!({"resource": "export"})]);
    // show: the holder, its lease, the fence; nothing written.
    let before = support::snapshot(&mut conn).await;
    let out = run(&["show", "export", "idle"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["command"], "locks show");
    let rows = &doc["locks"];
    assert_eq!(rows[0]["holder"]["token"], owner, "{doc}");
    assert!(
        rows[0]["holder"]["ttl_ms"].as_u64().unwrap() > 50_000,
        "{doc}"
    );
    assert_eq!(
        rows[0]["last_fencing_token"],
        guard.fencing_token().unwrap().get()
    );
    assert_eq!(rows[0]["key"], lock.key("export").unwrap());
    assert_eq!(
        (&rows[1]["holder"], &rows[1]["waiters"]),
        (&serde_json::Value::Null, &false.into())
    );
    support::same_dumps(&before, &support::snapshot(&mut conn).await, "locks show");

    // release: refused without --yes; a dry run and another token change nothing.
    let out = run(&["release", "export", "--any"]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    let out = run(&["release", "export", "--any", "--dry-run"]);
    assert!(out.status.success(), "{}", stdout(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["would_release"], true, "{doc}");
    let out = run(&[
        "release",
        "export",
        "--token",
        "another-worker-000000",
        "--yes",
    ]);
    assert_eq!(
        out.status.code(),
        Some(8),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (&doc["outcome"], &doc["error"]["kind"]),
        (&"changed".into(), &"state_changed".into()),
        "{doc}"
    );
    assert_eq!(doc["holder"]["token"], owner);
    support::same_dumps(
        &before,
        &support::snapshot(&mut conn).await,
        "refused releases",
    );

    // release with the holder's token: released; the holder's renewal reports the loss.
    let out = run(&["release", "export", "--token", owner, "--yes"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (&doc["outcome"], &doc["released"]),
        (&"released".into(), &owner.into()),
        "{doc}"
    );
    assert_eq!(
        lock.renew(&mut conn, &mut guard).await.unwrap(),
        Renew::Lost
    );
    // Again: it is free now, nothing done (exit 8).
    let out = run(&["release", "export", "--token", owner, "--yes"]);
    assert_eq!(out.status.code(), Some(8), "{}", stdout(&out));
    // --token and --any together: a usage error.
    let out = run(&["release", "export", "--token", owner, "--any", "--yes"]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
}

async fn inventory_stock_and_reservations_read_without_changing() {
    use redkit::inventory::Inventory;
    let server = RedisServer::spawn().await;
    let url = server.url();
    let mut conn = server.conn().await;
    let store = Inventory::new("shop:inv").unwrap().store("w1").unwrap();
    store.set(&mut conn, "sku-1", 10).await.unwrap();
    for i in 0..3 {
        let id = format!("cart-{i}");
        store
            .reserve(
                &mut conn,
                "sku-1",
                2,
                std::time::Duration::from_secs(600),
                &id,
            )
            .await
            .unwrap();
    }
    let before = support::snapshot(&mut conn).await;
    let base = ["--url", url.as_str(), "--json", "inventory"];
    let run = |extra: &[&str]| {
        let mut a = base.to_vec();
        a.extend(extra);
        redkit(&a)
    };
    let out = run(&["stock", "--prefix", "shop:inv", "--store", "w1", "sku-1"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = &doc["skus"][0];
    assert_eq!(
        (
            &row["available"],
            &row["reserved"],
            &row["reservations"],
            &row["expired"]
        ),
        (&4.into(), &6.into(), &3.into(), &0.into()),
        "{doc}"
    );
    let out = run(&[
        "reservations",
        "--prefix",
        "shop:inv",
        "--store",
        "w1",
        "sku-1",
    ]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["reservations"].as_array().unwrap().len(), 3, "{doc}");
    assert_eq!(doc["truncated"], false);
    let out = run(&[
        "reservations",
        "--prefix",
        "shop:inv",
        "--store",
        "w1",
        "sku-1",
        "--max",
        "2",
    ]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (
            doc["reservations"].as_array().unwrap().len(),
            &doc["truncated"]
        ),
        (2, &true.into()),
        "{doc}"
    );
    support::same_dumps(
        &before,
        &support::snapshot(&mut conn).await,
        "inventory reads",
    );
    // An unknown SKU: a usage error that says so.
    let out = run(&["stock", "--prefix", "shop:inv", "--store", "w1", "nope"]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
}

async fn semaphore_show_and_evict_a_leaked_permit() {
    use redkit::lock::{Acquire, LockOptions, Semaphore};
    let server = RedisServer::spawn().await;
    let url = server.url();
    let mut conn = server.conn().await;
    let sem = Semaphore::new();
    let leaked = "leaked-worker-000000001";
    let options = LockOptions::new()
        .token(leaked)
        .ttl(std::time::Duration::from_secs(60));
    assert!(matches!(
        sem.acquire(&mut conn, "export", 2, &options).await.unwrap(),
        Acquire::Acquired(_)
    ));
    let run = |extra: &[&str]| {
        let mut a = vec!["--url", url.as_str(), "--json", "semaphore"];
        a.extend(extra);
        redkit(&a)
    };
    let before = support::snapshot(&mut conn).await;
    let out = run(&["show", "export"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (&doc["live"], &doc["holders"][0]["token"]),
        (&1.into(), &leaked.into()),
        "{doc}"
    );
    support::same_dumps(
        &before,
        &support::snapshot(&mut conn).await,
        "semaphore show",
    );
    let out = run(&["evict", "export", "--token", leaked]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    let out = run(&["evict", "export", "--token", leaked, "--dry-run"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["would_evict"], true, "{doc}");
    support::same_dumps(&before, &support::snapshot(&mut conn).await, "a dry run");
    let out = run(&["evict", "export", "--token", leaked, "--yes"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let out = run(&["evict", "export", "--token", leaked, "--yes"]);
    assert_eq!(out.status.code(), Some(8), "{}", stdout(&out));
    let state = sem
        .inspect(&mut conn, "export", redkit::nonzero!(5))
        .await
        .unwrap();
    assert_eq!(state.live, 0);
}

fn main() -> std::process::ExitCode {
    let mut tests = harness::Tests::new();
    harness::add!(
        tests,
        status_verify_load_flush_on_one_server,
        cluster_status_and_verify_see_one_flushed_primary,
        one_cluster_node_url_acts_on_the_whole_cluster,
        authentication_failures_exit_5_with_a_hint,
        functions_load_verify_list_delete_flush_on_every_cluster_node,
        status_counts_retired_scripts_and_prune_drops_them,
        calls_during_a_prune_recover_through_eval,
        a_closed_pipe_ends_redkit_quietly_with_141,
        every_error_under_json_is_one_document_with_a_kind,
        status_counts_missing_scripts_on_one_short_line,
        verify_checks_the_live_scripts_and_names_a_missing_one,
        a_node_without_lua_scripting_is_reported_as_such,
        limits_show_reset_and_block_one_limiter,
        a_read_only_operator_can_show_and_cannot_change,
        locks_show_and_release_a_stuck_lock,
        inventory_stock_and_reservations_read_without_changing,
        semaphore_show_and_evict_a_leaked_permit
    );
    harness::add!(tests, multi_thread: flush_goes_on_past_a_frozen_primary_and_names_it, status_of_a_busy_node_is_not_success, kill_stops_a_read_only_busy_script, kill_reports_unkillable_and_never_shuts_the_server_down);
    harness::add!(tests, sync: list_shows_every_embedded_script, unreachable_server_gives_exit_3_and_one_line_without_password, usage_errors_exit_2_and_say_what_is_wrong_with_the_url, quiet_wins_over_json_in_either_order, a_non_redis_peer_is_not_a_redis_server, a_full_stdout_is_an_io_error_not_a_panic);
    harness::add!(tests, valkey: status_names_the_native_commands_of_each_node);
    tests.run()
}
