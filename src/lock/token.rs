//! Owner tokens (who holds a lease) and fencing tokens (which acquisition came later).

use std::fmt;

/// A fresh owner token: 128 random bits from the thread-local CSPRNG, as 32 hex digits.
/// Unique per acquisition and unguessable, so only the holder can release or renew.
pub(crate) fn owner_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// A fencing token: strictly increasing per resource, one per successful acquisition.
///
/// Pass it to the storage you protect (e.g. [`Lock::fenced_set`](super::Lock::fenced_set)),
/// which refuses writes carrying a token older than one it has already seen, so a holder
/// that paused past its lease cannot overwrite newer work.
///
/// ```
/// use redkit::lock::FencingToken;
/// let older = FencingToken::new(7);
/// let newer = FencingToken::new(8);
/// assert!(older < newer);
/// assert_eq!(newer.get(), 8);
/// assert_eq!(newer.to_string(), "8");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(u64);

impl FencingToken {
    /// Wraps a raw token (e.g. one read back from storage).
    pub const fn new(token: u64) -> Self {
        Self(token)
    }

    /// The raw value.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_tokens_are_128_bit_hex_and_distinct() {
        let a = owner_token();
        let b = owner_token();
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
