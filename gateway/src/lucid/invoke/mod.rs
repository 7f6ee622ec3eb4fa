//! Direct invocation: `POST /entrypoints/:key/invoke` (one JSON result) and
//! `POST /entrypoints/:key/stream` (SSE).
//!
//! Both run the entrypoint on a worker through the store, never in the gateway: each request
//! creates a task owned by a fresh internal token (never returned, so nobody else can read the
//! run), follows it with a [`crate::core::watch::Watch`], and cancels it when the caller goes away, the
//! wait times out or the gateway shuts down.
//!
//! - [`direct`]: invoke, waiting for the terminal state up to `invoke_timeout_ms`;
//! - [`idempotent`]: the `Idempotency-Key` protocol around invoke;
//! - [`stream`]: the SSE relay of the worker's stream events;
//! - [`outcome`]: how a finished run reads on the wire.
//!
//! Following the run is the core's [`crate::core::watch`], which the A2A adapter shares.

mod direct;
mod idempotent;
mod outcome;
mod stream;

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use protocol::token::AccessToken;
use protocol::{ErrorCode, Task, TaskStatus};
use serde_json::{Map, Value};
use store::registry::EntrypointInfo;
use store::{CasOutcome, StoreError, TaskStore, Transition};
use telemetry::metrics;

use crate::core::admit;
use crate::core::create::Admit;
use crate::core::pay;
use crate::core::state::AppState;
use crate::http::error::ApiError;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/entrypoints/{key}/invoke", post(direct::invoke))
        .route("/entrypoints/{key}/stream", post(stream::stream))
}

/// Which route a request came through (prices differ per kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Invoke,
    Stream,
}

/// The entrypoint some live worker hosts, or upstream's bare
/// `404 {"error":{"code":"entrypoint_not_found"}}` (also for a private one the caller of a
/// request with `headers` is not a member for).
async fn find_entrypoint(
    state: &AppState,
    headers: &HeaderMap,
    key: &str,
) -> Result<EntrypointInfo, ApiError> {
    let entrypoint = admit::entrypoint(state, state.viewer(headers), key)
        .await?
        .ok_or(ApiError {
            status: StatusCode::NOT_FOUND,
            code: ErrorCode::EntrypointNotFound,
            message: None,
            issues: None,
            retry_after: None,
        })?;
    admit::refuse_paused(&entrypoint)?;
    Ok(entrypoint)
}

/// What the gate let through: a free request (possibly signed in with SIWX, for an auth-only
/// entrypoint or one its signer is entitled to) or a paid one (so far: offline checks only).
struct Gated<'a> {
    payment: Option<pay::Payment<'a>>,
    signed_in: Option<pay::siwx::SignedIn>,
}

/// The gate's word on a request (see [`crate::core::pay`]): what it let through, or the answer to
/// send (a `401` or `402` challenge).
async fn gate<'a>(
    state: &'a AppState,
    entrypoint: &EntrypointInfo,
    kind: Kind,
    headers: &HeaderMap,
    uri: &Uri,
) -> Result<Gated<'a>, Box<Response>> {
    if let Some(signed_in) =
        pay::siwx::sign_in(state.pay_context(), entrypoint, headers, uri).await?
    {
        tracing::debug!(entrypoint = %entrypoint.key, ?signed_in, "signed in: runs without payment");
        return Ok(Gated {
            payment: None,
            signed_in: Some(signed_in),
        });
    }
    let route = match kind {
        Kind::Invoke => pay::Priced::Invoke,
        Kind::Stream => pay::Priced::Stream,
    };
    let payment = pay::check(state.pay_context(), entrypoint, route, headers, uri).await?;
    Ok(Gated {
        payment,
        signed_in: None,
    })
}

/// The request body as JSON: anything unreadable or malformed is upstream's
/// `400 {"error":{"code":"invalid_request","message":"Invalid JSON"}}`; too large is `413`.
async fn read_json(request: Request) -> Result<Value, ApiError> {
    let bytes = Bytes::from_request(request, &())
        .await
        .map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    ErrorCode::InvalidRequest,
                    "Request body is too large",
                )
            } else {
                ApiError::bad_request(ErrorCode::InvalidRequest, "Invalid JSON")
            }
        })?;
    serde_json::from_slice(&bytes)
        .map_err(|_| ApiError::bad_request(ErrorCode::InvalidRequest, "Invalid JSON"))
}

