//! The HTTP surface: x402's facilitator API ([`x402`]) and the dev controls ([`control`]).

pub mod control;
pub mod x402;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};

use crate::state::AppState;

/// Largest request body read: a facilitator request is a few KiB at most.
const BODY_LIMIT_BYTES: usize = 64 * 1024;

pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/verify", post(x402::verify))
        .route("/settle", post(x402::settle))
        .route("/settlement", post(x402::settlement))
        .route("/supported", get(x402::supported))
        .route("/health", get(control::health))
        .route("/balances/{address}", get(control::balance))
        .route(
            "/control/faults",
            get(control::get_faults).post(control::set_faults),
        )
        .route("/control/stats", get(control::stats))
        .route("/control/fund", post(control::fund))
        .layer(DefaultBodyLimit::max(BODY_LIMIT_BYTES))
        .with_state(state)
}
