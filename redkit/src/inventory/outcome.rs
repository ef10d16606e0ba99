//! The business outcomes of inventory operations: values, never errors.

use std::ops::Deref;

use crate::error::{Error, Result};
use crate::inventory::metrics::{InventoryOp, InventoryOutcome};

/// The outcome of the first request with a request id, carried by a `Duplicate` answer.
///
/// Only redkit builds one, and never around another `Duplicate`: duplicates do not nest.
/// Derefs to the outcome.
///
/// ```
/// # fn show(d: redkit::inventory::Decrement) {
/// use redkit::inventory::Decrement;
/// if let Decrement::Duplicate { original } = &d {
///     println!("already handled, applied: {}", original.is_applied());
/// }
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Original<T>(Box<T>);

impl<T> Original<T> {
    pub(super) fn new(first: T) -> Self {
        Self(Box::new(first))
    }

    /// The first outcome.
    ///
    /// ```
    /// # fn show(o: &redkit::inventory::Original<redkit::inventory::Order>) {
    /// let first: &redkit::inventory::Order = o.get();
    /// # let _ = first; }
    /// ```
    pub fn get(&self) -> &T {
        &self.0
    }

    /// The first outcome, by value.
    ///
    /// ```
    /// # fn show(o: redkit::inventory::Original<redkit::inventory::Order>) {
    /// let first: redkit::inventory::Order = o.into_inner();
    /// # let _ = first; }
    /// ```
    pub fn into_inner(self) -> T {
        *self.0
    }
}

impl<T> Deref for Original<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

/// The outcome of [`Store::decrement`](super::Store::decrement).
///
/// ```
/// use redkit::inventory::Decrement;
/// let first = Decrement::Decremented { remaining: 7 };
/// assert!(first.is_applied() && first.original().is_none());
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
        original: Original<Decrement>,
    },
    /// The request id was already used within the retention for a *different* request
    /// (other operation, SKUs or quantities): nothing changed, nothing recorded.
    IdReused,
}

impl Decrement {
    /// `true` when the units were (now or by the original request) deducted.
    ///
    /// ```
    /// use redkit::inventory::Decrement;
    /// assert!(Decrement::Decremented { remaining: 0 }.is_applied());
    /// assert!(!Decrement::Insufficient { available: 1 }.is_applied());
    /// assert!(!Decrement::IdReused.is_applied());
    /// ```
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
        original: Original<Restock>,
    },
    /// The request id was already used within the retention for a *different* request
    /// (other operation, SKUs or quantities): nothing changed, nothing recorded.
    IdReused,
}

impl Restock {
    /// The stock right after the restock was applied (by this or by the original request);
    /// `None` for [`Restock::IdReused`] (nothing was applied).
    ///
    /// ```
    /// use redkit::inventory::Restock;
    /// assert_eq!(Restock::Restocked { stock: 40 }.stock(), Some(40));
    /// assert_eq!(Restock::IdReused.stock(), None);
    /// ```
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
        original: Original<Order>,
    },
    /// The request id was already used within the retention for a *different* request
    /// (other operation, SKUs or quantities): nothing changed, nothing recorded.
    IdReused,
}

impl Order {
    /// `true` when the order's units were (now or by the original request) deducted.
    ///
    /// ```
    /// use redkit::inventory::Order;
    /// assert!(Order::Placed { remaining: vec![4, 0] }.is_applied());
    /// assert!(!Order::Insufficient { short: Vec::new() }.is_applied());
    /// assert!(!Order::IdReused.is_applied());
    /// ```
    pub fn is_applied(&self) -> bool {
        match self {
            Self::Placed { .. } => true,
            Self::Insufficient { .. } | Self::IdReused => false,
            Self::Duplicate { original } => original.is_applied(),
        }
    }
}

/// `original()` for each outcome that answers a repeated request id with `Duplicate`.
macro_rules! originals {
    ($($ty:ident),+) => {$(
        impl $ty {
            /// The first outcome when this is a `Duplicate` answer, else `None`.
            ///
            /// ```
            #[doc = concat!("# fn show(outcome: redkit::inventory::", stringify!($ty), ") {")]
            /// let decided = outcome.original().unwrap_or(&outcome);
            /// # let _ = decided; }
            /// ```
            pub fn original(&self) -> Option<&Self> {
                match self {
                    Self::Duplicate { original } => Some(original.get()),
                    _ => None,
                }
            }
        }
    )+};
}

