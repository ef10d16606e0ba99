//! `redkit locks show|release`: a lock's holder, lease left, last fencing token and waiters,
//! read without writing (a replica may serve it), and an audited release of a stuck one.

use clap::Subcommand;
use redkit::keys::Prefix;
use redkit::lock::{ExpectedHolder, ForceRelease, Holder, Lock};
use serde_json::{json, Value};

use crate::connection::Conn;
use crate::exit::{Failure, EXIT_STATE_CHANGED};
use crate::output::{finish, finish_streamed, Mode};

/// `redkit locks ...`.
#[derive(Subcommand, Debug, Clone)]
pub(crate) enum Locks {
    /// Each lock's holder (owner token, lease left), last fencing token and whether someone
    /// waits, read without writing (a replica may serve it).
    Show {
        /// The key prefix (default redkit:lock).
        #[arg(long)]
        prefix: Option<String>,
        /// The resources, as the application names them.
        #[arg(required = true, value_name = "RESOURCE")]
        resources: Vec<String>,
    },
    /// The resources held now (their lock keys), found by SCAN on every primary: Redis is
    /// never blocked; at most --max keys visited (`truncated` says when there were more).
    List {
        /// The key prefix (default redkit:lock).
        #[arg(long)]
        prefix: Option<String>,
        /// Visit at most this many keys.
        #[arg(long, default_value_t = redkit::nonzero!(10_000))]
        max: std::num::NonZeroU32,
        /// One JSON object per line (`{"resource": ..}`), nothing else on stdout.
        #[arg(long)]
        ndjson: bool,
    },
    /// End a stuck lock's hold: compare-and-delete against --token (as `locks show` printed
    /// it) or --any holder, waking a blocked acquirer; the fence key stays. Requires --yes.
    /// Exit 8 when nothing was done because the state changed (another holder, or free).
    Release {
        /// The key prefix (default redkit:lock).
        #[arg(long)]
        prefix: Option<String>,
        /// The resource, as the application names it.
        resource: String,
        /// Release only this owner token's hold.
        #[arg(long, conflicts_with = "any", required_unless_present = "any")]
        token: Option<String>,
        /// Release whoever holds it when the command reads it.
        #[arg(long)]
        any: bool,
        /// Confirm the release.
        #[arg(long)]
        yes: bool,
        /// Show the holder that would be released, and release nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

impl Locks {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::Show { .. } => "locks show",
            Self::List { .. } => "locks list",
            Self::Release { .. } => "locks release",
        }
    }
}

fn holder_json(h: Option<&Holder>) -> Value {
    h.map_or(Value::Null, |h| {
        json!({
            "token": h.token,
            "ttl_ms": h.ttl.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
        })
    })
}

fn holder_text(h: Option<&Holder>) -> String {
    match h {
        Some(Holder {
            token,
            ttl: Some(ttl),
            ..
        }) => {
            format!("held by {token} ({:.3}s left)", ttl.as_secs_f64())
        }
        Some(Holder { token, .. }) => format!("held by {token} (no TTL)"),
        None => "free".to_owned(),
    }
}

