//! Push notification configs are bytes a caller makes the cluster keep, bounded like a task's,
//! against real processes (a private redis-server, a worker, a gateway): a finished task's
//! configs count in its retained bytes and go with it when it is evicted; config writes stop
//! at the Redis memory high-water mark with the answer a new task gets there, before Redis
//! refuses anyone; and creating configs is rate limited on JSON-RPC, HTTP+JSON and gRPC alike.

use std::time::Duration;

use a2a_pb::a2a_service_client::A2aServiceClient;
use harness::TestResult;
use harness::a2a::A2a;
use harness::cluster::{Cluster, free_port};
use harness::redis_server::RedisOptions;
use serde_json::{Value, json};
use tonic::{Code, Request};

const TOKEN: &str = "push-bounds-token-alpha-0123456789";

/// How long a task may take to finish.
const PATIENCE: Duration = Duration::from_secs(30);

/// A JSON-RPC call to the first gateway as `token`: `(HTTP status, result, error)`.
async fn rpc(
    cluster: &Cluster,
    token: &str,
    method: &str,
    params: Value,
) -> TestResult<(u16, Value, Value)> {
    let (status, reply) = cluster.jsonrpc(Some(token), method, params).await?;
    Ok((status, reply["result"].clone(), reply["error"].clone()))
}

/// `SendMessage` of an `echo` task as `token`, answered at once: its id.
async fn send(cluster: &Cluster, token: &str, n: usize) -> TestResult<String> {
    let (_, result, error) = rpc(
        cluster,
        token,
        "SendMessage",
        json!({
            "message": {
                "messageId": format!("bounds-{}-{n}", std::process::id()),
                "role": "ROLE_USER",
                "parts": [{"data": {"n": n}}],
                "metadata": {"skillId": "echo"},
            },
            "configuration": {"returnImmediately": true},
        }),
    )
    .await?;
    if !error.is_null() {
        return Err(format!("SendMessage refused: {error}").into());
    }
    Ok(result["task"]["id"]
        .as_str()
        .ok_or_else(|| format!("no task in {result}"))?
        .to_owned())
}

