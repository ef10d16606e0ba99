//! [`AccessList`]: client networks the rate-limit layer decides on before any Redis call.

use std::collections::HashMap;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::error::{Error, Result};
use crate::rate_limit::canonical;

/// What an [`AccessList`] says of a client address.
///
/// ```
/// use redkit::middleware::{Access, AccessList};
/// let list = AccessList::parse(["10.0.0.0/8"], ["203.0.113.0/24"])?;
/// assert_eq!(list.decide("10.1.2.3".parse().unwrap()), Some(Access::Allowed));
/// # Ok::<(), redkit::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Access {
    /// Never limited: the request passes without a Redis call
    /// ([`Unchecked::Allowlisted`](super::Unchecked::Allowlisted)).
    Allowed,
    /// Always refused: `403 Forbidden` without a Redis call
    /// ([`Rejection::Denied`](super::Rejection::Denied)).
    Denied,
}

/// Client networks that are never limited (allow) or always refused (deny), decided in
/// process before any Redis call: the most specific network that holds the address wins
/// (a denied `/32` inside an allowed `/8` is denied; an allowed host inside a denied `/16` is
/// allowed), a deny when an allowed and a denied network are equally specific. An
/// IPv4-mapped IPv6 address is matched as its IPv4 address. Applies to clients identified by
/// address ([`ClientId::Ip`](super::ClientId::Ip)), not to those a [`FnKey`](super::FnKey)
/// keys otherwise. In a policy file: `allow = ["10.0.0.0/8"]`, `deny = ["203.0.113.9"]` at
/// the top level.
///
/// ```
/// use redkit::middleware::{Access, AccessList};
/// let list = AccessList::parse(["10.0.0.0/8", "10.9.9.9"], ["10.9.0.0/16", "2001:db8::/32"])?;
/// assert_eq!(list.decide("10.1.2.3".parse().unwrap()), Some(Access::Allowed));
/// assert_eq!(list.decide("10.9.1.1".parse().unwrap()), Some(Access::Denied));
/// assert_eq!(list.decide("10.9.9.9".parse().unwrap()), Some(Access::Allowed));
/// assert_eq!(list.decide("::ffff:10.1.2.3".parse().unwrap()), Some(Access::Allowed));
/// assert_eq!(list.decide("192.0.2.1".parse().unwrap()), None); // limited as usual
/// assert!(AccessList::parse(["10.0.0.0/33"], [] as [&str; 0]).is_err());
/// # Ok::<(), redkit::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccessList {
    /// One level per address family and prefix length, longest first: a lookup is one hash
    /// lookup per level, whatever the number of networks.
    levels: Vec<Level>,
    len: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Level {
    v6: bool,
    prefix: u8,
    /// Network address -> what the list says (a deny where both were given).
    networks: HashMap<IpAddr, Access>,
}

impl AccessList {
    /// The most networks one list holds.
    ///
    /// ```
    /// use std::net::Ipv4Addr;
    /// use redkit::middleware::AccessList;
    ///
    /// // One more host than a list holds: 10.0.0.0, 10.0.0.1, ...
    /// let hosts: Vec<String> = (0..=AccessList::MAX_NETWORKS as u32)
    ///     .map(|i| Ipv4Addr::from(0x0a00_0000 + i).to_string())
    ///     .collect();
    /// let full = AccessList::parse(&hosts[..AccessList::MAX_NETWORKS], [] as [&str; 0])?;
    /// assert_eq!(full.len(), 100_000);
    /// assert!(AccessList::parse(&hosts, [] as [&str; 0]).is_err());
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub const MAX_NETWORKS: usize = 100_000;

