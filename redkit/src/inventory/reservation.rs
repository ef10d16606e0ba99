//! Reservations: [`Store::reserve`] deducts units now and holds them for a TTL;
//! [`Store::commit`] keeps them sold, [`Store::cancel`] returns them. A reservation that
//! expires is returned to stock lazily by the next script that touches the SKU (stock read,
//! decrement, restock, order, reserve, commit, cancel): no sweeper process is needed.

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::Value;

use super::engine::{self, check_quantity};
use super::outcome::{counted, Labelled};
use super::reply;
use super::store::{unknown_sku, Store};
use crate::error::{Error, Result};
use crate::inventory::metrics::{InventoryOp, InventoryOutcome};
use crate::keys;
use crate::script::{Acked, Call, Replication, Script};

/// The outcome of [`Store::reserve`].
///
/// ```
/// use std::time::Duration;
/// use redkit::inventory::Reserve;
/// let held = Reserve::Reserved { remaining: 7, expires_in: Duration::from_secs(60) };
/// assert!(held.is_held());
/// assert!(!Reserve::Insufficient { available: 1 }.is_held());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reserve {
    /// The units were deducted from stock and are held until `expires_in` has passed.
    Reserved {
        /// Stock left afterwards (not counting reservations).
        remaining: u64,
        /// The TTL of the reservation.
        expires_in: Duration,
    },
    /// The stock did not cover the quantity; nothing changed.
    Insufficient {
        /// Stock available when the request was evaluated.
        available: u64,
    },
    /// A live reservation with this id already exists (e.g. a retried call); nothing changed.
    AlreadyReserved {
        /// Units that reservation holds.
        quantity: u64,
        /// Time left until it expires.
        expires_in: Duration,
    },
    /// The SKU already holds
    /// [`Inventory::MAX_RESERVATIONS_PER_SKU`](super::Inventory::MAX_RESERVATIONS_PER_SKU) live
    /// reservations; nothing changed.
    Full {
        /// The limit.
        limit: u64,
    },
    /// No live hold, but a reservation with this id was committed within the
    /// [retention](super::Inventory::retention) (e.g. a redelivered reserve after its commit): its
    /// units stay sold, nothing changed and no new hold was made, so a redelivered commit
    /// cannot sell twice.
    AlreadyCommitted {
        /// Units the reservation held.
        quantity: u64,
    },
    /// No live hold, but a reservation with this id was cancelled within the retention;
    /// nothing changed and no new hold was made.
    AlreadyCancelled {
        /// Units the reservation held.
        quantity: u64,
    },
}

impl Reserve {
    /// `true` when a reservation with this id now holds units (new or already existing).
    ///
    /// ```
    /// use redkit::inventory::Reserve;
    /// assert!(!Reserve::AlreadyCommitted { quantity: 2 }.is_held());
    /// ```
    pub fn is_held(&self) -> bool {
        matches!(self, Self::Reserved { .. } | Self::AlreadyReserved { .. })
    }
}

/// The outcome of [`Store::commit`].
///
/// ```
/// use redkit::inventory::Commit;
/// assert!(Commit::Committed { quantity: 2 }.is_committed());
/// assert!(Commit::AlreadyCommitted { quantity: 2 }.is_committed());
/// assert!(!Commit::Unknown.is_committed());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Commit {
    /// The reservation was live: its units stay deducted for good and it is gone.
    Committed {
        /// Units the reservation held.
        quantity: u64,
    },
    /// No live reservation, but this id was committed within the
    /// [retention](super::Inventory::retention) (e.g. a retried commit); nothing changed.
    AlreadyCommitted {
        /// Units the reservation held.
        quantity: u64,
    },
    /// No live reservation, but this id was cancelled within the retention; its units are
    /// back in stock and nothing changed now.
    AlreadyCancelled {
        /// Units the reservation held.
        quantity: u64,
    },
    /// No live reservation and no settlement with this id: never made, or expired (its units
    /// are back in stock). Nothing changed.
    Unknown,
}

