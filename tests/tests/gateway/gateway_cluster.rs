//! Real `gateway` and `worker` processes on a private redis-server: two gateways serve the same
//! tasks, a subscriber cut off by a dead gateway finishes on the other, Redis going away gives
//! fast 503s and the gateway recovers by itself, and the embedded mode works with no Redis.

use std::time::Duration;

use harness::TestResult;
use harness::cluster::{self, Cluster};
use harness::redis_server::RedisOptions;
use nix::sys::signal::Signal;
use serde_json::{Value, json};

const PATIENCE: Duration = Duration::from_secs(30);
const TOKEN: &str = "0123456789abcdef0123456789abcdef0123";
/// Every worker's lease: a worker that leaves is noticed within a second.
const LEASE: (&str, &str) = ("WORKER_LEASE_TTL_MS", "1000");

async fn create_task(base: &str, skill: &str, input: Value) -> TestResult<String> {
    let response = reqwest::Client::new()
        .post(format!("{base}/tasks"))
        .header("Task-Access-Token", TOKEN)
        .json(&json!({"skillId": skill, "message": {"role": "user", "content": {"text": input.to_string()}}}))
        .send()
        .await?;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await?;
    Ok(body["taskId"].as_str().ok_or("no taskId")?.to_owned())
}

/// Reads SSE events (name, data) from `/tasks/:id/subscribe` until the stream ends.
async fn subscribe_events(
    base: &str,
    task_id: &str,
    stop_after: Option<usize>,
) -> TestResult<Vec<(String, Value)>> {
    let response = reqwest::Client::new()
        .get(format!("{base}/tasks/{task_id}/subscribe"))
        .header("Task-Access-Token", TOKEN)
        .send()
        .await?;
    assert_eq!(response.status(), 200);
    let events =
        tokio::time::timeout(PATIENCE, harness::sse::read_events(response, stop_after)).await??;
    Ok(events)
}

#[tokio::test(flavor = "multi_thread")]
async fn two_gateways_serve_the_same_tasks_and_a_cut_subscriber_finishes_on_the_other() -> TestResult
{
    let mut cluster = Cluster::builder()
        .worker("w1", &[LEASE])
        .gateway("g1", &[])
        .gateway("g2", &[])
        .skills(&["sleep"])
        .start()
        .await?;
    let (g1, g2) = (
        cluster.gateways[0].base.clone(),
        cluster.gateways[1].base.clone(),
    );

    let task_id = create_task(&g1, "sleep", json!({"ms": 1500})).await?;
    // Subscribed on g1: the running snapshot arrives, then g1 dies mid-stream.
    let first = subscribe_events(&g1, &task_id, Some(1)).await?;
    assert_eq!(first[0].0, "statusUpdate");
    assert_eq!(first[0].1["status"], "running");
    cluster.gateways[0].process.kill()?;

    // The same token on g2 sees the task and its end.
    let rest = subscribe_events(&g2, &task_id, None).await?;
    let names: Vec<&str> = rest.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names.last(), Some(&"resultUpdate"), "events: {rest:?}");
    let (_, done) = rest.last().ok_or("no events")?;
    assert_eq!(done["result"]["output"], json!({"slept": 1500}));

    let task: Value = reqwest::Client::new()
        .get(format!("{g2}/tasks/{task_id}"))
        .header("Task-Access-Token", TOKEN)
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(task["status"], "completed");
    // Invariant 4: the token reached both gateways and the worker, and no log line shows it.
    for log in [
        cluster.gateways[0].process.log(),
        cluster.gateways[1].process.log(),
        cluster.workers[0].log(),
    ] {
        assert!(!log.is_empty(), "processes log at info");
        assert!(!log.contains(TOKEN), "a log line shows the access token");
    }
    Ok(())
}

