//! Subscriptions: a task's snapshot, the events a reconnecting subscriber missed, and its
//! live events, gap-free: live messages (pub/sub, [`super::subscriber`]) are checked against
//! the last delivered sequence number and gaps are filled from the task's event log.

use std::time::Duration;

use futures::StreamExt;

use super::subscriber::{Listener, Signal};
use super::{RedisStore, event_log, fields, replies};
use crate::{NewTask, StoreError, StoredEvent, Subscription};
use protocol::token::OwnerHash;
use protocol::{Task, TaskEvent};

/// How long a subscription keeps trying to read its task's event log (after a gap or a
/// reconnect) before it ends: longer than a Redis Cluster failover.
const FILL_PATIENCE: Duration = Duration::from_secs(30);
const FILL_RETRY_FIRST: Duration = Duration::from_millis(50);
const FILL_RETRY_MAX: Duration = Duration::from_secs(1);

impl RedisStore {
    /// Creates `new` and subscribes to it ([`TaskStore::create_watched`]).
    pub(super) async fn create_and_watch(
        &self,
        new: NewTask,
    ) -> Result<(Task, Subscription), StoreError> {
        let keys = self.shard_keys(&new.task_id);
        // Listen first: every event of the task is published after its creation, so the live
        // feed holds all of them from seq 2 on, and the snapshot is what the create wrote. On
        // this process's notify channel (subscribed once), which the record names: no
        // subscription per task.
        let notify = keys.notify_channel(&self.inner.process);
        let listener = self
            .inner
            .dispatcher
            .listen_routed(notify.clone(), keys.task_channel(&new.owner, &new.task_id))
            .await?;
        let task_id = new.task_id.clone();
        let task = self.create_notifying(new, &notify).await?;
        // The task's seq 1 is its `statusUpdate running`, which create.lua neither logs nor
        // publishes (the record rebuilds it): it is the snapshot's replay.
        let first = TaskEvent::status(&task);
        let replay = vec![StoredEvent {
            seq: 1,
            event: first.kind.as_str().to_owned(),
            data: serde_json::to_value(&first.data)
                .map_err(|err| StoreError::Corrupt(err.to_string()))?,
        }];
        let events = live_events(self.clone(), task_id, listener, 1);
        Ok((
            task.clone(),
            Subscription {
                snapshot: task,
                snapshot_seq: 1,
                replay,
                events,
            },
        ))
    }

    /// Subscribes to task `task_id` of `owner` ([`TaskStore::subscribe`]).
    pub(super) async fn watch(
        &self,
        task_id: &str,
        owner: &OwnerHash,
        after_seq: Option<u64>,
    ) -> Result<Option<Subscription>, StoreError> {
        let keys = self.shard_keys(task_id);
        // Listen first, then read: every event is either in the snapshot/log or arrives live.
        let listener = self
            .inner
            .dispatcher
            .listen(keys.task_channel(owner, task_id))
            .await?;
        let mut read = redis::pipe();
        read.cmd("HMGET")
            .arg(keys.task(task_id))
            .arg(&fields::VIEW)
            .arg(fields::OWNER)
            .arg(fields::SEQ)
            .cmd("LRANGE")
            .arg(keys.events(task_id))
            .arg(0)
            .arg(-1);
        let (row, log): (Vec<Option<String>>, Vec<String>) = self.pipe(&read).await?;
        if row.get(6).and_then(|o| o.as_deref()) != Some(owner.as_str()) {
            return Ok(None);
        }
        let Some(snapshot) = replies::task_view(task_id, row.get(..6).unwrap_or_default())? else {
            return Ok(None);
        };
        let snapshot_seq = record_seq(&row, 7);
        let mut replay = Vec::new();
        if let Some(after) = after_seq {
            let logged = log
                .iter()
                .map(|entry| replies::event(entry))
                .collect::<Result<Vec<_>, _>>()?;
            replay = event_log::merged(&snapshot, snapshot_seq, logged)
                .into_iter()
                .filter(|event| event.seq > after && event.seq <= snapshot_seq)
                .collect();
        }
        let events = live_events(self.clone(), task_id.to_owned(), listener, snapshot_seq);
        Ok(Some(Subscription {
            snapshot,
            snapshot_seq,
            replay,
            events,
        }))
    }

