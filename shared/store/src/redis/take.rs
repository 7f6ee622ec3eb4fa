//! Taking queued tasks: peek the queue heads, then one `take.lua` call that claims what is
//! still queued (and, for `take_active`, activates it in the same call). The script also
//! returns the queue heads after the take; they are kept in [`Heads`] so that the worker's next
//! finish (`finish_take.lua`) can name candidate task keys without a read of its own. Concurrent takers of one process go through a single batch lane (see
//! [`super::batch`]), so they never race each other for the same queue head: one peek and one
//! script call serve every taker waiting at that moment. Only other processes compete, and a
//! candidate one of them took is simply skipped by the script.

use std::collections::HashMap;
use std::sync::Arc;

use super::shards::Shard;
use super::{Core, scripts};
use crate::{Activation, Claim, Started, StoreError};

/// What a take asks for; requests with equal keys share one peek and one script call.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct TakeKey {
    pub entrypoints: Vec<String>,
    pub holder: String,
    pub ttl_ms: u64,
    /// The run limit when the claims are activated in the same call (`take_active`).
    pub run_ms: Option<u64>,
}

#[derive(Clone)]
pub(crate) struct TakeRequest {
    pub key: TakeKey,
    pub max: usize,
}

/// A claim, activated when the request asked for it.
pub(crate) struct Taken {
    pub claim: Claim,
    pub activation: Option<Activation>,
}

impl Taken {
    pub fn started(self) -> Option<Started> {
        let Taken { claim, activation } = self;
        activation.map(|activation| Started { claim, activation })
    }
}

/// What one request got, and whether the queues held candidates (so that a taker who got
/// nothing looks again at once instead of waiting for the doorbell).
pub(crate) struct TakeOutcome {
    pub claims: Vec<Taken>,
    pub saw_candidates: bool,
}

/// Queue heads (task ids, oldest first) per entrypoint as the last take or finish of this
/// process saw them: the candidates of the next `finish_take.lua` call. Ids are taken out when
/// a call uses them, so concurrent calls try different ones; a stale id costs one HMGET.
#[derive(Default)]
pub(crate) struct Heads {
    by_entrypoint: std::sync::Mutex<HashMap<String, std::collections::VecDeque<String>>>,
}

