//! Retained tasks have bounds in the Redis store (issue 29), on a private redis-server: the
//! retained budget evicts the terminal task that expires first and refuses only when every
//! stored task is live (unsharded and sharded), an owner's retained budget evicts its own
//! oldest terminal task, an owner's live limit refuses with `OwnerCapacity`, a task kept for
//! its own short retention leaves every key, and an owner listing reads one page whatever the
//! owner holds (commands counted).

use std::time::Duration;

use futures::StreamExt;
use harness::TestResult;
use harness::redis_server::RedisServer;
use harness::store_fixtures::{ids_in_shard, queued_task, unbounded_store_config};
use protocol::TaskStatus;
use protocol::token::{AccessToken, OwnerHash};
use store::{
    CasOutcome, ListQuery, RedisStore, RedisStoreConfig, StoreError, TaskStore, Transition,
};

const PATIENCE: Duration = Duration::from_secs(30);

fn owner() -> OwnerHash {
    AccessToken::generate().owner_hash()
}

fn config(server: &RedisServer, shards: u16) -> RedisStoreConfig {
    let mut config = unbounded_store_config(server.url());
    config.shards = shards;
    config
}

async fn cancel(store: &RedisStore, id: &str) -> TestResult {
    let outcome = store
        .compare_and_set(id, &[TaskStatus::Running], Transition::cancelled(), None)
        .await?;
    assert!(matches!(outcome, CasOutcome::Applied(_)), "{outcome:?}");
    Ok(())
}

async fn exists(store: &RedisStore, id: &str) -> Result<bool, StoreError> {
    Ok(store.get(id).await?.is_some())
}

/// Every key of the namespace that names `id`.
async fn keys_of(server: &RedisServer, id: &str) -> TestResult<Vec<String>> {
    let mut conn = server.client().await?;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("*{id}*"))
        .query_async(&mut conn)
        .await?;
    Ok(keys)
}

/// One shard's retained budget of 3 (the whole budget split over `shards`), every task in
/// shard 0.
async fn budget_evicts_oldest_terminal_then_refuses(shards: u16) -> TestResult {
    let server = RedisServer::start()?;
    let mut config = config(&server, shards);
    config.max_retained = 3 * u64::from(shards);
    let store = RedisStore::connect(config).await?;
    let ids = ids_in_shard("t", 0, usize::from(shards), 7);
    let (me, other) = (owner(), owner());
    for id in &ids[..3] {
        store.create(queued_task(id, &me, "echo")).await?;
    }
    cancel(&store, &ids[0]).await?;
    cancel(&store, &ids[1]).await?;
    // Full: another owner's task evicts the terminal task that finished (and expires) first.
    store.create(queued_task(&ids[3], &other, "echo")).await?;
    assert!(
        !exists(&store, &ids[0]).await?,
        "the oldest terminal task goes"
    );
    assert!(
        keys_of(&server, &ids[0]).await?.is_empty(),
        "and every key of it"
    );
    assert!(exists(&store, &ids[1]).await?);
    store.create(queued_task(&ids[4], &other, "echo")).await?;
    assert!(!exists(&store, &ids[1]).await?);
    // The owner's listing no longer counts what was evicted.
    let page = store.list(&me, &ListQuery::default()).await?;
    assert_eq!(page.total, 1);
    assert_eq!(page.tasks.len(), 1);
    // Three live tasks: nothing to evict.
    let refused = store.create(queued_task(&ids[5], &other, "echo")).await;
    assert!(
        matches!(refused, Err(StoreError::Capacity { .. })),
        "{refused:?}"
    );
    cancel(&store, &ids[2]).await?;
    store.create(queued_task(&ids[5], &other, "echo")).await?;
    assert!(!exists(&store, &ids[2]).await?);
    Ok(())
}

#[tokio::test]
async fn the_retained_budget_evicts_the_oldest_terminal_task_first() -> TestResult {
    budget_evicts_oldest_terminal_then_refuses(1).await
}