/// A worker registry gap (the only worker of an entrypoint leaves; Redis restarts and entries
/// lapse) does not answer `404 skill_not_found` for an entrypoint listed within
/// `ENTRYPOINT_GRACE_MS`: the task is queued and the next worker runs it.
#[tokio::test(flavor = "multi_thread")]
async fn tasks_are_admitted_through_a_gap_in_the_worker_registry() -> TestResult {
    let mut cluster = Cluster::builder()
        .worker("w1", &[LEASE])
        .gateway("g-grace", &[])
        .gateway("g-strict", &[("ENTRYPOINT_GRACE_MS", "0")])
        .skills(&["echo"])
        .start()
        .await?;
    let remembering = cluster.gateways[0].base.clone();
    let strict = cluster.gateways[1].base.clone();
    // Each gateway admits one task while echo is listed.
    create_task(&remembering, "echo", json!({"n": 1})).await?;
    create_task(&strict, "echo", json!({"n": 2})).await?;

    // The only worker leaves cleanly (it deregisters): no worker lists echo any more.
    let only_worker = &mut cluster.workers[0];
    only_worker.signal(Signal::SIGTERM)?;
    only_worker.wait_exit(PATIENCE)?;
    // The card lists live workers only, as of at most REGISTRY_REFRESH_MS (1 s) ago.
    let start = tokio::time::Instant::now();
    loop {
        let card: Value = reqwest::Client::new()
            .get(format!("{remembering}/.well-known/agent-card.json"))
            .send()
            .await?
            .json()
            .await?;
        if card["skills"] == json!([]) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(1) + Duration::from_secs(3),
            "the card still lists a worker that left: {card}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let body =
        json!({"skillId": "echo", "message": {"role": "user", "content": {"text": "{\"n\":3}"}}});
    let refused = reqwest::Client::new()
        .post(format!("{strict}/tasks"))
        .header("Task-Access-Token", TOKEN)
        .json(&body)
        .send()
        .await?;
    assert_eq!(refused.status(), 404);
    let refused: Value = refused.json().await?;
    assert_eq!(refused["error"]["code"], "skill_not_found");

    let queued = create_task(&remembering, "echo", json!({"n": 3})).await?;
    cluster.add_worker("w2", &[LEASE])?;
    let events = subscribe_events(&remembering, &queued, None).await?;
    let (name, done) = events.last().ok_or("no events")?;
    assert_eq!(name, "resultUpdate", "events: {events:?}");
    assert_eq!(done["result"]["output"], json!({"n": 3}));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn redis_going_away_gives_503_and_the_gateway_recovers() -> TestResult {
    let mut cluster = Cluster::builder()
        .redis(RedisOptions::default().with_aof(true))
        .worker("w1", &[LEASE])
        .gateway("g1", &[])
        .skills(&["echo"])
        .start()
        .await?;
    let base = cluster.base().to_owned();
    let task_id = create_task(&base, "echo", json!({"x": 1})).await?;
    let client = reqwest::Client::builder().timeout(PATIENCE).build()?;
    let get = || {
        client
            .get(format!("{base}/tasks/{task_id}"))
            .header("Task-Access-Token", TOKEN)
            .send()
    };

    cluster.redis.kill()?;
    let response = get().await?;
    assert_eq!(response.status(), 503);
    let body: Value = response.json().await?;
    assert!(body["error"]["code"].is_string(), "JSON error body: {body}");
    let ready = client.get(format!("{base}/ready")).send().await?;
    assert_eq!(ready.status(), 503);
    let health = client.get(format!("{base}/health")).send().await?;
    assert_eq!(health.status(), 200, "the process itself is up");

    cluster.redis.restart()?;
    let start = tokio::time::Instant::now();
    loop {
        let response = get().await?;
        if response.status() == 200 {
            let task: Value = response.json().await?;
            assert_eq!(task["taskId"], task_id.as_str());
            break;
        }
        assert_eq!(response.status(), 503);
        assert!(start.elapsed() < PATIENCE, "never recovered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_embedded_mode_runs_tasks_without_redis() -> TestResult {
    // No REDIS_URL: the embedded mode.
    let gateway = cluster::gateway("embedded", &[], &[]).await?;
    cluster::wait_for_skill(&gateway.process, &gateway.base, "echo").await?;
    let task_id = create_task(&gateway.base, "echo", json!({"hello": "world"})).await?;
    let events = subscribe_events(&gateway.base, &task_id, None).await?;
    let (name, data) = events.last().ok_or("no events")?;
    assert_eq!(name, "resultUpdate");
    assert_eq!(data["result"]["output"], json!({"hello": "world"}));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn slow_and_oversized_request_heads_are_cut_off() -> TestResult {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let gateway = cluster::gateway(
        "slow-heads",
        &[],
        &[("HEADER_TIMEOUT_MS", "300".to_owned())],
    )
    .await?;

    // A client that never finishes its headers is disconnected by the server.
    let mut slow = tokio::net::TcpStream::connect(gateway.address()).await?;
    slow.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        .await?;
    let mut rest = Vec::new();
    tokio::time::timeout(PATIENCE, slow.read_to_end(&mut rest)).await??;

    // A head over the bound gets 431, not a hang or a crash.
    let huge = "a".repeat(100 * 1024);
    let response = reqwest::Client::new()
        .get(format!("{}/health", gateway.base))
        .header("x-padding", huge)
        .send()
        .await?;
    assert_eq!(response.status(), 431);
    let health = reqwest::get(format!("{}/health", gateway.base)).await?;
    assert_eq!(health.status(), 200, "still serving");
    Ok(())
}
