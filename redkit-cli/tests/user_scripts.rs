//! A user's own script set, the way a user crate ships it: embedded with `embed_scripts!`,
//! pinned by `scripts.lock`, run through the `ScriptManager`, administered with the `Admin`
//! API and the `redkit --scripts-dir` CLI against real servers.

#[path = "../../tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::process::{Command, Output};

use redkit::script::admin::Admin;
use redkit::script::lockfile::{self, LockProblem};
use redkit::{Call, Registry, ScriptManager};
use support::{RedisCluster, RedisServer};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/user_scripts");

fn user_scripts() -> &'static Registry {
    redkit::embed_scripts!("$CARGO_MANIFEST_DIR/tests/fixtures/user_scripts")
}

fn redkit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_redkit"))
        .args(args)
        .env_remove("REDIS_URL")
        .output()
        .expect("run redkit")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A copy of the fixture folder the test may change.
fn copy_fixture() -> support::temp_dir::TempDir {
    let dir = support::temp_dir::TempDir::new("redkit-scripts-").unwrap();
    for entry in std::fs::read_dir(FIXTURE).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
    }
    dir
}

#[test]
fn the_embedded_set_is_pinned_and_complete() {
    let registry = user_scripts();
    assert!(registry.problems().is_empty(), "{:?}", registry.problems());
    let ids: Vec<&str> = registry.scripts().iter().map(|s| s.id()).collect();
    assert_eq!(ids, ["counter_add.v1", "counter_get.v1"]);
    // The ready-made check a user crate puts in its tests.
    let problems = lockfile::check(registry);
    assert!(problems.is_empty(), "{}", lockfile::report(&problems));
    // Same macro, same registry: SHA1s are computed once.
    assert!(std::ptr::eq(registry, user_scripts()));
}

#[tokio::test]
async fn user_scripts_run_through_the_manager_with_the_noscript_fallback() {
    let server = RedisServer::spawn().await;
    let mut conn = server.conn().await;
    let manager = ScriptManager::new();
    let add = user_scripts().require("counter_add", 1).unwrap();
    let get = user_scripts().require("counter_get", 1).unwrap();
    let mut call = Call::new(add);
    call.key("app:{c}:n").arg(5);
    let n: i64 = manager.invoke(&mut conn, &call).await.unwrap();
    assert_eq!(n, 5);
    let _: () = server.cmd(&["SCRIPT", "FLUSH"]).await;
    let n: i64 = manager.invoke(&mut conn, &call).await.unwrap();
    assert_eq!(n, 10, "after SCRIPT FLUSH: one EVAL, applied once");
    let mut read = Call::new(get);
    read.key("app:{c}:n");
    let n: i64 = manager.invoke(&mut conn, &read).await.unwrap();
    assert_eq!(n, 10);
    // The script's own input check is a typed error and writes nothing.
    let mut bad = Call::new(add);
    bad.key("app:{c}:n").arg("1.5");
    let err = manager.invoke::<i64, _>(&mut conn, &bad).await.unwrap_err();
    assert!(matches!(err, redkit::Error::InvalidInput { .. }), "{err:?}");
    let n: i64 = manager.invoke(&mut conn, &read).await.unwrap();
    assert_eq!(n, 10);
}

