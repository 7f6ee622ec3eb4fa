//! `hold.lua`: a paid admission holds its `prepared` claim for the settlement it is about to
//! ask for: the task is marked held (`sh`) and leaves the lease deadline index, so no sweep
//! cancels or requeues it when the claim expires, and no one else can claim it. Only the
//! settlement's outcome moves it on (a receipt queues it, a settlement that never happened
//! cancels it). Fenced.
//!
//! KEYS: task, leases. ARGV: task id, holder id, epoch.
//! Reply: 1 held | 0 fenced out or not prepared.

use redis::Value;

use super::{int, run};
use crate::lua::lua_script;
use crate::redis::Core;
use crate::{Lease, StoreError};

lua_script!("hold");

/// What `hold.lua` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HoldReply {
    Held,
    Refused,
}

impl redis::FromRedisValue for HoldReply {
    fn from_redis_value(v: Value) -> Result<Self, redis::ParsingError> {
        Ok(if int(&v)? == 1 {
            HoldReply::Held
        } else {
            HoldReply::Refused
        })
    }
}

/// Holds `lease`'s claim for its settlement.
pub(crate) async fn call(core: &Core, lease: &Lease) -> Result<HoldReply, StoreError> {
    let keys = &core.shard_of(&lease.task_id).keys;
    let mut invocation = core.scripts.hold.prepare_invoke();
    invocation
        .key(keys.task(&lease.task_id))
        .key(keys.leases())
        .arg(&lease.task_id)
        .arg(&lease.holder)
        .arg(lease.epoch);
    run(core, NAME, keys, &mut invocation).await
}
