//! Which native commands the server offers in place of a script ([`Capabilities`]), probed
//! once per [`ScriptManager`](super::ScriptManager), lazily, and cached in its state
//! ([`Probe`]).
//!
//! The probe is two read-only commands: `COMMAND INFO DELIFEQ` (an array with
//! the command's entry, or nil for a command the server does not know or has renamed away:
//! Redis 7.0 and a Valkey started with `--rename-command DELIFEQ ""` both answer nil) and
//! `COMMAND DOCS SET` (whose argument list names the token `IFEQ` on Valkey 8.1+; Redis 7.0
//! does not). A reply that is an error (an ACL user without `+command`) counts as "not
//! offered": such a user keeps the script path. A connection error caches nothing (the next
//! call asks again).
//!
//! On a Cluster (`CLUSTER SLOTS` answers) the probe asks every primary instead, with the
//! commands themselves on a key of that primary's slots that nothing else uses
//! (`DELIFEQ redkit:probe:{..} <value>`, which deletes nothing there, and `SET ... IFEQ` on
//! it, which creates nothing): a command is used only when every primary offers it (the
//! lowest common set: a Cluster half-way through an upgrade keeps its scripts until the last
//! primary has the command). A key the ACL refuses to the user counts as "not offered".
//!
//! A probe is redone when it is older than [`REPROBE_AFTER`] (or the manager's own interval,
//! [`ScriptManager::with_capabilities_recheck`](super::ScriptManager::with_capabilities_recheck):
//! a Cluster whose last primary was upgraded since, a primary added), by the first call after
//! that; the others go on with what it found meanwhile.
//!
//! A belief, not a guarantee, like the script cache: a native command answered "unknown
//! command" or "syntax error" (a server replaced by an older one, a command renamed since, a
//! Cluster node of another version) forgets the probe ([`Probe::forget`]): that call falls
//! back to its script, and the next one probes again. A native command refused by the ACL
//! (`NOPERM`) is not used again by this manager ([`Probe::deny`]); that call falls back to
//! its script too, which answers the typed error when the user may not run it either.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use redis::{RedisError, Value};

use crate::connect::slots::{layout_of, one_range_per_primary, slot_of, slot_ranges};
use crate::error::Result;

/// The native commands a server offers that redkit can use instead of a script.
///
/// Found by [`ScriptManager::capabilities`](super::ScriptManager::capabilities) (probed once
/// per manager, then cached). Today only the plain, unfenced [`Lock`](crate::lock::Lock) uses
/// them: release by `DELIFEQ` (with the wake-up of blocked acquirers done by plain commands),
/// renewal by `SET key token IFEQ token PX ttl`. Every other operation runs its script.
///
/// ```
/// let none = redkit::script::Capabilities::default();
/// assert!(!none.delifeq && !none.set_ifeq);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct Capabilities {
    /// `DELIFEQ key value` (Valkey 9.0+): deletes the key when it holds `value`. Verified on
    /// Valkey 9.1.2: `1` when it matched and was deleted, `0` when the key is missing or holds
    /// another value, `WRONGTYPE` for a key that is not a string.
    pub delifeq: bool,
    /// `SET key value IFEQ old` (Valkey 8.1+): sets only when the key holds `old`. Verified on
    /// Valkey 9.1.2: `OK` when it matched and was set (with `PX ms`: and the TTL reset), nil
    /// when the key is missing (it is not created) or holds another value (nothing changed),
    /// `WRONGTYPE` for a key that is not a string; combined with `GET` it answers the old value
    /// (nil for a missing key) whether it set or not; combined with `NX`/`XX` it is a syntax
    /// error.
    pub set_ifeq: bool,
}

/// Bits of [`Probe`]'s state.
const PROBED: u8 = 1;
const DELIFEQ: u8 = 1 << 1;
const SET_IFEQ: u8 = 1 << 2;
/// A probe is in flight: other calls use their scripts meanwhile.
const PROBING: u8 = 1 << 3;
const DENIED_DELIFEQ: u8 = 1 << 4;
const DENIED_SET_IFEQ: u8 = 1 << 5;
/// A probe found one server, not a Cluster (`CLUSTER SLOTS` refused): the next probes do not
/// ask again (a server does not change its mode while it runs; no error reply per probe).
const ONE_SERVER: u8 = 1 << 6;

