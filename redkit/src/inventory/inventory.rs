//! [`Inventory`], the handle users hold, and [`InventoryBuilder`], its settings: the key
//! prefix, the retention of request records, the script manager and group commit.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionLike;

use super::engine::{self, Engine};
use super::group::Groups;
use super::order::{self, OrderLine};
use super::outcome::{counted, Order};
use super::store::Store;
use crate::error::{Error, Result};
use crate::group_commit::GroupCommit;
use crate::inventory::metrics::InventoryOp;
use crate::keys;
use crate::script::{Replicated, Replication, ScriptManager};

/// Atomic stock counters under one key prefix. Cheap to clone (an `Arc`).
///
/// Single-SKU operations live on [`Store`] (get one with [`store`](Self::store));
/// multi-SKU orders on [`place_order`](Self::place_order).
///
/// ```
/// use std::time::Duration;
/// use redkit::inventory::Inventory;
/// let inventory = Inventory::builder()
///     .prefix("shop:inv")
///     .retention(Duration::from_secs(3600))
///     .build()?;
/// assert_eq!(inventory.retention(), Duration::from_secs(3600));
/// let store = inventory.store("warehouse-7")?;
/// assert_eq!(store.key("sku-1")?, "shop:inv:{warehouse-7}:sku:sku-1");
/// # Ok::<(), redkit::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Inventory {
    engine: Arc<Engine>,
}

