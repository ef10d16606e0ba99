//! A worker that holds a lease with the watchdog and stops cleanly when it is lost.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example lock_lease
//! # in another shell, take the lease away and watch the worker stop:
//! redis-cli DEL 'redkit:lock:{nightly-export}'
//! ```
//!
//! With `LEASE_DEMO_STEAL=1` the example deletes its own lock key after three steps to show
//! the loss being detected. Each step writes its progress with a fenced write, so even a
//! worker that was paused past its lease cannot overwrite a newer holder's progress.

use std::time::Duration;

use redkit::lock::{Acquire, FencedWrite, Held, LeaseLoss, Lock, LockOptions, Release};

const RESOURCE: &str = "nightly-export";
const PROGRESS_KEY: &str = "export:{nightly}:progress";
const STEPS: u32 = 20;

/// Why the worker stopped.
enum Stopped {
    Finished,
    LeaseLost(LeaseLoss),
    Fenced,
    Interrupted,
}

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Finished => f.write_str("all steps done"),
            Self::LeaseLost(LeaseLoss::NotOwner) => f.write_str("lease lost: another owner"),
            Self::LeaseLost(LeaseLoss::Expired) => f.write_str("lease lost: renewals failed"),
            Self::LeaseLost(other) => write!(f, "lease lost: {other:?}"),
            Self::Fenced => f.write_str("a newer fencing token wrote first"),
            Self::Interrupted => f.write_str("interrupted"),
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let steal = std::env::var("LEASE_DEMO_STEAL").is_ok_and(|v| v == "1");
    let client = redis::Client::open(url)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let lock = Lock::new();

    // Fencing is opt-in: this lease hands its token to the storage it writes.
    let options = LockOptions::new()
        .fencing(true)
        .ttl(Duration::from_secs(3))
        .retries(100)
        .retry_delay(Duration::from_millis(200))
        .jitter(Duration::from_millis(100))
        .max_wait(Duration::from_secs(30));
    let mut guard = match lock.acquire(&mut conn, RESOURCE, &options).await? {
        Acquire::Acquired(guard) => guard,
        Acquire::Busy(Held {
            ttl: holder_ttl, ..
        }) => {
            println!("another worker holds {RESOURCE} (for {holder_ttl:?}); exiting");
            return Ok(());
        }
        other => return Err(format!("unexpected outcome {other:?}").into()),
    };
    let fence = guard
        .fencing_token()
        .ok_or("acquired with fencing(true): a token is issued")?;
    println!("acquired {RESOURCE} with fencing token {fence}");

    // The watchdog renews the 3 s lease every second over its own connection.
    let lost = lock.watch(&conn, &mut guard)?;

    let mut stopped = Stopped::Finished;
    for step in 1..=STEPS {
        tokio::select! {
            loss = lost.lost() => { stopped = Stopped::LeaseLost(loss); break; }
            _ = tokio::signal::ctrl_c() => { stopped = Stopped::Interrupted; break; }
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
        let progress = format!("step {step}/{STEPS}");
        match lock
            .fenced_set(&mut conn, PROGRESS_KEY, fence, &progress)
            .await?
        {
            FencedWrite::Written => println!("{progress} (lease valid for {:?})", guard.validity()),
            FencedWrite::Stale { newer } => {
                println!("token {newer} has written since: we are stale");
                stopped = Stopped::Fenced;
                break;
            }
            _ => {}
        }
        if steal && step == 3 {
            println!("demo: deleting the lock key behind the watchdog's back");
            let _: i64 = redis::cmd("DEL")
                .arg(guard.key())
                .query_async(&mut conn)
                .await?;
        }
    }

    // Release stops the watchdog; NotOwner means the lease had already gone.
    let released = lock.release(&mut conn, guard).await?;
    match (&stopped, released) {
        (Stopped::Finished, Release::Released) => println!("done, lock released"),
        (why, release) => println!("stopped early ({why}); release: {release:?}"),
    }
    Ok(())
}