/// Runs a `locks` command on `conn`; prints its result; returns the exit code.
pub(crate) async fn run(
    command: &Locks,
    conn: &mut Conn,
    mode: Mode,
    target: &str,
) -> Result<u8, Failure> {
    let (Locks::Show { prefix, .. } | Locks::List { prefix, .. } | Locks::Release { prefix, .. }) =
        command;
    let usage = |e: redkit::Error| Failure::usage(e.to_string());
    let lock = match prefix {
        Some(p) => Lock::new().with_prefix(Prefix::new(p).map_err(usage)?),
        None => Lock::new(),
    };
    let fail = |e: redkit::Error| match e {
        redkit::Error::InvalidInput { .. } => Failure::usage(e.to_string()),
        e => Failure::from_error(target, &e),
    };
    let (fields, lines, code) = match command {
        Locks::Show { resources, .. } => {
            let mut rows = Vec::with_capacity(resources.len());
            let mut lines = Vec::with_capacity(resources.len());
            for resource in resources {
                let state = lock.inspect(conn, resource).await.map_err(fail)?;
                let fence = state.last_fencing_token.map(|t| t.get());
                lines.push(format!(
                    "{resource}  {}  last fencing token {}  {}",
                    holder_text(state.holder.as_ref()),
                    fence.map_or("none".to_owned(), |t| t.to_string()),
                    if state.waiters {
                        "waiters"
                    } else {
                        "no waiters"
                    }
                ));
                rows.push(json!({
                    "resource": resource,
                    "key": lock.key(resource).map_err(fail)?,
                    "holder": holder_json(state.holder.as_ref()),
                    "last_fencing_token": fence,
                    "waiters": state.waiters,
                }));
            }
            (json!({"locks": rows}), lines, 0)
        }
        Locks::List { max, ndjson, .. } => {
            let found = match conn {
                Conn::Single(c) => lock.scan_resources(c, *max).await,
                Conn::Cluster(c) => lock.scan_resources(c, *max).await,
            }
            .map_err(fail)?;
            let mut lines = found.resources.clone();
            if found.truncated {
                lines.push(format!("(stopped after {max} keys: --max visits more)"));
            }
            if *ndjson {
                let rows: Vec<Value> = found
                    .resources
                    .iter()
                    .map(|r| json!({ "resource": r }))
                    .collect();
                let fields = json!({ "rows": rows });
                return finish_streamed(command.name(), mode, fields, &[], None, Some("rows"));
            }
            let fields = json!({"resources": found.resources, "truncated": found.truncated,
                "skipped": found.skipped});
            (fields, lines, 0)
        }
        Locks::Release {
            resource,
            token,
            yes,
            dry_run,
            ..
        } => {
            let expected = match token {
                Some(t) => ExpectedHolder::Token(t),
                None => ExpectedHolder::Any,
            };
            if *dry_run {
                let state = lock.inspect(conn, resource).await.map_err(fail)?;
                let holder = state.holder.as_ref();
                let would = match (holder, expected) {
                    (Some(h), ExpectedHolder::Token(t)) => h.token == t,
                    (Some(_), _) => true,
                    (None, _) => false,
                };
                let line = format!(
                    "{resource}  {}  {}",
                    holder_text(holder),
                    if would {
                        "would be released"
                    } else {
                        "would not be released"
                    }
                );
                let fields = json!({"resource": resource, "dry_run": true,
                    "holder": holder_json(holder), "would_release": would});
                (fields, vec![line], 0)
            } else if !yes {
                return Err(Failure::usage(format!(
                    "refusing to release lock {resource:?} on {target} without --yes \
                     (--dry-run shows its holder)"
                )));
            } else {
                let done = lock
                    .force_release(conn, resource, expected)
                    .await
                    .map_err(fail)?;
                let (outcome, holder, code, line) = match &done {
                    ForceRelease::Released { token } => (
                        "released",
                        Value::Null,
                        0,
                        format!("{resource}  released {token}'s hold"),
                    ),
                    ForceRelease::NotHeld => (
                        "not_held",
                        Value::Null,
                        EXIT_STATE_CHANGED,
                        format!("{resource}  free: nothing released"),
                    ),
                    ForceRelease::Changed { holder } => (
                        "changed",
                        holder_json(holder.as_ref()),
                        EXIT_STATE_CHANGED,
                        format!(
                            "{resource}  {}: nothing released",
                            holder_text(holder.as_ref())
                        ),
                    ),
                    _ => ("unknown", Value::Null, EXIT_STATE_CHANGED, String::new()),
                };
                let released = match &done {
                    ForceRelease::Released { token } => Value::from(token.as_str()),
                    _ => Value::Null,
                };
                let fields = json!({"resource": resource, "outcome": outcome,
                    "released": released, "holder": holder});
                (fields, vec![line], code)
            }
        }
    };
    let unchanged = (code != 0).then_some("the lock is not held as expected");
    finish(command.name(), mode, fields, &lines, unchanged)
}
