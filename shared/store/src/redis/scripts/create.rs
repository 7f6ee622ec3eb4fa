//! `create.lua`: stores new tasks (status running), each queued or held reserved. Concurrent
//! creates of one process arrive together (the shard's `creates` lane, [`lane`]), so one call
//! admits a batch. Bounds, all per shard and checked in order: live tasks (CAPACITY, with how
//! many deadlines are already due so that the caller reaps and retries once), the owner's live
//! tasks (OWNER_LIVE), the client address's live tasks (ADDRESS_LIVE), the owner's retained
//! tasks (its oldest terminal one is evicted; OWNER_RETAINED when all are live), retained tasks
//! and retained bytes (terminal tasks that expire first are evicted). Each created task's seq
//! is 1, its `statusUpdate running`, neither logged nor published (the record rebuilds it).
//!
//! KEYS: live, admissions, leases, terminal, terminal sizes, terminal bytes (`Keys::retained`),
//! push due (an evicted task leaves it) (shared by the batch); then per task 6 keys: task, owner_index, owner_live, queue, wake, src_live (declared for every task, touched only for
//! one with a source).
//! ARGV: max tasks, max retained, max retained per owner, max live per owner, max live per
//! address, max retained bytes, key prefix (the shard's hash tag) (shared); then per task 10
//! values: id, owner hash, context id ('' none), invocation json, entrypoint, 'queued' |
//! 'reserved', admission ttl ms, max attempts, retention ms ('' the store's), source ('' none).
//! Reply per task: `{1, created_ms}` | `{0, 'DUPLICATE'}` | `{0, 'CAPACITY', due_count}` |
//! `{0, 'OWNER_LIVE'}` | `{0, 'ADDRESS_LIVE'}` | `{0, 'OWNER_RETAINED'}`.

use std::sync::Arc;

use redis::Value;
use tracing::Instrument;

use super::{int, ms, parse, text, to_json};
use crate::lua::lua_script;
use crate::redis::batch::Batcher;
use crate::redis::{Core, Keys, RedisStore, ScriptItem, batched, capacity_per_shard};
use crate::{Admission, NewTask, StoreError};

lua_script!("create");

/// What `create.lua` answered for one task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CreateReply {
    /// Stored, at this time (ms).
    Created { at: u64 },
    /// A task with this id exists.
    Duplicate,
    /// The owner's live tasks are at their bound.
    OwnerLive,
    /// The client address's live tasks are at their bound.
    AddressLive,
    /// The owner's retained tasks are at their bound and all of them are live.
    OwnerRetained,
    /// The shard is full; `due` deadlines have already passed (reaping may make room).
    Capacity { due: u64 },
}

impl redis::FromRedisValue for CreateReply {
    fn from_redis_value(v: Value) -> Result<Self, redis::ParsingError> {
        let reply: Vec<Value> = redis::from_redis_value(v)?;
        Ok(match reply.as_slice() {
            [ok, created] if int(ok)? == 1 => CreateReply::Created { at: int(created)? },
            [_, reason] => match text(reason)?.as_str() {
                "DUPLICATE" => CreateReply::Duplicate,
                "OWNER_LIVE" => CreateReply::OwnerLive,
                "ADDRESS_LIVE" => CreateReply::AddressLive,
                "OWNER_RETAINED" => CreateReply::OwnerRetained,
                _ => return Err("unexpected create reply".into()),
            },
            [_, reason, due] if text(reason)? == "CAPACITY" => {
                CreateReply::Capacity { due: int(due)? }
            }
            _ => return Err("unexpected create reply".into()),
        })
    }
}

/// The `creates` batch lane of shard `shard`: its shared keys and arguments are the shard's
/// sets and the bounds, each setting's share per shard.
pub(crate) fn lane(core: &Arc<Core>, shard: usize, lanes: usize) -> Batcher<ScriptItem, Value> {
    let keys = &core.shards[shard].keys;
    let config = &core.config;
    let per_shard = |limit: u64| capacity_per_shard(limit, core.shards.len()).to_string();
    let shared_args = vec![
        per_shard(config.max_tasks),
        per_shard(config.max_retained),
        per_shard(config.max_retained_per_owner),
        per_shard(config.max_live_per_owner),
        per_shard(config.max_live_per_address),
        per_shard(config.max_retained_bytes),
        keys.tag().to_owned(),
    ];
    batched(
        core,
        shard,
        lanes,
        NAME,
        |s| &s.create,
        [keys.live(), keys.admissions(), keys.leases()]
            .into_iter()
            .chain(keys.retained())
            .chain([keys.push_due()])
            .collect(),
        shared_args,
    )
}

/// One task's item in a `create.lua` call over shard keys `keys`.
/// `notify`: the creating process's notify channel when it follows the task, else empty.
pub(crate) fn item(keys: &Keys, new: &NewTask, notify: &str) -> Result<ScriptItem, StoreError> {
    let entrypoint = &new.invocation.entrypoint;
    let (mode, admission_ttl) = match new.admission {
        Admission::Queued => ("queued", 0),
        Admission::Reserved { ttl } => ("reserved", ms(ttl)),
    };
    Ok(ScriptItem {
        keys: vec![
            keys.task(&new.task_id),
            keys.owner_index(&new.owner),
            keys.owner_live(&new.owner),
            keys.queue(entrypoint),
            keys.wake(entrypoint),
            // Declared whether or not the task has a source (the layout is fixed); touched
            // only when it has.
            keys.source_live(new.source.as_deref().unwrap_or_default()),
        ],
        args: vec![
            new.task_id.clone(),
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
            notify.to_owned(),
            if new.private_owner { "1" } else { "" }.to_owned(),
        ],
    })
}

/// Creates `new` through its shard's `creates` lane (batched with concurrent creates); `notify`
/// as [`item`] takes it.
pub(crate) async fn call(
    store: &RedisStore,
    new: &NewTask,
    notify: &str,
) -> Result<CreateReply, StoreError> {
    let item = item(store.shard_keys(&new.task_id), new, notify)?;
    let reply = store
        .lanes_of(&new.task_id)
        .creates
        .call(item)
        .instrument(store.inner.core.script_span(NAME))
        .await?;
    let reply = parse(reply)?;
    if matches!(reply, CreateReply::Created { .. }) && matches!(new.admission, Admission::Queued) {
        // This process queued it: its own next take looks there without waiting for a ring.
        store
            .inner
            .core
            .queued_here(&new.task_id, &new.invocation.entrypoint);
    }
    Ok(reply)
}
