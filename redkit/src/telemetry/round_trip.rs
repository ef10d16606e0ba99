//! One client span per Redis round trip, in OpenTelemetry's database conventions, and its
//! duration as the `db.client.operation.duration` histogram (feature `metrics`).
//!
//! The span (target `redkit::redis`, level `DEBUG`, name `redis`) carries `otel.name`
//! (`EVALSHA fixed_window.v9`), `otel.kind = "client"`, `db.system.name = "redis"`,
//! `db.operation.name` (`EVALSHA`, `EVALSHA_RO`, `EVAL`, `EVAL_RO`, `FCALL`, `FCALL_RO`, or
//! `MULTI` for a batch, with `db.operation.batch.size`), `db.stored_procedure.name` (the
//! script's `name.vN`), and when the manager knows it `server.address` / `server.port` (from
//! the connection address: never a password). On failure it records
//! `db.response.status_code` (the server's error code, e.g. `NOSCRIPT`, `BUSY`),
//! `error.type` (that code, or `timeout` / `io` / `other`) and `otel.status_code = "ERROR"`.

use std::sync::Arc;
use std::time::Instant;

use redis::{Cmd, ConnectionAddr, RedisError};
use tracing::field::Empty;

use super::metric;
use super::script_metrics::{self, Operation};
use crate::Script;

/// Where the manager's connection goes, as the spans report it (`server.address`,
/// `server.port`): host and port, or a Unix socket's path. Never credentials: a
/// [`ConnectionAddr`] holds none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Server {
    address: Arc<str>,
    port: Option<u16>,
}

impl Server {
    pub(crate) fn of(addr: &ConnectionAddr) -> Self {
        match addr {
            ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => Self {
                address: Arc::from(host.as_str()),
                port: Some(*port),
            },
            ConnectionAddr::Unix(path) => Self {
                address: Arc::from(path.to_string_lossy().as_ref()),
                port: None,
            },
            // `ConnectionAddr` is non-exhaustive: a future kind is reported by its Display.
            other => Self {
                address: Arc::from(other.to_string().as_str()),
                port: None,
            },
        }
    }
}

/// The command of `cmd` (`db.operation.name`).
pub(crate) fn operation(cmd: &Cmd) -> Operation {
    let name = cmd.args_iter().next();
    match name {
        Some(redis::Arg::Simple(bytes)) => match bytes {
            b"EVALSHA" => Operation::EvalSha,
            b"EVALSHA_RO" => Operation::EvalShaRo,
            b"EVAL" => Operation::Eval,
            b"EVAL_RO" => Operation::EvalRo,
            b"FCALL" => Operation::Fcall,
            b"FCALL_RO" => Operation::FcallRo,
            b"SCRIPT" => Operation::Script,
            b"FUNCTION" => Operation::Function,
            _ => Operation::Other,
        },
        _ => Operation::Other,
    }
}

/// `error.type` of a failed round trip: the server's error code when it is one redkit knows
/// (a bounded set), else `timeout`, `io` or `other`.
pub(crate) fn error_type(error: &RedisError) -> &'static str {
    if error.is_timeout() {
        return "timeout";
    }
    let Some(code) = error.code() else {
        return if error.is_io_error() || error.is_connection_dropped() {
            "io"
        } else {
            "other"
        };
    };
    const KNOWN: [&str; 20] = [
        "NOSCRIPT",
        "BUSY",
        "ERR",
        "WRONGTYPE",
        "READONLY",
        "OOM",
        "NOPERM",
        "MOVED",
        "ASK",
        "TRYAGAIN",
        "CLUSTERDOWN",
        "LOADING",
        "MASTERDOWN",
        "EXECABORT",
        "NOREPLICAS",
        "UNKILLABLE",
        "NOTBUSY",
        "REDKIT_INPUT",
        "REDKIT_DATA",
        "REDKIT_NOPERM",
    ];
    KNOWN.into_iter().find(|k| *k == code).unwrap_or("other")
}

/// A round trip in flight: its span, and when it started (for the duration histogram).
#[derive(Debug)]
pub(crate) struct RoundTrip<'s> {
    span: tracing::Span,
    operation: Operation,
    /// The script called (`db.stored_procedure.name`); none for a batch.
    script: Option<&'s Script>,
    /// When it started: only read by the duration metric.
    started: Option<Instant>,
}

