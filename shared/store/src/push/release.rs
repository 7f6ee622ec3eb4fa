//! `lua/push_release.lua`: ends a claim: trims what every config is done with, then schedules
//! the task again (now, after the earliest retry, or not at all), or, for a finished task,
//! drops its outbox and gives its configs the task's remaining retention.
//!
//! - KEYS: due, outbox, configs, cursors, task (its TTL is read for a finished task).
//! - ARGV: task id, trim, outbox length when read, retry delay ms or '', '1' when finished.
//! - Reply: the events left in the outbox.

use super::Release;
use crate::lua::lua_script;
use crate::{RedisStore, StoreError};

lua_script!("push_release");

pub(super) async fn call(
    store: &RedisStore,
    task_id: &str,
    release: Release,
) -> Result<(), StoreError> {
    let keys = store.shard_keys(task_id);
    let mut invocation = SCRIPT.prepare_invoke();
    invocation
        .key(keys.push_due())
        .key(keys.push_outbox(task_id))
        .key(keys.push_configs(task_id))
        .key(keys.push_cursors(task_id))
        .key(keys.task(task_id))
        .key(&keys.retained())
        .arg(task_id)
        .arg(release.trim)
        .arg(release.loaded)
        .arg(
            release
                .retry_in
                .map(|delay| delay.as_millis().to_string())
                .unwrap_or_default(),
        )
        .arg(if release.finished { "1" } else { "" });
    let _left: i64 = store.eval_in(keys, NAME, &mut invocation).await?;
    Ok(())
}
