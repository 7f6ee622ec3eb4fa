//! `activate.lua`: prepared -> active for current live claims, many at once (a worker
//! activates what one take gave it; concurrent activations of one process share a call through
//! the shard's `activations` lane, [`lane`]). Counts an attempt and starts the hard run
//! deadline; from here the lease is renewed by heartbeat. A claim held for a settlement is not
//! activated.
//!
//! KEYS: leases (shared by the batch); then per task: task.
//! ARGV: per task 5 values: task id, holder id, epoch, lease ttl ms, max run ms.
//! Reply per task: `{attempt, lease_expires, run_deadline}` | 0 when fenced out.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use tracing::Instrument;

use super::{ms, parse};
use crate::lua::lua_script;
use crate::redis::batch::Batcher;
use crate::redis::{Core, Keys, RedisStore, ScriptItem, batched};
use crate::{Lease, StoreError};

lua_script!("activate");

/// What `activate.lua` answered for one claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ActivateReply {
    Activated {
        attempt: u64,
        lease_expires: u64,
        run_deadline: u64,
    },
    Fenced,
}

impl redis::FromRedisValue for ActivateReply {
    fn from_redis_value(v: Value) -> Result<Self, redis::ParsingError> {
        if let Value::Int(_) = v {
            return Ok(ActivateReply::Fenced);
        }
        let (attempt, lease_expires, run_deadline) = redis::from_redis_value(v)?;
        Ok(ActivateReply::Activated {
            attempt,
            lease_expires,
            run_deadline,
        })
    }
}

/// The `activations` batch lane of shard `shard`.
pub(crate) fn lane(core: &Arc<Core>, shard: usize, lanes: usize) -> Batcher<ScriptItem, Value> {
    let keys = &core.shards[shard].keys;
    batched(
        core,
        shard,
        lanes,
        NAME,
        |s| &s.activate,
        vec![keys.leases()],
        vec![],
    )
}

/// One claim's item in an `activate.lua` call over shard keys `keys`.
pub(crate) fn item(
    keys: &Keys,
    lease: &Lease,
    lease_ttl: Duration,
    max_run: Duration,
) -> ScriptItem {
    ScriptItem {
        keys: vec![keys.task(&lease.task_id)],
        args: vec![
            lease.task_id.clone(),
            lease.holder.clone(),
            lease.epoch.to_string(),
            ms(lease_ttl).to_string(),
            ms(max_run).to_string(),
        ],
    }
}

/// Activates `lease`'s claim through its shard's `activations` lane.
pub(crate) async fn call(
    store: &RedisStore,
    lease: &Lease,
    lease_ttl: Duration,
    max_run: Duration,
) -> Result<ActivateReply, StoreError> {
    let item = item(store.shard_keys(&lease.task_id), lease, lease_ttl, max_run);
    let reply = store
        .lanes_of(&lease.task_id)
        .activations
        .call(item)
        .instrument(store.inner.core.script_span(NAME))
        .await?;
    parse(reply)
}
