//! The client address of a request, as one key that the per-address rate limit
//! (`crate::core::ratelimit`), the per-address bound on live tasks (`MAX_LIVE_PER_ADDRESS`, carried
//! to the store as `NewTask::source`) and push delivery fairness count under, on every
//! listener (HTTP and gRPC).
//!
//! The address is the TCP peer, unless the peer is a trusted proxy (`--trusted-proxies`): then
//! it is the right-most hop of the chain the proxies recorded (`X-Forwarded-For`, or RFC 7239
//! `Forwarded` with `--client-address-header forwarded`, see [`crate::http::forwarded`]) that
//! is not itself a trusted proxy. Right-most, because proxies append: everything left of the
//! hop the nearest trusted proxy wrote came from the client, which can write any address there
//! (`X-Forwarded-For: 203.0.113.9` from a client becomes `203.0.113.9, <client>` behind nginx's
//! `$proxy_add_x_forwarded_for`, an Envoy or a cloud load balancer). A hop that names no
//! address (`unknown`, an obfuscated identifier) stops the walk: the client is then counted
//! as the trusted proxy nearest to it, never as a fresh address.
//!
//! An IPv6 address counts by its /64 prefix ([`address_key`], shared with the connection cap
//! of the server loop). [`tag`] computes the key once per request and leaves it as a
//! [`ClientSource`] extension, read where tasks are admitted.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, FromRequestParts, Request, State};
use axum::http::HeaderMap;
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::Response;
use server::address::TrustedProxies;
pub use server::address::address_key;

use crate::http::forwarded::{self, ClientAddressHeader, Hop};

/// The request's client address key, when the request has one (a request served without a
/// socket, as in router tests, has none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientSource(pub String);

/// Whose word on the client address is taken: the trusted proxies and the header they write.
#[derive(Debug, Clone, Default)]
pub struct Forwarding {
    pub proxies: TrustedProxies,
    pub header: ClientAddressHeader,
}

impl Forwarding {
    /// The client address of a request from `peer` carrying `headers`.
    pub fn client(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        if !self.proxies.contains(peer) {
            return peer;
        }
        let mut nearest = peer;
        for hop in forwarded::hops(headers, self.header).into_iter().rev() {
            match hop {
                Hop::Address(address) if self.proxies.contains(address) => nearest = address,
                Hop::Address(address) => return address,
                Hop::Unknown => return nearest,
            }
        }
        nearest
    }
}

/// The client address ([`Forwarding::client`]) of a request served over a socket.
fn client_address(request: &Request, forwarding: &Forwarding) -> Option<IpAddr> {
    request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(peer)| forwarding.client(peer.ip(), request.headers()))
}

/// The request's client address key ([`address_key`] of its client address).
pub fn source_of(request: &Request, forwarding: &Forwarding) -> Option<String> {
    client_address(request, forwarding).map(address_key)
}

/// The middleware: leaves the request's [`ClientSource`] for the rate limits and the handlers
/// that admit tasks.
pub async fn tag(
    State(forwarding): State<Arc<Forwarding>>,
    mut request: Request,
    next: Next,
) -> Response {
    if let Some(source) = source_of(&request, &forwarding) {
        request.extensions_mut().insert(ClientSource(source));
    }
    next.run(request).await
}

/// The [`ClientSource`] [`tag`] left on a request, if any; an extractor that never rejects.
#[derive(Debug, Clone, Default)]
pub struct Source(pub Option<String>);

impl Source {
    /// The source left in `extensions` (for handlers that keep the whole request).
    pub fn of(extensions: &axum::http::Extensions) -> Self {
        Source(
            extensions
                .get::<ClientSource>()
                .map(|ClientSource(source)| source.clone()),
        )
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Source {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Source::of(&parts.extensions))
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse()
            .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED))
    }

    fn forwarding(proxies: &str, header: ClientAddressHeader) -> Forwarding {
        Forwarding {
            proxies: TrustedProxies::parse(proxies).unwrap_or_default(),
            header,
        }
    }

    fn with(name: &'static str, value: &'static str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(name, HeaderValue::from_static(value));
        headers
    }

    #[test]
    fn the_right_most_untrusted_hop_is_the_client() {
        let xff = forwarding("10.0.0.0/8, 127.0.0.1", ClientAddressHeader::XForwardedFor);
        let proxy = ip("10.0.0.5");
        // The client wrote the left-most hop; the trusted proxy appended the real one.
        let chain = with("x-forwarded-for", "203.0.113.9, 198.51.100.7");
        assert_eq!(xff.client(proxy, &chain), ip("198.51.100.7"));
        // Trusted hops on the right (a second proxy) are skipped.
        let chain = with(
            "x-forwarded-for",
            "203.0.113.9, 198.51.100.7, 10.1.1.1, 127.0.0.1",
        );
        assert_eq!(xff.client(proxy, &chain), ip("198.51.100.7"));
        // A hop naming no address stops the walk at the proxy nearest to it.
        let chain = with("x-forwarded-for", "203.0.113.9, unknown, 10.1.1.1");
        assert_eq!(xff.client(proxy, &chain), ip("10.1.1.1"));
        // Every hop trusted: the farthest one.
        let chain = with("x-forwarded-for", "10.2.2.2, 10.1.1.1");
        assert_eq!(xff.client(proxy, &chain), ip("10.2.2.2"));
        // No header: the proxy itself.
        assert_eq!(xff.client(proxy, &HeaderMap::new()), proxy);
    }

    #[test]
    fn only_a_trusted_peer_may_name_the_client() {
        let chain = with("x-forwarded-for", "203.0.113.9");
        let xff = forwarding("10.0.0.0/8", ClientAddressHeader::XForwardedFor);
        assert_eq!(xff.client(ip("198.51.100.7"), &chain), ip("198.51.100.7"));
        let none = Forwarding::default();
        assert_eq!(none.client(ip("10.0.0.5"), &chain), ip("10.0.0.5"));
    }

    #[test]
    fn forwarded_is_read_when_chosen_and_only_then() {
        let headers = {
            let mut headers = with("x-forwarded-for", "203.0.113.1");
            headers.insert(
                "forwarded",
                HeaderValue::from_static(
                    "for=203.0.113.9, for=\"[2001:db8:cafe::17]:4711\";proto=https",
                ),
            );
            headers
        };
        let proxy = ip("10.0.0.5");
        let rfc = forwarding("10.0.0.0/8", ClientAddressHeader::Forwarded);
        assert_eq!(rfc.client(proxy, &headers), ip("2001:db8:cafe::17"));
        assert_eq!(
            address_key(rfc.client(proxy, &headers)),
            "2001:db8:cafe::/64"
        );
        let xff = forwarding("10.0.0.0/8", ClientAddressHeader::XForwardedFor);
        assert_eq!(xff.client(proxy, &headers), ip("203.0.113.1"));
        // An obfuscated identifier: the proxy that wrote it.
        let hidden = with("forwarded", "for=203.0.113.9, for=_hidden");
        assert_eq!(rfc.client(proxy, &hidden), proxy);
    }
}
