//! The inventory's writes followed by a replication wait: [`Store::replicated`] and
//! [`Inventory::replicated`], the same verbs and arguments answering [`Acked`].

use std::time::Duration;

use redis::aio::ConnectionLike;

use super::order;
use super::outcome::{counted, Decrement, Order, Restock};
use super::reservation::{Cancel, Commit, Reserve};
use super::{Inventory, OrderLine, Store};
use crate::error::Result;
use crate::inventory::metrics::InventoryOp;
use crate::script::{Acked, Replicated};

impl Replicated<'_, Store> {
    /// [`Store::decrement`], then the wait: the outcome with how many replicas acknowledged
    /// it (see [`Store::replicated`]).
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use std::time::Duration;
    /// use redkit::script::Replication;
    /// let store = redkit::inventory::Inventory::new("inv")?.store("s1")?;
    /// let wait = Replication::new(1, Duration::from_millis(200))?;
    /// let acked = store.replicated(wait).decrement(&mut conn, "sku-1", 1, Some("order-17")).await?;
    /// println!("{:?}, {} of {} replicas", acked.outcome, acked.replicas, acked.requested);
    /// # Ok(()) }
    /// ```
    pub async fn decrement<C: ConnectionLike>(
        self,
        conn: &mut C,
        sku: &str,
        quantity: u64,
        request_id: Option<&str>,
    ) -> Result<Acked<Decrement>> {
        let store = self.of();
        let done = store.write_with(conn, sku, quantity, request_id, Some(self.wait()));
        counted(InventoryOp::Decrement, done.await)
    }

    /// [`Store::restock`], then the wait.
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use std::time::Duration;
    /// use redkit::script::Replication;
    /// let store = redkit::inventory::Inventory::new("inv")?.store("s1")?;
    /// let wait = Replication::new(1, Duration::from_millis(200))?;
    /// let acked = store.replicated(wait).restock(&mut conn, "sku-1", 5, Some("delivery-3")).await?;
    /// assert!(acked.outcome.stock() >= Some(5));
    /// # Ok(()) }
    /// ```
    pub async fn restock<C: ConnectionLike>(
        self,
        conn: &mut C,
        sku: &str,
        quantity: u64,
        request_id: Option<&str>,
    ) -> Result<Acked<Restock>> {
        let store = self.of();
        let done = store.write_with(conn, sku, quantity, request_id, Some(self.wait()));
        counted(InventoryOp::Restock, done.await)
    }

    /// [`Store::reserve`], then the wait: how many replicas have the hold.
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use std::time::Duration;
    /// use redkit::script::Replication;
    /// let store = redkit::inventory::Inventory::new("inv")?.store("s1")?;
    /// let wait = Replication::new(1, Duration::from_millis(200))?;
    /// let acked = store
    ///     .replicated(wait)
    ///     .reserve(&mut conn, "sku-1", 2, Duration::from_secs(900), "cart-7")
    ///     .await?;
    /// println!("{:?} on {} replicas", acked.outcome, acked.replicas);
    /// # Ok(()) }
    /// ```
    pub async fn reserve<C: ConnectionLike>(
        self,
        conn: &mut C,
        sku: &str,
        quantity: u64,
        ttl: Duration,
        reservation_id: &str,
    ) -> Result<Acked<Reserve>> {
        let wait = Some(self.wait());
        self.of()
            .reserve_with(conn, sku, quantity, ttl, reservation_id, wait)
            .await
    }

    /// [`Store::commit`], then the wait.
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use std::time::Duration;
    /// use redkit::script::Replication;
    /// let store = redkit::inventory::Inventory::new("inv")?.store("s1")?;
    /// let wait = Replication::new(1, Duration::from_millis(200))?;
    /// let acked = store.replicated(wait).commit(&mut conn, "sku-1", "cart-7").await?;
    /// println!("{:?} on {} replicas", acked.outcome, acked.replicas);
    /// # Ok(()) }
    /// ```
    pub async fn commit<C: ConnectionLike>(
        self,
        conn: &mut C,
        sku: &str,
        reservation_id: &str,
    ) -> Result<Acked<Commit>> {
        let wait = Some(self.wait());
        self.of()
            .settle::<Commit, _>(conn, sku, reservation_id, wait)
            .await
    }

    /// [`Store::cancel`], then the wait.
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use std::time::Duration;
    /// use redkit::script::Replication;
    /// let store = redkit::inventory::Inventory::new("inv")?.store("s1")?;
    /// let wait = Replication::new(1, Duration::from_millis(200))?;
    /// let acked = store.replicated(wait).cancel(&mut conn, "sku-1", "cart-7").await?;
    /// println!("{:?} on {} replicas", acked.outcome, acked.replicas);
    /// # Ok(()) }
    /// ```
    pub async fn cancel<C: ConnectionLike>(
        self,
        conn: &mut C,
        sku: &str,
        reservation_id: &str,
    ) -> Result<Acked<Cancel>> {
        let wait = Some(self.wait());
        self.of()
            .settle::<Cancel, _>(conn, sku, reservation_id, wait)
            .await
    }
}

impl Replicated<'_, Inventory> {
    /// [`Inventory::place_order`], then the wait: the outcome with how many replicas
    /// acknowledged it (see [`Inventory::replicated`]).
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use std::time::Duration;
    /// use redkit::inventory::Inventory;
    /// use redkit::script::Replication;
    /// let inventory = Inventory::new("shop:inv")?;
    /// let lines = [inventory.store("berlin")?.line("sku-1", 2)?];
    /// let wait = Replication::new(1, Duration::from_millis(200))?;
    /// let acked = inventory.replicated(wait).place_order(&mut conn, &lines, Some("order-1001")).await?;
    /// println!("{:?} on {} replicas", acked.outcome, acked.replicas);
    /// # Ok(()) }
    /// ```
    pub async fn place_order<C: ConnectionLike>(
        self,
        conn: &mut C,
        lines: &[OrderLine],
        request_id: Option<&str>,
    ) -> Result<Acked<Order>> {
        let engine = self.of().engine();
        let placed = order::place(engine, conn, lines, request_id, Some(self.wait())).await;
        counted(InventoryOp::Order, placed)
    }
}
