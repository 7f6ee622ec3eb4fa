//! The A2A operations over the task runtime, the same for both bindings: each takes the
//! caller and the request as the `a2a` crate types it, and returns a result or an
//! [`A2aError`]. Tasks are the runtime's tasks: created through the same admission (and, for a
//! priced skill, the same payment gate) as the Lucid profile's `POST /tasks`, owned by the
//! caller's bearer token, run by workers, recovered when a worker dies.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use a2a::{
    CancelTaskRequest, GetTaskRequest, ListTasksRequest, ListTasksResponse, Message, Role,
    SendMessageRequest, SendMessageResponse, StreamResponse, SubscribeToTaskRequest, Task,
    TaskState, TaskStatus, TaskStatusUpdateEvent,
};
use axum::http::{HeaderMap, Uri};
use axum::response::Response;
use base64::Engine;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use protocol::TaskStatus as RuntimeStatus;
use protocol::token::OwnerHash;
use store::registry::EntrypointInfo;
use store::{
    CasOutcome, Durability, ListQuery, MAX_LIST_LIMIT, Phase, Rejection, Resumed, StoredTask,
    Transition,
};
use telemetry::metrics;

use super::error::A2aError;
use super::mapping;
use crate::admit::{self, Admit};
use crate::pay;
use crate::pay::receipt::Receipt;
use crate::state::AppState;
use crate::watch::{RunEvent, Watch};

/// Media types a message's parts may declare (the card's `defaultInputModes`); a part with
/// none is taken as what its content is.
pub const INPUT_MODES: &[&str] = &["text/plain", "application/json"];
/// What skills answer with (the card's `defaultOutputModes`).
pub const OUTPUT_MODES: &[&str] = &["application/json", "text/plain"];

/// `ListTasks` page size when the request gives none, and the largest accepted.
const DEFAULT_PAGE_SIZE: usize = 50;
const MAX_PAGE_SIZE: usize = 100;

/// The longest id (task, context, message) a request may carry.
const MAX_ID_LEN: usize = 256;

/// Who is calling, and the request's headers and URI (the payment gate reads them).
pub struct Caller<'a> {
    pub state: &'a AppState,
    pub owner: OwnerHash,
    pub headers: &'a HeaderMap,
    pub uri: &'a Uri,
    /// The client address key of a request that may admit a task
    /// ([`crate::client_address::Source`]); `None` where no task is created.
    pub source: Option<String>,
}

/// Why a request gets no A2A answer: an A2A error, or the payment gate's own HTTP answer
/// (a `402` challenge, a `401` sign-in offer), sent as it is on either binding.
pub enum Refusal {
    A2a(A2aError),
    Http(Response),
}

impl From<A2aError> for Refusal {
    fn from(err: A2aError) -> Self {
        Refusal::A2a(err)
    }
}

/// An answer with the payment receipt it must carry, if it was paid for.
pub struct Reply<T> {
    pub value: T,
    pub receipt: Option<Receipt>,
}

/// `SendMessage`: admits a task for the message and, unless `returnImmediately`, waits for it
/// to finish (at most `--invoke-timeout-ms`; then the task as it stands).
pub async fn send(
    caller: &Caller<'_>,
    request: SendMessageRequest,
) -> Result<Reply<SendMessageResponse>, Refusal> {
    let immediately = request
        .configuration
        .as_ref()
        .and_then(|configuration| configuration.return_immediately)
        .unwrap_or(false);
    let history_length = history_length(
        request
            .configuration
            .as_ref()
            .and_then(|configuration| configuration.history_length),
    )?;
    let started = start(caller, request).await?;
    let state = caller.state;
    let task_id = started.task_id.clone();
    if !immediately {
        let wait = Duration::from_millis(state.config.invoke_timeout_ms);
        let mut watch = started.watch;
        let finished = tokio::time::timeout(wait, async {
            loop {
                if let RunEvent::Finished(_) | RunEvent::InputRequired { .. } = watch.next().await?
                {
                    return Ok::<(), crate::error::ApiError>(());
                }
            }
        })
        .await;
        if let Ok(Err(err)) = finished {
            return Err(Refusal::A2a(err.into()));
        }
    }
    let stored = read_owned(state, &caller.owner, &task_id).await?;
    let value = match mapping::reply_of(&stored) {
        Some(message) => SendMessageResponse::Message(message),
        None => SendMessageResponse::Task(mapping::task_of(&stored, history_length)),
    };
    Ok(Reply {
        value,
        receipt: started.receipt,
    })
}

