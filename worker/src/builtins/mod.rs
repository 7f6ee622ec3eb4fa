//! The entrypoints every worker can host, one file each:
//!
//! - [`echo`]: returns its input unchanged (any JSON);
//! - [`sleep`]: waits `input.ms` milliseconds, returns `{"slept": ms}`, stops early when cancelled;
//! - [`fail`]: fails with `input.code` and `input.message`;
//! - [`count`]: streams `1..=input.n` as `delta` events, returns `{"count": n}`;
//! - [`summarize`]: an extractive summary of `input.text`.
//!
//! `echo` and `sleep` match the upstream benchmark agent's built-ins (descriptions, outputs and
//! input errors); the others are ours.
//!
//! One more is not in [`all`] and is hosted only with `--a2a-tck-agent`:
//!
//! - [`tck`]: the A2A conformance agent the A2A TCK drives; streams, and behaves by the A2A
//!   message's `messageId` prefix (artifacts, a direct reply, a rejection, streamed chunks).

pub mod count;
pub mod echo;
pub mod fail;
pub mod sleep;
pub mod summarize;
pub mod tck;

use crate::entrypoint::Entrypoints;

/// The default built-in entrypoints (every one but [`tck`]).
pub fn all() -> Entrypoints {
    Entrypoints::new()
        .with(echo::entrypoint())
        .with(sleep::entrypoint())
        .with(fail::entrypoint())
        .with(count::entrypoint())
        .with(summarize::entrypoint())
}

/// A real task for handler tests: created in a [`MemoryStore`], claimed through the ready queue
/// and activated, so the [`TaskContext`] it hands out carries a live, fenced lease.
#[cfg(test)]
pub(crate) mod test_support {
    use std::error::Error;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use protocol::token::{AccessToken, OwnerHash};
    use serde_json::Value;
    use store::{
        Admission, Invocation, Lease, MemoryStore, MemoryStoreConfig, NewTask, Subscription,
        TaskStore,
    };
    use tokio_util::sync::CancellationToken;

    use crate::emitter::Emitter;
    use crate::entrypoint::Entrypoint;
    use crate::handler::{HandlerError, HandlerOutput, TaskContext};

    pub(crate) type TestResult<T = ()> = Result<T, Box<dyn Error + Send + Sync>>;

    /// Bounds every wait in tests, so a broken handler fails instead of hanging.
    pub(crate) const PATIENCE: Duration = Duration::from_secs(10);

    const LEASE_TTL: Duration = Duration::from_secs(10);
    const MAX_RUN: Duration = Duration::from_secs(60);

    pub(crate) struct Harness {
        pub store: Arc<MemoryStore>,
        pub owner: OwnerHash,
        pub task_id: String,
        pub lease: Lease,
        pub ctx: TaskContext,
    }

    impl Harness {
        /// A task of `entrypoint` with `input`, claimed and activated by worker `w`.
        pub(crate) async fn start(entrypoint: &str, input: Value) -> TestResult<Harness> {
            let store = Arc::new(MemoryStore::new(MemoryStoreConfig::default()));
            let owner = AccessToken::generate().owner_hash();
            let task_id = uuid::Uuid::new_v4().to_string();
            store
                .create(NewTask {
                    task_id: task_id.clone(),
                    owner: owner.clone(),
                    invocation: Invocation {
                        entrypoint: entrypoint.to_owned(),
                        input,
                        context_id: None,
                        metadata: None,
                        trace_context: Default::default(),
                    },
                    admission: Admission::Queued,
                    max_attempts: 3,
                    retention: None,
                    source: None,
                    private_owner: false,
                })
                .await?;
            let claims = store
                .take_next(&[entrypoint.to_owned()], "w", LEASE_TTL, 1, Duration::ZERO)
                .await?;
            let Some(claim) = claims.into_iter().next() else {
                return Err("the queued task was not claimed".into());
            };
            let Some(activation) = store
                .activate_execution(&claim.lease, LEASE_TTL, MAX_RUN)
                .await?
            else {
                return Err("the claim was not activated".into());
            };
            let lease = activation.lease;
            let events = Emitter::new(store.clone(), Arc::new(Mutex::new(lease.clone())));
            let ctx = TaskContext {
                task_id: task_id.clone(),
                attempt: activation.attempt,
                max_attempts: claim.max_attempts,
                last_error: None,
                deadline: tokio::time::Instant::now() + MAX_RUN,
                context_id: None,
                metadata: None,
                cancel: CancellationToken::new(),
                events,
            };
            Ok(Harness {
                store,
                owner,
                task_id,
                lease,
                ctx,
            })
        }

        /// Starts a task of `entrypoint` with `input` and runs its handler on it.
        pub(crate) async fn run(
            entrypoint: &Entrypoint,
            input: Value,
        ) -> TestResult<(Harness, Result<HandlerOutput, HandlerError>)> {
            let harness = Harness::start(&entrypoint.key, input.clone()).await?;
            let outcome = harness.call(entrypoint, input).await;
            Ok((harness, outcome))
        }

        /// Runs `entrypoint`'s handler with this task's context.
        pub(crate) async fn call(
            &self,
            entrypoint: &Entrypoint,
            input: Value,
        ) -> Result<HandlerOutput, HandlerError> {
            entrypoint.handler.call(input, self.ctx.clone()).await
        }

        /// Subscribes to the task's events from now on.
        pub(crate) async fn subscribe(&self) -> TestResult<Subscription> {
            match self
                .store
                .subscribe(&self.task_id, &self.owner, None)
                .await?
            {
                Some(subscription) => Ok(subscription),
                None => Err("the task's owner could not subscribe".into()),
            }
        }
    }

    /// The output of a successful run, or the handler's error as a test failure.
    pub(crate) fn output(outcome: Result<HandlerOutput, HandlerError>) -> TestResult<Value> {
        match outcome {
            Ok(output) => Ok(output.output),
            Err(err) => Err(format!("handler failed: {err}").into()),
        }
    }

    /// The error of a failed run, or the handler's output as a test failure.
    pub(crate) fn error(outcome: Result<HandlerOutput, HandlerError>) -> TestResult<HandlerError> {
        match outcome {
            Ok(output) => Err(format!("handler succeeded with {}", output.output).into()),
            Err(err) => Ok(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_hosts_every_builtin_and_only_count_streams() {
        let entrypoints = all();
        assert_eq!(
            entrypoints.keys(),
            vec!["count", "echo", "fail", "sleep", "summarize"]
        );
        let streaming: Vec<String> = entrypoints
            .infos()
            .into_iter()
            .filter(|info| info.streaming)
            .map(|info| info.key)
            .collect();
        assert_eq!(streaming, vec!["count"]);
    }
}
