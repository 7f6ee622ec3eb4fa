//! `lua/push_put.lua`: stores (or replaces) one push config of a task with the cursor its
//! deliveries start from; refuses past the most configs a task may have, and (`existing`) a
//! task that does not exist. Keeps the caller's client address on the task's record (what
//! delivery slots are shared by) and counts a terminal task's new bytes in its retained size.
//!
//! - KEYS: task, configs, cursors, outbox, the retained-task keys (`Keys::retained`: a
//!   terminal task's push bytes are in its retained size).
//! - ARGV: config id, config, most configs, `existing` | `pending`, ttl ms of a pending one,
//!   task id, client address or ''.
//! - Reply: 1 stored | 0 no such task | -1 full.

use super::{PutMode, PutOutcome};
use crate::lua::lua_script;
use crate::{RedisStore, StoreError};

lua_script!("push_put");

pub(super) async fn call(
    store: &RedisStore,
    task_id: &str,
    config_id: &str,
    config: &str,
    max_configs: usize,
    mode: PutMode,
    source: Option<&str>,
) -> Result<PutOutcome, StoreError> {
    let keys = store.shard_keys(task_id);
    let (mode, ttl_ms) = match mode {
        PutMode::Existing => ("existing", 0),
        PutMode::Pending(ttl) => ("pending", ttl.as_millis().max(1)),
    };
    let mut invocation = SCRIPT.prepare_invoke();
    invocation
        .key(keys.task(task_id))
        .key(keys.push_configs(task_id))
        .key(keys.push_cursors(task_id))
        .key(keys.push_outbox(task_id))
        .key(&keys.retained())
        .arg(config_id)
        .arg(config)
        .arg(max_configs)
        .arg(mode)
        .arg(ttl_ms.to_string())
        .arg(task_id)
        .arg(source.unwrap_or_default());
    let reply: i64 = store.eval_in(keys, NAME, &mut invocation).await?;
    Ok(match reply {
        1 => PutOutcome::Stored,
        0 => PutOutcome::NoTask,
        _ => PutOutcome::Full,
    })
}