/// A native command the lock paths send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Native {
    /// `DELIFEQ`.
    DelIfEq,
    /// `SET ... IFEQ`.
    SetIfEq,
}

impl Native {
    fn offered(self) -> u8 {
        match self {
            Self::DelIfEq => DELIFEQ,
            Self::SetIfEq => SET_IFEQ,
        }
    }

    fn denied(self) -> u8 {
        match self {
            Self::DelIfEq => DENIED_DELIFEQ,
            Self::SetIfEq => DENIED_SET_IFEQ,
        }
    }
}

/// How old a probe may grow before the next call that asks redoes it, by default.
pub(crate) const REPROBE_AFTER: Duration = Duration::from_secs(60);

/// What a manager learned about the server's native commands (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Probe {
    /// What the last probe found, and what this manager no longer sends (the bits above).
    bits: AtomicU8,
    /// When the last probe ended, in milliseconds since [`epoch`].
    probed_at: AtomicU64,
    /// On a Cluster, the fingerprint of the layout the last probe read.
    layout: AtomicU64,
    /// How old a probe may grow, in ms (0: [`REPROBE_AFTER`]).
    recheck: AtomicU64,
}

/// The instant probe times count from (the first probe of the process).
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Milliseconds since [`epoch`].
fn now_ms() -> u64 {
    u64::try_from(epoch().elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Ends an in-flight claim when the probe ends, also when its future is dropped mid-way.
struct Probing<'a>(&'a Probe);

impl Drop for Probing<'_> {
    fn drop(&mut self) {
        self.0.bits.fetch_and(!PROBING, Ordering::AcqRel);
    }
}

impl Probe {
    /// What the last probe found (`None`: not probed since the last [`forget`](Self::forget)).
    fn known(&self) -> Option<Capabilities> {
        let bits = self.bits.load(Ordering::Acquire);
        (bits & PROBED != 0).then_some(Capabilities {
            delifeq: bits & DELIFEQ != 0,
            set_ifeq: bits & SET_IFEQ != 0,
        })
    }

    /// The capabilities, probing first when none are known or the last probe is older than
    /// [`REPROBE_AFTER`]. `Err` only for a probe whose commands failed (connection,
    /// timeout): nothing is cached then.
    pub(crate) async fn capabilities<C: ConnectionLike>(
        &self,
        conn: &mut C,
    ) -> Result<Capabilities> {
        if let Some(known) = self.known().filter(|_| !self.stale()) {
            return Ok(known);
        }
        self.refresh(conn).await
    }

    /// `true` when `command` may be sent instead of a script now: offered by the server as
    /// last probed and not refused by the ACL. Probes when nothing is known and no other call
    /// is probing; while another call probes, or when the probe failed, `false` (the caller
    /// runs its script, as before any probe).
    pub(crate) async fn usable<C: ConnectionLike>(&self, conn: &mut C, command: Native) -> bool {
        let bits = self.bits.load(Ordering::Acquire);
        if bits & command.denied() != 0 {
            return false;
        }
        let offered = bits & PROBED != 0 && bits & command.offered() != 0;
        if bits & PROBED != 0 && !self.stale() {
            return offered;
        }
        if self.bits.fetch_or(PROBING, Ordering::AcqRel) & PROBING != 0 {
            // Another call is probing: what the last probe found, meanwhile.
            return offered;
        }
        let _probing = Probing(self);
        // Boxed: a probe runs about once a minute, and inline its future (a Cluster's probe of
        // every primary) would be carried by every lock release's.
        match Box::pin(self.refresh(conn)).await {
            Ok(_) => {
                let bits = self.bits.load(Ordering::Acquire);
                bits & PROBED != 0 && bits & command.offered() != 0
            }
            Err(e) => {
                tracing::debug!(error = %e, "native command probe failed: scripts for now");
                self.forget();
                false
            }
        }
    }

    /// The last probe is older than [`REPROBE_AFTER`].
    fn stale(&self) -> bool {
        self.stale_at(now_ms())
    }

    /// The last probe is older than the re-check interval at `now` (ms since [`epoch`]).
    fn stale_at(&self, now: u64) -> bool {
        let at = self.probed_at.load(Ordering::Acquire);
        now.saturating_sub(at) > self.recheck_ms()
    }

