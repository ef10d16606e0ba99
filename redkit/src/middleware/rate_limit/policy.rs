//! Policies: which limiter applies to which route, loadable with serde.

use std::num::NonZeroU32;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::group_commit::GroupCommit;
use crate::keys::Prefix;
use crate::middleware::access::AccessList;
use crate::rate_limit::{Algorithm, DenyCache, Gcra, Limiter, QuotaLease, Rate, RateLimiter};

/// Whether `algorithm` is the default one (left out when written).
fn is_default(algorithm: &Algorithm) -> bool {
    *algorithm == Algorithm::default()
}

/// One limit as configuration: a name (its counters are its own), a limit, a window and the
/// algorithm (fixed window unless `algorithm` says otherwise; `burst` only for GCRA), the
/// [`Rate`] of the limiter it becomes.
///
/// ```
/// use redkit::middleware::PolicySpec;
/// use redkit::rate_limit::{Algorithm, Rate};
/// let spec: PolicySpec = serde_json::from_str(r#"{"name":"api","limit":100,"window_ms":60000}"#).unwrap();
/// assert_eq!(spec, PolicySpec::new("api", Rate::per_minute(redkit::nonzero!(100))));
/// let gcra: PolicySpec = toml::from_str(r#"
///     name = "api"
///     limit = 10
///     window_ms = 1000
///     algorithm = "gcra"
///     burst = 20
/// "#).unwrap();
/// let burst = redkit::nonzero!(20);
/// assert_eq!(gcra, PolicySpec::new("api", Rate::per_second(redkit::nonzero!(10))).algorithm(Algorithm::Gcra).burst(burst));
/// # Ok::<(), redkit::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySpec {
    name: String,
    limit: NonZeroU32,
    window_ms: u64,
    #[serde(default, skip_serializing_if = "is_default")]
    algorithm: Algorithm,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    burst: Option<NonZeroU32>,
    #[serde(default, skip_serializing_if = "is_false")]
    shadow: bool,
}

/// Whether a flag is off (left out when written).
fn is_false(flag: &bool) -> bool {
    !flag
}

impl PolicySpec {
    /// `rate` with a fixed window.
    ///
    /// ```
    /// use redkit::{middleware::PolicySpec, rate_limit::Rate};
    /// let spec = PolicySpec::new("login", Rate::per_minute(redkit::nonzero!(5)));
    /// # let _ = spec; Ok::<(), redkit::Error>(())
    /// ```
    pub fn new(name: impl Into<String>, rate: Rate) -> Self {
        Self {
            name: name.into(),
            limit: rate.limit_nonzero(),
            window_ms: u64::try_from(rate.period().as_millis()).unwrap_or(u64::MAX),
            algorithm: Algorithm::default(),
            burst: None,
            shadow: false,
        }
    }

