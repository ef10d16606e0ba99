//! Owner tokens (who holds a lease) and fencing tokens (which acquisition came later).

use std::fmt;
use std::num::NonZeroU64;

use crate::error::{Error, Result};
use crate::script::Script;

/// A fresh owner token: 128 random bits from the thread-local CSPRNG, as 32 hex digits.
/// Unique per acquisition and unguessable, so only the holder can release or renew.
///
/// The generator is `rand`'s `ThreadRng`: ChaCha12 seeded from the OS once per thread and
/// reseeded every 64 KiB of output, so no system call per acquire (one per 4096 tokens) and
/// still a cryptographic generator: a token seen by one client tells nothing about the next.
/// A non-cryptographic seeded generator (xorshift, wyrand) would be cheaper still but
/// predictable from a few outputs, and the token is what lets its holder release the lock.
/// The digits are written directly (`{:032x}` through `format!` was a visible share of the
/// acquire in a profile); the text is the same.
pub(crate) fn owner_token() -> String {
    hex(rand::random::<u128>())
}

/// `n` as 32 lower-case hex digits, most significant first (what `{:032x}` writes).
fn hex(n: u128) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut digits = [0u8; 32];
    for (i, digit) in digits.iter_mut().enumerate() {
        *digit = HEX[((n >> ((31 - i) * 4)) & 0xf) as usize];
    }
    // ASCII digits: always UTF-8 (one allocation, no per-character encoding).
    String::from_utf8_lossy(&digits).into_owned()
}

/// The fencing token `script` answered: positive, else an unexpected-reply error naming it.
pub(crate) fn issued(script: &Script, n: i64) -> Result<FencingToken> {
    u64::try_from(n)
        .ok()
        .and_then(FencingToken::new)
        .ok_or_else(|| Error::unexpected(script.id(), "fencing token is not positive"))
}

/// Parses a stored token by Redis's integer rules (canonical decimal: no sign, no leading
/// zero, no spaces), positive and within `i64`. `None` for anything else.
pub(crate) fn parse_positive(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.is_empty() || b.len() > 19 || b[0] == b'0' || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    s.parse::<i64>().ok().and_then(|n| u64::try_from(n).ok())
}

/// A fencing token: strictly increasing per resource, one per successful acquisition.
///
/// [`Lock`](crate::lock::Lock) issues `max(last issued + 1, server TIME in microseconds)`, stored
/// in the resource's fence key with an expiry. So tokens keep growing even when the fence key
/// is gone (expired, deleted, lost in a restart without persistence, or behind on a promoted
/// replica), **as long as** the clock of the server issuing the next token is not behind the
/// clock that issued the last one by more than the time between the two acquisitions (NTP-
/// synchronised servers and leases of milliseconds or more satisfy this). A retry with the
/// same owner token while the lock is held answers the token already issued.
///
/// Pass it to the storage you protect (e.g. [`Lock::fenced_set`](crate::lock::Lock::fenced_set)),
/// which refuses writes carrying a token older than one it has already seen, so a holder
/// that paused past its lease cannot overwrite newer work.
///
/// A token is never zero: an acquisition without fencing has none
/// ([`LockGuard::fencing_token`](crate::lock::LockGuard::fencing_token) is `None`).
///
/// ```
/// use redkit::lock::FencingToken;
/// let older = FencingToken::new(7).unwrap();
/// let newer = FencingToken::new(8).unwrap();
/// assert!(older < newer);
/// assert_eq!(newer.get(), 8);
/// assert_eq!(newer.to_string(), "8");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(NonZeroU64);

impl FencingToken {
    /// Wraps a raw token (e.g. one read back from storage); `None` for `0`, which is never
    /// issued.
    ///
    /// ```
    /// use redkit::lock::FencingToken;
    /// let stored: u64 = "1795435488341871".parse().unwrap(); // e.g. read from your database
    /// let last_written = FencingToken::new(stored).unwrap();
    /// assert!(FencingToken::new(stored + 1).unwrap() > last_written);
    /// assert_eq!(FencingToken::new(0), None);
    /// ```
    pub const fn new(token: u64) -> Option<Self> {
        match NonZeroU64::new(token) {
            Some(n) => Some(Self(n)),
            None => None,
        }
    }

    /// The raw value.
    ///
    /// ```
    /// use redkit::lock::FencingToken;
    /// let last_seen: u64 = 41; // the token stored with the data
    /// let token = FencingToken::new(42).unwrap();
    /// // storage that checks tokens accepts a write only from a token not older than the last
    /// assert!(token.get() >= last_seen);
    /// ```
    pub const fn get(self) -> u64 {
        self.0.get()
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
    fn an_owner_token_is_its_random_number_in_32_hex_digits() {
        for n in [0, 1, 0xfedc_ba98_7654_3210_0123_4567_89ab_cdef, u128::MAX] {
            assert_eq!(hex(n), format!("{n:032x}"));
        }
        let token = owner_token();
        assert!(
            token.len() == 32 && u128::from_str_radix(&token, 16).is_ok(),
            "{token}"
        );
        assert_ne!(owner_token(), token, "a new token per call");
    }

    #[test]
    fn a_fencing_token_displays_as_its_number() {
        let token = FencingToken::new(1_733_000_000_123_456).unwrap();
        assert_eq!(token.to_string(), "1733000000123456");
    }

    #[test]
    fn an_issued_token_is_positive() {
        let script = crate::script::embedded::LOCK_FENCE.script();
        assert_eq!(issued(script, 1).unwrap().get(), 1);
        for bad in [0, -1, i64::MIN] {
            assert!(
                matches!(issued(script, bad), Err(Error::UnexpectedReply { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn stored_tokens_follow_redis_integer_rules() {
        assert_eq!(
            parse_positive("1795435488341871"),
            Some(1_795_435_488_341_871)
        );
        assert_eq!(parse_positive("9223372036854775807"), Some(i64::MAX as u64));
        for bad in [
            "",
            "0",
            "-0",
            "-5",
            "05",
            "007",
            "+5",
            " 5",
            "5 ",
            "5.0",
            "1.5",
            "1e3",
            "9223372036854775808",
            "99999999999999999999",
        ] {
            assert_eq!(parse_positive(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn owner_tokens_are_the_32_digit_hex_of_128_bits() {
        for _ in 0..100 {
            let token = owner_token();
            let n = u128::from_str_radix(&token, 16).unwrap();
            assert_eq!(token, format!("{n:032x}"));
        }
    }

    #[test]
    fn owner_tokens_are_128_bit_hex_and_distinct() {
        let a = owner_token();
        let b = owner_token();
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
