//! Values that cross the [`super::TaskStore`] boundary.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::time::Duration;

use futures::Stream;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use protocol::token::OwnerHash;
use protocol::{Task, TaskError, TaskEvent, TaskResult, TaskStatus};

/// Default cap on non-terminal tasks (upstream `maxTasks`).
pub const DEFAULT_MAX_TASKS: u64 = 1_000;
/// Terminal tasks are kept this long (upstream `retentionMs`).
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);
/// Default cap on stored tasks, terminal ones included (`MAX_RETAINED_TASKS`): with the
/// per-task byte bounds (256 KiB of input and of result) it bounds what retained tasks can
/// hold; the oldest terminal tasks are evicted first to stay under it.
pub const DEFAULT_MAX_RETAINED: u64 = 20_000;
/// Default cap on one owner's stored tasks, live and terminal (`MAX_RETAINED_PER_OWNER`).
pub const DEFAULT_MAX_RETAINED_PER_OWNER: u64 = 1_000;
/// Default cap on one owner's non-terminal tasks (`MAX_LIVE_PER_OWNER`).
pub const DEFAULT_MAX_LIVE_PER_OWNER: u64 = 100;
/// Default cap on the non-terminal tasks of one client address (`MAX_LIVE_PER_ADDRESS`):
/// anonymous callers get a fresh owner per task, so only their address holds them. A fifth of
/// [`DEFAULT_MAX_TASKS`]: one machine's load test keeps a couple of hundred tasks running, and
/// it still takes five addresses to fill the cluster.
pub const DEFAULT_MAX_LIVE_PER_ADDRESS: u64 = 200;
/// Default cap on the bytes terminal tasks keep (`MAX_RETAINED_BYTES`, 256 MiB): what retained
/// results can take of Redis whatever their count; the terminal tasks that expire first are
/// evicted to stay under it.
pub const DEFAULT_MAX_RETAINED_BYTES: u64 = 256 * 1024 * 1024;
/// How many runs a task gets after losing active leases.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
/// List page size when none is given, and the largest accepted.
pub const DEFAULT_LIST_LIMIT: usize = 50;
pub const MAX_LIST_LIMIT: usize = 1_000;

/// Everything a worker needs to run a task: stored, never a closure, so any worker can run a
/// recovered task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Invocation {
    pub entrypoint: String,
    pub input: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    /// W3C trace context (`traceparent`, `tracestate`) of the span that created the task.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub trace_context: BTreeMap<String, String>,
}

/// How a new task enters the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Straight into its entrypoint's ready queue (free tasks).
    Queued,
    /// Held for a paid admission; cancelled by reaping unless claimed within `ttl`.
    Reserved { ttl: Duration },
}

#[derive(Debug, Clone)]
pub struct NewTask {
    pub task_id: String,
    pub owner: OwnerHash,
    pub invocation: Invocation,
    pub admission: Admission,
    /// Runs allowed before an abandoned task is failed instead of re-queued.
    pub max_attempts: u32,
    /// How long this task is kept once terminal, when not the store's retention (a direct
    /// invoke's record is only needed while its caller waits).
    pub retention: Option<Duration>,
    /// The client address the task was created from (an IPv4 address or an IPv6 /64, see the
    /// gateway's `client_address`), whose live tasks `max_live_per_address` bounds; `None`
    /// for internal callers and embedded mode (no bound).
    pub source: Option<String>,
    /// The owner is a fresh internal token minted for this task alone, which no caller holds
    /// (a direct run: invoke, stream): nobody can list or select its tasks, and it will never
    /// own another. The store then keeps no owner index for it and checks no owner bound
    /// (both would answer as for an owner without tasks), which spares a direct run the
    /// owner index's writes (docs/store.md, Redis layout). It still counts among its owner's
    /// live tasks, so that every finish finds the count it decrements.
    pub private_owner: bool,
}

