//! `activate.lua` in memory: prepared -> active under a live claim: counts an attempt and
//! starts the run deadline. A claim held for a settlement is not activated.

use crate::memory::state::State;
use crate::{Activation, Lease, Phase};

impl State {
    pub(in crate::memory) fn activate_execution(
        &mut self,
        lease: &Lease,
        ttl_ms: u64,
        max_run_ms: u64,
        now: u64,
    ) -> Option<Activation> {
        let entry = self.tasks.get_mut(&lease.task_id)?;
        if !entry.holds(lease, now)
            || entry.stored.phase != Phase::Prepared
            || entry.stored.settlement_held
        {
            return None;
        }
        let stored = &mut entry.stored;
        let current = stored.lease.as_mut()?;
        current.expires_at_ms = now.saturating_add(ttl_ms);
        stored.phase = Phase::Active;
        stored.attempt = stored.attempt.saturating_add(1);
        stored.admission_expires_at_ms = None;
        let run_deadline_ms = now.saturating_add(max_run_ms);
        stored.run_deadline_ms = Some(run_deadline_ms);
        entry.max_run_ms = max_run_ms;
        let activation = Activation {
            lease: current.clone(),
            attempt: stored.attempt,
            run_deadline_ms,
        };
        self.reindex(&lease.task_id);
        Some(activation)
    }
}
