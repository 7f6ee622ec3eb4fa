//! `taskctl admin task|cancel|rerun URL ID`: the operator's actions on one task, through the
//! console API (`/console/api/tasks/{id}`), with the operator token.
//!
//! - `task`: the task as the operator sees it: status, phase, attempts, lease, times, error,
//!   whether it was paid, its events' kinds (its input and result only when the gateway runs
//!   with `--console-show-payloads`);
//! - `cancel`: cancels a running task, as its owner could;
//! - `rerun`: runs a failed or cancelled task again as a new task of the same owner, never
//!   charged; prints the new task's id;
//! - `failed URL [KEY] [--cursor C] [--limit N]`: a page of KEY's failed tasks, newest first,
//!   and the cursor of the next; without KEY the entrypoints that have failed tasks.

use serde_json::Value;

use super::admin::{call, call_with_query};
use crate::{CmdResult, Context};

fn text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Null => "-".to_owned(),
        other => other.to_string(),
    }
}

fn time(value: &Value) -> String {
    value
        .as_u64()
        .map(|ms| protocol::Timestamp(ms).to_iso())
        .unwrap_or_else(|| "-".to_owned())
}

pub async fn task(context: &Context, token: &str, url: &str, id: &str) -> CmdResult {
    let answer = call(context, token, url, &["console", "api", "tasks", id], None).await?;
    if context.output.is_json() {
        context.output.json(&answer);
        return Ok(());
    }
    let out = &context.output;
    out.line(&format!("task        {}", text(&answer["taskId"])));
    out.line(&format!(
        "status      {} ({})",
        text(&answer["status"]),
        text(&answer["phase"])
    ));
    out.line(&format!("entrypoint  {}", text(&answer["entrypoint"])));
    out.line(&format!("created     {}", time(&answer["createdAtMs"])));
    out.line(&format!("updated     {}", time(&answer["updatedAtMs"])));
    out.line(&format!(
        "attempt     {} of {} ({} retries)",
        text(&answer["attempt"]),
        text(&answer["maxAttempts"]),
        text(&answer["retries"])
    ));
    if let Some(lease) = answer.get("lease") {
        out.line(&format!(
            "lease       {} epoch {} until {}",
            text(&lease["holder"]),
            text(&lease["epoch"]),
            time(&lease["expiresAtMs"])
        ));
    }
    if answer.get("runDeadlineMs").is_some() {
        out.line(&format!("deadline    {}", time(&answer["runDeadlineMs"])));
    }
    for (label, key) in [("error", "error"), ("last error", "lastError")] {
        if let Some(error) = answer.get(key) {
            out.line(&format!(
                "{label:<12}{}: {}",
                text(&error["code"]),
                text(&error["message"])
            ));
        }
    }
    out.line(&format!("paid        {}", text(&answer["paid"])));
    if let Some(original) = answer.get("rerunOf") {
        out.line(&format!("rerun of    {}", text(original)));
    }
    out.line("events");
    for event in answer["events"].as_array().into_iter().flatten() {
        out.line(&format!(
            "  {:>4}  {}  {}",
            text(&event["seq"]),
            text(&event["kind"]),
            event.get("atMs").map(time).unwrap_or_default()
        ));
    }
    if answer["payloadsShown"] == true {
        out.line(&format!("input       {}", answer["input"]));
        if let Some(result) = answer.get("result") {
            out.line(&format!("result      {result}"));
        }
    }
    Ok(())
}

pub async fn cancel(context: &Context, token: &str, url: &str, id: &str) -> CmdResult {
    let path = ["console", "api", "tasks", id, "cancel"];
    let answer = call(context, token, url, &path, Some(serde_json::json!({}))).await?;
    if context.output.is_json() {
        context.output.json(&answer);
    } else {
        context.output.line(&format!("{id}: cancelled"));
    }
    Ok(())
}

pub async fn rerun(context: &Context, token: &str, url: &str, id: &str) -> CmdResult {
    let path = ["console", "api", "tasks", id, "rerun"];
    let answer = call(context, token, url, &path, Some(serde_json::json!({}))).await?;
    if context.output.is_json() {
        context.output.json(&answer);
    } else {
        context.output.line(&format!(
            "{id}: re-run as {}",
            text(&answer["task"]["taskId"])
        ));
    }
    Ok(())
}

/// Which page of failed tasks `failed` asks for.
pub struct Page<'a> {
    pub key: Option<&'a str>,
    pub cursor: Option<&'a str>,
    pub limit: Option<u32>,
}

pub async fn failed(context: &Context, token: &str, url: &str, page: Page<'_>) -> CmdResult {
    let mut query = Vec::new();
    if let Some(key) = page.key {
        query.push(("entrypoint", key.to_owned()));
    }
    if let Some(cursor) = page.cursor {
        query.push(("cursor", cursor.to_owned()));
    }
    if let Some(limit) = page.limit {
        query.push(("limit", limit.to_string()));
    }
    let path = ["console", "api", "failed"];
    let answer = call_with_query(context, token, url, &path, &query, None).await?;
    if context.output.is_json() {
        context.output.json(&answer);
        return Ok(());
    }
    let out = &context.output;
    if page.key.is_none() {
        let rows = answer["entrypoints"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if rows.is_empty() {
            out.line("no hosted entrypoint has failed tasks");
        }
        for row in rows {
            out.line(&format!("{}  {}", text(&row["key"]), text(&row["failed"])));
        }
        return Ok(());
    }
    let tasks = answer["tasks"].as_array().cloned().unwrap_or_default();
    if tasks.is_empty() {
        out.line("no failed task");
    }
    for task in tasks {
        out.line(&format!(
            "{}  {}  attempt {}  {}: {}",
            time(&task["finishedAtMs"]),
            text(&task["id"]),
            text(&task["attempt"]),
            text(&task["code"]),
            text(&task["message"]),
        ));
    }
    if let Some(next) = answer["nextCursor"].as_str() {
        out.line(&format!("more: --cursor {next}"));
    }
    Ok(())
}
