//! The README's recipes are programs, and this test runs them.
//!
//! Every ```` ```rust ```` block of README.md is a complete program (`#[tokio::main] async fn
//! main`) that reads `REDIS_URL` and asserts what it shows. The README is also the crate doc,
//! so the blocks are `no_run` doctests (they compile under `cargo test --doc`); here each one
//! runs against a fresh `redis-server`, so a recipe that compiles but does the wrong thing
//! fails.
//!
//! The blocks are mirrored, verbatim, in the generated module at the end of this file, one
//! module per block. `readme_and_mirror_agree` fails when the README and the mirror differ;
//! `REDKIT_BLESS=1 cargo test --all-features --test readme` rewrites the mirror (then run the
//! test again: the binary that blessed still holds the old copy). Bless only a README whose
//! doctests compile (`cargo test --all-features --doc`); if a blessed mirror does not compile,
//! empty the `recipes` module between the markers (keep an empty `ALL`) and bless again.

mod support;

use std::path::Path;

const README: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md");
const THIS_FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/readme.rs");
const BEGIN: &str = "// @generated README recipes: begin";
const END: &str = "// @generated README recipes: end";
const BLESS: &str = "run REDKIT_BLESS=1 cargo test --all-features --test readme";

/// A recipe's `main`, its error as text (to cross the thread it ran on).
type Recipe = fn() -> Result<(), String>;

/// A ```` ```rust ```` block of the README: the line its code starts on, and the code.
struct Block {
    line: usize,
    code: String,
}

fn rust_blocks(readme: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut open: Option<Block> = None;
    for (i, line) in readme.lines().enumerate() {
        let fence = line.trim_start().starts_with("```");
        match open.as_mut() {
            None if fence => {
                let info = line.trim_start().trim_start_matches('`');
                let lang = info.split(',').next().unwrap_or("").trim();
                if lang == "rust" {
                    open = Some(Block {
                        line: i + 2,
                        code: String::new(),
                    });
                } else {
                    // Skip to the end of a block in another language.
                    open = Some(Block {
                        line: 0,
                        code: String::new(),
                    });
                }
            }
            None => {}
            Some(_) if fence => {
                let block = open.take().unwrap();
                if block.line != 0 {
                    blocks.push(block);
                }
            }
            Some(block) => {
                block.code.push_str(line);
                block.code.push('\n');
            }
        }
    }
    assert!(open.is_none(), "README.md: a code block is not closed");
    blocks
}

/// The generated module for `blocks`, from the `BEGIN` line to the `END` line.
fn mirror(blocks: &[Block]) -> String {
    let mut out = String::new();
    out.push_str(BEGIN);
    out.push_str(" (written by REDKIT_BLESS=1; do not edit)\n");
    out.push_str("#[rustfmt::skip]\nmod recipes {\n");
    for (i, block) in blocks.iter().enumerate() {
        // No README line numbers here: prose edits above a block need no bless.
        out.push_str(&format!(
            "/// README.md's rust block {}.\nmod recipe_{:02} {{\n",
            i + 1,
            i + 1
        ));
        out.push_str(&block.code);
        out.push_str(
            "pub(super) fn run() -> Result<(), String> {\n    main().map_err(|e| e.to_string())\n}\n}\n",
        );
    }
    out.push_str("/// Each recipe's `main`, in README order.\n");
    out.push_str("pub(super) const ALL: &[super::Recipe] = &[\n");
    for i in 0..blocks.len() {
        out.push_str(&format!("    recipe_{:02}::run,\n", i + 1));
    }
    out.push_str("];\n}\n");
    out.push_str(END);
    out.push('\n');
    out
}

/// The generated region of this file, `BEGIN` to `END` inclusive, and where it is.
fn generated_region(text: &str) -> (usize, usize) {
    // At the start of a line (the constants above hold the same text after a quote).
    let from = text
        .find(&format!("\n{BEGIN}"))
        .expect("tests/readme.rs has the BEGIN marker")
        + 1;
    let end = text[from..]
        .find(&format!("\n{END}"))
        .expect("and the END marker")
        + from
        + 1;
    let to = text[end..].find('\n').map_or(text.len(), |n| end + n + 1);
    (from, to)
}

