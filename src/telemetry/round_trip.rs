//! One client span per Redis round trip, in OpenTelemetry's database conventions, and its
//! duration as the `db.client.operation.duration` histogram (feature `metrics`).
//!
//! The span (target `redkit::redis`, level `DEBUG`, name `redis`) carries `otel.name`
//! (`EVALSHA fixed_window.v7`), `otel.kind = "client"`, `db.system.name = "redis"`,
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

/// The command name of `cmd` as a static string (`db.operation.name`).
pub(crate) fn operation(cmd: &Cmd) -> &'static str {
    let name = cmd.args_iter().next();
    match name {
        Some(redis::Arg::Simple(bytes)) => match bytes {
            b"EVALSHA" => "EVALSHA",
            b"EVALSHA_RO" => "EVALSHA_RO",
            b"EVAL" => "EVAL",
            b"EVAL_RO" => "EVAL_RO",
            b"FCALL" => "FCALL",
            b"FCALL_RO" => "FCALL_RO",
            b"SCRIPT" => "SCRIPT",
            b"FUNCTION" => "FUNCTION",
            _ => "other",
        },
        _ => "other",
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
pub(crate) struct RoundTrip {
    span: tracing::Span,
    operation: &'static str,
    procedure: Option<Arc<str>>,
    /// When it started: only read by the duration metric.
    started: Option<Instant>,
}

impl RoundTrip {
    /// A round trip of one script call (`procedure`: the script's `name.vN`).
    pub(crate) fn call(operation: &'static str, procedure: &str, server: Option<&Server>) -> Self {
        let span = tracing::debug_span!(
            target: "redkit::redis",
            "redis",
            otel.name = %format_args!("{operation} {procedure}"),
            otel.kind = "client",
            otel.status_code = Empty,
            db.system.name = "redis",
            db.operation.name = operation,
            db.stored_procedure.name = procedure,
            db.operation.batch.size = Empty,
            db.response.status_code = Empty,
            error.type = Empty,
            server.address = Empty,
            server.port = Empty,
        );
        Self::started(span, operation, Some(procedure), server)
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
        Self::started(span, "MULTI", None, server)
    }

    fn started(
        span: tracing::Span,
        operation: &'static str,
        procedure: Option<&str>,
        server: Option<&Server>,
    ) -> Self {
        if let Some(server) = server.filter(|_| !span.is_disabled()) {
            span.record("server.address", &*server.address);
            if let Some(port) = server.port {
                span.record("server.port", port);
            }
        }
        Self {
            procedure: procedure
                .filter(|_| metric::ENABLED || !span.is_disabled())
                .map(Arc::from),
            span,
            operation,
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
        metric::round_trip(
            self.operation,
            self.procedure.as_deref(),
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
            assert_eq!(operation(&redis::cmd(name)), name);
        }
        assert_eq!(operation(&redis::cmd("GET")), "other");
        assert_eq!(operation(&Cmd::new()), "other");
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
