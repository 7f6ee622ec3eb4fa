//! The origin everything security-relevant is bound to, from the gateway's settings: the
//! domain and URI a Sign-In-With-X message must name, the x402 `resource` URL of a priced
//! route, the default MPP realm, the URLs a signed card names. The plumbing
//! ([`crate::http::origin`]) reads a request's origin; this module decides when a request may
//! choose it (never, unless the operator trusts forwarded headers).

use axum::http::{HeaderMap, Uri};

use crate::core::config::GatewayConfig;
use crate::http::origin::request_origin;

/// The origin everything security-relevant is bound to: the domain and URI a Sign-In-With-X
/// message must name, the x402 `resource` URL of a priced route, the default MPP realm.
/// `--public-url` when set; else, only with `--trust-forwarded-headers`, the request's origin
/// ([`request_origin`]); else `http://<--listen>`, whatever the request's headers say.
pub fn security_origin(config: &GatewayConfig, headers: &HeaderMap, uri: &Uri) -> String {
    if let Some(public) = &config.public_url {
        return public.origin().to_owned();
    }
    if config.trust_forwarded_headers {
        return request_origin(headers, uri, &config.listen);
    }
    format!("http://{}", config.listen)
}

/// Why the security origin is likely not the one clients reach, for a warning at start: the
/// gateway listens on a wildcard address (so `http://0.0.0.0:8080` would be it) and neither
/// `--public-url` nor `--trust-forwarded-headers` is set.
pub fn unbound_origin_warning(config: &GatewayConfig) -> Option<&'static str> {
    if config.public_url.is_some() || config.trust_forwarded_headers {
        return None;
    }
    let host = config
        .listen
        .rsplit_once(':')
        .map_or(config.listen.as_str(), |(host, _)| host);
    matches!(host, "" | "0.0.0.0" | "[::]" | "::" | "*").then_some(
        "the gateway listens on a wildcard address without --public-url (PUBLIC_URL): sign-ins and payments are bound to that address, which no client reaches; set PUBLIC_URL to the URL clients use",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::origin::PublicUrl;
    use crate::http::origin::tests::headers;

    fn config(args: &[&str]) -> Result<GatewayConfig, clap::Error> {
        use clap::Parser;
        GatewayConfig::try_parse_from(std::iter::once("gateway").chain(args.iter().copied()))
    }

    #[test]
    fn the_security_origin_ignores_request_headers_unless_trusted() -> Result<(), clap::Error> {
        let forged = headers(&[
            ("host", "evil.example"),
            ("x-forwarded-host", "evil.example"),
            ("x-forwarded-proto", "https"),
        ]);
        let uri = Uri::from_static("/entrypoints/echo/invoke");
        let plain = config(&["--listen", "127.0.0.1:9000"])?;
        assert_eq!(
            security_origin(&plain, &forged, &uri),
            "http://127.0.0.1:9000"
        );
        let trusting = config(&["--listen", "127.0.0.1:9000", "--trust-forwarded-headers"])?;
        assert!(trusting.trust_forwarded_headers);
        assert_eq!(
            security_origin(&trusting, &forged, &uri),
            "https://evil.example"
        );
        let public = config(&[
            "--trust-forwarded-headers",
            "--public-url",
            "HTTPS://Agent.Example.com:8443/",
        ])?;
        assert_eq!(
            security_origin(&public, &forged, &uri),
            "https://agent.example.com:8443"
        );
        for (given, kept) in [
            ("https://agent.example.com:443", "https://agent.example.com"),
            ("http://agent.example.com:80/", "http://agent.example.com"),
            (
                "http://agent.example.com:443",
                "http://agent.example.com:443",
            ),
        ] {
            assert_eq!(
                PublicUrl::parse(given)
                    .map_err(|err| clap::Error::raw(clap::error::ErrorKind::InvalidValue, err))?
                    .origin(),
                kept
            );
        }
        Ok(())
    }

    #[test]
    fn a_wildcard_listener_without_a_public_url_is_warned_about() -> Result<(), clap::Error> {
        assert!(unbound_origin_warning(&config(&["--listen", "0.0.0.0:8080"])?).is_some());
        assert!(unbound_origin_warning(&config(&["--listen", "[::]:8080"])?).is_some());
        assert!(unbound_origin_warning(&config(&["--listen", "127.0.0.1:8080"])?).is_none());
        let public = config(&[
            "--listen",
            "0.0.0.0:8080",
            "--public-url",
            "https://agent.example.com",
        ])?;
        assert!(unbound_origin_warning(&public).is_none());
        Ok(())
    }

    #[test]
    fn a_public_url_is_an_http_origin_or_the_gateway_does_not_start() {
        for good in [
            "https://agent.example.com",
            "https://agent.example.com/",
            "http://127.0.0.1:8080",
            "http://[::1]:8080",
        ] {
            assert!(PublicUrl::parse(good).is_ok(), "{good}");
        }
        for bad in [
            "agent.example.com",
            "ftp://agent.example.com",
            "https://agent.example.com/agents",
            "https://agent.example.com/?x=1",
            "https://agent.example.com#top",
            "https://user:pw@agent.example.com",
            "https://",
            "https://agent example.com",
            "https://agent.example.com:http",
            "https://agent.example.com:99999",
            "https://agent.example.com:",
        ] {
            assert!(PublicUrl::parse(bad).is_err(), "{bad}");
            assert!(config(&["--public-url", bad]).is_err(), "{bad}");
        }
    }
}