#[tokio::test]
async fn the_retained_budget_holds_per_shard() -> TestResult {
    budget_evicts_oldest_terminal_then_refuses(2).await
}

#[tokio::test]
async fn an_owner_over_its_retained_budget_loses_its_own_oldest_terminal_task() -> TestResult {
    let server = RedisServer::start()?;
    let mut config = config(&server, 1);
    config.max_retained_per_owner = 2;
    let store = RedisStore::connect(config).await?;
    let (me, other) = (owner(), owner());
    store.create(queued_task("other", &other, "echo")).await?;
    cancel(&store, "other").await?;
    store.create(queued_task("a", &me, "echo")).await?;
    store.create(queued_task("b", &me, "echo")).await?;
    cancel(&store, "a").await?;
    store.create(queued_task("c", &me, "echo")).await?;
    assert!(
        !exists(&store, "a").await?,
        "the owner's oldest terminal task goes"
    );
    assert!(exists(&store, "other").await?, "another owner's task stays");
    let refused = store.create(queued_task("d", &me, "echo")).await;
    assert!(
        matches!(
            refused,
            Err(StoreError::OwnerCapacity {
                max: 2,
                live: false
            })
        ),
        "{refused:?}"
    );
    store.create(queued_task("other-2", &other, "echo")).await?;
    Ok(())
}

#[tokio::test]
async fn an_owner_over_its_live_limit_is_refused_until_one_finishes() -> TestResult {
    let server = RedisServer::start()?;
    let mut config = config(&server, 1);
    config.max_live_per_owner = 2;
    let store = RedisStore::connect(config).await?;
    let (me, other) = (owner(), owner());
    store.create(queued_task("a", &me, "echo")).await?;
    store.create(queued_task("b", &me, "echo")).await?;
    let refused = store.create(queued_task("c", &me, "echo")).await;
    assert!(
        matches!(
            refused,
            Err(StoreError::OwnerCapacity { max: 2, live: true })
        ),
        "{refused:?}"
    );
    store.create(queued_task("x", &other, "echo")).await?;
    cancel(&store, "a").await?;
    store.create(queued_task("c", &me, "echo")).await?;
    Ok(())
}

