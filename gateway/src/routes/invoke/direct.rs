//! `POST /entrypoints/:key/invoke`: runs the entrypoint on a worker and answers with its
//! result, `{"run_id","status":"succeeded","output","usage"?,"model"?}`, or its error.

use std::time::Duration;

use axum::extract::{OriginalUri, Path, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use shared::idempotency;
use shared::protocol::ErrorCode;

use super::watch::{RunEvent, Terminal, Watch};
use super::{Kind, Run, cancel, extract_input, find_entrypoint, read_json, refuse_paid, start_run};
use super::{idempotent, outcome};
use crate::admit;
use crate::error::ApiError;
use crate::state::AppState;

pub async fn invoke(
    State(state): State<AppState>,
    Path(key): Path<String>,
    OriginalUri(uri): OriginalUri,
    request: Request,
) -> Response {
    handle(&state, &key, uri.path(), request)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn handle(
    state: &AppState,
    key: &str,
    path: &str,
    request: Request,
) -> Result<Response, ApiError> {
    let entrypoint = find_entrypoint(state, key).await?;
    let idempotency_key = idempotent::read_key(request.headers())?;
    let body = read_json(request).await?;
    let input = extract_input(&body);
    admit::validate_input(&entrypoint, &input)?;
    refuse_paid(&entrypoint, Kind::Invoke)?;
    match idempotency_key {
        None => Ok(run(state, key, input).await),
        Some(idempotency_key) => {
            let fingerprint = idempotency::fingerprint("POST", path, &body);
            idempotent::invoke(state, key, &idempotency_key, &fingerprint, || {
                run(state, key, input)
            })
            .await
        }
    }
}

/// Runs the entrypoint on a worker and waits for the end: a response whatever happens.
async fn run(state: &AppState, key: &str, input: Value) -> Response {
    match run_to_end(state, key, input).await {
        Ok(response) | Err(response) => response,
    }
}

async fn run_to_end(state: &AppState, key: &str, input: Value) -> Result<Response, Response> {
    let mut run = start_run(state, key, input)
        .await
        .map_err(IntoResponse::into_response)?;
    let limit = Duration::from_millis(state.config.invoke_timeout_ms);
    tokio::select! {
        finished = wait(&mut run.watch) => {
            // An error here leaves the run armed: dropping it cancels the task.
            let terminal = finished.map_err(IntoResponse::into_response)?;
            run.settle();
            Ok(outcome::invoke_response(&run.task.task_id, &terminal))
        }
        () = tokio::time::sleep(limit) => stop(state, run, timed_out(limit)).await,
        () = state.shutdown.cancelled() => stop(state, run, shutting_down()).await,
    }
}

async fn wait(watch: &mut Watch) -> Result<Terminal, ApiError> {
    loop {
        if let RunEvent::Finished(terminal) = watch.next().await? {
            return Ok(terminal);
        }
    }
}

/// Cancels a run that must stop waiting; one that finished meanwhile answers with its result.
async fn stop(state: &AppState, mut run: Run, error: ApiError) -> Result<Response, Response> {
    let task_id = run.task.task_id.clone();
    match cancel(state.store.as_ref(), &task_id, &run.entrypoint).await {
        Ok(None) => {
            run.settle();
            Err(error.into_response())
        }
        Ok(Some(task)) => {
            run.settle();
            let terminal = Terminal::of_task(&task).ok_or_else(|| error.into_response())?;
            Ok(outcome::invoke_response(&task_id, &terminal))
        }
        // Still armed: dropping the run tries to cancel once more.
        Err(err) => Err(ApiError::from(err).into_response()),
    }
}

fn timed_out(limit: Duration) -> ApiError {
    ApiError::new(
        StatusCode::GATEWAY_TIMEOUT,
        ErrorCode::TaskTimeout,
        format!(
            "The entrypoint did not finish within {}ms; the run was cancelled",
            limit.as_millis()
        ),
    )
}

fn shutting_down() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::ServiceUnavailable,
        "The gateway is shutting down; the run was cancelled",
    )
    .retry_after(1)
}
