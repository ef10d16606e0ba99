//! `redkit inventory stock|reservations`: a SKU's stock beside its live and expired
//! reservations, and its reservations one by one, read without changing anything.

use std::num::NonZeroU32;
use std::time::UNIX_EPOCH;

use clap::{Args, Subcommand};
use redkit::inventory::{Inventory, Store};
use serde_json::json;

use crate::connection::Conn;
use crate::exit::Failure;
use crate::output::{finish, finish_streamed, Mode};

/// The store, as the application names it.
#[derive(Args, Debug, Clone)]
pub(crate) struct StoreArgs {
    /// The inventory's key prefix (as given to `Inventory::new`).
    #[arg(long)]
    prefix: String,
    /// The store id (as given to `Inventory::store`).
    #[arg(long)]
    store: String,
}

/// `redkit inventory ...`.
#[derive(Subcommand, Debug, Clone)]
pub(crate) enum InventoryCmd {
    /// Each SKU's stock, live reservations and expired ones not reclaimed yet, read without
    /// reclaiming (a replica may serve it).
    Stock {
        #[command(flatten)]
        store: StoreArgs,
        /// The SKUs.
        #[arg(required = true, value_name = "SKU")]
        skus: Vec<String>,
    },
    /// One SKU's reservations (id, units, expiry), by HSCAN: Redis is never blocked.
    Reservations {
        #[command(flatten)]
        store: StoreArgs,
        /// The SKU.
        sku: String,
        /// At most this many reservations (the output says when there were more).
        #[arg(long, default_value_t = redkit::nonzero!(1000))]
        max: NonZeroU32,
        /// One JSON object per line (a reservation), nothing else on stdout.
        #[arg(long)]
        ndjson: bool,
    },
}

impl InventoryCmd {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::Stock { .. } => "inventory stock",
            Self::Reservations { .. } => "inventory reservations",
        }
    }
}

impl StoreArgs {
    fn store(&self) -> Result<Store, Failure> {
        let usage = |e: redkit::Error| Failure::usage(e.to_string());
        Inventory::new(&self.prefix)
            .map_err(usage)?
            .store(&self.store)
            .map_err(usage)
    }
}

/// Runs an `inventory` command on `conn`; prints its rows; returns the exit code.
pub(crate) async fn run(
    command: &InventoryCmd,
    conn: &mut Conn,
    mode: Mode,
    target: &str,
) -> Result<u8, Failure> {
    let fail = |e: redkit::Error| match e {
        redkit::Error::InvalidInput { .. } | redkit::Error::NotFound { .. } => {
            Failure::usage(e.to_string())
        }
        e => Failure::from_error(target, &e),
    };
    let (fields, lines) = match command {
        InventoryCmd::Stock { store, skus } => {
            let store = store.store()?;
            let mut rows = Vec::with_capacity(skus.len());
            let mut lines = Vec::with_capacity(skus.len());
            for sku in skus {
                let v = store.stock_view(conn, sku).await.map_err(fail)?;
                lines.push(format!(
                    "{sku}  available {}  reserved {} ({} holds)  expired {} ({} holds, not reclaimed)",
                    v.available, v.reserved, v.reservations, v.expired, v.expired_reservations
                ));
                rows.push(json!({
                    "sku": sku, "available": v.available, "reserved": v.reserved,
                    "reservations": v.reservations, "expired": v.expired,
                    "expired_reservations": v.expired_reservations,
                }));
            }
            (json!({"skus": rows}), lines)
        }
        InventoryCmd::Reservations {
            store,
            sku,
            max,
            ndjson,
        } => {
            let store = store.store()?;
            let max = usize::try_from(max.get()).unwrap_or(usize::MAX);
            let (mut rows, mut lines, mut cursor, mut truncated) =
                (Vec::new(), Vec::new(), 0, false);
            let page_size = redkit::nonzero!(100);
            loop {
                let page = store
                    .reservations(conn, sku, cursor, page_size)
                    .await
                    .map_err(fail)?;
                for r in page.reservations {
                    if rows.len() == max {
                        truncated = true;
                        break;
                    }
                    let expires_ms = r
                        .expires_at
                        .duration_since(UNIX_EPOCH)
                        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
                    lines.push(format!(
                        "{}  {} units  expires at {expires_ms} ms",
                        r.id, r.quantity
                    ));
                    rows.push(
                        json!({"id": r.id, "quantity": r.quantity, "expires_at_ms": expires_ms}),
                    );
                }
                match page.next {
                    Some(next) if !truncated => cursor = next,
                    Some(_) => break,
                    None => break,
                }
            }
            if truncated {
                lines.push(format!("(more than {max}: --max shows more)"));
            }
            let fields = json!({"sku": sku, "reservations": rows, "truncated": truncated});
            if *ndjson {
                let stream = Some("reservations");
                return finish_streamed(command.name(), mode, fields, &lines, None, stream);
            }
            (fields, lines)
        }
    };
    finish(command.name(), mode, fields, &lines, None)
}
