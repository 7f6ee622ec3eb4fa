//! The owned asynchronous tasks of the Lucid profile:
//!
//! - `POST /tasks`: admit a task (`{taskId, accessToken, status}`);
//! - `GET /tasks`: the caller's tasks, filtered and paged;
//! - `GET /tasks/{taskId}`: one task;
//! - `POST /tasks/{taskId}/cancel`: the one unfenced transition, `running -> cancelled`;
//! - `GET /tasks/{taskId}/subscribe`: the task's events as SSE, from a snapshot onward.
//!
//! Every read is guarded by `Task-Access-Token`; another owner's task answers exactly like a
//! missing one. Methods a route does not serve answer `405 method_not_allowed` with `Allow`
//! (upstream answers `404`; a published contract says what each path accepts).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use axum::Router;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{OriginalUri, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::StreamExt;
use protocol::token::AccessToken;
use protocol::{
    ErrorCode, SendMessageRequest, TaskEvent, TaskEventData, TaskEventKind, TaskStatus,
};
use serde::Serialize;
use serde_json::Value;
use store::{
    CasOutcome, Durability, EventStream, ListQuery, MAX_LIST_LIMIT, Rejection, StoredEvent,
    StoredTask, Subscription, Transition,
};
use telemetry::metrics;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::core::admit;
use crate::core::create::Admit;
use crate::core::pay::{self, receipt::Receipt};
use crate::core::state::AppState;
use crate::http::client_address::Source;
use crate::http::error::{ApiError, json_response};
use crate::http::extract::{JsonBody, OptionalTaskAccess, TaskAccess};
use crate::lucid::method_not_allowed;

/// A subscription ends after this long even if the task is still running (upstream's safety
/// timeout); the client subscribes again.
pub const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(5 * 60);

const LAST_EVENT_ID: &str = "last-event-id";

pub fn router() -> Router<AppState> {
    Router::new()
        .route(
            "/tasks",
            post(create).get(list).fallback(method_not_allowed),
        )
        .route("/tasks/{task_id}", get(read).fallback(method_not_allowed))
        .route(
            "/tasks/{task_id}/cancel",
            post(cancel).fallback(method_not_allowed),
        )
        .route(
            "/tasks/{task_id}/subscribe",
            get(subscribe).fallback(method_not_allowed),
        )
}

/// `POST /tasks` success body, fields in upstream's order.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Created<'a> {
    task_id: &'a str,
    access_token: &'a str,
    status: TaskStatus,
}

/// `"name"` as JSON writes it, for messages like `Skill "x" not found`.
fn quoted(text: &str) -> String {
    Value::String(text.to_owned()).to_string()
}

fn skill_not_found(skill: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        ErrorCode::SkillNotFound,
        format!("Skill {} not found", quoted(skill)),
    )
}

fn not_running(status: StatusCode, task_id: &str) -> ApiError {
    ApiError::new(
        status,
        ErrorCode::InvalidState,
        format!("Task {} is not running", quoted(task_id)),
    )
}

async fn create(
    State(state): State<AppState>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    OptionalTaskAccess(token): OptionalTaskAccess,
    Source(source): Source,
    JsonBody(request): JsonBody<SendMessageRequest>,
) -> Result<Response, ApiError> {
    let Some(entrypoint) =
        admit::entrypoint(&state, state.viewer(&headers), &request.skill_id).await?
    else {
        return Err(skill_not_found(&request.skill_id));
    };
    admit::refuse_paused(&entrypoint)?;
    let input = request.message.content.to_input();
    admit::check_input(&state, &entrypoint, &input)?;

    // Signed in (SIWX) for an auth-only entrypoint, or entitled to a priced one: no payment.
    let signed_in = match pay::siwx::sign_in(state.pay_context(), &entrypoint, &headers, &uri).await
    {
        Ok(signed_in) => signed_in.is_some(),
        Err(answer) => return Ok(*answer),
    };
    let price =
        crate::core::prices::price_of(&entrypoint, pay::Priced::Task).filter(|_| !signed_in);
    let token =
        if let Some(price) = price {
            // Checked before anything touches a payment: a paid task on a store that forgets it
            // on restart could lose a settled payment's capability.
            if state.store.durability() == Durability::Process {
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    ErrorCode::DurableTaskStoreRequired,
                    "Paid tasks require a durable task store",
                ));
            }
            // A paid task's capability must be known to the caller before it pays.
            let Some(token) = token else {
                return Err(ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    ErrorCode::TaskAccessRequired,
                    "Task-Access-Token must contain 20 to 256 characters",
                ));
            };
            let payment =
                match pay::check_priced(state.pay_context(), &entrypoint, price, &headers, &uri)
                    .await
                {
                    Ok(payment) => payment,
                    Err(answer) => return Ok(*answer),
                };
            let paid = create_paid(
                &state,
                &entrypoint.key,
                token,
                request,
                input,
                source,
                payment,
            );
            return Ok(paid.await);
        } else {
            token.unwrap_or_else(AccessToken::generate)
        };
    let task = admit::create(
        &state,
        Admit {
            owner: token.owner_hash(),
            entrypoint: &entrypoint.key,
            input,
            context_id: request.context_id,
            metadata: request.metadata,
            max_attempts: state.config.max_attempts,
            retention: None,
            source,
            private_owner: false,
        },
    )
    .await?;
    tracing::info!(task_id = %task.task_id, entrypoint = %entrypoint.key, "task created");
    Ok(json_response(
        StatusCode::OK,
        &Created {
            task_id: &task.task_id,
            access_token: token.expose(),
            status: task.status,
        },
    ))
}

