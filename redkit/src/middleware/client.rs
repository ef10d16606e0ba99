//! Who a request is from, for both layers: the client id found by the layer's
//! [`KeyExtractor`](super::KeyExtractor) as the key it is limited under, or the
//! [`UnknownClient`] rule when there is none.

use http::{Response, StatusCode};

use super::common::{bump, refusal, Common, CommonCounters, UnknownClient};
use super::key::ClientId;
use super::respond::{Rejection, Respond};
use crate::rate_limit::LimitKey;

/// Who a request is from, settled before any Redis call.
pub(crate) enum Client<B> {
    /// To be limited under this key.
    Key(LimitKey),
    /// Let through unlimited (an unknown client under [`UnknownClient::Allow`]; for the
    /// rate-limit layer also an allowlisted one).
    Pass,
    /// Refused unchecked (an unknown client under [`UnknownClient::Reject`]; for the
    /// rate-limit layer also a denied one).
    Refused(Response<B>),
}

impl<C, K, H> Common<C, K, H> {
    /// The client of a request whose id the extractor found (`Some`) or not: an IP grouped
    /// by the layer's IPv6 prefix, a key as it came. An unknown client is counted in
    /// `counters`, reported to `unknown` (the layer's metric and log) and answered by the
    /// unknown-client rule: one shared key, let through, or a 400 shaped by the layer's
    /// [`Respond`].
    pub(crate) fn client<B: Default>(
        &self,
        id: Option<ClientId>,
        counters: &CommonCounters,
        unknown: impl FnOnce(),
    ) -> Client<B>
    where
        H: Respond<B>,
    {
        match id {
            Some(ClientId::Ip(ip)) => Client::Key(LimitKey::ip_grouped(ip, self.ipv6_prefix)),
            Some(ClientId::Key(key)) => Client::Key(key),
            None => {
                bump(&counters.unknown_clients);
                unknown();
                match self.unknown {
                    UnknownClient::Allow => Client::Pass,
                    UnknownClient::Reject => {
                        let response = refusal(StatusCode::BAD_REQUEST, None);
                        Client::Refused(self.respond.respond(&Rejection::UnknownClient, response))
                    }
                    _ => Client::Key(LimitKey::unknown_client()),
                }
            }
        }
    }
}
