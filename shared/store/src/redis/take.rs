//! Taking queued tasks: one `take.lua` call per shard visited, which pops what it claims from
//! the queues (and, for `take_active`, activates it in the same call). Nothing is read before
//! the call, so no two processes race for a queue head and no claim fails. Concurrent takers of
//! one process go through a single batch lane (see [`super::batch`]): one script call serves
//! every taker waiting at that moment.
//!
//! With several shards a take visits only the shards whose queues may hold work ([`Hints`]),
//! starting at a different one each time, and stops once it has what it wanted: a batch
//! carries one shard's work in the usual case, and empty shards cost nothing. Order is FIFO per
//! entrypoint within a shard; across shards the turns keep every shard served.

use std::collections::HashMap;
use std::sync::Arc;

use super::{Core, scripts};
use crate::{Activation, Claim, Started, StoreError};

/// What a take asks for; requests with equal keys share one script call.
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

/// What one request got, and whether a queue it took from still holds tasks (so that a taker
/// who got fewer than it asked for looks again at once instead of waiting for the doorbell).
pub(crate) struct TakeOutcome {
    pub claims: Vec<Taken>,
    pub more: bool,
}

/// Which of a shard's queues this process believes may hold tasks, per entrypoint: what lets a
/// take (or a finish that takes) visit only the shards with work instead of paying a call per
/// shard. An entrypoint not in the map is unknown, which counts as "may have": a process starts
/// knowing nothing, and a doorbell wait that times out forgets what it knew (a sweep), so a
/// task no ring announced to this process is still found within one idle wait.
/// Set by a doorbell ring of the entrypoint in this shard and by every take or finish that
/// leaves tasks queued; cleared by one that leaves the queues empty, unless a ring was heard
/// while that call was under way: the reply may predate the task the ring announced, and the
/// ring is spent (popped), so clearing then would leave the task to the next idle timeout.
#[derive(Default)]
pub(crate) struct Hints {
    by_entrypoint: std::sync::Mutex<HashMap<String, bool>>,
    /// Rings heard in this shard so far ([`Hints::mark`]).
    rings: std::sync::atomic::AtomicU64,
}

/// The rings a shard had heard when a take or finish was sent ([`Hints::saw`]).
#[derive(Clone, Copy)]
pub(crate) struct RingMark(u64);

impl Hints {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, bool>> {
        // Held for map operations only, never across an await.
        self.by_entrypoint
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// True when a queue of one of `entrypoints` may hold tasks.
    pub fn may_have_work(&self, entrypoints: &[String]) -> bool {
        let known = self.lock();
        entrypoints
            .iter()
            .any(|entrypoint| known.get(entrypoint).copied().unwrap_or(true))
    }

    /// Taken before a take or finish is sent, for its [`Hints::saw`].
    pub fn mark(&self) -> RingMark {
        RingMark(self.rings.load(std::sync::atomic::Ordering::SeqCst))
    }

    /// What a take or finish over `entrypoints`, sent at `sent`, saw: `more` when their queues
    /// still hold tasks. An empty reply changes nothing when a ring came after `sent`.
    pub fn saw(&self, entrypoints: &[String], more: bool, sent: RingMark) {
        let mut known = self.lock();
        if !more && self.rings.load(std::sync::atomic::Ordering::SeqCst) != sent.0 {
            return;
        }
        for entrypoint in entrypoints {
            match known.get_mut(entrypoint) {
                Some(flag) => *flag = more,
                None => {
                    known.insert(entrypoint.clone(), more);
                }
            }
        }
    }

    /// A doorbell of `entrypoint` rang in this shard.
    pub fn rang(&self, entrypoint: &str) {
        let mut known = self.lock();
        self.rings.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if let Some(flag) = known.get_mut(entrypoint) {
            *flag = true;
        }
    }