/// A paid task through the payment gate. Once the payment settled, the answer is the task's
/// capability with its receipt, whatever happened to the task after (upstream's rule).
async fn create_paid(
    state: &AppState,
    entrypoint: &str,
    token: AccessToken,
    request: SendMessageRequest,
    input: Value,
    source: Option<String>,
    payment: pay::Payment<'_>,
) -> Response {
    let admitted = pay::admission::admit_paid(
        state.pay_context(),
        payment,
        Admit {
            owner: token.owner_hash(),
            entrypoint,
            input,
            context_id: request.context_id,
            metadata: request.metadata,
            max_attempts: state.config.max_attempts,
            retention: None,
            source,
            private_owner: false,
        },
    )
    .await;
    match admitted {
        Ok(paid) => {
            tracing::info!(task_id = %paid.task_id, %entrypoint, status = %paid.status.as_str(), "paid task created");
            let mut response = json_response(
                StatusCode::OK,
                &Created {
                    task_id: &paid.task_id,
                    access_token: token.expose(),
                    status: paid.status,
                },
            );
            paid.receipt.attach(&mut response);
            response
        }
        Err(pay::admission::Refused::Answer(response)) => response,
        Err(pay::admission::Refused::Unconfirmed { task_id, receipt }) => {
            let mut response = json_response(
                StatusCode::SERVICE_UNAVAILABLE,
                &serde_json::json!({
                    "error": {
                        "code": ErrorCode::TaskTerminalizationFailed,
                        "message": "The task was paid for, but its state could not be confirmed; read it with its token",
                    },
                    "taskId": task_id,
                    "accessToken": token.expose(),
                }),
            );
            receipt.attach(&mut response);
            response
        }
    }
}

fn invalid_request(message: &str) -> ApiError {
    ApiError::bad_request(ErrorCode::InvalidRequest, message)
}

/// `contextId`, `status` (comma-separated), `limit` (0..=1000, default 50), `offset`. Empty
/// values count as absent, as upstream's `get(...) || default` does; the first occurrence of
/// a repeated parameter wins, as `URLSearchParams.get` does.
fn list_query(pairs: &[(String, String)]) -> Result<ListQuery, ApiError> {
    let param = |name: &str| {
        pairs
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
            .filter(|value| !value.is_empty())
    };
    let statuses = match param("status") {
        None => Vec::new(),
        Some(text) => text
            .split(',')
            .map(|status| status.trim().parse::<TaskStatus>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| invalid_request("status contains an unsupported task state"))?,
    };
    let limit = match param("limit") {
        None => None,
        Some(text) => Some(
            text.trim()
                .parse::<usize>()
                .ok()
                .filter(|limit| *limit <= MAX_LIST_LIMIT)
                .ok_or_else(|| {
                    invalid_request(&format!(
                        "limit must be an integer from 0 to {MAX_LIST_LIMIT}"
                    ))
                })?,
        ),
    };
    let offset = match param("offset") {
        None => 0,
        Some(text) => parse_offset(text.trim())
            .ok_or_else(|| invalid_request("offset must be a non-negative integer"))?,
    };
    Ok(ListQuery {
        context_id: param("contextId").map(str::to_owned),
        statuses,
        limit,
        offset,
    })
}

