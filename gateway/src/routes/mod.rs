//! One module per resource; each exposes `router()`.

pub mod card;
pub mod health;
pub mod invoke;
pub mod tasks;

use axum::Router;
use axum::response::IntoResponse;

use crate::error::ApiError;
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .merge(health::router())
        .merge(card::router())
        .merge(tasks::router())
        .merge(invoke::router())
}

/// Unknown routes: `404 {"error":{"code":"not_found","message":"Not found"}}`.
pub async fn not_found() -> impl IntoResponse {
    ApiError::not_found()
}
