//! One run of an A2A skill: `SendStreamingMessage` when the agent streams (its events relayed
//! as they come), else `SendMessage` (then `GetTask` until the task ends when the agent answers
//! with one still working), under the task's run deadline.
//!
//! Relayed events: each artifact chunk as a `delta` event `{"a2a": {"artifact", "append",
//! "lastChunk"}}` (which our gateway hands its A2A callers as the same artifact update), each
//! status a `progress` event `{"agent": "a2a", "state", "message"?}`.
//!
//! A run that ends any other way than the agent ending the task (cancelled, lost lease, the
//! deadline, an error on our side, input-required) sends the agent a best-effort `CancelTask`.

use std::time::Duration;

use a2a::{Message, SendMessageResponse, StreamResponse, Task, TaskState};
use serde_json::{Value, json};

use super::result::{Artifacts, message_of, outcome, output_of};
use super::rpc::{Endpoint, result_in, result_of, too_large, unreachable};
use crate::handler::{Handler, HandlerError, HandlerFuture, HandlerOutput, TaskContext};
use crate::remote::stream::{frame_end, parse_frame};

/// The first wait between two `GetTask` polls; it doubles up to [`POLL_MAX`].
const POLL_FIRST: Duration = Duration::from_millis(100);
const POLL_MAX: Duration = Duration::from_secs(2);

/// The handler of one skill of an A2A agent.
pub struct A2aHandler {
    pub endpoint: Endpoint,
    pub skill: String,
    pub streaming: bool,
}

impl Handler for A2aHandler {
    fn call(&self, input: Value, ctx: TaskContext) -> HandlerFuture {
        let endpoint = self.endpoint.clone();
        let skill = self.skill.clone();
        let streaming = self.streaming;
        Box::pin(async move {
            let mut run = Run {
                endpoint,
                ctx,
                remote_task: None,
                ended: false,
                artifacts: Artifacts::default(),
            };
            let cancel = run.ctx.cancel.clone();
            // A run the agent did not end itself has the agent's task cancelled (on drop).
            tokio::select! {
                outcome = run.run(input, &skill, streaming) => outcome,
                () = cancel.cancelled() => Err(HandlerError::cancelled()),
            }
        })
    }
}

struct Run {
    endpoint: Endpoint,
    ctx: TaskContext,
    /// The agent's id of the task, once it named one.
    remote_task: Option<String>,
    /// The agent ended its task: nothing to cancel.
    ended: bool,
    artifacts: Artifacts,
}

impl Drop for Run {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        let (Some(id), Ok(runtime)) = (
            self.remote_task.take(),
            tokio::runtime::Handle::try_current(),
        ) else {
            return;
        };
        let endpoint = self.endpoint.clone();
        let mut ctx = self.ctx.clone();
        // The run's deadline may be spent: the cancel gets a short one of its own.
        ctx.deadline = tokio::time::Instant::now() + super::super::CONNECT_TIMEOUT;
        runtime.spawn(async move {
            match endpoint.call("CancelTask", json!({"id": id}), &ctx).await {
                Ok(_) => tracing::debug!(task_id = %ctx.task_id, "cancelled the agent's task"),
                Err(err) => {
                    tracing::debug!(task_id = %ctx.task_id, error = %err, "the agent did not cancel its task")
                }
            }
        });
    }
}

impl Run {
    async fn run(
        &mut self,
        input: Value,
        skill: &str,
        streaming: bool,
    ) -> Result<HandlerOutput, HandlerError> {
        let _ = self
            .ctx
            .events
            .progress(json!({"agent": "invoked", "attempt": self.ctx.attempt}))
            .await;
        // One message per attempt: the agent may tell a retry from a duplicate.
        let message_id = format!("taskcluster-{}-{}", self.ctx.task_id, self.ctx.attempt);
        let message = message_of(input, skill, message_id, self.ctx.context_id.clone());
        let params = json!({"message": message});
        if streaming {
            self.stream(params).await
        } else {
            let result = self.endpoint.call("SendMessage", params, &self.ctx).await?;
            let answer: SendMessageResponse = parse(result).map_err(invalid)?;
            match answer {
                SendMessageResponse::Message(message) => Ok(self.replied(&message)),
                SendMessageResponse::Task(task) => self.task(task).await,
            }
        }
    }

    /// A message answer ends the run with its parts.
    fn replied(&mut self, message: &Message) -> HandlerOutput {
        self.ended = true;
        HandlerOutput::new(output_of(&message.parts))
    }

    /// A task answer: its end, or polled until it ends.
    async fn task(&mut self, task: Task) -> Result<HandlerOutput, HandlerError> {
        self.remote_task = Some(task.id.clone());
        self.artifacts.replace_with(&task);
        if let Some(done) = self.ends(&task.status.state, task.status.message.as_ref()) {
            return done;
        }
        self.poll(task.id).await
    }

    /// How the run ends for the agent's task in `state`, if it does.
    fn ends(
        &mut self,
        state: &TaskState,
        message: Option<&Message>,
    ) -> Option<Result<HandlerOutput, HandlerError>> {
        let done = outcome(state, message, &self.artifacts)?;
        self.ended = state.is_terminal();
        Some(done)
    }