#[tokio::test]
async fn a_task_with_its_own_retention_leaves_every_key_after_it() -> TestResult {
    let server = RedisServer::start()?;
    let store = RedisStore::connect(config(&server, 1)).await?;
    let me = owner();
    let mut short = queued_task("short", &me, "echo");
    short.retention = Some(Duration::from_millis(200));
    store.create(short).await?;
    store.create(queued_task("long", &me, "echo")).await?;
    cancel(&store, "short").await?;
    cancel(&store, "long").await?;
    let start = tokio::time::Instant::now();
    loop {
        // A listing prunes the expired entry from the owner's index and the terminal set.
        let page = store.list(&me, &ListQuery::default()).await?;
        let left = keys_of(&server, "short").await?;
        let mut conn = server.client().await?;
        let terminal: Vec<String> = redis::cmd("ZRANGE")
            .arg("{tc}:terminal")
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await?;
        if page.total == 1 && left.is_empty() && !terminal.iter().any(|m| m.ends_with(":short")) {
            assert_eq!(page.tasks[0].task_id, "long");
            break;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "short never went: {left:?} {terminal:?} {page:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        exists(&store, "long").await?,
        "kept for the store's retention"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_listing_of_50000_tasks_reads_one_page() -> TestResult {
    const TASKS: usize = 50_000;
    const PAGE: usize = 10;
    let server = RedisServer::start()?;
    let mut config = config(&server, 1);
    config.max_tasks = 100_000;
    let store = RedisStore::connect(config).await?;
    let me = owner();
    // Concurrent creates go out in batches (one script call each).
    let created: Vec<Result<_, StoreError>> = futures::stream::iter(0..TASKS)
        .map(|n| {
            let store = store.clone();
            let me = me.clone();
            async move {
                store
                    .create(queued_task(&format!("t{n:05}"), &me, "echo"))
                    .await
            }
        })
        .buffer_unordered(512)
        .collect()
        .await;
    for result in created {
        result?;
    }

    server.reset_commandstats().await?;
    let query = ListQuery {
        limit: Some(PAGE),
        offset: 20,
        ..ListQuery::default()
    };
    let page = store.list(&me, &query).await?;
    let stats = server.info_commandstats().await?;
    assert_eq!(page.total, TASKS as u64);
    assert!(page.has_more);
    assert_eq!(page.tasks.len(), PAGE);
    // Newest first: creation times never decrease with the id, so the page is in order.
    for pair in page.tasks.windows(2) {
        assert!(pair[0].created_at >= pair[1].created_at);
    }
    let record_reads = stats.get("hmget").copied().unwrap_or(0)
        + stats.get("hgetall").copied().unwrap_or(0)
        + stats.get("hget").copied().unwrap_or(0);
    assert_eq!(
        record_reads, PAGE as u64,
        "one record read per task of the page: {stats:?}"
    );
    Ok(())
}

/// The shard's sum of retained bytes (finish_task.lua), and how many sizes it holds.
async fn retained_bytes(server: &RedisServer) -> TestResult<(u64, u64)> {
    let mut conn = server.client().await?;
    let sums: Vec<String> = redis::cmd("KEYS")
        .arg("*:terminal:bytes")
        .query_async(&mut conn)
        .await?;
    let sizes: Vec<String> = redis::cmd("KEYS")
        .arg("*:terminal:sizes")
        .query_async(&mut conn)
        .await?;
    let mut sum = 0;
    for key in sums {
        sum += redis::cmd("GET")
            .arg(key)
            .query_async::<u64>(&mut conn)
            .await?;
    }
    let mut count = 0;
    for key in sizes {
        count += redis::cmd("HLEN")
            .arg(key)
            .query_async::<u64>(&mut conn)
            .await?;
    }
    Ok((sum, count))
}

/// MAX_RETAINED_BYTES: terminal tasks of 100 KB each are measured when they finish, and a
/// creation past the bound evicts the first to expire, and no more; live tasks are never
/// refused for bytes. The tasks finish under a store without the bound; a second store on the
/// same namespace, bounded just under their sum (each process passes its own bounds to the
/// create script), then creates.
#[tokio::test]
async fn retained_bytes_evict_the_first_terminal_tasks_to_expire() -> TestResult {
    let server = RedisServer::start()?;
    let unbounded = RedisStore::connect(config(&server, 1)).await?;
    let me = owner();
    let blob = "x".repeat(100_000);
    for id in ["a", "b", "c"] {
        let mut task = queued_task(id, &me, "echo");
        task.invocation.input = serde_json::json!({ "blob": blob });
        unbounded.create(task).await?;
        cancel(&unbounded, id).await?;
    }
    let (sum, count) = retained_bytes(&server).await?;
    assert_eq!(count, 3);
    assert!(sum > 300_000, "each finished task counts its record: {sum}");
    let mut bounded = config(&server, 1);
    bounded.max_retained_bytes = sum - 1;
    let store = RedisStore::connect(bounded).await?;
    store.create(queued_task("d", &me, "echo")).await?;
    assert!(!exists(&store, "a").await?, "the first to expire goes");
    assert!(
        keys_of(&server, "a")
            .await?
            .iter()
            .all(|k| !k.ends_with(":a"))
    );
    assert!(exists(&store, "b").await? && exists(&store, "c").await?);
    let (after, count) = retained_bytes(&server).await?;
    assert_eq!(count, 2);
    assert!(
        after < sum - 100_000,
        "its bytes left the sum: {after} of {sum}"
    );
    store.create(queued_task("e", &me, "echo")).await?;
    assert!(exists(&store, "b").await?, "no more than needed");
    Ok(())
}