/// The entrypoint's input, as upstream reads it: `body.input` when the body is an object with
/// an `input` member (`null` reads as `{}`), otherwise the whole body.
fn extract_input(body: &Value) -> Value {
    let empty = || Value::Object(Map::new());
    match body {
        Value::Object(map) if map.contains_key("input") => match map.get("input") {
            Some(Value::Null) | None => empty(),
            Some(input) => input.clone(),
        },
        Value::Null => empty(),
        other => other.clone(),
    }
}

/// A run on a worker: its task, owned by a token nobody else holds, and a watch on it.
/// Dropped before [`Run::settle`], it cancels the task.
struct Run {
    task: Task,
    entrypoint: String,
    watch: crate::core::watch::Watch,
    guard: CancelOnDrop,
}

impl Run {
    /// The run of `task` (of `entrypoint`) followed by `watch`, cancelled if dropped unsettled.
    fn new(
        state: &AppState,
        task: Task,
        entrypoint: &str,
        watch: crate::core::watch::Watch,
    ) -> Run {
        Run {
            guard: CancelOnDrop::new(state.store.clone(), &task.task_id, entrypoint),
            task,
            entrypoint: entrypoint.to_owned(),
            watch,
        }
    }

    /// The run finished (or was cancelled here): dropping it no longer cancels anything.
    fn settle(&mut self) {
        self.guard.disarm();
    }
}

/// Creates the task of a run and subscribes to it, in one store call: the subscription is
/// live before the task exists, so the run's every event reaches the watch.
async fn start_run(
    state: &AppState,
    entrypoint: &EntrypointInfo,
    input: Value,
    source: Option<String>,
) -> Result<Run, ApiError> {
    let admit = direct_admit(state, entrypoint, input, source);
    let owner = admit.owner.clone();
    let (task, subscription) = admit::create_watched(state, admit).await?;
    let watch =
        crate::core::watch::Watch::with(state.store.clone(), &task.task_id, &owner, subscription);
    Ok(Run::new(state, task, &entrypoint.key, watch))
}

/// The task of a direct run: one run's attempts, the direct retention, and as its owner a
/// fresh internal token minted here for this run alone and given to nobody (the caller follows
/// the run by the returned `owner`), hence a private owner: no owner index.
fn direct_admit<'a>(
    state: &AppState,
    entrypoint: &'a EntrypointInfo,
    input: Value,
    source: Option<String>,
) -> Admit<'a> {
    Admit {
        owner: AccessToken::generate().owner_hash(),
        entrypoint: entrypoint.key.as_str(),
        input,
        context_id: None,
        metadata: None,
        max_attempts: admit::run_attempts(state, entrypoint),
        retention: admit::direct_retention(state),
        source,
        private_owner: true,
    }
}

/// Admits a paid run through the payment gate (reserve, verify, settle, hand off) and
/// subscribes to it. The run's answer must carry the returned receipt whatever it says.
async fn start_paid_run(
    state: &AppState,
    entrypoint: &EntrypointInfo,
    input: Value,
    source: Option<String>,
    payment: pay::Payment<'_>,
) -> Result<(Run, pay::receipt::Receipt), Response> {
    let admit = direct_admit(state, entrypoint, input, source);
    let owner = admit.owner.clone();
    let admitted = pay::admission::admit_paid(state.pay_context(), payment, admit).await;
    let entrypoint = entrypoint.key.as_str();
    let paid = match admitted {
        Ok(paid) => paid,
        Err(pay::admission::Refused::Answer(response)) => return Err(response),
        Err(pay::admission::Refused::Unconfirmed { task_id, receipt }) => {
            let mut response = ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::TaskTerminalizationFailed,
                format!("The run {task_id} was paid for, but its state could not be confirmed"),
            )
            .into_response();
            receipt.attach(&mut response);
            return Err(response);
        }
    };
    // The watch starts from a snapshot: a run that ended meanwhile (or that could not run
    // after settlement) reads as ended.
    let opened = crate::core::watch::Watch::open(state.store.clone(), &paid.task_id, &owner).await;
    let task = paid.created;
    match opened {
        Ok(watch) => Ok((Run::new(state, task, entrypoint, watch), paid.receipt)),
        Err(err) => {
            let mut response = err.into_response();
            paid.receipt.attach(&mut response);
            Err(response)
        }
    }
}

