//! The fetch loop: waits for a free slot, then claims and activates as many tasks as there are
//! free slots in one `take_active`, and starts a slot for each. When the queues are empty it
//! waits on their doorbells (`wait_for_work`, which claims nothing, so a worker that begins to
//! stop meanwhile has nothing to hand back) and then takes again. A busy slot takes its next
//! task itself when it finishes one (see [`execute`]); it comes back here only when its finish
//! brought nothing.

use std::sync::Arc;
use std::time::Duration;

use store::{Started, StoreError, TakeSpec};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{Shared, execute};

pub async fn run(shared: Arc<Shared>, runs: &TaskTracker, shutdown: CancellationToken) {
    let slots = Arc::new(Semaphore::new(shared.config.concurrency.max(1)));
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
        // Only entrypoints under their share of the slots, and no more than the least room
        // left among them (see `share`).
        let (entrypoints, room) = shared.share.open(None);
        let spec = TakeSpec {
            entrypoints,
            holder: shared.config.worker_id.clone(),
            lease_ttl: shared.config.lease_ttl,
            max_run: shared.config.max_run,
            max: permits.len().min(room),
        };
        let taken = take(&shared, &spec, &shutdown).await;
        match taken {
            Ok(started) => {
                backoff = Duration::from_millis(50);
                for started in started {
                    let Some(permit) = permits.pop() else { break };
                    shared.share.took(&started.claim.invocation.entrypoint);
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

/// Takes and activates up to `spec.max` tasks: at once when some are queued, else after
/// waiting up to `idle_wait` for the doorbells. A worker that began to stop while it waited
/// takes nothing: a stopping worker starts nothing new.
async fn take(
    shared: &Shared,
    spec: &TakeSpec,
    shutdown: &CancellationToken,
) -> Result<Vec<Started>, StoreError> {
    let store = &shared.store;
    let started = store.take_active(spec, Duration::ZERO).await?;
    if !started.is_empty() {
        return Ok(started);
    }
    // Not raced against shutdown either: `idle_wait` bounds it, and a ring taken here is
    // only a hint (the task stays queued for whoever looks next). Raced against an entrypoint
    // at its cap getting room again, when one is (its doorbell is not among those waited on):
    // the loop then takes again with it open. A blocking read cut short loses its connection
    // and at most a ring, which is a hint too.
    let wait = store.wait_for_work(&spec.entrypoints, shared.config.idle_wait);
    if shared.share.all_open(&spec.entrypoints) && spec.entrypoints.is_empty() {
        // Nothing hosted (a remote agent's card listing none for now): no doorbell to wait
        // on, so the idle wait paces the looks instead.
        tokio::time::sleep(shared.config.idle_wait).await;
    } else if shared.share.all_open(&spec.entrypoints) {
        wait.await?;
    } else if spec.entrypoints.is_empty() {
        // Every entrypoint paused or at its cap: no doorbell to wait on, only a run ending
        // or a resume (both ring `reopened`); the idle wait bounds it all the same.
        drop(wait);
        tokio::select! {
            _ = tokio::time::sleep(shared.config.idle_wait) => {}
            _ = shared.share.reopened() => return Ok(Vec::new()),
        }
    } else {
        tokio::select! {
            waited = wait => waited?,
            _ = shared.share.reopened() => return Ok(Vec::new()),
        }
    }
    if shutdown.is_cancelled() {
        return Ok(Vec::new());
    }
    // The wait may have begun before an entrypoint was paused: take none of its tasks now.
    let entrypoints = shared.share.unpaused(&spec.entrypoints);
    if entrypoints.len() == spec.entrypoints.len() {
        return store.take_active(spec, Duration::ZERO).await;
    }
    let spec = TakeSpec {
        entrypoints,
        ..spec.clone()
    };
    store.take_active(&spec, Duration::ZERO).await
}
