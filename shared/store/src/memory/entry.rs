//! One stored task with what only the memory store keeps beside it: its fencing epoch, event
//! log, listeners and index keys.

use std::collections::VecDeque;

use super::frozen::{Frozen, LoggedEvent, Rebuilt};
use super::subscriptions::Listeners;
use crate::{EventPayload, Lease, Phase, StoredEvent, StoredTask};
use protocol::{Task, TaskStatus};

/// A key of the `(ms, insertion order)` indexes.
pub(super) type IndexKey = (u64, u64);

/// A task as the memory store holds it.
pub(super) struct Entry {
    pub(super) stored: StoredTask,
    pub(super) order: u64,
    /// Fencing epoch of the latest claim; outlives the lease it was issued with.
    pub(super) epoch: u64,
    /// `max_run` of the last activation, for the timeout message.
    pub(super) max_run_ms: u64,
    pub(super) log: VecDeque<LoggedEvent>,
    /// Set once the task is terminal: its bulky values, as text (see [`Entry::freeze`]).
    frozen: Option<Frozen>,
    pub(super) listeners: Listeners,
    /// The keys this task currently holds in `State::due` and `State::terminal`.
    pub(super) due_key: Option<IndexKey>,
    pub(super) terminal_key: Option<IndexKey>,
    /// What this task counts in `State::retained_bytes` while it holds a `terminal_key`.
    pub(super) retained_bytes: u64,
    /// How long the task is kept once terminal (the store's retention unless it was created
    /// with its own).
    pub(super) retention_ms: u64,
    /// The client address counted for this task while it is live (set only while
    /// `max_live_per_address` is on).
    pub(super) source: Option<String>,
}

impl Entry {
    pub(super) fn new(stored: StoredTask, order: u64) -> Self {
        Entry {
            stored,
            order,
            epoch: 0,
            max_run_ms: 0,
            log: VecDeque::new(),
            frozen: None,
            listeners: Listeners::default(),
            due_key: None,
            terminal_key: None,
            retained_bytes: 0,
            retention_ms: 0,
            source: None,
        }
    }

    /// Retained terminal tasks are most of what the embedded store holds: their input, result
    /// and error move into one compact JSON text, the log keeps only the place of the events
    /// the task can rebuild, and spare capacity is given back (see [`super::frozen`]). Readers
    /// go through [`Entry::task`], [`Entry::stored`] and [`Entry::replay`].
    /// Bytes a terminal task is counted for against `MAX_RETAINED_BYTES`: its frozen input,
    /// result and error, plus a fixed allowance for the record and its log.
    pub(super) fn bulk_bytes(&self) -> u64 {
        const RECORD_ALLOWANCE: u64 = 512;
        self.frozen
            .as_ref()
            .map_or(0, |frozen| frozen.len() as u64)
            .saturating_add(RECORD_ALLOWANCE)
    }

    pub(super) fn freeze(&mut self) {
        self.thaw_in_place();
        self.log.shrink_to_fit();
        let frozen = Frozen::take(&mut self.stored.invocation, &mut self.stored.task);
        self.frozen = Some(frozen);
    }

    /// Undoes [`Entry::freeze`] before a write, and turns a logged terminal event back into
    /// text: the write changes the task it would be rebuilt from.
    pub(super) fn thaw_in_place(&mut self) {
        if let Some(frozen) = self.frozen.take() {
            frozen.restore(&mut self.stored.invocation, &mut self.stored.task);
        }
        for event in &mut self.log {
            event.materialize(&self.stored.task);
        }
    }

    /// The task as the wire shows it.
    pub(super) fn task(&self) -> Task {
        let mut task = self.stored.task.clone();
        if let Some(frozen) = &self.frozen {
            frozen.restore_task(&mut task);
        }
        task
    }

    /// Everything the store knows of the task.
    pub(super) fn stored(&self) -> StoredTask {
        let mut stored = self.stored.clone();
        if let Some(frozen) = &self.frozen {
            frozen.restore(&mut stored.invocation, &mut stored.task);
        }
        stored
    }

    /// The logged events after `after`, as they were sent.
    pub(super) fn replay(&self, after: u64) -> Vec<StoredEvent> {
        let mut events = self
            .log
            .iter()
            .filter(|event| event.seq() > after)
            .peekable();
        if events.peek().is_none() {
            return Vec::new();
        }
        let task = self.task();
        events.map(|event| event.thaw(&task)).collect()
    }

