//! Group commit of hot SKUs: the concurrent decrements of one SKU through one [`Inventory`] (see
//! [`InventoryBuilder::with_group_commit`](super::InventoryBuilder::with_group_commit)) are queued
//! per SKU key and settled by one `inventory_group` call (the queues: [`crate::group_commit`]).
//!
//! [`Inventory`]: super::Inventory

use super::outcome::Decrement;
use crate::group_commit::metrics::GroupOperation;
use crate::group_commit::{self, Grouped};

/// One queued decrement.
#[derive(Debug)]
pub(super) struct Take {
    pub(super) quantity: u64,
    /// The request record key and fingerprint, when the caller gave a request id.
    pub(super) record: Option<(String, String)>,
}

/// Decrements grouped per SKU key.
#[derive(Debug)]
pub(super) enum Decrements {}

impl Grouped for Decrements {
    type Key = String;
    type Payload = Take;
    type Outcome = Decrement;
    const WHAT: GroupOperation = GroupOperation::Decrement;
}

pub(super) type Groups = group_commit::Groups<Decrements>;
pub(super) type Member = group_commit::Member<Decrements>;
pub(super) type Lead = group_commit::Lead<Decrements>;
pub(super) type Turn = group_commit::Turn<Decrements>;
