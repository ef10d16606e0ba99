//! The inventory's engine, shared by an [`Inventory`](super::Inventory), its clones and its
//! [`Store`](super::Store)s: the key prefix, the retention of request records, the script
//! manager and scripts, the queues of group commit, the limits on input, and the calls of
//! `inventory_apply` and `inventory_group`.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionLike;

use super::group::{Groups, Member};
use super::reply::{self, Reply};
use crate::error::{Error, Result};
use crate::group_commit::GroupCommit;
use crate::script::{embedded, Acked, Call, Replication, Script, ScriptManager};

/// The largest stock and the largest quantity of one line: 14 decimal digits, so every value
/// is exact in Lua's numbers.
pub(super) const MAX_QUANTITY: u64 = 99_999_999_999_999;
/// The most lines one order may have.
pub(super) const MAX_ORDER_LINES: usize = 256;
/// The most live reservations one SKU may hold.
pub(super) const MAX_RESERVATIONS_PER_SKU: u64 = 10_000;
/// The longest reservation TTL accepted: 30 days.
pub(super) const MAX_RESERVATION_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// What every clone of one inventory shares.
#[derive(Debug)]
pub(super) struct Engine {
    pub(super) prefix: String,
    pub(super) retention_ms: u64,
    pub(super) manager: ScriptManager,
    pub(super) set: &'static Script,
    pub(super) get: &'static Script,
    pub(super) apply: &'static Script,
    pub(super) reserve: &'static Script,
    pub(super) migrate: &'static Script,
    pub(super) group: &'static Script,
    /// The per-SKU queues of group commit, when enabled.
    pub(super) groups: Option<Arc<Groups>>,
}

/// Operation of `inventory_apply`.
#[derive(Clone, Copy, Debug)]
pub(super) enum Mode {
    Take,
    Put,
}

impl Mode {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::Take => "take",
            Self::Put => "put",
        }
    }
}

impl Engine {
    /// An engine with redkit's inventory scripts (the settings already checked).
    pub(super) fn new(
        prefix: String,
        retention_ms: u64,
        manager: ScriptManager,
        groups: Option<Arc<Groups>>,
    ) -> Self {
        Self {
            prefix,
            retention_ms,
            manager,
            set: embedded::INVENTORY_SET.script(),
            get: embedded::INVENTORY_GET.script(),
            apply: embedded::INVENTORY_APPLY.script(),
            reserve: embedded::INVENTORY_RESERVE.script(),
            migrate: embedded::INVENTORY_MIGRATE.script(),
            group: embedded::INVENTORY_GROUP.script(),
            groups,
        }
    }

    /// Runs one call, with `WAIT` after it in the same pipeline when `replication` is given
    /// (without it, the counts of the [`Acked`] are 0 of 0).
    pub(super) async fn run<C: ConnectionLike>(
        &self,
        conn: &mut C,
        call: &Call<'_>,
        replication: Option<Replication>,
    ) -> Result<Acked<redis::Value>> {
        match replication {
            None => Ok(Acked::new(self.manager.invoke(conn, call).await?, 0, 0)),
            // Boxed: the calls without WAIT keep a small future.
            Some(r) => Box::pin(self.manager.replicated(r).invoke(conn, call)).await,
        }
    }

    /// Runs `inventory_apply` over `keys` (one store; `reservations[i]` and `expiries[i]` are
    /// the reservation hash and expiry ZSET of `keys[i]`) with an optional request record.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn apply<C: ConnectionLike>(
        &self,
        conn: &mut C,
        mode: Mode,
        keys: &[&str],
        reservations: &[&str],
        expiries: &[&str],
        quantities: &[u64],
        record_key: Option<String>,
        replication: Option<Replication>,
    ) -> Result<Acked<Reply>> {
        let script = self.apply;
        if reservations.len() != keys.len() || expiries.len() != keys.len() {
            return Err(Error::invalid("order", "one reservation key per line"));
        }
        let key_count = keys
            .len()
            .checked_mul(3)
            .and_then(|n| n.checked_add(usize::from(record_key.is_some())))
            .ok_or_else(|| Error::invalid("order", "too many lines"))?;
        let mut call = Call::with_key_count(script, key_count);
        for key in keys {
            call.key(*key);
        }
        for key in reservations.iter().chain(expiries) {
            call.key(*key);
        }
        if let Some(record) = &record_key {
            call.key(record);
        }
        // A single take of 1 (the common decrement) sends neither the operation, the line
        // count nor the quantity: the script's short form (each argument costs Redis time per
        // call).
        if !(matches!(mode, Mode::Take) && quantities == [1]) {
            call.arg(mode.as_str()).arg(keys.len());
            for quantity in quantities {
                call.arg(*quantity);
            }
        }
        if record_key.is_some() {
            call.arg(self.retention_ms)
                .arg(reply::fingerprint(mode.as_str(), keys, quantities));
        }
        let acked = self.run(conn, &call, replication).await?;
        let (value, ack) = acked.split();
        let reply = reply::decode(script, value, keys.len())?;
        Ok(ack.map(|()| reply))
    }

    /// Runs `inventory_group`: settles `members` (decrements of the SKU at `keys[0]`, in
    /// order) in one call; one reply per member, replayed from the stock and records the
    /// script reports (see [`reply::settle_group`]).
    pub(super) async fn apply_group<C: ConnectionLike>(
        &self,
        conn: &mut C,
        keys: [&str; 3],
        members: &[Member],
    ) -> Result<Vec<Reply>> {
        let script = self.group;
        let records = members.iter().filter(|m| m.record.is_some()).count();
        let mut call = Call::with_key_count(script, 3 + records);
        for key in keys {
            call.key(key);
        }
        for (record, _) in members.iter().filter_map(|m| m.record.as_ref()) {
            call.key(record);
        }
        call.arg(if records > 0 { self.retention_ms } else { 0 })
            .arg(members.len());
        // A group without records whose every member asks for 1 sends no quantities: the
        // script then counts 1 per member, for at most `GroupCommit::MAX_BATCH` (1024)
        // members (a flash sale's common call; each argument costs Redis time per call).
        let ones = records == 0
            && members.len() <= GroupCommit::MAX_BATCH
            && members.iter().all(|m| m.quantity == 1);
        if !ones {
            for member in members {
                call.arg(member.quantity);
            }
        }
        for (j, member) in members.iter().enumerate() {
            if let Some((_, fingerprint)) = &member.record {
                call.arg(j + 1).arg(fingerprint.as_str());
            }
        }
        let value: redis::Value = self.manager.invoke(conn, &call).await?;
        reply::settle_group(script, value, members)
    }
}

/// Rejects a quantity of 0 or above [`MAX_QUANTITY`] before any round trip.
pub(super) fn check_quantity(quantity: u64) -> Result<()> {
    if quantity == 0 || quantity > MAX_QUANTITY {
        return Err(Error::invalid(
            "quantity",
            format!("must be 1..={MAX_QUANTITY}"),
        ));
    }
    Ok(())
}
