//! The task store: everything the cluster keeps, in Redis or (embedded) in memory.
//!
//! - the [`TaskStore`] contract (below), with [`MemoryStore`] (durability `process`) and
//!   [`RedisStore`] (module [`redis`]: durability `durable`, one Lua script per transition, fenced
//!   leases, shards, Redis Cluster, pub/sub of task events);
//! - [`registry`]: the live worker registry (what each worker hosts, refreshed by heartbeat);
//! - [`credentials`]: the payment credential ledger (each credential claimed once, its settlement
//!   and receipt) and Sign-In-With-X nonces;
//! - [`idempotency`]: `Idempotency-Key` records of direct invokes, scoped to caller and operation;
//! - [`ratelimit`]: GCRA rate limits shared by every gateway;
//! - the Lua sources in `lua/` (helpers in `lua/includes/`, pasted in by `build.rs`), each with
//!   one Rust module holding its contract, its keys and arguments, its typed reply and its call,
//!   each named once with `lua_script!` (`lua.rs`): the task store's (push outbox included) in
//!   `redis/scripts/`, the others beside their store (`credentials/redis/`,
//!   `idempotency/redis/`, `registry/redis/`, `ratelimit/gcra.rs`).
//!
//! Wire types come from `protocol`; this crate adds what only a store needs.
//!
//! A task is `running` on the wire from creation until one terminal write. Inside `running`
//! only the store sees the phase:
//!
//! ```text
//! reserved (admission expires) -> queued -> prepared (claim, short lease)
//!    -> active (lease renewed by heartbeat, hard run deadline) -> completed | failed | cancelled
//!    active -> waiting (the run asked for input) -> queued (resumed with it) | cancelled
//!    active -> backoff (the run failed asking for a retry) -> queued (its backoff ended, by
//!       the sweep) | cancelled
//!    prepared -> prepared+held (a paid admission about to settle: out of the deadline index)
//!       -> queued (the receipt, stored by the admission or recovered) | cancelled (never
//!          settled)
//! ```
//!
//! A held task ([`TaskStore::hold_for_settlement`]) may have been paid for while nobody knows
//! yet: no sweep cancels or requeues it, however long ago its claim expired, nobody else can
//! claim it, and it never activates. Only the settlement's outcome moves it on.
//!
//! Every claim bumps a per-task fencing epoch. Renewals, activation, progress and fenced terminal
//! writes carry a [`Lease`] (owner id + epoch) and are refused unless that lease is the task's
//! current one and still live, so a worker that lost its lease can never land a write.
//! Cancellation is the one unfenced transition.
//!
//! Time belongs to the store (Redis `TIME` in the Redis store), so callers pass durations.

pub mod credentials;
pub mod idempotency;
pub mod push;
pub mod ratelimit;
pub mod registry;
pub mod stats;

mod error;
mod lua;
mod memory;
pub mod redis;
mod types;

pub use error::StoreError;
pub use memory::{Clock, MemoryStore, MemoryStoreConfig, SystemClock};
pub use redis::{DurabilitySetting, RedisStore, RedisStoreConfig};
pub use types::*;

use std::time::Duration;

use async_trait::async_trait;

use serde_json::Value;

use protocol::token::OwnerHash;
use protocol::{Task, TaskStatus};

/// What a store's acknowledgement is worth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Lost when the process exits (the in-memory store).
    Process,
    /// Survives process and store restarts (Redis with AOF).
    Durable,
}

/// How full one store server's memory is (Redis `INFO memory`): a Redis Cluster reports one
/// per master, a single server one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryFill {
    /// The server, as `host:port` (a cluster master) or `server` (the one server).
    pub node: String,
    /// `used_memory`, in bytes.
    pub used: u64,
    /// `maxmemory`, in bytes; 0 when unlimited.
    pub max: u64,
}

impl MemoryFill {
    /// `used / max`; `None` when the server has no limit (`maxmemory 0`).
    pub fn ratio(&self) -> Option<f64> {
        (self.max > 0).then(|| self.used as f64 / self.max as f64)
    }
}

