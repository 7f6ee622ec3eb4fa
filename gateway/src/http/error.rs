//! The one error type of handlers: a status and the profile's body
//! `{"error":{"code","message"?,"issues"?}}`. 5xx bodies never carry internal details.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use protocol::{ErrorBody, ErrorCode, ErrorEnvelope};
use serde_json::Value;
use store::StoreError;

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: ErrorCode,
    pub message: Option<String>,
    pub issues: Option<Value>,
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: Some(message.into()),
            issues: None,
            retry_after: None,
        }
    }

    pub fn bad_request(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub fn invalid_input(issues: Value) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            code: ErrorCode::InvalidInput,
            message: None,
            issues: Some(issues),
            retry_after: None,
        }
    }

    /// A missing task and another owner's task answer the same.
    pub fn task_not_found(task_id: &str) -> Self {
        ApiError::new(
            StatusCode::NOT_FOUND,
            ErrorCode::TaskNotFound,
            format!(
                "Task {} not found",
                serde_json::Value::String(task_id.to_owned())
            ),
        )
    }

    pub fn not_found() -> Self {
        ApiError::new(StatusCode::NOT_FOUND, ErrorCode::NotFound, "Not found")
    }

    pub fn unavailable() -> Self {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::ServiceUnavailable,
            "The task store is unavailable; retry shortly",
        )
        .retry_after(1)
    }

    /// No worker has been listed since the gateway started: nothing can be admitted yet.
    pub fn no_workers_yet() -> Self {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::ServiceUnavailable,
            "No worker has registered yet; retry shortly",
        )
        .retry_after(1)
    }

    pub fn internal() -> Self {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::InternalError,
            "Internal error",
        )
    }

    pub fn retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::Capacity { max } => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::TaskCapacityExhausted,
                format!("A2A task capacity ({max}) is exhausted by active tasks"),
            )
            .retry_after(1),
            err @ StoreError::OwnerCapacity { .. } => ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                ErrorCode::OwnerCapacityExhausted,
                err.to_string(),
            )
            .retry_after(1),
            err @ StoreError::AddressCapacity { .. } => ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                ErrorCode::AddressCapacityExhausted,
                err.to_string(),
            )
            .retry_after(1),
            StoreError::Unavailable(detail) => {
                tracing::warn!(error = %detail, "task store unavailable");
                ApiError::unavailable()
            }
            StoreError::Duplicate(_) => ApiError::new(
                StatusCode::CONFLICT,
                ErrorCode::InvalidState,
                "A task with this id already exists",
            ),
            StoreError::Corrupt(detail) | StoreError::Incompatible(detail) => {
                tracing::error!(error = %detail, "task store returned unreadable data");
                ApiError::internal()
            }
        }
    }
}

/// A JSON response with upstream's content type.
pub fn json_response(status: StatusCode, body: &impl serde::Serialize) -> Response {
    match serde_json::to_vec(body) {
        Ok(bytes) => {
            let mut response = (status, bytes).into_response();
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json; charset=utf-8"),
            );
            response
        }
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorEnvelope {
            error: ErrorBody {
                code: self.code,
                message: self.message,
                issues: self.issues,
            },
        };
        let mut response = json_response(self.status, &body);
        // The code travels with the response, for middleware that treats codes differently
        // (the idempotency layer never records `payment_in_progress`).
        response.extensions_mut().insert(self.code);
        if let Some(seconds) = self.retry_after
            && let Ok(value) = HeaderValue::from_str(&seconds.to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        response
    }
}
