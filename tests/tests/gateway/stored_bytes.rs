//! Stored bytes have bounds, with real processes on a private redis-server: a gateway refuses an
//! input over `MAX_INPUT_BYTES` before storing anything, and a worker fails a task whose output
//! is over `WORKER_MAX_RESULT_BYTES` with `result_too_large` instead of writing it to Redis.

use std::time::Duration;

use harness::TestResult;
use harness::cluster::{Cluster, jsonrpc_request};
use serde_json::{Value, json};

const PATIENCE: Duration = Duration::from_secs(30);
const TOKEN: &str = "0123456789abcdef0123456789abcdef0123";
const MAX_INPUT_BYTES: usize = 64 * 1024;
const MAX_RESULT_BYTES: usize = 16 * 1024;

fn create(base: &str, text: &str) -> reqwest::RequestBuilder {
    reqwest::Client::new()
        .post(format!("{base}/tasks"))
        .header("Task-Access-Token", TOKEN)
        .json(&json!({"skillId": "echo", "message": {"role": "user", "content": {"text": text}}}))
}

/// The keys of every task hash in Redis.
async fn task_keys(conn: &mut redis::aio::MultiplexedConnection) -> TestResult<Vec<String>> {
    let keys: Vec<String> = redis::cmd("KEYS").arg("*:task:*").query_async(conn).await?;
    Ok(keys)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_result_over_the_workers_limit_fails_the_task_and_is_not_stored() -> TestResult {
    // The worker, then a gateway ready once its card lists `echo` (the worker registered).
    let cluster = Cluster::builder()
        .worker(
            "w-bytes",
            &[
                ("WORKER_ENTRYPOINTS", "echo"),
                ("WORKER_MAX_RESULT_BYTES", &MAX_RESULT_BYTES.to_string()),
            ],
        )
        .gateway(
            "g-bytes",
            &[("MAX_INPUT_BYTES", &MAX_INPUT_BYTES.to_string())],
        )
        .skills(&["echo"])
        .start()
        .await?;
    let base = cluster.base();
    let worker = &cluster.workers[0];
    let mut conn = cluster.redis.client().await?;

    // Over the gateway's input limit: refused, and no task reaches Redis.
    let response = create(base, &"x".repeat(MAX_INPUT_BYTES)).send().await?;
    assert_eq!(response.status(), 413);
    let body: Value = response.json().await?;
    assert_eq!(body["error"]["code"], "invalid_request", "{body}");
    assert!(task_keys(&mut conn).await?.is_empty());
    // The same on both A2A bindings: invalid params (-32602), HTTP 400 on HTTP+JSON.
    let big = json!({"message": {"messageId": "big", "role": "ROLE_USER",
        "parts": [{"text": "x".repeat(MAX_INPUT_BYTES)}], "metadata": {"skillId": "echo"}}});
    let rpc: Value = jsonrpc_request(
        &reqwest::Client::new(),
        base,
        Some(TOKEN),
        "SendMessage",
        big.clone(),
    )
    .send()
    .await?
    .json()
    .await?;
    assert_eq!(rpc["error"]["code"], -32602, "{rpc}");
    let message = rpc["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("larger than"), "{rpc}");
    let rest = reqwest::Client::new()
        .post(format!("{base}/a2a/v1/message:send"))
        .header("A2A-Version", "1.0")
        .bearer_auth(TOKEN)
        .json(&big)
        .send()
        .await?;
    assert_eq!(rest.status(), 400);
    let rest: Value = rest.json().await?;
    let message = rest["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("larger than"), "{rest}");
    assert!(task_keys(&mut conn).await?.is_empty());

    // Under it, but echoed back over the worker's result limit: the task fails.
    let text = "x".repeat(32 * 1024);
    let response = create(base, &text).send().await?;
    assert_eq!(response.status(), 200);
    let created: Value = response.json().await?;
    let task_id = created["taskId"].as_str().ok_or("no taskId")?.to_owned();
    // The subscription ends after the task's terminal event.
    let events = tokio::time::timeout(
        PATIENCE,
        reqwest::Client::new()
            .get(format!("{base}/tasks/{task_id}/subscribe"))
            .header("Task-Access-Token", TOKEN)
            .send()
            .await?
            .text(),
    )
    .await??;
    assert!(events.contains("result_too_large"), "{events}");
    let task: Value = reqwest::Client::new()
        .get(format!("{base}/tasks/{task_id}"))
        .header("Task-Access-Token", TOKEN)
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(task["status"], "failed", "{task}");
    assert_eq!(task["error"]["code"], "result_too_large", "{task}");
    assert!(task.get("result").is_none(), "{task}");

    // Redis holds the task's input once and no copy of its output: no result field, a small
    // error, and the whole hash under input + result limit.
    let keys = task_keys(&mut conn).await?;
    assert_eq!(keys.len(), 1, "{keys:?}");
    let key = &keys[0];
    assert!(key.ends_with(&task_id), "{key}");
    let result_len: usize = redis::cmd("HSTRLEN")
        .arg(key)
        .arg("rs")
        .query_async(&mut conn)
        .await?;
    assert_eq!(result_len, 0);
    let error_len: usize = redis::cmd("HSTRLEN")
        .arg(key)
        .arg("er")
        .query_async(&mut conn)
        .await?;
    assert!(
        error_len > 0 && error_len < 1024,
        "error is {error_len} bytes"
    );
    let usage: usize = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(key)
        .arg("SAMPLES")
        .arg(0)
        .query_async(&mut conn)
        .await?;
    assert!(
        usage < text.len() + MAX_RESULT_BYTES,
        "the task hash takes {usage} bytes"
    );
    // Nothing else in Redis holds the output either.
    let all: Vec<String> = redis::cmd("KEYS").arg("*").query_async(&mut conn).await?;
    for name in all.iter().filter(|name| *name != key) {
        let usage: Option<usize> = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(name)
            .arg("SAMPLES")
            .arg(0)
            .query_async(&mut conn)
            .await?;
        let usage = usage.unwrap_or_default();
        assert!(usage < MAX_RESULT_BYTES, "{name} takes {usage} bytes");
    }
    assert!(
        worker.log().contains("handler output too large"),
        "{}",
        worker.log()
    );
    Ok(())
}
