//! The paying side's guard: what a client asked for, and the checks that keep a payer from
//! signing for anything else.
//!
//! Everything in a 402 is the word of whoever answered: the resource an x402 challenge names,
//! an MPP challenge's realm, a Sign-In-With-X offer's domain and URI, the network and asset it
//! wants paid. A credential is spendable (and a sign-in usable) wherever it is presented, so a
//! payer signs only for the request it sent ([`RequestTarget`]): an x402 resource of the same
//! origin (scheme, host, port) and the same path, an MPP realm naming the requested host, a SIWX
//! domain that is the requested host and a URI of the requested origin, and only the networks
//! of [`crate::network::NETWORKS`] with their USDC contracts. Anything else is a [`Refusal`],
//! before anything is signed. How long a signed authorization stays valid is bounded too
//! ([`Limits::max_validity_seconds`]).

use reqwest::Url;

use crate::network::Network;
use crate::siwx::SiwxInfo;

/// How long a signed authorization stays valid, at most, unless told otherwise (x402's usual
/// `maxTimeoutSeconds`, and MPP's default challenge lifetime).
pub const DEFAULT_MAX_VALIDITY_SECONDS: u64 = 300;

/// Longest piece of a server's text quoted in a [`Refusal`] (the rest is cut off).
const MAX_QUOTED_CHARS: usize = 120;

/// The URL a client sent its request to: what its payer may sign for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestTarget {
    url: Url,
}

impl RequestTarget {
    pub fn new(url: Url) -> Self {
        RequestTarget { url }
    }

    /// An absolute URL.
    pub fn parse(url: &str) -> Result<Self, Refusal> {
        Url::parse(url)
            .map(RequestTarget::new)
            .map_err(|_| Refusal::Target)
    }

    pub fn url(&self) -> &Url {
        &self.url
    }

    /// `scheme://host[:port]`, the port only when it is not the scheme's default.
    pub fn origin(&self) -> String {
        self.url.origin().ascii_serialization()
    }

    /// The host, as the URL has it (lowercase; IPv6 in brackets).
    fn host(&self) -> Result<&str, Refusal> {
        match self.url.scheme() {
            "http" | "https" => self.url.host_str().ok_or(Refusal::Target),
            _ => Err(Refusal::Target),
        }
    }

    /// `name` is the requested host, with or without its port (the scheme's default port when
    /// the URL names none), compared without regard to case.
    fn names_host(&self, name: &str) -> Result<bool, Refusal> {
        let host = self.host()?;
        let with_port = self
            .url
            .port_or_known_default()
            .map(|port| format!("{host}:{port}"));
        Ok(name.eq_ignore_ascii_case(host)
            || with_port.is_some_and(|with_port| name.eq_ignore_ascii_case(&with_port)))
    }

    /// The requested host as messages show it: `host[:port]`.
    fn authority(&self) -> String {
        let host = self.url.host_str().unwrap_or_default();
        match self.url.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        }
    }

    /// An x402 challenge's resource (v2 `resource.url`, v1 `accepts[].resource`): an absolute
    /// URL of the requested origin, with the requested path (the query is not compared).
    pub fn check_resource(&self, resource: &str) -> Result<(), Refusal> {
        self.host()?;
        let origin_refusal = || Refusal::ResourceOrigin {
            resource: quoted(resource),
            requested: self.origin(),
        };
        let theirs = Url::parse(resource).map_err(|_| origin_refusal())?;
        if theirs.origin() != self.url.origin() {
            return Err(origin_refusal());
        }
        if theirs.path() != self.url.path() {
            return Err(Refusal::ResourcePath {
                resource: quoted(theirs.path()),
                requested: self.url.path().to_owned(),
            });
        }
        Ok(())
    }

    /// An MPP challenge's `realm`: the requested host, with or without the port.
    pub fn check_realm(&self, realm: &str) -> Result<(), Refusal> {
        if self.names_host(realm)? {
            return Ok(());
        }
        Err(Refusal::Realm {
            realm: quoted(realm),
            host: self.authority(),
        })
    }

    /// A Sign-In-With-X offer's `domain` (the requested host, with or without the port) and
    /// `uri` (of the requested origin).
    pub fn check_siwx(&self, info: &SiwxInfo) -> Result<(), Refusal> {
        if !self.names_host(&info.domain)? {
            return Err(Refusal::SiwxDomain {
                domain: quoted(&info.domain),
                host: self.authority(),
            });
        }
        let same_origin = Url::parse(&info.uri).is_ok_and(|uri| uri.origin() == self.url.origin());
        if !same_origin {
            return Err(Refusal::SiwxUri {
                uri: quoted(&info.uri),
                origin: self.origin(),
            });
        }
        Ok(())
    }
}

