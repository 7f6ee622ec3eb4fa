//! RedisStore against a real redis-server going away: scripts flushed or forgotten by a
//! restart are reloaded (NOSCRIPT; the library's functions: `redis_functions.rs`), acknowledged tasks survive a crash with AOF
//! (`appendfsync always`), and subscribers miss nothing across a restart.

use std::time::Duration;

use futures::StreamExt;
use harness::TestResult;
use harness::redis_server::{RedisOptions, RedisServer};
use harness::store_fixtures::{queued_task, run_one_echo};
use protocol::TaskStatus;
use protocol::token::AccessToken;
use store::{RedisStore, RedisStoreConfig, StoreError, TaskStore};

async fn store(server: &RedisServer) -> Result<RedisStore, StoreError> {
    store_calling(server, true).await
}

/// A store whose scripts are called as the library's functions (`functions`), or by EVALSHA.
async fn store_calling(server: &RedisServer, functions: bool) -> Result<RedisStore, StoreError> {
    let mut config = RedisStoreConfig::new(server.url());
    config.functions = functions;
    // Hundreds of tasks of one owner: the per-owner bounds are not what this suite checks.
    config.max_live_per_owner = 0;
    config.max_retained_per_owner = 0;
    RedisStore::connect(config).await
}

/// The first request after a restart may meet a connection that broke with it (and purges the
/// pool); the store must answer the ones after it.
async fn until_reconnected<T, F, Fut>(mut op: F) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    let mut last = None;
    for _ in 0..3 {
        match op().await {
            Ok(value) => return Ok(value),
            Err(err) => last = Some(err),
        }
    }
    Err(last.unwrap_or_else(|| StoreError::Unavailable("no attempt".into())))
}

#[tokio::test]
async fn scripts_survive_script_flush() -> TestResult {
    let server = RedisServer::start()?;
    // Called by EVALSHA, as on a server without functions: SCRIPT FLUSH answers NOSCRIPT.
    let store = store_calling(&server, false).await?;
    let owner = AccessToken::generate().owner_hash();
    store.create(queued_task("a", &owner, "echo")).await?;

    let mut conn = server.client().await?;
    let _: String = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await?;

    store.create(queued_task("b", &owner, "echo")).await?;
    run_one_echo(&store).await?;
    run_one_echo(&store).await?;
    assert_eq!(store.live_count().await?, 0);
    Ok(())
}

#[tokio::test]
async fn acknowledged_tasks_survive_a_redis_crash_with_aof() -> TestResult {
    let mut server = RedisServer::start_with(RedisOptions::default().with_aof(true))?;
    let store = store(&server).await?;
    let owner = AccessToken::generate().owner_hash();
    let ids: Vec<String> = (0..200).map(|i| format!("task-{i}")).collect();
    for id in &ids {
        store.create(queued_task(id, &owner, "echo")).await?;
    }

    server.kill()?; // SIGKILL: no shutdown, no final fsync
    server.restart()?;

    let live = until_reconnected(|| store.live_count()).await?;
    assert_eq!(live, 200, "every acknowledged task is still live");
    for id in &ids {
        let task = store.get(id).await?.ok_or("acknowledged task lost")?;
        assert_eq!(task.task.status, TaskStatus::Running);
    }
    // The restarted server has the library again from its AOF (FUNCTION LOAD is logged).
    for _ in 0..200 {
        run_one_echo(&store).await?;
    }
    assert_eq!(store.live_count().await?, 0);
    let page = store.list(&owner, &Default::default()).await?;
    assert_eq!(page.total, 200);
    assert!(page.tasks.iter().all(|t| t.status == TaskStatus::Completed));
    Ok(())
}

#[tokio::test]
async fn a_subscriber_misses_nothing_across_a_redis_restart() -> TestResult {
    let mut server = RedisServer::start_with(RedisOptions::default().with_aof(true))?;
    let store = store(&server).await?;
    let token = AccessToken::generate();
    let owner = token.owner_hash();
    store.create(queued_task("watched", &owner, "echo")).await?;
    let mut subscription = store
        .subscribe("watched", &owner, None)
        .await?
        .ok_or("own task not visible")?;
    assert_eq!(subscription.snapshot.status, TaskStatus::Running);

    server.kill()?;
    server.restart()?;

    until_reconnected(|| store.live_count()).await?;
    let id = run_one_echo(&store).await?;
    assert_eq!(id, "watched");
    let event = tokio::time::timeout(Duration::from_secs(10), subscription.events.next())
        .await?
        .ok_or("subscription ended")?;
    assert_eq!(event.event, "resultUpdate");
    assert_eq!(event.data["status"], "completed");
    assert_eq!(event.seq, subscription.snapshot_seq + 1);
    Ok(())
}
