//! `resume.lua` in memory: the owner answers a waiting task: waiting -> queued with the new
//! input, the request it answers kept as a turn.

use serde_json::Value;

use crate::memory::state::State;
use crate::{Phase, Resumed};
use protocol::token::OwnerHash;
use protocol::{TaskEvent, TaskStatus, Timestamp};

impl State {
    /// `waiting -> queued` with a new input (see [`crate::TaskStore::resume`]).
    pub(in crate::memory) fn resume(
        &mut self,
        task_id: &str,
        owner: &OwnerHash,
        input: Value,
        metadata: Option<Value>,
        now: u64,
    ) -> Resumed {
        self.purge(now);
        let log_len = self.limits.event_log_len;
        let Some(entry) = self.tasks.get_mut(task_id) else {
            return Resumed::NotFound;
        };
        if &entry.stored.owner != owner {
            return Resumed::NotFound;
        }
        if entry.stored.task.status != TaskStatus::Running || entry.stored.phase != Phase::Waiting {
            return Resumed::NotWaiting(entry.task());
        }
        let stored = &mut entry.stored;
        let request = stored.input_request.take();
        let turn = crate::turn_of(&stored.invocation, request.as_ref());
        stored.turns.push(turn);
        stored.admission_expires_at_ms = None;
        stored.invocation.input = input;
        stored.invocation.metadata = metadata;
        stored.attempt = 0;
        stored.retries = 0;
        stored.last_error = None;
        stored.task.updated_at = Timestamp(now);
        let task = stored.task.clone();
        let seq = entry.publish(TaskEvent::status(&task).into(), log_len);
        self.enqueue(task_id);
        self.reindex(task_id);
        Resumed::Queued { task, seq }
    }
}
