//! A worker's slots are shared fairly between its entrypoints (WORKER_ENTRYPOINT_SHARE): a
//! flood of long sleeps, older than anything else in the queues, holds at most its share of a
//! real worker's slots, and an echo created after them runs at once in the slots left.

use std::time::Duration;

use futures::StreamExt;
use harness::TestResult;
use harness::cluster::worker;
use harness::redis_server::RedisServer;
use harness::store_fixtures::queued_task_with;
use protocol::TaskStatus;
use protocol::token::{AccessToken, OwnerHash};
use serde_json::{Value, json};
use store::{NewTask, Phase, RedisStore, RedisStoreConfig, TaskStore};

/// Bound on waiting for something that must happen; reached only when the test fails. The
/// sleeps last twice as long, so an echo queued behind them cannot finish within it.
const PATIENCE: Duration = Duration::from_secs(30);
const SLEEP_MS: u64 = 60_000;

fn task(id: &str, owner: &OwnerHash, entrypoint: &str, input: Value) -> NewTask {
    queued_task_with(id, owner, entrypoint, input, 1)
}

async fn running_sleeps(store: &RedisStore, ids: &[String]) -> TestResult<usize> {
    let mut running = 0;
    for id in ids {
        let task = store.get(id).await?.ok_or("a sleep vanished")?;
        if matches!(task.phase, Phase::Prepared | Phase::Active) {
            running += 1;
        }
    }
    Ok(running)
}

/// Waits for task `id` of `owner` to complete (bounded by PATIENCE): finished already when the
/// subscription went live, or later on its stream.
async fn completes(store: &RedisStore, id: &str, owner: &OwnerHash) -> TestResult {
    let mut sub = store
        .subscribe(id, owner, None)
        .await?
        .ok_or("own task not visible")?;
    if sub.snapshot.status == TaskStatus::Completed {
        return Ok(());
    }
    let done = tokio::time::timeout(PATIENCE, async {
        while let Some(event) = sub.events.next().await {
            if event.event == "resultUpdate" {
                return Some(event);
            }
        }
        None
    })
    .await?
    .ok_or("the stream ended without a result")?;
    assert_eq!(done.data["status"], "completed", "{id}: {:?}", done.data);
    Ok(())
}

#[tokio::test]
async fn long_runs_of_one_entrypoint_leave_the_others_their_slots() -> TestResult {
    let server = RedisServer::start()?;
    let mut config = RedisStoreConfig::new(server.url());
    config.max_live_per_owner = 0;
    let store = RedisStore::connect(config).await?;
    let (flooder, other) = (
        AccessToken::generate().owner_hash(),
        AccessToken::generate().owner_hash(),
    );
    let sleeps: Vec<String> = (0..10).map(|n| format!("sleep-{n}")).collect();
    for id in &sleeps {
        store
            .create(task(id, &flooder, "sleep", json!({ "ms": SLEEP_MS })))
            .await?;
    }
    // 4 slots, at most half of them (2) to one entrypoint.
    let _worker = worker(
        &server,
        "w1",
        &[
            ("WORKER_CONCURRENCY", "4".to_owned()),
            ("WORKER_ENTRYPOINT_SHARE", "50".to_owned()),
        ],
    )?;
    let start = tokio::time::Instant::now();
    while running_sleeps(&store, &sleeps).await? < 2 {
        assert!(start.elapsed() < PATIENCE, "the sleeps never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    store
        .create(task("echo", &other, "echo", json!({ "x": 1 })))
        .await?;
    completes(&store, "echo", &other).await?;
    assert_eq!(
        running_sleeps(&store, &sleeps).await?,
        2,
        "the sleeps hold their share and no more"
    );
    Ok(())
}

/// While an entrypoint holds its whole share, the idle worker waits on the other entrypoints'
/// doorbells only. The run that ends and gives the entrypoint room again must wake it: a task
/// of that entrypoint queued afterwards starts at once, not after the idle wait (an hour
/// here), which is what it waited before.
#[tokio::test]
async fn a_run_that_gives_its_entrypoint_room_again_wakes_the_idle_worker() -> TestResult {
    let server = RedisServer::start()?;
    let mut config = RedisStoreConfig::new(server.url());
    config.max_live_per_owner = 0;
    let store = RedisStore::connect(config).await?;
    let owner = AccessToken::generate().owner_hash();
    // 2 slots, at most one per entrypoint.
    let _worker = worker(
        &server,
        "w1",
        &[
            ("WORKER_CONCURRENCY", "2".to_owned()),
            ("WORKER_ENTRYPOINT_SHARE", "50".to_owned()),
            ("WORKER_IDLE_WAIT_MS", "3600000".to_owned()),
        ],
    )?;
    for round in 0..3 {
        let id = format!("echo-{round}");
        store
            .create(task(&id, &owner, "echo", json!({ "round": round })))
            .await?;
        completes(&store, &id, &owner).await?;
    }
    Ok(())
}
