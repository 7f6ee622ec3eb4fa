//! The deliverer every gateway with push notifications runs: claims due tasks from each shard
//! of the outbox (`store::push`), sends each config's events after its cursor, in order, one
//! at a time, and moves the cursor after each answer.
//!
//! A claim lasts `--push-claim-ms` (`Push::claim`); the work done under one stops starting
//! attempts after half of it (each attempt is bounded by the client's 10 s), so a live
//! deliverer rarely outlives its claim. One that is paused past it may send an event the next
//! claimant sends too (at least once); its cursor writes are compare-and-set, so it cannot
//! move a cursor back.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use a2a::{StreamResponse, TaskPushNotificationConfig};
use store::push::{LoadedConfig, OutboxEvent, PushCursor, Release};
use store::{StoredTask, TaskStore};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::Push;
use super::exhausted::give_up;
use super::fairness::{GROUP_BUSY_DELAY, GROUP_SHARE_DIVISOR, GroupSlot, InFlight};
use super::send::{Sent, send};
use crate::a2a::mapping;
use crate::a2a::service::narrate::Narrator;
use crate::core::watch::{self, RunEvent};

/// How often an idle deliverer looks for due tasks.
const IDLE_POLL: Duration = Duration::from_millis(100);

/// Delivers until `shutdown`; then lets the deliveries under way end (each stops at its next
/// event and releases its task, due now, for another gateway). Claims again as soon as a
/// delivery ends and there are due tasks; an idle deliverer looks every [`IDLE_POLL`].
pub async fn run(store: Arc<dyn TaskStore>, push: Arc<Push>, shutdown: CancellationToken) {
    telemetry::metrics::prime_push_counters();
    let permits = Arc::new(Semaphore::new(push.concurrency));
    let reserve = (push.concurrency / GROUP_SHARE_DIVISOR).max(1);
    let in_flight = Arc::new(InFlight::new(
        push.concurrency / GROUP_SHARE_DIVISOR,
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
            let share = in_flight.share(GROUP_BUSY_DELAY);
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
                let slot = (!task.group.is_empty()).then(|| in_flight.enter(&task.group));
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
/// `_slot`: the task's place among its group's tasks under way, held until it is done.
async fn deliver_task(
    store: &dyn TaskStore,
    push: &Push,
    _slot: Option<GroupSlot>,
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
    if batch.dropped > 0 {
        // The shard's drops since any deliverer last looked (not only this task's).
        tracing::warn!(
            dropped = batch.dropped,
            "full push outboxes dropped undelivered events (PUSH_OUTBOX_MAX)"
        );
        telemetry::metrics::push_dropped(batch.dropped);
    }
    let Some(stored) = stored.filter(|_| !batch.configs.is_empty()) else {
        // No configs left, or the task itself is gone (expired): nothing to deliver, ever.
        let release = Release {
            trim: loaded,
            loaded,
            retry_in: None,
            finished: true,
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
        waiting.is_empty() && stored.task.status.is_terminal() && done_through >= stored.seq;
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

/// One config's events after its cursor, in order, until one fails or the claim's budget is
/// spent.
async fn deliver_config(
    push: &Push,
    stored: &StoredTask,
    loaded: &LoadedConfig,
    events: &[OutboxEvent],
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
    let queue: Vec<&OutboxEvent> = pending().collect();
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

/// The updates `event` makes for the config's listener, stamped with the event's time as the
/// store recorded it (rendered now, sent perhaps long after the event: never stamped now).
fn narrate(
    narrator: &mut Narrator,
    event: &OutboxEvent,
    stored: &StoredTask,
) -> Vec<StreamResponse> {
    let at = event
        .at_ms
        .and_then(|ms| i64::try_from(ms).ok())
        .and_then(chrono::DateTime::from_timestamp_millis)
        // An entry from before outbox entries were stamped.
        .unwrap_or_else(chrono::Utc::now);
    let mut out = Vec::new();
    match watch::classify(event.stored()) {
        Some(RunEvent::Finished(terminal)) => {
            let stored = Some(stored).filter(|stored| stored.task.status.is_terminal());
            narrator.finished(stored, &terminal, at, &mut out);
        }
        Some(event) => narrator.on(event, at, &mut out),
        None => {}
    }
    out
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

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(millis)
        .unwrap_or(0)
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