/// Waits until task `id` is completed (the worker's terminal write is the event; the test
/// can only see it by reading the task).
async fn wait_completed(cluster: &Cluster, token: &str, id: &str) -> TestResult {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let (_, task, _) = rpc(cluster, token, "GetTask", json!({ "id": id })).await?;
        if task["status"]["state"] == "TASK_STATE_COMPLETED" {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!("task {id} never completed: {task}").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The largest config the gateway takes: a 2 KiB URL, 4 KiB of `Authorization`, a 512-byte
/// token (about 6.7 KB).
fn big_config(task_id: &str, n: usize) -> Value {
    let url = format!("https://hooks.example/{}", "u".repeat(2000));
    json!({
        "taskId": task_id,
        "id": format!("big-{n}"),
        "url": url,
        "token": "t".repeat(512),
        "authentication": {"scheme": "Bearer", "credentials": "c".repeat(4000)},
    })
}

async fn redis_int(cluster: &Cluster, cmd: &mut redis::Cmd) -> TestResult<i64> {
    let mut redis = cluster.redis.client().await?;
    let value: Option<i64> = cmd.query_async(&mut redis).await?;
    Ok(value.unwrap_or(0))
}

async fn exists(cluster: &Cluster, key: &str) -> TestResult<bool> {
    Ok(redis_int(cluster, redis::cmd("EXISTS").arg(key)).await? == 1)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_finished_tasks_configs_count_in_its_retained_bytes_and_go_when_it_is_evicted()
-> TestResult {
    // One retained task per owner: the owner's next task evicts its previous one.
    let cluster = Cluster::builder()
        .worker("w1", &[("WORKER_LEASE_TTL_MS", "1000")])
        .gateway("g1", &[("MAX_RETAINED_PER_OWNER", "1")])
        .skills(&["echo"])
        .start()
        .await?;
    let first = send(&cluster, TOKEN, 1).await?;
    wait_completed(&cluster, TOKEN, &first).await?;
    let before = redis_int(&cluster, redis::cmd("GET").arg("{tc}:terminal:bytes")).await?;
    assert!(before > 0, "the finished task is counted");

    // Ten of the largest configs on the finished task.
    for n in 0..10 {
        let (_, _, error) = rpc(
            &cluster,
            TOKEN,
            "CreateTaskPushNotificationConfig",
            big_config(&first, n),
        )
        .await?;
        assert!(error.is_null(), "config {n} refused: {error}");
    }
    let configs = format!("{{tc}}:push:{first}");
    let held = redis_int(
        &cluster,
        redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(&configs)
            .arg("SAMPLES")
            .arg(0),
    )
    .await?;
    assert!(held > 60_000, "ten configs take {held} bytes");
    let after = redis_int(&cluster, redis::cmd("GET").arg("{tc}:terminal:bytes")).await?;
    assert!(
        after >= before + held,
        "the retained bytes ({after}, {before} before) leave out the configs' {held} bytes"
    );

    // Deleting half of them takes their bytes back.
    for n in 0..5 {
        let (_, _, error) = rpc(
            &cluster,
            TOKEN,
            "DeleteTaskPushNotificationConfig",
            json!({"taskId": first, "id": format!("big-{n}")}),
        )
        .await?;
        assert!(error.is_null(), "delete {n}: {error}");
    }
    let half = redis_int(&cluster, redis::cmd("GET").arg("{tc}:terminal:bytes")).await?;
    assert!(before < half && half < after, "{before} < {half} < {after}");

    // The owner's next task evicts the first: its configs and cursors go with it.
    let second = send(&cluster, TOKEN, 2).await?;
    let (_, task, _) = rpc(&cluster, TOKEN, "GetTask", json!({ "id": first })).await?;
    assert!(task.is_null(), "the first task was evicted: {task}");
    assert!(!exists(&cluster, &configs).await?, "the configs stayed");
    assert!(
        !exists(&cluster, &format!("{{tc}}:push-cur:{first}")).await?,
        "the cursors stayed"
    );
    wait_completed(&cluster, TOKEN, &second).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn config_writes_stop_at_the_memory_high_water_mark_before_redis_refuses_anyone() -> TestResult
{
    let cluster = Cluster::builder()
        .redis(
            RedisOptions::default()
                .arg("--maxmemory-policy")
                .arg("noeviction"),
        )
        .worker("w1", &[("WORKER_LEASE_TTL_MS", "1000")])
        .gateway(
            "g1",
            &[
                ("REDIS_MEMORY_HIGH_WATER", "90"),
                ("REDIS_MEMORY_CHECK_MS", "20"),
                ("RATE_PER_ADDRESS", "0"),
                ("RATE_PER_OWNER", "0"),
            ],
        )
        .skills(&["echo"])
        .start()
        .await?;
    // Finished tasks to hang configs on, created before the limit.
    let mut tasks = Vec::new();
    for n in 0..80 {
        tasks.push(send(&cluster, TOKEN, n).await?);
    }
    for task in &tasks {
        wait_completed(&cluster, TOKEN, task).await?;
    }
    // A limit 2 MB above what Redis holds now: configs alone would pass it three times over.
    let mut redis = cluster.redis.client().await?;
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut redis)
        .await?;
    let used = |info: &str| -> TestResult<u64> {
        Ok(info
            .lines()
            .find_map(|line| line.trim_end().strip_prefix("used_memory:"))
            .ok_or("no used_memory")?
            .parse()?)
    };
    let maxmemory = used(&info)? + 2 * 1024 * 1024;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(maxmemory)
        .query_async(&mut redis)
        .await?;

    let mut stored = 0;
    let refusal = 'fill: {
        for task in &tasks {
            for n in 0..10 {
                let (_, _, error) = rpc(
                    &cluster,
                    TOKEN,
                    "CreateTaskPushNotificationConfig",
                    big_config(task, n),
                )
                .await?;
                if !error.is_null() {
                    break 'fill error;
                }
                stored += 1;
            }
        }
        return Err(format!("{stored} configs stored, never refused").into());
    };
    assert!(stored > 0, "the first configs fit: {refusal}");
    assert!(
        refusal["message"]
            .as_str()
            .is_some_and(|message| message.contains("memory limit")),
        "the refusal names the store's memory, as a new task's does: {refusal}"
    );
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut redis)
        .await?;
    let now = used(&info)?;
    assert!(
        now < maxmemory,
        "Redis stayed under maxmemory: {now} of {maxmemory}"
    );
    // Other writers still write: a plain SET is not refused with OOM.
    let _: () = redis::cmd("SET")
        .arg("{tc}:probe")
        .arg("x")
        .query_async(&mut redis)
        .await?;
    // A new task gets the same answer.
    let (_, _, error) = rpc(
        &cluster,
        TOKEN,
        "SendMessage",
        json!({
            "message": {"messageId": "after-fill", "role": "ROLE_USER",
                "parts": [{"data": {}}], "metadata": {"skillId": "echo"}},
            "configuration": {"returnImmediately": true},
        }),
    )
    .await?;
    assert_eq!(error["code"], refusal["code"], "{error}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn creating_configs_is_rate_limited_on_every_binding() -> TestResult {
    let port = free_port()?;
    let listen = format!("127.0.0.1:{port}");
    // Four calls per owner, then none for a long while (0.01 a second).
    let cluster = Cluster::builder()
        .worker("w1", &[("WORKER_LEASE_TTL_MS", "1000")])
        .gateway(
            "g1",
            &[
                ("GRPC_LISTEN", listen.as_str()),
                ("RATE_PER_OWNER", "0.01"),
                ("RATE_BURST", "4"),
                ("RATE_PER_ADDRESS", "0"),
            ],
        )
        .skills(&["echo"])
        .start()
        .await?;
    // The task's creation takes one of the four; one config on each binding the other three.
    let task = send(&cluster, TOKEN, 1).await?;
    let config = |id: &str| json!({"taskId": task, "id": id, "url": "https://hooks.example/a"});
    let (_, _, error) = rpc(
        &cluster,
        TOKEN,
        "CreateTaskPushNotificationConfig",
        config("rpc"),
    )
    .await?;
    assert!(error.is_null(), "{error}");
    let a2a = A2a::new(cluster.http.clone(), cluster.base()).with_bearer(Some(TOKEN));
    let configs = a2a.rest_url(&format!("/tasks/{task}/pushNotificationConfigs"));
    let rest = |id: &str| {
        a2a.request(reqwest::Method::POST, &configs)
            .json(&config(id))
    };
    assert_eq!(rest("rest").send().await?.status(), 200);
    let mut grpc = A2aServiceClient::connect(format!("http://{listen}")).await?;
    let grpc_call = |id: &str| -> TestResult<Request<a2a_pb::TaskPushNotificationConfig>> {
        let mut request = Request::new(a2a_pb::TaskPushNotificationConfig {
            task_id: task.clone(),
            id: id.into(),
            url: "https://hooks.example/a".into(),
            ..Default::default()
        });
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {TOKEN}").parse()?);
        request.metadata_mut().insert("a2a-version", "1.0".parse()?);
        Ok(request)
    };
    grpc.create_task_push_notification_config(grpc_call("grpc")?)
        .await?;

    // The owner's quota is spent: each binding refuses the next config as it refuses a send.
    let (status, _, error) = rpc(
        &cluster,
        TOKEN,
        "CreateTaskPushNotificationConfig",
        config("rpc-2"),
    )
    .await?;
    assert_eq!(
        (status, error["code"].as_i64()),
        (429, Some(-32000)),
        "{error}"
    );
    let refused = rest("rest-2").send().await?;
    assert_eq!(refused.status(), 429);
    assert!(refused.headers().contains_key("retry-after"));
    let body: Value = refused.json().await?;
    assert_eq!(body["error"]["status"], "RESOURCE_EXHAUSTED", "{body}");
    let status = grpc
        .create_task_push_notification_config(grpc_call("grpc-2")?)
        .await
        .err()
        .ok_or("a gRPC config past the quota was stored")?;
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    // Only the three configs that passed were stored; reading is not charged.
    let (_, listed, error) = rpc(
        &cluster,
        TOKEN,
        "ListTaskPushNotificationConfigs",
        json!({ "taskId": task }),
    )
    .await?;
    assert!(error.is_null(), "{error}");
    assert_eq!(
        listed["configs"].as_array().map(Vec::len),
        Some(3),
        "{listed}"
    );
    Ok(())
}
