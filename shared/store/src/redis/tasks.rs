//! [`TaskStore`] for [`RedisStore`]: each method is one script call or one pipelined read,
//! except where noted.

use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use redis::Value;
use tracing::Instrument;

use super::event_log;
use super::fields;
use super::finish::FinishRequest;
use super::replies::{self, TASK_FIELDS};
use super::subscriber::{Listener, Signal};
use super::take::{TakeKey, TakeRequest, Taken};
use super::{Keys, RedisStore, ScriptItem, capacity_per_shard};
use crate::{
    Activation, Admission, CasOutcome, Claim, Durability, EventPayload, Finished, Lease, ListQuery,
    NewTask, ReceiptRecorded, RecoveryReport, Rejection, Renewal, Resumed, Started, StoreError,
    StoredEvent, StoredTask, Subscription, TakeSpec, TaskPage, TaskStore, Transition,
};
use protocol::token::OwnerHash;
use protocol::{Task, TaskEvent, TaskStatus};

/// How long a subscription keeps trying to read its task's event log (after a gap or a
/// reconnect) before it ends: longer than a Redis Cluster failover.
const FILL_PATIENCE: Duration = Duration::from_secs(30);
const FILL_RETRY_FIRST: Duration = Duration::from_millis(50);
const FILL_RETRY_MAX: Duration = Duration::from_secs(1);

/// Expired terminal entries one listing call drops per shard (the rest go with later calls
/// and creations): bounds the work a listing does for others' expired tasks.
const LIST_PRUNE: usize = 256;
/// Records a filtered listing reads per round trip.
const LIST_CHUNK: usize = 512;

/// Reads-then-writes a resume tries before giving up on a task that keeps changing.
const RESUME_TRIES: u32 = 8;

fn ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn corrupt(what: &str) -> StoreError {
    StoreError::Corrupt(what.to_owned())
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|err| StoreError::Corrupt(err.to_string()))
}

fn int(value: &Value) -> Result<u64, StoreError> {
    redis::from_redis_value_ref(value).map_err(|err| StoreError::Corrupt(err.to_string()))
}

fn text(value: &Value) -> Result<String, StoreError> {
    redis::from_redis_value_ref(value).map_err(|err| StoreError::Corrupt(err.to_string()))
}

impl RedisStore {
    fn retention_ms(&self) -> u64 {
        ms(self.inner.core.config.retention)
    }

