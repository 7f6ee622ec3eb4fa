//! One slot's runs: a task comes claimed and activated (`take_active`), its handler runs under
//! its deadline and cancellation, and its outcome is written with a fenced terminal write that
//! also takes and activates the slot's next task (`finish_and_take`): a slot that gets one runs
//! it at once, keeping its permit, and goes back to the fetch loop only when nothing came. A
//! run stopped from outside (cancelled, lease lost, abandoned at shutdown) writes nothing: the
//! task is someone else's now.
//!
//! The run is a CONSUMER span that continues the trace of the span that created the task (its
//! context travels in the task record): a child of that producer span, and linked to it, as the
//! messaging conventions ask. The handler runs in a child span; fencing rejections and stops
//! are events of the run's span.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use protocol::{ErrorCode, TaskError, TaskResult, TaskStatus};
use std::collections::VecDeque;

use store::{CasOutcome, Claim, Lease, Rejection, Started, TakeSpec, Transition};
use telemetry::metrics;
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use tracing::field::Empty;

use super::active::{Run, StopReason};
use super::{Shared, TOO_MANY_TURNS};
use crate::emitter::Emitter;
use crate::handler::{HandlerError, TaskContext};

/// Runs `first` and then each task its finish hands back, holding the slot throughout.
pub async fn run(
    shared: Arc<Shared>,
    first: Started,
    slot: OwnedSemaphorePermit,
    shutdown: CancellationToken,
) {
    let mut ready = VecDeque::from([first]);
    while let Some(started) = ready.pop_front() {
        let entrypoint = &started.claim.invocation.entrypoint;
        let span = telemetry::traced_span(|| {
            tracing::info_span!(
                "process task",
                otel.name = %format_args!("process {entrypoint}"),
                otel.kind = "consumer",
                otel.status_code = Empty,
                messaging.system = "taskcluster",
                messaging.operation.type = "process",
                messaging.operation.name = "process",
                messaging.destination.name = %entrypoint,
                messaging.message.id = %started.claim.lease.task_id,
                taskcluster.worker.id = %shared.config.worker_id,
                taskcluster.task.attempt = Empty,
                taskcluster.task.status = Empty,
            )
        });
        telemetry::follow_producer(&span, &started.claim.invocation.trace_context);
        let entrypoint = entrypoint.clone();
        let next = run_started(&shared, started, &shutdown, span.clone())
            .instrument(span)
            .await;
        shared.share.left(&entrypoint);
        ready.extend(next);
    }
    drop(slot);
}

