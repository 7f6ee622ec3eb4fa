//! MemoryStore: the whole [`TaskStore`] contract in one process (durability `process`), for
//! embedded mode and tests.
//!
//! - `entry`: one task with its epoch, event log, listeners and index keys;
//! - `state`: the tasks, their indexes and queues, and the bookkeeping transitions share;
//! - `transitions/`: one synchronous `State` method per transition, one file per Redis script
//!   (`transitions/claim.rs` beside `redis/scripts/claim.rs`);
//! - `listing`: one task, an owner's listing and selection;
//! - `subscriptions`: subscribing, per-task listeners and the event stream a subscriber holds.
//!
//! Time comes from a [`Clock`] so tests can move it by hand.

mod entry;
mod failed;
mod frozen;
mod listing;
mod owner_index;
mod state;
mod subscriptions;
#[cfg(test)]
mod tests;
mod transitions;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::mpsc::UnboundedSender;

use async_trait::async_trait;
use tokio::sync::Notify;

use self::state::{Limits, State};
use self::subscriptions::ListenerStream;
use super::{
    Activation, CasOutcome, Claim, DEFAULT_MAX_LIVE_PER_ADDRESS, DEFAULT_MAX_LIVE_PER_OWNER,
    DEFAULT_MAX_RETAINED, DEFAULT_MAX_RETAINED_BYTES, DEFAULT_MAX_RETAINED_PER_OWNER,
    DEFAULT_MAX_TASKS, DEFAULT_RETENTION, Durability, EventPayload, Lease, ListQuery, NewTask,
    ReceiptRecorded, RecoveryReport, Selected, Selection, StoreError, StoredTask, Subscription,
    TaskPage, TaskStore, Transition,
};
use crate::Resumed;
use protocol::token::OwnerHash;
use protocol::{Task, TaskStatus, Timestamp};
use serde_json::Value;

/// Where the store reads the time, in milliseconds since the Unix epoch.
pub trait Clock: Send + Sync {
    fn now_ms(&self) -> u64;
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        Timestamp::now().as_millis()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryStoreConfig {
    /// Stored tasks (terminal ones included) before creation evicts terminal tasks or refuses.
    pub max_tasks: u64,
    /// Stored tasks in all before creation evicts terminal tasks or refuses; the tighter of
    /// this and `max_tasks` applies (0: only `max_tasks`).
    pub max_retained: u64,
    /// One owner's stored tasks before creation evicts its oldest terminal one (0: no bound).
    pub max_retained_per_owner: u64,
    /// One owner's non-terminal tasks before creation refuses (0: no bound).
    pub max_live_per_owner: u64,
    /// One client address's non-terminal tasks (those created with a `source`) before
    /// creation refuses (0: no bound).
    pub max_live_per_address: u64,
    /// Bytes terminal tasks keep before creation evicts the first to expire (0: no bound).
    pub max_retained_bytes: u64,
    /// How long terminal tasks are kept.
    pub retention: Duration,
    /// Events kept per task for subscribers that resume (`after_seq`).
    pub event_log_len: usize,
}

impl Default for MemoryStoreConfig {
    fn default() -> Self {
        MemoryStoreConfig {
            max_tasks: DEFAULT_MAX_TASKS,
            max_retained: DEFAULT_MAX_RETAINED,
            max_retained_per_owner: DEFAULT_MAX_RETAINED_PER_OWNER,
            max_live_per_owner: DEFAULT_MAX_LIVE_PER_OWNER,
            max_live_per_address: DEFAULT_MAX_LIVE_PER_ADDRESS,
            max_retained_bytes: DEFAULT_MAX_RETAINED_BYTES,
            retention: DEFAULT_RETENTION,
            event_log_len: 64,
        }
    }
}

pub struct MemoryStore {
    // A std mutex, not tokio's: every critical section is a short synchronous transition with
    // no await inside, so nothing can hold the lock across a suspension point, and a blocking
    // lock is cheaper than an async one. Event delivery happens under it (unbounded sends never
    // block), which is what orders events and makes subscribe-then-snapshot gap free.
    state: Arc<Mutex<State>>,
    /// Woken whenever a task enters a ready queue; `take_next` waits on it instead of polling.
    ready: Notify,
    /// Workers listening for cancellations of the tasks they hold, by worker id.
    cancel_watchers: Mutex<HashMap<String, Vec<UnboundedSender<String>>>>,
    clock: Arc<dyn Clock>,
    /// The console's stats of this one-process cluster.
    stats: Arc<crate::stats::MemoryStats>,
}

impl MemoryStore {
    pub fn new(config: MemoryStoreConfig) -> Self {
        MemoryStore::with_clock(config, Arc::new(SystemClock))
    }

