//! The memory store's failed indexes, as the Redis store's (`redis/failed.rs`,
//! `lua/includes/index_failed.lua`): per entrypoint, the ids of tasks that failed by when,
//! the newest [`FAILED_KEPT`] and none older than the retention; read newest first, an entry
//! whose task is gone skipped and dropped.

use std::collections::BTreeSet;

use super::state::State;
use crate::{FAILED_KEPT, FailedCursor, FailedEntry, FailedPage, MAX_FAILED_LIMIT};
use protocol::TaskStatus;

/// One entrypoint's index: (failed at ms, task id), oldest first.
pub(super) type FailedIndex = BTreeSet<(u64, String)>;

impl State {
    /// Enters a task that just failed (the memory side of `index_failed.lua`).
    pub(super) fn index_failed(&mut self, entrypoint: &str, task_id: &str, now: u64) {
        let horizon = now.saturating_sub(self.limits.retention_ms);
        let index = self.failed.entry(entrypoint.to_owned()).or_default();
        index.insert((now, task_id.to_owned()));
        while index.len() > FAILED_KEPT {
            index.pop_first();
        }
        while index.first().is_some_and(|(at, _)| *at < horizon) {
            index.pop_first();
        }
    }

    pub(super) fn failed_page(
        &mut self,
        entrypoint: &str,
        after: Option<&FailedCursor>,
        limit: usize,
        now: u64,
    ) -> FailedPage {
        self.purge(now);
        let limit = limit.min(MAX_FAILED_LIMIT);
        let Some(index) = self.failed.get(entrypoint) else {
            return FailedPage::default();
        };
        let mut candidates = index
            .iter()
            .rev()
            .filter(|(at, id)| after.is_none_or(|cursor| cursor.precedes(*at, id)));
        let page: Vec<(u64, String)> = candidates.by_ref().take(limit).cloned().collect();
        let more = candidates.next().is_some();
        let mut entries = Vec::with_capacity(page.len());
        let mut gone = Vec::new();
        for (at, id) in &page {
            match self.tasks.get(id) {
                Some(entry) if entry.stored.task.status == TaskStatus::Failed => {
                    entries.push(FailedEntry {
                        task_id: id.clone(),
                        entrypoint: entrypoint.to_owned(),
                        failed_at_ms: *at,
                        error: entry.task().error,
                        attempt: entry.stored.attempt,
                    });
                }
                _ => gone.push((*at, id.clone())),
            }
        }
        if let Some(index) = self.failed.get_mut(entrypoint) {
            for entry in &gone {
                index.remove(entry);
            }
            if index.is_empty() {
                self.failed.remove(entrypoint);
            }
        }
        let next = more
            .then(|| page.last())
            .flatten()
            .map(|(at, id)| FailedCursor {
                failed_at_ms: *at,
                task_id: id.clone(),
            });
        FailedPage { entries, next }
    }

    pub(super) fn forget_failed(&mut self, entrypoint: &str, task_ids: &[String]) -> u64 {
        let Some(index) = self.failed.get_mut(entrypoint) else {
            return 0;
        };
        let before = index.len();
        index.retain(|(_, id)| !task_ids.contains(id));
        let removed = (before - index.len()) as u64;
        if index.is_empty() {
            self.failed.remove(entrypoint);
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use crate::{FAILED_KEPT, FailedCursor};

    #[test]
    fn cursors_read_back_and_refuse_anything_else() {
        let cursor = FailedCursor {
            failed_at_ms: 1_796_205_335_048,
            task_id: "a2a:ctx.1".into(),
        };
        assert_eq!(FailedCursor::decode(&cursor.encode()), Some(cursor.clone()));
        for bad in ["", "12", ".id", "x.id", "-1.id", "12."] {
            assert_eq!(FailedCursor::decode(bad), None, "{bad:?}");
        }
        assert!(cursor.precedes(cursor.failed_at_ms - 1, "z"));
        assert!(cursor.precedes(cursor.failed_at_ms, "a2a:ctx.0"));
        assert!(!cursor.precedes(cursor.failed_at_ms, "a2a:ctx.1"));
        assert!(!cursor.precedes(cursor.failed_at_ms + 1, "a"));
    }

    /// The Lua include keeps the same number of failures as the memory store.
    #[test]
    fn the_lua_bound_is_the_rust_bound() {
        let lua = include_str!("../../lua/includes/index_failed.lua");
        assert!(
            lua.contains(&format!("local FAILED_KEPT = {FAILED_KEPT}\n")),
            "index_failed.lua must keep FAILED_KEPT = {FAILED_KEPT}"
        );
    }
}
