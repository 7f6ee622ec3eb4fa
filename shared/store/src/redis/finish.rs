//! Finishing a task and taking the next ones in one call (`finish_take.lua`): the fenced
//! terminal writes of concurrent finishes of this process go out together, and the same call
//! claims and activates the next queued tasks for the slots they free, popping them from the
//! shard's queues in the script (no read precedes the call, and no process races another for a
//! queue head); what the call claims goes to the finishes that asked, in arrival order.

use std::collections::HashMap;
use std::sync::Arc;

use super::scripts::cas::CasReply;
use super::scripts::finish_take;
use super::shards::Shard;
use super::take::{TakeKey, Taken};
use super::{Core, ScriptItem};
use crate::StoreError;

pub(crate) struct FinishRequest {
    /// The compare-and-set item, as `cas.lua` takes it (5 keys, 11 values).
    pub item: ScriptItem,
    /// What to take for the finishing worker; `None` takes nothing.
    pub take: Option<(TakeKey, usize)>,
}

pub(crate) struct FinishOutcome {
    /// The item's `cas.lua` reply.
    pub swap: CasReply,
    pub next: Vec<Taken>,
    /// The queues still held tasks after the call.
    pub more_queued: bool,
}

/// Serves a batch of finishes of tasks in shard `shard`: one script call per distinct take (in
/// practice one per worker process).
pub(crate) async fn finish_batch(
    core: Arc<Core>,
    shard: usize,
    requests: Vec<FinishRequest>,
) -> Result<Vec<FinishOutcome>, StoreError> {
    let mut groups: HashMap<Option<TakeKey>, Vec<usize>> = HashMap::new();
    let mut order = Vec::new();
    for (index, request) in requests.iter().enumerate() {
        let key = request.take.as_ref().map(|(key, _)| key.clone());
        let members = groups.entry(key.clone()).or_default();
        if members.is_empty() {
            order.push(key);
        }
        members.push(index);
    }
    let mut outcomes: Vec<Option<FinishOutcome>> = requests.iter().map(|_| None).collect();
    for key in order {
        let members = groups.remove(&key).unwrap_or_default();
        let wanted: usize = members
            .iter()
            .map(|&i| requests[i].take.as_ref().map_or(0, |(_, max)| *max))
            .sum();
        let items: Vec<&ScriptItem> = members.iter().map(|&i| &requests[i].item).collect();
        let (swaps, mut claims, more_queued) =
            finish_group(&core, &core.shards[shard], key.as_ref(), &items, wanted).await?;
        if swaps.len() != members.len() {
            return Err(StoreError::Corrupt("finish reply arity".into()));
        }
        claims.reverse();
        for (index, swap) in members.into_iter().zip(swaps) {
            let max = requests[index].take.as_ref().map_or(0, |(_, max)| *max);
            let mut next = Vec::new();
            while next.len() < max {
                match claims.pop() {
                    Some(claim) => next.push(claim),
                    None => break,
                }
            }
            outcomes[index] = Some(FinishOutcome {
                swap,
                next,
                more_queued,
            });
        }
    }
    outcomes
        .into_iter()
        .map(|outcome| outcome.ok_or_else(|| StoreError::Corrupt("finish lost an item".into())))
        .collect()
}

async fn finish_group(
    core: &Core,
    shard: &Shard,
    take: Option<&TakeKey>,
    items: &[&ScriptItem],
    wanted: usize,
) -> Result<(Vec<CasReply>, Vec<Taken>, bool), StoreError> {
    let sent = shard.hints.mark();
    let (swaps, claims, more) = finish_take::call(core, shard, take, items, wanted).await?;
    let Some(key) = take else {
        return Ok((swaps, Vec::new(), false));
    };
    // Even a take of none (a finish that leaves the take to the shards' turn) reports whether
    // the queues hold tasks.
    shard.hints.saw(&key.entrypoints, more, sent);
    Ok((swaps, claims, more))
}