/// Milliseconds of a duration, as the store's clock counts.
fn ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// One run; returns the tasks its finish took for this slot.
async fn run_started(
    shared: &Arc<Shared>,
    started: Started,
    shutdown: &CancellationToken,
    span: tracing::Span,
) -> Vec<Started> {
    let Started { claim, activation } = started;
    let task_id = claim.lease.task_id.clone();
    let entrypoint = claim.invocation.entrypoint.as_str();
    let config = &shared.config;
    let lease = activation.lease.clone();
    let started = tokio::time::Instant::now();
    span.record("taskcluster.task.attempt", activation.attempt);
    if activation.attempt == 1 {
        // The store's clock on both ends: activation = new lease deadline - TTL.
        let activated_ms = lease.expires_at_ms.saturating_sub(ms(config.lease_ttl));
        let waited = activated_ms.saturating_sub(claim.created_at_ms);
        metrics::queue_wait(entrypoint, Duration::from_millis(waited));
    }
    tracing::debug!(%task_id, attempt = activation.attempt, "running");
    let prior = prior(shared, &task_id, activation.attempt).await;
    // Runs that asked for a retry are not abandoned runs: only the others count against
    // `max_attempts` (the store's recovery counts the same way).
    let abandoned = prior.as_ref().map_or(0, |prior| {
        activation
            .attempt
            .saturating_sub(1)
            .saturating_sub(prior.retries)
    });
    if abandoned >= config.max_attempts {
        let error = TaskError::new(
            ErrorCode::TaskAttemptsExhausted.as_str(),
            format!("Task was abandoned by its worker {abandoned} times"),
        );
        return finish(
            shared,
            &lease,
            Transition::failed(error),
            started,
            &span,
            shutdown,
        )
        .await;
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
    let last_error = prior.as_ref().and_then(|prior| prior.last_error.clone());
    let outcome = run_handler(
        shared,
        &claim,
        activation.attempt,
        last_error,
        deadline,
        cancel.clone(),
        shared_lease,
    )
    .await;
    cancel.cancel();
    let stopped = *stop.lock().unwrap_or_else(PoisonError::into_inner);
    shared.active.remove(&task_id);
    let outcome = bounded(outcome, config.max_result_bytes, &task_id);

    let transition = match (stopped, outcome) {
        (Some(reason), _) => {
            if reason == StopReason::Cancelled {
                metrics::run_time(entrypoint, TaskStatus::Cancelled, started.elapsed());
            }
            tracing::info!(%task_id, ?reason, "run stopped; writing nothing");
            return Vec::new();
        }
        (None, Outcome::Done(Ok(output))) if output.awaits_input => {
            match turns_left(shared, &task_id).await {
                Some(true) => return await_input(shared, &lease, output.output, started).await,
                Some(false) => Transition::failed(TaskError::new(
                    TOO_MANY_TURNS,
                    format!(
                        "Task reached its limit of {} turns and takes no more input; start a new task",
                        config.max_turns
                    ),
                )),
                // The task stays active; its lease expires and recovery runs it again.
                None => return Vec::new(),
            }
        }
        (None, Outcome::Done(Ok(output))) => Transition::completed(TaskResult {
            output: output.output,
            usage: output.usage,
            model: output.model,
        }),
        (None, Outcome::Done(Err(error))) => {
            let after = error.retry.and_then(|retry| retry.after);
            let retryable = error.is_retryable();
            let error = TaskError {
                code: error.code,
                message: error.message,
                details: error.details,
            };
            // Another attempt when the handler asked for one and the entrypoint's policy has
            // one left (unknown retries so far: none, so a store that cannot be read never
            // retries forever).
            let retries = prior.as_ref().map(|prior| prior.retries);
            match retries {
                Some(done) if retryable && done < config.retry.retries(entrypoint) => {
                    let delay = config.retry.delay(done.saturating_add(1), after);
                    return retry_later(shared, &lease, &error, delay, started).await;
                }
                _ => Transition::failed(error),
            }
        }
        (None, Outcome::TimedOut) => Transition::failed(TaskError::new(
            ErrorCode::TaskTimeout.as_str(),
            format!(
                "Task exceeded its {}ms execution limit",
                config.max_run.as_millis()
            ),
        )),
        (None, Outcome::Panicked) => Transition::failed(TaskError::new(
            ErrorCode::InternalError.as_str(),
            "The handler failed unexpectedly",
        )),
    };
    // Renewals move the deadline, never the owner or epoch that the fence compares.
    finish(shared, &lease, transition, started, &span, shutdown).await
}

enum Outcome {
    Done(Result<crate::handler::HandlerOutput, HandlerError>),
    TimedOut,
    Panicked,
}

/// The outcome, unless its output (a result, or the request of a run that awaits input) takes
/// more than `limit` bytes of JSON: then a `result_too_large` failure, so that the store never
/// holds it.
fn bounded(outcome: Outcome, limit: usize, task_id: &str) -> Outcome {
    match outcome {
        Outcome::Done(Ok(output)) if protocol::limits::exceeds(&output.output, limit) => {
            tracing::warn!(%task_id, limit, "handler output too large to store; failing the task");
            Outcome::Done(Err(HandlerError::new(
                ErrorCode::ResultTooLarge.as_str(),
                format!("The handler's output is larger than the {limit} bytes this worker stores"),
            )))
        }
        other => other,
    }
}

async fn run_handler(
    shared: &Arc<Shared>,
    claim: &Claim,
    attempt: u32,
    last_error: Option<TaskError>,
    deadline: tokio::time::Instant,
    cancel: CancellationToken,
    lease: Arc<Mutex<Lease>>,
) -> Outcome {
    let invocation = &claim.invocation;
    let Some(entrypoint) = shared.entrypoints.get(&invocation.entrypoint) else {
        return Outcome::Done(Err(HandlerError::new(
            ErrorCode::EntrypointNotFound.as_str(),
            format!("This worker does not host {:?}", invocation.entrypoint),
        )));
    };
    let ctx = TaskContext {
        task_id: claim.lease.task_id.clone(),
        attempt,
        max_attempts: claim.max_attempts,
        last_error,
        deadline,
        context_id: invocation.context_id.clone(),
        metadata: invocation.metadata.clone(),
        cancel: cancel.clone(),
        events: Emitter::new(shared.store.clone(), lease),
    };
    let span = telemetry::traced_span(|| {
        tracing::info_span!(
            "handler",
            otel.name = %format_args!("handler {}", invocation.entrypoint),
            taskcluster.task.attempt = attempt,
        )
    });
    // Its own task, so that a panicking handler fails its run instead of the worker.
    let mut handle = tokio::spawn(
        entrypoint
            .handler
            .call(invocation.input.clone(), ctx)
            .instrument(span),
    );
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

/// Whether the task whose run asked for input may take one more turn (`max_turns` counts its
/// first message too); `None` when its turns cannot be read. While this worker holds the
/// lease no resume can add a turn (only a waiting task is resumed), so the count is exact.
async fn turns_left(shared: &Shared, task_id: &str) -> Option<bool> {
    match shared.store.get(task_id).await {
        Ok(Some(stored)) => {
            // The current turn is the one after those kept.
            let current = stored.turns.len().saturating_add(1);
            let max = usize::try_from(shared.config.max_turns).unwrap_or(usize::MAX);
            Some(current < max)
        }
        // Gone (expired or deleted): the fenced write finds out.
        Ok(None) => Some(true),
        Err(err) => {
            tracing::warn!(%task_id, error = %err, "could not read the task's turns");
            None
        }
    }
}

/// What the task's earlier attempts of this turn left: the retries they asked for and the
/// last retried failure.
struct Prior {
    retries: u32,
    last_error: Option<TaskError>,
}

/// [`Prior`] of a run: nothing to read on a first attempt; later ones read the task (one read
/// per retried or recovered run: a first run, by far the most common, costs none). While this
/// worker holds the lease only its own `retry_later` can change them, so the read is exact.
/// `None` when the task cannot be read.
async fn prior(shared: &Shared, task_id: &str, attempt: u32) -> Option<Prior> {
    if attempt <= 1 {
        return Some(Prior {
            retries: 0,
            last_error: None,
        });
    }
    match shared.store.get(task_id).await {
        Ok(Some(stored)) => Some(Prior {
            retries: stored.retries,
            last_error: stored.last_error.map(|error| *error),
        }),
        // Gone (expired or deleted): the fenced write finds out.
        Ok(None) => Some(Prior {
            retries: 0,
            last_error: None,
        }),
        Err(err) => {
            tracing::warn!(%task_id, error = %err, "could not read the task's earlier attempts");
            None
        }
    }
}

/// The fenced `active -> backoff` write of a run whose handler failed asking for another
/// attempt: the task waits out `delay` in the store, holding no worker, and the sweep queues
/// it again. The slot takes its next task through the usual fetch.
async fn retry_later(
    shared: &Shared,
    lease: &Lease,
    error: &TaskError,
    delay: Duration,
    started: tokio::time::Instant,
) -> Vec<Started> {
    let task_id = &lease.task_id;
    let entrypoint = lease.entrypoint.as_str();
    match shared.store.retry_later(lease, error, delay).await {
        Ok(true) => {
            metrics::run_time(entrypoint, TaskStatus::Running, started.elapsed());
            tracing::info!(%task_id, code = %error.code, delay_ms = delay.as_millis(),
                "run failed retryably; the task is retried after a backoff");
        }
        Ok(false) => {
            metrics::fenced_write_rejected(entrypoint, "retry_later");
            tracing::warn!(%task_id, operation = "retry_later",
                "retry fenced out: the task was cancelled or belongs to another worker");
        }
        Err(err) => {
            // The task stays active; its lease expires and recovery runs it again.
            tracing::warn!(%task_id, error = %err, "could not put the task in backoff");
        }
    }
    Vec::new()
}

/// The fenced `active -> waiting` write of a run that asked for input. The slot takes its next
/// task through the usual fetch: a waiting task is no finish to take it with.
async fn await_input(
    shared: &Shared,
    lease: &Lease,
    request: serde_json::Value,
    started: tokio::time::Instant,
) -> Vec<Started> {
    let task_id = &lease.task_id;
    let entrypoint = lease.entrypoint.as_str();
    match shared
        .store
        .await_input(lease, request, shared.config.input_timeout)
        .await
    {
        Ok(true) => {
            metrics::run_time(entrypoint, TaskStatus::Running, started.elapsed());
            tracing::debug!(%task_id, "task waits for input");
        }
        Ok(false) => {
            metrics::fenced_write_rejected(entrypoint, "await_input");
            tracing::warn!(%task_id, operation = "await_input",
                "input request fenced out: the task was cancelled or belongs to another worker");
        }
        Err(err) => {
            // The task stays active; its lease expires and recovery runs it again.
            tracing::warn!(%task_id, error = %err, "could not write the input request");
        }
    }
    Vec::new()
}

/// The fenced terminal write, taking the slot's next task in the same call unless the worker
/// is shutting down. A rejection means another worker or a cancel got there first.
async fn finish(
    shared: &Shared,
    lease: &Lease,
    transition: Transition,
    started: tokio::time::Instant,
    span: &tracing::Span,
    shutdown: &CancellationToken,
) -> Vec<Started> {
    let task_id = &lease.task_id;
    let entrypoint = lease.entrypoint.as_str();
    let status = transition.status;
    span.record("taskcluster.task.status", status.as_str());
    if status == TaskStatus::Failed {
        span.record("otel.status_code", "ERROR");
    }
    // This slot's next task: of an entrypoint under its share, counting this run as gone.
    let (open, _) = shared.share.open(Some(entrypoint));
    let take = (!shutdown.is_cancelled() && !open.is_empty()).then(|| TakeSpec {
        entrypoints: open,
        holder: shared.config.worker_id.clone(),
        lease_ttl: shared.config.lease_ttl,
        max_run: shared.config.max_run,
        max: 1,
    });
    let finished = match shared
        .store
        .finish_and_take(lease, transition, take.as_ref())
        .await
    {
        Ok(finished) => finished,
        Err(err) => {
            // The task stays running; its lease expires and recovery runs it again.
            tracing::warn!(%task_id, error = %err, "could not write the result");
            return Vec::new();
        }
    };
    match finished.outcome {
        CasOutcome::Applied(task) => {
            metrics::run_time(entrypoint, task.status, started.elapsed());
            metrics::task_finished(entrypoint, &task);
            tracing::debug!(%task_id, status = %task.status, "task finished");
        }
        CasOutcome::Rejected {
            reason: Rejection::Fenced,
            ..
        } => {
            metrics::fenced_write_rejected(entrypoint, "finish");
            tracing::warn!(%task_id, operation = "finish",
                "result fenced out: the task belongs to another worker now");
        }
        CasOutcome::Rejected { reason, .. } => {
            // A finished task holds no lease: this write's fence was stale too.
            metrics::fenced_write_rejected(entrypoint, "finish");
            tracing::info!(%task_id, ?reason, operation = "finish",
                "result not written: the task was already finished");
        }
    }
    for next in &finished.next {
        shared.share.took(&next.claim.invocation.entrypoint);
    }
    finished.next
}
