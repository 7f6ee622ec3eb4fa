//! The cluster gauges (`taskcluster.queue.depth` per entrypoint, `taskcluster.tasks.live`,
//! `taskcluster.leases.active`, `taskcluster.workers.live`, `taskcluster.workers.capacity`,
//! `taskcluster.store.memory.fill`), reported by one process of the cluster: the holder of
//! the registry's reporter lease ([`WorkerRegistry::hold_reporter`]). Every worker runs this
//! loop; each tick it takes or renews the lease, and only the holder samples the store and the
//! registry, so a dashboard sees each cluster value once, and the gauges of the other workers
//! report nothing. A holder that dies loses the lease [`LEASE_TICKS`] ticks after its last
//! renewal and another worker takes over; one that stops cleanly gives it up at once.
//!
//! The callbacks, run at each metrics export or scrape, only read the latest sample. Runs
//! only when metrics are recorded (OTLP, `/metrics`, or both).

use std::collections::BTreeSet;
use std::sync::Arc;

use store::StoreError;
use store::registry::WorkerRegistry;
use telemetry::metrics::{self, ClusterGauges, ClusterSample};
use tokio_util::sync::CancellationToken;

use super::Shared;

/// The reporter lease lasts this many sampling intervals: a holder that misses two renewals
/// in a row (a slow Redis, a pause) keeps it.
const LEASE_TICKS: u32 = 3;

pub async fn run(
    shared: Arc<Shared>,
    registry: Option<Arc<dyn WorkerRegistry>>,
    stop: CancellationToken,
) {
    let gauges = Arc::new(ClusterGauges::default());
    let Some(_registered) = metrics::register_cluster_gauges(gauges.clone()) else {
        return;
    };
    let worker_id = shared.config.worker_id.as_str();
    let lease_ttl = shared.config.gauge_interval * LEASE_TICKS;
    let mut tick = tokio::time::interval(shared.config.gauge_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Only for the log lines of a change.
    let mut reporting = false;
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => {}
        }
        // Without a registry this process is the only one there is.
        let holds = match &registry {
            Some(registry) => registry.hold_reporter(worker_id, lease_ttl).await,
            None => Ok(true),
        };
        let holds = match holds {
            Ok(holds) => holds,
            Err(err) => {
                // Unsure whether it still holds the lease: it stops reporting rather than
                // risk a second reporter (another worker may have taken over).
                tracing::debug!(error = %err, "could not renew the reporter lease");
                false
            }
        };
        if holds != reporting {
            reporting = holds;
            if holds {
                tracing::info!(%worker_id, "this worker reports the cluster gauges");
            } else {
                tracing::info!(%worker_id, "this worker no longer reports the cluster gauges");
            }
        }
        if !holds {
            gauges.clear();
            continue;
        }
        match sample(&shared, registry.as_deref()).await {
            Ok(sample) => gauges.update(sample),
            Err(err) => tracing::debug!(error = %err, "could not sample the cluster gauges"),
        }
    }
    gauges.clear();
    // Whether or not the last renewal was confirmed: the release deletes the lease only if it
    // is still this worker's.
    if let Some(registry) = &registry
        && let Err(err) = registry.release_reporter(worker_id).await
    {
        tracing::debug!(error = %err, "could not give the reporter lease up; it expires");
    }
}

async fn sample(
    shared: &Shared,
    registry: Option<&dyn WorkerRegistry>,
) -> Result<ClusterSample, StoreError> {
    // The entrypoints of every live worker, not only this one's: the reporter speaks for the
    // cluster. A bounded set: what the workers host.
    let mut entrypoints: BTreeSet<String> = shared.entrypoints.keys().into_iter().collect();
    let (workers_live, workers_capacity) = match registry {
        Some(registry) => {
            let workers = registry.workers().await?;
            for worker in &workers {
                entrypoints.extend(worker.entrypoints.iter().map(|info| info.key.clone()));
            }
            let capacity = workers.iter().map(|worker| worker.concurrency as u64).sum();
            (Some(workers.len() as u64), Some(capacity))
        }
        None => (Some(1), Some(shared.config.concurrency as u64)),
    };
    // Every read at once: one round trip's wait, however many entrypoints.
    let store = &shared.store;
    let (depths, leases_active, tasks_live, fills) = tokio::join!(
        futures::future::try_join_all(entrypoints.iter().map(|name| store.queue_depth(name))),
        store.lease_count(),
        store.live_count(),
        store.memory_fill(),
    );
    let queue_depth = entrypoints.into_iter().zip(depths?).collect();
    // A store that does not count leases leaves that gauge empty, not the others; the same
    // for memory (the in-memory store has no limit to fill).
    let leases_active = leases_active.ok();
    let tasks_live = tasks_live.ok();
    let memory_fill = match fills {
        Ok(fills) => fills
            .iter()
            .filter_map(|fill| fill.ratio().map(|ratio| (fill.node.clone(), ratio)))
            .collect(),
        Err(err) => {
            tracing::debug!(error = %err, "could not read the store's memory");
            Vec::new()
        }
    };
    Ok(ClusterSample {
        queue_depth,
        tasks_live,
        leases_active,
        workers_live,
        workers_capacity,
        memory_fill,
    })
}
