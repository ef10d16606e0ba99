//! Rate limiting shared by every instance of a service.
//!
//! - [`FixedWindow`]: counter per window from a client's first hit (one atomic script call
//!   per check, batches, reset); [`AlignedWindow`]: windows aligned to the clock. Both are a
//!   [`Window`]; [`Grouped`] (group commit) wraps either, [`Leased`] (leased quota) the
//!   windows from a first hit (`.grouped(..)`, `.leased(..)`).
//! - [`Gcra`]: smooth, token-bucket semantics (rate and burst), exact retry-after; leases
//!   too (`.leased(..)`).
//! - [`SlidingWindow`]: two-counter weighted sliding window, no clock at all; leases too
//!   (`.leased(..)`).
//! - [`Rate`]: what every limiter is built from (`X::new(name, rate)`): N per period, with a
//!   burst for GCRA.
//! - [`RateLimiter`]: what every algorithm provides; [`Limiter`]: any of them, one type (what
//!   the middleware's policies hold), chosen by [`Algorithm`] in configuration.
//! - Keys: `<prefix>:<name>:{<client>}`, the prefix each algorithm's `DEFAULT_PREFIX`
//!   (`redkit:rl` for both windows, `redkit:gcra`, `redkit:sw`) unless `with_prefix` chooses another.
//! - [`LimitKey`]: canonical client identity (IP with IPv6 grouping, or bounded text).
//! - [`Decision`] / [`Quota`]: the outcome of a check.
//! - [`DenyCache`]: answers clients known to be limited locally, until their reset.
//! - [`QuotaLease`]: the settings of [`Leased`], a shared limit answered in process.
//!
//! ```no_run
//! # async fn run() -> redkit::Result<()> {
//! use redkit::rate_limit::{Decision, FixedWindow, LimitKey, Rate};
//!
//! let client = redis::Client::open("redis://127.0.0.1:6379/")?;
//! let mut conn = client.get_multiplexed_async_connection().await?;
//! let limiter = FixedWindow::new("login", Rate::per_minute(redkit::nonzero!(5)))?;
//! let key = LimitKey::ip("203.0.113.9".parse().unwrap());
//! match limiter.check(&mut conn, &key).await? {
//!     Decision::Allowed(q) => println!("{} left", q.remaining()),
//!     Decision::Limited { retry_after, .. } => println!("retry in {retry_after:?}"),
//!     _ => {}
//! }
//! # Ok(()) }
//! ```

mod basics;
mod decision;
pub(crate) mod deny_cache;
mod gcra;
mod key;
mod key_space;
mod lease;
mod limiter;
mod rate;
mod rate_limiter;
mod reply;
mod sliding;
mod survey;
mod wait;
mod window;

pub use decision::{Decision, Quota};
pub use deny_cache::{DenyCache, DenyCacheStats};
pub use gcra::Gcra;
#[allow(unused_imports)]
pub(crate) use key::{canonical, validate_ipv6_prefix};
pub use key::{LimitKey, DEFAULT_IPV6_PREFIX};
pub use lease::{Leased, QuotaLease};
pub use limiter::{Algorithm, Limiter};
pub use rate::Rate;
pub use rate_limiter::RateLimiter;
pub use sliding::SlidingWindow;
pub use survey::{Busiest, ClientScan};
pub use window::{AlignedWindow, ClockAligned, FirstHit, FixedWindow, Grouped, Window, WindowKind};
