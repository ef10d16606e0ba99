//! Who is the client? [`KeyExtractor`] and the built-in extractors.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use http::header::{HeaderMap, HeaderName, FORWARDED};
use http::{Extensions, Method, Request, Uri};
use ipnet::IpNet;

use crate::error::{Error, Result};
use crate::rate_limit::LimitKey;

/// What a [`KeyExtractor`] found.
///
/// ```
/// use redkit::middleware::ClientId;
/// let by_ip = ClientId::Ip([203, 0, 113, 9].into());
/// let by_key = ClientId::Key(redkit::rate_limit::LimitKey::text("api-key-1")?);
/// # let _ = (by_ip, by_key); Ok::<(), redkit::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClientId {
    /// A client address; the layer canonicalises it (IPv4-mapped -> IPv4, IPv6 grouped by
    /// the configured prefix).
    Ip(IpAddr),
    /// A ready key (API key, user id, ...).
    Key(LimitKey),
}

/// A borrowed view of the request handed to a [`KeyExtractor`].
///
/// ```
/// use redkit::middleware::RequestInfo;
/// let req = http::Request::builder().uri("/x").body(()).unwrap();
/// let info = RequestInfo::new(&req);
/// assert_eq!(info.uri().path(), "/x");
/// assert_eq!(info.peer(), None);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct RequestInfo<'a> {
    method: &'a Method,
    uri: &'a Uri,
    headers: &'a HeaderMap,
    extensions: &'a Extensions,
}

impl<'a> RequestInfo<'a> {
    /// A view of `req`.
    ///
    /// ```
    /// let req = http::Request::new(());
    /// let info = redkit::middleware::RequestInfo::new(&req);
    /// # let _ = info;
    /// ```
    pub fn new<B>(req: &'a Request<B>) -> Self {
        Self {
            method: req.method(),
            uri: req.uri(),
            headers: req.headers(),
            extensions: req.extensions(),
        }
    }

    /// The request method.
    ///
    /// ```
    /// let req = http::Request::new(());
    /// assert_eq!(redkit::middleware::RequestInfo::new(&req).method(), http::Method::GET);
    /// ```
    pub fn method(&self) -> &'a Method {
        self.method
    }

    /// The request URI.
    ///
    /// ```
    /// let req = http::Request::new(());
    /// assert_eq!(redkit::middleware::RequestInfo::new(&req).uri().path(), "/");
    /// ```
    pub fn uri(&self) -> &'a Uri {
        self.uri
    }

    /// The request headers.
    ///
    /// ```
    /// let req = http::Request::new(());
    /// assert!(redkit::middleware::RequestInfo::new(&req).headers().is_empty());
    /// ```
    pub fn headers(&self) -> &'a HeaderMap {
        self.headers
    }

    /// The request extensions.
    ///
    /// ```
    /// let req = http::Request::new(());
    /// assert!(redkit::middleware::RequestInfo::new(&req).extensions().is_empty());
    /// ```
    pub fn extensions(&self) -> &'a Extensions {
        self.extensions
    }

    /// The socket peer: axum's `ConnectInfo<SocketAddr>` (serve with
    /// `into_make_service_with_connect_info::<SocketAddr>()`), or a plain `SocketAddr`
    /// extension (what a hand-written hyper server can insert). `None` when neither is there.
    ///
    /// ```
    /// use std::net::SocketAddr;
    /// let mut req = http::Request::new(());
    /// let addr: SocketAddr = "192.0.2.1:5000".parse().unwrap();
    /// req.extensions_mut().insert(addr);
    /// assert_eq!(redkit::middleware::RequestInfo::new(&req).peer(), Some(addr));
    /// ```
    pub fn peer(&self) -> Option<SocketAddr> {
        if let Some(axum::extract::ConnectInfo(addr)) = self
            .extensions
            .get::<axum::extract::ConnectInfo<SocketAddr>>()
        {
            return Some(*addr);
        }
        self.extensions.get::<SocketAddr>().copied()
    }
}

