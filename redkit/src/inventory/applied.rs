//! The outcomes of `inventory_apply` read from its [`Reply`]: [`Decrement`] and [`Restock`]
//! (one SKU) and [`Order`] (its lines). A repeated request, a reused id and an unknown SKU
//! read alike for all three; only an applied or short reply is read by each.

use super::engine::Mode;
use super::order::OrderLine;
use super::outcome::{Decrement, Order, Original, Restock, Shortage};
use super::reply::Reply;
use super::store::unknown_sku;
use crate::error::{Error, Result};
use crate::script::Script;

/// What a request of `inventory_apply` names by line: one SKU (`str`) or an order's lines.
pub(super) trait Lines {
    /// The SKU of the line of 0-based index `line`, for the error of an unknown SKU.
    fn sku(&self, line: usize) -> &str;
}

impl Lines for str {
    fn sku(&self, _line: usize) -> &str {
        self
    }
}

impl Lines for [OrderLine] {
    fn sku(&self, line: usize) -> &str {
        self.get(line).map_or("?", OrderLine::sku)
    }
}

/// An outcome of `inventory_apply` for a request of lines `L`.
pub(super) trait FromReply<L: Lines + ?Sized>: Sized {
    /// An applied request: the stock of each line afterwards.
    fn applied(script: &Script, lines: &L, stocks: Vec<u64>) -> Result<Self>;
    /// A refused take: (line, available) of each short line.
    fn short(script: &Script, lines: &L, short: Vec<(usize, u64)>) -> Result<Self>;
    /// A repeated request, answered by its first outcome.
    fn duplicate(original: Original<Self>) -> Self;
    /// A request id already used for another request.
    const ID_REUSED: Self;
}

/// A write of one SKU by `inventory_apply`: [`Decrement`] (a take) or [`Restock`] (a put).
pub(super) trait SkuWrite: FromReply<str> {
    /// The script's operation.
    const MODE: Mode;
}

/// Reads `reply` of a request of `lines` as `T`.
pub(super) fn read<T, L>(script: &Script, lines: &L, reply: Reply) -> Result<T>
where
    T: FromReply<L>,
    L: Lines + ?Sized,
{
    match reply {
        Reply::Applied(stocks) => T::applied(script, lines, stocks),
        Reply::Short(short) => T::short(script, lines, short),
        Reply::Duplicate(original) => {
            Ok(T::duplicate(Original::new(read(script, lines, *original)?)))
        }
        Reply::Conflict => Ok(T::ID_REUSED),
        Reply::Unknown(line) => Err(unknown_sku(lines.sku(line))),
    }
}

/// The one number of a one-line reply.
fn one_line(script: &Script, numbers: &[u64]) -> Result<u64> {
    match numbers {
        [n] => Ok(*n),
        _ => Err(Error::unexpected(script.id(), "not one line")),
    }
}

impl FromReply<str> for Decrement {
    fn applied(script: &Script, _sku: &str, stocks: Vec<u64>) -> Result<Self> {
        one_line(script, &stocks).map(|remaining| Self::Decremented { remaining })
    }
    fn short(script: &Script, _sku: &str, short: Vec<(usize, u64)>) -> Result<Self> {
        match short.as_slice() {
            [(0, available)] => Ok(Self::Insufficient {
                available: *available,
            }),
            _ => Err(Error::unexpected(script.id(), "not one line")),
        }
    }
    fn duplicate(original: Original<Self>) -> Self {
        Self::Duplicate { original }
    }
    const ID_REUSED: Self = Self::IdReused;
}

impl SkuWrite for Decrement {
    const MODE: Mode = Mode::Take;
}

impl FromReply<str> for Restock {
    fn applied(script: &Script, _sku: &str, stocks: Vec<u64>) -> Result<Self> {
        one_line(script, &stocks).map(|stock| Self::Restocked { stock })
    }
    fn short(script: &Script, _sku: &str, _short: Vec<(usize, u64)>) -> Result<Self> {
        Err(Error::unexpected(script.id(), "a restock cannot be short"))
    }
    fn duplicate(original: Original<Self>) -> Self {
        Self::Duplicate { original }
    }
    const ID_REUSED: Self = Self::IdReused;
}

impl SkuWrite for Restock {
    const MODE: Mode = Mode::Put;
}

impl FromReply<[OrderLine]> for Order {
    fn applied(_script: &Script, _lines: &[OrderLine], remaining: Vec<u64>) -> Result<Self> {
        Ok(Self::Placed { remaining })
    }
    fn short(script: &Script, lines: &[OrderLine], short: Vec<(usize, u64)>) -> Result<Self> {
        let short = short
            .into_iter()
            .map(|(i, available)| {
                let line = lines
                    .get(i)
                    .ok_or_else(|| Error::unexpected(script.id(), "line out of range"))?;
                Ok(Shortage {
                    sku: line.sku().to_owned(),
                    requested: line.quantity(),
                    available,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self::Insufficient { short })
    }
    fn duplicate(original: Original<Self>) -> Self {
        Self::Duplicate { original }
    }
    const ID_REUSED: Self = Self::IdReused;
}
