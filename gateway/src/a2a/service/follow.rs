//! A task as a stream of A2A events: `SubscribeToTask`, and the stream a
//! `SendStreamingMessage` answers with ([`follow`]). The events come from the core's watch of
//! the run ([`crate::watch`]), mapped to A2A status and artifact updates.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use a2a::{
    StreamResponse, SubscribeToTaskRequest, TaskArtifactUpdateEvent, TaskState, TaskStatus,
    TaskStatusUpdateEvent,
};
use futures::StreamExt;
use futures::stream::BoxStream;
use protocol::TaskStatus as RuntimeStatus;
use protocol::token::OwnerHash;
use serde_json::Value;
use store::{Phase, StoredTask, TaskStore};

use super::{Caller, bounded, check_id, read_owned};
use crate::a2a::error::A2aError;
use crate::a2a::mapping;
use crate::watch::{RunEvent, Watch};

/// `SubscribeToTask`: the task as it stands, then its updates until its final status (through
/// any number of `input-required` turns). A task already finished has nothing to follow:
/// `UnsupportedOperationError`, as the spec says.
pub async fn subscribe(
    caller: &Caller<'_>,
    request: SubscribeToTaskRequest,
) -> Result<BoxStream<'static, StreamResponse>, A2aError> {
    check_id("id", &request.id)?;
    let stored = read_owned(caller.state, &caller.owner, &request.id).await?;
    if stored.task.status.is_terminal() {
        return Err(A2aError::unsupported(format!(
            "Task {} is in a terminal state; read it with GetTask",
            request.id
        )));
    }
    // From the snapshot on: the task event comes first, the updates after it.
    let watch = Watch::open_after(
        caller.state.store.clone(),
        &request.id,
        &caller.owner,
        stored.seq,
    )
    .await?;
    Ok(bounded(
        caller.state,
        follow(
            caller.state.store.clone(),
            caller.owner.clone(),
            stored,
            watch,
            false,
        ),
    ))
}

/// A task's stream: the task as first read, then its updates from the watch, closing after
/// the final status update or, with `closes_on_input`, after an `input-required` one (the
/// end of a `SendStreamingMessage` turn; a subscription follows the task through its turns).
pub(super) fn follow(
    store: Arc<dyn TaskStore>,
    owner: OwnerHash,
    first: StoredTask,
    watch: Watch,
    closes_on_input: bool,
) -> BoxStream<'static, StreamResponse> {
    let follow = Follow::new(store, owner, &first, watch, closes_on_input);
    futures::stream::unfold(follow, |mut follow| async move {
        let event = follow.next().await?;
        Some((event, follow))
    })
    .boxed()
}

/// One follower's state: what it has said so far, and what it is yet to send.
struct Follow {
    store: Arc<dyn TaskStore>,
    owner: OwnerHash,
    task_id: String,
    context_id: String,
    watch: Watch,
    closes_on_input: bool,
    /// Artifact ids already streamed: the final task's artifacts are not sent twice.
    streamed: HashSet<String>,
    pending: VecDeque<StreamResponse>,
    working_sent: bool,
    /// The last update said `input-required`: a resume says `submitted` again.
    asked: bool,
    done: bool,
}

impl Follow {
    fn new(
        store: Arc<dyn TaskStore>,
        owner: OwnerHash,
        first: &StoredTask,
        watch: Watch,
        closes_on_input: bool,
    ) -> Follow {
        let mut pending = VecDeque::new();
        pending.push_back(StreamResponse::Task(mapping::task_of(first, None)));
        Follow {
            store,
            owner,
            task_id: first.task.task_id.clone(),
            context_id: mapping::context_of(first),
            watch,
            closes_on_input,
            streamed: HashSet::new(),
            pending,
            working_sent: first.phase == Phase::Active,
            asked: first.phase == Phase::Waiting,
            done: first.task.status.is_terminal(),
        }
    }

