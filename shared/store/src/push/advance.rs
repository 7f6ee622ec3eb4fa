//! `lua/push_advance.lua`: moves one config's cursor (compare and set), so a deliverer whose
//! claim expired cannot move a cursor another one moved since, nor revive a deleted config.
//!
//! - KEYS: cursors.
//! - ARGV: config id, the cursor as read, the new cursor.
//! - Reply: 1 moved | 0 changed or gone.

use crate::lua::lua_script;
use crate::{RedisStore, StoreError};

lua_script!("push_advance");

pub(super) async fn call(
    store: &RedisStore,
    task_id: &str,
    config_id: &str,
    read: &str,
    next: &str,
) -> Result<bool, StoreError> {
    let keys = store.shard_keys(task_id);
    let mut invocation = SCRIPT.prepare_invoke();
    invocation
        .key(keys.push_cursors(task_id))
        .arg(config_id)
        .arg(read)
        .arg(next);
    let moved: i64 = store.eval_in(keys, NAME, &mut invocation).await?;
    Ok(moved == 1)
}
