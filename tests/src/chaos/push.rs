//! A2A push notifications in the chaos run: a fraction of the tasks is created over A2A
//! (`SendMessage` with an inline push config, see `load.rs`) pointing at [`PushReceiver`], a
//! webhook receiver the run holds itself (an HTTP server on a free loopback port that always
//! answers `200` and records each delivery by task id). Once the tasks have settled, [`wait`]
//! waits for every final status (the receiver notifies), and [`check`] holds the deliveries
//! to the design's guarantees (`docs/a2a.md`, Push notifications):
//!
//! - every A2A task that reached a terminal state had that final status delivered at least
//!   once, and no delivery was given up (`{shard}:push-exhausted`): the receiver never
//!   refuses, so an exhausted delivery is a bug too;
//! - per task, in order: once the re-sends of what was not confirmed are folded away, nothing
//!   follows the terminal status (no `WORKING` after it, in particular), and a `count` task's
//!   stream deltas come `1, 2, ...` in each of its runs;
//! - nothing is delivered for a task the harness did not create with a config (a Lucid task,
//!   another task's config), and each delivery carries its config's token.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use protocol::TaskStatus;
use serde_json::Value;
use store::{RedisStore, StoredTask};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::ChaosError;
use super::load::Load;
use super::report::ChaosReport;

/// The most updates one run event makes for the chaos run's skills (a run's end: `working`
/// when never said, the result artifact, the final status). A delivery that fails is retried
/// from its event's first update, so a re-send repeats at most this many updates.
const MAX_EVENT_UPDATES: usize = 3;

/// How often the outbox is looked at while waiting for it to drain (Redis has no event for
/// it; the receiver's own notifications wake the wait too).
const OUTBOX_LOOK: Duration = Duration::from_millis(100);

/// Violations of one kind printed per task before they are only counted.
const SEQUENCE_SHOWN: usize = 12;

/// The token of task number `index`'s config, checked on each of its deliveries.
pub fn config_token(index: usize) -> String {
    format!("chaos-push-{index}")
}

/// What one delivery said, reduced to what ordering is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Update {
    /// A status update's state (`TASK_STATE_WORKING`, ...).
    Status(String),
    /// A chunk of the task's stream artifact (`{task}-stream`) holding a number: a `count`
    /// delta.
    Delta(u64),
    /// Any other artifact update: its id and parts.
    Artifact(String),
}

impl Update {
    fn terminal(&self) -> Option<&str> {
        match self {
            Update::Status(state)
                if matches!(
                    state.as_str(),
                    "TASK_STATE_COMPLETED"
                        | "TASK_STATE_FAILED"
                        | "TASK_STATE_CANCELED"
                        | "TASK_STATE_REJECTED"
                ) =>
            {
                Some(state)
            }
            _ => None,
        }
    }

    fn short(&self) -> String {
        match self {
            Update::Status(state) => state
                .strip_prefix("TASK_STATE_")
                .unwrap_or(state)
                .to_owned(),
            Update::Delta(n) => n.to_string(),
            Update::Artifact(_) => "artifact".to_owned(),
        }
    }
}

/// One delivery as received.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The task number in the config's URL (`/hook/{index}`).
    pub index: usize,
    pub update: Update,
    /// `X-A2A-Notification-Token`.
    pub token: Option<String>,
}

#[derive(Debug, Default)]
pub struct PushLog {
    /// Each task's deliveries, in arrival order.
    pub by_task: HashMap<String, Vec<Delivery>>,
    /// Tasks a terminal status was delivered for.
    pub terminal: HashSet<String>,
    /// Deliveries that break the contract on their own (not exactly one update, no task id,
    /// another content type, a path naming no task number).
    pub malformed: Vec<String>,
    pub total: usize,
}

struct Shared {
    log: Mutex<PushLog>,
    changed: Notify,
}

/// The run's webhook receiver: answers every `POST /hook/{index}` with `200`.
pub struct PushReceiver {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
}

