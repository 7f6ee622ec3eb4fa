//! `lua/deregister_worker.lua`: removes one worker's registry entry at once (clean shutdown),
//! bumps the registry version when the worker was listed, and moves the expiry of the index
//! and of the version to the latest deadline left (both go when the index is empty).
//!
//! - KEYS: registry index (zset: worker id -> expiry ms), the worker's entry, registry version,
//!   drain requests (hash; the worker's request goes).
//! - ARGV: worker id.
//! - Reply: 1 when the worker was registered, else 0 ([`Reply`]).
//!
//! Unreplicated: an entry a failover brings back expires by itself.

use redis::{FromRedisValue, ParsingError, Value};

use crate::lua::lua_script;
use crate::{RedisStore, StoreError};

lua_script!(static "deregister_worker");

/// What the script answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reply {
    /// 1: the worker was listed, and is gone.
    Removed,
    /// Anything else: it was not listed.
    NotListed,
}

impl FromRedisValue for Reply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        Ok(match u64::from_redis_value(v)? {
            1 => Reply::Removed,
            _ => Reply::NotListed,
        })
    }
}

/// Removes worker `worker_id`'s entry.
pub(super) async fn call(store: &RedisStore, worker_id: &str) -> Result<Reply, StoreError> {
    let keys = store.keys();
    let mut invocation = SCRIPT.prepare_invoke();
    invocation
        .key(keys.registry())
        .key(keys.registry_entry(worker_id))
        .key(keys.registry_version())
        .key(keys.registry_drain())
        .arg(worker_id);
    store.eval_unreplicated(keys, NAME, &mut invocation).await
}
