//! [`LimitKey`]: the canonical identity of one rate-limited client.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::error::{Error, Result};
use crate::keys::escape_part;

/// How many leading bits of an IPv6 address identify one client, by default: a /64 is what
/// one subscriber usually gets, so every address inside it shares one bucket.
///
/// ```
/// use std::net::IpAddr;
/// use redkit::rate_limit::{LimitKey, DEFAULT_IPV6_PREFIX};
///
/// let addr: IpAddr = "2001:db8:1:2:3:4:5:6".parse().unwrap();
/// assert_eq!(LimitKey::ip(addr), LimitKey::ip_grouped(addr, DEFAULT_IPV6_PREFIX));
/// assert_eq!(LimitKey::ip(addr).as_str(), "ip:2001:db8:1:2::/64");
/// ```
pub const DEFAULT_IPV6_PREFIX: u8 = 64;

/// Who is being limited: a canonical IP (or IPv6 network) or a free-form text key.
///
/// - IPv4-mapped IPv6 addresses (`::ffff:1.2.3.4`) are the IPv4 address they map.
/// - IPv6 addresses are grouped by a prefix ([`DEFAULT_IPV6_PREFIX`] bits by default), so a
///   client cannot escape its limit by rotating addresses inside its own network.
/// - Text keys (an API key, a user id) are 1..=256 bytes; `{`, `}` and `%` are escaped, so a
///   key can never choose its own Cluster hash tag.
///
/// The two kinds never collide: `ip:` and `k:` prefixes keep them apart.
///
/// ```
/// use std::net::IpAddr;
/// use redkit::rate_limit::LimitKey;
///
/// let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
/// assert_eq!(LimitKey::ip(mapped).as_str(), "ip:192.0.2.7");
///
/// let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
/// let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
/// assert_eq!(LimitKey::ip(a), LimitKey::ip(b)); // same /64
///
/// let user = LimitKey::text("user{42}")?;
/// assert_eq!(user.as_str(), "k:user%7B42%7D");
/// # Ok::<(), redkit::Error>(())
/// ```
#[derive(Clone)]
pub struct LimitKey(Text);

/// A key's text: an IPv4 key (the middleware builds one per request) in place, any other on
/// the heap.
#[derive(Clone)]
enum Text {
    Short { len: u8, bytes: [u8; SHORT] },
    Heap(String),
}

/// The longest text kept in place: `ip:255.255.255.255` fits, and the key is no larger
/// than a `String`.
const SHORT: usize = 22;

impl PartialEq for LimitKey {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for LimitKey {}

impl std::hash::Hash for LimitKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl LimitKey {
    /// The key of an IP address, IPv6 grouped by [`DEFAULT_IPV6_PREFIX`] bits.
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use redkit::rate_limit::LimitKey;
    ///
    /// assert_eq!(LimitKey::ip([192, 0, 2, 7].into()).as_str(), "ip:192.0.2.7");
    /// let a: IpAddr = "2001:db8::1".parse().unwrap();
    /// let b: IpAddr = "2001:db8::ffff".parse().unwrap();
    /// assert_eq!(LimitKey::ip(a), LimitKey::ip(b)); // one /64, one client
    /// ```
    pub fn ip(addr: IpAddr) -> Self {
        Self::ip_grouped(addr, DEFAULT_IPV6_PREFIX)
    }

    /// The key of an IP address, IPv6 grouped by `ipv6_prefix` bits (values above 128 are
    /// treated as 128: one bucket per address). IPv4 addresses are always per address.
    ///
    /// ```
    /// use redkit::rate_limit::LimitKey;
    /// let ip = "2001:db8:aaaa:bbbb::1".parse().unwrap();
    /// assert_eq!(LimitKey::ip_grouped(ip, 48).as_str(), "ip:2001:db8:aaaa::/48");
    /// ```
    pub fn ip_grouped(addr: IpAddr, ipv6_prefix: u8) -> Self {
        match canonical(addr) {
            IpAddr::V4(v4) => Self(v4_text(v4)),
            IpAddr::V6(v6) => {
                let bits = ipv6_prefix.min(128);
                if bits == 128 {
                    return Self(Text::Heap(format!("ip:{v6}")));
                }
                let mask = if bits == 0 {
                    0
                } else {
                    u128::MAX << (128 - u32::from(bits))
                };
                let net = Ipv6Addr::from(u128::from(v6) & mask);
                Self(Text::Heap(format!("ip:{net}/{bits}")))
            }
        }
    }

    /// A free-form key (API key, user id, ...): 1..=256 bytes, braces and `%` escaped.
    ///
    /// ```
    /// use redkit::rate_limit::LimitKey;
    /// assert!(LimitKey::text("").is_err());
    /// assert!(LimitKey::text(&"x".repeat(257)).is_err());
    /// assert_eq!(LimitKey::text("api-key-1")?.as_str(), "k:api-key-1");
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn text(key: &str) -> Result<Self> {
        let escaped = escape_part("key", key)?;
        Ok(Self(Text::Heap(format!("k:{escaped}"))))
    }

