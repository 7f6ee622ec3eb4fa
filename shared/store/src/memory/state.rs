//! Everything the memory store keeps, behind its one lock: the tasks, their indexes and the
//! ready queues, with the bookkeeping every transition shares (applying a status, queueing,
//! deleting, reindexing). The transitions themselves live in `transitions/`, one file per
//! Redis script; each is one whole transition, synchronous, at time `now` (read under the same
//! lock, so transitions are ordered by time as well as by the lock). Reads live in `listing.rs`,
//! subscriptions in `subscriptions.rs`.
//!
//! Indexes, all keyed by `(ms, order)` where `order` is the task's insertion number (a stable
//! tie-break):
//! - `by_owner`: `(created_at, order)` per owner, for newest-first listing;
//! - `terminal`: `(updated_at + retention, order)` of terminal tasks, for retention purge and
//!   eviction (the task that expires first goes first);
//! - `due`: `(deadline, order)` of running tasks with a lease or an admission expiry, for
//!   reaping and recovery in deadline order.
//!
//! `reindex` keeps `terminal` and `due` in step with a task after every mutation.

use std::collections::{BTreeMap, HashMap, VecDeque};

use super::entry::{Entry, IndexKey};
use super::frozen::Rebuilt;
use super::owner_index::OwnerIndex;
use crate::{Phase, Transition};
use protocol::token::OwnerHash;
use protocol::{Task, TaskEvent, Timestamp};

/// Limits fixed at construction, in milliseconds where they are durations.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    pub max_tasks: u64,
    /// Stored tasks in all (0: only `max_tasks`); the tighter of the two bounds the store.
    pub max_retained: u64,
    /// One owner's stored tasks (0: no bound); its oldest terminal one is evicted first.
    pub max_retained_per_owner: u64,
    /// One owner's non-terminal tasks (0: no bound).
    pub max_live_per_owner: u64,
    /// One client address's non-terminal tasks (0: no bound).
    pub max_live_per_address: u64,
    /// Bytes terminal tasks keep (0: no bound); the first to expire are evicted first.
    pub max_retained_bytes: u64,
    pub retention_ms: u64,
    pub event_log_len: usize,
}

/// The memory store's whole state. Its fields are the `memory` module's: each file of
/// `transitions/` (and `listing.rs`, `subscriptions.rs`) is an `impl State` block of its own.
pub(super) struct State {
    pub(super) limits: Limits,
    /// Boxed: a table of 1 KB entries wastes its spare capacity by the kilobyte.
    pub(super) tasks: HashMap<String, Box<Entry>>,
    pub(super) by_owner: HashMap<OwnerHash, OwnerIndex>,
    /// Non-terminal tasks per owner (owners with none are absent).
    pub(super) live_by_owner: HashMap<OwnerHash, u64>,
    /// Non-terminal tasks per client address, of tasks created with one (addresses with none
    /// are absent).
    pub(super) live_by_source: HashMap<String, u64>,
    pub(super) terminal: BTreeMap<IndexKey, String>,
    /// The sum of the terminal tasks' `Entry::retained_bytes`.
    pub(super) retained_bytes: u64,
    pub(super) due: BTreeMap<IndexKey, String>,
    pub(super) queues: HashMap<String, VecDeque<String>>,
    /// Failed tasks per entrypoint (`failed.rs`).
    pub(super) failed: HashMap<String, super::failed::FailedIndex>,
    pub(super) next_order: u64,
    pub(super) next_listener: u64,
    /// Set when a task entered a ready queue; the store wakes `take_next` waiters after
    /// releasing the lock.
    pub(super) queue_pushed: bool,
    pub(super) closed: bool,
}

impl State {
    pub(super) fn new(limits: Limits) -> Self {
        State {
            limits,
            tasks: HashMap::new(),
            by_owner: HashMap::new(),
            live_by_owner: HashMap::new(),
            live_by_source: HashMap::new(),
            terminal: BTreeMap::new(),
            retained_bytes: 0,
            due: BTreeMap::new(),
            queues: HashMap::new(),
            failed: HashMap::new(),
            next_order: 0,
            next_listener: 0,
            queue_pushed: false,
            closed: false,
        }
    }

    // ----- counts -----

    pub(super) fn queue_depth(&self, entrypoint: &str) -> u64 {
        self.queues
            .get(entrypoint)
            .map_or(0, |queue| queue.len() as u64)
    }

    /// Non-terminal tasks: every stored task not in the terminal index.
    pub(super) fn live_count(&self) -> u64 {
        (self.tasks.len() - self.terminal.len()) as u64
    }

    /// Tasks holding a lease (prepared or active) that a sweep may settle, as the Redis
    /// store's lease index counts them (claims held for a settlement are not); a scan, for
    /// metrics sampled every few seconds over at most `max_tasks` live tasks.
    pub(super) fn lease_count(&self) -> u64 {
        self.tasks
            .values()
            .filter(|entry| entry.stored.lease.is_some() && !entry.stored.settlement_held)
            .count() as u64
    }

    pub(super) fn close(&mut self) {
        self.closed = true;
        for entry in self.tasks.values_mut() {
            entry.listeners.clear();
        }
    }

    // ----- bookkeeping shared by the transitions -----