impl Commit {
    /// `true` when the units are sold: [`Commit::Committed`] now or
    /// [`Commit::AlreadyCommitted`] by an earlier call.
    ///
    /// ```
    /// use redkit::inventory::Commit;
    /// // A retried commit (e.g. after a timeout) still reports the sale.
    /// assert!(Commit::AlreadyCommitted { quantity: 2 }.is_committed());
    /// assert!(!Commit::AlreadyCancelled { quantity: 2 }.is_committed());
    /// assert!(!Commit::Unknown.is_committed()); // expired: the units went back
    /// ```
    pub fn is_committed(&self) -> bool {
        matches!(self, Self::Committed { .. } | Self::AlreadyCommitted { .. })
    }
}

/// The outcome of [`Store::cancel`] (named after the operation, and apart from
/// [`lock::Release`](crate::lock::Release), so both modules glob-import together):
///
/// ```
/// use redkit::inventory::*;
/// use redkit::lock::*;
/// // Every name of both modules is usable: no two public names clash.
/// let _: fn(&Store) -> &str = Store::id;
/// assert!(Cancel::Cancelled { quantity: 1, stock: 0 }.is_cancelled());
/// assert!(Commit::Committed { quantity: 1 }.is_committed());
/// assert!(Reserve::Insufficient { available: 0 } != Reserve::Full { limit: 1 });
/// assert_ne!(Release::Released, Release::NotOwner); // redkit::lock::Release
/// ```
///
///
/// ```
/// use redkit::inventory::Cancel;
/// let cancelled = Cancel::Cancelled { quantity: 2, stock: 10 };
/// assert!(cancelled.is_cancelled());
/// assert!(Cancel::AlreadyCancelled { quantity: 2 }.is_cancelled());
/// assert!(!Cancel::Unknown.is_cancelled());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cancel {
    /// The reservation was live: its units are back in stock and it is gone.
    Cancelled {
        /// Units returned.
        quantity: u64,
        /// Stock afterwards.
        stock: u64,
    },
    /// No live reservation, but this id was cancelled within the
    /// [retention](super::Inventory::retention) (e.g. a retried cancel); nothing changed.
    AlreadyCancelled {
        /// Units the reservation held.
        quantity: u64,
    },
    /// No live reservation, but this id was committed within the retention: the units stay
    /// sold and nothing changed.
    AlreadyCommitted {
        /// Units the reservation held.
        quantity: u64,
    },
    /// No live reservation and no settlement with this id: never made, or expired (its units
    /// are already back in stock). Nothing changed.
    Unknown,
}

impl Cancel {
    /// `true` when the units went back to stock: [`Cancel::Cancelled`] now or
    /// [`Cancel::AlreadyCancelled`] by an earlier call.
    ///
    /// ```
    /// use redkit::inventory::Cancel;
    /// assert!(Cancel::Cancelled { quantity: 2, stock: 9 }.is_cancelled());
    /// assert!(Cancel::AlreadyCancelled { quantity: 2 }.is_cancelled());
    /// assert!(!Cancel::AlreadyCommitted { quantity: 2 }.is_cancelled()); // stays sold
    /// ```
    pub fn is_cancelled(&self) -> bool {
        matches!(self, Self::Cancelled { .. } | Self::AlreadyCancelled { .. })
    }
}

