//! `fail`: fails on purpose with the requested error code and message, for exercising failure
//! paths (task `error`, stream `error` + `run-end failed`) end to end; with `retryable` the
//! failure asks for another attempt (the worker's retry policy), and with `times` only the first
//! attempts fail, so that retries can be exercised on real processes.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::entrypoint::Entrypoint;
use crate::handler::{HandlerError, TaskContext};

pub const KEY: &str = "fail";

/// The message when the input gives none.
pub const DEFAULT_MESSAGE: &str = "Failed on request";

#[derive(Debug, Deserialize, JsonSchema)]
pub struct FailInput {
    /// The error code the task fails with, e.g. `"upstream_unavailable"`; not blank (the
    /// pattern says so in the published schema, which the gateway checks).
    #[schemars(regex(pattern = r"\S"))]
    pub code: String,
    /// The error message; "Failed on request" when absent.
    pub message: Option<String>,
    /// Whether the failure may pass: the task gets another attempt after a backoff, within
    /// the worker's retry policy (`--retry fail=N`). Default false.
    #[serde(default)]
    pub retryable: bool,
    /// With `retryable`: the least milliseconds to wait before the next attempt (what an
    /// upstream's `Retry-After` asks for); the backoff is never shorter.
    pub after_ms: Option<u64>,
    /// Fail only attempts 1 to `times`; a later attempt succeeds with `{"attempt": n}`.
    /// Absent: every attempt fails.
    pub times: Option<u32>,
}

/// What an attempt past `input.times` returns; an entrypoint given no `times` never succeeds.
#[derive(Debug, Serialize, JsonSchema)]
pub struct FailOutput {
    /// The attempt that succeeded (1 for the first).
    pub attempt: u32,
    /// The failure of the attempt before, as the handler was shown it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

pub fn entrypoint() -> Entrypoint {
    Entrypoint::typed(KEY, "Fails with input.code and input.message", run)
}

async fn run(input: FailInput, ctx: TaskContext) -> Result<FailOutput, HandlerError> {
    if input.code.trim().is_empty() {
        return Err(HandlerError::invalid_input("code must not be empty"));
    }
    if input.times.is_some_and(|times| ctx.attempt > times) {
        return Ok(FailOutput {
            attempt: ctx.attempt,
            last_error: ctx.last_error.map(|error| error.code),
        });
    }
    let message = input.message.unwrap_or_else(|| DEFAULT_MESSAGE.to_owned());
    let error = HandlerError::new(input.code, message);
    Err(match (input.retryable, input.after_ms) {
        (true, Some(ms)) => error.retry_after(Duration::from_millis(ms)),
        (true, None) => error.retryable(),
        (false, _) => error,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::builtins::test_support::{Harness, TestResult, error, output};

    #[tokio::test]
    async fn fails_with_the_requested_code_and_message() -> TestResult {
        let input = json!({"code": "upstream_unavailable", "message": "try later"});
        let (_task, outcome) = Harness::run(&entrypoint(), input).await?;
        let err = error(outcome)?;
        assert_eq!(err.code, "upstream_unavailable");
        assert_eq!(err.message, "try later");
        assert_eq!(err.details, None);
        Ok(())
    }

    #[tokio::test]
    async fn a_retryable_failure_asks_for_a_retry() -> TestResult {
        let input = json!({"code": "busy", "retryable": true});
        let (_task, outcome) = Harness::run(&entrypoint(), input).await?;
        let err = error(outcome)?;
        assert_eq!(err.code, "busy");
        assert!(err.is_retryable());
        let (_task, plain) = Harness::run(&entrypoint(), json!({"code": "busy"})).await?;
        assert!(!error(plain)?.is_retryable());
        Ok(())
    }

    #[tokio::test]
    async fn times_fails_only_the_first_attempts() -> TestResult {
        // The harness runs attempt 1.
        let (_task, failed) = Harness::run(&entrypoint(), json!({"code": "x", "times": 1})).await?;
        assert_eq!(error(failed)?.code, "x");
        let (_task, passed) = Harness::run(&entrypoint(), json!({"code": "x", "times": 0})).await?;
        assert_eq!(output(passed)?, json!({"attempt": 1}));
        Ok(())
    }

    #[tokio::test]
    async fn message_defaults() -> TestResult {
        let (_task, outcome) = Harness::run(&entrypoint(), json!({"code": "boom"})).await?;
        let err = error(outcome)?;
        assert_eq!(err.code, "boom");
        assert_eq!(err.message, DEFAULT_MESSAGE);
        Ok(())
    }

    #[tokio::test]
    async fn missing_or_empty_code_is_invalid_input() -> TestResult {
        for input in [json!({}), json!({"code": 7}), json!({"code": " "})] {
            let (_task, outcome) = Harness::run(&entrypoint(), input.clone()).await?;
            assert_eq!(error(outcome)?.code, "invalid_input", "{input}");
        }
        Ok(())
    }
}
