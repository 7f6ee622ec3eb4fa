//! What every theme uses: the store factory ([`Harness`]), a per-test fixture ([`Fx`]) and small
//! helpers.
//!
//! Timing rules of the suite: a lease or admission meant to stay live gets [`LONG`]; one meant to
//! run out gets [`SHORT`] and the test sleeps past it with [`outlive`]. Nothing ever needs a short
//! lease to still be live, so a slow machine cannot flip an outcome. Events are awaited (with
//! [`EVENT_TIMEOUT`] only as a failure bound), never slept for.

use std::error::Error;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use protocol::token::{AccessToken, OwnerHash};
use protocol::{TaskError, TaskResult, TaskStatus};
use serde_json::{Value, json};
use store::{
    Activation, Admission, CasOutcome, Claim, DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_TASKS,
    DEFAULT_RETENTION, EventPayload, EventStream, Invocation, Lease, NewTask, Started, StoredEvent,
    StoredTask, Subscription, TakeSpec, TaskStore, Transition,
};

pub type BoxError = Box<dyn Error + Send + Sync>;
pub use harness::TestResult;

/// A lease or admission that must not run out during a test.
pub const LONG: Duration = Duration::from_secs(60);
/// A lease or admission that the test lets run out.
pub const SHORT: Duration = Duration::from_millis(30);
/// Upper bound on waiting for something that must happen; only reached when a test fails.
pub const EVENT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `take_next` may wait when the test expects the queue to be empty.
pub const EMPTY_WAIT: Duration = Duration::from_millis(50);

/// Limits a test asks of its store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreCfg {
    pub max_tasks: u64,
    pub retention: Duration,
    /// Give every task of the test ids of one shard, with a `max_tasks` that is the test's
    /// bound per shard: capacity is per shard, so the capacity tests hold on sharded stores.
    pub one_shard: bool,
}

impl Default for StoreCfg {
    fn default() -> Self {
        StoreCfg {
            max_tasks: DEFAULT_MAX_TASKS,
            retention: DEFAULT_RETENTION,
            one_shard: false,
        }
    }
}

/// Makes stores for the suite. One harness value is built per test (the expression given to
/// `conformance_tests!`), so it may own per-test resources such as a private server.
pub trait Harness: Send + Sync {
    /// Shards the harness's stores are split into (`store::redis::shard_index` places
    /// ids); 1 for an unsharded store.
    fn shards(&self) -> usize {
        1
    }

    /// A new store with these limits that shares nothing (tasks, queues, counts) with stores
    /// from earlier calls. Called once per test, and once per case by the property test.
    fn store(
        &self,
        cfg: StoreCfg,
    ) -> impl Future<Output = Result<Arc<dyn TaskStore>, BoxError>> + Send;

    /// Called after a test has slept past `retention` and before it checks that terminal tasks
    /// are gone. A store whose expiry is not exact can force it here; by default nothing.
    /// Called once every task the store holds is terminal: a store with an external keyspace
    /// checks here that nothing is left that would not expire by itself. By default nothing.
    fn check_no_leaks(&self) -> impl Future<Output = Result<(), BoxError>> + Send {
        async { Ok(()) }
    }

    fn after_retention(
        &self,
        _store: &Arc<dyn TaskStore>,
    ) -> impl Future<Output = Result<(), BoxError>> + Send {
        async { Ok(()) }
    }
}

/// Sleeps until a lease or admission of `ttl`, taken before the call, has surely run out.
pub async fn outlive(ttl: Duration) {
    tokio::time::sleep(ttl * 2 + Duration::from_millis(10)).await;
}

/// A caller other than the fixture's owner.
pub fn other_owner() -> OwnerHash {
    AccessToken::generate().owner_hash()
}

/// A short random tag that keeps ids and entrypoints of concurrent tests apart.
fn tag() -> String {
    AccessToken::generate().expose().chars().take(10).collect()
}

/// Awaits the next event of a subscription.
pub async fn next_event(events: &mut EventStream) -> Result<StoredEvent, BoxError> {
    match tokio::time::timeout(EVENT_TIMEOUT, events.next()).await {
        Ok(Some(event)) => Ok(event),
        Ok(None) => Err("event stream ended".into()),
        Err(_) => Err("no event within the timeout".into()),
    }
}

