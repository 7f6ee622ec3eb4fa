//! The gateway: the Lucid HTTP profile and the official A2A v1.0 bindings over the task
//! cluster, holding no state of its own. Three layers, each using only the ones above it (the
//! plumbing reads the settings, [`config`], for the public URL and the listen address):
//!
//! **HTTP plumbing**, about HTTP rather than either protocol:
//! - [`http`]: the request's and the public origin, each protocol's endpoint URLs, cached
//!   documents (ETag, `304`), SSE keep-alive; the client address key of rate limits and of
//!   `MAX_LIVE_PER_ADDRESS` ([`http::client_address`], behind trusted proxies from the chain
//!   [`http::forwarded`] reads), `x-request-id` values
//!   ([`http::request_id`]), HTTP server spans and metrics ([`http::observe`]);
//! - [`error`]: [`error::ApiError`], an HTTP status with the profile's error body: the core's
//!   error type, which the A2A adapter maps to the spec's codes;
//! - [`extract`]: JSON and `Task-Access-Token` extractors whose rejections are `ApiError`s
//!   (the A2A adapter reads the same token header).
//!
//! **Core**, the task service both protocols call:
//! - [`config`]: settings, each a flag and an environment variable;
//! - [`state`]: what handlers share ([`state::AppState`]): the store, the worker registry, settings;
//! - [`catalog`]: the cached view of the worker registry and the documents built from it;
//! - [`recent`]: entrypoints listed recently, admitted through a gap in the registry;
//! - [`prices`]: one view of each entrypoint's terms across workers, and a route's price;
//! - [`members`]: the callers `--member-tokens-file` lists, who see and run private
//!   entrypoints;
//! - [`admit`]: admission shared by task creation, invoke, stream and A2A messages;
//! - [`pay`]: the payment gate of priced routes (x402, MPP, SIWX): challenge, credential,
//!   durable admission;
//! - [`watch`]: following a run through the store, its events in order, then its end;
//! - [`store_memory`]: new tasks refused while the store is near its memory limit;
//! - [`ratelimit`]: rate limits of task creation (middleware; it reads the A2A caller's token
//!   and answers in either protocol's error shape, so it sits beside the adapters it fronts).
//!
//! **Protocol adapters**, which never import each other (`grep -rn "crate::lucid"
//! gateway/src/a2a` and `grep -rn "crate::a2a" gateway/src/routes` are empty):
//! - [`routes`]: the Lucid A2A HTTP profile, one module per resource (health, card,
//!   entrypoints, tasks, invoke/stream);
//! - [`a2a`]: the A2A v1.0 JSON-RPC and HTTP+JSON bindings under `{base}/a2a`.
//!
//! [`console`]: the live operator console (`{base}/console`, only with an operator token),
//! reading aggregates through the core's state.
//!
//! `embedded` (feature `embedded`, default): the single-process mode (in-memory store and an
//! in-process worker).
//!
//! [`host`]: the gateway process (what the binary runs), and embedded mode hosting a program's
//! own entrypoints.
//!
//! [`app`] builds the router, merging both adapters' routers; tests drive it without a socket.

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
/// cluster mode, so that every gateway shares them; see [`ratelimit`]).
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
