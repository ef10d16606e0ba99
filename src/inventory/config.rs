//! [`Inventory`] and its builder: prefix, retention of idempotency records, scripts.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionLike;

use super::group::{Groups, Member};
use super::order::{self, OrderLine};
use super::outcome::Order;
use super::reply::{self, Reply};
use super::store::Store;
use crate::error::{Error, Result};
use crate::keys;
use crate::script::{Acked, Call, Registry, Replication, Script, ScriptManager};

/// Atomic stock counters under one key prefix. Cheap to clone (an `Arc`).
///
/// Single-SKU operations live on [`Store`] (get one with [`store`](Self::store));
/// multi-SKU orders on [`place_order`](Self::place_order).
///
/// ```
/// use std::time::Duration;
/// use redkit::inventory::Inventory;
/// let inventory = Inventory::builder("shop:inv")
///     .retention(Duration::from_secs(3600))
///     .build()?;
/// assert_eq!(inventory.retention(), Duration::from_secs(3600));
/// let store = inventory.store("warehouse-7")?;
/// assert_eq!(store.sku_key("sku-1")?, "shop:inv:{warehouse-7}:sku:sku-1");
/// # Ok::<(), redkit::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Inventory {
    inner: Arc<Inner>,
}

#[derive(Debug)]
pub(super) struct Inner {
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

impl Inventory {
    /// How long a request id is remembered by default: 24 hours.
    pub const DEFAULT_RETENTION: Duration = Duration::from_secs(24 * 3600);
    /// The longest retention accepted: 30 days.
    pub const MAX_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);
    /// The largest stock and the largest quantity of one line: 14 decimal digits, so every
    /// value is exact in Lua's numbers.
    pub const MAX_QUANTITY: u64 = 99_999_999_999_999;
    /// The most lines one order may have.
    pub const MAX_ORDER_LINES: usize = 256;
    /// The most live reservations one SKU may hold; one more is
    /// [`Reserve::Full`](super::Reserve::Full).
    pub const MAX_RESERVATIONS_PER_SKU: u64 = 10_000;
    /// The largest batch [group commit](InventoryBuilder::group_commit) accepts.
    pub const MAX_GROUP_BATCH: usize = 1024;
    /// The batch size the README recommends for hot SKUs.
    pub const DEFAULT_GROUP_BATCH: usize = 256;
    /// The most grouped calls of one SKU [`InventoryBuilder::group_in_flight`] allows at once.
    pub const MAX_GROUP_IN_FLIGHT: usize = 16;
    /// How many grouped calls of one SKU may be in flight at once when
    /// [`InventoryBuilder::group_in_flight`] is not set: the setting the README recommends for
    /// hot SKUs (measured in README "Hot SKUs: group commit").
    pub const DEFAULT_GROUP_IN_FLIGHT: usize = 8;
    /// The longest reservation TTL accepted: 30 days.
    pub const MAX_RESERVATION_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

