//! The per-client-address bound on live tasks through real processes on a private redis-server
//! (issue 29: "1,000 anonymous long sleeps cannot stop a second owner's tasks"). `POST /tasks`
//! without a token makes a fresh owner per call, so the per-owner bounds never hold an
//! anonymous caller: one client address sending 1,000 anonymous 60 s sleeps would hold every
//! slot of `MAX_TASKS` (1,000, its default) and answer everyone else `503
//! task_capacity_exhausted`. With `MAX_LIVE_PER_ADDRESS` it gets `429
//! address_capacity_exhausted` past its bound, and a caller from another address (the client
//! bound to 127.0.0.2) still has its task run; a direct invoke and A2A SendMessage from the
//! full address are refused as well.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use futures::StreamExt;
use harness::TestResult;
use harness::cluster::{Cluster, jsonrpc_request};
use serde_json::{Value, json};

const PATIENCE: Duration = Duration::from_secs(60);
const BOUND: usize = 100;
const FLOOD: usize = 1_000;

/// A worker for `sleep`, another for `echo` (so the sleeps holding the first one's slots never
/// delay the echo: what is under test is admission), and a gateway with the default
/// `MAX_TASKS` and `MAX_LIVE_PER_ADDRESS` at [`BOUND`], ready once its card lists both.
async fn cluster() -> TestResult<Cluster> {
    Cluster::builder()
        .worker("w-sleep", &[("WORKER_ENTRYPOINTS", "sleep")])
        .worker("w-echo", &[("WORKER_ENTRYPOINTS", "echo")])
        .gateway("g-address", &[("MAX_LIVE_PER_ADDRESS", &BOUND.to_string())])
        .skills(&["sleep", "echo"])
        .start()
        .await
}

fn task_body(skill: &str, text: &str) -> Value {
    json!({"skillId": skill, "message": {"role": "user", "content": {"text": text}}})
}

/// What one anonymous sleep's creation was answered.
#[derive(Debug)]
enum Answer {
    Created,
    AddressFull { retry_after: Option<String> },
    Other(u16, String),
}

async fn anonymous_sleep(client: &reqwest::Client, base: &str) -> TestResult<Answer> {
    let response = client
        .post(format!("{base}/tasks"))
        .json(&task_body("sleep", r#"{"ms":60000}"#))
        .send()
        .await?;
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let body = response.text().await?;
    let code = serde_json::from_str::<Value>(&body)
        .ok()
        .and_then(|body| body["error"]["code"].as_str().map(str::to_owned));
    Ok(match (status, code.as_deref()) {
        (200, _) => Answer::Created,
        (429, Some("address_capacity_exhausted")) => Answer::AddressFull { retry_after },
        _ => Answer::Other(status, body),
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_flood_of_anonymous_sleeps_from_one_address_leaves_room_for_another() -> TestResult {
    let cluster = cluster().await?;
    let base = cluster.base().to_owned();

    // One address: 1,000 anonymous 60 s sleeps, 64 at a time.
    let flooder = reqwest::Client::new();
    let answers: Vec<TestResult<Answer>> = futures::stream::iter(0..FLOOD)
        .map(|_| anonymous_sleep(&flooder, &base))
        .buffer_unordered(64)
        .collect()
        .await;
    let (mut created, mut refused) = (0, 0);
    for answer in answers {
        match answer? {
            Answer::Created => created += 1,
            Answer::AddressFull { retry_after } => {
                assert_eq!(retry_after.as_deref(), Some("1"));
                refused += 1;
            }
            Answer::Other(status, body) => {
                return Err(format!("unexpected answer {status}: {body}").into());
            }
        }
    }
    assert_eq!(created, BOUND, "the address holds exactly its bound");
    assert_eq!(refused, FLOOD - BOUND);

    // The other creating routes count the same address: a direct invoke, and A2A SendMessage
    // (refused as a server-side condition there, as capacity errors are).
    let invoke = flooder
        .post(format!("{base}/entrypoints/echo/invoke"))
        .json(&json!({"input": {"text": "direct"}}))
        .send()
        .await?;
    assert_eq!(invoke.status(), 429);
    let body: Value = invoke.json().await?;
    assert_eq!(
        body["error"]["code"], "address_capacity_exhausted",
        "{body}"
    );
    let params = json!({
        "message": {"messageId": "m1", "role": "ROLE_USER",
            "parts": [{"text": "hello"}], "metadata": {"skillId": "echo"}},
        "configuration": {"returnImmediately": true}});
    let rpc: Value = jsonrpc_request(
        &flooder,
        &base,
        Some("cccccccccccccccccccccccccccccccccccc"),
        "SendMessage",
        params,
    )
    .send()
    .await?
    .json()
    .await?;
    assert_eq!(rpc["error"]["code"], -32000, "{rpc}");
    assert_eq!(rpc["error"]["data"][0]["reason"], "QUOTA_EXCEEDED", "{rpc}");
    let message = rpc["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("client address"), "{rpc}");

    // Another caller from another address: a fresh owner whose echo is admitted and runs.
    let other = reqwest::Client::builder()
        .local_address(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)))
        .build()?;
    let response = other
        .post(format!("{base}/tasks"))
        .json(&task_body("echo", "still served"))
        .send()
        .await?;
    let status = response.status();
    let created: Value = response.json().await?;
    assert_eq!(status, 200, "{created}");
    let task_id = created["taskId"].as_str().ok_or("no taskId")?;
    let token = created["accessToken"].as_str().ok_or("no accessToken")?;

    // Follow it to its end on its event stream, which ends with the task.
    let mut events = other
        .get(format!("{base}/tasks/{task_id}/subscribe"))
        .header("Task-Access-Token", token)
        .send()
        .await?
        .bytes_stream();
    tokio::time::timeout(PATIENCE, async {
        while let Some(chunk) = events.next().await {
            if chunk.is_err() {
                break;
            }
        }
    })
    .await?;
    let task: Value = other
        .get(format!("{base}/tasks/{task_id}"))
        .header("Task-Access-Token", token)
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(task["status"], "completed", "{task}");
    Ok(())
}
