//! The key schema of every lock kind: each Redis key a lock, fair lock, read-write lock,
//! reentrant lock, semaphore or Redlock uses is built here, and nowhere else.
//!
//! Every key of one resource is its base key `<prefix>:{<resource>}` (escaped and bounded by
//! [`keys::tagged_part`]) plus a fixed suffix, so they all share one hash tag (one Cluster
//! slot). A leaf: it imports nothing from the other lock files.

use crate::error::Result;
use crate::keys;

/// The base key of `resource` under `prefix`: `<prefix>:{<resource>}`.
pub(crate) fn base(prefix: &str, resource: &str) -> Result<String> {
    keys::tagged_part(prefix, "resource", resource)
}

/// What [`fence`] appends: the last fencing token issued (Lock, FairLock, RwLock,
/// ReentrantLock).
const FENCE: &str = ":fence";
/// The byte a blocked acquirer appends to a [`Lock`](crate::lock::Lock)'s owner token in the
/// lock key's value (`lock_mark`), so that its release pushes a wake-up: an owner token is text,
/// which never holds it.
pub(crate) const MARK: u8 = 0xff;
/// What a mark answers for a free lock: the `PTTL` of a missing key (`lock_mark` answers the
/// hold's `PTTL`).
pub(crate) const FREE: i64 = -2;
/// What [`wake`] appends: the wake-up list of a lock or semaphore.
pub(crate) const WAKE: &str = ":wake";

fn suffixed(key: &str, suffix: &str) -> String {
    let mut out = String::with_capacity(key.len() + suffix.len());
    out.push_str(key);
    out.push_str(suffix);
    out
}

/// The fence key of a base key.
pub(crate) fn fence(key: &str) -> String {
    suffixed(key, FENCE)
}

/// The wake-up list of a lock or semaphore key: a release pushes, a blocked acquire pops.
pub(crate) fn wake(key: &str) -> String {
    suffixed(key, WAKE)
}

/// A semaphore's contention mark: set while a block of its permits got less than it asked
/// for (`lua/semaphore_block`; the concurrency layer's leased slots, feature `tower`).
#[cfg_attr(not(feature = "tower"), allow(dead_code))]
pub(crate) fn contention(key: &str) -> String {
    suffixed(key, ":contended")
}

/// A fair lock's lease ends (a hash: owner token -> lease end).
pub(crate) fn leases(key: &str) -> String {
    suffixed(key, ":leases")
}

/// A fair lock entry's "gone" list, pushed when the entry with `token` leaves.
pub(crate) fn gone(key: &str, token: &[u8]) -> Vec<u8> {
    let mut out = suffixed(key, ":gone:").into_bytes();
    out.extend_from_slice(token);
    out
}

/// A read-write lock's reader set.
pub(crate) fn readers(key: &str) -> String {
    suffixed(key, ":readers")
}

/// A read-write lock's writer key.
pub(crate) fn writer(key: &str) -> String {
    suffixed(key, ":writer")
}

/// A read-write lock's writer intent.
pub(crate) fn intent(key: &str) -> String {
    suffixed(key, ":intent")
}

/// The prefix of a semaphore's arrival-order gate (a fair lock): `<prefix>:gate`.
pub(crate) fn gate_prefix(prefix: &str) -> String {
    suffixed(prefix, ":gate")
}

/// How much longer than twice the lease a fence key lives after the last acquire or renewal.
const FENCE_KEY_MARGIN_MS: u64 = 10_000;

/// The fence key's TTL for a lease of `ttl_ms`: `2 × ttl + 10 s` (saturating).
pub(crate) fn fence_ttl_ms(ttl_ms: u64) -> u64 {
    ttl_ms.saturating_mul(2).saturating_add(FENCE_KEY_MARGIN_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_shares_the_base_key_and_its_hash_tag() {
        let key = base("p", "a{b}").unwrap();
        assert_eq!(key, "p:{a%7Bb%7D}");
        assert_eq!(fence(&key), "p:{a%7Bb%7D}:fence");
        assert_eq!(wake(&key), "p:{a%7Bb%7D}:wake");
        assert_eq!(contention(&key), "p:{a%7Bb%7D}:contended");
        assert_eq!(leases(&key), "p:{a%7Bb%7D}:leases");
        assert_eq!(gone(&key, b"t"), b"p:{a%7Bb%7D}:gone:t".to_vec());
        assert_eq!(readers(&key), "p:{a%7Bb%7D}:readers");
        assert_eq!(writer(&key), "p:{a%7Bb%7D}:writer");
        assert_eq!(intent(&key), "p:{a%7Bb%7D}:intent");
        assert_eq!(gate_prefix("p"), "p:gate");
        assert_eq!(fence_ttl_ms(u64::MAX), u64::MAX);
    }
}
