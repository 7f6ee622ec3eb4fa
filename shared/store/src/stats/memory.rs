//! [`MemoryStats`]: the stats of a one-process cluster (embedded mode), with the same bounds
//! as the Redis ones: [`BUCKETS_KEPT`] buckets, [`FAILURES_KEPT`] failures, load notes that
//! lapse after [`LOAD_TTL`].

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use protocol::Timestamp;

use super::{
    BUCKET_MS, BUCKETS_KEPT, ClusterStats, FAILURES_KEPT, FailureRecord, LOAD_TTL, StatsBucket,
    StatsDelta, StatsWindow, WorkerLoad, bucket_of, window_indexes,
};
use crate::StoreError;

#[derive(Default)]
pub(super) struct Held {
    buckets: BTreeMap<u64, BTreeMap<String, u64>>,
    failures: VecDeque<FailureRecord>,
    /// Load notes with the wall-clock time they lapse.
    loads: HashMap<String, (WorkerLoad, u64)>,
    /// When the console's announcement lapses.
    console_until: u64,
    /// Console sessions (see [`super::sessions`]) and when each expires.
    pub(super) sessions: HashMap<String, u64>,
}

#[derive(Default)]
pub struct MemoryStats {
    held: Mutex<Held>,
}

impl MemoryStats {
    pub fn new() -> Self {
        Self::default()
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[async_trait]
impl ClusterStats for MemoryStats {
    async fn announce_console(&self, ttl: Duration) -> Result<(), StoreError> {
        self.lock().console_until = Timestamp::now().as_millis().saturating_add(ms(ttl));
        Ok(())
    }

    async fn console_on(&self) -> Result<bool, StoreError> {
        Ok(self.lock().console_until > Timestamp::now().as_millis())
    }

    async fn publish(&self, delta: &StatsDelta) -> Result<(), StoreError> {
        let mut held = self.lock();
        let index = bucket_of(delta.at_ms);
        let bucket = held.buckets.entry(index).or_default();
        for (field, n) in &delta.counts {
            let count = bucket.entry(field.clone()).or_default();
            *count = count.saturating_add(*n);
        }
        // Redis expires old buckets; here the oldest go when new ones come.
        let oldest_kept = index.saturating_sub(BUCKETS_KEPT);
        held.buckets.retain(|kept, _| *kept > oldest_kept);
        for failure in &delta.failures {
            held.failures.push_front(failure.clone());
        }
        held.failures.truncate(FAILURES_KEPT);
        if let Some(load) = &delta.load {
            let until = Timestamp::now().as_millis().saturating_add(ms(LOAD_TTL));
            held.loads
                .insert(load.worker_id.clone(), (load.clone(), until));
        }
        Ok(())
    }

    async fn window(
        &self,
        now_ms: u64,
        buckets: usize,
        workers: &[String],
    ) -> Result<StatsWindow, StoreError> {
        let now = Timestamp::now().as_millis();
        let mut held = self.lock();
        held.loads.retain(|_, (_, until)| *until > now);
        let buckets = window_indexes(now_ms, buckets)
            .into_iter()
            .map(|index| StatsBucket {
                start_ms: index * BUCKET_MS,
                counts: held.buckets.get(&index).cloned().unwrap_or_default(),
            })
            .collect();
        let loads = workers
            .iter()
            .filter_map(|id| held.loads.get(id).map(|(load, _)| load.clone()))
            .collect();
        Ok(StatsWindow {
            buckets,
            failures: held.failures.iter().cloned().collect(),
            loads,
        })
    }
}
