//! Policies: which limiter applies to which route, loadable with serde.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::rate_limit::FixedWindow;

/// One limit as configuration: a name (its counters are its own), a limit and a window.
///
/// ```
/// use redkit::middleware::PolicySpec;
/// let spec: PolicySpec = serde_json::from_str(r#"{"name":"api","limit":100,"window_ms":60000}"#).unwrap();
/// assert_eq!(spec, PolicySpec::new("api", 100, std::time::Duration::from_secs(60)));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySpec {
    name: String,
    limit: u32,
    window_ms: u64,
}

impl PolicySpec {
    /// `limit` units per `window` (validated when the policies are built).
    ///
    /// ```
    /// let spec = redkit::middleware::PolicySpec::new("login", 5, std::time::Duration::from_secs(60));
    /// # let _ = spec;
    /// ```
    pub fn new(name: impl Into<String>, limit: u32, window: Duration) -> Self {
        Self {
            name: name.into(),
            limit,
            window_ms: u64::try_from(window.as_millis()).unwrap_or(u64::MAX),
        }
    }

    fn build(&self) -> Result<FixedWindow> {
        FixedWindow::new(
            &self.name,
            self.limit,
            Duration::from_millis(self.window_ms),
        )
    }
}

/// A route override: requests whose path is `path` or lies below it (`/api` matches `/api`
/// and `/api/x`, not `/apix`) use `policy`. The longest matching path wins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RouteSpec {
    path: String,
    name: String,
    limit: u32,
    window_ms: u64,
}

/// Serde-loadable policy set: a default policy and per-route overrides.
///
/// TOML:
/// ```
/// use redkit::middleware::{PolicyConfig, Policies};
/// let config: PolicyConfig = toml::from_str(r#"
///     [default]
///     name = "default"
///     limit = 100
///     window_ms = 60000
///
///     [[routes]]
///     path = "/login"
///     name = "login"
///     limit = 5
///     window_ms = 60000
/// "#).unwrap();
/// let policies = Policies::from_config(&config)?;
/// assert_eq!(policies.for_path("/login").limit(), 5);
/// assert_eq!(policies.for_path("/other").limit(), 100);
/// # Ok::<(), redkit::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    default: PolicySpec,
    #[serde(default)]
    routes: Vec<RouteSpec>,
}

impl PolicyConfig {
    /// A configuration with only a default policy.
    ///
    /// ```
    /// use redkit::middleware::{PolicyConfig, PolicySpec};
    /// use std::time::Duration;
    /// let config = PolicyConfig::new(PolicySpec::new("default", 100, Duration::from_secs(60)))
    ///     .route("/login", PolicySpec::new("login", 5, Duration::from_secs(60)));
    /// # let _ = config;
    /// ```
    pub fn new(default: PolicySpec) -> Self {
        Self {
            default,
            routes: Vec::new(),
        }
    }

    /// Adds a route override.
    ///
    /// ```
    /// # use redkit::middleware::{PolicyConfig, PolicySpec};
    /// # use std::time::Duration;
    /// let config = PolicyConfig::new(PolicySpec::new("d", 100, Duration::from_secs(1)))
    ///     .route("/upload", PolicySpec::new("upload", 2, Duration::from_secs(1)));
    /// # let _ = config;
    /// ```
    pub fn route(mut self, path: impl Into<String>, policy: PolicySpec) -> Self {
        self.routes.push(RouteSpec {
            path: path.into(),
            name: policy.name,
            limit: policy.limit,
            window_ms: policy.window_ms,
        });
        self
    }
}

/// Built policies: the default limiter and route overrides, ready for the layer.
///
/// ```
/// use std::time::Duration;
/// use redkit::{middleware::Policies, rate_limit::FixedWindow};
/// let policies = Policies::new(FixedWindow::new("default", 100, Duration::from_secs(60))?)
///     .route("/login", FixedWindow::new("login", 5, Duration::from_secs(60))?)?;
/// assert_eq!(policies.for_path("/login/otp").name(), "login");
/// # Ok::<(), redkit::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Policies {
    default: FixedWindow,
    /// Longest path first.
    routes: Vec<(String, FixedWindow)>,
}