    /// An empty list: every client is limited as usual.
    ///
    /// ```
    /// assert!(redkit::middleware::AccessList::new().is_empty());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// A list from text: each entry a network in CIDR notation (`10.0.0.0/8`, `2001:db8::/32`)
    /// or a single address (`203.0.113.9`). Errors: [`Error::InvalidInput`] naming the entry
    /// that is neither, a network with host bits set (`10.0.0.1/8`: write `10.0.0.0/8`), or
    /// more than [`MAX_NETWORKS`](Self::MAX_NETWORKS) entries.
    ///
    /// ```
    /// use redkit::middleware::AccessList;
    /// assert!(AccessList::parse(["10.0.0.0/8"], ["203.0.113.9"]).is_ok());
    /// assert!(AccessList::parse(["10.0.0.1/8"], [] as [&str; 0]).is_err());
    /// assert!(AccessList::parse(["not an address"], [] as [&str; 0]).is_err());
    /// ```
    pub fn parse<A, D, S, T>(allow: A, deny: D) -> Result<Self>
    where
        A: IntoIterator<Item = S>,
        D: IntoIterator<Item = T>,
        S: AsRef<str>,
        T: AsRef<str>,
    {
        let mut list = Self::new();
        for entry in allow {
            list = list.allow(network("allow", entry.as_ref())?)?;
        }
        for entry in deny {
            list = list.deny(network("deny", entry.as_ref())?)?;
        }
        Ok(list)
    }

    /// Adds a network that is never limited.
    ///
    /// ```
    /// use redkit::middleware::AccessList;
    /// let list = AccessList::new().allow("10.0.0.0/8".parse().unwrap())?;
    /// assert_eq!(list.len(), 1);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn allow(self, network: IpNet) -> Result<Self> {
        self.add(network, Access::Allowed)
    }

    /// Adds a network that is always refused.
    ///
    /// ```
    /// use redkit::middleware::AccessList;
    /// let list = AccessList::new().deny("203.0.113.0/24".parse().unwrap())?;
    /// assert_eq!(list.len(), 1);
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn deny(self, network: IpNet) -> Result<Self> {
        self.add(network, Access::Denied)
    }

    fn add(mut self, network: IpNet, access: Access) -> Result<Self> {
        if self.len >= Self::MAX_NETWORKS {
            return Err(Error::invalid(
                "access list",
                format!("at most {} networks", Self::MAX_NETWORKS),
            ));
        }
        // Matched as its IPv4 network, like the addresses.
        let network = match network {
            IpNet::V6(v6) => match (v6.addr().to_ipv4_mapped(), v6.prefix_len()) {
                (Some(v4), len) if len >= 96 => IpNet::new(IpAddr::V4(v4), len - 96)
                    .map_err(|e| Error::invalid("access list", e.to_string()))?,
                _ => network,
            },
            v4 => v4,
        }
        .trunc();
        let (v6, prefix) = (network.addr().is_ipv6(), network.prefix_len());
        let at = match self
            .levels
            .iter()
            .position(|l| (l.v6, l.prefix) == (v6, prefix))
        {
            Some(at) => at,
            None => {
                self.levels.push(Level {
                    v6,
                    prefix,
                    networks: HashMap::new(),
                });
                self.levels.sort_by_key(|l| std::cmp::Reverse(l.prefix));
                self.levels
                    .iter()
                    .position(|l| (l.v6, l.prefix) == (v6, prefix))
                    .unwrap_or_default()
            }
        };
        let networks = &mut self.levels[at].networks;
        match networks.get_mut(&network.addr()) {
            // Given twice: a deny stays a deny.
            Some(held) => {
                if access == Access::Denied {
                    *held = Access::Denied;
                }
            }
            None => {
                networks.insert(network.addr(), access);
                self.len += 1;
            }
        }
        Ok(self)
    }

    /// What the list says of `addr`: `None` when no network holds it (limited as usual).
    ///
    /// ```
    /// use redkit::middleware::{Access, AccessList};
    /// let list = AccessList::parse([] as [&str; 0], ["203.0.113.0/24"])?;
    /// assert_eq!(list.decide("203.0.113.7".parse().unwrap()), Some(Access::Denied));
    /// # Ok::<(), redkit::Error>(())
    /// ```
    pub fn decide(&self, addr: IpAddr) -> Option<Access> {
        if self.levels.is_empty() {
            return None;
        }
        let addr = canonical(addr);
        let v6 = addr.is_ipv6();
        self.levels
            .iter()
            .filter(|level| level.v6 == v6)
            .find_map(|level| {
                let network = IpNet::new(addr, level.prefix).ok()?.trunc();
                level.networks.get(&network.addr()).copied()
            })
    }

    /// How many networks the list holds.
    ///
    /// ```
    /// assert_eq!(redkit::middleware::AccessList::new().len(), 0);
    /// ```
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the list holds no network.
    ///
    /// ```
    /// assert!(redkit::middleware::AccessList::new().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// One entry of a list: a network, or one address as its host network.