/// A non-negative integer of any size, as upstream takes it: one past `usize` skips every task
/// (an empty page) rather than failing a request the document allows.
fn parse_offset(text: &str) -> Option<usize> {
    match text.parse::<usize>() {
        Ok(offset) => Some(offset),
        Err(err) if *err.kind() == std::num::IntErrorKind::PosOverflow => Some(usize::MAX),
        Err(_) => None,
    }
}

async fn list(
    State(state): State<AppState>,
    TaskAccess(token): TaskAccess,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(pairs) = query.map_err(|_| invalid_request("Invalid query string"))?;
    let query = list_query(&pairs)?;
    let page = state.store.list(&token.owner_hash(), &query).await?;
    Ok(json_response(StatusCode::OK, &page))
}

/// The caller's task with what the store keeps beside it (the invocation, a receipt); a
/// missing task and another owner's answer the same `404`.
async fn owned_record(
    state: &AppState,
    token: &AccessToken,
    task_id: &str,
) -> Result<StoredTask, ApiError> {
    match state.store.get(task_id).await? {
        Some(stored) if stored.owner == token.owner_hash() => Ok(stored),
        _ => Err(ApiError::task_not_found(task_id)),
    }
}

/// The `{taskId}` segment; one that does not decode (bad percent-encoding) names no task.
fn task_id(path: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    path.map(|Path(task_id)| task_id)
        .map_err(|_| ApiError::not_found())
}

/// `GET /tasks/{taskId}`'s body: the task, and, once its handler asked for a retry, the attempt
/// number and the last retried failure (`attempt`, `lastError`). A task never retried reads
/// byte for byte as upstream's.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TaskRead<'a> {
    #[serde(flatten)]
    task: &'a protocol::Task,
    #[serde(skip_serializing_if = "Option::is_none")]
    attempt: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_error: Option<&'a protocol::TaskError>,
}

impl<'a> TaskRead<'a> {
    fn of(record: &'a StoredTask) -> Self {
        let retried = record.retries > 0;
        TaskRead {
            task: &record.task,
            attempt: retried.then_some(record.attempt),
            last_error: record.last_error.as_deref().filter(|_| retried),
        }
    }
}

async fn read(
    State(state): State<AppState>,
    TaskAccess(token): TaskAccess,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let task_id = task_id(path)?;
    let record = owned_record(&state, &token, &task_id).await?;
    let mut response = json_response(StatusCode::OK, &TaskRead::of(&record));
    // A paid task hands its receipt to its owner again (the creation answer may be lost).
    if let Some(receipt) = record.receipt.as_deref().and_then(Receipt::from_stored) {
        receipt.attach(&mut response);
    }
    Ok(response)
}

async fn cancel(
    State(state): State<AppState>,
    TaskAccess(token): TaskAccess,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let task_id = task_id(path)?;
    let record = owned_record(&state, &token, &task_id).await?;
    if record.task.status != TaskStatus::Running {
        return Err(not_running(StatusCode::BAD_REQUEST, &task_id));
    }
    match state
        .store
        .compare_and_set(
            &task_id,
            &[TaskStatus::Running],
            Transition::cancelled(),
            None,
        )
        .await?
    {
        CasOutcome::Applied(task) => {
            tracing::info!(task_id = %task.task_id, "task cancelled");
            metrics::task_finished(&record.invocation.entrypoint, &task);
            Ok(json_response(StatusCode::OK, &task))
        }
        // Between the read and the write it reached another terminal status.
        CasOutcome::Rejected {
            reason: Rejection::Status | Rejection::Fenced,
            ..
        } => Err(not_running(StatusCode::CONFLICT, &task_id)),
        // Purged in between (retention): gone, like any missing task.
        CasOutcome::Rejected {
            reason: Rejection::NotFound,
            ..
        } => Err(ApiError::task_not_found(&task_id)),
    }
}

