//! A direct invoke whose worker dies mid-run: real gateway and worker processes on a private
//! redis-server, the worker SIGKILLed while the handler runs. By default the run gets exactly
//! one attempt (the caller gets 502 `task_attempts_exhausted`, the handler never runs twice);
//! an entrypoint every worker declares retry-safe (`WORKER_RETRY_SAFE`) runs again elsewhere.

use std::time::Duration;

use harness::TestResult;
use harness::cluster::free_port;
use harness::process::ServiceProcess;
use harness::redis_server::RedisServer;
use protocol::TaskStatus;
use serde_json::{Value, json};
use store::registry::WorkerRegistry;
use store::{RedisStore, RedisStoreConfig, StoredTask, TaskStore};

/// Bound on waiting for something that must happen; reached only when a test fails.
const PATIENCE: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(20);

struct Cluster {
    redis: RedisServer,
    store: RedisStore,
    _gateway: ServiceProcess,
    base: String,
    client: reqwest::Client,
}

impl Cluster {
    async fn start() -> TestResult<Cluster> {
        let redis = RedisServer::start()?;
        let store = RedisStore::connect(RedisStoreConfig::new(redis.url())).await?;
        let port = free_port()?;
        let gateway = ServiceProcess::start(
            "gateway",
            "g1",
            &[],
            &[
                ("LISTEN_ADDR", format!("127.0.0.1:{port}")),
                ("REDIS_URL", redis.url()),
            ],
        )?;
        Ok(Cluster {
            redis,
            store,
            _gateway: gateway,
            base: format!("http://127.0.0.1:{port}"),
            client: reqwest::Client::new(),
        })
    }

    /// A worker with short leases and frequent recovery sweeps, so a death is noticed fast.
    fn worker(&self, id: &str, extra: &[(&str, &str)]) -> TestResult<ServiceProcess> {
        let mut envs = vec![
            ("REDIS_URL", self.redis.url()),
            ("WORKER_ID", id.to_owned()),
            ("WORKER_LEASE_TTL_MS", "1000".to_owned()),
            ("WORKER_RECOVERY_INTERVAL_MS", "200".to_owned()),
        ];
        envs.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
        Ok(ServiceProcess::start("worker", id, &[], &envs)?)
    }

    /// Waits until the card lists `skill` as hosted by `workers` registered workers.
    async fn wait_for_workers(&self, workers: usize) -> TestResult {
        let registry = self.store.registry();
        let start = tokio::time::Instant::now();
        loop {
            if registry.workers().await?.len() == workers {
                let card: Value = self
                    .client
                    .get(format!("{}/.well-known/agent-card.json", self.base))
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
            let mut conn = self.redis.client().await?;
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
    cluster: &Cluster,
    ms: u64,
) -> tokio::task::JoinHandle<Result<(u16, Value), reqwest::Error>> {
    let request = cluster
        .client
        .post(format!("{}/entrypoints/sleep/invoke", cluster.base))
        .json(&json!({"input": {"ms": ms}}));
    tokio::spawn(async move {
        let response = request.send().await?;
        let status = response.status().as_u16();
        Ok((status, response.json().await?))
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lost_worker_fails_a_direct_invoke_instead_of_running_it_twice() -> TestResult {
    let cluster = Cluster::start().await?;
    let mut first = cluster.worker("w1", &[])?;
    cluster.wait_for_workers(1).await?;
    let answer = invoke_sleep(&cluster, 20_000);
    let task = cluster.running_task().await?;

    // Another worker stands ready: only the policy keeps it from running the task again.
    let _second = cluster.worker("w2", &[])?;
    cluster.wait_for_workers(2).await?;
    first.kill()?;

    let (status, body) = answer.await??;
    assert_eq!(status, 502, "{body}");
    assert_eq!(body["error"]["code"], "task_attempts_exhausted", "{body}");
    let stored = cluster
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
    let cluster = Cluster::start().await?;
    let safe = [("WORKER_RETRY_SAFE", "sleep")];
    let mut first = cluster.worker("w1", &safe)?;
    cluster.wait_for_workers(1).await?;
    let answer = invoke_sleep(&cluster, 1_500);
    let task = cluster.running_task().await?;

    let _second = cluster.worker("w2", &safe)?;
    cluster.wait_for_workers(2).await?;
    first.kill()?;

    let (status, body) = answer.await??;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["output"], json!({"slept": 1500}));
    let stored = cluster
        .store
        .get(&task.task.task_id)
        .await?
        .ok_or("task missing")?;
    assert_eq!(stored.attempt, 2, "run again once after the crash");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_refuses_to_declare_an_entrypoint_it_does_not_host() -> TestResult {
    let cluster = Cluster::start().await?;
    let mut worker = cluster.worker("w1", &[("WORKER_RETRY_SAFE", "sleep,nope")])?;
    let status = worker.wait_exit(PATIENCE)?;
    assert!(!status.success(), "the worker must not start");
    assert!(worker.log().contains("nope"), "{}", worker.log());
    Ok(())
}
