//! `worker --agent a2a+URL` on real processes: agents built on the official A2A Python SDK's
//! server (`tests/python/a2a_sdk_agent.py`: `AgentExecutor`, `DefaultRequestHandler`,
//! `InMemoryTaskStore`, its Starlette JSON-RPC routes, served by uvicorn), hosted by a worker of
//! a cluster (a redis-server, that worker and a gateway), reached through our gateway.
//!
//! Two agents: one streaming, named `a2a+URL` (its runs are `SendStreamingMessage`), one not,
//! its skills prefixed `plain-`, given as a bare URL and recognised from its card (its runs are
//! `SendMessage`). Their cards advertise the JSON-RPC interface on `localhost`, the worker is
//! given `127.0.0.1`: the worker takes the path only.
//!
//! A card without a JSON-RPC interface, a skill id that is not a plain name or a key hosted
//! twice stops the worker at start.
//!
//! The interpreter is `A2A_SDK_PYTHON`, else `<target dir>/a2a-sdk-venv/bin/python`, made by
//! `bash scripts/a2a-sdk-venv`; one that cannot import the SDK's server fails the test, saying
//! how to set it up: the test is never skipped.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use harness::TestResult;
use harness::cluster::{Cluster, PATIENCE, free_port};
use harness::process::ServiceProcess;
use harness::store_fixtures::{next_event, next_named, queued_task_with};
use protocol::TaskStatus;
use protocol::token::AccessToken;
use serde_json::{Value, json};
use store::{RedisStore, RedisStoreConfig, Subscription, TaskStore, Transition};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The A2A caller's bearer token (20 to 256 characters).
const TOKEN: &str = "a2a-remote-agent-token-0123456789";

const SETUP_HINT: &str = "run `bash scripts/a2a-sdk-venv`: it makes ${CARGO_TARGET_DIR:-target}/\
                          a2a-sdk-venv with a2a-sdk[grpc,http-server]==1.3.0 and uvicorn from \
                          PyPI, where this test looks for it unless A2A_SDK_PYTHON names another \
                          python";

/// The interpreter with the SDK: `A2A_SDK_PYTHON`, else the venv of `scripts/a2a-sdk-venv` in
/// the target dir of this test binary (`<target>/<profile>/deps/<test>`).
fn sdk_python() -> TestResult<PathBuf> {
    if let Some(python) = std::env::var_os("A2A_SDK_PYTHON").filter(|value| !value.is_empty()) {
        return Ok(PathBuf::from(python));
    }
    let exe = std::env::current_exe()?;
    let mut dir = exe.parent().ok_or("no test binary dir")?;
    if dir.file_name().and_then(|name| name.to_str()) == Some("deps") {
        dir = dir.parent().ok_or("no profile dir")?;
    }
    let target = dir.parent().ok_or("no target dir")?;
    Ok(target.join("a2a-sdk-venv").join("bin").join("python"))
}

/// An SDK agent serving on a free port, and its base URL; killed on drop.
struct SdkAgent {
    child: Child,
    base: String,
}

impl SdkAgent {
    /// Starts `a2a_sdk_agent.py` with `args` after the port; returns once it serves.
    async fn start(args: &[&str]) -> TestResult<SdkAgent> {
        let python = sdk_python()?;
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/a2a_sdk_agent.py");
        let port = free_port()?;
        let mut child = Command::new(&python)
            .arg(&script)
            .arg(port.to_string())
            .args(args)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|err| format!("cannot run {}: {err}; {SETUP_HINT}", python.display()))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let first = tokio::time::timeout(PATIENCE, lines.next_line()).await??;
        if first.as_deref() != Some("listening") {
            let status = child.try_wait()?;
            return Err(format!(
                "the SDK agent did not start ({first:?}, exit {status:?}); {SETUP_HINT}"
            )
            .into());
        }
        Ok(SdkAgent {
            child,
            base: format!("http://127.0.0.1:{port}"),
        })
    }
}