/// `SendStreamingMessage`: admits a task for the message and streams it: the task first, then
/// its status and artifact updates, closing after its final status.
pub async fn stream(
    caller: &Caller<'_>,
    request: SendMessageRequest,
) -> Result<Reply<BoxStream<'static, StreamResponse>>, Refusal> {
    let started = start(caller, request).await?;
    let first = read_owned(caller.state, &caller.owner, &started.task_id).await?;
    let events = bounded(
        caller.state,
        follow(
            caller.state.store.clone(),
            caller.owner.clone(),
            first,
            started.watch,
            true,
        ),
    );
    Ok(Reply {
        value: events,
        receipt: started.receipt,
    })
}

/// `SubscribeToTask`: the task as it stands, then its updates until its final status (through
/// any number of `input-required` turns). A task already finished has nothing to follow:
/// `UnsupportedOperationError`, as the spec says.
pub async fn subscribe(
    caller: &Caller<'_>,
    request: SubscribeToTaskRequest,
) -> Result<BoxStream<'static, StreamResponse>, A2aError> {
    check_id("id", &request.id)?;
    let stored = read_owned(caller.state, &caller.owner, &request.id).await?;
    if stored.task.status.is_terminal() {
        return Err(A2aError::unsupported(format!(
            "Task {} is in a terminal state; read it with GetTask",
            request.id
        )));
    }
    // From the snapshot on: the task event comes first, the updates after it.
    let watch = Watch::open_after(
        caller.state.store.clone(),
        &request.id,
        &caller.owner,
        stored.seq,
    )
    .await?;
    Ok(bounded(
        caller.state,
        follow(
            caller.state.store.clone(),
            caller.owner.clone(),
            stored,
            watch,
            false,
        ),
    ))
}

/// `events` until the gateway shuts down or `--max-stream-ms` passes, whichever comes first:
/// then the stream ends cleanly (the SSE body closes), and a client that still wants the task
/// resubscribes or reads it with `GetTask`.
fn bounded(
    state: &AppState,
    events: BoxStream<'static, StreamResponse>,
) -> BoxStream<'static, StreamResponse> {
    let shutdown = state.shutdown.clone();
    let limit = Duration::from_millis(state.config.max_stream_ms);
    let end = async move {
        tokio::select! {
            () = shutdown.cancelled() => tracing::debug!("an A2A stream ends: the gateway shuts down"),
            () = tokio::time::sleep(limit) => tracing::debug!(limit_ms = limit.as_millis(), "an A2A stream ends: its maximum duration passed"),
        }
    };
    events.take_until(end).boxed()
}

/// `GetTask`.
pub async fn get(caller: &Caller<'_>, request: GetTaskRequest) -> Result<Task, A2aError> {
    check_id("id", &request.id)?;
    let history_length = history_length(request.history_length)?;
    let stored = read_owned(caller.state, &caller.owner, &request.id).await?;
    Ok(mapping::task_of(&stored, history_length))
}

/// `CancelTask`: the one unfenced transition, `running -> cancelled`; a finished task is
/// `TaskNotCancelableError`.
pub async fn cancel(caller: &Caller<'_>, request: CancelTaskRequest) -> Result<Task, A2aError> {
    check_id("id", &request.id)?;
    let state = caller.state;
    let mut stored = read_owned(state, &caller.owner, &request.id).await?;
    if stored.task.status.is_terminal() {
        return Err(A2aError::not_cancelable(&request.id));
    }
    let cancelled = match state
        .store
        .compare_and_set(
            &request.id,
            &[RuntimeStatus::Running],
            Transition::cancelled(),
            None,
        )
        .await?
    {
        CasOutcome::Applied(task) => {
            tracing::info!(task_id = %task.task_id, "task cancelled over A2A");
            metrics::task_finished(&stored.invocation.entrypoint, &task);
            task
        }
        CasOutcome::Rejected {
            reason: Rejection::Status | Rejection::Fenced,
            ..
        } => return Err(A2aError::not_cancelable(&request.id)),
        CasOutcome::Rejected {
            reason: Rejection::NotFound,
            ..
        } => return Err(A2aError::task_not_found(&request.id)),
    };
    // The record read before, as the cancel left it: no second read.
    stored.task = cancelled;
    stored.phase = Phase::Terminal;
    stored.input_request = None;
    Ok(mapping::task_of(&stored, None))
}