impl PushReceiver {
    pub async fn start() -> Result<PushReceiver, ChaosError> {
        let setup = |err: std::io::Error| ChaosError::Setup(format!("push receiver: {err}"));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(setup)?;
        let addr = listener.local_addr().map_err(setup)?;
        let shared = Arc::new(Shared {
            log: Mutex::default(),
            changed: Notify::new(),
        });
        let app = Router::new()
            .route("/hook/{index}", post(receive))
            .fallback(unexpected)
            .with_state(Arc::clone(&shared));
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { stopped.cancelled().await })
                .await;
        });
        Ok(PushReceiver { addr, shared, stop })
    }

    /// `http://127.0.0.1:{port}`: task number `index`'s config names `{base}/hook/{index}`.
    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.addr.port())
    }

    fn log(&self) -> std::sync::MutexGuard<'_, PushLog> {
        self.shared
            .log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for PushReceiver {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn receive(
    State(shared): State<Arc<Shared>>,
    Path(index): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
    };
    let parsed = parse(&body);
    {
        let mut log = shared.log.lock().unwrap_or_else(PoisonError::into_inner);
        log.total += 1;
        let content_type = header("content-type").unwrap_or_default();
        if !content_type.starts_with("application/a2a+json") {
            log.malformed.push(format!(
                "a delivery to /hook/{index} came as {content_type:?}"
            ));
        }
        match (index.parse::<usize>(), parsed) {
            (Ok(index), Ok((task_id, update))) => {
                if update.terminal().is_some() {
                    log.terminal.insert(task_id.clone());
                }
                log.by_task.entry(task_id).or_default().push(Delivery {
                    index,
                    update,
                    token: header("x-a2a-notification-token"),
                });
            }
            (Err(_), _) => log
                .malformed
                .push(format!("a delivery to /hook/{index}, which names no task")),
            (_, Err(why)) => log
                .malformed
                .push(format!("a delivery to /hook/{index}: {why}")),
        }
    }
    shared.changed.notify_waiters();
    StatusCode::OK
}

/// Anything but `POST /hook/{index}` (still answered `200`: the receiver never refuses).
async fn unexpected(State(shared): State<Arc<Shared>>, uri: axum::http::Uri) -> StatusCode {
    shared
        .log
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .malformed
        .push(format!("a request to {uri}, which is no config's URL"));
    shared.changed.notify_waiters();
    StatusCode::OK
}

/// A delivery's body: exactly one of `statusUpdate` and `artifactUpdate`.
fn parse(body: &[u8]) -> Result<(String, Update), String> {
    let body: Value =
        serde_json::from_slice(body).map_err(|err| format!("a body that is not JSON: {err}"))?;
    let members: Vec<&String> = body
        .as_object()
        .map(|object| object.keys().collect())
        .unwrap_or_default();
    let (kind, update) = match members.as_slice() {
        [kind] => (kind.as_str(), &body[kind.as_str()]),
        _ => return Err(format!("not exactly one update: {body}")),
    };
    let task_id = update["taskId"]
        .as_str()
        .filter(|id| !id.is_empty())
        .ok_or_else(|| format!("an update without taskId: {body}"))?
        .to_owned();
    let update = match kind {
        "statusUpdate" => Update::Status(
            update["status"]["state"]
                .as_str()
                .ok_or_else(|| format!("a status update without state: {body}"))?
                .to_owned(),
        ),
        "artifactUpdate" => {
            let artifact = &update["artifact"];
            let id = artifact["artifactId"].as_str().unwrap_or_default();
            let parts = &artifact["parts"];
            match (
                id == format!("{task_id}-stream"),
                parts[0]["data"].as_u64(),
                parts.as_array().map(Vec::len),
            ) {
                (true, Some(n), Some(1)) => Update::Delta(n),
                _ => Update::Artifact(format!("{id} {parts}")),
            }
        }
        other => return Err(format!("an update of kind {other}: {body}")),
    };
    Ok((task_id, update))
}

/// What the wait for the deliveries found.
#[derive(Debug, Default, Clone)]
pub struct PushWait {
    pub duration: Duration,
    /// Finished A2A tasks whose final status was still not delivered at the deadline.
    pub missing: usize,
    /// Tasks with deliveries still owed at the deadline (`{shard}:push-due`).
    pub owed: Option<u64>,
}

/// Waits (at most `patience`) until the final status of every finished A2A task has reached
/// the receiver, each delivery waking the wait, then until the outbox is drained (deliveries
/// of tasks created without an acknowledgement, whose ids the harness never learnt, and the
/// deliverers' last releases).
pub async fn wait(
    receiver: &PushReceiver,
    load: &Load,
    store: &RedisStore,
    unfinished: &[String],
    patience: Duration,
) -> PushWait {
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + patience;
    let unfinished: HashSet<&str> = unfinished.iter().map(String::as_str).collect();
    let expected: Vec<String> = load
        .tasks()
        .into_iter()
        .filter(|task| task.push.is_some() && !unfinished.contains(task.id.as_str()))
        .map(|task| task.id)
        .collect();
    let missing = loop {
        let changed = receiver.shared.changed.notified();
        let missing = {
            let log = receiver.log();
            expected
                .iter()
                .filter(|id| !log.terminal.contains(*id))
                .count()
        };
        if missing == 0 || tokio::time::timeout_at(deadline, changed).await.is_err() {
            break missing;
        }
    };
    let mut owed = None;
    loop {
        let changed = receiver.shared.changed.notified();
        owed = store.push_outbox(1).owed().await.ok().or(owed);
        if owed == Some(0) || tokio::time::Instant::now() >= deadline {
            break;
        }
        let look = (tokio::time::Instant::now() + OUTBOX_LOOK).min(deadline);
        let _ = tokio::time::timeout_at(look, changed).await;
    }
    PushWait {
        duration: started.elapsed(),
        missing,
        owed,
    }
}

