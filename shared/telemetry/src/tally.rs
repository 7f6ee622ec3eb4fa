//! What this process did since the operator console's publisher last asked: tasks admitted,
//! finished (by status), recovered, payments settled, the end-to-end latency of finished tasks
//! as bucket counts, and the latest failures (entrypoint and error code, never inputs or
//! messages).
//!
//! Always compiled and always on, independent of OpenTelemetry: a recorder is a relaxed atomic
//! add (a failure also takes a short lock). The store's stats publisher drains these into the
//! cluster's shared buckets while a console is configured anywhere in the cluster; where none
//! is, nothing drains them and they only count.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use protocol::TaskStatus;

/// Upper bounds (milliseconds) of the latency buckets; one more bucket counts what is slower.
pub const LATENCY_BOUNDS_MS: [u64; 15] = [
    5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 300_000, 900_000,
];

/// How many failures a process keeps between two drains (the console shows the latest few).
const FAILURES_KEPT: usize = 20;
/// The longest code, entrypoint or task id a failure note keeps, in bytes: a handler's error
/// code can come from its caller's input (the `fail` built-in's does), and every note is held
/// here, in the store's failure list and in each console overview.
pub const MAX_NOTE_FIELD_BYTES: usize = 128;

/// The counted events, by the field names the stats buckets use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Count {
    Admitted,
    Completed,
    Failed,
    Cancelled,
    Recovered,
    Settled,
}

impl Count {
    pub const ALL: [Count; 6] = [
        Count::Admitted,
        Count::Completed,
        Count::Failed,
        Count::Cancelled,
        Count::Recovered,
        Count::Settled,
    ];

    pub fn field(self) -> &'static str {
        match self {
            Count::Admitted => "admitted",
            Count::Completed => "completed",
            Count::Failed => "failed",
            Count::Cancelled => "cancelled",
            Count::Recovered => "recovered",
            Count::Settled => "settled",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One failed task, as the console lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureNote {
    pub task_id: String,
    pub entrypoint: String,
    pub code: String,
    /// Milliseconds since the Unix epoch (this process's clock).
    pub at_ms: u64,
}

/// What [`drain`] took: the counts since the last drain, the latency bucket counts (one per
/// bound of [`LATENCY_BOUNDS_MS`], then the overflow), and the failures.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Drained {
    pub counts: Vec<(Count, u64)>,
    pub latency: Vec<u64>,
    pub failures: Vec<FailureNote>,
}

impl Drained {
    pub fn is_empty(&self) -> bool {
        self.counts.iter().all(|(_, n)| *n == 0)
            && self.latency.iter().all(|n| *n == 0)
            && self.failures.is_empty()
    }
}

static COUNTS: [AtomicU64; Count::ALL.len()] = [const { AtomicU64::new(0) }; Count::ALL.len()];
static LATENCY: [AtomicU64; LATENCY_BOUNDS_MS.len() + 1] =
    [const { AtomicU64::new(0) }; LATENCY_BOUNDS_MS.len() + 1];
static FAILURES: Mutex<VecDeque<FailureNote>> = Mutex::new(VecDeque::new());

fn add(count: Count) {
    COUNTS[count.index()].fetch_add(1, Ordering::Relaxed);
}

/// A task was created.
pub fn admitted() {
    add(Count::Admitted);
}

/// A task reached `status` (ignored unless terminal); `end_to_end` when the writer knows it.
pub fn finished(status: TaskStatus, end_to_end: Option<Duration>) {
    match status {
        TaskStatus::Completed => add(Count::Completed),
        TaskStatus::Failed => add(Count::Failed),
        TaskStatus::Cancelled => add(Count::Cancelled),
        _ => return,
    }
    if let Some(elapsed) = end_to_end {
        LATENCY[latency_bucket(elapsed)].fetch_add(1, Ordering::Relaxed);
    }
}

/// A recovery sweep settled a task whose lease expired.
pub fn recovered() {
    add(Count::Recovered);
}

/// A payment was settled.
pub fn settled() {
    add(Count::Settled);
}

/// A task failed with `code`.
pub fn failure(task_id: &str, entrypoint: &str, code: &str) {
    let note = FailureNote {
        task_id: bounded(task_id),
        entrypoint: bounded(entrypoint),
        code: bounded(code),
        at_ms: protocol::Timestamp::now().as_millis(),
    };
    let mut failures = FAILURES.lock().unwrap_or_else(PoisonError::into_inner);
    if failures.len() == FAILURES_KEPT {
        failures.pop_front();
    }
    failures.push_back(note);
}

/// `text` cut to [`MAX_NOTE_FIELD_BYTES`] at a character boundary.
fn bounded(text: &str) -> String {
    let mut end = text.len().min(MAX_NOTE_FIELD_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// Takes everything counted since the last drain (the counters restart at zero).
pub fn drain() -> Drained {
    let counts = Count::ALL
        .iter()
        .map(|count| (*count, COUNTS[count.index()].swap(0, Ordering::Relaxed)))
        .collect();
    let latency = LATENCY
        .iter()
        .map(|bucket| bucket.swap(0, Ordering::Relaxed))
        .collect();
    let failures = FAILURES
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .drain(..)
        .collect();
    Drained {
        counts,
        latency,
        failures,
    }
}

/// The index of the bucket that counts `elapsed`.
pub fn latency_bucket(elapsed: Duration) -> usize {
    let ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
    LATENCY_BOUNDS_MS
        .iter()
        .position(|bound| ms <= *bound)
        .unwrap_or(LATENCY_BOUNDS_MS.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_inclusive_upper_bounds_with_an_overflow() {
        assert_eq!(latency_bucket(Duration::from_millis(0)), 0);
        assert_eq!(latency_bucket(Duration::from_millis(5)), 0);
        assert_eq!(latency_bucket(Duration::from_millis(6)), 1);
        assert_eq!(
            latency_bucket(Duration::from_secs(3_600)),
            LATENCY_BOUNDS_MS.len()
        );
    }

    #[test]
    fn a_drain_takes_what_was_counted_once() {
        // The statics are shared with other tests of this binary: count deltas only here.
        finished(TaskStatus::Failed, Some(Duration::from_millis(7)));
        failure("t1", "fail", "boom");
        let first = drain();
        let failed = first
            .counts
            .iter()
            .find(|(count, _)| *count == Count::Failed)
            .map(|(_, n)| *n);
        assert!(failed >= Some(1), "{first:?}");
        assert!(first.latency[1] >= 1);
        assert!(first.failures.iter().any(|note| note.code == "boom"));
        finished(TaskStatus::Running, None);
        let second = drain();
        assert!(!second.failures.iter().any(|note| note.task_id == "t1"));
    }

    #[test]
    fn a_failure_note_keeps_a_bounded_code() {
        let long = "é".repeat(MAX_NOTE_FIELD_BYTES);
        assert_eq!(bounded(&long).len(), MAX_NOTE_FIELD_BYTES);
        assert_eq!(bounded(&format!("x{long}")).len(), MAX_NOTE_FIELD_BYTES - 1);
        assert_eq!(bounded("short"), "short");
    }
}