originals!(Decrement, Restock, Order);

/// An outcome's `redkit.outcome` label ([`counted`]): one per variant, the variant's name in
/// snake case but `applied` for the one that changed the stock as asked.
pub(crate) trait Labelled {
    /// `applied`, `insufficient`, `duplicate`, `id_reused`; for reservations also
    /// `already_reserved`, `full`, `already_committed`, `already_cancelled`, `unknown`.
    fn label(&self) -> InventoryOutcome;
}

impl Labelled for Decrement {
    fn label(&self) -> InventoryOutcome {
        match self {
            Self::Decremented { .. } => InventoryOutcome::Applied,
            Self::Insufficient { .. } => InventoryOutcome::Insufficient,
            Self::Duplicate { .. } => InventoryOutcome::Duplicate,
            Self::IdReused => InventoryOutcome::IdReused,
        }
    }
}

impl Labelled for Restock {
    fn label(&self) -> InventoryOutcome {
        match self {
            Self::Restocked { .. } => InventoryOutcome::Applied,
            Self::Duplicate { .. } => InventoryOutcome::Duplicate,
            Self::IdReused => InventoryOutcome::IdReused,
        }
    }
}

impl Labelled for Order {
    fn label(&self) -> InventoryOutcome {
        match self {
            Self::Placed { .. } => InventoryOutcome::Applied,
            Self::Insufficient { .. } => InventoryOutcome::Insufficient,
            Self::Duplicate { .. } => InventoryOutcome::Duplicate,
            Self::IdReused => InventoryOutcome::IdReused,
        }
    }
}

impl<T: Labelled> Labelled for crate::script::Acked<T> {
    fn label(&self) -> InventoryOutcome {
        self.outcome.label()
    }
}

/// Counts `result` in the `redkit.inventory.operations` metric under `operation`, and
/// returns it.
pub(crate) fn counted<T: Labelled>(operation: InventoryOp, result: Result<T>) -> Result<T> {
    let label = match &result {
        Ok(outcome) => outcome.label(),
        Err(Error::NotFound { .. }) => InventoryOutcome::NotFound,
        Err(_) => InventoryOutcome::Error,
    };
    super::metrics::inventory_operation(operation, label);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duplicate_answers_as_its_original() {
        let done = Decrement::Decremented { remaining: 4 };
        let dup = Decrement::Duplicate {
            original: Original::new(done.clone()),
        };
        assert_eq!(dup.original(), Some(&done));
        assert_eq!(done.original(), None);
        assert!(done.is_applied() && dup.is_applied());
        let short = Decrement::Insufficient { available: 1 };
        assert!(!short.is_applied());
        let dup_short = Decrement::Duplicate {
            original: Original::new(short),
        };
        assert!(!dup_short.is_applied());
        assert!(!Decrement::IdReused.is_applied());

        let restocked = Restock::Restocked { stock: 12 };
        let dup = Restock::Duplicate {
            original: Original::new(restocked.clone()),
        };
        assert_eq!(dup.original(), Some(&restocked));
        assert_eq!(restocked.original(), None);
        assert_eq!(restocked.stock(), Some(12));
        assert_eq!(dup.stock(), Some(12));
        assert_eq!(Restock::IdReused.stock(), None);

        let placed = Order::Placed {
            remaining: vec![3, 0],
        };
        let dup = Order::Duplicate {
            original: Original::new(placed.clone()),
        };
        assert_eq!(dup.original(), Some(&placed));
        assert_eq!(placed.original(), None);
        assert!(placed.is_applied() && dup.is_applied());
        let short = Order::Insufficient { short: vec![] };
        assert!(!short.is_applied());
        let dup_short = Order::Duplicate {
            original: Original::new(short),
        };
        assert!(!dup_short.is_applied());
        assert!(!Order::IdReused.is_applied());
    }
}
