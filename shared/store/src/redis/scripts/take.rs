//! `take.lua`: claims queued tasks for a worker, oldest first, up to a maximum, and with a run
//! limit activates them in the same step (`take_active`). The script pops the tasks from the
//! queues itself (`take_queued.lua`): the caller names no candidates, so no two processes race
//! for one queue head.
//!
//! KEYS: leases, then one queue per entrypoint (task keys are named in the script from the
//! shard's hash tag).
//! ARGV: claimer id, lease ttl ms, max claims, run limit ms ('' leaves the claims prepared).
//! Reply: `{claims, more}`: claims flat, 9 values per claim (11 when activated: see
//! [`Claims`]); more: 1 when a queue still holds a task after the take.

use redis::Value;

use super::{int, run};
use crate::lua::lua_script;
use crate::redis::shards::Shard;
use crate::redis::take::{TakeKey, Taken};
use crate::redis::{Core, replies};
use crate::{Activation, StoreError};

lua_script!("take");

/// Claims as `take_queued.lua` returns them, flat: 9 values per claim (id, epoch,
/// lease_expires, owner, invocation, attempt, max_attempts, entrypoint, created), and when
/// `ACTIVATED` 2 more (attempt, run deadline). Their leases name no holder, which the reply
/// does not repeat: see [`Claims::held_by`].
#[derive(Default)]
pub(crate) struct Claims<const ACTIVATED: bool>(Vec<Taken>);

impl<const ACTIVATED: bool> redis::FromRedisValue for Claims<ACTIVATED> {
    fn from_redis_value(v: Value) -> Result<Self, redis::ParsingError> {
        let flat: Vec<Value> = redis::from_redis_value(v)?;
        let width = if ACTIVATED { 11 } else { 9 };
        if !flat.len().is_multiple_of(width) {
            return Err("take reply has the wrong arity".into());
        }
        flat.chunks(width)
            .map(|chunk| {
                let claim = replies::claim("", &chunk[..9]).map_err(super::misfit)?;
                let activation = match chunk.get(9..11) {
                    Some([attempt, deadline]) => Some(Activation {
                        // Claimed and activated at the same instant: the claim's deadline is
                        // the lease's.
                        lease: claim.lease.clone(),
                        attempt: u32::try_from(int(attempt)?).unwrap_or(u32::MAX),
                        run_deadline_ms: int(deadline)?,
                    }),
                    _ => None,
                };
                Ok(Taken { claim, activation })
            })
            .collect::<Result<_, redis::ParsingError>>()
            .map(Claims)
    }
}

impl<const ACTIVATED: bool> Claims<ACTIVATED> {
    /// The claims, held by `holder` (the claimer the call named).
    pub(crate) fn held_by(self, holder: &str) -> Vec<Taken> {
        let mut claims = self.0;
        for taken in &mut claims {
            taken.claim.lease.holder = holder.to_owned();
            if let Some(activation) = &mut taken.activation {
                activation.lease.holder = holder.to_owned();
            }
        }
        claims
    }
}

/// What `take.lua` answered: the claims, and whether a queue still holds a task.
pub(crate) struct TakeReply<const ACTIVATED: bool> {
    pub claims: Claims<ACTIVATED>,
    pub more: bool,
}

impl<const ACTIVATED: bool> redis::FromRedisValue for TakeReply<ACTIVATED> {
    fn from_redis_value(v: Value) -> Result<Self, redis::ParsingError> {
        let (claims, more): (Claims<ACTIVATED>, i64) = redis::from_redis_value(v)?;
        Ok(TakeReply {
            claims,
            more: more != 0,
        })
    }
}

/// One call in `shard` for `key`, up to `wanted` claims: the claims (activated when `key` has
/// a run limit), and whether the shard's queues still hold tasks.
pub(crate) async fn call(
    core: &Core,
    shard: &Shard,
    key: &TakeKey,
    wanted: usize,
) -> Result<(Vec<Taken>, bool), StoreError> {
    let keys = &shard.keys;
    let mut invocation = core.scripts.take.prepare_invoke();
    invocation.key(keys.leases());
    for entrypoint in &key.entrypoints {
        invocation.key(keys.queue(entrypoint));
    }
    invocation
        .arg(&key.holder)
        .arg(key.ttl_ms)
        .arg(wanted)
        .arg(key.run_ms.map(|ms| ms.to_string()).unwrap_or_default());
    Ok(if key.run_ms.is_some() {
        let reply: TakeReply<true> = run(core, NAME, keys, &mut invocation).await?;
        (reply.claims.held_by(&key.holder), reply.more)
    } else {
        let reply: TakeReply<false> = run(core, NAME, keys, &mut invocation).await?;
        (reply.claims.held_by(&key.holder), reply.more)
    })
}
