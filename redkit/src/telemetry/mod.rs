//! What redkit reports about its own work, in the ecosystem's conventions: a `tracing` span per
//! Redis round trip in OpenTelemetry's database-client shape ([`round_trip`]), and with the
//! `metrics` feature, metrics through the [`metrics`](https://docs.rs/metrics) facade: the
//! machinery every area shares ([`metric`]), the catalog of every metric that describes them
//! ([`catalog`]), and the
//! round trips' own metrics ([`script_metrics`]). Each other area declares its metrics next to
//! its code, in a `metrics` module of its own. Names, types, labels and units: the README's
//! "Metrics and traces" table.
//!
//! Without the `metrics` feature every recording function here is empty and compiles away.
//! Labels never carry a key, a client address or a SKU: only names that come from code or
//! configuration (script ids, limiter names, outcomes), so their number stays bounded.

pub(crate) mod catalog;
pub(crate) mod metric;
pub(crate) mod round_trip;
pub(crate) mod script_metrics;