#[test]
fn lock_appends_only_and_check_gates_changes() {
    let dir = copy_fixture();
    let path = dir.path().to_str().unwrap();
    let lock_path = dir.path().join("scripts.lock");
    let pinned = std::fs::read_to_string(&lock_path).unwrap();

    let out = redkit(&["--scripts-dir", path, "scripts", "check"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    // Editing a shipped body: check fails (exit 4) naming the next version, and lock refuses
    // to rewrite the pin (the file stays byte for byte).
    let add = dir.path().join("counter_add.v1.lua");
    let body = std::fs::read_to_string(&add).unwrap();
    std::fs::write(&add, body.replace("INCRBY", "incrby")).unwrap();
    let out = redkit(&["--scripts-dir", path, "scripts", "check"]);
    assert_eq!(out.status.code(), Some(4));
    assert!(
        text(&out.stderr).contains("counter_add.v2.lua"),
        "{}",
        text(&out.stderr)
    );
    let out = redkit(&["--scripts-dir", path, "scripts", "lock"]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(&lock_path).unwrap(), pinned);

    // Shipped the right way, as v2: lock appends one pin and keeps the old ones.
    std::fs::write(&add, &body).unwrap();
    std::fs::write(
        dir.path().join("counter_add.v2.lua"),
        body.replace("INCRBY", "incrby"),
    )
    .unwrap();
    let out = redkit(&["--scripts-dir", path, "scripts", "check"]);
    assert_eq!(out.status.code(), Some(4), "v2 is not pinned yet");
    let out = redkit(&["--scripts-dir", path, "scripts", "lock"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let grown = std::fs::read_to_string(&lock_path).unwrap();
    assert!(grown.starts_with(&pinned), "append-only");
    let registry = Registry::from_dir(dir.path()).unwrap();
    assert!(lockfile::check(&registry).is_empty());

    // Deleting a pinned file is refused too.
    std::fs::remove_file(&add).unwrap();
    let problems = lockfile::check(&Registry::from_dir(dir.path()).unwrap());
    assert!(
        problems.iter().any(
            |p| matches!(p, LockProblem::FileMissing { script } if script == "counter_add.v1")
        ),
        "{problems:?}"
    );
}

#[tokio::test]
async fn the_cli_loads_and_verifies_a_user_set_on_every_cluster_node() {
    let cluster = RedisCluster::spawn().await;
    let seed = cluster.nodes[0].url();
    // The deploy gate: fails before the set is loaded...
    let out = redkit(&[
        "--url",
        &seed,
        "--scripts-dir",
        FIXTURE,
        "scripts",
        "verify",
    ]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stdout));
    let out = redkit(&["--url", &seed, "--scripts-dir", FIXTURE, "scripts", "load"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // ...passes after, on every primary.
    let out = redkit(&[
        "--url",
        &seed,
        "--scripts-dir",
        FIXTURE,
        "--json",
        "scripts",
        "verify",
    ]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{doc}");
    assert_eq!(doc["nodes"].as_array().unwrap().len(), 3);
    // Every node, replicas included, has the user's scripts; redkit's own were not loaded.
    for node in &cluster.nodes {
        let have: Vec<bool> = node
            .cmd(&[
                "SCRIPT",
                "EXISTS",
                user_scripts().scripts()[0].sha1(),
                Registry::global().scripts()[0].sha1(),
            ])
            .await;
        assert_eq!(have, vec![true, false], "node {}", node.port());
    }
    // The same through the API.
    let admin = Admin::single(seed.as_str())
        .unwrap()
        .with_scripts(user_scripts().clone());
    assert!(admin.verify().await.unwrap().is_ok());
    let status = admin.status().await.unwrap();
    assert_eq!(status.len(), 6);
    assert!(status.iter().all(|s| s.scripts.len() == 2));
}

#[test]
fn a_bad_scripts_dir_is_a_usage_error() {
    let out = redkit(&["--scripts-dir", "/nonexistent/redkit", "scripts", "list"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("cannot read"),
        "{}",
        text(&out.stderr)
    );
    let out = redkit(&["scripts", "lock"]);
    assert_eq!(out.status.code(), Some(2), "lock needs --scripts-dir");
    let dir = support::temp_dir::TempDir::new("redkit-scripts-").unwrap();
    std::fs::write(dir.path().join("nokeys.v1.lua"), "return 1").unwrap();
    let out = redkit(&[
        "--scripts-dir",
        dir.path().to_str().unwrap(),
        "--url",
        "redis://127.0.0.1:1/",
        "scripts",
        "status",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("nokeys.v1.lua"),
        "{}",
        text(&out.stderr)
    );
    assert!(Path::new(FIXTURE).join("scripts.lock").exists());
}
