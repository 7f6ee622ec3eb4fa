//! What the operator suites share: `taskctl admin` as a subprocess, and polling the cluster
//! for a state an action leads to (a worker's heartbeat or a gateway's listing takes it up on
//! its own schedule, so there is no event to await from outside).

use std::time::Duration;

use serde_json::Value;

use crate::TestResult;
use crate::process::binary;

/// `taskctl --json admin ARGS` with `token` as `OPERATOR_TOKEN` (none: unset, whatever the
/// test's own environment says): its exit code and the JSON it printed (`null` for none).
pub async fn taskctl_admin(args: &[&str], token: Option<&str>) -> TestResult<(i32, Value)> {
    let mut command = tokio::process::Command::new(binary("taskctl")?);
    command.arg("--json").arg("admin").args(args);
    command.env_remove("OPERATOR_TOKEN");
    if let Some(token) = token {
        command.env("OPERATOR_TOKEN", token);
    }
    let output = command.output().await?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let answer = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
    Ok((output.status.code().unwrap_or(-1), answer))
}

/// Polls `check` every 50 ms until it holds, failing after `patience` with `what` never seen.
pub async fn until(
    what: &str,
    patience: Duration,
    mut check: impl AsyncFnMut() -> TestResult<bool>,
) -> TestResult {
    let start = tokio::time::Instant::now();
    while !check().await? {
        if start.elapsed() > patience {
            return Err(format!("never: {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}
