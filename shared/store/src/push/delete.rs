//! `lua/push_delete.lua`: deletes one push config and its cursor; the last config takes the
//! outbox with it. Idempotent.
//!
//! - KEYS: configs, cursors, outbox.
//! - ARGV: config id, task id.
//! - Reply: 1 deleted | 0 no such config.

use crate::lua::lua_script;
use crate::{RedisStore, StoreError};

lua_script!("push_delete");

pub(super) async fn call(
    store: &RedisStore,
    task_id: &str,
    config_id: &str,
) -> Result<bool, StoreError> {
    let keys = store.shard_keys(task_id);
    let mut invocation = SCRIPT.prepare_invoke();
    invocation
        .key(keys.push_configs(task_id))
        .key(keys.push_cursors(task_id))
        .key(keys.push_outbox(task_id))
        .key(keys.task(task_id))
        .key(&keys.retained())
        .arg(config_id)
        .arg(task_id);
    let deleted: i64 = store.eval_in(keys, NAME, &mut invocation).await?;
    Ok(deleted == 1)
}
