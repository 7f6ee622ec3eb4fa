//! `GET /health` (the process is up) and `GET /ready` (the task store answers).

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use serde_json::json;

use crate::core::state::AppState;
use crate::http::error::{ApiError, json_response};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/health", get(health))
        .route("/ready", get(ready))
}

async fn health(State(state): State<AppState>) -> Response {
    json_response(
        StatusCode::OK,
        &json!({"ok": true, "version": state.config.agent_version}),
    )
}

async fn ready(State(state): State<AppState>) -> Result<Response, ApiError> {
    let live = state.store.live_count().await?;
    Ok(json_response(
        StatusCode::OK,
        &json!({"status": "ready", "liveTasks": live}),
    ))
}