impl Store {
    /// Reserves `quantity` units of `sku` for `ttl` under `reservation_id` (e.g. a checkout
    /// id): the units leave the stock now (so nothing is oversold) and come back if the
    /// reservation is [cancelled](Self::cancel) or expires without a
    /// [commit](Self::commit). Expiry uses the Redis clock and is applied lazily by the next
    /// call touching the SKU.
    ///
    /// Errors (nothing changed): quantity 0 or above
    /// [`Inventory::MAX_QUANTITY`](super::Inventory::MAX_QUANTITY), `ttl` below 1 ms or above
    /// [`Inventory::MAX_RESERVATION_TTL`](super::Inventory::MAX_RESERVATION_TTL), an empty or too
    /// long id (all before any round trip), [`Error::NotFound`] for a SKU never set,
    /// [`Error::CorruptData`], [`Error::WrongType`], [`Error::PermissionDenied`].
    ///
    /// Settled stays settled: within the [retention](super::Inventory::retention) after a commit or
    /// cancel, a reserve with the same id answers [`Reserve::AlreadyCommitted`] /
    /// [`Reserve::AlreadyCancelled`] and holds nothing, so a redelivered reserve + commit
    /// never sells twice. An id whose hold expired unsettled may be reserved again. Use a
    /// fresh id per checkout.
    ///
    /// Expired holds are returned at most 16 per SKU and call (bounded work whatever the
    /// number of holds): after a mass expiry, stock comes back over the next calls.
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use std::time::Duration;
    /// use redkit::inventory::{Commit, Reserve};
    /// let store = redkit::inventory::Inventory::new("inv")?.store("s1")?;
    /// let ttl = Duration::from_secs(15 * 60);
    /// if let Reserve::Reserved { .. } = store.reserve(&mut conn, "sku-1", 2, ttl, "cart-7").await? {
    ///     // ... payment succeeded:
    ///     assert!(matches!(store.commit(&mut conn, "sku-1", "cart-7").await?, Commit::Committed { .. }));
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn reserve<C: ConnectionLike>(
        &self,
        conn: &mut C,
        sku: &str,
        quantity: u64,
        ttl: Duration,
        reservation_id: &str,
    ) -> Result<Reserve> {
        self.reserve_with(conn, sku, quantity, ttl, reservation_id, None)
            .await
            .map(|a| a.outcome)
    }

    /// [`reserve`](Self::reserve), with `WAIT` behind it when `replication` is given,
    /// counted in `redkit.inventory.operations` under `reserve`.
    pub(super) async fn reserve_with<C: ConnectionLike>(
        &self,
        conn: &mut C,
        sku: &str,
        quantity: u64,
        ttl: Duration,
        reservation_id: &str,
        replication: Option<Replication>,
    ) -> Result<Acked<Reserve>> {
        let call = self.reserve_call(sku, quantity, ttl, reservation_id);
        self.run(
            conn,
            InventoryOp::Reserve,
            sku,
            call,
            replication,
            Reserve::read,
        )
        .await
    }