/// Where a `running` task is inside the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Reserved,
    Queued,
    Prepared,
    Active,
    /// A run ended asking its caller for more input ([`super::TaskStore::await_input`]): no
    /// lease, not queued, until [`super::TaskStore::resume`] queues it again or it is
    /// cancelled.
    Waiting,
    /// A run failed asking for another attempt ([`super::TaskStore::retry_later`]): no lease,
    /// not queued, until its backoff ends (the sweeps queue it again) or it is cancelled.
    Backoff,
    Terminal,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Reserved => "reserved",
            Phase::Queued => "queued",
            Phase::Prepared => "prepared",
            Phase::Active => "active",
            Phase::Waiting => "waiting",
            Phase::Backoff => "backoff",
            Phase::Terminal => "terminal",
        }
    }

    pub fn parse(text: &str) -> Option<Phase> {
        [
            Phase::Reserved,
            Phase::Queued,
            Phase::Prepared,
            Phase::Active,
            Phase::Waiting,
            Phase::Backoff,
            Phase::Terminal,
        ]
        .into_iter()
        .find(|phase| phase.as_str() == text)
    }
}

/// A worker's (or admitting gateway's) right to write a task: valid while it is the task's
/// current lease and its deadline has not passed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Lease {
    pub task_id: String,
    /// The task's owner (hash of its access token) and entrypoint: a lease holder writes the
    /// owner's index and the entrypoint's queue, so it carries their names.
    pub task_owner: OwnerHash,
    pub entrypoint: String,
    /// The lease holder (a worker or an admitting gateway).
    pub holder: String,
    pub epoch: u64,
    /// Store clock, milliseconds since the epoch.
    pub expires_at_ms: u64,
}

/// The store's full view of a task.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredTask {
    pub task: Task,
    pub owner: OwnerHash,
    pub phase: Phase,
    pub invocation: Invocation,
    pub admission_expires_at_ms: Option<u64>,
    pub lease: Option<Lease>,
    /// Activations so far (the attempt number of the current or last run), retries included.
    pub attempt: u32,
    /// Runs allowed before a task abandoned by its workers fails (`task_attempts_exhausted`);
    /// retries a handler asked for ([`StoredTask::retries`]) do not count against it.
    pub max_attempts: u32,
    /// Runs that ended asking for another attempt ([`super::TaskStore::retry_later`]) in the
    /// current turn.
    pub retries: u32,
    /// The failure that ended the last run asking for a retry, shown to the next attempt's
    /// handler and kept on the record (also once the task finished). Boxed: most tasks never
    /// retry, and a retained record must stay small (`memory_footprint` test).
    pub last_error: Option<Box<TaskError>>,
    pub run_deadline_ms: Option<u64>,
    /// Whether the task ever reached the ready queue (an expired claim goes back there instead
    /// of being cancelled).
    pub handed_off: bool,
    /// Sequence number of the last event published for the task.
    pub seq: u64,
    /// The receipt of the payment that admitted the task (a paid task), as
    /// [`super::TaskStore::record_receipt`] stored it.
    pub receipt: Option<String>,
    /// While the task is `waiting`: what its last run asked the caller for (the handler's
    /// JSON, e.g. an A2A agent message).
    pub input_request: Option<Value>,
    /// The turns before the current one, oldest first, each `{input, metadata?, request}`:
    /// the input a run was given and what it asked for when it ended waiting. Empty for a
    /// task that never waited.
    pub turns: Vec<Value>,
    /// Whether a paid admission holds the task's `prepared` claim for a settlement whose
    /// outcome may be unknown ([`super::TaskStore::hold_for_settlement`]): no sweep cancels or
    /// requeues it and nobody else claims it until a receipt queues it or it is cancelled.
    pub settlement_held: bool,
}

/// The error code of a waiting task whose caller did not answer in time.
pub const INPUT_TIMEOUT: &str = "input_timeout";

/// The name of the event [`super::TaskStore::await_input`] publishes.
pub const INPUT_REQUIRED_EVENT: &str = "inputRequired";

/// The data of the `inputRequired` event of task `task_id`.
pub fn input_required_data(task_id: &str, request: &Value) -> Value {
    serde_json::json!({"taskId": task_id, "status": "running", "request": request})
}

