//! Cluster-wide gauges (`taskcluster.queue.depth`, `taskcluster.leases.active`,
//! `taskcluster.workers.live`): sampled from the store and registry by this loop every
//! `gauge_interval`, so the gauges' callbacks, run at each metrics export, only read memory.
//! Every worker reports the same cluster-wide values: aggregate them with max, not sum.
//! Runs only when metrics are exported.

use std::sync::Arc;

use store::StoreError;
use store::registry::WorkerRegistry;
use telemetry::metrics::{self, ClusterGauges, ClusterSample};
use tokio_util::sync::CancellationToken;

use super::Shared;

pub async fn run(
    shared: Arc<Shared>,
    registry: Option<Arc<dyn WorkerRegistry>>,
    stop: CancellationToken,
) {
    let gauges = Arc::new(ClusterGauges::default());
    let Some(_registered) = metrics::register_cluster_gauges(gauges.clone()) else {
        return;
    };
    let mut tick = tokio::time::interval(shared.config.gauge_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        match sample(&shared, registry.as_deref()).await {
            Ok(sample) => gauges.update(sample),
            Err(err) => tracing::debug!(error = %err, "could not sample the cluster gauges"),
        }
    }
}

async fn sample(
    shared: &Shared,
    registry: Option<&dyn WorkerRegistry>,
) -> Result<ClusterSample, StoreError> {
    let mut queue_depth = Vec::new();
    for entrypoint in shared.entrypoints.keys() {
        let depth = shared.store.queue_depth(&entrypoint).await?;
        queue_depth.push((entrypoint, depth));
    }
    // A store that does not count leases leaves that gauge empty, not the others.
    let leases_active = shared.store.lease_count().await.ok();
    let workers_live = match registry {
        Some(registry) => Some(registry.workers().await?.len() as u64),
        None => None,
    };
    Ok(ClusterSample {
        queue_depth,
        leases_active,
        workers_live,
    })
}