    /// The call of a reserve, its input checked (nothing is sent when it is bad).
    fn reserve_call(
        &self,
        sku: &str,
        quantity: u64,
        ttl: Duration,
        reservation_id: &str,
    ) -> Result<Call<'static>> {
        check_quantity(quantity)?;
        if ttl < Duration::from_millis(1) || ttl > engine::MAX_RESERVATION_TTL {
            return Err(Error::invalid(
                "ttl",
                format!(
                    "must be 1 ms ..= {} days",
                    engine::MAX_RESERVATION_TTL.as_secs() / 86_400
                ),
            ));
        }
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        let mut call = self.reservation_call(sku, "reserve", reservation_id)?;
        call.arg(quantity)
            .arg(ttl_ms)
            .arg(engine::MAX_RESERVATIONS_PER_SKU);
        Ok(call)
    }

    /// Commits the live reservation `reservation_id` of `sku`: its units stay deducted and the
    /// reservation is dropped. Safe to retry: within the [retention](super::Inventory::retention) a
    /// repeat answers [`Commit::AlreadyCommitted`] (or [`Commit::AlreadyCancelled`]) and changes
    /// nothing. [`Commit::Unknown`] (nothing changed) when there is no such reservation, e.g.
    /// because it expired and its units went back to stock. Errors as for
    /// [`reserve`](Self::reserve).
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// use redkit::inventory::Commit;
    /// let store = redkit::inventory::Inventory::new("inv")?.store("s1")?;
    /// match store.commit(&mut conn, "sku-1", "cart-7").await? {
    ///     Commit::Committed { quantity } => println!("sold {quantity}"),
    ///     _ => println!("reservation expired or unknown: try to buy again"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn commit<C: ConnectionLike>(
        &self,
        conn: &mut C,
        sku: &str,
        reservation_id: &str,
    ) -> Result<Commit> {
        self.settle::<Commit, _>(conn, sku, reservation_id, None)
            .await
            .map(|a| a.outcome)
    }

    /// Cancels the live reservation `reservation_id` of `sku`: its units go back to stock.
    /// Safe to retry like [`commit`](Self::commit): a repeat within the retention answers
    /// [`Cancel::AlreadyCancelled`] (or `AlreadyCommitted`) and changes nothing.
    /// [`Cancel::Unknown`] (nothing changed) when there is no such reservation.
    /// Errors as for [`reserve`](Self::reserve).
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// let store = redkit::inventory::Inventory::new("inv")?.store("s1")?;
    /// let outcome = store.cancel(&mut conn, "sku-1", "cart-7").await?;
    /// println!("{outcome:?}");
    /// # Ok(()) }
    /// ```
    pub async fn cancel<C: ConnectionLike>(
        &self,
        conn: &mut C,
        sku: &str,
        reservation_id: &str,
    ) -> Result<Cancel> {
        self.settle::<Cancel, _>(conn, sku, reservation_id, None)
            .await
            .map(|a| a.outcome)
    }

    /// Settles the reservation `reservation_id` of `sku` as `S` says (commit or cancel): one
    /// script call, its reply read once for both (a repeat and a missing reservation answer
    /// alike), counted under `S`'s operation.
    pub(super) async fn settle<S: Settlement, C: ConnectionLike>(
        &self,
        conn: &mut C,
        sku: &str,
        reservation_id: &str,
        replication: Option<Replication>,
    ) -> Result<Acked<S>> {
        let call = self.reservation_call(sku, S::ACTION, reservation_id);
        let call = call.map(|mut call| {
            call.arg(self.engine().retention_ms);
            call
        });
        self.run(conn, S::OPERATION, sku, call, replication, S::read)
            .await
    }

    /// Moves the reservations of `sku` made by redkit's v1 inventory scripts into the
    /// current layout (each hold's id also in the expiry ZSET,
    /// [`reservation_expiry_key`](Self::reservation_expiry_key)), so that they return to stock
    /// when they expire. Without it, a v1 hold can still be committed or cancelled but never
    /// expires. Idempotent and safe alongside live traffic; each script call handles a bounded
    /// batch (`HSCAN .. COUNT 100`), so no call blocks the server. Returns the holds moved
    /// (0 when there is nothing from v1). Errors: [`Error::CorruptData`] for a malformed hold,
    /// [`Error::WrongType`], [`Error::PermissionDenied`]; each leaves its batch unwritten.
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// let store = redkit::inventory::Inventory::new("inv")?.store("s1")?;
    /// let moved = store.migrate_v1_reservations(&mut conn, "sku-1").await?;
    /// println!("{moved} holds now expire under the v2 scripts");
    /// # Ok(()) }
    /// ```
    pub async fn migrate_v1_reservations<C: ConnectionLike>(
        &self,
        conn: &mut C,
        sku: &str,
    ) -> Result<u64> {
        let script = self.engine().migrate;
        let keys = self.sku_keys(sku)?;
        let (hash, zset) = (keys.reservations, keys.expiries);
        let mut cursor = String::from("0");
        let mut moved: u64 = 0;
        loop {
            let mut call = Call::new(script);
            call.key(&hash).key(&zset).arg(&cursor).arg(100);
            let value: Value = self.engine().manager.invoke(conn, &call).await?;
            let bad = || Error::unexpected(script.id(), format!("malformed reply {value:?}"));
            let (next, batch) = match &value {
                Value::Array(items) => match items.as_slice() {
                    [Value::BulkString(next), Value::Int(batch)] => (
                        String::from_utf8(next.clone()).map_err(|_| bad())?,
                        u64::try_from(*batch).map_err(|_| bad())?,
                    ),
                    _ => return Err(bad()),
                },
                _ => return Err(bad()),
            };
            moved = moved.saturating_add(batch);
            if next == "0" {
                return Ok(moved);
            }
            cursor = next;
        }
    }

    fn reservation_call(&self, sku: &str, op: &str, reservation_id: &str) -> Result<Call<'static>> {
        let id = keys::escape_part("reservation id", reservation_id)?;
        let sku_part = keys::escape_part("sku", sku)?;
        // `<base>:resv-done:<len(sku)>:<sku>:<id>`: the length keeps (sku, id) pairs apart.
        let settlement = format!(
            "{}:resv-done:{}:{sku_part}:{id}",
            self.base(),
            sku_part.len()
        );
        let keys = self.sku_keys_of_part(&sku_part);
        let mut call = Call::new(self.engine().reserve);
        call.key(keys.stock)
            .key(keys.reservations)
            .key(settlement)
            .key(keys.expiries)
            .arg(op)
            .arg(id);
        Ok(call)
    }

    /// Runs a reservation `call` on `sku` (with `WAIT` when `replication` is given) and reads
    /// its reply, a tag and non-negative integers, with `read` (`None`: malformed); the tag
    /// `unknown` is a SKU never set, whatever the call. Counted under `operation`, a call
    /// refused before sending (bad input) too.
    async fn run<T: Labelled, C: ConnectionLike>(
        &self,
        conn: &mut C,
        operation: InventoryOp,
        sku: &str,
        call: Result<Call<'static>>,
        replication: Option<Replication>,
        read: fn(&str, &[u64]) -> Option<T>,
    ) -> Result<Acked<T>> {
        let sent = async {
            let script = self.engine().reserve;
            let acked = self.engine().run(conn, &call?, replication).await?;
            let (value, ack): (Value, _) = acked.split();
            let bad = || Error::unexpected(script.id(), format!("malformed reply {value:?}"));
            let (tag, rest) = reply::tagged(&value).ok_or_else(bad)?;
            let numbers = reply::numbers(rest).ok_or_else(bad)?;
            let outcome = match (tag, numbers.as_slice()) {
                ("unknown", []) => return Err(unknown_sku(sku)),
                (tag, numbers) => {
                    read(tag, numbers).ok_or_else(|| malformed(script, tag, numbers))?
                }
            };
            Ok(ack.map(|()| outcome))
        };
        counted(operation, sent.await)
    }
}

