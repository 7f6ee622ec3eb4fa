//! `POST /entrypoints/:key/invoke`: runs the entrypoint on a worker and answers with its
//! result, `{"run_id","status":"succeeded","output","usage"?,"model"?}`, or its error.

use std::time::Duration;

use axum::extract::{OriginalUri, Path, Request, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use protocol::ErrorCode;
use serde_json::Value;
use store::idempotency;
use store::registry::EntrypointInfo;

use super::{
    Kind, Run, cancel, extract_input, find_entrypoint, gate, read_json, start_paid_run, start_run,
};
use super::{idempotent, outcome};
use crate::core::admit;
use crate::core::pay::Payment;
use crate::core::state::AppState;
use crate::core::watch::{RunEvent, Terminal, Watch};
use crate::http::client_address::Source;
use crate::http::error::ApiError;

pub async fn invoke(
    State(state): State<AppState>,
    Path(key): Path<String>,
    OriginalUri(uri): OriginalUri,
    request: Request,
) -> Response {
    match handle(&state, &key, &uri, request).await {
        Ok(response) | Err(response) => response,
    }
}

async fn handle(
    state: &AppState,
    key: &str,
    uri: &Uri,
    request: Request,
) -> Result<Response, Response> {
    let entrypoint = find_entrypoint(state, request.headers(), key)
        .await
        .map_err(answer)?;
    // The challenge comes first, as x402 middleware in front of a handler answers it.
    let gated = gate(state, &entrypoint, Kind::Invoke, request.headers(), uri)
        .await
        .map_err(|answer| *answer)?;
    // `Idempotency-Key` wins; else an x402 payment's `payment-identifier` is the key, in a
    // namespace of its own (a header key never meets it), bound to the payer like any key.
    let idempotency_key = match idempotent::read_key(request.headers()).map_err(answer)? {
        Some(key) => Some(key),
        None => gated
            .payment
            .as_ref()
            .and_then(|payment| payment.checked.payment_id.as_deref())
            .map(idempotent::payment_identifier_key)
            .transpose()
            .map_err(answer)?,
    };
    // Who sent it and on what terms, proven so far as the gate could (a payer's signature
    // recovers to its address): part of the key's fingerprint.
    let caller = idempotent::Caller::of(state, &gated, request.headers());
    let payment = gated.payment;
    let Source(source) = Source::of(request.extensions());
    let subjects = caller.quota_subjects(source.as_deref());
    let body = read_json(request).await.map_err(answer)?;
    let input = extract_input(&body);
    // Checked before any payment is settled: bad input costs the payer nothing.
    admit::check_input(state, &entrypoint, &input).map_err(answer)?;
    let execute = || async move {
        match payment {
            None => run(state, &entrypoint, input, source).await,
            Some(payment) => run_paid(state, &entrypoint, input, source, payment).await,
        }
    };
    match idempotency_key {
        None => Ok(execute().await),
        Some(idempotency_key) => {
            let fingerprint = idempotency::fingerprint(&idempotency::Request {
                method: "POST",
                url: uri.path(),
                body: &body,
                subject: &caller.subject,
                security: &caller.security,
            });
            idempotent::invoke(
                state,
                key,
                &idempotency_key,
                &fingerprint,
                &subjects,
                execute,
            )
            .await
            .map_err(answer)
        }
    }
}

fn answer(err: ApiError) -> Response {
    err.into_response()
}

/// Runs the entrypoint on a worker and waits for the end: a response whatever happens.
async fn run(
    state: &AppState,
    entrypoint: &EntrypointInfo,
    input: Value,
    source: Option<String>,
) -> Response {
    let run = match start_run(state, entrypoint, input, source).await {
        Ok(run) => run,
        Err(err) => return err.into_response(),
    };
    match run_to_end(state, run).await {
        Ok(response) | Err(response) => response,
    }
}

/// A paid run: admitted through the payment gate, then like any run; every answer after
/// settlement carries the receipt.
async fn run_paid(
    state: &AppState,
    entrypoint: &EntrypointInfo,
    input: Value,
    source: Option<String>,
    payment: Payment<'_>,
) -> Response {
    let (run, receipt) = match start_paid_run(state, entrypoint, input, source, payment).await {
        Ok(admitted) => admitted,
        Err(response) => return response,
    };
    let mut response = match run_to_end(state, run).await {
        Ok(response) | Err(response) => response,
    };
    receipt.attach(&mut response);
    response
}

async fn run_to_end(state: &AppState, mut run: Run) -> Result<Response, Response> {
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
        match watch.next().await? {
            RunEvent::Finished(terminal) => return Ok(terminal),
            // A direct invoke is one run: one that asks for more input fails the request, and
            // the dropped run cancels the waiting task.
            RunEvent::InputRequired { .. } => {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    ErrorCode::InvalidState,
                    "The entrypoint asked for more input; multi-turn tasks need the A2A binding",
                ));
            }
            RunEvent::Running | RunEvent::Progress | RunEvent::Stream { .. } => {}
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
