//! `create.lua` in memory: stores a new task, queued or held reserved, within the store's
//! bounds (the owner's live and retained tasks, the client address's live tasks, the store's
//! tasks and retained bytes), evicting terminal tasks to make room where a bound allows it.

use crate::memory::entry::Entry;
use crate::memory::frozen::Rebuilt;
use crate::memory::millis;
use crate::memory::owner_index::OwnerIndex;
use crate::memory::state::State;
use crate::{Admission, NewTask, Phase, StoreError, StoredTask};
use protocol::token::OwnerHash;
use protocol::{Task, TaskEvent, TaskStatus, Timestamp};

impl State {
    pub(in crate::memory) fn create(&mut self, new: NewTask, now: u64) -> Result<Task, StoreError> {
        self.purge(now);
        self.reap(now);
        if self.tasks.contains_key(&new.task_id) {
            return Err(StoreError::Duplicate(new.task_id));
        }
        // A private owner has no other task and nobody can list it: no bound to ask, no
        // listing to keep (as create.lua).
        if !new.private_owner {
            self.ensure_owner_capacity(&new.owner)?;
        }
        self.ensure_address_capacity(new.source.as_deref())?;
        self.ensure_capacity()?;

        let (phase, admission_expires_at_ms) = match new.admission {
            Admission::Queued => (Phase::Queued, None),
            Admission::Reserved { ttl } => (Phase::Reserved, Some(now.saturating_add(millis(ttl)))),
        };
        let task = Task {
            task_id: new.task_id.clone(),
            status: TaskStatus::Running,
            context_id: new.invocation.context_id.clone(),
            created_at: Timestamp(now),
            updated_at: Timestamp(now),
            result: None,
            error: None,
        };
        let order = self.next_order;
        self.next_order += 1;
        let mut entry = Entry::new(
            StoredTask {
                task: task.clone(),
                owner: new.owner.clone(),
                phase,
                invocation: new.invocation,
                admission_expires_at_ms,
                lease: None,
                attempt: 0,
                max_attempts: new.max_attempts,
                retries: 0,
                last_error: None,
                run_deadline_ms: None,
                handed_off: false,
                seq: 0,
                receipt: None,
                input_request: None,
                turns: Vec::new(),
                settlement_held: false,
            },
            order,
        );
        entry.retention_ms = new.retention.map_or(self.limits.retention_ms, millis);
        *self.live_by_owner.entry(new.owner.clone()).or_default() += 1;
        // Counted only while the bound is on, as the Redis store tracks it.
        if self.limits.max_live_per_address > 0
            && let Some(source) = &new.source
        {
            *self.live_by_source.entry(source.clone()).or_default() += 1;
            entry.source = Some(source.clone());
        }
        entry.publish_rebuilt(
            TaskEvent::status(&task).into(),
            Rebuilt::Created,
            self.limits.event_log_len,
        );
        if !new.private_owner {
            match self.by_owner.entry(new.owner) {
                std::collections::hash_map::Entry::Occupied(mut ids) => {
                    ids.get_mut().insert((now, order), new.task_id.clone());
                }
                std::collections::hash_map::Entry::Vacant(slot) => {
                    slot.insert(OwnerIndex::new((now, order), new.task_id.clone()));
                }
            }
        }
        self.tasks.insert(new.task_id.clone(), Box::new(entry));
        if phase == Phase::Queued {
            self.enqueue(&new.task_id);
        }
        self.reindex(&new.task_id);
        Ok(task)
    }

    /// Makes room for one task: evicts the least recently updated terminal tasks while the
    /// store is full (the upstream rule for this store), and refuses when only live tasks remain.
    fn ensure_capacity(&mut self) -> Result<(), StoreError> {
        let max = match self.limits.max_retained {
            0 => self.limits.max_tasks,
            retained => retained.min(self.limits.max_tasks),
        };
        while self.tasks.len() as u64 >= max {
            let Some(task_id) = self.terminal.first_key_value().map(|(_, id)| id.clone()) else {
                return Err(StoreError::Capacity { max });
            };
            self.remove(&task_id);
        }
        // Bytes of terminal tasks: evicted first to expire first, never a refusal (live tasks'
        // bytes are bounded by the count and the input limit).
        let max_bytes = self.limits.max_retained_bytes;
        while max_bytes > 0 && self.retained_bytes > max_bytes {
            let Some(task_id) = self.terminal.first_key_value().map(|(_, id)| id.clone()) else {
                break;
            };
            self.remove(&task_id);
        }
        Ok(())
    }

    /// Makes room for one more task of `owner`: refuses past its live bound, and evicts its
    /// oldest terminal tasks while it holds its retained bound (refusing when all are live).
    fn ensure_owner_capacity(&mut self, owner: &OwnerHash) -> Result<(), StoreError> {
        let max_live = self.limits.max_live_per_owner;
        let live = self.live_by_owner.get(owner).copied().unwrap_or(0);
        if max_live > 0 && live >= max_live {
            return Err(StoreError::OwnerCapacity {
                max: max_live,
                live: true,
            });
        }
        let max = self.limits.max_retained_per_owner;
        if max == 0 {
            return Ok(());
        }
        while self.by_owner.get(owner).map_or(0, OwnerIndex::len) as u64 >= max {
            let oldest_terminal = self.by_owner.get(owner).and_then(|ids| {
                ids.oldest_first()
                    .find(|id| {
                        self.tasks
                            .get(*id)
                            .is_none_or(|entry| entry.terminal_key.is_some())
                    })
                    .cloned()
            });
            let Some(task_id) = oldest_terminal else {
                return Err(StoreError::OwnerCapacity { max, live: false });
            };
            self.remove(&task_id);
        }
        Ok(())
    }

    /// Refuses one more task from `source` past its live bound.
    fn ensure_address_capacity(&self, source: Option<&str>) -> Result<(), StoreError> {
        let max = self.limits.max_live_per_address;
        let live = source.map_or(0, |source| {
            self.live_by_source.get(source).copied().unwrap_or(0)
        });
        if max > 0 && live >= max {
            return Err(StoreError::AddressCapacity { max });
        }
        Ok(())
    }
}