pub fn progress(step: u64) -> EventPayload {
    EventPayload {
        event: "progress".into(),
        data: json!({ "step": step }),
    }
}

/// The rejection reason of a compare-and-set, or an error when it applied.
pub fn rejection(outcome: &CasOutcome) -> Result<(store::Rejection, Option<TaskStatus>), BoxError> {
    match outcome {
        CasOutcome::Rejected { reason, current } => {
            Ok((*reason, current.as_ref().map(|task| task.status)))
        }
        CasOutcome::Applied(task) => Err(format!("unexpectedly applied: {task:?}").into()),
    }
}

/// One test's store plus an owner and an entrypoint of its own.
pub struct Fx {
    pub store: Arc<dyn TaskStore>,
    pub owner: OwnerHash,
    pub entrypoint: String,
    tag: String,
    /// The store's shard count when every id must land in shard 0 ([`StoreCfg::one_shard`]).
    pinned_shards: Option<usize>,
}

impl Fx {
    pub async fn new(harness: &impl Harness) -> Result<Fx, BoxError> {
        Fx::with_cfg(harness, StoreCfg::default()).await
    }

    /// A fixture whose tasks all land in one shard, for tests of the order in which tasks are
    /// taken: queues are FIFO per entrypoint within a shard, and a take visits the shards in
    /// turn, so across shards no order is promised.
    pub async fn ordered(harness: &impl Harness) -> Result<Fx, BoxError> {
        let cfg = StoreCfg {
            one_shard: true,
            ..StoreCfg::default()
        };
        Fx::with_cfg(harness, cfg).await
    }

    pub async fn with_cfg(harness: &impl Harness, mut cfg: StoreCfg) -> Result<Fx, BoxError> {
        let tag = tag();
        let shards = harness.shards();
        let pinned_shards = (cfg.one_shard && shards > 1).then_some(shards);
        if pinned_shards.is_some() {
            // The test's bound applies to the one shard its tasks land in.
            cfg.max_tasks = cfg.max_tasks.saturating_mul(shards as u64);
        }
        Ok(Fx {
            store: harness.store(cfg).await?,
            owner: AccessToken::generate().owner_hash(),
            entrypoint: format!("ep-{tag}"),
            tag,
            pinned_shards,
        })
    }

    /// The task id a test calls `name` (in shard 0 when the test pins its tasks to one shard).
    pub fn id(&self, name: &str) -> String {
        let id = format!("{}-{name}", self.tag);
        let Some(shards) = self.pinned_shards else {
            return id;
        };
        (0..)
            .map(|n| format!("{id}~{n}"))
            .find(|candidate| store::redis::shard_index(candidate, shards) == 0)
            .unwrap_or(id)
    }

    pub fn invocation(&self, name: &str) -> Invocation {
        Invocation {
            entrypoint: self.entrypoint.clone(),
            input: json!({ "name": name }),
            context_id: None,
            metadata: None,
            trace_context: Default::default(),
        }
    }

    pub fn new_task(&self, name: &str, admission: Admission) -> NewTask {
        NewTask {
            task_id: self.id(name),
            owner: self.owner.clone(),
            invocation: self.invocation(name),
            admission,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            retention: None,
            source: None,
            private_owner: false,
        }
    }

    /// Creates a free (queued) task; returns its id.
    pub async fn queued(&self, name: &str) -> Result<String, BoxError> {
        let task = self
            .store
            .create(self.new_task(name, Admission::Queued))
            .await?;
        Ok(task.task_id)
    }

    /// Creates a reserved task whose admission lasts `ttl`; returns its id.
    pub async fn reserved(&self, name: &str, ttl: Duration) -> Result<String, BoxError> {
        let task = self
            .store
            .create(self.new_task(name, Admission::Reserved { ttl }))
            .await?;
        Ok(task.task_id)
    }

    /// The stored task, which must exist.
    pub async fn stored(&self, id: &str) -> Result<StoredTask, BoxError> {
        self.store
            .get(id)
            .await?
            .ok_or_else(|| format!("task {id} is missing").into())
    }

    pub async fn status(&self, id: &str) -> Result<Option<TaskStatus>, BoxError> {
        Ok(self.store.get(id).await?.map(|stored| stored.task.status))
    }

    /// `claim_execution`, which must succeed.
    pub async fn claim(&self, id: &str, worker: &str, ttl: Duration) -> Result<Claim, BoxError> {
        self.store
            .claim_execution(id, worker, ttl)
            .await?
            .ok_or_else(|| format!("{worker} could not claim {id}").into())
    }

