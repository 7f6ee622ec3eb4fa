//! The JSON-RPC 2.0 binding: `POST {base}/a2a/jsonrpc`.
//!
//! One request object per call. Whatever a client sends gets a JSON-RPC answer with the
//! spec's code, never a 5xx: unparsable JSON is `-32700`; a batch, a non-object, a wrong
//! `jsonrpc`, a missing or non-string `method`, or an id that is not a string of at most 256
//! characters, an integer or null is `-32600` (answered with id null: such an id is not
//! echoed); an unknown method is `-32601`; params of the wrong shape are `-32602`. Errors are
//! HTTP 200 like any JSON-RPC answer, except authentication (`401` with
//! `WWW-Authenticate: Bearer`) and the payment gate's own answers (`402`), which keep their
//! HTTP meaning. The streaming methods answer `text/event-stream`, each event
//! `data: {"jsonrpc":"2.0","id":…,"result":StreamResponse}`.

use a2a::{JsonRpcId, JsonRpcResponse, methods};
use axum::body::Bytes;
use axum::extract::{OriginalUri, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use futures::StreamExt;
use futures::stream::BoxStream;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::error::{A2aError, truncated};
use super::service::{self, Caller, Refusal, Reply, push_config};
use super::{caller, extended, version, wire};
use crate::core::state::AppState;

/// The longest string id echoed back.
const MAX_ID_LEN: usize = 256;

/// `POST /a2a/jsonrpc`.
pub async fn handle(
    State(state): State<AppState>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    limits: Option<axum::Extension<crate::core::ratelimit::Deferred>>,
    crate::http::client_address::Source(source): crate::http::client_address::Source,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Response {
    let body = match body {
        Ok(body) => body,
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return answer_error(
                JsonRpcId::Null,
                &A2aError::invalid_request("The request body is too large"),
            );
        }
        Err(_) => {
            return answer_error(
                JsonRpcId::Null,
                &A2aError::invalid_request("The request body could not be read"),
            );
        }
    };
    if let Err(err) = A2aError::check_body_type(&headers) {
        return answer_error(JsonRpcId::Null, &err);
    }
    let request: Value = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(_) => return answer_error(JsonRpcId::Null, &A2aError::parse("Invalid JSON")),
    };
    let (id, method, params) = match envelope(request) {
        Ok(parts) => parts,
        Err((id, err)) => return answer_error(id, &err),
    };
    if let Err(err) = version::check(&headers, uri.query()) {
        return answer_error(id, &err);
    }
    if !methods::is_valid(&method) {
        return answer_error(id, &A2aError::method_not_found(&method));
    }
    let owner = match caller::owner(&headers) {
        Ok(owner) => owner,
        Err(err) => return answer_error(id, &err),
    };
    // Fair admission (see `crate::core::ratelimit`): only the methods that create tasks, and push
    // notification configs (stored bytes as a task is).
    if matches!(
        method.as_str(),
        methods::SEND_MESSAGE | methods::SEND_STREAMING_MESSAGE | methods::CREATE_PUSH_CONFIG
    ) && let Some(axum::Extension(limits)) = &limits
        && let Some(limited) = limits.check().await
    {
        return rate_limited(id, &limited);
    }
    let caller = Caller {
        state: &state,
        owner,
        headers: &headers,
        uri: &uri,
        source,
    };
    let mut response = dispatch(&caller, id, &method, params).await;
    super::x402::echo(super::x402::supported(&state, &headers), &mut response);
    response
}

async fn dispatch(caller: &Caller<'_>, id: JsonRpcId, method: &str, params: Value) -> Response {
    match method {
        methods::SEND_MESSAGE => match parse(params) {
            Ok(request) => match service::send(caller, request).await {
                Ok(reply) => answer_reply(id, reply),
                Err(refusal) => answer_refusal(id, refusal),
            },
            Err(err) => answer_error(id, &err),
        },
        methods::SEND_STREAMING_MESSAGE => match parse(params) {
            Ok(request) => match service::stream(caller, request).await {
                Ok(Reply { value, receipt }) => wire::with_receipt(sse(id, value), receipt),
                Err(refusal) => answer_refusal(id, refusal),
            },
            Err(err) => answer_error(id, &err),
        },
        methods::GET_TASK => match parse(params) {
            Ok(request) => answer(id, service::get(caller, request).await),
            Err(err) => answer_error(id, &err),
        },
        methods::LIST_TASKS => match parse(params) {
            Ok(request) => answer(id, service::list(caller, request).await),
            Err(err) => answer_error(id, &err),
        },
        methods::CANCEL_TASK => match parse(params) {
            Ok(request) => answer(id, service::cancel(caller, request).await),
            Err(err) => answer_error(id, &err),
        },
        methods::SUBSCRIBE_TO_TASK => match parse::<a2a::SubscribeToTaskRequest>(params) {
            Ok(request) => match service::subscribe(caller, request).await {
                Ok(events) => sse(id, events),
                Err(err) => answer_error(id, &err),
            },
            Err(err) => answer_error(id, &err),
        },
        methods::GET_EXTENDED_AGENT_CARD => extended_card(caller, id).await,
        methods::CREATE_PUSH_CONFIG
        | methods::GET_PUSH_CONFIG
        | methods::LIST_PUSH_CONFIGS
        | methods::DELETE_PUSH_CONFIG => dispatch_push(caller, id, method, params).await,
        // `methods::is_valid` let only the spec's methods through.
        _ => answer_error(id, &A2aError::method_not_found(method)),
    }
}