    pub fn with_clock(config: MemoryStoreConfig, clock: Arc<dyn Clock>) -> Self {
        let limits = Limits {
            max_tasks: config.max_tasks,
            max_retained: config.max_retained,
            max_retained_per_owner: config.max_retained_per_owner,
            max_live_per_owner: config.max_live_per_owner,
            max_live_per_address: config.max_live_per_address,
            max_retained_bytes: config.max_retained_bytes,
            retention_ms: millis(config.retention),
            event_log_len: config.event_log_len,
        };
        MemoryStore {
            state: Arc::new(Mutex::new(State::new(limits))),
            ready: Notify::new(),
            cancel_watchers: Default::default(),
            clock,
            stats: Arc::default(),
        }
    }

    /// Runs one transition under the lock at the current time, then wakes queue waiters if it
    /// queued anything (after unlocking, so they do not wake into a held lock).
    fn with_state<R>(&self, op: impl FnOnce(&mut State, u64) -> R) -> R {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        // Read under the lock so that transitions see non-decreasing times in lock order.
        let now = self.clock.now_ms();
        let out = op(&mut state, now);
        let pushed = std::mem::take(&mut state.queue_pushed);
        drop(state);
        if pushed {
            self.ready.notify_waiters();
        }
        out
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new(MemoryStoreConfig::default())
    }
}

/// A duration in whole milliseconds, saturating.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[async_trait]
impl TaskStore for MemoryStore {
    fn durability(&self) -> Durability {
        Durability::Process
    }

    async fn reap_expired_admissions(&self) -> Result<u64, StoreError> {
        Ok(self.with_state(|state, now| state.reap(now)))
    }

    async fn create(&self, new: NewTask) -> Result<Task, StoreError> {
        self.with_state(|state, now| state.create(new, now))
    }

    async fn get(&self, task_id: &str) -> Result<Option<StoredTask>, StoreError> {
        Ok(self.with_state(|state, now| state.get(task_id, now)))
    }

    async fn list(&self, owner: &OwnerHash, query: &ListQuery) -> Result<TaskPage, StoreError> {
        Ok(self.with_state(|state, now| state.list(owner, query, now)))
    }

    async fn select(
        &self,
        owner: &OwnerHash,
        selection: &Selection,
    ) -> Result<Selected, StoreError> {
        Ok(self.with_state(|state, now| state.select(owner, selection, now)))
    }

    async fn claim_execution(
        &self,
        task_id: &str,
        holder: &str,
        lease_ttl: Duration,
    ) -> Result<Option<Claim>, StoreError> {
        let ttl = millis(lease_ttl);
        Ok(self.with_state(|state, now| state.claim_execution(task_id, holder, ttl, now)))
    }

    async fn renew_execution_claim(
        &self,
        lease: &Lease,
        lease_ttl: Duration,
    ) -> Result<bool, StoreError> {
        let ttl = millis(lease_ttl);
        Ok(self.with_state(|state, now| state.renew_execution_claim(lease, ttl, now)))
    }

    async fn record_receipt(
        &self,
        lease: &Lease,
        receipt: &str,
    ) -> Result<ReceiptRecorded, StoreError> {
        Ok(self.with_state(|state, now| state.record_receipt(lease, receipt, now)))
    }

    async fn attach_receipt(
        &self,
        task_id: &str,
        receipt: &str,
    ) -> Result<ReceiptRecorded, StoreError> {
        Ok(self.with_state(|state, _| state.attach_receipt(task_id, receipt)))
    }

    async fn hand_off(&self, lease: &Lease) -> Result<bool, StoreError> {
        Ok(self.with_state(|state, now| state.hand_off(lease, now)))
    }

    async fn hold_for_settlement(&self, lease: &Lease) -> Result<bool, StoreError> {
        Ok(self.with_state(|state, now| state.hold_for_settlement(lease, now)))
    }

    async fn activate_execution(
        &self,
        lease: &Lease,
        lease_ttl: Duration,
        max_run: Duration,
    ) -> Result<Option<Activation>, StoreError> {
        let (ttl, max_run) = (millis(lease_ttl), millis(max_run));
        Ok(self.with_state(|state, now| state.activate_execution(lease, ttl, max_run, now)))
    }

    async fn compare_and_set(
        &self,
        task_id: &str,
        expected: &[TaskStatus],
        next: Transition,
        fence: Option<&Lease>,
    ) -> Result<CasOutcome, StoreError> {
        let (outcome, holder) = self.with_state(|state, now| {
            let holder = fence
                .is_none()
                .then(|| state.lease_holder(task_id))
                .flatten();
            let outcome = state.compare_and_set(task_id, expected, next, fence, now);
            (outcome, holder)
        });
        if let (CasOutcome::Applied(task), Some(holder)) = (&outcome, holder)
            && task.status.is_terminal()
        {
            let mut watchers = self
                .cancel_watchers
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if let Some(senders) = watchers.get_mut(&holder) {
                senders.retain(|tx| tx.send(task.task_id.clone()).is_ok());
            }
        }
        Ok(outcome)
    }

    async fn watch_cancellations(
        &self,
        worker_id: &str,
    ) -> Result<tokio::sync::mpsc::UnboundedReceiver<String>, StoreError> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        self.cancel_watchers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(worker_id.to_owned())
            .or_default()
            .push(tx);
        Ok(rx)
    }

