//! Demand on one key from several instances of a limiter: tasks checking until told to stop.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redkit::rate_limit::{LimitKey, RateLimiter};

/// An admitted check's call: it was admitted at some instant between these two.
pub type Admission = (Instant, Instant);

/// 32 tasks spread over `instances` (task `t` uses instance and connection `t % n`) checking
/// `key` for `span`, each pausing `pause` after each check: the attempts; each admission's
/// call is pushed to `admitted`.
pub async fn demand<L>(
    instances: &[L],
    conns: &[redis::aio::MultiplexedConnection],
    key: &LimitKey,
    (span, pause): (Duration, Duration),
    admitted: &Arc<Mutex<Vec<Admission>>>,
) -> u64
where
    L: RateLimiter + Clone + Send + Sync + 'static,
{
    let attempted = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for t in 0..32 {
        let limiter = instances[t % instances.len()].clone();
        let mut conn = conns[t % conns.len()].clone();
        let (key, admitted, attempted, stop) = (
            key.clone(),
            admitted.clone(),
            attempted.clone(),
            stop.clone(),
        );
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                attempted.fetch_add(1, Ordering::Relaxed);
                let start = Instant::now();
                if limiter.check(&mut conn, &key).await.unwrap().is_allowed() {
                    admitted.lock().unwrap().push((start, Instant::now()));
                }
                if !pause.is_zero() {
                    tokio::time::sleep(pause).await;
                }
            }
        }));
    }
    tokio::time::sleep(span).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
    attempted.load(Ordering::Relaxed)
}
