//! The gateway: the Lucid HTTP profile and the official A2A v1.0 bindings over the task
//! cluster, holding no state of its own. Three layers, each a folder, each using only the ones
//! above it (the plumbing imports no other layer; the core decides which origin payments and
//! signed cards are bound to, [`core::origin`]); `tests/layers.rs` checks the imports:
//!
//! **[`http`]: HTTP plumbing**, about HTTP rather than either protocol: the request's and the
//! public URL's origin, each protocol's endpoint URLs, cached documents (ETag, `304`), SSE
//! keep-alive; the client address key of rate limits and of `MAX_LIVE_PER_ADDRESS`
//! ([`http::client_address`], behind trusted proxies from the chain [`http::forwarded`]
//! reads), `x-request-id` values ([`http::request_id`]), HTTP server spans and metrics
//! ([`http::observe`]); [`http::error::ApiError`], an HTTP status with the profile's error body
//! (the core's error type, which the A2A adapter maps to the spec's codes); JSON and
//! `Task-Access-Token` extractors whose rejections are `ApiError`s ([`http::extract`]).
//!
//! **[`core`]: the task service** both protocols call, importing neither adapter nor the
//! console: settings ([`core::config`]), what handlers share ([`core::state::AppState`]), the
//! catalog of entrypoints, their prices and members, admission ([`core::admit`]), the payment
//! gate ([`core::pay`]), following a run ([`core::watch`]), the caller's identity
//! ([`core::caller`]), push notifications' outbox and client ([`core::push`]), rate limits
//! ([`core::ratelimit`], middleware in front of both adapters), the store memory watch, card
//! signing.
//!
//! **Protocol adapters**, which never import each other:
//! - [`lucid`]: the Lucid A2A HTTP profile, one module per resource (health, card,
//!   entrypoints, tasks, invoke/stream);
//! - [`a2a`]: the A2A v1.0 JSON-RPC, HTTP+JSON and gRPC bindings under `{base}/a2a`, and the
//!   delivery of push notifications (an A2A rendering of run events).
//!
//! [`console`]: the live operator console (`{base}/console`, only with an operator token),
//! reading aggregates through the core's state; it imports no adapter.
//!
//! At the root, the composition: `embedded` (feature `embedded`, default): the single-process
//! mode (in-memory store and an in-process worker); [`host`]: the gateway process (what the
//! binary runs; it wires the adapters' background work, such as push delivery, to the core),
//! and embedded mode hosting a program's own entrypoints; [`app`] builds the router, merging
//! both adapters' routers; tests drive it without a socket.

// The A2A handlers' futures (binding, operation, admission, payment gate, store) nest deeper
// than the default limit lets clippy compute their layouts.
#![recursion_limit = "256"]

pub mod a2a;
pub mod console;
pub mod core;
#[cfg(feature = "embedded")]
pub mod embedded;
pub mod host;
pub mod http;
pub mod lucid;

use std::time::Duration;

use axum::Router;
use tower_http::request_id::{PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::timeout::RequestBodyTimeoutLayer;

use crate::core::ratelimit;
use crate::core::state::AppState;
use crate::http::request_id::REQUEST_ID;

/// The whole HTTP surface, mounted under the configured base path, with its layers applied
/// once: request ids, the server span and HTTP metrics (no headers or bodies recorded: they
/// carry tokens), body limit and body read timeout.
pub fn app(state: AppState) -> Router {
    app_with_limiter(
        state,
        std::sync::Arc::new(store::ratelimit::MemoryRateLimiter::default()),
    )
}

/// [`app`] with the rate limits of task creation kept in `limiter` (the store's Redis in
/// cluster mode, so that every gateway shares them; see [`core::ratelimit`]).
pub fn app_with_limiter(
    state: AppState,
    limiter: std::sync::Arc<dyn store::ratelimit::RateLimiter>,
) -> Router {
    let limits = ratelimit::Limits::new(&state.config, limiter);
    let forwarding = std::sync::Arc::new(state.config.forwarding());
    let base = state.config.base_path();
    let limit = state.config.body_limit_bytes;
    let body_timeout = Duration::from_millis(state.config.body_timeout_ms);
    // The two protocol adapters, side by side: neither mounts nor imports the other.
    let mut routes = lucid::router(&state)
        .merge(a2a::router())
        .with_state(state.clone());
    if let Some(console) = console::router(&state) {
        routes = routes.merge(console);
    }
    let mounted = if base.is_empty() {
        routes
    } else {
        // The card advertises `{base}/`; nest alone would only answer `{base}`.
        let landing = Router::new()
            .route(
                &format!("{base}/"),
                axum::routing::get(lucid::card::landing_page),
            )
            .with_state(lucid::card::Discovery::new(&state));
        Router::new().nest(&base, routes).merge(landing)
    };
    mounted
        .fallback(lucid::not_found)
        // A known path with another method (TRACE included): 405 with `Allow`, not 404.
        .method_not_allowed_fallback(lucid::method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            limits,
            ratelimit::admit,
        ))
        // Outside the rate limit: the limit and every request that may admit a task read its
        // client address (`NewTask::source`).
        .layer(axum::middleware::from_fn_with_state(
            forwarding,
            http::client_address::tag,
        ))
        // axum's own limit, not tower-http's: its rejection reaches our extractor, which answers
        // 413 with the profile's JSON body whether or not the client declared a length.
        .layer(axum::extract::DefaultBodyLimit::max(limit))
        .layer(RequestBodyTimeoutLayer::new(body_timeout))
        .layer(PropagateRequestIdLayer::new(REQUEST_ID))
        // Inside the router's layers, so the matched route (`http.route`) is known.
        .layer(axum::middleware::from_fn(http::observe::http_span))
        .layer(SetRequestIdLayer::new(
            REQUEST_ID,
            http::request_id::MakeRequestUuid,
        ))
}