/// Finds the client of a request. `None` means "cannot tell"; the layer then applies its
/// [`UnknownClient`](super::UnknownClient) behaviour (never a 500).
///
/// Implemented by [`PeerIp`] (the default), [`TrustedProxies`] and [`FnKey`] (a closure).
///
/// ```
/// use redkit::middleware::{ClientId, KeyExtractor, RequestInfo};
/// use redkit::rate_limit::LimitKey;
///
/// /// Limits by API key header.
/// struct ApiKey;
/// impl KeyExtractor for ApiKey {
///     fn extract(&self, req: &RequestInfo<'_>) -> Option<ClientId> {
///         let value = req.headers().get("x-api-key")?.to_str().ok()?;
///         LimitKey::text(value).ok().map(ClientId::Key)
///     }
/// }
/// ```
pub trait KeyExtractor: Send + Sync + 'static {
    /// The client of `req`, or `None` when it cannot be determined.
    ///
    /// ```
    /// use redkit::middleware::{ClientId, KeyExtractor, PeerIp, RequestInfo};
    /// let mut req = http::Request::new(());
    /// // no peer address (a server without `ConnectInfo`): the layer's `UnknownClient` applies
    /// assert_eq!(PeerIp.extract(&RequestInfo::new(&req)), None);
    /// req.extensions_mut().insert("192.0.2.7:4000".parse::<std::net::SocketAddr>().unwrap());
    /// assert_eq!(PeerIp.extract(&RequestInfo::new(&req)), Some(ClientId::Ip([192, 0, 2, 7].into())));
    /// ```
    fn extract(&self, req: &RequestInfo<'_>) -> Option<ClientId>;
}

/// The default extractor: the socket peer address. Forwarded headers are ignored (any
/// client can write them).
///
/// ```
/// use redkit::middleware::{ClientId, KeyExtractor, PeerIp, RequestInfo};
/// let mut req = http::Request::new(());
/// req.extensions_mut().insert(axum::extract::ConnectInfo::<std::net::SocketAddr>("10.0.0.2:999".parse().unwrap()));
/// assert_eq!(PeerIp.extract(&RequestInfo::new(&req)), Some(ClientId::Ip([10, 0, 0, 2].into())));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct PeerIp;

impl KeyExtractor for PeerIp {
    fn extract(&self, req: &RequestInfo<'_>) -> Option<ClientId> {
        req.peer().map(|p| ClientId::Ip(p.ip()))
    }
}

/// A closure as a [`KeyExtractor`].
///
/// ```
/// use redkit::middleware::{ClientId, FnKey};
/// use redkit::rate_limit::LimitKey;
/// let by_tenant = FnKey::new(|req| {
///     let tenant = req.headers().get("x-tenant")?.to_str().ok()?;
///     LimitKey::text(tenant).ok().map(ClientId::Key)
/// });
/// # let _ = by_tenant;
/// ```
#[derive(Clone)]
pub struct FnKey<F>(F);

impl<F> FnKey<F>
where
    F: Fn(&RequestInfo<'_>) -> Option<ClientId> + Send + Sync + 'static,
{
    /// Wraps `f`.
    ///
    /// ```
    /// let none = redkit::middleware::FnKey::new(|_req| None);
    /// # let _ = none;
    /// ```
    pub fn new(f: F) -> Self {
        Self(f)
    }
}

impl<F> KeyExtractor for FnKey<F>
where
    F: Fn(&RequestInfo<'_>) -> Option<ClientId> + Send + Sync + 'static,
{
    fn extract(&self, req: &RequestInfo<'_>) -> Option<ClientId> {
        (self.0)(req)
    }
}

impl<F> fmt::Debug for FnKey<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FnKey(..)")
    }
}