/// `ListTasks`: the caller's tasks, most recently updated first, filtered by context, state
/// and update time, in pages of `pageSize` (1 to 100, default 50) with opaque page tokens.
///
/// The store lists an owner's tasks by creation and by runtime status, which is coarser than
/// A2A's states (`failed` is FAILED or REJECTED; `running` is SUBMITTED, WORKING or
/// INPUT_REQUIRED) and ordered otherwise. So the candidates are read whole from the store (its
/// wire view, a thousand per round trip, at most [`LIST_SCAN_MAX`]), filtered and ordered here,
/// and only the page's tasks are read in full; `totalSize` counts what matched. A page token is
/// the position in that order, so tasks updated between two calls can move across pages.
pub async fn list(
    caller: &Caller<'_>,
    request: ListTasksRequest,
) -> Result<ListTasksResponse, A2aError> {
    let page_size = match request.page_size {
        None | Some(0) => DEFAULT_PAGE_SIZE,
        Some(size) if (1..=MAX_PAGE_SIZE as i32).contains(&size) => size as usize,
        Some(size) => {
            return Err(A2aError::invalid_params(format!(
                "pageSize must be between 1 and {MAX_PAGE_SIZE}, not {size}"
            )));
        }
    };
    let history_length = history_length(request.history_length)?;
    let offset = match request.page_token.as_deref() {
        None | Some("") => 0,
        Some(token) => page_offset(token)?,
    };
    if let Some(context_id) = &request.context_id {
        check_id("contextId", context_id)?;
    }
    let wanted = request
        .status
        .filter(|state| *state != TaskState::Unspecified);
    let statuses = match &wanted {
        None => Vec::new(),
        Some(state) => match runtime_statuses(state.clone()) {
            Some(statuses) => statuses,
            // A state no runtime task is ever in.
            None => return Ok(empty_page(page_size)),
        },
    };
    let store = &caller.state.store;
    let mut candidates = Vec::new();
    loop {
        let page = store
            .list(
                &caller.owner,
                &ListQuery {
                    context_id: request.context_id.clone(),
                    statuses: statuses.clone(),
                    limit: Some(MAX_LIST_LIMIT),
                    offset: candidates.len(),
                },
            )
            .await?;
        let read = page.tasks.len();
        candidates.extend(page.tasks);
        if !page.has_more || read == 0 || candidates.len() >= LIST_SCAN_MAX {
            break;
        }
    }
    let after = request
        .status_timestamp_after
        .map(|time| time.timestamp_millis());
    candidates.retain(|task: &protocol::Task| {
        let rejected = task
            .error
            .as_ref()
            .is_some_and(|error| error.code == mapping::REJECTED);
        let state_ok = match &wanted {
            Some(TaskState::Failed) => !rejected,
            Some(TaskState::Rejected) => rejected,
            _ => true,
        };
        let time_ok =
            after.is_none_or(|after| i64::try_from(task.updated_at.0).unwrap_or(i64::MAX) > after);
        state_ok && time_ok
    });
    // States inside `running` depend on the phase, which only the full record holds.
    let mut records: HashMap<String, StoredTask> = HashMap::new();
    if let Some(state @ (TaskState::Submitted | TaskState::Working | TaskState::InputRequired)) =
        &wanted
    {
        let ids = candidates.iter().map(|task| task.task_id.clone()).collect();
        for stored in read_all(caller, ids).await? {
            if mapping::state_of(stored.task.status, stored.phase) == *state {
                records.insert(stored.task.task_id.clone(), stored);
            }
        }
        candidates.retain(|task| records.contains_key(&task.task_id));
    }
    candidates.sort_by(|a, b| {
        b.updated_at
            .cmp(&a.updated_at)
            .then_with(|| a.task_id.cmp(&b.task_id))
    });
    let total = candidates.len();
    let page_ids: Vec<String> = candidates
        .into_iter()
        .skip(offset)
        .take(page_size)
        .map(|task| task.task_id)
        .collect();
    let missing = page_ids
        .iter()
        .filter(|id| !records.contains_key(*id))
        .cloned()
        .collect::<Vec<_>>();
    for stored in read_all(caller, missing).await? {
        records.insert(stored.task.task_id.clone(), stored);
    }
    let include_artifacts = request.include_artifacts.unwrap_or(false);
    let tasks = page_ids
        .iter()
        .filter_map(|id| records.get(id))
        .map(|stored| {
            let mut task = mapping::task_of(stored, history_length);
            if !include_artifacts {
                task.artifacts = None;
            }
            task
        })
        .collect();
    let next_page_token = if offset + page_size < total {
        page_token(offset + page_size)
    } else {
        String::new()
    };
    Ok(ListTasksResponse {
        tasks,
        next_page_token,
        page_size: page_size as i32,
        total_size: i32::try_from(total).unwrap_or(i32::MAX),
    })
}

