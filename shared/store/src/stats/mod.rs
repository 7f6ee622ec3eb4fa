//! Cluster-wide stats for the operator console: what every process did, in ten-second buckets
//! shared by the cluster, the latest failures, and each worker's load.
//!
//! Every process (gateway and worker) runs [`publish_loop`]: every couple of seconds it drains
//! its [`telemetry::tally`] and adds it to the current bucket, in one round trip. It writes only
//! while some gateway of the cluster has a console configured ([`ClusterStats::announce_console`]
//! keeps a short-lived flag): a cluster without a console holds no stats keys at all.
//!
//! Why buckets in the store rather than per-process counters: a console must show the rate of a
//! cluster whose processes come and go (a killed worker's counts must not vanish or go
//! negative), and every gateway's console must show the same figures. Each bucket expires by
//! itself after [`BUCKETS_KEPT`] bucket lengths, so the store holds a bounded window.
//!
//! Buckets are indexed by the publishing process's wall clock: processes of one cluster are
//! assumed to keep their clocks within a bucket of each other (NTP).

mod memory;
mod redis;
pub mod sessions;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use telemetry::tally;
use tokio_util::sync::CancellationToken;

pub use memory::MemoryStats;
pub use redis::RedisStats;
pub use sessions::ConsoleSessions;

use crate::StoreError;

/// The length of one bucket.
pub const BUCKET_MS: u64 = 10_000;
/// How many buckets the store keeps (15 minutes).
pub const BUCKETS_KEPT: u64 = 90;
/// How many failures the store keeps, newest first.
pub const FAILURES_KEPT: usize = 50;
/// How long a console's announcement lasts unless renewed.
pub const CONSOLE_TTL: Duration = Duration::from_secs(30);
/// How long a worker's load note stands unless renewed (a killed worker drops out after it).
pub const LOAD_TTL: Duration = Duration::from_secs(10);

/// Field name of latency bucket `index` (see [`tally::LATENCY_BOUNDS_MS`]).
pub fn latency_field(index: usize) -> String {
    format!("e2e:{index}")
}

/// One failed task, as the console lists it: no input, no message, no owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureRecord {
    pub task_id: String,
    pub entrypoint: String,
    pub code: String,
    pub at_ms: u64,
}

/// What one worker holds now.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerLoad {
    pub worker_id: String,
    /// Runs by entrypoint.
    pub running: BTreeMap<String, u64>,
    /// Leases held (every run holds one).
    pub leases: u64,
    /// When the note was written (the worker's clock, ms since the Unix epoch).
    pub at_ms: u64,
}

/// What one process publishes at once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatsDelta {
    pub at_ms: u64,
    /// Counts to add to the bucket of `at_ms`, by field; zeros are left out.
    pub counts: Vec<(String, u64)>,
    pub failures: Vec<FailureRecord>,
    pub load: Option<WorkerLoad>,
}

impl StatsDelta {
    /// The delta of a [`tally::drain`].
    pub fn from_tally(at_ms: u64, drained: tally::Drained, load: Option<WorkerLoad>) -> Self {
        let mut counts: Vec<(String, u64)> = drained
            .counts
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(count, n)| (count.field().to_owned(), *n))
            .collect();
        counts.extend(
            drained
                .latency
                .iter()
                .enumerate()
                .filter(|(_, n)| **n > 0)
                .map(|(index, n)| (latency_field(index), *n)),
        );
        let failures = drained
            .failures
            .into_iter()
            .map(|note| FailureRecord {
                task_id: note.task_id,
                entrypoint: note.entrypoint,
                code: note.code,
                at_ms: note.at_ms,
            })
            .collect();
        StatsDelta {
            at_ms,
            counts,
            failures,
            load,
        }
    }

    fn is_empty(&self) -> bool {
        self.counts.is_empty() && self.failures.is_empty() && self.load.is_none()
    }
}

/// One bucket's counts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StatsBucket {
    pub start_ms: u64,
    pub counts: BTreeMap<String, u64>,
}

impl StatsBucket {
    pub fn count(&self, field: &str) -> u64 {
        self.counts.get(field).copied().unwrap_or(0)
    }
}

