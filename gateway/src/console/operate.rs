//! The operator's actions on entrypoints, and the audit log of every operator action:
//!
//! - `POST /console/api/entrypoints/{key}/pause` with `{"mode":"queue"}` (the default; an
//!   empty body too) or `{"mode":"refuse"}`: pauses the entrypoint cluster-wide. Workers take
//!   none of its tasks (runs under way finish, queued tasks wait); in `refuse` mode new tasks
//!   are refused with `503` and Retry-After. Answers `{"key","paused":{mode,by,atMs}}`; an
//!   entrypoint no live worker hosts is `404`.
//! - `POST /console/api/entrypoints/{key}/resume`: lifts it; answers `{"key","wasPaused"}`.
//! - `GET /console/api/audit`: `{"entries":[{atMs,actor,action,target,detail}]}`, newest
//!   first (an operator session or the operator token).
//!
//! The actions take the operator token as a bearer credential, or a console session with its
//! page's token ([`super::actor`]). `taskctl admin pause|resume|audit` call them.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use protocol::ErrorCode;
use serde::Deserialize;
use store::registry::{AUDIT_KEPT, AuditEntry, Pause, PauseMode};

use super::actor::Actor;
use super::{Caller, Console, answer, json, unauthorized};
use crate::http::error::ApiError;

/// Largest pause body read.
const MAX_BODY_BYTES: usize = 1024;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct PauseBody {
    #[serde(default)]
    mode: PauseMode,
}

pub async fn pause(
    State(console): State<Console>,
    Path(key): Path<String>,
    actor: Actor,
    body: axum::body::Bytes,
) -> Response {
    if body.len() > MAX_BODY_BYTES {
        return answer(ApiError::bad_request(
            ErrorCode::InvalidRequest,
            format!("the body is larger than {MAX_BODY_BYTES} bytes"),
        ));
    }
    let request: PauseBody = if body.iter().all(u8::is_ascii_whitespace) {
        PauseBody::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(request) => request,
            Err(err) => {
                return answer(ApiError::bad_request(
                    ErrorCode::InvalidRequest,
                    format!("expected {{\"mode\":\"queue\"}} or {{\"mode\":\"refuse\"}}: {err}"),
                ));
            }
        }
    };
    match hosted(&console, &key).await {
        Ok(true) => {}
        Ok(false) => return answer(not_hosted(&key)),
        Err(err) => return answer(err),
    }
    let by = console.audit_name(&actor);
    let pause = Pause {
        mode: request.mode,
        by: by.clone(),
        at_ms: protocol::Timestamp::now().as_millis(),
    };
    if let Err(err) = console.app.registry.pause(&key, &pause).await {
        return answer(ApiError::from(err));
    }
    tracing::info!(entrypoint = %key, mode = request.mode.as_str(), operator = %by, "entrypoint paused by an operator");
    audit(
        &console,
        &actor,
        "pause",
        &key,
        serde_json::json!({"mode": request.mode}),
    )
    .await;
    json(
        StatusCode::OK,
        &serde_json::json!({"key": key, "paused": pause}),
    )
}

pub async fn resume(
    State(console): State<Console>,
    Path(key): Path<String>,
    actor: Actor,
) -> Response {
    let was_paused = match console.app.registry.resume(&key).await {
        Ok(was_paused) => was_paused,
        Err(err) => return answer(ApiError::from(err)),
    };
    // A pause of an entrypoint no worker hosts any more may still be lifted.
    if !was_paused {
        match hosted(&console, &key).await {
            Ok(true) => {}
            Ok(false) => return answer(not_hosted(&key)),
            Err(err) => return answer(err),
        }
    }
    tracing::info!(entrypoint = %key, operator = %console.audit_name(&actor), "entrypoint resumed by an operator");
    audit(
        &console,
        &actor,
        "resume",
        &key,
        serde_json::json!({"wasPaused": was_paused}),
    )
    .await;
    json(
        StatusCode::OK,
        &serde_json::json!({"key": key, "wasPaused": was_paused}),
    )
}

pub async fn audit_log(State(console): State<Console>, headers: HeaderMap) -> Response {
    if console.caller(&headers).await == Caller::Nobody {
        return unauthorized();
    }
    match console.app.registry.audit_log(AUDIT_KEPT).await {
        Ok(entries) => json(
            StatusCode::OK,
            &serde_json::json!({"entries": entries, "limit": AUDIT_KEPT}),
        ),
        Err(err) => answer(ApiError::from(err)),
    }
}

/// Appends an action to the audit log. The action was done already: a log that cannot be
/// written is reported in the gateway's log, not to the operator as a failed action.
pub(super) async fn audit(
    console: &Console,
    actor: &Actor,
    action: &str,
    target: &str,
    detail: serde_json::Value,
) {
    let entry = AuditEntry {
        at_ms: protocol::Timestamp::now().as_millis(),
        actor: console.audit_name(actor),
        action: action.to_owned(),
        target: target.to_owned(),
        detail,
    };
    if let Err(err) = console.app.registry.audit(&entry).await {
        tracing::warn!(error = %err, action, target, "could not append to the audit log");
    }
}

/// Whether some live worker hosts `key` (private ones included: the operator sees all).
async fn hosted(console: &Console, key: &str) -> Result<bool, ApiError> {
    let snapshot = console.app.catalog.snapshot(&*console.app.registry).await?;
    Ok(snapshot
        .entrypoints()
        .iter()
        .any(|entrypoint| entrypoint.key == key))
}

fn not_hosted(key: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        ErrorCode::NotFound,
        format!(
            "No live worker hosts entrypoint {}",
            serde_json::Value::String(key.to_owned())
        ),
    )
}
