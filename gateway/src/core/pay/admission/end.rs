//! How a paid task that must not run ends: before the settlement, a reservation cancelled;
//! after it, a task whose claim was lost (here or in the settlement recovery).

use protocol::TaskStatus;
use store::{CasOutcome, StoreError, TaskStore, Transition};
use telemetry::metrics;

/// Cancels a reservation that will not run (before the rail is irreversible). A failure is
/// logged: the reservation expires and is reaped to `cancelled` anyway.
pub(super) async fn cancel(store: &dyn TaskStore, task_id: &str, entrypoint: &str) {
    if let Err(err) = end(store, task_id, entrypoint).await {
        tracing::warn!(%task_id, error = %err, "could not cancel a paid reservation; it will be reaped");
    }
}

/// Ends a task that must not run: `cancelled` unless it already ended. The status it ended
/// with; `None` when it is gone or, against the odds, still running.
pub(in crate::core::pay) async fn end(
    store: &dyn TaskStore,
    task_id: &str,
    entrypoint: &str,
) -> Result<Option<TaskStatus>, StoreError> {
    Ok(
        match store
            .compare_and_set(
                task_id,
                &[TaskStatus::Running],
                Transition::cancelled(),
                None,
            )
            .await?
        {
            CasOutcome::Applied(task) => {
                metrics::task_finished(entrypoint, &task);
                Some(task.status)
            }
            CasOutcome::Rejected { current, .. } => current
                .map(|task| task.status)
                .filter(|status| status.is_terminal()),
        },
    )
}
