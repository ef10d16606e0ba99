//! Multi-SKU orders: [`OrderLine`] and the all-or-nothing placement.

use redis::aio::ConnectionLike;

use super::applied;
use super::engine::{self, check_quantity, Engine, Mode};
use super::outcome::Order;
use super::store::{SkuKeys, Store};
use crate::error::{Error, Result};
use crate::script::{Acked, Replication};

/// One line of a multi-SKU order: a SKU of one [`Store`] and a quantity, checked when built
/// with [`Store::line`].
///
/// ```
/// let store = redkit::inventory::Inventory::new("inv")?.store("s1")?;
/// let line = store.line("sku-1", 3)?;
/// assert_eq!(line.store().id(), "s1");
/// # Ok::<(), redkit::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct OrderLine {
    store: Store,
    sku: String,
    /// Its keys, built (the SKU checked and escaped) once, when the line was.
    keys: SkuKeys,
    quantity: u64,
}

impl OrderLine {
    pub(super) fn new(store: Store, sku: String, keys: SkuKeys, quantity: u64) -> Self {
        Self {
            store,
            sku,
            keys,
            quantity,
        }
    }

    /// The store of the line.
    ///
    /// ```
    /// let berlin = redkit::inventory::Inventory::new("inv")?.store("berlin")?;
    /// let line = berlin.line("mug", 2)?;
    /// assert_eq!(line.store().id(), "berlin");
    /// assert_eq!(line.store().key(line.sku())?, "inv:{berlin}:sku:mug");
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The SKU, as given.
    ///
    /// ```
    /// let store = redkit::inventory::Inventory::new("inv")?.store("s1")?;
    /// // As given, not escaped (the key escapes the braces).
    /// assert_eq!(store.line("mug{xl}", 1)?.sku(), "mug{xl}");
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn sku(&self) -> &str {
        &self.sku
    }

    /// The units the line asks for.
    ///
    /// ```
    /// let store = redkit::inventory::Inventory::new("inv")?.store("s1")?;
    /// let lines = [store.line("mug", 2)?, store.line("tee", 3)?];
    /// assert_eq!(lines.iter().map(|l| l.quantity()).sum::<u64>(), 5);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn quantity(&self) -> u64 {
        self.quantity
    }
}

impl Store {
    /// An order line of this store for [`Inventory::place_order`](super::Inventory::place_order).
    /// Checks the SKU and the quantity
    /// (1..=[`Inventory::MAX_QUANTITY`](super::Inventory::MAX_QUANTITY)) now.
    ///
    /// ```
    /// let store = redkit::inventory::Inventory::new("inv")?.store("s1")?;
    /// let line = store.line("sku-1", 2)?;
    /// assert_eq!((line.sku(), line.quantity()), ("sku-1", 2));
    /// assert!(store.line("sku-1", 0).is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn line(&self, sku: &str, quantity: u64) -> Result<OrderLine> {
        check_quantity(quantity)?;
        Ok(OrderLine::new(
            self.clone(),
            sku.to_owned(),
            self.sku_keys(sku)?,
            quantity,
        ))
    }

    /// Places an all-or-nothing order of `(sku, quantity)` lines in this store: one script call,
    /// like [`Inventory::place_order`](super::Inventory::place_order), but built from one store so
    /// its lines cannot mix stores (no `CrossSlot` at run time). Every line is validated before
    /// anything is sent; an empty order is refused.
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use redkit::inventory::{Inventory, Order};
    /// let berlin = Inventory::new("shop:inv")?.store("berlin")?;
    /// match berlin.place_order(&mut conn, [("mug", 1), ("tee", 2)], Some("order-1001")).await? {
    ///     Order::Placed { remaining } => println!("placed, left: {remaining:?}"),
    ///     Order::Insufficient { short } => println!("short: {short:?}"),
    ///     other => println!("{other:?}"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn place_order<'a, C: ConnectionLike>(
        &self,
        conn: &mut C,
        lines: impl IntoIterator<Item = (&'a str, u64)>,
        request_id: Option<&str>,
    ) -> Result<Order> {
        let lines = lines
            .into_iter()
            .map(|(sku, quantity)| self.line(sku, quantity))
            .collect::<Result<Vec<_>>>()?;
        place(self.engine(), conn, &lines, request_id, None)
            .await
            .map(|a| a.outcome)
    }
}

/// Checks the lines (one store, 1..=MAX_ORDER_LINES, no SKU twice) and places the order.
pub(super) async fn place<C: ConnectionLike>(
    engine: &Engine,
    conn: &mut C,
    lines: &[OrderLine],
    request_id: Option<&str>,
    replication: Option<Replication>,
) -> Result<Acked<Order>> {
    let Some(first) = lines.first() else {
        return Err(Error::invalid("order", "must have at least one line"));
    };
    if lines.len() > engine::MAX_ORDER_LINES {
        return Err(Error::invalid(
            "order",
            format!("must have at most {} lines", engine::MAX_ORDER_LINES),
        ));
    }
    let store = first.store();
    if let Some(other) = lines.iter().find(|l| l.store.base() != store.base()) {
        return Err(Error::CrossSlot {
            detail: format!(
                "order lines name stores {:?} and {:?}; one order must stay in one store",
                store.id(),
                other.store.id()
            ),
        });
    }
    if engine.prefix != store.engine().prefix {
        // Lines built from a store of another inventory would use another prefix and scripts.
        return Err(Error::invalid(
            "order",
            "its lines belong to a store of another inventory (prefix)",
        ));
    }
    let keys: Vec<&str> = lines.iter().map(|l| l.keys.stock.as_str()).collect();
    for (i, key) in keys.iter().enumerate() {
        if keys[..i].contains(key) {
            return Err(Error::invalid(
                "order",
                format!("SKU {:?} is listed twice; merge its lines", lines[i].sku),
            ));
        }
    }
    let quantities: Vec<u64> = lines.iter().map(|l| l.quantity).collect();
    let reservations: Vec<&str> = lines.iter().map(|l| l.keys.reservations.as_str()).collect();
    let expiries: Vec<&str> = lines.iter().map(|l| l.keys.expiries.as_str()).collect();
    let record = request_id.map(|id| store.request_key(id)).transpose()?;
    let acked = engine
        .apply(
            conn,
            Mode::Take,
            &keys,
            &reservations,
            &expiries,
            &quantities,
            record,
            replication,
        )
        .await?;
    let (reply, ack) = acked.split();
    let order = applied::read(engine.apply, lines, reply)?;
    Ok(ack.map(|()| order))
}