/// Record reads one `ListTasks` keeps in flight.
const READS_IN_FLIGHT: usize = 32;

/// The most tasks one `ListTasks` looks through.
pub const LIST_SCAN_MAX: usize = 10_000;

/// The caller's full records of `ids` (gone or foreign ones left out), in their order.
async fn read_all(caller: &Caller<'_>, ids: Vec<String>) -> Result<Vec<StoredTask>, A2aError> {
    let reads = ids.into_iter().map(|task_id| {
        let store = caller.state.store.clone();
        async move { store.get(&task_id).await }
    });
    // A bounded number in flight: a state filter may read every running task of the owner.
    let records: Vec<Option<StoredTask>> = futures::stream::iter(reads)
        .buffered(READS_IN_FLIGHT)
        .try_collect()
        .await?;
    Ok(records
        .into_iter()
        .flatten()
        .filter(|stored| stored.owner == caller.owner)
        .collect())
}

fn empty_page(page_size: usize) -> ListTasksResponse {
    ListTasksResponse {
        tasks: Vec::new(),
        next_page_token: String::new(),
        page_size: page_size as i32,
        total_size: 0,
    }
}

/// The runtime statuses a task in A2A `state` has (`None`: no runtime task is ever in it).
fn runtime_statuses(state: TaskState) -> Option<Vec<RuntimeStatus>> {
    match state {
        TaskState::Submitted | TaskState::Working | TaskState::InputRequired => {
            Some(vec![RuntimeStatus::Running])
        }
        TaskState::Completed => Some(vec![RuntimeStatus::Completed]),
        TaskState::Failed | TaskState::Rejected => Some(vec![RuntimeStatus::Failed]),
        TaskState::Canceled => Some(vec![RuntimeStatus::Cancelled]),
        TaskState::AuthRequired | TaskState::Unspecified => None,
    }
}

/// Page tokens are the offset of the page, encoded so that clients treat them as opaque.
fn page_token(offset: usize) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("o:{offset}"))
}

fn page_offset(token: &str) -> Result<usize, A2aError> {
    let invalid = || A2aError::invalid_params("pageToken is not a token this agent issued");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| invalid())?;
    let text = std::str::from_utf8(&bytes).map_err(|_| invalid())?;
    text.strip_prefix("o:")
        .and_then(|offset| offset.parse().ok())
        .ok_or_else(invalid)
}

/// `historyLength`: absent is everything, negative is invalid.
fn history_length(length: Option<i32>) -> Result<Option<usize>, A2aError> {
    match length {
        None => Ok(None),
        Some(length) => usize::try_from(length)
            .map(Some)
            .map_err(|_| A2aError::invalid_params("historyLength must not be negative")),
    }
}

fn check_id(name: &str, id: &str) -> Result<(), A2aError> {
    if id.is_empty() || id.len() > MAX_ID_LEN {
        return Err(A2aError::invalid_params(format!(
            "{name} must have 1 to {MAX_ID_LEN} characters"
        )));
    }
    Ok(())
}

