//! `redkit limits show|reset|block`: one limiter's state for the clients named, read without
//! counting (a read-only script: nothing written, a replica may serve it), deleted, or
//! blocked for a while. The limiter is described on the command line as the application
//! builds it (algorithm, name, limit, window, prefix): Redis holds counts, not rates.

use std::num::NonZeroU32;
use std::time::Duration;

use clap::{Args, Subcommand};
use redkit::keys::Prefix;
use redkit::middleware::{Policies, PolicyConfig};
use redkit::rate_limit::{Algorithm, Gcra, LimitKey, Limiter, Rate};
use serde_json::json;

use crate::connection::Conn;
use crate::exit::Failure;
use crate::output::{finish, finish_streamed, Mode};

/// The limiter whose keys are read or changed, as the application builds it.
#[derive(Args, Debug, Clone)]
pub(crate) struct LimiterArgs {
    /// The application's policy file (TOML, as the middleware reads it): the limiter of
    /// --path is used, with the file's prefix and options. Instead of the flags below.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["name", "limit", "window", "algorithm", "burst", "prefix"])]
    policies: Option<std::path::PathBuf>,
    /// With --policies: the request path whose limiter is meant (default /).
    #[arg(long, requires = "policies", default_value = "/")]
    path: String,
    /// The algorithm: fixed_window, aligned_window, gcra or sliding_window.
    #[arg(long, value_parser = parse_algorithm)]
    algorithm: Option<Algorithm>,
    /// The limiter's name (its keys are `<prefix>:<name>:{<client>}`).
    #[arg(long, required_unless_present = "policies")]
    name: Option<String>,
    /// Units per window (GCRA: per period), at least 1.
    #[arg(long, required_unless_present = "policies")]
    limit: Option<NonZeroU32>,
    /// The window (GCRA: the period), e.g. 500ms, 10s, 1m, 1h.
    #[arg(long, value_parser = parse_duration, required_unless_present = "policies")]
    window: Option<Duration>,
    /// GCRA's burst (default: the limit).
    #[arg(long)]
    burst: Option<NonZeroU32>,
    /// The key prefix (default: the algorithm's own).
    #[arg(long)]
    prefix: Option<String>,
}

/// The clients, as the limiter keys them.
#[derive(Args, Debug, Clone)]
pub(crate) struct Clients {
    /// `ip:<address>` or `text:<id>`.
    #[arg(required = true, value_name = "CLIENT")]
    clients: Vec<String>,
}

/// `redkit limits ...`.
#[derive(Subcommand, Debug, Clone)]
pub(crate) enum Limits {
    /// Each client's state as a check would find it, read without counting (nothing written;
    /// a replica may serve it): used, remaining, and when it resets.
    Show {
        #[command(flatten)]
        limiter: LimiterArgs,
        #[command(flatten)]
        clients: Clients,
    },
    /// The clients using the limiter most, found by SCAN on every primary and read without
    /// counting: at most --max keys visited, the --top busiest kept.
    Top {
        #[command(flatten)]
        limiter: LimiterArgs,
        /// How many clients to show.
        #[arg(long, default_value_t = redkit::nonzero!(10))]
        top: NonZeroU32,
        /// Visit at most this many keys (`truncated` says when there were more).
        #[arg(long, default_value_t = redkit::nonzero!(10_000))]
        max: NonZeroU32,
        /// One JSON object per line (a client's row), nothing else on stdout.
        #[arg(long)]
        ndjson: bool,
    },
    /// Delete each client's state: its next check starts afresh. Requires --yes.
    Reset {
        #[command(flatten)]
        limiter: LimiterArgs,
        #[command(flatten)]
        clients: Clients,
        /// Confirm: delete the state of every client named.
        #[arg(long)]
        yes: bool,
        /// Say which keys would be deleted, and delete nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Block each client for a while (fixed_window and gcra): every check refused until the
    /// block ends; a block never shortens a longer wait. Requires --yes.
    Block {
        #[command(flatten)]
        limiter: LimiterArgs,
        #[command(flatten)]
        clients: Clients,
        /// How long, e.g. 15m.
        #[arg(long = "for", value_parser = parse_duration, value_name = "DURATION")]
        duration: Duration,
        /// Confirm: block every client named.
        #[arg(long)]
        yes: bool,
        /// Say which keys would be blocked, and change nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

impl Limits {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::Show { .. } => "limits show",
            Self::Top { .. } => "limits top",
            Self::Reset { .. } => "limits reset",
            Self::Block { .. } => "limits block",
        }
    }

    fn limiter_args(&self) -> &LimiterArgs {
        match self {
            Self::Show { limiter, .. }
            | Self::Top { limiter, .. }
            | Self::Reset { limiter, .. }
            | Self::Block { limiter, .. } => limiter,
        }
    }

    /// The clients named, none for `top`.
    fn clients(&self) -> &[String] {
        match self {
            Self::Show { clients, .. }
            | Self::Reset { clients, .. }
            | Self::Block { clients, .. } => &clients.clients,
            Self::Top { .. } => &[],
        }
    }
}

/// `fixed_window`, `aligned_window`, `gcra`, `sliding_window`: as policy files name them.
fn parse_algorithm(text: &str) -> Result<Algorithm, String> {
    serde_json::from_value(json!(text)).map_err(|_| {
        format!("{text:?} is not one of fixed_window, aligned_window, gcra, sliding_window")
    })
}

/// A whole number followed by `ms`, `s`, `m` or `h`.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?}: expected a whole number and a unit (ms, s, m, h)"))?;
    let seconds = |factor: u64| {
        n.checked_mul(factor)
            .map(Duration::from_secs)
            .ok_or_else(|| format!("{text:?} is too long"))
    };
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => seconds(1),
        "m" => seconds(60),
        "h" => seconds(3_600),
        _ => Err(format!(
            "{text:?}: the unit must be ms, s, m or h (e.g. 500ms, 10s, 1m)"
        )),
    }
}