#[test]
fn readme_and_mirror_agree() {
    let readme = std::fs::read_to_string(README).unwrap();
    let blocks = rust_blocks(&readme);
    assert!(!blocks.is_empty(), "README.md has no rust block");
    // Every block is a program the user can copy as shown: no hidden lines, the re-export.
    for block in &blocks {
        for (n, line) in block.code.lines().enumerate() {
            let t = line.trim_start();
            assert!(
                !(t == "#" || t.starts_with("# ")),
                "README.md line {}: a rustdoc hidden line shows literally on the page: {line}",
                block.line + n
            );
            let bare = line
                .match_indices("redis::")
                .any(|(at, _)| !line[..at].ends_with("redkit::"));
            assert!(
                !bare,
                "README.md line {}: use redkit::redis, not a bare redis:: path: {line}",
                block.line + n
            );
        }
        assert!(
            block.code.contains("#[tokio::main]") && block.code.contains("async fn main()"),
            "README.md line {}: a recipe is a complete program (#[tokio::main] async fn main)",
            block.line
        );
        assert!(
            block.code.contains("REDIS_URL"),
            "README.md line {}: a recipe reads REDIS_URL",
            block.line
        );
    }
    let this = std::fs::read_to_string(THIS_FILE).unwrap();
    let (from, to) = generated_region(&this);
    let expected = mirror(&blocks);
    if this[from..to] == expected {
        return;
    }
    if std::env::var_os("REDKIT_BLESS").is_some() {
        let text = format!("{}{}{}", &this[..from], expected, &this[to..]);
        std::fs::write(Path::new(THIS_FILE), text).unwrap();
        eprintln!("tests/readme.rs: mirror rewritten from README.md; run the test again");
        return;
    }
    panic!(
        "README.md's rust blocks and the mirror in tests/readme.rs differ: {BLESS} (then run it \
         again without REDKIT_BLESS to run the new recipes)"
    );
}

/// Each recipe's `main`, against a fresh server of its own, one after another (`REDIS_URL` is
/// process-wide, and this is the only test that sets or reads it).
#[test]
fn every_recipe_runs() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let readme = std::fs::read_to_string(README).unwrap();
    let lines: Vec<usize> = rust_blocks(&readme).iter().map(|b| b.line).collect();
    assert_eq!(lines.len(), recipes::ALL.len(), "{BLESS}");
    let mut failures = Vec::new();
    for (&line, &run) in lines.iter().zip(recipes::ALL) {
        let server = runtime.block_on(support::RedisServer::spawn());
        std::env::set_var("REDIS_URL", server.url());
        // Each recipe builds its own runtime (`#[tokio::main]`): a thread outside this one.
        let outcome = std::thread::spawn(run).join();
        match outcome {
            Ok(Ok(())) => eprintln!("README.md line {line}: recipe ran"),
            Ok(Err(e)) => failures.push(format!("README.md line {line}: returned an error: {e}")),
            Err(panic) => {
                let what = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_default();
                failures.push(format!("README.md line {line}: panicked: {what}"));
            }
        }
        drop(server);
    }
    assert!(
        failures.is_empty(),
        "README recipes failed:\n{}",
        failures.join("\n")
    );
}

// @generated README recipes: begin (written by REDKIT_BLESS=1; do not edit)
#[rustfmt::skip]
mod recipes {
/// README.md's rust block 1.
mod recipe_01 {
use redkit::nonzero;
use redkit::rate_limit::{Decision, FixedWindow, LimitKey, Rate};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let client = redkit::redis::Client::open(url)?;
    let mut conn = client.get_multiplexed_async_connection().await?;

    // nonzero!: a limit of 0 does not compile (as governor's Quota)
    let limiter = FixedWindow::new("quickstart", Rate::per_minute(nonzero!(3)))?;
    let user = LimitKey::text("user-42")?;
    limiter.reset(&mut conn, &user).await?; // a fresh count, so this runs twice in a minute