/// The caller's task `task_id`; another owner's task is not found, exactly like a missing one.
async fn read_owned(
    state: &AppState,
    owner: &OwnerHash,
    task_id: &str,
) -> Result<StoredTask, A2aError> {
    match state.store.get(task_id).await? {
        Some(stored) if &stored.owner == owner => Ok(stored),
        _ => Err(A2aError::task_not_found(task_id)),
    }
}

/// A task admitted for a message, followed from its first event.
struct Started {
    task_id: String,
    watch: Watch,
    receipt: Option<Receipt>,
}

/// Checks a message and admits its task: the skill, the input, the payment.
async fn start(caller: &Caller<'_>, request: SendMessageRequest) -> Result<Started, Refusal> {
    let state = caller.state;
    let message = request.message;
    if let Some(waiting) = check_message(state, caller, &message).await? {
        return resume(caller, waiting, message).await;
    }
    let skills = admit::entrypoints(state).await.map_err(A2aError::from)?;
    let keys: Vec<&str> = skills
        .entrypoints()
        .iter()
        .map(|entrypoint| entrypoint.key.as_str())
        .collect();
    let skill = mapping::skill_of(
        message.metadata.as_ref(),
        state.config.a2a_default_skill.as_deref(),
        &keys,
    )
    .map_err(|err| A2aError::invalid_params(err.to_string()))?;
    let Some(entrypoint) = admit::entrypoint(state, &skill)
        .await
        .map_err(A2aError::from)?
    else {
        return Err(A2aError::invalid_params(format!(
            "Skill {} not found",
            serde_json::Value::String(super::error::truncated(&skill).to_owned())
        ))
        .into());
    };
    let input = input_for(state, &entrypoint, &message)?;
    let context_id = message
        .context_id
        .clone()
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let metadata = mapping::metadata_of(&message, &input);
    let admit = Admit {
        owner: caller.owner.clone(),
        entrypoint: &entrypoint.key,
        input,
        context_id: Some(context_id),
        metadata: Some(metadata),
        max_attempts: state.config.max_attempts,
        retention: None,
        source: caller.source.clone(),
    };
    match gate(caller, &entrypoint).await? {
        None => {
            let (task, subscription) = admit::create_watched(state, admit)
                .await
                .map_err(A2aError::from)?;
            tracing::info!(task_id = %task.task_id, entrypoint = %entrypoint.key, "A2A task created");
            let watch = Watch::with(
                state.store.clone(),
                &task.task_id,
                &caller.owner,
                subscription,
            );
            Ok(Started {
                task_id: task.task_id,
                watch,
                receipt: None,
            })
        }
        Some(payment) => {
            if state.store.durability() == Durability::Process {
                return Err(
                    A2aError::unsupported("Paid tasks require a durable task store").into(),
                );
            }
            let paid = match pay::admission::admit_paid(state, payment, admit).await {
                Ok(paid) => paid,
                Err(pay::admission::Refused::Answer(response)) => {
                    return Err(Refusal::Http(response));
                }
                Err(pay::admission::Refused::Unconfirmed { task_id, receipt }) => {
                    // Settled: the caller keeps the receipt and can read the task later.
                    tracing::warn!(%task_id, "paid A2A task settled but its state is unconfirmed");
                    let watch = Watch::open(state.store.clone(), &task_id, &caller.owner).await;
                    return match watch {
                        Ok(watch) => Ok(Started {
                            task_id,
                            watch,
                            receipt: Some(receipt),
                        }),
                        Err(err) => Err(Refusal::A2a(err.into())),
                    };
                }
            };
            tracing::info!(task_id = %paid.task_id, entrypoint = %entrypoint.key, "paid A2A task created");
            let watch = Watch::open(state.store.clone(), &paid.task_id, &caller.owner)
                .await
                .map_err(A2aError::from)?;
            Ok(Started {
                task_id: paid.task_id,
                watch,
                receipt: Some(paid.receipt),
            })
        }
    }
}

