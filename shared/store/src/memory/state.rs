//! Everything the memory store keeps, behind its one lock: the tasks, their indexes and the
//! ready queues. Each `pub(super)` method is one whole transition, synchronous, at time `now`
//! (read under the same lock, so transitions are ordered by time as well as by the lock).
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

use crate::Resumed;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, VecDeque};

use tokio::sync::mpsc::UnboundedReceiver;

use super::entry::{Entry, IndexKey};
use super::frozen::Rebuilt;
use super::millis;
use super::owner_index::OwnerIndex;
use crate::{
    Activation, Admission, CasOutcome, Claim, EventPayload, Lease, ListQuery, NewTask, Phase,
    ReceiptRecorded, RecoveryReport, Rejection, Selected, Selection, StoreError, StoredEvent,
    StoredTask, TaskPage, Transition,
};
use protocol::token::OwnerHash;
use protocol::{ErrorCode, Task, TaskError, TaskEvent, TaskStatus, Timestamp};

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

/// What a new subscription gets, read atomically with registering its listener.
pub(super) struct Subscribed {
    pub snapshot: Task,
    pub snapshot_seq: u64,
    pub replay: Vec<StoredEvent>,
    pub rx: UnboundedReceiver<StoredEvent>,
    pub listener_id: u64,
}

