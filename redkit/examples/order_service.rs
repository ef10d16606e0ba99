//! A small order service: checkout deducts the stock of a whole cart atomically, and retries
//! are safe because every attempt carries the order id as request id.
//!
//! Run against a Redis you own (it writes keys under `demo:inv`):
//!
//! ```sh
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example order_service
//! ```

use std::time::Duration;

use redis::aio::ConnectionLike;
use redkit::inventory::{Inventory, Order, Store};

/// What the service answers its caller.
enum Checkout {
    Confirmed {
        remaining: Vec<u64>,
    },
    OutOfStock(Vec<String>),
    /// An outcome added by a later redkit version.
    Other(String),
}

impl std::fmt::Display for Checkout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Confirmed { remaining } => write!(f, "confirmed (stock left {remaining:?})"),
            Self::OutOfStock(short) => write!(f, "out of stock: {}", short.join("; ")),
            Self::Other(outcome) => write!(f, "unhandled outcome {outcome}"),
        }
    }
}

/// Deducts the cart of `order_id`, retrying connection failures with the same order id: if an
/// attempt was applied but its reply was lost, the retry gets `Duplicate` and deducts nothing.
async fn checkout<C: ConnectionLike>(
    inventory: &Inventory,
    store: &Store,
    conn: &mut C,
    order_id: &str,
    cart: &[(&str, u64)],
) -> redkit::Result<Checkout> {
    let lines = cart
        .iter()
        .map(|(sku, quantity)| store.line(sku, *quantity))
        .collect::<redkit::Result<Vec<_>>>()?;
    let mut attempt = 0;
    let outcome = loop {
        attempt += 1;
        let call = inventory.place_order(conn, &lines, Some(order_id));
        match tokio::time::timeout(Duration::from_secs(2), call).await {
            Ok(Ok(outcome)) => break outcome,
            Ok(Err(e)) if e.is_unavailable() && attempt < 3 => {}
            Ok(Err(e)) => return Err(e),
            Err(_elapsed) if attempt < 3 => {}
            Err(_elapsed) => return Err(redkit::Error::Timeout(Duration::from_secs(2))),
        }
        tokio::time::sleep(Duration::from_millis(100 * attempt)).await;
    };
    // A duplicate carries the first outcome: answer exactly what the first attempt decided.
    let outcome = match outcome {
        Order::Duplicate { original } => original.into_inner(),
        other => other,
    };
    Ok(match outcome {
        Order::Placed { remaining } => Checkout::Confirmed { remaining },
        Order::Insufficient { short } => Checkout::OutOfStock(
            short
                .into_iter()
                .map(|s| format!("{}: wanted {}, {} left", s.sku, s.requested, s.available))
                .collect(),
        ),
        other => Checkout::Other(format!("{other:?}")),
    })
}

#[tokio::main]
async fn main() -> redkit::Result<()> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let client = redis::Client::open(url)?;
    let mut conn = client.get_multiplexed_async_connection().await?;

    let inventory = Inventory::builder()
        .prefix("demo:inv")
        .retention(Duration::from_secs(3600))
        .build()?;
    let berlin = inventory.store("berlin")?;
    for (sku, stock) in [("mug", 10), ("tee", 3), ("cap", 1)] {
        berlin.set(&mut conn, sku, stock).await?;
    }

    let cart = [("mug", 2), ("tee", 1)];
    let first = checkout(&inventory, &berlin, &mut conn, "order-1001", &cart).await?;
    println!("order-1001: {first}");

    // The client timed out and the gateway sends order-1001 again: nothing is deducted twice.
    let again = checkout(&inventory, &berlin, &mut conn, "order-1001", &cart).await?;
    println!("order-1001 (retry): {again}");
    println!("mug stock: {}", berlin.stock(&mut conn, "mug").await?);

    // A cart the stock cannot cover changes nothing and names the short SKUs.
    let greedy = [("mug", 1), ("cap", 2)];
    let refused = checkout(&inventory, &berlin, &mut conn, "order-1002", &greedy).await?;
    println!("order-1002: {refused}");
    println!("mug stock: {}", berlin.stock(&mut conn, "mug").await?);

    // A single-SKU sale and a restock, both idempotent by id.
    let sold = berlin
        .decrement(&mut conn, "cap", 1, Some("order-1003"))
        .await?;
    println!("order-1003: {sold:?}");
    let restocked = berlin
        .restock(&mut conn, "cap", 5, Some("delivery-77"))
        .await?;
    println!("delivery-77: {restocked:?}");
    Ok(())
}