impl Inventory {
    /// The key prefix of an inventory built without [`InventoryBuilder::prefix`].
    ///
    /// ```
    /// use redkit::inventory::Inventory;
    /// let inventory = Inventory::builder().build()?;
    /// assert_eq!(inventory.prefix(), Inventory::DEFAULT_PREFIX);
    /// assert_eq!(inventory.store("berlin")?.key("mug")?, "redkit:inv:{berlin}:sku:mug");
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub const DEFAULT_PREFIX: &'static str = "redkit:inv";
    /// How long a request id is remembered by default: 24 hours.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::inventory::Inventory;
    /// let inventory = Inventory::new("shop:inv")?;
    /// assert_eq!(inventory.retention(), Inventory::DEFAULT_RETENTION);
    /// assert_eq!(inventory.retention(), Duration::from_secs(24 * 3600));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub const DEFAULT_RETENTION: Duration = Duration::from_secs(24 * 3600);
    /// The longest retention accepted: 30 days.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::inventory::Inventory;
    /// let month = Inventory::builder().retention(Inventory::MAX_RETENTION).build()?;
    /// assert_eq!(month.retention(), Duration::from_secs(30 * 24 * 3600));
    /// let longer = Inventory::MAX_RETENTION + Duration::from_millis(1);
    /// assert!(Inventory::builder().retention(longer).build().is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub const MAX_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);
    /// The largest stock and the largest quantity of one line: 14 decimal digits, so every
    /// value is exact in Lua's numbers.
    ///
    /// ```
    /// use redkit::inventory::Inventory;
    /// let store = Inventory::new("inv")?.store("s1")?;
    /// assert_eq!(Inventory::MAX_QUANTITY, 99_999_999_999_999);
    /// assert!(store.line("sku-1", Inventory::MAX_QUANTITY).is_ok());
    /// assert!(store.line("sku-1", Inventory::MAX_QUANTITY + 1).is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub const MAX_QUANTITY: u64 = engine::MAX_QUANTITY;
    /// The most lines one order may have.
    ///
    /// A longer order is refused before anything is sent:
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redkit::Result<()> {
    /// # let client = redis::Client::open("redis://127.0.0.1:1/")?;
    /// # let mut conn = redis::aio::ConnectionManager::new_lazy_with_config(client, redkit::connect::manager_config(Default::default()))?;
    /// use redkit::inventory::Inventory;
    /// let inventory = Inventory::new("inv")?;
    /// let store = inventory.store("s1")?;
    /// let lines = (0..=Inventory::MAX_ORDER_LINES)
    ///     .map(|i| store.line(&format!("sku-{i}"), 1))
    ///     .collect::<redkit::Result<Vec<_>>>()?;
    /// assert_eq!(lines.len(), 257);
    /// // `conn`: any connection; nothing reaches Redis.
    /// let refused = inventory.place_order(&mut conn, &lines, None).await;
    /// assert!(matches!(refused, Err(redkit::Error::InvalidInput { .. })));
    /// # Ok(()) }
    /// ```
    pub const MAX_ORDER_LINES: usize = engine::MAX_ORDER_LINES;
    /// The most live reservations one SKU may hold; one more is
    /// [`Reserve::Full`](super::Reserve::Full).
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use std::time::Duration;
    /// use redkit::inventory::{Inventory, Reserve};
    /// let store = Inventory::new("inv")?.store("s1")?;
    /// let ttl = Duration::from_secs(15 * 60);
    /// if let Reserve::Full { limit } = store.reserve(&mut conn, "sku-1", 1, ttl, "cart-7").await? {
    ///     assert_eq!(limit, Inventory::MAX_RESERVATIONS_PER_SKU);
    ///     println!("{limit} carts already hold sku-1; try again later");
    /// }
    /// # Ok(()) }
    /// ```
    pub const MAX_RESERVATIONS_PER_SKU: u64 = engine::MAX_RESERVATIONS_PER_SKU;
    /// The longest reservation TTL accepted: 30 days.
    ///
    /// A longer TTL is refused before anything is sent:
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> redkit::Result<()> {
    /// # let client = redis::Client::open("redis://127.0.0.1:1/")?;
    /// # let mut conn = redis::aio::ConnectionManager::new_lazy_with_config(client, redkit::connect::manager_config(Default::default()))?;
    /// use std::time::Duration;
    /// use redkit::inventory::Inventory;
    /// let store = Inventory::new("inv")?.store("s1")?;
    /// let ttl = Inventory::MAX_RESERVATION_TTL + Duration::from_millis(1);
    /// // `conn`: any connection; nothing reaches Redis.
    /// let refused = store.reserve(&mut conn, "sku-1", 1, ttl, "cart-7").await;
    /// assert!(matches!(refused, Err(redkit::Error::InvalidInput { what: "ttl", .. })));
    /// # Ok(()) }
    /// ```
    pub const MAX_RESERVATION_TTL: Duration = engine::MAX_RESERVATION_TTL;

    /// An inventory under `prefix` (1..=64 bytes of `[A-Za-z0-9_:.-]`) with default settings:
    /// `Inventory::builder().prefix(prefix).build()`.
    ///
    /// ```
    /// let inventory = redkit::inventory::Inventory::new("shop:inv")?;
    /// assert_eq!(inventory.prefix(), "shop:inv");
    /// assert!(redkit::inventory::Inventory::new("bad prefix").is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn new(prefix: &str) -> Result<Self> {
        Self::builder().prefix(prefix).build()
    }

    /// A builder for an inventory, under [`DEFAULT_PREFIX`](Self::DEFAULT_PREFIX) unless
    /// [`prefix`](InventoryBuilder::prefix) says otherwise.
    ///
    /// ```
    /// use redkit::inventory::Inventory;
    /// let inventory = Inventory::builder()
    ///     .with_manager(redkit::ScriptManager::new())
    ///     .build()?;
    /// assert_eq!(inventory.prefix(), Inventory::DEFAULT_PREFIX);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn builder() -> InventoryBuilder {
        InventoryBuilder {
            prefix: Self::DEFAULT_PREFIX.to_owned(),
            retention: Self::DEFAULT_RETENTION,
            manager: None,
            group_commit: None,
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
        let base = keys::tagged_part(&self.engine.prefix, "store", id)?;
        Ok(Store::new(self.engine.clone(), id.to_owned(), base))
    }

    /// The key prefix of every key of this inventory.
    ///
    /// ```
    /// assert_eq!(redkit::inventory::Inventory::new("shop:inv")?.prefix(), "shop:inv");
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn prefix(&self) -> &str {
        &self.engine.prefix
    }

    /// How long request ids are remembered.
    ///
    /// ```
    /// use redkit::inventory::Inventory;
    /// assert_eq!(Inventory::new("inv")?.retention(), Inventory::DEFAULT_RETENTION);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn retention(&self) -> Duration {
        Duration::from_millis(self.engine.retention_ms)
    }

