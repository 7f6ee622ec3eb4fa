//! The operator's reconciliation routes ([`crate::core::pay::reconcile`]):
//!
//! - `GET /console/api/settlements`: the credentials left `settling` past the sweep's grace,
//!   oldest first (an operator session or the operator token);
//! - `POST /console/api/settlements/{task_id}` with `{"action":"lookup"}`,
//!   `{"action":"void","note":...}` or `{"action":"settled","transaction":"0x…","note":...}`:
//!   resolves one, answering `{"taskId","outcome"}` (`settled`, `void` or `unresolved`). The
//!   operator token as a bearer credential, or a console session with its page's token
//!   ([`super::actor`]).
//!
//! `taskctl admin settlements` and `taskctl admin settle` call them.

use super::actor::Actor;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use protocol::ErrorCode;

use super::{Caller, Console, answer, json, unauthorized};
use crate::core::pay::reconcile::{self, Action, ReconcileError};
use crate::core::pay::recovery;
use crate::http::error::ApiError;

/// Largest action body read.
const MAX_ACTION_BYTES: usize = 2 * 1024;

pub async fn list(State(console): State<Console>, headers: HeaderMap) -> Response {
    if console.caller(&headers).await == Caller::Nobody {
        return unauthorized();
    }
    let Some(gate) = console.app.payments.as_deref() else {
        return answer(no_payments());
    };
    let grace = recovery::grace(&console.app.config);
    match reconcile::list(gate, grace).await {
        Ok(settling) => json(
            StatusCode::OK,
            &serde_json::json!({
                "settlements": settling,
                "graceMs": u64::try_from(grace.as_millis()).unwrap_or(u64::MAX),
                "limit": reconcile::MAX_LISTED,
            }),
        ),
        Err(err) => answer(refused(err)),
    }
}

pub async fn act(
    State(console): State<Console>,
    Path(task_id): Path<String>,
    actor: Actor,
    body: axum::body::Bytes,
) -> Response {
    let Some(gate) = console.app.payments.as_deref() else {
        return answer(no_payments());
    };
    if body.len() > MAX_ACTION_BYTES {
        return answer(ApiError::bad_request(
            ErrorCode::InvalidRequest,
            format!("the action is larger than {MAX_ACTION_BYTES} bytes"),
        ));
    }
    let action: Action = match serde_json::from_slice(&body) {
        Ok(action) => action,
        Err(err) => {
            return answer(ApiError::bad_request(
                ErrorCode::InvalidRequest,
                format!(
                    "expected {{\"action\":\"lookup\"}}, {{\"action\":\"void\",\"note\":...}} or {{\"action\":\"settled\",\"transaction\":\"0x...\",\"note\":...}}: {err}"
                ),
            ));
        }
    };
    let grace = recovery::grace(&console.app.config);
    let by = console.audit_name(&actor);
    let audited = audited(&action);
    match reconcile::act(
        gate,
        console.app.store.as_ref(),
        grace,
        &task_id,
        action,
        &by,
    )
    .await
    {
        Ok(outcome) => {
            let mut detail = audited.1;
            detail["outcome"] = serde_json::json!(outcome);
            super::operate::audit(&console, &actor, audited.0, &task_id, detail).await;
            json(
                StatusCode::OK,
                &serde_json::json!({"taskId": task_id, "outcome": outcome}),
            )
        }
        Err(err) => answer(refused(err)),
    }
}

/// How the audit log names `action`, and what of it it keeps.
fn audited(action: &Action) -> (&'static str, serde_json::Value) {
    match action {
        Action::Lookup => ("settlement.lookup", serde_json::json!({})),
        Action::Void { note } => ("settlement.void", serde_json::json!({"note": note})),
        Action::Settled { transaction, note } => (
            "settlement.settled",
            serde_json::json!({"transaction": transaction, "note": note}),
        ),
    }
}

fn refused(err: ReconcileError) -> ApiError {
    match err {
        ReconcileError::NotFound(_) => {
            ApiError::new(StatusCode::NOT_FOUND, ErrorCode::NotFound, err.to_string())
        }
        ReconcileError::Invalid(_) => {
            ApiError::bad_request(ErrorCode::InvalidRequest, err.to_string())
        }
        ReconcileError::Facilitator(_) => ApiError::new(
            StatusCode::BAD_GATEWAY,
            ErrorCode::ServiceUnavailable,
            err.to_string(),
        ),
        ReconcileError::Store(_) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::ServiceUnavailable,
            "The store is unavailable; retry shortly",
        )
        .retry_after(1),
    }
}

fn no_payments() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        ErrorCode::PaymentCapabilityUnsupported,
        "This gateway takes no payments: there is nothing to reconcile",
    )
}
