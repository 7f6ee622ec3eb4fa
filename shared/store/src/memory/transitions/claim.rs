//! `claim.lua` in memory: a prepared lease on one task by id (`claim_execution`), and the
//! claim itself, which `take.rs` shares: a new epoch, `prepared`, out of its queue.

use crate::memory::state::State;
use crate::{Claim, Lease, Phase, Transition};
use protocol::TaskStatus;

impl State {
    pub(in crate::memory) fn claim_execution(
        &mut self,
        task_id: &str,
        holder: &str,
        ttl_ms: u64,
        now: u64,
    ) -> Option<Claim> {
        self.purge(now);
        let entry = self.tasks.get(task_id)?;
        if entry.stored.task.status == TaskStatus::Running && entry.admission_expired(now) {
            self.apply(task_id, Transition::cancelled(), now);
            return None;
        }
        self.claim(task_id, holder, ttl_ms, now)
    }

    /// Claims a running task without a live lease: new epoch, `prepared`.
    pub(in crate::memory) fn claim(
        &mut self,
        task_id: &str,
        holder: &str,
        ttl_ms: u64,
        now: u64,
    ) -> Option<Claim> {
        let entry = self.tasks.get_mut(task_id)?;
        // An active task whose lease expired belongs to recovery, which counts its attempts.
        // A waiting task runs again only when its owner resumes it. A claim held for a
        // settlement stays its admission's, expired or not.
        if entry.stored.task.status != TaskStatus::Running
            || matches!(
                entry.stored.phase,
                Phase::Active | Phase::Waiting | Phase::Backoff
            )
            || entry.stored.settlement_held
            || entry.has_live_lease(now)
        {
            return None;
        }
        let was_queued = entry.stored.phase == Phase::Queued;
        entry.epoch += 1;
        let stored = &mut entry.stored;
        let lease = Lease {
            task_id: task_id.to_owned(),
            task_owner: stored.owner.clone(),
            entrypoint: stored.invocation.entrypoint.clone(),
            holder: holder.to_owned(),
            epoch: entry.epoch,
            expires_at_ms: now.saturating_add(ttl_ms),
        };
        stored.lease = Some(lease.clone());
        stored.phase = Phase::Prepared;
        stored.admission_expires_at_ms = None;
        let claim = Claim {
            lease,
            owner: stored.owner.clone(),
            invocation: stored.invocation.clone(),
            previous_attempts: stored.attempt,
            max_attempts: stored.max_attempts,
            created_at_ms: stored.task.created_at.0,
        };
        if was_queued {
            let entrypoint = stored.invocation.entrypoint.clone();
            self.unqueue(&entrypoint, task_id);
        }
        self.reindex(task_id);
        Some(claim)
    }
}
