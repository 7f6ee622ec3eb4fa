//! A task as a stream of A2A events: `SubscribeToTask`, and the stream a
//! `SendStreamingMessage` answers with ([`follow`]). The events come from the core's watch of
//! the run ([`crate::core::watch`]), told in A2A by a [`Narrator`].

use std::collections::VecDeque;
use std::sync::Arc;

use a2a::{StreamResponse, SubscribeToTaskRequest};
use futures::StreamExt;
use futures::stream::BoxStream;
use protocol::token::OwnerHash;
use store::{StoredTask, TaskStore};

use super::narrate::Narrator;
use super::{Caller, bounded, check_id, read_owned};
use crate::a2a::error::A2aError;
use crate::a2a::mapping;
use crate::core::watch::{RunEvent, Watch};

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
    watch: Watch,
    closes_on_input: bool,
    narrator: Narrator,
    pending: VecDeque<StreamResponse>,
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
            watch,
            closes_on_input,
            narrator: Narrator::new(
                first.task.task_id.clone(),
                mapping::context_of(first),
                Narrator::state_after_reading(first),
            ),
            pending,
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
            let mut out = Vec::new();
            match self.watch.next().await {
                Ok(RunEvent::Finished(terminal)) => {
                    self.done = true;
                    let stored =
                        read_finished(self.store.clone(), &self.owner, &self.task_id).await?;
                    // Told as the task records its end (`at` is for a task no longer read).
                    let now = chrono::Utc::now();
                    self.narrator
                        .finished(Some(&stored), &terminal, now, &mut out);
                }
                Ok(event) => {
                    let asks = matches!(event, RunEvent::InputRequired { .. });
                    // A live listener hears an event as it happens: now is its time.
                    self.narrator.on(event, chrono::Utc::now(), &mut out);
                    if asks && self.closes_on_input {
                        self.done = true;
                    }
                }
                Err(err) => {
                    tracing::warn!(task_id = %self.task_id, error = ?err.message, "an A2A stream lost its task");
                    return None;
                }
            }
            self.pending.extend(out);
        }
    }
}

/// The finished task, as stored. `None` when it cannot be read (gone, or the store failed):
/// the stream ends. (A free function: a `&Follow` held across the read would not be `Send`.)
async fn read_finished(
    store: Arc<dyn TaskStore>,
    owner: &OwnerHash,
    task_id: &str,
) -> Option<StoredTask> {
    match store.get(task_id).await {
        Ok(Some(stored)) if stored.owner == *owner => Some(stored),
        Ok(_) => None,
        Err(err) => {
            tracing::warn!(task_id, error = %err, "could not read a finished A2A task");
            None
        }
    }
}