    /// How old a probe may grow, in ms.
    fn recheck_ms(&self) -> u64 {
        match self.recheck.load(Ordering::Acquire) {
            0 => u64::try_from(REPROBE_AFTER.as_millis()).unwrap_or(u64::MAX),
            ms => ms,
        }
    }

    /// Sets how old a probe may grow (at least 1 ms).
    pub(crate) fn recheck_after(&self, every: Duration) {
        let ms = u64::try_from(every.as_millis()).unwrap_or(u64::MAX).max(1);
        self.recheck.store(ms, Ordering::Release);
    }

    /// Probes and stores what it found. A stale probe of a Cluster whose layout has not
    /// changed since keeps what it knew (no command of the probe sent to the primaries).
    async fn refresh<C: ConnectionLike>(&self, conn: &mut C) -> Result<Capabilities> {
        let known = self.known();
        let last = known.map(|_| self.layout.load(Ordering::Acquire));
        match probe_as(conn, self.one_server(), last).await? {
            Probed::Unchanged => {
                self.probed_at.store(now_ms(), Ordering::Release);
                Ok(known.unwrap_or_default())
            }
            Probed::Found {
                found,
                one_server,
                layout,
            } => {
                self.layout.store(layout, Ordering::Release);
                self.store(found, one_server);
                Ok(found)
            }
        }
    }

    /// An earlier probe found one server, not a Cluster.
    pub(crate) fn one_server(&self) -> bool {
        self.bits.load(Ordering::Acquire) & ONE_SERVER != 0
    }

    fn store(&self, found: Capabilities, one_server: bool) {
        self.probed_at.store(now_ms(), Ordering::Release);
        let mut bits = PROBED;
        if one_server {
            bits |= ONE_SERVER;
        }
        if found.delifeq {
            bits |= DELIFEQ;
        }
        if found.set_ifeq {
            bits |= SET_IFEQ;
        }
        // Keep the denials, an in-flight claim and the server's mode; replace what the
        // server offers.
        let keep = DENIED_DELIFEQ | DENIED_SET_IFEQ | PROBING | ONE_SERVER;
        let _ = self
            .bits
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |old| {
                Some((old & keep) | bits)
            });
    }

    /// Forgets what the server offers (a native command was answered "unknown command" or
    /// "syntax error"): the next call probes again.
    pub(crate) fn forget(&self) {
        self.bits
            .fetch_and(!(PROBED | DELIFEQ | SET_IFEQ), Ordering::AcqRel);
    }

    /// Stops using `command` (the ACL refused it to this manager's user).
    pub(crate) fn deny(&self, command: Native) {
        self.bits.fetch_or(command.denied(), Ordering::AcqRel);
    }

    /// What a native command's error means for the call that sent it: `true` when the command
    /// did not run and the call must fall back to its script (recording why); `false` for an
    /// error the caller answers (typed, like its script's).
    pub(crate) fn falls_back(&self, command: Native, err: &RedisError) -> bool {
        if is_not_offered(err) {
            tracing::debug!(?command, error = %err, "native command not offered: script");
            self.forget();
            return true;
        }
        if err.code() == Some("NOPERM") {
            tracing::debug!(?command, error = %err, "native command denied: script");
            self.deny(command);
            return true;
        }
        false
    }
}

/// `true` for the server's answer to a command or option it does not have: "unknown command"
/// (a server without `DELIFEQ`, or with it renamed away) or "syntax error" (`SET ... IFEQ` on
/// a server without the option).
fn is_not_offered(err: &RedisError) -> bool {
    err.code() == Some("ERR")
        && err
            .detail()
            .is_some_and(|d| d.starts_with("unknown command") || d.starts_with("syntax error"))
}

/// What [`probe_as`] found.
enum Probed {
    /// A Cluster whose layout is the last probe's: what that probe found stands.
    Unchanged,
    /// The capabilities; whether the server is one server, not a Cluster; the Cluster's
    /// layout (0 for one server).
    Found {
        found: Capabilities,
        one_server: bool,
        layout: u64,
    },
}

