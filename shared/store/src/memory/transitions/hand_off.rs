//! `hand_off.lua` in memory: a prepared claim taken before hand-off puts its task in the
//! entrypoint's ready queue. Fenced.

use crate::memory::state::State;
use crate::{Lease, Phase};

impl State {
    pub(in crate::memory) fn hand_off(&mut self, lease: &Lease, now: u64) -> bool {
        let Some(entry) = self.tasks.get(&lease.task_id) else {
            return false;
        };
        if !entry.holds(lease, now) || entry.stored.phase != Phase::Prepared {
            return false;
        }
        self.enqueue(&lease.task_id);
        self.reindex(&lease.task_id);
        true
    }
}
