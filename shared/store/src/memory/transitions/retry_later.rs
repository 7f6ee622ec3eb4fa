//! `retry_later.lua` in memory: the lease holder ends its run with a failure that asked for
//! another attempt: active -> backoff, until its due time.

use crate::memory::state::State;
use crate::{Lease, Phase};
use protocol::{TaskError, Timestamp};

impl State {
    /// `active -> backoff` under `lease` (see [`crate::TaskStore::retry_later`]).
    pub(in crate::memory) fn retry_later(
        &mut self,
        lease: &Lease,
        error: &TaskError,
        delay_ms: u64,
        now: u64,
    ) -> bool {
        let Some(entry) = self.tasks.get_mut(&lease.task_id) else {
            return false;
        };
        if !entry.holds(lease, now) || entry.stored.phase != Phase::Active {
            return false;
        }
        let stored = &mut entry.stored;
        stored.phase = Phase::Backoff;
        stored.lease = None;
        stored.run_deadline_ms = None;
        // The due time lives where a waiting task's deadline does: the sweeps read it there.
        stored.admission_expires_at_ms = Some(now.saturating_add(delay_ms));
        stored.retries = stored.retries.saturating_add(1);
        stored.last_error = Some(Box::new(error.clone()));
        stored.task.updated_at = Timestamp(now);
        self.reindex(&lease.task_id);
        true
    }
}
