//! Owner listings ([`crate::TaskStore::list`]): every shard's part of the owner's index
//! (`list_page.lua`, [`super::scripts::list_page`]), merged newest first, then the page's
//! records read in one pipeline per shard.
//!
//! Selections ([`crate::TaskStore::select`], A2A `ListTasks`): ordered by update time, which
//! the owner's index (by creation) does not keep, so every id of the owner's index is read
//! with the small fields the filters and the order look at (status, phase, context, update
//! time, and the error only when a filter asks for its code), never a result; the caller
//! reads only the page's records. The owner's retained count
//! (`MAX_RETAINED_PER_OWNER`) bounds the ids.

use protocol::token::OwnerHash;
use protocol::{Task, TaskStatus};
use serde_json::Value;

use super::scripts::list_page::{self, ListPageReply};
use super::{RedisStore, fields, replies};
use crate::{ListQuery, Phase, Selected, Selection, StoreError, TaskPage};

/// Expired terminal entries one listing call drops per shard (the rest go with later calls
/// and creations): bounds the work a listing does for others' expired tasks.
const LIST_PRUNE: usize = 256;
/// Records a filtered listing reads per round trip.
const LIST_CHUNK: usize = 512;

fn corrupt(what: &str) -> StoreError {
    StoreError::Corrupt(what.to_owned())
}

impl RedisStore {
    /// One page of `owner`'s tasks.
    pub(super) async fn list_tasks(
        &self,
        owner: &OwnerHash,
        query: &ListQuery,
    ) -> Result<TaskPage, StoreError> {
        let limit = query.effective_limit();
        let filtered = query.context_id.is_some() || !query.statuses.is_empty();
        // Unfiltered, the page is among each shard's newest `offset + limit` ids; a filter
        // needs every id (the owner's retained budget bounds how many), then reads only the
        // fields it filters on before the page's records.
        let top = if filtered {
            -1
        } else {
            i64::try_from(query.offset.saturating_add(limit)).unwrap_or(i64::MAX)
        };
        let (count, ids) = self.owner_index_top(owner, top).await?;
        let (total, page_ids): (usize, Vec<(usize, String)>) = if filtered {
            let matching = self.filter_ids(owner, query, ids).await?;
            let total = matching.len();
            let page = matching
                .into_iter()
                .skip(query.offset)
                .take(limit)
                .collect();
            (total, page)
        } else {
            let page = ids.into_iter().skip(query.offset).take(limit).collect();
            (count, page)
        };
        let (tasks, gone) = self.read_page(owner, &page_ids).await?;
        // A record that expired between the index read and the page read (its retention ran
        // out in that instant): it no longer counts.
        let total = total.saturating_sub(gone);
        let has_more = query.offset.saturating_add(tasks.len()) < total;
        Ok(TaskPage {
            tasks,
            total: total as u64,
            has_more,
        })
    }

    /// One page of `owner`'s tasks that pass `selection` (see the module doc).
    pub(super) async fn select_tasks(
        &self,
        owner: &OwnerHash,
        selection: &Selection,
    ) -> Result<Selected, StoreError> {
        let (_, ids) = self.owner_index_top(owner, -1).await?;
        let core = &self.inner.core;
        let with_error = selection.error_code.is_some();
        let mut matching = Vec::new();
        for chunk in ids.chunks(LIST_CHUNK) {
            let reads = core
                .shards
                .iter()
                .map(|shard| {
                    let mut read = redis::pipe();
                    for (_, id) in chunk.iter().filter(|(s, _)| *s == shard.index) {
                        let cmd = read
                            .cmd("HMGET")
                            .arg(shard.keys.task(id))
                            .arg(fields::OWNER)
                            .arg(fields::STATUS)
                            .arg(fields::PHASE)
                            .arg(fields::CONTEXT)
                            .arg(fields::UPDATED);
                        if with_error {
                            cmd.arg(fields::ERROR);
                        }
                    }
                    read
                })
                .collect();
            let per_shard: Vec<Vec<Vec<Option<String>>>> = core.pipe_per_shard(reads).await?;
            let mut rows: Vec<std::vec::IntoIter<Vec<Option<String>>>> =
                per_shard.into_iter().map(Vec::into_iter).collect();
            for (shard, id) in chunk {
                let row = rows[*shard]
                    .next()
                    .ok_or_else(|| corrupt("owner selection: a read is missing"))?;
                let field = |i: usize| row.get(i).and_then(|f| f.as_deref());
                // Gone, or not the owner's (a stale index entry).
                if field(0) != Some(owner.as_str()) {
                    continue;
                }
                let Some(status) = field(1).and_then(|s| s.parse::<TaskStatus>().ok()) else {
                    continue;
                };
                // No phase field once terminal.
                let phase = field(2).map_or(Some(Phase::Terminal), Phase::parse);
                let Some(phase) = phase else {
                    continue;
                };
                let updated = field(4).and_then(|u| u.parse::<u64>().ok()).unwrap_or(0);
                let code = field(5)
                    .and_then(|error| serde_json::from_str::<Value>(error).ok())
                    .and_then(|error| error.get("code")?.as_str().map(str::to_owned));
                if selection.accepts(status, phase, field(3), updated, code.as_deref()) {
                    matching.push((id.clone(), updated));
                }
            }
        }
        Ok(selection.page_of(matching))
    }