/// The turn a waiting task ends when it is resumed: the input and metadata its last run was
/// given and what that run asked for.
pub fn turn_of(invocation: &Invocation, request: Option<&Value>) -> Value {
    let mut turn = serde_json::Map::new();
    turn.insert("input".into(), invocation.input.clone());
    if let Some(metadata) = &invocation.metadata {
        turn.insert("metadata".into(), metadata.clone());
    }
    turn.insert("request".into(), request.cloned().unwrap_or(Value::Null));
    Value::Object(turn)
}

/// What [`super::TaskStore::resume`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Resumed {
    /// The task was waiting: it is queued again with the new input, the previous turn kept
    /// in [`StoredTask::turns`]. `seq` numbers the resume's own event: what the new turn
    /// publishes comes after it.
    Queued { task: Task, seq: u64 },
    /// No such task, or another owner's.
    NotFound,
    /// The task is not waiting for input (running, or finished): `current` is its state.
    NotWaiting(Task),
}

/// What [`super::TaskStore::record_receipt`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReceiptRecorded {
    /// Stored, and the admitting claim was still live: the task was handed to the ready queue
    /// in the same step (it was paid for: it runs).
    Committed,
    /// Stored on a task whose admitting claim was lost (reaped, cancelled): the payer reads
    /// the receipt with the task's terminal status.
    Attached,
    /// No such task (expired past retention): nothing stored.
    Missing,
}

/// A successful claim: the lease plus what the claimer needs to run the task.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    pub lease: Lease,
    pub owner: OwnerHash,
    pub invocation: Invocation,
    /// Activations before this claim (0 for a fresh task).
    pub previous_attempts: u32,
    pub max_attempts: u32,
    /// When the task was created, store clock (what queue-wait metrics measure from).
    pub created_at_ms: u64,
}

/// What renewing one lease found ([`super::TaskStore::renew_each`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    /// Still held, its deadline pushed back.
    Renewed,
    /// Not held any more: recovered, cancelled, or taken over. Its handler must stop.
    Lost,
    /// Not known: the shard that holds it did not answer (its master failing over, say) while
    /// others did. The lease stands until its deadline, as far as this worker knows.
    Unconfirmed,
}

/// A successful activation.
#[derive(Debug, Clone, PartialEq)]
pub struct Activation {
    pub lease: Lease,
    /// 1 for the first run, 2 after one recovery, ...
    pub attempt: u32,
    pub run_deadline_ms: u64,
}

/// The state a compare-and-set writes.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    pub status: TaskStatus,
    pub result: Option<TaskResult>,
    pub error: Option<TaskError>,
}

impl Transition {
    pub fn completed(result: TaskResult) -> Self {
        Transition {
            status: TaskStatus::Completed,
            result: Some(result),
            error: None,
        }
    }

    pub fn failed(error: TaskError) -> Self {
        Transition {
            status: TaskStatus::Failed,
            result: None,
            error: Some(error),
        }
    }

    pub fn cancelled() -> Self {
        Transition {
            status: TaskStatus::Cancelled,
            result: None,
            error: None,
        }
    }
}

/// Why a compare-and-set did not apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    NotFound,
    /// The status was not one of those expected.
    Status,
    /// The fence is not the current live lease.
    Fenced,
}

#[derive(Debug, Clone, PartialEq)]
pub enum CasOutcome {
    Applied(Task),
    Rejected {
        reason: Rejection,
        current: Option<Task>,
    },
}

impl CasOutcome {
    pub fn applied(&self) -> Option<&Task> {
        match self {
            CasOutcome::Applied(task) => Some(task),
            CasOutcome::Rejected { .. } => None,
        }
    }
}

/// A custom event a lease holder emits (progress, stream output): any SSE name and JSON data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventPayload {
    pub event: String,
    pub data: Value,
}

impl From<TaskEvent> for EventPayload {
    fn from(event: TaskEvent) -> Self {
        EventPayload {
            event: event.kind.as_str().to_owned(),
            data: serde_json::to_value(event.data).unwrap_or(Value::Null),
        }
    }
}

/// One event of a task's log, numbered from 1 in publication order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredEvent {
    pub seq: u64,
    pub event: String,
    pub data: Value,
}

pub type EventStream = Pin<Box<dyn Stream<Item = StoredEvent> + Send>>;