impl Drop for SdkAgent {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// A cluster whose worker hosts a streaming SDK agent (`a2a+URL`) and a non-streaming one
/// (skills `plain-*`, recognised from its card).
async fn cluster_hosting(streaming: &SdkAgent, plain: &SdkAgent) -> TestResult<Cluster> {
    let agents = format!("a2a+{},{}", streaming.base, plain.base);
    Cluster::builder()
        .worker("w1", &[("WORKER_AGENTS", agents.as_str())])
        .gateway("g1", &[])
        .skills(&[
            "upper",
            "chunks",
            "fail",
            "slow",
            "plain-upper",
            "plain-chunks",
        ])
        .start()
        .await
}

/// Invokes `key` through the cluster's gateway: the answer's status and body.
async fn invoke(cluster: &Cluster, key: &str, input: Value) -> TestResult<(u16, Value)> {
    let answer = cluster
        .http
        .post(format!("{}/entrypoints/{key}/invoke", cluster.base()))
        .json(&json!({"input": input}))
        .send()
        .await?;
    let status = answer.status().as_u16();
    Ok((status, answer.json().await?))
}

/// Creates a task of `key` straight in the store, and subscribes to its events from the first.
async fn create(
    cluster: &Cluster,
    task_id: &str,
    key: &str,
    input: Value,
) -> TestResult<(RedisStore, Subscription)> {
    let store = RedisStore::connect(RedisStoreConfig::new(cluster.redis.url())).await?;
    let owner = AccessToken::generate().owner_hash();
    store
        .create(queued_task_with(task_id, &owner, key, input, 1))
        .await?;
    let sub = store
        .subscribe(task_id, &owner, Some(0))
        .await?
        .ok_or("own task not visible")?;
    Ok((store, sub))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cluster_runs_the_skills_of_agents_built_on_the_official_a2a_sdk() -> TestResult {
    let streaming = SdkAgent::start(&[]).await?;
    let plain = SdkAgent::start(&["plain-", "--no-streaming"]).await?;
    let cluster = cluster_hosting(&streaming, &plain).await?;

    // The skills are our entrypoints, on our Lucid card and on our A2A card.
    let card: Value = cluster
        .http
        .get(format!("{}/.well-known/agent-card.json", cluster.base()))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(
        card["entrypoints"]["upper"]["description"],
        "Uppercases its text"
    );
    assert_eq!(card["entrypoints"]["chunks"]["streaming"], true, "{card}");
    assert_eq!(
        card["entrypoints"]["plain-chunks"]["streaming"], false,
        "{card}"
    );
    let a2a_card: Value = cluster
        .http
        .get(format!(
            "{}/a2a/.well-known/agent-card.json",
            cluster.base()
        ))
        .send()
        .await?
        .json()
        .await?;
    let skills: Vec<&str> = a2a_card["skills"]
        .as_array()
        .ok_or("no skills on our A2A card")?
        .iter()
        .filter_map(|skill| skill["id"].as_str())
        .collect();
    for skill in ["upper", "chunks", "plain-upper", "plain-chunks"] {
        assert!(skills.contains(&skill), "{skill} missing from {skills:?}");
    }

    // A message answer (streamed, then not), and a task's artifact chunks, joined.
    for (key, input, output) in [
        ("upper", json!("hello sdk"), json!("HELLO SDK")),
        ("plain-upper", json!("hello plain"), json!("HELLO PLAIN")),
        ("chunks", json!("go"), json!("one two three")),
        ("plain-chunks", json!("go"), json!("one two three")),
    ] {
        let (status, answer) = invoke(&cluster, key, input).await?;
        assert_eq!(status, 200, "{key}: {answer}\n{}", cluster.logs());
        assert_eq!(answer["output"], output, "{key}");
    }
    // A data part goes as data, and comes back as data beside the text.
    let (status, answer) = invoke(&cluster, "plain-upper", json!({"n": "x"})).await?;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["output"], json!(["", {"got": [{"n": "x"}]}]));

    // A failed and a rejected task fail ours, with the agent's words (the profile's HTTP
    // answer keeps the message; the task keeps the code too).
    let (_, failed) = invoke(&cluster, "fail", json!("go")).await?;
    assert_eq!(failed["error"]["message"], "the agent failed on purpose");
    for (key, code, message) in [
        ("fail", "agent_failed", "the agent failed on purpose"),
        ("plain-reject", "rejected", "not my kind of work"),
    ] {
        let task_id = format!("a2a-{key}");
        let (store, mut sub) = create(&cluster, &task_id, key, json!("go")).await?;
        next_named(&mut sub, "error")
            .await
            .map_err(|err| format!("no error ({err}):\n{}", cluster.logs()))?;
        let task = store.get(&task_id).await?.ok_or("task missing")?;
        assert_eq!(task.task.status, TaskStatus::Failed);
        let error = task.task.error.ok_or("no error")?;
        assert_eq!(
            (error.code.as_str(), error.message.as_str()),
            (code, message)
        );
    }

    // The artifact chunks are the task's events as they stream.
    let (store, mut sub) = create(&cluster, "a2a-chunks", "chunks", json!("go")).await?;
    let mut chunks = Vec::new();
    for _ in 0..3 {
        let delta = next_named(&mut sub, "delta")
            .await
            .map_err(|err| format!("no delta ({err}):\n{}", cluster.logs()))?;
        let chunk = &delta.data["a2a"];
        assert_eq!(chunk["artifact"]["artifactId"], "counted", "{chunk}");
        chunks.push((
            chunk["artifact"]["parts"][0]["text"].clone(),
            chunk["append"].clone(),
        ));
    }
    assert_eq!(
        chunks,
        [
            (json!("one "), json!(false)),
            (json!("two "), json!(true)),
            (json!("three"), json!(true))
        ]
    );
    let done = next_named(&mut sub, "resultUpdate").await?;
    assert_eq!(done.data["status"], "completed", "{:?}", done.data);
    let task = store.get("a2a-chunks").await?.ok_or("task missing")?;
    assert_eq!(
        task.task.result.map(|result| result.output),
        Some(json!("one two three"))
    );

    // An A2A caller of our gateway gets the agent's answer as an A2A task.
    let (_, sent) = cluster
        .jsonrpc(
            Some(TOKEN),
            "SendMessage",
            json!({"message": {"messageId": "through-us", "role": "ROLE_USER",
                               "parts": [{"text": "through the cluster"}],
                               "metadata": {"skillId": "upper"}}}),
        )
        .await?;
    let task = &sent["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{sent}");
    assert_eq!(
        task["artifacts"][0]["parts"][0]["text"], "THROUGH THE CLUSTER",
        "{sent}"
    );
    // The agent asking for input makes our task ask our caller, in the agent's words.
    let (_, asked) = cluster
        .jsonrpc(
            Some(TOKEN),
            "SendMessage",
            json!({"message": {"messageId": "asks-us", "role": "ROLE_USER",
                               "parts": [{"text": "paint it"}],
                               "metadata": {"skillId": "ask"}}}),
        )
        .await?;
    let status = &asked["result"]["task"]["status"];
    assert_eq!(status["state"], "TASK_STATE_INPUT_REQUIRED", "{asked}");
    assert_eq!(
        status["message"]["parts"][0]["text"], "which colour?",
        "{asked}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancel_cancels_the_agents_task() -> TestResult {
    let streaming = SdkAgent::start(&[]).await?;
    let plain = SdkAgent::start(&["plain-", "--no-streaming"]).await?;
    let cluster = cluster_hosting(&streaming, &plain).await?;
    let (store, mut sub) = create(&cluster, "a2a-slow", "slow", json!("go")).await?;
    // The agent's task is working: its status streamed onto ours.
    let working = next_event(&mut sub, |event| {
        event.event == "progress" && event.data["state"] == "TASK_STATE_WORKING"
    })
    .await
    .map_err(|err| format!("no working status ({err}):\n{}", cluster.logs()))?;
    assert_eq!(working.data["agent"], "a2a");

    let outcome = store
        .compare_and_set(
            "a2a-slow",
            &[TaskStatus::Running],
            Transition::cancelled(),
            None,
        )
        .await?;
    assert!(outcome.applied().is_some());
    // The worker sends the agent `CancelTask`: the agent's executor records it.
    let start = tokio::time::Instant::now();
    loop {
        let cancelled: Value = cluster
            .http
            .get(format!("{}/cancelled", streaming.base))
            .send()
            .await?
            .json()
            .await?;
        if cancelled.as_array().is_some_and(|ids| !ids.is_empty()) {
            break;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "the agent's task was never cancelled:\n{}",
            cluster.logs()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let task = store.get("a2a-slow").await?.ok_or("task missing")?;
    assert_eq!(task.task.status, TaskStatus::Cancelled);
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

/// Starts a worker hosting the agents `agents` and returns its log once it has exited with 2.
async fn refused_at_start(agents: &str) -> TestResult<String> {
    let redis = harness::redis_server::RedisServer::start()?;
    // ServiceProcess::start itself: the point is a worker that refuses to start.
    let mut worker = ServiceProcess::start(
        "worker",
        "w-refused",
        &["--agent", agents],
        &[("REDIS_URL", redis.url())],
    )?;
    let status = tokio::task::block_in_place(|| worker.wait_exit(PATIENCE))?;
    assert_eq!(status.code(), Some(2), "{}", worker.log());
    Ok(worker.log())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_card_without_json_rpc_a_bad_skill_id_or_a_key_hosted_twice_stops_the_worker()
-> TestResult {
    let card = |interfaces: Value, skills: Value| {
        json!({"name": "hostile", "version": "1", "supportedInterfaces": interfaces,
               "capabilities": {}, "skills": skills})
        .to_string()
    };
    let grpc_only = serving(card(
        json!([{"url": "http://127.0.0.1:1/", "protocolBinding": "GRPC", "protocolVersion": "1.0"}]),
        json!([{"id": "x", "name": "x"}]),
    ))
    .await?;
    let log = refused_at_start(&format!("a2a+{grpc_only}")).await?;
    assert!(log.contains("no JSON-RPC interface"), "{log}");

    let climbing = serving(card(
        json!([{"url": "http://127.0.0.1:1/", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]),
        json!([{"id": "../admin", "name": "x"}]),
    ))
    .await?;
    // Recognised as A2A from its card, then refused for its skill id.
    let log = refused_at_start(&climbing).await?;
    assert!(log.contains("\"../admin\" is not a plain name"), "{log}");

    let agent = SdkAgent::start(&[]).await?;
    let twice = format!("a2a+{0},a2a+{0}", agent.base);
    let log = refused_at_start(&twice).await?;
    assert!(log.contains("is already hosted by this worker"), "{log}");
    Ok(())
}
