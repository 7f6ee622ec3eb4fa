//! Following one run through the store: its stream events in order, then its terminal state.
//! Part of the core: the Lucid invoke and stream routes and the A2A send, stream and subscribe
//! operations all follow runs with it.
//!
//! The watch subscribes with `after_seq = 0`, so events published between creation and the
//! subscription are replayed from the task's event log, and a run that finished before the
//! subscription still reads as finished (from the snapshot). If the live feed ends (a store
//! reconnect), it resubscribes after the last event it saw: nothing is lost or repeated.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use protocol::token::OwnerHash;
use protocol::{Task, TaskError, TaskEventData, TaskEventKind, TaskResult, TaskStatus};
use serde_json::Value;
use store::{EventStream, StoredEvent, Subscription, TaskStore};

use crate::http::error::ApiError;

/// The event name of a worker's progress reports.
const PROGRESS: &str = "progress";

/// Event names a worker emits that a stream relays.
pub const STREAM_KINDS: [&str; 4] = ["text", "delta", "asset", "control"];

/// Pause before subscribing again after the live feed ended, so a flapping store is not
/// hammered.
const RESUBSCRIBE_PAUSE: Duration = Duration::from_millis(100);

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Terminal {
    pub status: TaskStatus,
    pub result: Option<TaskResult>,
    pub error: Option<TaskError>,
}

impl Terminal {
    pub fn of_task(task: &Task) -> Option<Terminal> {
        task.status.is_terminal().then(|| Terminal {
            status: task.status,
            result: task.result.clone(),
            error: task.error.clone(),
        })
    }
}

/// What a run produced next.
#[derive(Debug, Clone, PartialEq)]
pub enum RunEvent {
    /// The task is running: created, or resumed with new input (its `statusUpdate running`).
    Running,
    /// A worker's `progress` event: the run is under way.
    Progress,
    /// The run ended asking for more input (`inputRequired`): the task waits for its
    /// caller's answer. `request` is what the run asked for.
    InputRequired { request: Value },
    /// A stream event (`text`, `delta`, `asset`, `control`) with the worker's data.
    Stream { kind: String, data: Value },
    /// The run ended; nothing follows.
    Finished(Terminal),
}

pub struct Watch {
    store: Arc<dyn TaskStore>,
    task_id: String,
    owner: OwnerHash,
    pending: VecDeque<StoredEvent>,
    live: Option<EventStream>,
    /// The snapshot's terminal state, reported once the replay before it is drained.
    finished: Option<Terminal>,
    last_seq: u64,
}

impl Watch {
    /// Subscribes to `task_id` from its first event.
    pub async fn open(
        store: Arc<dyn TaskStore>,
        task_id: &str,
        owner: &OwnerHash,
    ) -> Result<Watch, ApiError> {
        let mut watch = Watch::new(store, task_id, owner);
        watch.subscribe().await?;
        Ok(watch)
    }

    /// Subscribes to `task_id` from the event after `after_seq`.
    pub async fn open_after(
        store: Arc<dyn TaskStore>,
        task_id: &str,
        owner: &OwnerHash,
        after_seq: u64,
    ) -> Result<Watch, ApiError> {
        let mut watch = Watch::new(store, task_id, owner);
        watch.last_seq = after_seq;
        watch.subscribe().await?;
        Ok(watch)
    }

    /// Follows `task_id` through a subscription taken from its first event (`after_seq = 0`),
    /// as `TaskStore::create_watched` returns it.
    pub fn with(
        store: Arc<dyn TaskStore>,
        task_id: &str,
        owner: &OwnerHash,
        subscription: Subscription,
    ) -> Watch {
        let mut watch = Watch::new(store, task_id, owner);
        watch.follow(subscription);
        watch
    }

    /// A watch that follows nothing yet.
    fn new(store: Arc<dyn TaskStore>, task_id: &str, owner: &OwnerHash) -> Watch {
        Watch {
            store,
            task_id: task_id.to_owned(),
            owner: owner.clone(),
            pending: VecDeque::new(),
            live: None,
            finished: None,
            last_seq: 0,
        }
    }

