//! The fault injector: SIGKILLs and restarts workers and gateways, stalls workers past their
//! lease (SIGSTOP, then SIGCONT: their late writes must be fenced out), and crashes Redis once
//! (`redis_fault.rs`); with a remote share, stalls the remote agent (SIGSTOP, SIGCONT) under
//! its calls in flight.
//! The first three faults are one of each kind, so that even a short run has them all; the
//! rest are drawn from the seed.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::sync::watch;

use super::ChaosConfig;
use super::cluster::Cluster;
use super::load::Load;
use super::redis_fault::RedisFault;

#[derive(Debug, Default, Clone)]
pub struct FaultCounts {
    pub worker_kills: usize,
    pub worker_stalls: usize,
    pub gateway_kills: usize,
    /// SIGSTOPs of the remote agent (continued after about two lease TTLs).
    pub agent_stalls: usize,
    /// Crashes and restarts of a single Redis server.
    pub redis_restarts: usize,
    /// Cluster masters SIGKILLed and taken over by a replica.
    pub master_failovers: usize,
    /// What the Redis fault did, for the report (which node, how long).
    pub redis_notes: Vec<String>,
    /// When the Redis fault struck (the SIGKILL).
    pub redis_fault_at: Option<Instant>,
    /// Restarts that failed (a violation: the cluster must come back).
    pub errors: Vec<String>,
    /// Atomic comparisons of the live count with the running records, one after each fault.
    pub count_checks: usize,
    /// Those that could not read Redis (it was down): why, so that a snapshot that never works
    /// does not pass for agreement.
    pub count_unreadable: Vec<String>,
    /// Those that disagreed: `(live count, running records)`.
    pub count_mismatches: Vec<(u64, u64)>,
    /// Every fault, with the time since the load started: shown when the run fails, to set the
    /// violations (which say when they were seen) against.
    pub timeline: Vec<String>,
    /// When the load started.
    clock: Option<Instant>,
}

impl FaultCounts {
    fn new(started: Instant) -> Self {
        FaultCounts {
            clock: Some(started),
            ..FaultCounts::default()
        }
    }

    /// Adds `what` to the timeline.
    pub fn note(&mut self, what: impl std::fmt::Display) {
        let at = self.clock.map(|clock| clock.elapsed()).unwrap_or_default();
        self.timeline.push(format!("{:>7.1?}  {what}", at));
    }

    /// Adds `what` to the timeline and to the Redis notes the report always shows.
    pub fn note_redis(&mut self, what: String) {
        self.note(&what);
        let at = self.clock.map(|clock| clock.elapsed()).unwrap_or_default();
        self.redis_notes
            .push(format!("{what} ({at:.1?} into the load)"));
    }
}

#[derive(Clone, Copy)]
enum Fault {
    KillWorker,
    KillGateway,
    StallWorker,
    StallAgent,
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
    let mut counts = FaultCounts::new(load.started);
    let mut redis_fault = RedisFault::default();
    let opening = [Fault::KillWorker, Fault::KillGateway, Fault::StallWorker];
    let mut turn = 0usize;
    let interval_ms = config.fault_interval.as_millis().max(2) as u64;
    loop {
        let wait = Duration::from_millis(rng.random_range(interval_ms / 2..interval_ms * 3 / 2));
        let going_on = pause(&mut stop, wait).await;
        let half_way = load.acknowledged.load(Ordering::Relaxed) >= config.tasks / 2;
        // Once, half-way through (or at the end of a load that finished first).
        let due = half_way || !going_on;
        redis_fault.turn(&mut cluster, &config, &mut rng, due, &mut counts);
        if !going_on {
            redis_fault.finish(&mut cluster, &mut counts);
            break;
        }
        // The non-terminal count must be exact at every moment, not only once all is done.
        counts.count_checks += 1;
        match super::checks::count_mismatch(&cluster).await {
            Ok(Some(mismatch)) => counts.count_mismatches.push(mismatch),
            Ok(None) => {}
            Err(err) => counts.count_unreadable.push(err),
        }
        let fault = match opening.get(turn) {
            Some(fault) => *fault,
            None => match rng.random_range(0..100u32) {
                0..45 => Fault::KillWorker,
                45..60 => Fault::StallWorker,
                60..70 if cluster.agent.is_some() => Fault::StallAgent,
                _ => Fault::KillGateway,
            },
        };
        turn += 1;
        match fault {
            Fault::KillWorker => {
                let index = rng.random_range(0..cluster.workers.len());
                cluster.kill_worker(index);
                counts.worker_kills += 1;
                counts.note(format!("SIGKILL worker {index}"));
                let down_for = Duration::from_millis(rng.random_range(0..800));
                pause(&mut stop, down_for).await;
                match cluster.start_worker(index) {
                    Ok(()) => counts.note(format!("worker {index} restarted")),
                    Err(err) => counts.errors.push(format!("worker {index} restart: {err}")),
                }
            }
            Fault::StallWorker => {
                let index = rng.random_range(0..cluster.workers.len());
                if cluster.signal_worker(index, Signal::SIGSTOP).is_ok() {
                    counts.worker_stalls += 1;
                    counts.note(format!("SIGSTOP worker {index}"));
                    // Past its lease, so that another worker takes its tasks over.
                    let stalled_for = Duration::from_millis(config.lease_ttl_ms * 2 + 500);
                    tokio::time::sleep(stalled_for).await;
                    match cluster.signal_worker(index, Signal::SIGCONT) {
                        Ok(()) => counts.note(format!("SIGCONT worker {index}")),
                        Err(err) => counts
                            .errors
                            .push(format!("worker {index} continue: {err}")),
                    }
                }
            }
            Fault::StallAgent => {
                if cluster.signal_agent(Signal::SIGSTOP).is_ok() {
                    counts.agent_stalls += 1;
                    counts.note("SIGSTOP the remote agent");
                    // Long enough for leases to be renewed around the hung calls (the
                    // workers keep running) and for cancels to reach them.
                    let stalled_for = Duration::from_millis(config.lease_ttl_ms * 2 + 500);
                    tokio::time::sleep(stalled_for).await;
                    match cluster.signal_agent(Signal::SIGCONT) {
                        Ok(()) => counts.note("SIGCONT the remote agent"),
                        Err(err) => counts.errors.push(format!("agent continue: {err}")),
                    }
                }
            }
            Fault::KillGateway => {
                let index = rng.random_range(0..cluster.gateways.len());
                cluster.kill_gateway(index);
                counts.gateway_kills += 1;
                counts.note(format!("SIGKILL gateway {index}"));
                let down_for = Duration::from_millis(rng.random_range(0..400));
                pause(&mut stop, down_for).await;
                match cluster.start_gateway(index).await {
                    Ok(()) => counts.note(format!(
                        "gateway {index} restarted (healthy) at {}",
                        cluster.gateway_urls()[index]
                    )),
                    Err(err) => counts
                        .errors
                        .push(format!("gateway {index} restart: {err}")),
                }
            }
        }
    }
    (cluster, counts)
}