    /// Runs the policy in **shadow mode** (TOML / JSON: `shadow = true`): requests are
    /// counted and get the `RateLimit` headers as if it were enforced, but it never refuses;
    /// a request it would have refused reaches the handler with
    /// [`LimitOutcome::WouldLimit`](crate::middleware::LimitOutcome::WouldLimit) and is counted as
    /// `shadow_limited` (see [`Policies::shadow`]). Try a limit on live traffic, then remove
    /// the flag to enforce it with the counters it already has.
    ///
    /// ```
    /// use redkit::middleware::{Policies, PolicyConfig, PolicySpec};
    /// use redkit::rate_limit::Rate;
    /// let spec = PolicySpec::new("search", Rate::per_second(redkit::nonzero!(10))).shadow();
    /// let policies = Policies::from_config(&PolicyConfig::new(spec))?;
    /// assert!(policies.is_shadow("search"));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn shadow(mut self) -> Self {
        self.shadow = true;
        self
    }

    /// A bucket of `burst` units (TOML / JSON: `burst = 20`): only GCRA has one, so the
    /// policies refuse it on another algorithm when they are built
    /// ([`Error::UnsupportedOption`]).
    ///
    /// ```
    /// use std::num::NonZeroU32;
    /// use redkit::middleware::{Policies, PolicyConfig, PolicySpec};
    /// use redkit::rate_limit::{Algorithm, Rate};
    /// let spec = PolicySpec::new("api", Rate::per_second(redkit::nonzero!(10))).burst(redkit::nonzero!(20));
    /// assert!(Policies::from_config(&PolicyConfig::new(spec.clone())).is_err());
    /// let gcra = Policies::from_config(&PolicyConfig::new(spec.algorithm(Algorithm::Gcra)))?;
    /// assert_eq!(gcra.for_path("/").limit(), 20);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn burst(mut self, burst: NonZeroU32) -> Self {
        self.burst = Some(burst);
        self
    }

    /// Uses `algorithm` instead of the fixed window.
    ///
    /// ```
    /// use redkit::{middleware::PolicySpec, rate_limit::{Algorithm, Rate}};
    /// let spec = PolicySpec::new("api", Rate::per_minute(redkit::nonzero!(100))).algorithm(Algorithm::SlidingWindow);
    /// # let _ = spec; Ok::<(), redkit::Error>(())
    /// ```
    pub fn algorithm(mut self, algorithm: Algorithm) -> Self {
        self.algorithm = algorithm;
        self
    }

    /// The limiter of this policy, under `prefix` when given (else its algorithm's default),
    /// with the file's `options`. An option the algorithm cannot honour is
    /// [`Error::UnsupportedOption`].
    fn build(&self, prefix: Option<&Prefix>, options: Options) -> Result<Limiter> {
        let unsupported = |option, reason| Error::UnsupportedOption {
            policy: self.name.clone(),
            option,
            algorithm: self.algorithm,
            reason,
        };
        let rate = Rate::new(self.limit, Duration::from_millis(self.window_ms))?;
        let limiter = match (self.burst, self.algorithm) {
            (None, algorithm) => Limiter::new(algorithm, &self.name, rate)?,
            (Some(burst), Algorithm::Gcra) => Gcra::bursting(&self.name, rate, burst)?.into(),
            (Some(_), _) => {
                return Err(unsupported(
                    "burst",
                    "only gcra has a burst (a window allows its limit at once)",
                ))
            }
        };
        let limiter = match prefix {
            Some(prefix) => limiter.with_prefix(prefix.clone()),
            None => limiter,
        };
        Ok(match (limiter, options.group_commit, options.lease) {
            (limiter, None, None) => limiter,
            (Limiter::Fixed(f), Some(settings), None) => f.grouped(settings).into(),
            (Limiter::Aligned(a), Some(settings), None) => a.grouped(settings).into(),
            (Limiter::Fixed(f), None, Some(lease)) => f.leased(lease).into(),
            (Limiter::Sliding(s), None, Some(lease)) => s.leased(lease).into(),
            (Limiter::Gcra(g), None, Some(lease)) => g.leased(lease).into(),
            (Limiter::Fixed(_), Some(_), Some(_)) => {
                return Err(unsupported(
                    "group_commit",
                    "a leased window answers its checks from the units held in process, \
                     which group commit cannot group: choose group_commit or lease",
                ))
            }
            (Limiter::Aligned(_), _, Some(_)) => {
                return Err(unsupported(
                    "lease",
                    "leasing needs windows that start at the first hit \
                     (fixed_window, sliding_window)",
                ))
            }
            (_, Some(_), _) => {
                return Err(unsupported(
                    "group_commit",
                    "only the fixed windows (fixed_window, aligned_window) have a group script",
                ))
            }
            (_, None, Some(_)) => {
                return Err(unsupported(
                    "lease",
                    "only fixed_window, sliding_window and gcra have a lease script",
                ))
            }
        })
    }
}

/// The options of a [`PolicyConfig`] every one of its policies gets.
#[derive(Debug, Clone, Copy)]
struct Options {
    group_commit: Option<GroupCommit>,
    lease: Option<QuotaLease>,
}

/// A route override: requests whose path is `path` or lies below it (`/api` matches `/api`
/// and `/api/x`, not `/apix`) use `policy`. The longest matching path wins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RouteSpec {
    path: String,
    name: String,
    limit: NonZeroU32,
    window_ms: u64,
    #[serde(default, skip_serializing_if = "is_default")]
    algorithm: Algorithm,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    burst: Option<NonZeroU32>,
    #[serde(default, skip_serializing_if = "is_false")]
    shadow: bool,
}

impl RouteSpec {
    fn policy(&self) -> PolicySpec {
        PolicySpec {
            name: self.name.clone(),
            limit: self.limit,
            window_ms: self.window_ms,
            algorithm: self.algorithm,
            burst: self.burst,
            shadow: self.shadow,
        }
    }
}

/// Serde-loadable policy set: a default policy and per-route overrides.
///
/// TOML (each entry may set `algorithm`, and `burst` for GCRA):
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
///     algorithm = "sliding_window"
///
///     [[routes]]
///     path = "/search"
///     name = "search"
///     limit = 10
///     window_ms = 1000
///     algorithm = "gcra"
///     burst = 30
/// "#).unwrap();
/// let policies = Policies::from_config(&config)?;
/// assert_eq!(policies.for_path("/login").limit(), 5);
/// assert_eq!(policies.for_path("/search").limit(), 30);
/// assert_eq!(policies.for_path("/other").limit(), 100);
/// # Ok::<(), redkit::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    default: PolicySpec,
    #[serde(default)]
    routes: Vec<RouteSpec>,
    /// One [`DenyCache`] of this many entries for every limiter (none when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    deny_cache_capacity: Option<usize>,
    /// Group commit for every limiter (off when absent): `true` for
    /// [`GroupCommit::for_checks()`], or a table `{ max_batch, max_in_flight }`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "group_commit_setting"
    )]
    group_commit: Option<GroupCommit>,
    /// The key prefix of every limiter (each algorithm's default when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    prefix: Option<String>,
    /// Leased quota for every limiter (off when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lease: Option<QuotaLease>,
    /// Client networks never limited (see [`AccessList`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    allow: Vec<String>,
    /// Client networks always refused (see [`AccessList`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    deny: Vec<String>,
}

/// `group_commit` of a [`PolicyConfig`] file: `true` / `false`, or the two settings (checked
/// by [`GroupCommit::new`] while parsing).
mod group_commit_setting {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::GroupCommit;