#[async_trait]
pub trait TaskStore: Send + Sync + 'static {
    fn durability(&self) -> Durability;

    /// Cancels reservations whose admission expired unclaimed, and claims taken before hand-off
    /// whose lease expired (the upstream reaping rule), except claims held for a settlement.
    /// Returns how many tasks it cancelled.
    async fn reap_expired_admissions(&self) -> Result<u64, StoreError>;

    /// Stores a new task (status `running`) and publishes `statusUpdate running`.
    /// Expired admissions are reaped before capacity is enforced.
    async fn create(&self, new: NewTask) -> Result<Task, StoreError>;

    /// [`TaskStore::create`] and a subscription to the new task from its first event
    /// (`after_seq = 0`), for a caller that follows its own run (invoke, stream). The default
    /// creates, then subscribes; the Redis store listens first and builds the snapshot from
    /// the create's reply, so no read follows (one round trip each).
    async fn create_watched(&self, new: NewTask) -> Result<(Task, Subscription), StoreError> {
        let (task_id, owner) = (new.task_id.clone(), new.owner.clone());
        let task = self.create(new).await?;
        let subscription = self
            .subscribe(&task_id, &owner, Some(0))
            .await?
            .ok_or_else(|| StoreError::Corrupt(format!("task {task_id} vanished on creation")))?;
        Ok((task, subscription))
    }

    async fn get(&self, task_id: &str) -> Result<Option<StoredTask>, StoreError>;

    /// The owner's tasks, newest first, filtered and paged.
    async fn list(&self, owner: &OwnerHash, query: &ListQuery) -> Result<TaskPage, StoreError>;

    /// The ids of one page of the owner's tasks that pass `selection`, newest update first,
    /// and how many passed. Reads only the small fields of each candidate (status, phase,
    /// context, update time, the error code when asked), never a result: the caller reads the
    /// page's records.
    async fn select(
        &self,
        owner: &OwnerHash,
        selection: &Selection,
    ) -> Result<Selected, StoreError>;

    /// Claims a `running` task that has no live lease (reserved or queued): a `prepared` lease
    /// with a new epoch. `None` when the task is missing, terminal or already claimed.
    async fn claim_execution(
        &self,
        task_id: &str,
        holder: &str,
        lease_ttl: Duration,
    ) -> Result<Option<Claim>, StoreError>;

    /// Extends a live `prepared` claim. False when the lease is not current and live.
    async fn renew_execution_claim(
        &self,
        lease: &Lease,
        lease_ttl: Duration,
    ) -> Result<bool, StoreError>;

    /// Hands a prepared claim over to the ready queue (after, say, payment settled): the lease is
    /// released and the task becomes `queued` for any worker. Fenced.
    async fn hand_off(&self, lease: &Lease) -> Result<bool, StoreError>;

    /// Holds a `prepared` claim for a settlement whose outcome may become unknown (a paid
    /// admission, right before it asks the facilitator to settle): the task is marked held and
    /// leaves the lease deadline index, so that neither reaping nor recovery cancels or
    /// requeues it when the claim expires (it may have been paid for), and nobody else can
    /// claim it. The claim stays the holder's: renewals extend it (still out of the index) and
    /// [`TaskStore::record_receipt`] under it hands the task off as before. Afterwards only the
    /// settlement's outcome moves the task: a receipt ([`TaskStore::record_receipt`],
    /// [`TaskStore::attach_receipt`]) commits it to run, a cancel
    /// ([`TaskStore::compare_and_set`]) ends it. Fenced: false when `lease` is not the task's
    /// current live lease or the task is not `prepared`.
    async fn hold_for_settlement(&self, lease: &Lease) -> Result<bool, StoreError>;

    /// Stores the receipt of the payment that admitted a task and, with `lease` still live and
    /// `prepared`, hands the task to the ready queue in the same atomic step (what
    /// [`TaskStore::hand_off`] does), so no crash falls between a stored receipt and a queued
    /// task. A claim held for the settlement ([`TaskStore::hold_for_settlement`]) commits the
    /// task even past its deadline (nobody else can have claimed a held task). A running task
    /// already handed off was committed before (by [`TaskStore::attach_receipt`], or an
    /// earlier try whose reply was lost): `Committed`, left as it is. On a task whose claim is
    /// otherwise gone the receipt is attached anyway: a settled payment's receipt is never
    /// dropped.
    async fn record_receipt(
        &self,
        lease: &Lease,
        receipt: &str,
    ) -> Result<ReceiptRecorded, StoreError>;

    /// Stores a receipt recovered after the admitting gateway lost the settle answer: a task
    /// held for the settlement ([`TaskStore::hold_for_settlement`]) is queued at once; one
    /// still `prepared` under that gateway's claim without a hold is committed to run
    /// (recovery queues it when the claim expires instead of cancelling it); a task that ended
    /// keeps its status and gets the receipt.
    async fn attach_receipt(
        &self,
        task_id: &str,
        receipt: &str,
    ) -> Result<ReceiptRecorded, StoreError>;

    /// `prepared -> active`: counts an attempt, starts the run deadline. Fenced.
    async fn activate_execution(
        &self,
        lease: &Lease,
        lease_ttl: Duration,
        max_run: Duration,
    ) -> Result<Option<Activation>, StoreError>;

    /// Moves the task to `next` if its status is one of `expected` and, when `fence` is given,
    /// the fence is the task's current live lease. A terminal `next` releases any lease and
    /// publishes the matching event (`resultUpdate`, `error` or `statusUpdate`).
    async fn compare_and_set(
        &self,
        task_id: &str,
        expected: &[TaskStatus],
        next: Transition,
        fence: Option<&Lease>,
    ) -> Result<CasOutcome, StoreError>;

    /// Ends the lease holder's run without finishing the task: `active -> waiting`, releasing
    /// the lease, keeping `request` (what the run asks its caller for) and publishing an
    /// `inputRequired` event `{taskId, status: "running", request}`. The task stays live
    /// (it counts toward capacity) until [`TaskStore::resume`], a cancel, or `patience`
    /// running out: then the sweeps ([`TaskStore::recover_expired`],
    /// [`TaskStore::reap_expired_admissions`]) fail it with `input_timeout`. Fenced: `false`
    /// when `lease` is stale.
    async fn await_input(
        &self,
        lease: &Lease,
        request: Value,
        patience: Duration,
    ) -> Result<bool, StoreError>;

    /// Ends the lease holder's run with a failure that asked for another attempt: `active ->
    /// backoff`, releasing the lease and run deadline (the holder's later writes are fenced
    /// out), recording `error` as the task's last error ([`StoredTask::last_error`]) and
    /// counting a retry ([`StoredTask::retries`]: not an abandoned run, so not one that
    /// [`StoredTask::max_attempts`] limits). The task stays running and live, holding no
    /// worker and polled by nobody: its due time `delay` from now is kept where a waiting
    /// task's deadline is, and the sweeps ([`TaskStore::recover_expired`],
    /// [`TaskStore::reap_expired_admissions`]) queue it again once it passed. Nothing is
    /// published (the task stays `running`). A cancel during the wait ends it. Fenced:
    /// `false` when `lease` is stale or the task is not `active`.
    async fn retry_later(
        &self,
        lease: &Lease,
        error: &protocol::TaskError,
        delay: Duration,
    ) -> Result<bool, StoreError>;

    /// The caller's answer to a waiting task: `waiting -> queued` with `input` and `metadata`
    /// as the invocation's new input and metadata, the previous turn appended to the task's
    /// turns, its attempts (and retries, and last error) counted afresh, and a `statusUpdate running` event. Only the
    /// task's owner may resume it (another owner's task reads as missing).
    async fn resume(
        &self,
        task_id: &str,
        owner: &OwnerHash,
        input: Value,
        metadata: Option<Value>,
    ) -> Result<Resumed, StoreError>;

    /// Appends a custom event (progress, stream output) to the task's event log and publishes it.
    /// Fenced. Returns the event's sequence number, or `None` when the fence is stale.
    async fn emit(&self, lease: &Lease, event: EventPayload) -> Result<Option<u64>, StoreError>;

    /// Owner-isolated subscription: `None` for a missing task or another owner's task, which
    /// callers must not be able to tell apart. Events with `seq > after_seq` still in the log are
    /// replayed first; with `after_seq = None`, only events after the snapshot follow.
    async fn subscribe(
        &self,
        task_id: &str,
        owner: &OwnerHash,
        after_seq: Option<u64>,
    ) -> Result<Option<Subscription>, StoreError>;

    // ----- what a cluster needs on top of the upstream contract -----

    /// Waits up to `wait` for queued tasks of these entrypoints and claims up to `max` of them
    /// (`prepared`, post hand-off). Returns early with what it claimed; empty after `wait`.
    async fn take_next(
        &self,
        entrypoints: &[String],
        holder: &str,
        lease_ttl: Duration,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Claim>, StoreError>;

    /// Waits up to `wait` until a task of these entrypoints may be queued; claims nothing. A
    /// worker's fetch loop waits here and then takes with [`TaskStore::take_active`] (no
    /// wait) unless it began to stop meanwhile: one call claims and activates, where
    /// [`TaskStore::take_next`] hands back prepared claims that still need activating. `Ok` says
    /// nothing certain (another worker may take the task first); the caller just looks. The
    /// default waits out `wait` (a store without a doorbell is then polled that often).
    async fn wait_for_work(
        &self,
        entrypoints: &[String],
        wait: Duration,
    ) -> Result<(), StoreError> {
        let _ = entrypoints;
        tokio::time::sleep(wait).await;
        Ok(())
    }

    /// [`TaskStore::take_next`] and [`TaskStore::activate_execution`] in one step: queued tasks
    /// (always handed off, so nothing stands between claim and activation) come back `active`,
    /// their attempt counted and run deadline started. The default calls the two methods; a
    /// claim fenced out before its activation is left out. Returns early with what it started;
    /// empty after `wait`.
    async fn take_active(
        &self,
        spec: &TakeSpec,
        wait: Duration,
    ) -> Result<Vec<Started>, StoreError> {
        let claims = self
            .take_next(
                &spec.entrypoints,
                &spec.holder,
                spec.lease_ttl,
                spec.max,
                wait,
            )
            .await?;
        activate_claims(self, claims, spec).await
    }

    /// A worker's fenced terminal write (`running -> next`, fenced by `lease`, as
    /// [`TaskStore::compare_and_set`] does it), then, when `take` is given, the next tasks for
    /// the same worker as [`TaskStore::take_active`] starts them (without waiting). A rejected
    /// write is reported as such and still frees the worker's slot, so the take happens either
    /// way. The default makes the two calls; a failed take after an applied write returns the
    /// outcome with nothing started (the write must not be reported lost).
    async fn finish_and_take(
        &self,
        lease: &Lease,
        next: Transition,
        take: Option<&TakeSpec>,
    ) -> Result<Finished, StoreError> {
        let outcome = self
            .compare_and_set(&lease.task_id, &[TaskStatus::Running], next, Some(lease))
            .await?;
        let next = match take {
            Some(spec) if spec.max > 0 => match self.take_active(spec, Duration::ZERO).await {
                Ok(started) => started,
                Err(err) => {
                    tracing::warn!(error = %err, "finished, but could not take the next task");
                    Vec::new()
                }
            },
            _ => Vec::new(),
        };
        Ok(Finished { outcome, next })
    }

    /// Renews many live leases (prepared or active) in one round trip. Entry `i` says whether
    /// `leases[i]` is still held.
    async fn renew_leases(
        &self,
        leases: &[Lease],
        lease_ttl: Duration,
    ) -> Result<Vec<bool>, StoreError>;

    /// [`TaskStore::renew_leases`] for a store split into shards that can fail apart: one
    /// shard that does not answer leaves its leases [`Renewal::Unconfirmed`] instead of
    /// failing the others' renewals. An error only when no shard answered. The default (one
    /// shard) maps `renew_leases`.
    async fn renew_each(
        &self,
        leases: &[Lease],
        lease_ttl: Duration,
    ) -> Result<Vec<Renewal>, StoreError> {
        let renewed = self.renew_leases(leases, lease_ttl).await?;
        Ok(renewed
            .into_iter()
            .map(|held| {
                if held {
                    Renewal::Renewed
                } else {
                    Renewal::Lost
                }
            })
            .collect())
    }

    /// Recovers up to `limit` tasks whose lease expired (never a task held for a settlement).
    /// Safe to run from every worker at once.
    async fn recover_expired(&self, limit: usize) -> Result<RecoveryReport, StoreError>;

    /// Ids of tasks held by `worker_id` that someone else finished (a cancel): the worker aborts
    /// their handlers at once instead of at its next heartbeat.
    async fn watch_cancellations(
        &self,
        worker_id: &str,
    ) -> Result<tokio::sync::mpsc::UnboundedReceiver<String>, StoreError>;

    /// Tasks waiting in an entrypoint's ready queue.
    async fn queue_depth(&self, entrypoint: &str) -> Result<u64, StoreError>;

    /// Cluster-wide number of non-terminal tasks (what `max_tasks` bounds).
    async fn live_count(&self) -> Result<u64, StoreError>;

    /// Cluster-wide number of leases (prepared or active), including expired ones the next
    /// recovery sweep will settle; for metrics. The default reports it unavailable, so that
    /// wrappers written before it keep compiling.
    async fn lease_count(&self) -> Result<u64, StoreError> {
        Err(StoreError::Unavailable(
            "this store does not count leases".into(),
        ))
    }

    /// One page of `entrypoint`'s failed tasks, newest first, after `after` (see
    /// [`FailedCursor`]), at most `limit` (capped at [`MAX_FAILED_LIMIT`]). Every transition to
    /// `failed` enters the task in its entrypoint's failed index, which keeps the newest
    /// [`FAILED_KEPT`] (per shard in the Redis store) and nothing past the retention. An entry
    /// whose task record is gone (retention, eviction) is skipped and dropped from the index.
    /// The Redis store reads one range of each shard's index per page (no scan). The default
    /// reports it unavailable, so that wrappers written before it keep compiling.
    async fn failed_page(
        &self,
        entrypoint: &str,
        after: Option<&FailedCursor>,
        limit: usize,
    ) -> Result<FailedPage, StoreError> {
        let _ = (entrypoint, after, limit);
        Err(StoreError::Unavailable(
            "this store keeps no failed index".into(),
        ))
    }

    /// How many tasks `entrypoint`'s failed index holds (in all shards), entries whose record
    /// is gone but not yet dropped included.
    async fn failed_count(&self, entrypoint: &str) -> Result<u64, StoreError> {
        let _ = entrypoint;
        Err(StoreError::Unavailable(
            "this store keeps no failed index".into(),
        ))
    }

    /// Drops tasks from `entrypoint`'s failed index (the operator dealt with them); their
    /// records stay until retention. Returns how many were in it.
    async fn forget_failed(
        &self,
        entrypoint: &str,
        task_ids: &[String],
    ) -> Result<u64, StoreError> {
        let _ = (entrypoint, task_ids);
        Err(StoreError::Unavailable(
            "this store keeps no failed index".into(),
        ))
    }

    /// How full the store's memory is, per server (every master of a Redis Cluster). Empty
    /// when the store has no memory limit of its own to watch (the in-memory store, and, by
    /// default, wrappers written before it).
    async fn memory_fill(&self) -> Result<Vec<MemoryFill>, StoreError> {
        Ok(Vec::new())
    }

    /// Where the cluster's console stats live (see [`stats`]); `None` for wrappers that keep
    /// none.
    fn cluster_stats(&self) -> Option<std::sync::Arc<dyn stats::ClusterStats>> {
        None
    }

    /// Releases connections and background tasks; tasks themselves are left as they are.
    async fn close(&self);
}

/// Activates fresh claims one by one (the default [`TaskStore::take_active`]). A claim whose
/// activation failed is left to expire: recovery puts it back in the queue (nothing ran).
async fn activate_claims<S: TaskStore + ?Sized>(
    store: &S,
    claims: Vec<Claim>,
    spec: &TakeSpec,
) -> Result<Vec<Started>, StoreError> {
    let mut started = Vec::with_capacity(claims.len());
    let mut failure = None;
    for claim in claims {
        match store
            .activate_execution(&claim.lease, spec.lease_ttl, spec.max_run)
            .await
        {
            Ok(Some(activation)) => started.push(Started { claim, activation }),
            Ok(None) => {}
            Err(err) => {
                tracing::warn!(task_id = %claim.lease.task_id, error = %err,
                    "claimed but could not activate; the claim expires back to the queue");
                failure = Some(err);
            }
        }
    }
    match failure {
        Some(err) if started.is_empty() => Err(err),
        _ => Ok(started),
    }
}
