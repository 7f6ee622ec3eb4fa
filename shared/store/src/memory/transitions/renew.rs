//! `renew.lua` in memory: extends live leases (a prepared claim alone, or any lease: the
//! worker heartbeat); an expired lease is never revived.

use crate::memory::state::State;
use crate::{Lease, Phase};

impl State {
    pub(in crate::memory) fn renew_execution_claim(
        &mut self,
        lease: &Lease,
        ttl_ms: u64,
        now: u64,
    ) -> bool {
        self.renew(lease, ttl_ms, now, &[Phase::Prepared])
    }

    pub(in crate::memory) fn renew_leases(
        &mut self,
        leases: &[Lease],
        ttl_ms: u64,
        now: u64,
    ) -> Vec<bool> {
        leases
            .iter()
            .map(|lease| self.renew(lease, ttl_ms, now, &[Phase::Prepared, Phase::Active]))
            .collect()
    }

    fn renew(&mut self, lease: &Lease, ttl_ms: u64, now: u64, phases: &[Phase]) -> bool {
        let Some(entry) = self.tasks.get_mut(&lease.task_id) else {
            return false;
        };
        if !entry.holds(lease, now) || !phases.contains(&entry.stored.phase) {
            return false;
        }
        if let Some(current) = entry.stored.lease.as_mut() {
            current.expires_at_ms = now.saturating_add(ttl_ms);
        }
        self.reindex(&lease.task_id);
        true
    }
}