impl Reserve {
    /// A reserve's reply: its tag and numbers; `None` when they do not fit.
    fn read(tag: &str, numbers: &[u64]) -> Option<Self> {
        let ms = Duration::from_millis;
        match (tag, numbers) {
            ("ok", [remaining, ttl]) => Some(Self::Reserved {
                remaining: *remaining,
                expires_in: ms(*ttl),
            }),
            ("short", [available]) => Some(Self::Insufficient {
                available: *available,
            }),
            ("dup", [quantity, left]) => Some(Self::AlreadyReserved {
                quantity: *quantity,
                expires_in: ms(*left),
            }),
            ("full", [limit]) => Some(Self::Full { limit: *limit }),
            ("committed", [quantity]) => Some(Self::AlreadyCommitted {
                quantity: *quantity,
            }),
            ("released", [quantity]) => Some(Self::AlreadyCancelled {
                quantity: *quantity,
            }),
            _ => None,
        }
    }
}

impl Labelled for Reserve {
    fn label(&self) -> InventoryOutcome {
        match self {
            Self::Reserved { .. } => InventoryOutcome::Applied,
            Self::Insufficient { .. } => InventoryOutcome::Insufficient,
            Self::AlreadyReserved { .. } => InventoryOutcome::AlreadyReserved,
            Self::Full { .. } => InventoryOutcome::Full,
            Self::AlreadyCommitted { .. } => InventoryOutcome::AlreadyCommitted,
            Self::AlreadyCancelled { .. } => InventoryOutcome::AlreadyCancelled,
        }
    }
}