/// The last buckets (oldest first, every bucket present, empty ones too), the latest failures
/// (newest first) and the load of the workers asked about.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StatsWindow {
    pub buckets: Vec<StatsBucket>,
    pub failures: Vec<FailureRecord>,
    pub loads: Vec<WorkerLoad>,
}

/// Where the cluster's stats live: the store's Redis ([`RedisStats`]) or this process
/// ([`MemoryStats`], embedded mode); the console's sessions live beside them.
#[async_trait]
pub trait ClusterStats: ConsoleSessions + Send + Sync {
    /// Says that a console reads the stats, for `ttl`: processes publish while it stands.
    async fn announce_console(&self, ttl: Duration) -> Result<(), StoreError>;

    /// Whether a console reads the stats.
    async fn console_on(&self) -> Result<bool, StoreError>;

    /// Adds one process's delta.
    async fn publish(&self, delta: &StatsDelta) -> Result<(), StoreError>;

    /// The `buckets` last buckets up to the one holding `now_ms`, the failures, and the load
    /// notes of `workers` that still stand.
    async fn window(
        &self,
        now_ms: u64,
        buckets: usize,
        workers: &[String],
    ) -> Result<StatsWindow, StoreError>;
}

/// Publishes this process's tally every `interval` while a console is announced, until `stop`
/// (then once more, so a clean shutdown loses nothing). `load` describes a worker's runs
/// (`None` for a gateway). While no console is announced the tally is drained and dropped, so
/// that a console switched on later starts from its own moment.
pub async fn publish_loop(
    stats: Arc<dyn ClusterStats>,
    interval: Duration,
    load: impl Fn() -> Option<WorkerLoad> + Send + 'static,
    stop: CancellationToken,
) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut on = false;
    loop {
        let stopping = tokio::select! {
            () = stop.cancelled() => true,
            _ = ticks.tick() => false,
        };
        if !stopping {
            match stats.console_on().await {
                Ok(now_on) => on = now_on,
                Err(err) => {
                    tracing::debug!(error = %err, "could not ask whether a console reads the stats")
                }
            }
        }
        let drained = tally::drain();
        if on {
            let delta =
                StatsDelta::from_tally(protocol::Timestamp::now().as_millis(), drained, load());
            if !delta.is_empty()
                && let Err(err) = stats.publish(&delta).await
            {
                tracing::debug!(error = %err, "could not publish this process's stats");
            }
        }
        if stopping {
            return;
        }
    }
}

/// Keeps a console announced every `interval` until `stop`.
pub async fn announce_loop(
    stats: Arc<dyn ClusterStats>,
    interval: Duration,
    stop: CancellationToken,
) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        if let Err(err) = stats.announce_console(CONSOLE_TTL).await {
            tracing::debug!(error = %err, "could not announce the console");
        }
    }
}

/// The bucket index of `at_ms`.
pub(crate) fn bucket_of(at_ms: u64) -> u64 {
    at_ms / BUCKET_MS
}

/// The `count` bucket indexes ending with the one of `now_ms`, oldest first.
pub(crate) fn window_indexes(now_ms: u64, count: usize) -> Vec<u64> {
    let last = bucket_of(now_ms);
    let count = u64::try_from(count)
        .unwrap_or(u64::MAX)
        .min(BUCKETS_KEPT)
        .min(last + 1);
    (last + 1 - count..=last).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_ends_with_the_current_bucket_and_is_bounded() {
        assert_eq!(window_indexes(25_000, 3), vec![0, 1, 2]);
        assert_eq!(window_indexes(25_000, 10), vec![0, 1, 2]);
        assert_eq!(
            window_indexes(10_000 * 500, 1_000).len() as u64,
            BUCKETS_KEPT
        );
    }

    #[test]
    fn a_delta_leaves_zeros_out() {
        let drained = tally::Drained {
            counts: vec![(tally::Count::Admitted, 2), (tally::Count::Failed, 0)],
            latency: vec![0, 3],
            failures: Vec::new(),
        };
        let delta = StatsDelta::from_tally(1, drained, None);
        assert_eq!(
            delta.counts,
            vec![("admitted".to_owned(), 2), ("e2e:1".to_owned(), 3)]
        );
    }
}