pub(super) struct State {
    limits: Limits,
    /// Boxed: a table of 1 KB entries wastes its spare capacity by the kilobyte.
    tasks: HashMap<String, Box<Entry>>,
    by_owner: HashMap<OwnerHash, OwnerIndex>,
    /// Non-terminal tasks per owner (owners with none are absent).
    live_by_owner: HashMap<OwnerHash, u64>,
    /// Non-terminal tasks per client address, of tasks created with one (addresses with none
    /// are absent).
    live_by_source: HashMap<String, u64>,
    terminal: BTreeMap<IndexKey, String>,
    /// The sum of the terminal tasks' `Entry::retained_bytes`.
    retained_bytes: u64,
    due: BTreeMap<IndexKey, String>,
    queues: HashMap<String, VecDeque<String>>,
    next_order: u64,
    next_listener: u64,
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
            next_order: 0,
            next_listener: 0,
            queue_pushed: false,
            closed: false,
        }
    }

    // ----- transitions -----

    pub(super) fn create(&mut self, new: NewTask, now: u64) -> Result<Task, StoreError> {
        self.purge(now);
        self.reap(now);
        if self.tasks.contains_key(&new.task_id) {
            return Err(StoreError::Duplicate(new.task_id));
        }
        self.ensure_owner_capacity(&new.owner)?;
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
        match self.by_owner.entry(new.owner) {
            std::collections::hash_map::Entry::Occupied(mut ids) => {
                ids.get_mut().insert((now, order), new.task_id.clone());
            }
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(OwnerIndex::new((now, order), new.task_id.clone()));
            }
        }
        self.tasks.insert(new.task_id.clone(), Box::new(entry));
        if phase == Phase::Queued {
            self.enqueue(&new.task_id);
        }
        self.reindex(&new.task_id);
        Ok(task)
    }

    pub(super) fn get(&mut self, task_id: &str, now: u64) -> Option<StoredTask> {
        self.purge(now);
        self.tasks.get(task_id).map(|entry| entry.stored())
    }

    pub(super) fn list(&mut self, owner: &OwnerHash, query: &ListQuery, now: u64) -> TaskPage {
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
    pub(super) fn select(
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

    pub(super) fn claim_execution(
        &mut self,
        task_id: &str,
        holder: &str,
        ttl_ms: u64,
        now: u64,
    ) -> Option<Claim> {
        self.purge(now);
        let entry = self.tasks.get(task_id)?;
        if entry.stored.task.status == TaskStatus::Running && entry.admission_expired(now) {
            self.apply(task_id, Transition::cancelled(), now);
            return None;
        }
        self.claim(task_id, holder, ttl_ms, now)
    }

    pub(super) fn renew_execution_claim(&mut self, lease: &Lease, ttl_ms: u64, now: u64) -> bool {
        self.renew(lease, ttl_ms, now, &[Phase::Prepared])
    }

    pub(super) fn renew_leases(&mut self, leases: &[Lease], ttl_ms: u64, now: u64) -> Vec<bool> {
        leases
            .iter()
            .map(|lease| self.renew(lease, ttl_ms, now, &[Phase::Prepared, Phase::Active]))
            .collect()
    }

    pub(super) fn hand_off(&mut self, lease: &Lease, now: u64) -> bool {
        let Some(entry) = self.tasks.get(&lease.task_id) else {
            return false;
        };
        if !entry.holds(lease, now) || entry.stored.phase != Phase::Prepared {
            return false;
        }
        self.enqueue(&lease.task_id);
        self.reindex(&lease.task_id);
        true
    }

    /// See [`crate::TaskStore::hold_for_settlement`].
    pub(super) fn hold_for_settlement(&mut self, lease: &Lease, now: u64) -> bool {
        let Some(entry) = self.tasks.get_mut(&lease.task_id) else {
            return false;
        };
        if !entry.holds(lease, now) || entry.stored.phase != Phase::Prepared {
            return false;
        }
        entry.stored.settlement_held = true;
        self.reindex(&lease.task_id);
        true
    }

    /// Stores a settled payment's receipt with its task; see [`TaskStore::record_receipt`].
    pub(super) fn record_receipt(
        &mut self,
        lease: &Lease,
        receipt: &str,
        now: u64,
    ) -> ReceiptRecorded {
        let Some(entry) = self.tasks.get_mut(&lease.task_id) else {
            return ReceiptRecorded::Missing;
        };
        entry.stored.receipt = Some(receipt.to_owned());
        // A held claim is still its admission's past its deadline: nobody else can claim it.
        let held_by_lease = entry.stored.settlement_held
            && entry.stored.task.status == TaskStatus::Running
            && entry.stored.lease.as_ref().is_some_and(|current| {
                current.holder == lease.holder && current.epoch == lease.epoch
            });
        if (entry.holds(lease, now) || held_by_lease) && entry.stored.phase == Phase::Prepared {
            self.enqueue(&lease.task_id);
            self.reindex(&lease.task_id);
            ReceiptRecorded::Committed
        } else if entry.stored.task.status == TaskStatus::Running && entry.stored.handed_off {
            // Committed by this payment before (a recovered receipt, or an earlier try).
            ReceiptRecorded::Committed
        } else {
            ReceiptRecorded::Attached
        }
    }

    /// See [`TaskStore::attach_receipt`].
    pub(super) fn attach_receipt(&mut self, task_id: &str, receipt: &str) -> ReceiptRecorded {
        let Some(entry) = self.tasks.get_mut(task_id) else {
            return ReceiptRecorded::Missing;
        };
        entry.stored.receipt = Some(receipt.to_owned());
        if entry.stored.task.status == TaskStatus::Running && entry.stored.phase == Phase::Prepared
        {
            if entry.stored.settlement_held {
                // Paid for: it runs now.
                self.enqueue(task_id);
                self.reindex(task_id);
            } else {
                // Recovery queues it when the admitting claim expires.
                entry.stored.handed_off = true;
            }
            ReceiptRecorded::Committed
        } else {
            ReceiptRecorded::Attached
        }
    }

    pub(super) fn activate_execution(
        &mut self,
        lease: &Lease,
        ttl_ms: u64,
        max_run_ms: u64,
        now: u64,
    ) -> Option<Activation> {
        let entry = self.tasks.get_mut(&lease.task_id)?;
        if !entry.holds(lease, now)
            || entry.stored.phase != Phase::Prepared
            || entry.stored.settlement_held
        {
            return None;
        }
        let stored = &mut entry.stored;
        let current = stored.lease.as_mut()?;
        current.expires_at_ms = now.saturating_add(ttl_ms);
        stored.phase = Phase::Active;
        stored.attempt = stored.attempt.saturating_add(1);
        stored.admission_expires_at_ms = None;
        let run_deadline_ms = now.saturating_add(max_run_ms);
        stored.run_deadline_ms = Some(run_deadline_ms);
        entry.max_run_ms = max_run_ms;
        let activation = Activation {
            lease: current.clone(),
            attempt: stored.attempt,
            run_deadline_ms,
        };
        self.reindex(&lease.task_id);
        Some(activation)
    }

    pub(super) fn compare_and_set(
        &mut self,
        task_id: &str,
        expected: &[TaskStatus],
        next: Transition,
        fence: Option<&Lease>,
        now: u64,
    ) -> CasOutcome {
        self.purge(now);
        let Some(entry) = self.tasks.get(task_id) else {
            return CasOutcome::Rejected {
                reason: Rejection::NotFound,
                current: None,
            };
        };
        // A terminal task never runs again, whatever `expected` says.
        let reason = if !expected.contains(&entry.stored.task.status)
            || (entry.stored.task.status.is_terminal() && !next.status.is_terminal())
        {
            Some(Rejection::Status)
        } else if fence.is_some_and(|lease| lease.task_id != task_id || !entry.holds(lease, now)) {
            Some(Rejection::Fenced)
        } else {
            None
        };
        match reason {
            Some(reason) => CasOutcome::Rejected {
                reason,
                current: Some(entry.task()),
            },
            None => match self.apply(task_id, next, now) {
                Some(task) => CasOutcome::Applied(task),
                None => CasOutcome::Rejected {
                    reason: Rejection::NotFound,
                    current: None,
                },
            },
        }
    }

    /// Who holds the task's lease, if anyone.
    pub(super) fn lease_holder(&self, task_id: &str) -> Option<String> {
        let entry = self.tasks.get(task_id)?;
        entry
            .stored
            .lease
            .as_ref()
            .map(|lease| lease.holder.clone())
    }

    pub(super) fn emit(&mut self, lease: &Lease, payload: EventPayload, now: u64) -> Option<u64> {
        let log_len = self.limits.event_log_len;
        let entry = self.tasks.get_mut(&lease.task_id)?;
        let phase_ok = matches!(entry.stored.phase, Phase::Prepared | Phase::Active);
        (entry.holds(lease, now) && phase_ok).then(|| entry.publish(payload, log_len))
    }

    /// `active -> waiting` under `lease` (see [`crate::TaskStore::await_input`]).
    pub(super) fn await_input(
        &mut self,
        lease: &Lease,
        request: Value,
        patience_ms: u64,
        now: u64,
    ) -> bool {
        let log_len = self.limits.event_log_len;
        let Some(entry) = self.tasks.get_mut(&lease.task_id) else {
            return false;
        };
        if !entry.holds(lease, now) || entry.stored.phase != Phase::Active {
            return false;
        }
        let stored = &mut entry.stored;
        stored.phase = Phase::Waiting;
        stored.lease = None;
        stored.run_deadline_ms = None;
        // The waiting deadline lives where an admission's does: the sweeps read it there.
        stored.admission_expires_at_ms = Some(now.saturating_add(patience_ms));
        stored.task.updated_at = Timestamp(now);
        let data = crate::input_required_data(&lease.task_id, &request);
        stored.input_request = Some(request);
        entry.publish(
            EventPayload {
                event: crate::INPUT_REQUIRED_EVENT.to_owned(),
                data,
            },
            log_len,
        );
        self.reindex(&lease.task_id);
        true
    }

    /// `active -> backoff` under `lease` (see [`crate::TaskStore::retry_later`]).
    pub(super) fn retry_later(
        &mut self,
        lease: &Lease,
        error: &TaskError,
        delay_ms: u64,
        now: u64,
    ) -> bool {
        let Some(entry) = self.tasks.get_mut(&lease.task_id) else {
            return false;
        };
        if !entry.holds(lease, now) || entry.stored.phase != Phase::Active {
            return false;
        }
        let stored = &mut entry.stored;
        stored.phase = Phase::Backoff;
        stored.lease = None;
        stored.run_deadline_ms = None;
        // The due time lives where a waiting task's deadline does: the sweeps read it there.
        stored.admission_expires_at_ms = Some(now.saturating_add(delay_ms));
        stored.retries = stored.retries.saturating_add(1);
        stored.last_error = Some(Box::new(error.clone()));
        stored.task.updated_at = Timestamp(now);
        self.reindex(&lease.task_id);
        true
    }

    /// `waiting -> queued` with a new input (see [`crate::TaskStore::resume`]).
    pub(super) fn resume(
        &mut self,
        task_id: &str,
        owner: &OwnerHash,
        input: Value,
        metadata: Option<Value>,
        now: u64,
    ) -> Resumed {
        self.purge(now);
        let log_len = self.limits.event_log_len;
        let Some(entry) = self.tasks.get_mut(task_id) else {
            return Resumed::NotFound;
        };
        if &entry.stored.owner != owner {
            return Resumed::NotFound;
        }
        if entry.stored.task.status != TaskStatus::Running || entry.stored.phase != Phase::Waiting {
            return Resumed::NotWaiting(entry.task());
        }
        let stored = &mut entry.stored;
        let request = stored.input_request.take();
        let turn = crate::turn_of(&stored.invocation, request.as_ref());
        stored.turns.push(turn);
        stored.admission_expires_at_ms = None;
        stored.invocation.input = input;
        stored.invocation.metadata = metadata;
        stored.attempt = 0;
        stored.retries = 0;
        stored.last_error = None;
        stored.task.updated_at = Timestamp(now);
        let task = stored.task.clone();
        let seq = entry.publish(TaskEvent::status(&task).into(), log_len);
        self.enqueue(task_id);
        self.reindex(task_id);
        Resumed::Queued { task, seq }
    }

    pub(super) fn subscribe(
        &mut self,
        task_id: &str,
        owner: &OwnerHash,
        after_seq: Option<u64>,
        now: u64,
    ) -> Option<Subscribed> {
        self.purge(now);
        let listener_id = self.next_listener;
        let entry = self.tasks.get_mut(task_id)?;
        if entry.stored.owner != *owner {
            return None;
        }
        self.next_listener += 1;
        // Listener, snapshot and replay under one lock: no event can fall between them.
        let rx = entry.listeners.add(listener_id);
        let replay = match after_seq {
            Some(after) => entry.replay(after),
            None => Vec::new(),
        };
        Some(Subscribed {
            snapshot: entry.task(),
            snapshot_seq: entry.stored.seq,
            replay,
            rx,
            listener_id,
        })
    }

    pub(super) fn unsubscribe(&mut self, task_id: &str, listener_id: u64) {
        if let Some(entry) = self.tasks.get_mut(task_id) {
            entry.listeners.remove(listener_id);
        }
    }

    /// Pops queued tasks of `entrypoints`, one per entrypoint in turn, and claims up to `max`.
    pub(super) fn take(
        &mut self,
        entrypoints: &[String],
        holder: &str,
        ttl_ms: u64,
        max: usize,
        now: u64,
    ) -> Vec<Claim> {
        self.purge(now);
        let mut claims = Vec::new();
        let mut progressed = true;
        while claims.len() < max && progressed {
            progressed = false;
            for entrypoint in entrypoints {
                if claims.len() >= max {
                    break;
                }
                let Some(task_id) = self
                    .queues
                    .get_mut(entrypoint)
                    .and_then(VecDeque::pop_front)
                else {
                    continue;
                };
                progressed = true;
                let queued = self
                    .tasks
                    .get(&task_id)
                    .is_some_and(|entry| entry.stored.phase == Phase::Queued);
                if queued && let Some(claim) = self.claim(&task_id, holder, ttl_ms, now) {
                    claims.push(claim);
                }
            }
        }
        claims
    }

    pub(super) fn recover_expired(&mut self, limit: usize, now: u64) -> RecoveryReport {
        self.purge(now);
        let mut report = RecoveryReport::default();
        for task_id in self.due_by(now).into_iter().take(limit) {
            let Some(entry) = self.tasks.get(&task_id) else {
                continue;
            };
            let stored = &entry.stored;
            if stored.settlement_held {
                // Never indexed as due (`Entry::due`); settled only by its settlement.
                self.reindex(&task_id);
                continue;
            }
            report
                .entrypoints
                .insert(task_id.clone(), stored.invocation.entrypoint.clone());
            if entry.input_expired(now) {
                self.apply(&task_id, Transition::failed(input_timeout()), now);
                report.failed.push(task_id);
                continue;
            }
            if entry.reapable(now) {
                self.apply(&task_id, Transition::cancelled(), now);
                report.cancelled.push(task_id);
                continue;
            }
            if entry.backoff_over(now) {
                self.enqueue(&task_id);
                self.reindex(&task_id);
                report.retried.push(task_id);
                continue;
            }
            match stored.phase {
                Phase::Prepared => {
                    self.enqueue(&task_id);
                    self.reindex(&task_id);
                    report.requeued.push(task_id);
                }
                Phase::Active => {
                    let timed_out = stored
                        .run_deadline_ms
                        .is_some_and(|deadline| now >= deadline);
                    let error = if timed_out {
                        Some(TaskError::new(
                            ErrorCode::TaskTimeout.as_str(),
                            format!("Task exceeded its {}ms execution limit", entry.max_run_ms),
                        ))
                    } else if stored.attempt.saturating_sub(stored.retries) >= stored.max_attempts {
                        Some(TaskError::new(
                            ErrorCode::TaskAttemptsExhausted.as_str(),
                            format!("Task was abandoned by its worker {} times", stored.attempt),
                        ))
                    } else {
                        None
                    };
                    match error {
                        Some(error) => {
                            self.apply(&task_id, Transition::failed(error), now);
                            report.failed.push(task_id);
                        }
                        None => {
                            self.enqueue(&task_id);
                            self.reindex(&task_id);
                            report.requeued.push(task_id);
                        }
                    }
                }
                // A lease in any other phase is not something a store transition produces;
                // drop it so the task is claimable again.
                Phase::Reserved
                | Phase::Queued
                | Phase::Waiting
                | Phase::Backoff
                | Phase::Terminal => {
                    if let Some(entry) = self.tasks.get_mut(&task_id) {
                        entry.stored.lease = None;
                    }
                    report.entrypoints.remove(&task_id);
                    self.reindex(&task_id);
                }
            }
        }
        report
    }

    /// Cancels what the reaping rule covers; returns how many.
    pub(super) fn reap(&mut self, now: u64) -> u64 {
        let mut reaped = 0;
        for task_id in self.due_by(now) {
            if self
                .tasks
                .get(&task_id)
                .is_some_and(|entry| entry.input_expired(now))
            {
                self.apply(&task_id, Transition::failed(input_timeout()), now);
                reaped += 1;
                continue;
            }
            if self
                .tasks
                .get(&task_id)
                .is_some_and(|entry| entry.reapable(now))
            {
                self.apply(&task_id, Transition::cancelled(), now);
                reaped += 1;
                continue;
            }
            // A due backoff is queued by either sweep, as the Redis store's does.
            if self
                .tasks
                .get(&task_id)
                .is_some_and(|entry| entry.backoff_over(now))
            {
                self.enqueue(&task_id);
                self.reindex(&task_id);
            }
        }
        reaped
    }

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

    // ----- helpers -----

    /// Writes `next` (status, result, error), stamps `updated_at` and publishes the matching
    /// event. A terminal `next` releases the lease, the admission and any queue slot.
    fn apply(&mut self, task_id: &str, next: Transition, now: u64) -> Option<Task> {
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
        self.reindex(task_id);
        Some(task)
    }

    /// Claims a running task without a live lease: new epoch, `prepared`.
    fn claim(&mut self, task_id: &str, holder: &str, ttl_ms: u64, now: u64) -> Option<Claim> {
        let entry = self.tasks.get_mut(task_id)?;
        // An active task whose lease expired belongs to recovery, which counts its attempts.
        // A waiting task runs again only when its owner resumes it. A claim held for a
        // settlement stays its admission's, expired or not.
        if entry.stored.task.status != TaskStatus::Running
            || matches!(
                entry.stored.phase,
                Phase::Active | Phase::Waiting | Phase::Backoff
            )
            || entry.stored.settlement_held
            || entry.has_live_lease(now)
        {
            return None;
        }
        let was_queued = entry.stored.phase == Phase::Queued;
        entry.epoch += 1;
        let stored = &mut entry.stored;
        let lease = Lease {
            task_id: task_id.to_owned(),
            task_owner: stored.owner.clone(),
            entrypoint: stored.invocation.entrypoint.clone(),
            holder: holder.to_owned(),
            epoch: entry.epoch,
            expires_at_ms: now.saturating_add(ttl_ms),
        };
        stored.lease = Some(lease.clone());
        stored.phase = Phase::Prepared;
        stored.admission_expires_at_ms = None;
        let claim = Claim {
            lease,
            owner: stored.owner.clone(),
            invocation: stored.invocation.clone(),
            previous_attempts: stored.attempt,
            max_attempts: stored.max_attempts,
            created_at_ms: stored.task.created_at.0,
        };
        if was_queued {
            let entrypoint = stored.invocation.entrypoint.clone();
            self.unqueue(&entrypoint, task_id);
        }
        self.reindex(task_id);
        Some(claim)
    }

    fn renew(&mut self, lease: &Lease, ttl_ms: u64, now: u64, phases: &[Phase]) -> bool {
        let Some(entry) = self.tasks.get_mut(&lease.task_id) else {
            return false;
        };
        if !entry.holds(lease, now) || !phases.contains(&entry.stored.phase) {
            return false;
        }
        if let Some(current) = entry.stored.lease.as_mut() {
            current.expires_at_ms = now.saturating_add(ttl_ms);
        }
        self.reindex(&lease.task_id);
        true
    }

    /// Puts a running task in its entrypoint's ready queue, releasing any lease.
    fn enqueue(&mut self, task_id: &str) {
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

    fn unqueue(&mut self, entrypoint: &str, task_id: &str) {
        if let Some(queue) = self.queues.get_mut(entrypoint) {
            queue.retain(|queued| queued != task_id);
            if queue.is_empty() {
                self.queues.remove(entrypoint);
            }
        }
    }

    /// Ids whose lease or admission deadline has passed, earliest first.
    fn due_by(&self, now: u64) -> Vec<String> {
        self.due
            .range(..=(now, u64::MAX))
            .map(|(_, task_id)| task_id.clone())
            .collect()
    }

    /// Deletes terminal tasks whose retention has passed.
    fn purge(&mut self, now: u64) {
        while let Some((&(expires_at, _), task_id)) = self.terminal.first_key_value() {
            if expires_at > now {
                break;
            }
            let task_id = task_id.clone();
            self.remove(&task_id);
        }
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
    fn remove(&mut self, task_id: &str) {
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
    fn reindex(&mut self, task_id: &str) {
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

/// The failure of a waiting task whose caller did not answer in time.
fn input_timeout() -> TaskError {
    TaskError::new(
        crate::INPUT_TIMEOUT,
        "No input arrived before the task's waiting deadline",
    )
}
