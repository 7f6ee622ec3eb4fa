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

/// The default cap on `ms` (`--max-sleep-ms`): one minute. A caller cannot hold a run slot
/// (and a lease) longer than this with one sleep.
pub const DEFAULT_MAX_SLEEP_MS: u64 = 60_000;

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

/// `sleep` capped at [`DEFAULT_MAX_SLEEP_MS`].
pub fn entrypoint() -> Entrypoint {
    entrypoint_with_max(DEFAULT_MAX_SLEEP_MS)
}

/// `sleep` refusing an `ms` above `max_ms` (itself at most [`MAX_MS`]): the input schema says
/// `maximum: max_ms`, so the gateway refuses a larger value (400 `invalid_input`) before the
/// task is stored, and the handler checks it again.
pub fn entrypoint_with_max(max_ms: u64) -> Entrypoint {
    let max_ms = max_ms.min(MAX_MS);
    let mut entrypoint = Entrypoint::typed(
        KEY,
        "Waits input.ms milliseconds",
        move |input: SleepInput, ctx: TaskContext| run(input, ctx, max_ms),
    );
    if let Some(ms) = entrypoint
        .input_schema
        .pointer_mut("/properties/ms")
        .and_then(serde_json::Value::as_object_mut)
    {
        ms.insert("maximum".to_owned(), max_ms.into());
    }
    entrypoint
}

async fn run(
    input: SleepInput,
    ctx: TaskContext,
    max_ms: u64,
) -> Result<SleepOutput, HandlerError> {
    if input.ms > max_ms {
        return Err(HandlerError::invalid_input(format!(
            "ms must be at most {max_ms}"
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
        let outcome =
            tokio::time::timeout(PATIENCE, task.call(&entrypoint_with_max(HOUR_MS), input)).await?;
        assert_eq!(error(outcome)?, HandlerError::cancelled());
        Ok(())
    }

    #[tokio::test]
    async fn cancelling_while_asleep_returns_cancelled() -> TestResult {
        let input = json!({"ms": HOUR_MS});
        let task = Harness::start(KEY, input.clone()).await?;
        let ep = entrypoint_with_max(HOUR_MS);
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
        let ep = entrypoint_with_max(u64::MAX);
        assert_eq!(
            ep.input_schema["properties"]["ms"]["maximum"],
            json!(MAX_MS)
        );
        let (_task, outcome) = Harness::run(&ep, json!({"ms": MAX_MS + 1})).await?;
        assert_eq!(error(outcome)?.code, "invalid_input");
        Ok(())
    }

    #[tokio::test]
    async fn rejects_more_than_the_cap() -> TestResult {
        let ep = entrypoint_with_max(50);
        assert_eq!(ep.input_schema["properties"]["ms"]["maximum"], json!(50));
        let (_task, outcome) = Harness::run(&ep, json!({"ms": 51})).await?;
        assert_eq!(error(outcome)?.code, "invalid_input");
        let (_task, outcome) = Harness::run(&ep, json!({"ms": 50})).await?;
        assert_eq!(output(outcome)?, json!({"slept": 50}));
        let default = entrypoint();
        assert_eq!(
            default.input_schema["properties"]["ms"]["maximum"],
            json!(DEFAULT_MAX_SLEEP_MS)
        );
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
