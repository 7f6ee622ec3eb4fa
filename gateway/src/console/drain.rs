//! `POST /console/api/workers/{id}/drain`: an operator asks one live worker to drain. It takes
//! no more tasks, lets the runs it holds finish, deregisters and exits with status 0: the
//! SIGTERM drain, started by the worker's heartbeat when it reads the request (within a third
//! of its lease TTL).
//!
//! Answers:
//! - `202` with `{"worker","drain":{by,atMs}}`; an earlier request of the same worker stands and
//!   is the one answered;
//! - `404 worker_not_found` for an id no live worker has;
//! - `400` for an id outside the bounds of [`protocol::worker_id::valid_worker_id`], which a
//!   worker's own id meets (it is checked at the worker's start);
//! - `409` in embedded mode, whose one worker is the gateway's own.
//!
//! Who may ask: the operator token, or a console session with its page token
//! ([`super::actor`]), as for pause. Each accepted request is in the audit log (`drain`, the
//! worker id).

use super::actor::Actor;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use protocol::ErrorCode;
use protocol::worker_id::parse_worker_id;
use store::registry::Drain;

use super::operate::audit;
use super::{Console, answer, json};
use crate::http::error::ApiError;

pub async fn drain(
    State(console): State<Console>,
    Path(id): Path<String>,
    actor: Actor,
) -> Response {
    // The bounds a worker's own id is held to at its start (`WORKER_ID`).
    if let Err(rule) = parse_worker_id(&id) {
        return answer(ApiError::bad_request(ErrorCode::InvalidRequest, rule));
    }
    // The in-process worker shares the gateway's shutdown: draining it would stop the gateway.
    if super::overview::embedded(&console.app) {
        return answer(ApiError::new(
            StatusCode::CONFLICT,
            ErrorCode::InvalidState,
            "embedded mode has no separate workers to drain; stop the gateway instead",
        ));
    }
    let by = console.audit_name(&actor);
    let request = Drain {
        by: by.clone(),
        at_ms: protocol::Timestamp::now().as_millis(),
    };
    let standing = match console.app.registry.drain(&id, &request).await {
        Ok(Some(standing)) => standing,
        Ok(None) => {
            return answer(ApiError::new(
                StatusCode::NOT_FOUND,
                ErrorCode::WorkerNotFound,
                format!("No live worker is {}", serde_json::Value::String(id)),
            ));
        }
        Err(err) => return answer(ApiError::from(err)),
    };
    tracing::info!(worker = %id, operator = %by, "worker drain requested by an operator");
    audit(
        &console,
        &actor,
        "drain",
        &id,
        serde_json::json!({"requestedAtMs": standing.at_ms}),
    )
    .await;
    json(
        StatusCode::ACCEPTED,
        &serde_json::json!({"worker": id, "drain": standing}),
    )
}
