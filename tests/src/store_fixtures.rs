//! Store-level fixtures of the Redis suites: a queued task, and ids placed in a given shard.

use serde_json::json;
use shared::store::redis::shard_index;
use shared::store::{Admission, Invocation, NewTask};
use shared::token::OwnerHash;

/// A free (queued) task of `entrypoint` whose input names its id, with 3 attempts.
pub fn queued_task(id: &str, owner: &OwnerHash, entrypoint: &str) -> NewTask {
    NewTask {
        task_id: id.to_owned(),
        owner: owner.clone(),
        invocation: Invocation {
            entrypoint: entrypoint.to_owned(),
            input: json!({ "id": id }),
            context_id: None,
            metadata: None,
            trace_context: Default::default(),
        },
        admission: Admission::Queued,
        max_attempts: 3,
    }
}

/// The first `count` ids `prefix-N` that land in shard `shard` of `shards`.
pub fn ids_in_shard(prefix: &str, shard: usize, shards: usize, count: usize) -> Vec<String> {
    (0..)
        .map(|n| format!("{prefix}-{n}"))
        .filter(|id| shard_index(id, shards) == shard)
        .take(count)
        .collect()
}
