//! Fixed-window rate limiting shared by every instance of a service.
//!
//! - [`FixedWindow`]: the limiter (one atomic script call per check, batches, reset).
//! - [`LimitKey`]: canonical client identity (IP with IPv6 grouping, or bounded text).
//! - [`Decision`] / [`Quota`]: the outcome of a check.
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

mod decision;
mod key;
mod window;

pub use decision::{Decision, Quota};
#[allow(unused_imports)]
pub(crate) use key::{canonical, validate_ipv6_prefix};
pub use key::{LimitKey, DEFAULT_IPV6_PREFIX};
pub use window::FixedWindow;
