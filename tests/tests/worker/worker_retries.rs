//! Retries a handler asks for, with real processes on a private redis-server: a gateway and a
//! worker whose `fail` fails retryably (`{"retryable": true}`). A task that fails twice then
//! succeeds completes on attempt 3, its handler shown the last error; one that runs out of
//! retries fails with the handler's own code; a cancel during the backoff wait ends the task
//! (and nothing runs it again). Backoffs are made short with the worker's flags, except where
//! the test needs the task to stay waiting (the handler's `after_ms`).

use std::time::Duration;

use futures::StreamExt;
use harness::TestResult;
use harness::cluster::Cluster;
use harness::store_fixtures::queued_task_with;
use protocol::TaskStatus;
use protocol::token::AccessToken;
use serde_json::{Value, json};
use store::{Phase, RedisStore, RedisStoreConfig, StoredTask, Subscription, TaskStore};

/// Bound on waiting for something that must happen; reached only when a test fails.
const PATIENCE: Duration = Duration::from_secs(30);

/// A gateway and a worker allowing `fail` two retries, with backoffs of a few milliseconds and a
/// sweep every 50 ms (what re-queues a task whose backoff ended).
async fn cluster() -> TestResult<Cluster> {
    let cluster = Cluster::builder()
        .worker(
            "w-retry",
            &[
                ("WORKER_ENTRYPOINTS", "fail"),
                ("WORKER_RETRY", "fail=2"),
                ("WORKER_RETRY_DEFAULT", "0"),
                ("WORKER_RETRY_BASE_MS", "10"),
                ("WORKER_RETRY_MAX_MS", "40"),
                ("WORKER_RECOVERY_INTERVAL_MS", "50"),
            ],
        )
        .gateway("g-retry", &[])
        .skills(&["fail"])
        .start()
        .await?;
    Ok(cluster)
}

struct Client {
    store: RedisStore,
    token: AccessToken,
}

impl Client {
    async fn new(cluster: &Cluster) -> TestResult<Client> {
        Ok(Client {
            store: RedisStore::connect(RedisStoreConfig::new(cluster.redis.url())).await?,
            token: AccessToken::generate(),
        })
    }

    /// Queues a `fail` task with `input` and follows it from its first event: created and
    /// subscribed in one step (`create_watched` listens first), so that a run finishing at
    /// once cannot end between the two.
    async fn create(&self, id: &str, input: Value) -> TestResult<Subscription> {
        let owner = self.token.owner_hash();
        let (_, sub) = self
            .store
            .create_watched(queued_task_with(id, &owner, "fail", input, 1))
            .await?;
        Ok(sub)
    }

    async fn stored(&self, id: &str) -> TestResult<StoredTask> {
        Ok(self.store.get(id).await?.ok_or("task missing")?)
    }
}

