//! `push_delete.lua`: deletes one push config and its cursor; the last config takes the
//! outbox with it. Idempotent.
//!
//! - KEYS: configs, cursors, outbox, task, the retained-task keys (`Keys::retained`).
//! - ARGV: config id, task id.
//! - Reply: 1 deleted | 0 no such config.

use redis::Value;

use super::{int, run};
use crate::lua::lua_script;
use crate::{RedisStore, StoreError};

lua_script!("push_delete");

/// What `push_delete.lua` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeleteReply {
    Deleted,
    NoSuchConfig,
}

impl redis::FromRedisValue for DeleteReply {
    fn from_redis_value(v: Value) -> Result<Self, redis::ParsingError> {
        match int(&v)? {
            1 => Ok(DeleteReply::Deleted),
            0 => Ok(DeleteReply::NoSuchConfig),
            other => Err(format!("unexpected push_delete reply {other}").into()),
        }
    }
}

/// Deletes config `config_id` of `task_id`.
pub(crate) async fn call(
    store: &RedisStore,
    task_id: &str,
    config_id: &str,
) -> Result<DeleteReply, StoreError> {
    let core = &store.inner.core;
    let keys = &core.shard_of(task_id).keys;
    let mut invocation = core.scripts.push_delete.prepare_invoke();
    invocation
        .key(keys.push_configs(task_id))
        .key(keys.push_cursors(task_id))
        .key(keys.push_outbox(task_id))
        .key(keys.task(task_id))
        .key(&keys.retained())
        .arg(config_id)
        .arg(task_id);
    run(core, NAME, keys, &mut invocation).await
}
