//! `recover.lua`: settles tasks whose deadline passed; every worker runs it, so each case is
//! re-checked against the Redis clock and a task another sweep already settled is left alone:
//! an expired reservation, or an expired claim taken before hand-off, is cancelled; an expired
//! claim after hand-off goes back to the ready queue; an expired active lease fails the task
//! (task_timeout past its run deadline, task_attempts_exhausted when its attempts are used up)
//! (abandoned runs only: retries a handler asked for do not count) or queues it again; a retry's
//! backoff whose due time passed is queued again (in both modes, so that it never stays at the
//! head of the admissions index); a task held for a settlement is left alone. Mode 'reap'
//! otherwise only cancels.
//!
//! KEYS: leases, admissions, live, terminal, terminal sizes, terminal bytes; then per task 11
//! keys: task, events, owner_index, owner_live, queue, wake, and the task's push keys
//! (`Keys::push_of`).
//! ARGV: mode ('reap' | 'recover'), retention ms, task channel prefix; then the task ids, in
//! the order of their keys.
//! Reply: `{requeued ids, failed ids, cancelled ids, retried ids}`.

use std::collections::HashMap;

use protocol::token::OwnerHash;
use redis::Value;

use super::{ms, run};
use crate::lua::lua_script;
use crate::redis::{RedisStore, fields};
use crate::{RecoveryReport, StoreError};

lua_script!("recover");

/// What a sweep settles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Expired admissions only: they are cancelled (upstream reapExpiredAdmissions).
    Reap,
    /// Every expired deadline.
    Recover,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Mode::Reap => "reap",
            Mode::Recover => "recover",
        }
    }
}

/// What `recover.lua` answered: the ids it settled, by outcome.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RecoverReply {
    pub requeued: Vec<String>,
    pub failed: Vec<String>,
    pub cancelled: Vec<String>,
    pub retried: Vec<String>,
}

impl redis::FromRedisValue for RecoverReply {
    fn from_redis_value(v: Value) -> Result<Self, redis::ParsingError> {
        let (requeued, failed, cancelled, retried) = redis::from_redis_value(v)?;
        Ok(RecoverReply {
            requeued,
            failed,
            cancelled,
            retried,
        })
    }
}

/// Settles the given tasks of shard `shard` if their deadlines passed (re-checked inside the
/// script).
pub(crate) async fn call(
    store: &RedisStore,
    shard: usize,
    mode: Mode,
    ids: &[String],
) -> Result<RecoveryReport, StoreError> {
    if ids.is_empty() {
        return Ok(RecoveryReport::default());
    }
    let core = &store.inner.core;
    let keys = &core.shards[shard].keys;
    // The script's per-task keys include the owner's index and the entrypoint's queue, so
    // read both first (one pipelined round trip; recovery is the rare path).
    let mut read = redis::pipe();
    for id in ids {
        read.cmd("HMGET")
            .arg(keys.task(id))
            .arg(fields::OWNER)
            .arg(fields::ENTRYPOINT);
    }
    let owners: Vec<(Option<String>, Option<String>)> = store.pipe(&read).await?;
    let mut invocation = core.scripts.recover.prepare_invoke();
    invocation
        .key(keys.leases())
        .key(keys.admissions())
        .key(keys.live())
        .key(&keys.retained())
        .arg(mode.as_str())
        .arg(ms(core.config.retention))
        .arg(keys.task_channel_prefix());
    for (id, (owner, entrypoint)) in ids.iter().zip(&owners) {
        // A task that vanished meanwhile: the script only drops its stale index entries, so
        // the owner keys it names are never touched.
        let owner = owner
            .as_deref()
            .and_then(OwnerHash::from_hex)
            .unwrap_or_else(OwnerHash::nobody);
        let entrypoint = entrypoint.as_deref().unwrap_or_default();
        invocation
            .key(keys.task(id))
            .key(keys.events(id))
            .key(keys.owner_index(&owner))
            .key(keys.owner_live(&owner))
            .key(keys.queue(entrypoint))
            .key(keys.wake(entrypoint))
            .key(&keys.push_of(id))
            .key(keys.failed(entrypoint))
            .arg(id);
    }
    let RecoverReply {
        requeued,
        failed,
        cancelled,
        retried,
    } = run(core, NAME, keys, &mut invocation).await?;
    let mut entrypoints: HashMap<String, String> = ids
        .iter()
        .zip(owners)
        .filter_map(|(id, (_, entrypoint))| entrypoint.map(|ep| (id.clone(), ep)))
        .collect();
    entrypoints.retain(|id, _| {
        requeued.contains(id)
            || failed.contains(id)
            || cancelled.contains(id)
            || retried.contains(id)
    });
    Ok(RecoveryReport {
        requeued,
        failed,
        cancelled,
        retried,
        entrypoints,
    })
}
