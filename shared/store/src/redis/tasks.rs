//! [`TaskStore`] for [`RedisStore`]: glue that maps the scripts' typed replies
//! ([`super::scripts`], one module per Lua script) to the contract's results. Each method is
//! one script call or one pipelined read, except where noted. Listings are in
//! [`super::listing`], subscriptions in [`super::feed`], the deadline sweeps in
//! [`super::sweep`].

use std::time::Duration;

use async_trait::async_trait;
use tracing::Instrument;

use super::finish::FinishRequest;
use super::replies::{self, TASK_FIELDS};
use super::scripts::activate::{self, ActivateReply};
use super::scripts::await_input::{self, AwaitInputReply};
use super::scripts::cas;
use super::scripts::claim::{self, ClaimReply};
use super::scripts::create::{self, CreateReply};
use super::scripts::emit::{self, EmitReply};
use super::scripts::finish_take;
use super::scripts::hand_off::{self, HandOffReply};
use super::scripts::hold::{self, HoldReply};
use super::scripts::recover::Mode;
use super::scripts::renew::{self, Phases};
use super::scripts::resume::{self, ResumeReply};
use super::scripts::retry_later::{self, RetryLaterReply};
use super::scripts::{attach_receipt, ms, record_receipt};
use super::take::{TakeKey, TakeRequest, Taken};
use super::{Keys, RedisStore, ScriptItem, capacity_per_shard, fields};
use crate::{
    Activation, CasOutcome, Claim, Durability, EventPayload, Finished, Lease, ListQuery, NewTask,
    ReceiptRecorded, RecoveryReport, Rejection, Renewal, Resumed, Selected, Selection, Started,
    StoreError, StoredTask, Subscription, TakeSpec, TaskPage, TaskStore, Transition,
};
use protocol::token::OwnerHash;
use protocol::{Task, TaskStatus};

/// Reads-then-writes a resume tries before giving up on a task that keeps changing.
const RESUME_TRIES: u32 = 8;

impl RedisStore {
    /// The sum of one counting command (`ZCARD`, `SCARD`) over a key of every shard.
    async fn sum_over_shards(
        &self,
        command: &str,
        key: impl Fn(&Keys) -> String,
    ) -> Result<u64, StoreError> {
        self.sum_over_shards_with(command, key, &[]).await
    }

    /// The sum of one counting command over a key of every shard, with arguments after the key.
    async fn sum_over_shards_with(
        &self,
        command: &str,
        key: impl Fn(&Keys) -> String,
        args: &[&str],
    ) -> Result<u64, StoreError> {
        let core = &self.inner.core;
        let pipes = core
            .shards
            .iter()
            .map(|shard| {
                let mut pipe = redis::pipe();
                pipe.cmd(command).arg(key(&shard.keys)).arg(args);
                pipe
            })
            .collect();
        let counts: Vec<(u64,)> = core.pipe_per_shard(pipes).await?;
        Ok(counts.into_iter().map(|(count,)| count).sum())
    }

    /// The `cas.lua` item of a compare-and-set, or the outcome when it is decided without
    /// one (a fence of another task, a missing task).
    async fn swap_item(
        &self,
        task_id: &str,
        expected: &[TaskStatus],
        next: &Transition,
        fence: Option<&Lease>,
    ) -> Result<Result<ScriptItem, CasOutcome>, StoreError> {
        if fence.is_some_and(|lease| lease.task_id != task_id) {
            // Epochs count per task: another task's lease must not pass as this one's fence.
            let current = self.get(task_id).await?.map(|stored| stored.task);
            let reason = if current.is_some() {
                Rejection::Fenced
            } else {
                Rejection::NotFound
            };
            return Ok(Err(CasOutcome::Rejected { reason, current }));
        }
        let (owner, entrypoint) = match fence {
            Some(lease) => (lease.task_owner.clone(), lease.entrypoint.clone()),
            None => match self.owner_and_entrypoint(task_id).await? {
                Some(found) => found,
                None => {
                    return Ok(Err(CasOutcome::Rejected {
                        reason: Rejection::NotFound,
                        current: None,
                    }));
                }
            },
        };
        let keys = self.shard_keys(task_id);
        cas::item(keys, task_id, &owner, &entrypoint, expected, next, fence).map(Ok)
    }

