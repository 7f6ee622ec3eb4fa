//! What a task's run events say in A2A: the status and artifact updates one listener hears,
//! in order, given what it heard before. Shared by a stream ([`super::follow`]: SSE and gRPC)
//! and by push notifications (`crate::a2a::push`), which keep a [`Narrator`]'s
//! [`NarratorState`] per config in the store between deliveries.
//!
//! Every status update says when its event happened (`at`), never when it was rendered: a push
//! delivery may be made long after its event (a run that ended before its first claim), and
//! its `working` must not be stamped after the `completed` that follows it.

use a2a::{StreamResponse, TaskArtifactUpdateEvent, TaskState, TaskStatus, TaskStatusUpdateEvent};
use protocol::TaskStatus as RuntimeStatus;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use store::StoredTask;

use crate::a2a::mapping;
use crate::core::watch::{RunEvent, Terminal};

/// When an event happened.
pub type Stamp = chrono::DateTime<chrono::Utc>;

/// Most artifact ids a narrator remembers having streamed (so the final task's artifacts are
/// not sent twice); past it, an artifact may be sent again with the final status.
const STREAMED_KEPT: usize = 64;

/// What a listener has heard so far: serialisable, so a push config's narration survives the
/// deliverer that wrote it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NarratorState {
    /// Artifact ids already streamed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub streamed: Vec<String>,
    /// `working` was said in this turn.
    #[serde(default)]
    pub working_sent: bool,
    /// The last update said `input-required`: a resume says `submitted` again.
    #[serde(default)]
    pub asked: bool,
}

/// Turns run events into A2A updates for one listener.
pub struct Narrator {
    task_id: String,
    context_id: String,
    pub state: NarratorState,
}

impl Narrator {
    pub fn new(task_id: String, context_id: String, state: NarratorState) -> Narrator {
        Narrator {
            task_id,
            context_id,
            state,
        }
    }

    /// The state of a listener that has just read `task` as it stands.
    pub fn state_after_reading(task: &StoredTask) -> NarratorState {
        NarratorState {
            streamed: Vec::new(),
            working_sent: task.phase == store::Phase::Active,
            asked: task.phase == store::Phase::Waiting,
        }
    }

    /// The updates `event`, which happened `at`, makes, except a finish's (see
    /// [`Narrator::finished`]).
    pub fn on(&mut self, event: RunEvent, at: Stamp, out: &mut Vec<StreamResponse>) {
        match event {
            RunEvent::Running => self.running(at, out),
            RunEvent::Progress => self.working(at, out),
            RunEvent::InputRequired { request } => self.input_required(&request, at, out),
            RunEvent::Stream { kind, data } => self.stream(&kind, data, at, out),
            RunEvent::Finished(terminal) => self.finished(None, &terminal, at, out),
        }
    }

    /// Created or resumed: queued for a worker. Only a resume changes what the listener last
    /// heard (`input-required`).
    fn running(&mut self, at: Stamp, out: &mut Vec<StreamResponse>) {
        if self.state.asked {
            self.state.asked = false;
            out.push(self.status(TaskState::Submitted, at));
        }
    }

    /// A worker shows it runs the task (an event of its own): `working`, once per turn.
    /// The runtime publishes nothing when a worker picks a task up, so this is the first
    /// moment a listener can know.
    fn working(&mut self, at: Stamp, out: &mut Vec<StreamResponse>) {
        if !self.state.working_sent {
            self.state.working_sent = true;
            out.push(self.status(TaskState::Working, at));
        }
    }

