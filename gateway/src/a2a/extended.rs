//! The authenticated extended Agent Card (A2A v1.0 §3.1.11, §13.3), the same on every binding
//! (JSON-RPC `GetExtendedAgentCard`, HTTP+JSON `GET /extendedAgentCard`, gRPC).
//!
//! With `--member-tokens-file` the public card says `capabilities.extendedAgentCard: true`,
//! and a member (a caller whose bearer token the file lists, [`crate::core::members`]) reads the
//! full card: every skill, the private ones (worker `--private`) included, and its own
//! entitlements as an [`AgentExtension`] in `capabilities.extensions` ([`MEMBER_EXTENSION`],
//! params `{"member": NAME, "privateSkills": [ids]}`): an extension, because the spec's card
//! schema admits no other member, and a strict client validates it.
//!
//! Who is refused, and how:
//! - no token, or a malformed one: the binding's own unauthenticated answer (checked before
//!   this module is reached, as for every other method);
//! - a valid token that is not a member's: the same unauthenticated error (`401` with
//!   `WWW-Authenticate: Bearer`, gRPC `UNAUTHENTICATED`), not `403`: the bindings have no
//!   PermissionDenied mapping, and the card's scheme is the member's bearer token, so a
//!   token that is not one has not authenticated under it;
//! - no member file: `ExtendedAgentCardNotConfigured`, as before.
//!
//! The card is per caller: it is answered `Cache-Control: private, no-store`. When cards are
//! signed it is signed like the public one (over `--public-url`), once per listing and member
//! (a bounded cache in the catalog, [`crate::core::catalog::Snapshot::member_document`]).

use std::collections::HashMap;
use std::sync::Arc;

use a2a::AgentExtension;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::card;
use super::error::A2aError;
use crate::core::members::Viewer;
use crate::core::state::AppState;
use crate::http::document::Built;

/// The extension that carries a member's entitlements in its extended card.
pub const MEMBER_EXTENSION: &str = "https://taskcluster.dev/a2a/ext/member/v1";

/// What the extended card answers with: `private, no-store` (it differs per caller).
pub const CACHE_CONTROL: &str = "private, no-store";

/// The extended card of the caller of a request with `headers` (whose token the binding has
/// already checked), as the JSON bytes served (signed when cards are). `base`: the origin and
/// base path the card's URLs name when it is not signed (a signed card names `--public-url`).
pub async fn card_bytes(
    state: &AppState,
    headers: &HeaderMap,
    base: impl FnOnce() -> String,
) -> Result<Arc<Built>, A2aError> {
    if state.members.is_none() {
        return Err(A2aError::extended_card_not_configured());
    }
    let Viewer::Member(member) = state.viewer(headers) else {
        return Err(A2aError::unauthenticated(
            "The extended agent card is for members: this bearer token is not a member's",
        ));
    };
    let signing = state
        .card_signer
        .as_ref()
        .zip(crate::core::card_signing::CardSigner::card_base(
            &state.config,
        ));
    let base = match &signing {
        Some((_, base)) => base.clone(),
        None => base(),
    };
    let snapshot = crate::core::admit::entrypoints(state)
        .await
        .map_err(A2aError::from)?;
    // Cached per listing, member and set of live keys (a reload or an expiry re-signs).
    let key = match &signing {
        Some((signer, _)) => signer.cache_key(&base),
        None => base.clone(),
    };
    snapshot.member_document(member, &key, |entrypoints| {
        let card = build(state, &base, entrypoints, member);
        match &signing {
            Some((signer, _)) => card::signable(&card).and_then(|card| signer.sign(&card)),
            None => serde_json::to_vec(&card),
        }
        .map_err(|err| {
            tracing::error!(error = %err, "the extended agent card did not serialize");
            A2aError::internal()
        })
    })
}

/// What an unsigned extended card's URLs name on the HTTP bindings: the request's origin and
/// the base path, as the public card's.
pub fn request_base(
    config: &crate::core::config::GatewayConfig,
    headers: &HeaderMap,
    uri: &axum::http::Uri,
) -> String {
    let mut base = crate::http::origin::request_origin(headers, uri, &config.listen);
    base.push_str(&config.base_path());
    base
}

/// The full card for `member`: every entrypoint, and the member extension.
fn build(
    state: &AppState,
    base: &str,
    entrypoints: &[store::registry::EntrypointInfo],
    member: &str,
) -> a2a::AgentCard {
    let mut card = card::build(
        &state.config,
        base,
        entrypoints,
        state.push.is_some(),
        true,
        state.pay_context().gate.is_some(),
    );
    let private: Vec<Value> = entrypoints
        .iter()
        .filter(|entrypoint| entrypoint.private)
        .map(|entrypoint| Value::String(entrypoint.key.clone()))
        .collect();
    card.capabilities
        .extensions
        .get_or_insert_with(Vec::new)
        .push(AgentExtension {
            uri: MEMBER_EXTENSION.to_owned(),
            description: Some(
                "What this member is entitled to: the private skills it may run, listed here and \
             in skills"
                    .to_owned(),
            ),
            required: None,
            params: Some(HashMap::from([
                ("member".to_owned(), Value::String(member.to_owned())),
                ("privateSkills".to_owned(), Value::Array(private)),
            ])),
        });
    card
}

/// The card's bytes as an HTTP response (the HTTP+JSON binding), per caller.
pub fn response(card: &Built) -> Response {
    let mut response = (StatusCode::OK, card.body.clone()).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    no_store(headers);
    response
}

/// `Cache-Control: private, no-store` on an answer that carries the extended card.
pub fn no_store(headers: &mut HeaderMap) {
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(CACHE_CONTROL),
    );
}

/// The card parsed back (the JSON-RPC result, the gRPC message): the bytes are ours.
pub fn parsed<T: serde::de::DeserializeOwned>(card: &Built) -> Result<T, A2aError> {
    serde_json::from_slice(&card.body).map_err(|err| {
        tracing::error!(error = %err, "the extended agent card does not parse back");
        A2aError::internal()
    })
}
