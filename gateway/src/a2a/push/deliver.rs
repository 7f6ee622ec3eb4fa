//! The deliverer every gateway with push notifications runs: claims due tasks from each shard
//! of the outbox (`store::push`), sends each config's events after its cursor, in order, one
//! at a time, and moves the cursor after each answer.
//!
//! A claim lasts `--push-claim-ms` (`Push::claim`); the work done under one stops starting
//! attempts after half of it (each attempt is bounded by the client's 10 s), so a live
//! deliverer rarely outlives its claim. One that is paused past it may send an event the next
//! claimant sends too (at least once); its cursor writes are compare-and-set, so it cannot
//! move a cursor back.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use a2a::{StreamResponse, TaskPushNotificationConfig};
use protocol::token::OwnerHash;
use serde_json::json;
use store::push::{LoadedConfig, OwnerShare, PushCursor, Release};
use store::{StoredEvent, StoredTask, TaskStore};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use webhook::DeliveryOutcome;

use super::Push;
use crate::a2a::mapping;
use crate::a2a::service::narrate::Narrator;
use crate::watch::{self, RunEvent};

/// How often an idle deliverer looks for due tasks.
const IDLE_POLL: Duration = Duration::from_millis(100);

/// Fairness among owners: a quarter of a gateway's delivery slots (at least one) is each
/// owner's share, and as much is kept in reserve for owners under their share. An owner past
/// its share gets more slots only while they are free, and never the reserve: a caller whose
/// receivers hang cannot hold every slot for their 10 s each while other callers'
/// notifications wait, and a caller alone still gets three quarters of the slots.
const OWNER_SHARE_DIVISOR: usize = 4;

/// How far ahead a due task of an owner past its share is moved when no slot fits it (by the
/// claim script): short, so a lone caller's backlog goes on at once, long enough that a flood
/// is passed over by the claims in between.
const OWNER_BUSY_DELAY: Duration = Duration::from_millis(25);

/// A finished task whose remaining retention cannot be read keeps its configs this long.
const FALLBACK_CONFIG_TTL: Duration = Duration::from_secs(3600);

/// The media type of a delivery's body.
const A2A_JSON: &str = "application/a2a+json";

/// Delivers until `shutdown`; then lets the deliveries under way end (each stops at its next
/// event and releases its task, due now, for another gateway). Claims again as soon as a
/// delivery ends and there are due tasks; an idle deliverer looks every [`IDLE_POLL`].
pub async fn run(store: Arc<dyn TaskStore>, push: Arc<Push>, shutdown: CancellationToken) {
    telemetry::metrics::prime_push_counters();
    let permits = Arc::new(Semaphore::new(push.concurrency));
    let reserve = (push.concurrency / OWNER_SHARE_DIVISOR).max(1);
    let in_flight = Arc::new(InFlight::new(
        push.concurrency / OWNER_SHARE_DIVISOR,
        push.concurrency.saturating_sub(reserve).max(1),
    ));
    let mut running = JoinSet::new();
    let mut failing = false;
    while !shutdown.is_cancelled() {
        let mut claimed = 0;
        for shard in 0..push.outbox.shard_count() {
            let free = permits.available_permits();
            if free == 0 {
                break;
            }
            let share = in_flight.share(OWNER_BUSY_DELAY);
            let tasks = match push.outbox.claim_due(shard, push.claim, free, &share).await {
                Ok(tasks) => {
                    failing = false;
                    tasks
                }
                Err(err) => {
                    if !failing {
                        tracing::warn!(error = %err, "push deliverer cannot claim due tasks");
                    }
                    failing = true;
                    continue;
                }
            };
            for task in tasks {
                let Ok(permit) = permits.clone().acquire_owned().await else {
                    return;
                };
                claimed += 1;
                // Counted from the claim on, so the next claim sees it under way.
                let slot = OwnerHash::from_hex(&task.owner).map(|owner| in_flight.enter(&owner));
                let (store, push, shutdown) = (store.clone(), push.clone(), shutdown.clone());
                running.spawn(async move {
                    deliver_task(&*store, &push, slot, &task.id, &shutdown).await;
                    drop(permit);
                });
            }
        }
        while running.try_join_next().is_some() {}
        if claimed == 0 || permits.available_permits() == 0 {
            // Until a delivery ends (a slot is free, or its task may be due again) or the poll.
            tokio::select! {
                Some(_) = running.join_next(), if !running.is_empty() => {}
                () = tokio::time::sleep(IDLE_POLL) => {}
                () = shutdown.cancelled() => {}
            }
        }
    }
    while running.join_next().await.is_some() {}
}

/// Tasks being delivered per owner: what each claim is told (the claim script keeps the
/// shares).
struct InFlight {
    share: usize,
    cap: usize,
    per_owner: Mutex<HashMap<OwnerHash, usize>>,
}

