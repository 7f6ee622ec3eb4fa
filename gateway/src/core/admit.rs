//! Admission shared by `POST /tasks`, invoke and stream: find the entrypoint among the live
//! workers' registry entries, check the input against its schema, create the task (in the
//! store: [`crate::core::create`]).
//!
//! Creation is a PRODUCER span (messaging conventions: the entrypoint is the destination, the
//! task id the message id) whose W3C trace context is stored in the task record; the worker
//! that runs the task continues that trace.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use protocol::{ErrorCode, Task};
use serde_json::Value;
use store::registry::{EntrypointInfo, PauseMode};
use store::{Admission, Subscription};

use crate::core::catalog::Snapshot;
use crate::core::create::Admit;
use crate::core::members::Viewer;
use crate::core::state::AppState;
use crate::http::error::ApiError;

/// The entrypoint as the live workers advertise it (merged: the highest price any of them
/// asks, see [`crate::core::prices`]), or as it was within the grace period (see [`crate::core::recent`]);
/// `None` when no worker hosts it. Read from this gateway's cached registry view, which is
/// never older than the refresh interval nor the grace period (see [`crate::core::catalog`]).
///
/// Before any worker was listed since this gateway started, an unknown entrypoint is `503
/// service_unavailable` (retry), not `404`: a gateway started while the workers' registry
/// entries have lapsed (a Redis failover that outlasted their TTL) has no memory of them yet
/// (see [`crate::core::recent`]), and a client told "not found" would give up on a skill that is back
/// within a heartbeat.
///
/// The one lookup every route and binding admits through, so the one place that hides a
/// private entrypoint (worker `--private`) from a `viewer` who is not a member: for it the
/// entrypoint is `None`, exactly as one no worker hosts, so no answer tells the two apart.
pub async fn entrypoint(
    state: &AppState,
    viewer: Viewer<'_>,
    key: &str,
) -> Result<Option<EntrypointInfo>, ApiError> {
    let found = state.catalog.entrypoint(&*state.registry, key).await?;
    if found.is_none() && !state.catalog.listed_any() {
        return Err(ApiError::no_workers_yet());
    }
    Ok(found.filter(|entrypoint| viewer.sees(entrypoint)))
}

/// How long a client refused by a paused entrypoint is told to wait: a pause is an
/// operator's decision, lifted in minutes rather than seconds.
const PAUSED_RETRY_AFTER_S: u64 = 30;

/// `503 service_unavailable` with Retry-After when an operator paused `entrypoint` in
/// `refuse` mode; called where a new task would be created (a follow-up to a task under way
/// is not one). A pause in `queue` mode admits: the task waits in the queue.
pub fn refuse_paused(entrypoint: &EntrypointInfo) -> Result<(), ApiError> {
    match &entrypoint.paused {
        Some(pause) if pause.mode == PauseMode::Refuse => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::ServiceUnavailable,
            format!(
                "Entrypoint {} is paused by an operator and takes no new tasks; retry later",
                serde_json::Value::String(entrypoint.key.clone())
            ),
        )
        .retry_after(PAUSED_RETRY_AFTER_S)),
        _ => Ok(()),
    }
}

/// The cached registry view for discovery: every entrypoint the live workers host, by key
/// (the first worker's description wins, the highest price charged), and the documents built
/// from them.
pub async fn entrypoints(state: &AppState) -> Result<Arc<Snapshot>, ApiError> {
    Ok(state.catalog.snapshot(&*state.registry).await?)
}

/// Checks `input` against the entrypoint's input schema: `400 invalid_input` with zod-like
/// issues, as upstream (which validates with zod) reports them:
///
/// - a wrong type: `{"expected","code":"invalid_type","path","message"}`, with JSON Schema's
///   `integer` reported as zod's `number` (or `int` when the value is a non-integral number);
/// - anything else: `{"code":"custom","path","message"}` with the validator's message.
///
/// An empty schema accepts everything. A schema that does not compile (including one whose
/// `$ref` points outside it) is logged once and accepts everything too; typed worker handlers
/// still decode their input.
///
/// The schema only: routes call [`check_input`], which bounds the input's size first.
pub fn validate_input(entrypoint: &EntrypointInfo, input: &Value) -> Result<(), ApiError> {
    let Some(validator) = schema::validator(&entrypoint.key, &entrypoint.input_schema) else {
        return Ok(());
    };
    let issues: Vec<Value> = validator
        .iter_errors(input)
        .map(|error| schema::issue(&error, input))
        .collect();
    if issues.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid_input(Value::Array(issues)))
    }
}