/// The probe (see the module docs): every primary of a Cluster, else [`probe_node`];
/// skipping the Cluster's when an earlier probe found `one_server`, and the primaries'
/// commands when the Cluster's layout is still `last_layout`.
async fn probe_as<C: ConnectionLike>(
    conn: &mut C,
    one_server: bool,
    last_layout: Option<u64>,
) -> Result<Probed> {
    if !one_server {
        match probe_primaries(conn, last_layout).await? {
            Primaries::Unchanged => return Ok(Probed::Unchanged),
            Primaries::Found(found, layout) => {
                tracing::debug!(?found, "native commands probed on every primary");
                return Ok(Probed::Found {
                    found,
                    one_server: false,
                    layout,
                });
            }
            Primaries::NotCluster => {}
        }
    }
    Ok(Probed::Found {
        found: probe_node(conn).await?,
        one_server: true,
        layout: 0,
    })
}

/// What the node `conn` reaches offers: `COMMAND INFO DELIFEQ`, then `COMMAND DOCS SET` (two
/// commands, not a pipeline: a Cluster connection routes each by its argument as if it were
/// a key, so a pipeline of both would be refused as cross-slot). A server's error reply to
/// either counts as "not offered"; a connection error fails the probe. Also the per-node
/// status of [`Admin`](super::Admin), over a connection to that one node.
pub(super) async fn probe_node<C: ConnectionLike>(conn: &mut C) -> Result<Capabilities> {
    let info = ask(conn, redis::cmd("COMMAND").arg("INFO").arg("DELIFEQ")).await?;
    let docs = ask(conn, redis::cmd("COMMAND").arg("DOCS").arg("SET")).await?;
    let found = Capabilities {
        delifeq: command_info_names_a_command(&info),
        set_ifeq: names_token(&docs, "IFEQ"),
    };
    tracing::debug!(?found, "native commands probed");
    Ok(found)
}

/// The value the probe's commands compare with: no key of redkit's ever holds it.
const PROBE_VALUE: &str = "redkit:probe:absent";

/// What [`probe_primaries`] found.
enum Primaries {
    /// Not a Cluster, or a connection to one node of it: the single-server probe answers.
    NotCluster,
    /// The layout is the last probe's.
    Unchanged,
    /// What every primary offers, and the layout.
    Found(Capabilities, u64),
}

