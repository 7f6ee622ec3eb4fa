//! [`RedisStats`]: the stats in the store's Redis, in the namespace's own slot:
//!
//! - `{ns}:stats:<bucket>` (hash): counts by field, `HINCRBY` by each publisher, expiring
//!   [`BUCKETS_KEPT`] buckets after the bucket ends;
//! - `{ns}:failures` (list): the latest failures as JSON, newest first, trimmed to
//!   [`FAILURES_KEPT`], expiring an hour after the last one;
//! - `{ns}:load:<worker>` (string): a worker's load note as JSON, expiring after [`LOAD_TTL`];
//! - `{ns}:console` (string): set while a console is configured, expiring after its TTL;
//! - `{ns}:console:sessions` (sorted set): the console's sessions ([`super::sessions`]).
//!
//! A publish is one pipeline, a window read one pipeline: no scripts, since each write stands
//! alone (a lost publish loses a couple of seconds of counts, never corrupts them).

use std::time::Duration;

use async_trait::async_trait;

use super::{
    BUCKET_MS, BUCKETS_KEPT, ClusterStats, FAILURES_KEPT, FailureRecord, LOAD_TTL, StatsBucket,
    StatsDelta, StatsWindow, WorkerLoad, bucket_of, window_indexes,
};
use crate::{RedisStore, StoreError};

/// How long the failure list outlives its last push.
const FAILURES_TTL: Duration = Duration::from_secs(3_600);

/// The stats in a [`RedisStore`]'s Redis and namespace. Cheap to clone.
#[derive(Clone)]
pub struct RedisStats {
    pub(super) store: RedisStore,
}

impl RedisStats {
    pub fn new(store: &RedisStore) -> Self {
        RedisStats {
            store: store.clone(),
        }
    }

    pub(super) fn key(&self, suffix: &str) -> String {
        format!("{}:{suffix}", self.store.keys().tag())
    }
}

fn ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn corrupt(what: &str, err: &serde_json::Error) -> StoreError {
    StoreError::Corrupt(format!("{what}: {err}"))
}

#[async_trait]
impl ClusterStats for RedisStats {
    async fn announce_console(&self, ttl: Duration) -> Result<(), StoreError> {
        let mut set = redis::cmd("SET");
        set.arg(self.key("console")).arg(1).arg("PX").arg(ms(ttl));
        let () = self.store.query(&mut set).await?;
        Ok(())
    }

    async fn console_on(&self) -> Result<bool, StoreError> {
        let mut exists = redis::cmd("EXISTS");
        exists.arg(self.key("console"));
        let found: u64 = self.store.query(&mut exists).await?;
        Ok(found > 0)
    }

    async fn publish(&self, delta: &StatsDelta) -> Result<(), StoreError> {
        let mut pipe = redis::pipe();
        if !delta.counts.is_empty() {
            let index = bucket_of(delta.at_ms);
            let bucket = self.key(&format!("stats:{index}"));
            for (field, n) in &delta.counts {
                pipe.cmd("HINCRBY").arg(&bucket).arg(field).arg(*n).ignore();
            }
            // Kept while a window can still reach it.
            let lapse = (index + 1 + BUCKETS_KEPT) * BUCKET_MS;
            pipe.cmd("PEXPIREAT").arg(&bucket).arg(lapse).ignore();
        }
        if !delta.failures.is_empty() {
            let failures = self.key("failures");
            for failure in &delta.failures {
                let json =
                    serde_json::to_string(failure).map_err(|err| corrupt("failure", &err))?;
                pipe.cmd("LPUSH").arg(&failures).arg(json).ignore();
            }
            pipe.cmd("LTRIM")
                .arg(&failures)
                .arg(0)
                .arg(FAILURES_KEPT - 1)
                .ignore();
            pipe.cmd("PEXPIRE")
                .arg(&failures)
                .arg(ms(FAILURES_TTL))
                .ignore();
        }
        if let Some(load) = &delta.load {
            let json = serde_json::to_string(load).map_err(|err| corrupt("load", &err))?;
            pipe.cmd("SET")
                .arg(self.key(&format!("load:{}", load.worker_id)))
                .arg(json)
                .arg("PX")
                .arg(ms(LOAD_TTL))
                .ignore();
        }
        if pipe.is_empty() {
            return Ok(());
        }
        let () = self.store.pipe(&pipe).await?;
        Ok(())
    }

    async fn window(
        &self,
        now_ms: u64,
        buckets: usize,
        workers: &[String],
    ) -> Result<StatsWindow, StoreError> {
        let indexes = window_indexes(now_ms, buckets);
        let mut pipe = redis::pipe();
        for index in &indexes {
            pipe.cmd("HGETALL").arg(self.key(&format!("stats:{index}")));
        }
        pipe.cmd("LRANGE")
            .arg(self.key("failures"))
            .arg(0)
            .arg(FAILURES_KEPT - 1);
        let load_keys: Vec<String> = workers
            .iter()
            .map(|id| self.key(&format!("load:{id}")))
            .collect();
        if !load_keys.is_empty() {
            pipe.cmd("MGET").arg(&load_keys);
        }
        let mut replies: Vec<redis::Value> = self.store.pipe(&pipe).await?;
        let loads_reply = if load_keys.is_empty() {
            None
        } else {
            replies.pop()
        };
        let failures_reply = replies.pop();
        let mut out = StatsWindow::default();
        for (index, reply) in indexes.iter().zip(replies) {
            let counts = redis::from_redis_value(reply)
                .map_err(|err| StoreError::Corrupt(format!("stats bucket: {err}")))?;
            out.buckets.push(StatsBucket {
                start_ms: index * BUCKET_MS,
                counts,
            });
        }
        if let Some(reply) = failures_reply {
            let jsons: Vec<String> = redis::from_redis_value(reply)
                .map_err(|err| StoreError::Corrupt(format!("failures: {err}")))?;
            for json in jsons {
                // One bad entry (written by another version) costs only itself.
                if let Ok(failure) = serde_json::from_str::<FailureRecord>(&json) {
                    out.failures.push(failure);
                }
            }
        }
        if let Some(reply) = loads_reply {
            let jsons: Vec<Option<String>> = redis::from_redis_value(reply)
                .map_err(|err| StoreError::Corrupt(format!("loads: {err}")))?;
            for json in jsons.into_iter().flatten() {
                if let Ok(load) = serde_json::from_str::<WorkerLoad>(&json) {
                    out.loads.push(load);
                }
            }
        }
        Ok(out)
    }
}
