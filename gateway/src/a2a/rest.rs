//! The HTTP+JSON binding under `{base}/a2a/v1`:
//!
//! - `POST /message:send`, `POST /message:stream` (SSE, each event a `StreamResponse`);
//! - `GET /tasks/{id}` (`?historyLength=`), `GET /tasks` (`?contextId=&status=&pageSize=
//!   &pageToken=&historyLength=&statusTimestampAfter=&includeArtifacts=`);
//! - `POST /tasks/{id}:cancel`, `GET|POST /tasks/{id}:subscribe` (SSE);
//! - `GET /extendedAgentCard` (a member's, [`super::extended`]; without members
//!   `ExtendedAgentCardNotConfiguredError`);
//! - `POST|GET /tasks/{id}/pushNotificationConfigs` (create: the config is the body; list),
//!   `GET|DELETE /tasks/{id}/pushNotificationConfigs/{configId}`.
//!
//! Errors are AIP-193 bodies with the spec's HTTP status ([`A2aError::to_rest`]); unknown
//! paths under the binding are `404` in the same shape.

use std::collections::HashMap;

use a2a::{
    CancelTaskRequest, GetTaskRequest, ListTasksRequest, SendMessageRequest,
    SubscribeToTaskRequest, TaskState,
};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{OriginalUri, Path, RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use axum::routing::{get, post};
use futures::StreamExt;
use futures::stream::BoxStream;
use serde::de::DeserializeOwned;

use super::error::{A2aError, truncated};
use super::service::{self, Caller, Refusal, Reply, push_config};
use super::{caller, extended, version, wire};
use crate::core::state::AppState;
use crate::http::client_address::Source;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/message:send", post(send))
        .route("/message:stream", post(stream))
        .route("/tasks", get(list))
        .route("/tasks/{task}", get(task_get).post(task_post))
        .route(
            "/tasks/{task}/pushNotificationConfigs",
            get(push_list).post(push_create).fallback(push_method),
        )
        .route(
            "/tasks/{task}/pushNotificationConfigs/{config}",
            get(push_one).delete(push_one).fallback(push_method),
        )
        .route("/extendedAgentCard", get(extended_card))
        .fallback(unknown)
        // The binding's own answer to a method a path does not serve (the gateway's 405 of the
        // Lucid profile is not this binding's), with axum's `Allow` header.
        .method_not_allowed_fallback(unknown)
}

/// The checks every call starts with: the protocol version, then the caller.
fn caller<'a>(
    state: &'a AppState,
    headers: &'a HeaderMap,
    uri: &'a Uri,
) -> Result<Caller<'a>, A2aError> {
    version::check(headers, uri.query())?;
    Ok(Caller {
        state,
        owner: caller::owner(headers)?,
        headers,
        uri,
        source: None,
    })
}

/// What both message routes start with: the caller, then the request in the body.
fn message_call<'a>(
    state: &'a AppState,
    headers: &'a HeaderMap,
    uri: &'a Uri,
    source: Option<String>,
    body: &[u8],
) -> Result<(Caller<'a>, SendMessageRequest), A2aError> {
    let caller = Caller {
        source,
        ..caller(state, headers, uri)?
    };
    Ok((caller, body_of(headers, body)?))
}

async fn send(
    State(state): State<AppState>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    Source(source): Source,
    body: Bytes,
) -> Response {
    let (caller, request) = match message_call(&state, &headers, &uri, source, &body) {
        Ok(call) => call,
        Err(err) => return err.to_rest(),
    };
    let mut response = match service::send(&caller, request).await {
        Ok(reply) => wire::with_receipt(json_ok(&reply.value), reply.receipt),
        Err(refusal) => refused(refusal),
    };
    super::x402::echo(super::x402::supported(&state, &headers), &mut response);
    response
}

