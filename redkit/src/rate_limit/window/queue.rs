//! Group commit of fixed-window checks ([`Grouped`](super::Grouped)): concurrent checks through one limiter (and its
//! clones) are settled by ONE `fixed_window_group` (aligned to the clock:
//! `fixed_window_aligned_group`) call, each on its own counter (the queues:
//! [`crate::group_commit`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use redis::aio::ConnectionLike;
use redis::cluster_routing::Slot;
use redis::{ErrorKind, ServerErrorKind, Value};

use crate::error::{Error, Result};
use crate::group_commit::metrics::GroupOperation;
use crate::group_commit::{self, GroupCommit, Grouped, Turn};
use crate::script::{script_error, Call, Script, ScriptManager};

/// What a group needs of its limiter (a [`Window`](super::Window) of either kind).
pub(super) trait GroupSender: Sync {
    /// The limit of every counter.
    fn limit(&self) -> u32;
    /// The window in whole milliseconds.
    fn window_ms(&self) -> u64;
    /// Whether windows are aligned to the clock (each check then has its own TTL).
    fn is_aligned_to_clock(&self) -> bool;
    /// The manager running the calls.
    fn manager(&self) -> &ScriptManager;
    /// The call of one check alone.
    fn single_call(&self, redis_key: &str, cost: u32, ttl_ms: u64) -> Call<'static>;
}

/// One queued check: its counter, cost and window (aligned to the clock: the TTL of a new
/// counter, which depends on when the check was made, and the number of its window).
#[derive(Debug)]
pub(super) struct Check {
    key: String,
    cost: u32,
    ttl_ms: u64,
    window: u64,
}

/// Checks grouped per queue: one queue for the limiter, or one per hash slot once a
/// group's keys were refused as spanning slots (a Cluster).
#[derive(Debug)]
pub(super) enum Checks {}

impl Grouped for Checks {
    type Key = Option<Slot>;
    type Payload = Check;
    /// The check's reply (as `fixed_window.v9` answers it); errors already mapped.
    type Outcome = Value;
    const WHAT: GroupOperation = GroupOperation::RateLimitCheck;
}

type Lead = group_commit::Lead<Checks>;
type Member = group_commit::Member<Checks>;

/// The queues of one limiter and its clones.
#[derive(Debug)]
pub(super) struct WindowGroups {
    groups: Arc<group_commit::Groups<Checks>>,
    /// The group script (aligned to the clock or not).
    script: &'static Script,
    /// Set once Redis refused a group for spanning hash slots: from then on each slot has its
    /// own queue, so a group's keys share one slot.
    by_slot: AtomicBool,
}

impl WindowGroups {
    pub(super) fn new(settings: GroupCommit, script: &'static Script) -> Self {
        Self {
            groups: Arc::new(group_commit::Groups::new(settings)),
            script,
            by_slot: AtomicBool::new(false),
        }
    }

    pub(super) fn settings(&self) -> GroupCommit {
        self.groups.settings()
    }

    /// The group script.
    #[cfg(test)]
    pub(super) fn script(&self) -> &'static Script {
        self.script
    }

    fn queue(&self, redis_key: &str) -> Option<Slot> {
        self.by_slot
            .load(Ordering::Relaxed)
            .then(|| Slot::for_key(redis_key))
    }
}

impl WindowGroups {
    /// Sends the check of `cost` on `redis_key` (`ttl_ms` its window or new counter's TTL;
    /// `window` the number of its window when aligned to the clock, else 0) through group
    /// commit: alone when no other check of its queue is in flight, else queued and settled
    /// with others by one group call of `limiter`'s.
    pub(super) async fn send<L: GroupSender, C: ConnectionLike>(
        &self,
        limiter: &L,
        conn: &mut C,
        redis_key: &str,
        cost: u32,
        (ttl_ms, window): (u64, u64),
    ) -> Result<Value> {
        let check = Check {
            key: redis_key.to_owned(),
            cost,
            ttl_ms,
            window,
        };
        let queue = self.queue(redis_key);
        let lead = match self.groups.turn(&queue, Member::new(check)).await {
            Turn::Done(outcome) => return outcome,
            Turn::Lead(lead) => lead,
        };
        // Boxed: only a group's leader sends, so a waiter's future stays small.
        Box::pin(self.lead_group(limiter, conn, lead)).await
    }

    /// Sends `lead`'s group and answers its members: alone, the single check's call; else
    /// one group call. A group refused for spanning hash slots ran nothing:
    /// its members are sent one by one, and later groups are formed per slot.
    async fn lead_group<L: GroupSender, C: ConnectionLike>(
        &self,
        limiter: &L,
        conn: &mut C,
        mut lead: Lead,
    ) -> Result<Value> {
        lead.gather().await;
        lead.sending();
        if let [alone] = lead.members() {
            let call = limiter.single_call(&alone.key, alone.cost, alone.ttl_ms);
            let outcome = limiter.manager().invoke(conn, &call).await;
            return lead.settle(vec![outcome]);
        }
        let script = self.script;
        let members = lead.members();
        let group = group_call(limiter, script, members);
        match limiter.manager().invoke::<Value, _>(conn, &group).await {
            Ok(Value::Array(items)) if items.len() == members.len() => {
                let outcomes = items
                    .into_iter()
                    .map(|item| element(script, item))
                    .collect();
                lead.settle(outcomes)
            }
            Ok(_) => lead.fail(Error::unexpected(
                script.id(),
                "expected one reply per grouped check",
            )),
            Err(e) if is_cross_slot(&e) => {
                self.by_slot.store(true, Ordering::Relaxed);
                let mut outcomes = Vec::with_capacity(members.len());
                for member in members {
                    let alone = limiter.single_call(&member.key, member.cost, member.ttl_ms);
                    outcomes.push(limiter.manager().invoke(conn, &alone).await);
                }
                lead.settle(outcomes)
            }
            Err(e) => lead.fail(e),
        }
    }
}

