//! The fault injector: SIGKILLs and restarts workers and gateways, stalls workers past their
//! lease (SIGSTOP, then SIGCONT: their late writes must be fenced out), and crashes Redis once.
//! The first three faults are one of each kind, so that even a short run has them all; the
//! rest are drawn from the seed.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use nix::sys::signal::Signal;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::sync::watch;

use super::ChaosConfig;
use super::cluster::Cluster;
use super::load::Load;

/// How long Redis stays down when it is crashed.
const REDIS_DOWN_FOR: Duration = Duration::from_millis(500);

#[derive(Debug, Default, Clone)]
pub struct FaultCounts {
    pub worker_kills: usize,
    pub worker_stalls: usize,
    pub gateway_kills: usize,
    pub redis_restarts: usize,
    /// Restarts that failed (a violation: the cluster must come back).
    pub errors: Vec<String>,
    /// Atomic comparisons of the live count with the running records, one after each fault.
    pub count_checks: usize,
    /// Those that disagreed: `(live count, running records)`.
    pub count_mismatches: Vec<(u64, u64)>,
}

#[derive(Clone, Copy)]
enum Fault {
    KillWorker,
    KillGateway,
    StallWorker,
}

/// Sleeps `duration` unless the run stops first; `false` when it stopped.
async fn pause(stop: &mut watch::Receiver<bool>, duration: Duration) -> bool {
    if *stop.borrow() {
        return false;
    }
    tokio::select! {
        () = tokio::time::sleep(duration) => true,
        _ = stop.changed() => false,
    }
}

pub async fn run(
    mut cluster: Cluster,
    config: ChaosConfig,
    load: Arc<Load>,
    mut stop: watch::Receiver<bool>,
) -> (Cluster, FaultCounts) {
    let mut rng = StdRng::seed_from_u64(config.seed.rotate_left(17));
    let mut counts = FaultCounts::default();
    let opening = [Fault::KillWorker, Fault::KillGateway, Fault::StallWorker];
    let mut turn = 0usize;
    let interval_ms = config.fault_interval.as_millis().max(2) as u64;
    loop {
        let wait = Duration::from_millis(rng.random_range(interval_ms / 2..interval_ms * 3 / 2));
        let going_on = pause(&mut stop, wait).await;
        let half_way = load.acknowledged.load(Ordering::Relaxed) >= config.tasks / 2;
        // Once, half-way through (or at the end of a load that finished first).
        if config.restart_redis && counts.redis_restarts == 0 && (half_way || !going_on) {
            match cluster.crash_and_restart_redis(REDIS_DOWN_FOR) {
                Ok(()) => counts.redis_restarts += 1,
                Err(err) => counts.errors.push(format!("redis restart: {err}")),
            }
        }
        if !going_on {
            break;
        }
        // The non-terminal count must be exact at every moment, not only once all is done.
        counts.count_checks += 1;
        if let Some(mismatch) = super::checks::count_mismatch(&cluster).await {
            counts.count_mismatches.push(mismatch);
        }
        let fault = match opening.get(turn) {
            Some(fault) => *fault,
            None => match rng.random_range(0..100u32) {
                0..45 => Fault::KillWorker,
                45..60 => Fault::StallWorker,
                _ => Fault::KillGateway,
            },
        };
        turn += 1;
        match fault {
            Fault::KillWorker => {
                let index = rng.random_range(0..cluster.workers.len());
                cluster.kill_worker(index);
                counts.worker_kills += 1;
                let down_for = Duration::from_millis(rng.random_range(0..800));
                pause(&mut stop, down_for).await;
                if let Err(err) = cluster.start_worker(index) {
                    counts.errors.push(format!("worker {index} restart: {err}"));
                }
            }
            Fault::StallWorker => {
                let index = rng.random_range(0..cluster.workers.len());
                if cluster.signal_worker(index, Signal::SIGSTOP).is_ok() {
                    counts.worker_stalls += 1;
                    // Past its lease, so that another worker takes its tasks over.
                    let stalled_for = Duration::from_millis(config.lease_ttl_ms * 2 + 500);
                    tokio::time::sleep(stalled_for).await;
                    if let Err(err) = cluster.signal_worker(index, Signal::SIGCONT) {
                        counts
                            .errors
                            .push(format!("worker {index} continue: {err}"));
                    }
                }
            }
            Fault::KillGateway => {
                let index = rng.random_range(0..cluster.gateways.len());
                cluster.kill_gateway(index);
                counts.gateway_kills += 1;
                let down_for = Duration::from_millis(rng.random_range(0..400));
                pause(&mut stop, down_for).await;
                if let Err(err) = cluster.start_gateway(index).await {
                    counts
                        .errors
                        .push(format!("gateway {index} restart: {err}"));
                }
            }
        }
    }
    (cluster, counts)
}
