//! `hand_off.lua`: a prepared claim taken before hand-off (paid admission) puts its task in
//! the entrypoint's ready queue once admission is settled. Fenced.
//!
//! KEYS: task, leases, queue, wake. ARGV: task id, holder id, epoch.
//! Reply: 1 handed off | 0 fenced out.

use redis::Value;

use super::{int, run};
use crate::lua::lua_script;
use crate::redis::Core;
use crate::{Lease, StoreError};

lua_script!("hand_off");

/// What `hand_off.lua` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HandOffReply {
    HandedOff,
    Fenced,
}

impl redis::FromRedisValue for HandOffReply {
    fn from_redis_value(v: Value) -> Result<Self, redis::ParsingError> {
        Ok(if int(&v)? == 1 {
            HandOffReply::HandedOff
        } else {
            HandOffReply::Fenced
        })
    }
}

/// Hands `lease`'s task off to its entrypoint's queue.
pub(crate) async fn call(core: &Core, lease: &Lease) -> Result<HandOffReply, StoreError> {
    let keys = &core.shard_of(&lease.task_id).keys;
    let mut invocation = core.scripts.hand_off.prepare_invoke();
    invocation
        .key(keys.task(&lease.task_id))
        .key(keys.leases())
        .key(keys.queue(&lease.entrypoint))
        .key(keys.wake(&lease.entrypoint))
        .arg(&lease.task_id)
        .arg(&lease.holder)
        .arg(lease.epoch);
    run(core, NAME, keys, &mut invocation).await
}
