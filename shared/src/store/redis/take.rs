//! Taking queued tasks: peek the queue heads, then one `take.lua` call that claims what is
//! still queued. Concurrent takers of one process go through a single batch lane (see
//! [`super::batch`]), so they never race each other for the same queue head: one peek and one
//! script call serve every taker waiting at that moment. Only other processes compete, and a
//! candidate one of them took is simply skipped by the script.

use std::collections::HashMap;
use std::sync::Arc;

use redis::Value;

use super::{Core, replies};
use crate::store::{Claim, StoreError};

#[derive(Clone)]
pub(crate) struct TakeRequest {
    pub entrypoints: Vec<String>,
    pub holder: String,
    pub ttl_ms: u64,
    pub max: usize,
}

/// What one request got, and whether the queues held candidates (so that a taker who got
/// nothing looks again at once instead of waiting for the doorbell).
pub(crate) struct TakeOutcome {
    pub claims: Vec<Claim>,
    pub saw_candidates: bool,
}

/// Serves a batch of requests; requests that agree on entrypoints, holder and lease share one
/// peek and one script call, and the claims go to them in arrival order.
pub(crate) async fn take_batch(
    core: Arc<Core>,
    requests: Vec<TakeRequest>,
) -> Result<Vec<TakeOutcome>, StoreError> {
    let mut groups: HashMap<(Vec<String>, String, u64), Vec<usize>> = HashMap::new();
    let mut order = Vec::new();
    for (index, request) in requests.iter().enumerate() {
        let key = (
            request.entrypoints.clone(),
            request.holder.clone(),
            request.ttl_ms,
        );
        let members = groups.entry(key.clone()).or_default();
        if members.is_empty() {
            order.push(key);
        }
        members.push(index);
    }
    let mut outcomes: Vec<Option<TakeOutcome>> = requests.iter().map(|_| None).collect();
    for key in order {
        let members = groups.remove(&key).unwrap_or_default();
        let (entrypoints, holder, ttl_ms) = key;
        let wanted: usize = members.iter().map(|&i| requests[i].max).sum();
        let (mut claims, saw_candidates) =
            take_group(&core, &entrypoints, &holder, ttl_ms, wanted).await?;
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

async fn take_group(
    core: &Core,
    entrypoints: &[String],
    holder: &str,
    ttl_ms: u64,
    wanted: usize,
) -> Result<(Vec<Claim>, bool), StoreError> {
    let keys = &core.keys;
    // Peek more candidates than wanted: other processes race for the same queue heads.
    let window = wanted.saturating_mul(2).clamp(4, 1_000);
    let mut peek = redis::pipe();
    for entrypoint in entrypoints {
        peek.cmd("ZRANGE")
            .arg(keys.queue(entrypoint))
            .arg(0)
            .arg(window - 1);
    }
    let heads: Vec<Vec<String>> = core.pipe(&peek).await?;
    if heads.iter().all(Vec::is_empty) {
        return Ok((Vec::new(), false));
    }
    let mut invocation = core.scripts.take.prepare_invoke();
    invocation.key(keys.leases());
    for entrypoint in entrypoints {
        invocation.key(keys.queue(entrypoint));
    }
    invocation
        .arg(holder)
        .arg(ttl_ms)
        .arg(wanted)
        .arg(entrypoints.len());
    for (index, ids) in heads.iter().enumerate() {
        for id in ids {
            invocation.key(keys.task(id)).arg(index + 1).arg(id);
        }
    }
    let flat: Vec<Value> = core.eval("take", &invocation).await?;
    let claims = flat
        .chunks(9)
        .map(|chunk| replies::claim(holder, chunk))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((claims, true))
}
