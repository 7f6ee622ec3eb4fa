//! The checks a webhook URL gets without touching the network: when a push config is created
//! ([`validate_url`]) and again before each send. A host written as an IP address never goes
//! through the resolver (the connector dials it directly), so it is checked here; a host name is
//! checked when it is resolved, at every connection (see the `resolve` module).

use reqwest::Url;
use url::Host;

use crate::error::WebhookError;
use crate::policy::{DialPort, WebhookPolicy};

/// Parses a webhook URL and checks what can be checked without resolving or calling it: an
/// http or https URL with a host and no user name or password, whose host, when it is an IP
/// address, the policy allows on the port the URL dials.
pub fn validate_url(url: &str, policy: &WebhookPolicy) -> Result<Url, WebhookError> {
    let invalid = |reason: &str| WebhookError::InvalidUrl {
        reason: reason.to_owned(),
    };
    let parsed = Url::parse(url).map_err(|e| invalid(&format!("does not parse ({e})")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(invalid(&format!(
            "the scheme is {:?}; only http and https are allowed",
            parsed.scheme()
        )));
    }
    // Credentials in the URL would be sent as Basic auth and shown wherever the URL is.
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(invalid(
            "has a user name or password; use the authentication scheme and credentials instead",
        ));
    }
    let ip = match parsed.host() {
        None => return Err(invalid("has no host")),
        Some(Host::Domain(_)) => None,
        Some(Host::Ipv4(v4)) => Some(v4.into()),
        Some(Host::Ipv6(v6)) => Some(v6.into()),
    };
    let dial = DialPort::of(&parsed).ok_or_else(|| invalid("has no port"))?;
    if let Some(ip) = ip {
        policy
            .check_ip(ip, dial)
            .map_err(|refusal| WebhookError::Refused {
                host: parsed.host_str().unwrap_or_default().to_owned(),
                refusals: vec![refusal],
            })?;
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ranges::RefusedRange;

    fn reason(url: &str) -> String {
        match validate_url(url, &WebhookPolicy::public_only()) {
            Ok(parsed) => format!("accepted {parsed}"),
            Err(error) => error.to_string(),
        }
    }

    #[test]
    fn accepts_public_http_and_https_urls_with_names() -> Result<(), WebhookError> {
        let policy = WebhookPolicy::public_only();
        validate_url("https://receiver.example.com/hook?t=1", &policy)?;
        validate_url("http://93.184.215.14:8080/", &policy)?;
        // A name is not resolved here, even one that will resolve to loopback.
        validate_url("http://localhost:9/", &policy)?;
        Ok(())
    }

    #[test]
    fn refuses_syntax_scheme_and_userinfo() {
        for (url, expected) in [
            ("not a url", "does not parse"),
            ("ftp://example.com/", "\"ftp\"; only http and https"),
            ("file:///etc/passwd", "\"file\""),
            ("https://user:pass@example.com/", "user name or password"),
            ("https://user@example.com/", "user name or password"),
            ("https://:pass@example.com/", "user name or password"),
        ] {
            let message = reason(url);
            assert!(message.contains(expected), "{url}: {message}");
            assert!(!message.contains("pass@"), "{message}");
        }
    }

    #[test]
    fn refuses_literal_addresses_in_every_spelling() {
        for (url, shown) in [
            ("http://127.0.0.1:8080/", "127.0.0.1 is loopback"),
            ("http://[::ffff:127.0.0.1]/", "::ffff:127.0.0.1 is loopback"),
            ("http://[::1]/", "::1 is loopback"),
            ("http://2130706433/", "127.0.0.1 is loopback"),
            ("http://0x7f.1/", "127.0.0.1 is loopback"),
            ("http://0/", "0.0.0.0 is unspecified"),
            (
                "http://169.254.169.254/latest/meta-data/",
                "169.254.169.254 is cloud metadata",
            ),
            ("http://[fd00:ec2::254]/", "fd00:ec2::254 is cloud metadata"),
            ("http://10.0.0.1/", "10.0.0.1 is private"),
        ] {
            let message = reason(url);
            assert!(message.contains(shown), "{url}: {message}");
        }
    }

    #[test]
    fn a_cidr_on_the_allowlist_admits_a_literal() -> Result<(), Box<dyn std::error::Error>> {
        let policy = WebhookPolicy::from_allowlist("127.0.0.0/8:8080")?;
        validate_url("http://127.0.0.1:8080/", &policy)?;
        validate_url("http://[::ffff:127.0.0.1]:8080/", &policy)?;
        // On its own port only: another is refused as any refused address is.
        for url in [
            "http://127.0.0.1/",
            "http://127.0.0.1:8081/",
            "https://127.0.0.1/",
        ] {
            match validate_url(url, &policy) {
                Err(WebhookError::Refused { host, refusals }) => {
                    assert_eq!(host, "127.0.0.1");
                    assert_eq!(refusals[0].range, RefusedRange::Loopback);
                }
                other => panic!("{url}: expected a refusal, got {other:?}"),
            }
        }
        let default_port = WebhookPolicy::from_allowlist("127.0.0.0/8")?;
        validate_url("http://127.0.0.1/", &default_port)?;
        validate_url("https://127.0.0.1:443/", &default_port)?;
        assert!(validate_url("http://127.0.0.1:8080/", &default_port).is_err());
        let names_only = WebhookPolicy::from_allowlist("localhost")?;
        match validate_url("http://127.0.0.1/", &names_only) {
            Err(WebhookError::Refused { host, refusals }) => {
                assert_eq!(host, "127.0.0.1");
                assert_eq!(refusals[0].range, RefusedRange::Loopback);
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        Ok(())
    }
}
