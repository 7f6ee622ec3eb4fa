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
    let (code, stdout) = taskctl_admin_output(&["--json"], args, token).await?;
    let answer = serde_json::from_str(stdout.trim()).unwrap_or(Value::Null);
    Ok((code, answer))
}

/// `taskctl <format> admin <args>` with `token` (or none) as `OPERATOR_TOKEN`: its exit code
/// (-1 when killed) and standard output as text. `format` picks the output (`--json`, or
/// `--output human` for what an operator reads).
pub async fn taskctl_admin_output(
    format: &[&str],
    args: &[&str],
    token: Option<&str>,
) -> TestResult<(i32, String)> {
    let mut command = tokio::process::Command::new(binary("taskctl")?);
    command.args(format).arg("admin").args(args);
    command.env_remove("OPERATOR_TOKEN");
    if let Some(token) = token {
        command.env("OPERATOR_TOKEN", token);
    }
    let output = command.output().await?;
    Ok((
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    ))
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

/// The `(action, target)` of each audit log entry (`GET /console/api/audit`'s `entries`), in
/// the log's order (newest first); `?` where one is missing.
pub fn audit_actions(entries: &[Value]) -> Vec<(&str, &str)> {
    entries
        .iter()
        .map(|entry| {
            (
                entry["action"].as_str().unwrap_or("?"),
                entry["target"].as_str().unwrap_or("?"),
            )
        })
        .collect()
}

/// Creates a task of `skill` with `input` (as the message's text) under the access token
/// `token` through `POST {base}/tasks`; its id.
pub async fn create_task(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    skill: &str,
    input: &Value,
) -> TestResult<String> {
    let response = http
        .post(format!("{base}/tasks"))
        .header("Task-Access-Token", token)
        .json(&serde_json::json!({"skillId": skill, "message": {"role": "user", "content": {"text": input.to_string()}}}))
        .send()
        .await?;
    let status = response.status();
    let body: Value = response.json().await?;
    if !status.is_success() {
        return Err(format!("creating a {skill} task: {status} {body}").into());
    }
    Ok(body["taskId"].as_str().ok_or("no task id")?.to_owned())
}
