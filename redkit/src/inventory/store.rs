//! [`Store`]: one namespace (shop, warehouse) whose id is the hash tag of all its keys, and
//! the single-SKU operations.

use redis::aio::ConnectionLike;

use std::sync::Arc;

use super::applied::{self, SkuWrite};
use super::engine::{self, check_quantity, Engine, Mode};
use super::group::{Groups, Lead, Member, Take, Turn};
use super::outcome::{counted, Decrement, Restock};
use super::reply;
use crate::error::{Error, Result};
use crate::inventory::metrics::InventoryOp;
use crate::keys;
use crate::script::{Acked, Call, Replicated, Replication};

/// One store of an [`Inventory`](super::Inventory) (get it with
/// [`Inventory::store`](super::Inventory::store)). All its keys share the hash tag `{<store id>}`,
/// so they live in one Cluster slot. Cheap to clone.
///
/// ```
/// let inventory = redkit::inventory::Inventory::new("shop:inv")?;
/// let store = inventory.store("w{1}")?; // braces are escaped, never a second hash tag
/// assert_eq!(store.key("a")?, "shop:inv:{w%7B1%7D}:sku:a");
/// assert_eq!(store.request_key("order-9")?, "shop:inv:{w%7B1%7D}:req:order-9");
/// # Ok::<(), redkit::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Store {
    engine: Arc<Engine>,
    id: String,
    base: String,
}

impl Store {
    pub(super) fn new(engine: Arc<Engine>, id: String, base: String) -> Self {
        Self { engine, id, base }
    }

