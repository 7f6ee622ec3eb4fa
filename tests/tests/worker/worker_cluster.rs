//! Real `worker` processes against a private redis-server: crashes, stalls, drains and
//! cancellations, checked through the store the way a gateway would see them.

use std::time::Duration;

use futures::StreamExt;
use harness::TestResult;
use harness::process::ServiceProcess;
use harness::redis_server::RedisServer;
use harness::store_fixtures::queued_task_with;
use nix::sys::signal::Signal;
use protocol::TaskStatus;
use protocol::token::{AccessToken, OwnerHash};
use serde_json::{Value, json};
use store::registry::{RedisRegistry, WorkerRegistry};
use store::{RedisStore, RedisStoreConfig, StoredEvent, Subscription, TaskStore, Transition};

/// Bound on waiting for something that must happen; reached only when a test fails.
const PATIENCE: Duration = Duration::from_secs(30);
/// Short leases, so that recovery after a crash happens within a test.
const LEASE_TTL_MS: &str = "1000";

struct Cluster {
    server: RedisServer,
    store: RedisStore,
    owner: OwnerHash,
}

impl Cluster {
    async fn start() -> TestResult<Cluster> {
        let server = RedisServer::start()?;
        let store = RedisStore::connect(RedisStoreConfig::new(server.url())).await?;
        Ok(Cluster {
            server,
            store,
            owner: AccessToken::generate().owner_hash(),
        })
    }

    fn worker(&self, id: &str, extra: &[(&str, String)]) -> TestResult<ServiceProcess> {
        let mut envs = vec![
            ("WORKER_LEASE_TTL_MS", LEASE_TTL_MS.to_owned()),
            ("WORKER_RECOVERY_INTERVAL_MS", "200".to_owned()),
            ("WORKER_CONCURRENCY", "4".to_owned()),
        ];
        envs.extend(extra.iter().cloned());
        harness::cluster::worker(&self.server, id, &envs)
    }

    async fn create(&self, id: &str, entrypoint: &str, input: Value) -> TestResult<Subscription> {
        self.store
            .create(queued_task_with(id, &self.owner, entrypoint, input, 3))
            .await?;
        // From the first event on: a worker may take the task and emit before the
        // subscription stands, and a test waiting for that event would wait forever.
        let sub = self.store.subscribe(id, &self.owner, Some(0)).await?;
        Ok(sub.ok_or("own task not visible")?)
    }

    async fn attempt(&self, id: &str) -> TestResult<u32> {
        Ok(self.store.get(id).await?.ok_or("task missing")?.attempt)
    }
}

/// Awaits the next event named `name`, skipping others.
async fn event(sub: &mut Subscription, name: &str) -> TestResult<StoredEvent> {
    let found = tokio::time::timeout(PATIENCE, async {
        while let Some(event) = sub.events.next().await {
            if event.event == name {
                return Some(event);
            }
        }
        None
    })
    .await?;
    Ok(found.ok_or("subscription ended")?)
}