impl<'s> RoundTrip<'s> {
    /// A round trip of one call of `script` (its `name.vN` names the procedure).
    pub(crate) fn call(operation: Operation, script: &'s Script, server: Option<&Server>) -> Self {
        let (operation_name, procedure) = (operation.label(), script.id());
        let span = tracing::debug_span!(
            target: "redkit::redis",
            "redis",
            otel.name = %format_args!("{operation_name} {procedure}"),
            otel.kind = "client",
            otel.status_code = Empty,
            db.system.name = "redis",
            db.operation.name = operation_name,
            db.stored_procedure.name = procedure,
            db.operation.batch.size = Empty,
            db.response.status_code = Empty,
            error.type = Empty,
            server.address = Empty,
            server.port = Empty,
        );
        Self::started(span, operation, Some(script), server)
    }

    /// A round trip of a batch: `MULTI`, `size` commands, `EXEC`.
    pub(crate) fn batch(size: usize, server: Option<&Server>) -> Self {
        let span = tracing::debug_span!(
            target: "redkit::redis",
            "redis",
            otel.name = "MULTI",
            otel.kind = "client",
            otel.status_code = Empty,
            db.system.name = "redis",
            db.operation.name = "MULTI",
            db.operation.batch.size = size,
            db.response.status_code = Empty,
            error.type = Empty,
            server.address = Empty,
            server.port = Empty,
        );
        Self::started(span, Operation::Multi, None, server)
    }

    fn started(
        span: tracing::Span,
        operation: Operation,
        script: Option<&'s Script>,
        server: Option<&Server>,
    ) -> Self {
        if let Some(server) = server.filter(|_| !span.is_disabled()) {
            span.record("server.address", &*server.address);
            if let Some(port) = server.port {
                span.record("server.port", port);
            }
        }
        Self {
            span,
            operation,
            script,
            started: metric::ENABLED.then(Instant::now),
        }
    }

    /// The span, to run the round trip in.
    pub(crate) fn span(&self) -> tracing::Span {
        self.span.clone()
    }

    /// Records how it ended: `error` is the failure, if any (of the call's own reply).
    pub(crate) fn finish(self, error: Option<&RedisError>) {
        let code = error.and_then(RedisError::code);
        self.end(error.map(error_type), code);
    }

    /// Records a failure that is not a Redis error (a reply not understood): `error.type`
    /// `other`.
    pub(crate) fn finish_other(self) {
        self.end(Some("other"), None);
    }

    fn end(self, error_type: Option<&'static str>, code: Option<&str>) {
        if let (Some(error_type), false) = (error_type, self.span.is_disabled()) {
            if let Some(code) = code {
                self.span.record("db.response.status_code", code);
            }
            self.span.record("error.type", error_type);
            self.span.record("otel.status_code", "ERROR");
        }
        script_metrics::round_trip(
            self.operation,
            self.script,
            error_type,
            self.started.map(|s| s.elapsed()).unwrap_or_default(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_are_named_from_the_command() {
        for name in [
            "EVALSHA",
            "EVALSHA_RO",
            "EVAL",
            "EVAL_RO",
            "FCALL",
            "FCALL_RO",
        ] {
            assert_eq!(operation(&redis::cmd(name)).label(), name);
        }
        assert_eq!(operation(&redis::cmd("GET")), Operation::Other);
        assert_eq!(operation(&Cmd::new()), Operation::Other);
    }

    #[test]
    fn error_types_are_a_bounded_set() {
        let reply = |wire: &[u8]| {
            redis::parse_redis_value(wire)
                .and_then(redis::Value::extract_error)
                .unwrap_err()
        };
        assert_eq!(
            error_type(&reply(b"-NOSCRIPT No matching script\r\n")),
            "NOSCRIPT"
        );
        assert_eq!(error_type(&reply(b"-BUSY Redis is busy\r\n")), "BUSY");
        assert_eq!(
            error_type(&reply(b"-REDKIT_INPUT cost must be 1..\r\n")),
            "REDKIT_INPUT"
        );
        assert_eq!(error_type(&reply(b"-MYAPP_CUSTOM whatever\r\n")), "other");
        let io = RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "x",
        ));
        assert_eq!(error_type(&io), "io");
        let timeout = RedisError::from(std::io::Error::new(std::io::ErrorKind::TimedOut, "x"));
        assert_eq!(error_type(&timeout), "timeout");
    }

    #[test]
    fn a_server_is_reported_without_credentials() {
        let info: redis::ConnectionInfo =
            "redis://user:secret@cache.internal:6380/2".parse().unwrap();
        let server = Server::of(info.addr());
        assert_eq!(
            (&*server.address, server.port),
            ("cache.internal", Some(6380))
        );
        assert!(!format!("{server:?}").contains("secret"));
    }
}
