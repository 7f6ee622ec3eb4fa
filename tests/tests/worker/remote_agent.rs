//! `worker --agent URL` on real processes: the remote agent is our own embedded gateway (no
//! Redis; it serves the Lucid profile with the built-ins), the cluster a redis-server, a
//! worker hosting that agent's entrypoints (and no built-ins of its own) and a gateway.

use harness::TestResult;
use harness::cluster::{Cluster, PATIENCE};
use harness::process::ServiceProcess;
use harness::store_fixtures::{next_named, queued_task_with};
use protocol::TaskStatus;
use protocol::token::AccessToken;
use serde_json::{Value, json};
use store::{RedisStore, RedisStoreConfig, TaskStore, Transition};

/// The embedded gateway serving the built-ins over the profile, and its base URL.
async fn remote_agent() -> TestResult<(ServiceProcess, String)> {
    // No REDIS_URL: the harness starts it embedded.
    let agent = harness::cluster::gateway("remote-agent", &[], &[]).await?;
    Ok((agent.process, agent.base))
}

/// A cluster whose only worker, of one slot, hosts the agent at `agent`.
async fn cluster_hosting(agent: &str) -> TestResult<Cluster> {
    Cluster::builder()
        .worker(
            "w1",
            &[("WORKER_AGENTS", agent), ("WORKER_CONCURRENCY", "1")],
        )
        .gateway("g1", &[])
        .skills(&["echo", "fail", "sleep", "count", "summarize"])
        .start()
        .await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cluster_runs_a_remote_agents_entrypoints() -> TestResult {
    let (_agent, agent_base) = remote_agent().await?;
    let cluster = cluster_hosting(&agent_base).await?;

    let card: Value = cluster
        .http
        .get(format!("{}/.well-known/agent-card.json", cluster.base()))
        .send()
        .await?
        .json()
        .await?;
    let remote: Value = cluster
        .http
        .get(format!("{agent_base}/.well-known/agent-card.json"))
        .send()
        .await?
        .json()
        .await?;
    for key in ["echo", "fail", "sleep", "count", "summarize"] {
        let ours = &card["entrypoints"][key];
        assert_eq!(
            ours["description"], remote["entrypoints"][key]["description"],
            "{key}"
        );
        assert_eq!(
            ours["streaming"], remote["entrypoints"][key]["streaming"],
            "{key}"
        );
    }
    assert_eq!(
        card["entrypoints"]["sleep"]["input_schema"],
        remote["entrypoints"]["sleep"]["input_schema"]
    );

    let input = json!({"hello": "remote", "n": [1, 2, 3]});
    let echoed = cluster
        .http
        .post(format!("{}/entrypoints/echo/invoke", cluster.base()))
        .json(&json!({"input": input}))
        .send()
        .await?;
    assert_eq!(echoed.status(), 200, "{}", cluster.logs());
    let echoed: Value = echoed.json().await?;
    assert_eq!(echoed["output"], input);

    // The agent's error code becomes the task's: the cluster answers a failing run as the
    // agent itself does (the profile's HTTP answer maps codes it does not know to
    // internal_error, so both sides see the code the agent put on the wire).
    let fail = json!({"input": {"code": "invalid_input", "message": "try later"}});
    let direct = cluster
        .http
        .post(format!("{agent_base}/entrypoints/fail/invoke"))
        .json(&fail)
        .send()
        .await?;
    let direct_status = direct.status();
    let direct: Value = direct.json().await?;
    let through = cluster
        .http
        .post(format!("{}/entrypoints/fail/invoke", cluster.base()))
        .json(&fail)
        .send()
        .await?;
    assert_eq!(through.status(), direct_status);
    assert_eq!(direct_status, 400);
    let through: Value = through.json().await?;
    assert_eq!(
        through["error"]["code"], direct["error"]["code"],
        "{through}"
    );
    assert_eq!(through["error"]["code"], "invalid_input");
    assert_eq!(through["error"]["message"], "try later");

    let unknown = json!({"input": {"code": "upstream_unavailable", "message": "later"}});
    let direct: Value = cluster
        .http
        .post(format!("{agent_base}/entrypoints/fail/invoke"))
        .json(&unknown)
        .send()
        .await?
        .json()
        .await?;
    let through: Value = cluster
        .http
        .post(format!("{}/entrypoints/fail/invoke", cluster.base()))
        .json(&unknown)
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(through["error"], direct["error"]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancel_ends_a_remote_run_at_once() -> TestResult {
    let (_agent, agent_base) = remote_agent().await?;
    let cluster = cluster_hosting(&agent_base).await?;
    let store = RedisStore::connect(RedisStoreConfig::new(cluster.redis.url())).await?;
    let owner = AccessToken::generate().owner_hash();
    store
        .create(queued_task_with(
            "remote-sleep",
            &owner,
            "sleep",
            json!({"ms": 60_000}),
            1,
        ))
        .await?;
    // From the first event on: the worker may hand the run over before this subscribes.
    let mut sub = store
        .subscribe("remote-sleep", &owner, Some(0))
        .await?
        .ok_or("own task not visible")?;
    // The worker handed the run to the agent.
    let handed = next_named(&mut sub, "progress")
        .await
        .map_err(|err| format!("no progress ({err}):\n{}", cluster.logs()))?;
    assert_eq!(handed.data["agent"], "invoked", "{:?}", handed.data);

    let outcome = store
        .compare_and_set(
            "remote-sleep",
            &[TaskStatus::Running],
            Transition::cancelled(),
            None,
        )
        .await?;
    assert!(outcome.applied().is_some());
    let status = next_named(&mut sub, "statusUpdate")
        .await
        .map_err(|err| format!("no statusUpdate ({err}):\n{}", cluster.logs()))?;
    assert_eq!(status.data["status"], "cancelled");
    // The worker stops waiting for the agent at once: its only slot is free for the next
    // task, an echo that completes while the cancelled sleep would still have a minute to go
    // (longer than this request waits).
    let echoed = cluster
        .http
        .post(format!("{}/entrypoints/echo/invoke", cluster.base()))
        .json(&json!({"input": "after the cancel"}))
        .send()
        .await?;
    assert_eq!(echoed.status(), 200, "{}", cluster.logs());
    let task = store.get("remote-sleep").await?.ok_or("task missing")?;
    assert_eq!(task.task.status, TaskStatus::Cancelled);
    assert_eq!(task.task.result, None);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_hosted_twice_stops_the_worker_at_start() -> TestResult {
    let (_agent, agent_base) = remote_agent().await?;
    let redis = harness::redis_server::RedisServer::start()?;
    // `--entrypoints echo` hosts the built-in echo, which the agent's card names too.
    // ServiceProcess::start itself: the point is a worker that refuses to start.
    let mut worker = ServiceProcess::start(
        "worker",
        "w-collides",
        &["--agent", &agent_base, "--entrypoints", "echo"],
        &[("REDIS_URL", redis.url())],
    )?;
    let status = worker.wait_exit(PATIENCE)?;
    assert_eq!(status.code(), Some(2), "{}", worker.log());
    let log = worker.log();
    assert!(
        log.contains("entrypoint echo is already hosted by this worker (a built-in)"),
        "{log}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_remote_stream_becomes_the_tasks_events() -> TestResult {
    let (_agent, agent_base) = remote_agent().await?;
    let cluster = cluster_hosting(&agent_base).await?;
    let store = RedisStore::connect(RedisStoreConfig::new(cluster.redis.url())).await?;
    let owner = AccessToken::generate().owner_hash();
    store
        .create(queued_task_with(
            "remote-count",
            &owner,
            "count",
            json!({"n": 3}),
            1,
        ))
        .await?;
    let mut sub = store
        .subscribe("remote-count", &owner, Some(0))
        .await?
        .ok_or("own task not visible")?;
    let mut deltas = Vec::new();
    for _ in 0..3 {
        let delta = next_named(&mut sub, "delta")
            .await
            .map_err(|err| format!("no delta ({err}):\n{}", cluster.logs()))?;
        deltas.push(delta.data);
    }
    assert_eq!(deltas, [json!(1), json!(2), json!(3)]);
    let done = next_named(&mut sub, "resultUpdate").await?;
    assert_eq!(done.data["status"], "completed", "{:?}", done.data);
    let task = store.get("remote-count").await?.ok_or("task missing")?;
    assert_eq!(
        task.task.result.map(|result| result.output),
        Some(json!({"count": 3}))
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_run_deadline_bounds_a_remote_call() -> TestResult {
    let (_agent, agent_base) = remote_agent().await?;
    let cluster = Cluster::builder()
        .worker(
            "w1",
            &[
                ("WORKER_AGENTS", agent_base.as_str()),
                ("MAX_RUN_MS", "500"),
            ],
        )
        .gateway("g1", &[])
        .skills(&["sleep"])
        .start()
        .await?;
    let store = RedisStore::connect(RedisStoreConfig::new(cluster.redis.url())).await?;
    let owner = AccessToken::generate().owner_hash();
    store
        .create(queued_task_with(
            "remote-overrun",
            &owner,
            "sleep",
            json!({"ms": 60_000}),
            1,
        ))
        .await?;
    let mut sub = store
        .subscribe("remote-overrun", &owner, Some(0))
        .await?
        .ok_or("own task not visible")?;
    let failed = next_named(&mut sub, "error")
        .await
        .map_err(|err| format!("no error ({err}):\n{}", cluster.logs()))?;
    let task = store.get("remote-overrun").await?.ok_or("task missing")?;
    assert_eq!(task.task.status, TaskStatus::Failed, "{:?}", failed.data);
    assert_eq!(
        task.task.error.map(|error| error.code),
        Some("task_timeout".to_owned())
    );
    Ok(())
}

/// An HTTP server on loopback answering every request with `body` as JSON: a hostile card.
async fn serving(body: String) -> TestResult<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let body = body.clone();
            tokio::spawn(async move {
                let mut request = [0u8; 4096];
                let _ = socket.read(&mut request).await;
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.write_all(body.as_bytes()).await;
            });
        }
    });
    Ok(base)
}

/// Starts a worker hosting the agent at `agent` and returns its log once it has exited with 2.
async fn refused_at_start(agent: &str) -> TestResult<String> {
    let redis = harness::redis_server::RedisServer::start()?;
    // ServiceProcess::start itself: the point is a worker that refuses to start.
    let mut worker = ServiceProcess::start(
        "worker",
        "w-refused",
        &["--agent", agent],
        &[("REDIS_URL", redis.url())],
    )?;
    let status = tokio::task::block_in_place(|| worker.wait_exit(PATIENCE))?;
    assert_eq!(status.code(), Some(2), "{}", worker.log());
    Ok(worker.log())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_priced_or_oversized_card_stops_the_worker_at_start() -> TestResult {
    let priced = serving(
        json!({"entrypoints": {"paid": {"description": "Costs", "pricing": {"invoke": "0.01"}}}})
            .to_string(),
    )
    .await?;
    let log = refused_at_start(&priced).await?;
    assert!(log.contains("entrypoint paid is priced upstream"), "{log}");

    let huge = serving(format!(
        r#"{{"entrypoints":{{}},"description":"{}"}}"#,
        "x".repeat(2 * 1024 * 1024)
    ))
    .await?;
    let log = refused_at_start(&huge).await?;
    assert!(log.contains("cannot read its card"), "{log}");
    assert!(log.contains("exceeds"), "{log}");
    Ok(())
}