impl InFlight {
    fn new(share: usize, cap: usize) -> InFlight {
        InFlight {
            share: share.max(1),
            cap: cap.max(1),
            per_owner: Mutex::new(HashMap::new()),
        }
    }

    /// What a claim needs to share the slots: each owner's tasks under way.
    fn share(&self, postpone: Duration) -> OwnerShare {
        let per_owner = self
            .per_owner
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        OwnerShare {
            share: self.share,
            cap: self.cap,
            under_way: per_owner
                .iter()
                .map(|(owner, count)| (owner.as_str().to_owned(), *count))
                .collect(),
            postpone,
        }
    }

    /// Counts one more of `owner`'s tasks under way until the slot is dropped.
    fn enter(self: &Arc<Self>, owner: &OwnerHash) -> OwnerSlot {
        let mut per_owner = self
            .per_owner
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *per_owner.entry(owner.clone()).or_default() += 1;
        OwnerSlot {
            in_flight: Arc::clone(self),
            owner: owner.clone(),
        }
    }

    #[cfg(test)]
    fn under_way(&self, owner: &OwnerHash) -> usize {
        let per_owner = self
            .per_owner
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        per_owner.get(owner).copied().unwrap_or(0)
    }
}

/// One task's place in its owner's share, given back when dropped.
struct OwnerSlot {
    in_flight: Arc<InFlight>,
    owner: OwnerHash,
}

impl Drop for OwnerSlot {
    fn drop(&mut self) {
        let mut per_owner = self
            .in_flight
            .per_owner
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = per_owner.get_mut(&self.owner) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                per_owner.remove(&self.owner);
            }
        }
    }
}

/// Where one config's deliveries stand after this claim.
struct ConfigProgress {
    /// Every event up to this seq is done with (delivered or given up).
    done_through: u64,
    /// No event is left for it.
    caught_up: bool,
    /// It waits on a retry this long.
    retry_in: Option<Duration>,
}

/// One claimed task: every config's events after its cursor, then the release.
/// `_slot`: the task's place among its owner's tasks under way, held until it is done.
async fn deliver_task(
    store: &dyn TaskStore,
    push: &Push,
    _slot: Option<OwnerSlot>,
    task_id: &str,
    stop: &CancellationToken,
) {
    let batch = match push.outbox.load(task_id).await {
        Ok(batch) => batch,
        Err(err) => {
            tracing::warn!(task_id, error = %err, "could not read a task's push outbox");
            return;
        }
    };
    let stored = match store.get(task_id).await {
        Ok(stored) => stored,
        Err(err) => {
            tracing::warn!(task_id, error = %err, "could not read a task with push deliveries");
            return;
        }
    };
    let loaded = batch.outbox_len;
    let Some(stored) = stored.filter(|_| !batch.configs.is_empty()) else {
        // No configs left, or the task itself is gone (expired): nothing to deliver, ever.
        let release = Release {
            trim: loaded,
            loaded,
            retry_in: None,
            finished: Some(Duration::ZERO),
        };
        if let Err(err) = push.outbox.release(task_id, release).await {
            tracing::warn!(task_id, error = %err, "could not release a task's push outbox");
        }
        return;
    };
    let started = Instant::now();
    let progress = futures::future::join_all(
        batch
            .configs
            .iter()
            .map(|config| deliver_config(push, &stored, config, &batch.events, started, stop)),
    )
    .await;

    let done_through = progress.iter().map(|p| p.done_through).min().unwrap_or(0);
    let trim = batch
        .events
        .iter()
        .take_while(|event| event.seq <= done_through)
        .count();
    let waiting: Vec<&ConfigProgress> = progress.iter().filter(|p| !p.caught_up).collect();
    // Due again after the earliest retry when every config with events left waits on one;
    // now when one stopped for the budget or the shutdown.
    let retry_in = if !waiting.is_empty() && waiting.iter().all(|p| p.retry_in.is_some()) {
        waiting.iter().filter_map(|p| p.retry_in).min()
    } else {
        None
    };
    let finished =
        if waiting.is_empty() && stored.task.status.is_terminal() && done_through >= stored.seq {
            let ttl = push.outbox.task_ttl(task_id).await.ok().flatten();
            Some(ttl.unwrap_or(FALLBACK_CONFIG_TTL))
        } else {
            None
        };
    let release = Release {
        trim,
        loaded,
        retry_in,
        finished,
    };
    if let Err(err) = push.outbox.release(task_id, release).await {
        tracing::warn!(task_id, error = %err, "could not release a task's push outbox");
    }
}