/// Which forwarding header a [`TrustedProxies`] extractor reads (only one: reading both
/// would let a client pick whichever one its proxy does not rewrite).
///
/// ```
/// use redkit::middleware::{ForwardedHeader, TrustedProxies};
/// let x = TrustedProxies::hops(1).header(ForwardedHeader::Forwarded);
/// # let _ = x;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (the default).
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for=proxy1` (only the `for=` parameters are read).
    Forwarded,
}

#[derive(Debug, Clone)]
enum Trust {
    Cidrs(Vec<IpNet>),
    Hops(usize),
}

/// The client behind trusted reverse proxies.
///
/// Trust is explicit: either a list of proxy networks ([`cidrs`](Self::cidrs)) or the number
/// of proxies in front of the service ([`hops`](Self::hops)).
///
/// - **CIDR list:** when the socket peer is *not* in the list, the headers are ignored and the
///   peer is the client. Otherwise the forwarding header is walked **from the right**,
///   skipping trusted addresses; the first untrusted address is the client. If every address
///   is trusted, the left-most one is. If an entry cannot be parsed (`unknown`, obfuscated,
///   garbage), the walk stops and the last trusted hop before it is the client.
/// - **Hop count `n`:** the chain is `header entries + [peer]`; the client is the entry `n`
///   places left of the peer (or the left-most entry when the chain is shorter). An
///   unparsable entry at that place falls back to the nearest parsable hop on its right.
///
/// The first header entry is never taken blindly: that one is written by the client.
///
/// ```
/// use redkit::middleware::{ClientId, KeyExtractor, RequestInfo, TrustedProxies};
/// let proxies = TrustedProxies::parse_cidrs(["10.0.0.0/8"])?;
/// let mut req = http::Request::builder()
///     .header("x-forwarded-for", "6.6.6.6, 203.0.113.5, 10.1.1.1")
///     .body(())
///     .unwrap();
/// req.extensions_mut().insert(std::net::SocketAddr::from(([10, 0, 0, 1], 443)));
/// // 10.1.1.1 is a trusted proxy; 203.0.113.5 is the first untrusted hop from the right.
/// assert_eq!(proxies.extract(&RequestInfo::new(&req)), Some(ClientId::Ip([203, 0, 113, 5].into())));
/// # Ok::<(), redkit::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct TrustedProxies {
    trust: Trust,
    header: ForwardedHeader,
}

impl TrustedProxies {
    /// Trusts proxies whose address is in one of `networks`.
    ///
    /// ```
    /// let p = redkit::middleware::TrustedProxies::cidrs(["127.0.0.0/8".parse().unwrap()]);
    /// # let _ = p;
    /// ```
    pub fn cidrs(networks: impl IntoIterator<Item = IpNet>) -> Self {
        Self {
            trust: Trust::Cidrs(networks.into_iter().collect()),
            header: ForwardedHeader::default(),
        }
    }

    /// Like [`cidrs`](Self::cidrs) from text (`"10.0.0.0/8"`, `"::1/128"`; a bare address
    /// means that one host). Errors: [`Error::InvalidInput`] naming the bad entry.
    ///
    /// ```
    /// use redkit::middleware::TrustedProxies;
    /// assert!(TrustedProxies::parse_cidrs(["10.0.0.0/8", "::1"]).is_ok());
    /// assert!(TrustedProxies::parse_cidrs(["10.0.0.0/33"]).is_err());
    /// ```
    pub fn parse_cidrs<I, S>(networks: I) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut nets = Vec::new();
        for text in networks {
            let text = text.as_ref().trim();
            let net = match text.parse::<IpNet>() {
                Ok(net) => net,
                Err(_) => text.parse::<IpAddr>().map(IpNet::from).map_err(|_| {
                    Error::invalid("trusted_proxies", format!("not a CIDR: {text:?}"))
                })?,
            };
            nets.push(net);
        }
        Ok(Self::cidrs(nets))
    }

    /// Trusts exactly `n` proxies in front of the service (the socket peer is the nearest).
    /// `hops(0)` is the socket peer itself.
    ///
    /// ```
    /// let behind_one_load_balancer = redkit::middleware::TrustedProxies::hops(1);
    /// # let _ = behind_one_load_balancer;
    /// ```
    pub fn hops(n: usize) -> Self {
        Self {
            trust: Trust::Hops(n),
            header: ForwardedHeader::default(),
        }
    }

    /// Reads `header` instead of `X-Forwarded-For`.
    ///
    /// ```
    /// use redkit::middleware::{ForwardedHeader, TrustedProxies};
    /// let p = TrustedProxies::hops(1).header(ForwardedHeader::Forwarded);
    /// # let _ = p;
    /// ```
    pub fn header(mut self, header: ForwardedHeader) -> Self {
        self.header = header;
        self
    }

    fn trusted(&self, nets: &[IpNet], ip: IpAddr) -> bool {
        let ip = crate::rate_limit::canonical(ip);
        nets.iter().any(|n| n.contains(&ip))
    }

    /// Header entries left to right; `None` for an entry that is not an address.
    fn chain(&self, headers: &HeaderMap) -> Vec<Option<IpAddr>> {
        let mut out = Vec::new();
        match self.header {
            ForwardedHeader::XForwardedFor => {
                for value in headers.get_all(X_FORWARDED_FOR) {
                    match value.to_str() {
                        Ok(v) => out.extend(v.split(',').map(parse_node)),
                        Err(_) => out.push(None),
                    }
                }
            }
            ForwardedHeader::Forwarded => {
                for value in headers.get_all(FORWARDED) {
                    match value.to_str() {
                        Ok(v) => out.extend(v.split(',').map(forwarded_for)),
                        Err(_) => out.push(None),
                    }
                }
            }
        }
        out
    }
}

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

