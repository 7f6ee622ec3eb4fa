//! `GetTask` and `CancelTask`: one task of the caller's, read or cancelled.

use a2a::{CancelTaskRequest, GetTaskRequest, Task};
use protocol::TaskStatus as RuntimeStatus;
use store::{CasOutcome, Phase, Rejection, Transition};
use telemetry::metrics;

use super::{Caller, check_id, history_length, read_owned};
use crate::a2a::error::A2aError;
use crate::a2a::mapping;

/// `GetTask`.
pub async fn get(caller: &Caller<'_>, request: GetTaskRequest) -> Result<Task, A2aError> {
    check_id("id", &request.id)?;
    let history_length = history_length(request.history_length)?;
    let stored = read_owned(caller.state, &caller.owner, &request.id).await?;
    let mut task = mapping::task_of(&stored, history_length);
    super::inband::paid_task(&stored, &mut task);
    Ok(task)
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
