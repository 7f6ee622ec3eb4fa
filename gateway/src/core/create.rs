//! Storing an admitted task: what it carries ([`Admit`]) and its creation in the store, inside
//! the producer span whose context the task carries. Reads only the store and its memory
//! watch, not [`crate::core::state::AppState`], so that the payment gate, which the state
//! holds, creates its reserved tasks here (the lookups and checks before are
//! [`crate::core::admit`]'s).

use std::sync::Arc;
use std::time::Duration;

use protocol::token::OwnerHash;
use serde_json::Value;
use store::{Admission, Invocation, NewTask, Subscription, TaskStore};
use telemetry::metrics;
use tracing::Instrument;
use tracing::field::Empty;

use crate::core::store_memory::MemoryWatch;
use crate::http::error::ApiError;

/// What a new task carries besides its input.
pub struct Admit<'a> {
    pub owner: OwnerHash,
    pub entrypoint: &'a str,
    pub input: Value,
    pub context_id: Option<String>,
    pub metadata: Option<Value>,
    /// Runs the task may get in all (see [`crate::core::admit::run_attempts`] for direct
    /// runs).
    pub max_attempts: u32,
    /// How long the finished task is kept, when not the store's retention (direct runs:
    /// [`crate::core::admit::direct_retention`]).
    pub retention: Option<Duration>,
    /// The client address key the request came from ([`crate::http::client_address::Source`]):
    /// what `MAX_LIVE_PER_ADDRESS` counts under; `None` has no address bound.
    pub source: Option<String>,
    /// `owner` is a fresh internal token minted for this task alone, never given to a caller
    /// (a direct run): see `NewTask::private_owner`.
    pub private_owner: bool,
}

/// Creates task `task_id`, queued or reserved (a paid admission), unless the store is near its
/// memory limit.
pub async fn create_in(
    store: &Arc<dyn TaskStore>,
    store_memory: &MemoryWatch,
    admit: Admit<'_>,
    task_id: String,
    admission: Admission,
) -> Result<protocol::Task, ApiError> {
    store_memory.admit()?;
    let store = store.clone();
    admit_with(admit, task_id, admission, |new| async move {
        store.create(new).await
    })
    .await
}

/// [`create_in`], queued, subscribed to from its first event (see `TaskStore::create_watched`).
pub async fn create_watched_in(
    store: &Arc<dyn TaskStore>,
    store_memory: &MemoryWatch,
    admit: Admit<'_>,
    task_id: String,
) -> Result<(protocol::Task, Subscription), ApiError> {
    store_memory.admit()?;
    let store = store.clone();
    admit_with(admit, task_id, Admission::Queued, |new| async move {
        store.create_watched(new).await
    })
    .await
}

/// Stores a new task with `store_call` inside the producer span whose context the task
/// carries, and counts the admission.
async fn admit_with<T, F, Fut>(
    admit: Admit<'_>,
    task_id: String,
    admission: Admission,
    store_call: F,
) -> Result<T, ApiError>
where
    F: FnOnce(NewTask) -> Fut,
    Fut: std::future::Future<Output = Result<T, store::StoreError>>,
{
    let span = telemetry::traced_span(|| {
        tracing::info_span!(
            "create task",
            otel.name = %format_args!("create {}", admit.entrypoint),
            otel.kind = "producer",
            otel.status_code = Empty,
            messaging.system = "taskcluster",
            messaging.operation.type = "create",
            messaging.operation.name = "create",
            messaging.destination.name = admit.entrypoint,
            messaging.message.id = %task_id,
        )
    });
    let trace_context = telemetry::inject(&span);
    let created = store_call(NewTask {
        task_id,
        owner: admit.owner,
        invocation: Invocation {
            entrypoint: admit.entrypoint.to_owned(),
            input: admit.input,
            context_id: admit.context_id,
            metadata: admit.metadata,
            trace_context,
        },
        admission,
        max_attempts: admit.max_attempts,
        retention: admit.retention,
        source: admit.source,
        private_owner: admit.private_owner,
    })
    .instrument(span.clone())
    .await;
    match created {
        Ok(created) => {
            metrics::task_admitted(admit.entrypoint);
            Ok(created)
        }
        Err(err) => {
            span.record("otel.status_code", "ERROR");
            Err(err.into())
        }
    }
}
