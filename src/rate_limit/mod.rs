//! Rate limiting shared by every instance of a service.
//!
//! - [`FixedWindow`]: counter per window (one atomic script call per check, batches, reset).
//! - [`Gcra`]: smooth, token-bucket semantics (rate and burst), exact retry-after.
//! - [`SlidingWindow`]: two-counter weighted sliding window, no clock at all.
//! - [`Limiter`]: any of them, one type (what the middleware's policies hold).
//! - [`LimitKey`]: canonical client identity (IP with IPv6 grouping, or bounded text).
//! - [`Decision`] / [`Quota`]: the outcome of a check.
//! - [`DenyCache`]: answers clients known to be limited locally, until their reset.
//!
//! ```no_run
//! # async fn run() -> redkit::Result<()> {
//! use std::time::Duration;
//! use redkit::rate_limit::{Decision, FixedWindow, LimitKey};
//!
//! let client = redis::Client::open("redis://127.0.0.1:6379/")?;
//! let mut conn = client.get_multiplexed_async_connection().await?;
//! let limiter = FixedWindow::new("login", 5, Duration::from_secs(60))?;
//! let key = LimitKey::ip("203.0.113.9".parse().unwrap());
//! match limiter.check(&mut conn, &key).await? {
//!     Decision::Allowed(q) => println!("{} left", q.remaining()),
//!     Decision::Limited { retry_after, .. } => println!("retry in {retry_after:?}"),
//!     _ => {}
//! }
//! # Ok(()) }
//! ```

mod aligned;
mod decision;
mod deny_cache;
mod gcra;
mod key;
mod limiter;
mod reply;
mod sliding;
mod window;
mod window_group;

pub use decision::{Decision, Quota};
pub use deny_cache::{DenyCache, DenyCacheStats};
pub use gcra::Gcra;
#[allow(unused_imports)]
pub(crate) use key::{canonical, validate_ipv6_prefix};
pub use key::{LimitKey, DEFAULT_IPV6_PREFIX};
pub use limiter::Limiter;
pub use sliding::SlidingWindow;
pub use window::FixedWindow;

/// `DEL key`: whether it existed (the `reset` of every limiter); the key's entry in `cache`,
/// if any, is forgotten too.
async fn delete<C: redis::aio::ConnectionLike>(
    conn: &mut C,
    key: String,
    cache: Option<&DenyCache>,
) -> crate::Result<bool> {
    let deleted: i64 = redis::cmd("DEL").arg(&key).query_async(conn).await?;
    if let Some(cache) = cache {
        cache.forget(&key);
    }
    Ok(deleted > 0)
}
