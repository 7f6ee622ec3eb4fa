//! Compact forms of what a retained task holds, so that the embedded store's memory is a
//! small multiple of the tasks it keeps (see `shared/store/tests/memory_footprint.rs`).
//!
//! A small JSON object held as a `serde_json::Value` costs several hundred bytes of maps and
//! strings; as text it costs its length. Retained terminal tasks are most of what the
//! embedded store holds and are only read (rarely) after they end, so their bulky values are
//! kept as one JSON text and parsed back on read. Two events of every log are what the task
//! itself says (its creation's `statusUpdate running` and its terminal event): the log keeps
//! only their place, never their text, and rebuilds them from the task when a subscriber
//! resumes. A later write to a terminal task turns its terminal event into text first.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{EventPayload, Invocation, StoredEvent};
use protocol::{Task, TaskError, TaskEvent, TaskResult, TaskStatus};

/// One event of a task's log.
pub(super) struct LoggedEvent {
    seq: u64,
    body: Body,
}

/// The events a log keeps by place only, because the task rebuilds them exactly.
#[derive(Debug, Clone, Copy)]
pub(super) enum Rebuilt {
    /// The `statusUpdate running` of creation: `TaskEvent::status` of the new task.
    Created,
    /// The event of the terminal transition: `TaskEvent::for_transition` of the final task.
    Terminal,
}

enum Body {
    /// Event name and data as JSON text.
    Text { event: Box<str>, data: Box<str> },
    /// The `statusUpdate running` a task starts with.
    Created,
    /// The event of the terminal transition, rebuilt from the (terminal, unchanging) task.
    Terminal,
}

impl LoggedEvent {
    pub(super) fn new(event: &StoredEvent) -> Self {
        LoggedEvent {
            seq: event.seq,
            body: Body::Text {
                event: event.event.as_str().into(),
                data: event.data.to_string().into_boxed_str(),
            },
        }
    }

    pub(super) fn seq(&self) -> u64 {
        self.seq
    }

    /// The event as subscribers got it; `task` is the task it belongs to, as it is now.
    pub(super) fn thaw(&self, task: &Task) -> StoredEvent {
        let payload = match &self.body {
            Body::Text { event, data } => EventPayload {
                event: event.to_string(),
                // The text was written from a `Value`, so it parses.
                data: serde_json::from_str(data).unwrap_or(Value::Null),
            },
            Body::Created => {
                let mut created = task.clone();
                created.status = TaskStatus::Running;
                TaskEvent::status(&created).into()
            }
            Body::Terminal => TaskEvent::for_transition(task).into(),
        };
        StoredEvent {
            seq: self.seq,
            event: payload.event,
            data: payload.data,
        }
    }

    /// The place of an event the task itself says (see the module header).
    pub(super) fn rebuilt(seq: u64, rebuilt: Rebuilt) -> Self {
        let body = match rebuilt {
            Rebuilt::Created => Body::Created,
            Rebuilt::Terminal => Body::Terminal,
        };
        LoggedEvent { seq, body }
    }

    /// A terminal event back to text, before the task changes again (rebuilt from the task,
    /// it would change with it). The creation event depends on the task's id alone.
    pub(super) fn materialize(&mut self, task: &Task) {
        if matches!(self.body, Body::Terminal) {
            *self = LoggedEvent::new(&self.thaw(task));
        }
    }
}

/// The bulky values of a terminal task, as one JSON text.
pub(super) struct Frozen(Box<str>);

#[derive(Serialize, Deserialize, Default)]
struct Document {
    #[serde(default)]
    input: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    metadata: Option<Value>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    trace_context: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    result: Option<TaskResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<TaskError>,
}

impl Frozen {
    /// Bytes of the text: what the task's bulky values take.
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    /// Takes the bulky values out of `invocation` and `task`.
    pub(super) fn take(invocation: &mut Invocation, task: &mut Task) -> Frozen {
        let document = Document {
            input: std::mem::take(&mut invocation.input),
            metadata: invocation.metadata.take(),
            trace_context: std::mem::take(&mut invocation.trace_context),
            result: task.result.take(),
            error: task.error.take(),
        };
        // Serializing plain values cannot fail; an empty document would read back as nulls.
        Frozen(
            serde_json::to_string(&document)
                .unwrap_or_default()
                .into_boxed_str(),
        )
    }

    fn document(&self) -> Document {
        serde_json::from_str(&self.0).unwrap_or_default()
    }

    /// Puts the values back into `task` only (what the wire shows).
    pub(super) fn restore_task(&self, task: &mut Task) {
        let document = self.document();
        task.result = document.result;
        task.error = document.error;
    }

    /// Puts every value back.
    pub(super) fn restore(&self, invocation: &mut Invocation, task: &mut Task) {
        let document = self.document();
        invocation.input = document.input;
        invocation.metadata = document.metadata;
        invocation.trace_context = document.trace_context;
        task.result = document.result;
        task.error = document.error;
    }
}
