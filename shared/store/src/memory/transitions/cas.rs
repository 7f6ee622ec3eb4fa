//! `cas.lua` in memory: compare-and-set of a task's status, optionally fenced by a lease; a
//! terminal task never runs again. Also who holds the lease (a cancellation tells it).

use crate::memory::state::State;
use crate::{CasOutcome, Lease, Rejection, Transition};
use protocol::TaskStatus;

impl State {
    pub(in crate::memory) fn compare_and_set(
        &mut self,
        task_id: &str,
        expected: &[TaskStatus],
        next: Transition,
        fence: Option<&Lease>,
        now: u64,
    ) -> CasOutcome {
        self.purge(now);
        let Some(entry) = self.tasks.get(task_id) else {
            return CasOutcome::Rejected {
                reason: Rejection::NotFound,
                current: None,
            };
        };
        // A terminal task never runs again, whatever `expected` says.
        let reason = if !expected.contains(&entry.stored.task.status)
            || (entry.stored.task.status.is_terminal() && !next.status.is_terminal())
        {
            Some(Rejection::Status)
        } else if fence.is_some_and(|lease| lease.task_id != task_id || !entry.holds(lease, now)) {
            Some(Rejection::Fenced)
        } else {
            None
        };
        match reason {
            Some(reason) => CasOutcome::Rejected {
                reason,
                current: Some(entry.task()),
            },
            None => match self.apply(task_id, next, now) {
                Some(task) => CasOutcome::Applied(task),
                None => CasOutcome::Rejected {
                    reason: Rejection::NotFound,
                    current: None,
                },
            },
        }
    }

    /// Who holds the task's lease, if anyone.
    pub(in crate::memory) fn lease_holder(&self, task_id: &str) -> Option<String> {
        let entry = self.tasks.get(task_id)?;
        entry
            .stored
            .lease
            .as_ref()
            .map(|lease| lease.holder.clone())
    }
}
