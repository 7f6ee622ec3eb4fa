//! The Lucid A2A HTTP profile's adapter: one module per resource, each exposing `router()`.
//! It calls the core (admission, payment gate, watch, catalog) and the HTTP plumbing
//! ([`crate::http`]), never the A2A adapter: [`crate::app`] merges both.

pub mod card;
pub mod health;
pub mod invoke;
pub mod tasks;

use axum::Router;
use axum::response::IntoResponse;

use crate::core::state::AppState;
use crate::http::error::ApiError;

/// `state` is for the routes that take a smaller state of their own (discovery).
pub fn router(state: &AppState) -> Router<AppState> {
    Router::new()
        .merge(health::router())
        .merge(card::router(state))
        .merge(tasks::router())
        .merge(invoke::router())
}

/// A method a known path does not serve: `405 method_not_allowed`; axum adds the `Allow`
/// header (the methods the path does serve) to whatever this answers.
pub async fn method_not_allowed(method: axum::http::Method) -> impl IntoResponse {
    ApiError::new(
        axum::http::StatusCode::METHOD_NOT_ALLOWED,
        protocol::ErrorCode::MethodNotAllowed,
        format!("{method} is not allowed on this path; see the Allow header"),
    )
}

/// Unknown routes: `404 {"error":{"code":"not_found","message":"Not found"}}`.
pub async fn not_found() -> impl IntoResponse {
    ApiError::not_found()
}
