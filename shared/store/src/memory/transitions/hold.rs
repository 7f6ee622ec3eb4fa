//! `hold.lua` in memory: a paid admission holds its prepared claim for the settlement it is
//! about to ask for (no sweep cancels or requeues it meanwhile).

use crate::memory::state::State;
use crate::{Lease, Phase};

impl State {
    /// See [`crate::TaskStore::hold_for_settlement`].
    pub(in crate::memory) fn hold_for_settlement(&mut self, lease: &Lease, now: u64) -> bool {
        let Some(entry) = self.tasks.get_mut(&lease.task_id) else {
            return false;
        };
        if !entry.holds(lease, now) || entry.stored.phase != Phase::Prepared {
            return false;
        }
        entry.stored.settlement_held = true;
        self.reindex(&lease.task_id);
        true
    }
}