/// The runtime input of `message` for `entrypoint`: its parts of media types the skill takes,
/// mapped ([`mapping::input_of`]) and checked against the skill's input schema. The input, and
/// what the task keeps of the message besides it (its parts when they are not the input's
/// own, its metadata), are each bounded by `MAX_INPUT_BYTES`.
fn input_for(
    state: &AppState,
    entrypoint: &EntrypointInfo,
    message: &Message,
) -> Result<serde_json::Value, A2aError> {
    let modes = input_modes(entrypoint);
    for part in &message.parts {
        if let Some(media_type) = &part.media_type
            && !accepted(modes, media_type)
        {
            return Err(A2aError::content_type(super::error::truncated(media_type)));
        }
    }
    let input =
        mapping::input_of(message).map_err(|err| A2aError::invalid_params(err.to_string()))?;
    admit::check_input(state, entrypoint, &input).map_err(A2aError::from)?;
    admit::check_size(state, "message", &mapping::metadata_of(message, &input))
        .map_err(A2aError::from)?;
    Ok(input)
}

/// A message answering a task that waits for input: the task's own skill runs the next turn
/// with it (a paid task's turns are part of what was paid for).
async fn resume(
    caller: &Caller<'_>,
    waiting: StoredTask,
    message: Message,
) -> Result<Started, Refusal> {
    let state = caller.state;
    let task_id = waiting.task.task_id.clone();
    let skill = waiting.invocation.entrypoint.clone();
    if let Some(named) = message
        .metadata
        .as_ref()
        .and_then(|metadata| metadata.get("skillId"))
        && named.as_str() != Some(skill.as_str())
    {
        return Err(A2aError::invalid_params(format!(
            "Task {task_id} runs skill {}; a follow-up message cannot name another",
            serde_json::Value::String(skill.clone())
        ))
        .into());
    }
    let Some(entrypoint) = admit::entrypoint(state, &skill)
        .await
        .map_err(A2aError::from)?
    else {
        return Err(A2aError::unsupported(format!(
            "Task {task_id}'s skill is not offered any more"
        ))
        .into());
    };
    let input = input_for(state, &entrypoint, &message)?;
    let metadata = mapping::metadata_of(&message, &input);
    match state
        .store
        .resume(&task_id, &caller.owner, input, Some(metadata))
        .await
        .map_err(A2aError::from)?
    {
        Resumed::Queued { seq, .. } => {
            tracing::info!(%task_id, entrypoint = %skill, "A2A task resumed with input");
            let watch = Watch::open_after(state.store.clone(), &task_id, &caller.owner, seq)
                .await
                .map_err(A2aError::from)?;
            Ok(Started {
                task_id,
                watch,
                receipt: None,
            })
        }
        Resumed::NotFound => Err(A2aError::task_not_found(&task_id).into()),
        Resumed::NotWaiting(task) if task.status.is_terminal() => Err(A2aError::unsupported(
            format!("Task {task_id} is in a terminal state and takes no more messages"),
        )
        .into()),
        Resumed::NotWaiting(_) => {
            Err(A2aError::unsupported(format!("Task {task_id} is not waiting for input")).into())
        }
    }
}

/// The payment gate for a skill: signed in with SIWX (free), free, paid so far, or its answer.
async fn gate<'a>(
    caller: &Caller<'a>,
    entrypoint: &EntrypointInfo,
) -> Result<Option<pay::Payment<'a>>, Refusal> {
    let signed_in = pay::siwx::sign_in(caller.state, entrypoint, caller.headers, caller.uri)
        .await
        .map_err(|answer| Refusal::Http(*answer))?;
    if signed_in.is_some() {
        return Ok(None);
    }
    pay::check(
        caller.state,
        entrypoint,
        pay::Priced::Task,
        caller.headers,
        caller.uri,
    )
    .await
    .map_err(|answer| Refusal::Http(*answer))
}

/// What a message must be before it is admitted: from the user, with an id and parts, and,
/// when it names a task, addressed to one of the caller's tasks that waits for input (which it
/// returns: the message resumes it).
async fn check_message(
    state: &AppState,
    caller: &Caller<'_>,
    message: &Message,
) -> Result<Option<StoredTask>, A2aError> {
    check_id("messageId", &message.message_id)?;
    if message.role != Role::User {
        return Err(A2aError::invalid_params(
            "A client's message has role ROLE_USER",
        ));
    }
    if message.parts.is_empty() {
        return Err(A2aError::invalid_params("The message has no parts"));
    }
    if let Some(context_id) = &message.context_id {
        check_id("contextId", context_id)?;
    }
    let Some(task_id) = &message.task_id else {
        return Ok(None);
    };
    check_id("taskId", task_id)?;
    let stored = read_owned(state, &caller.owner, task_id).await?;
    if let Some(context_id) = &message.context_id
        && *context_id != mapping::context_of(&stored)
    {
        return Err(A2aError::invalid_params(format!(
            "contextId does not match task {task_id}'s context"
        )));
    }
    if stored.task.status.is_terminal() {
        return Err(A2aError::unsupported(format!(
            "Task {task_id} is in a terminal state and takes no more messages"
        )));
    }
    if stored.phase != Phase::Waiting {
        return Err(A2aError::unsupported(format!(
            "Task {task_id} is not waiting for input"
        )));
    }
    Ok(Some(stored))
}

