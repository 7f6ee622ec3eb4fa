//! JSON-RPC calls to an A2A agent: one POST to its endpoint (the configured origin with the
//! card's JSON-RPC path), with the task's headers, and the failures that may pass told apart
//! from those that will not.
//!
//! Retryable ([`HandlerError::transient`]): no connection (refused, reset, dropped mid-answer),
//! `502`, `503`, `504` and `429`, with the agent's `Retry-After` (seconds) when it sends one.
//! Not retryable: any other HTTP error, an answer that is not JSON-RPC, a JSON-RPC error (the
//! agent's code and message in the details; invalid params is the task's `invalid_input`), the
//! run deadline (`task_timeout`).

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{ACCEPT, HeaderMap, RETRY_AFTER};
use serde_json::{Value, json};

use crate::handler::{HandlerError, TaskContext};
use crate::remote::invoke::{
    ATTEMPT_HEADER, DEADLINE_HEADER, IDEMPOTENCY_HEADER, ReadError, TASK_ID_HEADER,
    idempotency_key, read_bounded,
};

/// The protocol version every request names.
const A2A_VERSION: &str = "1.0";

/// Where and how to call one agent.
#[derive(Clone)]
pub struct Endpoint {
    pub client: reqwest::Client,
    /// `{origin}{card's JSON-RPC path}`.
    pub url: String,
    /// The most bytes of one answer (or one SSE event) read.
    pub max_bytes: usize,
}

impl Endpoint {
    /// POSTs `method` with `params`; a success status's response, unread. `sse` asks for an
    /// event stream.
    pub async fn post(
        &self,
        method: &str,
        params: Value,
        ctx: &TaskContext,
        sse: bool,
    ) -> Result<reqwest::Response, HandlerError> {
        let remaining = ctx.remaining();
        let mut request = self
            .client
            .post(&self.url)
            .timeout(remaining)
            .header("A2A-Version", A2A_VERSION)
            .header(TASK_ID_HEADER, &ctx.task_id)
            .header(ATTEMPT_HEADER, ctx.attempt.to_string())
            .header(DEADLINE_HEADER, remaining.as_millis().to_string())
            .header(
                ACCEPT,
                if sse {
                    "text/event-stream"
                } else {
                    "application/json"
                },
            )
            .json(&json!({
                "jsonrpc": "2.0",
                "id": format!("{}-{}", ctx.task_id, ctx.attempt),
                "method": method,
                "params": params,
            }));
        if let Some(key) = idempotency_key(&ctx.task_id) {
            request = request.header(IDEMPOTENCY_HEADER, key);
        }
        let response = request.send().await.map_err(unreachable)?;
        let status = response.status();
        if status.is_success() {
            Ok(response)
        } else {
            Err(status_error(status, response.headers()))
        }
    }

    /// A unary call: its `result`.
    pub async fn call(
        &self,
        method: &str,
        params: Value,
        ctx: &TaskContext,
    ) -> Result<Value, HandlerError> {
        let response = self.post(method, params, ctx, false).await?;
        let body = self.read(response).await?;
        Ok(result_of(&body)?)
    }

    /// The body of `response`, bounded.
    pub async fn read(&self, response: reqwest::Response) -> Result<Vec<u8>, HandlerError> {
        read_bounded(response, self.max_bytes)
            .await
            .map_err(|err| match err {
                ReadError::TooLarge(limit) => too_large(limit),
                ReadError::Http(err) => unreachable(err),
            })
    }
}

pub fn too_large(limit: usize) -> HandlerError {
    HandlerError::new(
        "result_too_large",
        format!("the agent's answer exceeds {limit} bytes"),
    )
}

/// Why a JSON-RPC answer has no `result` (a task's error, see its `From`).
#[derive(Debug, Clone, PartialEq)]
pub enum NoResult {
    NotJson,
    NotJsonRpc,
    /// The answer's `error`.
    Error(Value),
}

impl From<NoResult> for HandlerError {
    fn from(failure: NoResult) -> Self {
        match failure {
            NoResult::NotJson => HandlerError::new(
                "agent_invalid_response",
                "the agent answered with a body that is not JSON",
            ),
            NoResult::NotJsonRpc => HandlerError::new(
                "agent_invalid_response",
                "the agent's answer is not a JSON-RPC response",
            ),
            NoResult::Error(error) => rpc_error(&error),
        }
    }
}

