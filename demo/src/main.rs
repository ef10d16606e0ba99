//! The redkit demo: the script manager, per-IP rate limiting, inventory and a lock, each
//! call one atomic script round trip.
//!
//! `cargo run --features demo --bin redkit-demo` (a binary, not an example, so that it builds
//! only redkit's own dependencies, not the test tooling).
//!
//! Uses `REDIS_URL` when it is set (an invalid or unreachable URL is an error, never silently
//! replaced); else `redis://127.0.0.1:6379/`, and when nothing answers there it starts a private
//! `redis-server` on a free port for itself, and stops it at the end. It prints which server it
//! used. It only touches keys under `redkit:demo` (and deletes them), and never flushes anything.
//!
//! Exits 0 when done, 1 on an error (said on stderr), and 141 without a word when stdout or
//! stderr is a closed pipe (`redkit-demo | head -1`), after stopping its private server.

use std::io::Write;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::Duration;

use redkit::inventory::Inventory;
use redkit::lock::{Acquire, Lock, LockOptions};
use redkit::rate_limit::{Decision, FixedWindow, LimitKey, Rate};
use redkit::redis;
use redkit::{Call, Registry, ScriptManager};

/// A redis-server this demo started, killed on drop.
struct PrivateServer(Child);

impl Drop for PrivateServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn connect(client: &redis::Client) -> Option<redis::aio::MultiplexedConnection> {
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
    let client = redis::Client::open(url.as_str()).map_err(|e| e.to_string())?;
    for _ in 0..100 {
        if connect(&client).await.is_some() {
            return Ok((server, url));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err("the private redis-server did not answer".into())
}

/// `host:port` of a client's server (never its password).
fn address(client: &redis::Client) -> String {
    redkit::script::admin::describe_addr(client.get_connection_info().addr())
}

/// Exit status when stdout or stderr is a closed pipe (128 + SIGPIPE, as a shell shows a
/// process killed by SIGPIPE); the same as `redkit`'s.
const EXIT_BROKEN_PIPE: u8 = 141;

/// Stdout or stderr is a closed pipe: the demo stops without a word.
#[derive(Debug)]
struct Closed;

impl std::fmt::Display for Closed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the output is a closed pipe")
    }
}

impl std::error::Error for Closed {}

/// One line on `stream`; a closed pipe is [`Closed`], any other failure an I/O error.
fn write_line(
    mut stream: impl Write,
    line: std::fmt::Arguments<'_>,
) -> Result<(), Box<dyn std::error::Error>> {
    stream
        .write_all(format!("{line}\n").as_bytes())
        .and_then(|()| stream.flush())
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::BrokenPipe => Closed.into(),
            _ => format!("cannot write the demo's output: {e}").into(),
        })
}

/// `println!` that returns an error instead of panicking when stdout is closed.
macro_rules! say {
    ($($arg:tt)*) => {
        write_line(std::io::stdout().lock(), format_args!($($arg)*))?
    };
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is::<Closed>() => ExitCode::from(EXIT_BROKEN_PIPE),
        Err(e) => match write_line(std::io::stderr().lock(), format_args!("redkit-demo: {e}")) {
            Err(closed) if closed.is::<Closed>() => ExitCode::from(EXIT_BROKEN_PIPE),
            _ => ExitCode::FAILURE,
        },
    }
}