    /// The bucket shared by requests whose client could not be determined.
    pub(crate) fn unknown_client() -> Self {
        Self(Text::Heap("unknown".to_owned()))
    }

    /// The key whose [`as_str`](Self::as_str) is `canonical` (the hash tag of a limiter's
    /// key), when a constructor makes it: what a scan reads back from Redis.
    pub(crate) fn from_canonical(canonical: &str) -> Option<Self> {
        let key = if canonical == "unknown" {
            Self::unknown_client()
        } else if let Some(escaped) = canonical.strip_prefix("k:") {
            Self::text(&crate::keys::unescape_part(escaped)?).ok()?
        } else {
            let ip = canonical.strip_prefix("ip:")?;
            match ip.split_once('/') {
                Some((net, bits)) => Self::ip_grouped(net.parse().ok()?, bits.parse().ok()?),
                None => match ip.parse::<IpAddr>().ok()? {
                    v6 @ IpAddr::V6(_) => Self::ip_grouped(v6, 128),
                    v4 => Self::ip(v4),
                },
            }
        };
        (key.as_str() == canonical).then_some(key)
    }

    /// The canonical form that goes inside the Redis key's hash tag.
    ///
    /// ```
    /// use redkit::rate_limit::LimitKey;
    /// assert_eq!(LimitKey::ip([10, 0, 0, 1].into()).as_str(), "ip:10.0.0.1");
    /// ```
    pub fn as_str(&self) -> &str {
        match &self.0 {
            // Written from ASCII only (`v4_text`): always UTF-8, so never the fallback.
            Text::Short { len, bytes } => {
                std::str::from_utf8(&bytes[..usize::from(*len).min(SHORT)]).unwrap_or_default()
            }
            Text::Heap(text) => text,
        }
    }
}

/// `ip:a.b.c.d`, written digit by digit in place: the middleware builds one per request,
/// and this is several times cheaper than `format!` and allocates nothing (the same text as
/// `Ipv4Addr`'s `Display`).
fn v4_text(v4: Ipv4Addr) -> Text {
    let mut bytes = [0u8; SHORT];
    bytes[..3].copy_from_slice(b"ip:");
    // At most 3 + 4 * 3 + 3 = 18 bytes: within SHORT.
    let mut len = 3;
    let mut push = |b: u8| {
        if let Some(slot) = bytes.get_mut(len) {
            *slot = b;
            len += 1;
        }
    };
    for (i, octet) in v4.octets().into_iter().enumerate() {
        if i > 0 {
            push(b'.');
        }
        if octet >= 100 {
            push(b'0' + octet / 100);
        }
        if octet >= 10 {
            push(b'0' + octet / 10 % 10);
        }
        push(b'0' + octet % 10);
    }
    Text::Short {
        // At most SHORT (22): fits a u8.
        len: len as u8,
        bytes,
    }
}

/// IPv4-mapped IPv6 (`::ffff:a.b.c.d`) becomes IPv4; everything else is unchanged.
pub(crate) fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

impl From<IpAddr> for LimitKey {
    fn from(addr: IpAddr) -> Self {
        Self::ip(addr)
    }
}

impl From<Ipv4Addr> for LimitKey {
    fn from(addr: Ipv4Addr) -> Self {
        Self::ip(IpAddr::V4(addr))
    }
}

impl From<Ipv6Addr> for LimitKey {
    fn from(addr: Ipv6Addr) -> Self {
        Self::ip(IpAddr::V6(addr))
    }
}

impl fmt::Debug for LimitKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("LimitKey").field(&self.as_str()).finish()
    }
}

