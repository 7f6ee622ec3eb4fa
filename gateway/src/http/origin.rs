//! The origin a client reached us at, for the URLs the card, the OpenAPI document and the
//! landing page hand back. Behind a proxy that is `X-Forwarded-Proto` / `X-Forwarded-Host`.
//!
//! These headers come from the client unless a proxy overwrites them, and whatever they say is
//! written into a document other programs follow. So the scheme is only ever `http` or
//! `https`, and a host is only taken if it looks like one (letters, digits, `.`, `-`, `:`,
//! brackets for IPv6): nothing that could smuggle a path, a query, credentials, markup or a
//! second URL into the card. A value that fails is ignored, never repaired.
//!
//! What a payer signs or pays for is bound to the core's security origin instead
//! (`core::origin`: the configured public URL, the request's origin only when the operator
//! trusts its forwarded headers, else the listen address). A client cannot pick it.

use axum::http::{HeaderMap, Uri, header};

const FORWARDED_PROTO: &str = "x-forwarded-proto";
const FORWARDED_HOST: &str = "x-forwarded-host";

/// Longest host accepted: a DNS name (253) plus a port.
const MAX_HOST_LEN: usize = 260;

/// `scheme://host` of the request. Scheme: `X-Forwarded-Proto` when exactly `http` or
/// `https`, else `http`. Host: the first valid of `X-Forwarded-Host`, `Host`, the request
/// URI's authority (HTTP/2), else `listen` (the configured listen address).
pub fn request_origin(headers: &HeaderMap, uri: &Uri, listen: &str) -> String {
    let scheme = match header_str(headers, FORWARDED_PROTO).map(str::trim) {
        Some("https") => "https",
        _ => "http",
    };
    let host = [
        header_str(headers, FORWARDED_HOST),
        header_str(headers, header::HOST.as_str()),
        uri.authority().map(|authority| authority.as_str()),
    ]
    .into_iter()
    .flatten()
    .map(str::trim)
    .find(|host| is_valid_host(host))
    .unwrap_or(listen);
    format!("{scheme}://{host}")
}

/// `--public-url`: an absolute `http(s)` origin, validated when the gateway starts and kept
/// as `scheme://host[:port]` (scheme and host lowercased, no trailing slash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicUrl(String);

impl PublicUrl {
    /// Reads `https://host[:port][/]`: no path other than `/`, no query, fragment or
    /// userinfo, a host as [`request_origin`] accepts one, a numeric port (dropped when it is
    /// the scheme's default).
    pub fn parse(text: &str) -> Result<PublicUrl, String> {
        let text = text.trim();
        let (scheme, rest) = text
            .split_once("://")
            .ok_or("must be an absolute http or https URL, like https://agent.example.com")?;
        let scheme = scheme.to_ascii_lowercase();
        if scheme != "http" && scheme != "https" {
            return Err("must be an http or https URL".into());
        }
        if rest.contains(['?', '#']) {
            return Err("must have no query or fragment".into());
        }
        if rest.contains('@') {
            return Err("must have no user information".into());
        }
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        if !path.is_empty() && path != "/" {
            return Err("must be an origin, with no path (use --base-path for a prefix)".into());
        }
        if !is_valid_host(authority) {
            return Err("must name a host (letters, digits, '.', '-', an optional :port)".into());
        }
        let port = match authority.rsplit_once(':') {
            Some((_, port)) if !authority.ends_with(']') => Some(port),
            _ => None,
        };
        if port.is_some_and(|port| port.is_empty() || port.parse::<u16>().is_err()) {
            return Err("has a port that is not a number from 0 to 65535".into());
        }
        let authority = authority.to_ascii_lowercase();
        // The scheme's own port is left out, as browsers and URL parsers serialize origins.
        let default_port = if scheme == "https" { ":443" } else { ":80" };
        let authority = authority.strip_suffix(default_port).unwrap_or(&authority);
        Ok(PublicUrl(format!("{scheme}://{authority}")))
    }

    /// `scheme://host[:port]`.
    pub fn origin(&self) -> &str {
        &self.0
    }
}

/// The `host[:port]` of an origin [`request_origin`] built.
pub fn host_of(origin: &str) -> &str {
    origin.split_once("://").map_or(origin, |(_, host)| host)
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|value| value.to_str().ok())
}

/// `host[:port]` made only of `[A-Za-z0-9.-:[]]`, not empty, not starting with a separator.
fn is_valid_host(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= MAX_HOST_LEN
        && !host.starts_with(['.', '-', ':'])
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use axum::http::HeaderValue;

    /// A header map of `pairs` (the core's origin tests use it too).
    pub(crate) fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_static(value));
        }
        map
    }

    fn origin(pairs: &[(&'static str, &'static str)]) -> String {
        request_origin(&headers(pairs), &Uri::from_static("/"), "127.0.0.1:8080")
    }

    #[test]
    fn forwarded_headers_win_when_well_formed() {
        assert_eq!(
            origin(&[
                ("host", "internal:8080"),
                ("x-forwarded-host", "agent.example.com"),
                ("x-forwarded-proto", "https"),
            ]),
            "https://agent.example.com"
        );
        assert_eq!(origin(&[("host", "[::1]:8080")]), "http://[::1]:8080");
    }

    #[test]
    fn anything_else_is_ignored() {
        assert_eq!(
            origin(&[("host", "a.example"), ("x-forwarded-proto", "javascript")]),
            "http://a.example"
        );
        assert_eq!(
            origin(&[("host", "a.example"), ("x-forwarded-proto", "HTTPS")]),
            "http://a.example"
        );
        for bad in [
            "evil.example/x",
            "evil.example\"><script>",
            "user@evil.example",
            "a.example, b.example",
            "evil.example?x",
            "evil.example#x",
            "",
            ".evil",
        ] {
            let mut map = headers(&[("host", "a.example")]);
            if let Ok(value) = HeaderValue::from_str(bad) {
                map.insert("x-forwarded-host", value);
            }
            assert_eq!(
                request_origin(&map, &Uri::from_static("/"), "127.0.0.1:8080"),
                "http://a.example",
                "{bad:?}"
            );
        }
        assert_eq!(origin(&[("host", "bad host")]), "http://127.0.0.1:8080");
        assert_eq!(origin(&[]), "http://127.0.0.1:8080");
    }
}