    /// The settings of [group commit](InventoryBuilder::with_group_commit), or `None` when
    /// decrements are not grouped (the default).
    ///
    /// ```
    /// use redkit::{inventory::Inventory, GroupCommit};
    /// assert_eq!(Inventory::new("inv")?.group_commit(), None);
    /// let hot = Inventory::builder().with_group_commit(GroupCommit::default()).build()?;
    /// assert_eq!(hot.group_commit(), Some(GroupCommit::default()));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn group_commit(&self) -> Option<GroupCommit> {
        self.engine.groups.as_ref().map(|g| g.settings())
    }

    /// The script manager running the scripts (for its [`Stats`](crate::Stats)).
    ///
    /// ```
    /// let inventory = redkit::inventory::Inventory::new("inv")?;
    /// assert_eq!(inventory.manager().stats().noscript_fallbacks, 0);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn manager(&self) -> &ScriptManager {
        &self.engine.manager
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
        let placed = order::place(&self.engine, conn, lines, request_id, None).await;
        counted(InventoryOp::Order, placed.map(|a| a.outcome))
    }

    /// A view of this inventory whose orders wait for `wait` (`WAIT` or `WAITAOF` in the same
    /// round trip): [`Replicated::place_order`] answers the outcome with how many replicas
    /// acknowledged it. A caller can refuse to confirm an order whose deduction is on the
    /// primary only (it could be lost in a failover). The wait rolls nothing back: an order
    /// acknowledged by fewer replicas than asked is still placed on the primary; retry with
    /// the same request id to learn its outcome.
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
    /// let acked = inventory.replicated(wait).place_order(&mut conn, &lines, Some("order-1001")).await?;
    /// if acked.outcome.is_applied() && !acked.is_replicated() {
    ///     println!("placed on the primary only; confirm later");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn replicated(&self, wait: Replication) -> Replicated<'_, Inventory> {
        Replicated::new(self, wait)
    }

    pub(super) fn engine(&self) -> &Engine {
        &self.engine
    }
}

/// Builds an [`Inventory`]; see [`Inventory::builder`].
///
/// ```
/// use std::time::Duration;
/// let inventory = redkit::inventory::Inventory::builder()
///     .prefix("shop:inv")
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
    group_commit: Option<GroupCommit>,
}