/// The `result` of a JSON-RPC response's bytes.
pub fn result_of(body: &[u8]) -> Result<Value, NoResult> {
    let answer: Value = serde_json::from_slice(body).map_err(|_| NoResult::NotJson)?;
    result_in(answer)
}

/// The `result` of a parsed JSON-RPC response.
pub fn result_in(mut answer: Value) -> Result<Value, NoResult> {
    if let Some(error) = answer.get_mut("error").filter(|error| !error.is_null()) {
        return Err(NoResult::Error(error.take()));
    }
    match answer.get_mut("result").map(Value::take) {
        Some(result) if !result.is_null() => Ok(result),
        _ => Err(NoResult::NotJsonRpc),
    }
}

/// A JSON-RPC error as the task's error.
fn rpc_error(error: &Value) -> HandlerError {
    let code = error["code"].as_i64().unwrap_or_default();
    let message = error["message"].as_str().unwrap_or("no message");
    let ours = match code {
        // Invalid params, content type not supported: the input is what the agent refuses.
        -32602 | -32005 => "invalid_input",
        _ => "agent_error",
    };
    HandlerError::new(
        ours,
        format!("the agent answered JSON-RPC error {code}: {message}"),
    )
    .with_details(json!({"jsonrpc": error}))
}

/// A failed HTTP status as the task's error: retryable for 429 and the gateway errors.
fn status_error(status: StatusCode, headers: &HeaderMap) -> HandlerError {
    let retry_after = headers
        .get(RETRY_AFTER)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    let transient = match status {
        StatusCode::TOO_MANY_REQUESTS => Some("agent_rate_limited"),
        StatusCode::BAD_GATEWAY | StatusCode::SERVICE_UNAVAILABLE | StatusCode::GATEWAY_TIMEOUT => {
            Some("agent_unavailable")
        }
        _ => None,
    };
    let message = format!("the agent answered {status}");
    match (transient, retry_after) {
        (Some(code), Some(after)) => HandlerError::new(code, message).retry_after(after),
        (Some(code), None) => HandlerError::transient(code, message),
        (None, _) => HandlerError::new("agent_error", message),
    }
}

/// A request that got no (whole) answer: the deadline, or a connection that may come back.
pub fn unreachable(err: reqwest::Error) -> HandlerError {
    if err.is_timeout() {
        HandlerError::new(
            "task_timeout",
            "the agent did not answer before the run deadline",
        )
    } else {
        HandlerError::transient(
            "agent_unavailable",
            format!("cannot reach the agent: {err}"),
        )
    }
}

#[cfg(test)]
mod tests {
    use reqwest::header::HeaderValue;

    use super::*;

    #[test]
    fn busy_and_gateway_errors_may_pass_others_do_not() {
        let mut headers = HeaderMap::new();
        let err = status_error(StatusCode::SERVICE_UNAVAILABLE, &headers);
        assert!(err.is_retryable());
        assert_eq!(err.code, "agent_unavailable");
        headers.insert(RETRY_AFTER, HeaderValue::from_static("7"));
        let err = status_error(StatusCode::TOO_MANY_REQUESTS, &headers);
        assert_eq!(
            err.retry.and_then(|retry| retry.after),
            Some(Duration::from_secs(7))
        );
        let err = status_error(StatusCode::NOT_FOUND, &headers);
        assert!(!err.is_retryable());
        assert_eq!(err.code, "agent_error");
    }

    #[test]
    fn json_rpc_errors_and_results() {
        let invalid = result_in(json!({"jsonrpc": "2.0", "id": 1,
            "error": {"code": -32602, "message": "bad"}}))
        .map_err(HandlerError::from);
        assert!(matches!(invalid, Err(err) if err.code == "invalid_input" && !err.is_retryable()));
        let other = result_in(json!({"error": {"code": -32001, "message": "gone"}}))
            .map_err(HandlerError::from);
        assert!(matches!(other, Err(err) if err.code == "agent_error"
            && err.message.contains("-32001") && err.message.contains("gone")));
        assert_eq!(
            result_in(json!({"result": {"task": {}}})),
            Ok(json!({"task": {}}))
        );
        assert_eq!(result_of(b"<html>"), Err(NoResult::NotJson));
        assert_eq!(
            result_in(json!({"jsonrpc": "2.0"})),
            Err(NoResult::NotJsonRpc)
        );
    }
}
