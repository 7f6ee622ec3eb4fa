//! Discovery, for programs and for people:
//!
//! - `GET /.well-known/agent-card.json` (canonical) and `GET /.well-known/agent.json` (legacy):
//!   the Agent Card ([`manifest`]);
//! - `GET /entrypoints`: `{"items":[{key, description, streaming}]}`;
//! - `GET /openapi.json`: an OpenAPI 3.1 description of every route ([`openapi`]);
//! - `GET /` and `GET /favicon.svg`: a landing page ([`landing`]).
//!
//! Each response is built from the live worker registry as this gateway's catalog holds it
//! ([`Discovery::snapshot`], at most `--registry-refresh-ms` old), so the card follows workers
//! as they come and go, and from the request's origin ([`origin`]), so a card fetched through
//! a proxy points back through it. The built bytes and their ETag are kept with the catalog's
//! listing, per origin, until the listing changes ([`crate::catalog`]). Every response carries
//! a short `Cache-Control` and a strong `ETag` (SHA-256 of the body); `If-None-Match` answers
//! `304`.

mod landing;
mod manifest;
mod openapi;
pub mod origin;
mod payments;

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::Response;
use axum::routing::get;
use serde::Serialize;
use store::registry::WorkerRegistry;

use crate::catalog::{Built, Catalog, Document, Snapshot};
use crate::config::GatewayConfig;
use crate::error::ApiError;
use crate::state::AppState;

pub use origin::request_origin;

/// Whether an entrypoint's input schema accepts any JSON (`{}`, `true`, `null`): the card
/// then publishes none.
pub fn accepts_anything(schema: &serde_json::Value) -> bool {
    manifest::schema(schema).is_none()
}

pub(crate) const JSON: &str = "application/json; charset=utf-8";

/// Short (30 s): the card reflects live workers, and a stale card only costs a client one more
/// fetch.
const CACHE_CONTROL: &str = "public, max-age=30";

/// The headers a response depends on besides its path: the card's URLs come from them.
const VARY: &str = "Host, X-Forwarded-Host, X-Forwarded-Proto";

/// What the discovery handlers read. Each request clones its handler's state, and this is
/// three reference counts, where the whole [`AppState`] is eight and a cancellation token whose
/// clone and drop take a lock.
#[derive(Clone)]
pub struct Discovery {
    config: Arc<GatewayConfig>,
    registry: Arc<dyn WorkerRegistry>,
    catalog: Arc<Catalog>,
}

impl Discovery {
    pub fn new(state: &AppState) -> Self {
        Discovery {
            config: state.config.clone(),
            registry: state.registry.clone(),
            catalog: state.catalog.clone(),
        }
    }

    /// The cached registry view (see [`crate::catalog`]), at most the refresh interval old.
    async fn snapshot(&self) -> Result<Arc<Snapshot>, ApiError> {
        Ok(self.catalog.snapshot(&*self.registry).await?)
    }
}

/// The discovery routes, with their state already given (any outer state fits).
pub fn router<S: Clone + Send + Sync + 'static>(state: &AppState) -> Router<S> {
    Router::new()
        .route("/.well-known/agent-card.json", get(agent_card))
        .route("/.well-known/agent.json", get(agent_card))
        .route("/entrypoints", get(entrypoints))
        .route("/openapi.json", get(openapi_document))
        .route("/", get(landing_page))
        .route("/favicon.svg", get(landing::favicon))
        .with_state(Discovery::new(state))
}

/// Handlers take the whole request (and drop its body: a `Body` is not `Sync`, so no borrow of
/// it may cross an await) rather than `HeaderMap` and `Uri` extractors, which would copy the
/// headers on every request.
async fn agent_card(
    State(state): State<Discovery>,
    request: Request,
) -> Result<Response, ApiError> {
    let (parts, _) = request.into_parts();
    let (headers, uri) = (&parts.headers, &parts.uri);
    let base = base_url(&state, headers, uri);
    let snapshot = state.snapshot().await?;
    let card = snapshot.document(Document::Card, &base, |entrypoints| {
        to_json(&manifest::AgentCard::build(
            &state.config,
            &base,
            entrypoints,
        ))
    })?;
    Ok(cached(headers, JSON, &card))
}

/// Upstream lists only key, description and streaming here; schemas and prices are in the card.
async fn entrypoints(
    State(state): State<Discovery>,
    request: Request,
) -> Result<Response, ApiError> {
    let (parts, _) = request.into_parts();
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
    let snapshot = state.snapshot().await?;
    // The same for every origin.
    let items = snapshot.document(Document::Entrypoints, "", |entrypoints| {
        to_json(&Items {
            items: entrypoints
                .iter()
                .map(|entrypoint| Item {
                    key: &entrypoint.key,
                    description: &entrypoint.description,
                    streaming: entrypoint.streaming,
                })
                .collect(),
        })
    })?;
    Ok(cached(&parts.headers, JSON, &items))
}

async fn openapi_document(
    State(state): State<Discovery>,
    request: Request,
) -> Result<Response, ApiError> {
    let (parts, _) = request.into_parts();
    let (headers, uri) = (&parts.headers, &parts.uri);
    let base = base_url(&state, headers, uri);
    // Each entrypoint's paths carry its own input schema, so it is built from the registry.
    let snapshot = state.snapshot().await?;
    let document = snapshot.document(Document::OpenApi, &base, |entrypoints| {
        to_json(&openapi::document(&state.config, &base, entrypoints))
    })?;
    Ok(cached(headers, JSON, &document))
}

pub async fn landing_page(
    State(state): State<Discovery>,
    request: Request,
) -> Result<Response, ApiError> {
    let (parts, _) = request.into_parts();
    let (headers, uri) = (&parts.headers, &parts.uri);
    let base = base_url(&state, headers, uri);
    let snapshot = state.snapshot().await?;
    let page = snapshot.document(Document::Landing, &base, |entrypoints| {
        Ok::<_, ApiError>(landing::render(&state.config, &base, entrypoints).into_bytes())
    })?;
    let mut response = cached(headers, landing::HTML, &page);
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
fn base_url(state: &Discovery, headers: &HeaderMap, uri: &Uri) -> String {
    let mut url = request_origin(headers, uri, &state.config.listen);
    url.push_str(&state.config.base_path());
    url
}

fn to_json(value: &impl Serialize) -> Result<Vec<u8>, ApiError> {
    serde_json::to_vec(value).map_err(|err| {
        tracing::error!(error = %err, "discovery document did not serialize");
        ApiError::internal()
    })
}

/// `200` with the document, or `304` when the client already holds it (`If-None-Match`); both
/// with the validators and caching headers, in this order.
pub(crate) fn cached(
    request: &HeaderMap,
    content_type: &'static str,
    document: &Built,
) -> Response {
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
