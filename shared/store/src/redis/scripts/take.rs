//! `take.lua`: claims queued tasks for a worker, oldest first, up to a maximum, and with a run
//! limit activates them in the same step (`take_active`). The caller peeked the candidate ids
//! at the head of the queues (`redis/take.rs`) and declares their task keys; each is re-checked
//! (`take_queued.lua`), so one another process took is skipped.
//!
//! KEYS: leases, the Q queues, then one task key per candidate.
//! ARGV: claimer id, lease ttl ms, max claims, Q, run limit ms ('' leaves the claims
//! prepared), heads wanted per queue; then per candidate: queue index (1-based), task id.
//! Reply: `{claims, heads}`: claims flat, 9 values per claim (11 when activated: see
//! [`Claims`]); heads: per queue, its first ids after the take.

use redis::Value;

use super::{int, run};
use crate::redis::shards::Shard;
use crate::redis::take::{TakeKey, Taken, heads_wanted};
use crate::redis::{Core, replies};
use crate::{Activation, StoreError};

script_source!("take");

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
            taken.claim.lease.owner_id = holder.to_owned();
            if let Some(activation) = &mut taken.activation {
                activation.lease.owner_id = holder.to_owned();
            }
        }
        claims
    }
}

/// What `take.lua` answered: the claims, and each queue's heads after the take.
pub(crate) struct TakeReply<const ACTIVATED: bool> {
    pub claims: Claims<ACTIVATED>,
    pub heads: Vec<Vec<String>>,
}

impl<const ACTIVATED: bool> redis::FromRedisValue for TakeReply<ACTIVATED> {
    fn from_redis_value(v: Value) -> Result<Self, redis::ParsingError> {
        let (claims, heads) = redis::from_redis_value(v)?;
        Ok(TakeReply { claims, heads })
    }
}

/// One call in `shard` for `key`, up to `wanted` claims over the candidates `picks` (queue
/// index, id) peeked there: the claims (activated when `key` has a run limit) and the heads.
pub(crate) async fn call(
    core: &Core,
    shard: &Shard,
    key: &TakeKey,
    wanted: usize,
    picks: &[(usize, &str)],
) -> Result<(Vec<Taken>, Vec<Vec<String>>), StoreError> {
    let keys = &shard.keys;
    let entrypoints = &key.entrypoints;
    let mut invocation = core.scripts.take.prepare_invoke();
    invocation.key(keys.leases());
    for entrypoint in entrypoints {
        invocation.key(keys.queue(entrypoint));
    }
    // Heads are only of use to a worker that finishes what it took (take_active).
    let heads_back = if key.run_ms.is_some() {
        heads_wanted(wanted)
    } else {
        0
    };
    invocation
        .arg(&key.holder)
        .arg(key.ttl_ms)
        .arg(wanted)
        .arg(entrypoints.len())
        .arg(key.run_ms.map(|ms| ms.to_string()).unwrap_or_default())
        .arg(heads_back);
    for (queue, id) in picks {
        invocation.key(keys.task(id)).arg(queue + 1).arg(*id);
    }
    Ok(if key.run_ms.is_some() {
        let reply: TakeReply<true> = run(core, NAME, keys, &mut invocation).await?;
        (reply.claims.held_by(&key.holder), reply.heads)
    } else {
        let reply: TakeReply<false> = run(core, NAME, keys, &mut invocation).await?;
        (reply.claims.held_by(&key.holder), reply.heads)
    })
}