    /// An inventory under `prefix` (1..=64 bytes of `[A-Za-z0-9_:.-]`) with default settings.
    ///
    /// ```
    /// let inventory = redkit::inventory::Inventory::new("shop:inv")?;
    /// assert!(redkit::inventory::Inventory::new("bad prefix").is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn new(prefix: &str) -> Result<Self> {
        Self::builder(prefix).build()
    }

    /// A builder for an inventory under `prefix`.
    ///
    /// ```
    /// let inventory = redkit::inventory::Inventory::builder("shop:inv")
    ///     .with_manager(redkit::ScriptManager::new())
    ///     .build()?;
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn builder(prefix: &str) -> InventoryBuilder {
        InventoryBuilder {
            prefix: prefix.to_owned(),
            retention: Self::DEFAULT_RETENTION,
            manager: None,
            group_commit: None,
            group_in_flight: None,
        }
    }

    /// The store (shop, warehouse, ...) `id`: its escaped id is the hash tag of all its keys.
    /// Fails when `id` is empty or longer than [`MAX_PART_LEN`](crate::keys::MAX_PART_LEN).
    ///
    /// ```
    /// let inventory = redkit::inventory::Inventory::new("shop:inv")?;
    /// let store = inventory.store("berlin")?;
    /// assert_eq!(store.id(), "berlin");
    /// assert!(inventory.store("").is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn store(&self, id: &str) -> Result<Store> {
        let base = keys::tagged_part(&self.inner.prefix, "store", id)?;
        Ok(Store::new(self.clone(), id.to_owned(), base))
    }

    /// How long request ids are remembered.
    ///
    /// ```
    /// use redkit::inventory::Inventory;
    /// assert_eq!(Inventory::new("inv")?.retention(), Inventory::DEFAULT_RETENTION);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn retention(&self) -> Duration {
        Duration::from_millis(self.inner.retention_ms)
    }

    /// The largest batch of [group commit](InventoryBuilder::group_commit), or `None` when
    /// decrements are not grouped (the default).
    ///
    /// ```
    /// use redkit::inventory::Inventory;
    /// assert_eq!(Inventory::new("inv")?.group_commit(), None);
    /// let hot = Inventory::builder("inv").group_commit(Inventory::DEFAULT_GROUP_BATCH).build()?;
    /// assert_eq!(hot.group_commit(), Some(Inventory::DEFAULT_GROUP_BATCH));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn group_commit(&self) -> Option<usize> {
        self.inner.groups.as_ref().map(|g| g.max_batch())
    }

    /// How many grouped calls of one SKU may be in flight at once
    /// ([`InventoryBuilder::group_in_flight`]), or `None` without group commit.
    ///
    /// ```
    /// use redkit::inventory::Inventory;
    /// assert_eq!(Inventory::new("inv")?.group_in_flight(), None);
    /// let hot = Inventory::builder("inv").group_commit(64).build()?;
    /// assert_eq!(hot.group_in_flight(), Some(Inventory::DEFAULT_GROUP_IN_FLIGHT));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn group_in_flight(&self) -> Option<usize> {
        self.inner.groups.as_ref().map(|g| g.max_in_flight())
    }

    /// The script manager running the scripts (for its [`Stats`](crate::Stats)).
    ///
    /// ```
    /// let inventory = redkit::inventory::Inventory::new("inv")?;
    /// assert_eq!(inventory.manager().stats().noscript_fallbacks, 0);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn manager(&self) -> &ScriptManager {
        &self.inner.manager
    }

    /// Places a multi-SKU order: every line is decremented, or (if any line is short) none
    /// is and the outcome lists the short lines. One script call.
    ///
    /// All lines must come from one [`Store`] (one hash slot); lines of different stores are
    /// refused with [`Error::CrossSlot`] before anything is sent, as are an empty order, more
    /// than [`MAX_ORDER_LINES`](Self::MAX_ORDER_LINES) lines and a SKU listed twice
    /// ([`Error::InvalidInput`]). With a `request_id`, a repeat of the same order within the
    /// retention returns [`Order::Duplicate`]; the id reused for a different order is
    /// [`Order::IdReused`] and changes nothing. A SKU without stock is
    /// [`Error::NotFound`]; a stock that is not an integer is [`Error::CorruptData`]; both
    /// change nothing.
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use redkit::inventory::{Inventory, Order};
    /// let inventory = Inventory::new("shop:inv")?;
    /// let berlin = inventory.store("berlin")?;
    /// let lines = [berlin.line("sku-1", 2)?, berlin.line("sku-2", 1)?];
    /// match inventory.place_order(&mut conn, &lines, Some("order-1001")).await? {
    ///     Order::Placed { remaining } => println!("placed, left: {remaining:?}"),
    ///     Order::Insufficient { short } => println!("short: {short:?}"),
    ///     other => println!("{other:?}"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn place_order<C: ConnectionLike>(
        &self,
        conn: &mut C,
        lines: &[OrderLine],
        request_id: Option<&str>,
    ) -> Result<Order> {
        order::place(self, conn, lines, request_id, None)
            .await
            .map(|a| a.outcome)
    }

    /// [`place_order`](Self::place_order), then `WAIT` for `replication` in the same round
    /// trip: the outcome with how many replicas acknowledged the write. A caller can refuse to
    /// confirm an order whose deduction is on the primary only (it could be lost in a
    /// failover). `WAIT` does not roll anything back: an order acknowledged by fewer replicas
    /// than asked is still placed on the primary; retry with the same request id to learn its
    /// outcome.
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use std::time::Duration;
    /// use redkit::inventory::Inventory;
    /// use redkit::script::Replication;
    /// let inventory = Inventory::new("shop:inv")?;
    /// let berlin = inventory.store("berlin")?;
    /// let lines = [berlin.line("sku-1", 2)?];
    /// let wait = Replication::new(1, Duration::from_millis(200))?;
    /// let acked = inventory.place_order_acked(&mut conn, &lines, Some("order-1001"), wait).await?;
    /// if acked.outcome.is_applied() && !acked.is_replicated() {
    ///     println!("placed on the primary only; confirm later");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn place_order_acked<C: ConnectionLike>(
        &self,
        conn: &mut C,
        lines: &[OrderLine],
        request_id: Option<&str>,
        replication: Replication,
    ) -> Result<Acked<Order>> {
        order::place(self, conn, lines, request_id, Some(replication)).await
    }

    pub(super) fn inner(&self) -> &Inner {
        &self.inner
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
            None => Ok(Acked::new(
                self.inner.manager.invoke(conn, call).await?,
                0,
                0,
            )),
            // Boxed: the calls without WAIT keep a small future.
            Some(r) => Box::pin(self.inner.manager.invoke_acked(conn, call, r)).await,
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
        reservations: &[String],
        expiries: &[String],
        quantities: &[u64],
        record_key: Option<String>,
        replication: Option<Replication>,
    ) -> Result<Acked<Reply>> {
        let script = self.inner.apply;
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
            call.key(key);
        }
        if let Some(record) = &record_key {
            call.key(record);
        }
        call.arg(mode.as_str()).arg(keys.len());
        for quantity in quantities {
            call.arg(*quantity);
        }
        if record_key.is_some() {
            call.arg(self.inner.retention_ms).arg(reply::fingerprint(
                mode.as_str(),
                keys,
                quantities,
            ));
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
        let script = self.inner.group;
        let records = members.iter().filter(|m| m.record.is_some()).count();
        let mut call = Call::with_key_count(script, 3 + records);
        for key in keys {
            call.key(key);
        }
        for (record, _) in members.iter().filter_map(|m| m.record.as_ref()) {
            call.key(record);
        }
        call.arg(if records > 0 {
            self.inner.retention_ms
        } else {
            0
        })
        .arg(members.len());
        for member in members {
            call.arg(member.quantity);
        }
        for (j, member) in members.iter().enumerate() {
            if let Some((_, fingerprint)) = &member.record {
                call.arg(j + 1).arg(fingerprint.as_str());
            }
        }
        let value: redis::Value = self.inner.manager.invoke(conn, &call).await?;
        reply::settle_group(script, value, members)
    }
}

