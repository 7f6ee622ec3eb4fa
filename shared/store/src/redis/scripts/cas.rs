//! `cas.lua`: compare-and-set of task statuses, each optionally fenced by a lease; many at
//! once (concurrent completions of one process share a call through the shard's `swaps` lane,
//! [`lane`]). A terminal next status runs finish_task (lease released, live count decremented
//! once, retention set); a terminal task never runs again. An unfenced terminal write (cancel)
//! of a task a worker holds notifies that worker's channel. Emits the item's event
//! (statusUpdate, resultUpdate or error) when applied. `finish_take.lua` takes the same items.
//!
//! KEYS: leases, admissions, live, then the retained-task keys (terminal, its sizes, their
//! sum: `Keys::retained`), shared by the batch; then per task 11 keys: task, events,
//! owner_index, owner_live, queue, the task's push keys (`Keys::push_of`: configs,
//! outbox, cursors, due, dropped), and the entrypoint's failed index (`Keys::failed`: a task
//! that fails enters it).
//! ARGV: retention ms, event log length, worker channel prefix (shared); then per task 11
//! values: task id, owner hash, expected statuses comma-wrapped (",running,"), next status,
//! result json ('' none), error json ('' none), fence holder ('' unfenced), fence epoch, event
//! name, event data json, channel.
//! Reply per task: `{1 | 0, 'OK' | 'NOT_FOUND' | 'STATUS' | 'FENCED', status, context,
//! created, updated, result, error}`.

use std::sync::Arc;

use protocol::token::OwnerHash;
use protocol::{Task, TaskEvent, TaskStatus};
use redis::Value;
use tracing::Instrument;

use super::{ms, parse, to_json};
use crate::lua::lua_script;
use crate::redis::batch::Batcher;
use crate::redis::{Core, Keys, RedisStore, ScriptItem, batched, replies};
use crate::{CasOutcome, Lease, Rejection, StoreError, Transition};

lua_script!("cas");

/// What `cas.lua` (or `finish_take.lua`) answered for one item: its verdict and the task as
/// the write left it (without its id, which the reply does not repeat: see
/// [`CasReply::outcome`]).
#[derive(Debug, Clone)]
pub(crate) struct CasReply {
    verdict: Verdict,
    current: Option<Task>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Applied,
    Status,
    Fenced,
    NotFound,
}

impl redis::FromRedisValue for CasReply {
    fn from_redis_value(v: Value) -> Result<Self, redis::ParsingError> {
        let reply: Vec<Option<String>> = redis::from_redis_value(v)?;
        let (head, view) = reply.split_at(reply.len().min(2));
        let verdict = match head.get(1).cloned().flatten().as_deref() {
            Some("OK") => Verdict::Applied,
            Some("STATUS") => Verdict::Status,
            Some("FENCED") => Verdict::Fenced,
            _ => Verdict::NotFound,
        };
        let current = if view.len() == 6 {
            replies::task_view("", view).map_err(super::misfit)?
        } else {
            None
        };
        Ok(CasReply { verdict, current })
    }
}

impl CasReply {
    /// The outcome for task `task_id`.
    pub(crate) fn outcome(self, task_id: &str) -> CasOutcome {
        let current = self.current.map(|task| Task {
            task_id: task_id.to_owned(),
            ..task
        });
        match (self.verdict, current) {
            (Verdict::Applied, Some(task)) => CasOutcome::Applied(task),
            (Verdict::Status, current) => CasOutcome::Rejected {
                reason: Rejection::Status,
                current,
            },
            (Verdict::Fenced, current) => CasOutcome::Rejected {
                reason: Rejection::Fenced,
                current,
            },
            _ => CasOutcome::Rejected {
                reason: Rejection::NotFound,
                current: None,
            },
        }
    }
}

/// The arguments every `cas.lua` and `finish_take.lua` call of shard keys `keys` starts with:
/// retention ms, event log length, worker channel prefix (a finished task's holder hears of it
/// on its cancellation channel in this shard's slot).
pub(crate) fn shared_args(core: &Core, keys: &Keys) -> Vec<String> {
    vec![
        ms(core.config.retention).to_string(),
        core.config.event_log_len.to_string(),
        keys.worker_channel_prefix(),
    ]
}

/// The keys every `cas.lua` and `finish_take.lua` call of shard keys `keys` starts with.
pub(crate) fn shared_keys(keys: &Keys) -> Vec<String> {
    let mut shared = vec![keys.leases(), keys.admissions(), keys.live()];
    shared.extend(keys.retained());
    shared
}

/// The `swaps` batch lane of shard `shard`.
pub(crate) fn lane(core: &Arc<Core>, shard: usize, lanes: usize) -> Batcher<ScriptItem, Value> {
    let keys = &core.shards[shard].keys;
    batched(
        core,
        shard,
        lanes,
        NAME,
        |s| &s.cas,
        shared_keys(keys),
        shared_args(core, keys),
    )
}

/// One compare-and-set's item over shard keys `keys`: task `task_id` of `owner`, queued (if
/// it is) in `entrypoint`'s queue, from one of `expected` to `next`, fenced by `fence`.
pub(crate) fn item(
    keys: &Keys,
    task_id: &str,
    owner: &OwnerHash,
    entrypoint: &str,
    expected: &[TaskStatus],
    next: &Transition,
    fence: Option<&Lease>,
) -> Result<ScriptItem, StoreError> {
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
    Ok(ScriptItem {
        keys: [
            keys.task(task_id),
            keys.events(task_id),
            keys.owner_index(owner),
            keys.owner_live(owner),
            keys.queue(entrypoint),
        ]
        .into_iter()
        .chain(keys.push_of(task_id))
        .chain(std::iter::once(keys.failed(entrypoint)))
        .collect(),
        args: vec![
            task_id.to_owned(),
            owner.as_str().to_owned(),
            expected_csv,
            next.status.as_str().to_owned(),
            result_json.unwrap_or_default(),
            error_json.unwrap_or_default(),
            fence.map(|l| l.holder.clone()).unwrap_or_default(),
            fence.map(|l| l.epoch.to_string()).unwrap_or_default(),
            event.kind.as_str().to_owned(),
            to_json(&event.data)?,
            keys.task_channel(owner, task_id),
        ],
    })
}

/// Runs `item` (of task `task_id`) through its shard's `swaps` lane.
pub(crate) async fn call(
    store: &RedisStore,
    task_id: &str,
    item: ScriptItem,
) -> Result<CasReply, StoreError> {
    let reply = store
        .lanes_of(task_id)
        .swaps
        .call(item)
        .instrument(store.inner.core.script_span(NAME))
        .await?;
    parse(reply)
}