/// The media types a skill takes: any for a skill without an input schema (it takes any
/// JSON, and a file part is `{url|bytes, mediaType, filename}`), else text and JSON, which
/// are all its schema can accept.
pub fn input_modes(entrypoint: &EntrypointInfo) -> &'static [&'static str] {
    if crate::catalog::accepts_anything(&entrypoint.input_schema) {
        ANY_INPUT
    } else {
        INPUT_MODES
    }
}

/// The input modes of a skill that takes anything.
pub const ANY_INPUT: &[&str] = &["*/*"];

/// Whether a part's declared media type is one of `modes` (parameters such as `charset`
/// ignored, case-insensitive; `*/*` and `type/*` match as in HTTP).
fn accepted(modes: &[&str], media_type: &str) -> bool {
    let essence = media_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let Some((kind, _)) = essence.split_once('/') else {
        return false;
    };
    modes.iter().any(|mode| {
        *mode == "*/*"
            || *mode == essence
            || mode.strip_suffix("/*").is_some_and(|prefix| prefix == kind)
    })
}

/// A task's stream: the task as first read, then its updates from the watch, closing after
/// the final status update or, with `closes_on_input`, after an `input-required` one (the
/// end of a `SendStreamingMessage` turn; a subscription follows the task through its turns).
fn follow(
    store: Arc<dyn store::TaskStore>,
    owner: OwnerHash,
    first: StoredTask,
    watch: Watch,
    closes_on_input: bool,
) -> BoxStream<'static, StreamResponse> {
    struct Follow {
        store: Arc<dyn store::TaskStore>,
        owner: OwnerHash,
        task_id: String,
        context_id: String,
        watch: Watch,
        streamed: HashSet<String>,
        pending: std::collections::VecDeque<StreamResponse>,
        working_sent: bool,
        /// The last update said `input-required`: a resume says `submitted` again.
        asked: bool,
        done: bool,
    }
    impl Follow {
        /// A worker shows it runs the task (an event of its own): `working`, once per turn.
        /// The runtime publishes nothing when a worker picks a task up, so this is the first
        /// moment a follower can know.
        fn working(&mut self) {
            if !self.working_sent {
                self.working_sent = true;
                self.pending.push_back(status_event(
                    &self.task_id,
                    &self.context_id,
                    TaskState::Working,
                ));
            }
        }
    }
    let task_id = first.task.task_id.clone();
    let context_id = mapping::context_of(&first);
    let working_sent = first.phase == Phase::Active;
    let mut pending = std::collections::VecDeque::new();
    pending.push_back(StreamResponse::Task(mapping::task_of(&first, None)));
    let follow = Follow {
        store,
        owner,
        task_id,
        context_id,
        watch,
        streamed: HashSet::new(),
        pending,
        working_sent,
        asked: first.phase == Phase::Waiting,
        done: first.task.status.is_terminal(),
    };
    futures::stream::unfold(follow, move |mut follow| async move {
        loop {
            if let Some(event) = follow.pending.pop_front() {
                return Some((event, follow));
            }
            if follow.done {
                return None;
            }
            match follow.watch.next().await {
                // Created or resumed: queued for a worker. Only a resume changes what the
                // follower last heard (`input-required`).
                Ok(RunEvent::Running) => {
                    if follow.asked {
                        follow.asked = false;
                        follow.pending.push_back(status_event(
                            &follow.task_id,
                            &follow.context_id,
                            TaskState::Submitted,
                        ));
                    }
                }
                Ok(RunEvent::Progress) => follow.working(),
                Ok(RunEvent::InputRequired { request }) => {
                    follow.working();
                    // The next turn's run starts afresh: it gets its own `working` update.
                    follow.working_sent = false;
                    follow.asked = true;
                    let message =
                        mapping::request_message(&follow.task_id, &follow.context_id, &request);
                    follow
                        .pending
                        .push_back(StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
                            task_id: follow.task_id.clone(),
                            context_id: follow.context_id.clone(),
                            status: TaskStatus {
                                state: TaskState::InputRequired,
                                message: Some(message),
                                timestamp: Some(chrono::Utc::now()),
                            },
                            metadata: None,
                        }));
                    if closes_on_input {
                        follow.done = true;
                    }
                }
                Ok(RunEvent::Stream { kind, data }) => {
                    follow.working();
                    let first = !follow.streamed.contains(&format!("{}-stream", follow.task_id));
                    let event =
                        mapping::artifact_event(&follow.task_id, &follow.context_id, &kind, data, first);
                    follow.streamed.insert(event.artifact.artifact_id.clone());
                    follow.pending.push_back(StreamResponse::ArtifactUpdate(event));
                }
                Ok(RunEvent::Finished(_)) => {
                    follow.done = true;
                    let stored = match follow.store.get(&follow.task_id).await {
                        Ok(Some(stored)) if stored.owner == follow.owner => stored,
                        Ok(_) => return None,
                        Err(err) => {
                            tracing::warn!(task_id = %follow.task_id, error = %err, "could not read a finished A2A task");
                            return None;
                        }
                    };
                    let task = mapping::task_of(&stored, None);
                    // A task that ended by a worker's hand (not cancelled before it ran) worked.
                    if stored.attempt > 0 && stored.task.status != RuntimeStatus::Cancelled {
                        follow.working();
                    }
                    for artifact in task.artifacts.clone().unwrap_or_default() {
                        if !follow.streamed.contains(&artifact.artifact_id) {
                            follow.pending.push_back(StreamResponse::ArtifactUpdate(
                                a2a::TaskArtifactUpdateEvent {
                                    task_id: follow.task_id.clone(),
                                    context_id: follow.context_id.clone(),
                                    artifact,
                                    append: None,
                                    last_chunk: Some(true),
                                    metadata: None,
                                },
                            ));
                        }
                    }
                    follow.pending.push_back(StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
                        task_id: follow.task_id.clone(),
                        context_id: follow.context_id.clone(),
                        status: task.status,
                        metadata: None,
                    }));
                }
                Err(err) => {
                    tracing::warn!(task_id = %follow.task_id, error = ?err.message, "an A2A stream lost its task");
                    return None;
                }
            }
        }
    })
    .boxed()
}

