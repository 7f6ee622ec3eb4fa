//! A direct invoke whose worker dies mid-run: real gateway and worker processes on a private
//! redis-server, the worker SIGKILLed while the handler runs. By default the run gets exactly
//! one attempt (the caller gets 502 `task_attempts_exhausted`, the handler never runs twice);
//! an entrypoint every worker declares retry-safe (`WORKER_RETRY_SAFE`) runs again elsewhere.

use std::time::Duration;

use harness::TestResult;
use harness::cluster::{self, Cluster};
use harness::process::ServiceProcess;
use protocol::TaskStatus;
use serde_json::{Value, json};
use store::registry::WorkerRegistry;
use store::{RedisStore, RedisStoreConfig, StoredTask, TaskStore};

/// Bound on waiting for something that must happen; reached only when a test fails.
const PATIENCE: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(20);

/// A gateway on Redis (workers come and go per test) and the store it shares.
struct Suite {
    cluster: Cluster,
    store: RedisStore,
}

impl Suite {
    async fn start() -> TestResult<Suite> {
        let cluster = Cluster::builder().gateway("g1", &[]).start().await?;
        let store = RedisStore::connect(RedisStoreConfig::new(cluster.redis.url())).await?;
        Ok(Suite { cluster, store })
    }

    /// A worker with short leases and frequent recovery sweeps, so a death is noticed fast.
    fn worker(&self, id: &str, extra: &[(&str, &str)]) -> TestResult<ServiceProcess> {
        let mut envs = vec![
            ("WORKER_LEASE_TTL_MS", "1000".to_owned()),
            ("WORKER_RECOVERY_INTERVAL_MS", "200".to_owned()),
        ];
        envs.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
        cluster::worker(&self.cluster.redis, id, &envs)
    }

    /// Waits until the card lists `skill` as hosted by `workers` registered workers.
    async fn wait_for_workers(&self, workers: usize) -> TestResult {
        let registry = self.store.registry();
        let start = tokio::time::Instant::now();
        loop {
            if registry.workers().await?.len() == workers {
                let card: Value = self
                    .cluster
                    .http
                    .get(format!(
                        "{}/.well-known/agent-card.json",
                        self.cluster.base()
                    ))
                    .send()
                    .await?
                    .json()
                    .await?;
                let listed = card["skills"]
                    .as_array()
                    .is_some_and(|skills| skills.iter().any(|s| s["id"] == "sleep"));
                if listed {
                    return Ok(());
                }
            }
            if start.elapsed() > PATIENCE {
                return Err(format!("{workers} workers never listed sleep").into());
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The one live task once its handler runs (its first attempt was counted).
    async fn running_task(&self) -> TestResult<StoredTask> {
        let start = tokio::time::Instant::now();
        loop {
            let mut conn = self.cluster.redis.client().await?;
            let live: Vec<String> = redis::cmd("SMEMBERS")
                .arg("{tc}:live")
                .query_async(&mut conn)
                .await?;
            if let [id] = live.as_slice()
                && let Some(task) = self.store.get(id).await?
                && task.attempt == 1
            {
                return Ok(task);
            }
            if start.elapsed() > PATIENCE {
                return Err("the invoke's task never started".into());
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// Invokes `sleep` for `ms` in the background; the answer's status and body.
fn invoke_sleep(
    suite: &Suite,
    ms: u64,
) -> tokio::task::JoinHandle<Result<(u16, Value), reqwest::Error>> {
    let request = suite
        .cluster
        .http
        .post(format!("{}/entrypoints/sleep/invoke", suite.cluster.base()))
        .json(&json!({"input": {"ms": ms}}));
    tokio::spawn(async move {
        let response = request.send().await?;
        let status = response.status().as_u16();
        Ok((status, response.json().await?))
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lost_worker_fails_a_direct_invoke_instead_of_running_it_twice() -> TestResult {
    let suite = Suite::start().await?;
    let mut first = suite.worker("w1", &[])?;
    suite.wait_for_workers(1).await?;
    let answer = invoke_sleep(&suite, 20_000);
    let task = suite.running_task().await?;

    // Another worker stands ready: only the policy keeps it from running the task again.
    let _second = suite.worker("w2", &[])?;
    suite.wait_for_workers(2).await?;
    first.kill()?;

    let (status, body) = answer.await??;
    assert_eq!(status, 502, "{body}");
    assert_eq!(body["error"]["code"], "task_attempts_exhausted", "{body}");
    let stored = suite
        .store
        .get(&task.task.task_id)
        .await?
        .ok_or("task missing")?;
    assert_eq!(stored.task.status, TaskStatus::Failed);
    assert_eq!(stored.attempt, 1, "the handler never ran a second time");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_safe_entrypoint_runs_again_on_another_worker() -> TestResult {
    let suite = Suite::start().await?;
    let safe = [("WORKER_RETRY_SAFE", "sleep")];
    let mut first = suite.worker("w1", &safe)?;
    suite.wait_for_workers(1).await?;
    let answer = invoke_sleep(&suite, 1_500);
    let task = suite.running_task().await?;

    let _second = suite.worker("w2", &safe)?;
    suite.wait_for_workers(2).await?;
    first.kill()?;

    let (status, body) = answer.await??;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["output"], json!({"slept": 1500}));
    let stored = suite
        .store
        .get(&task.task.task_id)
        .await?
        .ok_or("task missing")?;
    assert_eq!(stored.attempt, 2, "run again once after the crash");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_refuses_to_declare_an_entrypoint_it_does_not_host() -> TestResult {
    let suite = Suite::start().await?;
    let mut worker = suite.worker("w1", &[("WORKER_RETRY_SAFE", "sleep,nope")])?;
    let status = worker.wait_exit(PATIENCE)?;
    assert!(!status.success(), "the worker must not start");
    assert!(worker.log().contains("nope"), "{}", worker.log());
    Ok(())
}