impl Policies {
    /// One limiter for every route.
    ///
    /// ```
    /// # use std::time::Duration;
    /// use redkit::{middleware::Policies, rate_limit::FixedWindow};
    /// let p = Policies::new(FixedWindow::new("api", 10, Duration::from_secs(1))?);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn new(default: FixedWindow) -> Self {
        Self {
            default,
            routes: Vec::new(),
        }
    }

    /// Uses `limiter` for `path` and everything below it. Errors: a path not starting with
    /// `/`, a path given twice, or a limiter name reused with another limit or window
    /// (names may be shared on purpose, to share one counter between routes).
    ///
    /// ```
    /// # use std::time::Duration;
    /// use redkit::{middleware::Policies, rate_limit::FixedWindow};
    /// let p = Policies::new(FixedWindow::new("api", 10, Duration::from_secs(1))?);
    /// assert!(p.route("login", FixedWindow::new("l", 1, Duration::from_secs(1))?).is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn route(mut self, path: impl Into<String>, limiter: FixedWindow) -> Result<Self> {
        let path = path.into();
        if !path.starts_with('/') {
            return Err(Error::invalid(
                "route",
                format!("path must start with '/': {path:?}"),
            ));
        }
        let path = if path.len() > 1 {
            path.trim_end_matches('/').to_owned()
        } else {
            path
        };
        if self.routes.iter().any(|(p, _)| *p == path) {
            return Err(Error::invalid(
                "route",
                format!("path given twice: {path:?}"),
            ));
        }
        let clash = std::iter::once(&self.default)
            .chain(self.routes.iter().map(|(_, l)| l))
            .any(|l| {
                l.name() == limiter.name()
                    && (l.limit() != limiter.limit() || l.window() != limiter.window())
            });
        if clash {
            return Err(Error::invalid(
                "route",
                format!(
                    "limiter name {:?} is used with another limit or window",
                    limiter.name()
                ),
            ));
        }
        self.routes.push((path, limiter));
        self.routes.sort_by_key(|r| std::cmp::Reverse(r.0.len()));
        Ok(self)
    }

    /// Builds the limiters of a [`PolicyConfig`], validating every entry.
    ///
    /// ```
    /// use redkit::middleware::{PolicyConfig, Policies};
    /// let bad: PolicyConfig = serde_json::from_str(
    ///     r#"{"default":{"name":"d","limit":0,"window_ms":1000}}"#).unwrap();
    /// assert!(Policies::from_config(&bad).is_err());
    /// ```
    pub fn from_config(config: &PolicyConfig) -> Result<Self> {
        let mut policies = Self::new(config.default.build()?);
        for route in &config.routes {
            let limiter = FixedWindow::new(
                &route.name,
                route.limit,
                Duration::from_millis(route.window_ms),
            )?;
            policies = policies.route(route.path.clone(), limiter)?;
        }
        Ok(policies)
    }

    /// The limiter for a request path.
    ///
    /// ```
    /// # use std::time::Duration;
    /// use redkit::{middleware::Policies, rate_limit::FixedWindow};
    /// let p = Policies::new(FixedWindow::new("api", 10, Duration::from_secs(1))?);
    /// assert_eq!(p.for_path("/anything").name(), "api");
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn for_path(&self, path: &str) -> &FixedWindow {
        self.routes
            .iter()
            .find(|(p, _)| {
                p == "/"
                    || path == p
                    || (path.starts_with(p.as_str()) && path.as_bytes().get(p.len()) == Some(&b'/'))
            })
            .map(|(_, l)| l)
            .unwrap_or(&self.default)
    }
}

impl Policies {
    /// Every limiter (default first), each once per name.
    pub(crate) fn limiters(&self) -> impl Iterator<Item = &FixedWindow> {
        std::iter::once(&self.default).chain(self.routes.iter().map(|(_, l)| l))
    }
}

impl From<FixedWindow> for Policies {
    fn from(limiter: FixedWindow) -> Self {
        Self::new(limiter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fw(name: &str, limit: u32) -> FixedWindow {
        FixedWindow::new(name, limit, Duration::from_secs(1)).unwrap()
    }

    #[test]
    fn longest_segment_prefix_wins() {
        let p = Policies::new(fw("d", 1))
            .route("/api", fw("api", 2))
            .unwrap()
            .route("/api/upload/", fw("up", 3))
            .unwrap();
        assert_eq!(p.for_path("/api").name(), "api");
        assert_eq!(p.for_path("/api/x").name(), "api");
        assert_eq!(p.for_path("/apix").name(), "d");
        assert_eq!(p.for_path("/api/upload").name(), "up");
        assert_eq!(p.for_path("/api/upload/big").name(), "up");
        assert_eq!(p.for_path("/").name(), "d");
    }

    #[test]
    fn rejects_bad_routes() {
        let p = Policies::new(fw("d", 1));
        assert!(p.clone().route("/x", fw("d", 2)).is_err());
        assert!(p.clone().route("/x", fw("d", 1)).is_ok());
        assert!(p
            .clone()
            .route("/x", fw("a", 1))
            .unwrap()
            .route("/x/", fw("b", 1))
            .is_err());
    }

    #[test]
    fn json_round_trip() {
        let c = PolicyConfig::new(PolicySpec::new("d", 10, Duration::from_secs(1)))
            .route("/a", PolicySpec::new("a", 1, Duration::from_millis(300)));
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(serde_json::from_str::<PolicyConfig>(&json).unwrap(), c);
        let p = Policies::from_config(&c).unwrap();
        assert_eq!(p.for_path("/a").window(), Duration::from_millis(300));
        assert!(serde_json::from_str::<PolicyConfig>(
            r#"{"default":{"name":"d","limit":1,"window_ms":1,"x":1}}"#
        )
        .is_err());
    }
}