    /// The next event to send; `None` ends the stream.
    async fn next(&mut self) -> Option<StreamResponse> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(event);
            }
            if self.done {
                return None;
            }
            match self.watch.next().await {
                Ok(RunEvent::Running) => self.running(),
                Ok(RunEvent::Progress) => self.working(),
                Ok(RunEvent::InputRequired { request }) => self.input_required(&request),
                Ok(RunEvent::Stream { kind, data }) => self.stream(&kind, data),
                Ok(RunEvent::Finished(_)) => self.finished().await?,
                Err(err) => {
                    tracing::warn!(task_id = %self.task_id, error = ?err.message, "an A2A stream lost its task");
                    return None;
                }
            }
        }
    }

    /// Created or resumed: queued for a worker. Only a resume changes what the follower last
    /// heard (`input-required`).
    fn running(&mut self) {
        if self.asked {
            self.asked = false;
            self.status(TaskState::Submitted);
        }
    }

    /// A worker shows it runs the task (an event of its own): `working`, once per turn.
    /// The runtime publishes nothing when a worker picks a task up, so this is the first
    /// moment a follower can know.
    fn working(&mut self) {
        if !self.working_sent {
            self.working_sent = true;
            self.status(TaskState::Working);
        }
    }

    fn input_required(&mut self, request: &Value) {
        self.working();
        // The next turn's run starts afresh: it gets its own `working` update.
        self.working_sent = false;
        self.asked = true;
        let message = mapping::request_message(&self.task_id, &self.context_id, request);
        self.pending
            .push_back(StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
                task_id: self.task_id.clone(),
                context_id: self.context_id.clone(),
                status: TaskStatus {
                    state: TaskState::InputRequired,
                    message: Some(message),
                    timestamp: Some(chrono::Utc::now()),
                },
                metadata: None,
            }));
        if self.closes_on_input {
            self.done = true;
        }
    }

    fn stream(&mut self, kind: &str, data: Value) {
        self.working();
        let first = !self.streamed.contains(&format!("{}-stream", self.task_id));
        let event = mapping::artifact_event(&self.task_id, &self.context_id, kind, data, first);
        self.streamed.insert(event.artifact.artifact_id.clone());
        self.pending
            .push_back(StreamResponse::ArtifactUpdate(event));
    }

    /// The run ended: the artifacts not streamed yet, then the final status, read from the
    /// task. `None` when the task cannot be read (gone, or the store failed): the stream ends.
    async fn finished(&mut self) -> Option<()> {
        self.done = true;
        let stored = match self.store.get(&self.task_id).await {
            Ok(Some(stored)) if stored.owner == self.owner => stored,
            Ok(_) => return None,
            Err(err) => {
                tracing::warn!(task_id = %self.task_id, error = %err, "could not read a finished A2A task");
                return None;
            }
        };
        let task = mapping::task_of(&stored, None);
        // A task that ended by a worker's hand (not cancelled before it ran) worked.
        if stored.attempt > 0 && stored.task.status != RuntimeStatus::Cancelled {
            self.working();
        }
        for artifact in task.artifacts.clone().unwrap_or_default() {
            if !self.streamed.contains(&artifact.artifact_id) {
                self.pending
                    .push_back(StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
                        task_id: self.task_id.clone(),
                        context_id: self.context_id.clone(),
                        artifact,
                        append: None,
                        last_chunk: Some(true),
                        metadata: None,
                    }));
            }
        }
        self.pending
            .push_back(StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
                task_id: self.task_id.clone(),
                context_id: self.context_id.clone(),
                status: task.status,
                metadata: None,
            }));
        Some(())
    }

    /// A status update without a message.
    fn status(&mut self, state: TaskState) {
        self.pending
            .push_back(StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
                task_id: self.task_id.clone(),
                context_id: self.context_id.clone(),
                status: TaskStatus {
                    state,
                    message: None,
                    timestamp: Some(chrono::Utc::now()),
                },
                metadata: None,
            }));
    }
}