    async fn await_input(
        &self,
        lease: &Lease,
        request: Value,
        patience: Duration,
    ) -> Result<bool, StoreError> {
        let patience = millis(patience);
        Ok(self.with_state(|state, now| state.await_input(lease, request, patience, now)))
    }

    async fn retry_later(
        &self,
        lease: &Lease,
        error: &protocol::TaskError,
        delay: Duration,
    ) -> Result<bool, StoreError> {
        let delay = millis(delay);
        Ok(self.with_state(|state, now| state.retry_later(lease, error, delay, now)))
    }

    async fn resume(
        &self,
        task_id: &str,
        owner: &OwnerHash,
        input: Value,
        metadata: Option<Value>,
    ) -> Result<Resumed, StoreError> {
        Ok(self.with_state(|state, now| state.resume(task_id, owner, input, metadata, now)))
    }

    async fn emit(&self, lease: &Lease, event: EventPayload) -> Result<Option<u64>, StoreError> {
        Ok(self.with_state(|state, now| state.emit(lease, event, now)))
    }

    async fn subscribe(
        &self,
        task_id: &str,
        owner: &OwnerHash,
        after_seq: Option<u64>,
    ) -> Result<Option<Subscription>, StoreError> {
        let subscribed =
            self.with_state(|state, now| state.subscribe(task_id, owner, after_seq, now));
        // The stream (and its unregistering guard) is built after the lock is released.
        Ok(subscribed.map(|sub| Subscription {
            snapshot: sub.snapshot,
            snapshot_seq: sub.snapshot_seq,
            replay: sub.replay,
            events: Box::pin(ListenerStream::new(
                sub.rx,
                Arc::downgrade(&self.state),
                task_id.to_owned(),
                sub.listener_id,
            )),
        }))
    }

    async fn take_next(
        &self,
        entrypoints: &[String],
        holder: &str,
        lease_ttl: Duration,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Claim>, StoreError> {
        if max == 0 || entrypoints.is_empty() {
            return Ok(Vec::new());
        }
        let ttl = millis(lease_ttl);
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Enabled before looking at the queues, so a push between the look and the wait
            // still wakes us.
            let notified = self.ready.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (claims, closed) = self.with_state(|state, now| {
                let claims = state.take(entrypoints, holder, ttl, max, now);
                (claims, state.closed)
            });
            if !claims.is_empty() || closed {
                return Ok(claims);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Ok(Vec::new());
            }
        }
    }

    async fn wait_for_work(
        &self,
        entrypoints: &[String],
        wait: Duration,
    ) -> Result<(), StoreError> {
        // Enabled before looking at the queues, so a push between the look and the wait still
        // wakes us.
        let notified = self.ready.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let queued = self.with_state(|state, _| {
            state.closed
                || entrypoints
                    .iter()
                    .any(|entrypoint| state.queue_depth(entrypoint) > 0)
        });
        if !queued {
            let _ = tokio::time::timeout(wait, notified).await;
        }
        Ok(())
    }

    async fn renew_leases(
        &self,
        leases: &[Lease],
        lease_ttl: Duration,
    ) -> Result<Vec<bool>, StoreError> {
        let ttl = millis(lease_ttl);
        Ok(self.with_state(|state, now| state.renew_leases(leases, ttl, now)))
    }

    async fn recover_expired(&self, limit: usize) -> Result<RecoveryReport, StoreError> {
        Ok(self.with_state(|state, now| state.recover_expired(limit, now)))
    }

    async fn queue_depth(&self, entrypoint: &str) -> Result<u64, StoreError> {
        Ok(self.with_state(|state, _| state.queue_depth(entrypoint)))
    }

    async fn live_count(&self) -> Result<u64, StoreError> {
        Ok(self.with_state(|state, _| state.live_count()))
    }

    async fn failed_page(
        &self,
        entrypoint: &str,
        after: Option<&crate::FailedCursor>,
        limit: usize,
    ) -> Result<crate::FailedPage, StoreError> {
        Ok(self.with_state(|state, now| state.failed_page(entrypoint, after, limit, now)))
    }

    async fn failed_count(&self, entrypoint: &str) -> Result<u64, StoreError> {
        Ok(self.with_state(|state, _| {
            state
                .failed
                .get(entrypoint)
                .map_or(0, |index| index.len() as u64)
        }))
    }

    async fn forget_failed(
        &self,
        entrypoint: &str,
        task_ids: &[String],
    ) -> Result<u64, StoreError> {
        Ok(self.with_state(|state, _| state.forget_failed(entrypoint, task_ids)))
    }

    async fn lease_count(&self) -> Result<u64, StoreError> {
        Ok(self.with_state(|state, _| state.lease_count()))
    }

    /// Ends every subscription stream and releases `take_next` waiters; tasks stay as they are.
    fn cluster_stats(&self) -> Option<Arc<dyn crate::stats::ClusterStats>> {
        Some(self.stats.clone())
    }

    async fn close(&self) {
        self.with_state(|state, _| state.close());
        self.ready.notify_waiters();
    }
}
