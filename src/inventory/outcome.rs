//! The business outcomes of inventory operations: values, never errors.

/// The outcome of [`Store::decrement`](super::Store::decrement).
///
/// ```
/// use redkit::inventory::Decrement;
/// let first = Decrement::Decremented { remaining: 7 };
/// let retry = Decrement::Duplicate { original: Box::new(first.clone()) };
/// assert!(first.is_applied() && retry.is_applied());
/// assert!(!Decrement::Insufficient { available: 0 }.is_applied());
/// assert!(!Decrement::IdReused.is_applied());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Decrement {
    /// The stock covered the quantity and was decremented.
    Decremented {
        /// Stock left afterwards.
        remaining: u64,
    },
    /// The stock did not cover the quantity; nothing changed.
    Insufficient {
        /// Stock available when the request was evaluated.
        available: u64,
    },
    /// The request id was already used for this same request within the retention: nothing
    /// changed now. `original` is the first outcome (never itself a `Duplicate`).
    Duplicate {
        /// The outcome of the first request with this id.
        original: Box<Decrement>,
    },
    /// The request id was already used within the retention for a *different* request
    /// (other operation, SKUs or quantities): nothing changed, nothing recorded.
    IdReused,
}

impl Decrement {
    /// `true` when the units were (now or by the original request) deducted.
    pub fn is_applied(&self) -> bool {
        match self {
            Self::Decremented { .. } => true,
            Self::Insufficient { .. } | Self::IdReused => false,
            Self::Duplicate { original } => original.is_applied(),
        }
    }
}

/// The outcome of [`Store::restock`](super::Store::restock).
///
/// ```
/// use redkit::inventory::Restock;
/// let first = Restock::Restocked { stock: 12 };
/// assert_eq!(first.stock(), Some(12));
/// assert_eq!(Restock::Duplicate { original: Box::new(first) }.stock(), Some(12));
/// assert_eq!(Restock::IdReused.stock(), None);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Restock {
    /// The stock was incremented.
    Restocked {
        /// Stock afterwards.
        stock: u64,
    },
    /// The request id was already used for this same request within the retention: nothing
    /// changed now. `original` is the first outcome (never itself a `Duplicate`).
    Duplicate {
        /// The outcome of the first request with this id.
        original: Box<Restock>,
    },
    /// The request id was already used within the retention for a *different* request
    /// (other operation, SKUs or quantities): nothing changed, nothing recorded.
    IdReused,
}

impl Restock {
    /// The stock right after the restock was applied (by this or by the original request);
    /// `None` for [`Restock::IdReused`] (nothing was applied).
    pub fn stock(&self) -> Option<u64> {
        match self {
            Self::Restocked { stock } => Some(*stock),
            Self::Duplicate { original } => original.stock(),
            Self::IdReused => None,
        }
    }
}

/// One line of an order that the stock did not cover.
///
/// ```
/// use redkit::inventory::{Order, Shortage};
/// # fn show(order: Order) {
/// if let Order::Insufficient { short } = order {
///     for Shortage { sku, requested, available, .. } in short {
///         println!("{sku}: wanted {requested}, only {available}");
///     }
/// }
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Shortage {
    /// The SKU, as given in the order line.
    pub sku: String,
    /// Units the line asked for.
    pub requested: u64,
    /// Units available when the order was evaluated.
    pub available: u64,
}

/// The outcome of [`Inventory::place_order`](super::Inventory::place_order): all lines or none.
///
/// ```
/// use redkit::inventory::Order;
/// let placed = Order::Placed { remaining: vec![3, 0] };
/// assert!(placed.is_applied());
/// assert!(Order::Duplicate { original: Box::new(placed) }.is_applied());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Order {
    /// Every line was covered and decremented.
    Placed {
        /// Stock left of each line's SKU, in line order.
        remaining: Vec<u64>,
    },
    /// At least one line was not covered; no stock changed.
    Insufficient {
        /// The lines that were short, in line order.
        short: Vec<Shortage>,
    },
    /// The request id was already used for this same order within the retention: nothing
    /// changed now. `original` is the first outcome (never itself a `Duplicate`).
    Duplicate {
        /// The outcome of the first request with this id.
        original: Box<Order>,
    },
    /// The request id was already used within the retention for a *different* request
    /// (other operation, SKUs or quantities): nothing changed, nothing recorded.
    IdReused,
}

impl Order {
    /// `true` when the order's units were (now or by the original request) deducted.
    pub fn is_applied(&self) -> bool {
        match self {
            Self::Placed { .. } => true,
            Self::Insufficient { .. } | Self::IdReused => false,
            Self::Duplicate { original } => original.is_applied(),
        }
    }
}
