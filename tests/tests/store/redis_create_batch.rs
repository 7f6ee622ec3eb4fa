//! A batch of creations (concurrent creates of one process share one `create.lua` call) does
//! per call what it can, on a private redis-server: the doorbell of an entrypoint is rung once
//! per call with one ring per queued task, and the shard's retained count and bytes are read
//! once per call and again after each eviction, so every bound stays exact inside a batch.

use futures::future::try_join_all;
use harness::TestResult;
use harness::redis_server::RedisServer;
use harness::store_fixtures::{queued_task, unbounded_store_config};
use protocol::TaskStatus;
use protocol::token::AccessToken;
use store::redis::Keys;
use store::{CasOutcome, RedisStore, RedisStoreConfig, TaskStore, Transition};

fn config(server: &RedisServer) -> RedisStoreConfig {
    let mut config = unbounded_store_config(server.url());
    config.namespace = "cb".into();
    config
}

/// Creates `ids` (entrypoint `entrypoint`) all at once, so that they share create calls.
async fn create_together(store: &RedisStore, ids: &[String], entrypoint: &str) -> TestResult {
    let owner = AccessToken::generate().owner_hash();
    try_join_all(
        ids.iter()
            .map(|id| store.create(queued_task(id, &owner, entrypoint))),
    )
    .await?;
    Ok(())
}

fn ids(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

#[tokio::test]
async fn a_batch_rings_each_doorbell_once_per_queued_task() -> TestResult {
    let server = RedisServer::start()?;
    let store = RedisStore::connect(config(&server)).await?;
    let keys = Keys::new("cb");
    create_together(&store, &ids("echo", 20), "echo").await?;
    create_together(&store, &ids("sleep", 3), "sleep").await?;

    let mut conn = server.client().await?;
    for (entrypoint, queued) in [("echo", 20_u64), ("sleep", 3)] {
        let rings: u64 = redis::cmd("LLEN")
            .arg(keys.wake(entrypoint))
            .query_async(&mut conn)
            .await?;
        assert_eq!(rings, queued, "{entrypoint}: one ring per queued task");
        let ttl: i64 = redis::cmd("PTTL")
            .arg(keys.wake(entrypoint))
            .query_async(&mut conn)
            .await?;
        assert!(
            ttl > 0 && ttl <= 60_000,
            "{entrypoint}: a doorbell nobody listens to expires ({ttl})"
        );
    }

    // Past the cap, the list is trimmed: rings beyond it would wake nobody new.
    create_together(&store, &ids("more", 100), "echo").await?;
    let rings: u64 = redis::cmd("LLEN")
        .arg(keys.wake("echo"))
        .query_async(&mut conn)
        .await?;
    assert!(
        (1..=64).contains(&rings),
        "a doorbell keeps at most 64 rings ({rings})"
    );
    Ok(())
}

#[tokio::test]
async fn a_batch_keeps_the_retained_budget_exact_across_its_evictions() -> TestResult {
    let server = RedisServer::start()?;
    let mut config = config(&server);
    config.max_retained = 10;
    let store = RedisStore::connect(config).await?;
    let finished = ids("done", 6);
    for id in &finished {
        store
            .create(queued_task(
                id,
                &AccessToken::generate().owner_hash(),
                "echo",
            ))
            .await?;
        let outcome = store
            .compare_and_set(id, &[TaskStatus::Running], Transition::cancelled(), None)
            .await?;
        assert!(matches!(outcome, CasOutcome::Applied(_)), "{outcome:?}");
    }

    // 8 new tasks need 4 of the 6 terminal ones evicted; a count that went stale inside the
    // batch would evict too few (over the budget) or too many.
    let fresh = ids("new", 8);
    create_together(&store, &fresh, "echo").await?;
    let mut kept = 0;
    for id in &finished {
        if store.get(id).await?.is_some() {
            kept += 1;
        }
    }
    assert_eq!(kept, 2, "exactly four terminal tasks go");
    for id in &fresh {
        assert!(store.get(id).await?.is_some(), "{id} was created");
    }

    let mut conn = server.client().await?;
    let terminal: u64 = redis::cmd("ZCARD")
        .arg(Keys::new("cb").retained()[0].clone())
        .query_async(&mut conn)
        .await?;
    assert_eq!(terminal, 2, "the retained set counts the two kept");
    Ok(())
}
