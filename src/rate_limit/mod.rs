//! Fixed-window rate limiting shared by every instance of a service.
//!
//! - [`FixedWindow`]: the limiter (one atomic script call per check, batches, reset).
//! - [`LimitKey`]: canonical client identity (IP with IPv6 grouping, or bounded text).
//! - [`Decision`] / [`Quota`]: the outcome of a check.

mod decision;
mod key;
mod window;

pub use decision::{Decision, Quota};
#[allow(unused_imports)]
pub(crate) use key::{canonical, validate_ipv6_prefix};
pub use key::{LimitKey, DEFAULT_IPV6_PREFIX};
pub use window::FixedWindow;
