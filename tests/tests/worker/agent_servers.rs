//! The handler servers of docs/workers.md "Bring your agent" on a real cluster: the Python one
//! (standard library only) and the Node one (node:http only), each started as a process on a
//! free port with a bearer token it requires, hosted by a worker started with `--agent` and
//! that token in a file, and run through the gateway: an invoke and a stream.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use harness::TestResult;
use harness::cluster::{Cluster, PATIENCE, POLL, free_port, http};
use serde_json::{Value, json};

/// The token the agents require and the worker sends.
const TOKEN: &str = "agent-bearer-token-for-tests";

/// An agent server process, killed on drop.
struct AgentServer {
    child: Child,
    base: String,
}

impl Drop for AgentServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn example(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/agents")
        .join(path)
}

/// Starts `program example` on a free port and waits until it serves its card.
async fn agent(program: &str, example_path: &str) -> TestResult<AgentServer> {
    let port = free_port()?;
    let child = Command::new(program)
        .arg(example(example_path))
        .arg(port.to_string())
        .env("AGENT_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|err| format!("cannot start {program}: {err}"))?;
    let server = AgentServer {
        child,
        base: format!("http://127.0.0.1:{port}"),
    };
    let client = http()?;
    let start = tokio::time::Instant::now();
    loop {
        if let Ok(response) = client
            .get(format!("{}/.well-known/agent-card.json", server.base))
            .send()
            .await
            && response.status() == 200
        {
            return Ok(server);
        }
        if start.elapsed() > PATIENCE {
            return Err(format!("{example_path} never served its card").into());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The `data` of every `event` frame of an SSE body, in order.
fn frames(body: &str, event: &str) -> Vec<Value> {
    body.split("\n\n")
        .filter(|frame| frame.lines().any(|line| line == format!("event: {event}")))
        .filter_map(|frame| {
            let data = frame.lines().find_map(|line| line.strip_prefix("data: "))?;
            serde_json::from_str(data).ok()
        })
        .collect()
}

/// A cluster hosting `agent` (its token in a file), an invoke and a stream through it.
async fn runs_on_the_cluster(agent: &AgentServer) -> TestResult {
    let dir = tempfile::tempdir()?;
    let token_file = dir.path().join("agent-token");
    std::fs::write(&token_file, format!("{TOKEN}\n"))?;
    let token_file = token_file.to_string_lossy().into_owned();
    let cluster = Cluster::builder()
        .worker(
            "w1",
            &[
                ("WORKER_AGENTS", agent.base.as_str()),
                ("WORKER_AGENT_TOKEN_FILE", token_file.as_str()),
            ],
        )
        .gateway("g1", &[])
        .skills(&["shout", "tick"])
        .start()
        .await?;

    let card: Value = cluster
        .http
        .get(format!("{}/.well-known/agent-card.json", cluster.base()))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(card["entrypoints"]["tick"]["streaming"], true, "{card}");
    assert_eq!(
        card["entrypoints"]["shout"]["input_schema"]["required"],
        json!(["text"])
    );

    let shouted = cluster
        .http
        .post(format!("{}/entrypoints/shout/invoke", cluster.base()))
        .json(&json!({"input": {"text": "hello"}}))
        .send()
        .await?;
    assert_eq!(shouted.status(), 200, "{}", cluster.logs());
    let shouted: Value = shouted.json().await?;
    assert_eq!(shouted["output"]["text"], "HELLO", "{shouted}");
    // The agent saw the task's id (X-Task-Id).
    assert!(
        shouted["output"]["task"]
            .as_str()
            .is_some_and(|task| !task.is_empty()),
        "{shouted}"
    );

    let streamed = cluster
        .http
        .post(format!("{}/entrypoints/tick/stream", cluster.base()))
        .json(&json!({"input": {"n": 3}}))
        .send()
        .await?;
    assert_eq!(streamed.status(), 200, "{}", cluster.logs());
    let body = streamed.text().await?;
    let deltas: Vec<Value> = frames(&body, "delta")
        .into_iter()
        .map(|frame| frame["delta"].clone())
        .collect();
    assert_eq!(deltas, [json!(1), json!(2), json!(3)], "{body}");
    let end = frames(&body, "run-end");
    assert_eq!(end.len(), 1, "{body}");
    assert_eq!(end[0]["status"], "succeeded", "{body}");
    assert_eq!(end[0]["output"], json!({"count": 3}), "{body}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_agent_runs_on_the_cluster() -> TestResult {
    let agent = agent("python3", "python/agent.py").await?;
    runs_on_the_cluster(&agent).await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_node_agent_runs_on_the_cluster() -> TestResult {
    let agent = agent("node", "node/agent.mjs").await?;
    runs_on_the_cluster(&agent).await
}

#[tokio::test(flavor = "multi_thread")]
async fn without_the_token_a_run_fails_with_the_agents_code() -> TestResult {
    // The card is public, the runs are not: the worker starts, and a run fails with the
    // agent's 401 code (a 4xx: final, not retried).
    let agent = agent("python3", "python/agent.py").await?;
    let cluster = Cluster::builder()
        .worker("w1", &[("WORKER_AGENTS", agent.base.as_str())])
        .gateway("g1", &[])
        .skills(&["shout"])
        .start()
        .await?;
    let refused = cluster
        .http
        .post(format!("{}/entrypoints/shout/invoke", cluster.base()))
        .json(&json!({"input": {"text": "hello"}}))
        .send()
        .await?;
    assert_ne!(refused.status(), 200);
    let refused: Value = refused.json().await?;
    // The agent's message reaches the caller (the profile's HTTP answer names codes it does
    // not know `internal_error`; the task itself keeps `unauthorized`).
    assert_eq!(refused["error"]["message"], "bad token", "{refused}");
    Ok(())
}
