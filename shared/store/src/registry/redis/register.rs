//! `lua/register_worker.lua`: publishes or refreshes one worker's registry entry (the worker
//! heartbeat). The entry vanishes by itself `ttl` after its last refresh; the index records
//! the same deadline, is pruned of passed deadlines on every call and expires with its latest
//! deadline. The registry version is bumped when the live set or an entry's content changes,
//! not on a plain refresh.
//!
//! - KEYS: registry index (zset: worker id -> expiry ms), the worker's entry, registry version,
//!   drain requests (hash; pruned workers' requests are dropped).
//! - ARGV: worker id, entry JSON, ttl ms (>= 1).
//! - Reply: the entry's expiry, ms since the epoch by the Redis clock, and the drain request
//!   standing for the worker, if any ([`Reply`]).
//!
//! Unreplicated: a heartbeat a failover loses is written again by the next tick.

use std::time::Duration;

use redis::{FromRedisValue, ParsingError, Value};

use crate::lua::lua_script;
use crate::registry::WorkerEntry;
use crate::{RedisStore, StoreError};

lua_script!(static "register_worker");

/// What the script answered: when the entry expires, and the drain request standing for the
/// worker (JSON, parsed by the caller).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Reply {
    /// Ms since the epoch, Redis clock.
    pub(super) expires_ms: u64,
    pub(super) drain: Option<String>,
}

impl FromRedisValue for Reply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let (expires_ms, drain) = <(u64, Option<String>)>::from_redis_value(v)?;
        Ok(Reply { expires_ms, drain })
    }
}

/// Publishes or refreshes `entry` for `ttl`.
pub(super) async fn call(
    store: &RedisStore,
    entry: &WorkerEntry,
    ttl: Duration,
) -> Result<Reply, StoreError> {
    let json = serde_json::to_string(entry)
        .map_err(|err| StoreError::Corrupt(format!("registry entry: {err}")))?;
    // PX 0 is an error in Redis; a zero ttl means "expire at once".
    let ttl_ms = ttl.as_millis().max(1);
    let keys = store.keys();
    let mut invocation = SCRIPT.prepare_invoke();
    invocation
        .key(keys.registry())
        .key(keys.registry_entry(&entry.worker_id))
        .key(keys.registry_version())
        .key(keys.registry_drain())
        .arg(&entry.worker_id)
        .arg(json)
        .arg(ttl_ms.to_string());
    store.eval_unreplicated(keys, NAME, &mut invocation).await
}
