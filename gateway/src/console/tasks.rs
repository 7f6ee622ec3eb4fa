//! The operator's view of one task and the actions on it, behind the operator token or a
//! console session (an action by session with its page's token, [`super::actor`]), each
//! action recorded in the audit log:
//!
//! - `GET /console/api/tasks/{id}`: the task as the store keeps it ([`TaskView`]): status,
//!   phase, attempts, lease, times, error, whether it was paid, its events' kinds. Its input
//!   and result belong to its caller: shown only when the gateway runs with
//!   `--console-show-payloads`.
//! - `POST /console/api/tasks/{id}/cancel`: cancels a running task as its owner could (the
//!   same unfenced transition); `409` when it is not running.
//! - `POST /console/api/tasks/{id}/rerun`: a failed or cancelled task runs again as a NEW task
//!   of the same owner, entrypoint and input, never charged ([`rerun_one`]). The terminal task
//!   is not reopened: its subscribers, push receivers and payer saw its final status.
//!
//! A task id is attacker input: one that could not be a task id answers `404 task_not_found`
//! without a store read, exactly like an unknown one.

use super::actor::Actor;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use protocol::{ErrorCode, TaskStatus};
use serde::Serialize;
use serde_json::Value;
use store::{CasOutcome, Rejection, StoredTask, Transition};
use telemetry::metrics;

use super::operate::audit;
use super::{Caller, Console, answer, json, unauthorized};
use crate::core::create::Admit;
use crate::http::error::ApiError;

/// Events listed in a task view at most (the log of a streaming task can be long).
pub const MAX_EVENTS_SHOWN: usize = 200;
/// The longest task id accepted (ours are UUIDs; A2A callers may choose their own).
const MAX_TASK_ID_LEN: usize = 128;

/// Whether `id` could be a task id: 1 to [`MAX_TASK_ID_LEN`] characters of letters, digits,
/// `-`, `_`, `.` and `:`. Anything else is no task, answered before any store read.
pub fn plausible_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_TASK_ID_LEN
        && id
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || b"-_.:".contains(&byte))
}

/// The task record, or `404 task_not_found` for an implausible or unknown id.
pub(super) async fn record(console: &Console, id: &str) -> Result<StoredTask, ApiError> {
    if !plausible_id(id) {
        return Err(ApiError::task_not_found(id));
    }
    console
        .app
        .store
        .get(id)
        .await?
        .ok_or_else(|| ApiError::task_not_found(id))
}

/// One event of the task's log: its number and kind. The log keeps no time for a worker's
/// events; the first (creation) and a terminal task's last carry the task's own times.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EventRow {
    seq: u64,
    kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    at_ms: Option<u64>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct LeaseView<'a> {
    holder: &'a str,
    epoch: u64,
    expires_at_ms: u64,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ErrorView<'a> {
    code: &'a str,
    message: &'a str,
}

/// `GET /console/api/tasks/{id}`'s body.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TaskView<'a> {
    task_id: &'a str,
    status: TaskStatus,
    phase: &'static str,
    entrypoint: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    context_id: Option<&'a str>,
    created_at_ms: u64,
    updated_at_ms: u64,
    attempt: u32,
    max_attempts: u32,
    retries: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    lease: Option<LeaseView<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    run_deadline_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ErrorView<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_error: Option<ErrorView<'a>>,
    /// A payment's receipt is stored with the task. Only that it is: the receipt names the
    /// payer's settlement, which the settlement view (`/console/api/settlements`) is for.
    paid: bool,
    settlement_held: bool,
    /// A re-run's original task ([`rerun_one`]), when this task is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    rerun_of: Option<&'a str>,
    seq: u64,
    events: Vec<EventRow>,
    events_truncated: bool,
    /// Whether `input` and `result` are shown (`--console-show-payloads`).
    payloads_shown: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    input: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a protocol::TaskResult>,
}

fn error_view(error: &protocol::TaskError) -> ErrorView<'_> {
    ErrorView {
        code: &error.code,
        message: &error.message,
    }
}

/// The metadata key a re-run carries its original's id under.
pub const RERUN_OF: &str = "rerunOf";

