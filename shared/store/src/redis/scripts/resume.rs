//! `resume.lua`: the owner answers a waiting task: waiting -> queued, with the invocation the
//! caller built from the record it read (new input and metadata) and that record's turn
//! appended to `tu` (user JSON never passes through Lua's cjson). The caller read the record at
//! an expected sequence number; any event since (another resume, a cancel) makes this one
//! STALE, and the caller reads again. Attempts count afresh. Logs and publishes
//! `statusUpdate running`.
//!
//! KEYS: task, events, queue, wake, leases, admissions, the task's push keys
//! (`Keys::push_of`).
//! ARGV: task id, owner hash, expected seq, invocation json, turn json, channel, event log
//! length.
//! Reply: `{1, updated, seq}` | `{0, 'NOT_FOUND'}` | `{0, 'STALE'}` |
//! `{0, 'NOT_WAITING', status, context, created, updated, result, error}`.

use protocol::Task;
use protocol::token::OwnerHash;
use redis::Value;

use super::{run, to_json};
use crate::lua::lua_script;
use crate::redis::{Core, replies};
use crate::{Invocation, StoreError};

lua_script!("resume");

/// What `resume.lua` answered.
#[derive(Debug, Clone)]
pub(crate) enum ResumeReply {
    /// Queued again, at `updated` (ms), with the event numbered `seq`.
    Queued {
        updated: u64,
        seq: u64,
    },
    /// The task changed since the caller's read: read again.
    Stale,
    /// The task is not waiting; as it stands (`None`: gone). [`call`] fills in its id.
    NotWaiting(Option<Box<Task>>),
    NotFound,
}

impl redis::FromRedisValue for ResumeReply {
    fn from_redis_value(v: Value) -> Result<Self, redis::ParsingError> {
        let reply: Vec<Option<String>> = redis::from_redis_value(v)?;
        let head = reply.first().cloned().flatten().unwrap_or_default();
        let reason = reply.get(1).cloned().flatten().unwrap_or_default();
        Ok(match (head.as_str(), reason.as_str()) {
            ("1", updated) => {
                let bad = || redis::ParsingError::from("resume: bad reply");
                let updated = updated.parse().map_err(|_| bad())?;
                let seq = reply
                    .get(2)
                    .cloned()
                    .flatten()
                    .and_then(|seq| seq.parse().ok())
                    .ok_or_else(bad)?;
                ResumeReply::Queued { updated, seq }
            }
            (_, "STALE") => ResumeReply::Stale,
            (_, "NOT_WAITING") if reply.len() == 8 => ResumeReply::NotWaiting(
                replies::task_view("", &reply[2..])
                    .map_err(super::misfit)?
                    .map(Box::new),
            ),
            _ => ResumeReply::NotFound,
        })
    }
}

/// Queues waiting task `task_id` of `owner` again with `invocation`, appending `turn`, if its
/// record is still at `seq`.
pub(crate) async fn call(
    core: &Core,
    task_id: &str,
    owner: &OwnerHash,
    seq: u64,
    invocation: &Invocation,
    turn: &serde_json::Value,
) -> Result<ResumeReply, StoreError> {
    let keys = &core.shard_of(task_id).keys;
    let mut call = core.scripts.resume.prepare_invoke();
    call.key(keys.task(task_id))
        .key(keys.events(task_id))
        .key(keys.queue(&invocation.entrypoint))
        .key(keys.wake(&invocation.entrypoint))
        .key(keys.leases())
        .key(keys.admissions())
        .key(&keys.push_of(task_id))
        .arg(task_id)
        .arg(owner.as_str())
        .arg(seq)
        .arg(to_json(invocation)?)
        .arg(to_json(turn)?)
        .arg(keys.task_channel(owner, task_id))
        .arg(core.config.event_log_len);
    let mut reply = run(core, NAME, keys, &mut call).await?;
    if let ResumeReply::NotWaiting(Some(task)) = &mut reply {
        task.task_id = task_id.to_owned();
    }
    Ok(reply)
}