    #[derive(Serialize, Deserialize)]
    #[serde(untagged)]
    enum Setting {
        On(bool),
        Settings {
            max_batch: usize,
            max_in_flight: usize,
        },
    }

    pub(super) fn serialize<S: Serializer>(
        value: &Option<GroupCommit>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            None => Setting::On(false),
            Some(g) if *g == GroupCommit::for_checks() => Setting::On(true),
            Some(g) => Setting::Settings {
                max_batch: g.max_batch(),
                max_in_flight: g.max_in_flight(),
            },
        }
        .serialize(serializer)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<GroupCommit>, D::Error> {
        match Setting::deserialize(deserializer)? {
            Setting::On(on) => Ok(on.then(GroupCommit::for_checks)),
            Setting::Settings {
                max_batch,
                max_in_flight,
            } => GroupCommit::new(max_batch, max_in_flight)
                .map(Some)
                .map_err(serde::de::Error::custom),
        }
    }
}

impl PolicyConfig {
    /// A configuration with only a default policy.
    ///
    /// ```
    /// use redkit::middleware::{PolicyConfig, PolicySpec};
    /// use redkit::rate_limit::Rate;
    /// let config = PolicyConfig::new(PolicySpec::new("default", Rate::per_minute(redkit::nonzero!(100))))
    ///     .route("/login", PolicySpec::new("login", Rate::per_minute(redkit::nonzero!(5))));
    /// # let _ = config; Ok::<(), redkit::Error>(())
    /// ```
    pub fn new(default: PolicySpec) -> Self {
        Self {
            default,
            routes: Vec::new(),
            deny_cache_capacity: None,
            group_commit: None,
            prefix: None,
            lease: None,
            allow: Vec::new(),
            deny: Vec::new(),
        }
    }

    /// Adds client networks that are never limited: CIDR networks or single addresses (TOML /
    /// JSON: `allow = ["10.0.0.0/8", "127.0.0.1"]` at the top level), decided before any
    /// Redis call. Validated by [`Policies::from_config`]; the rules: [`AccessList`].
    ///
    /// ```
    /// use redkit::middleware::{Access, Policies, PolicyConfig};
    /// let config: PolicyConfig = toml::from_str(r#"
    ///     allow = ["10.0.0.0/8"]
    ///     deny = ["203.0.113.0/24", "198.51.100.7"]
    ///     [default]
    ///     name = "api"
    ///     limit = 100
    ///     window_ms = 60000
    /// "#).unwrap();
    /// let policies = Policies::from_config(&config)?;
    /// assert_eq!(policies.access().decide("10.1.1.1".parse().unwrap()), Some(Access::Allowed));
    /// assert_eq!(policies.access().decide("198.51.100.7".parse().unwrap()), Some(Access::Denied));
    /// assert!(Policies::from_config(&config.allow(["10.0.0.1/8"])).is_err()); // host bits
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn allow<I: IntoIterator<Item = S>, S: Into<String>>(mut self, networks: I) -> Self {
        self.allow.extend(networks.into_iter().map(Into::into));
        self
    }

