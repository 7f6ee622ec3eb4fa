//! `take.lua` in memory: claims queued tasks of some entrypoints for a worker, one per
//! entrypoint in turn, up to a maximum.

use std::collections::VecDeque;

use crate::memory::state::State;
use crate::{Claim, Phase};

impl State {
    /// Pops queued tasks of `entrypoints`, one per entrypoint in turn, and claims up to `max`.
    pub(in crate::memory) fn take(
        &mut self,
        entrypoints: &[String],
        holder: &str,
        ttl_ms: u64,
        max: usize,
        now: u64,
    ) -> Vec<Claim> {
        self.purge(now);
        let mut claims = Vec::new();
        let mut progressed = true;
        while claims.len() < max && progressed {
            progressed = false;
            for entrypoint in entrypoints {
                if claims.len() >= max {
                    break;
                }
                let Some(task_id) = self
                    .queues
                    .get_mut(entrypoint)
                    .and_then(VecDeque::pop_front)
                else {
                    continue;
                };
                progressed = true;
                let queued = self
                    .tasks
                    .get(&task_id)
                    .is_some_and(|entry| entry.stored.phase == Phase::Queued);
                if queued && let Some(claim) = self.claim(&task_id, holder, ttl_ms, now) {
                    claims.push(claim);
                }
            }
        }
        claims
    }
}
