//! Discovery, for programs and for people:
//!
//! - `GET /.well-known/agent-card.json` (canonical) and `GET /.well-known/agent.json` (legacy):
//!   the Agent Card ([`manifest`]), signed with `--card-signing-key-file` ([`crate::core::card_signing`]);
//! - `GET /.well-known/jwks.json`: the public keys of those signatures (404 when unsigned);
//! - `GET /entrypoints`: `{"items":[{key, description, streaming}]}`;
//! - `GET /openapi.json`: an OpenAPI 3.1 description of every route ([`openapi`]);
//! - `GET /` and `GET /favicon.svg`: a landing page ([`landing`]).
//!
//! Each response is built from the live worker registry as this gateway's catalog holds it
//! ([`Discovery::snapshot`], at most `--registry-refresh-ms` old), so the card follows workers
//! as they come and go, and from the request's origin ([`crate::http::origin`]), so a card fetched through
//! a proxy points back through it. The built bytes and their ETag are kept with the catalog's
//! listing, per origin, until the listing changes ([`crate::core::catalog`]), and served by
//! [`crate::http::document::cached`] (`ETag`, short `Cache-Control`, `304` on `If-None-Match`).

mod landing;
mod manifest;
mod openapi;
mod payments;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::Response;
use axum::routing::get;
use serde::Serialize;
use store::registry::WorkerRegistry;

use crate::core::card_signing::{CardSigner, JWKS_PATH};
use crate::core::catalog::{Catalog, Document, Snapshot};
use crate::core::config::GatewayConfig;
use crate::core::state::AppState;
use crate::http::document::{JSON, cached};
use crate::http::error::ApiError;
use crate::http::origin::request_origin;

/// What the discovery handlers read. Each request clones its handler's state, and this is
/// three reference counts, where the whole [`AppState`] is eight and a cancellation token whose
/// clone and drop take a lock.
#[derive(Clone)]
pub struct Discovery {
    config: Arc<GatewayConfig>,
    registry: Arc<dyn WorkerRegistry>,
    catalog: Arc<Catalog>,
    signer: Option<Arc<CardSigner>>,
}

impl Discovery {
    pub fn new(state: &AppState) -> Self {
        Discovery {
            config: state.config.clone(),
            registry: state.registry.clone(),
            catalog: state.catalog.clone(),
            signer: state.card_signer.clone(),
        }
    }

    /// The cached registry view (see [`crate::core::catalog`]), at most the refresh interval old.
    async fn snapshot(&self) -> Result<Arc<Snapshot>, ApiError> {
        Ok(self.catalog.snapshot(&*self.registry).await?)
    }
}

/// The discovery routes, with their state already given (any outer state fits).
pub fn router<S: Clone + Send + Sync + 'static>(state: &AppState) -> Router<S> {
    Router::new()
        .route("/.well-known/agent-card.json", get(agent_card))
        .route("/.well-known/agent.json", get(agent_card))
        .route(JWKS_PATH, get(jwks))
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
    // A signed card names the public URL only, never the request's origin.
    let signing = state
        .signer
        .as_ref()
        .zip(CardSigner::card_base(&state.config));
    let base = match &signing {
        Some((_, base)) => base.clone(),
        None => base_url(&state, headers, uri),
    };
    let snapshot = state.snapshot().await?;
    // Built (and signed) once per listing and set of live keys: the signatures are in the
    // bytes the ETag hashes.
    let key = match &signing {
        Some((signer, _)) => signer.cache_key(&base),
        None => base.clone(),
    };
    let card = snapshot.document(Document::Card, &key, |entrypoints| {
        let card = manifest::AgentCard::build(&state.config, &base, entrypoints);
        match &signing {
            Some((signer, _)) => signer.sign(&card).map_err(|err| {
                tracing::error!(error = %err, "the agent card did not serialize");
                ApiError::internal()
            }),
            None => to_json(&card),
        }
    })?;
    Ok(cached(headers, JSON, &card))
}

/// The public keys of the card's signatures; 404 when cards are not signed.
async fn jwks(State(state): State<Discovery>, request: Request) -> Response {
    use axum::response::IntoResponse;
    match &state.signer {
        Some(signer) => cached(request.headers(), JSON, &signer.jwks()),
        None => StatusCode::NOT_FOUND.into_response(),
    }
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
