//! Fenced events from a running handler: progress for task subscribers and the stream kinds of
//! the profile (`text`, `delta`, `asset`, `control`). Every write carries the run's lease, so a
//! worker that lost its task cannot publish into it.

use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{Value, json};
use store::{EventPayload, Lease, StoreError, TaskStore};

#[derive(Debug, thiserror::Error)]
pub enum EmitError {
    /// The lease is no longer this worker's: the task was recovered elsewhere or finished.
    #[error("the task's lease was lost; the event was not written")]
    Fenced,
    #[error(transparent)]
    Store(#[from] StoreError),
}

#[derive(Clone)]
pub struct Emitter {
    store: Arc<dyn TaskStore>,
    /// The current lease; the heartbeat replaces its deadline, never its identity.
    lease: Arc<Mutex<Lease>>,
}

impl Emitter {
    pub fn new(store: Arc<dyn TaskStore>, lease: Arc<Mutex<Lease>>) -> Self {
        Emitter { store, lease }
    }

    /// Publishes an event named `event` with `data`; returns its sequence number.
    pub async fn emit(&self, event: &str, data: Value) -> Result<u64, EmitError> {
        let lease = self
            .lease
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let payload = EventPayload {
            event: event.to_owned(),
            data,
        };
        match self.store.emit(&lease, payload).await? {
            Some(seq) => Ok(seq),
            None => {
                telemetry::metrics::fenced_write_rejected(&lease.entrypoint, "emit");
                tracing::info!(task_id = %lease.task_id, operation = "emit",
                    "event fenced out: the lease was lost");
                Err(EmitError::Fenced)
            }
        }
    }

    /// `progress` for task subscribers, e.g. `{"done": 3, "of": 10}`.
    pub async fn progress(&self, data: Value) -> Result<u64, EmitError> {
        self.emit("progress", data).await
    }

    pub async fn text(&self, text: &str) -> Result<u64, EmitError> {
        self.emit("text", json!({ "text": text })).await
    }

    pub async fn delta(&self, delta: Value) -> Result<u64, EmitError> {
        self.emit("delta", json!({ "delta": delta })).await
    }

    pub async fn asset(&self, asset: Value) -> Result<u64, EmitError> {
        self.emit("asset", json!({ "asset": asset })).await
    }

    pub async fn control(&self, control: Value) -> Result<u64, EmitError> {
        self.emit("control", json!({ "control": control })).await
    }
}
