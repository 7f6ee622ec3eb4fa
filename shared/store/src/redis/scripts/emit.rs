//! `emit.lua`: a lease holder appends a custom event (progress, stream output) to its task's
//! log and publishes it. Fenced like every other worker write.
//!
//! KEYS: task, events, the task's push keys (`Keys::push_of`). ARGV: holder id, epoch, event
//! name, data json, channel, event log length, task id. Reply: the event's sequence number | false when fenced out.

use redis::Value;

use super::{run, to_json};
use crate::lua::lua_script;
use crate::redis::Core;
use crate::{EventPayload, Lease, StoreError};

lua_script!("emit");

/// What `emit.lua` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EmitReply {
    Emitted { seq: u64 },
    Fenced,
}

impl redis::FromRedisValue for EmitReply {
    fn from_redis_value(v: Value) -> Result<Self, redis::ParsingError> {
        let seq: Option<u64> = redis::from_redis_value(v)?;
        Ok(match seq {
            Some(seq) => EmitReply::Emitted { seq },
            None => EmitReply::Fenced,
        })
    }
}

/// Emits `event` under `lease`.
pub(crate) async fn call(
    core: &Core,
    lease: &Lease,
    event: &EventPayload,
) -> Result<EmitReply, StoreError> {
    let keys = &core.shard_of(&lease.task_id).keys;
    let mut invocation = core.scripts.emit.prepare_invoke();
    invocation
        .key(keys.task(&lease.task_id))
        .key(keys.events(&lease.task_id))
        .key(&keys.push_of(&lease.task_id))
        .arg(&lease.holder)
        .arg(lease.epoch)
        .arg(&event.event)
        .arg(to_json(&event.data)?)
        .arg(keys.task_channel(&lease.task_owner, &lease.task_id))
        .arg(core.config.event_log_len)
        .arg(&lease.task_id);
    run(core, NAME, keys, &mut invocation).await
}