fn rerun_of(record: &StoredTask) -> Option<&str> {
    record.invocation.metadata.as_ref()?.get(RERUN_OF)?.as_str()
}

/// The kinds and numbers of the task's events, read as a subscriber replaying from the first
/// would (then the subscription is dropped), at most [`MAX_EVENTS_SHOWN`].
async fn events(console: &Console, record: &StoredTask) -> Result<(Vec<EventRow>, bool), ApiError> {
    let task = &record.task;
    let Some(subscription) = console
        .app
        .store
        .subscribe(&task.task_id, &record.owner, Some(0))
        .await?
    else {
        return Ok((Vec::new(), false));
    };
    let last = subscription.snapshot_seq;
    let terminal = subscription.snapshot.status.is_terminal();
    let truncated = subscription.replay.len() > MAX_EVENTS_SHOWN;
    let rows = subscription
        .replay
        .into_iter()
        .take(MAX_EVENTS_SHOWN)
        .map(|event| EventRow {
            at_ms: if event.seq == 1 {
                Some(task.created_at.as_millis())
            } else if terminal && event.seq == last {
                Some(subscription.snapshot.updated_at.as_millis())
            } else {
                None
            },
            seq: event.seq,
            kind: event.event,
        })
        .collect();
    Ok((rows, truncated))
}

pub async fn view(
    State(console): State<Console>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if console.caller(&headers).await == Caller::Nobody {
        return unauthorized();
    }
    let record = match record(&console, &id).await {
        Ok(record) => record,
        Err(err) => return answer(err),
    };
    let (events, events_truncated) = match events(&console, &record).await {
        Ok(events) => events,
        Err(err) => return answer(err),
    };
    let show = console.app.config.console_show_payloads;
    let task = &record.task;
    let view = TaskView {
        task_id: &task.task_id,
        status: task.status,
        phase: record.phase.as_str(),
        entrypoint: &record.invocation.entrypoint,
        context_id: task.context_id.as_deref(),
        created_at_ms: task.created_at.as_millis(),
        updated_at_ms: task.updated_at.as_millis(),
        attempt: record.attempt,
        max_attempts: record.max_attempts,
        retries: record.retries,
        lease: record.lease.as_ref().map(|lease| LeaseView {
            holder: &lease.holder,
            epoch: lease.epoch,
            expires_at_ms: lease.expires_at_ms,
        }),
        run_deadline_ms: record.run_deadline_ms,
        error: task.error.as_ref().map(error_view),
        last_error: record.last_error.as_deref().map(error_view),
        paid: record.receipt.is_some(),
        settlement_held: record.settlement_held,
        rerun_of: rerun_of(&record),
        seq: record.seq,
        events,
        events_truncated,
        payloads_shown: show,
        input: show.then_some(&record.invocation.input),
        result: task.result.as_ref().filter(|_| show),
    };
    match serde_json::to_value(&view) {
        Ok(value) => json(StatusCode::OK, &value),
        Err(err) => answer(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::InternalError,
            format!("could not encode the task: {err}"),
        )),
    }
}

fn conflict(id: &str, what: &str) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        ErrorCode::InvalidState,
        format!("Task {} {what}", Value::String(id.to_owned())),
    )
}

pub async fn cancel(
    State(console): State<Console>,
    Path(id): Path<String>,
    actor: Actor,
) -> Response {
    let record = match record(&console, &id).await {
        Ok(record) => record,
        Err(err) => return answer(err),
    };
    if record.task.status != TaskStatus::Running {
        return answer(conflict(&id, "is not running"));
    }
    let outcome = console
        .app
        .store
        .compare_and_set(&id, &[TaskStatus::Running], Transition::cancelled(), None)
        .await;
    match outcome {
        Ok(CasOutcome::Applied(task)) => {
            tracing::info!(task_id = %id, "task cancelled by an operator");
            metrics::task_finished(&record.invocation.entrypoint, &task);
            audit(
                &console,
                &actor,
                "cancel",
                &id,
                serde_json::json!({"entrypoint": record.invocation.entrypoint}),
            )
            .await;
            json(StatusCode::OK, &serde_json::json!({"task": task}))
        }
        // It reached another terminal status after the read.
        Ok(CasOutcome::Rejected {
            reason: Rejection::Status | Rejection::Fenced,
            ..
        }) => answer(conflict(&id, "is not running")),
        Ok(CasOutcome::Rejected {
            reason: Rejection::NotFound,
            ..
        }) => answer(ApiError::task_not_found(&id)),
        Err(err) => answer(err.into()),
    }
}

