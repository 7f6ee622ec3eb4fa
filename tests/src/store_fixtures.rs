//! Store-level fixtures of the Redis suites: a queued task, ids placed in a given shard, a
//! store's settings without bounds, a cluster store's settings and a running lease; and, for the suites that watch a task through
//! the store, the next event of a subscription.

use std::time::Duration;

use futures::StreamExt;
use protocol::token::OwnerHash;
use protocol::{TaskResult, TaskStatus};
use serde_json::{Value, json};
use store::redis::shard_index;
use store::{
    Activation, Admission, Claim, Invocation, Lease, NewTask, RedisStoreConfig, StoredEvent,
    Subscription, TaskStore, Transition,
};

use crate::TestResult;
use crate::cluster::PATIENCE;

/// A free (queued) task of `entrypoint` whose input names its id, with 3 attempts.
pub fn queued_task(id: &str, owner: &OwnerHash, entrypoint: &str) -> NewTask {
    queued_task_with(id, owner, entrypoint, json!({ "id": id }), 3)
}

/// A free (queued) task of `entrypoint` with `input` and `max_attempts`, as the gateway
/// creates one.
pub fn queued_task_with(
    id: &str,
    owner: &OwnerHash,
    entrypoint: &str,
    input: Value,
    max_attempts: u32,
) -> NewTask {
    NewTask {
        task_id: id.to_owned(),
        owner: owner.clone(),
        invocation: Invocation {
            entrypoint: entrypoint.to_owned(),
            input,
            context_id: None,
            metadata: None,
            trace_context: Default::default(),
        },
        admission: Admission::Queued,
        max_attempts,
        retention: None,
        source: None,
        private_owner: false,
    }
}

/// Awaits the next event of `sub` that `wanted` accepts, skipping others: first in the
/// subscription's replay (what happened before it went live, consumed up to the match), then
/// live, for up to [`PATIENCE`].
pub async fn next_event(
    sub: &mut Subscription,
    wanted: impl Fn(&StoredEvent) -> bool,
) -> TestResult<StoredEvent> {
    if let Some(index) = sub.replay.iter().position(&wanted) {
        let found = sub.replay.remove(index);
        sub.replay.drain(..index);
        return Ok(found);
    }
    sub.replay.clear();
    let found = tokio::time::timeout(PATIENCE, async {
        while let Some(event) = sub.events.next().await {
            if wanted(&event) {
                return Some(event);
            }
        }
        None
    })
    .await?;
    Ok(found.ok_or("the subscription ended before the event awaited")?)
}

/// [`next_event`] named `name`.
pub async fn next_named(sub: &mut Subscription, name: &str) -> TestResult<StoredEvent> {
    next_event(sub, |event| event.event == name).await
}

/// The first `count` ids `prefix-N` that land in shard `shard` of `shards`.
pub fn ids_in_shard(prefix: &str, shard: usize, shards: usize, count: usize) -> Vec<String> {
    (0..)
        .map(|n| format!("{prefix}-{n}"))
        .filter(|id| shard_index(id, shards) == shard)
        .take(count)
        .collect()
}

/// The settings of a store on the Redis server at `url` with room for 1,000 live tasks and
/// every retained and per-owner bound off, so that a test turns on only the bound it checks.
pub fn unbounded_store_config(url: String) -> RedisStoreConfig {
    let mut config = RedisStoreConfig::new(url);
    config.max_tasks = 1_000;
    config.max_retained = 0;
    config.max_retained_per_owner = 0;
    config.max_live_per_owner = 0;
    config.max_retained_bytes = 0;
    config
}

/// The settings of a store on the Redis Cluster seeded by `urls`, split into `shards`, whose
/// calls give up after `timeout` (short, so that a dead node fails a call quickly).
pub fn cluster_store_config(urls: Vec<String>, shards: u16, timeout: Duration) -> RedisStoreConfig {
    let mut config = RedisStoreConfig::new(String::new());
    config.cluster_urls = urls;
    config.shards = shards;
    config.timeout = timeout;
    config
}

/// Claims and starts task `id` for `worker` with `ttl` as lease and run limit: its running
/// lease.
pub async fn start_running(
    store: &impl TaskStore,
    id: &str,
    worker: &str,
    ttl: Duration,
) -> crate::TestResult<Lease> {
    let claim = store
        .claim_execution(id, worker, ttl)
        .await?
        .ok_or("claim refused")?;
    let started = store
        .activate_execution(&claim.lease, ttl, ttl)
        .await?
        .ok_or("activation refused")?;
    Ok(started.lease)
}

/// Takes and activates the oldest queued task of `echo` as worker `holder`, with a 10 s lease
/// and a minute's run: its claim and its activation.
pub async fn start_next_echo(
    store: &impl TaskStore,
    holder: &str,
) -> crate::TestResult<(Claim, Activation)> {
    const LEASE: Duration = Duration::from_secs(10);
    let claim = store
        .take_next(&["echo".into()], holder, LEASE, 1, Duration::from_secs(5))
        .await?
        .into_iter()
        .next()
        .ok_or("nothing to take")?;
    let activation = store
        .activate_execution(&claim.lease, LEASE, Duration::from_secs(60))
        .await?
        .ok_or("activation refused")?;
    Ok((claim, activation))
}

/// Takes, starts and completes (with its input as its output) the oldest queued task of
/// `echo`, as a worker would; returns its id.
pub async fn run_one_echo(store: &impl TaskStore) -> crate::TestResult<String> {
    let (claim, activation) = start_next_echo(store, "w1").await?;
    let outcome = store
        .compare_and_set(
            &claim.lease.task_id,
            &[TaskStatus::Running],
            Transition::completed(TaskResult::output(claim.invocation.input.clone())),
            Some(&activation.lease),
        )
        .await?;
    outcome.applied().ok_or("completion refused")?;
    Ok(claim.lease.task_id.clone())
}

/// Waits until task `id`'s run is active (its handler started), reading the store every
/// 10 ms for up to `patience`.
pub async fn wait_until_active(
    store: &dyn TaskStore,
    id: &str,
    patience: Duration,
) -> crate::TestResult {
    let start = tokio::time::Instant::now();
    loop {
        if let Some(stored) = store.get(id).await?
            && stored.phase == store::Phase::Active
        {
            return Ok(());
        }
        if start.elapsed() > patience {
            return Err(format!("task {id} never became active").into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
