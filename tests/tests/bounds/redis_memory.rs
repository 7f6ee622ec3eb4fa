//! Redis never fills up under the cluster: real `gateway` and `worker` processes on a private
//! redis-server running `noeviction` with a small `maxmemory`. Anonymous callers filling the
//! store with large `echo` invokes get `503` with Retry-After once the store passes the
//! gateway's high-water mark, Redis stays under its limit, a task admitted before still
//! finishes (its terminal write is not refused), and admission reopens once memory is freed.

use std::time::Duration;

use harness::TestResult;
use harness::cluster::{self, Cluster};
use harness::redis_server::{RedisOptions, RedisServer};
use nix::sys::signal::Signal;
use serde_json::{Value, json};

const PATIENCE: Duration = Duration::from_secs(30);
const TOKEN: &str = "0123456789abcdef0123456789abcdef0123";
/// Bytes of each filling invoke's input (the result, stored too, is as large); under the
/// gateway's input and the worker's result bounds.
const FILL_BYTES: usize = 200_000;
/// Headroom given to Redis above what it used before the fill.
const HEADROOM: u64 = 16 * 1024 * 1024;

/// `used_memory` and `maxmemory` of the server.
async fn memory(redis: &RedisServer) -> TestResult<(u64, u64)> {
    let mut conn = redis.client().await?;
    let text: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut conn)
        .await?;
    let field = |name: &str| -> TestResult<u64> {
        Ok(text
            .lines()
            .filter_map(|line| line.trim_end().split_once(':'))
            .find(|(key, _)| *key == name)
            .ok_or_else(|| format!("no {name} in INFO memory"))?
            .1
            .parse()?)
    };
    Ok((field("used_memory")?, field("maxmemory")?))
}

async fn set_maxmemory(redis: &RedisServer, bytes: u64) -> TestResult {
    let mut conn = redis.client().await?;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(bytes)
        .query_async(&mut conn)
        .await?;
    Ok(())
}

/// A worker's settings: `entrypoints` only, short leases.
fn worker_settings(entrypoints: &str) -> [(&str, &str); 2] {
    [
        ("WORKER_ENTRYPOINTS", entrypoints),
        ("WORKER_LEASE_TTL_MS", "1000"),
    ]
}

/// An anonymous `echo` invoke of `input`: its status, Retry-After and body.
async fn invoke_echo(base: &str, input: &Value) -> TestResult<(u16, Option<String>, Value)> {
    let response = reqwest::Client::new()
        .post(format!("{base}/entrypoints/echo/invoke"))
        .json(&json!({ "input": input }))
        .send()
        .await?;
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let body: Value = response.json().await.unwrap_or(Value::Null);
    Ok((status, retry_after, body))
}

