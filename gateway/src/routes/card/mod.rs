//! Discovery, for programs and for people:
//!
//! - `GET /.well-known/agent-card.json` (canonical) and `GET /.well-known/agent.json` (legacy):
//!   the Agent Card ([`manifest`]);
//! - `GET /entrypoints`: `{"items":[{key, description, streaming}]}`;
//! - `GET /openapi.json`: an OpenAPI 3.1 description of every route ([`openapi`]);
//! - `GET /` and `GET /favicon.svg`: a landing page ([`landing`]).
//!
//! Nothing here is stored: each response is built from the live worker registry
//! ([`admit::entrypoints`]), so the card follows workers as they come and go, and from the
//! request's origin ([`origin`]), so a card fetched through a proxy points back through it.
//! Every response carries a short `Cache-Control` and a strong `ETag` (SHA-256 of the body);
//! `If-None-Match` answers `304`.

mod landing;
mod manifest;
mod openapi;
pub mod origin;
mod payments;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::Response;
use axum::routing::get;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::admit;
use crate::error::ApiError;
use crate::state::AppState;

pub use origin::request_origin;

const JSON: &str = "application/json; charset=utf-8";

/// Short: the card reflects live workers, and a stale card only costs a client one more fetch.
const MAX_AGE_SECONDS: u32 = 30;

/// The headers a response depends on besides its path: the card's URLs come from them.
const VARY: &str = "Host, X-Forwarded-Host, X-Forwarded-Proto";

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/.well-known/agent-card.json", get(agent_card))
        .route("/.well-known/agent.json", get(agent_card))
        .route("/entrypoints", get(entrypoints))
        .route("/openapi.json", get(openapi_document))
        .route("/", get(landing_page))
        .route("/favicon.svg", get(landing::favicon))
}

async fn agent_card(
    State(state): State<AppState>,
    headers: HeaderMap,
    uri: Uri,
) -> Result<Response, ApiError> {
    let base = base_url(&state, &headers, &uri);
    let entrypoints = admit::entrypoints(&state).await?;
    let card = manifest::AgentCard::build(&state.config, &base, &entrypoints);
    cached(&headers, JSON, to_json(&card)?)
}

/// Upstream lists only key, description and streaming here; schemas and prices are in the card.
async fn entrypoints(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    #[derive(Serialize)]
    struct Item<'a> {
        key: &'a str,
        description: &'a str,
        streaming: bool,
    }
    #[derive(Serialize)]
    struct Items<'a> {
        items: Vec<Item<'a>>,
    }
    let entrypoints = admit::entrypoints(&state).await?;
    let items = Items {
        items: entrypoints
            .iter()
            .map(|entrypoint| Item {
                key: &entrypoint.key,
                description: &entrypoint.description,
                streaming: entrypoint.streaming,
            })
            .collect(),
    };
    cached(&headers, JSON, to_json(&items)?)
}

async fn openapi_document(
    State(state): State<AppState>,
    headers: HeaderMap,
    uri: Uri,
) -> Result<Response, ApiError> {
    let base = base_url(&state, &headers, &uri);
    let document = openapi::document(&state.config, &base);
    cached(&headers, JSON, to_json(&document)?)
}

pub async fn landing_page(
    State(state): State<AppState>,
    headers: HeaderMap,
    uri: Uri,
) -> Result<Response, ApiError> {
    let base = base_url(&state, &headers, &uri);
    let entrypoints = admit::entrypoints(&state).await?;
    let html = landing::render(&state.config, &base, &entrypoints);
    let mut response = cached(&headers, landing::HTML, html.into_bytes())?;
    // The page shows strings workers and operators chose; even escaped, it needs no script.
    response.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        ),
    );
    Ok(response)
}

/// `scheme://host` of the request followed by the configured base path, no trailing slash.
fn base_url(state: &AppState, headers: &HeaderMap, uri: &Uri) -> String {
    let origin = request_origin(headers, uri, &state.config.listen);
    format!("{origin}{}", state.config.base_path())
}

fn to_json(value: &impl Serialize) -> Result<Vec<u8>, ApiError> {
    serde_json::to_vec(value).map_err(|err| {
        tracing::error!(error = %err, "discovery document did not serialize");
        ApiError::internal()
    })
}

/// `200` with `body`, or `304` when the client already holds it (`If-None-Match`); both with
/// the validators and caching headers.
fn cached(
    request: &HeaderMap,
    content_type: &'static str,
    body: Vec<u8>,
) -> Result<Response, ApiError> {
    let etag = format!("\"{}\"", hex::encode(Sha256::digest(&body)));
    let not_modified = request
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|value| etag_matches(value, &etag));
    let (status, body) = if not_modified {
        (StatusCode::NOT_MODIFIED, Body::empty())
    } else {
        (StatusCode::OK, Body::from(body))
    };
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .header(header::ETAG, etag)
        .header(
            header::CACHE_CONTROL,
            format!("public, max-age={MAX_AGE_SECONDS}"),
        )
        .header(header::VARY, VARY)
        .header(header::X_CONTENT_TYPE_OPTIONS, "nosniff")
        .body(body)
        .map_err(|err| {
            tracing::error!(error = %err, "discovery response did not build");
            ApiError::internal()
        })
}

/// `If-None-Match` uses the weak comparison (RFC 9110 13.1.2): `W/"x"` matches `"x"`; `*`
/// matches any current representation.
fn etag_matches(if_none_match: &str, etag: &str) -> bool {
    if_none_match.split(',').map(str::trim).any(|candidate| {
        candidate == "*" || candidate.strip_prefix("W/").unwrap_or(candidate) == etag
    })
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
