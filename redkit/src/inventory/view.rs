//! Reading a SKU without changing it: its stock beside its live and expired reservations
//! ([`Store::stock_view`]), and its reservations page by page ([`Store::reservations`]).

use std::num::NonZeroU32;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::aio::ConnectionLike;
use redis::Value;

use super::store::{unknown_sku, Store};
use crate::error::{Error, Result};
use crate::keys;
use crate::script::{embedded, script_error, Call};

/// One SKU's stock and reservations at one instant, read without reclaiming expired holds
/// ([`Store::stock_view`]). A diagnostic: a write may change it right after.
///
/// ```no_run
/// # async fn run(store: redkit::inventory::Store, mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
/// let v = store.stock_view(&mut conn, "sku-1").await?;
/// println!("{} on hand, {} held by {} carts, {} to come back", v.available, v.reserved, v.reservations, v.expired);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct StockView {
    /// Units on hand: the stock counter (what a decrement takes from).
    pub available: u64,
    /// Units held by live reservations.
    pub reserved: u64,
    /// Live reservations.
    pub reservations: u64,
    /// Units of reservations past their expiry that no write has reclaimed yet: the next
    /// write or [`Store::stock`] of the SKU returns them to `available`.
    pub expired: u64,
    /// Reservations past their expiry, not reclaimed yet.
    pub expired_reservations: u64,
}

/// One reservation of a SKU ([`Store::reservations`]).
///
/// ```
/// # fn show(r: &redkit::inventory::Reservation) {
/// println!("{}: {} units until {:?}", r.id, r.quantity, r.expires_at);
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reservation {
    /// The reservation id, as given to [`Store::reserve`].
    pub id: String,
    /// Units held.
    pub quantity: u64,
    /// When it expires, by the Redis server's clock.
    pub expires_at: SystemTime,
}

/// One page of a SKU's reservations ([`Store::reservations`]).
///
/// ```
/// # fn show(p: &redkit::inventory::ReservationPage) {
/// for r in &p.reservations { println!("{}", r.id); }
/// if let Some(cursor) = p.next { println!("more from cursor {cursor}"); }
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReservationPage {
    /// The reservations of this page (a reservation may appear on two pages if it was
    /// written between them, as `HSCAN` guarantees no more).
    pub reservations: Vec<Reservation>,
    /// The cursor of the next page; `None` when the scan is complete.
    pub next: Option<u64>,
}

impl Store {
    /// `sku`'s stock beside its live and expired reservations, read without reclaiming
    /// anything: one read-only script call (`EVALSHA_RO` / `FCALL_RO`: a replica may serve
    /// it) whose work is bounded by the reservations a SKU may hold (10,000).
    ///
    /// Errors: [`Error::NotFound`] when the SKU's stock was never set,
    /// [`Error::InvalidInput`] for a bad SKU (nothing sent), [`Error::CorruptData`] /
    /// [`Error::WrongType`] for keys holding something inventory does not write,
    /// [`Error::PermissionDenied`].
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// let store = redkit::inventory::Inventory::new("inv")?.store("s1")?;
    /// let v = store.stock_view(&mut conn, "sku-1").await?;
    /// assert!(v.reservations <= 10_000);
    /// # Ok(()) }
    /// ```
    pub async fn stock_view<C: ConnectionLike>(
        &self,
        conn: &mut C,
        sku: &str,
    ) -> Result<StockView> {
        let keys = self.sku_keys(sku)?;
        let script = embedded::INVENTORY_PEEK.script();
        let mut call = Call::new(script);
        call.key(keys.stock)
            .key(keys.reservations)
            .key(keys.expiries);
        let reply = self.engine().manager.invoke(conn, &call).await?;
        let bad = || Error::unexpected(script.id(), "expected {stock, 4 counts}");
        let items = match reply {
            Value::Array(items) => items,
            Value::ServerError(e) => return Err(script_error(script, e.into())),
            _ => return Err(bad()),
        };
        let [stock, counts @ ..] = <[Value; 5]>::try_from(items).map_err(|_| bad())?;
        let available = match stock {
            Value::Nil => return Err(unknown_sku(sku)),
            Value::Int(n) => u64::try_from(n).map_err(|_| bad())?,
            _ => return Err(bad()),
        };
        let mut n = [0u64; 4];
        for (slot, v) in n.iter_mut().zip(counts) {
            *slot = match v {
                Value::Int(i) => u64::try_from(i).map_err(|_| bad())?,
                _ => return Err(bad()),
            };
        }
        let [reserved, reservations, expired, expired_reservations] = n;
        Ok(StockView {
            available,
            reserved,
            reservations,
            expired,
            expired_reservations,
        })
    }

    /// One page of `sku`'s reservations, live and expired, from `cursor` (0 to start), about
    /// `count` per page: `HSCAN` of the SKU's reservation hash, so Redis is never blocked and
    /// a full scan ends however many there are. Reads only.
    ///
    /// Errors: [`Error::InvalidInput`] for a bad SKU (nothing sent), [`Error::CorruptData`]
    /// for a reservation inventory did not write, [`Error::WrongType`], and connection
    /// errors.
    ///
    /// ```no_run
    /// # async fn run(mut conn: redis::aio::MultiplexedConnection) -> redkit::Result<()> {
    /// let store = redkit::inventory::Inventory::new("inv")?.store("s1")?;
    /// let mut cursor = 0;
    /// loop {
    ///     let page = store.reservations(&mut conn, "sku-1", cursor, redkit::nonzero!(100)).await?;
    ///     for r in &page.reservations {
    ///         println!("{} holds {}", r.id, r.quantity);
    ///     }
    ///     match page.next {
    ///         Some(next) => cursor = next,
    ///         None => break,
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn reservations<C: ConnectionLike>(
        &self,
        conn: &mut C,
        sku: &str,
        cursor: u64,
        count: NonZeroU32,
    ) -> Result<ReservationPage> {
        let keys = self.sku_keys(sku)?;
        let (next, fields): (u64, Vec<(String, String)>) = redis::cmd("HSCAN")
            .arg(&keys.reservations)
            .arg(cursor)
            .arg("COUNT")
            .arg(count.get())
            .query_async(conn)
            .await?;
        let corrupt = || Error::CorruptData {
            script: "HSCAN".to_owned(),
            detail: "a reservation is not \"<qty> <expires_at_ms>\" under an escaped id".to_owned(),
        };
        let mut reservations = Vec::with_capacity(fields.len());
        for (id, value) in fields {
            let (quantity, expires_ms) = value
                .split_once(' ')
                .and_then(|(q, x)| Some((q.parse::<u64>().ok()?, x.parse::<u64>().ok()?)))
                .filter(|(q, _)| *q >= 1)
                .ok_or_else(corrupt)?;
            let id = keys::unescape_part(&id).ok_or_else(corrupt)?;
            let expires_at = UNIX_EPOCH
                .checked_add(Duration::from_millis(expires_ms))
                .ok_or_else(corrupt)?;
            reservations.push(Reservation {
                id,
                quantity,
                expires_at,
            });
        }
        Ok(ReservationPage {
            reservations,
            next: (next != 0).then_some(next),
        })
    }
}