impl InventoryBuilder {
    /// The prefix of every key (1..=64 bytes of `[A-Za-z0-9_:.-]`, checked by
    /// [`build`](Self::build)); default [`Inventory::DEFAULT_PREFIX`].
    ///
    /// ```
    /// use redkit::inventory::Inventory;
    /// let inventory = Inventory::builder().prefix("shop:inv").build()?;
    /// assert_eq!(inventory.store("berlin")?.key("mug")?, "shop:inv:{berlin}:sku:mug");
    /// assert!(Inventory::builder().prefix("shop inv").build().is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn prefix(mut self, prefix: &str) -> Self {
        prefix.clone_into(&mut self.prefix);
        self
    }

    /// How long request ids are remembered (1 ms ..= [`Inventory::MAX_RETENTION`]); default
    /// [`Inventory::DEFAULT_RETENTION`]. A retry later than this is treated as a new request.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::inventory::Inventory;
    /// assert!(Inventory::builder().retention(Duration::ZERO).build().is_err());
    /// ```
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// The script manager to use (share one to share its [`Stats`](crate::Stats)); default a
    /// new one.
    ///
    /// ```
    /// use redkit::{inventory::Inventory, script::Backend, ScriptManager};
    /// // Run the inventory's scripts as Redis Functions (FCALL) instead of EVALSHA.
    /// let manager = ScriptManager::new().with_backend(Backend::Functions);
    /// let inventory = Inventory::builder().with_manager(manager).build()?;
    /// assert_eq!(inventory.manager().backend(), Backend::Functions);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn with_manager(mut self, manager: ScriptManager) -> Self {
        self.manager = Some(manager);
        self
    }

    /// Group commit for hot SKUs with `settings` (off by default; [`GroupCommit::default()`]
    /// is the recommended setting): concurrent [`Store::decrement`] calls of ONE SKU through
    /// this inventory (any clone of it or of its stores) are coalesced. A caller alone goes
    /// straight through (the ordinary call, no timer, no added latency); callers arriving
    /// while [`max_in_flight`](GroupCommit::max_in_flight) calls of that SKU are in flight
    /// queue up, and when one returns the first of them sends one script call settling the
    /// next [`max_batch`](GroupCommit::max_batch) in arrival order, each with its own
    /// quantity and request id, and hands each its own outcome: the same outcomes, in the
    /// same order, as if each had been sent alone.
    ///
    /// With more than one call in flight the round trips overlap: on a hot SKU this is what
    /// lifts throughput past one batch per round trip. A caller that finds no call of its
    /// SKU in flight goes alone at once; one that finds a free slot while another call is in
    /// flight gathers: it yields to the runtime once, so the callers woken with it (by a
    /// batch that just settled) queue behind it, and sends them with it as one batch. Each
    /// batch still settles its members in arrival order and nobody is oversold (every call
    /// settles on the stock Redis holds when it runs), but two calls in flight may run in
    /// either order, as two ungrouped calls would. With 1 in flight, batches run strictly in
    /// arrival order, one round trip after another, which costs throughput (measured in
    /// `docs/benchmarks.md`, "Hot SKUs: group commit": with 8 buyers 1 in flight is slower
    /// than not grouping at all; with 8 in flight it is faster at 8 and 64 buyers, and at 512
    /// buyers 0.87x-0.95x of what 1 in flight does there).
    ///
    /// The group's call uses the connection of the caller that leads it, so every caller of
    /// one inventory must use connections to the same Redis deployment (as they must anyway).
    /// If the group's call fails, every member gets the error (see [`Store::decrement`] for
    /// what a lost reply means); if the leading caller's future is dropped while the call is
    /// in flight, the others get [`Error::Interrupted`] (it may have run): where futures may
    /// be dropped (an HTTP handler whose client went away), run each decrement in a task of
    /// its own (`tokio::spawn`) so the call is read for the group. Other operations
    /// (`replicated(wait)` decrements, restocks, orders, reservations) are never grouped.
    ///
    /// ```
    /// use redkit::{inventory::Inventory, GroupCommit};
    /// let hot = Inventory::builder()
    ///     .prefix("shop:inv")
    ///     .with_group_commit(GroupCommit::default())
    ///     .build()?;
    /// assert_eq!(hot.group_commit().map(|g| g.max_in_flight()), Some(8));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn with_group_commit(mut self, settings: GroupCommit) -> Self {
        self.group_commit = Some(settings);
        self
    }

    /// Checks the settings and builds the inventory.
    ///
    /// Errors: [`Error::InvalidInput`] for a bad prefix or a retention out of range.
    ///
    /// ```
    /// use std::time::Duration;
    /// use redkit::inventory::Inventory;
    /// let inventory = Inventory::builder().prefix("shop:inv").build()?;
    /// assert_eq!(inventory.prefix(), "shop:inv");
    /// assert!(Inventory::builder().prefix("").build().is_err());
    /// assert!(Inventory::builder().retention(Duration::from_micros(10)).build().is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
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
        let groups = self.group_commit.map(|g| Arc::new(Groups::new(g)));
        Ok(Inventory {
            engine: Arc::new(Engine::new(
                self.prefix,
                u64::try_from(self.retention.as_millis()).unwrap_or(u64::MAX),
                self.manager.unwrap_or_default(),
                groups,
            )),
        })
    }
}