/// On a Cluster, what every primary offers (see the module docs). Not a Cluster where
/// `CLUSTER SLOTS` is an error, or where a primary's key is answered elsewhere (`MOVED`: a
/// connection to one node, not to the Cluster). Unchanged when the layout (every range and
/// its primary) is `last_layout`.
async fn probe_primaries<C: ConnectionLike>(
    conn: &mut C,
    last_layout: Option<u64>,
) -> Result<Primaries> {
    let slots = match redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async::<Value>(conn)
        .await
    {
        Ok(slots) => slots,
        Err(e) if e.code().is_some() => return Ok(Primaries::NotCluster),
        Err(e) => return Err(e.into()),
    };
    let ranges = slot_ranges(&slots);
    if ranges.is_empty() {
        return Ok(Primaries::NotCluster);
    }
    let layout = layout_of(&ranges);
    if last_layout == Some(layout) {
        return Ok(Primaries::Unchanged);
    }
    let mut found = Capabilities {
        delifeq: true,
        set_ifeq: true,
    };
    for (first, last) in one_range_per_primary(&ranges) {
        let key = key_in_slots(first, last);
        let delifeq = redis::cmd("DELIFEQ").arg(&key).arg(PROBE_VALUE).clone();
        let mut set_ifeq = redis::cmd("SET");
        set_ifeq
            .arg(&key)
            .arg(PROBE_VALUE)
            .arg("IFEQ")
            .arg(PROBE_VALUE);
        for (cmd, offered) in [
            (&delifeq, &mut found.delifeq),
            (&set_ifeq, &mut found.set_ifeq),
        ] {
            match cmd.query_async::<Value>(conn).await {
                Ok(_) => {}
                Err(e) if matches!(e.code(), Some("MOVED" | "ASK")) => {
                    return Ok(Primaries::NotCluster)
                }
                Err(e) if e.code().is_some() => *offered = false,
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(Primaries::Found(found, layout))
}

/// A key of the probe whose hash slot is in `first..=last` (`first <= last < 16384`).
fn key_in_slots(first: u16, last: u16) -> String {
    // The tags 0, 1, 2, .. spread over the slots like any keys: a primary's range of
    // thousands of slots takes a few tries, a single slot about 16,384 (each slot is hit
    // about 60 times in the first million); bounded either way.
    (0u32..=1_000_000)
        .map(|n| format!("redkit:probe:{{{n}}}"))
        .find(|key| (first..=last).contains(&slot_of(key)))
        .unwrap_or_else(|| format!("redkit:probe:{{{first}}}"))
}

/// `cmd`'s reply; nil when the server answered an error (e.g. `NOPERM`).
async fn ask<C: ConnectionLike>(conn: &mut C, cmd: &redis::Cmd) -> Result<Value> {
    match cmd.query_async::<Value>(conn).await {
        Ok(reply) => Ok(reply),
        Err(e) if e.code().is_some() => {
            tracing::debug!(error = %e, "native command probe refused");
            Ok(Value::Nil)
        }
        Err(e) => Err(e.into()),
    }
}

/// `COMMAND INFO <name>` answered an entry (an array), not nil, for its one command.
fn command_info_names_a_command(reply: &Value) -> bool {
    match reply {
        Value::Array(items) => items.first().is_some_and(|e| matches!(e, Value::Array(_))),
        _ => false,
    }
}

/// `true` when some string in `reply` (nested arrays and maps, as `COMMAND DOCS` answers in
/// RESP2 and RESP3) is `token`, whole and case-insensitively.
fn names_token(reply: &Value, token: &str) -> bool {
    match reply {
        Value::BulkString(b) => b.eq_ignore_ascii_case(token.as_bytes()),
        Value::SimpleString(s) => s.eq_ignore_ascii_case(token),
        Value::Array(items) | Value::Set(items) => items.iter().any(|v| names_token(v, token)),
        Value::Map(pairs) => pairs
            .iter()
            .any(|(k, v)| names_token(k, token) || names_token(v, token)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connect::slots::SLOTS;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn command_info_nil_is_not_a_command() {
        assert!(!command_info_names_a_command(&Value::Array(vec![
            Value::Nil
        ])));
        assert!(command_info_names_a_command(&Value::Array(vec![
            Value::Array(vec![bulk("delifeq")])
        ])));
        assert!(!command_info_names_a_command(&Value::Nil));
    }

    #[test]
    fn the_token_must_be_whole() {
        let docs = Value::Array(vec![
            bulk("history"),
            bulk("Added the `IFEQ` option."),
            Value::Map(vec![(bulk("token"), bulk("IFEQ"))]),
        ]);
        assert!(names_token(&docs, "IFEQ"));
        let history_only = Value::Array(vec![bulk("Added the `IFEQ` option.")]);
        assert!(!names_token(&history_only, "IFEQ"));
    }

    #[test]
    fn a_probe_key_exists_for_every_slot() {
        for slot in (0..SLOTS).step_by(97).chain([0, SLOTS - 1]) {
            assert_eq!(slot_of(&key_in_slots(slot, slot)), slot);
        }
    }

    #[test]
    fn a_probe_grows_stale() {
        let probe = Probe::default();
        probe.store(Capabilities::default(), false);
        let at = probe.probed_at.load(Ordering::Acquire);
        let after = u64::try_from(REPROBE_AFTER.as_millis()).unwrap();
        assert!(!probe.stale());
        assert!(!probe.stale_at(at + after));
        assert!(probe.stale_at(at + after + 1));
        probe.recheck_after(Duration::from_millis(250));
        assert!(!probe.stale_at(at + 250));
        assert!(probe.stale_at(at + 251));
    }

    #[test]
    fn forget_keeps_denials_and_deny_is_per_command() {
        let probe = Probe::default();
        probe.store(
            Capabilities {
                delifeq: true,
                set_ifeq: true,
            },
            true,
        );
        probe.deny(Native::DelIfEq);
        probe.forget();
        assert_eq!(probe.known(), None);
        assert!(probe.one_server(), "the server's mode outlives a forget");
        probe.store(
            Capabilities {
                delifeq: true,
                set_ifeq: true,
            },
            false,
        );
        let bits = probe.bits.load(Ordering::Acquire);
        assert_ne!(bits & DENIED_DELIFEQ, 0);
        assert_eq!(bits & DENIED_SET_IFEQ, 0);
    }
}
