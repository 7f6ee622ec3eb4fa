//! Per-owner limits and short-lived direct runs through real processes on a private
//! redis-server (issue 29): an owner at `MAX_LIVE_PER_OWNER` gets `429
//! owner_capacity_exhausted` with Retry-After on `POST /tasks` and an A2A refusal on
//! SendMessage while another owner is still admitted, and a finished direct invoke leaves Redis
//! after `DIRECT_RETENTION_MS` while a task created with `POST /tasks` is kept.

use std::time::Duration;

use harness::TestResult;
use harness::cluster::{Cluster, PATIENCE, jsonrpc_request};
use serde_json::{Value, json};

const TOKEN_A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const TOKEN_B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

/// A worker serving `echo` and `sleep`, and a gateway with `settings`, ready once its card
/// lists `sleep`.
async fn cluster(settings: &[(&str, &str)]) -> TestResult<Cluster> {
    Cluster::builder()
        .worker("w-owner", &[("WORKER_ENTRYPOINTS", "echo,sleep")])
        .gateway("g-owner", settings)
        .skills(&["sleep"])
        .start()
        .await
}

async fn create(base: &str, token: &str, skill: &str, text: &str) -> TestResult<reqwest::Response> {
    Ok(reqwest::Client::new()
        .post(format!("{base}/tasks"))
        .header("Task-Access-Token", token)
        .json(&json!({"skillId": skill, "message": {"role": "user", "content": {"text": text}}}))
        .send()
        .await?)
}

async fn create_sleep(base: &str, token: &str) -> TestResult<String> {
    let response = create(base, token, "sleep", r#"{"ms": 20000}"#).await?;
    assert_eq!(response.status(), 200);
    let created: Value = response.json().await?;
    Ok(created["taskId"].as_str().ok_or("no taskId")?.to_owned())
}

async fn cancel(base: &str, token: &str, task_id: &str) -> TestResult {
    let response = reqwest::Client::new()
        .post(format!("{base}/tasks/{task_id}/cancel"))
        .header("Task-Access-Token", token)
        .send()
        .await?;
    assert_eq!(response.status(), 200, "{}", response.text().await?);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_owner_at_its_live_limit_gets_429_while_another_owner_is_admitted() -> TestResult {
    let cluster = cluster(&[("MAX_LIVE_PER_OWNER", "2")]).await?;
    let base = cluster.base();
    let first = create_sleep(base, TOKEN_A).await?;
    let second = create_sleep(base, TOKEN_A).await?;

    let refused = create(base, TOKEN_A, "sleep", r#"{"ms": 20000}"#).await?;
    assert_eq!(refused.status(), 429);
    assert!(refused.headers().contains_key("retry-after"));
    let body: Value = refused.json().await?;
    assert_eq!(body["error"]["code"], "owner_capacity_exhausted", "{body}");

    // The same owner on A2A: refused as a server-side condition, not as bad params.
    let params = json!({
        "message": {"messageId": "m1", "role": "ROLE_USER",
            "parts": [{"text": "{\"ms\": 20000}"}], "metadata": {"skillId": "sleep"}},
        "configuration": {"returnImmediately": true}});
    let rpc: Value = jsonrpc_request(
        &reqwest::Client::new(),
        base,
        Some(TOKEN_A),
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
    assert!(message.contains("unfinished tasks"), "{rpc}");

    // Another owner is not held back.
    let other = create_sleep(base, TOKEN_B).await?;
    // One of A's tasks ends: A is admitted again.
    cancel(base, TOKEN_A, &first).await?;
    let third = create_sleep(base, TOKEN_A).await?;
    for (token, id) in [(TOKEN_A, &second), (TOKEN_A, &third), (TOKEN_B, &other)] {
        cancel(base, token, id).await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_finished_direct_invoke_leaves_redis_after_its_short_retention() -> TestResult {
    let cluster = cluster(&[("DIRECT_RETENTION_MS", "300")]).await?;
    let base = cluster.base();
    let response = create(base, TOKEN_A, "echo", "kept").await?;
    assert_eq!(response.status(), 200);
    let created: Value = response.json().await?;
    let kept = created["taskId"].as_str().ok_or("no taskId")?.to_owned();

    for idempotency_key in [None, Some("direct-run-key-0000000001")] {
        let mut request = reqwest::Client::new()
            .post(format!("{base}/entrypoints/echo/invoke"))
            .json(&json!({"input": {"text": "direct"}}));
        if let Some(key) = idempotency_key {
            request = request.header("Idempotency-Key", key);
        }
        let response = request.send().await?;
        assert_eq!(response.status(), 200, "{}", response.text().await?);
    }

    // Every task key but the kept one goes, and every owner index but the kept task's owner's
    // (each direct run has an owner of its own): poll Redis until only those are left.
    let mut conn = cluster.redis.client().await?;
    let start = tokio::time::Instant::now();
    loop {
        let tasks: Vec<String> = redis::cmd("KEYS")
            .arg("*:task:*")
            .query_async(&mut conn)
            .await?;
        let owners: Vec<String> = redis::cmd("KEYS")
            .arg("*:owner:*")
            .query_async(&mut conn)
            .await?;
        if tasks.len() == 1 && tasks[0].ends_with(&format!(":task:{kept}")) && owners.len() == 1 {
            break;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "direct runs were kept: {tasks:?} {owners:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}