/// `ip:<address>` or `text:<id>` as the [`LimitKey`] the limiter reads.
fn parse_client(text: &str) -> Result<LimitKey, Failure> {
    let bad = |why: String| Failure::usage(format!("client {text:?}: {why}"));
    match text.split_once(':') {
        Some(("ip", addr)) => addr
            .parse()
            .map(LimitKey::ip)
            .map_err(|_| bad("not an IP address".to_owned())),
        Some(("text", id)) => LimitKey::text(id).map_err(|e| bad(e.to_string())),
        _ => Err(bad(
            "write ip:<address> or text:<id>, as the limiter keys it".to_owned(),
        )),
    }
}

impl LimiterArgs {
    /// The limiter, built as the application builds it; a bad combination is a usage error.
    fn limiter(&self) -> Result<Limiter, Failure> {
        let usage = |e: redkit::Error| Failure::usage(e.to_string());
        if let Some(file) = &self.policies {
            return from_policies(file, &self.path);
        }
        let (Some(name), Some(limit), Some(window)) = (&self.name, self.limit, self.window) else {
            return Err(Failure::usage(
                "--name, --limit and --window describe the limiter",
            ));
        };
        let rate = Rate::new(limit, window).map_err(usage)?;
        let limiter = match (self.algorithm.unwrap_or_default(), self.burst) {
            (Algorithm::Gcra, Some(burst)) => {
                Gcra::bursting(name, rate, burst).map_err(usage)?.into()
            }
            (_, Some(_)) => return Err(Failure::usage("--burst is GCRA's alone")),
            (algorithm, None) => Limiter::new(algorithm, name, rate).map_err(usage)?,
        };
        Ok(match &self.prefix {
            Some(p) => limiter.with_prefix(Prefix::new(p).map_err(usage)?),
            None => limiter,
        })
    }
}

/// The limiter the application's policy file gives requests to `path`.
fn from_policies(file: &std::path::Path, path: &str) -> Result<Limiter, Failure> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| Failure::usage(format!("cannot read {}: {e}", file.display())))?;
    let config: PolicyConfig = toml::from_str(&text)
        .map_err(|e| Failure::usage(format!("{}: {}", file.display(), e.message())))?;
    let policies = Policies::from_config(&config)
        .map_err(|e| Failure::usage(format!("{}: {e}", file.display())))?;
    Ok(policies.for_path(path).clone())
}