impl fmt::Display for LimitKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Checks an IPv6 grouping prefix length.
#[cfg_attr(not(feature = "tower"), allow(dead_code))]
pub(crate) fn validate_ipv6_prefix(bits: u8) -> Result<u8> {
    if bits == 0 || bits > 128 {
        return Err(Error::invalid("ipv6_prefix", "must be 1 to 128 bits"));
    }
    Ok(bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ipv4_text_is_the_display_form() {
        for octets in [
            [0, 0, 0, 0],
            [255, 255, 255, 255],
            [1, 10, 100, 199],
            [9, 99, 200, 250],
        ] {
            let v4 = Ipv4Addr::from(octets);
            assert_eq!(LimitKey(v4_text(v4)).as_str(), format!("ip:{v4}"));
        }
        for n in (0..=u32::MAX).step_by(65_537) {
            let v4 = Ipv4Addr::from(n);
            let key = LimitKey::ip(v4.into());
            assert_eq!(key.as_str(), format!("ip:{v4}"));
            assert!(matches!(key.0, Text::Short { .. }));
            // Equal to, and hashed as, the same text kept on the heap.
            let heap = LimitKey(Text::Heap(format!("ip:{v4}")));
            assert_eq!(key, heap);
            let state = std::hash::RandomState::new();
            assert_eq!(
                std::hash::BuildHasher::hash_one(&state, &key),
                std::hash::BuildHasher::hash_one(&state, &heap)
            );
        }
    }

    #[test]
    fn ipv4_mapped_is_ipv4() {
        assert_eq!(
            LimitKey::ip(ip("::ffff:10.1.2.3")),
            LimitKey::ip(ip("10.1.2.3"))
        );
        // IPv4-compatible (deprecated ::a.b.c.d) is NOT treated as mapped.
        assert_ne!(LimitKey::ip(ip("::10.1.2.3")), LimitKey::ip(ip("10.1.2.3")));
    }

    #[test]
    fn ipv6_grouping() {
        assert_eq!(LimitKey::ip(ip("2001:db8::1")).as_str(), "ip:2001:db8::/64");
        assert_ne!(
            LimitKey::ip(ip("2001:db8:0:1::1")),
            LimitKey::ip(ip("2001:db8:0:2::1"))
        );
        assert_eq!(
            LimitKey::ip_grouped(ip("2001:db8::1"), 128).as_str(),
            "ip:2001:db8::1"
        );
        assert_eq!(
            LimitKey::ip_grouped(ip("2001:db8::1"), 200).as_str(),
            "ip:2001:db8::1"
        );
        assert_eq!(
            LimitKey::ip_grouped(ip("2001:db8::1"), 0).as_str(),
            "ip:::/0"
        );
    }

    #[test]
    fn text_keys_are_escaped_and_distinct_from_ips() {
        assert_eq!(LimitKey::text("a}b").unwrap().as_str(), "k:a%7Db");
        assert_ne!(
            LimitKey::text("10.0.0.1").unwrap(),
            LimitKey::ip(ip("10.0.0.1"))
        );
        assert!(validate_ipv6_prefix(0).is_err());
        assert!(validate_ipv6_prefix(129).is_err());
        assert_eq!(validate_ipv6_prefix(56).unwrap(), 56);
        // Both ends of the documented range 1..=128 are accepted.
        assert_eq!(validate_ipv6_prefix(1).unwrap(), 1);
        assert_eq!(validate_ipv6_prefix(128).unwrap(), 128);
    }

    #[test]
    fn display_is_the_key_text_and_debug_names_the_type() {
        let key = LimitKey::text("a}b").unwrap();
        assert_eq!(key.to_string(), "k:a%7Db");
        assert_eq!(format!("{key:?}"), r#"LimitKey("k:a%7Db")"#);
        assert_eq!(LimitKey::ip(ip("192.0.2.7")).to_string(), "ip:192.0.2.7");
    }

    #[test]
    fn different_keys_hash_apart() {
        // Equal keys hash alike (above); different ones must not all share one hash, or every
        // map keyed by client (the deny cache, the leases) degrades to one bucket.
        let state = std::hash::RandomState::new();
        let hash = |k: &LimitKey| std::hash::BuildHasher::hash_one(&state, k);
        let a = LimitKey::ip(ip("192.0.2.1"));
        let b = LimitKey::ip(ip("192.0.2.2"));
        let c = LimitKey::text("user-1").unwrap();
        assert_ne!(hash(&a), hash(&b));
        assert_ne!(hash(&a), hash(&c));
    }

    #[test]
    fn a_canonical_form_reads_back_as_the_key_that_wrote_it() {
        let keys = [
            LimitKey::unknown_client(),
            LimitKey::text("api-key-1").unwrap(),
            LimitKey::text("a{b}%c").unwrap(),
            LimitKey::ip(ip("10.0.0.1")),
            LimitKey::ip(ip("2001:db8::1")),
            LimitKey::ip_grouped(ip("2001:db8::1"), 128),
            LimitKey::ip_grouped(ip("2001:db8:1:2::9"), 48),
        ];
        for key in keys {
            assert_eq!(
                LimitKey::from_canonical(key.as_str()),
                Some(key.clone()),
                "{key:?}"
            );
        }
        // What no constructor writes does not read back: another prefix, a form a
        // constructor writes differently (a leading zero, a host part under the prefix, an
        // IPv4 with a prefix), a bad escape, the empty text.
        for other in [
            "",
            "x:1",
            "unknown:1",
            "ip:010.0.0.1",
            "ip:2001:db8::1/32",
            "ip:10.0.0.1/8",
            "ip:not-an-ip",
            "k:",
            "k:%zz",
        ] {
            assert_eq!(LimitKey::from_canonical(other), None, "{other}");
        }
    }
}
