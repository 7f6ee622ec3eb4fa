//! The A2A x402 extension (google-agentic-commerce/a2a-x402, the standalone flow; x402's
//! "Transport: A2A"): a priced skill paid in-band, in A2A messages and task metadata, instead
//! of with HTTP payment headers. Written for A2A v0.3; mapped onto v1.0 as docs/a2a.md's table
//! says.
//!
//! Only for a client that activates it (the `A2A-Extensions` service parameter, or v0.3's
//! `X-A2A-Extensions` header, naming one of [`URIS`]) on a gateway that takes payments; any
//! other request is answered exactly as before (the header flow: `402` and
//! `PAYMENT-SIGNATURE`). The flow itself is `crate::a2a::service`'s (`send`), over:
//!
//! - [`offer`]: the payment-required task's id, which carries what was offered (nothing is
//!   stored until the payment is admitted);
//! - [`answer`]: the unstored tasks the extension answers with, and the metadata added to a
//!   paid task.

pub mod answer;
pub mod offer;

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::response::Response;

/// The extension's URIs: v0.2's (declared first) and v0.1's, which x402's own A2A transport
/// spec and the Python `x402_a2a` package still name. Either activates the same behaviour.
pub const URIS: [&str; 2] = [
    "https://github.com/google-agentic-commerce/a2a-x402/blob/main/spec/v0.2",
    "https://github.com/google-a2a/a2a-x402/v0.1",
];

/// The service parameter that activates extensions (A2A v1.0), and v0.3's header.
pub const EXTENSIONS: &str = "a2a-extensions";
pub const LEGACY_EXTENSIONS: &str = "x-a2a-extensions";

/// The metadata keys.
pub const STATUS: &str = "x402.payment.status";
pub const REQUIRED: &str = "x402.payment.required";
pub const PAYLOAD: &str = "x402.payment.payload";
pub const RECEIPTS: &str = "x402.payment.receipts";
pub const ERROR: &str = "x402.payment.error";

/// The values of [`STATUS`] this gateway reads or writes.
pub const PAYMENT_REQUIRED: &str = "payment-required";
pub const PAYMENT_SUBMITTED: &str = "payment-submitted";
pub const PAYMENT_REJECTED: &str = "payment-rejected";
pub const PAYMENT_COMPLETED: &str = "payment-completed";
pub const PAYMENT_FAILED: &str = "payment-failed";

/// The extension URI the request activates, if any: the first of [`URIS`] named in either
/// header (comma-separated lists, any number of header lines; a URI matches exactly).
pub fn activated(headers: &HeaderMap) -> Option<&'static str> {
    let named = [EXTENSIONS, LEGACY_EXTENSIONS]
        .into_iter()
        .flat_map(|name| headers.get_all(name))
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(str::trim)
        .collect::<Vec<_>>();
    URIS.into_iter().find(|uri| named.contains(uri))
}

/// The declarations for the card's `capabilities.extensions` of a gateway that takes
/// payments. Not `required`: a client that does not activate the extension pays with headers.
pub fn declarations() -> Vec<a2a::AgentExtension> {
    URIS.iter()
        .map(|uri| a2a::AgentExtension {
            uri: (*uri).to_owned(),
            description: Some(
                "x402 payments in A2A messages and task metadata (standalone flow) for priced \
                 skills; without activation, priced skills are paid with HTTP headers \
                 (PAYMENT-SIGNATURE)"
                    .into(),
            ),
            required: Some(false),
            params: None,
        })
        .collect()
}

/// The extension URI the request activates, on a gateway that takes payments (where the
/// card declares the extension); `None` elsewhere.
pub fn supported(
    state: &crate::core::state::AppState,
    headers: &HeaderMap,
) -> Option<&'static str> {
    state.pay_context().gate.and_then(|_| activated(headers))
}

/// Says which extension the answer used (A2A v1.0: the server lists the activated
/// extensions it supports in `A2A-Extensions`; v0.3 clients read `X-A2A-Extensions`).
pub fn echo(uri: Option<&'static str>, response: &mut Response) {
    let Some(uri) = uri else {
        return;
    };
    let value = HeaderValue::from_static(uri);
    let headers = response.headers_mut();
    headers.insert(HeaderName::from_static(EXTENSIONS), value.clone());
    headers.insert(HeaderName::from_static(LEGACY_EXTENSIONS), value);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(name: &'static str, value: &'static str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.append(name, HeaderValue::from_static(value));
        headers
    }

    #[test]
    fn activation_names_a_uri_exactly() {
        assert_eq!(activated(&HeaderMap::new()), None);
        assert_eq!(activated(&with("a2a-extensions", URIS[0])), Some(URIS[0]));
        assert_eq!(
            activated(&with(
                "x-a2a-extensions",
                "https://example.com/other, https://github.com/google-a2a/a2a-x402/v0.1"
            )),
            Some(URIS[1])
        );
        assert_eq!(
            activated(&with(
                "a2a-extensions",
                "https://github.com/google-a2a/a2a-x402"
            )),
            None
        );
        assert_eq!(
            activated(&with(
                "a2a-extensions",
                "https://github.com/google-a2a/a2a-x402/v0.1/more"
            )),
            None
        );
    }
}
