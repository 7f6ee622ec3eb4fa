//! `count`: a streaming entrypoint that emits `1..=input.n` as `delta` events and returns
//! `{"count": n}`. Handy for checking stream plumbing (ordering, resumption, fencing).

use protocol::ErrorCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::emitter::EmitError;
use crate::entrypoint::Entrypoint;
use crate::handler::{HandlerError, TaskContext};

pub const KEY: &str = "count";

/// Largest accepted `n`: every delta is a stored event, so the count is bounded.
pub const MAX_N: u32 = 10_000;

/// The error code when the run's lease was lost mid-stream (the task was cancelled, finished
/// or recovered by another worker): nothing this run writes lands any more.
pub const LEASE_LOST: &str = "lease_lost";

#[derive(Debug, Deserialize, JsonSchema)]
pub struct CountInput {
    /// How many deltas to emit (`1`, `2`, ..., `n`).
    #[schemars(range(max = 10_000))]
    pub n: u32,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct CountOutput {
    /// How many deltas were emitted (`n`).
    pub count: u32,
}

pub fn entrypoint() -> Entrypoint {
    Entrypoint::typed(KEY, "Streams the numbers 1 to input.n as delta events", run).streaming()
}

async fn run(input: CountInput, ctx: TaskContext) -> Result<CountOutput, HandlerError> {
    let n = input.n;
    if n > MAX_N {
        return Err(HandlerError::invalid_input(format!(
            "n must be at most {MAX_N}"
        )));
    }
    for i in 1..=n {
        if ctx.cancel.is_cancelled() {
            return Err(HandlerError::cancelled());
        }
        match ctx.events.delta(json!(i)).await {
            Ok(_seq) => {}
            Err(EmitError::Fenced) => {
                return Err(HandlerError::new(
                    LEASE_LOST,
                    format!("The task's lease was lost after {} of {n} deltas", i - 1),
                ));
            }
            Err(EmitError::Store(err)) => {
                return Err(HandlerError::new(
                    ErrorCode::ServiceUnavailable.as_str(),
                    format!("Could not emit delta {i} of {n}: {err}"),
                ));
            }
        }
    }
    Ok(CountOutput { count: n })
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use protocol::TaskStatus;
    use serde_json::{Value, json};
    use store::{CasOutcome, TaskStore, Transition};

    use super::*;
    use crate::builtins::test_support::{Harness, PATIENCE, TestResult, error, output};

    #[tokio::test]
    async fn emits_n_deltas_in_order_and_returns_the_count() -> TestResult {
        let n = 5;
        let input = json!({"n": n});
        let task = Harness::start(KEY, input.clone()).await?;
        let mut subscription = task.subscribe().await?;

        let outcome = task.call(&entrypoint(), input).await;
        assert_eq!(output(outcome)?, json!({"count": n}));

        let mut deltas: Vec<Value> = Vec::new();
        let mut last_seq = subscription.snapshot_seq;
        while deltas.len() < n {
            let Some(event) = tokio::time::timeout(PATIENCE, subscription.events.next()).await?
            else {
                return Err("the event stream ended early".into());
            };
            assert!(event.seq > last_seq, "sequence numbers increase");
            last_seq = event.seq;
            if event.event == "delta" {
                deltas.push(event.data);
            }
        }
        let expected: Vec<Value> = (1..=n).map(|i| json!({"delta": i})).collect();
        assert_eq!(deltas, expected);
        Ok(())
    }

    #[tokio::test]
    async fn zero_emits_nothing() -> TestResult {
        let input = json!({"n": 0});
        let task = Harness::start(KEY, input.clone()).await?;
        let before = task.store.get(&task.task_id).await?.map(|t| t.seq);
        let outcome = task.call(&entrypoint(), input).await;
        assert_eq!(output(outcome)?, json!({"count": 0}));
        let after = task.store.get(&task.task_id).await?.map(|t| t.seq);
        assert_eq!(before, after, "no event was published");
        Ok(())
    }

    #[tokio::test]
    async fn losing_the_lease_stops_with_lease_lost() -> TestResult {
        let input = json!({"n": 3});
        let task = Harness::start(KEY, input.clone()).await?;
        // A cancel is unfenced: it ends the task and with it the worker's lease.
        let cancelled = task
            .store
            .compare_and_set(
                &task.task_id,
                &[TaskStatus::Running],
                Transition::cancelled(),
                None,
            )
            .await?;
        assert!(matches!(cancelled, CasOutcome::Applied(_)), "{cancelled:?}");

        let outcome = task.call(&entrypoint(), input).await;
        let err = error(outcome)?;
        assert_eq!(err.code, LEASE_LOST);
        let emitted = task
            .store
            .emit(
                &task.lease,
                store::EventPayload {
                    event: "delta".into(),
                    data: json!({"delta": 1}),
                },
            )
            .await?;
        assert_eq!(emitted, None, "the lease is fenced out");
        Ok(())
    }

    #[tokio::test]
    async fn a_cancelled_run_stops_with_cancelled() -> TestResult {
        let input = json!({"n": MAX_N});
        let task = Harness::start(KEY, input.clone()).await?;
        let before = task.store.get(&task.task_id).await?.map(|t| t.seq);
        task.ctx.cancel.cancel();
        let outcome = tokio::time::timeout(PATIENCE, task.call(&entrypoint(), input)).await?;
        assert_eq!(error(outcome)?, HandlerError::cancelled());
        let after = task.store.get(&task.task_id).await?.map(|t| t.seq);
        assert_eq!(before, after, "no delta was published");
        Ok(())
    }

    #[tokio::test]
    async fn rejects_more_than_the_cap_and_non_numbers() -> TestResult {
        for input in [json!({"n": MAX_N + 1}), json!({"n": "3"}), json!({"n": -1})] {
            let (_task, outcome) = Harness::run(&entrypoint(), input.clone()).await?;
            assert_eq!(error(outcome)?.code, "invalid_input", "{input}");
        }
        Ok(())
    }

    #[test]
    fn is_streaming_with_a_bounded_schema() {
        let ep = entrypoint();
        assert!(ep.streaming);
        assert_eq!(ep.input_schema["properties"]["n"]["maximum"], json!(MAX_N));
        assert_eq!(ep.output_schema["required"], json!(["count"]));
    }
}
