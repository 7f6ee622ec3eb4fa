//! `claim.lua`: takes a prepared lease on one task by id (upstream claimExecution): the task
//! must be running, reserved, queued or prepared, with no live lease. Each claim increments the
//! task's fencing epoch. An active task whose lease expired is left to recovery; a task held
//! for a settlement is its admission's until the settlement is known.
//!
//! KEYS: task, leases, admissions, queue of the task's entrypoint.
//! ARGV: task id, claimer id, lease ttl ms.
//! Reply: `{1, epoch, lease_expires, owner, invocation, attempt, max_attempts, entrypoint,
//! created}` | `{0, 'MISSING' | 'NOT_RUNNING' | 'LEASED' | 'EXPIRED'}`; 'EXPIRED' is a
//! reservation whose admission expired, which the caller reaps.

use std::time::Duration;

use redis::Value;

use super::{int, ms, run, text};
use crate::lua::lua_script;
use crate::redis::{Core, replies};
use crate::{Claim, StoreError};

lua_script!("claim");

/// What `claim.lua` answered.
#[derive(Debug, Clone)]
pub(crate) enum ClaimReply {
    /// The claim. Its lease names no holder: [`call`] fills in the claimer, which the reply
    /// does not repeat.
    Claimed(Box<Claim>),
    /// A reservation whose admission expired: the caller reaps it.
    Expired,
    /// Missing, not running, or leased to another.
    Refused,
}

impl redis::FromRedisValue for ClaimReply {
    fn from_redis_value(v: Value) -> Result<Self, redis::ParsingError> {
        let reply: Vec<Value> = redis::from_redis_value(v)?;
        match reply.split_first() {
            Some((ok, rest)) if int(ok)? == 1 => {
                // The claim reply of `take_queued` starts with the id, which this one leaves
                // out; the id is filled in by the caller as well.
                let mut values = vec![Value::BulkString(Vec::new())];
                values.extend_from_slice(rest);
                let claim = replies::claim("", &values).map_err(super::misfit)?;
                Ok(ClaimReply::Claimed(Box::new(claim)))
            }
            Some((_, [reason])) => Ok(if text(reason)? == "EXPIRED" {
                ClaimReply::Expired
            } else {
                ClaimReply::Refused
            }),
            _ => Err("unexpected claim reply".into()),
        }
    }
}

/// Claims task `task_id`, queued (if it is) in `entrypoint`'s queue, for `holder`.
pub(crate) async fn call(
    core: &Core,
    task_id: &str,
    entrypoint: &str,
    holder: &str,
    lease_ttl: Duration,
) -> Result<ClaimReply, StoreError> {
    let keys = &core.shard_of(task_id).keys;
    let mut invocation = core.scripts.claim.prepare_invoke();
    invocation
        .key(keys.task(task_id))
        .key(keys.leases())
        .key(keys.admissions())
        .key(keys.queue(entrypoint))
        .arg(task_id)
        .arg(holder)
        .arg(ms(lease_ttl));
    let mut reply = run(core, NAME, keys, &mut invocation).await?;
    if let ClaimReply::Claimed(claim) = &mut reply {
        claim.lease.task_id = task_id.to_owned();
        claim.lease.holder = holder.to_owned();
    }
    Ok(reply)
}