    /// Forgets what is known of `entrypoints`: the next take looks at them again.
    pub fn forget(&self, entrypoints: &[String]) {
        let mut known = self.lock();
        for entrypoint in entrypoints {
            known.remove(entrypoint);
        }
    }
}

/// Serves a batch of requests; requests that agree on entrypoints, holder and lease share one
/// script call, and the claims go to them in arrival order.
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
        let (mut claims, more) = take_group(&core, &key, wanted).await?;
        claims.reverse();
        for index in members {
            let mut mine = Vec::new();
            while mine.len() < requests[index].max {
                match claims.pop() {
                    Some(claim) => mine.push(claim),
                    None => break,
                }
            }
            outcomes[index] = Some(TakeOutcome { claims: mine, more });
        }
    }
    Ok(outcomes
        .into_iter()
        .map(|outcome| {
            outcome.unwrap_or(TakeOutcome {
                claims: Vec::new(),
                more: false,
            })
        })
        .collect())
}

/// Takes up to `wanted` for one group: visits the shards in turn from a rotating start, skips
/// those whose queues hold nothing for these entrypoints as far as this process knows, and
/// stops once it has `wanted`. Returns the claims and whether a queue it visited (or skipped
/// once full) may still hold tasks.
async fn take_group(
    core: &Core,
    key: &TakeKey,
    wanted: usize,
) -> Result<(Vec<Taken>, bool), StoreError> {
    let count = core.shards.len();
    let start = core.next_take_turn() % count;
    let mut claims = Vec::new();
    let mut more = false;
    for step in 0..count {
        let shard = &core.shards[(start + step) % count];
        // Skipped on one shard too: a worker whose finish just found the queues empty then
        // waits on the doorbell instead of asking again (each ring marks the shard).
        if !shard.hints.may_have_work(&key.entrypoints) {
            continue;
        }
        if claims.len() >= wanted {
            more = true;
            break;
        }
        let sent = shard.hints.mark();
        let (taken, left) = scripts::take::call(core, shard, key, wanted - claims.len()).await?;
        shard.hints.saw(&key.entrypoints, left, sent);
        more |= left;
        claims.extend(taken);
    }
    Ok((claims, more))
}

#[cfg(test)]
mod tests {
    use super::Hints;

    fn eps(names: &[&str]) -> Vec<String> {
        names.iter().map(|name| (*name).to_owned()).collect()
    }

    #[test]
    fn an_unknown_queue_may_have_work() {
        let hints = Hints::default();
        assert!(hints.may_have_work(&eps(&["echo"])));
    }

    #[test]
    fn an_empty_reply_clears_and_a_ring_sets_again() {
        let hints = Hints::default();
        hints.saw(&eps(&["echo", "sleep"]), false, hints.mark());
        assert!(!hints.may_have_work(&eps(&["echo"])));
        assert!(!hints.may_have_work(&eps(&["echo", "sleep"])));
        // A queue not asked about stays unknown.
        assert!(hints.may_have_work(&eps(&["echo", "count"])));
        hints.rang("sleep");
        assert!(hints.may_have_work(&eps(&["sleep"])));
        assert!(!hints.may_have_work(&eps(&["echo"])));
        hints.saw(&eps(&["echo"]), true, hints.mark());
        assert!(hints.may_have_work(&eps(&["echo"])));
    }

    #[test]
    fn an_empty_reply_overtaken_by_a_ring_keeps_the_queue_marked() {
        let hints = Hints::default();
        hints.saw(&eps(&["echo"]), true, hints.mark());
        let sent = hints.mark();
        // The ring of a task queued after the take ran, heard before its empty reply.
        hints.rang("echo");
        hints.saw(&eps(&["echo"]), false, sent);
        assert!(hints.may_have_work(&eps(&["echo"])));
        // A reply sent after the ring clears as usual.
        hints.saw(&eps(&["echo"]), false, hints.mark());
        assert!(!hints.may_have_work(&eps(&["echo"])));
    }

    #[test]
    fn forgetting_makes_a_queue_unknown_again() {
        let hints = Hints::default();
        hints.saw(&eps(&["echo"]), false, hints.mark());
        hints.forget(&eps(&["echo"]));
        assert!(hints.may_have_work(&eps(&["echo"])));
    }
}
