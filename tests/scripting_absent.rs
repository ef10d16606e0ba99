//! A server without Lua scripting (here Redis 7 with `EVAL`, `EVALSHA` and `SCRIPT` renamed
//! away, as an operator can do, and as a server built without its Lua engine answers): every
//! script call is `Error::Unsupported` naming Lua scripting, not a generic Redis error, and
//! nothing is written. (A plain lock's acquire is a single `SET NX PX` and works.)

mod support;

use std::time::Duration;

use redkit::inventory::Inventory;
use redkit::lock::{Lock, LockOptions};
use redkit::rate_limit::{FixedWindow, LimitKey, Rate};
use redkit::{Error, ScriptManager};
use support::RedisServer;

async fn without_scripting() -> RedisServer {
    let mut args = Vec::new();
    for command in ["EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "SCRIPT"] {
        args.extend(["--rename-command", command, ""]);
    }
    RedisServer::spawn_with(&args).await
}

fn assert_no_scripting<T: std::fmt::Debug>(what: &str, outcome: redkit::Result<T>) {
    match outcome {
        Err(Error::Unsupported { feature, detail }) => {
            assert!(feature.contains("Lua scripting"), "{what}: {feature}");
            assert!(detail.contains("unknown command"), "{what}: {detail}");
        }
        other => panic!("{what}: expected Error::Unsupported (Lua scripting), got {other:?}"),
    }
}

#[tokio::test]
async fn every_component_says_the_server_has_no_lua_scripting_and_writes_nothing() {
    let server = without_scripting().await;
    let mut conn = server.conn().await;
    let probe: redis::RedisResult<redis::Value> = redis::cmd("EVALSHA")
        .arg("0000000000000000000000000000000000000000")
        .arg(0)
        .query_async(&mut conn)
        .await;
    assert!(
        probe.is_err_and(|e| e.to_string().contains("unknown command")),
        "the server under test has no EVALSHA"
    );

    let limiter = FixedWindow::new("api", Rate::per_minute(10).unwrap()).unwrap();
    let key = LimitKey::text("client").unwrap();
    assert_no_scripting("rate limit", limiter.check(&mut conn, &key).await);
    assert_no_scripting("rate limit, again", limiter.check(&mut conn, &key).await);

    // A plain lock's acquire is one `SET NX PX`, no script: it works. Its release is a
    // compare-and-delete script: refused, and the lock stays until its lease ends.
    let lock = Lock::new();
    let options = LockOptions::new().ttl(Duration::from_secs(5));
    let guard = match lock.try_acquire(&mut conn, "job", &options).await.unwrap() {
        redkit::lock::Acquire::Acquired(guard) => guard,
        other => panic!("acquire: {other:?}"),
    };
    assert_no_scripting("lock release", lock.release(&mut conn, guard).await);
    let held: i64 = server.cmd(&["EXISTS", &lock.key("job").unwrap()]).await;
    assert_eq!(held, 1, "not released: it ends with its lease");
    assert_no_scripting(
        "fenced lock",
        lock.try_acquire(&mut conn, "fenced", &options.clone().fencing(true))
            .await,
    );

    let store = Inventory::builder()
        .build()
        .unwrap()
        .store("berlin")
        .unwrap();
    assert_no_scripting(
        "inventory",
        store
            .decrement(&mut conn, "sku-1", 1, Some("order-1"))
            .await,
    );

    assert_no_scripting("preload", ScriptManager::new().preload(&mut conn).await);

    let keys: i64 = server.cmd(&["DBSIZE"]).await;
    assert_eq!(keys, 1, "nothing written but the plain lock's key");
}