    for left in [2, 1, 0] {
        match limiter.check(&mut conn, &user).await? {
            Decision::Allowed(quota) => assert_eq!(quota.remaining(), left),
            other => panic!("expected Allowed, got {other:?}"),
        }
    }
    match limiter.check(&mut conn, &user).await? {
        Decision::Limited { retry_after, .. } => println!("4th refused, retry in {retry_after:?}"),
        other => panic!("expected Limited, got {other:?}"),
    }
    Ok(())
}
pub(super) fn run() -> Result<(), String> {
    main().map_err(|e| e.to_string())
}
}
/// README.md's rust block 2.
mod recipe_02 {
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use axum::{routing::get, Router};
use redkit::nonzero;
use redkit::connect::{self, Timeouts};
use redkit::middleware::{FailMode, RateLimitLayer};
use redkit::rate_limit::{FixedWindow, LimitKey, Rate};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    // A ConnectionManager that reconnects by itself, each call bounded by the timeouts.
    let conn = connect::manager(redkit::redis::Client::open(url)?, Timeouts::default()).await?;

    // 3 requests per client IP per minute, shared by every instance of the service.
    let limiter = FixedWindow::new("api", Rate::per_minute(nonzero!(3)))?;
    let localhost = LimitKey::ip(Ipv4Addr::LOCALHOST.into());
    limiter.reset(&mut conn.clone(), &localhost).await?; // a fresh count for this demo

    let layer = RateLimitLayer::builder(limiter, conn)
        .fail_mode(FailMode::Open) // Redis unreachable: let requests through (the default)
        .timeout(Duration::from_millis(250)) // no request waits longer for Redis (the default)
        .build()?;
    let app = Router::new().route("/", get(|| async { "hello" })).layer(layer);

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let service = app.into_make_service_with_connect_info::<SocketAddr>();
    let server = tokio::spawn(async move { axum::serve(listener, service).await });

    let http = reqwest::Client::new();
    for _ in 0..3 {
        let response = http.get(format!("http://{addr}/")).send().await?;
        assert_eq!(response.status(), 200);
        println!("200 {:?}", response.headers()["ratelimit"]); // "api";r=2;t=60 ...
    }
    let refused = http.get(format!("http://{addr}/")).send().await?;
    assert_eq!(refused.status(), 429);
    println!("429, Retry-After: {:?}", refused.headers()["retry-after"]);
    server.abort();
    Ok(())
}
pub(super) fn run() -> Result<(), String> {
    main().map_err(|e| e.to_string())
}
}
/// README.md's rust block 3.
mod recipe_03 {
use std::time::Duration;

use redkit::nonzero;
use redkit::rate_limit::{Gcra, LimitKey, Rate, SlidingWindow};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let mut conn = redkit::redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let user = LimitKey::text("user-42")?;

    // GCRA: 10 per second on average, up to 5 at once.
    let gcra = Gcra::bursting("search", Rate::per_second(nonzero!(10)), nonzero!(5))?;
    gcra.reset(&mut conn, &user).await?;
    for _ in 0..5 {
        assert!(gcra.check(&mut conn, &user).await?.is_allowed());
    }
    let refused = gcra.check(&mut conn, &user).await?;
    let wait = refused.retry_after().expect("the burst is spent");
    assert!(wait <= Duration::from_millis(100)); // at most one emission interval (1 s / 10)
    tokio::time::sleep(wait).await;
    assert!(gcra.check(&mut conn, &user).await?.is_allowed()); // exact: it passes now

    // Sliding window: 5 per minute, whatever the window edges.
    let sliding = SlidingWindow::new("login", Rate::per_minute(nonzero!(5)))?;
    sliding.reset(&mut conn, &user).await?;
    let mut allowed = 0;
    for _ in 0..8 {
        if sliding.check(&mut conn, &user).await?.is_allowed() {
            allowed += 1;
        }
    }
    assert_eq!(allowed, 5);
    Ok(())
}
pub(super) fn run() -> Result<(), String> {
    main().map_err(|e| e.to_string())
}
}
/// README.md's rust block 4.
mod recipe_04 {
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redkit::connect::{self, Timeouts};
use redkit::inventory::{Decrement, Inventory, Order};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let client = redkit::redis::Client::open(url)?;
    let mut conn = connect::multiplexed(&client, Timeouts::default()).await?;