/// A live, owner-checked view of one task.
pub struct Subscription {
    /// The task as it was once the subscription was live.
    pub snapshot: Task,
    /// Sequence number the snapshot reflects.
    pub snapshot_seq: u64,
    /// Events after `after_seq` up to the snapshot, when the caller asked for them and the
    /// log still held them.
    pub replay: Vec<StoredEvent>,
    /// Events after the snapshot, in order, without gaps or duplicates. Ends when dropped.
    pub events: EventStream,
}

/// Filters and paging of [`super::TaskStore::list`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListQuery {
    pub context_id: Option<String>,
    /// Empty means every status.
    pub statuses: Vec<TaskStatus>,
    pub limit: Option<usize>,
    pub offset: usize,
}

impl ListQuery {
    pub fn effective_limit(&self) -> usize {
        self.limit.unwrap_or(DEFAULT_LIST_LIMIT).min(MAX_LIST_LIMIT)
    }

    pub fn matches(&self, task: &Task) -> bool {
        let context_ok = self
            .context_id
            .as_ref()
            .is_none_or(|ctx| task.context_id.as_ref() == Some(ctx));
        let status_ok = self.statuses.is_empty() || self.statuses.contains(&task.status);
        context_ok && status_ok
    }
}

/// What [`super::TaskStore::select`] picks among an owner's tasks: filters on the small fields
/// of a record (status, phase, context, update time, error code), never its result, history
/// or input, ordered by last update, newest first (ties by task id), and paged.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Selection {
    pub context_id: Option<String>,
    /// Empty means every status.
    pub statuses: Vec<TaskStatus>,
    /// Empty means every phase (a terminal task's is [`Phase::Terminal`]).
    pub phases: Vec<Phase>,
    /// Only tasks whose error code is, or is not, this one (a task without an error has no
    /// code: it never [`CodeMatch::Is`] one, and always [`CodeMatch::IsNot`] one).
    pub error_code: Option<CodeMatch>,
    /// Only tasks updated strictly after this time (Unix ms).
    pub updated_after_ms: Option<u64>,
    pub offset: usize,
    pub limit: usize,
}

/// A condition on a task's error code ([`Selection::error_code`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodeMatch {
    Is(String),
    IsNot(String),
}

impl CodeMatch {
    pub fn accepts(&self, code: Option<&str>) -> bool {
        match self {
            CodeMatch::Is(wanted) => code == Some(wanted.as_str()),
            CodeMatch::IsNot(unwanted) => code != Some(unwanted.as_str()),
        }
    }
}

impl Selection {
    /// Whether a task with these fields passes the filters.
    pub fn accepts(
        &self,
        status: TaskStatus,
        phase: Phase,
        context_id: Option<&str>,
        updated_ms: u64,
        error_code: Option<&str>,
    ) -> bool {
        let context_ok = self
            .context_id
            .as_deref()
            .is_none_or(|wanted| context_id == Some(wanted));
        context_ok
            && (self.statuses.is_empty() || self.statuses.contains(&status))
            && (self.phases.is_empty() || self.phases.contains(&phase))
            && self.updated_after_ms.is_none_or(|after| updated_ms > after)
            && self
                .error_code
                .as_ref()
                .is_none_or(|code| code.accepts(error_code))
    }

    /// The page of `matching` (task id, update ms) this selection asks for, ordered newest
    /// update first, ties by id, and how many matched.
    pub fn page_of(&self, mut matching: Vec<(String, u64)>) -> Selected {
        matching.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let total = matching.len() as u64;
        let ids = matching
            .into_iter()
            .skip(self.offset)
            .take(self.limit)
            .map(|(id, _)| id)
            .collect();
        Selected { ids, total }
    }
}

/// What [`super::TaskStore::select`] found: the page's task ids in order, and how many tasks
/// matched in all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selected {
    pub ids: Vec<String>,
    pub total: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskPage {
    pub tasks: Vec<Task>,
    pub total: u64,
    pub has_more: bool,
}

