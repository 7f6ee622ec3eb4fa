//! The heartbeat: every third of the lease TTL, one store call renews every lease this worker
//! holds; a lease the store refuses stops its handler, and so does a lease whose last confirmed
//! renewal is older than the TTL (its shard was unreachable: it has expired there by now). A
//! shard that does not answer holds back only its own leases' renewals. The same tick
//! refreshes the worker's registry entry and reads the entrypoints operators paused
//! cluster-wide ([`read_pauses`]), concurrently: a pause reaches every worker within a third
//! of the lease TTL, without a read per take. The registry refresh answers whether an operator
//! asked this worker to drain ([`drain_if_asked`]): then it cancels the runtime's shutdown
//! token, the one SIGTERM cancels, so a drain is the SIGTERM drain (no more takes, runs finish,
//! deregister, exit 0). Beside it, the cancellation listener stops handlers of cancelled tasks
//! at once.

use std::collections::BTreeSet;
use std::sync::Arc;

use store::Renewal;
use store::registry::{WorkerEntry, WorkerRegistry};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

use super::Shared;
use super::active::StopReason;

/// Beats until `stop`; cancels `shutdown` (the runtime's, as SIGTERM does) when an operator
/// asks this worker to drain.
pub async fn run(
    shared: Arc<Shared>,
    registry: Option<(Arc<dyn WorkerRegistry>, WorkerEntry)>,
    shutdown: CancellationToken,
    stop: CancellationToken,
) {
    let ttl = shared.config.lease_ttl;
    let mut tick = tokio::time::interval(ttl / 3);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        // Concurrently: renewals wait on every shard that holds a lease, and one shard's
        // master failing over must not hold back the registry entry (in the namespace's own
        // slot), or the worker would look gone to gateways while it is running.
        let refresh = async {
            if let Some((registry, entry)) = &registry {
                match registry.heartbeat(&current(&shared, entry), ttl).await {
                    Ok(drain) => drain_if_asked(drain, &shutdown),
                    Err(err) => {
                        tracing::warn!(error = %err, "could not refresh the registry entry");
                    }
                }
            }
        };
        let pauses = async {
            if let Some((registry, _)) = &registry {
                read_pauses(&shared, registry.as_ref()).await;
            }
        };
        tokio::join!(renew(&shared, ttl), refresh, pauses);
    }
}

/// Reads which entrypoints are paused cluster-wide into the slot share: the fetch loop and
/// finishing slots take none of their tasks. A failed read keeps the set as it was.
pub async fn read_pauses(shared: &Shared, registry: &dyn WorkerRegistry) {
    match registry.paused().await {
        Ok(paused) => {
            let keys: BTreeSet<String> = paused.into_keys().collect();
            if shared.share.set_paused(keys.clone()) {
                tracing::info!(paused = ?keys, "paused entrypoints changed");
            }
        }
        Err(err) => tracing::warn!(error = %err, "could not read the paused entrypoints"),
    }
}

/// Cancels `shutdown` when the heartbeat's reply carries an operator's drain request; once
/// draining, the request (which stands until the worker deregisters) is not logged again. A
/// failed heartbeat is retried on the next beat.
fn drain_if_asked(drain: Option<store::registry::Drain>, shutdown: &CancellationToken) {
    if let Some(drain) = drain
        && !shutdown.is_cancelled()
    {
        tracing::info!(by = %drain.by, at_ms = drain.at_ms, "drain requested by an operator");
        shutdown.cancel();
    }
}

/// `entry` with the entrypoints hosted now (a remote agent's card may have changed them).
fn current(shared: &Shared, entry: &WorkerEntry) -> WorkerEntry {
    WorkerEntry {
        entrypoints: shared.entrypoints.infos(),
        ..entry.clone()
    }
}

/// Renews every lease this worker holds, stopping the handlers of those the store refused or
/// could not confirm within their TTL.
async fn renew(shared: &Shared, ttl: std::time::Duration) {
    let leases = shared.active.leases();
    if leases.is_empty() {
        return;
    }
    let asked_at = tokio::time::Instant::now();
    match shared.store.renew_each(&leases, ttl).await {
        Ok(renewals) => {
            let mut unconfirmed = 0usize;
            for (lease, renewal) in leases.iter().zip(renewals) {
                match renewal {
                    Renewal::Renewed => shared.active.renewed(lease, asked_at),
                    Renewal::Lost => {
                        if shared.active.stop(&lease.task_id, StopReason::LeaseLost) {
                            telemetry::metrics::fenced_write_rejected(&lease.entrypoint, "renew");
                            tracing::warn!(task_id = %lease.task_id, "lease lost; stopping its handler");
                        }
                    }
                    // Its shard did not answer: the lease stands until its deadline, which
                    // the staleness check below enforces.
                    Renewal::Unconfirmed => unconfirmed += 1,
                }
            }
            if unconfirmed > 0 {
                tracing::warn!(unconfirmed, "some leases' shards did not answer; retrying");
            }
        }
        Err(err) => tracing::warn!(error = %err, "could not renew leases"),
    }
    let stale = shared.active.stop_stale(ttl, tokio::time::Instant::now());
    if !stale.is_empty() {
        // The worker's own fence: no write of these runs will be attempted, so the store
        // never gets to refuse one; count them where operators look for lost leases.
        for entrypoint in &stale {
            telemetry::metrics::fenced_write_rejected(entrypoint, "stale");
        }
        tracing::warn!(
            stale = stale.len(),
            "leases not renewed within their TTL; stopping handlers"
        );
    }
}

pub async fn listen_for_cancellations(
    shared: Arc<Shared>,
    mut cancellations: UnboundedReceiver<String>,
    stop: CancellationToken,
) {
    loop {
        let task_id = tokio::select! {
            _ = stop.cancelled() => return,
            id = cancellations.recv() => match id {
                Some(id) => id,
                None => return,
            },
        };
        if shared.active.stop(&task_id, StopReason::Cancelled) {
            tracing::info!(%task_id, "task cancelled; stopping its handler");
        }
    }
}
