//! The ready queue cannot be raced: eight stores (each its own connections, as eight worker
//! processes have) drain one backlog at once through `take_active` and `finish_and_take`, on
//! one shard and on four. Every task is taken exactly once, and Redis reads about one task
//! record per task taken: the take scripts pop their tasks, so no process reads a queue head
//! that another then claims (the design before this read 5.65 records per task under eight
//! competing processes).

use harness::TestResult;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use harness::measure::commandstats::{RedisSnap, reset_stats};
use harness::redis_server::RedisServer;
use harness::store_fixtures::queued_task;
use protocol::TaskResult;
use protocol::token::AccessToken;
use serde_json::json;
use store::{RedisStore, RedisStoreConfig, TakeSpec, TaskStore, Transition};
use tokio::sync::Mutex;

const TASKS: usize = 2_000;
const PROCESSES: usize = 8;
const SLOTS_PER_PROCESS: usize = 4;
/// Task record reads (HMGET) of one finish: `swap_task.lua` and `finish_task.lua` each read
/// the record once.
const FINISH_READS: u64 = 2;
const LEASE: Duration = Duration::from_secs(60);
/// Only reached when a task is lost: the drain never ends.
const FAILURE_BOUND: Duration = Duration::from_secs(180);

fn spec(worker: &str, max: usize) -> TakeSpec {
    TakeSpec {
        entrypoints: vec!["echo".into(), "other".into()],
        holder: worker.to_owned(),
        lease_ttl: LEASE,
        max_run: LEASE,
        max,
    }
}

fn done(id: &str) -> Transition {
    Transition::completed(TaskResult::output(json!({ "id": id })))
}

/// One slot of one "process": takes a task, then finishes each and takes the next in the same
/// call, until the backlog is gone; records every task it started.
async fn slot(
    store: Arc<RedisStore>,
    worker: String,
    started: Arc<Mutex<HashMap<String, usize>>>,
) -> TestResult {
    let mut current = Vec::new();
    loop {
        if current.is_empty() {
            current = store
                .take_active(&spec(&worker, 1), Duration::from_millis(200))
                .await?;
            if current.is_empty() {
                if started.lock().await.len() >= TASKS {
                    return Ok(());
                }
                continue;
            }
        }
        let Some(task) = current.pop() else { continue };
        let id = task.claim.lease.task_id.clone();
        *started.lock().await.entry(id.clone()).or_default() += 1;
        let finished = store
            .finish_and_take(&task.activation.lease, done(&id), Some(&spec(&worker, 1)))
            .await?;
        if finished.outcome.applied().is_none() {
            return Err(format!("the finish of {id} was refused: {:?}", finished.outcome).into());
        }
        current.extend(finished.next);
    }
}

async fn drain(shards: u16) -> TestResult {
    let server = RedisServer::start()?;
    let connect = || {
        let mut config = RedisStoreConfig::new(server.url());
        config.shards = shards;
        config.max_tasks = 10 * TASKS as u64;
        RedisStore::connect(config)
    };
    let first = connect().await?;
    // Two entrypoints, so that the scripts merge queues by age too; an owner per 50 tasks
    // (live tasks per owner are bounded).
    let mut owner = AccessToken::generate().owner_hash();
    for n in 0..TASKS {
        if n % 50 == 0 {
            owner = AccessToken::generate().owner_hash();
        }
        let entrypoint = if n % 4 == 0 { "other" } else { "echo" };
        first
            .create(queued_task(&format!("t-{n}"), &owner, entrypoint))
            .await?;
    }
    let mut admin = redis::Client::open(server.url())?
        .get_multiplexed_async_connection()
        .await?;
    reset_stats(&mut admin).await?;
    let before = RedisSnap::take(&mut admin).await?;

    let started = Arc::new(Mutex::new(HashMap::new()));
    let mut slots = tokio::task::JoinSet::new();
    for process in 0..PROCESSES {
        let store = Arc::new(connect().await?);
        for _ in 0..SLOTS_PER_PROCESS {
            slots.spawn(slot(store.clone(), format!("w{process}"), started.clone()));
        }
    }
    tokio::time::timeout(FAILURE_BOUND, async {
        while let Some(joined) = slots.join_next().await {
            joined??;
        }
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
    })
    .await??;

    let started = started.lock().await;
    assert_eq!(started.len(), TASKS, "every task started");
    let twice: Vec<_> = started.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "started more than once: {twice:?}");

    let after = RedisSnap::take(&mut admin).await?;
    let commands = after.since(&before, |_| 0);
    let records_read = commands.calls.get("hmget").copied().unwrap_or(0);
    // A finish reads its task twice (the compare-and-set, then the terminal bookkeeping);
    // the rest are the takes' reads: at most 1.2 per task taken (the target).
    let take_reads = records_read.saturating_sub(FINISH_READS * TASKS as u64);
    assert!(
        take_reads * 5 <= TASKS as u64 * 6,
        "{take_reads} task reads by takes for {TASKS} tasks: {:?}",
        commands.calls
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_processes_drain_one_queue_taking_each_task_once() -> TestResult {
    drain(1).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_processes_drain_four_shards_taking_each_task_once() -> TestResult {
    drain(4).await
}