/// Waits until a process's log contains one of `needles` (the process tells us what it did).
async fn logged(process: &ServiceProcess, needles: &[&str]) -> TestResult {
    let start = tokio::time::Instant::now();
    loop {
        let log = process.log();
        if needles.iter().any(|needle| log.contains(needle)) {
            return Ok(());
        }
        if start.elapsed() > PATIENCE {
            return Err(format!("{} never logged {needles:?}; log:\n{log}", process.name()).into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_of_a_killed_worker_completes_on_another_with_attempt_two() -> TestResult {
    let cluster = Cluster::start().await?;
    let mut w1 = cluster.worker("w1", &[])?;
    let mut sub = cluster
        .create("crash-me", "sleep", json!({"ms": 1500}))
        .await?;
    event(&mut sub, "progress").await?; // the handler started on w1
    assert_eq!(cluster.attempt("crash-me").await?, 1);

    let _w2 = cluster.worker("w2", &[])?;
    w1.kill()?;
    let done = event(&mut sub, "resultUpdate").await?;
    assert_eq!(done.data["status"], "completed");
    assert_eq!(done.data["result"]["output"], json!({"slept": 1500}));
    let stored = cluster.store.get("crash-me").await?.ok_or("task missing")?;
    assert_eq!(stored.task.status, TaskStatus::Completed);
    assert_eq!(stored.attempt, 2, "re-run once after the crash");
    assert_eq!(cluster.store.live_count().await?, 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claim_dead_before_activation_runs_the_handler_exactly_once() -> TestResult {
    let cluster = Cluster::start().await?;
    let mut sub = cluster
        .create("claimed", "echo", json!({"once": true}))
        .await?;
    // A worker that claimed and died before activating: its claim simply runs out.
    let claims = cluster
        .store
        .take_next(
            &["echo".into()],
            "dead-worker",
            Duration::from_millis(300),
            1,
            Duration::ZERO,
        )
        .await?;
    assert_eq!(claims.len(), 1);

    let _w1 = cluster.worker("w1", &[])?;
    let done = event(&mut sub, "resultUpdate").await?;
    assert_eq!(done.data["result"]["output"], json!({"once": true}));
    assert_eq!(cluster.attempt("claimed").await?, 1, "the handler ran once");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stalled_worker_cannot_write_after_recovery() -> TestResult {
    let cluster = Cluster::start().await?;
    let w1 = cluster.worker("w1", &[])?;
    let mut sub = cluster
        .create("stalled", "sleep", json!({"ms": 1200}))
        .await?;
    event(&mut sub, "progress").await?;
    w1.signal(Signal::SIGSTOP)?; // frozen past its lease

    let _w2 = cluster.worker("w2", &[])?;
    let done = event(&mut sub, "resultUpdate").await?;
    assert_eq!(done.data["status"], "completed");
    let before = cluster.store.get("stalled").await?.ok_or("task missing")?;
    assert_eq!(before.attempt, 2);

    w1.signal(Signal::SIGCONT)?;
    // w1 wakes up holding a dead lease: its heartbeat or its result write is refused.
    logged(
        &w1,
        &[
            "lease lost",
            "result fenced out",
            "result not written",
            "writing nothing",
        ],
    )
    .await?;
    let after = cluster.store.get("stalled").await?.ok_or("task missing")?;
    assert_eq!(
        after.seq, before.seq,
        "no event landed from the stale worker"
    );
    assert_eq!(
        after.task, before.task,
        "the result is the recovering worker's"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_drains_running_tasks_and_stops_claiming() -> TestResult {
    let cluster = Cluster::start().await?;
    let mut w1 = cluster.worker("w1", &[])?;
    let mut sub = cluster
        .create("draining", "sleep", json!({"ms": 800}))
        .await?;
    event(&mut sub, "progress").await?;

    w1.signal(Signal::SIGTERM)?;
    logged(&w1, &["SIGTERM"]).await?;
    cluster.create("after-term", "echo", json!(1)).await?;
    let status = w1.wait_exit(PATIENCE)?;
    assert!(status.success(), "clean exit, got {status}");

    let done = event(&mut sub, "resultUpdate").await?;
    assert_eq!(done.data["status"], "completed");
    assert_eq!(
        cluster.attempt("draining").await?,
        1,
        "finished by the draining worker"
    );
    let late = cluster
        .store
        .get("after-term")
        .await?
        .ok_or("task missing")?;
    assert_eq!(
        late.task.status,
        TaskStatus::Running,
        "not claimed during the drain"
    );
    assert_eq!(late.lease, None);
    let registry = RedisRegistry::new(&cluster.store);
    assert!(
        registry.workers().await?.is_empty(),
        "deregistered on the way out"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancel_reaches_the_running_handler() -> TestResult {
    let cluster = Cluster::start().await?;
    let w1 = cluster.worker("w1", &[])?;
    let mut sub = cluster
        .create("cancel-me", "sleep", json!({"ms": 60_000}))
        .await?;
    event(&mut sub, "progress").await?;

    let outcome = cluster
        .store
        .compare_and_set(
            "cancel-me",
            &[TaskStatus::Running],
            Transition::cancelled(),
            None,
        )
        .await?;
    assert!(outcome.applied().is_some());
    logged(&w1, &["task cancelled; stopping its handler"]).await?;
    logged(&w1, &["writing nothing"]).await?;
    let task = cluster
        .store
        .get("cancel-me")
        .await?
        .ok_or("task missing")?;
    assert_eq!(task.task.status, TaskStatus::Cancelled);
    assert_eq!(task.task.result, None);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_workers_registry_entry_vanishes() -> TestResult {
    let cluster = Cluster::start().await?;
    let registry = RedisRegistry::new(&cluster.store);
    let mut w1 = cluster.worker("w1", &[("WORKER_ENTRYPOINTS", "echo,count".to_owned())])?;
    let _w2 = cluster.worker("w2", &[])?;
    let start = tokio::time::Instant::now();
    let listed = loop {
        let workers = registry.workers().await?;
        if workers.len() == 2 || start.elapsed() > PATIENCE {
            break workers;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let ids: Vec<&str> = listed.iter().map(|w| w.worker_id.as_str()).collect();
    assert_eq!(ids, ["w1", "w2"]);
    let w1_keys: Vec<&str> = listed[0]
        .entrypoints
        .iter()
        .map(|e| e.key.as_str())
        .collect();
    assert_eq!(w1_keys, ["count", "echo"]);
    assert!(
        listed[0]
            .entrypoints
            .iter()
            .any(|e| e.key == "count" && e.streaming)
    );

    w1.kill()?;
    let start = tokio::time::Instant::now();
    loop {
        let ids: Vec<String> = registry
            .workers()
            .await?
            .into_iter()
            .map(|w| w.worker_id)
            .collect();
        if ids == ["w2"] {
            break;
        }
        assert!(start.elapsed() < PATIENCE, "w1 still registered: {ids:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_past_its_deadline_fails_with_task_timeout() -> TestResult {
    let cluster = Cluster::start().await?;
    let _w1 = cluster.worker("w1", &[("MAX_RUN_MS", "300".to_owned())])?;
    let mut sub = cluster
        .create("too-long", "sleep", json!({"ms": 60_000}))
        .await?;
    let failed = event(&mut sub, "error").await?;
    assert_eq!(failed.data["status"], "failed");
    assert_eq!(failed.data["error"]["code"], "task_timeout");
    assert_eq!(
        failed.data["error"]["message"],
        "Task exceeded its 300ms execution limit"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_stops_a_worker_still_connecting_to_redis() -> TestResult {
    // A "Redis" that accepts connections and never answers: the worker's first connect
    // hangs (here up to its one-minute timeout), as it does on a name a container network's
    // resolver cannot answer yet. SIGTERM must stop it at once, cleanly.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("redis://{}/", silent.local_addr()?);
    let mut worker = ServiceProcess::start(
        "worker",
        "connecting",
        &[],
        &[
            ("REDIS_URL", url),
            ("REDIS_TIMEOUT_MS", "60000".to_owned()),
            ("WORKER_ID", "connecting".to_owned()),
        ],
    )?;
    // It is connecting once the listener has its connection.
    let (_held, _) = tokio::time::timeout(PATIENCE, silent.accept()).await??;
    worker.signal(Signal::SIGTERM)?;
    let status = worker.wait_exit(PATIENCE)?;
    assert!(status.success(), "clean exit, got {status}");
    let log = worker.log();
    assert!(log.contains("nothing to drain"), "{log}");
    Ok(())
}