    pub(super) fn due(&self) -> Option<IndexKey> {
        let stored = &self.stored;
        // A claim held for a settlement is no sweep's business, whatever its deadline.
        if stored.task.status.is_terminal() || stored.settlement_held {
            return None;
        }
        let deadline = match (&stored.lease, stored.phase) {
            (Some(lease), _) => Some(lease.expires_at_ms),
            (None, Phase::Reserved | Phase::Waiting | Phase::Backoff) => {
                stored.admission_expires_at_ms
            }
            (None, _) => None,
        };
        deadline.map(|ms| (ms, self.order))
    }

    /// When a terminal task expires (its `terminal` index key): purge and eviction both go
    /// by it, so a task kept briefly (a direct invoke) goes before one kept for the whole
    /// retention.
    pub(super) fn terminal(&self) -> Option<IndexKey> {
        let task = &self.stored.task;
        task.status.is_terminal().then_some((
            task.updated_at
                .as_millis()
                .saturating_add(self.retention_ms),
            self.order,
        ))
    }

    /// Whether `lease` is this task's current lease and still live.
    pub(super) fn holds(&self, lease: &Lease, now: u64) -> bool {
        self.stored.task.status == TaskStatus::Running
            && self.stored.lease.as_ref().is_some_and(|current| {
                current.holder == lease.holder
                    && current.epoch == lease.epoch
                    && current.expires_at_ms > now
            })
    }

    pub(super) fn has_live_lease(&self, now: u64) -> bool {
        self.stored
            .lease
            .as_ref()
            .is_some_and(|lease| lease.expires_at_ms > now)
    }

    pub(super) fn admission_expired(&self, now: u64) -> bool {
        self.stored.phase == Phase::Reserved
            && self
                .stored
                .admission_expires_at_ms
                .is_some_and(|at| at <= now)
    }

    /// A waiting task whose caller did not answer before its deadline.
    pub(super) fn input_expired(&self, now: u64) -> bool {
        self.stored.task.status == TaskStatus::Running
            && self.stored.phase == Phase::Waiting
            && self
                .stored
                .admission_expires_at_ms
                .is_some_and(|at| at <= now)
    }

    /// A task waiting out a retry's backoff whose due time has come.
    pub(super) fn backoff_over(&self, now: u64) -> bool {
        self.stored.task.status == TaskStatus::Running
            && self.stored.phase == Phase::Backoff
            && self
                .stored
                .admission_expires_at_ms
                .is_some_and(|at| at <= now)
    }

    /// The upstream reaping rule: an unclaimed reservation, or a claim never handed off, whose
    /// time ran out. Expired active leases are recovery's business, not reaping's; a claim held
    /// for a settlement is nobody's.
    pub(super) fn reapable(&self, now: u64) -> bool {
        self.stored.task.status == TaskStatus::Running
            && !self.stored.settlement_held
            && (self.admission_expired(now)
                || (self.stored.phase == Phase::Prepared
                    && !self.stored.handed_off
                    && !self.has_live_lease(now)))
    }

    /// Numbers, logs (as text) and sends one event.
    pub(super) fn publish(&mut self, payload: EventPayload, log_len: usize) -> u64 {
        self.publish_as(payload, None, log_len)
    }

    /// Numbers and sends an event the task itself says; the log keeps only its place.
    pub(super) fn publish_rebuilt(
        &mut self,
        payload: EventPayload,
        rebuilt: Rebuilt,
        log_len: usize,
    ) -> u64 {
        self.publish_as(payload, Some(rebuilt), log_len)
    }

    fn publish_as(
        &mut self,
        payload: EventPayload,
        rebuilt: Option<Rebuilt>,
        log_len: usize,
    ) -> u64 {
        self.stored.seq += 1;
        let event = StoredEvent {
            seq: self.stored.seq,
            event: payload.event,
            data: payload.data,
        };
        self.log.push_back(match rebuilt {
            Some(rebuilt) => LoggedEvent::rebuilt(event.seq, rebuilt),
            None => LoggedEvent::new(&event),
        });
        self.listeners.publish(event);
        while self.log.len() > log_len {
            self.log.pop_front();
        }
        self.stored.seq
    }
}