    /// `GetTask` until the task ends (the run deadline bounds it).
    async fn poll(&mut self, id: String) -> Result<HandlerOutput, HandlerError> {
        let mut wait = POLL_FIRST;
        loop {
            if self.ctx.remaining() <= wait {
                tokio::time::sleep(self.ctx.remaining()).await;
                return Err(HandlerError::new(
                    "task_timeout",
                    "the agent's task did not end before the run deadline",
                ));
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(POLL_MAX);
            let result = self
                .endpoint
                .call("GetTask", json!({"id": id}), &self.ctx)
                .await?;
            let task: Task = parse(result).map_err(invalid)?;
            self.artifacts.replace_with(&task);
            self.status(&task.status.state, task.status.message.as_ref())
                .await;
            if let Some(done) = self.ends(&task.status.state, task.status.message.as_ref()) {
                return done;
            }
        }
    }

    /// `SendStreamingMessage`, its events relayed until the task ends.
    async fn stream(&mut self, params: Value) -> Result<HandlerOutput, HandlerError> {
        let mut response = self
            .endpoint
            .post("SendStreamingMessage", params, &self.ctx, true)
            .await?;
        let sse = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| value.starts_with("text/event-stream"));
        if !sse {
            // An error (or a whole answer) as plain JSON-RPC.
            let body = self.endpoint.read(response).await?;
            let event: StreamResponse = parse(result_of(&body)?).map_err(invalid)?;
            if let Some(done) = self.event(event).await? {
                return done;
            }
            return self.after_stream().await;
        }
        let max_bytes = self.endpoint.max_bytes;
        let mut buffer: Vec<u8> = Vec::new();
        let mut artifact_bytes = 0usize;
        loop {
            while let Some((end, separator)) = frame_end(&buffer) {
                let frame: Vec<u8> = buffer.drain(..end + separator).take(end).collect();
                let Some((_, data)) = parse_frame(&frame) else {
                    continue;
                };
                let event: StreamResponse = parse(result_in(data)?).map_err(invalid)?;
                if let StreamResponse::ArtifactUpdate(_) = &event {
                    artifact_bytes += end;
                    if artifact_bytes > max_bytes {
                        return Err(too_large(max_bytes));
                    }
                }
                if let Some(done) = self.event(event).await? {
                    return done;
                }
            }
            if buffer.len() > max_bytes {
                return Err(too_large(max_bytes));
            }
            match response.chunk().await {
                Ok(Some(chunk)) => buffer.extend_from_slice(&chunk),
                Ok(None) => return self.after_stream().await,
                Err(err) => return Err(unreachable(err)),
            }
        }
    }

    /// The stream closed before the task ended: the task is polled, if the agent named one.
    async fn after_stream(&mut self) -> Result<HandlerOutput, HandlerError> {
        match self.remote_task.clone() {
            Some(id) => self.poll(id).await,
            None => Err(HandlerError::transient(
                "agent_invalid_response",
                "the agent's stream ended before it answered",
            )),
        }
    }

    /// One stream event: relayed, and the run's end when it ends the task.
    async fn event(
        &mut self,
        event: StreamResponse,
    ) -> Result<Option<Result<HandlerOutput, HandlerError>>, HandlerError> {
        match event {
            StreamResponse::Message(message) => Ok(Some(Ok(self.replied(&message)))),
            StreamResponse::Task(task) => {
                self.remote_task = Some(task.id.clone());
                self.artifacts.replace_with(&task);
                self.status(&task.status.state, task.status.message.as_ref())
                    .await;
                Ok(self.ends(&task.status.state, task.status.message.as_ref()))
            }
            StreamResponse::StatusUpdate(update) => {
                if self.remote_task.is_none() {
                    self.remote_task = Some(update.task_id.clone());
                }
                self.status(&update.status.state, update.status.message.as_ref())
                    .await;
                Ok(self.ends(&update.status.state, update.status.message.as_ref()))
            }
            StreamResponse::ArtifactUpdate(update) => {
                if self.remote_task.is_none() {
                    self.remote_task = Some(update.task_id.clone());
                }
                let append = update.append.unwrap_or(false);
                let chunk = json!({"a2a": {
                    "artifact": update.artifact,
                    "append": append,
                    "lastChunk": update.last_chunk.unwrap_or(false),
                }});
                if self.ctx.events.emit("delta", chunk).await.is_err() {
                    // Fenced out: the run is over for this worker.
                    return Err(HandlerError::cancelled());
                }
                self.artifacts.update(update.artifact, append);
                Ok(None)
            }
        }
    }

    /// A status of the agent's task as a progress event (best effort: a fenced-out write means
    /// the run is over, which the runtime sees for itself).
    async fn status(&self, state: &TaskState, message: Option<&Message>) {
        let mut progress = json!({"agent": "a2a", "state": state});
        if let Some(message) = message {
            progress["message"] = json!({"parts": message.parts});
        }
        let _ = self.ctx.events.progress(progress).await;
    }
}

/// An A2A object from a JSON-RPC result.
fn parse<T: serde::de::DeserializeOwned>(result: Value) -> Result<T, serde_json::Error> {
    serde_json::from_value(result)
}

/// An answer that is no A2A v1.0 object.
fn invalid(err: serde_json::Error) -> HandlerError {
    HandlerError::new(
        "agent_invalid_response",
        format!("the agent's answer is not an A2A v1.0 object: {err}"),
    )
}
