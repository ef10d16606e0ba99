//! `redkit semaphore show|evict`: a semaphore's holders and their leases, read without
//! writing, and the eviction of one leaked permit.

use std::num::NonZeroU32;

use clap::Subcommand;
use redkit::keys::Prefix;
use redkit::lock::{Release, Semaphore};
use serde_json::json;

use crate::connection::Conn;
use crate::exit::{Failure, EXIT_STATE_CHANGED};
use crate::output::{finish, Mode};

/// `redkit semaphore ...`.
#[derive(Subcommand, Debug, Clone)]
pub(crate) enum SemaphoreCmd {
    /// Permits held, ended leases not dropped yet, and the first holders with their lease
    /// left, read without writing (a replica may serve it).
    Show {
        /// The key prefix (default redkit:sem).
        #[arg(long)]
        prefix: Option<String>,
        /// The resource, as the application names it.
        resource: String,
        /// List at most this many holders (1 to 10000).
        #[arg(long, default_value_t = redkit::nonzero!(20))]
        list: NonZeroU32,
    },
    /// Take back the permit an owner token holds (a leaked one), waking one waiter. Requires
    /// --yes. Exit 8 when the token holds no permit (nothing done).
    Evict {
        /// The key prefix (default redkit:sem).
        #[arg(long)]
        prefix: Option<String>,
        /// The resource, as the application names it.
        resource: String,
        /// The holder's owner token (as `semaphore show` printed it).
        #[arg(long)]
        token: String,
        /// Confirm the eviction.
        #[arg(long)]
        yes: bool,
        /// Say whether the token holds a permit, and evict nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

impl SemaphoreCmd {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::Show { .. } => "semaphore show",
            Self::Evict { .. } => "semaphore evict",
        }
    }
}

/// Runs a `semaphore` command on `conn`; prints its result; returns the exit code.
pub(crate) async fn run(
    command: &SemaphoreCmd,
    conn: &mut Conn,
    mode: Mode,
    target: &str,
) -> Result<u8, Failure> {
    let (SemaphoreCmd::Show { prefix, .. } | SemaphoreCmd::Evict { prefix, .. }) = command;
    let usage = |e: redkit::Error| Failure::usage(e.to_string());
    let sem = match prefix {
        Some(p) => Semaphore::new().with_prefix(Prefix::new(p).map_err(usage)?),
        None => Semaphore::new(),
    };
    let fail = |e: redkit::Error| match e {
        redkit::Error::InvalidInput { .. } => Failure::usage(e.to_string()),
        e => Failure::from_error(target, &e),
    };
    let (fields, lines, code) = match command {
        SemaphoreCmd::Show { resource, list, .. } => {
            let state = sem.inspect(conn, resource, *list).await.map_err(fail)?;
            let mut lines = vec![format!(
                "{resource}  {} held  {} ended, not dropped yet",
                state.live, state.expired
            )];
            let holders: Vec<_> = state
                .holders
                .iter()
                .map(|h| {
                    lines.push(format!(
                        "  {}  {:.3}s left",
                        h.token,
                        h.lease_left.as_secs_f64()
                    ));
                    json!({"token": h.token,
                        "lease_left_ms": u64::try_from(h.lease_left.as_millis()).unwrap_or(u64::MAX)})
                })
                .collect();
            let fields = json!({"resource": resource, "live": state.live,
                "expired": state.expired, "holders": holders});
            (fields, lines, 0)
        }
        SemaphoreCmd::Evict {
            resource,
            token,
            dry_run: true,
            ..
        } => {
            let state = sem
                .inspect(conn, resource, redkit::nonzero!(10_000))
                .await
                .map_err(fail)?;
            let holds = state.holders.iter().any(|h| &h.token == token);
            let line = format!(
                "{resource}  {token} {}",
                if holds {
                    "holds a permit: would be evicted"
                } else {
                    "holds no permit"
                }
            );
            let fields = json!({"resource": resource, "token": token, "dry_run": true,
                "would_evict": holds});
            (fields, vec![line], 0)
        }
        SemaphoreCmd::Evict {
            resource,
            token,
            yes,
            ..
        } => {
            if !yes {
                return Err(Failure::usage(format!(
                    "refusing to evict a permit of {resource:?} on {target} without --yes"
                )));
            }
            let done = sem.evict(conn, resource, token).await.map_err(fail)?;
            let evicted = done == Release::Released;
            let line = if evicted {
                format!("{resource}  evicted {token}'s permit")
            } else {
                format!("{resource}  {token} holds no permit: nothing done")
            };
            let code = if evicted { 0 } else { EXIT_STATE_CHANGED };
            (
                json!({"resource": resource, "token": token, "evicted": evicted}),
                vec![line],
                code,
            )
        }
    };
    let unchanged = (code != 0).then_some("the token holds no permit");
    finish(command.name(), mode, fields, &lines, unchanged)
}