/// The caller's extended card ([`super::extended`]), never stored by a cache.
async fn extended_card(caller: &Caller<'_>, id: JsonRpcId) -> Response {
    let base = || extended::request_base(&caller.state.config, caller.headers, caller.uri);
    let card = extended::card_bytes(caller.state, caller.headers, base)
        .await
        .and_then(|card| extended::parsed::<Value>(&card));
    let mut response = answer(id, card);
    extended::no_store(response.headers_mut());
    response
}

/// The push notification config methods.
async fn dispatch_push(
    caller: &Caller<'_>,
    id: JsonRpcId,
    method: &str,
    params: Value,
) -> Response {
    match method {
        methods::CREATE_PUSH_CONFIG => match parse(params) {
            Ok(config) => answer(id, push_config::create(caller, config).await),
            Err(err) => answer_error(id, &err),
        },
        methods::GET_PUSH_CONFIG => match parse(params) {
            Ok(request) => answer(id, push_config::get(caller, request).await),
            Err(err) => answer_error(id, &err),
        },
        methods::LIST_PUSH_CONFIGS => match parse(params) {
            Ok(request) => answer(id, push_config::list(caller, request).await),
            Err(err) => answer_error(id, &err),
        },
        methods::DELETE_PUSH_CONFIG => match parse(params) {
            Ok(request) => answer(id, push_config::delete(caller, request).await),
            Err(err) => answer_error(id, &err),
        },
        _ => answer_error(id, &A2aError::method_not_found(method)),
    }
}

/// Reads the envelope: `(id, method, params)`, or the id to answer with and the error.
fn envelope(request: Value) -> Result<(JsonRpcId, String, Value), (JsonRpcId, A2aError)> {
    let invalid = |id: JsonRpcId, message: &str| (id, A2aError::invalid_request(message));
    let Value::Object(mut request) = request else {
        let message = if request.is_array() {
            "Batch requests are not supported; send one request object"
        } else {
            "A JSON-RPC request is an object"
        };
        return Err(invalid(JsonRpcId::Null, message));
    };
    let id = match request.remove("id") {
        None | Some(Value::Null) => JsonRpcId::Null,
        Some(Value::String(id)) if id.len() <= MAX_ID_LEN => JsonRpcId::String(id),
        Some(Value::Number(number)) => match number.as_i64() {
            Some(id) => JsonRpcId::Number(id),
            None => return Err(invalid(JsonRpcId::Null, "id must be an integer")),
        },
        Some(Value::String(_)) => {
            return Err(invalid(
                JsonRpcId::Null,
                "id must be at most 256 characters",
            ));
        }
        Some(_) => {
            return Err(invalid(
                JsonRpcId::Null,
                "id must be a string, an integer or null",
            ));
        }
    };
    if request.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(invalid(id, "jsonrpc must be \"2.0\""));
    }
    let method = match request.remove("method") {
        Some(Value::String(method)) => method,
        _ => return Err(invalid(id, "method must be a string")),
    };
    let params = match request.remove("params") {
        None | Some(Value::Null) => Value::Object(Default::default()),
        Some(params @ Value::Object(_)) => params,
        Some(_) => {
            return Err((id, A2aError::invalid_params("params must be an object")));
        }
    };
    Ok((id, method, params))
}

/// `params` as the method's request type; a mismatch is `-32602` with serde's reason, cut
/// short (it may quote the offending value).
fn parse<T: DeserializeOwned>(params: Value) -> Result<T, A2aError> {
    serde_json::from_value(super::proto_json::json_names(params)).map_err(|err| {
        let reason = err.to_string();
        A2aError::invalid_params(format!("Invalid params: {}", truncated(&reason)))
    })
}