    /// A task's events with `seq > after`: its log entries merged with the events its record
    /// rebuilds (`event_log.rs`), read in one round trip. Public for checkers of the log.
    pub async fn events_after(
        &self,
        task_id: &str,
        after: u64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let keys = self.shard_keys(task_id);
        let mut read = redis::pipe();
        read.cmd("HMGET")
            .arg(keys.task(task_id))
            .arg(&fields::VIEW)
            .arg(fields::SEQ)
            .cmd("LRANGE")
            .arg(keys.events(task_id))
            .arg(0)
            .arg(-1);
        let (row, log): (Vec<Option<String>>, Vec<String>) = self.pipe(&read).await?;
        let logged = log
            .iter()
            .map(|entry| replies::event(entry))
            .collect::<Result<Vec<_>, _>>()?;
        let events = match replies::task_view(task_id, row.get(..6).unwrap_or_default())? {
            Some(task) => event_log::merged(&task, record_seq(&row, 6), logged),
            None => logged,
        };
        Ok(events
            .into_iter()
            .filter(|event| event.seq > after)
            .collect())
    }
}

/// The record's `seq` field at `index` of an HMGET row (0 when absent).
fn record_seq(row: &[Option<String>], index: usize) -> u64 {
    row.get(index)
        .and_then(|s| s.as_deref())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Events after `from_seq`, in order and without gaps: live messages are checked against the
/// last delivered sequence number, and a gap or a reconnect is filled from the task's log, as
/// is a silence of `idle_recheck` (a message lost without a sign).
fn live_events(
    store: RedisStore,
    task_id: String,
    listener: Listener,
    from_seq: u64,
) -> crate::EventStream {
    struct State {
        store: RedisStore,
        task_id: String,
        listener: Listener,
        last: u64,
        ready: std::collections::VecDeque<StoredEvent>,
        /// A gap (or a reconnect) to fill from the event log before going on.
        fill: bool,
    }
    let state = State {
        store,
        task_id,
        listener,
        last: from_seq,
        ready: Default::default(),
        fill: false,
    };
    futures::stream::unfold(state, |mut state| async move {
        let mut failing_since: Option<tokio::time::Instant> = None;
        let mut pause = FILL_RETRY_FIRST;
        loop {
            if let Some(event) = state.ready.pop_front() {
                if event.seq > state.last {
                    state.last = event.seq;
                    return Some((event, state));
                }
                continue;
            }
            if !state.fill {
                let recheck = state.store.inner.core.config.idle_recheck;
                state.fill =
                    match tokio::time::timeout(recheck, state.listener.signals.recv()).await {
                        Ok(signal) => match signal? {
                            Signal::Message(entry) => match replies::event(&entry) {
                                Ok(event) if event.seq == state.last + 1 => {
                                    state.ready.push_back(event);
                                    false
                                }
                                Ok(event) => event.seq > state.last,
                                Err(_) => true,
                            },
                            Signal::Resync => true,
                        },
                        // Nothing heard for a while: read the log in case a message was lost
                        // without a sign (the re-read is deduplicated by sequence number).
                        Err(_) => true,
                    };
            }
            if state.fill {
                match state.store.events_after(&state.task_id, state.last).await {
                    Ok(events) => {
                        state.ready.extend(events);
                        state.fill = false;
                        failing_since = None;
                        pause = FILL_RETRY_FIRST;
                    }
                    // The store may be failing over (a Redis Cluster promoting a replica takes
                    // seconds): keep trying for a while rather than end the subscriber's
                    // stream, which would lose the task's end for it.
                    Err(err) => {
                        let since = *failing_since.get_or_insert_with(tokio::time::Instant::now);
                        if since.elapsed() >= FILL_PATIENCE {
                            tracing::warn!(error = %err, "could not read a task's event log");
                            return None;
                        }
                        tracing::debug!(error = %err, "event log unreadable; retrying");
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(FILL_RETRY_MAX);
                    }
                }
            }
        }
    })
    .boxed()
}
