//! An operator drains a worker, against real processes (a private redis-server, two `worker`s
//! hosting `echo` and `sleep`, a `gateway` with an operator token), through `taskctl admin
//! drain|audit` and the console API it calls.
//!
//! What is proven: the drained worker finishes the run it holds (the task completes on its
//! first attempt: not abandoned to recovery), exits by itself with status 0 (the SIGTERM drain),
//! logs why, and is gone from the registry with its drain request; the other worker runs the
//! tasks created afterwards; the console overview shows a worker with a pending request as
//! draining; the audit log records each drain under the operator key's fingerprint; refusals:
//! no operator token, a wrong one (both 401), an unknown worker (404 `worker_not_found`), a
//! malformed worker id (400), none of which is recorded; in embedded mode (whose one worker is
//! the gateway's own) the route answers 409 and the gateway keeps serving.
//!
//! "Shows draining" is checked on a registry entry the test writes itself (a worker that never
//! reads its request, so it stays draining), never by racing a real worker's exit. The drained
//! worker's exit is awaited, not slept for.

use std::time::Duration;

use harness::TestResult;
use harness::cluster::Cluster;
use harness::process::plain;
use reqwest::StatusCode;
use serde_json::{Value, json};
use store::registry::{WorkerEntry, WorkerRegistry};
use store::{RedisStore, RedisStoreConfig, TaskStore};

const OPERATOR_TOKEN: &str = "drain-suite-operator-token-0123456789abcdef";
const TOKEN: &str = "drain-suite-task-access-token";
const PATIENCE: Duration = Duration::from_secs(30);
/// Short leases: a worker reads its drain request on every heartbeat (a third of this).
const WORKER: &[(&str, &str)] = &[("WORKER_LEASE_TTL_MS", "1500")];

/// `taskctl --json admin ARGS` as the operator (or with `token`): exit code and JSON answer.
async fn admin(args: &[&str], token: Option<&str>) -> TestResult<(i32, Value)> {
    harness::operator::taskctl_admin(args, token).await
}

/// Polls `check` until it holds, within [`PATIENCE`].
async fn until(what: &str, check: impl AsyncFnMut() -> TestResult<bool>) -> TestResult {
    harness::operator::until(what, PATIENCE, check).await
}

/// Creates a task of `skill` with `input` and returns its id.
async fn created(cluster: &Cluster, skill: &str, input: Value) -> TestResult<String> {
    harness::operator::create_task(&cluster.http, cluster.base(), TOKEN, skill, &input).await
}

/// Waits until the task is finished and asserts it completed; its attempts.
async fn completed(store: &RedisStore, task_id: &str) -> TestResult<u32> {
    let mut attempt = 0;
    until(&format!("{task_id} finished"), async || {
        let task = store.get(task_id).await?.ok_or("task gone")?;
        attempt = task.attempt;
        Ok(task.task.status.is_terminal())
    })
    .await?;
    let task = store.get(task_id).await?.ok_or("task gone")?;
    assert_eq!(task.task.status.as_str(), "completed", "{task_id}");
    Ok(attempt)
}

async fn drain_route(
    cluster: &Cluster,
    worker: &str,
    token: Option<&str>,
) -> TestResult<(StatusCode, Value)> {
    let mut request = cluster.http.post(format!(
        "{}/console/api/workers/{worker}/drain",
        cluster.base()
    ));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await?;
    let status = response.status();
    Ok((status, response.json().await.unwrap_or(Value::Null)))
}

/// The console overview's row of `worker`, if it lists it.
async fn overview_row(cluster: &Cluster, worker: &str) -> TestResult<Option<Value>> {
    let overview: Value = cluster
        .http
        .get(format!("{}/console/api/overview", cluster.base()))
        .bearer_auth(OPERATOR_TOKEN)
        .send()
        .await?
        .json()
        .await?;
    Ok(overview["workers"]
        .as_array()
        .and_then(|rows| rows.iter().find(|row| row["id"] == worker).cloned()))
}