    /// Adds client networks that are always refused (`403 Forbidden`, no Redis call): CIDR
    /// networks or single addresses (TOML / JSON: `deny = ["203.0.113.0/24"]`). See
    /// [`allow`](Self::allow).
    ///
    /// ```
    /// use redkit::middleware::{Access, Policies, PolicyConfig, PolicySpec};
    /// use redkit::rate_limit::Rate;
    /// let config = PolicyConfig::new(PolicySpec::new("api", Rate::per_minute(redkit::nonzero!(100))))
    ///     .deny(["203.0.113.0/24"]);
    /// let policies = Policies::from_config(&config)?;
    /// assert_eq!(policies.access().decide("203.0.113.9".parse().unwrap()), Some(Access::Denied));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn deny<I: IntoIterator<Item = S>, S: Into<String>>(mut self, networks: I) -> Self {
        self.deny.extend(networks.into_iter().map(Into::into));
        self
    }

    /// Puts the keys of every limiter under `prefix` (TOML / JSON: `prefix = "app:rl"` at the
    /// top level; 1..=64 bytes of `[A-Za-z0-9_:.-]`, validated by [`Policies::from_config`])
    /// instead of each algorithm's `DEFAULT_PREFIX`.
    ///
    /// ```
    /// use redkit::middleware::{Policies, PolicyConfig};
    /// use redkit::rate_limit::LimitKey;
    /// let config: PolicyConfig = toml::from_str(r#"
    ///     prefix = "app:rl"
    ///     [default]
    ///     name = "api"
    ///     limit = 100
    ///     window_ms = 60000
    /// "#).unwrap();
    /// let policies = Policies::from_config(&config)?;
    /// assert_eq!(policies.for_path("/").redis_key(&LimitKey::text("u")?), "app:rl:api:{k:u}");
    /// assert!(Policies::from_config(&config.prefix("bad prefix")).is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// Group commit for every limiter with `settings` (TOML / JSON at the top
    /// level: `group_commit = true` for [`GroupCommit::for_checks()`], or
    /// `group_commit = { max_batch = 64, max_in_flight = 4 }`): concurrent checks of one
    /// policy are settled by one script call (see [`Grouped`](crate::rate_limit::Grouped) for
    /// what it changes). Only the fixed windows (`fixed_window`, `aligned_window`) group:
    /// [`Policies::from_config`] refuses it for another algorithm, or beside a lease, with
    /// [`Error::UnsupportedOption`].
    ///
    /// ```
    /// use redkit::middleware::{Policies, PolicyConfig, PolicySpec};
    /// use redkit::rate_limit::{Algorithm, Limiter, Rate};
    /// use redkit::GroupCommit;
    /// let config: PolicyConfig = toml::from_str(r#"
    ///     group_commit = true
    ///     [default]
    ///     name = "api"
    ///     limit = 100
    ///     window_ms = 60000
    /// "#).unwrap();
    /// let policies = Policies::from_config(&config)?;
    /// assert!(matches!(policies.for_path("/"),
    ///     Limiter::FixedGrouped(g) if g.group_commit() == GroupCommit::for_checks()));
    /// let built = PolicyConfig::new(PolicySpec::new("api", Rate::per_minute(redkit::nonzero!(100))))
    ///     .with_group_commit(GroupCommit::for_checks());
    /// assert_eq!(built, config);
    /// let gcra = PolicySpec::new("api", Rate::per_minute(redkit::nonzero!(100))).algorithm(Algorithm::Gcra);
    /// let refused = PolicyConfig::new(gcra).with_group_commit(GroupCommit::for_checks());
    /// assert!(matches!(Policies::from_config(&refused),
    ///     Err(redkit::Error::UnsupportedOption { option: "group_commit", .. })));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn with_group_commit(mut self, settings: GroupCommit) -> Self {
        self.group_commit = Some(settings);
        self
    }

    /// Leased quota for every limiter (TOML / JSON at the top level:
    /// `lease = { max_units = 32, instances = 4 }`): see [`Leased`](crate::rate_limit::Leased).
    /// `fixed_window`, `sliding_window` and `gcra` lease: [`Policies::from_config`] refuses it
    /// for `aligned_window`, or beside group commit, with [`Error::UnsupportedOption`].
    ///
    /// ```
    /// use redkit::middleware::{Policies, PolicyConfig};
    /// use redkit::rate_limit::{QuotaLease, Limiter};
    /// let config: PolicyConfig = toml::from_str(r#"
    ///     lease = { max_units = 32, instances = 4 }
    ///     [default]
    ///     name = "api"
    ///     limit = 1000
    ///     window_ms = 1000
    /// "#).unwrap();
    /// let policies = Policies::from_config(&config)?;
    /// assert!(matches!(policies.for_path("/"),
    ///     Limiter::FixedLeased(l) if l.lease() == QuotaLease::new(32)?.instances(4)?));
    /// assert!(toml::from_str::<PolicyConfig>(r#"
    ///     lease = { max_units = 1 }
    ///     [default]
    ///     name = "api"
    ///     limit = 1000
    ///     window_ms = 1000
    /// "#).is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn with_lease(mut self, lease: QuotaLease) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Answers clients known to be limited locally until their reset, with one
    /// [`DenyCache`] of at most `capacity` entries shared by every limiter (TOML / JSON:
    /// `deny_cache_capacity = 100000` at the top level). Validated by
    /// [`Policies::from_config`].
    ///
    /// ```
    /// # use redkit::rate_limit::Rate;
    /// # use redkit::middleware::{Policies, PolicyConfig, PolicySpec};
    /// # use std::time::Duration;
    /// let config = PolicyConfig::new(PolicySpec::new("d", Rate::per_second(redkit::nonzero!(100))))
    ///     .deny_cache_capacity(10_000);
    /// let policies = Policies::from_config(&config)?;
    /// assert!(policies.for_path("/").deny_cache().is_some());
    /// assert!(Policies::from_config(&config.deny_cache_capacity(0)).is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn deny_cache_capacity(mut self, capacity: usize) -> Self {
        self.deny_cache_capacity = Some(capacity);
        self
    }

    /// Adds a route override.
    ///
    /// ```
    /// # use redkit::rate_limit::Rate;
    /// # use redkit::middleware::{PolicyConfig, PolicySpec};
    /// let config = PolicyConfig::new(PolicySpec::new("d", Rate::per_second(redkit::nonzero!(100))))
    ///     .route("/upload", PolicySpec::new("upload", Rate::per_second(redkit::nonzero!(2))));
    /// # let _ = config; Ok::<(), redkit::Error>(())
    /// ```
    pub fn route(mut self, path: impl Into<String>, policy: PolicySpec) -> Self {
        self.routes.push(RouteSpec {
            path: path.into(),
            name: policy.name,
            limit: policy.limit,
            window_ms: policy.window_ms,
            algorithm: policy.algorithm,
            burst: policy.burst,
            shadow: policy.shadow,
        });
        self
    }
}