    let inventory = Inventory::builder()
        .prefix("shop:inv")
        .retention(Duration::from_secs(24 * 3600)) // how long a request id is remembered
        .build()?;
    let berlin = inventory.store("berlin")?; // the store id is the hash tag of its keys
    berlin.set(&mut conn, "mug", 10).await?;
    berlin.set(&mut conn, "tee", 1).await?;

    // Your order id; here one per run.
    let order = format!("order-{}", SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos());

    // Retry what may have been applied, with the same id: it deducts once.
    let mut attempts = 0;
    let first = loop {
        attempts += 1;
        match berlin.decrement(&mut conn, "mug", 2, Some(&order)).await {
            Err(e) if connect::may_have_applied(&e) && attempts < 3 => continue,
            outcome => break outcome?,
        }
    };
    assert_eq!(first, Decrement::Decremented { remaining: 8 });

    // The same request again (a redelivered message): answered, not applied.
    let again = berlin.decrement(&mut conn, "mug", 2, Some(&order)).await?;
    assert_eq!(again.original(), Some(&first));
    // The same id for a different request is refused, not applied either.
    let reused = berlin.decrement(&mut conn, "mug", 5, Some(&order)).await?;
    assert_eq!(reused, Decrement::IdReused);
    assert_eq!(berlin.stock(&mut conn, "mug").await?, 8);

    // A whole cart, all or nothing: 1 mug and 2 tees, but 1 tee is left.
    let cart = [berlin.line("mug", 1)?, berlin.line("tee", 2)?];
    let cart_id = format!("{order}-cart");
    match inventory.place_order(&mut conn, &cart, Some(&cart_id)).await? {
        Order::Insufficient { short } => {
            assert_eq!((short[0].sku.as_str(), short[0].available), ("tee", 1));
        }
        other => panic!("expected Insufficient, got {other:?}"),
    }
    assert_eq!(berlin.stock(&mut conn, "mug").await?, 8); // nothing was deducted
    Ok(())
}
pub(super) fn run() -> Result<(), String> {
    main().map_err(|e| e.to_string())
}
}
/// README.md's rust block 5.
mod recipe_05 {
use std::time::Duration;

use redkit::lock::{Acquire, FencedWrite, Lock, LockOptions, WithLock};

type BoxError = Box<dyn std::error::Error>;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let conn = redkit::redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;

    let lock = Lock::new();
    let options = LockOptions::new()
        .ttl(Duration::from_secs(1)) // a crashed holder's lock frees itself after 1 s
        .fencing(true) // a fencing token for the storage it protects
        .retries(30)
        .retry_delay(Duration::from_millis(100));

    let (other, mut other_conn) = (lock.clone(), conn.clone());
    let outcome = lock
        .with_lock(&conn, "nightly-report", &options, |lease| async move {
            // Another instance finds it taken.
            let no_wait = LockOptions::new();
            let busy = other.try_acquire(&mut other_conn, "nightly-report", &no_wait).await?;
            assert!(matches!(busy, Acquire::Busy { .. }));
            // Work for 2.5 leases: the watchdog keeps the lock ours.
            tokio::select! {
                loss = lease.signal().lost() => return Err(format!("lost: {loss:?}").into()),
                _ = tokio::time::sleep(Duration::from_millis(2_500)) => {}
            }
            // A write a newer holder's token would have made stale.
            let token = lease.fencing_token().ok_or("acquired with fencing(true)")?;
            let written = other
                .fenced_set(&mut other_conn, "report:{nightly}", token, "done")
                .await?;
            assert_eq!(written, FencedWrite::Written);
            Ok::<_, BoxError>(token)
        })
        .await?;
    match outcome {
        WithLock::Completed { value, .. } => println!("done, fencing token {}", value?),
        other => panic!("expected Completed, got {other:?}"),
    }
    Ok(())
}
pub(super) fn run() -> Result<(), String> {
    main().map_err(|e| e.to_string())
}
}
/// README.md's rust block 6.
mod recipe_06 {
use std::time::Duration;

use redkit::lock::{Acquire, HeldPermits, LockOptions, Semaphore};
use redkit::versioned::{Cas, Versioned};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let mut conn = redkit::redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;

