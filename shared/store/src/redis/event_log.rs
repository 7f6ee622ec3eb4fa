//! A task's event log as readers see it: the entries Redis keeps plus the two events that the
//! task's record rebuilds exactly, which Redis therefore never stores.
//!
//! Every task's seq 1 is its creation's `statusUpdate running`, and a terminal task's last
//! event (its `seq`) is the event of its terminal transition, `TaskEvent::for_transition` of
//! the final record (a `resultUpdate` holds the result, an `error` the error). Logging them
//! would keep a second copy of the result beside the record for the whole retention, so the
//! scripts only publish them (`create.lua` not even that: nobody can listen to a task before
//! its creation except its creator) and a retained `echo` task keeps one key instead of two.
//! The log key itself holds only a worker's own events (`emit.lua`: progress, stream output).
//!
//! The embedded store does the same (`memory/frozen.rs`).

use crate::{EventPayload, StoredEvent};
use protocol::{Task, TaskEvent, TaskStatus};

/// The events of `task`, whose record's last sequence number is `seq`, merged with the
/// `logged` entries in sequence order. A logged entry wins over a rebuilt event of the same
/// number, so a log written before the scripts stopped storing these (an upgrade with tasks in
/// flight) reads back without doubles.
pub(super) fn merged(task: &Task, seq: u64, logged: Vec<StoredEvent>) -> Vec<StoredEvent> {
    let has = |n: u64| logged.iter().any(|event| event.seq == n);
    let mut events = Vec::with_capacity(logged.len() + 2);
    if seq >= 1 && !has(1) {
        events.push(rebuilt(
            1,
            TaskEvent::status(&Task {
                status: TaskStatus::Running,
                result: None,
                error: None,
                ..task.clone()
            }),
        ));
    }
    let terminal = (task.status.is_terminal() && seq > 1 && !has(seq))
        .then(|| rebuilt(seq, TaskEvent::for_transition(task)));
    events.extend(logged);
    events.extend(terminal);
    // Stable: entries of one number (a corrupt log) stay in the order they were found.
    events.sort_by_key(|event| event.seq);
    events
}

fn rebuilt(seq: u64, event: TaskEvent) -> StoredEvent {
    let payload = EventPayload::from(event);
    StoredEvent {
        seq,
        event: payload.event,
        data: payload.data,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use protocol::{TaskError, TaskResult, Timestamp};

    fn task(status: TaskStatus) -> Task {
        Task {
            task_id: "t1".into(),
            status,
            context_id: Some("ctx".into()),
            created_at: Timestamp(1),
            updated_at: Timestamp(2),
            result: None,
            error: None,
        }
    }

    fn logged(seq: u64, event: &str, data: serde_json::Value) -> StoredEvent {
        StoredEvent {
            seq,
            event: event.into(),
            data,
        }
    }

    #[test]
    fn a_running_task_reads_its_creation_then_its_logged_events() {
        let events = merged(
            &task(TaskStatus::Running),
            3,
            vec![
                logged(2, "progress", json!({"n": 1})),
                logged(3, "progress", json!({"n": 2})),
            ],
        );
        let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [1, 2, 3]);
        assert_eq!(events[0].event, "statusUpdate");
        assert_eq!(events[0].data, json!({"taskId": "t1", "status": "running"}));
    }

    #[test]
    fn a_completed_task_ends_with_its_result_rebuilt_from_the_record() {
        let mut done = task(TaskStatus::Completed);
        done.result = Some(TaskResult {
            output: json!({"i": 7}),
            usage: None,
            model: None,
        });
        let events = merged(&done, 3, vec![logged(2, "progress", json!({}))]);
        let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [1, 2, 3]);
        assert_eq!(events[2].event, "resultUpdate");
        assert_eq!(events[2].data["status"], "completed");
        assert_eq!(events[2].data["result"]["output"], json!({"i": 7}));
    }

    #[test]
    fn a_failed_task_ends_with_its_error() {
        let mut failed = task(TaskStatus::Failed);
        failed.error = Some(TaskError {
            code: "task_timeout".into(),
            message: "too slow".into(),
            details: None,
        });
        let events = merged(&failed, 2, Vec::new());
        assert_eq!(events.len(), 2);
        assert_eq!(events[1].event, "error");
        assert_eq!(events[1].data["error"]["code"], "task_timeout");
    }

    #[test]
    fn entries_logged_by_an_older_version_are_not_doubled() {
        let events = merged(
            &task(TaskStatus::Cancelled),
            2,
            vec![
                logged(
                    1,
                    "statusUpdate",
                    json!({"taskId": "t1", "status": "running"}),
                ),
                logged(
                    2,
                    "statusUpdate",
                    json!({"taskId": "t1", "status": "cancelled"}),
                ),
            ],
        );
        assert_eq!(events.len(), 2);
    }
}