impl From<Url> for RequestTarget {
    fn from(url: Url) -> Self {
        RequestTarget::new(url)
    }
}

/// What a payer may sign: at most how much, valid for at most how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The spend cap per call, atomic units (`None`: none). For x402 `upto` it bounds the
    /// maximum signed, so whatever the server later settles stays under it.
    pub cap: Option<alloy_primitives::U256>,
    /// `validBefore - now` (upto: `deadline - now`) of a signed authorization never exceeds
    /// this, whatever the challenge's `maxTimeoutSeconds` or `expires` says.
    pub max_validity_seconds: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            cap: None,
            max_validity_seconds: DEFAULT_MAX_VALIDITY_SECONDS,
        }
    }
}

/// Why a payer would not sign: the 402 asks for something other than what was requested, or
/// on a network or in an asset this client does not know. The server's text is quoted (cut at
/// 120 characters, escaped), never a credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the requested URL is not an absolute http(s) URL with a host")]
    Target,
    #[error("the 402 is not tied to the URL it answered, so nothing was signed")]
    NoTarget,
    #[error("the challenge's resource {resource} is not of the requested origin {requested}")]
    ResourceOrigin { resource: String, requested: String },
    #[error("the challenge's resource path {resource} is not the requested path {requested:?}")]
    ResourcePath { resource: String, requested: String },
    #[error("the MPP challenge's realm {realm} is not the requested host {host}")]
    Realm { realm: String, host: String },
    #[error("the sign-in offer's domain {domain} is not the requested host {host}")]
    SiwxDomain { domain: String, host: String },
    #[error("the sign-in offer's URI {uri} is not of the requested origin {origin}")]
    SiwxUri { uri: String, origin: String },
    #[error("network {network} is not one this client pays on ({known})", known = Network::known())]
    UnknownNetwork { network: String },
    #[error("asset {asset} is not the USDC contract of {network}")]
    UnknownAsset {
        network: &'static str,
        asset: String,
    },
}

impl Refusal {
    pub(crate) fn unknown_network(network: &str) -> Self {
        Refusal::UnknownNetwork {
            network: quoted(network),
        }
    }

    pub(crate) fn unknown_asset(network: &'static Network, asset: &str) -> Self {
        Refusal::UnknownAsset {
            network: network.name,
            asset: quoted(asset),
        }
    }
}

