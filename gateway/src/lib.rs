//! The gateway: the Lucid HTTP profile over the task cluster, holding no state of its own.
//!
//! - [`admit`]: admission shared by task creation, invoke and stream;
//! - [`catalog`]: the cached view of the worker registry and the documents built from it;
//! - [`client_address`]: the client address key of rate limits and of `MAX_LIVE_PER_ADDRESS`;
//! - [`config`]: settings, each a flag and an environment variable;
//! - [`recent`]: entrypoints listed recently, admitted through a gap in the registry;
//! - [`request_id`]: `x-request-id` values (random UUIDs without a system call each);
//! - [`state`]: what handlers share ([`state::AppState`]): the store, the worker registry, settings;
//! - [`error`]: [`error::ApiError`], the profile's error body with the right status;
//! - [`extract`]: JSON and `Task-Access-Token` extractors whose rejections are `ApiError`s;
//! - [`routes`]: one module per resource (health, card, entrypoints, tasks, invoke/stream);
//! - [`observe`]: HTTP server spans and metrics (OpenTelemetry semantic conventions);
//! - [`store_memory`]: new tasks refused while the store is near its memory limit;
//! - [`pay`]: the payment gate of priced routes (x402): challenge, credential, durable admission;
//! - `embedded` (feature `embedded`, default): the single-process mode (in-memory store and an
//!   in-process worker).
//!
//! [`app`] builds the router; tests drive it without a socket.

pub mod a2a;
pub mod admit;
pub mod catalog;
pub mod client_address;
pub mod config;
#[cfg(feature = "embedded")]
pub mod embedded;
pub mod error;
pub mod extract;
pub mod http;
pub mod observe;
pub mod pay;
pub mod prices;
pub mod ratelimit;
pub mod recent;
pub mod request_id;
pub mod routes;
pub mod state;
pub mod store_memory;
pub mod watch;

use std::time::Duration;

use axum::Router;
use axum::http::HeaderName;
use tower_http::request_id::{PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::timeout::RequestBodyTimeoutLayer;

use crate::state::AppState;

pub(crate) const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

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
    let trust_forwarded_for = state.config.trust_forwarded_for;
    let base = state.config.base_path();
    let limit = state.config.body_limit_bytes;
    let body_timeout = Duration::from_millis(state.config.body_timeout_ms);
    // The two protocol adapters, side by side: neither mounts nor imports the other.
    let routes = routes::router(&state)
        .merge(a2a::router())
        .with_state(state.clone());
    let mounted = if base.is_empty() {
        routes
    } else {
        // The card advertises `{base}/`; nest alone would only answer `{base}`.
        let landing = Router::new()
            .route(
                &format!("{base}/"),
                axum::routing::get(routes::card::landing_page),
            )
            .with_state(routes::card::Discovery::new(&state));
        Router::new().nest(&base, routes).merge(landing)
    };
    mounted
        .fallback(routes::not_found)
        .layer(axum::middleware::from_fn_with_state(
            limits,
            ratelimit::admit,
        ))
        // Outside the rate limit: every request that may admit a task carries its client
        // address (`NewTask::source`).
        .layer(axum::middleware::from_fn_with_state(
            trust_forwarded_for,
            client_address::tag,
        ))
        // axum's own limit, not tower-http's: its rejection reaches our extractor, which answers
        // 413 with the profile's JSON body whether or not the client declared a length.
        .layer(axum::extract::DefaultBodyLimit::max(limit))
        .layer(RequestBodyTimeoutLayer::new(body_timeout))
        .layer(PropagateRequestIdLayer::new(REQUEST_ID))
        // Inside the router's layers, so the matched route (`http.route`) is known.
        .layer(axum::middleware::from_fn(observe::http_span))
        .layer(SetRequestIdLayer::new(
            REQUEST_ID,
            request_id::MakeRequestUuid,
        ))
}