/// Built policies: the default limiter and route overrides, ready for the layer. Each is a
/// [`Limiter`]: any algorithm, per route.
///
/// ```
/// # use redkit::rate_limit::Rate;
/// use std::time::Duration;
/// use redkit::{middleware::Policies, rate_limit::{FixedWindow, Gcra}};
/// let policies = Policies::new(FixedWindow::new("default", Rate::per_minute(redkit::nonzero!(100)))?)
///     .route("/login", Gcra::new("login", Rate::per_minute(redkit::nonzero!(5)))?)?;
/// assert_eq!(policies.for_path("/login/otp").name(), "login");
/// # Ok::<(), redkit::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Policies {
    default: Limiter,
    /// Longest path first.
    routes: Vec<(String, Limiter)>,
    /// Clients decided on before any Redis call.
    access: AccessList,
    /// The names of the limiters in shadow mode.
    shadow: Vec<String>,
}

impl Policies {
    /// One limiter for every route.
    ///
    /// ```
    /// # use redkit::rate_limit::Rate;
    /// # use std::time::Duration;
    /// use redkit::{middleware::Policies, rate_limit::FixedWindow};
    /// let p = Policies::new(FixedWindow::new("api", Rate::per_second(redkit::nonzero!(10)))?);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn new(default: impl Into<Limiter>) -> Self {
        Self {
            default: default.into(),
            routes: Vec::new(),
            access: AccessList::new(),
            shadow: Vec::new(),
        }
    }

    /// Puts the limiter named `name` (wherever it is used) in **shadow mode**: its checks
    /// count and set the headers as if enforced, but never refuse (see
    /// [`PolicySpec::shadow`]).
    ///
    /// ```
    /// use redkit::middleware::Policies;
    /// use redkit::rate_limit::{FixedWindow, Rate};
    /// let policies = Policies::new(FixedWindow::new("api", Rate::per_second(redkit::nonzero!(10)))?).shadow("api");
    /// assert!(policies.is_shadow("api") && !policies.is_shadow("other"));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn shadow(mut self, name: impl Into<String>) -> Self {
        let name = name.into();
        if !self.shadow.contains(&name) {
            self.shadow.push(name);
        }
        self
    }

    /// Whether the limiter named `name` is in shadow mode.
    ///
    /// ```
    /// use redkit::middleware::Policies;
    /// use redkit::rate_limit::{FixedWindow, Rate};
    /// let policies = Policies::new(FixedWindow::new("api", Rate::per_second(redkit::nonzero!(10)))?);
    /// assert!(!policies.is_shadow("api"));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn is_shadow(&self, name: &str) -> bool {
        self.shadow.iter().any(|n| n == name)
    }

    /// Decides on the clients in `access` before any Redis call: allowed ones pass unchecked,
    /// denied ones get `403 Forbidden` (see [`AccessList`]).
    ///
    /// ```
    /// use redkit::middleware::{Access, AccessList, Policies};
    /// use redkit::rate_limit::{FixedWindow, Rate};
    /// let policies = Policies::new(FixedWindow::new("api", Rate::per_second(redkit::nonzero!(10)))?)
    ///     .with_access(AccessList::parse(["10.0.0.0/8"], ["203.0.113.9"])?);
    /// assert_eq!(policies.access().len(), 2);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn with_access(mut self, access: AccessList) -> Self {
        self.access = access;
        self
    }

    /// The clients decided on before any Redis call (empty unless set).
    ///
    /// ```
    /// use redkit::middleware::Policies;
    /// use redkit::rate_limit::{FixedWindow, Rate};
    /// let policies = Policies::new(FixedWindow::new("api", Rate::per_second(redkit::nonzero!(10)))?);
    /// assert!(policies.access().is_empty());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn access(&self) -> &AccessList {
        &self.access
    }

    /// Uses `limiter` for `path` and everything below it. Errors: a path not starting with
    /// `/`, a path given twice, or a limiter name reused with another algorithm, limit, window
    /// or burst (names may be shared on purpose, to share one counter between routes).
    ///
    /// ```
    /// # use redkit::rate_limit::Rate;
    /// # use std::time::Duration;
    /// use redkit::{middleware::Policies, rate_limit::FixedWindow};
    /// let p = Policies::new(FixedWindow::new("api", Rate::per_second(redkit::nonzero!(10)))?);
    /// assert!(p.route("login", FixedWindow::new("l", Rate::per_second(redkit::nonzero!(1)))?).is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn route(mut self, path: impl Into<String>, limiter: impl Into<Limiter>) -> Result<Self> {
        let path = path.into();
        let limiter = limiter.into();
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
            .any(|l| l.name() == limiter.name() && !l.same_config(&limiter));
        if clash {
            return Err(Error::invalid(
                "route",
                format!(
                    "limiter name {:?} is used with another algorithm, limit or window",
                    limiter.name()
                ),
            ));
        }
        self.routes.push((path, limiter));
        self.routes.sort_by_key(|r| std::cmp::Reverse(r.0.len()));
        Ok(self)
    }

    /// Builds the limiters of a [`PolicyConfig`], validating every entry. An option a
    /// policy's algorithm cannot honour (`group_commit` on GCRA or the sliding window,
    /// `lease` on `aligned_window`, both on one window, `burst` on anything but GCRA)
    /// is [`Error::UnsupportedOption`], never ignored.
    ///
    /// ```
    /// use redkit::middleware::{PolicyConfig, Policies};
    /// let bad: PolicyConfig = serde_json::from_str(
    ///     r#"{"default":{"name":"d","limit":10,"window_ms":0}}"#).unwrap();
    /// assert!(Policies::from_config(&bad).is_err());
    /// ```
    pub fn from_config(config: &PolicyConfig) -> Result<Self> {
        let prefix = config.prefix.as_deref().map(Prefix::new).transpose()?;
        let prefix = prefix.as_ref();
        let options = Options {
            group_commit: config.group_commit,
            lease: config.lease,
        };
        let mut policies = Self::new(config.default.build(prefix, options)?);
        for route in &config.routes {
            let limiter = route.policy().build(prefix, options)?;
            policies = policies.route(route.path.clone(), limiter)?;
        }
        let specs = std::iter::once(config.default.clone())
            .chain(config.routes.iter().map(RouteSpec::policy));
        let specs: Vec<PolicySpec> = specs.collect();
        for spec in &specs {
            let enforced = specs.iter().any(|s| s.name == spec.name && !s.shadow);
            if spec.shadow && enforced {
                return Err(Error::invalid(
                    "shadow",
                    format!(
                        "limiter {:?} is in shadow mode in one place and enforced in another",
                        spec.name
                    ),
                ));
            }
            if spec.shadow {
                policies = policies.shadow(spec.name.clone());
            }
        }
        if let Some(capacity) = config.deny_cache_capacity {
            policies = policies.with_deny_cache(DenyCache::new(capacity)?);
        }
        Ok(policies.with_access(AccessList::parse(&config.allow, &config.deny)?))
    }

    /// The limiter for a request path.
    ///
    /// ```
    /// # use redkit::rate_limit::Rate;
    /// # use std::time::Duration;
    /// use redkit::{middleware::Policies, rate_limit::FixedWindow};
    /// let p = Policies::new(FixedWindow::new("api", Rate::per_second(redkit::nonzero!(10)))?);
    /// assert_eq!(p.for_path("/anything").name(), "api");
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn for_path(&self, path: &str) -> &Limiter {
        self.route_for(path).1
    }
}