    /// Every shard's part of an owner listing (`list_page.lua`: expired ids pruned first):
    /// the owner's retained task count and the newest `top` ids (`-1`: all), merged newest
    /// first (ties by id, as one ZRANGE REV orders them), with their shards.
    async fn owner_index_top(
        &self,
        owner: &OwnerHash,
        top: i64,
    ) -> Result<(usize, Vec<(usize, String)>), StoreError> {
        let core = &self.inner.core;
        let parts = futures::future::try_join_all(core.shards.iter().map(|shard| async move {
            let part = list_page::call(core, shard, owner, top, LIST_PRUNE).await?;
            Ok::<_, StoreError>((shard.index, part))
        }))
        .await?;
        let mut total = 0usize;
        let mut ids: Vec<(f64, usize, String)> = Vec::new();
        for (shard, ListPageReply { count, ids: part }) in parts {
            total = total.saturating_add(usize::try_from(count).unwrap_or(usize::MAX));
            ids.extend(part.into_iter().map(|(id, score)| (score, shard, id)));
        }
        ids.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| b.2.cmp(&a.2)));
        Ok((
            total,
            ids.into_iter().map(|(_, shard, id)| (shard, id)).collect(),
        ))
    }

    /// the filters look at, `LIST_CHUNK` records per round trip.
    async fn filter_ids(
        &self,
        owner: &OwnerHash,
        query: &ListQuery,
        ids: Vec<(usize, String)>,
    ) -> Result<Vec<(usize, String)>, StoreError> {
        let core = &self.inner.core;
        let mut matching = Vec::new();
        for chunk in ids.chunks(LIST_CHUNK) {
            let reads = core
                .shards
                .iter()
                .map(|shard| {
                    let mut read = redis::pipe();
                    for (_, id) in chunk.iter().filter(|(s, _)| *s == shard.index) {
                        read.cmd("HMGET")
                            .arg(shard.keys.task(id))
                            .arg(fields::STATUS)
                            .arg(fields::CONTEXT)
                            .arg(fields::OWNER);
                    }
                    read
                })
                .collect();
            let per_shard: Vec<Vec<[Option<String>; 3]>> = core.pipe_per_shard(reads).await?;
            let mut rows: Vec<std::vec::IntoIter<[Option<String>; 3]>> =
                per_shard.into_iter().map(Vec::into_iter).collect();
            for (shard, id) in chunk {
                let [status, context, row_owner] = rows[*shard]
                    .next()
                    .ok_or_else(|| corrupt("owner listing: a read is missing"))?;
                if row_owner.as_deref() != Some(owner.as_str()) {
                    continue;
                }
                let Some(status) = status.and_then(|s| s.parse::<TaskStatus>().ok()) else {
                    continue;
                };
                let context_ok = query
                    .context_id
                    .as_ref()
                    .is_none_or(|wanted| context.as_ref() == Some(wanted));
                let status_ok = query.statuses.is_empty() || query.statuses.contains(&status);
                if context_ok && status_ok {
                    matching.push((*shard, id.clone()));
                }
            }
        }
        Ok(matching)
    }

    /// The records of one listing page, in its order, and how many of them had vanished.
    async fn read_page(
        &self,
        owner: &OwnerHash,
        page: &[(usize, String)],
    ) -> Result<(Vec<Task>, usize), StoreError> {
        if page.is_empty() {
            return Ok((Vec::new(), 0));
        }
        let core = &self.inner.core;
        let reads = core
            .shards
            .iter()
            .map(|shard| {
                let mut read = redis::pipe();
                for (_, id) in page.iter().filter(|(s, _)| *s == shard.index) {
                    read.cmd("HMGET")
                        .arg(shard.keys.task(id))
                        .arg(&fields::VIEW)
                        .arg(fields::OWNER);
                }
                read
            })
            .collect();
        let per_shard: Vec<Vec<Vec<Option<String>>>> = core.pipe_per_shard(reads).await?;
        let mut rows: Vec<std::vec::IntoIter<Vec<Option<String>>>> =
            per_shard.into_iter().map(Vec::into_iter).collect();
        let mut tasks = Vec::with_capacity(page.len());
        let mut gone = 0;
        for (shard, id) in page {
            let row = rows[*shard]
                .next()
                .ok_or_else(|| corrupt("owner listing: a read is missing"))?;
            let owned = row.get(6).and_then(|o| o.as_deref()) == Some(owner.as_str());
            match replies::task_view(id, row.get(..6).unwrap_or_default())? {
                Some(task) if owned => tasks.push(task),
                _ => gone += 1,
            }
        }
        Ok((tasks, gone))
    }
}
