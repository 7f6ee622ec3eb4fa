//! The runs this worker holds: their leases (renewed by the heartbeat) and a way to stop each.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use store::Lease;
use tokio_util::sync::CancellationToken;

/// Why a run was stopped from outside the handler. Each means the worker must not write the
/// task again: someone else finished it, another worker owns it now, or we are leaving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The task was cancelled (it is already terminal).
    Cancelled,
    /// The lease could not be renewed: the task may be running elsewhere.
    LeaseLost,
    /// The drain timeout passed during shutdown; recovery will run the task again.
    Abandoned,
}

pub struct Run {
    pub lease: Arc<Mutex<Lease>>,
    pub cancel: CancellationToken,
    pub stop: Arc<Mutex<Option<StopReason>>>,
    /// Local instant of the last renewal the store confirmed.
    pub renewed_at: tokio::time::Instant,
}

#[derive(Default)]
pub struct ActiveRuns {
    runs: Mutex<HashMap<String, Run>>,
}

impl ActiveRuns {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Run>> {
        // Held only for map operations, never across an await.
        self.runs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn insert(&self, task_id: String, run: Run) {
        self.lock().insert(task_id, run);
    }

    pub fn remove(&self, task_id: &str) {
        self.lock().remove(task_id);
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Stops one run, remembering the first reason given.
    pub fn stop(&self, task_id: &str, reason: StopReason) -> bool {
        let runs = self.lock();
        let Some(run) = runs.get(task_id) else {
            return false;
        };
        stop_run(run, reason);
        true
    }

    pub fn abandon_all(&self) {
        for run in self.lock().values() {
            stop_run(run, StopReason::Abandoned);
        }
    }

    /// The current leases, for one batched renewal.
    pub fn leases(&self) -> Vec<Lease> {
        self.lock()
            .values()
            .map(|run| {
                run.lease
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone()
            })
            .collect()
    }

    /// Records a confirmed renewal of `lease` (if it is still the run's lease).
    pub fn renewed(&self, lease: &Lease, at: tokio::time::Instant) {
        if let Some(run) = self.lock().get_mut(&lease.task_id) {
            let current = run.lease.lock().unwrap_or_else(PoisonError::into_inner);
            if current.epoch == lease.epoch {
                run.renewed_at = at;
            }
            drop(current);
        }
    }

    /// Stops runs whose last confirmed renewal is older than `ttl`: their leases have surely
    /// expired in the store even if the store could not tell us (it was unreachable, or this
    /// process was frozen while a renewal was in flight). Returns their entrypoints.
    pub fn stop_stale(&self, ttl: std::time::Duration, now: tokio::time::Instant) -> Vec<String> {
        let runs = self.lock();
        let mut stopped = Vec::new();
        for run in runs.values() {
            if run.renewed_at + ttl <= now {
                stop_run(run, StopReason::LeaseLost);
                let lease = run.lease.lock().unwrap_or_else(PoisonError::into_inner);
                stopped.push(lease.entrypoint.clone());
            }
        }
        stopped
    }
}

fn stop_run(run: &Run, reason: StopReason) {
    let mut stop = run.stop.lock().unwrap_or_else(PoisonError::into_inner);
    if stop.is_none() {
        *stop = Some(reason);
    }
    drop(stop);
    run.cancel.cancel();
}