/// Awaits the task's terminal event.
async fn ended(sub: &mut Subscription) -> TestResult<String> {
    let found = tokio::time::timeout(PATIENCE, async {
        while let Some(event) = sub.events.next().await {
            if matches!(event.event.as_str(), "resultUpdate" | "error")
                || event.data["status"] == "cancelled"
            {
                return Some(event.event);
            }
        }
        None
    })
    .await?;
    Ok(found.ok_or("subscription ended")?)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_failing_twice_retryably_completes_on_its_third_attempt() -> TestResult {
    let cluster = cluster().await?;
    let client = Client::new(&cluster).await?;
    let input = json!({"code": "upstream_busy", "retryable": true, "times": 2});
    let mut sub = client.create("retry-twice", input).await?;
    assert_eq!(ended(&mut sub).await?, "resultUpdate", "{}", cluster.logs());
    let stored = client.stored("retry-twice").await?;
    assert_eq!(stored.task.status, TaskStatus::Completed);
    let output = stored.task.result.ok_or("no result")?.output;
    // The third attempt ran, shown the failure of the second.
    assert_eq!(output, json!({"attempt": 3, "last_error": "upstream_busy"}));
    assert_eq!((stored.attempt, stored.retries), (3, 2));
    assert_eq!(
        stored.last_error.map(|error| error.code),
        Some("upstream_busy".to_owned())
    );
    // Retries are not abandoned runs: a task allowed one run (max_attempts 1) got three.
    assert_eq!(stored.max_attempts, 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_out_of_retries_fails_with_the_handlers_code() -> TestResult {
    let cluster = cluster().await?;
    let client = Client::new(&cluster).await?;
    let input = json!({"code": "upstream_busy", "message": "still busy", "retryable": true});
    let mut sub = client.create("retry-out", input).await?;
    let end = ended(&mut sub)
        .await
        .map_err(|err| format!("{err}\n{}", cluster.logs()))?;
    assert_eq!(end, "error", "{}", cluster.logs());
    let stored = client.stored("retry-out").await?;
    assert_eq!(stored.task.status, TaskStatus::Failed);
    let error = stored.task.error.ok_or("no error")?;
    assert_eq!(
        (error.code.as_str(), error.message.as_str()),
        ("upstream_busy", "still busy")
    );
    // Two retries allowed: three attempts, the last one's failure final.
    assert_eq!((stored.attempt, stored.retries), (3, 2));

    // The gateway shows the handler's failure too.
    let shown: Value = cluster
        .http
        .get(format!("{}/tasks/retry-out", cluster.base()))
        .header("Task-Access-Token", client.token.expose())
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(shown["status"], "failed", "{shown}");
    assert_eq!(shown["error"]["code"], "upstream_busy", "{shown}");
    // With the attempt number and the last retried failure, as a task that was retried.
    assert_eq!(shown["attempt"], 3, "{shown}");
    assert_eq!(shown["lastError"]["code"], "upstream_busy", "{shown}");

    // A failure not marked retryable fails at once, and its task reads as upstream's.
    let mut sub = client.create("no-retry", json!({"code": "plain"})).await?;
    let end = ended(&mut sub)
        .await
        .map_err(|err| format!("{err}\n{}", cluster.logs()))?;
    assert_eq!(end, "error");
    let stored = client.stored("no-retry").await?;
    assert_eq!((stored.attempt, stored.retries), (1, 0));
    let shown: Value = cluster
        .http
        .get(format!("{}/tasks/no-retry", cluster.base()))
        .header("Task-Access-Token", client.token.expose())
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(shown["error"]["code"], "plain", "{shown}");
    let mut keys: Vec<&str> = shown
        .as_object()
        .map(|task| task.keys().map(String::as_str).collect())
        .unwrap_or_default();
    keys.sort_unstable();
    assert_eq!(
        keys,
        ["createdAt", "error", "status", "taskId", "updatedAt"],
        "{shown}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancel_during_the_backoff_ends_the_task() -> TestResult {
    let cluster = cluster().await?;
    let client = Client::new(&cluster).await?;
    // The handler asks for a minute's wait: the task stays in backoff until cancelled.
    let input = json!({"code": "upstream_busy", "retryable": true, "after_ms": 60_000});
    let mut sub = client.create("retry-cancel", input).await?;
    let start = tokio::time::Instant::now();
    while client.stored("retry-cancel").await?.phase != Phase::Backoff {
        if start.elapsed() > PATIENCE {
            return Err(format!("never in backoff:\n{}", cluster.logs()).into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cancelled = cluster
        .http
        .post(format!("{}/tasks/retry-cancel/cancel", cluster.base()))
        .header("Task-Access-Token", client.token.expose())
        .send()
        .await?;
    assert_eq!(cancelled.status(), 200, "{}", cluster.logs());
    assert_eq!(ended(&mut sub).await?, "statusUpdate");
    let stored = client.stored("retry-cancel").await?;
    assert_eq!(stored.task.status, TaskStatus::Cancelled);
    assert_eq!((stored.attempt, stored.retries), (1, 1));
    assert_eq!(client.store.live_count().await?, 0);
    assert_eq!(client.store.queue_depth("fail").await?, 0);
    Ok(())
}
