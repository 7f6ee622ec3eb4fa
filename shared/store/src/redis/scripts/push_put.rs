//! `push_put.lua`: stores (or replaces) one push config of a task with the cursor its
//! deliveries start from; refuses past the most configs a task may have, and (`existing`) a
//! task that does not exist. Keeps the caller's client address on the task's record (what
//! delivery slots are shared by) and counts a terminal task's new bytes in its retained size.
//!
//! - KEYS: task, configs, cursors, outbox, the retained-task keys (`Keys::retained`: a
//!   terminal task's push bytes are in its retained size).
//! - ARGV: config id, config, most configs, `existing` | `pending`, ttl ms of a pending one,
//!   task id, client address or ''.
//! - Reply: 1 stored | 0 no such task | -1 full.

use redis::Value;

use super::run;
use crate::lua::lua_script;
use crate::push::{PutMode, PutOutcome};
use crate::{RedisStore, StoreError};

lua_script!("push_put");

/// What `push_put.lua` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PutReply(pub PutOutcome);

impl redis::FromRedisValue for PutReply {
    fn from_redis_value(v: Value) -> Result<Self, redis::ParsingError> {
        match redis::from_redis_value_ref::<i64>(&v)? {
            1 => Ok(PutReply(PutOutcome::Stored)),
            0 => Ok(PutReply(PutOutcome::NoTask)),
            -1 => Ok(PutReply(PutOutcome::Full)),
            other => Err(format!("unexpected push_put reply {other}").into()),
        }
    }
}

/// Stores config `config_id` of `task_id`, put from client address `source`, unless the task
/// has `max_configs` others.
pub(crate) async fn call(
    store: &RedisStore,
    task_id: &str,
    config_id: &str,
    config: &str,
    max_configs: usize,
    mode: PutMode,
    source: Option<&str>,
) -> Result<PutReply, StoreError> {
    let core = &store.inner.core;
    let keys = &core.shard_of(task_id).keys;
    let (mode, ttl_ms) = match mode {
        PutMode::Existing => ("existing", 0),
        PutMode::Pending(ttl) => ("pending", ttl.as_millis().max(1)),
    };
    let mut invocation = core.scripts.push_put.prepare_invoke();
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
    run(core, NAME, keys, &mut invocation).await
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::PutReply;
    use crate::StoreError;
    use crate::push::PutOutcome;
    use crate::redis::scripts::parse;

    #[test]
    fn each_answer_reads_as_its_outcome_and_any_other_is_corrupt() {
        for (reply, outcome) in [
            (1, PutOutcome::Stored),
            (0, PutOutcome::NoTask),
            (-1, PutOutcome::Full),
        ] {
            assert!(
                matches!(parse::<PutReply>(Value::Int(reply)), Ok(PutReply(read)) if read == outcome)
            );
        }
        for malformed in [Value::Int(2), Value::Nil, Value::Array(Vec::new())] {
            assert!(matches!(
                parse::<PutReply>(malformed),
                Err(StoreError::Corrupt(_))
            ));
        }
    }
}