    // At most 2 encoders at once, across every instance; a crashed one's permit comes back
    // when its 10 s lease ends.
    let semaphore = Semaphore::new();
    let lease = LockOptions::new().ttl(Duration::from_secs(10));
    let mut permits = Vec::new();
    for _ in 0..2 {
        match semaphore.acquire(&mut conn, "video-encode", 2, &lease).await? {
            Acquire::Acquired(permit) => permits.push(permit),
            other => panic!("expected a permit, got {other:?}"),
        }
    }
    let third = semaphore.acquire(&mut conn, "video-encode", 2, &lease).await?;
    assert!(matches!(third, Acquire::Busy(HeldPermits { holders: 2, .. })));
    for permit in permits {
        semaphore.release(&mut conn, permit).await?;
    }

    // Optimistic concurrency: write only if the version is still the one you read.
    let settings = Versioned::new();
    let seen = settings.read(&mut conn, "settings:{app}").await?;
    let next = seen.version + 1;
    let cas = settings.compare_and_set(&mut conn, "settings:{app}", seen.version, b"dark").await?;
    assert_eq!(cas, Cas::Set { version: next });
    // A writer still holding the old version is refused and told the current one.
    let late = settings.compare_and_set(&mut conn, "settings:{app}", seen.version, b"light").await?;
    assert!(matches!(late, Cas::Conflict(current) if current.version == next));
    Ok(())
}
pub(super) fn run() -> Result<(), String> {
    main().map_err(|e| e.to_string())
}
}
/// README.md's rust block 7.
mod recipe_07 {
use redkit::{Call, Registry, ScriptManager};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let mut conn = redkit::redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;

    let scripts = Registry::from_files([(
        "counter_add.v1.lua",
        "--! keys: 1\nreturn redis.call('INCRBY', KEYS[1], ARGV[1])",
    )]);
    assert!(scripts.problems().is_empty());

    let manager = ScriptManager::new(); // cheap to clone; counts NOSCRIPT fallbacks
    let mut call = Call::new(scripts.require("counter_add", 1)?); // EVALSHA encoded once
    call.key("app:{counter}").arg(5);
    let before: i64 = manager.invoke(&mut conn, &call).await?; // EVAL once if not cached
    let after: i64 = manager.invoke(&mut conn, &call).await?; // EVALSHA
    assert_eq!(after - before, 5);
    assert!(manager.stats().noscript_fallbacks <= 1);
    Ok(())
}
pub(super) fn run() -> Result<(), String> {
    main().map_err(|e| e.to_string())
}
}
/// README.md's rust block 8.
mod recipe_08 {
use redkit::nonzero;
use redkit::rate_limit::{FixedWindow, LimitKey, Rate};
use redkit::script::{Backend, Library};
use redkit::{Call, Registry, ScriptManager};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let mut conn = redkit::redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;

    let mine = Registry::from_files([(
        "counter_add.v1.lua",
        "--! keys: 1\nreturn redis.call('INCRBY', KEYS[1], ARGV[1])",
    )]);
    let library = Library::new("myapp", &mine)?; // library myapp_<hash8>
    let manager = ScriptManager::new()
        .with_backend(Backend::Functions)
        .with_library(library);

    // redkit's own components take the manager: the same typed API, sent as FCALL.
    let limiter = FixedWindow::new("api", Rate::per_minute(nonzero!(100)))?.with_manager(manager.clone());
    assert!(limiter.check(&mut conn, &LimitKey::text("user-42")?).await?.is_allowed());

    let mut call = Call::new(mine.require("counter_add", 1)?);
    call.key("app:{counter}").arg(1);
    let _: i64 = manager.invoke(&mut conn, &call).await?; // FCALL myapp_<hash8>_counter_add_v1
    assert!(manager.stats().function_reloads <= 2); // redkit's library and myapp's, once each
    Ok(())
}
pub(super) fn run() -> Result<(), String> {
    main().map_err(|e| e.to_string())
}
}
/// Each recipe's `main`, in README order.
pub(super) const ALL: &[super::Recipe] = &[
    recipe_01::run,
    recipe_02::run,
    recipe_03::run,
    recipe_04::run,
    recipe_05::run,
    recipe_06::run,
    recipe_07::run,
    recipe_08::run,
];
}
// @generated README recipes: end
