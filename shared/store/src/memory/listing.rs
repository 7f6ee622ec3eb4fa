//! Reads of the memory store's tasks: one task, an owner's listing, an owner's selection
//! (`redis/listing.rs` and `list_page.lua` in Redis). Each drops expired terminal tasks first.

use crate::memory::owner_index::OwnerIndex;
use crate::memory::state::State;
use crate::{ListQuery, Selected, Selection, StoredTask, TaskPage};
use protocol::TaskStatus;
use protocol::token::OwnerHash;

impl State {
    pub(in crate::memory) fn get(&mut self, task_id: &str, now: u64) -> Option<StoredTask> {
        self.purge(now);
        self.tasks.get(task_id).map(|entry| entry.stored())
    }

    pub(in crate::memory) fn list(
        &mut self,
        owner: &OwnerHash,
        query: &ListQuery,
        now: u64,
    ) -> TaskPage {
        self.purge(now);
        let limit = query.effective_limit();
        let mut total = 0usize;
        let mut tasks = Vec::new();
        let ids = self
            .by_owner
            .get(owner)
            .into_iter()
            .flat_map(OwnerIndex::newest_first);
        for id in ids {
            let Some(entry) = self.tasks.get(id) else {
                continue;
            };
            if !query.matches(&entry.stored.task) {
                continue;
            }
            if total >= query.offset && tasks.len() < limit {
                tasks.push(entry.task());
            }
            total += 1;
        }
        let has_more = query.offset.saturating_add(tasks.len()) < total;
        TaskPage {
            tasks,
            total: total as u64,
            has_more,
        }
    }

    /// [`crate::TaskStore::select`]: the owner's tasks by their small fields; an error code is
    /// only looked at (thawed) when the selection asks about it.
    pub(in crate::memory) fn select(
        &mut self,
        owner: &OwnerHash,
        selection: &Selection,
        now: u64,
    ) -> Selected {
        self.purge(now);
        let ids = self
            .by_owner
            .get(owner)
            .into_iter()
            .flat_map(OwnerIndex::newest_first);
        let mut matching = Vec::new();
        for id in ids {
            let Some(entry) = self.tasks.get(id) else {
                continue;
            };
            let task = &entry.stored.task;
            let code = match &selection.error_code {
                Some(_) if task.status == TaskStatus::Failed => {
                    entry.task().error.map(|error| error.code)
                }
                _ => None,
            };
            if selection.accepts(
                task.status,
                entry.stored.phase,
                task.context_id.as_deref(),
                task.updated_at.0,
                code.as_deref(),
            ) {
                matching.push((id.clone(), task.updated_at.0));
            }
        }
        selection.page_of(matching)
    }
}
