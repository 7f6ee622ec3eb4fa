//! Task events as sent on `GET /tasks/:id/subscribe`: `event: <kind>` then
//! `data: {taskId, status?, result?, error?}`.

use serde::{Deserialize, Serialize};

use super::{Task, TaskError, TaskResult, TaskStatus};

/// The three task event names of the profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TaskEventKind {
    #[serde(rename = "statusUpdate")]
    StatusUpdate,
    #[serde(rename = "resultUpdate")]
    ResultUpdate,
    #[serde(rename = "error")]
    Error,
}

impl TaskEventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskEventKind::StatusUpdate => "statusUpdate",
            TaskEventKind::ResultUpdate => "resultUpdate",
            TaskEventKind::Error => "error",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "statusUpdate" => Some(TaskEventKind::StatusUpdate),
            "resultUpdate" => Some(TaskEventKind::ResultUpdate),
            "error" => Some(TaskEventKind::Error),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskEventData {
    pub task_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<TaskStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<TaskResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<TaskError>,
}

/// One task event: its SSE name and its data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskEvent {
    pub kind: TaskEventKind,
    pub data: TaskEventData,
}

impl TaskEvent {
    /// The event a transition into `task`'s current status publishes: `resultUpdate` for a
    /// completion, `error` for a failure, `statusUpdate` otherwise.
    pub fn for_transition(task: &Task) -> TaskEvent {
        match task.status {
            TaskStatus::Completed => TaskEvent {
                kind: TaskEventKind::ResultUpdate,
                data: TaskEventData {
                    task_id: task.task_id.clone(),
                    status: Some(task.status),
                    result: task.result.clone(),
                    error: None,
                },
            },
            TaskStatus::Failed => TaskEvent {
                kind: TaskEventKind::Error,
                data: TaskEventData {
                    task_id: task.task_id.clone(),
                    status: Some(task.status),
                    result: None,
                    error: task.error.clone(),
                },
            },
            _ => TaskEvent::status(task),
        }
    }

    /// A bare `statusUpdate` for `task`.
    pub fn status(task: &Task) -> TaskEvent {
        TaskEvent {
            kind: TaskEventKind::StatusUpdate,
            data: TaskEventData {
                task_id: task.task_id.clone(),
                status: Some(task.status),
                result: None,
                error: None,
            },
        }
    }

    /// The events a subscriber receives first: a `statusUpdate` snapshot, followed by the
    /// `resultUpdate` or `error` that a completed or failed task carries.
    pub fn snapshot(task: &Task) -> Vec<TaskEvent> {
        let mut events = vec![TaskEvent::status(task)];
        if matches!(task.status, TaskStatus::Completed | TaskStatus::Failed) {
            events.push(TaskEvent::for_transition(task));
        }
        events
    }
}