    /// Takes (and, with a run limit, activates) queued tasks: one batched take per look, and
    /// the doorbell wait between looks while the queues are empty (a ring points the next look
    /// at its shard; a wait that times out makes the next look visit every shard).
    async fn take_waiting(
        &self,
        request: TakeRequest,
        wait: Duration,
    ) -> Result<Vec<Taken>, StoreError> {
        if request.key.entrypoints.is_empty() || request.max == 0 {
            return Ok(Vec::new());
        }
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let outcome = self.inner.takes.call(request.clone()).await?;
            if !outcome.claims.is_empty() {
                return Ok(outcome.claims);
            }
            if outcome.more {
                // A queue still holds tasks (they came in after the visit): look again at once.
                continue;
            }
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            if remaining.is_zero() {
                return Ok(Vec::new());
            }
            self.wait_for_doorbell(&request.key.entrypoints, remaining)
                .await?;
            if tokio::time::Instant::now() >= deadline {
                // One last look after the final wait, then give up.
                let outcome = self.inner.takes.call(request).await?;
                return Ok(outcome.claims);
            }
        }
    }

    /// The owner and entrypoint a task's record names; `None` when it does not exist.
    async fn owner_and_entrypoint(
        &self,
        task_id: &str,
    ) -> Result<Option<(OwnerHash, String)>, StoreError> {
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(self.shard_keys(task_id).task(task_id))
            .arg(fields::OWNER)
            .arg(fields::ENTRYPOINT);
        let (owner, entrypoint): (Option<String>, Option<String>) = self.query(&mut cmd).await?;
        Ok(owner
            .as_deref()
            .and_then(OwnerHash::from_hex)
            .map(|owner| (owner, entrypoint.unwrap_or_default())))
    }

    /// [`TaskStore::create`], the record naming `notify` (a notify channel of this process,
    /// `Keys::notify_channel`) when the caller follows the task there; empty when not.
    pub(super) async fn create_notifying(
        &self,
        new: NewTask,
        notify: &str,
    ) -> Result<Task, StoreError> {
        let config = &self.inner.core.config;
        let share = |limit: u64| capacity_per_shard(limit, self.shard_count());
        for round in 0..2 {
            match create::call(self, &new, notify).await? {
                CreateReply::Created { at } => {
                    let at = protocol::Timestamp(at);
                    return Ok(Task {
                        task_id: new.task_id.clone(),
                        status: TaskStatus::Running,
                        context_id: new.invocation.context_id.clone(),
                        created_at: at,
                        updated_at: at,
                        result: None,
                        error: None,
                    });
                }
                CreateReply::Duplicate => return Err(StoreError::Duplicate(new.task_id.clone())),
                CreateReply::OwnerLive => {
                    return Err(StoreError::OwnerCapacity {
                        max: share(config.max_live_per_owner),
                        live: true,
                    });
                }
                CreateReply::AddressLive => {
                    return Err(StoreError::AddressCapacity {
                        max: share(config.max_live_per_address),
                    });
                }
                CreateReply::OwnerRetained => {
                    return Err(StoreError::OwnerCapacity {
                        max: share(config.max_retained_per_owner),
                        live: false,
                    });
                }
                CreateReply::Capacity { due } => {
                    // Reap what is due in the task's shard, then enforce capacity once more.
                    let shard = self.inner.core.shard_of(&new.task_id).index;
                    if round == 0 && due > 0 && self.reap_shard(shard).await? > 0 {
                        continue;
                    }
                    break;
                }
            }
        }
        Err(StoreError::Capacity {
            max: share(config.max_tasks),
        })
    }
}

#[async_trait]
impl TaskStore for RedisStore {
    fn durability(&self) -> Durability {
        self.declared_durability()
    }

    async fn reap_expired_admissions(&self) -> Result<u64, StoreError> {
        let report = self.settle_due(Mode::Reap, 1_000).await?;
        Ok(report.cancelled.len() as u64)
    }

    async fn create(&self, new: NewTask) -> Result<Task, StoreError> {
        self.create_notifying(new, "").await
    }

    async fn create_watched(&self, new: NewTask) -> Result<(Task, Subscription), StoreError> {
        self.create_and_watch(new).await
    }

    async fn get(&self, task_id: &str) -> Result<Option<StoredTask>, StoreError> {
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(self.shard_keys(task_id).task(task_id))
            .arg(&TASK_FIELDS[..]);
        let fields: Vec<Option<String>> = self.query(&mut cmd).await?;
        replies::stored_task(task_id, &fields)
    }

    async fn list(&self, owner: &OwnerHash, query: &ListQuery) -> Result<TaskPage, StoreError> {
        self.list_tasks(owner, query).await
    }

