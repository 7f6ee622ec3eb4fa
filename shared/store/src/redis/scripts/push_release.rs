//! `push_release.lua`: ends a claim: trims what every config is done with, then schedules
//! the task again (now, after the earliest retry, or not at all), or, for a finished task,
//! drops its outbox and gives its configs the task's remaining retention.
//!
//! - KEYS: due, outbox, configs, cursors, task (its TTL is read for a finished task), the
//!   retained-task keys (`Keys::retained`).
//! - ARGV: task id, trim, outbox length when read, retry delay ms or '', '1' when finished.
//! - Reply: the events left in the outbox.

use redis::Value;

use super::{int, run};
use crate::lua::lua_script;
use crate::push::Release;
use crate::{RedisStore, StoreError};

lua_script!("push_release");

/// What `push_release.lua` answered: the events left in the outbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReleaseReply {
    pub left: u64,
}

impl redis::FromRedisValue for ReleaseReply {
    fn from_redis_value(v: Value) -> Result<Self, redis::ParsingError> {
        Ok(ReleaseReply { left: int(&v)? })
    }
}

/// Ends the claim on `task_id` as `release` says.
pub(crate) async fn call(
    store: &RedisStore,
    task_id: &str,
    release: Release,
) -> Result<ReleaseReply, StoreError> {
    let core = &store.inner.core;
    let keys = &core.shard_of(task_id).keys;
    let mut invocation = core.scripts.push_release.prepare_invoke();
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
    run(core, NAME, keys, &mut invocation).await
}
