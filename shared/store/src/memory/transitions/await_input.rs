//! `await_input.lua` in memory: the lease holder ends its run without finishing the task:
//! active -> waiting, until the owner resumes it or its waiting deadline passes.

use serde_json::Value;

use crate::memory::state::State;
use crate::{EventPayload, Lease, Phase};
use protocol::Timestamp;

impl State {
    /// `active -> waiting` under `lease` (see [`crate::TaskStore::await_input`]).
    pub(in crate::memory) fn await_input(
        &mut self,
        lease: &Lease,
        request: Value,
        patience_ms: u64,
        now: u64,
    ) -> bool {
        let log_len = self.limits.event_log_len;
        let Some(entry) = self.tasks.get_mut(&lease.task_id) else {
            return false;
        };
        if !entry.holds(lease, now) || entry.stored.phase != Phase::Active {
            return false;
        }
        let stored = &mut entry.stored;
        stored.phase = Phase::Waiting;
        stored.lease = None;
        stored.run_deadline_ms = None;
        // The waiting deadline lives where an admission's does: the sweeps read it there.
        stored.admission_expires_at_ms = Some(now.saturating_add(patience_ms));
        stored.task.updated_at = Timestamp(now);
        let data = crate::input_required_data(&lease.task_id, &request);
        stored.input_request = Some(request);
        entry.publish(
            EventPayload {
                event: crate::INPUT_REQUIRED_EVENT.to_owned(),
                data,
            },
            log_len,
        );
        self.reindex(&lease.task_id);
        true
    }
}
