//! Whether the server answers `WAITAOF`: asked once per manager, before the first write that
//! waits for an fsync, so an older server (Redis < 7.2) or a primary without `appendonly yes`
//! is a typed error before anything is written, not after.

use std::sync::atomic::Ordering;

use redis::aio::ConnectionLike;
use redis::Value;

use super::replication::Replication;
use super::state::AofSupport;
use crate::error::{Error, Result};

/// Checks `replication` before a write: invalid waits are [`Error::InvalidInput`], and a
/// `WAITAOF` the server cannot answer is [`Error::Unsupported`]. The probe,
/// `WAITAOF <local> 0 1`, writes nothing and waits at most 1 ms; a server that answered it
/// once (recorded in `support`) is not asked again.
pub(crate) async fn check_wait<C: ConnectionLike>(
    support: &AofSupport,
    conn: &mut C,
    replication: &Replication,
) -> Result<()> {
    replication.validate()?;
    if !replication.is_fsynced() {
        return Ok(());
    }
    let known = if replication.local_fsync() {
        &support.local
    } else {
        &support.replicas
    };
    if known.load(Ordering::Relaxed) {
        return Ok(());
    }
    let reply = redis::cmd("WAITAOF")
        .arg(u8::from(replication.local_fsync()))
        .arg(0)
        .arg(1)
        .query_async::<Value>(conn)
        .await;
    let refused = match reply {
        Ok(Value::ServerError(e)) => redis::RedisError::from(e),
        Ok(_) => {
            known.store(true, Ordering::Relaxed);
            return Ok(());
        }
        Err(e) if matches!(e.kind(), redis::ErrorKind::Server(_)) => e,
        Err(e) => return Err(e.into()),
    };
    if refused.code() == Some("NOPERM") {
        return Err(Error::PermissionDenied {
            script: "WAITAOF".to_owned(),
            detail: refused.detail().unwrap_or_default().to_owned(),
        });
    }
    let refused = refused.to_string();
    Err(Error::Unsupported {
        feature: if replication.local_fsync() {
            "WAITAOF with the local fsync (Redis 7.2+ or Valkey, appendonly yes on the primary)"
        } else {
            "WAITAOF (Redis 7.2+ or Valkey)"
        },
        detail: refused,
    })
}