async fn stream(
    State(state): State<AppState>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    Source(source): Source,
    body: Bytes,
) -> Response {
    let (caller, request) = match message_call(&state, &headers, &uri, source, &body) {
        Ok(call) => call,
        Err(err) => return err.to_rest(),
    };
    let mut response = match service::stream(&caller, request).await {
        Ok(Reply { value, receipt }) => wire::with_receipt(sse(value), receipt),
        Err(refusal) => refused(refusal),
    };
    super::x402::echo(super::x402::supported(&state, &headers), &mut response);
    response
}

async fn list(
    State(state): State<AppState>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let caller = match caller(&state, &headers, &uri) {
        Ok(caller) => caller,
        Err(err) => return err.to_rest(),
    };
    let request = match list_request(query.as_deref().unwrap_or_default()) {
        Ok(request) => request,
        Err(err) => return err.to_rest(),
    };
    ok_or_error(service::list(&caller, request).await)
}

/// `GET /tasks/{id}` and `GET /tasks/{id}:subscribe`.
async fn task_get(
    State(state): State<AppState>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    Path(task): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let caller = match caller(&state, &headers, &uri) {
        Ok(caller) => caller,
        Err(err) => return err.to_rest(),
    };
    match task.rsplit_once(':') {
        Some((id, "subscribe")) => subscribe(&caller, id).await,
        Some((_, action)) => unknown_action(action),
        None => {
            let query = match pairs(query.as_deref().unwrap_or_default()) {
                Ok(query) => query,
                Err(err) => return err.to_rest(),
            };
            let history_length = match query.get("historyLength").map(|n| int(n, "historyLength")) {
                None => None,
                Some(Ok(n)) => Some(n),
                Some(Err(err)) => return err.to_rest(),
            };
            let request = GetTaskRequest {
                id: task,
                history_length,
                tenant: None,
            };
            ok_or_error(service::get(&caller, request).await)
        }
    }
}

/// `POST /tasks/{id}:cancel` and `POST /tasks/{id}:subscribe`.
async fn task_post(
    State(state): State<AppState>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    Path(task): Path<String>,
    body: Bytes,
) -> Response {
    let caller = match caller(&state, &headers, &uri) {
        Ok(caller) => caller,
        Err(err) => return err.to_rest(),
    };
    match task.rsplit_once(':') {
        Some((id, "cancel")) => {
            // The body may carry metadata; a body that is there must be a JSON object.
            let metadata = if body.iter().all(u8::is_ascii_whitespace) {
                None
            } else {
                match body_of::<CancelBody>(&headers, &body) {
                    Ok(body) => body.metadata,
                    Err(err) => return err.to_rest(),
                }
            };
            let request = CancelTaskRequest {
                id: id.to_owned(),
                metadata,
                tenant: None,
            };
            ok_or_error(service::cancel(&caller, request).await)
        }
        Some((id, "subscribe")) => subscribe(&caller, id).await,
        Some((_, action)) => unknown_action(action),
        None => A2aError::method_not_found("POST /tasks/{id}").to_rest(),
    }
}

#[derive(serde::Deserialize)]
struct CancelBody {
    #[serde(default)]
    metadata: Option<HashMap<String, serde_json::Value>>,
}

async fn subscribe(caller: &Caller<'_>, id: &str) -> Response {
    let request = SubscribeToTaskRequest {
        id: id.to_owned(),
        tenant: None,
    };
    match service::subscribe(caller, request).await {
        Ok(events) => sse(events),
        Err(err) => err.to_rest(),
    }
}

/// `POST /tasks/{id}/pushNotificationConfigs`: the body is the config; the path names its task.
async fn push_create(
    State(state): State<AppState>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    Path(task): Path<String>,
    Source(source): Source,
    body: Bytes,
) -> Response {
    // The caller's address goes with the config: the task's deliveries share slots by it.
    let caller = match caller(&state, &headers, &uri) {
        Ok(caller) => Caller { source, ..caller },
        Err(err) => return err.to_rest(),
    };
    let mut config = match body_of::<a2a::TaskPushNotificationConfig>(&headers, &body) {
        Ok(config) => config,
        Err(err) => return err.to_rest(),
    };
    if config.task_id.is_empty() {
        config.task_id.clone_from(&task);
    } else if config.task_id != task {
        return A2aError::invalid_params("taskId in the body names another task than the path")
            .to_rest();
    }
    ok_or_error(push_config::create(&caller, config).await)
}