    async fn subscribe(&mut self) -> Result<(), ApiError> {
        let subscription = self
            .store
            .subscribe(&self.task_id, &self.owner, Some(self.last_seq))
            .await?;
        let Some(subscription) = subscription else {
            // Our own task, created moments ago: only a store that lost it answers this.
            tracing::error!(task_id = %self.task_id, "an invocation's task vanished");
            return Err(ApiError::internal());
        };
        self.follow(subscription);
        Ok(())
    }

    fn follow(&mut self, subscription: Subscription) {
        self.pending.extend(subscription.replay);
        self.finished = Terminal::of_task(&subscription.snapshot);
        self.live = if self.finished.is_some() {
            None
        } else {
            Some(subscription.events)
        };
    }

    /// The next stream event or the end of the run. Cancel-safe: dropping the future loses
    /// nothing that a later call would have returned.
    pub async fn next(&mut self) -> Result<RunEvent, ApiError> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                if event.seq <= self.last_seq {
                    continue;
                }
                self.last_seq = event.seq;
                if let Some(run_event) = classify(event) {
                    if matches!(run_event, RunEvent::Finished(_)) {
                        self.live = None;
                        self.finished = None;
                    }
                    return Ok(run_event);
                }
                continue;
            }
            if let Some(terminal) = self.finished.take() {
                return Ok(RunEvent::Finished(terminal));
            }
            match self.live.as_mut() {
                Some(live) => match live.next().await {
                    Some(event) => self.pending.push_back(event),
                    None => {
                        tracing::debug!(task_id = %self.task_id, "live events ended; resubscribing");
                        self.live = None;
                        tokio::time::sleep(RESUBSCRIBE_PAUSE).await;
                    }
                },
                None => self.subscribe().await?,
            }
        }
    }
}

/// Stream events, progress, the (re)queueing of a task, input requests and terminal
/// transitions; unknown names are skipped.
pub fn classify(event: StoredEvent) -> Option<RunEvent> {
    if event.event == PROGRESS {
        return Some(RunEvent::Progress);
    }
    if event.event == store::INPUT_REQUIRED_EVENT {
        let request = event.data.get("request").cloned().unwrap_or(Value::Null);
        return Some(RunEvent::InputRequired { request });
    }
    if STREAM_KINDS.contains(&event.event.as_str()) {
        return Some(RunEvent::Stream {
            kind: event.event,
            data: event.data,
        });
    }
    TaskEventKind::parse(&event.event)?;
    let data: TaskEventData = serde_json::from_value(event.data).ok()?;
    let status = data.status?;
    if !status.is_terminal() {
        return Some(RunEvent::Running);
    }
    Some(RunEvent::Finished(Terminal {
        status,
        result: data.result,
        error: data.error,
    }))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn event(seq: u64, name: &str, data: Value) -> StoredEvent {
        StoredEvent {
            seq,
            event: name.into(),
            data,
        }
    }

    #[test]
    fn classifies_stream_kinds_and_terminal_transitions() {
        assert_eq!(
            classify(event(2, "delta", json!({"delta": 1}))),
            Some(RunEvent::Stream {
                kind: "delta".into(),
                data: json!({"delta": 1})
            })
        );
        assert_eq!(
            classify(event(
                1,
                "statusUpdate",
                json!({"taskId": "t", "status": "running"})
            )),
            Some(RunEvent::Running)
        );
        assert_eq!(
            classify(event(3, "progress", json!({"sleeping": 5}))),
            Some(RunEvent::Progress)
        );
        assert_eq!(
            classify(event(
                4,
                "resultUpdate",
                json!({"taskId": "t", "status": "completed", "result": {"output": 7}})
            )),
            Some(RunEvent::Finished(Terminal {
                status: TaskStatus::Completed,
                result: Some(TaskResult::output(json!(7))),
                error: None,
            }))
        );
        assert_eq!(
            classify(event(
                4,
                "statusUpdate",
                json!({"taskId": "t", "status": "cancelled"})
            )),
            Some(RunEvent::Finished(Terminal {
                status: TaskStatus::Cancelled,
                result: None,
                error: None,
            }))
        );
    }
}
