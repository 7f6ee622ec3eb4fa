//! The dead-letter view: failed tasks, by entrypoint, behind the operator token or a console
//! session (an action by session with its page's token, [`super::actor`]):
//!
//! - `GET /console/api/failed?entrypoint=KEY&cursor=C&limit=N`: one page (limit default 50,
//!   at most 200) of the entrypoint's failed tasks, newest first, each
//!   `{id, entrypoint, code, message, finishedAtMs, attempt}`, and `nextCursor` (absent on
//!   the last page). Without `entrypoint`: `{"entrypoints":[{key, failed}]}`, the hosted
//!   entrypoints whose failed index holds any task.
//! - `POST /console/api/failed/rerun` with `{"ids":[...]}` (1 to 200 task ids): each runs
//!   again as a new task ([`super::tasks::rerun_one`], which takes it out of the failed
//!   index);
//! - `POST /console/api/failed/remove` with `{"ids":[...]}`: each leaves the failed index
//!   (the operator dealt with it); the task record itself stays until its retention.
//!
//! Each bulk action answers `{"results":[{id, ok, …}], "done": n}` and is audited once, with
//! the count and the ids.

use std::collections::BTreeMap;

use super::actor::Actor;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use protocol::ErrorCode;
use serde::Deserialize;
use serde_json::{Value, json};
use store::{DEFAULT_FAILED_LIMIT, FailedCursor, MAX_FAILED_LIMIT};

use super::operate::audit;
use super::tasks::{plausible_id, record, rerun_one};
use super::{Caller, Console, answer, json};
use crate::http::error::ApiError;

/// Ids one bulk action takes at most.
pub const MAX_BULK_IDS: usize = 200;
/// Largest bulk body read (200 ids of 128 bytes, quoted, with room).
const MAX_BODY_BYTES: usize = 64 * 1024;
/// The longest entrypoint key accepted in a query.
const MAX_KEY_LEN: usize = 256;

#[derive(Deserialize)]
pub struct ListQuery {
    entrypoint: Option<String>,
    cursor: Option<String>,
    limit: Option<String>,
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::bad_request(ErrorCode::InvalidRequest, message)
}

pub async fn list(
    State(console): State<Console>,
    headers: HeaderMap,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    if console.caller(&headers).await == Caller::Nobody {
        return super::unauthorized();
    }
    let Ok(Query(query)) = query else {
        return answer(invalid("invalid query string"));
    };
    match page(&console, query).await {
        Ok(value) => json(StatusCode::OK, &value),
        Err(err) => answer(err),
    }
}

async fn page(console: &Console, query: ListQuery) -> Result<Value, ApiError> {
    let store = &console.app.store;
    let Some(entrypoint) = query.entrypoint.filter(|key| !key.is_empty()) else {
        return counts(console).await;
    };
    if entrypoint.len() > MAX_KEY_LEN {
        return Err(invalid(format!(
            "entrypoint is longer than {MAX_KEY_LEN} bytes"
        )));
    }
    let limit = match query.limit.as_deref().filter(|text| !text.is_empty()) {
        None => DEFAULT_FAILED_LIMIT,
        Some(text) => text
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|limit| (1..=MAX_FAILED_LIMIT).contains(limit))
            .ok_or_else(|| {
                invalid(format!(
                    "limit must be an integer from 1 to {MAX_FAILED_LIMIT}"
                ))
            })?,
    };
    let cursor = match query.cursor.as_deref().filter(|text| !text.is_empty()) {
        None => None,
        Some(text) => Some(
            FailedCursor::decode(text)
                .filter(|cursor| plausible_id(&cursor.task_id))
                .ok_or_else(|| invalid("cursor is not one this list gave"))?,
        ),
    };
    let page = store
        .failed_page(&entrypoint, cursor.as_ref(), limit)
        .await?;
    let tasks: Vec<Value> = page
        .entries
        .iter()
        .map(|entry| {
            json!({
                "id": entry.task_id,
                "entrypoint": entry.entrypoint,
                "code": entry.error.as_ref().map(|error| error.code.as_str()),
                "message": entry.error.as_ref().map(|error| error.message.as_str()),
                "finishedAtMs": entry.failed_at_ms,
                "attempt": entry.attempt,
            })
        })
        .collect();
    let mut value = json!({"entrypoint": entrypoint, "tasks": tasks, "limit": limit});
    if let Some(next) = page.next {
        value["nextCursor"] = Value::String(next.encode());
    }
    Ok(value)
}