/// The admission check of a new task's input, which every route makes before it stores a task
/// or takes a payment: its size first (past `MAX_INPUT_BYTES` of JSON, `413 invalid_request`,
/// see [`check_size`]), then its schema ([`validate_input`]).
pub fn check_input(
    state: &AppState,
    entrypoint: &EntrypointInfo,
    input: &Value,
) -> Result<(), ApiError> {
    check_size(state, "input", input)?;
    validate_input(entrypoint, input)
}

/// Refuses `value` (what a new task stores: its input, an A2A message's parts) when it takes
/// more than `MAX_INPUT_BYTES` as JSON: `413 invalid_request`, the body limit's answer.
pub fn check_size<T: serde::Serialize + ?Sized>(
    state: &AppState,
    what: &str,
    value: &T,
) -> Result<(), ApiError> {
    let limit = state.config.max_input_bytes;
    if protocol::limits::exceeds(value, limit) {
        tracing::info!(limit, what, "task input refused: too large to store");
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::InvalidRequest,
            format!("The task's {what} is larger than the {limit} bytes a task may store"),
        ));
    }
    Ok(())
}

/// Compiled input schemas and the mapping of validation errors to zod-like issues.
mod schema {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, OnceLock, PoisonError};

    use jsonschema::error::{TypeKind, ValidationErrorKind};
    use jsonschema::{JsonType, ValidationError, Validator};
    use serde_json::{Value, json};

    /// Distinct schemas kept compiled; past this the cache starts over (schemas only change
    /// when workers are redeployed, so this bounds memory, not the hit rate).
    const CACHE_LIMIT: usize = 256;

    /// Compiled validators by schema text; `None` for a schema that does not compile (warned
    /// about once, not on every request).
    type Cache = Mutex<HashMap<String, Option<Arc<Validator>>>>;

    fn cache() -> &'static Cache {
        static CACHE: OnceLock<Cache> = OnceLock::new();
        CACHE.get_or_init(Default::default)
    }

    /// The validator for `schema`; `None` when it accepts everything or does not compile.
    pub(super) fn validator(key: &str, schema: &Value) -> Option<Arc<Validator>> {
        let accepts_all = match schema {
            Value::Bool(true) | Value::Null => true,
            Value::Object(map) => map.keys().all(|k| k == "$schema"),
            _ => false,
        };
        if accepts_all {
            return None;
        }
        let text = schema.to_string();
        if let Some(cached) = lock(cache()).get(&text) {
            return cached.clone();
        }
        // Compiled outside the lock: a slow schema does not stall other requests.
        let compiled = match jsonschema::options().with_retriever(Offline).build(schema) {
            Ok(validator) => Some(Arc::new(validator)),
            Err(error) => {
                tracing::warn!(entrypoint = %key, %error, "input schema does not compile; input is not checked");
                None
            }
        };
        let mut cache = lock(cache());
        if cache.len() >= CACHE_LIMIT {
            cache.clear();
        }
        cache.insert(text, compiled.clone());
        compiled
    }

    /// Resolves no external `$ref`: schemas come from workers and are compiled on the request
    /// path, which must not block on the network or read files. The JSON Schema meta-schemas
    /// are built in and need no retrieval.
    struct Offline;

    impl jsonschema::Retrieve for Offline {
        fn retrieve(
            &self,
            uri: &jsonschema::Uri<String>,
        ) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
            Err(format!("external schema {uri} is not retrieved").into())
        }
    }

    fn lock(cache: &Cache) -> std::sync::MutexGuard<'_, HashMap<String, Option<Arc<Validator>>>> {
        // The map stays consistent even if a holder panicked: entries are inserted whole.
        cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One zod-like issue for one validation error.
    pub(super) fn issue(error: &ValidationError<'_>, input: &Value) -> Value {
        let path = path(error.instance_path().as_str(), input);
        match error.kind() {
            ValidationErrorKind::Type { kind } => {
                let received = received(error.instance());
                let expected = expected(kind, error.instance());
                json!({
                    "expected": expected,
                    "code": "invalid_type",
                    "path": path,
                    "message": format!("Invalid input: expected {expected}, received {received}"),
                })
            }
            _ => json!({
                "code": "custom",
                "path": path,
                "message": error.to_string(),
            }),
        }
    }

    /// The JSON Pointer `pointer` as zod path segments: array indices as numbers, object keys
    /// as strings (decided by walking `input`, so a key like `"0"` stays a string).
    fn path(pointer: &str, input: &Value) -> Vec<Value> {
        let mut current = Some(input);
        let mut segments = Vec::new();
        for raw in pointer.split('/').skip(1) {
            let segment = raw.replace("~1", "/").replace("~0", "~");
            match current {
                Some(Value::Array(items)) => match segment.parse::<usize>() {
                    Ok(index) => {
                        current = items.get(index);
                        segments.push(json!(index));
                    }
                    Err(_) => {
                        current = None;
                        segments.push(Value::String(segment));
                    }
                },
                Some(Value::Object(map)) => {
                    current = map.get(&segment);
                    segments.push(Value::String(segment));
                }
                _ => {
                    current = None;
                    segments.push(Value::String(segment));
                }
            }
        }
        segments
    }

    /// Zod's name of a JSON value's type.
    fn received(value: &Value) -> &'static str {
        match value {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        }
    }

    /// Zod's name of the expected type. Zod has no `integer` type: an integer schema comes from
    /// `z.number().int()`, which reports `number` for a non-number and `int` for a fraction.
    fn expected(kind: &TypeKind, instance: &Value) -> String {
        let name = |ty: JsonType| match ty {
            JsonType::Integer if instance.is_number() => "int",
            JsonType::Integer => "number",
            other => other.as_str(),
        };
        match kind {
            TypeKind::Single(ty) => name(*ty).to_owned(),
            TypeKind::Multiple(types) => {
                let mut names: Vec<&str> = Vec::new();
                for ty in *types {
                    let n = name(ty);
                    if !names.contains(&n) {
                        names.push(n);
                    }
                }
                names.join(" | ")
            }
        }
    }
}

