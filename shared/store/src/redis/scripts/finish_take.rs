//! `finish_take.lua`: a worker's fenced terminal writes (compare-and-set items, as in
//! `cas.lua`), then claims and activates the next queued tasks for the same worker
//! (`take_queued.lua`), in one call: a busy worker makes about one round trip per task
//! (BullMQ's moveToFinished "fetch next"). Concurrent finishes of one process share the call
//! (`redis/finish.rs`). The next tasks are popped from the queues in the script, so no two
//! processes race for one queue head. A rejected write still takes.
//!
//! KEYS: leases, admissions, live, terminal, terminal sizes, terminal bytes, the Q queues; then
//! per finish item 11 keys (as `cas.lua`).
//! ARGV: retention ms, event log length, worker channel prefix, claimer id, lease ttl ms, run
//! limit ms, max claims, Q, number of finish items F; then per finish item 11 values (as
//! `cas.lua`).
//! Reply: `{finishes, claims, more}`: per item a `cas.lua` reply ([`CasReply`]); claims flat,
//! 11 values per claim ([`Claims`], activated); more: 1 when a queue still holds a task.

use redis::Value;

use super::cas::{self, CasReply};
use super::run;
use super::take::Claims;
use crate::StoreError;
use crate::lua::lua_script;
use crate::redis::shards::Shard;
use crate::redis::take::{TakeKey, Taken};
use crate::redis::{Core, ScriptItem};

lua_script!("finish_take");

/// What `finish_take.lua` answered.
pub(crate) struct FinishTakeReply {
    /// Per finish item, in call order.
    pub swaps: Vec<CasReply>,
    pub claims: Claims<true>,
    /// A queue still holds a task after the call.
    pub more: bool,
}

impl redis::FromRedisValue for FinishTakeReply {
    fn from_redis_value(v: Value) -> Result<Self, redis::ParsingError> {
        let (swaps, claims, more): (_, _, i64) = redis::from_redis_value(v)?;
        Ok(FinishTakeReply {
            swaps,
            claims,
            more: more != 0,
        })
    }
}

/// One call in `shard`: the finish `items` (`cas.lua` items), then up to `wanted` claims for
/// `take`, and whether the queues still hold tasks.
pub(crate) async fn call(
    core: &Core,
    shard: &Shard,
    take: Option<&TakeKey>,
    items: &[&ScriptItem],
    wanted: usize,
) -> Result<(Vec<CasReply>, Vec<Taken>, bool), StoreError> {
    let keys = &shard.keys;
    let no_entrypoints = Vec::new();
    let entrypoints = take.map_or(&no_entrypoints, |key| &key.entrypoints);
    let mut invocation = core.scripts.finish_take.prepare_invoke();
    for key in cas::shared_keys(keys) {
        invocation.key(key);
    }
    for entrypoint in entrypoints {
        invocation.key(keys.queue(entrypoint));
    }
    for arg in cas::shared_args(core, keys) {
        invocation.arg(arg);
    }
    invocation
        .arg(take.map(|key| key.holder.as_str()).unwrap_or_default())
        .arg(take.map_or(0, |key| key.ttl_ms))
        .arg(take.and_then(|key| key.run_ms).unwrap_or(0))
        .arg(wanted)
        .arg(entrypoints.len())
        .arg(items.len());
    for item in items {
        for key in &item.keys {
            invocation.key(key);
        }
        for arg in &item.args {
            invocation.arg(arg);
        }
    }
    let reply: FinishTakeReply = run(core, NAME, keys, &mut invocation).await?;
    let holder = take.map(|key| key.holder.as_str()).unwrap_or_default();
    Ok((reply.swaps, reply.claims.held_by(holder), reply.more))
}
