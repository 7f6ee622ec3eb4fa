//! `await_input.lua`: the lease holder ends its run without finishing the task: active ->
//! waiting. The lease, run deadline and limit go (later writes of the holder are fenced out);
//! the task stays running and live with what the run asks for in `iq`, until its waiting
//! deadline (kept as an admission's: past it the sweeps fail the task with input_timeout).
//! Logs and publishes the `inputRequired` event.
//!
//! KEYS: task, events, leases, admissions, the task's push keys (`Keys::push_of`). ARGV: task id, holder id, epoch, request json,
//! event data json, channel, event log length, patience ms.
//! Reply: the event's sequence number | false when fenced out (or not active).

use std::time::Duration;

use redis::Value;

use super::{ms, run, to_json};
use crate::lua::lua_script;
use crate::redis::Core;
use crate::{Lease, StoreError};

lua_script!("await_input");

/// What `await_input.lua` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AwaitInputReply {
    Waiting { seq: u64 },
    Fenced,
}

impl redis::FromRedisValue for AwaitInputReply {
    fn from_redis_value(v: Value) -> Result<Self, redis::ParsingError> {
        let seq: Option<u64> = redis::from_redis_value(v)?;
        Ok(match seq {
            Some(seq) => AwaitInputReply::Waiting { seq },
            None => AwaitInputReply::Fenced,
        })
    }
}

/// Parks `lease`'s task until its owner answers `request`, for up to `patience`.
pub(crate) async fn call(
    core: &Core,
    lease: &Lease,
    request: &serde_json::Value,
    patience: Duration,
) -> Result<AwaitInputReply, StoreError> {
    let keys = &core.shard_of(&lease.task_id).keys;
    let data = crate::input_required_data(&lease.task_id, request);
    let mut invocation = core.scripts.await_input.prepare_invoke();
    invocation
        .key(keys.task(&lease.task_id))
        .key(keys.events(&lease.task_id))
        .key(keys.leases())
        .key(keys.admissions())
        .key(&keys.push_of(&lease.task_id))
        .arg(&lease.task_id)
        .arg(&lease.holder)
        .arg(lease.epoch)
        .arg(to_json(request)?)
        .arg(to_json(&data)?)
        .arg(keys.task_channel(&lease.task_owner, &lease.task_id))
        .arg(core.config.event_log_len)
        .arg(ms(patience));
    run(core, NAME, keys, &mut invocation).await
}