/// Whether a task with this status may run again: a failed or cancelled one. A completed
/// task's caller has its result; a running one is still running.
pub fn rerunnable(status: TaskStatus) -> bool {
    matches!(status, TaskStatus::Failed | TaskStatus::Cancelled)
}

/// Creates a new task that runs `original` again: the same owner (its caller reads it with
/// the same `Task-Access-Token`), entrypoint, input and context, queued for free (no
/// payment gate: the original was admitted, and paid if priced, once). Its metadata records
/// the original under [`RERUN_OF`] (object metadata gains the key; other metadata is kept
/// as it is and the re-run is then recorded only in the audit log). The caller of the new
/// task learns of it from the operator, or from the owner's task list. The original leaves
/// the failed index (the operator dealt with it; its re-run enters it if it fails too).
pub(super) async fn rerun_one(
    console: &Console,
    original: &StoredTask,
) -> Result<protocol::Task, ApiError> {
    let id = &original.task.task_id;
    if !rerunnable(original.task.status) {
        return Err(conflict(id, "is neither failed nor cancelled"));
    }
    let metadata = match original.invocation.metadata.clone() {
        None => Some(serde_json::json!({ RERUN_OF: id })),
        Some(Value::Object(mut map)) => {
            map.insert(RERUN_OF.to_owned(), Value::String(id.clone()));
            Some(Value::Object(map))
        }
        Some(other) => Some(other),
    };
    let invocation = &original.invocation;
    let task = crate::core::admit::create(
        &console.app,
        Admit {
            owner: original.owner.clone(),
            entrypoint: &invocation.entrypoint,
            input: invocation.input.clone(),
            context_id: invocation.context_id.clone(),
            metadata,
            max_attempts: original.max_attempts.max(1),
            retention: None,
            source: None,
            private_owner: false,
        },
    )
    .await?;
    if let Err(err) = console
        .app
        .store
        .forget_failed(&invocation.entrypoint, std::slice::from_ref(id))
        .await
    {
        tracing::warn!(error = %err, task_id = %id, "re-run, but still in the failed index");
    }
    Ok(task)
}

pub async fn rerun(
    State(console): State<Console>,
    Path(id): Path<String>,
    actor: Actor,
) -> Response {
    let original = match record(&console, &id).await {
        Ok(record) => record,
        Err(err) => return answer(err),
    };
    match rerun_one(&console, &original).await {
        Ok(task) => {
            tracing::info!(task_id = %id, new_task_id = %task.task_id, "task re-run by an operator");
            audit(
                &console,
                &actor,
                "rerun",
                &id,
                serde_json::json!({
                    "newTaskId": task.task_id,
                    "entrypoint": original.invocation.entrypoint,
                    "originalPaid": original.receipt.is_some(),
                    "charged": false,
                }),
            )
            .await;
            json(
                StatusCode::CREATED,
                &serde_json::json!({"task": task, "rerunOf": id}),
            )
        }
        Err(err) => answer(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_ids_are_checked_before_any_read() {
        assert!(plausible_id("0b6c2a5e-9d3f-4a53-9a1d-5b1b0f0c8f11"));
        assert!(plausible_id("a2a:ctx_1.2"));
        for bad in [
            "",
            "a/b",
            "a b",
            "é",
            "x\n",
            &"a".repeat(MAX_TASK_ID_LEN + 1),
        ] {
            assert!(!plausible_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn only_failed_and_cancelled_tasks_run_again() {
        assert!(rerunnable(TaskStatus::Failed));
        assert!(rerunnable(TaskStatus::Cancelled));
        assert!(!rerunnable(TaskStatus::Completed));
        assert!(!rerunnable(TaskStatus::Running));
    }
}