/// What one recovery sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Expired claims and active leases put back in the ready queue.
    pub requeued: Vec<String>,
    /// Active tasks failed: past their run deadline (`task_timeout`) or out of attempts.
    pub failed: Vec<String>,
    /// Expired reservations and pre-hand-off claims cancelled (the upstream reaping rule).
    pub cancelled: Vec<String>,
    /// Tasks whose retry backoff ended, put back in the ready queue
    /// ([`super::TaskStore::retry_later`]): a retry the handler asked for, not a recovery.
    pub retried: Vec<String>,
    /// The entrypoint of each task above, by task id (for per-entrypoint metrics).
    pub entrypoints: std::collections::HashMap<String, String>,
}

impl RecoveryReport {
    pub fn is_empty(&self) -> bool {
        self.requeued.is_empty()
            && self.failed.is_empty()
            && self.cancelled.is_empty()
            && self.retried.is_empty()
    }

    /// The entrypoint of a settled task; `"unknown"` for one the report does not name.
    pub fn entrypoint_of(&self, task_id: &str) -> &str {
        self.entrypoints
            .get(task_id)
            .map_or("unknown", String::as_str)
    }
}

/// What a worker asks for when it takes tasks to run now: up to `max` queued tasks of
/// `entrypoints`, claimed by `holder` and activated in the same step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TakeSpec {
    pub entrypoints: Vec<String>,
    pub holder: String,
    pub lease_ttl: Duration,
    /// The run deadline each activation starts (`maxRunMs`).
    pub max_run: Duration,
    pub max: usize,
}

/// A task claimed and activated for its claimer in one step: run it now.
#[derive(Debug, Clone, PartialEq)]
pub struct Started {
    pub claim: Claim,
    pub activation: Activation,
}

/// What [`super::TaskStore::finish_and_take`] did: the fenced terminal write's outcome, and the
/// next tasks it started for the same worker (empty when none was asked for or queued).
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    pub outcome: CasOutcome,
    pub next: Vec<Started>,
}

/// Failed tasks kept per entrypoint in a failed index (per shard in the Redis store): the
/// newest this many; older ones are dropped from the index (their records stay until
/// retention). `lua/includes/index_failed.lua` holds the same number.
pub const FAILED_KEPT: usize = 1_000;
/// Failed-list page size when none is given, and the largest accepted.
pub const DEFAULT_FAILED_LIMIT: usize = 50;
pub const MAX_FAILED_LIMIT: usize = 200;

/// Where a page of failed tasks ends: the last entry shown (when it failed, its id). The next
/// page holds the entries after it, newest first: failed earlier, or at the same millisecond
/// with a smaller id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedCursor {
    pub failed_at_ms: u64,
    pub task_id: String,
}

impl FailedCursor {
    /// `<ms>.<task id>`, opaque to callers.
    pub fn encode(&self) -> String {
        format!("{}.{}", self.failed_at_ms, self.task_id)
    }

    /// A cursor [`FailedCursor::encode`] wrote; `None` for anything else.
    pub fn decode(text: &str) -> Option<FailedCursor> {
        let (ms, id) = text.split_once('.')?;
        if id.is_empty() || !ms.bytes().all(|byte| byte.is_ascii_digit()) {
            return None;
        }
        Some(FailedCursor {
            failed_at_ms: ms.parse().ok()?,
            task_id: id.to_owned(),
        })
    }

    /// Whether an entry failed at `failed_at_ms` with id `task_id` comes after this cursor
    /// (newest first: earlier, or as early with a smaller id).
    pub fn precedes(&self, failed_at_ms: u64, task_id: &str) -> bool {
        (failed_at_ms, task_id) < (self.failed_at_ms, self.task_id.as_str())
    }
}

/// One entry of a failed index, read with its task's record.
#[derive(Debug, Clone, PartialEq)]
pub struct FailedEntry {
    pub task_id: String,
    pub entrypoint: String,
    /// When it failed (the index's score: the failing transition's time).
    pub failed_at_ms: u64,
    pub error: Option<TaskError>,
    pub attempt: u32,
}

/// A page of [`super::TaskStore::failed_page`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FailedPage {
    pub entries: Vec<FailedEntry>,
    /// Where the next page starts; `None` when this one is the last.
    pub next: Option<FailedCursor>,
}