async fn subscribe(
    State(state): State<AppState>,
    TaskAccess(token): TaskAccess,
    path: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let task_id = task_id(path)?;
    // An extension: upstream sends no `id:` lines, so only a client that learned sequence
    // numbers elsewhere sends `Last-Event-ID`; anything unparsable is ignored.
    let after = headers
        .get(LAST_EVENT_ID)
        .and_then(|value| value.to_str().ok())
        .and_then(|text| text.trim().parse::<u64>().ok());
    let Some(subscription) = state
        .store
        .subscribe(&task_id, &token.owner_hash(), after)
        .await?
    else {
        return Err(ApiError::task_not_found(&task_id));
    };
    let relay = Relay::new(subscription, after, state.shutdown.clone());
    let stream = futures::stream::unfold(relay, |mut relay| async move {
        let event = relay.next().await?;
        Some((Ok::<Event, Infallible>(sse_event(&event)), relay))
    });
    let mut response = Sse::new(stream)
        .keep_alive(crate::http::sse::keep_alive())
        .into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, no-transform"),
    );
    Ok(response)
}

/// `event: <kind>` + `data: <json>`, no `id:` (upstream's task SSE has none).
fn sse_event(event: &TaskEvent) -> Event {
    let data = serde_json::to_string(&event.data).unwrap_or_else(|_| "{}".to_owned());
    Event::default().event(event.kind.as_str()).data(data)
}

fn is_terminal(event: &TaskEvent) -> bool {
    event.data.status.is_some_and(TaskStatus::is_terminal)
}

/// A stored event as one of the three task events; other events (progress, stream output)
/// are not part of the task SSE. The data is parsed and re-serialized, so its field order is
/// the profile's whatever the store kept.
fn task_event(stored: &StoredEvent) -> Option<TaskEvent> {
    let kind = TaskEventKind::parse(&stored.event)?;
    match serde_json::from_value::<TaskEventData>(stored.data.clone()) {
        Ok(data) => Some(TaskEvent { kind, data }),
        Err(error) => {
            tracing::warn!(seq = stored.seq, event = %stored.event, %error, "unreadable task event skipped");
            None
        }
    }
}

/// The events a subscriber gets before the live ones.
///
/// Without `after`: the snapshot (`statusUpdate`, plus `resultUpdate`/`error` when terminal).
/// With `after` (resuming): the task events logged since `after` when the log still holds all
/// of them; otherwise the snapshot, which says where the task stands now.
fn opening_events(subscription: &Subscription, after: Option<u64>) -> VecDeque<TaskEvent> {
    let snapshot = || TaskEvent::snapshot(&subscription.snapshot).into();
    let Some(after) = after else {
        return snapshot();
    };
    if after >= subscription.snapshot_seq {
        return VecDeque::new();
    }
    let replay = &subscription.replay;
    let complete = replay.first().is_some_and(|first| first.seq == after + 1)
        && replay
            .last()
            .is_some_and(|last| last.seq == subscription.snapshot_seq);
    if complete {
        replay.iter().filter_map(task_event).collect()
    } else {
        snapshot()
    }
}

/// Relays one subscription: opening events, then live task events, deduplicating consecutive
/// repeats, until a terminal event, the safety timeout, shutdown, or the end of the store's
/// stream. Dropping it (the client went away) drops the subscription.
struct Relay {
    pending: VecDeque<TaskEvent>,
    /// Set once a terminal event is queued: nothing follows it.
    finished: bool,
    events: EventStream,
    last: Option<TaskEvent>,
    deadline: Instant,
    shutdown: CancellationToken,
}

impl Relay {
    fn new(subscription: Subscription, after: Option<u64>, shutdown: CancellationToken) -> Self {
        let pending = opening_events(&subscription, after);
        Relay {
            pending,
            finished: subscription.snapshot.status.is_terminal(),
            events: subscription.events,
            last: None,
            deadline: Instant::now() + SUBSCRIBE_TIMEOUT,
            shutdown,
        }
    }

    async fn next(&mut self) -> Option<TaskEvent> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                if self.last.as_ref() == Some(&event) {
                    continue;
                }
                self.last = Some(event.clone());
                return Some(event);
            }
            if self.finished {
                return None;
            }
            let stored = tokio::select! {
                biased;
                () = self.shutdown.cancelled() => return None,
                () = tokio::time::sleep_until(self.deadline) => return None,
                next = self.events.next() => next?,
            };
            if let Some(event) = task_event(&stored) {
                self.finished = is_terminal(&event);
                self.pending.push_back(event);
            }
        }
    }
}