    async fn select(
        &self,
        owner: &OwnerHash,
        selection: &Selection,
    ) -> Result<Selected, StoreError> {
        self.select_tasks(owner, selection).await
    }

    async fn claim_execution(
        &self,
        task_id: &str,
        holder: &str,
        lease_ttl: Duration,
    ) -> Result<Option<Claim>, StoreError> {
        // The claim takes a queued task out of its entrypoint's queue, whose name the record
        // holds: one read first (claims by id are the admission path, not the worker's).
        let Some((_, entrypoint)) = self.owner_and_entrypoint(task_id).await? else {
            return Ok(None);
        };
        match claim::call(&self.inner.core, task_id, &entrypoint, holder, lease_ttl).await? {
            ClaimReply::Claimed(claim) => Ok(Some(*claim)),
            ClaimReply::Expired => {
                self.reap_one(task_id).await?;
                Ok(None)
            }
            ClaimReply::Refused => Ok(None),
        }
    }

    async fn renew_execution_claim(
        &self,
        lease: &Lease,
        lease_ttl: Duration,
    ) -> Result<bool, StoreError> {
        let renewed = renew::renew_all(
            self,
            std::slice::from_ref(lease),
            lease_ttl,
            Phases::Prepared,
        )
        .await?;
        Ok(renew::all_confirmed(renewed)?
            .first()
            .copied()
            .unwrap_or(false))
    }

    async fn hand_off(&self, lease: &Lease) -> Result<bool, StoreError> {
        let reply = hand_off::call(&self.inner.core, lease).await?;
        if reply == HandOffReply::HandedOff {
            self.inner
                .core
                .queued_here(&lease.task_id, &lease.entrypoint);
        }
        Ok(reply == HandOffReply::HandedOff)
    }

    async fn hold_for_settlement(&self, lease: &Lease) -> Result<bool, StoreError> {
        let reply = hold::call(&self.inner.core, lease).await?;
        Ok(reply == HoldReply::Held)
    }

    async fn record_receipt(
        &self,
        lease: &Lease,
        receipt: &str,
    ) -> Result<ReceiptRecorded, StoreError> {
        Ok(record_receipt::call(&self.inner.core, lease, receipt)
            .await?
            .into())
    }

    async fn attach_receipt(
        &self,
        task_id: &str,
        receipt: &str,
    ) -> Result<ReceiptRecorded, StoreError> {
        // A held task is queued by the script, in its entrypoint's queue, whose name the
        // record holds: one read first (the settlement recovery's rare path). A terminal
        // record names no entrypoint any more; the script only attaches to it.
        let Some((_, entrypoint)) = self.owner_and_entrypoint(task_id).await? else {
            return Ok(ReceiptRecorded::Missing);
        };
        Ok(
            attach_receipt::call(&self.inner.core, task_id, &entrypoint, receipt)
                .await?
                .into(),
        )
    }

    async fn activate_execution(
        &self,
        lease: &Lease,
        lease_ttl: Duration,
        max_run: Duration,
    ) -> Result<Option<Activation>, StoreError> {
        Ok(
            match activate::call(self, lease, lease_ttl, max_run).await? {
                ActivateReply::Activated {
                    attempt,
                    lease_expires,
                    run_deadline,
                } => Some(Activation {
                    lease: Lease {
                        expires_at_ms: lease_expires,
                        ..lease.clone()
                    },
                    attempt: u32::try_from(attempt).unwrap_or(u32::MAX),
                    run_deadline_ms: run_deadline,
                }),
                ActivateReply::Fenced => None,
            },
        )
    }

    async fn compare_and_set(
        &self,
        task_id: &str,
        expected: &[TaskStatus],
        next: Transition,
        fence: Option<&Lease>,
    ) -> Result<CasOutcome, StoreError> {
        let item = match self.swap_item(task_id, expected, &next, fence).await? {
            Ok(item) => item,
            Err(rejected) => return Ok(rejected),
        };
        Ok(cas::call(self, task_id, item).await?.outcome(task_id))
    }

    async fn emit(&self, lease: &Lease, event: EventPayload) -> Result<Option<u64>, StoreError> {
        Ok(match emit::call(&self.inner.core, lease, &event).await? {
            EmitReply::Emitted { seq } => Some(seq),
            EmitReply::Fenced => None,
        })
    }

    async fn await_input(
        &self,
        lease: &Lease,
        request: serde_json::Value,
        patience: Duration,
    ) -> Result<bool, StoreError> {
        let reply = await_input::call(&self.inner.core, lease, &request, patience).await?;
        Ok(matches!(reply, AwaitInputReply::Waiting { .. }))
    }

