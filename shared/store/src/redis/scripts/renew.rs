//! `renew.lua`: extends many leases of one holder in one call (the worker heartbeat). A lease
//! is extended only while it is the task's current lease and still live; an expired lease is
//! never revived. A claim held for a settlement is extended but stays out of the lease index.
//!
//! KEYS: leases, then per lease: task.
//! ARGV: lease ttl ms, 'prepared' (only prepared claims) | 'any'; then per lease 3 values:
//! task id, holder id, epoch.
//! Reply: one integer per lease: the new deadline, or 0 when the lease is lost.

use std::time::Duration;

use redis::Value;

use super::{ms, run};
use crate::lua::lua_script;
use crate::redis::{Core, RedisStore};
use crate::{Lease, Renewal, StoreError};

lua_script!("renew");

/// Which claims a renewal extends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phases {
    /// Only prepared claims (an admission's claim before hand-off).
    Prepared,
    /// Any live lease (the worker heartbeat).
    Any,
}

impl Phases {
    fn as_str(self) -> &'static str {
        match self {
            Phases::Prepared => "prepared",
            Phases::Any => "any",
        }
    }
}

/// What `renew.lua` answered: per lease, in call order, its new deadline (ms), or `None`
/// when the lease is lost.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RenewReply(pub Vec<Option<u64>>);

impl redis::FromRedisValue for RenewReply {
    fn from_redis_value(v: Value) -> Result<Self, redis::ParsingError> {
        let deadlines: Vec<u64> = redis::from_redis_value(v)?;
        Ok(RenewReply(
            deadlines
                .into_iter()
                .map(|deadline| (deadline > 0).then_some(deadline))
                .collect(),
        ))
    }
}

/// One call in shard `shard`, over the leases of `leases` at `positions` (all of that shard).
async fn call(
    core: &Core,
    shard: usize,
    leases: &[Lease],
    positions: &[usize],
    lease_ttl: Duration,
    phases: Phases,
) -> Result<RenewReply, StoreError> {
    let keys = &core.shards[shard].keys;
    let mut invocation = core.scripts.renew.prepare_invoke();
    invocation
        .key(keys.leases())
        .arg(ms(lease_ttl))
        .arg(phases.as_str());
    for &position in positions {
        let lease = &leases[position];
        invocation
            .key(keys.task(&lease.task_id))
            .arg(&lease.task_id)
            .arg(&lease.holder)
            .arg(lease.epoch);
    }
    let reply: RenewReply = run(core, NAME, keys, &mut invocation).await?;
    if reply.0.len() != positions.len() {
        return Err(StoreError::Corrupt("renew reply arity".into()));
    }
    Ok(reply)
}

/// Renews `leases` for `lease_ttl`: one call per shard that holds some of them, all at once; a
/// shard that fails leaves its leases unconfirmed without holding back the others'. An error
/// only when no shard answered.
pub(crate) async fn renew_all(
    store: &RedisStore,
    leases: &[Lease],
    lease_ttl: Duration,
    phases: Phases,
) -> Result<Vec<Renewal>, StoreError> {
    if leases.is_empty() {
        return Ok(Vec::new());
    }
    let core = &store.inner.core;
    let mut by_shard: Vec<Vec<usize>> = vec![Vec::new(); core.shards.len()];
    for (position, lease) in leases.iter().enumerate() {
        by_shard[core.shard_of(&lease.task_id).index].push(position);
    }
    let calls = by_shard
        .iter()
        .enumerate()
        .filter(|(_, positions)| !positions.is_empty())
        .map(|(shard, positions)| async move {
            let reply = call(core, shard, leases, positions, lease_ttl, phases).await;
            (positions, reply)
        });
    let mut renewed = vec![Renewal::Unconfirmed; leases.len()];
    let mut first_error = None;
    let mut answered = false;
    for (positions, reply) in futures::future::join_all(calls).await {
        match reply {
            Ok(RenewReply(deadlines)) => {
                answered = true;
                for (&position, deadline) in positions.iter().zip(deadlines) {
                    renewed[position] = match deadline {
                        Some(_) => Renewal::Renewed,
                        None => Renewal::Lost,
                    };
                }
            }
            Err(err) => {
                first_error.get_or_insert(err);
            }
        }
    }
    match first_error {
        Some(err) if !answered => Err(err),
        _ => Ok(renewed),
    }
}

/// All of `renewed` as held or not; an error when any of them could not be confirmed.
pub(crate) fn all_confirmed(renewed: Vec<Renewal>) -> Result<Vec<bool>, StoreError> {
    renewed
        .into_iter()
        .map(|renewal| match renewal {
            Renewal::Renewed => Ok(true),
            Renewal::Lost => Ok(false),
            Renewal::Unconfirmed => Err(StoreError::Unavailable(
                "a shard holding some of the leases did not answer".into(),
            )),
        })
        .collect()
}