    /// Writes `next` (status, result, error), stamps `updated_at` and publishes the matching
    /// event. A terminal `next` releases the lease, the admission and any queue slot.
    pub(super) fn apply(&mut self, task_id: &str, next: Transition, now: u64) -> Option<Task> {
        let log_len = self.limits.event_log_len;
        let entry = self.tasks.get_mut(task_id)?;
        let was_queued = entry.stored.phase == Phase::Queued;
        let terminal = next.status.is_terminal();
        entry.thaw_in_place();
        let stored = &mut entry.stored;
        stored.task.status = next.status;
        stored.task.result = next.result;
        stored.task.error = next.error;
        stored.task.updated_at = Timestamp(now);
        if terminal {
            stored.phase = Phase::Terminal;
            stored.lease = None;
            stored.admission_expires_at_ms = None;
            stored.input_request = None;
            stored.settlement_held = false;
        }
        let task = stored.task.clone();
        let entrypoint = stored.invocation.entrypoint.clone();
        if terminal {
            entry.publish_rebuilt(
                TaskEvent::for_transition(&task).into(),
                Rebuilt::Terminal,
                log_len,
            );
            entry.freeze();
        } else {
            entry.publish(TaskEvent::for_transition(&task).into(), log_len);
        }
        if terminal && was_queued {
            self.unqueue(&entrypoint, task_id);
        }
        if task.status == protocol::TaskStatus::Failed {
            self.index_failed(&entrypoint, task_id, now);
        }
        self.reindex(task_id);
        Some(task)
    }

    /// Puts a running task in its entrypoint's ready queue, releasing any lease.
    pub(super) fn enqueue(&mut self, task_id: &str) {
        let Some(entry) = self.tasks.get_mut(task_id) else {
            return;
        };
        let stored = &mut entry.stored;
        stored.phase = Phase::Queued;
        stored.lease = None;
        stored.admission_expires_at_ms = None;
        stored.handed_off = true;
        stored.settlement_held = false;
        self.queues
            .entry(stored.invocation.entrypoint.clone())
            .or_default()
            .push_back(task_id.to_owned());
        self.queue_pushed = true;
    }

    pub(super) fn unqueue(&mut self, entrypoint: &str, task_id: &str) {
        if let Some(queue) = self.queues.get_mut(entrypoint) {
            queue.retain(|queued| queued != task_id);
            if queue.is_empty() {
                self.queues.remove(entrypoint);
            }
        }
    }

    /// Deletes terminal tasks whose retention has passed.
    pub(super) fn purge(&mut self, now: u64) {
        while let Some((&(expires_at, _), task_id)) = self.terminal.first_key_value() {
            if expires_at > now {
                break;
            }
            let task_id = task_id.clone();
            self.remove(&task_id);
        }
    }

    /// One fewer non-terminal task for `owner` and, when it was counted, for `source`.
    fn task_ended(&mut self, owner: &OwnerHash, source: Option<&str>) {
        if let Some(live) = self.live_by_owner.get_mut(owner) {
            *live = live.saturating_sub(1);
            if *live == 0 {
                self.live_by_owner.remove(owner);
            }
        }
        if let Some(source) = source
            && let Some(live) = self.live_by_source.get_mut(source)
        {
            *live = live.saturating_sub(1);
            if *live == 0 {
                self.live_by_source.remove(source);
            }
        }
    }

    /// Deletes a task and everything that points at it; its subscribers' streams end.
    pub(super) fn remove(&mut self, task_id: &str) {
        let Some(entry) = self.tasks.remove(task_id) else {
            return;
        };
        if let Some(key) = entry.due_key {
            self.due.remove(&key);
        }
        match entry.terminal_key {
            Some(key) => {
                self.terminal.remove(&key);
                self.retained_bytes = self.retained_bytes.saturating_sub(entry.retained_bytes);
            }
            None => self.task_ended(&entry.stored.owner, entry.source.as_deref()),
        }
        let owner = &entry.stored.owner;
        if let Some(ids) = self.by_owner.get_mut(owner)
            && ids.remove(&(entry.stored.task.created_at.as_millis(), entry.order))
        {
            self.by_owner.remove(owner);
        }
        if entry.stored.phase == Phase::Queued {
            self.unqueue(&entry.stored.invocation.entrypoint, task_id);
        }
    }

    /// Brings `due` and `terminal` in step with the task's current state.
    pub(super) fn reindex(&mut self, task_id: &str) {
        let Some(entry) = self.tasks.get_mut(task_id) else {
            return;
        };
        let due = entry.due();
        if entry.due_key != due {
            if let Some(old) = entry.due_key.take() {
                self.due.remove(&old);
            }
            if let Some(key) = due {
                self.due.insert(key, task_id.to_owned());
            }
            entry.due_key = due;
        }
        let terminal = entry.terminal();
        if entry.terminal_key != terminal {
            let ended = entry.terminal_key.is_none();
            let ended = ended.then(|| (entry.stored.owner.clone(), entry.source.clone()));
            if let Some(old) = entry.terminal_key.take() {
                self.terminal.remove(&old);
                self.retained_bytes = self.retained_bytes.saturating_sub(entry.retained_bytes);
                entry.retained_bytes = 0;
            }
            if let Some(key) = terminal {
                self.terminal.insert(key, task_id.to_owned());
                entry.retained_bytes = entry.bulk_bytes();
                self.retained_bytes = self.retained_bytes.saturating_add(entry.retained_bytes);
            }
            entry.terminal_key = terminal;
            if let Some((owner, source)) = ended {
                self.task_ended(&owner, source.as_deref());
            }
        }
    }

    #[cfg(test)]
    pub(super) fn listener_count(&self, task_id: &str) -> usize {
        self.tasks
            .get(task_id)
            .map_or(0, |entry| entry.listeners.len())
    }
}
