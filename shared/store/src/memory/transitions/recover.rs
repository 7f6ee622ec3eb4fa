//! `recover.lua` (and `due.lua`) in memory: settles tasks whose deadline passed, earliest
//! first: an expired reservation or pre-hand-off claim is cancelled, a claim after hand-off
//! requeued, an expired active lease requeued or failed (run deadline, attempts), a due
//! backoff queued, a waiting task past its deadline failed. `reap` is the same rule without
//! requeueing expired leases.

use crate::memory::state::State;
use crate::{Phase, RecoveryReport, Transition};
use protocol::{ErrorCode, TaskError};

impl State {
    pub(in crate::memory) fn recover_expired(&mut self, limit: usize, now: u64) -> RecoveryReport {
        self.purge(now);
        let mut report = RecoveryReport::default();
        for task_id in self.due_by(now).into_iter().take(limit) {
            let Some(entry) = self.tasks.get(&task_id) else {
                continue;
            };
            let stored = &entry.stored;
            if stored.settlement_held {
                // Never indexed as due (`Entry::due`); settled only by its settlement.
                self.reindex(&task_id);
                continue;
            }
            report
                .entrypoints
                .insert(task_id.clone(), stored.invocation.entrypoint.clone());
            if entry.input_expired(now) {
                self.apply(&task_id, Transition::failed(input_timeout()), now);
                report.failed.push(task_id);
                continue;
            }
            if entry.reapable(now) {
                self.apply(&task_id, Transition::cancelled(), now);
                report.cancelled.push(task_id);
                continue;
            }
            if entry.backoff_over(now) {
                self.enqueue(&task_id);
                self.reindex(&task_id);
                report.retried.push(task_id);
                continue;
            }
            match stored.phase {
                Phase::Prepared => {
                    self.enqueue(&task_id);
                    self.reindex(&task_id);
                    report.requeued.push(task_id);
                }
                Phase::Active => {
                    let timed_out = stored
                        .run_deadline_ms
                        .is_some_and(|deadline| now >= deadline);
                    let error = if timed_out {
                        Some(TaskError::new(
                            ErrorCode::TaskTimeout.as_str(),
                            format!("Task exceeded its {}ms execution limit", entry.max_run_ms),
                        ))
                    } else if stored.attempt.saturating_sub(stored.retries) >= stored.max_attempts {
                        Some(TaskError::new(
                            ErrorCode::TaskAttemptsExhausted.as_str(),
                            format!("Task was abandoned by its worker {} times", stored.attempt),
                        ))
                    } else {
                        None
                    };
                    match error {
                        Some(error) => {
                            self.apply(&task_id, Transition::failed(error), now);
                            report.failed.push(task_id);
                        }
                        None => {
                            self.enqueue(&task_id);
                            self.reindex(&task_id);
                            report.requeued.push(task_id);
                        }
                    }
                }
                // A lease in any other phase is not something a store transition produces;
                // drop it so the task is claimable again.
                Phase::Reserved
                | Phase::Queued
                | Phase::Waiting
                | Phase::Backoff
                | Phase::Terminal => {
                    if let Some(entry) = self.tasks.get_mut(&task_id) {
                        entry.stored.lease = None;
                    }
                    report.entrypoints.remove(&task_id);
                    self.reindex(&task_id);
                }
            }
        }
        report
    }

    /// Cancels what the reaping rule covers; returns how many.
    pub(in crate::memory) fn reap(&mut self, now: u64) -> u64 {
        let mut reaped = 0;
        for task_id in self.due_by(now) {
            if self
                .tasks
                .get(&task_id)
                .is_some_and(|entry| entry.input_expired(now))
            {
                self.apply(&task_id, Transition::failed(input_timeout()), now);
                reaped += 1;
                continue;
            }
            if self
                .tasks
                .get(&task_id)
                .is_some_and(|entry| entry.reapable(now))
            {
                self.apply(&task_id, Transition::cancelled(), now);
                reaped += 1;
                continue;
            }
            // A due backoff is queued by either sweep, as the Redis store's does.
            if self
                .tasks
                .get(&task_id)
                .is_some_and(|entry| entry.backoff_over(now))
            {
                self.enqueue(&task_id);
                self.reindex(&task_id);
            }
        }
        reaped
    }

    /// Ids whose lease or admission deadline has passed, earliest first.
    fn due_by(&self, now: u64) -> Vec<String> {
        self.due
            .range(..=(now, u64::MAX))
            .map(|(_, task_id)| task_id.clone())
            .collect()
    }
}

/// The failure of a waiting task whose caller did not answer in time.
fn input_timeout() -> TaskError {
    TaskError::new(
        crate::INPUT_TIMEOUT,
        "No input arrived before the task's waiting deadline",
    )
}