    /// `take_next` of one task from the fixture's entrypoint, which must yield one.
    pub async fn take(&self, worker: &str, ttl: Duration) -> Result<Claim, BoxError> {
        let entrypoints = [self.entrypoint.clone()];
        let mut claims = self
            .store
            .take_next(&entrypoints, worker, ttl, 1, EVENT_TIMEOUT)
            .await?;
        match (claims.pop(), claims.is_empty()) {
            (Some(claim), true) => Ok(claim),
            (None, _) => Err(format!("{worker} took nothing").into()),
            (Some(_), false) => Err("take_next returned more than max".into()),
        }
    }

    /// `take_next` when the queue must be empty.
    pub async fn take_nothing(&self, worker: &str) -> TestResult {
        let entrypoints = [self.entrypoint.clone()];
        let claims = self
            .store
            .take_next(&entrypoints, worker, LONG, 1, EMPTY_WAIT)
            .await?;
        match claims.as_slice() {
            [] => Ok(()),
            _ => Err(format!("{worker} took {claims:?} from what should be an empty queue").into()),
        }
    }

    pub async fn queue_depth(&self) -> Result<u64, BoxError> {
        Ok(self.store.queue_depth(&self.entrypoint).await?)
    }

    /// `activate_execution`, which must succeed.
    pub async fn activate(
        &self,
        lease: &Lease,
        ttl: Duration,
        max_run: Duration,
    ) -> Result<Activation, BoxError> {
        self.store
            .activate_execution(lease, ttl, max_run)
            .await?
            .ok_or_else(|| format!("activation of {} refused", lease.task_id).into())
    }

    /// Claims through the queue and activates: a running handler's lease.
    pub async fn running(
        &self,
        worker: &str,
        ttl: Duration,
        max_run: Duration,
    ) -> Result<Activation, BoxError> {
        let claim = self.take(worker, LONG).await?;
        self.activate(&claim.lease, ttl, max_run).await
    }

    pub async fn complete(
        &self,
        id: &str,
        fence: Option<&Lease>,
        output: Value,
    ) -> Result<CasOutcome, BoxError> {
        let next = Transition::completed(TaskResult::output(output));
        Ok(self
            .store
            .compare_and_set(id, &[TaskStatus::Running], next, fence)
            .await?)
    }

    pub async fn fail(
        &self,
        id: &str,
        fence: Option<&Lease>,
        error: TaskError,
    ) -> Result<CasOutcome, BoxError> {
        let next = Transition::failed(error);
        Ok(self
            .store
            .compare_and_set(id, &[TaskStatus::Running], next, fence)
            .await?)
    }

    /// The unfenced `running -> cancelled` a caller's cancel makes.
    pub async fn cancel(&self, id: &str) -> Result<CasOutcome, BoxError> {
        Ok(self
            .store
            .compare_and_set(id, &[TaskStatus::Running], Transition::cancelled(), None)
            .await?)
    }

    /// A subscription of the fixture's owner, which must be granted.
    pub async fn subscribe(
        &self,
        id: &str,
        after_seq: Option<u64>,
    ) -> Result<Subscription, BoxError> {
        self.store
            .subscribe(id, &self.owner, after_seq)
            .await?
            .ok_or_else(|| format!("subscription to {id} refused").into())
    }
}

impl Fx {
    /// What a worker `worker` of the fixture's entrypoint asks `take_active` for.
    pub fn spec(&self, worker: &str, max: usize, ttl: Duration) -> TakeSpec {
        TakeSpec {
            entrypoints: vec![self.entrypoint.clone()],
            holder: worker.to_owned(),
            lease_ttl: ttl,
            max_run: LONG,
            max,
        }
    }

    /// `take_active` of one task, which must yield exactly one.
    pub async fn start(&self, worker: &str, ttl: Duration) -> Result<Started, BoxError> {
        let mut started = self
            .store
            .take_active(&self.spec(worker, 1, ttl), EVENT_TIMEOUT)
            .await?;
        match (started.pop(), started.is_empty()) {
            (Some(one), true) => Ok(one),
            (None, _) => Err(format!("{worker} started nothing").into()),
            (Some(_), false) => Err("take_active returned more than max".into()),
        }
    }
}