/// The demo; the private server, if any, is stopped when it returns.
async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let (_private, mut conn) = match std::env::var("REDIS_URL") {
        Ok(url) => {
            let client = redis::Client::open(url.as_str())
                .map_err(|e| format!("REDIS_URL is not a valid Redis URL ({e}): expected e.g. redis://127.0.0.1:6379/"))?;
            let conn = connect(&client)
                .await
                .ok_or_else(|| format!("REDIS_URL: no Redis answered at {}", address(&client)))?;
            say!("using Redis at {} (REDIS_URL)", address(&client));
            (None, conn)
        }
        Err(_) => {
            let local = redis::Client::open("redis://127.0.0.1:6379/")?;
            match connect(&local).await {
                Some(conn) => {
                    say!("using Redis at {} (REDIS_URL is not set)", address(&local));
                    (None, conn)
                }
                None => {
                    say!("no Redis answered at 127.0.0.1:6379: starting a private redis-server");
                    let (server, url) = start_private_server().await?;
                    let client = redis::Client::open(url.as_str())?;
                    let conn = connect(&client).await.ok_or("private server unreachable")?;
                    say!("using the private redis-server at {}", address(&client));
                    (Some(server), conn)
                }
            }
        }
    };

    // The embedded scripts: only the versions this build calls (`redkit scripts status` lists
    // them; older versions are retired, their SHA1s kept in lua/scripts.lock).
    say!(
        "\nembedded scripts: {} (the versions this build calls; SHA1s computed once)",
        Registry::global().scripts().len()
    );

    // One manager for everything: it counts NOSCRIPT fallbacks across all areas.
    let manager = ScriptManager::new();
    let run = std::process::id();

    // 1. The script manager itself: one EVALSHA per call, EVAL once if the server lacks it.
    let script = Registry::global().require("fixed_window", 9)?;
    let raw_key = format!("redkit:demo:{{{run}}}:raw");
    let mut call = Call::new(script);
    call.key(&raw_key).arg(10).arg(10_000).arg(1);
    // fixed_window.v9 packs an allowed hit into one integer: pttl_ms * (limit + 1) + count.
    let packed: i64 = manager.invoke(&mut conn, &call).await?;
    let (count, pttl) = (packed % 11, packed / 11);
    say!("\nraw script call: count {count}, window resets in {pttl} ms");
    let _: () = redis::cmd("DEL")
        .arg(&raw_key)
        .query_async(&mut conn)
        .await?;

    // 2. Per-client fixed-window rate limiting: 3 requests per 10 s.
    let limiter = FixedWindow::new(
        "demo",
        Rate::new(redkit::nonzero!(3), Duration::from_secs(10))?,
    )?
    .with_manager(manager.clone());
    let client_ip = LimitKey::ip(format!("192.0.2.{}", run % 250 + 1).parse()?);
    say!("\nrate limit, 3 per 10 s for one client IP:");
    for i in 1..=5 {
        match limiter.check(&mut conn, &client_ip).await? {
            Decision::Allowed(q) => say!("  request {i}: allowed, {} left", q.remaining()),
            Decision::Limited { retry_after, .. } => {
                say!("  request {i}: limited, retry after {retry_after:?}")
            }
            other => say!("  request {i}: {other:?}"),
        }
    }
    limiter.reset(&mut conn, &client_ip).await?;

    // 3. Inventory: no oversell, and a retried order id never deducts twice.
    let inventory = Inventory::builder()
        .prefix("redkit:demo:inv")
        .with_manager(manager.clone())
        .build()?;
    let store = inventory.store(&format!("store-{run}"))?;
    store.set(&mut conn, "mug", 2).await?;
    say!("\ninventory, 2 mugs in stock:");
    for (order, qty) in [("order-1", 1), ("order-1", 1), ("order-2", 5)] {
        let outcome = store.decrement(&mut conn, "mug", qty, Some(order)).await?;
        say!("  {order} takes {qty}: {outcome:?}");
    }
    say!("  stock now {}", store.stock(&mut conn, "mug").await?);
    let _: () = redis::cmd("DEL")
        .arg(store.key("mug")?)
        .arg(store.request_key("order-1")?)
        .arg(store.request_key("order-2")?)
        .query_async(&mut conn)
        .await?;

    // 4. Locks: a unique owner token, a fencing token, compare-and-delete release.
    let lock = Lock::new().with_manager(manager.clone());
    let resource = format!("demo-report-{run}");
    let options = LockOptions::new().fencing(true).ttl(Duration::from_secs(5));
    say!("\nlock on {resource}:");
    if let Acquire::Acquired(guard) = lock.try_acquire(&mut conn, &resource, &options).await? {
        if let Some(token) = guard.fencing_token() {
            say!("  acquired, fencing token {token}");
        }
        let second = lock.try_acquire(&mut conn, &resource, &options).await?;
        say!(
            "  a second caller gets: {}",
            if matches!(second, Acquire::Busy { .. }) {
                "busy"
            } else {
                "?"
            }
        );
        say!("  release: {:?}", lock.release(&mut conn, guard).await?);
    }
    let _: () = redis::cmd("DEL")
        .arg(lock.fence_key(&resource)?)
        .query_async(&mut conn)
        .await?;

    say!(
        "\nNOSCRIPT fallbacks: {} (one per script the server had not cached yet)",
        manager.stats().noscript_fallbacks
    );
    Ok(())
}