impl KeyExtractor for TrustedProxies {
    fn extract(&self, req: &RequestInfo<'_>) -> Option<ClientId> {
        let peer = req.peer()?.ip();
        let client = match &self.trust {
            Trust::Cidrs(nets) => {
                if !self.trusted(nets, peer) {
                    return Some(ClientId::Ip(peer));
                }
                let mut last = peer;
                for hop in self.chain(req.headers()).into_iter().rev() {
                    match hop {
                        None => break,
                        Some(ip) if self.trusted(nets, ip) => last = ip,
                        Some(ip) => return Some(ClientId::Ip(ip)),
                    }
                }
                last
            }
            Trust::Hops(n) => {
                let mut chain = self.chain(req.headers());
                chain.push(Some(peer));
                let target = chain.len().saturating_sub(n.saturating_add(1));
                let mut last = peer;
                // From the peer leftwards to the target; stop at the first unparsable entry.
                for hop in chain[target..].iter().rev() {
                    match hop {
                        Some(ip) => last = *ip,
                        None => break,
                    }
                }
                last
            }
        };
        Some(ClientId::Ip(client))
    }
}

/// One `X-Forwarded-For` entry: `1.2.3.4`, `1.2.3.4:80`, `2001:db8::1`, `[2001:db8::1]:80`.
fn parse_node(text: &str) -> Option<IpAddr> {
    let text = text.trim().trim_matches('"');
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(sock) = text.parse::<SocketAddr>() {
        return Some(sock.ip());
    }
    let inner = text.strip_prefix('[')?.strip_suffix(']')?;
    inner.parse::<IpAddr>().ok()
}