fn status_event(task_id: &str, context_id: &str, state: TaskState) -> StreamResponse {
    StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
        task_id: task_id.to_owned(),
        context_id: context_id.to_owned(),
        status: TaskStatus {
            state,
            message: None,
            timestamp: Some(chrono::Utc::now()),
        },
        metadata: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_tokens_round_trip_and_foreign_ones_are_refused() {
        assert_eq!(page_offset(&page_token(150)).ok(), Some(150));
        for foreign in ["", "abc", "!!!", "bzp4"] {
            assert!(page_offset(foreign).is_err(), "{foreign}");
        }
    }

    #[test]
    fn media_types_ignore_parameters_and_case() {
        assert!(accepted(INPUT_MODES, "text/plain; charset=utf-8"));
        assert!(accepted(INPUT_MODES, "Application/JSON"));
        assert!(!accepted(INPUT_MODES, "application/x-unsupported-tck-type"));
        assert!(!accepted(INPUT_MODES, ""));
        assert!(accepted(ANY_INPUT, "application/x-unsupported-tck-type"));
        assert!(!accepted(ANY_INPUT, "not a media type"));
        assert!(accepted(&["image/*"], "image/png"));
        assert!(!accepted(&["image/*"], "imagex/png"));
    }

    #[test]
    fn states_filter_runtime_statuses() {
        assert_eq!(
            runtime_statuses(TaskState::Working),
            Some(vec![RuntimeStatus::Running])
        );
        assert_eq!(runtime_statuses(TaskState::AuthRequired), None);
    }
}
