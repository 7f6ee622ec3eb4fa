//! `push_advance.lua`: moves one config's cursor (compare and set), so a deliverer whose
//! claim expired cannot move a cursor another one moved since, nor revive a deleted config.
//!
//! - KEYS: cursors.
//! - ARGV: config id, the cursor as read, the new cursor.
//! - Reply: 1 moved | 0 changed or gone.

use redis::Value;

use super::{int, run};
use crate::lua::lua_script;
use crate::{RedisStore, StoreError};

lua_script!("push_advance");

/// What `push_advance.lua` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AdvanceReply {
    Moved,
    /// Another deliverer moved the cursor, or the config is gone.
    Changed,
}

impl redis::FromRedisValue for AdvanceReply {
    fn from_redis_value(v: Value) -> Result<Self, redis::ParsingError> {
        match int(&v)? {
            1 => Ok(AdvanceReply::Moved),
            0 => Ok(AdvanceReply::Changed),
            other => Err(format!("unexpected push_advance reply {other}").into()),
        }
    }
}

/// Moves config `config_id`'s cursor of `task_id` from `read` to `next` (both as stored).
pub(crate) async fn call(
    store: &RedisStore,
    task_id: &str,
    config_id: &str,
    read: &str,
    next: &str,
) -> Result<AdvanceReply, StoreError> {
    let core = &store.inner.core;
    let keys = &core.shard_of(task_id).keys;
    let mut invocation = core.scripts.push_advance.prepare_invoke();
    invocation
        .key(keys.push_cursors(task_id))
        .arg(config_id)
        .arg(read)
        .arg(next);
    run(core, NAME, keys, &mut invocation).await
}
