//! `emit.lua` in memory: a lease holder appends a custom event to its task's log. Fenced.

use crate::memory::state::State;
use crate::{EventPayload, Lease, Phase};

impl State {
    pub(in crate::memory) fn emit(
        &mut self,
        lease: &Lease,
        payload: EventPayload,
        now: u64,
    ) -> Option<u64> {
        let log_len = self.limits.event_log_len;
        let entry = self.tasks.get_mut(&lease.task_id)?;
        let phase_ok = matches!(entry.stored.phase, Phase::Prepared | Phase::Active);
        (entry.holds(lease, now) && phase_ok).then(|| entry.publish(payload, log_len))
    }
}