/// The `for=` node of one `Forwarded` element (`for=192.0.2.1;proto=https`).
fn forwarded_for(element: &str) -> Option<IpAddr> {
    element.split(';').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        if name.trim().eq_ignore_ascii_case("for") {
            parse_node(value)
        } else {
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(peer: &str, header: &str, values: &[&str]) -> Request<()> {
        let mut b = Request::builder();
        for v in values {
            b = b.header(header, *v);
        }
        let mut r = b.body(()).unwrap();
        r.extensions_mut()
            .insert(peer.parse::<SocketAddr>().unwrap());
        r
    }

    fn ip(s: &str) -> Option<ClientId> {
        Some(ClientId::Ip(s.parse().unwrap()))
    }

    fn run(x: &TrustedProxies, r: &Request<()>) -> Option<ClientId> {
        x.extract(&RequestInfo::new(r))
    }

    #[test]
    fn untrusted_peer_headers_are_ignored() {
        let x = TrustedProxies::parse_cidrs(["10.0.0.0/8"]).unwrap();
        let r = req("192.0.2.1:1", "x-forwarded-for", &["1.1.1.1"]);
        assert_eq!(run(&x, &r), ip("192.0.2.1"));
    }

    #[test]
    fn right_most_untrusted_hop_wins() {
        let x = TrustedProxies::parse_cidrs(["10.0.0.0/8", "::1"]).unwrap();
        let r = req(
            "10.0.0.1:1",
            "x-forwarded-for",
            &["6.6.6.6, 7.7.7.7", "198.51.100.2, 10.9.9.9"],
        );
        assert_eq!(run(&x, &r), ip("198.51.100.2"));
        // All trusted: left-most.
        let r = req("10.0.0.1:1", "x-forwarded-for", &["10.2.2.2, 10.3.3.3"]);
        assert_eq!(run(&x, &r), ip("10.2.2.2"));
        // Garbage stops the walk at the last trusted hop.
        let r = req(
            "10.0.0.1:1",
            "x-forwarded-for",
            &["1.1.1.1, unknown, 10.3.3.3"],
        );
        assert_eq!(run(&x, &r), ip("10.3.3.3"));
        // No header: the peer.
        let r = req("10.0.0.1:1", "x-other", &["1.1.1.1"]);
        assert_eq!(run(&x, &r), ip("10.0.0.1"));
        // IPv4-mapped peer is matched against IPv4 networks.
        let r = req(
            "[::ffff:10.0.0.1]:1",
            "x-forwarded-for",
            &["[2001:db8::5]:80"],
        );
        assert_eq!(run(&x, &r), ip("2001:db8::5"));
    }

    #[test]
    fn hop_count() {
        let x = TrustedProxies::hops(2);
        let r = req(
            "10.0.0.1:1",
            "x-forwarded-for",
            &["6.6.6.6, 1.2.3.4, 10.0.0.7"],
        );
        assert_eq!(run(&x, &r), ip("1.2.3.4"));
        let r = req("10.0.0.1:1", "x-forwarded-for", &["10.0.0.7"]);
        assert_eq!(run(&x, &r), ip("10.0.0.7"));
        assert_eq!(run(&TrustedProxies::hops(0), &r), ip("10.0.0.1"));
        let r = req(
            "10.0.0.1:1",
            "x-forwarded-for",
            &["1.2.3.4, junk, 10.0.0.7"],
        );
        assert_eq!(run(&x, &r), ip("10.0.0.7"));
    }

    #[test]
    fn forwarded_header() {
        let x = TrustedProxies::hops(1).header(ForwardedHeader::Forwarded);
        let r = req(
            "10.0.0.1:1",
            "forwarded",
            &["for=6.6.6.6, for=\"[2001:db8::7]:4711\";proto=https"],
        );
        assert_eq!(run(&x, &r), ip("2001:db8::7"));
        // X-Forwarded-For is not read in this mode.
        let r = req("10.0.0.1:1", "x-forwarded-for", &["6.6.6.6"]);
        assert_eq!(run(&x, &r), ip("10.0.0.1"));
    }

    #[test]
    fn no_peer_is_none() {
        let r = Request::new(());
        assert_eq!(PeerIp.extract(&RequestInfo::new(&r)), None);
        assert_eq!(run(&TrustedProxies::hops(1), &r), None);
    }

    #[test]
    fn request_info_is_a_view_of_the_request() {
        let mut r = Request::builder()
            .method(Method::POST)
            .uri("/v1/items?x=1")
            .header("x-api-key", "k1")
            .body(())
            .unwrap();
        r.extensions_mut().insert(7u8);
        let info = RequestInfo::new(&r);
        assert_eq!(info.method(), Method::POST);
        assert_eq!(info.uri().path(), "/v1/items");
        assert_eq!(info.headers()["x-api-key"], "k1");
        assert_eq!(info.extensions().get::<u8>(), Some(&7));
    }

    #[test]
    fn the_peer_is_connect_info_first_then_a_socket_addr() {
        let connect: SocketAddr = "192.0.2.9:80".parse().unwrap();
        let plain: SocketAddr = "198.51.100.3:81".parse().unwrap();
        let mut r = Request::new(());
        r.extensions_mut().insert(plain);
        assert_eq!(RequestInfo::new(&r).peer(), Some(plain));
        r.extensions_mut()
            .insert(axum::extract::ConnectInfo(connect));
        assert_eq!(RequestInfo::new(&r).peer(), Some(connect));
        assert_eq!(PeerIp.extract(&RequestInfo::new(&r)), ip("192.0.2.9"));
    }

    #[test]
    fn fn_key_is_its_closure() {
        let by_header = FnKey::new(|req: &RequestInfo<'_>| {
            let v = req.headers().get("x-api-key")?.to_str().ok()?;
            LimitKey::text(v).ok().map(ClientId::Key)
        });
        let r = Request::builder()
            .header("x-api-key", "k1")
            .body(())
            .unwrap();
        assert_eq!(
            by_header.extract(&RequestInfo::new(&r)),
            Some(ClientId::Key(LimitKey::text("k1").unwrap()))
        );
        assert_eq!(
            by_header.extract(&RequestInfo::new(&Request::new(()))),
            None
        );
        assert_eq!(format!("{by_header:?}"), "FnKey(..)");
    }
}
