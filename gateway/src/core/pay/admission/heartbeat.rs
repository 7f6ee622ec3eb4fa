//! The gateway's prepared claim on a paid task, renewed every third of its lease while the
//! facilitator works: a slow settlement must not let the claim lapse and the reservation be
//! reaped.

use std::sync::Arc;
use std::time::Duration;

use store::{Lease, TaskStore};
use tokio::task::JoinHandle;

pub(super) struct Heartbeat(Option<JoinHandle<()>>);

impl Heartbeat {
    pub(super) fn start(store: Arc<dyn TaskStore>, lease: Lease, ttl: Duration) -> Heartbeat {
        let period = (ttl / 3).max(Duration::from_millis(1));
        Heartbeat(Some(tokio::spawn(async move {
            let mut ticks = tokio::time::interval(period);
            ticks.tick().await;
            loop {
                ticks.tick().await;
                match store.renew_execution_claim(&lease, ttl).await {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::warn!(task_id = %lease.task_id, "paid admission claim was lost");
                        return;
                    }
                    Err(err) => {
                        tracing::warn!(task_id = %lease.task_id, error = %err, "could not renew a paid admission claim")
                    }
                }
            }
        })))
    }

    /// Stops renewing (a step that ends the admission stops it first); stopping twice is
    /// harmless.
    pub(super) fn stop(&mut self) {
        if let Some(handle) = self.0.take() {
            handle.abort();
        }
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.stop();
    }
}
