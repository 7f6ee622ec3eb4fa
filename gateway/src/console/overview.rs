//! The console's one document: the cluster's state now and its recent history, all aggregates.
//! It names entrypoints, workers, task ids and error codes; never a task's input, result, error
//! message, owner, payer or token.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use store::stats::{self, StatsBucket, StatsWindow};
use telemetry::tally::{Count, LATENCY_BOUNDS_MS};

use crate::core::state::AppState;

/// How many buckets the charts show (10 minutes).
pub const CHART_BUCKETS: usize = 60;
/// How many of the last buckets the totals and percentiles cover (5 minutes).
const TOTAL_BUCKETS: usize = 30;
/// How many failures the console lists.
const FAILURES_SHOWN: usize = 12;

#[derive(Debug, Serialize)]
pub struct Overview {
    pub at_ms: u64,
    pub mode: &'static str,
    pub tasks: TaskCounts,
    pub entrypoints: Vec<EntrypointRow>,
    pub workers: Vec<WorkerRow>,
    pub capacity: u64,
    pub totals: Totals,
    pub chart: Chart,
    pub failures: Vec<stats::FailureRecord>,
    pub payments: Payments,
    pub store_memory: Vec<MemoryRow>,
    /// What could not be read this time (the rest is still shown).
    pub partial: Vec<String>,
}

