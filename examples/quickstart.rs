//! The redkit demo: run a versioned Lua script through the script manager.
//!
//! `cargo run --example quickstart`
//!
//! Uses `REDIS_URL`, else `redis://127.0.0.1:6379/`. When nothing answers there it starts a
//! private `redis-server` on a free port for itself (and says so), and stops it at the end.
//! It only touches keys under `redkit:demo:` and never flushes anything.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use redkit::{Call, Registry, ScriptManager};

/// A redis-server this demo started, killed on drop.
struct PrivateServer(Child);

impl Drop for PrivateServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn connect(url: &str) -> Option<redis::aio::MultiplexedConnection> {
    let client = redis::Client::open(url).ok()?;
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(1)))
        .set_response_timeout(Some(Duration::from_secs(2)));
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .ok()?;
    redis::cmd("PING")
        .query_async::<String>(&mut conn)
        .await
        .ok()?;
    Some(conn)
}

async fn start_private_server() -> Result<(PrivateServer, String), String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("no free port: {e}"))?
        .port();
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| {
            format!(
                "cannot start redis-server ({e}): install Redis 7 (apt-get install redis-server)"
            )
        })?;
    let server = PrivateServer(child);
    let url = format!("redis://127.0.0.1:{port}/");
    for _ in 0..100 {
        if connect(&url).await.is_some() {
            return Ok((server, url));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err("the private redis-server did not answer".into())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let (_private, mut conn) = match connect(&url).await {
        Some(conn) => {
            println!("using the Redis server from REDIS_URL or 127.0.0.1:6379");
            (None, conn)
        }
        None => {
            println!("no Redis answered there: starting a private redis-server for this demo");
            let (server, url) = start_private_server().await?;
            println!("private redis-server at {url}");
            let conn = connect(&url).await.ok_or("private server unreachable")?;
            (Some(server), conn)
        }
    };

    // Every embedded script, with the SHA1 redkit computed once.
    println!("\nembedded scripts:");
    for script in Registry::global().scripts() {
        println!(
            "  {:<20} keys={} sha1={}",
            script.id(),
            script.key_count(),
            script.sha1()
        );
    }

    // One call is one EVALSHA; redkit falls back to EVAL once if the server lacks the script.
    let manager = ScriptManager::new();
    let script = Registry::global().require("fixed_window", 1)?;
    let key = format!("redkit:demo:{{{}}}:hits", std::process::id());
    println!("\nfixed window of 3 hits per 10 s on {key}:");
    for i in 1..=5 {
        let mut call = Call::new(script);
        call.key(&key).arg(3).arg(10_000).arg(1);
        let (count, pttl, allowed): (i64, i64, i64) = manager.invoke(&mut conn, &call).await?;
        println!(
            "  hit {i}: {} (count {count}, window resets in {pttl} ms)",
            if allowed == 1 { "allowed" } else { "limited" }
        );
    }
    let _: () = redis::cmd("DEL").arg(&key).query_async(&mut conn).await?;
    println!(
        "\nNOSCRIPT fallbacks: {} (1 when the server had not cached the script yet, else 0)",
        manager.stats().noscript_fallbacks
    );
    Ok(())
}
