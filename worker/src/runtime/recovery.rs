//! The recovery sweep. Every worker runs it; the store's scripts re-check each deadline, so
//! concurrent sweeps never settle a task twice. The interval is jittered so that sweeps of
//! many workers spread out instead of arriving together.
//!
//! A sweep that settled something is a span with one event per task (`task recovered`, with
//! its outcome); empty sweeps, twice a second per worker, leave no trace.

use std::sync::Arc;
use std::time::Duration;

use protocol::TaskStatus;
use store::RecoveryReport;
use telemetry::metrics;
use tokio_util::sync::CancellationToken;

use super::Shared;

/// Tasks one sweep settles at most; a full sweep is followed by another at once.
const SWEEP_LIMIT: usize = 200;

pub async fn run(shared: Arc<Shared>, stop: CancellationToken) {
    let base = shared.config.recovery_interval;
    loop {
        let jitter = jitter(base / 2);
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(base / 2 + jitter) => {}
        }
        loop {
            match shared.store.recover_expired(SWEEP_LIMIT).await {
                Ok(report) if report.is_empty() => break,
                Ok(report) => {
                    record(&shared.config.worker_id, &report);
                    let settled = report.requeued.len()
                        + report.failed.len()
                        + report.cancelled.len()
                        + report.retried.len();
                    if settled < SWEEP_LIMIT {
                        break;
                    }
                }
                Err(err) => {
                    tracing::warn!(error = %err, "recovery sweep failed");
                    break;
                }
            }
        }
    }
}

/// Logs, traces and counts what a sweep settled.
fn record(worker_id: &str, report: &RecoveryReport) {
    let span = tracing::info_span!(
        "recovery sweep",
        otel.kind = "internal",
        taskcluster.worker.id = %worker_id,
        requeued = report.requeued.len(),
        failed = report.failed.len(),
        cancelled = report.cancelled.len(),
        retried = report.retried.len(),
    );
    let _entered = span.enter();
    // A retry's backoff ending is no recovery: it is logged, not counted as one.
    for task_id in &report.retried {
        let entrypoint = report.entrypoint_of(task_id);
        tracing::debug!(%task_id, entrypoint, "backoff over; task queued for its retry");
    }
    let settled = [
        (&report.requeued, "requeued", None),
        (&report.failed, "failed", Some(TaskStatus::Failed)),
        (&report.cancelled, "cancelled", Some(TaskStatus::Cancelled)),
    ];
    for (ids, outcome, terminal) in settled {
        for task_id in ids {
            let entrypoint = report.entrypoint_of(task_id);
            metrics::task_recovered(entrypoint, outcome);
            if let Some(status) = terminal {
                metrics::task_settled(entrypoint, status, None);
            }
            tracing::info!(%task_id, entrypoint, outcome, "task recovered");
        }
    }
    tracing::info!(
        requeued = report.requeued.len(),
        failed = report.failed.len(),
        cancelled = report.cancelled.len(),
        retried = report.retried.len(),
        "recovered expired tasks"
    );
}

/// A random duration in `0..max`, from the thread RNG of uuid's v4 generator (no extra crate).
fn jitter(max: Duration) -> Duration {
    let bits = uuid::Uuid::new_v4().as_u128() as u64;
    let max_ms = max.as_millis().max(1) as u64;
    Duration::from_millis(bits % max_ms)
}
