//! The catalog of every metric: each area's list, gathered in one place above them (the areas
//! declare their metrics with [`metric`](super::metric)'s machinery; nothing there reads them
//! back, so no area and the machinery import each other in a loop).

// Without the feature nothing is described: the catalog goes unused.
#![cfg_attr(not(feature = "metrics"), allow(dead_code))]

use super::metric::Description;
#[cfg(feature = "metrics")]
use super::metric::{Kind, Unit};

/// Every area's metrics: what [`describe`] describes (the middleware's with feature `tower`,
/// where they are recorded).
pub(crate) fn all() -> impl Iterator<Item = &'static Description> {
    let lists: [&[Description]; 5] = [
        super::script_metrics::METRICS,
        crate::group_commit::metrics::METRICS,
        crate::rate_limit::deny_cache::metrics::METRICS,
        crate::lock::metrics::METRICS,
        crate::inventory::metrics::METRICS,
    ];
    #[cfg(feature = "tower")]
    let middleware = crate::middleware::metrics::METRICS;
    #[cfg(not(feature = "tower"))]
    let middleware: &[Description] = &[];
    lists.into_iter().flatten().chain(middleware)
}

/// Describes every metric to the installed recorder (type, unit, help text), e.g. for the
/// `# HELP` / `# TYPE` lines of a Prometheus exporter: each area's list ([`all`]). Call it
/// once after installing the recorder; recording works without it.
#[cfg(feature = "metrics")]
pub(crate) fn describe() {
    for description in all() {
        let &Description {
            name,
            kind,
            unit,
            help,
        } = description;
        let unit = match unit {
            Unit::Count => metrics::Unit::Count,
            Unit::Seconds => metrics::Unit::Seconds,
        };
        match kind {
            Kind::Counter => metrics::describe_counter!(name, unit, help),
            Kind::Gauge => metrics::describe_gauge!(name, unit, help),
            Kind::Histogram => metrics::describe_histogram!(name, unit, help),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_is_described_once() {
        let mut names: Vec<&str> = all().map(|d| d.name).collect();
        let count = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), count, "a metric described twice: {names:?}");
        let expected = if cfg!(feature = "tower") { 10 } else { 7 };
        assert_eq!(count, expected, "{names:?}");
    }
}