    fn input_required(&mut self, request: &Value, at: Stamp, out: &mut Vec<StreamResponse>) {
        self.working(at, out);
        // The next turn's run starts afresh: it gets its own `working` update.
        self.state.working_sent = false;
        self.state.asked = true;
        let message = mapping::request_message(&self.task_id, &self.context_id, request);
        out.push(StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: self.task_id.clone(),
            context_id: self.context_id.clone(),
            status: TaskStatus {
                state: TaskState::InputRequired,
                message: Some(message),
                timestamp: Some(at),
            },
            metadata: None,
        }));
    }

    fn stream(&mut self, kind: &str, data: Value, at: Stamp, out: &mut Vec<StreamResponse>) {
        self.working(at, out);
        let stream_id = format!("{}-stream", self.task_id);
        let first = !self.state.streamed.contains(&stream_id);
        let event = mapping::artifact_event(&self.task_id, &self.context_id, kind, data, first);
        self.remember(event.artifact.artifact_id.clone());
        out.push(StreamResponse::ArtifactUpdate(event));
    }

    fn remember(&mut self, artifact_id: String) {
        if !self.state.streamed.contains(&artifact_id) && self.state.streamed.len() < STREAMED_KEPT
        {
            self.state.streamed.push(artifact_id);
        }
    }

    /// The run ended (`at`): the artifacts not streamed yet, then the final status, from the
    /// task as stored (`stored`) or, when it can no longer be read, from the terminal event
    /// alone. A `working` said only now is stamped with the end, as the task records it: the
    /// moment this listener learnt of the run, and never after the final status.
    pub fn finished(
        &mut self,
        stored: Option<&StoredTask>,
        terminal: &Terminal,
        at: Stamp,
        out: &mut Vec<StreamResponse>,
    ) {
        let Some(stored) = stored else {
            let state = mapping::state_of(terminal.status, store::Phase::Terminal);
            out.push(self.status(state, at));
            return;
        };
        let task = mapping::task_of(stored, None);
        // A task that ended by a worker's hand (not cancelled before it ran) worked.
        if stored.attempt > 0 && stored.task.status != RuntimeStatus::Cancelled {
            self.working(task.status.timestamp.unwrap_or(at), out);
        }
        for artifact in task.artifacts.clone().unwrap_or_default() {
            if !self.state.streamed.contains(&artifact.artifact_id) {
                out.push(StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
                    task_id: self.task_id.clone(),
                    context_id: self.context_id.clone(),
                    artifact,
                    append: None,
                    last_chunk: Some(true),
                    metadata: None,
                }));
            }
        }
        out.push(StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: self.task_id.clone(),
            context_id: self.context_id.clone(),
            status: task.status,
            metadata: None,
        }));
    }

    /// A status update without a message, stamped `at`.
    fn status(&self, state: TaskState, at: Stamp) -> StreamResponse {
        StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: self.task_id.clone(),
            context_id: self.context_id.clone(),
            status: TaskStatus {
                state,
                message: None,
                timestamp: Some(at),
            },
            metadata: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn narrator(state: NarratorState) -> Narrator {
        Narrator::new("t1".into(), "c1".into(), state)
    }

    fn at(ms: i64) -> Stamp {
        chrono::DateTime::from_timestamp_millis(ms).unwrap_or_default()
    }

    fn stamps(out: &[StreamResponse]) -> Vec<Option<i64>> {
        out.iter()
            .filter_map(|event| match event {
                StreamResponse::StatusUpdate(update) => {
                    Some(update.status.timestamp.map(|t| t.timestamp_millis()))
                }
                _ => None,
            })
            .collect()
    }

    fn states(out: &[StreamResponse]) -> Vec<String> {
        out.iter()
            .map(|event| match event {
                StreamResponse::StatusUpdate(update) => format!("{:?}", update.status.state),
                StreamResponse::ArtifactUpdate(update) => update.artifact.artifact_id.clone(),
                _ => "other".into(),
            })
            .collect()
    }

    #[test]
    fn working_is_said_once_per_turn_and_a_resume_says_submitted() {
        let mut narrator = narrator(NarratorState::default());
        let mut out = Vec::new();
        narrator.on(RunEvent::Progress, at(10), &mut out);
        narrator.on(RunEvent::Progress, at(11), &mut out);
        narrator.on(
            RunEvent::InputRequired {
                request: json!({"question": "?"}),
            },
            at(12),
            &mut out,
        );
        narrator.on(RunEvent::Running, at(13), &mut out);
        narrator.on(RunEvent::Progress, at(14), &mut out);
        assert_eq!(
            states(&out),
            ["Working", "InputRequired", "Submitted", "Working"]
        );
        // Each stamped with the time of the event that made it, however late it is told.
        assert_eq!(stamps(&out), [Some(10), Some(12), Some(13), Some(14)]);
    }

    #[test]
    fn a_listener_resumed_from_its_stored_state_goes_on_where_it_was() -> serde_json::Result<()> {
        let mut first = narrator(NarratorState::default());
        let mut out = Vec::new();
        first.on(
            RunEvent::Stream {
                kind: "delta".into(),
                data: json!({"delta": 1}),
            },
            at(1),
            &mut out,
        );
        // Stored between deliveries, read back by another deliverer.
        let stored = serde_json::to_value(&first.state)?;
        let mut second = narrator(serde_json::from_value(stored)?);
        out.clear();
        second.on(
            RunEvent::Stream {
                kind: "delta".into(),
                data: json!({"delta": 2}),
            },
            at(2),
            &mut out,
        );
        // No second `working`, and the chunk appends to the artifact already started.
        assert_eq!(states(&out), ["t1-stream"]);
        let StreamResponse::ArtifactUpdate(update) = &out[0] else {
            return Ok(());
        };
        assert_eq!(update.append, Some(true));
        Ok(())
    }
}
