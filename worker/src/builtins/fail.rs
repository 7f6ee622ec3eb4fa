//! `fail`: fails on purpose with the requested error code and message, for exercising failure
//! paths (task `error`, stream `error` + `run-end failed`) end to end.

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
}

/// Never produced; the output schema of an entrypoint that always fails.
#[derive(Debug, Serialize, JsonSchema)]
pub struct FailOutput {}

pub fn entrypoint() -> Entrypoint {
    Entrypoint::typed(KEY, "Fails with input.code and input.message", run)
}

async fn run(input: FailInput, _ctx: TaskContext) -> Result<FailOutput, HandlerError> {
    if input.code.trim().is_empty() {
        return Err(HandlerError::invalid_input("code must not be empty"));
    }
    let message = input.message.unwrap_or_else(|| DEFAULT_MESSAGE.to_owned());
    Err(HandlerError::new(input.code, message))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::builtins::test_support::{Harness, TestResult, error};

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
