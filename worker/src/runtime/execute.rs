//! One run: activate the claim, run the handler under its deadline and cancellation, write
//! the outcome with a fenced compare-and-set. A run stopped from outside (cancelled, lease
//! lost, abandoned at shutdown) writes nothing: the task is someone else's now.

use std::sync::{Arc, Mutex, PoisonError};

use shared::protocol::{TaskError, TaskResult, TaskStatus};
use shared::store::{CasOutcome, Claim, Lease, Rejection, Transition};
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;

use super::Shared;
use super::active::Run;
use crate::emitter::Emitter;
use crate::handler::{HandlerError, TaskContext};

pub async fn run(shared: Arc<Shared>, claim: Claim, _slot: OwnedSemaphorePermit) {
    let task_id = claim.lease.task_id.clone();
    let config = &shared.config;
    let activation = match shared
        .store
        .activate_execution(&claim.lease, config.lease_ttl, config.max_run)
        .await
    {
        Ok(Some(activation)) => activation,
        Ok(None) => {
            tracing::debug!(%task_id, "claim lost before activation");
            return;
        }
        Err(err) => {
            // Unknown whether it activated: the claim expires and recovery decides.
            tracing::warn!(%task_id, error = %err, "could not activate");
            return;
        }
    };
    let lease = activation.lease.clone();
    tracing::debug!(%task_id, attempt = activation.attempt, "running");
    if activation.attempt > config.max_attempts {
        let error = TaskError::new(
            "task_attempts_exhausted",
            format!(
                "Task was abandoned by its worker {} times",
                activation.attempt - 1
            ),
        );
        finish(&shared, &lease, Transition::failed(error)).await;
        return;
    }

    let cancel = CancellationToken::new();
    let stop = Arc::new(Mutex::new(None));
    let shared_lease = Arc::new(Mutex::new(lease.clone()));
    shared.active.insert(
        task_id.clone(),
        Run {
            lease: shared_lease.clone(),
            cancel: cancel.clone(),
            stop: stop.clone(),
            renewed_at: tokio::time::Instant::now(),
        },
    );
    // The store enforces its own copy of the deadline (recovery fails an orphaned run past it);
    // this one, measured from just after activation, is never earlier.
    let deadline = tokio::time::Instant::now() + config.max_run;
    let outcome = run_handler(
        &shared,
        &claim,
        activation.attempt,
        deadline,
        cancel.clone(),
        shared_lease,
    )
    .await;
    cancel.cancel();
    let stopped = *stop.lock().unwrap_or_else(PoisonError::into_inner);
    shared.active.remove(&task_id);

    let transition = match (stopped, outcome) {
        (Some(reason), _) => {
            tracing::info!(%task_id, ?reason, "run stopped; writing nothing");
            return;
        }
        (None, Outcome::Done(Ok(output))) => Transition::completed(TaskResult {
            output: output.output,
            usage: output.usage,
            model: output.model,
        }),
        (None, Outcome::Done(Err(error))) => Transition::failed(TaskError {
            code: error.code,
            message: error.message,
            details: error.details,
        }),
        (None, Outcome::TimedOut) => Transition::failed(TaskError::new(
            "task_timeout",
            format!(
                "Task exceeded its {}ms execution limit",
                config.max_run.as_millis()
            ),
        )),
        (None, Outcome::Panicked) => Transition::failed(TaskError::new(
            "internal_error",
            "The handler failed unexpectedly",
        )),
    };
    // Renewals move the deadline, never the owner or epoch that the fence compares.
    finish(&shared, &lease, transition).await;
}

enum Outcome {
    Done(Result<crate::handler::HandlerOutput, HandlerError>),
    TimedOut,
    Panicked,
}

async fn run_handler(
    shared: &Arc<Shared>,
    claim: &Claim,
    attempt: u32,
    deadline: tokio::time::Instant,
    cancel: CancellationToken,
    lease: Arc<Mutex<Lease>>,
) -> Outcome {
    let invocation = &claim.invocation;
    let Some(entrypoint) = shared.entrypoints.get(&invocation.entrypoint) else {
        return Outcome::Done(Err(HandlerError::new(
            "entrypoint_not_found",
            format!("This worker does not host {:?}", invocation.entrypoint),
        )));
    };
    let ctx = TaskContext {
        task_id: claim.lease.task_id.clone(),
        attempt,
        max_attempts: claim.max_attempts,
        deadline,
        context_id: invocation.context_id.clone(),
        metadata: invocation.metadata.clone(),
        cancel: cancel.clone(),
        events: Emitter::new(shared.store.clone(), lease),
    };
    // Its own task, so that a panicking handler fails its run instead of the worker.
    let mut handle = tokio::spawn(entrypoint.handler.call(invocation.input.clone(), ctx));
    tokio::select! {
        joined = &mut handle => match joined {
            Ok(result) => Outcome::Done(result),
            Err(_) => Outcome::Panicked,
        },
        _ = tokio::time::sleep_until(deadline) => {
            cancel.cancel();
            handle.abort();
            Outcome::TimedOut
        }
        _ = cancel.cancelled() => {
            // Stopped from outside; give the handler no further say.
            handle.abort();
            Outcome::Done(Err(HandlerError::cancelled()))
        }
    }
}

/// The fenced terminal write. A rejection means another worker or a cancel got there first.
async fn finish(shared: &Shared, lease: &Lease, transition: Transition) {
    let task_id = &lease.task_id;
    match shared
        .store
        .compare_and_set(task_id, &[TaskStatus::Running], transition, Some(lease))
        .await
    {
        Ok(CasOutcome::Applied(task)) => {
            tracing::debug!(%task_id, status = %task.status, "task finished");
        }
        Ok(CasOutcome::Rejected {
            reason: Rejection::Fenced,
            ..
        }) => {
            tracing::warn!(%task_id, "result fenced out: the task belongs to another worker now");
        }
        Ok(CasOutcome::Rejected { reason, .. }) => {
            tracing::info!(%task_id, ?reason, "result not written: the task was already finished");
        }
        Err(err) => {
            // The task stays running; its lease expires and recovery runs it again.
            tracing::warn!(%task_id, error = %err, "could not write the result");
        }
    }
}
