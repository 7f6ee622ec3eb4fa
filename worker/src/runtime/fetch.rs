//! The fetch loop: waits for a free slot, then claims as many tasks as there are free slots in
//! one `take_next` (which blocks on the queues' doorbells when they are empty), and starts a run
//! for each claim.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{Shared, execute};

pub async fn run(shared: Arc<Shared>, runs: &TaskTracker, shutdown: CancellationToken) {
    let slots = Arc::new(Semaphore::new(shared.config.concurrency.max(1)));
    let keys = shared.entrypoints.keys();
    let mut backoff = Duration::from_millis(50);
    loop {
        let first = tokio::select! {
            _ = shutdown.cancelled() => return,
            permit = slots.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
        };
        let mut permits = vec![first];
        while let Ok(permit) = slots.clone().try_acquire_owned() {
            permits.push(permit);
        }
        if shutdown.is_cancelled() {
            return;
        }
        // Not raced against shutdown: a take cut short after its script ran would strand its
        // claims until their leases expire. `idle_wait` bounds how long shutdown waits here.
        let taken = shared
            .store
            .take_next(
                &keys,
                &shared.config.worker_id,
                shared.config.lease_ttl,
                permits.len(),
                shared.config.idle_wait,
            )
            .await;
        match taken {
            Ok(claims) if shutdown.is_cancelled() => {
                // Claimed while shutdown began: hand them straight back to the queue.
                if !claims.is_empty() {
                    tracing::info!(claims = claims.len(), "shutting down: handing claims back");
                }
                for claim in claims {
                    if let Err(err) = shared.store.hand_off(&claim.lease).await {
                        tracing::warn!(task_id = %claim.lease.task_id, error = %err,
                            "could not hand a claim back; it returns when its lease expires");
                    }
                }
                return;
            }
            Ok(claims) => {
                backoff = Duration::from_millis(50);
                for claim in claims {
                    let Some(permit) = permits.pop() else { break };
                    runs.spawn(execute::run(shared.clone(), claim, permit));
                }
            }
            Err(err) => {
                tracing::warn!(error = %err, "could not take tasks; retrying");
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
}