/// `text` for an error message: at most [`MAX_QUOTED_CHARS`] characters, in quotes, escaped.
fn quoted(text: &str) -> String {
    let mut cut: String = text.chars().take(MAX_QUOTED_CHARS).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    format!("{cut:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn target(url: &str) -> Result<RequestTarget, Refusal> {
        RequestTarget::parse(url)
    }

    #[test]
    fn a_resource_must_have_the_requested_origin_and_path() -> TestResult {
        let at = target("http://127.0.0.1:8080/agents/a/entrypoints/echo/invoke")?;
        for same in [
            "http://127.0.0.1:8080/agents/a/entrypoints/echo/invoke",
            "HTTP://127.0.0.1:8080/agents/a/entrypoints/echo/invoke?x=1",
        ] {
            assert_eq!(at.check_resource(same), Ok(()), "{same}");
        }
        for other_origin in [
            "http://evil.example:8080/agents/a/entrypoints/echo/invoke",
            "https://127.0.0.1:8080/agents/a/entrypoints/echo/invoke",
            "http://127.0.0.1:8081/agents/a/entrypoints/echo/invoke",
            "http://127.0.0.1/agents/a/entrypoints/echo/invoke",
            "/agents/a/entrypoints/echo/invoke",
            "",
            "not a url",
        ] {
            assert!(
                matches!(
                    at.check_resource(other_origin),
                    Err(Refusal::ResourceOrigin { .. })
                ),
                "{other_origin}"
            );
        }
        for other_path in [
            "http://127.0.0.1:8080/entrypoints/echo/invoke",
            "http://127.0.0.1:8080/agents/a/entrypoints/other/invoke",
            "http://127.0.0.1:8080/agents/a/entrypoints/echo/invoke/",
        ] {
            assert!(
                matches!(
                    at.check_resource(other_path),
                    Err(Refusal::ResourcePath { .. })
                ),
                "{other_path}"
            );
        }
        // Default ports are the same origin whether written or not.
        let https = target("https://api.example.com/x")?;
        assert_eq!(
            https.check_resource("https://API.example.com:443/x"),
            Ok(())
        );
        Ok(())
    }

    #[test]
    fn a_realm_must_name_the_requested_host() -> TestResult {
        let at = target("http://127.0.0.1:8080/entrypoints/echo/invoke")?;
        assert_eq!(at.check_realm("127.0.0.1:8080"), Ok(()));
        assert_eq!(at.check_realm("127.0.0.1"), Ok(()));
        for foreign in ["evil.example", "127.0.0.1:8081", "127.0.0.1.evil", ""] {
            assert!(
                matches!(at.check_realm(foreign), Err(Refusal::Realm { .. })),
                "{foreign}"
            );
        }
        let named = target("https://API.example.com/x")?;
        assert_eq!(named.check_realm("api.example.com"), Ok(()));
        assert_eq!(named.check_realm("api.example.com:443"), Ok(()));
        let v6 = target("http://[::1]:9000/x")?;
        assert_eq!(v6.check_realm("[::1]:9000"), Ok(()));
        assert_eq!(target("file:///x")?.check_realm(""), Err(Refusal::Target));
        Ok(())
    }

    #[test]
    fn a_sign_in_offer_must_be_for_the_requested_host_and_origin() -> TestResult {
        let at = target("http://127.0.0.1:8080/entrypoints/echo/invoke")?;
        let info = |domain: &str, uri: &str| SiwxInfo {
            domain: domain.into(),
            uri: uri.into(),
            statement: None,
            version: "1".into(),
            nonce: "0123456789abcdef".into(),
            issued_at: "2027-01-15T08:00:00.000Z".into(),
            expiration_time: None,
            not_before: None,
            request_id: None,
            resources: None,
        };
        assert_eq!(
            at.check_siwx(&info("127.0.0.1:8080", "http://127.0.0.1:8080")),
            Ok(())
        );
        assert_eq!(
            at.check_siwx(&info("127.0.0.1", "http://127.0.0.1:8080/other")),
            Ok(())
        );
        assert!(matches!(
            at.check_siwx(&info("evil.example", "http://127.0.0.1:8080")),
            Err(Refusal::SiwxDomain { .. })
        ));
        for uri in [
            "http://evil.example",
            "https://127.0.0.1:8080",
            "http://127.0.0.1:8081",
            "127.0.0.1:8080",
        ] {
            assert!(
                matches!(
                    at.check_siwx(&info("127.0.0.1:8080", uri)),
                    Err(Refusal::SiwxUri { .. })
                ),
                "{uri}"
            );
        }
        Ok(())
    }

    #[test]
    fn refusals_quote_the_server_briefly() -> TestResult {
        let at = target("http://127.0.0.1:8080/x")?;
        let long = format!("http://evil.example/{}\r\nX-Injected: 1", "a".repeat(500));
        let message = at.check_resource(&long).err().ok_or("refused")?.to_string();
        assert!(message.len() < 300, "{message}");
        assert!(
            !message.contains('\n') && !message.contains('\r'),
            "{message}"
        );
        assert!(message.contains("http://127.0.0.1:8080"), "{message}");
        Ok(())
    }
}
