//! `A2A-Version` negotiation: the client names the protocol version of its request as
//! `Major.Minor` (a patch part is ignored); an absent or empty header means `0.3`, the last
//! version before the header existed. This agent speaks `1.0` only, so anything else is the
//! spec's `VersionNotSupportedError` (`-32009`).

use axum::http::HeaderMap;

use super::error::{A2aError, truncated};

pub const HEADER: &str = "a2a-version";

/// The version this agent speaks.
pub const SUPPORTED: &str = "1.0";

/// The version an absent header stands for.
const DEFAULT: &str = "0.3";

/// Checks the request's `A2A-Version` (also accepted as the `A2A-Version` query parameter, as
/// the spec allows for clients that cannot set headers).
pub fn check(headers: &HeaderMap, query: Option<&str>) -> Result<(), A2aError> {
    let from_query = query.and_then(|query| {
        query.split('&').find_map(|pair| {
            let (name, value) = pair.split_once('=')?;
            name.eq_ignore_ascii_case("A2A-Version").then_some(value)
        })
    });
    let requested = match headers.get(HEADER) {
        Some(value) => value
            .to_str()
            .map_err(|_| A2aError::version("(not text)"))?,
        None => from_query.unwrap_or(""),
    };
    let requested = requested.trim();
    let requested = if requested.is_empty() {
        DEFAULT
    } else {
        requested
    };
    if major_minor(requested) == Some((1, 0)) {
        Ok(())
    } else {
        Err(A2aError::version(truncated(requested)))
    }
}

/// `(major, minor)` of `1.0` or `1.0.3`; `None` for anything else.
fn major_minor(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    match (parts.next(), parts.next()) {
        (None, _) => Some((major, minor)),
        (Some(patch), None) if patch.parse::<u32>().is_ok() => Some((major, minor)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn with(version: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Ok(value) = HeaderValue::from_str(version) {
            headers.insert(HEADER, value);
        }
        headers
    }

    #[test]
    fn one_point_zero_with_any_patch_is_accepted() {
        assert!(check(&with("1.0"), None).is_ok());
        assert!(check(&with(" 1.0.2 "), None).is_ok());
        assert!(check(&HeaderMap::new(), Some("x=1&A2A-Version=1.0")).is_ok());
    }

    #[test]
    fn other_versions_and_the_absent_header_are_refused() {
        for version in ["99.0", "0.3", "1", "1.1", "1.0.x", "abc", ""] {
            let refused = check(&with(version), None);
            assert_eq!(
                refused.map_err(|err| err.code),
                Err(a2a::error_code::VERSION_NOT_SUPPORTED),
                "{version:?}"
            );
        }
        assert!(check(&HeaderMap::new(), None).is_err());
    }
}