    async fn retry_later(
        &self,
        lease: &Lease,
        error: &protocol::TaskError,
        delay: Duration,
    ) -> Result<bool, StoreError> {
        let reply = retry_later::call(&self.inner.core, lease, error, delay).await?;
        Ok(matches!(reply, RetryLaterReply::Backoff { .. }))
    }

    async fn resume(
        &self,
        task_id: &str,
        owner: &OwnerHash,
        input: serde_json::Value,
        metadata: Option<serde_json::Value>,
    ) -> Result<Resumed, StoreError> {
        // The turn and the new invocation are built here from a read, so that user JSON
        // never passes through Lua's cjson; the script applies them only if no event came
        // since the read (a concurrent resume or cancel), and a stale read is read again.
        for _ in 0..RESUME_TRIES {
            let Some(stored) = self.get(task_id).await? else {
                return Ok(Resumed::NotFound);
            };
            if &stored.owner != owner {
                return Ok(Resumed::NotFound);
            }
            if stored.task.status != TaskStatus::Running || stored.phase != crate::Phase::Waiting {
                return Ok(Resumed::NotWaiting(stored.task));
            }
            let turn = crate::turn_of(&stored.invocation, stored.input_request.as_ref());
            let mut invocation = stored.invocation.clone();
            invocation.input = input.clone();
            invocation.metadata = metadata.clone();
            let reply = resume::call(
                &self.inner.core,
                task_id,
                owner,
                stored.seq,
                &invocation,
                &turn,
            )
            .await?;
            return Ok(match reply {
                ResumeReply::Queued { updated, seq } => {
                    let mut task = stored.task;
                    task.updated_at = protocol::Timestamp(updated);
                    Resumed::Queued { task, seq }
                }
                ResumeReply::Stale => continue,
                ResumeReply::NotWaiting(Some(task)) => Resumed::NotWaiting(*task),
                ResumeReply::NotWaiting(None) | ResumeReply::NotFound => Resumed::NotFound,
            });
        }
        Err(StoreError::Unavailable(format!(
            "task {task_id} changed under {RESUME_TRIES} resumes in a row"
        )))
    }

    async fn subscribe(
        &self,
        task_id: &str,
        owner: &OwnerHash,
        after_seq: Option<u64>,
    ) -> Result<Option<Subscription>, StoreError> {
        self.watch(task_id, owner, after_seq).await
    }