/// Runs a `limits` command on `conn`; prints its rows; returns the exit code.
pub(crate) async fn run(
    command: &Limits,
    conn: &mut Conn,
    mode: Mode,
    target: &str,
) -> Result<u8, Failure> {
    let args = command.limiter_args();
    let limiter = args.limiter()?;
    let clients = command
        .clients()
        .iter()
        .map(|c| parse_client(c).map(|k| (c.as_str(), k)))
        .collect::<Result<Vec<_>, _>>()?;
    let fail = |e: redkit::Error| match e {
        redkit::Error::UnsupportedOption { reason, .. } => Failure::usage(format!(
            "{} cannot block: {reason}",
            limiter.algorithm().as_str()
        )),
        redkit::Error::InvalidInput { .. } => Failure::usage(e.to_string()),
        e => Failure::from_error(target, &e),
    };
    let refuse = |what: &str| {
        Failure::usage(format!(
            "refusing to {what} {} client(s) of limiter {:?} on {target} without --yes \
             (--dry-run shows the keys)",
            clients.len(),
            limiter.name()
        ))
    };
    let mut rows = Vec::with_capacity(clients.len());
    let mut lines = Vec::with_capacity(clients.len());
    if let Limits::Top {
        top, max, ndjson, ..
    } = command
    {
        let found = match conn {
            Conn::Single(c) => limiter.busiest(c, *max, *top).await,
            Conn::Cluster(c) => limiter.busiest(c, *max, *top).await,
        }
        .map_err(fail)?;
        for (client, q) in &found.clients {
            let reset_ms = u64::try_from(q.reset_after().as_millis()).unwrap_or(u64::MAX);
            lines.push(format!(
                "{}  used {}/{}  remaining {}  resets in {:.3}s",
                client.as_str(),
                q.used(),
                q.limit(),
                q.remaining(),
                q.reset_after().as_secs_f64()
            ));
            rows.push(json!({
                "client": client.as_str(), "key": limiter.redis_key(client), "limit": q.limit(),
                "used": q.used(), "remaining": q.remaining(), "reset_after_ms": reset_ms,
            }));
        }
        if found.truncated {
            lines.push(format!("(stopped after {max} keys: --max visits more)"));
        }
        let fields = json!({"limiter": limiter.name(), "clients": rows,
            "surveyed": found.surveyed, "truncated": found.truncated});
        let stream = ndjson.then_some("clients");
        return finish_streamed(command.name(), mode, fields, &lines, None, stream);
    }
    for (client, key) in &clients {
        let redis_key = limiter.redis_key(key);
        match command {
            // Answered above: it names no client.
            Limits::Top { .. } => {}
            Limits::Show { .. } => {
                let q = limiter.peek(conn, key).await.map_err(fail)?;
                let reset_ms = u64::try_from(q.reset_after().as_millis()).unwrap_or(u64::MAX);
                lines.push(format!(
                    "{client}  used {}/{}  remaining {}  resets in {:.3}s  ({redis_key})",
                    q.used(),
                    q.limit(),
                    q.remaining(),
                    q.reset_after().as_secs_f64()
                ));
                rows.push(json!({
                    "client": client, "key": redis_key, "limit": q.limit(), "used": q.used(),
                    "remaining": q.remaining(), "reset_after_ms": reset_ms,
                }));
            }
            Limits::Reset { dry_run: true, .. } => {
                lines.push(format!("{client}  would reset  ({redis_key})"));
                rows.push(json!({"client": client, "key": redis_key, "dry_run": true}));
            }
            Limits::Reset { yes: false, .. } => return Err(refuse("reset")),
            Limits::Reset { .. } => {
                let existed = limiter.reset(conn, key).await.map_err(fail)?;
                let what = if existed { "reset" } else { "had no state" };
                lines.push(format!("{client}  {what}  ({redis_key})"));
                rows.push(json!({"client": client, "key": redis_key, "existed": existed}));
            }
            Limits::Block {
                dry_run: true,
                duration,
                ..
            } => {
                if !matches!(
                    limiter.algorithm(),
                    Algorithm::FixedWindow | Algorithm::Gcra
                ) {
                    return Err(fail(redkit::Error::UnsupportedOption {
                        policy: limiter.name().to_owned(),
                        option: "block_for",
                        algorithm: limiter.algorithm(),
                        reason: "only fixed_window and gcra can hold a block",
                    }));
                }
                let ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
                lines.push(format!(
                    "{client}  would block for {duration:?}  ({redis_key})"
                ));
                rows.push(
                    json!({"client": client, "key": redis_key, "dry_run": true, "block_ms": ms}),
                );
            }
            Limits::Block { yes: false, .. } => return Err(refuse("block")),
            Limits::Block { duration, .. } => {
                let blocked = limiter
                    .block_for(conn, key, *duration)
                    .await
                    .map_err(fail)?;
                let ms = u64::try_from(blocked.as_millis()).unwrap_or(u64::MAX);
                lines.push(format!("{client}  blocked for {blocked:?}  ({redis_key})"));
                rows.push(json!({"client": client, "key": redis_key, "blocked_ms": ms}));
            }
        }
    }
    finish(
        command.name(),
        mode,
        json!({"limiter": limiter.name(), "clients": rows}),
        &lines,
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_a_whole_number_and_a_unit() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3_600)));
        for bad in ["", "10", "s", "1.5s", "-1s", "10x", "99999999999999999999h"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
        assert!(parse_duration(&format!("{}h", u64::MAX)).is_err());
    }

    #[test]
    fn clients_are_named_as_the_limiter_keys_them() {
        assert_eq!(
            parse_client("ip:203.0.113.9").unwrap(),
            LimitKey::ip("203.0.113.9".parse().unwrap())
        );
        assert_eq!(
            parse_client("ip:2001:db8::1").unwrap(),
            LimitKey::ip("2001:db8::1".parse().unwrap())
        );
        assert_eq!(
            parse_client("text:user-42").unwrap(),
            LimitKey::text("user-42").unwrap()
        );
        for bad in ["203.0.113.9", "ip:nope", "user:x", "text:"] {
            assert!(parse_client(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn algorithms_are_named_as_in_policy_files() {
        assert_eq!(parse_algorithm("gcra"), Ok(Algorithm::Gcra));
        assert_eq!(
            parse_algorithm("aligned_window"),
            Ok(Algorithm::AlignedWindow)
        );
        assert!(parse_algorithm("leaky").is_err());
    }
}
