//! `due.lua`: ids whose lease or admission deadline has passed, by the Redis clock (read
//! only), with their deadlines, so that a caller sweeping several shards settles the earliest
//! first.
//!
//! KEYS: leases, admissions. ARGV: limit.
//! Reply: `{id, deadline_ms, ...}`: distinct task ids, at most 2 * limit (limit per set).

use redis::Value;

use super::run_unreplicated;
use crate::StoreError;
use crate::lua::lua_script;
use crate::redis::Core;

lua_script!("due");

/// The due ids of one shard with their deadlines (ms).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct DueReply(pub Vec<(String, f64)>);

impl redis::FromRedisValue for DueReply {
    fn from_redis_value(v: Value) -> Result<Self, redis::ParsingError> {
        Ok(DueReply(redis::from_redis_value(v)?))
    }
}

/// Up to `limit` lease and `limit` admission ids of shard `shard` whose deadlines passed.
/// A read: nothing to replicate.
pub(crate) async fn call(core: &Core, shard: usize, limit: usize) -> Result<DueReply, StoreError> {
    let keys = &core.shards[shard].keys;
    let mut invocation = core.scripts.due.prepare_invoke();
    invocation
        .key(keys.leases())
        .key(keys.admissions())
        .arg(limit.max(1));
    run_unreplicated(core, NAME, keys, &mut invocation).await
}