    async fn take_next(
        &self,
        entrypoints: &[String],
        holder: &str,
        lease_ttl: Duration,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Claim>, StoreError> {
        let request = TakeRequest {
            key: TakeKey {
                entrypoints: entrypoints.to_vec(),
                holder: holder.to_owned(),
                ttl_ms: ms(lease_ttl),
                run_ms: None,
            },
            max,
        };
        let taken = self.take_waiting(request, wait).await?;
        Ok(taken.into_iter().map(|taken| taken.claim).collect())
    }

    async fn wait_for_work(
        &self,
        entrypoints: &[String],
        wait: Duration,
    ) -> Result<(), StoreError> {
        // Work this process already knows of ends the wait at once; else the doorbell marks
        // the shard that rang (or a timeout makes the next take visit every shard).
        let known = self
            .inner
            .core
            .shards
            .iter()
            .any(|shard| shard.hints.may_have_work(entrypoints));
        if !known && !entrypoints.is_empty() {
            self.wait_for_doorbell(entrypoints, wait).await?;
        }
        Ok(())
    }

    async fn take_active(
        &self,
        spec: &TakeSpec,
        wait: Duration,
    ) -> Result<Vec<Started>, StoreError> {
        let request = TakeRequest {
            key: take_key(spec),
            max: spec.max,
        };
        let taken = self.take_waiting(request, wait).await?;
        Ok(taken.into_iter().filter_map(Taken::started).collect())
    }

    async fn finish_and_take(
        &self,
        lease: &Lease,
        next: Transition,
        take: Option<&TakeSpec>,
    ) -> Result<Finished, StoreError> {
        let item = match self
            .swap_item(&lease.task_id, &[TaskStatus::Running], &next, Some(lease))
            .await?
        {
            Ok(item) => item,
            Err(outcome) => {
                return Ok(Finished {
                    outcome,
                    next: Vec::new(),
                });
            }
        };
        let take = take.filter(|spec| spec.max > 0 && !spec.entrypoints.is_empty());
        // With several shards, every few finishes leave the next take to the shards' turn
        // (below), so that a worker busy with one shard still visits the others.
        let rotate = take.is_some() && self.inner.core.finish_rotates();
        let reply = self
            .lanes_of(&lease.task_id)
            .finishes
            .call(FinishRequest {
                item,
                // A finish that leaves the take to the shards' turn still asks whether its
                // shard's queues hold tasks (a take of none), so that the turn knows.
                take: take.map(|spec| (take_key(spec), if rotate { 0 } else { spec.max })),
            })
            .instrument(self.inner.core.script_span(finish_take::NAME))
            .await?;
        let outcome = reply.swap.outcome(&lease.task_id);
        let mut next: Vec<Started> = reply.next.into_iter().filter_map(Taken::started).collect();
        if let Some(spec) = take
            && next.len() < spec.max
            && (reply.more_queued || rotate || self.shard_count() > 1)
        {
            // This finish leaves the take to the shards' turn, or its shard ran dry while
            // others may hold work: take as the fetch loop would (it visits only the shards
            // that may hold work, so none costs nothing). The write above stands whatever this
            // take does.
            let rest = TakeSpec {
                max: spec.max - next.len(),
                ..spec.clone()
            };
            match self.take_active(&rest, Duration::ZERO).await {
                Ok(more) => next.extend(more),
                Err(err) => {
                    tracing::warn!(error = %err, "finished, but could not take the next task");
                }
            }
        }
        Ok(Finished { outcome, next })
    }

    async fn renew_leases(
        &self,
        leases: &[Lease],
        lease_ttl: Duration,
    ) -> Result<Vec<bool>, StoreError> {
        renew::all_confirmed(renew::renew_all(self, leases, lease_ttl, Phases::Any).await?)
    }

    async fn renew_each(
        &self,
        leases: &[Lease],
        lease_ttl: Duration,
    ) -> Result<Vec<Renewal>, StoreError> {
        renew::renew_all(self, leases, lease_ttl, Phases::Any).await
    }

    async fn recover_expired(&self, limit: usize) -> Result<RecoveryReport, StoreError> {
        self.settle_due(Mode::Recover, limit).await
    }

    async fn watch_cancellations(
        &self,
        worker_id: &str,
    ) -> Result<tokio::sync::mpsc::UnboundedReceiver<String>, StoreError> {
        self.cancellation_feed(worker_id).await
    }

    async fn queue_depth(&self, entrypoint: &str) -> Result<u64, StoreError> {
        self.sum_over_shards("ZCARD", |keys| keys.queue(entrypoint))
            .await
    }

    async fn failed_page(
        &self,
        entrypoint: &str,
        after: Option<&crate::FailedCursor>,
        limit: usize,
    ) -> Result<crate::FailedPage, StoreError> {
        self.failed_page_of(entrypoint, after, limit).await
    }

    async fn failed_count(&self, entrypoint: &str) -> Result<u64, StoreError> {
        self.sum_over_shards("ZCARD", |keys| keys.failed(entrypoint))
            .await
    }

    async fn forget_failed(
        &self,
        entrypoint: &str,
        task_ids: &[String],
    ) -> Result<u64, StoreError> {
        self.forget_failed_of(entrypoint, task_ids).await
    }

    async fn lease_count(&self) -> Result<u64, StoreError> {
        // Every deadline but the index's pin, whose score is +inf (lease_index.lua).
        self.sum_over_shards_with("ZCOUNT", Keys::leases, &["-inf", "(+inf"])
            .await
    }

    async fn live_count(&self) -> Result<u64, StoreError> {
        self.sum_over_shards("SCARD", Keys::live).await
    }

    async fn memory_fill(&self) -> Result<Vec<crate::MemoryFill>, StoreError> {
        self.inner.core.connections.memory_fill().await
    }

    fn cluster_stats(&self) -> Option<std::sync::Arc<dyn crate::stats::ClusterStats>> {
        Some(std::sync::Arc::new(crate::stats::RedisStats::new(self)))
    }

    async fn close(&self) {
        self.inner.shutdown.cancel();
        self.inner.core.connections.close();
    }
}

fn take_key(spec: &TakeSpec) -> TakeKey {
    TakeKey {
        entrypoints: spec.entrypoints.clone(),
        holder: spec.holder.clone(),
        ttl_ms: ms(spec.lease_ttl),
        run_ms: Some(ms(spec.max_run)),
    }
}
