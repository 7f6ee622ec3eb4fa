//! A process that creates a task and follows it (`create_watched`: an invoke, a stream) hears
//! its events on the process's notify channel, subscribed once, instead of subscribing the
//! task's own channel: no SUBSCRIBE and no UNSUBSCRIBE per task. The idle re-read of the event
//! log is set far beyond the test's bound here, so every event must come by pub/sub.

use std::time::Duration;

use futures::StreamExt;
use harness::TestResult;
use harness::redis_server::RedisServer;
use harness::store_fixtures::{queued_task, start_running};
use protocol::token::AccessToken;
use protocol::{TaskResult, TaskStatus};
use serde_json::json;
use store::{CasOutcome, EventPayload, Lease, RedisStore, RedisStoreConfig, TaskStore, Transition};

const LEASE: Duration = Duration::from_secs(60);
/// A bound on waiting, so that a never-delivered event fails the test instead of hanging it.
const EVENT_BOUND: Duration = Duration::from_secs(30);

async fn channels(
    redis: &mut redis::aio::MultiplexedConnection,
) -> Result<Vec<String>, redis::RedisError> {
    let mut found: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .query_async(redis)
        .await?;
    found.sort();
    Ok(found)
}

/// The lease holder's terminal write for its task; an error when it was not applied.
async fn end_run(store: &RedisStore, lease: &Lease, next: Transition) -> TestResult {
    let outcome = store
        .compare_and_set(&lease.task_id, &[TaskStatus::Running], next, Some(lease))
        .await?;
    match outcome {
        CasOutcome::Applied(_) => Ok(()),
        CasOutcome::Rejected { reason, .. } => Err(format!("rejected: {reason:?}").into()),
    }
}

#[tokio::test]
async fn a_created_and_followed_task_is_heard_on_the_process_channel_alone() -> TestResult {
    let server = RedisServer::start()?;
    let mut config = RedisStoreConfig::new(server.url());
    config.idle_recheck = Duration::from_secs(3_600);
    let store = RedisStore::connect(config).await?;
    let mut redis = server.client().await?;
    let owner = AccessToken::generate().owner_hash();
    let keys = store.shard_keys("a").clone();

    let (_, mut first) = store
        .create_watched(queued_task("a", &owner, "echo"))
        .await?;
    let (_, mut second) = store
        .create_watched(queued_task("b", &owner, "echo"))
        .await?;
    // One channel for both tasks, and it is neither task's channel.
    let subscribed = channels(&mut redis).await?;
    assert_eq!(subscribed.len(), 1, "{subscribed:?}");
    assert!(
        subscribed[0].starts_with(&keys.notify_channel("")),
        "{subscribed:?}"
    );

    // A worker's event and the end of each task reach their own follower only.
    let lease = start_running(&store, "a", "w1", LEASE).await?;
    let progress = EventPayload {
        event: "progress".into(),
        data: json!({"step": 1}),
    };
    store
        .emit(&lease, progress)
        .await?
        .ok_or("emit fenced out")?;
    end_run(
        &store,
        &lease,
        Transition::completed(TaskResult::output(json!("a done"))),
    )
    .await?;
    let lease = start_running(&store, "b", "w1", LEASE).await?;
    end_run(
        &store,
        &lease,
        Transition::completed(TaskResult::output(json!("b done"))),
    )
    .await?;

    let mut heard = Vec::new();
    for _ in 0..2 {
        let event = tokio::time::timeout(EVENT_BOUND, first.events.next())
            .await?
            .ok_or("a's events ended")?;
        heard.push((event.seq, event.event));
    }
    assert_eq!(
        heard,
        [(2, "progress".to_owned()), (3, "resultUpdate".to_owned())]
    );
    let end = tokio::time::timeout(EVENT_BOUND, second.events.next())
        .await?
        .ok_or("b's events ended")?;
    assert_eq!((end.seq, end.event.as_str()), (2, "resultUpdate"));
    assert_eq!(end.data["result"]["output"], "b done", "{}", end.data);

    // Following ends without unsubscribing: the channel serves the next task at no cost.
    drop(first);
    drop(second);
    let (_, mut third) = store
        .create_watched(queued_task("c", &owner, "echo"))
        .await?;
    assert_eq!(channels(&mut redis).await?, subscribed);
    let lease = start_running(&store, "c", "w1", LEASE).await?;
    end_run(&store, &lease, Transition::cancelled()).await?;
    let end = tokio::time::timeout(EVENT_BOUND, third.events.next())
        .await?
        .ok_or("c's events ended")?;
    assert_eq!(end.seq, 2);
    Ok(())
}