fn network(list: &'static str, entry: &str) -> Result<IpNet> {
    let entry = entry.trim();
    if let Ok(addr) = entry.parse::<IpAddr>() {
        return Ok(IpNet::from(addr));
    }
    let net: IpNet = entry.parse().map_err(|_| {
        Error::invalid(
            list,
            format!("{entry:?} is neither a network (10.0.0.0/8) nor an address"),
        )
    })?;
    if net.trunc() != net {
        return Err(Error::invalid(
            list,
            format!("{entry:?} has host bits set: write {}", net.trunc()),
        ));
    }
    Ok(net)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_most_specific_network_wins_and_a_tie_denies() {
        let list = AccessList::parse(
            ["10.0.0.0/8", "10.9.9.9", "192.0.2.0/24"],
            ["10.9.0.0/16", "192.0.2.0/24"],
        )
        .unwrap();
        assert_eq!(list.decide(ip("10.0.0.1")), Some(Access::Allowed));
        assert_eq!(list.decide(ip("10.9.0.1")), Some(Access::Denied));
        assert_eq!(list.decide(ip("10.9.9.9")), Some(Access::Allowed));
        assert_eq!(list.decide(ip("10.9.9.10")), Some(Access::Denied));
        assert_eq!(
            list.decide(ip("192.0.2.5")),
            Some(Access::Denied),
            "tie: deny"
        );
        assert_eq!(list.decide(ip("11.0.0.0")), None);
        assert_eq!(list.decide(ip("9.255.255.255")), None);
    }

    #[test]
    fn ipv6_and_mapped_addresses() {
        let list = AccessList::parse(
            ["2001:db8::/32", "::ffff:198.51.100.0/120"],
            ["203.0.113.9"],
        )
        .unwrap();
        assert_eq!(list.decide(ip("2001:db8::1")), Some(Access::Allowed));
        assert_eq!(list.decide(ip("2001:db9::1")), None);
        assert_eq!(list.decide(ip("::ffff:203.0.113.9")), Some(Access::Denied));
        assert_eq!(
            list.decide(ip("198.51.100.77")),
            Some(Access::Allowed),
            "a mapped network matches IPv4"
        );
        assert_eq!(list.decide(ip("203.0.113.10")), None);
    }

    #[test]
    fn bad_entries_are_named() {
        for bad in [
            "",
            "10.0.0.0/33",
            "10.0.0.1/8",
            "host",
            "10.0.0.0/8/8",
            "::1/129",
        ] {
            let err = AccessList::parse([bad], [] as [&str; 0])
                .unwrap_err()
                .to_string();
            assert!(err.contains("allow"), "{bad}: {err}");
        }
        let too_many: Vec<String> = (0..=AccessList::MAX_NETWORKS as u32)
            .map(|i| std::net::Ipv4Addr::from(i << 8).to_string() + "/24")
            .collect();
        assert!(AccessList::parse(too_many, [] as [&str; 0]).is_err());
        assert!(AccessList::new().decide(ip("10.0.0.1")).is_none());
    }
}
