#![doc = include_str!("lib.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod connect;
mod error;
mod group_commit;
pub mod inventory;
pub mod keys;
pub mod lock;
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod middleware;
mod padded;
pub mod rate_limit;
pub mod script;
mod telemetry;
pub mod versioned;

pub use error::{Error, Result};
pub use group_commit::GroupCommit;
pub use script::{Call, CallOutcome, Registry, Script, ScriptManager, Stats};

/// Describes every redkit metric to the installed `metrics` recorder (type, unit, help text:
/// a Prometheus exporter's `# HELP` / `# TYPE` lines): all ten of the README's "Metrics and
/// traces" table (the metrics and their labels), the middleware's three only with the `tower`
/// feature, which records them. Each area declares its own list; a test checks that together
/// they are the README's table. Call it once after installing the recorder; metrics are
/// recorded without it too.
///
/// ```
/// // e.g. after metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()
/// redkit::describe_metrics();
/// ```
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub fn describe_metrics() {
    telemetry::catalog::describe();
}

/// A [`NonZeroU32`](std::num::NonZeroU32) from a constant, checked at compile time: what
/// [`Rate`](rate_limit::Rate)'s `const` shorthands and the limiters' costs take, without
/// an `unwrap` (as governor's `nonzero!`). A zero, or a value that is not a constant, does
/// not compile; a value known only at run time goes through `NonZeroU32::new`.
///
/// ```
/// use std::num::NonZeroU32;
/// use redkit::nonzero;
///
/// const LIMIT: NonZeroU32 = nonzero!(100);
/// assert_eq!(LIMIT.get(), 100);
/// assert_eq!(nonzero!(1_000).get(), 1_000);
/// ```
///
/// ```compile_fail
/// let zero = redkit::nonzero!(0);
/// ```
#[macro_export]
macro_rules! nonzero {
    ($n:expr) => {
        const {
            match ::core::num::NonZeroU32::new($n) {
                ::core::option::Option::Some(n) => n,
                ::core::option::Option::None => panic!("redkit::nonzero!: the value is zero"),
            }
        }
    };
}

/// The redis-rs version redkit is built on, re-exported so versions always match.
pub use redis;

/// Not public API: what [`embed_scripts!`] expands to needs.
#[doc(hidden)]
pub mod __private {
    pub use include_dir;
}