/// Builds an [`Inventory`]; see [`Inventory::builder`].
///
/// ```
/// use std::time::Duration;
/// let inventory = redkit::inventory::Inventory::builder("inv")
///     .retention(Duration::from_secs(600))
///     .build()?;
/// # Ok::<(), redkit::Error>(())
/// ```
#[derive(Debug)]
#[must_use]
pub struct InventoryBuilder {
    prefix: String,
    retention: Duration,
    manager: Option<ScriptManager>,
    group_commit: Option<usize>,
    group_in_flight: Option<usize>,
}

impl InventoryBuilder {
    /// How long request ids are remembered (1 ms ..= [`Inventory::MAX_RETENTION`]); default
    /// [`Inventory::DEFAULT_RETENTION`]. A retry later than this is treated as a new request.
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// The script manager to use (share one to share its [`Stats`](crate::Stats)); default a
    /// new one.
    pub fn with_manager(mut self, manager: ScriptManager) -> Self {
        self.manager = Some(manager);
        self
    }

    /// Group commit for hot SKUs (off by default): concurrent [`Store::decrement`] calls of
    /// ONE SKU through this inventory (any clone of it or of its stores) are coalesced. A
    /// caller alone goes straight through (the ordinary call, no timer, no added latency);
    /// callers arriving while [`group_in_flight`](Self::group_in_flight) calls of that SKU
    /// (default [`Inventory::DEFAULT_GROUP_IN_FLIGHT`]) are in flight queue up, and when one
    /// returns the first of them sends one script call settling the next `max_batch` (2 ..=
    /// [`Inventory::MAX_GROUP_BATCH`]; [`Inventory::DEFAULT_GROUP_BATCH`] is a good start) in
    /// arrival order, each with its own quantity and request id, and hands each its own
    /// outcome: the same outcomes, in the same order, as if each had been sent alone.
    ///
    /// The group's call uses the connection of the caller that leads it, so every caller of
    /// one inventory must use connections to the same Redis deployment (as they must anyway).
    /// If the group's call fails, every member gets the error (see [`Store::decrement`] for
    /// what a lost reply means); if the leading caller's future is dropped while the call is
    /// in flight, the others get [`Error::Interrupted`] (it may have run): where futures may
    /// be dropped (an HTTP handler whose client went away), run each decrement in a task of
    /// its own (`tokio::spawn`) so the call is read for the group. Other operations
    /// (`decrement_acked`, restocks, orders, reservations) are never grouped.
    ///
    /// ```
    /// use redkit::inventory::Inventory;
    /// let inventory = Inventory::builder("shop:inv")
    ///     .group_commit(Inventory::DEFAULT_GROUP_BATCH)
    ///     .build()?;
    /// assert!(Inventory::builder("shop:inv").group_commit(1).build().is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn group_commit(mut self, max_batch: usize) -> Self {
        self.group_commit = Some(max_batch);
        self
    }

    /// With [group commit](Self::group_commit): how many calls of ONE SKU may be in flight
    /// at once (1 ..= [`Inventory::MAX_GROUP_IN_FLIGHT`]; default
    /// [`Inventory::DEFAULT_GROUP_IN_FLIGHT`], 8, the README's recommendation for hot SKUs
    /// whether the application shares its cores with Redis or not). With `k > 1`, up to `k`
    /// calls travel at once, so the round trips overlap: on a hot SKU this is what lifts
    /// throughput past one batch per round trip. A caller that finds no call of its SKU in
    /// flight goes alone at once; one that finds a free slot while another call is in flight
    /// gathers: it yields to the runtime once, so the callers woken with it (by a batch that
    /// just settled) queue behind it, and sends them with it as one batch. Each batch still
    /// settles its members in arrival order and nobody is oversold (every call settles on the
    /// stock Redis holds when it runs), but two calls in flight may run in either order, as
    /// two ungrouped calls would: a caller that arrived later can be served before one that
    /// arrived earlier if their calls were in flight together. With 1, callers queue as soon
    /// as one call is in flight and each batch is sent when the call before it returns:
    /// batches run strictly in arrival order, one round trip after another, which costs
    /// throughput (measured in README "Hot SKUs: group commit": with 8 buyers 1 in flight is
    /// slower than not grouping at all; with 8 in flight it is faster at 8 and 64 buyers, and
    /// at 512 buyers 0.87x-0.95x of what 1 in flight does there).
    ///
    /// ```
    /// use redkit::inventory::Inventory;
    /// let hot = Inventory::builder("shop:inv")
    ///     .group_commit(Inventory::DEFAULT_GROUP_BATCH)
    ///     .group_in_flight(8)
    ///     .build()?;
    /// assert_eq!(hot.group_in_flight(), Some(8));
    /// assert!(Inventory::builder("shop:inv").group_in_flight(2).build().is_err(), "needs group_commit");
    /// assert!(Inventory::builder("shop:inv").group_commit(8).group_in_flight(0).build().is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn group_in_flight(mut self, calls: usize) -> Self {
        self.group_in_flight = Some(calls);
        self
    }

    /// Checks the settings and builds the inventory.
    pub fn build(self) -> Result<Inventory> {
        keys::validate_prefix("prefix", &self.prefix)?;
        if self.retention < Duration::from_millis(1) || self.retention > Inventory::MAX_RETENTION {
            return Err(Error::invalid(
                "retention",
                format!(
                    "must be 1 ms ..= {} days",
                    Inventory::MAX_RETENTION.as_secs() / 86_400
                ),
            ));
        }
        let in_flight = match (self.group_in_flight, self.group_commit) {
            (None, _) => Inventory::DEFAULT_GROUP_IN_FLIGHT,
            (Some(_), None) => {
                return Err(Error::invalid(
                    "group_in_flight",
                    "applies to group commit only: set group_commit too",
                ))
            }
            (Some(k @ 1..=Inventory::MAX_GROUP_IN_FLIGHT), Some(_)) => k,
            (Some(_), Some(_)) => {
                return Err(Error::invalid(
                    "group_in_flight",
                    format!("must be 1..={}", Inventory::MAX_GROUP_IN_FLIGHT),
                ))
            }
        };
        let groups = match self.group_commit {
            None => None,
            Some(n @ 2..=Inventory::MAX_GROUP_BATCH) => Some(Arc::new(Groups::new(n, in_flight))),
            Some(_) => {
                return Err(Error::invalid(
                    "group_commit",
                    format!("max batch must be 2..={}", Inventory::MAX_GROUP_BATCH),
                ))
            }
        };
        let registry = Registry::global();
        Ok(Inventory {
            inner: Arc::new(Inner {
                prefix: self.prefix,
                retention_ms: u64::try_from(self.retention.as_millis()).unwrap_or(u64::MAX),
                manager: self.manager.unwrap_or_default(),
                set: registry.require("inventory_set", 2)?,
                get: registry.require("inventory_get", 4)?,
                apply: registry.require("inventory_apply", 11)?,
                reserve: registry.require("inventory_reserve", 4)?,
                migrate: registry.require("inventory_migrate", 1)?,
                group: registry.require("inventory_group", 5)?,
                groups,
            }),
        })
    }
}

/// Rejects a quantity of 0 or above [`Inventory::MAX_QUANTITY`] before any round trip.
pub(super) fn check_quantity(quantity: u64) -> Result<()> {
    if quantity == 0 || quantity > Inventory::MAX_QUANTITY {
        return Err(Error::invalid(
            "quantity",
            format!("must be 1..={}", Inventory::MAX_QUANTITY),
        ));
    }
    Ok(())
}
