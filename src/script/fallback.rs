//! The `NOSCRIPT` fallback: `EVAL` with the full source, and one `SCRIPT LOAD` per script in
//! flight at a time.
//!
//! `EVAL` runs the script and, on Redis 7, caches it like `SCRIPT LOAD`. Since Redis 8.0 (and
//! Valkey), a script cached only by `EVAL` sits in a 500-entry eviction list while a `SCRIPT
//! LOAD`ed one stays. So the first caller whose fallback succeeds also sends `SCRIPT LOAD` of the
//! script after its `EVAL` (one more round trip for that caller only; on a Cluster connection
//! redis-rs sends it to every primary); callers that fall back while that load is in flight
//! send only their `EVAL`. A burst of calls after a failover or a `SCRIPT FLUSH` then
//! costs one load per script, not one per call in flight, and the next calls are `EVALSHA`
//! hits no eviction can take away. A `SCRIPT LOAD` that fails (an ACL user without
//! `+script|load`, a node that does not answer) changes nothing for the caller: its `EVAL`
//! reply is what it gets. A failed `EVAL` loads nothing.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

use redis::aio::ConnectionLike;
use redis::{Cmd, RedisResult, Value};

use super::call::Call;
use super::manager::ScriptManager;
use super::registry::Script;

/// SHA1s of the scripts whose `SCRIPT LOAD` is in flight.
#[derive(Debug, Default)]
pub(crate) struct Loading(Mutex<HashSet<String>>);

/// Releases a claimed load when the call ends, also when its future is dropped mid-way.
struct Claim<'a> {
    loading: &'a Loading,
    sha: &'a str,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.loading.lock().remove(self.sha);
    }
}

impl Loading {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        // The set only holds SHA1s: a panic elsewhere cannot leave it inconsistent.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Claims the load of `sha` unless another call holds it.
    fn claim<'a>(&'a self, sha: &'a str) -> Option<Claim<'a>> {
        // `then`, not `then_some`: a `Claim` built and dropped for a lost race would release
        // the winner's claim (and lock the set again while this guard still holds it).
        let won = self.lock().insert(sha.to_owned());
        won.then(|| Claim { loading: self, sha })
    }
}

impl ScriptManager {
    /// The reply of `EVAL` (`EVAL_RO`) of `script` with the keys and arguments of `evalsha`,
    /// after that `EVALSHA` was answered `NOSCRIPT`; the first caller of a burst to get its reply
    /// also loads the script (see the module documentation). Counts the fallback.
    pub(crate) async fn eval_fallback<C: ConnectionLike>(
        &self,
        conn: &mut C,
        script: &Script,
        evalsha: &Cmd,
    ) -> RedisResult<Value> {
        self.count_fallback();
        tracing::debug!(script = script.id(), "NOSCRIPT: falling back to EVAL");
        let value = conn
            .req_packed_command(&Call::eval_from(script, evalsha))
            .await
            .and_then(Value::extract_error)?;
        let Some(_claim) = self.counters().loading.claim(script.sha1()) else {
            return Ok(value); // another caller's load is in flight
        };
        // After the EVAL, not in a pipeline with it: a redirected EVAL (ASK, MOVED) is then
        // followed by the connection like any single command.
        let mut load = redis::cmd("SCRIPT");
        load.arg("LOAD").arg(script.source());
        match conn
            .req_packed_command(&load)
            .await
            .and_then(Value::extract_error)
        {
            Ok(_) => {
                self.counters()
                    .fallback_loads
                    .fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                tracing::debug!(script = script.id(), error = %e, "SCRIPT LOAD after EVAL failed");
            }
        }
        Ok(value)
    }
}