/// The group call of `members`: `fixed_window_group` (limit, window, the costs) or, aligned
/// to the clock, `fixed_window_aligned_group` (limit, the new counters' TTL, the costs). The
/// costs are left out when every one is 1: both scripts then count 1 per key. Aligned to the
/// clock, checks of one window send one TTL (each argument costs Redis time per call): the
/// smallest, from the latest clock reading, so a counter the call creates still outlives its
/// window by the grace; checks of several windows (a group across a window's end) send each
/// its own.
fn group_call<L: GroupSender>(
    limiter: &L,
    script: &'static Script,
    members: &[Member],
) -> Call<'static> {
    let mut group = Call::with_key_count(script, members.len());
    for member in members {
        group.key(&member.key);
    }
    group.arg(limiter.limit());
    if limiter.is_aligned_to_clock() {
        let window = members.first().map(|member| member.window);
        let shared = members.iter().all(|member| Some(member.window) == window);
        match members.iter().map(|member| member.ttl_ms).min() {
            Some(ttl_ms) if shared => {
                group.arg(ttl_ms);
            }
            _ => {
                for member in members {
                    group.arg(member.ttl_ms);
                }
            }
        }
    } else {
        // Every member's window is the limiter's.
        group.arg(limiter.window_ms());
    }
    if members.iter().any(|member| member.cost != 1) {
        for member in members {
            group.arg(member.cost);
        }
    }
    group
}

/// One check's reply in a group's: an error comes as the text of the error (a string).
fn element(script: &Script, item: Value) -> Result<Value> {
    let Value::BulkString(text) = item else {
        return Ok(item);
    };
    // The text as the error reply it stands for: `-<text>\r\n` (one line: no CR or LF).
    if text.contains(&b'\r') || text.contains(&b'\n') {
        return Err(Error::unexpected(script.id(), "a multi-line error text"));
    }
    let mut line = Vec::with_capacity(text.len() + 3);
    line.push(b'-');
    line.extend_from_slice(&text);
    line.extend_from_slice(b"\r\n");
    match redis::parse_redis_value(&line) {
        Ok(Value::ServerError(e)) => Err(script_error(script, e.into())),
        _ => Err(Error::unexpected(script.id(), "an unreadable error text")),
    }
}

/// Redis refused the call because its keys span hash slots (nothing ran).
fn is_cross_slot(e: &Error) -> bool {
    matches!(e, Error::Redis(r) if r.kind() == ErrorKind::Server(ServerErrorKind::CrossSlot))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::embedded::FIXED_WINDOW_GROUP as SCRIPT;

    #[test]
    fn an_element_is_a_value_or_a_one_line_error_text() {
        assert_eq!(
            element(SCRIPT.script(), Value::Int(3)).unwrap(),
            Value::Int(3)
        );
        assert!(matches!(
            element(SCRIPT.script(), Value::BulkString(b"WRONGTYPE no".to_vec())),
            Err(Error::WrongType { .. })
        ));
        for text in [&b"ERR a\nb"[..], b"ERR a\rb", b"ERR a\r\nb"] {
            assert!(
                matches!(
                    element(SCRIPT.script(), Value::BulkString(text.to_vec())),
                    Err(Error::UnexpectedReply { .. })
                ),
                "{text:?}"
            );
        }
    }

    /// Aligned to the clock, a group whose checks share a window sends one TTL, the smallest
    /// (the latest clock reading); a group across a window's end sends each check's.
    #[test]
    fn an_aligned_group_of_one_window_sends_one_ttl() {
        use crate::rate_limit::{AlignedWindow, Rate};
        let limiter = AlignedWindow::new("t", Rate::per_minute(crate::nonzero!(100))).unwrap();
        let check = |key: &str, ttl_ms, window| {
            Member::new(Check {
                key: key.to_owned(),
                cost: 1,
                ttl_ms,
                window,
            })
        };
        // EVALSHA, sha, key count, the two keys, then the arguments.
        let args = |members: &[Member]| -> Vec<String> {
            let script = crate::script::embedded::FIXED_WINDOW_ALIGNED_GROUP.script();
            let call = group_call(&limiter, script, members);
            call.evalsha()
                .args_iter()
                .skip(5)
                .map(|arg| match arg {
                    redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                    _ => String::new(),
                })
                .collect()
        };
        assert_eq!(
            args(&[check("a", 61_000, 7), check("b", 60_500, 7)]),
            ["100", "60500"]
        );
        assert_eq!(
            args(&[check("a", 500, 7), check("b", 65_000, 8)]),
            ["100", "500", "65000"]
        );
    }

    #[test]
    fn only_crossslot_is_cross_slot() {
        assert!(!is_cross_slot(&Error::invalid("x", "y")));
        let wrong_type = redis::parse_redis_value(b"-WRONGTYPE no\r\n").unwrap();
        let Value::ServerError(e) = wrong_type else {
            unreachable!()
        };
        assert!(!is_cross_slot(&Error::Redis(e.into())));
        let Value::ServerError(e) = redis::parse_redis_value(b"-CROSSSLOT Keys\r\n").unwrap()
        else {
            unreachable!()
        };
        assert!(is_cross_slot(&Error::Redis(e.into())));
    }
}
