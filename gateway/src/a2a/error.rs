//! A2A errors and how each binding writes them.
//!
//! One [`A2aError`] carries the spec's code (`-32001` task not found … `-32009` version not
//! supported, and JSON-RPC's own `-32700` … `-32603`) and a message. JSON-RPC writes it as the
//! `error` member with `data` holding a `google.rpc.ErrorInfo` (reason, domain
//! `a2a-protocol.org`); HTTP+JSON writes it as AIP-193 `{"error": {code, status, message,
//! details}}` with the HTTP status of the spec's error table (the A2A TCK's table: not
//! cancelable is `409`, an unsupported content type `415`).

use a2a::errordetails::{PROTOCOL_DOMAIN, TypedDetail};
use a2a::{JsonRpcError, error_code, error_reason};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// A caller over one of its quotas (a live-task bound of its owner or address): the JSON-RPC
/// server-defined range, as the rate limit's refusal (`jsonrpc::RATE_LIMITED`) uses it, since
/// A2A defines no such code; HTTP 429 and `RESOURCE_EXHAUSTED` on the HTTP+JSON binding.
pub const QUOTA_EXCEEDED: i32 = -32000;

/// An A2A error: the spec's code and a message safe to show the caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} ({code})")]
pub struct A2aError {
    pub code: i32,
    pub message: String,
    /// Set for errors of authentication: the HTTP status is `401` on both bindings and the
    /// response carries `WWW-Authenticate: Bearer`.
    pub unauthenticated: bool,
}

