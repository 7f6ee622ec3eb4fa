//! The client address of a request, as one key that both the per-address rate limit
//! (`crate::ratelimit`) and the per-address bound on live tasks (`MAX_LIVE_PER_ADDRESS`,
//! carried to the store as `NewTask::source`) count under.
//!
//! The address is the TCP peer, or `X-Forwarded-For`'s first hop behind a trusted proxy
//! (`TRUST_FORWARDED_FOR`). An IPv6 address counts by its /64 prefix: one host is usually handed
//! a whole /64 and can pick any address in it, so a per-address key would not hold it.
//! [`tag`] computes the key once per request and leaves it as a [`ClientSource`] extension,
//! read where tasks are admitted.

use std::convert::Infallible;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use axum::extract::{ConnectInfo, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::Response;

/// The request's client address key, when the request has one (a request served without a
/// socket, as in router tests, has none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientSource(pub String);

/// The key an address counts under: an IPv4 address itself (an IPv4-mapped IPv6 address
/// counts as the IPv4 address it carries), an IPv6 address by its /64 prefix, e.g.
/// `2001:db8:1:2::/64`.
pub fn address_key(address: IpAddr) -> String {
    match address {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => {
                let prefix = u128::from(v6) & !(u128::from(u64::MAX));
                format!("{}/64", Ipv6Addr::from(prefix))
            }
        },
    }
}

/// The client address: the TCP peer, or `X-Forwarded-For`'s first hop behind a trusted proxy.
fn client_address(request: &Request, trust_forwarded_for: bool) -> Option<IpAddr> {
    if trust_forwarded_for {
        let forwarded = request
            .headers()
            .get("x-forwarded-for")
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.split(',').next())
            .and_then(|hop| hop.trim().parse::<IpAddr>().ok());
        if forwarded.is_some() {
            return forwarded;
        }
    }
    request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(peer)| peer.ip())
}

/// The request's client address key ([`address_key`] of its client address).
pub fn source_of(request: &Request, trust_forwarded_for: bool) -> Option<String> {
    client_address(request, trust_forwarded_for).map(address_key)
}

/// The middleware: leaves the request's [`ClientSource`] for the handlers that admit tasks.
/// `State` is `TRUST_FORWARDED_FOR`.
pub async fn tag(
    State(trust_forwarded_for): State<bool>,
    mut request: Request,
    next: Next,
) -> Response {
    if let Some(source) = source_of(&request, trust_forwarded_for) {
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
    use super::*;

    fn key(text: &str) -> Option<String> {
        text.parse::<IpAddr>().ok().map(address_key)
    }

    #[test]
    fn ipv4_counts_by_address_and_ipv6_by_its_64_prefix() {
        assert_eq!(key("203.0.113.7").as_deref(), Some("203.0.113.7"));
        assert_eq!(key("::ffff:203.0.113.7").as_deref(), Some("203.0.113.7"));
        assert_eq!(
            key("2001:db8:1:2:aaaa:bbbb:cccc:dddd").as_deref(),
            Some("2001:db8:1:2::/64")
        );
        // Two addresses of one /64 share a key; the next /64 does not.
        assert_eq!(key("2001:db8:1:2::1"), key("2001:db8:1:2:ffff::9"));
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
        assert_eq!(key("::1").as_deref(), Some("::/64"));
    }
}