/// Figures of the push notifications, for the report.
#[derive(Debug, Default, Clone)]
pub struct PushStats {
    /// Acknowledged tasks created over A2A with a config.
    pub tasks: usize,
    pub deliveries: usize,
    /// Deliveries folded away as re-sends of what was not confirmed.
    pub resends: usize,
    /// Finished A2A tasks whose final status was delivered.
    pub finals: usize,
    /// Tasks delivered for although their `SendMessage` was never answered (a retried send
    /// whose first answer was lost with its gateway).
    pub unacknowledged: usize,
    pub exhausted: usize,
    pub wait: PushWait,
}

/// The expected final state of a task that ended as `stored` says.
fn final_state(stored: &StoredTask) -> &'static str {
    match stored.task.status {
        TaskStatus::Completed => "TASK_STATE_COMPLETED",
        TaskStatus::Failed
            if stored.task.error.as_ref().map(|e| e.code.as_str()) == Some("rejected") =>
        {
            "TASK_STATE_REJECTED"
        }
        TaskStatus::Failed => "TASK_STATE_FAILED",
        TaskStatus::Cancelled => "TASK_STATE_CANCELED",
        TaskStatus::Running => "TASK_STATE_WORKING",
    }
}

/// Folds re-sends away: a delivery whose confirmation was lost is sent again from its event's
/// first update, so the tail that repeats the updates just before it (at most one event's
/// worth, and at most one stream delta: each delta is an event of its own) is dropped.
pub fn collapse(updates: &[Update]) -> Vec<Update> {
    let mut out: Vec<Update> = Vec::with_capacity(updates.len());
    for update in updates {
        out.push(update.clone());
        'fold: loop {
            let len = out.len();
            for repeat in 1..=MAX_EVENT_UPDATES.min(len / 2) {
                let (before, tail) = out[len - 2 * repeat..].split_at(repeat);
                let deltas = tail
                    .iter()
                    .filter(|update| matches!(update, Update::Delta(_)))
                    .count();
                if before == tail && deltas <= 1 {
                    out.truncate(len - repeat);
                    continue 'fold;
                }
            }
            break;
        }
    }
    out
}

/// The ordering faults of one task's deliveries once folded (`attempts`: the runs the task's
/// record counts, when the harness knows the task).
pub fn sequence_faults(folded: &[Update], attempts: Option<u32>) -> Vec<String> {
    let mut faults = Vec::new();
    if let Some(end) = folded.iter().position(|update| update.terminal().is_some()) {
        let terminal = folded[end].short();
        for update in &folded[end + 1..] {
            match update {
                Update::Status(state) if state == "TASK_STATE_WORKING" => {
                    faults.push(format!("WORKING after the terminal {terminal}"));
                }
                other => faults.push(format!("{} after the terminal {terminal}", other.short())),
            }
        }
    }
    // A `count` run streams 1, 2, ..., n; a re-run (its run lost to a crash or a stall)
    // starts again from 1, after the runs before it.
    let deltas: Vec<u64> = folded
        .iter()
        .filter_map(|update| match update {
            Update::Delta(n) => Some(*n),
            _ => None,
        })
        .collect();
    let mut runs = 0u32;
    let mut last: Option<u64> = None;
    for &delta in &deltas {
        match last {
            Some(previous) if delta == previous + 1 => {}
            Some(previous) if delta > previous + 1 => {
                faults.push(format!(
                    "delta {delta} follows {previous}: a delta is missing"
                ));
            }
            _ if delta == 1 => runs += 1,
            Some(previous) => {
                faults.push(format!("delta {delta} follows {previous}"));
            }
            None => faults.push(format!("the first delta is {delta}")),
        }
        last = Some(delta);
    }
    if let Some(attempts) = attempts
        && runs > attempts.max(1)
    {
        faults.push(format!(
            "deltas start again from 1 {runs} times, for {attempts} runs"
        ));
    }
    faults
}