#[tokio::test]
async fn an_operator_drains_a_worker_which_finishes_its_run_and_exits() -> TestResult {
    let mut cluster = Cluster::builder()
        .worker("wa", WORKER)
        .worker("wb", WORKER)
        .gateway("g1", &[("OPERATOR_TOKEN", OPERATOR_TOKEN)])
        .skills(&["echo", "sleep"])
        .start()
        .await?;
    let store = RedisStore::connect(RedisStoreConfig::new(cluster.redis.url())).await?;
    let registry = store.registry();
    let base = cluster.base().to_owned();
    until("both workers are registered", async || {
        Ok(registry.workers().await?.len() == 2)
    })
    .await?;

    // Refusals first: none drains anything, none is recorded.
    let (code, _) = admin(&["drain", &base, "wa"], None).await?;
    assert_ne!(code, 0, "no operator token");
    let (status, _) = drain_route(&cluster, "wa", None).await?;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = drain_route(
        &cluster,
        "wa",
        Some("a-wrong-operator-token-0123456789abcdef"),
    )
    .await?;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, body) = drain_route(&cluster, "nobody-is-this", Some(OPERATOR_TOKEN)).await?;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["error"]["code"], "worker_not_found");
    let (code, answer) = admin(&["drain", &base, "nobody-is-this"], Some(OPERATOR_TOKEN)).await?;
    assert_ne!(code, 0);
    assert_eq!(answer["error"]["status"], 404, "{answer}");
    let (status, body) = drain_route(&cluster, "a%20b", Some(OPERATOR_TOKEN)).await?;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let long = "w".repeat(129);
    let (status, body) = drain_route(&cluster, &long, Some(OPERATOR_TOKEN)).await?;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(registry.drains().await?.is_empty(), "nothing was written");
    let (code, answer) = admin(&["audit", &base], Some(OPERATOR_TOKEN)).await?;
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["entries"], json!([]), "refusals are not actions");

    // A worker with a pending request shows as draining. This entry is the test's own: nothing
    // reads its request, so it stays draining until the test removes it, with its request.
    let ghost = WorkerEntry {
        worker_id: "ghost".into(),
        host: "ghost.example".into(),
        started_at_ms: 1,
        concurrency: 1,
        entrypoints: Vec::new(),
    };
    registry.heartbeat(&ghost, PATIENCE).await?;
    let (status, body) = drain_route(&cluster, "ghost", Some(OPERATOR_TOKEN)).await?;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["worker"], "ghost");
    let first = body["drain"].clone();
    assert!(first["atMs"].as_u64().is_some(), "{body}");
    // Asked again: the first request stands.
    let (status, body) = drain_route(&cluster, "ghost", Some(OPERATOR_TOKEN)).await?;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["drain"], first);
    until("the overview shows ghost draining", async || {
        Ok(overview_row(&cluster, "ghost")
            .await?
            .is_some_and(|row| row["draining"] == first))
    })
    .await?;
    assert!(
        overview_row(&cluster, "wa")
            .await?
            .is_some_and(|row| row.get("draining").is_none()),
        "wa is not draining yet"
    );
    registry.deregister("ghost").await?;
    assert_eq!(registry.drain_requested("ghost").await?, None);

    // A run under way on one worker (whichever took it: the lease names it), then that worker
    // is drained.
    // Long enough that the drain surely lands mid-run (a heartbeat is 0.5 s here), which the
    // worker's "draining running tasks" below proves.
    let sleep = created(&cluster, "sleep", json!({"ms": 8000})).await?;
    let mut holder = String::new();
    until("the sleep task is taken", async || {
        let task = store.get(&sleep).await?.ok_or("task gone")?;
        holder = task.lease.map(|lease| lease.holder).unwrap_or_default();
        Ok(!holder.is_empty())
    })
    .await?;
    let (drained, other) = if holder == "wa" { (0, 1) } else { (1, 0) };
    let drained_id = cluster.workers[drained].name().to_owned();
    let other_id = cluster.workers[other].name().to_owned();
    assert_eq!(holder, drained_id);
    let (code, answer) = admin(&["drain", &base, &drained_id], Some(OPERATOR_TOKEN)).await?;
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["worker"], drained_id.as_str());
    assert!(
        answer["drain"]["by"]
            .as_str()
            .is_some_and(|by| by.starts_with("operator token ")),
        "{answer}"
    );

    // Waiting for it is bounded: its 8 s run outlasts a 1 s wait, which exits 3 and says so
    // (the request stands).
    let (code, answer) = admin(
        &["drain", &base, &drained_id, "--wait", "--wait-timeout", "1"],
        Some(OPERATOR_TOKEN),
    )
    .await?;
    assert_eq!(code, 3, "{answer}");
    assert!(
        answer.to_string().contains("is still registered after 1 s"),
        "{answer}"
    );

    // It finishes the run it holds (first attempt: not left to recovery), then exits 0.
    assert_eq!(completed(&store, &sleep).await?, 1);
    let exit = cluster.workers[drained].wait_exit(PATIENCE)?;
    assert!(exit.success(), "{drained_id} exited with {exit}");
    let log = plain(&cluster.workers[drained].log());
    assert!(log.contains("drain requested by an operator"), "{log}");
    assert!(log.contains("draining running tasks"), "{log}");
    assert!(log.contains("worker stopped"), "{log}");
    // Gone from the registry at once (it deregistered), its request with it.
    let live: Vec<String> = registry
        .workers()
        .await?
        .into_iter()
        .map(|w| w.worker_id)
        .collect();
    assert_eq!(live, std::slice::from_ref(&other_id));
    assert!(registry.drains().await?.is_empty());
    until("the overview no longer lists it", async || {
        Ok(overview_row(&cluster, &drained_id).await?.is_none())
    })
    .await?;

    // The other worker runs what comes next.
    let echo = created(&cluster, "echo", json!({})).await?;
    assert_eq!(completed(&store, &echo).await?, 1);
    assert!(cluster.workers[other].is_running());

    // The audit log: every accepted drain request (the refusals are not there), newest first:
    // the bounded wait's own request, then the first.
    let (code, answer) = admin(&["audit", &base], Some(OPERATOR_TOKEN)).await?;
    assert_eq!(code, 0, "{answer}");
    let entries = answer["entries"].as_array().cloned().unwrap_or_default();
    let actions = harness::operator::audit_actions(&entries);
    assert_eq!(
        actions,
        [
            ("drain", drained_id.as_str()),
            ("drain", drained_id.as_str()),
            ("drain", "ghost"),
            ("drain", "ghost")
        ]
    );
    assert!(
        entries
            .iter()
            .all(|entry| entry["actor"] == answer["entries"][0]["actor"])
    );
    assert!(
        !entries[0]["actor"]
            .as_str()
            .unwrap_or_default()
            .contains(OPERATOR_TOKEN)
    );
    Ok(())
}