/// The hosted entrypoints whose failed index holds tasks, with how many.
async fn counts(console: &Console) -> Result<Value, ApiError> {
    let snapshot = console.app.catalog.snapshot(&*console.app.registry).await?;
    let mut rows = Vec::new();
    for entrypoint in snapshot.entrypoints() {
        let failed = console.app.store.failed_count(&entrypoint.key).await?;
        if failed > 0 {
            rows.push(json!({"key": entrypoint.key, "failed": failed}));
        }
    }
    Ok(json!({ "entrypoints": rows }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Bulk {
    ids: Vec<String>,
}

/// The body's ids: 1 to [`MAX_BULK_IDS`], each a plausible task id, duplicates dropped (in
/// their first order).
fn bulk_ids(body: &[u8]) -> Result<Vec<String>, ApiError> {
    if body.len() > MAX_BODY_BYTES {
        return Err(invalid(format!(
            "the body is larger than {MAX_BODY_BYTES} bytes"
        )));
    }
    let bulk: Bulk = serde_json::from_slice(body)
        .map_err(|err| invalid(format!("expected {{\"ids\":[task ids]}}: {err}")))?;
    if bulk.ids.is_empty() || bulk.ids.len() > MAX_BULK_IDS {
        return Err(invalid(format!(
            "ids must hold 1 to {MAX_BULK_IDS} task ids"
        )));
    }
    let mut ids: Vec<String> = Vec::with_capacity(bulk.ids.len());
    for id in bulk.ids {
        if !plausible_id(&id) {
            return Err(invalid(format!(
                "{} is not a task id",
                Value::String(id.chars().take(64).collect())
            )));
        }
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    Ok(ids)
}

fn refused(id: &str, err: &ApiError) -> Value {
    json!({"id": id, "ok": false, "status": err.status.as_u16(), "error": err.code.as_str()})
}

pub async fn rerun(
    State(console): State<Console>,
    actor: Actor,
    body: axum::body::Bytes,
) -> Response {
    let ids = match bulk_ids(&body) {
        Ok(ids) => ids,
        Err(err) => return answer(err),
    };
    let mut results = Vec::with_capacity(ids.len());
    let mut done = Vec::new();
    for id in &ids {
        let original = match record(&console, id).await {
            Ok(original) => original,
            Err(err) => {
                results.push(refused(id, &err));
                continue;
            }
        };
        match rerun_one(&console, &original).await {
            Ok(task) => {
                results.push(json!({"id": id, "ok": true, "newTaskId": task.task_id}));
                done.push(json!({"id": id, "newTaskId": task.task_id}));
            }
            Err(err) => results.push(refused(id, &err)),
        }
    }
    tracing::info!(count = done.len(), "failed tasks re-run by an operator");
    audit(
        &console,
        &actor,
        "rerun_failed",
        "failed",
        json!({"count": done.len(), "tasks": done, "charged": false}),
    )
    .await;
    json(
        StatusCode::OK,
        &json!({"results": results, "done": done.len()}),
    )
}

pub async fn remove(
    State(console): State<Console>,
    actor: Actor,
    body: axum::body::Bytes,
) -> Response {
    let ids = match bulk_ids(&body) {
        Ok(ids) => ids,
        Err(err) => return answer(err),
    };
    // The index is per entrypoint: each id's record names it.
    let mut by_entrypoint: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut results = Vec::with_capacity(ids.len());
    for id in &ids {
        match record(&console, id).await {
            Ok(stored) => by_entrypoint
                .entry(stored.invocation.entrypoint)
                .or_default()
                .push(id.clone()),
            Err(err) => results.push(refused(id, &err)),
        }
    }
    let mut removed = 0u64;
    for (entrypoint, ids) in &by_entrypoint {
        match console.app.store.forget_failed(entrypoint, ids).await {
            Ok(count) => {
                removed += count;
                results.extend(ids.iter().map(|id| json!({"id": id, "ok": true})));
            }
            Err(err) => {
                let err = ApiError::from(err);
                results.extend(ids.iter().map(|id| refused(id, &err)));
            }
        }
    }
    tracing::info!(
        removed,
        "failed tasks removed from the failed index by an operator"
    );
    audit(
        &console,
        &actor,
        "remove_failed",
        "failed",
        json!({"count": removed, "ids": ids}),
    )
    .await;
    json(
        StatusCode::OK,
        &json!({"results": results, "done": removed}),
    )
}
