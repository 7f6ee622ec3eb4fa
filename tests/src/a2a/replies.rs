//! Reading answers: a result or the A2A error of either binding (JSON-RPC `error` or AIP-193),
//! each error's `google.rpc.ErrorInfo` checked; the spec's error codes and their reasons.

use reqwest::StatusCode;
use serde_json::Value;

use super::ensure;
use crate::TestResult;

const ERROR_INFO: &str = "type.googleapis.com/google.rpc.ErrorInfo";

// The spec's error codes.
pub const TASK_NOT_FOUND: i64 = -32001;
pub const TASK_NOT_CANCELABLE: i64 = -32002;
pub const PUSH_NOT_SUPPORTED: i64 = -32003;
pub const UNSUPPORTED_OPERATION: i64 = -32004;
pub const CONTENT_TYPE_NOT_SUPPORTED: i64 = -32005;
pub const EXTENDED_CARD_NOT_CONFIGURED: i64 = -32007;
pub const VERSION_NOT_SUPPORTED: i64 = -32009;
pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;

/// The `ErrorInfo.reason` of an error code (both bindings carry the same).
pub fn reason_of(code: i64) -> &'static str {
    match code {
        TASK_NOT_FOUND => "TASK_NOT_FOUND",
        TASK_NOT_CANCELABLE => "TASK_NOT_CANCELABLE",
        PUSH_NOT_SUPPORTED => "PUSH_NOTIFICATION_NOT_SUPPORTED",
        UNSUPPORTED_OPERATION => "UNSUPPORTED_OPERATION",
        CONTENT_TYPE_NOT_SUPPORTED => "CONTENT_TYPE_NOT_SUPPORTED",
        EXTENDED_CARD_NOT_CONFIGURED => "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
        VERSION_NOT_SUPPORTED => "VERSION_NOT_SUPPORTED",
        PARSE_ERROR => "PARSE_ERROR",
        INVALID_REQUEST => "INVALID_REQUEST",
        METHOD_NOT_FOUND => "METHOD_NOT_FOUND",
        INVALID_PARAMS => "INVALID_PARAMS",
        _ => "INTERNAL_ERROR",
    }
}

/// An A2A error as either binding answered it.
#[derive(Debug)]
pub struct Failure {
    pub http: StatusCode,
    /// The JSON-RPC `error.code` (`None` on HTTP+JSON).
    pub code: Option<i64>,
    /// `ErrorInfo.reason`.
    pub reason: String,
    pub challenge: Option<String>,
    pub body: Value,
}

/// A result, or the A2A error it was refused with.
pub type Reply = Result<Value, Failure>;

/// Checks a `google.rpc.ErrorInfo` detail and returns its reason.
pub fn error_info(detail: &Value) -> TestResult<String> {
    ensure(detail["@type"] == ERROR_INFO, || {
        format!("not an ErrorInfo: {detail}")
    })?;
    ensure(detail["domain"] == "a2a-protocol.org", || {
        format!("ErrorInfo of another domain: {detail}")
    })?;
    Ok(detail["reason"]
        .as_str()
        .ok_or_else(|| format!("ErrorInfo without a reason: {detail}"))?
        .to_owned())
}

pub fn challenge_of(response: &reqwest::Response) -> Option<String> {
    response
        .headers()
        .get(reqwest::header::WWW_AUTHENTICATE)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
}

/// A JSON-RPC answer: the result, or the error with its `ErrorInfo` checked. `id` is the
/// request's id, which a well-formed request's answer echoes.
pub async fn rpc_reply(response: reqwest::Response, id: &Value) -> TestResult<Reply> {
    let http = response.status();
    let challenge = challenge_of(&response);
    let bytes = response.bytes().await?;
    ensure(!http.is_server_error(), || {
        format!(
            "JSON-RPC answered {http}: {}",
            String::from_utf8_lossy(&bytes)
        )
    })?;
    let body: Value = serde_json::from_slice(&bytes).map_err(|err| {
        format!(
            "JSON-RPC answered {http} with a body that is not JSON ({err}): {}",
            String::from_utf8_lossy(&bytes)
        )
    })?;
    ensure(body["jsonrpc"] == "2.0", || {
        format!("not JSON-RPC 2.0: {body}")
    })?;
    ensure(body["id"] == *id, || {
        format!("the answer's id is not {id}: {body}")
    })?;
    if let Some(error) = body.get("error") {
        ensure(body.get("result").is_none(), || {
            format!("both a result and an error: {body}")
        })?;
        let reason = error_info(&error["data"][0])?;
        return Ok(Err(Failure {
            http,
            code: error["code"].as_i64(),
            reason,
            challenge,
            body,
        }));
    }
    ensure(http == StatusCode::OK, || {
        format!("a JSON-RPC result with HTTP {http}: {body}")
    })?;
    Ok(Ok(body["result"].clone()))
}

/// An HTTP+JSON answer: the body, or the AIP-193 error with its `ErrorInfo` checked.
pub async fn rest_reply(response: reqwest::Response) -> TestResult<Reply> {
    let http = response.status();
    let challenge = challenge_of(&response);
    let bytes = response.bytes().await?;
    ensure(!http.is_server_error(), || {
        format!(
            "HTTP+JSON answered {http}: {}",
            String::from_utf8_lossy(&bytes)
        )
    })?;
    let body: Value = serde_json::from_slice(&bytes).map_err(|err| {
        format!(
            "HTTP+JSON answered {http} with a body that is not JSON ({err}): {}",
            String::from_utf8_lossy(&bytes)
        )
    })?;
    if http.is_success() {
        return Ok(Ok(body));
    }
    let error = &body["error"];
    ensure(error["code"] == http.as_u16(), || {
        format!("AIP-193 error.code is not the HTTP status {http}: {body}")
    })?;
    ensure(
        error["status"].is_string() && error["message"].is_string(),
        || format!("an AIP-193 error has a status and a message: {body}"),
    )?;
    let reason = error_info(&error["details"][0])?;
    Ok(Err(Failure {
        http,
        code: None,
        reason,
        challenge,
        body,
    }))
}

/// The result of `reply`, or an error naming `what` was refused and how.
pub fn ok(reply: Reply, what: &str) -> TestResult<Value> {
    reply.map_err(|failure| format!("{what}: refused with {failure:?}").into())
}