/// What settling a reservation answers: [`Commit`] or [`Cancel`]. The script's action and
/// the reply to a first settlement differ; a repeat and a missing reservation read alike.
pub(super) trait Settlement: Labelled + Sized {
    /// The operation it is counted under.
    const OPERATION: InventoryOp;
    /// The script's action argument.
    const ACTION: &'static str;
    /// A first settlement's reply numbers (tag `ok`); `None` when malformed.
    fn settled(numbers: &[u64]) -> Option<Self>;
    /// Committed before, `quantity` units.
    fn already_committed(quantity: u64) -> Self;
    /// Cancelled before, `quantity` units.
    fn already_cancelled(quantity: u64) -> Self;
    /// No such reservation.
    fn unknown() -> Self;

    /// A settlement's reply: its tag and numbers; `None` when they do not fit. A repeat and a
    /// missing reservation read alike for commit and cancel.
    fn read(tag: &str, numbers: &[u64]) -> Option<Self> {
        match (tag, numbers) {
            ("ok", settled) => Self::settled(settled),
            ("committed", [quantity]) => Some(Self::already_committed(*quantity)),
            ("released", [quantity]) => Some(Self::already_cancelled(*quantity)),
            ("none", []) => Some(Self::unknown()),
            _ => None,
        }
    }
}

/// The three answers [`Commit`] and [`Cancel`] share: a repeat of either settlement, and
/// no such reservation (each enum has the same variants for them).
macro_rules! settlement_repeats {
    () => {
        fn already_committed(quantity: u64) -> Self {
            Self::AlreadyCommitted { quantity }
        }
        fn already_cancelled(quantity: u64) -> Self {
            Self::AlreadyCancelled { quantity }
        }
        fn unknown() -> Self {
            Self::Unknown
        }
    };
}

impl Settlement for Commit {
    const OPERATION: InventoryOp = InventoryOp::Commit;
    const ACTION: &'static str = "commit";
    fn settled(numbers: &[u64]) -> Option<Self> {
        match numbers {
            [quantity] => Some(Self::Committed {
                quantity: *quantity,
            }),
            _ => None,
        }
    }
    settlement_repeats!();
}

impl Settlement for Cancel {
    const OPERATION: InventoryOp = InventoryOp::Cancel;
    const ACTION: &'static str = "release";
    fn settled(numbers: &[u64]) -> Option<Self> {
        match numbers {
            [quantity, stock] => Some(Self::Cancelled {
                quantity: *quantity,
                stock: *stock,
            }),
            _ => None,
        }
    }
    settlement_repeats!();
}

impl Labelled for Commit {
    fn label(&self) -> InventoryOutcome {
        match self {
            Self::Committed { .. } => InventoryOutcome::Applied,
            Self::AlreadyCommitted { .. } => InventoryOutcome::AlreadyCommitted,
            Self::AlreadyCancelled { .. } => InventoryOutcome::AlreadyCancelled,
            Self::Unknown => InventoryOutcome::Unknown,
        }
    }
}

impl Labelled for Cancel {
    fn label(&self) -> InventoryOutcome {
        match self {
            Self::Cancelled { .. } => InventoryOutcome::Applied,
            Self::AlreadyCancelled { .. } => InventoryOutcome::AlreadyCancelled,
            Self::AlreadyCommitted { .. } => InventoryOutcome::AlreadyCommitted,
            Self::Unknown => InventoryOutcome::Unknown,
        }
    }
}

fn malformed(script: &Script, tag: &str, numbers: &[u64]) -> Error {
    Error::unexpected(script.id(), format!("unexpected reply {tag:?} {numbers:?}"))
}
