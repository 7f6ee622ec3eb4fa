//! The deadline sweeps ([`crate::TaskStore::recover_expired`],
//! [`crate::TaskStore::reap_expired_admissions`]): every shard's due ids (`due.lua`), the
//! earliest over all shards first, then each shard's settlement (`recover.lua`), at once.

use super::RedisStore;
use super::scripts::due::{self, DueReply};
use super::scripts::recover::{self, Mode};
use crate::{RecoveryReport, StoreError};

impl RedisStore {
    /// Runs `recover.lua` over the due ids in `mode`: the `limit` earliest deadlines over
    /// every shard, each shard's in one call.
    pub(super) async fn settle_due(
        &self,
        mode: Mode,
        limit: usize,
    ) -> Result<RecoveryReport, StoreError> {
        let shards = self.inner.core.shards.len();
        // Every shard's due ids at once, then every shard's settlement at once (a shard with
        // nothing due costs no call).
        let per_shard = futures::future::try_join_all(
            (0..shards).map(|shard| due::call(&self.inner.core, shard, limit)),
        )
        .await?;
        let mut due: Vec<(f64, usize, String)> = per_shard
            .into_iter()
            .enumerate()
            .flat_map(|(shard, DueReply(ids))| {
                ids.into_iter()
                    .map(move |(id, deadline)| (deadline, shard, id))
            })
            .collect();
        due.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.2.cmp(&b.2)));
        due.truncate(limit.max(1));
        let settlements = futures::future::try_join_all((0..shards).map(|shard| {
            let ids: Vec<String> = due
                .iter()
                .filter(|(_, s, _)| *s == shard)
                .map(|(_, _, id)| id.clone())
                .collect();
            async move { recover::call(self, shard, mode, &ids).await }
        }))
        .await?;
        let mut report = RecoveryReport::default();
        for settled in settlements {
            report.requeued.extend(settled.requeued);
            report.failed.extend(settled.failed);
            report.cancelled.extend(settled.cancelled);
            report.retried.extend(settled.retried);
            report.entrypoints.extend(settled.entrypoints);
        }
        if shards > 1 {
            // Earliest deadline first, as one shard's sweep reports them.
            let rank = |id: &String| due.iter().position(|(_, _, due)| due == id);
            report.requeued.sort_by_key(rank);
            report.failed.sort_by_key(rank);
            report.cancelled.sort_by_key(rank);
            report.retried.sort_by_key(rank);
        }
        Ok(report)
    }

    /// Reaps the due admissions of shard `shard` (a create that met its full capacity);
    /// returns how many it cancelled.
    pub(super) async fn reap_shard(&self, shard: usize) -> Result<usize, StoreError> {
        let DueReply(due) = due::call(&self.inner.core, shard, 1_000).await?;
        let due: Vec<String> = due.into_iter().map(|(id, _)| id).collect();
        Ok(recover::call(self, shard, Mode::Reap, &due)
            .await?
            .cancelled
            .len())
    }

    /// Reaps task `task_id` if its admission expired (a claim found it so).
    pub(super) async fn reap_one(&self, task_id: &str) -> Result<(), StoreError> {
        let shard = self.inner.core.shard_of(task_id).index;
        recover::call(self, shard, Mode::Reap, &[task_id.to_owned()]).await?;
        Ok(())
    }
}