    /// Runs `recover.lua` over the due ids in `mode` (`reap` or `recover`): the `limit`
    /// earliest deadlines over every shard, each shard's in one call.
    async fn settle_due(&self, mode: &str, limit: usize) -> Result<RecoveryReport, StoreError> {
        let shards = self.inner.core.shards.len();
        // Every shard's due ids at once, then every shard's settlement at once (a shard with
        // nothing due costs no call).
        let per_shard =
            futures::future::try_join_all((0..shards).map(|shard| self.due_in(shard, limit)))
                .await?;
        let mut due: Vec<(f64, usize, String)> = per_shard
            .into_iter()
            .enumerate()
            .flat_map(|(shard, ids)| {
                ids.into_iter()
                    .map(move |(id, deadline)| (deadline, shard, id))
            })
            .collect();
        due.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.2.cmp(&b.2)));
        due.truncate(limit.max(1));
        let settlements = futures::future::try_join_all((0..shards).map(|shard| {
            let ids: Vec<String> = due
                .iter()
                .filter(|(_, s, _)| *s == shard)
                .map(|(_, _, id)| id.clone())
                .collect();
            async move { self.settle(shard, mode, &ids).await }
        }))
        .await?;
        let mut report = RecoveryReport::default();
        for settled in settlements {
            report.requeued.extend(settled.requeued);
            report.failed.extend(settled.failed);
            report.cancelled.extend(settled.cancelled);
            report.entrypoints.extend(settled.entrypoints);
        }
        if shards > 1 {
            // Earliest deadline first, as one shard's sweep reports them.
            let rank = |id: &String| due.iter().position(|(_, _, due)| due == id);
            report.requeued.sort_by_key(rank);
            report.failed.sort_by_key(rank);
            report.cancelled.sort_by_key(rank);
        }
        Ok(report)
    }

    /// Up to `limit` lease and `limit` admission ids of shard `shard` whose deadlines passed,
    /// with their deadlines.
    async fn due_in(&self, shard: usize, limit: usize) -> Result<Vec<(String, f64)>, StoreError> {
        let keys = &self.inner.core.shards[shard].keys;
        // A read: nothing to replicate.
        self.eval_unreplicated(
            keys,
            "due",
            self.inner
                .core
                .scripts
                .due
                .key(keys.leases())
                .key(keys.admissions())
                .arg(limit.max(1)),
        )
        .await
    }

    /// Reaps the due admissions of shard `shard` (a create that met its full capacity);
    /// returns how many it cancelled.
    async fn reap_shard(&self, shard: usize) -> Result<usize, StoreError> {
        let due: Vec<String> = self
            .due_in(shard, 1_000)
            .await?
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        Ok(self.settle(shard, "reap", &due).await?.cancelled.len())
    }

    /// Settles the given tasks of shard `shard` if their deadlines passed (re-checked inside
    /// the script).
    async fn settle(
        &self,
        shard: usize,
        mode: &str,
        ids: &[String],
    ) -> Result<RecoveryReport, StoreError> {
        if ids.is_empty() {
            return Ok(RecoveryReport::default());
        }
        let keys = &self.inner.core.shards[shard].keys;
        // The script's per-task keys include the owner's index and the entrypoint's queue,
        // so read both first (one pipelined round trip; recovery is the rare path).
        let mut read = redis::pipe();
        for id in ids {
            read.cmd("HMGET")
                .arg(keys.task(id))
                .arg(fields::OWNER)
                .arg(fields::ENTRYPOINT);
        }
        let owners: Vec<(Option<String>, Option<String>)> = self.pipe(&read).await?;
        let mut invocation = self.inner.core.scripts.recover.prepare_invoke();
        invocation
            .key(keys.leases())
            .key(keys.admissions())
            .key(keys.live())
            .arg(mode)
            .arg(self.retention_ms())
            .arg(keys.task_channel_prefix());
        for (id, (owner, entrypoint)) in ids.iter().zip(&owners) {
            // A task that vanished meanwhile: the script only drops its stale index entries,
            // so the owner keys it names are never touched.
            let owner = owner
                .as_deref()
                .and_then(OwnerHash::from_hex)
                .unwrap_or_else(OwnerHash::nobody);
            let entrypoint = entrypoint.as_deref().unwrap_or_default();
            invocation
                .key(keys.task(id))
                .key(keys.events(id))
                .key(keys.owner_index(&owner))
                .key(keys.owner_live(&owner))
                .key(keys.queue(entrypoint))
                .key(keys.wake(entrypoint))
                .arg(id);
        }
        let (requeued, failed, cancelled): (Vec<String>, Vec<String>, Vec<String>) =
            self.eval_in(keys, "recover", &mut invocation).await?;
        let mut entrypoints: std::collections::HashMap<String, String> = ids
            .iter()
            .zip(owners)
            .filter_map(|(id, (_, entrypoint))| entrypoint.map(|ep| (id.clone(), ep)))
            .collect();
        entrypoints
            .retain(|id, _| requeued.contains(id) || failed.contains(id) || cancelled.contains(id));
        Ok(RecoveryReport {
            requeued,
            failed,
            cancelled,
            entrypoints,
        })
    }

    /// The sum of one counting command (`ZCARD`, `SCARD`) over a key of every shard.
    async fn sum_over_shards(
        &self,
        command: &str,
        key: impl Fn(&Keys) -> String,
    ) -> Result<u64, StoreError> {
        let core = &self.inner.core;
        let pipes = core
            .shards
            .iter()
            .map(|shard| {
                let mut pipe = redis::pipe();
                pipe.cmd(command).arg(key(&shard.keys));
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
        let keys = self.shard_keys(task_id);
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
        let expected_csv = expected.iter().fold(String::from(","), |mut acc, status| {
            acc.push_str(status.as_str());
            acc.push(',');
            acc
        });
        let result_json = next.result.as_ref().map(to_json).transpose()?;
        let error_json = next.error.as_ref().map(to_json).transpose()?;
        let event = TaskEvent::for_transition(&Task {
            task_id: task_id.to_owned(),
            status: next.status,
            context_id: None,
            created_at: Default::default(),
            updated_at: Default::default(),
            result: next.result.clone(),
            error: next.error.clone(),
        });
        Ok(Ok(ScriptItem {
            keys: vec![
                keys.task(task_id),
                keys.events(task_id),
                keys.owner_index(&owner),
                keys.owner_live(&owner),
                keys.queue(&entrypoint),
            ],
            args: vec![
                task_id.to_owned(),
                owner.as_str().to_owned(),
                expected_csv,
                next.status.as_str().to_owned(),
                result_json.unwrap_or_default(),
                error_json.unwrap_or_default(),
                fence.map(|l| l.owner_id.clone()).unwrap_or_default(),
                fence.map(|l| l.epoch.to_string()).unwrap_or_default(),
                event.kind.as_str().to_owned(),
                to_json(&event.data)?,
                self.shard_keys(task_id).task_channel(&owner, task_id),
            ],
        }))
    }

    /// Takes (and, with a run limit, activates) queued tasks: one batched take per look, and
    /// the doorbell wait between looks while the queues are empty.
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
            if outcome.saw_candidates {
                // Every candidate went to another process (or was stale): look again at once.
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
            let keys = &shard.keys;
            let mut invocation = core.scripts.list_page.prepare_invoke();
            invocation
                .key(keys.owner_index(owner))
                .key(keys.terminal())
                .arg(keys.tag())
                .arg(top)
                .arg(LIST_PRUNE);
            let (count, flat): (u64, Vec<String>) = self
                .eval_unreplicated(keys, "list_page", &mut invocation)
                .await?;
            Ok::<_, StoreError>((shard.index, count, flat))
        }))
        .await?;
        let mut total = 0usize;
        let mut ids: Vec<(f64, usize, String)> = Vec::new();
        for (shard, count, flat) in parts {
            total = total.saturating_add(usize::try_from(count).unwrap_or(usize::MAX));
            for pair in flat.chunks(2) {
                let [id, score] = pair else {
                    return Err(corrupt("owner listing: odd index reply"));
                };
                let score: f64 = score
                    .parse()
                    .map_err(|_| corrupt("owner listing: a score is not a number"))?;
                ids.push((score, shard, id.clone()));
            }
        }
        ids.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| b.2.cmp(&a.2)));
        Ok((
            total,
            ids.into_iter().map(|(_, shard, id)| (shard, id)).collect(),
        ))
    }

    /// The ids (newest first) whose tasks match `query`'s filters, reading only the fields
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

    /// A task's events with `seq > after`: its log entries merged with the events its record
    /// rebuilds (`event_log.rs`), read in one round trip. Public for checkers of the log.
    pub async fn events_after(
        &self,
        task_id: &str,
        after: u64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let keys = self.shard_keys(task_id);
        let mut read = redis::pipe();
        read.cmd("HMGET")
            .arg(keys.task(task_id))
            .arg(&fields::VIEW)
            .arg(fields::SEQ)
            .cmd("LRANGE")
            .arg(keys.events(task_id))
            .arg(0)
            .arg(-1);
        let (row, log): (Vec<Option<String>>, Vec<String>) = self.pipe(&read).await?;
        let logged = log
            .iter()
            .map(|entry| replies::event(entry))
            .collect::<Result<Vec<_>, _>>()?;
        let events = match replies::task_view(task_id, row.get(..6).unwrap_or_default())? {
            Some(task) => event_log::merged(&task, record_seq(&row, 6), logged),
            None => logged,
        };
        Ok(events
            .into_iter()
            .filter(|event| event.seq > after)
            .collect())
    }
}