fn answer<T: serde::Serialize>(id: JsonRpcId, result: Result<T, A2aError>) -> Response {
    match result.and_then(|value| serde_json::to_value(value).map_err(|_| A2aError::internal())) {
        Ok(value) => json(StatusCode::OK, &JsonRpcResponse::success(id, value)),
        Err(err) => answer_error(id, &err),
    }
}

fn answer_reply<T: serde::Serialize>(id: JsonRpcId, reply: Reply<T>) -> Response {
    wire::with_receipt(answer(id, Ok(reply.value)), reply.receipt)
}

fn answer_refusal(id: JsonRpcId, refusal: Refusal) -> Response {
    match refusal {
        Refusal::A2a(err) => answer_error(id, &err),
        Refusal::Http(response) => response,
    }
}

/// Over a rate limit: HTTP `429` with `Retry-After` and the RateLimit fields, and the JSON-RPC
/// error `-32000` (the range JSON-RPC leaves to servers; A2A defines no rate-limit code) with a
/// `google.rpc.ErrorInfo` of reason `RATE_LIMITED`.
fn rate_limited(id: JsonRpcId, limited: &crate::core::ratelimit::Limited) -> Response {
    let info = serde_json::to_value(a2a::errordetails::TypedDetail::error_info(
        "RATE_LIMITED",
        a2a::errordetails::PROTOCOL_DOMAIN,
        None,
    ))
    .unwrap_or(Value::Null);
    let error = a2a::JsonRpcError {
        code: RATE_LIMITED,
        message: limited.message(),
        data: Some(Value::Array(vec![info])),
    };
    let mut response = json(
        StatusCode::TOO_MANY_REQUESTS,
        &JsonRpcResponse::error(id, error),
    );
    limited.headers(&mut response);
    response
}

/// The JSON-RPC error code of a request over a rate limit (see [`rate_limited`]).
pub const RATE_LIMITED: i32 = -32000;

pub fn answer_error(id: JsonRpcId, err: &A2aError) -> Response {
    let status = if err.unauthenticated {
        StatusCode::UNAUTHORIZED
    } else {
        StatusCode::OK
    };
    let mut response = json(status, &JsonRpcResponse::error(id, err.to_jsonrpc()));
    err.challenge(&mut response);
    response
}

fn json(status: StatusCode, body: &JsonRpcResponse) -> Response {
    wire::json(status, body)
}

/// The events of a streaming method as SSE, each a JSON-RPC response of `id`.
fn sse(id: JsonRpcId, events: BoxStream<'static, a2a::StreamResponse>) -> Response {
    wire::sse(
        events
            .map(move |event| {
                serde_json::to_value(event)
                    .map(|result| JsonRpcResponse::success(id.clone(), result))
                    .and_then(|response| serde_json::to_string(&response))
                    .unwrap_or_default()
            })
            .boxed(),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn code_of(request: Value) -> i32 {
        match envelope(request) {
            Ok(_) => 0,
            Err((_, err)) => err.code,
        }
    }

    #[test]
    fn envelopes_are_checked() {
        assert_eq!(code_of(json!([])), -32600);
        assert_eq!(
            code_of(json!([{"jsonrpc": "2.0", "id": 1, "method": "GetTask"}])),
            -32600
        );
        assert_eq!(code_of(json!("x")), -32600);
        assert_eq!(
            code_of(json!({"jsonrpc": "1.0", "id": 1, "method": "GetTask"})),
            -32600
        );
        assert_eq!(
            code_of(json!({"jsonrpc": "2.0", "id": 1, "method": 7})),
            -32600
        );
        assert_eq!(
            code_of(json!({"jsonrpc": "2.0", "id": 1.5, "method": "GetTask"})),
            -32600
        );
        assert_eq!(
            code_of(json!({"jsonrpc": "2.0", "id": 1e300, "method": "GetTask"})),
            -32600
        );
        assert_eq!(
            code_of(json!({"jsonrpc": "2.0", "id": {"a": 1}, "method": "GetTask"})),
            -32600
        );
        assert_eq!(
            code_of(json!({"jsonrpc": "2.0", "id": "i".repeat(300), "method": "GetTask"})),
            -32600
        );
        assert_eq!(
            code_of(json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": [1]})),
            -32602
        );
        assert_eq!(
            code_of(json!({"jsonrpc": "2.0", "id": "a", "method": "GetTask"})),
            0
        );
    }

    #[test]
    fn a_refused_id_is_not_echoed() {
        let huge = "i".repeat(300);
        let refused = envelope(json!({"jsonrpc": "2.0", "id": huge, "method": "GetTask"}));
        assert!(matches!(refused, Err((JsonRpcId::Null, _))));
    }
}
