//! `sleep`: waits `input.ms` milliseconds and returns `{"slept": ms}`, as upstream's benchmark
//! agent does, after a `progress` event `{"sleeping": ms, "attempt": n}`. Unlike a bare timer it
//! returns `cancelled` as soon as the run is cancelled. The attempt number in the progress event
//! lets the chaos run see which run wrote it: a write of an older run landing after a newer
//! run's would be a fenced write that got through.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::entrypoint::Entrypoint;
use crate::handler::{HandlerError, TaskContext};

pub const KEY: &str = "sleep";

/// Upstream's bound (`Number.MAX_SAFE_INTEGER`): larger values are not exact in JSON clients.
pub const MAX_MS: u64 = 9_007_199_254_740_991;

#[derive(Debug, Deserialize, JsonSchema)]
pub struct SleepInput {
    /// Milliseconds to wait.
    #[schemars(range(max = 9_007_199_254_740_991u64))]
    pub ms: u64,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct SleepOutput {
    /// Milliseconds waited (the requested `ms`).
    pub slept: u64,
}

pub fn entrypoint() -> Entrypoint {
    Entrypoint::typed(KEY, "Waits input.ms milliseconds", run)
}

async fn run(input: SleepInput, ctx: TaskContext) -> Result<SleepOutput, HandlerError> {
    if input.ms > MAX_MS {
        return Err(HandlerError::invalid_input(format!(
            "ms must be at most {MAX_MS}"
        )));
    }
    // Tells subscribers (and tests) that the run started; best effort: a lost lease shows up
    // as cancellation anyway.
    let _ = ctx
        .events
        .progress(serde_json::json!({"sleeping": input.ms, "attempt": ctx.attempt}))
        .await;
    tokio::select! {
        // Checked first: a run cancelled before it started does not sleep at all.
        biased;
        () = ctx.cancel.cancelled() => Err(HandlerError::cancelled()),
        () = tokio::time::sleep(Duration::from_millis(input.ms)) => Ok(SleepOutput { slept: input.ms }),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::builtins::test_support::{Harness, PATIENCE, TestResult, error, output};

    /// Long enough that a test finishing at all shows the sleep was cut short.
    const HOUR_MS: u64 = 3_600_000;

    #[tokio::test]
    async fn sleeps_and_reports_the_time_slept() -> TestResult {
        let (_task, outcome) = Harness::run(&entrypoint(), json!({"ms": 20})).await?;
        assert_eq!(output(outcome)?, json!({"slept": 20}));
        Ok(())
    }

    #[tokio::test]
    async fn zero_ms_returns_at_once() -> TestResult {
        let (_task, outcome) = Harness::run(&entrypoint(), json!({"ms": 0})).await?;
        assert_eq!(output(outcome)?, json!({"slept": 0}));
        Ok(())
    }

    #[tokio::test]
    async fn a_cancelled_run_does_not_sleep() -> TestResult {
        let input = json!({"ms": HOUR_MS});
        let task = Harness::start(KEY, input.clone()).await?;
        task.ctx.cancel.cancel();
        let outcome = tokio::time::timeout(PATIENCE, task.call(&entrypoint(), input)).await?;
        assert_eq!(error(outcome)?, HandlerError::cancelled());
        Ok(())
    }

    #[tokio::test]
    async fn cancelling_while_asleep_returns_cancelled() -> TestResult {
        let input = json!({"ms": HOUR_MS});
        let task = Harness::start(KEY, input.clone()).await?;
        let ep = entrypoint();
        let running = tokio::spawn(ep.handler.call(input, task.ctx.clone()));
        tokio::time::sleep(Duration::from_millis(20)).await;
        task.ctx.cancel.cancel();
        let outcome = tokio::time::timeout(PATIENCE, running).await??;
        assert_eq!(error(outcome)?, HandlerError::cancelled());
        Ok(())
    }

    #[tokio::test]
    async fn rejects_a_non_number_as_invalid_input() -> TestResult {
        for input in [
            json!({"ms": "x"}),
            json!({}),
            json!({"ms": -1}),
            json!({"ms": 1.5}),
        ] {
            let (_task, outcome) = Harness::run(&entrypoint(), input.clone()).await?;
            assert_eq!(error(outcome)?.code, "invalid_input", "{input}");
        }
        Ok(())
    }

    #[tokio::test]
    async fn rejects_more_than_upstreams_bound() -> TestResult {
        let (_task, outcome) = Harness::run(&entrypoint(), json!({"ms": MAX_MS + 1})).await?;
        assert_eq!(error(outcome)?.code, "invalid_input");
        Ok(())
    }

    #[test]
    fn schema_requires_an_integer_ms() {
        let ep = entrypoint();
        assert_eq!(ep.input_schema["required"], json!(["ms"]));
        assert_eq!(
            ep.input_schema["properties"]["ms"]["type"],
            json!("integer")
        );
        assert_eq!(ep.input_schema["properties"]["ms"]["minimum"], json!(0));
        assert_eq!(ep.output_schema["required"], json!(["slept"]));
    }
}