/// `GET /tasks/{id}/pushNotificationConfigs` (`?pageSize=&pageToken=`).
async fn push_list(
    State(state): State<AppState>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    Path(task): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let caller = match caller(&state, &headers, &uri) {
        Ok(caller) => caller,
        Err(err) => return err.to_rest(),
    };
    let query = match pairs(query.as_deref().unwrap_or_default()) {
        Ok(query) => query,
        Err(err) => return err.to_rest(),
    };
    let page_size = match query.get("pageSize").map(|n| int(n, "pageSize")) {
        None => None,
        Some(Ok(n)) => Some(n),
        Some(Err(err)) => return err.to_rest(),
    };
    let request = a2a::ListTaskPushNotificationConfigsRequest {
        task_id: task,
        page_size,
        page_token: query.get("pageToken").cloned(),
        tenant: None,
    };
    ok_or_error(push_config::list(&caller, request).await)
}

/// `GET|DELETE /tasks/{id}/pushNotificationConfigs/{configId}`: the config, or `{}` once
/// deleted (idempotent).
async fn push_one(
    State(state): State<AppState>,
    OriginalUri(uri): OriginalUri,
    method: Method,
    headers: HeaderMap,
    Path((task_id, id)): Path<(String, String)>,
) -> Response {
    let caller = match caller(&state, &headers, &uri) {
        Ok(caller) => caller,
        Err(err) => return err.to_rest(),
    };
    if method == Method::DELETE {
        let request = a2a::DeleteTaskPushNotificationConfigRequest {
            task_id,
            id,
            tenant: None,
        };
        let deleted = push_config::delete(&caller, request).await;
        return ok_or_error(deleted.map(|()| serde_json::json!({})));
    }
    let request = a2a::GetTaskPushNotificationConfigRequest {
        task_id,
        id,
        tenant: None,
    };
    ok_or_error(push_config::get(&caller, request).await)
}

/// Another method on a push config path.
async fn push_method(
    State(state): State<AppState>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
) -> Response {
    match caller(&state, &headers, &uri) {
        Ok(_) => A2aError::method_not_found("this method on push notification configs").to_rest(),
        Err(err) => err.to_rest(),
    }
}

/// The caller's extended card ([`super::extended`]).
async fn extended_card(
    State(state): State<AppState>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
) -> Response {
    if let Err(err) = caller(&state, &headers, &uri) {
        return err.to_rest();
    }
    let base = || extended::request_base(&state.config, &headers, &uri);
    match extended::card_bytes(&state, &headers, base).await {
        Ok(card) => extended::response(&card),
        Err(err) => err.to_rest(),
    }
}

async fn unknown() -> Response {
    A2aError::method_not_found("this path").to_rest()
}

fn unknown_action(action: &str) -> Response {
    A2aError::method_not_found(&format!(":{}", truncated(action))).to_rest()
}

/// A JSON body as `T`: declared as another type is `415`, unparsable a parse error (`400`),
/// a wrong shape invalid params.
fn body_of<T: DeserializeOwned>(headers: &HeaderMap, body: &[u8]) -> Result<T, A2aError> {
    A2aError::check_body_type(headers)?;
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|_| A2aError::parse("Invalid JSON"))?;
    if !value.is_object() {
        return Err(A2aError::invalid_request("The body must be a JSON object"));
    }
    serde_json::from_value(super::proto_json::json_names(value)).map_err(|err| {
        let reason = err.to_string();
        A2aError::invalid_params(format!("Invalid request: {}", truncated(&reason)))
    })
}

/// The query string's pairs, percent-decoded; a name given twice is invalid.
fn pairs(query: &str) -> Result<HashMap<String, String>, A2aError> {
    let mut pairs = HashMap::new();
    for (name, value) in form_urlencoded(query)? {
        // ProtoJSON's proto names too: `history_length` is `historyLength`.
        let name = super::proto_json::camel(&name);
        if pairs.insert(name.clone(), value).is_some() {
            return Err(A2aError::invalid_params(format!(
                "Query parameter {} is given twice",
                truncated(&name)
            )));
        }
    }
    Ok(pairs)
}

