//! `POST /entrypoints/:key/invoke`: runs the entrypoint on a worker and answers with its
//! result, `{"run_id","status":"succeeded","output","usage"?,"model"?}`, or its error.

use std::time::Duration;

use axum::extract::{OriginalUri, Path, Request, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use protocol::{ErrorCode, TaskStatus};
use serde_json::Value;
use store::idempotency;
use store::registry::{EntrypointInfo, PriceScheme, SettlePolicy};

use super::{
    Kind, Run, cancel, extract_input, find_entrypoint, gate, read_json, start_paid_run,
    start_reserved_run, start_run,
};
use super::{idempotent, outcome};
use crate::core::admit;
use crate::core::pay::Payment;
use crate::core::pay::admission::reserve::{not_charged, reported_charge};
use crate::core::state::AppState;
use crate::core::watch::{RunEvent, Terminal, Watch};
use crate::http::client_address::Source;
use crate::http::error::ApiError;

/// Longest error code a not-charged note quotes.
const MAX_NOTED_CODE_CHARS: usize = 64;

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
    // An upto price settles after the run, for what it used, whatever the policy says.
    let settle_after = entrypoint.price.as_ref().is_some_and(|price| {
        price.settle == SettlePolicy::After || price.scheme == PriceScheme::Upto
    });
    let execute = || async move {
        match payment {
            None => run(state, &entrypoint, input, source).await,
            Some(payment) if settle_after => {
                run_paid_after(state, &entrypoint, input, source, payment).await
            }
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

/// A paid run that settles only once it succeeded (settle=after): the result is handed over
/// with the receipt after the settlement, or withheld when it fails; any other end charges
/// nothing and says so (`payment-settlement: not-charged`).
async fn run_paid_after(
    state: &AppState,
    entrypoint: &EntrypointInfo,
    input: Value,
    source: Option<String>,
    payment: Payment<'_>,
) -> Response {
    let (run, reservation) =
        match start_reserved_run(state, entrypoint, input, source, payment).await {
            Ok(admitted) => admitted,
            Err(response) => return response,
        };
    let run_id = run.task.task_id.clone();
    match run_to_terminal(state, run).await {
        Ended::Finished(terminal) if terminal.status == TaskStatus::Completed => {
            let charge = terminal
                .result
                .as_ref()
                .and_then(|result| reported_charge(result.usage.as_ref()));
            match reservation.settle(charge).await {
                Ok(receipt) => {
                    let mut response = outcome::invoke_response(&run_id, &terminal);
                    receipt.attach(&mut response);
                    response
                }
                Err(withheld) => withheld,
            }
        }
        Ended::Finished(terminal) => {
            let why = match (&terminal.status, &terminal.error) {
                // The code is the handler's (a remote agent's, maybe): kept short in the
                // payment's record.
                (TaskStatus::Failed, Some(error)) => format!(
                    "the run failed ({})",
                    error
                        .code
                        .chars()
                        .take(MAX_NOTED_CODE_CHARS)
                        .collect::<String>()
                ),
                (TaskStatus::Failed, None) => "the run failed".to_owned(),
                _ => "the run was cancelled".to_owned(),
            };
            reservation.release(&why).await;
            let mut response = outcome::invoke_response(&run_id, &terminal);
            not_charged(&mut response);
            response
        }
        Ended::Stopped(mut response) => {
            reservation.release("the run did not finish").await;
            not_charged(&mut response);
            response
        }
    }
}

async fn run_to_end(state: &AppState, run: Run) -> Result<Response, Response> {
    let run_id = run.task.task_id.clone();
    match run_to_terminal(state, run).await {
        Ended::Finished(terminal) => Ok(outcome::invoke_response(&run_id, &terminal)),
        Ended::Stopped(response) => Err(response),
    }
}

/// How a run's wait ended.
enum Ended {
    /// The run reached a terminal state (possibly as this request stopped waiting).
    Finished(Terminal),
    /// It did not: the answer says why (timed out, shutting down, the store failed, it asked
    /// for input). The run was cancelled, or is when dropped.
    Stopped(Response),
}

async fn run_to_terminal(state: &AppState, mut run: Run) -> Ended {
    let limit = Duration::from_millis(state.config.invoke_timeout_ms);
    tokio::select! {
        finished = wait(&mut run.watch) => match finished {
            Ok(terminal) => {
                run.settle();
                Ended::Finished(terminal)
            }
            // An error here leaves the run armed: dropping it cancels the task.
            Err(err) => Ended::Stopped(err.into_response()),
        },
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
async fn stop(state: &AppState, mut run: Run, error: ApiError) -> Ended {
    let task_id = run.task.task_id.clone();
    match cancel(state.store.as_ref(), &task_id, &run.entrypoint).await {
        Ok(None) => {
            run.settle();
            Ended::Stopped(error.into_response())
        }
        Ok(Some(task)) => {
            run.settle();
            match Terminal::of_task(&task) {
                Some(terminal) => Ended::Finished(terminal),
                None => Ended::Stopped(error.into_response()),
            }
        }
        // Still armed: dropping the run tries to cancel once more.
        Err(err) => Ended::Stopped(ApiError::from(err).into_response()),
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