    /// The store id, as given to [`Inventory::store`](super::Inventory::store).
    ///
    /// ```
    /// let store = redkit::inventory::Inventory::new("inv")?.store("w{1}")?;
    /// assert_eq!(store.id(), "w{1}"); // as given; its keys hold it escaped
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The key holding the stock of `sku` (a plain integer string):
    /// `<prefix>:{<store>}:sku:<sku>`. Fails when `sku` is empty or too long.
    ///
    /// ```
    /// let store = redkit::inventory::Inventory::new("inv")?.store("s1")?;
    /// assert_eq!(store.key("sku-1")?, "inv:{s1}:sku:sku-1");
    /// assert!(store.key("").is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn key(&self, sku: &str) -> Result<String> {
        Ok(self.key_of("sku", &keys::escape_part("sku", sku)?))
    }

    /// The key of the idempotency record of `request_id`: `<prefix>:{<store>}:req:<id>`.
    /// Fails when `request_id` is empty or too long.
    ///
    /// ```
    /// let store = redkit::inventory::Inventory::new("inv")?.store("s1")?;
    /// assert_eq!(store.request_key("order-1001")?, "inv:{s1}:req:order-1001");
    /// assert!(store.request_key("").is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn request_key(&self, request_id: &str) -> Result<String> {
        Ok(self.key_of("req", &keys::escape_part("request id", request_id)?))
    }

    /// The key of the reservation hash of `sku`: `<prefix>:{<store>}:resv:<sku>` (field
    /// `<reservation id>` -> `"<qty> <expires_at_ms>"`). Fails when `sku` is empty or too long.
    ///
    /// ```
    /// let store = redkit::inventory::Inventory::new("inv")?.store("s1")?;
    /// assert_eq!(store.reservation_key("sku-1")?, "inv:{s1}:resv:sku-1");
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn reservation_key(&self, sku: &str) -> Result<String> {
        Ok(self.key_of("resv", &keys::escape_part("sku", sku)?))
    }

    /// The key of the reservation expiry ZSET of `sku`: `<prefix>:{<store>}:resv-exp:<sku>`
    /// (member `<reservation id>`, score its expiry in ms of the Redis clock). Expired holds
    /// are reclaimed from it at most 16 per call, so no call does unbounded work.
    /// Fails when `sku` is empty or too long.
    ///
    /// ```
    /// let store = redkit::inventory::Inventory::new("inv")?.store("s1")?;
    /// assert_eq!(store.reservation_expiry_key("sku-1")?, "inv:{s1}:resv-exp:sku-1");
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn reservation_expiry_key(&self, sku: &str) -> Result<String> {
        Ok(self.key_of("resv-exp", &keys::escape_part("sku", sku)?))
    }

    /// The stock key, reservation hash and reservation expiry ZSET of `sku` (as
    /// [`key`](Self::key), [`reservation_key`](Self::reservation_key) and
    /// [`reservation_expiry_key`](Self::reservation_expiry_key)), the SKU checked and escaped
    /// once: every call on one SKU sends all three.
    pub(super) fn sku_keys(&self, sku: &str) -> Result<SkuKeys> {
        Ok(self.sku_keys_of_part(&keys::escape_part("sku", sku)?))
    }

    /// [`sku_keys`](Self::keys) of a SKU already escaped (`keys::escape_part`).
    pub(super) fn sku_keys_of_part(&self, part: &str) -> SkuKeys {
        SkuKeys {
            stock: self.key_of("sku", part),
            reservations: self.key_of("resv", part),
            expiries: self.key_of("resv-exp", part),
        }
    }

    /// The key of the record of `request_id`, when there is one (checked and escaped here,
    /// once per call).
    fn record_key(&self, request_id: Option<&str>) -> Result<Option<String>> {
        request_id.map(|id| self.request_key(id)).transpose()
    }

    /// `<base>:<kind>:<part>` (`part` already escaped), in one allocation.
    fn key_of(&self, kind: &str, part: &str) -> String {
        let mut key = String::with_capacity(self.base.len() + kind.len() + part.len() + 2);
        key.push_str(&self.base);
        key.push(':');
        key.push_str(kind);
        key.push(':');
        key.push_str(part);
        key
    }

    /// Sets (initialises or overwrites) the stock of `sku` to `stock`
    /// (0..=[`Inventory::MAX_QUANTITY`](super::Inventory::MAX_QUANTITY)). Overwriting a value that
    /// is not an integer is how corrupt stock is repaired; a key of another Redis type is refused
    /// ([`Error::WrongType`]) and left untouched.
    ///
    /// The stock set is the units available now; live [reservations](Self::reserve) are not
    /// touched and their units still come back on cancel or expiry.
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// let store = redkit::inventory::Inventory::new("inv")?.store("s1")?;
    /// store.set(&mut conn, "sku-1", 100).await?;
    /// # Ok(()) }
    /// ```
    pub async fn set<C: ConnectionLike>(&self, conn: &mut C, sku: &str, stock: u64) -> Result<()> {
        if stock > engine::MAX_QUANTITY {
            return Err(Error::invalid(
                "stock",
                format!("must be 0..={}", engine::MAX_QUANTITY),
            ));
        }
        let mut call = Call::new(self.engine.set);
        call.key(self.key(sku)?).arg(stock);
        let _: u64 = self.engine.manager.invoke(conn, &call).await?;
        Ok(())
    }

    /// Reads the stock of `sku` (units available, not counting live reservations; expired
    /// reservations are returned to it first). [`Error::NotFound`] when it was never set,
    /// [`Error::CorruptData`] when the stored value is not an integer, [`Error::WrongType`]
    /// when the key holds another type.
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// let store = redkit::inventory::Inventory::new("inv")?.store("s1")?;
    /// let units: u64 = store.stock(&mut conn, "sku-1").await?;
    /// # Ok(()) }
    /// ```
    pub async fn stock<C: ConnectionLike>(&self, conn: &mut C, sku: &str) -> Result<u64> {
        let keys = self.sku_keys(sku)?;
        let mut call = Call::new(self.engine.get);
        call.key(keys.stock)
            .key(keys.reservations)
            .key(keys.expiries);
        let stock: Option<u64> = self.engine.manager.invoke(conn, &call).await?;
        stock.ok_or_else(|| unknown_sku(sku))
    }

    /// Decrements the stock of `sku` by `quantity` if the stock covers it; otherwise changes
    /// nothing and returns [`Decrement::Insufficient`]. Stock never goes below zero.
    ///
    /// With a `request_id` (e.g. the order id), the same request repeated within the retention
    /// returns [`Decrement::Duplicate`] with the first outcome and changes nothing; the id reused
    /// for a different request (other SKU, quantity or operation) is [`Decrement::IdReused`] and
    /// changes nothing. Errors: quantity 0 or above
    /// [`Inventory::MAX_QUANTITY`](super::Inventory::MAX_QUANTITY) (before any round trip),
    /// [`Error::NotFound`], [`Error::CorruptData`] (a stored number that is not a strict integer,
    /// e.g. `"05"`), [`Error::WrongType`], [`Error::PermissionDenied`] (the Redis user may not run
    /// a command the script needs); none of them changes or records anything.
    ///
    /// A call whose reply was lost (timeout, dropped connection) may have been applied: retry
    /// only with the same `request_id`, or the retry can deduct twice.
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use redkit::inventory::Decrement;
    /// let store = redkit::inventory::Inventory::new("inv")?.store("s1")?;
    /// let outcome = store.decrement(&mut conn, "sku-1", 1, Some("order-17")).await?;
    /// assert!(matches!(outcome, Decrement::Decremented { .. } | Decrement::Insufficient { .. } | Decrement::Duplicate { .. }));
    /// # Ok(()) }
    /// ```
    pub async fn decrement<C: ConnectionLike>(
        &self,
        conn: &mut C,
        sku: &str,
        quantity: u64,
        request_id: Option<&str>,
    ) -> Result<Decrement> {
        let outcome = match &self.engine.groups {
            Some(groups) => {
                self.decrement_grouped(groups, conn, sku, quantity, request_id)
                    .await
            }
            None => self
                .write_with(conn, sku, quantity, request_id, None)
                .await
                .map(|acked| acked.outcome),
        };
        counted(InventoryOp::Decrement, outcome)
    }

    /// One single-SKU write (`T`: a decrement or a restock), with `replication`'s wait
    /// behind it when given (without it, the counts of the [`Acked`] are 0 of 0).
    pub(super) async fn write_with<T: SkuWrite, C: ConnectionLike>(
        &self,
        conn: &mut C,
        sku: &str,
        quantity: u64,
        request_id: Option<&str>,
        replication: Option<Replication>,
    ) -> Result<Acked<T>> {
        check_quantity(quantity)?;
        let keys = self.sku_keys(sku)?;
        let record = self.record_key(request_id)?;
        self.write_keys(conn, sku, &keys, quantity, record, replication)
            .await
    }

    /// One single-SKU write on keys built where the call entered.
    async fn write_keys<T: SkuWrite, C: ConnectionLike>(
        &self,
        conn: &mut C,
        sku: &str,
        keys: &SkuKeys,
        quantity: u64,
        record: Option<String>,
        replication: Option<Replication>,
    ) -> Result<Acked<T>> {
        let acked = self
            .engine
            .apply(
                conn,
                T::MODE,
                &[keys.stock.as_str()],
                &[keys.reservations.as_str()],
                &[keys.expiries.as_str()],
                &[quantity],
                record,
                replication,
            )
            .await?;
        let (reply, ack) = acked.split();
        applied::read(self.engine.apply, sku, reply).map(|outcome| ack.map(|()| outcome))
    }

    /// [`decrement`](Self::decrement) with group commit (see
    /// [`InventoryBuilder::with_group_commit`](super::InventoryBuilder::with_group_commit)): input
    /// is checked before queueing; a lone caller goes straight through.
    async fn decrement_grouped<C: ConnectionLike>(
        &self,
        groups: &Arc<Groups>,
        conn: &mut C,
        sku: &str,
        quantity: u64,
        request_id: Option<&str>,
    ) -> Result<Decrement> {
        check_quantity(quantity)?;
        // The SKU and id are checked now, so bad input fails before queueing (never a group).
        let keys = self.sku_keys(sku)?;
        let record = self.record_key(request_id)?.map(|record| {
            let fingerprint = reply::fingerprint(Mode::Take.as_str(), &[&keys.stock], &[quantity]);
            (record, fingerprint)
        });
        let member = Member::new(Take { quantity, record });
        let lead = match groups.turn(&keys.stock, member).await {
            Turn::Done(outcome) => return outcome,
            Turn::Lead(lead) => lead,
        };
        // Boxed: only a batch's leader sends a call, so a waiter's future (most callers of
        // a hot SKU) stays small and is never copied into an allocation.
        Box::pin(self.lead_batch(conn, sku, &keys, lead)).await
    }

    /// Sends `lead`'s batch (after [gathering](Lead::gather) it, if it may) and answers its
    /// members: alone, the ordinary single-SKU call; else one `inventory_group` call.
    async fn lead_batch<C: ConnectionLike>(
        &self,
        conn: &mut C,
        sku: &str,
        keys: &SkuKeys,
        mut lead: Lead,
    ) -> Result<Decrement> {
        lead.gather().await;
        lead.sending();
        if let [alone] = lead.members() {
            let record = alone.record.as_ref().map(|(record, _)| record.clone());
            let outcome = self
                .write_keys(conn, sku, keys, alone.quantity, record, None)
                .await
                .map(|acked| acked.outcome);
            return lead.settle(vec![outcome]);
        }
        let group = [
            keys.stock.as_str(),
            keys.reservations.as_str(),
            keys.expiries.as_str(),
        ];
        let replies = self.engine.apply_group(conn, group, lead.members()).await;
        match replies {
            Ok(replies) => {
                let outcomes = replies
                    .into_iter()
                    .map(|r| applied::read(self.engine.group, sku, r))
                    .collect();
                lead.settle(outcomes)
            }
            Err(e) => lead.fail(e),
        }
    }

    /// A view of this store whose writes wait for `wait` (`WAIT` or `WAITAOF` in the same
    /// round trip) and answer how many replicas have them: the same verbs and arguments
    /// ([`Replicated::decrement`], `restock`, `reserve`, `commit`, `cancel`). Fewer replicas
    /// than asked means the write is applied on the primary but could be lost in a failover
    /// (nothing is rolled back); a retry with the same request id answers the original
    /// outcome. A replicated decrement is never grouped (group commit answers each caller
    /// separately; its wait would count the whole group).
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
    pub fn replicated(&self, wait: Replication) -> Replicated<'_, Store> {
        Replicated::new(self, wait)
    }

    /// Adds `quantity` to the stock of `sku` (which must have been [`set`](Self::set) first: an
    /// unknown SKU is [`Error::NotFound`], so a typo never creates stock). Idempotent by
    /// `request_id` like [`decrement`](Self::decrement). A stock that would exceed
    /// [`Inventory::MAX_QUANTITY`](super::Inventory::MAX_QUANTITY) is refused
    /// ([`Error::InvalidInput`]) and nothing changes.
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// let store = redkit::inventory::Inventory::new("inv")?.store("s1")?;
    /// let stock: Option<u64> = store.restock(&mut conn, "sku-1", 50, Some("delivery-3")).await?.stock();
    /// # Ok(()) }
    /// ```
    pub async fn restock<C: ConnectionLike>(
        &self,
        conn: &mut C,
        sku: &str,
        quantity: u64,
        request_id: Option<&str>,
    ) -> Result<Restock> {
        let restocked = self.write_with(conn, sku, quantity, request_id, None);
        counted(InventoryOp::Restock, restocked.await.map(|a| a.outcome))
    }

    pub(super) fn engine(&self) -> &Engine {
        &self.engine
    }

    pub(super) fn base(&self) -> &str {
        &self.base
    }
}

/// The three keys of one SKU ([`Store::key`], [`Store::reservation_key`],
/// [`Store::reservation_expiry_key`]), built once where the SKU enters a call; every call on
/// one SKU sends all three.
#[derive(Clone, Debug)]
pub(super) struct SkuKeys {
    pub(super) stock: String,
    pub(super) reservations: String,
    pub(super) expiries: String,
}

/// The error for a SKU without stock.
pub(super) fn unknown_sku(sku: &str) -> Error {
    Error::NotFound {
        what: "sku",
        detail: sku.to_owned(),
    }
}
