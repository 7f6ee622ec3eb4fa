//! Cached JSON (and HTML) documents: the discovery documents of both protocols are built once
//! per registry listing and origin ([`crate::core::catalog`]) and served with their validators.

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use sha2::{Digest, Sha256};

pub const JSON: &str = "application/json; charset=utf-8";

/// Short (30 s): the card reflects live workers, and a stale card only costs a client one more
/// fetch.
const CACHE_CONTROL: &str = "public, max-age=30";

/// The headers a response depends on besides its path: the card's URLs come from them.
const VARY: &str = "Host, X-Forwarded-Host, X-Forwarded-Proto";

/// A document's bytes and strong validator.
pub struct Built {
    pub body: Bytes,
    /// `"<hex SHA-256 of body>"`.
    pub etag: HeaderValue,
    /// When this process built it (HTTP date): the documents are rebuilt when what they list
    /// changes, so a cache can tell an old copy by date too (the ETag stays the validator).
    pub last_modified: HeaderValue,
}

impl Built {
    pub fn new(body: Vec<u8>) -> Self {
        let etag = format!("\"{}\"", hex::encode(Sha256::digest(&body)));
        let last_modified = chrono::Utc::now()
            .format("%a, %d %b %Y %H:%M:%S GMT")
            .to_string();
        Built {
            body: Bytes::from(body),
            // Quotes and hex digits only: always a valid header value.
            etag: HeaderValue::try_from(etag).unwrap_or(HeaderValue::from_static("\"\"")),
            // An HTTP date: ASCII letters, digits, spaces, commas and colons.
            last_modified: HeaderValue::try_from(last_modified)
                .unwrap_or(HeaderValue::from_static("Thu, 01 Jan 1970 00:00:00 GMT")),
        }
    }
}

/// `200` with the document, or `304` when the client already holds it (`If-None-Match`); both
/// with the validators and caching headers, in this order.
pub fn cached(request: &HeaderMap, content_type: &'static str, document: &Built) -> Response {
    let etag = document.etag.to_str().unwrap_or_default();
    let not_modified = request
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|value| etag_matches(value, etag));
    let mut response = if not_modified {
        let mut response = Response::new(Body::empty());
        *response.status_mut() = StatusCode::NOT_MODIFIED;
        response
    } else {
        // A reference-counted copy of the cached bytes.
        Response::new(Body::from(document.body.clone()))
    };
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::ETAG, document.etag.clone());
    headers.insert(header::LAST_MODIFIED, document.last_modified.clone());
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(CACHE_CONTROL),
    );
    headers.insert(header::VARY, HeaderValue::from_static(VARY));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// `If-None-Match` uses the weak comparison (RFC 9110 13.1.2): `W/"x"` matches `"x"`; `*`
/// matches any current representation.
fn etag_matches(if_none_match: &str, etag: &str) -> bool {
    if_none_match.split(',').map(str::trim).any(|candidate| {
        candidate == "*" || candidate.strip_prefix("W/").unwrap_or(candidate) == etag
    })
}

/// Escapes text for HTML element content and quoted attribute values (the landing page and
/// the console's pages).
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::etag_matches;

    #[test]
    fn if_none_match_lists_and_weak_tags() {
        let tag = "\"abc\"";
        assert!(etag_matches("\"abc\"", tag));
        assert!(etag_matches("W/\"abc\"", tag));
        assert!(etag_matches("\"x\", \"abc\"", tag));
        assert!(etag_matches("*", tag));
        assert!(!etag_matches("\"abcd\"", tag));
        assert!(!etag_matches("abc", tag));
        assert!(!etag_matches("", tag));
    }
}
