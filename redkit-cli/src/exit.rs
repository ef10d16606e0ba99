//! Exit codes, error kinds, and the failure of a whole command.

use redkit::script::admin::{NodeError, NodeErrorKind};

/// Exit code: a node answered an error (or is BUSY; or a script is UNKILLABLE), or a file or
/// stream could not be written.
pub(crate) const EXIT_REDIS_ERROR: u8 = 1;
/// Exit code: bad command line (clap uses the same).
pub(crate) const EXIT_USAGE: u8 = 2;
/// Exit code: Redis could not be reached.
pub(crate) const EXIT_UNREACHABLE: u8 = 3;
/// Exit code: `verify` found missing scripts, or `check` / `lock` found the set and its lock
/// disagree.
pub(crate) const EXIT_VERIFY_FAILED: u8 = 4;
/// Exit code: authentication or ACL refused.
pub(crate) const EXIT_AUTH: u8 = 5;
/// Exit code: something answered, but not in the Redis protocol.
pub(crate) const EXIT_NOT_REDIS: u8 = 6;
/// Exit code: the node has no Lua scripting (`EVAL`, `EVALSHA`, `SCRIPT` unknown).
pub(crate) const EXIT_NO_SCRIPTING: u8 = 7;
/// Exit code: nothing was done because the state changed under the command (a lock held by
/// another owner than expected, or free, when asked to release it).
pub(crate) const EXIT_STATE_CHANGED: u8 = 8;
/// Exit code: stdout or stderr is a closed pipe (128 + SIGPIPE, what a shell shows for a
/// process killed by SIGPIPE).
pub(crate) const EXIT_BROKEN_PIPE: u8 = 141;

/// A failure of the whole command, with its exit code, a stable kind (`error.kind` in JSON)
/// and a one-line message (no password).
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: u8,
    pub(crate) kind: &'static str,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(code: u8, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            kind,
            message: message.into(),
        }
    }

    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self::new(EXIT_USAGE, "usage", message)
    }

    pub(crate) fn verify_failed(message: impl Into<String>) -> Self {
        Self::new(EXIT_VERIFY_FAILED, "verify_failed", message)
    }

    pub(crate) fn io(message: impl Into<String>) -> Self {
        Self::new(EXIT_REDIS_ERROR, "io", message)
    }

    /// Writing to `stream` failed: a closed pipe ends the command quietly.
    pub(crate) fn write(stream: &str, e: &std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            Self::new(
                EXIT_BROKEN_PIPE,
                "broken_pipe",
                format!("{stream} is closed"),
            )
        } else {
            Self::io(format!("cannot write to {stream}: {e}"))
        }
    }

    /// `true` when the failure is a closed stdout or stderr: nothing more is printed.
    pub(crate) fn is_broken_pipe(&self) -> bool {
        self.code == EXIT_BROKEN_PIPE
    }

    pub(crate) fn from_error(context: &str, e: &redkit::Error) -> Self {
        let kind = NodeErrorKind::of(e);
        let message = match kind {
            // What the peer sent is no clue (e.g. `Parse error at 1`): say what it is not.
            NodeErrorKind::NotRedis => {
                format!("{context}: not a Redis server (its reply is not the Redis protocol)")
            }
            _ => format!(
                "{context}: {}",
                e.to_string().lines().next().unwrap_or_default()
            ),
        };
        Self::new(exit_code(kind), kind_name(kind), message + hint(kind))
    }

    /// The failure of a command some nodes failed: the worst kind decides (auth, not_redis,
    /// unreachable, then the rest); the message names every failed node.
    pub(crate) fn of_nodes(
        command: &str,
        nodes: usize,
        errors: &[(String, NodeError)],
    ) -> Option<Self> {
        let worst =
            errors
                .iter()
                .map(|(_, e)| e.kind)
                .min_by_key(|kind| match exit_code(*kind) {
                    EXIT_AUTH => 0,
                    EXIT_NOT_REDIS => 1,
                    EXIT_UNREACHABLE => 2,
                    EXIT_NO_SCRIPTING => 3,
                    _ => 4,
                })?;
        let failed: Vec<String> = errors
            .iter()
            .map(|(addr, e)| {
                format!(
                    "{addr} ({}: {}{})",
                    kind_name(e.kind),
                    e.message,
                    hint(e.kind)
                )
            })
            .collect();
        Some(Self::new(
            exit_code(worst),
            kind_name(worst),
            format!(
                "{command} failed on {} of {nodes} nodes: {}",
                failed.len(),
                failed.join("; ")
            ),
        ))
    }
}

pub(crate) fn exit_code(kind: NodeErrorKind) -> u8 {
    match kind {
        NodeErrorKind::Auth => EXIT_AUTH,
        NodeErrorKind::NotRedis => EXIT_NOT_REDIS,
        NodeErrorKind::Unreachable => EXIT_UNREACHABLE,
        NodeErrorKind::NoScripting => EXIT_NO_SCRIPTING,
        _ => EXIT_REDIS_ERROR,
    }
}

pub(crate) fn kind_name(kind: NodeErrorKind) -> &'static str {
    match kind {
        NodeErrorKind::Auth => "auth",
        NodeErrorKind::NotRedis => "not_redis",
        NodeErrorKind::Unreachable => "unreachable",
        NodeErrorKind::Busy => "busy",
        NodeErrorKind::NoScripting => "no_scripting",
        _ => "redis",
    }
}

fn hint(kind: NodeErrorKind) -> &'static str {
    match kind {
        NodeErrorKind::Auth => {
            " (hint: give the user and password in the URL, redis://user:password@host:port/, \
             and check the user's ACL)"
        }
        NodeErrorKind::Busy => {
            " (hint: a script is running; `redkit scripts kill` stops a read-only one)"
        }
        NodeErrorKind::NotRedis => " (hint: check the host and port of the URL)",
        NodeErrorKind::NoScripting => {
            " (hint: redkit needs Lua scripting; enable the server's Lua engine, or restore the \
             renamed commands)"
        }
        _ => "",
    }
}