/// What one attempt at sending a payload came to.
enum Sent {
    Delivered,
    /// Worth another attempt (a timeout, a 5xx, a 429, a reset), not before the receiver's
    /// `Retry-After` when it gave one.
    Retry(String, Option<Duration>),
    /// Never worth another (a 4xx, refused by the SSRF policy, a config that cannot be sent).
    GiveUp(String),
}

/// One config's events after its cursor, in order, until one fails or the claim's budget is
/// spent.
async fn deliver_config(
    push: &Push,
    stored: &StoredTask,
    loaded: &LoadedConfig,
    events: &[StoredEvent],
    started: Instant,
    stop: &CancellationToken,
) -> ConfigProgress {
    let task_id = stored.task.task_id.as_str();
    let mut cursor = loaded.cursor.clone();
    let mut raw = loaded.raw_cursor.clone();
    let pending = || events.iter().filter(move |event| event.seq > cursor.seq);
    let last = events.iter().map(|event| event.seq).max().unwrap_or(0);
    let Ok(config) = serde_json::from_str::<TaskPushNotificationConfig>(&loaded.config) else {
        // Unreadable (a config of another version): nothing can be sent to it.
        return ConfigProgress {
            done_through: last.max(cursor.seq),
            caught_up: true,
            retry_in: None,
        };
    };
    let now = unix_ms();
    if cursor.retry_at_ms > now && pending().next().is_some() {
        return ConfigProgress {
            done_through: cursor.seq,
            caught_up: false,
            retry_in: Some(Duration::from_millis(cursor.retry_at_ms - now)),
        };
    }
    let state = cursor
        .state
        .clone()
        .and_then(|state| serde_json::from_value(state).ok())
        .unwrap_or_default();
    let mut narrator = Narrator::new(task_id.to_owned(), mapping::context_of(stored), state);
    let queue: Vec<StoredEvent> = pending().cloned().collect();
    for event in queue {
        // After half the claim no new attempt starts: the task is released, due now.
        if started.elapsed() >= push.claim / 2 || stop.is_cancelled() {
            return ConfigProgress {
                done_through: cursor.seq,
                caught_up: false,
                retry_in: None,
            };
        }
        let before = narrator.state.clone();
        let seq = event.seq;
        let name = event.event.clone();
        let payloads = narrate(&mut narrator, event, stored);
        let mut failure = None;
        for payload in &payloads {
            match send(push, &config, payload).await {
                Sent::Delivered => {}
                other => {
                    failure = Some(other);
                    break;
                }
            }
        }
        let mut next = PushCursor {
            seq,
            failures: 0,
            retry_at_ms: 0,
            state: serde_json::to_value(&narrator.state).ok(),
        };
        match failure {
            None => {}
            Some(Sent::Retry(detail, retry_after)) => {
                let failures = cursor.failures.saturating_add(1);
                if let Some(delay) = push.backoff.next_delay(failures) {
                    // The receiver's Retry-After, within the schedule's cap, when later.
                    let delay = retry_after
                        .map(|after| after.min(push.backoff.cap()))
                        .map_or(delay, |after| after.max(delay));
                    telemetry::metrics::push_delivery("retried", Duration::ZERO);
                    tracing::debug!(task_id, config_id = %loaded.id, failures, %detail, "push delivery failed; will retry");
                    next = PushCursor {
                        seq: cursor.seq,
                        failures,
                        retry_at_ms: unix_ms().saturating_add(millis(delay)),
                        state: serde_json::to_value(&before).ok(),
                    };
                    advance(push, task_id, loaded, &raw, &next).await;
                    return ConfigProgress {
                        done_through: cursor.seq,
                        caught_up: false,
                        retry_in: Some(delay),
                    };
                }
                give_up(
                    push, task_id, &loaded.id, &config, seq, &name, failures, &detail,
                )
                .await;
            }
            Some(Sent::GiveUp(detail)) => {
                let attempts = cursor.failures.saturating_add(1);
                give_up(
                    push, task_id, &loaded.id, &config, seq, &name, attempts, &detail,
                )
                .await;
            }
            Some(Sent::Delivered) => {}
        }
        match advance(push, task_id, loaded, &raw, &next).await {
            Some(json) => {
                raw = json;
                cursor = next;
            }
            None => {
                // Another deliverer moved it, or the config was deleted: this claim is over
                // for it, and it holds back nothing the others are done with.
                return ConfigProgress {
                    done_through: last,
                    caught_up: true,
                    retry_in: None,
                };
            }
        }
    }
    ConfigProgress {
        done_through: cursor.seq.max(last),
        caught_up: true,
        retry_in: None,
    }
}