/// Embedded mode has one worker, the gateway's own (it shares the gateway's shutdown): the
/// route refuses to drain it, or anything, with 409, and records nothing.
#[tokio::test]
async fn embedded_mode_has_no_worker_to_drain() -> TestResult {
    let gateway = harness::cluster::gateway(
        "embedded",
        &[],
        &[("OPERATOR_TOKEN", OPERATOR_TOKEN.to_owned())],
    )
    .await?;
    let http = reqwest::Client::new();
    let overview: Value = http
        .get(format!("{}/console/api/overview", gateway.base))
        .bearer_auth(OPERATOR_TOKEN)
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(overview["mode"], "embedded", "{overview}");
    let own = overview["workers"][0]["id"]
        .as_str()
        .ok_or("the embedded worker is listed")?
        .to_owned();
    let response = http
        .post(format!("{}/console/api/workers/{own}/drain", gateway.base))
        .bearer_auth(OPERATOR_TOKEN)
        .send()
        .await?;
    assert_eq!(response.status(), StatusCode::CONFLICT);
    let body: Value = response.json().await?;
    assert_eq!(body["error"]["code"], "invalid_state", "{body}");
    let audit: Value = http
        .get(format!("{}/console/api/audit", gateway.base))
        .bearer_auth(OPERATOR_TOKEN)
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(audit["entries"], json!([]));
    // Still serving: nothing was stopped.
    let health = http.get(format!("{}/health", gateway.base)).send().await?;
    assert!(health.status().is_success());
    Ok(())
}