fn form_urlencoded(query: &str) -> Result<Vec<(String, String)>, A2aError> {
    serde_urlencoded_pairs(query)
        .map_err(|_| A2aError::invalid_params("The query string is not valid"))
}

/// `application/x-www-form-urlencoded` decoding through axum's own `Query` extractor types.
fn serde_urlencoded_pairs(query: &str) -> Result<Vec<(String, String)>, ()> {
    let uri: Uri = format!("/?{query}").parse().map_err(|_| ())?;
    axum::extract::Query::<Vec<(String, String)>>::try_from_uri(&uri)
        .map(|query| query.0)
        .map_err(|_| ())
}

fn int(value: &str, name: &str) -> Result<i32, A2aError> {
    value
        .parse()
        .map_err(|_| A2aError::invalid_params(format!("{name} must be an integer")))
}

fn list_request(query: &str) -> Result<ListTasksRequest, A2aError> {
    let mut query = pairs(query)?;
    let status = match query.remove("status") {
        None => None,
        Some(state) => Some(
            serde_json::from_value::<TaskState>(serde_json::Value::String(state.clone())).map_err(
                |_| {
                    A2aError::invalid_params(format!(
                        "status {} is not a task state",
                        truncated(&state)
                    ))
                },
            )?,
        ),
    };
    let status_timestamp_after = match query.remove("statusTimestampAfter") {
        None => None,
        Some(time) => Some(
            chrono::DateTime::parse_from_rfc3339(&time)
                .map_err(|_| {
                    A2aError::invalid_params("statusTimestampAfter must be an RFC 3339 timestamp")
                })?
                .with_timezone(&chrono::Utc),
        ),
    };
    let include_artifacts = match query.remove("includeArtifacts").as_deref() {
        None => None,
        Some("true") => Some(true),
        Some("false") => Some(false),
        Some(_) => {
            return Err(A2aError::invalid_params(
                "includeArtifacts must be true or false",
            ));
        }
    };
    Ok(ListTasksRequest {
        context_id: query.remove("contextId"),
        status,
        page_size: query
            .remove("pageSize")
            .map(|n| int(&n, "pageSize"))
            .transpose()?,
        page_token: query.remove("pageToken"),
        history_length: query
            .remove("historyLength")
            .map(|n| int(&n, "historyLength"))
            .transpose()?,
        status_timestamp_after,
        include_artifacts,
        tenant: None,
    })
}

fn ok_or_error<T: serde::Serialize>(result: Result<T, A2aError>) -> Response {
    match result {
        Ok(value) => json_ok(&value),
        Err(err) => err.to_rest(),
    }
}

fn refused(refusal: Refusal) -> Response {
    match refusal {
        Refusal::A2a(err) => err.to_rest(),
        Refusal::Http(response) => response,
    }
}

fn json_ok(value: &impl serde::Serialize) -> Response {
    wire::json(StatusCode::OK, value)
}

fn sse(events: BoxStream<'static, a2a::StreamResponse>) -> Response {
    wire::sse(
        events
            .map(|event| serde_json::to_string(&event).unwrap_or_default())
            .boxed(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_queries_are_read_and_checked() -> Result<(), A2aError> {
        let request = list_request(
            "contextId=c%201&status=TASK_STATE_COMPLETED&pageSize=2&includeArtifacts=true",
        )?;
        assert_eq!(request.context_id.as_deref(), Some("c 1"));
        assert_eq!(request.status, Some(TaskState::Completed));
        assert_eq!(request.page_size, Some(2));
        assert_eq!(request.include_artifacts, Some(true));
        for bad in [
            "pageSize=x",
            "status=DONE",
            "includeArtifacts=yes",
            "statusTimestampAfter=yesterday",
            "pageSize=1&pageSize=2",
        ] {
            assert!(list_request(bad).is_err(), "{bad}");
        }
        Ok(())
    }
}
