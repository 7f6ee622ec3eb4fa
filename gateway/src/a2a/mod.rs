//! The official A2A v1.0 bindings over the same task runtime as the Lucid profile, mounted
//! under `{base}/a2a` so that their paths never meet the profile's (`GET /tasks` exists in
//! both):
//!
//! - `GET {base}/a2a/.well-known/agent-card.json`: the strict A2A card ([`card`]);
//! - `POST {base}/a2a/jsonrpc`: the JSON-RPC 2.0 binding ([`jsonrpc`]);
//! - `{base}/a2a/v1/...`: the HTTP+JSON binding ([`rest`]);
//! - with `--grpc-listen`, the gRPC binding on a listener of its own ([`grpc`]);
//! - on each, with `--member-tokens-file`, the members' extended card ([`extended`]).
//!
//! All bindings run the same operations ([`service`]) on the runtime's tasks, mapped to and
//! from A2A by [`mapping`]; every call names its protocol version ([`version`]) and its
//! caller by bearer token ([`caller`]); errors carry the spec's codes ([`error`]).
//!
//! An adapter over the core (admission, payment gate, watch, catalog) and the HTTP plumbing
//! ([`crate::http`]); it never imports the Lucid routes, and [`crate::app`] merges its router
//! beside theirs.

pub mod caller;
pub mod card;
pub mod error;
pub mod extended;
pub mod grpc;
pub mod jsonrpc;
pub mod mapping;
pub mod proto_json;
pub mod push;
pub mod rest;
pub mod service;
pub mod version;
pub mod wire;
pub mod x402;

use axum::Router;
use axum::extract::{OriginalUri, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::{get, post};

use crate::core::catalog::Document;
use crate::core::state::AppState;
use crate::http::document::{JSON, cached};
use crate::http::error::ApiError;
use crate::http::interfaces::A2A_PREFIX as PREFIX;
use crate::http::origin::request_origin;

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            &format!("{PREFIX}/.well-known/agent-card.json"),
            get(agent_card),
        )
        .route(&format!("{PREFIX}/jsonrpc"), post(jsonrpc::handle))
        // Clients that join a relative "/" to the card's URL (httpx does) end it with a slash.
        .route(&format!("{PREFIX}/jsonrpc/"), post(jsonrpc::handle))
        .nest(&format!("{PREFIX}/v1"), rest::router())
}

/// The A2A card, built once per registry listing and origin (like the profile's card) and
/// served with its ETag and `Cache-Control`; `If-None-Match` answers 304.
async fn agent_card(
    State(state): State<AppState>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    // A signed card names the public URL only, never the request's origin.
    let signing = state
        .card_signer
        .as_ref()
        .zip(crate::core::card_signing::CardSigner::card_base(
            &state.config,
        ));
    let base = match &signing {
        Some((_, base)) => base.clone(),
        None => {
            let mut base = request_origin(&headers, &uri, &state.config.listen);
            base.push_str(&state.config.base_path());
            base
        }
    };
    let snapshot = crate::core::admit::entrypoints(&state).await?;
    // Built (and signed) once per listing and set of live keys: the signatures are in the
    // bytes the ETag hashes.
    let key = match &signing {
        Some((signer, _)) => signer.cache_key(&base),
        None => base.clone(),
    };
    let card = snapshot.document(Document::A2aCard, &key, |entrypoints| {
        let card = card::build(
            &state.config,
            &base,
            entrypoints,
            state.push.is_some(),
            state.members.is_some(),
            state.pay_context().gate.is_some(),
        );
        match &signing {
            Some((signer, _)) => card::signable(&card).and_then(|card| signer.sign(&card)),
            None => serde_json::to_vec(&card),
        }
        .map_err(|err| {
            tracing::error!(error = %err, "the A2A card did not serialize");
            ApiError::internal()
        })
    })?;
    Ok(cached(&headers, JSON, &card))
}
