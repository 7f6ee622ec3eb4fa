//! The failed indexes read back: an entrypoint's failed tasks, newest first, one range read
//! per shard per page (`ZREVRANGEBYSCORE … LIMIT`, never a scan), then one pipelined read of
//! the candidates' records per shard. The indexes are written by the scripts that fail a task
//! (`lua/includes/index_failed.lua`; key: `Keys::failed`).

use redis::Value;

use super::RedisStore;
use super::fields;
use crate::{FailedCursor, FailedEntry, FailedPage, MAX_FAILED_LIMIT, StoreError};
use protocol::TaskError;

/// Entries read past a page's size from each shard: room for the entries of the cursor's
/// own millisecond that the previous page showed already (they sort first in the range that
/// starts at its score). More failures than this in one millisecond of one shard could be
/// skipped by a page boundary.
const TIE_ROOM: usize = 32;

/// One candidate: (failed at, id, shard).
type Candidate = (u64, String, usize);

impl RedisStore {
    pub(super) async fn failed_page_of(
        &self,
        entrypoint: &str,
        after: Option<&FailedCursor>,
        limit: usize,
    ) -> Result<FailedPage, StoreError> {
        let limit = limit.min(MAX_FAILED_LIMIT);
        if limit == 0 {
            return Ok(FailedPage::default());
        }
        let core = &self.inner.core;
        let fetch = limit + 1 + TIE_ROOM;
        let max = after.map_or_else(
            || "+inf".to_owned(),
            |cursor| cursor.failed_at_ms.to_string(),
        );
        let pipes = core
            .shards
            .iter()
            .map(|shard| {
                let mut pipe = redis::pipe();
                pipe.cmd("ZREVRANGEBYSCORE")
                    .arg(shard.keys.failed(entrypoint))
                    .arg(&max)
                    .arg("-inf")
                    .arg("WITHSCORES")
                    .arg("LIMIT")
                    .arg(0)
                    .arg(fetch);
                pipe
            })
            .collect();
        let ranges: Vec<(Vec<(String, u64)>,)> = core.pipe_per_shard(pipes).await?;
        let mut more = false;
        let mut candidates: Vec<Candidate> = Vec::new();
        for (shard, (range,)) in ranges.into_iter().enumerate() {
            more |= range.len() >= fetch;
            candidates.extend(
                range
                    .into_iter()
                    .filter(|(id, ms)| after.is_none_or(|cursor| cursor.precedes(*ms, id)))
                    .map(|(id, ms)| (ms, id, shard)),
            );
        }
        // Newest first across the shards, as each shard's range is.
        candidates.sort_by(|a, b| (b.0, &b.1).cmp(&(a.0, &a.1)));
        if candidates.len() > limit {
            more = true;
            candidates.truncate(limit);
        }
        let (entries, gone) = self.read_failed(entrypoint, &candidates).await?;
        if !gone.is_empty() {
            // Records past their retention: their index entries go too.
            let mut forget = vec![redis::pipe(); core.shards.len()];
            for (shard, id) in &gone {
                forget[*shard]
                    .cmd("ZREM")
                    .arg(core.shards[*shard].keys.failed(entrypoint))
                    .arg(id)
                    .ignore();
            }
            let _: Vec<Value> = core.pipe_per_shard(forget).await?;
        }
        let next = more
            .then(|| candidates.last())
            .flatten()
            .map(|(ms, id, _)| FailedCursor {
                failed_at_ms: *ms,
                task_id: id.clone(),
            });
        Ok(FailedPage { entries, next })
    }

    /// The candidates' records (status, error, attempt), in their order: the failed entries,
    /// and the (shard, id) of those whose record is gone (or no longer failed).
    async fn read_failed(
        &self,
        entrypoint: &str,
        candidates: &[Candidate],
    ) -> Result<(Vec<FailedEntry>, Vec<(usize, String)>), StoreError> {
        if candidates.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        let core = &self.inner.core;
        // One pipeline per shard (each in its own slot), read back in the candidates' order.
        let mut pipes = vec![redis::pipe(); core.shards.len()];
        for (_, id, shard) in candidates {
            pipes[*shard]
                .cmd("HMGET")
                .arg(core.shards[*shard].keys.task(id))
                .arg(fields::STATUS)
                .arg(fields::ERROR)
                .arg(fields::ATTEMPT);
        }
        type Record = (Option<String>, Option<String>, Option<u32>);
        let per_shard: Vec<Vec<Record>> = core.pipe_per_shard(pipes).await?;
        let mut per_shard: Vec<std::vec::IntoIter<Record>> =
            per_shard.into_iter().map(Vec::into_iter).collect();
        let records = candidates
            .iter()
            .map(|(_, _, shard)| per_shard[*shard].next().unwrap_or((None, None, None)));
        let mut entries = Vec::with_capacity(candidates.len());
        let mut gone = Vec::new();
        for ((ms, id, shard), (status, error, attempt)) in candidates.iter().zip(records) {
            if status.as_deref() != Some("failed") {
                gone.push((*shard, id.clone()));
                continue;
            }
            entries.push(FailedEntry {
                task_id: id.clone(),
                entrypoint: entrypoint.to_owned(),
                failed_at_ms: *ms,
                error: error.and_then(|text| serde_json::from_str::<TaskError>(&text).ok()),
                attempt: attempt.unwrap_or(0),
            });
        }
        Ok((entries, gone))
    }

    pub(super) async fn forget_failed_of(
        &self,
        entrypoint: &str,
        task_ids: &[String],
    ) -> Result<u64, StoreError> {
        if task_ids.is_empty() {
            return Ok(0);
        }
        let core = &self.inner.core;
        let mut pipes = vec![redis::pipe(); core.shards.len()];
        for id in task_ids {
            let shard = core.shard_of(id);
            pipes[shard.index]
                .cmd("ZREM")
                .arg(shard.keys.failed(entrypoint))
                .arg(id);
        }
        let removed: Vec<Vec<u64>> = core.pipe_per_shard(pipes).await?;
        Ok(removed.into_iter().flatten().sum())
    }
}
