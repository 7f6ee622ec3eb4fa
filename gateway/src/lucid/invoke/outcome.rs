//! How a finished run reads on the wire: the invoke result envelope, or an error with the
//! status that fits its code.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use protocol::{ErrorCode, TaskError, TaskResult, TaskStatus};
use serde::Serialize;
use serde_json::Value;

use crate::core::watch::Terminal;
use crate::http::error::{ApiError, json_response};

/// `200 {"run_id","status":"succeeded","output","usage"?,"model"?}`, upstream's field order.
#[derive(Serialize)]
struct Succeeded<'a> {
    run_id: &'a str,
    status: &'static str,
    output: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<&'a str>,
}

pub fn succeeded(run_id: &str, result: &TaskResult) -> Response {
    json_response(
        StatusCode::OK,
        &Succeeded {
            run_id,
            status: "succeeded",
            output: &result.output,
            usage: result.usage.as_ref(),
            model: result.model.as_deref(),
        },
    )
}

/// The wire code and status of a run's error code. The profile's own codes are kept (a
/// handler's `invalid_input` is the caller's fault: 400); any other code is a handler failure,
/// `500 internal_error`, as upstream maps a thrown error.
pub fn error_code(code: &str) -> (StatusCode, ErrorCode) {
    match code.parse::<ErrorCode>().ok() {
        Some(code @ (ErrorCode::InvalidInput | ErrorCode::InvalidRequest)) => {
            (StatusCode::BAD_REQUEST, code)
        }
        Some(ErrorCode::TaskTimeout) => (StatusCode::GATEWAY_TIMEOUT, ErrorCode::TaskTimeout),
        // The worker running it was lost and the run was not retried: the upstream (the
        // worker) failed, not this gateway, and the caller may retry if it knows it is safe.
        Some(ErrorCode::TaskAttemptsExhausted) => {
            (StatusCode::BAD_GATEWAY, ErrorCode::TaskAttemptsExhausted)
        }
        Some(ErrorCode::ServiceUnavailable) => (
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::ServiceUnavailable,
        ),
        Some(ErrorCode::NotImplemented) => (StatusCode::NOT_IMPLEMENTED, ErrorCode::NotImplemented),
        Some(code) => (StatusCode::INTERNAL_SERVER_ERROR, code),
        None => (StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::InternalError),
    }
}

/// The error of a failed run as an [`ApiError`]. The message is the handler's own (handlers
/// write it for callers, as upstream returns a thrown error's message); `invalid_input` details
/// become its `issues`.
pub fn failed(error: Option<&TaskError>) -> ApiError {
    let Some(error) = error else {
        return ApiError::internal();
    };
    let (status, code) = error_code(&error.code);
    let issues = match code {
        ErrorCode::InvalidInput => error.details.clone(),
        _ => None,
    };
    ApiError {
        status,
        code,
        message: Some(error.message.clone()),
        issues,
        retry_after: None,
    }
}

/// A run cancelled by someone other than this request.
pub fn cancelled() -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        ErrorCode::InternalError,
        "The run was cancelled before it finished",
    )
}

/// The response of a finished invoke.
pub fn invoke_response(run_id: &str, terminal: &Terminal) -> Response {
    match (terminal.status, &terminal.result) {
        (TaskStatus::Completed, Some(result)) => succeeded(run_id, result),
        (TaskStatus::Completed, None) => {
            tracing::error!(%run_id, "a completed run has no result");
            ApiError::internal().into_response()
        }
        (TaskStatus::Failed, _) => failed(terminal.error.as_ref()).into_response(),
        (TaskStatus::Cancelled | TaskStatus::Running, _) => cancelled().into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_statuses() {
        for (code, status) in [
            (ErrorCode::InvalidInput, StatusCode::BAD_REQUEST),
            (ErrorCode::TaskAttemptsExhausted, StatusCode::BAD_GATEWAY),
            (ErrorCode::TaskTimeout, StatusCode::GATEWAY_TIMEOUT),
            (ErrorCode::ResultTooLarge, StatusCode::INTERNAL_SERVER_ERROR),
        ] {
            assert_eq!(error_code(code.as_str()), (status, code));
        }
        // A handler's own code is a handler failure.
        assert_eq!(
            error_code("boom"),
            (StatusCode::INTERNAL_SERVER_ERROR, ErrorCode::InternalError)
        );
    }
}
