//! The `402 Payment Required` answer: the x402 v2 challenge in the `PAYMENT-REQUIRED` header
//! (standard base64 JSON) and the v1 challenge as the JSON body, so clients of either version
//! can pay. It reserves nothing.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use payments::Terms;

/// What a request without a credential is told.
pub const CREDENTIAL_REQUIRED: &str = "X-PAYMENT header is required";

/// Whether the route a `resource` URL names replays a request by its x402
/// `payment-identifier`: the Lucid invoke, the one route that keeps answers for replay (as it
/// does for `Idempotency-Key`). Tasks and streams are not replayed, so their challenges do not
/// offer it.
pub fn honours_payment_identifier(resource_url: &str) -> bool {
    let path = resource_url.split(['?', '#']).next().unwrap_or_default();
    path.contains("/entrypoints/") && path.ends_with("/invoke")
}

/// `402` for `terms`, with `error` saying what was wrong with the credential (if one came).
pub fn payment_required(terms: &Terms, error: &str) -> Response {
    payment_required_with(terms, error, None)
}

/// [`payment_required`] with one more x402 v2 extension (the SIWX offer: `name`, `info`).
pub fn payment_required_with(
    terms: &Terms,
    error: &str,
    extension: Option<(&str, serde_json::Value)>,
) -> Response {
    let mut challenge = terms.challenge_v2(Some(error));
    if honours_payment_identifier(&terms.resource.url) {
        challenge.extensions.insert(
            payments::payment_identifier::NAME.to_owned(),
            payments::payment_identifier::declaration(),
        );
    }
    if let Some((name, value)) = extension {
        challenge.extensions.insert(name.to_owned(), value);
    }
    let v2 = payments::wire::encode(&challenge);
    let body = serde_json::to_vec(&terms.challenge_v1(error)).unwrap_or_default();
    let mut response = (StatusCode::PAYMENT_REQUIRED, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    // Base64 is always a valid header value; the fallback only guards the type.
    if let Ok(value) = HeaderValue::from_str(&v2) {
        headers.insert(payments::PAYMENT_REQUIRED, value);
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