impl Heads {
    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, std::collections::VecDeque<String>>> {
        // Held for map operations only, never across an await.
        self.by_entrypoint
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Up to `n` candidates per entrypoint, as (entrypoint index, id).
    pub fn pick(&self, entrypoints: &[String], n: usize) -> Vec<(usize, String)> {
        let mut heads = self.lock();
        let mut picked = Vec::new();
        for (index, entrypoint) in entrypoints.iter().enumerate() {
            if let Some(ids) = heads.get_mut(entrypoint) {
                let take = ids.len().min(n);
                picked.extend(ids.drain(..take).map(|id| (index, id)));
            }
        }
        picked
    }

    /// Replaces what is known of the queues of `entrypoints` with a script's `heads` reply.
    pub fn refresh(&self, entrypoints: &[String], heads: Vec<Vec<String>>) {
        let mut known = self.lock();
        for (entrypoint, ids) in entrypoints.iter().zip(heads) {
            known.insert(entrypoint.clone(), ids.into());
        }
    }
}

/// How many queue heads a call asks back: enough for every slot that `wanted` suggests may
/// finish before the next call, and more for the races with other processes.
pub(crate) fn heads_wanted(wanted: usize) -> usize {
    wanted.saturating_mul(2).clamp(8, 256)
}

/// Serves a batch of requests; requests that agree on entrypoints, holder and lease share one
/// peek and one script call, and the claims go to them in arrival order.
pub(crate) async fn take_batch(
    core: Arc<Core>,
    requests: Vec<TakeRequest>,
) -> Result<Vec<TakeOutcome>, StoreError> {
    let mut groups: HashMap<TakeKey, Vec<usize>> = HashMap::new();
    let mut order = Vec::new();
    for (index, request) in requests.iter().enumerate() {
        let members = groups.entry(request.key.clone()).or_default();
        if members.is_empty() {
            order.push(request.key.clone());
        }
        members.push(index);
    }
    let mut outcomes: Vec<Option<TakeOutcome>> = requests.iter().map(|_| None).collect();
    for key in order {
        let members = groups.remove(&key).unwrap_or_default();
        let wanted: usize = members.iter().map(|&i| requests[i].max).sum();
        let (mut claims, saw_candidates) = take_group(&core, &key, wanted).await?;
        claims.reverse();
        for index in members {
            let mut mine = Vec::new();
            while mine.len() < requests[index].max {
                match claims.pop() {
                    Some(claim) => mine.push(claim),
                    None => break,
                }
            }
            outcomes[index] = Some(TakeOutcome {
                claims: mine,
                saw_candidates,
            });
        }
    }
    Ok(outcomes
        .into_iter()
        .map(|outcome| {
            outcome.unwrap_or(TakeOutcome {
                claims: Vec::new(),
                saw_candidates: false,
            })
        })
        .collect())
}

/// Takes up to `wanted` for one group: peeks every shard's queues (one pipeline per shard, at
/// once), picks the `wanted` oldest candidates over all shards, and runs the take script in
/// each shard that holds some of them, oldest first. Queues are FIFO within a shard, and across
/// shards the task that has waited longest goes first, so no shard starves.
async fn take_group(
    core: &Core,
    key: &TakeKey,
    wanted: usize,
) -> Result<(Vec<Taken>, bool), StoreError> {
    let entrypoints = &key.entrypoints;
    // Peek more candidates than wanted: other processes race for the same queue heads.
    let window = wanted.saturating_mul(2).clamp(4, 1_000);
    let peeks = core
        .shards
        .iter()
        .map(|shard| {
            let mut peek = redis::pipe();
            for entrypoint in entrypoints {
                peek.cmd("ZRANGE")
                    .arg(shard.keys.queue(entrypoint))
                    .arg(0)
                    .arg(window - 1)
                    .arg("WITHSCORES");
            }
            peek
        })
        .collect();
    let peeked: Vec<Vec<Vec<(String, f64)>>> = core.pipe_per_shard(peeks).await?;
    // Every candidate as (enqueued at, shard, entrypoint index, id), oldest first.
    let mut candidates: Vec<(f64, usize, usize, String)> = peeked
        .into_iter()
        .enumerate()
        .flat_map(|(shard, queues)| {
            queues
                .into_iter()
                .enumerate()
                .flat_map(move |(queue, heads)| {
                    heads
                        .into_iter()
                        .map(move |(id, enqueued)| (enqueued, shard, queue, id))
                })
        })
        .collect();
    if candidates.is_empty() {
        return Ok((Vec::new(), false));
    }
    // Ties by id, as a sorted set orders them: one shard or many, the same order.
    candidates.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.3.cmp(&b.3)));
    // How many each shard should give, and the shards in the order of their oldest pick.
    let mut share = vec![0usize; core.shards.len()];
    let mut order = Vec::new();
    for (_, shard, _, _) in candidates.iter().take(wanted) {
        if share[*shard] == 0 {
            order.push(*shard);
        }
        share[*shard] += 1;
    }
    // One call per shard, all at once (each in its own slot); claims come back in the order
    // of each shard's oldest pick.
    let calls = order.into_iter().map(|shard| {
        // All of the shard's candidates, oldest first: the script skips those another process
        // took meanwhile and stops at the shard's share.
        let picks: Vec<(usize, &str)> = candidates
            .iter()
            .filter(|(_, s, _, _)| *s == shard)
            .map(|(_, _, queue, id)| (*queue, id.as_str()))
            .collect();
        let wanted = share[shard];
        async move { take_in_shard(core, &core.shards[shard], key, wanted, &picks).await }
    });
    let claims = futures::future::try_join_all(calls).await?;
    Ok((claims.into_iter().flatten().collect(), true))
}

/// One `take.lua` call in `shard`, over the candidates peeked there; keeps the heads it
/// returns when they are of use (a take that activates).
async fn take_in_shard(
    core: &Core,
    shard: &Shard,
    key: &TakeKey,
    wanted: usize,
    picks: &[(usize, &str)],
) -> Result<Vec<Taken>, StoreError> {
    let (claims, fresh) = scripts::take::call(core, shard, key, wanted, picks).await?;
    if key.run_ms.is_some() {
        shard.heads.refresh(&key.entrypoints, fresh);
    }
    Ok(claims)
}
