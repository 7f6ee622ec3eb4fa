//! The task as clients see it: `{taskId, status, contextId?, createdAt, updatedAt, result?, error?}`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Timestamp;

/// The four wire statuses. Store-internal phases (reserved, queued, prepared, active) all read
/// as `running` on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskStatus {
    Running,
    Completed,
    Failed,
    Cancelled,
}

impl TaskStatus {
    pub const ALL: [TaskStatus; 4] = [
        TaskStatus::Running,
        TaskStatus::Completed,
        TaskStatus::Failed,
        TaskStatus::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Running => "running",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }

    pub fn is_terminal(self) -> bool {
        !matches!(self, TaskStatus::Running)
    }
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A status string that is not one of the four.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown task status {0:?}")]
pub struct UnknownStatus(pub String);

impl FromStr for TaskStatus {
    type Err = UnknownStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TaskStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| UnknownStatus(s.to_owned()))
    }
}

/// `result` of a completed task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskResult {
    pub output: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

impl TaskResult {
    pub fn output(output: Value) -> Self {
        TaskResult {
            output,
            usage: None,
            model: None,
        }
    }
}

/// `error` of a failed task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskError {
    pub code: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

impl TaskError {
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        TaskError {
            code: code.into(),
            message: message.into(),
            details: None,
        }
    }
}

/// A task as returned by `GET /tasks/:id` and in lists. Field order matches upstream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    pub task_id: String,
    pub status: TaskStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<TaskResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<TaskError>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn serializes_like_upstream() {
        let task = Task {
            task_id: "t1".into(),
            status: TaskStatus::Failed,
            context_id: None,
            created_at: Timestamp(1_796_205_335_048),
            updated_at: Timestamp(1_796_205_335_252),
            result: None,
            error: Some(TaskError::new(
                "task_timeout",
                "Task exceeded its 200ms execution limit",
            )),
        };
        let text = serde_json::to_string(&task).unwrap_or_default();
        assert_eq!(
            text,
            r#"{"taskId":"t1","status":"failed","createdAt":"2026-12-02T09:55:35.048Z","updatedAt":"2026-12-02T09:55:35.252Z","error":{"code":"task_timeout","message":"Task exceeded its 200ms execution limit"}}"#
        );
        let with_ctx = Task {
            context_id: Some("ctx-1".into()),
            status: TaskStatus::Completed,
            error: None,
            result: Some(TaskResult::output(json!("{\"y\":2}"))),
            ..task
        };
        let value = serde_json::to_value(&with_ctx).unwrap_or_default();
        assert_eq!(value["contextId"], "ctx-1");
        assert_eq!(value["result"], json!({"output": "{\"y\":2}"}));
    }

    #[test]
    fn status_parses_only_the_four() {
        assert_eq!("cancelled".parse(), Ok(TaskStatus::Cancelled));
        assert!("bogus".parse::<TaskStatus>().is_err());
        assert!(!TaskStatus::Running.is_terminal());
        assert!(TaskStatus::Failed.is_terminal());
    }
}