/// The record's `seq` field at `index` of an HMGET row (0 when absent).
fn record_seq(row: &[Option<String>], index: usize) -> u64 {
    row.get(index)
        .and_then(|s| s.as_deref())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

#[async_trait]
impl TaskStore for RedisStore {
    fn durability(&self) -> Durability {
        self.declared_durability()
    }

    async fn reap_expired_admissions(&self) -> Result<u64, StoreError> {
        let report = self.settle_due("reap", 1_000).await?;
        Ok(report.cancelled.len() as u64)
    }

    async fn create(&self, new: NewTask) -> Result<Task, StoreError> {
        let keys = self.shard_keys(&new.task_id);
        let id = &new.task_id;
        let entrypoint = &new.invocation.entrypoint;
        let (mode, admission_ttl) = match new.admission {
            Admission::Queued => ("queued", 0),
            Admission::Reserved { ttl } => ("reserved", ms(ttl)),
        };
        let item = || -> Result<ScriptItem, StoreError> {
            Ok(ScriptItem {
                keys: vec![
                    keys.task(id),
                    keys.owner_index(&new.owner),
                    keys.owner_live(&new.owner),
                    keys.queue(entrypoint),
                    keys.wake(entrypoint),
                    // Declared whether or not the task has a source (the layout is fixed);
                    // touched only when it has.
                    keys.source_live(new.source.as_deref().unwrap_or_default()),
                ],
                args: vec![
                    id.clone(),
                    new.owner.as_str().to_owned(),
                    new.invocation.context_id.clone().unwrap_or_default(),
                    to_json(&new.invocation)?,
                    entrypoint.clone(),
                    mode.to_owned(),
                    admission_ttl.to_string(),
                    new.max_attempts.to_string(),
                    new.retention
                        .map(|kept| ms(kept).to_string())
                        .unwrap_or_default(),
                    new.source.clone().unwrap_or_default(),
                ],
            })
        };
        for round in 0..2 {
            let reply = self
                .lanes_of(id)
                .creates
                .call(item()?)
                .instrument(self.inner.core.script_span("create"))
                .await?;
            let reply: Vec<Value> = redis::from_redis_value(reply)
                .map_err(|err| StoreError::Corrupt(err.to_string()))?;
            match reply.as_slice() {
                [ok, created] if int(ok)? == 1 => {
                    let at = protocol::Timestamp(int(created)?);
                    return Ok(Task {
                        task_id: id.clone(),
                        status: TaskStatus::Running,
                        context_id: new.invocation.context_id.clone(),
                        created_at: at,
                        updated_at: at,
                        result: None,
                        error: None,
                    });
                }
                [_, reason] if text(reason)? == "DUPLICATE" => {
                    return Err(StoreError::Duplicate(id.clone()));
                }
                [_, reason] if text(reason)? == "OWNER_LIVE" => {
                    let config = &self.inner.core.config;
                    return Err(StoreError::OwnerCapacity {
                        max: capacity_per_shard(config.max_live_per_owner, self.shard_count()),
                        live: true,
                    });
                }
                [_, reason] if text(reason)? == "ADDRESS_LIVE" => {
                    let config = &self.inner.core.config;
                    return Err(StoreError::AddressCapacity {
                        max: capacity_per_shard(config.max_live_per_address, self.shard_count()),
                    });
                }
                [_, reason] if text(reason)? == "OWNER_RETAINED" => {
                    let config = &self.inner.core.config;
                    return Err(StoreError::OwnerCapacity {
                        max: capacity_per_shard(config.max_retained_per_owner, self.shard_count()),
                        live: false,
                    });
                }
                [_, reason, due] if text(reason)? == "CAPACITY" => {
                    // Reap what is due in the task's shard, then enforce capacity once more.
                    let shard = self.inner.core.shard_of(id).index;
                    if round == 0 && int(due)? > 0 && self.reap_shard(shard).await? > 0 {
                        continue;
                    }
                    break;
                }
                _ => return Err(corrupt("unexpected create reply")),
            }
        }
        Err(StoreError::Capacity {
            max: capacity_per_shard(self.inner.core.config.max_tasks, self.shard_count()),
        })
    }

    async fn create_watched(&self, new: NewTask) -> Result<(Task, Subscription), StoreError> {
        let keys = self.shard_keys(&new.task_id);
        // Listen first: every event of the task is published after its creation, so the live
        // feed holds all of them from seq 2 on, and the snapshot is what the create wrote.
        let listener = self
            .inner
            .dispatcher
            .listen(keys.task_channel(&new.owner, &new.task_id))
            .await?;
        let task_id = new.task_id.clone();
        let task = self.create(new).await?;
        // The task's seq 1 is its `statusUpdate running`, which create.lua neither logs nor
        // publishes (the record rebuilds it): it is the snapshot's replay.
        let first = TaskEvent::status(&task);
        let replay = vec![StoredEvent {
            seq: 1,
            event: first.kind.as_str().to_owned(),
            data: serde_json::to_value(&first.data)
                .map_err(|err| StoreError::Corrupt(err.to_string()))?,
        }];
        let events = live_events(self.clone(), task_id, listener, 1);
        Ok((
            task.clone(),
            Subscription {
                snapshot: task,
                snapshot_seq: 1,
                replay,
                events,
            },
        ))
    }

    async fn get(&self, task_id: &str) -> Result<Option<StoredTask>, StoreError> {
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(self.shard_keys(task_id).task(task_id))
            .arg(&TASK_FIELDS[..]);
        let fields: Vec<Option<String>> = self.query(&mut cmd).await?;
        replies::stored_task(task_id, &fields)
    }

    async fn list(&self, owner: &OwnerHash, query: &ListQuery) -> Result<TaskPage, StoreError> {
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

    async fn claim_execution(
        &self,
        task_id: &str,
        owner_id: &str,
        lease_ttl: Duration,
    ) -> Result<Option<Claim>, StoreError> {
        let keys = self.shard_keys(task_id);
        // The claim takes a queued task out of its entrypoint's queue, whose name the record
        // holds: one read first (claims by id are the admission path, not the worker's).
        let Some((_, entrypoint)) = self.owner_and_entrypoint(task_id).await? else {
            return Ok(None);
        };
        let reply: Vec<Value> = self
            .eval_in(
                keys,
                "claim",
                self.inner
                    .core
                    .scripts
                    .claim
                    .key(keys.task(task_id))
                    .key(keys.leases())
                    .key(keys.admissions())
                    .key(keys.queue(&entrypoint))
                    .arg(task_id)
                    .arg(owner_id)
                    .arg(ms(lease_ttl)),
            )
            .await?;
        match reply.split_first() {
            Some((ok, rest)) if int(ok)? == 1 => {
                let mut values = vec![Value::BulkString(task_id.as_bytes().to_vec())];
                values.extend_from_slice(rest);
                Ok(Some(replies::claim(owner_id, &values)?))
            }
            Some((_, [reason])) => {
                if text(reason)? == "EXPIRED" {
                    let shard = self.inner.core.shard_of(task_id).index;
                    self.settle(shard, "reap", &[task_id.to_owned()]).await?;
                }
                Ok(None)
            }
            _ => Err(corrupt("unexpected claim reply")),
        }
    }

    async fn renew_execution_claim(
        &self,
        lease: &Lease,
        lease_ttl: Duration,
    ) -> Result<bool, StoreError> {
        let renewed = renew(self, std::slice::from_ref(lease), lease_ttl, "prepared").await?;
        Ok(all_confirmed(renewed)?.first().copied().unwrap_or(false))
    }

    async fn hand_off(&self, lease: &Lease) -> Result<bool, StoreError> {
        let keys = self.shard_keys(&lease.task_id);
        let done: u64 = self
            .eval_in(
                keys,
                "hand_off",
                self.inner
                    .core
                    .scripts
                    .hand_off
                    .key(keys.task(&lease.task_id))
                    .key(keys.leases())
                    .key(keys.queue(&lease.entrypoint))
                    .key(keys.wake(&lease.entrypoint))
                    .arg(&lease.task_id)
                    .arg(&lease.owner_id)
                    .arg(lease.epoch),
            )
            .await?;
        Ok(done == 1)
    }

    async fn hold_for_settlement(&self, lease: &Lease) -> Result<bool, StoreError> {
        let keys = self.shard_keys(&lease.task_id);
        let held: u64 = self
            .eval_in(
                keys,
                "hold",
                self.inner
                    .core
                    .scripts
                    .hold
                    .key(keys.task(&lease.task_id))
                    .key(keys.leases())
                    .arg(&lease.task_id)
                    .arg(&lease.owner_id)
                    .arg(lease.epoch),
            )
            .await?;
        Ok(held == 1)
    }

    async fn record_receipt(
        &self,
        lease: &Lease,
        receipt: &str,
    ) -> Result<ReceiptRecorded, StoreError> {
        let keys = self.shard_keys(&lease.task_id);
        let done: u64 = self
            .eval_in(
                keys,
                "record_receipt",
                self.inner
                    .core
                    .scripts
                    .record_receipt
                    .key(keys.task(&lease.task_id))
                    .key(keys.leases())
                    .key(keys.queue(&lease.entrypoint))
                    .key(keys.wake(&lease.entrypoint))
                    .arg(&lease.task_id)
                    .arg(&lease.owner_id)
                    .arg(lease.epoch)
                    .arg(receipt),
            )
            .await?;
        Ok(match done {
            2 => ReceiptRecorded::Committed,
            1 => ReceiptRecorded::Attached,
            _ => ReceiptRecorded::Missing,
        })
    }

    async fn attach_receipt(
        &self,
        task_id: &str,
        receipt: &str,
    ) -> Result<ReceiptRecorded, StoreError> {
        let keys = self.shard_keys(task_id);
        // A held task is queued by the script, in its entrypoint's queue, whose name the
        // record holds: one read first (the settlement recovery's rare path). A terminal
        // record names no entrypoint any more; the script only attaches to it.
        let Some((_, entrypoint)) = self.owner_and_entrypoint(task_id).await? else {
            return Ok(ReceiptRecorded::Missing);
        };
        let done: u64 = self
            .eval_in(
                keys,
                "attach_receipt",
                self.inner
                    .core
                    .scripts
                    .attach_receipt
                    .key(keys.task(task_id))
                    .key(keys.leases())
                    .key(keys.queue(&entrypoint))
                    .key(keys.wake(&entrypoint))
                    .arg(task_id)
                    .arg(receipt),
            )
            .await?;
        Ok(match done {
            2 => ReceiptRecorded::Committed,
            1 => ReceiptRecorded::Attached,
            _ => ReceiptRecorded::Missing,
        })
    }

    async fn activate_execution(
        &self,
        lease: &Lease,
        lease_ttl: Duration,
        max_run: Duration,
    ) -> Result<Option<Activation>, StoreError> {
        let item = ScriptItem {
            keys: vec![self.shard_keys(&lease.task_id).task(&lease.task_id)],
            args: vec![
                lease.task_id.clone(),
                lease.owner_id.clone(),
                lease.epoch.to_string(),
                ms(lease_ttl).to_string(),
                ms(max_run).to_string(),
            ],
        };
        let reply = self
            .lanes_of(&lease.task_id)
            .activations
            .call(item)
            .instrument(self.inner.core.script_span("activate"))
            .await?;
        let reply: Option<(u64, u64, u64)> = match reply {
            Value::Int(_) => None,
            other => Some(
                redis::from_redis_value(other)
                    .map_err(|err| StoreError::Corrupt(err.to_string()))?,
            ),
        };
        Ok(reply.map(|(attempt, expires, deadline)| Activation {
            lease: Lease {
                expires_at_ms: expires,
                ..lease.clone()
            },
            attempt: u32::try_from(attempt).unwrap_or(u32::MAX),
            run_deadline_ms: deadline,
        }))
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
        let reply = self
            .lanes_of(task_id)
            .swaps
            .call(item)
            .instrument(self.inner.core.script_span("cas"))
            .await?;
        swap_outcome(task_id, reply)
    }

    async fn emit(&self, lease: &Lease, event: EventPayload) -> Result<Option<u64>, StoreError> {
        let keys = self.shard_keys(&lease.task_id);
        let seq: Option<u64> = self
            .eval_in(
                keys,
                "emit",
                self.inner
                    .core
                    .scripts
                    .emit
                    .key(keys.task(&lease.task_id))
                    .key(keys.events(&lease.task_id))
                    .arg(&lease.owner_id)
                    .arg(lease.epoch)
                    .arg(&event.event)
                    .arg(to_json(&event.data)?)
                    .arg(keys.task_channel(&lease.task_owner, &lease.task_id))
                    .arg(self.inner.core.config.event_log_len),
            )
            .await?;
        Ok(seq)
    }

    async fn await_input(
        &self,
        lease: &Lease,
        request: serde_json::Value,
        patience: Duration,
    ) -> Result<bool, StoreError> {
        let keys = self.shard_keys(&lease.task_id);
        let data = crate::input_required_data(&lease.task_id, &request);
        let seq: Option<u64> = self
            .eval_in(
                keys,
                "await_input",
                self.inner
                    .core
                    .scripts
                    .await_input
                    .key(keys.task(&lease.task_id))
                    .key(keys.events(&lease.task_id))
                    .key(keys.leases())
                    .key(keys.admissions())
                    .arg(&lease.task_id)
                    .arg(&lease.owner_id)
                    .arg(lease.epoch)
                    .arg(to_json(&request)?)
                    .arg(to_json(&data)?)
                    .arg(keys.task_channel(&lease.task_owner, &lease.task_id))
                    .arg(self.inner.core.config.event_log_len)
                    .arg(ms(patience)),
            )
            .await?;
        Ok(seq.is_some())
    }

    async fn resume(
        &self,
        task_id: &str,
        owner: &OwnerHash,
        input: serde_json::Value,
        metadata: Option<serde_json::Value>,
    ) -> Result<Resumed, StoreError> {
        let keys = self.shard_keys(task_id);
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
            let reply: Vec<Option<String>> = self
                .eval_in(
                    keys,
                    "resume",
                    self.inner
                        .core
                        .scripts
                        .resume
                        .key(keys.task(task_id))
                        .key(keys.events(task_id))
                        .key(keys.queue(&invocation.entrypoint))
                        .key(keys.wake(&invocation.entrypoint))
                        .key(keys.leases())
                        .key(keys.admissions())
                        .arg(task_id)
                        .arg(owner.as_str())
                        .arg(stored.seq)
                        .arg(to_json(&invocation)?)
                        .arg(to_json(&turn)?)
                        .arg(keys.task_channel(owner, task_id))
                        .arg(self.inner.core.config.event_log_len),
                )
                .await?;
            let head = reply.first().cloned().flatten().unwrap_or_default();
            let reason = reply.get(1).cloned().flatten().unwrap_or_default();
            match (head.as_str(), reason.as_str()) {
                ("1", updated) => {
                    let bad = || StoreError::Corrupt("resume: bad reply".into());
                    let mut task = stored.task;
                    task.updated_at = protocol::Timestamp(updated.parse().map_err(|_| bad())?);
                    let seq = reply
                        .get(2)
                        .cloned()
                        .flatten()
                        .and_then(|seq| seq.parse().ok())
                        .ok_or_else(bad)?;
                    return Ok(Resumed::Queued { task, seq });
                }
                (_, "STALE") => continue,
                (_, "NOT_WAITING") if reply.len() == 8 => {
                    return match replies::task_view(task_id, &reply[2..])? {
                        Some(task) => Ok(Resumed::NotWaiting(task)),
                        None => Ok(Resumed::NotFound),
                    };
                }
                _ => return Ok(Resumed::NotFound),
            }
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
        let keys = self.shard_keys(task_id);
        // Listen first, then read: every event is either in the snapshot/log or arrives live.
        let listener = self
            .inner
            .dispatcher
            .listen(keys.task_channel(owner, task_id))
            .await?;
        let mut read = redis::pipe();
        read.cmd("HMGET")
            .arg(keys.task(task_id))
            .arg(&fields::VIEW)
            .arg(fields::OWNER)
            .arg(fields::SEQ)
            .cmd("LRANGE")
            .arg(keys.events(task_id))
            .arg(0)
            .arg(-1);
        let (row, log): (Vec<Option<String>>, Vec<String>) = self.pipe(&read).await?;
        if row.get(6).and_then(|o| o.as_deref()) != Some(owner.as_str()) {
            return Ok(None);
        }
        let Some(snapshot) = replies::task_view(task_id, row.get(..6).unwrap_or_default())? else {
            return Ok(None);
        };
        let snapshot_seq = record_seq(&row, 7);
        let mut replay = Vec::new();
        if let Some(after) = after_seq {
            let logged = log
                .iter()
                .map(|entry| replies::event(entry))
                .collect::<Result<Vec<_>, _>>()?;
            replay = event_log::merged(&snapshot, snapshot_seq, logged)
                .into_iter()
                .filter(|event| event.seq > after && event.seq <= snapshot_seq)
                .collect();
        }
        let events = live_events(self.clone(), task_id.to_owned(), listener, snapshot_seq);
        Ok(Some(Subscription {
            snapshot,
            snapshot_seq,
            replay,
            events,
        }))
    }

    async fn take_next(
        &self,
        entrypoints: &[String],
        owner_id: &str,
        lease_ttl: Duration,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Claim>, StoreError> {
        let request = TakeRequest {
            key: TakeKey {
                entrypoints: entrypoints.to_vec(),
                holder: owner_id.to_owned(),
                ttl_ms: ms(lease_ttl),
                run_ms: None,
            },
            max,
        };
        let taken = self.take_waiting(request, wait).await?;
        Ok(taken.into_iter().map(|taken| taken.claim).collect())
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
                take: take
                    .filter(|_| !rotate)
                    .map(|spec| (take_key(spec), spec.max)),
            })
            .instrument(self.inner.core.script_span("finish_take"))
            .await?;
        let outcome = swap_outcome(&lease.task_id, reply.swap)?;
        let mut next: Vec<Started> = reply.next.into_iter().filter_map(Taken::started).collect();
        if let Some(spec) = take
            && next.len() < spec.max
            && (reply.more_queued || rotate || self.shard_count() > 1)
        {
            // Tasks are queued but none of the known heads was still free (another process
            // took them, or this one had seen none), or this finish leaves the take to the
            // shards' turn, or its shard ran dry while others may hold work: take as the fetch
            // loop would. The write above stands whatever this take does.
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
        all_confirmed(renew(self, leases, lease_ttl, "any").await?)
    }

    async fn renew_each(
        &self,
        leases: &[Lease],
        lease_ttl: Duration,
    ) -> Result<Vec<Renewal>, StoreError> {
        renew(self, leases, lease_ttl, "any").await
    }

    async fn recover_expired(&self, limit: usize) -> Result<RecoveryReport, StoreError> {
        self.settle_due("recover", limit).await
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

    async fn lease_count(&self) -> Result<u64, StoreError> {
        self.sum_over_shards("ZCARD", Keys::leases).await
    }

    async fn live_count(&self) -> Result<u64, StoreError> {
        self.sum_over_shards("SCARD", Keys::live).await
    }

    async fn memory_fill(&self) -> Result<Vec<crate::MemoryFill>, StoreError> {
        self.inner.core.connections.memory_fill().await
    }

    async fn close(&self) {
        self.inner.shutdown.cancel();
        self.inner.core.connections.close();
    }
}

fn take_key(spec: &TakeSpec) -> TakeKey {
    TakeKey {
        entrypoints: spec.entrypoints.clone(),
        holder: spec.owner_id.clone(),
        ttl_ms: ms(spec.lease_ttl),
        run_ms: Some(ms(spec.max_run)),
    }
}

/// A `cas.lua` item's reply as an outcome.
fn swap_outcome(task_id: &str, reply: Value) -> Result<CasOutcome, StoreError> {
    let reply: Vec<Option<String>> =
        redis::from_redis_value(reply).map_err(|err| StoreError::Corrupt(err.to_string()))?;
    let (head, view) = reply.split_at(reply.len().min(2));
    let reason = head.get(1).cloned().flatten().unwrap_or_default();
    let current = if view.len() == 6 {
        replies::task_view(task_id, view)?
    } else {
        None
    };
    Ok(match (reason.as_str(), current) {
        ("OK", Some(task)) => CasOutcome::Applied(task),
        ("STATUS", current) => CasOutcome::Rejected {
            reason: Rejection::Status,
            current,
        },
        ("FENCED", current) => CasOutcome::Rejected {
            reason: Rejection::Fenced,
            current,
        },
        _ => CasOutcome::Rejected {
            reason: Rejection::NotFound,
            current: None,
        },
    })
}

async fn renew(
    store: &RedisStore,
    leases: &[Lease],
    lease_ttl: Duration,
    phases: &str,
) -> Result<Vec<Renewal>, StoreError> {
    if leases.is_empty() {
        return Ok(Vec::new());
    }
    // One call per shard that holds some of the leases, all at once; a shard that fails
    // leaves its leases unconfirmed without holding back the others'.
    let core = &store.inner.core;
    let mut by_shard: Vec<Vec<usize>> = vec![Vec::new(); core.shards.len()];
    for (position, lease) in leases.iter().enumerate() {
        by_shard[core.shard_of(&lease.task_id).index].push(position);
    }
    let calls = by_shard
        .iter()
        .enumerate()
        .filter(|(_, positions)| !positions.is_empty())
        .map(|(shard, positions)| async move {
            let keys = &core.shards[shard].keys;
            let mut invocation = core.scripts.renew.prepare_invoke();
            invocation.key(keys.leases()).arg(ms(lease_ttl)).arg(phases);
            for &position in positions {
                let lease = &leases[position];
                invocation
                    .key(keys.task(&lease.task_id))
                    .arg(&lease.task_id)
                    .arg(&lease.owner_id)
                    .arg(lease.epoch);
            }
            let reply: Result<Vec<u64>, StoreError> =
                store.eval_in(keys, "renew", &mut invocation).await;
            let deadlines: Result<Vec<u64>, StoreError> = match reply {
                Ok(deadlines) if deadlines.len() != positions.len() => {
                    Err(corrupt("renew reply arity"))
                }
                other => other,
            };
            (positions, deadlines)
        });
    let mut renewed = vec![Renewal::Unconfirmed; leases.len()];
    let mut first_error = None;
    let mut answered = false;
    for (positions, deadlines) in futures::future::join_all(calls).await {
        match deadlines {
            Ok(deadlines) => {
                answered = true;
                for (&position, deadline) in positions.iter().zip(deadlines) {
                    renewed[position] = if deadline > 0 {
                        Renewal::Renewed
                    } else {
                        Renewal::Lost
                    };
                }
            }
            Err(err) => {
                first_error.get_or_insert(err);
            }
        }
    }
    match first_error {
        Some(err) if !answered => Err(err),
        _ => Ok(renewed),
    }
}

/// All of `renewed` as held or not; an error when any of them could not be confirmed.
fn all_confirmed(renewed: Vec<Renewal>) -> Result<Vec<bool>, StoreError> {
    renewed
        .into_iter()
        .map(|renewal| match renewal {
            Renewal::Renewed => Ok(true),
            Renewal::Lost => Ok(false),
            Renewal::Unconfirmed => Err(StoreError::Unavailable(
                "a shard holding some of the leases did not answer".into(),
            )),
        })
        .collect()
}

/// Events after `from_seq`, in order and without gaps: live messages are checked against the
/// last delivered sequence number, and a gap or a reconnect is filled from the task's log, as
/// is a silence of `idle_recheck` (a message lost without a sign).
fn live_events(
    store: RedisStore,
    task_id: String,
    listener: Listener,
    from_seq: u64,
) -> crate::EventStream {
    struct State {
        store: RedisStore,
        task_id: String,
        listener: Listener,
        last: u64,
        ready: std::collections::VecDeque<StoredEvent>,
        /// A gap (or a reconnect) to fill from the event log before going on.
        fill: bool,
    }
    let state = State {
        store,
        task_id,
        listener,
        last: from_seq,
        ready: Default::default(),
        fill: false,
    };
    futures::stream::unfold(state, |mut state| async move {
        let mut failing_since: Option<tokio::time::Instant> = None;
        let mut pause = FILL_RETRY_FIRST;
        loop {
            if let Some(event) = state.ready.pop_front() {
                if event.seq > state.last {
                    state.last = event.seq;
                    return Some((event, state));
                }
                continue;
            }
            if !state.fill {
                let recheck = state.store.inner.core.config.idle_recheck;
                state.fill =
                    match tokio::time::timeout(recheck, state.listener.signals.recv()).await {
                        Ok(signal) => match signal? {
                            Signal::Message(entry) => match replies::event(&entry) {
                                Ok(event) if event.seq == state.last + 1 => {
                                    state.ready.push_back(event);
                                    false
                                }
                                Ok(event) => event.seq > state.last,
                                Err(_) => true,
                            },
                            Signal::Resync => true,
                        },
                        // Nothing heard for a while: read the log in case a message was lost
                        // without a sign (the re-read is deduplicated by sequence number).
                        Err(_) => true,
                    };
            }
            if state.fill {
                match state.store.events_after(&state.task_id, state.last).await {
                    Ok(events) => {
                        state.ready.extend(events);
                        state.fill = false;
                        failing_since = None;
                        pause = FILL_RETRY_FIRST;
                    }
                    // The store may be failing over (a Redis Cluster promoting a replica takes
                    // seconds): keep trying for a while rather than end the subscriber's
                    // stream, which would lose the task's end for it.
                    Err(err) => {
                        let since = *failing_since.get_or_insert_with(tokio::time::Instant::now);
                        if since.elapsed() >= FILL_PATIENCE {
                            tracing::warn!(error = %err, "could not read a task's event log");
                            return None;
                        }
                        tracing::debug!(error = %err, "event log unreadable; retrying");
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(FILL_RETRY_MAX);
                    }
                }
            }
        }
    })
    .boxed()
}