/// Admits a paid run that settles only once it succeeded (settle=after: see
/// [`pay::admission::reserve`]) and subscribes to it: nothing is charged yet.
async fn start_reserved_run<'a>(
    state: &'a AppState,
    entrypoint: &EntrypointInfo,
    input: Value,
    source: Option<String>,
    payment: pay::Payment<'a>,
) -> Result<(Run, pay::admission::reserve::Reservation<'a>), Response> {
    let admit = direct_admit(state, entrypoint, input, source);
    let owner = admit.owner.clone();
    let admitted =
        pay::admission::reserve::admit_reserved(state.pay_context(), payment, admit).await;
    let entrypoint = entrypoint.key.as_str();
    let reserved = match admitted {
        Ok(reserved) => reserved,
        Err(pay::admission::Refused::Answer(response)) => return Err(response),
        // Only a settled admission is ever unconfirmed.
        Err(pay::admission::Refused::Unconfirmed { .. }) => {
            return Err(ApiError::internal().into_response());
        }
    };
    let task = reserved.created;
    let reservation = reserved.reservation;
    match crate::core::watch::Watch::open(state.store.clone(), &task.task_id, &owner).await {
        Ok(watch) => Ok((Run::new(state, task, entrypoint, watch), reservation)),
        Err(err) => {
            // Not followed, so never handed to anyone: cancelled and charged nothing.
            let _ = cancel(state.store.as_ref(), &task.task_id, entrypoint).await;
            reservation.release("the run could not be followed").await;
            let mut response = err.into_response();
            pay::admission::reserve::not_charged(&mut response);
            Err(response)
        }
    }
}

/// Cancels a run (unfenced, so the worker holding it aborts its handler). Returns the task's
/// state when the run had already finished.
async fn cancel(
    store: &dyn TaskStore,
    task_id: &str,
    entrypoint: &str,
) -> Result<Option<Task>, StoreError> {
    let outcome = store
        .compare_and_set(
            task_id,
            &[TaskStatus::Running],
            Transition::cancelled(),
            None,
        )
        .await?;
    Ok(match outcome {
        CasOutcome::Applied(task) => {
            metrics::task_finished(entrypoint, &task);
            None
        }
        CasOutcome::Rejected { current, .. } => current.filter(|task| task.status.is_terminal()),
    })
}

/// Cancels a run unless disarmed: a request dropped mid-wait (the client went away) must not
/// leave its run occupying a worker.
struct CancelOnDrop {
    store: Option<Arc<dyn TaskStore>>,
    task_id: String,
    entrypoint: String,
}

impl CancelOnDrop {
    fn new(store: Arc<dyn TaskStore>, task_id: &str, entrypoint: &str) -> Self {
        CancelOnDrop {
            store: Some(store),
            task_id: task_id.to_owned(),
            entrypoint: entrypoint.to_owned(),
        }
    }

    fn disarm(&mut self) {
        self.store = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(store) = self.store.take() else {
            return;
        };
        let task_id = std::mem::take(&mut self.task_id);
        let entrypoint = std::mem::take(&mut self.entrypoint);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            match cancel(store.as_ref(), &task_id, &entrypoint).await {
                Ok(_) => tracing::debug!(%task_id, "run cancelled: its caller went away"),
                Err(err) => {
                    tracing::warn!(%task_id, error = %err, "could not cancel an abandoned run")
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn input_is_the_input_member_or_the_whole_body() {
        assert_eq!(extract_input(&json!({"input": {"x": 1}})), json!({"x": 1}));
        assert_eq!(extract_input(&json!({"input": null})), json!({}));
        assert_eq!(extract_input(&json!({"input": 0})), json!(0));
        assert_eq!(extract_input(&json!({"x": 1})), json!({"x": 1}));
        assert_eq!(extract_input(&json!(null)), json!({}));
        assert_eq!(extract_input(&json!([1])), json!([1]));
    }
}