impl A2aError {
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        A2aError {
            code,
            message: message.into(),
            unauthenticated: false,
        }
    }

    pub fn task_not_found(task_id: &str) -> Self {
        A2aError::new(
            error_code::TASK_NOT_FOUND,
            format!("Task {} not found", quoted(task_id)),
        )
    }

    /// A push config id the task does not have: TaskNotFound, as a2a-python and a2a-go answer.
    pub fn push_config_not_found(task_id: &str, config_id: &str) -> Self {
        A2aError::new(
            error_code::TASK_NOT_FOUND,
            format!(
                "Task {} has no push notification config {}",
                quoted(truncated(task_id)),
                quoted(truncated(config_id))
            ),
        )
    }

    pub fn not_cancelable(task_id: &str) -> Self {
        A2aError::new(
            error_code::TASK_NOT_CANCELABLE,
            format!(
                "Task {} is in a terminal state and cannot be canceled",
                quoted(task_id)
            ),
        )
    }

    pub fn push_not_supported() -> Self {
        A2aError::new(
            error_code::PUSH_NOTIFICATION_NOT_SUPPORTED,
            "Push notifications are not supported by this agent",
        )
    }

    pub fn unsupported(message: impl Into<String>) -> Self {
        A2aError::new(error_code::UNSUPPORTED_OPERATION, message)
    }

    pub fn content_type(media_type: &str) -> Self {
        A2aError::new(
            error_code::CONTENT_TYPE_NOT_SUPPORTED,
            format!("Media type {} is not supported", quoted(media_type)),
        )
    }

    /// A request body declared as something other than JSON.
    pub fn body_type(content_type: &str) -> Self {
        A2aError::new(
            error_code::CONTENT_TYPE_NOT_SUPPORTED,
            format!(
                "Content-Type {} is not supported; send application/json",
                quoted(truncated(content_type))
            ),
        )
    }

    /// Checks a request's declared body type: absent or JSON (`application/json`,
    /// `application/*+json`) passes.
    pub fn check_body_type(headers: &axum::http::HeaderMap) -> Result<(), A2aError> {
        let Some(value) = headers.get(header::CONTENT_TYPE) else {
            return Ok(());
        };
        let text = value.to_str().unwrap_or("(not text)");
        let essence = text
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        if essence == "application/json"
            || (essence.starts_with("application/") && essence.ends_with("+json"))
        {
            Ok(())
        } else {
            Err(A2aError::body_type(text))
        }
    }

    pub fn extended_card_not_configured() -> Self {
        A2aError::new(
            error_code::EXTENDED_CARD_NOT_CONFIGURED,
            "This agent has no extended agent card",
        )
    }

    pub fn version(requested: &str) -> Self {
        A2aError::new(
            error_code::VERSION_NOT_SUPPORTED,
            format!(
                "A2A-Version {} is not supported; this agent speaks 1.0",
                quoted(requested)
            ),
        )
    }

    pub fn parse(message: impl Into<String>) -> Self {
        A2aError::new(error_code::PARSE_ERROR, message)
    }

    pub fn invalid_request(message: impl Into<String>) -> Self {
        A2aError::new(error_code::INVALID_REQUEST, message)
    }

    pub fn method_not_found(method: &str) -> Self {
        A2aError::new(
            error_code::METHOD_NOT_FOUND,
            format!("Method {} not found", quoted(truncated(method))),
        )
    }

    pub fn invalid_params(message: impl Into<String>) -> Self {
        A2aError::new(error_code::INVALID_PARAMS, message)
    }

    pub fn internal() -> Self {
        A2aError::new(error_code::INTERNAL_ERROR, "Internal error")
    }

    /// The store or the registry is unreachable: the caller may retry.
    pub fn unavailable() -> Self {
        A2aError::new(
            error_code::INTERNAL_ERROR,
            "The task store is unavailable; retry shortly",
        )
    }

    pub fn unauthenticated(message: impl Into<String>) -> Self {
        A2aError {
            code: error_code::INVALID_REQUEST,
            message: message.into(),
            unauthenticated: true,
        }
    }

    /// The spec's reason name (`TASK_NOT_FOUND`, …), or `UNAUTHENTICATED`.
    pub fn reason(&self) -> &'static str {
        if self.unauthenticated {
            "UNAUTHENTICATED"
        } else if self.code == QUOTA_EXCEEDED {
            "QUOTA_EXCEEDED"
        } else {
            error_reason(self.code)
        }
    }

    /// The `google.rpc.ErrorInfo` detail both bindings carry.
    fn error_info(&self) -> Value {
        serde_json::to_value(TypedDetail::error_info(
            self.reason(),
            PROTOCOL_DOMAIN,
            None,
        ))
        .unwrap_or_else(|_| json!({}))
    }

    /// The JSON-RPC `error` member.
    pub fn to_jsonrpc(&self) -> JsonRpcError {
        JsonRpcError {
            code: self.code,
            message: self.message.clone(),
            data: Some(Value::Array(vec![self.error_info()])),
        }
    }

    /// The HTTP status of this error on the HTTP+JSON binding.
    pub fn http_status(&self) -> StatusCode {
        if self.unauthenticated {
            return StatusCode::UNAUTHORIZED;
        }
        match self.code {
            error_code::TASK_NOT_FOUND | error_code::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
            error_code::TASK_NOT_CANCELABLE => StatusCode::CONFLICT,
            error_code::CONTENT_TYPE_NOT_SUPPORTED => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            error_code::INVALID_AGENT_RESPONSE => StatusCode::BAD_GATEWAY,
            error_code::INTERNAL_ERROR => StatusCode::INTERNAL_SERVER_ERROR,
            QUOTA_EXCEEDED => StatusCode::TOO_MANY_REQUESTS,
            _ => StatusCode::BAD_REQUEST,
        }
    }

    /// The gRPC status name of this error: AIP-193's `status` beside the HTTP code, and the
    /// gRPC binding's status code ([`crate::a2a::grpc::status`]).
    pub fn grpc_status(&self) -> &'static str {
        if self.unauthenticated {
            return "UNAUTHENTICATED";
        }
        match self.code {
            error_code::TASK_NOT_FOUND | error_code::METHOD_NOT_FOUND => "NOT_FOUND",
            error_code::TASK_NOT_CANCELABLE
            | error_code::EXTENDED_CARD_NOT_CONFIGURED
            | error_code::EXTENSION_SUPPORT_REQUIRED => "FAILED_PRECONDITION",
            error_code::PUSH_NOTIFICATION_NOT_SUPPORTED
            | error_code::UNSUPPORTED_OPERATION
            | error_code::VERSION_NOT_SUPPORTED => "UNIMPLEMENTED",
            error_code::INVALID_AGENT_RESPONSE | error_code::INTERNAL_ERROR => "INTERNAL",
            QUOTA_EXCEEDED => "RESOURCE_EXHAUSTED",
            _ => "INVALID_ARGUMENT",
        }
    }

    /// The HTTP+JSON binding's error response.
    pub fn to_rest(&self) -> Response {
        let status = self.http_status();
        let body = json!({
            "error": {
                "code": status.as_u16(),
                "status": self.grpc_status(),
                "message": self.message,
                "details": [self.error_info()],
            }
        });
        let mut response = (status, axum::Json(body)).into_response();
        self.challenge(&mut response);
        response
    }

    /// `WWW-Authenticate: Bearer` on authentication errors.
    pub fn challenge(&self, response: &mut Response) {
        if self.unauthenticated {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"a2a\""),
            );
        }
    }
}