impl Policies {
    /// Every limiter in index order ([`route_for`](Self::route_for)): the default, then each
    /// route's (a limiter shared by routes once per route).
    pub(crate) fn limiters(&self) -> impl Iterator<Item = &Limiter> {
        std::iter::once(&self.default).chain(self.routes.iter().map(|(_, l)| l))
    }

    /// The limiter of index `route` ([`route_for`](Self::route_for)); the default for an
    /// index it never gave.
    pub(crate) fn limiter(&self, route: usize) -> &Limiter {
        route
            .checked_sub(1)
            .and_then(|i| self.routes.get(i))
            .map_or(&self.default, |(_, l)| l)
    }

    /// The limiter of `path` ([`for_path`](Self::for_path)) with its index: 0 for the
    /// default, `i + 1` for route `i` (its place in [`limiters`](Self::limiters)).
    pub(crate) fn route_for(&self, path: &str) -> (usize, &Limiter) {
        self.routes
            .iter()
            .position(|(p, _)| {
                p == "/"
                    || path == p
                    || (path.starts_with(p.as_str()) && path.as_bytes().get(p.len()) == Some(&b'/'))
            })
            .map_or((0, &self.default), |i| (i + 1, &self.routes[i].1))
    }

    /// Every fixed-window and GCRA limiter answers from `cache` (keys are full Redis keys: no
    /// clash between them); sliding-window limiters always ask Redis.
    pub(crate) fn with_deny_cache(self, cache: DenyCache) -> Self {
        let attach = |l: Limiter| l.attach_deny_cache(cache.clone());
        Self {
            default: attach(self.default),
            routes: self
                .routes
                .into_iter()
                .map(|(path, l)| (path, attach(l)))
                .collect(),
            access: self.access,
            shadow: self.shadow,
        }
    }
}