/// How long a direct run's task is kept once finished (`DIRECT_RETENTION_MS`): its caller
/// already has the answer, and an Idempotency-Key replays the stored response, not the task.
pub fn direct_retention(state: &AppState) -> Option<Duration> {
    Some(Duration::from_millis(state.config.direct_retention_ms))
}

/// Attempts of a direct run (invoke, stream): exactly one unless the entrypoint is declared
/// retry-safe, so a handler with side effects never runs twice behind one request because
/// its worker died; a caller of a lost run gets `502 task_attempts_exhausted` instead.
pub fn run_attempts(state: &AppState, entrypoint: &EntrypointInfo) -> u32 {
    if entrypoint.retry_safe {
        state.config.max_attempts
    } else {
        1
    }
}

/// Creates a queued task with a fresh id.
pub async fn create(state: &AppState, admit: Admit<'_>) -> Result<Task, ApiError> {
    create_as(
        state,
        admit,
        uuid::Uuid::new_v4().to_string(),
        Admission::Queued,
    )
    .await
}

/// Creates a queued task with a fresh id and subscribes to it from its first event: what a
/// caller following its own run (invoke, stream) needs, in one store round trip for the
/// creation and one for the subscription (see `TaskStore::create_watched`).
pub async fn create_watched(
    state: &AppState,
    admit: Admit<'_>,
) -> Result<(Task, Subscription), ApiError> {
    create_watched_as(state, admit, uuid::Uuid::new_v4().to_string()).await
}

/// [`create_watched`] with an id the caller chose (fresh, never used: an A2A send stores the
/// task's inline push config under it first).
pub async fn create_watched_as(
    state: &AppState,
    admit: Admit<'_>,
    task_id: String,
) -> Result<(Task, Subscription), ApiError> {
    crate::core::create::create_watched_in(&state.store, &state.store_memory, admit, task_id).await
}

/// Creates task `task_id`, queued or reserved (a paid admission).
pub async fn create_as(
    state: &AppState,
    admit: Admit<'_>,
    task_id: String,
    admission: Admission,
) -> Result<Task, ApiError> {
    crate::core::create::create_in(&state.store, &state.store_memory, admit, task_id, admission)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use store::registry::Pause;

    fn entrypoint(paused: Option<PauseMode>) -> EntrypointInfo {
        EntrypointInfo {
            key: "sleep".into(),
            description: String::new(),
            input_schema: serde_json::json!({}),
            output_schema: serde_json::json!({}),
            streaming: false,
            price: None,
            retry_safe: false,
            siwx: None,
            private: false,
            paused: paused.map(|mode| Pause {
                mode,
                by: "operator token ab".into(),
                at_ms: 1,
            }),
        }
    }

    #[test]
    fn only_a_refusing_pause_refuses() {
        assert!(refuse_paused(&entrypoint(None)).is_ok());
        assert!(refuse_paused(&entrypoint(Some(PauseMode::Queue))).is_ok());
        let refused = refuse_paused(&entrypoint(Some(PauseMode::Refuse))).err();
        let refused = refused.as_ref();
        assert_eq!(
            refused.map(|err| err.status),
            Some(StatusCode::SERVICE_UNAVAILABLE)
        );
        assert_eq!(
            refused.and_then(|err| err.retry_after),
            Some(PAUSED_RETRY_AFTER_S)
        );
    }
}