impl From<crate::http::error::ApiError> for A2aError {
    /// A Lucid profile error met on a shared path (admission, input validation, the store):
    /// its status decides the A2A code, and its message or issues are kept.
    fn from(err: crate::http::error::ApiError) -> Self {
        let message = match (&err.message, &err.issues) {
            (Some(message), _) => message.clone(),
            (None, Some(issues)) => {
                format!("The input does not match the skill's schema: {issues}")
            }
            (None, None) => err.code.as_str().to_owned(),
        };
        match err.status {
            // Capacity in total (503): the caller may retry later, as with any server-side
            // refusal; never "invalid params".
            StatusCode::SERVICE_UNAVAILABLE => A2aError::new(error_code::INTERNAL_ERROR, message),
            // One of the caller's own quotas (its owner's or address's live tasks).
            StatusCode::TOO_MANY_REQUESTS => A2aError::new(QUOTA_EXCEEDED, message),
            status if status.is_client_error() => A2aError::invalid_params(message),
            _ => A2aError::internal(),
        }
    }
}

impl From<store::StoreError> for A2aError {
    fn from(err: store::StoreError) -> Self {
        tracing::warn!(error = %err, "task store call failed during an A2A request");
        A2aError::unavailable()
    }
}

/// `"text"` as JSON writes it.
fn quoted(text: &str) -> String {
    Value::String(text.to_owned()).to_string()
}

/// At most 64 characters of what a caller sent, so an error never echoes a huge value back.
pub fn truncated(text: &str) -> &str {
    match text.char_indices().nth(64) {
        Some((end, _)) => &text[..end],
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonrpc_errors_carry_error_info() -> Result<(), serde_json::Error> {
        let error = serde_json::to_value(A2aError::task_not_found("t1").to_jsonrpc())?;
        assert_eq!(error["code"], -32001);
        assert_eq!(
            error["data"][0]["@type"],
            "type.googleapis.com/google.rpc.ErrorInfo"
        );
        assert_eq!(error["data"][0]["reason"], "TASK_NOT_FOUND");
        assert_eq!(error["data"][0]["domain"], "a2a-protocol.org");
        Ok(())
    }

    #[test]
    fn rest_statuses_follow_the_spec_table() {
        assert_eq!(
            A2aError::task_not_found("x").http_status(),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            A2aError::not_cancelable("x").http_status(),
            StatusCode::CONFLICT
        );
        assert_eq!(
            A2aError::content_type("a/b").http_status(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE
        );
        assert_eq!(
            A2aError::version("9.0").http_status(),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            A2aError::unauthenticated("no").http_status(),
            StatusCode::UNAUTHORIZED
        );
    }

    #[test]
    fn long_names_are_cut() {
        let long = "m".repeat(10_000);
        assert!(A2aError::method_not_found(&long).message.len() < 100);
    }
}