/// The updates `event` makes for the config's listener.
fn narrate(
    narrator: &mut Narrator,
    event: StoredEvent,
    stored: &StoredTask,
) -> Vec<StreamResponse> {
    let mut out = Vec::new();
    match watch::classify(event) {
        Some(RunEvent::Finished(terminal)) => {
            let stored = Some(stored).filter(|stored| stored.task.status.is_terminal());
            narrator.finished(stored, &terminal, &mut out);
        }
        Some(event) => narrator.on(event, &mut out),
        None => {}
    }
    out
}

/// One POST of `payload` to the config's URL.
async fn send(push: &Push, config: &TaskPushNotificationConfig, payload: &StreamResponse) -> Sent {
    let Ok(body) = serde_json::to_vec(payload) else {
        return Sent::GiveUp("the notification could not be serialised".into());
    };
    let authorization = config.authentication.as_ref().and_then(|auth| {
        auth.credentials
            .as_deref()
            .map(|credentials| (auth.scheme.as_str(), credentials))
    });
    let started = Instant::now();
    let result = push
        .client
        .post_with_token(
            &config.url,
            authorization,
            config.token.as_deref(),
            A2A_JSON,
            body.into(),
        )
        .await;
    match result {
        Ok(outcome) if outcome.is_delivered() => {
            telemetry::metrics::push_delivery("delivered", started.elapsed());
            Sent::Delivered
        }
        Ok(outcome) if outcome.is_retryable() => {
            let retry_after = match &outcome {
                DeliveryOutcome::Unavailable { retry_after, .. } => *retry_after,
                _ => None,
            };
            Sent::Retry(outcome.to_string(), retry_after)
        }
        Ok(outcome) => Sent::GiveUp(outcome.to_string()),
        Err(err) => Sent::GiveUp(err.to_string()),
    }
}

/// Moves the cursor; the new cursor's JSON when it moved, `None` when it had changed.
async fn advance(
    push: &Push,
    task_id: &str,
    loaded: &LoadedConfig,
    raw: &str,
    next: &PushCursor,
) -> Option<String> {
    match push.outbox.advance(task_id, &loaded.id, raw, next).await {
        Ok(true) => serde_json::to_string(next).ok(),
        Ok(false) => None,
        Err(err) => {
            tracing::warn!(task_id, config_id = %loaded.id, error = %err, "could not move a push cursor");
            None
        }
    }
}

/// A delivery given up: kept for inspection (the URL's host only: its path or query may
/// carry a token) and counted.
#[allow(clippy::too_many_arguments)]
async fn give_up(
    push: &Push,
    task_id: &str,
    config_id: &str,
    config: &TaskPushNotificationConfig,
    seq: u64,
    event: &str,
    attempts: u32,
    reason: &str,
) {
    telemetry::metrics::push_delivery("exhausted", Duration::ZERO);
    let host = url::Url::parse(&config.url)
        .ok()
        .and_then(|url| url.host_str().map(str::to_owned))
        .unwrap_or_default();
    tracing::warn!(task_id, config_id, %host, attempts, reason, "push delivery given up");
    let record = json!({
        "taskId": task_id,
        "configId": config_id,
        "host": host,
        "seq": seq,
        "event": event,
        "attempts": attempts,
        "reason": reason,
        "at": chrono::Utc::now().to_rfc3339(),
    });
    if let Err(err) = push
        .outbox
        .record_exhausted(task_id, &record.to_string())
        .await
    {
        tracing::warn!(task_id, error = %err, "could not keep an exhausted push delivery");
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(millis)
        .unwrap_or(0)
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(name: &str) -> OwnerHash {
        protocol::token::AccessToken::parse(&format!("{name}-token-0123456789abcdef"))
            .map(|token| token.owner_hash())
            .unwrap_or_else(|_| protocol::token::AccessToken::generate().owner_hash())
    }

    #[test]
    fn a_claim_is_told_each_owners_tasks_under_way_until_their_slots_are_dropped() {
        let in_flight = Arc::new(InFlight::new(2, 6));
        let (alice, bob) = (owner("alice"), owner("bob"));
        let first = in_flight.enter(&alice);
        let _second = in_flight.enter(&alice);
        let _third = in_flight.enter(&bob);
        let share = in_flight.share(Duration::from_millis(5));
        assert_eq!((share.share, share.cap), (2, 6));
        let mut under_way = share.under_way.clone();
        under_way.sort();
        let mut expected = vec![(alice.as_str().to_owned(), 2), (bob.as_str().to_owned(), 1)];
        expected.sort();
        assert_eq!(under_way, expected);
        drop(first);
        assert_eq!(in_flight.under_way(&alice), 1);
    }

    #[test]
    fn the_share_and_the_cap_are_at_least_one() {
        let in_flight = InFlight::new(0, 0);
        assert_eq!((in_flight.share, in_flight.cap), (1, 1));
    }
}
