//! The error answers of every route: a status and `{"error": "..."}`. Messages never quote the
//! request body (it may hold a spendable credential).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::ledger::LedgerError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The request is not what the route reads.
    #[error("{0}")]
    BadRequest(String),
    /// The ledger failed: the outcome of a settle is unknown, hence a 5xx.
    #[error("ledger unavailable")]
    Ledger(#[from] LedgerError),
    /// The `http500` fault.
    #[error("injected_failure")]
    Injected,
    /// A settlement task ended without an answer (it panicked).
    #[error("internal error")]
    Internal,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = match &self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Ledger(err) => {
                tracing::error!(error = %err, "ledger failed");
                StatusCode::INTERNAL_SERVER_ERROR
            }
            ApiError::Injected | ApiError::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        };
        (status, axum::Json(json!({"error": self.to_string()}))).into_response()
    }
}

/// Parses a JSON body by hand rather than with axum's `Json`: any content type is read, and a
/// failure is a 400 that names the kind of mistake and its position, never the input.
pub fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8], what: &str) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|err| {
        use serde_json::error::Category;
        let kind = match err.classify() {
            Category::Io => "unreadable",
            Category::Syntax => "malformed JSON",
            Category::Data => "wrong fields or types",
            Category::Eof => "truncated JSON",
        };
        ApiError::BadRequest(format!(
            "body is not {what}: {kind} (line {}, column {})",
            err.line(),
            err.column()
        ))
    })
}
