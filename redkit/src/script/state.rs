//! What a [`ScriptManager`](super::ScriptManager) keeps between calls, shared by its clones:
//! its counters, the `SCRIPT LOAD`s in flight, and what it has learned about the server
//! (which scripts it saw cached, whether `WAITAOF` answers, which native commands it offers). A leaf but for the native-command
//! probe's state: every file of the call path reads it, it reads none of them.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};

use super::capabilities::Probe;

/// A manager's shared state.
#[derive(Debug, Default)]
pub(crate) struct State {
    pub(crate) noscript_fallbacks: AtomicU64,
    pub(crate) batch_reruns: AtomicU64,
    pub(crate) function_reloads: AtomicU64,
    pub(crate) fallback_loads: AtomicU64,
    pub(crate) loading: Loading,
    pub(crate) cached: Cached,
    pub(crate) aof: AofSupport,
    /// Which native commands the server offers in place of a script.
    pub(crate) native: Probe,
}

impl State {
    /// Adds one to a counter.
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// SHA1s of the scripts whose `SCRIPT LOAD` is in flight (one load per script per burst of
/// `NOSCRIPT` fallbacks).
#[derive(Debug, Default)]
pub(crate) struct Loading(Mutex<HashSet<String>>);

/// Releases a claimed load when the call ends, also when its future is dropped mid-way.
pub(crate) struct Claim<'a> {
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
    pub(crate) fn claim<'a>(&'a self, sha: &'a str) -> Option<Claim<'a>> {
        // `then`, not `then_some`: a `Claim` built and dropped for a lost race would release
        // the winner's claim (and lock the set again while this guard still holds it).
        let won = self.lock().insert(sha.to_owned());
        won.then(|| Claim { loading: self, sha })
    }
}

/// SHA1s of the scripts this manager saw the server run or load (as scripts, or as functions
/// with the Functions backend) since the last `NOSCRIPT` or "Function not found" it was
/// answered (any script, any call). Only a replicated call reads it: a script not in it is
/// asked for (`SCRIPT EXISTS`, `FUNCTION LIST`) before the call, so its `WAIT` never goes out
/// behind a call answered "missing" (that `WAIT` would block for nothing, and a second one
/// follow the recovery). A belief, not a guarantee: a server flushed since still answers `NOSCRIPT`, and
/// the recovery handles it as before.
#[derive(Debug, Default)]
pub(crate) struct Cached(RwLock<HashSet<String>>);

impl Cached {
    /// `true` when the script was seen cached since the last `NOSCRIPT`.
    pub(crate) fn contains(&self, sha: &str) -> bool {
        self.0
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains(sha)
    }

    /// Records that the server has the script.
    pub(crate) fn insert(&self, sha: &str) {
        if !self.contains(sha) {
            let mut set = self.0.write().unwrap_or_else(|e| e.into_inner());
            set.insert(sha.to_owned());
        }
    }

    /// Forgets every script: a `NOSCRIPT` says the server lost its cache (restart, failover,
    /// `SCRIPT FLUSH`), most likely for the other scripts too.
    pub(crate) fn forget_all(&self) {
        let mut set = self.0.write().unwrap_or_else(|e| e.into_inner());
        set.clear();
    }
}

/// What a manager has learned about `WAITAOF`: whether the server answers it without and with
/// the local fsync (asked once each, before the first write that waits for it).
#[derive(Debug, Default)]
pub(crate) struct AofSupport {
    pub(crate) replicas: AtomicBool,
    pub(crate) local: AtomicBool,
}
