//! `retry_later.lua`: the lease holder ends its run with a failure that asked for another
//! attempt: active -> backoff. The lease, run deadline and limit go (later writes of the
//! holder are fenced out); the task stays running and live with its failure in `le` and its
//! retries counted in `ry`, until its due time (kept as an admission's: once it passed the
//! sweeps queue the task again). Publishes nothing.
//!
//! KEYS: task, leases, admissions. ARGV: task id, holder id, epoch, error json, delay ms.
//! Reply: the task's due time (ms) | false when fenced out (or not active).

use std::time::Duration;

use protocol::TaskError;
use redis::Value;

use super::{ms, run, to_json};
use crate::lua::lua_script;
use crate::redis::Core;
use crate::{Lease, StoreError};

lua_script!("retry_later");

/// What `retry_later.lua` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RetryLaterReply {
    /// In backoff until `due_ms` (store clock).
    Backoff {
        due_ms: u64,
    },
    Fenced,
}

impl redis::FromRedisValue for RetryLaterReply {
    fn from_redis_value(v: Value) -> Result<Self, redis::ParsingError> {
        let due: Option<u64> = redis::from_redis_value(v)?;
        Ok(match due {
            Some(due_ms) => RetryLaterReply::Backoff { due_ms },
            None => RetryLaterReply::Fenced,
        })
    }
}

/// Parks `lease`'s task for `delay`, recording `error` as its last.
pub(crate) async fn call(
    core: &Core,
    lease: &Lease,
    error: &TaskError,
    delay: Duration,
) -> Result<RetryLaterReply, StoreError> {
    let keys = &core.shard_of(&lease.task_id).keys;
    let mut invocation = core.scripts.retry_later.prepare_invoke();
    invocation
        .key(keys.task(&lease.task_id))
        .key(keys.leases())
        .key(keys.admissions())
        .arg(&lease.task_id)
        .arg(&lease.holder)
        .arg(lease.epoch)
        .arg(to_json(error)?)
        .arg(ms(delay));
    run(core, NAME, keys, &mut invocation).await
}
