//! Atomic inventory: stock counters that many service instances decrement concurrently
//! without overselling or deducting twice.
//!
//! - [`Inventory`] (built with [`Inventory::builder`]): the key prefix (default
//!   [`Inventory::DEFAULT_PREFIX`]), the retention of idempotency records and the scripts;
//!   cheap to clone.
//! - [`Store`]: one namespace (a shop, a warehouse) whose id becomes the hash tag of every key,
//!   so all SKUs of one store live in one Cluster slot and a multi-SKU order is one script call.
//! - Outcomes are values: [`Decrement`], [`Restock`], [`Order`] (with [`Shortage`]s).
//! - Reservations ([`Store::reserve`], [`Store::commit`], [`Store::cancel`]; outcomes
//!   [`Reserve`], [`Commit`], [`Cancel`]): units held for a TTL, deducted from
//!   stock at once; an expired reservation goes back to stock lazily, inside the next script
//!   that touches the SKU, with no sweeper process.
//!
//! - Hot SKUs: [`InventoryBuilder::with_group_commit`] coalesces concurrent
//!   [`Store::decrement`] calls of one SKU into one script call per round trip (same outcomes
//!   per caller).
//!
//! Every operation is one script call (one round trip in the steady state). Stock never goes
//! below zero: a decrement the stock does not cover changes nothing and reports what is
//! available. Decrements, restocks and orders may carry a request id (e.g. the order id): the
//! same request sent again within the retention returns its original outcome as `Duplicate`
//! and changes nothing, so a client that timed out can retry safely *with the same id* (a retry
//! without one can deduct twice). [`Store::replicated`] and [`Inventory::replicated`] give every
//! write with the same arguments, also reporting how many replicas acknowledged it (`WAIT`, in
//! the same round trip).
//!
//! Nothing is half-applied: every script parses stored numbers strictly and checks every write
//! against the caller's ACL before the first one, so it applies completely or writes nothing.
//!
//! Keys: `<prefix>:{<store>}:sku:<sku>` (the stock, a plain integer string) and
//! `<prefix>:{<store>}:req:<request id>` (the idempotency record, expiring after the
//! retention), `<prefix>:{<store>}:resv:<sku>` (the SKU's live reservations, a hash),
//! `<prefix>:{<store>}:resv-exp:<sku>` (their expiries, a ZSET) and
//! `<prefix>:{<store>}:resv-done:<len>:<sku>:<reservation id>` (how a reservation was settled,
//! expiring after the retention, so a retried commit or cancel is answered truthfully).
//! Store, SKU and request ids are escaped (no `{`/`}` injection) and bounded to
//! [`MAX_PART_LEN`](crate::keys::MAX_PART_LEN) bytes.
//!
//! ```no_run
//! # async fn run() -> redkit::Result<()> {
//! use redkit::inventory::{Decrement, Inventory};
//! let client = redis::Client::open("redis://127.0.0.1:6379/")?;
//! let mut conn = client.get_multiplexed_async_connection().await?;
//! let inventory = Inventory::new("shop:inv")?;
//! let berlin = inventory.store("berlin")?;
//! berlin.set(&mut conn, "sku-42", 100).await?;
//! match berlin.decrement(&mut conn, "sku-42", 3, Some("order-1001")).await? {
//!     Decrement::Decremented { remaining } => println!("sold, {remaining} left"),
//!     Decrement::Insufficient { available } => println!("only {available} left"),
//!     Decrement::Duplicate { original } => println!("already handled: {original:?}"),
//!     _ => {}
//! }
//! # Ok(()) }
//! ```

mod applied;
mod engine;
mod group;
// Named for the type it holds (re-exported as `inventory::Inventory`).
#[allow(clippy::module_inception)]
mod inventory;
pub(crate) mod metrics;
mod order;
mod outcome;
mod replicated;
mod reply;
mod reservation;
mod store;
mod view;

pub use inventory::{Inventory, InventoryBuilder};
pub use order::OrderLine;
pub use outcome::{Decrement, Order, Original, Restock, Shortage};
pub use reservation::{Cancel, Commit, Reserve};
pub use store::Store;
pub use view::{Reservation, ReservationPage, StockView};