impl<L: RateLimiter + Into<Limiter>> From<L> for Policies {
    fn from(limiter: L) -> Self {
        Self::new(limiter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rate_limit::FixedWindow;

    fn fw(name: &str, limit: u32) -> FixedWindow {
        FixedWindow::new(name, Rate::per_second(limit.try_into().unwrap())).unwrap()
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
    fn a_route_index_is_the_place_of_its_limiter_in_limiters() {
        let p = Policies::new(fw("d", 1))
            .route("/api", fw("api", 2))
            .unwrap()
            .route("/api/upload/", fw("up", 3))
            .unwrap();
        for path in ["/", "/api", "/api/x", "/apix", "/api/upload/big"] {
            let (index, limiter) = p.route_for(path);
            assert!(std::ptr::eq(p.limiters().nth(index).unwrap(), limiter));
            assert!(std::ptr::eq(p.for_path(path), limiter), "{path}");
        }
        assert_eq!(p.route_for("/apix").0, 0, "the default");
    }

    #[test]
    fn a_route_for_the_root_path_stays_the_root() {
        let p = Policies::new(fw("d", 1)).route("/", fw("root", 2)).unwrap();
        assert_eq!(p.for_path("/").name(), "root");
        assert_eq!(p.for_path("/anything").name(), "root");
        // The root route is every path, even one that does not start with '/'.
        assert_eq!(p.for_path("no-slash").name(), "root");
    }

    #[test]
    fn the_default_algorithm_is_left_out_when_written() {
        let spec = PolicySpec::new("api", Rate::per_second(crate::nonzero!(10)));
        let json = serde_json::to_value(&spec).unwrap();
        assert!(json.get("algorithm").is_none(), "{json}");
        let json = serde_json::to_value(spec.algorithm(Algorithm::Gcra)).unwrap();
        assert_eq!(json["algorithm"], "gcra");
    }

    #[test]
    fn shadow_is_per_limiter_name_and_never_half() {
        let config: PolicyConfig = toml::from_str(
            r#"
            [default]
            name = "api"
            limit = 10
            window_ms = 1000
            [[routes]]
            path = "/search"
            name = "search"
            limit = 5
            window_ms = 1000
            shadow = true
            "#,
        )
        .unwrap();
        let policies = Policies::from_config(&config).unwrap();
        assert!(policies.is_shadow("search") && !policies.is_shadow("api"));
        let written = toml::to_string(&config).unwrap();
        assert_eq!(written.matches("shadow = true").count(), 1, "{written}");
        // One limiter (one counter) shadowed in one place and enforced in another: refused.
        let half = config.route(
            "/other",
            PolicySpec::new("search", Rate::per_second(crate::nonzero!(5))),
        );
        assert!(Policies::from_config(&half).is_err());
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
    fn algorithms_per_route_from_toml() {
        let c: PolicyConfig = toml::from_str(
            r#"
            default = { name = "d", limit = 10, window_ms = 1000 }
            [[routes]]
            path = "/g"
            name = "g"
            limit = 5
            window_ms = 1000
            algorithm = "gcra"
            burst = 7
            [[routes]]
            path = "/s"
            name = "s"
            limit = 3
            window_ms = 2000
            algorithm = "sliding_window"
            "#,
        )
        .unwrap();
        let p = Policies::from_config(&c).unwrap();
        assert!(matches!(p.for_path("/x"), Limiter::Fixed(_)));
        assert!(
            matches!(p.for_path("/g"), Limiter::Gcra(g) if g.burst() == 7 && g.rate().limit() == 5)
        );
        assert!(matches!(p.for_path("/s"), Limiter::Sliding(_)));
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(serde_json::from_str::<PolicyConfig>(&json).unwrap(), c);
        // burst without gcra, unknown algorithm, a name reused by another algorithm: refused.
        let bad = PolicyConfig::new(
            PolicySpec::new("d", Rate::per_second(crate::nonzero!(1))).burst(NonZeroU32::MIN),
        );
        assert!(Policies::from_config(&bad).is_err());
        assert!(serde_json::from_str::<PolicySpec>(
            r#"{"name":"d","limit":1,"window_ms":1,"algorithm":"leaky"}"#
        )
        .is_err());
        let clash = PolicyConfig::new(PolicySpec::new("d", Rate::per_second(crate::nonzero!(1))))
            .route(
                "/a",
                PolicySpec::new("d", Rate::per_second(crate::nonzero!(1)))
                    .algorithm(Algorithm::SlidingWindow),
            );
        assert!(Policies::from_config(&clash).is_err());
    }

    /// Each option an algorithm cannot honour is refused by name, wherever the policy is.
    #[test]
    fn an_option_the_algorithm_cannot_honour_is_a_typed_error() {
        let rate = Rate::per_second(crate::nonzero!(10));
        let lease = Some(QuotaLease::new(8).unwrap());
        let group = Some(GroupCommit::for_checks());
        let spec = |algorithm| PolicySpec::new("p", rate).algorithm(algorithm);
        let config = |spec: PolicySpec, group_commit, lease| PolicyConfig {
            group_commit,
            lease,
            ..PolicyConfig::new(spec)
        };
        let refused = |config: PolicyConfig| match Policies::from_config(&config) {
            Err(e @ Error::UnsupportedOption { .. }) => {
                let text = e.to_string();
                let Error::UnsupportedOption {
                    policy,
                    option,
                    algorithm,
                    reason,
                } = e
                else {
                    unreachable!()
                };
                let says = format!("option {option} is not supported by {}", algorithm.as_str());
                assert!(text.contains(&says) && text.ends_with(reason), "{text}");
                (policy, option, algorithm)
            }
            other => panic!("{config:?}: {other:?}"),
        };
        let p = || "p".to_owned();
        for (algorithm, group_commit, lease, option) in [
            (Algorithm::Gcra, group, None, "group_commit"),
            (Algorithm::Gcra, group, lease, "group_commit"),
            (Algorithm::SlidingWindow, group, None, "group_commit"),
            (Algorithm::SlidingWindow, group, lease, "group_commit"),
            (Algorithm::AlignedWindow, None, lease, "lease"),
            (Algorithm::AlignedWindow, group, lease, "lease"),
            (Algorithm::FixedWindow, group, lease, "group_commit"),
        ] {
            assert_eq!(
                refused(config(spec(algorithm), group_commit, lease)),
                (p(), option, algorithm)
            );
        }
        for algorithm in [
            Algorithm::FixedWindow,
            Algorithm::AlignedWindow,
            Algorithm::SlidingWindow,
        ] {
            let burst = crate::nonzero!(20);
            let spec = PolicySpec::new("p", rate).algorithm(algorithm).burst(burst);
            assert_eq!(refused(config(spec, None, None)), (p(), "burst", algorithm));
        }
        // In a route: the route's policy is named.
        let routed = config(spec(Algorithm::FixedWindow), None, lease).route(
            "/g",
            PolicySpec::new("g", rate).algorithm(Algorithm::AlignedWindow),
        );
        assert_eq!(
            refused(routed),
            ("g".to_owned(), "lease", Algorithm::AlignedWindow)
        );
        // What each algorithm honours is applied.
        let built = |config: PolicyConfig| Policies::from_config(&config).unwrap().default;
        assert!(matches!(
            built(config(spec(Algorithm::FixedWindow), group, None)),
            Limiter::FixedGrouped(_)
        ));
        assert!(matches!(
            built(config(spec(Algorithm::AlignedWindow), group, None)),
            Limiter::AlignedGrouped(_)
        ));
        assert!(matches!(
            built(config(spec(Algorithm::FixedWindow), None, lease)),
            Limiter::FixedLeased(_)
        ));
        assert!(matches!(
            built(config(spec(Algorithm::SlidingWindow), None, lease)),
            Limiter::SlidingLeased(l) if l.lease() == QuotaLease::new(8).unwrap()
        ));
        let gcra = PolicySpec::new("p", rate)
            .algorithm(Algorithm::Gcra)
            .burst(crate::nonzero!(20));
        assert_eq!(built(config(gcra.clone(), None, None)).limit(), 20);
        assert!(matches!(
            built(config(gcra, None, lease)),
            Limiter::GcraLeased(l) if l.limiter().burst() == 20 && l.lease() == QuotaLease::new(8).unwrap()
        ));
        let aligned = built(config(spec(Algorithm::AlignedWindow), None, None));
        assert!(matches!(aligned, Limiter::Aligned(_)));
    }

    #[test]
    fn json_round_trip() {
        let c = PolicyConfig::new(PolicySpec::new("d", Rate::per_second(crate::nonzero!(10))))
            .route(
                "/a",
                PolicySpec::new(
                    "a",
                    Rate::new(crate::nonzero!(1), Duration::from_millis(300)).unwrap(),
                ),
            );
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(serde_json::from_str::<PolicyConfig>(&json).unwrap(), c);
        let p = Policies::from_config(&c).unwrap();
        assert_eq!(p.for_path("/a").window(), Duration::from_millis(300));
        assert!(serde_json::from_str::<PolicyConfig>(
            r#"{"default":{"name":"d","limit":1,"window_ms":1,"x":1}}"#
        )
        .is_err());
    }

    #[test]
    fn group_commit_and_shadow_are_written_and_read_back() {
        let base =
            || PolicyConfig::new(PolicySpec::new("d", Rate::per_second(crate::nonzero!(10))));
        let json = |c: &PolicyConfig| serde_json::to_value(c).unwrap();
        // Off: left out; the settings for checks: `true`; other settings: the table.
        assert!(json(&base()).get("group_commit").is_none());
        let on = base().with_group_commit(GroupCommit::for_checks());
        assert_eq!(json(&on)["group_commit"], serde_json::json!(true));
        let custom = base().with_group_commit(GroupCommit::new(3, 2).unwrap());
        assert_eq!(
            json(&custom)["group_commit"],
            serde_json::json!({"max_batch": 3, "max_in_flight": 2})
        );
        for c in [&on, &custom] {
            assert_eq!(&serde_json::from_value::<PolicyConfig>(json(c)).unwrap(), c);
        }
        // Read from a file: `true`, `false`, the table, and a table GroupCommit::new refuses.
        let read = |gc: &str| {
            serde_json::from_str::<PolicyConfig>(&format!(
                r#"{{"default":{{"name":"d","limit":10,"window_ms":1000}},"group_commit":{gc}}}"#
            ))
        };
        assert_eq!(read("true").unwrap(), on);
        assert_eq!(read("false").unwrap(), base());
        assert_eq!(
            read(r#"{"max_batch":3,"max_in_flight":2}"#).unwrap(),
            custom
        );
        assert!(read(r#"{"max_batch":1,"max_in_flight":2}"#).is_err());
        // Shadow: written only when on.
        let shadow =
            PolicyConfig::new(PolicySpec::new("d", Rate::per_second(crate::nonzero!(10))).shadow());
        assert_eq!(json(&shadow)["default"]["shadow"], serde_json::json!(true));
        assert!(json(&base())["default"].get("shadow").is_none());
    }

    #[test]
    fn policies_keep_their_access_list() {
        let list = AccessList::parse(["10.0.0.0/8"], ["203.0.113.9"]).unwrap();
        let p = Policies::new(fw("api", 10)).with_access(list.clone());
        assert_eq!(p.access(), &list);
        assert!(Policies::new(fw("api", 10)).access().is_empty());
    }
}
