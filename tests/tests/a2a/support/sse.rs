//! The checks of a stream's shape: the task first, `WORKING` before any artifact, one final
//! status last.

use harness::TestResult;
use harness::a2a::{ensure, event_state, kind, state};
use serde_json::Value;

pub fn artifact_updates(events: &[Value]) -> Vec<&Value> {
    events
        .iter()
        .filter(|event| kind(event) == "artifactUpdate")
        .map(|event| &event["artifactUpdate"])
        .collect()
}

/// Checks a stream's shape: the task first, a `WORKING` status before any artifact and before
/// the end unless the task already was working (or was cancelled before it started), every
/// event of the task, and one final status update, of `last_state`, as the last event.
pub fn check_stream(events: &[Value], last_state: &str, what: &str) -> TestResult<String> {
    let first = events.first().ok_or_else(|| format!("{what}: no events"))?;
    ensure(kind(first) == "task", || {
        format!("{what}: the first event is not the task: {events:?}")
    })?;
    let task = &first["task"];
    let task_id = task["id"].as_str().unwrap_or_default().to_owned();
    let context_id = task["contextId"].as_str().unwrap_or_default().to_owned();
    ensure(
        matches!(state(task), "TASK_STATE_SUBMITTED" | "TASK_STATE_WORKING"),
        || format!("{what}: the task starts submitted or working: {first}"),
    )?;
    let first_artifact = events
        .iter()
        .position(|event| kind(event) == "artifactUpdate");
    let cancelled_before_start = last_state == "TASK_STATE_CANCELED" && first_artifact.is_none();
    if state(task) == "TASK_STATE_SUBMITTED" && !cancelled_before_start {
        let working = events.iter().position(|event| {
            kind(event) == "statusUpdate" && event_state(event) == "TASK_STATE_WORKING"
        });
        ensure(
            working.is_some_and(|working| first_artifact.is_none_or(|artifact| working < artifact)),
            || format!("{what}: WORKING is announced before any artifact: {events:?}"),
        )?;
    }
    for event in &events[1..] {
        let inner = &event[kind(event)];
        ensure(
            inner["taskId"] == task_id.as_str() && inner["contextId"] == context_id.as_str(),
            || format!("{what}: an event of another task or context: {event}"),
        )?;
    }
    let last = events.last().unwrap_or(first);
    ensure(
        kind(last) == "statusUpdate" && event_state(last) == last_state,
        || format!("{what}: the last event is not {last_state}: {events:?}"),
    )?;
    let finals = events
        .iter()
        .filter(|event| {
            kind(event) == "statusUpdate"
                && !matches!(
                    event_state(event),
                    "TASK_STATE_SUBMITTED" | "TASK_STATE_WORKING"
                )
        })
        .count();
    ensure(finals == 1, || {
        format!("{what}: exactly one final status: {events:?}")
    })?;
    Ok(task_id)
}