#[derive(Debug, Default, Serialize)]
pub struct TaskCounts {
    pub live: Option<u64>,
    pub queued: u64,
    pub running: u64,
    /// Live tasks neither queued nor running: waiting for input, for a payment's settlement,
    /// or between attempts.
    pub waiting: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct EntrypointRow {
    pub name: String,
    pub queued: Option<u64>,
    pub running: u64,
    /// Slots of the live workers that host it.
    pub capacity: u64,
    pub workers: u64,
    /// Paused by an operator (`taskctl admin pause`): its queued tasks wait.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused: Option<store::registry::Pause>,
}

#[derive(Debug, Serialize)]
pub struct WorkerRow {
    pub id: String,
    pub host: String,
    pub entrypoints: Vec<String>,
    pub concurrency: u64,
    pub leases: Option<u64>,
    pub started_at_ms: u64,
    /// When its last load note was written (about every 2 s while the console is on).
    pub last_seen_ms: Option<u64>,
    /// An operator asked it to drain (`taskctl admin drain`): it takes no more tasks and
    /// leaves once its runs finish.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub draining: Option<store::registry::Drain>,
}

#[derive(Debug, Default, Serialize)]
pub struct Totals {
    pub minutes: u64,
    pub admitted: u64,
    pub completed: u64,
    pub failed: u64,
    pub cancelled: u64,
    pub recovered: u64,
    pub settled: u64,
    pub p50_ms: Option<u64>,
    pub p95_ms: Option<u64>,
    pub p99_ms: Option<u64>,
}

#[derive(Debug, Default, Serialize)]
pub struct Chart {
    pub bucket_ms: u64,
    pub points: Vec<ChartPoint>,
}

#[derive(Debug, Serialize)]
pub struct ChartPoint {
    pub start_ms: u64,
    pub admitted: u64,
    pub completed: u64,
    pub failed: u64,
    pub cancelled: u64,
    pub recovered: u64,
    pub p50_ms: Option<u64>,
    pub p99_ms: Option<u64>,
}

#[derive(Debug, Default, Serialize)]
pub struct Payments {
    pub enabled: bool,
    /// Settled in the totals' window.
    pub settled: u64,
    /// Credentials left settling whose outcome the last recovery sweep could not learn
    /// (their tasks are held); `None` until this gateway's first sweep.
    pub awaiting_recovery: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct MemoryRow {
    pub node: String,
    pub used: u64,
    pub max: u64,
    /// `used / max`, when there is a max.
    pub fill: Option<f64>,
    /// The admission high-water mark, as a fraction.
    pub high_water: Option<f64>,
}

/// Whether this gateway runs embedded: its store, registry and one worker in this process.
pub fn embedded(state: &AppState) -> bool {
    cfg!(feature = "embedded") && !state.config.redis.configured()
}

/// Builds the overview; a part that cannot be read is left out and named in `partial`.
pub async fn build(state: &AppState) -> Overview {
    let mut partial = Vec::new();
    let now_ms = protocol::Timestamp::now().as_millis();
    let registry = match state.registry.workers().await {
        Ok(workers) => workers,
        Err(err) => {
            tracing::debug!(error = %err, "console: could not list workers");
            partial.push("workers".to_owned());
            Vec::new()
        }
    };
    let worker_ids: Vec<String> = registry.iter().map(|w| w.worker_id.clone()).collect();
    let window = match state.store.cluster_stats() {
        Some(stats) => match stats.window(now_ms, CHART_BUCKETS, &worker_ids).await {
            Ok(window) => window,
            Err(err) => {
                tracing::debug!(error = %err, "console: could not read the stats");
                partial.push("stats".to_owned());
                StatsWindow::default()
            }
        },
        None => StatsWindow::default(),
    };
    let loads: BTreeMap<&str, &stats::WorkerLoad> = window
        .loads
        .iter()
        .map(|load| (load.worker_id.as_str(), load))
        .collect();

    // Entrypoints: every one a live worker hosts.
    let mut names = BTreeSet::new();
    for worker in &registry {
        for info in &worker.entrypoints {
            names.insert(info.key.clone());
        }
    }
    // Every read of the store at once: one round trip's wait, however many entrypoints.
    let store = &state.store;
    let (depths, live, leases, paused, drains) = tokio::join!(
        futures::future::join_all(names.iter().map(|name| store.queue_depth(name))),
        store.live_count(),
        store.lease_count(),
        state.registry.paused(),
        state.registry.drains(),
    );
    let mut drains = drains.unwrap_or_else(|err| {
        tracing::debug!(error = %err, "console: could not read the drain requests");
        partial.push("drains".to_owned());
        BTreeMap::new()
    });
    let mut paused = paused.unwrap_or_else(|err| {
        tracing::debug!(error = %err, "console: could not read the paused entrypoints");
        partial.push("paused".to_owned());
        BTreeMap::new()
    });
    let mut tasks = TaskCounts {
        live: live.ok(),
        ..TaskCounts::default()
    };
    let leases = leases.ok();
    let mut entrypoints = Vec::with_capacity(names.len());
    for (name, depth) in names.into_iter().zip(depths) {
        let hosts: Vec<_> = registry
            .iter()
            .filter(|w| w.entrypoints.iter().any(|info| info.key == name))
            .collect();
        let queued = match depth {
            Ok(depth) => Some(depth),
            Err(err) => {
                tracing::debug!(error = %err, "console: could not read a queue depth");
                partial.push(format!("queue {name}"));
                None
            }
        };
        let running: u64 = loads
            .values()
            .map(|load| load.running.get(&name).copied().unwrap_or(0))
            .sum();
        tasks.queued += queued.unwrap_or(0);
        tasks.running += running;
        entrypoints.push(EntrypointRow {
            capacity: hosts.iter().map(|w| w.concurrency as u64).sum(),
            workers: hosts.len() as u64,
            paused: paused.remove(&name),
            name,
            queued,
            running,
        });
    }
    tasks.waiting = tasks.live.map(|live| {
        live.saturating_sub(tasks.queued)
            .saturating_sub(leases.unwrap_or(tasks.running))
    });

    let workers: Vec<WorkerRow> = registry
        .iter()
        .map(|w| {
            let load = loads.get(w.worker_id.as_str());
            WorkerRow {
                id: w.worker_id.clone(),
                host: w.host.clone(),
                entrypoints: w.entrypoints.iter().map(|info| info.key.clone()).collect(),
                concurrency: w.concurrency as u64,
                leases: load.map(|load| load.leases),
                started_at_ms: w.started_at_ms,
                last_seen_ms: load.map(|load| load.at_ms),
                draining: drains.remove(&w.worker_id),
            }
        })
        .collect();
    let capacity = workers.iter().map(|w| w.concurrency).sum();

    let recent = &window.buckets[window.buckets.len().saturating_sub(TOTAL_BUCKETS)..];
    let totals = totals(recent);
    let chart = Chart {
        bucket_ms: stats::BUCKET_MS,
        points: window.buckets.iter().map(point).collect(),
    };
    let payments = payments(state, totals.settled);
    let store_memory = memory(state, &mut partial).await;

    Overview {
        at_ms: now_ms,
        mode: if embedded(state) {
            "embedded"
        } else {
            "cluster"
        },
        tasks,
        entrypoints,
        workers,
        capacity,
        totals,
        chart,
        failures: window.failures.into_iter().take(FAILURES_SHOWN).collect(),
        payments,
        store_memory,
        partial,
    }
}

fn totals(buckets: &[StatsBucket]) -> Totals {
    let sum = |count: Count| buckets.iter().map(|b| b.count(count.field())).sum();
    let latency = merged_latency(buckets);
    Totals {
        minutes: (buckets.len() as u64 * stats::BUCKET_MS) / 60_000,
        admitted: sum(Count::Admitted),
        completed: sum(Count::Completed),
        failed: sum(Count::Failed),
        cancelled: sum(Count::Cancelled),
        recovered: sum(Count::Recovered),
        settled: sum(Count::Settled),
        p50_ms: percentile(&latency, 0.50),
        p95_ms: percentile(&latency, 0.95),
        p99_ms: percentile(&latency, 0.99),
    }
}

fn point(bucket: &StatsBucket) -> ChartPoint {
    let latency = merged_latency(std::slice::from_ref(bucket));
    ChartPoint {
        start_ms: bucket.start_ms,
        admitted: bucket.count(Count::Admitted.field()),
        completed: bucket.count(Count::Completed.field()),
        failed: bucket.count(Count::Failed.field()),
        cancelled: bucket.count(Count::Cancelled.field()),
        recovered: bucket.count(Count::Recovered.field()),
        p50_ms: percentile(&latency, 0.50),
        p99_ms: percentile(&latency, 0.99),
    }
}

/// The latency bucket counts of `buckets` added up.
fn merged_latency(buckets: &[StatsBucket]) -> Vec<u64> {
    (0..=LATENCY_BOUNDS_MS.len())
        .map(|index| {
            let field = stats::latency_field(index);
            buckets.iter().map(|bucket| bucket.count(&field)).sum()
        })
        .collect()
}

/// The upper bound (ms) of the bucket holding quantile `q`; the last bound for the overflow
/// bucket (the value is at least that). `None` without samples.
pub fn percentile(counts: &[u64], q: f64) -> Option<u64> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    // The rank of the quantile, 1-based: the smallest count whose share reaches q.
    let rank = ((total as f64) * q).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (index, count) in counts.iter().enumerate() {
        seen += count;
        if seen >= rank {
            return LATENCY_BOUNDS_MS
                .get(index)
                .or(LATENCY_BOUNDS_MS.last())
                .copied();
        }
    }
    LATENCY_BOUNDS_MS.last().copied()
}

/// Settled in the window, and what this gateway's last settlement recovery sweep left
/// unreconciled (every paying gateway sweeps the same ledger, so any one's count will do).
/// The settled count is the cluster's, like `totals.settled`, also on a gateway that takes no
/// payments itself (`enabled: false`): the two never disagree.
fn payments(state: &AppState, settled: u64) -> Payments {
    let Some(gate) = &state.payments else {
        return Payments {
            settled,
            ..Payments::default()
        };
    };
    Payments {
        enabled: true,
        settled,
        awaiting_recovery: gate.unreconciled.get(),
    }
}

async fn memory(state: &AppState, partial: &mut Vec<String>) -> Vec<MemoryRow> {
    let fills = match state.store.memory_fill().await {
        Ok(fills) => fills,
        Err(err) => {
            tracing::debug!(error = %err, "console: could not read the store's memory");
            partial.push("store memory".to_owned());
            return Vec::new();
        }
    };
    let mark = state.config.redis_memory_high_water;
    let high_water = (mark > 0 && mark < 100).then(|| f64::from(mark) / 100.0);
    fills
        .into_iter()
        .map(|fill| MemoryRow {
            fill: fill.ratio(),
            node: fill.node,
            used: fill.used,
            max: fill.max,
            high_water,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_bucket_upper_bounds() {
        let mut counts = vec![0; LATENCY_BOUNDS_MS.len() + 1];
        assert_eq!(percentile(&counts, 0.5), None);
        counts[0] = 98; // <= 5 ms
        counts[3] = 1; // <= 50 ms
        counts[LATENCY_BOUNDS_MS.len()] = 1; // past the last bound
        assert_eq!(percentile(&counts, 0.5), Some(5));
        assert_eq!(percentile(&counts, 0.99), Some(50));
        assert_eq!(percentile(&counts, 1.0), LATENCY_BOUNDS_MS.last().copied());
    }
}