fn shown(updates: &[Update]) -> String {
    let mut text: Vec<String> = updates.iter().take(40).map(Update::short).collect();
    if updates.len() > 40 {
        text.push(format!("... {} more", updates.len() - 40));
    }
    format!("[{}]", text.join(", "))
}

/// Checks every delivery the receiver got against what the harness created and what the
/// tasks' records say (`records`: every acknowledged task as finally read), and the exhausted
/// deliveries Redis keeps.
pub async fn check(
    receiver: &PushReceiver,
    load: &Load,
    store: &RedisStore,
    records: &HashMap<String, StoredTask>,
    report: &mut ChaosReport,
) {
    let exhausted: Vec<Value> = match store.push_outbox(1).exhausted().await {
        Ok(records) => records
            .iter()
            .map(|record| {
                serde_json::from_str(record).unwrap_or_else(|_| Value::from(record.as_str()))
            })
            .collect(),
        Err(err) => {
            report.violation(format!("the exhausted deliveries could not be read: {err}"));
            Vec::new()
        }
    };
    let log = std::mem::take(&mut *receiver.log());
    let tasks = load.tasks();
    let sends = load.a2a_sends();
    let mut stats = PushStats {
        deliveries: log.total,
        exhausted: exhausted.len(),
        ..PushStats::default()
    };
    for record in &exhausted {
        report.violation(format!(
            "a push delivery was exhausted although the receiver always answers 200: {record}"
        ));
    }
    for malformed in &log.malformed {
        report.violation(format!("push receiver: {malformed}"));
    }
    // 1. Every finished A2A task's final status was delivered.
    let by_id: HashMap<&str, &super::load::AckedTask> =
        tasks.iter().map(|task| (task.id.as_str(), task)).collect();
    for task in tasks.iter().filter(|task| task.push.is_some()) {
        stats.tasks += 1;
        let Some(stored) = records
            .get(&task.id)
            .filter(|stored| stored.task.status.is_terminal())
        else {
            continue;
        };
        let expected = final_state(stored);
        let updates: Vec<Update> = log
            .by_task
            .get(&task.id)
            .map(|deliveries| deliveries.iter().map(|d| d.update.clone()).collect())
            .unwrap_or_default();
        let finals: Vec<&str> = updates.iter().filter_map(Update::terminal).collect();
        if finals.contains(&expected) {
            stats.finals += 1;
        }
        let given_up = exhausted
            .iter()
            .any(|record| record["taskId"] == task.id.as_str());
        match finals.first() {
            None if given_up => report.violation(format!(
                "push: the final status {expected} of {} task {} was exhausted, never delivered; received {}",
                task.entrypoint,
                task.id,
                shown(&updates)
            )),
            None => report.violation(format!(
                "push: the final status {expected} of {} task {} was never delivered; received {}",
                task.entrypoint,
                task.id,
                shown(&updates)
            )),
            Some(first) if *first != expected => report.violation(format!(
                "push: {} task {} ended {expected} but its delivered final status is {first}: {}",
                task.entrypoint,
                task.id,
                shown(&updates)
            )),
            Some(_) => {}
        }
    }
    // 2. and 3. Each task's deliveries: in order, only for tasks created with a config, each
    // with its own config's token.
    let mut sequence_violations = 0usize;
    let mut ids: Vec<&String> = log.by_task.keys().collect();
    ids.sort();
    for id in ids {
        let deliveries = &log.by_task[id];
        let indexes: HashSet<usize> = deliveries.iter().map(|d| d.index).collect();
        let known = by_id.get(id.as_str());
        match known {
            Some(task) => match task.push {
                None => report.violation(format!(
                    "push: {} deliveries for {} task {id}, created over the Lucid profile without a config",
                    deliveries.len(),
                    task.entrypoint
                )),
                Some(index) if indexes.iter().any(|i| *i != index) => {
                    report.violation(format!(
                        "push: task {id} (#{index}) delivered to the config of tasks {indexes:?}"
                    ));
                }
                Some(_) => {}
            },
            None => {
                // A task the harness never learnt of: it can only be one its retried send
                // created before the answer was lost.
                let retried = indexes.len() == 1
                    && indexes
                        .iter()
                        .all(|index| sends.get(index).is_some_and(|sent| *sent > 1));
                if retried {
                    stats.unacknowledged += 1;
                } else {
                    report.violation(format!(
                        "push: {} deliveries for task {id}, which the harness never created with a config (paths {indexes:?}, sends {:?})",
                        deliveries.len(),
                        indexes
                            .iter()
                            .map(|index| sends.get(index).copied().unwrap_or(0))
                            .collect::<Vec<_>>()
                    ));
                }
            }
        }
        for delivery in deliveries {
            let token = config_token(delivery.index);
            if delivery.token.as_deref() != Some(token.as_str()) {
                report.violation(format!(
                    "push: a delivery for task {id} to /hook/{} carried the token {:?}",
                    delivery.index, delivery.token
                ));
                break;
            }
        }
        let updates: Vec<Update> = deliveries.iter().map(|d| d.update.clone()).collect();
        let folded = collapse(&updates);
        stats.resends += updates.len() - folded.len();
        let attempts = records.get(id).map(|stored| stored.attempt);
        let faults = sequence_faults(&folded, attempts);
        if !faults.is_empty() {
            sequence_violations += 1;
            if sequence_violations <= SEQUENCE_SHOWN {
                let entrypoint = known.map_or("unacknowledged", |task| task.entrypoint);
                report.violation(format!(
                    "push: {entrypoint} task {id} (attempts {attempts:?}) delivered out of order: {}; received {}",
                    faults.join("; "),
                    shown(&updates)
                ));
            }
        }
    }
    if sequence_violations > SEQUENCE_SHOWN {
        report.violation(format!(
            "push: {} more tasks delivered out of order",
            sequence_violations - SEQUENCE_SHOWN
        ));
    }
    if load.push_percent() > 0 && stats.tasks == 0 && !tasks.is_empty() {
        report.violation("push: no task was created over A2A with a config".into());
    }
    stats.wait = std::mem::take(&mut report.push.wait);
    if stats.wait.owed.is_some_and(|owed| owed > 0) {
        report.violation(format!(
            "push: {:?} tasks still owed deliveries {:.1?} after settling",
            stats.wait.owed, stats.wait.duration
        ));
    }
    report.push = stats;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(state: &str) -> Update {
        Update::Status(format!("TASK_STATE_{state}"))
    }

    fn result() -> Update {
        Update::Artifact("result".into())
    }

    #[test]
    fn resent_events_fold_away() {
        let (w, c) = (status("WORKING"), status("COMPLETED"));
        // The end's three updates sent twice (the first confirmation lost).
        let twice = [
            w.clone(),
            result(),
            c.clone(),
            w.clone(),
            result(),
            c.clone(),
        ];
        assert_eq!(collapse(&twice), [w.clone(), result(), c.clone()]);
        // Cut after two updates, then sent again whole.
        let cut = [w.clone(), result(), w.clone(), result(), c.clone()];
        assert_eq!(collapse(&cut), [w.clone(), result(), c.clone()]);
        // A delta sent again with the `working` its event made.
        let delta = [w.clone(), Update::Delta(1), w.clone(), Update::Delta(1)];
        assert_eq!(collapse(&delta), [w.clone(), Update::Delta(1)]);
        assert!(sequence_faults(&collapse(&twice), Some(1)).is_empty());
    }

    #[test]
    fn reorderings_are_found() {
        let (w, c) = (status("WORKING"), status("COMPLETED"));
        let after = [w.clone(), c.clone(), w.clone()];
        assert_eq!(
            sequence_faults(&collapse(&after), Some(1)),
            ["WORKING after the terminal COMPLETED"]
        );
        let late_delta = [w.clone(), Update::Delta(1), c.clone(), Update::Delta(2)];
        assert_eq!(
            sequence_faults(&collapse(&late_delta), Some(1)),
            ["2 after the terminal COMPLETED"]
        );
        // Two deltas again are two events again: a cursor gone back, unless the task ran
        // twice.
        let again = [
            w.clone(),
            Update::Delta(1),
            Update::Delta(2),
            Update::Delta(1),
            Update::Delta(2),
            Update::Delta(3),
            result(),
            c.clone(),
        ];
        assert_eq!(collapse(&again), again);
        assert!(sequence_faults(&again, Some(2)).is_empty());
        assert_eq!(sequence_faults(&again, Some(1)).len(), 1);
        let swapped = [w.clone(), Update::Delta(2), Update::Delta(1), c.clone()];
        assert_eq!(sequence_faults(&swapped, Some(1)).len(), 1);
        let skipped = [w, Update::Delta(1), Update::Delta(3), c];
        assert_eq!(sequence_faults(&skipped, Some(1)).len(), 1);
    }
}