#[tokio::test(flavor = "multi_thread")]
async fn admission_stops_at_the_high_water_mark_and_admitted_tasks_still_finish() -> TestResult {
    // A `sleep` worker lists the entrypoint, then leaves: the well-behaved owner's task is
    // admitted (the gateway's entrypoint grace) and waits in the queue through the fill.
    let mut cluster = Cluster::builder()
        .redis(
            RedisOptions::default()
                .arg("--maxmemory-policy")
                .arg("noeviction"),
        )
        .worker("w-echo", &worker_settings("echo"))
        .worker("w-sleep", &worker_settings("sleep"))
        .gateway(
            "g1",
            &[
                ("REDIS_MEMORY_HIGH_WATER", "50"),
                ("REDIS_MEMORY_CHECK_MS", "20"),
            ],
        )
        .skills(&["echo", "sleep"])
        .start()
        .await?;
    let sleep_worker = &mut cluster.workers[1];
    sleep_worker.signal(Signal::SIGTERM)?;
    sleep_worker.wait_exit(PATIENCE)?;
    let base = cluster.base().to_owned();
    let redis = &cluster.redis;
    let gateway = &cluster.gateways[0].process;
    let echo_worker = &cluster.workers[0];

    let client = reqwest::Client::new();
    let created = client
        .post(format!("{base}/tasks"))
        .header("Task-Access-Token", TOKEN)
        .json(&json!({"skillId": "sleep", "message": {"role": "user", "content": {"text": json!({"ms": 10}).to_string()}}}))
        .send()
        .await?;
    assert_eq!(created.status(), 200, "{}", gateway.log());
    let created: Value = created.json().await?;
    let sleep_task = created["taskId"].as_str().ok_or("no taskId")?.to_owned();

    // A small limit a few MB above what Redis holds now; the gateway refuses new tasks from
    // half of it on.
    let (baseline, _) = memory(redis).await?;
    let maxmemory = baseline + HEADROOM;
    set_maxmemory(redis, maxmemory).await?;

    let fill = json!({ "text": "x".repeat(FILL_BYTES) });
    let mut admitted = 0;
    let refusal = loop {
        let (status, retry_after, body) = invoke_echo(&base, &fill).await?;
        match status {
            200 => admitted += 1,
            503 => break (retry_after, body),
            other => {
                return Err(format!(
                    "invoke {admitted} answered {other}: {body}\n{}",
                    gateway.log()
                )
                .into());
            }
        }
        // Enough to fill the limit several times over: the mark must have stopped it by now.
        if admitted > 4 * HEADROOM / FILL_BYTES as u64 {
            return Err(format!("{admitted} large invokes admitted, never refused").into());
        }
    };
    let (retry_after, body) = refusal;
    assert!(admitted > 0, "the first invokes fit: {body}");
    assert!(retry_after.is_some(), "a refusal says when to retry");
    assert_eq!(body["error"]["code"], "service_unavailable", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("memory limit")),
        "the refusal names the store's memory, not an outage: {body}"
    );
    let (used, max) = memory(redis).await?;
    assert_eq!(max, maxmemory);
    assert!(used < max, "Redis stayed under maxmemory: {used} of {max}");

    // Refused still, and POST /tasks as well (the common admission path).
    let again = client
        .post(format!("{base}/tasks"))
        .header("Task-Access-Token", TOKEN)
        .json(&json!({"skillId": "echo", "message": {"role": "user", "content": {"text": "{}"}}}))
        .send()
        .await?;
    assert_eq!(again.status(), 503);
    assert!(again.headers().contains_key("retry-after"));

    // The task admitted before the fill runs now and its terminal write lands.
    let settings = worker_settings("sleep").map(|(key, value)| (key, value.to_owned()));
    let _sleep_worker = cluster::worker(redis, "w-sleep-2", &settings)?;
    let start = tokio::time::Instant::now();
    loop {
        let task: Value = client
            .get(format!("{base}/tasks/{sleep_task}"))
            .header("Task-Access-Token", TOKEN)
            .send()
            .await?
            .json()
            .await?;
        match task["status"].as_str() {
            Some("completed") => break,
            Some("running" | "submitted" | "working") | None => {}
            Some(other) => return Err(format!("the admitted task ended {other}: {task}").into()),
        }
        if start.elapsed() > PATIENCE {
            return Err(format!(
                "the admitted task never finished: {task}\n{}",
                echo_worker.log()
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (used, max) = memory(redis).await?;
    assert!(used < max, "Redis stayed under maxmemory: {used} of {max}");

    // More room: admission reopens by itself.
    set_maxmemory(redis, used * 4).await?;
    let small = json!({ "x": 1 });
    let start = tokio::time::Instant::now();
    loop {
        let (status, _, body) = invoke_echo(&base, &small).await?;
        if status == 200 {
            assert_eq!(body["output"], small);
            break;
        }
        assert_eq!(status, 503, "{body}");
        if start.elapsed() > PATIENCE {
            return Err("admission never reopened".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let log = gateway.log();
    assert_eq!(
        log.matches("reached the high-water mark").count(),
        1,
        "one log line per crossing: {log}"
    );
    assert_eq!(log.matches("below the high-water mark again").count(), 1);
    Ok(())
}

/// On a Redis Cluster the store reports every master's memory (each refuses writes on its own
/// once full), so the gateway's mark sees the fullest one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_store_reports_every_masters_memory() -> TestResult {
    use harness::redis_cluster::RedisCluster;
    use harness::store_fixtures::cluster_store_config;
    use store::{RedisStore, TaskStore};

    let cluster = RedisCluster::start(3, 1)?;
    let store = RedisStore::connect(cluster_store_config(cluster.urls(), 1, PATIENCE)).await?;
    let masters = cluster.masters()?;
    assert_eq!(masters.len(), 3);
    // A distinct limit on each master; replicas keep none (they are not asked).
    let mut expected = Vec::new();
    for (n, &index) in masters.iter().enumerate() {
        let limit = 64 * 1024 * 1024 + n as u64;
        set_maxmemory(cluster.node(index)?, limit).await?;
        expected.push((format!("127.0.0.1:{}", cluster.port(index)?), limit));
    }
    let mut fills = store.memory_fill().await?;
    fills.sort_by(|a, b| a.node.cmp(&b.node));
    expected.sort();
    let reported: Vec<(String, u64)> = fills
        .iter()
        .map(|fill| (fill.node.clone(), fill.max))
        .collect();
    assert_eq!(reported, expected, "{fills:?}");
    assert!(
        fills
            .iter()
            .all(|fill| fill.used > 0 && fill.ratio().is_some())
    );
    store.close().await;
    Ok(())
}
