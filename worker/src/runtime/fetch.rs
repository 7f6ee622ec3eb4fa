//! The fetch loop: waits for a free slot, then claims and activates as many tasks as there are
//! free slots in one `take_active` (which blocks on the queues' doorbells when they are empty),
//! and starts a slot for each. A busy slot takes its next task itself when it finishes one
//! (see [`execute`]); it comes back here only when its finish brought nothing.

use std::sync::Arc;
use std::time::Duration;

use shared::store::TakeSpec;
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
        let spec = TakeSpec {
            entrypoints: keys.clone(),
            owner_id: shared.config.worker_id.clone(),
            lease_ttl: shared.config.lease_ttl,
            max_run: shared.config.max_run,
            max: permits.len(),
        };
        let taken = shared
            .store
            .take_active(&spec, shared.config.idle_wait)
            .await;
        match taken {
            Ok(started) => {
                backoff = Duration::from_millis(50);
                // Taken while shutdown began, they are active already: they run within the
                // drain like every other run (handing them back would cost them an attempt).
                for started in started {
                    let Some(permit) = permits.pop() else { break };
                    runs.spawn(execute::run(
                        shared.clone(),
                        started,
                        permit,
                        shutdown.clone(),
                    ));
                }
                if shutdown.is_cancelled() {
                    return;
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
