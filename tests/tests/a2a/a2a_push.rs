//! A2A push notifications against real processes: a private redis-server, a worker hosting the
//! built-ins, gateways with push notifications on, and a webhook receiver on a loopback port
//! (`harness::webhook_receiver`) that records what it is sent and answers as told.
//!
//! One behaviour per test: configs created, read, listed and deleted on JSON-RPC and HTTP+JSON
//! (gRPC: `a2a_grpc.rs`), owned like their task and checked without calling their URL; a
//! streaming task's updates delivered in order with their headers, its outbox gone and its
//! configs expiring with the task once it finished; the SSRF policy refusing a host name that
//! resolves to loopback unless the allowlist names it; a delivery that keeps failing retried
//! a bounded number of times, then kept and counted; a gateway SIGKILLed in the middle of a
//! delivery losing none of it; one address's hanging receivers, under however many tokens,
//! never holding the slots kept for other addresses; a run that ended before its first
//! delivery told in order, each update stamped with its event's time; and an allowlist entry
//! admitting only the port it names.

use std::time::Duration;

use harness::TestResult;
use harness::a2a::A2a;
use harness::cluster::Cluster;
use harness::webhook_receiver::{Answer, Received, WebhookReceiver};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const TOKEN_A: &str = "push-suite-token-alpha-0123456789";
const TOKEN_B: &str = "push-suite-token-bravo-0123456789";

/// The client addresses of the fairness test (documentation range, RFC 5737).
const FLOOD_ADDRESS: &str = "203.0.113.7";
const VICTIM_ADDRESS: &str = "198.51.100.9";

/// How long a delivery may take to arrive.
const PATIENCE: Duration = Duration::from_secs(30);

/// Short worker leases, so a test never waits on a long one.
const WORKER: &[(&str, &str)] = &[("WORKER_LEASE_TTL_MS", "1000")];

async fn cluster(gateway: &[(&str, &str)]) -> TestResult<Cluster> {
    Cluster::builder()
        .worker("w1", WORKER)
        .gateway("g1", gateway)
        .skills(&["echo", "count", "sleep"])
        .start()
        .await
}

/// A JSON-RPC call to the first gateway as `token`: `(result, error)`.
async fn rpc(
    cluster: &Cluster,
    token: &str,
    method: &str,
    params: Value,
) -> TestResult<(Value, Value)> {
    rpc_from(cluster, token, None, method, params).await
}

/// [`rpc`] from client address `from` (one `X-Forwarded-For` hop from the loopback peer: the
/// gateway must run with `TRUST_FORWARDED_FOR=true`).
async fn rpc_from(
    cluster: &Cluster,
    token: &str,
    from: Option<&str>,
    method: &str,
    params: Value,
) -> TestResult<(Value, Value)> {
    let mut request = cluster.jsonrpc_request(Some(token), method, params);
    if let Some(from) = from {
        request = request.header("X-Forwarded-For", from);
    }
    let reply: Value = request.send().await?.json().await?;
    Ok((reply["result"].clone(), reply["error"].clone()))
}

/// An HTTP+JSON call to the first gateway as `token`: `(status, body)`.
async fn rest(
    cluster: &Cluster,
    token: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> TestResult<(StatusCode, Value)> {
    let (status, _, body) = A2a::new(cluster.http.clone(), cluster.base())
        .with_bearer(Some(token))
        .call(method, &format!("/a2a/v1{path}"), body)
        .await?;
    Ok((status, body))
}

/// `SendMessage` for `skill` with `data`, returning at once, with an inline push config when
/// given: the task's id.
async fn send(
    cluster: &Cluster,
    skill: &str,
    data: Value,
    push: Option<Value>,
) -> TestResult<String> {
    send_as(cluster, TOKEN_A, skill, data, push).await
}

/// [`send`] as the caller of `token`.
async fn send_as(
    cluster: &Cluster,
    token: &str,
    skill: &str,
    data: Value,
    push: Option<Value>,
) -> TestResult<String> {
    send_from(cluster, token, None, skill, data, push).await
}

/// [`send_as`] from client address `from` (see [`rpc_from`]).
async fn send_from(
    cluster: &Cluster,
    token: &str,
    from: Option<&str>,
    skill: &str,
    data: Value,
    push: Option<Value>,
) -> TestResult<String> {
    let mut configuration = json!({"returnImmediately": true});
    if let Some(push) = push {
        configuration["taskPushNotificationConfig"] = push;
    }
    let (result, error) = rpc_from(
        cluster,
        token,
        from,
        "SendMessage",
        json!({
            "message": {
                "messageId": format!("push-{skill}-{}", uuid()),
                "role": "ROLE_USER",
                "parts": [{"data": data}],
                "metadata": {"skillId": skill},
            },
            "configuration": configuration,
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

fn uuid() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!(
        "{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// The allowlist entry of the receiver's address and port (an entry without a port would
/// admit port 80 only).
fn loopback(receiver: &WebhookReceiver) -> String {
    format!("127.0.0.1:{}", receiver.port())
}

fn code(error: &Value) -> i64 {
    error["code"].as_i64().unwrap_or_default()
}

/// The state a delivered status update names, if it is one.
fn status_state(received: &Received) -> Option<&str> {
    received.body["statusUpdate"]["status"]["state"].as_str()
}

fn completed(requests: &[Received]) -> bool {
    requests
        .iter()
        .any(|request| status_state(request) == Some("TASK_STATE_COMPLETED"))
}

/// The redis keys of `pattern` in the cluster's Redis.
async fn keys(cluster: &Cluster, pattern: &str) -> TestResult<Vec<String>> {
    let mut redis = cluster.redis.client().await?;
    Ok(redis::cmd("KEYS")
        .arg(pattern)
        .query_async(&mut redis)
        .await?)
}

/// Waits until `pattern` matches a key (`present`: a task's event log, so the run's event) or
/// none (a push outbox, so the deliverer's release): events the test can only see in Redis.
async fn wait_for_keys(cluster: &Cluster, pattern: &str, present: bool) -> TestResult {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let found = keys(cluster, pattern).await?;
        if found.is_empty() != present {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err(if present {
                format!("{pattern} never appeared")
            } else {
                format!("keys {found:?} never went away")
            }
            .into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The exhausted deliveries kept in Redis.
async fn exhausted(cluster: &Cluster) -> TestResult<Vec<Value>> {
    let mut redis = cluster.redis.client().await?;
    let records: Vec<String> = redis::cmd("LRANGE")
        .arg("{tc}:push-exhausted")
        .arg(0)
        .arg(-1)
        .query_async(&mut redis)
        .await?;
    Ok(records
        .iter()
        .filter_map(|record| serde_json::from_str(record).ok())
        .collect())
}

async fn wait_for_exhausted(cluster: &Cluster, task_id: &str) -> TestResult<Value> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Some(record) = exhausted(cluster)
            .await?
            .into_iter()
            .find(|record| record["taskId"] == task_id)
        {
            return Ok(record);
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!("no exhausted delivery of {task_id} was kept").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn configs_are_created_read_listed_and_deleted_on_both_http_bindings() -> TestResult {
    let receiver = WebhookReceiver::start(Answer::Ok).await?;
    let allow = loopback(&receiver);
    let cluster = cluster(&[
        ("PUSH_ALLOWLIST", allow.as_str()),
        ("PUSH_MAX_CONFIGS", "3"),
    ])
    .await?;
    let card: Value = cluster
        .http
        .get(format!(
            "{}/a2a/.well-known/agent-card.json",
            cluster.base()
        ))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(card["capabilities"]["pushNotifications"], true, "{card}");
    let task = send(&cluster, "sleep", json!({"ms": 60_000}), None).await?;
    // `sleep` logs one progress event when its run starts; the configs below start after it,
    // so that none of them has anything to deliver.
    wait_for_keys(&cluster, &format!("{{tc}}:events:{task}"), true).await?;

    // JSON-RPC: create with an id and credentials, create without an id, get, list.
    let config = json!({
        "taskId": task,
        "id": "rpc-1",
        "url": receiver.url("/rpc"),
        "token": "notification-token-1",
        "authentication": {"scheme": "Bearer", "credentials": "hook-secret-1"},
    });
    let (created, error) = rpc(
        &cluster,
        TOKEN_A,
        "CreateTaskPushNotificationConfig",
        config.clone(),
    )
    .await?;
    assert!(error.is_null(), "{error}");
    assert_eq!(created, config);
    let (generated, error) = rpc(
        &cluster,
        TOKEN_A,
        "CreateTaskPushNotificationConfig",
        json!({"taskId": task, "url": receiver.url("/generated")}),
    )
    .await?;
    assert!(error.is_null(), "{error}");
    let generated_id = generated["id"]
        .as_str()
        .ok_or("no generated id")?
        .to_owned();
    assert!(!generated_id.is_empty());
    let (got, error) = rpc(
        &cluster,
        TOKEN_A,
        "GetTaskPushNotificationConfig",
        json!({"taskId": task, "id": "rpc-1"}),
    )
    .await?;
    assert!(error.is_null(), "{error}");
    assert_eq!(got, config);
    let (listed, _) = rpc(
        &cluster,
        TOKEN_A,
        "ListTaskPushNotificationConfigs",
        json!({"taskId": task}),
    )
    .await?;
    assert_eq!(
        listed["configs"].as_array().map(Vec::len),
        Some(2),
        "{listed}"
    );

    // HTTP+JSON: the body is the config, the path its task.
    let configs = format!("/tasks/{task}/pushNotificationConfigs");
    let (status, created) = rest(
        &cluster,
        TOKEN_A,
        Method::POST,
        &configs,
        Some(json!({"id": "rest-1", "url": receiver.url("/rest")})),
    )
    .await?;
    assert_eq!(status, StatusCode::OK, "{created}");
    assert_eq!(created["taskId"], task.as_str());
    let (status, got) = rest(
        &cluster,
        TOKEN_A,
        Method::GET,
        &format!("{configs}/rest-1"),
        None,
    )
    .await?;
    assert_eq!(
        (status, got["url"].clone()),
        (StatusCode::OK, json!(receiver.url("/rest")))
    );
    let (status, listed) = rest(&cluster, TOKEN_A, Method::GET, &configs, None).await?;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        listed["configs"].as_array().map(Vec::len),
        Some(3),
        "{listed}"
    );

    // A fourth config is past PUSH_MAX_CONFIGS.
    let (_, error) = rpc(
        &cluster,
        TOKEN_A,
        "CreateTaskPushNotificationConfig",
        json!({"taskId": task, "url": receiver.url("/fourth")}),
    )
    .await?;
    assert_eq!(code(&error), -32602, "{error}");

    // Another owner's task is not found, on both bindings.
    let (_, error) = rpc(
        &cluster,
        TOKEN_B,
        "CreateTaskPushNotificationConfig",
        json!({"taskId": task, "url": receiver.url("/b")}),
    )
    .await?;
    assert_eq!(code(&error), -32001, "{error}");
    let (_, error) = rpc(
        &cluster,
        TOKEN_B,
        "GetTaskPushNotificationConfig",
        json!({"taskId": task, "id": "rpc-1"}),
    )
    .await?;
    assert_eq!(code(&error), -32001, "{error}");
    let (status, _) = rest(&cluster, TOKEN_B, Method::GET, &configs, None).await?;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // What a config may not be: refused when it is created.
    for (bad, what) in [
        (
            json!({"url": "ftp://127.0.0.1/hook"}),
            "a scheme other than http(s)",
        ),
        (json!({"url": "http://user:pw@127.0.0.1/hook"}), "user info"),
        (
            json!({"url": "http://10.0.0.1/hook"}),
            "a private address off the allowlist",
        ),
        (
            json!({"url": "http://169.254.169.254/latest"}),
            "the metadata address",
        ),
        (
            json!({"url": receiver.url("/x"), "authentication": {"scheme": "Bearer", "credentials": "a\r\nX-Injected: 1"}}),
            "CR/LF in the credentials",
        ),
        (
            json!({"url": receiver.url("/x"), "authentication": {"scheme": "Bea rer", "credentials": "c"}}),
            "a scheme that is not a token",
        ),
        (
            json!({"url": receiver.url("/x"), "token": "t\nX-Injected: 1"}),
            "LF in the token",
        ),
    ] {
        let mut params = bad.clone();
        params["taskId"] = json!(task);
        let (_, error) = rpc(
            &cluster,
            TOKEN_A,
            "CreateTaskPushNotificationConfig",
            params,
        )
        .await?;
        assert_eq!(code(&error), -32602, "{what}: {error}");
        assert!(
            !error.to_string().contains("X-Injected"),
            "{what} echoed: {error}"
        );
    }

    // Deleting is idempotent; a deleted config is not found.
    for _ in 0..2 {
        let (result, error) = rpc(
            &cluster,
            TOKEN_A,
            "DeleteTaskPushNotificationConfig",
            json!({"taskId": task, "id": "rpc-1"}),
        )
        .await?;
        assert!(error.is_null(), "{error}");
        assert!(result.is_null(), "{result}");
        let (status, _) = rest(
            &cluster,
            TOKEN_A,
            Method::DELETE,
            &format!("{configs}/rest-1"),
            None,
        )
        .await?;
        assert_eq!(status, StatusCode::OK);
    }
    let (_, error) = rpc(
        &cluster,
        TOKEN_A,
        "GetTaskPushNotificationConfig",
        json!({"taskId": task, "id": "rpc-1"}),
    )
    .await?;
    assert_eq!(code(&error), -32001, "{error}");
    let (status, _) = rest(
        &cluster,
        TOKEN_A,
        Method::GET,
        &format!("{configs}/rest-1"),
        None,
    )
    .await?;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, listed) = rest(&cluster, TOKEN_A, Method::GET, &configs, None).await?;
    assert_eq!(
        listed["configs"][0]["id"],
        generated_id.as_str(),
        "{listed}"
    );

    // No config's URL was called: the task has published nothing yet.
    assert!(receiver.requests().is_empty(), "{:?}", receiver.requests());
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_streaming_task_is_delivered_in_order_with_its_headers() -> TestResult {
    let receiver = WebhookReceiver::start(Answer::Ok).await?;
    let allow = loopback(&receiver);
    let cluster = cluster(&[("PUSH_ALLOWLIST", allow.as_str())]).await?;
    let task = send(
        &cluster,
        "count",
        json!({"n": 4}),
        Some(json!({
            "url": receiver.url("/hook?source=test"),
            "token": "notification-token-9",
            "authentication": {"scheme": "Bearer", "credentials": "hook-secret-9"},
        })),
    )
    .await?;
    let requests = receiver
        .wait_for(PATIENCE, "the completed status", completed)
        .await?;
    for request in &requests {
        assert_eq!(
            request.headers.get("content-type").map(String::as_str),
            Some("application/a2a+json")
        );
        assert_eq!(
            request.headers.get("authorization").map(String::as_str),
            Some("Bearer hook-secret-9")
        );
        assert_eq!(
            request
                .headers
                .get("x-a2a-notification-token")
                .map(String::as_str),
            Some("notification-token-9")
        );
        assert_eq!(request.path, "/hook");
    }
    assert_eq!(
        status_state(&requests[0]),
        Some("TASK_STATE_WORKING"),
        "{:?}",
        requests[0].body
    );
    let last = requests.last().ok_or("no request")?;
    assert_eq!(
        status_state(last),
        Some("TASK_STATE_COMPLETED"),
        "{:?}",
        last.body
    );
    assert_eq!(last.body["statusUpdate"]["taskId"], task.as_str());
    // The four deltas, in order, each once.
    let deltas: Vec<Value> = requests
        .iter()
        .filter(|request| {
            request.body["artifactUpdate"]["artifact"]["artifactId"] == format!("{task}-stream")
        })
        .map(|request| request.body["artifactUpdate"]["artifact"]["parts"][0].clone())
        .collect();
    assert_eq!(deltas.len(), 4, "{deltas:?}");
    let numbers: Vec<String> = deltas.iter().map(|part| part.to_string()).collect();
    for (i, text) in numbers.iter().enumerate() {
        assert!(text.contains(&(i + 1).to_string()), "delta {i} is {text}");
    }
    // Delivered to its end: the outbox is gone, and the config expires with its task.
    wait_for_keys(&cluster, &format!("{{tc}}:push-out:{task}"), false).await?;
    let mut redis = cluster.redis.client().await?;
    let config_ttl: i64 = redis::cmd("PTTL")
        .arg(format!("{{tc}}:push:{task}"))
        .query_async(&mut redis)
        .await?;
    let task_ttl: i64 = redis::cmd("PTTL")
        .arg(format!("{{tc}}:task:{task}"))
        .query_async(&mut redis)
        .await?;
    // Read one after the other: the task's has ticked on a little meanwhile.
    assert!(
        config_ttl > 0 && config_ttl <= task_ttl + 5_000,
        "config {config_ttl} ms, task {task_ttl} ms"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_resolving_to_loopback_is_refused_unless_the_allowlist_names_it() -> TestResult {
    let receiver = WebhookReceiver::start(Answer::Ok).await?;
    // No allowlist: public addresses only.
    let guarded = cluster(&[("METRICS_LISTEN", "main")]).await?;
    // The IP literal needs no lookup: refused when the config is created.
    let waiting = send(&guarded, "sleep", json!({"ms": 60_000}), None).await?;
    let (_, error) = rpc(
        &guarded,
        TOKEN_A,
        "CreateTaskPushNotificationConfig",
        json!({"taskId": waiting, "url": receiver.url("/literal")}),
    )
    .await?;
    assert_eq!(code(&error), -32602, "{error}");
    // A host name is taken when created, and refused at the connection: given up at once.
    let task = send(
        &guarded,
        "echo",
        json!({"hello": "guarded"}),
        Some(json!({"url": receiver.localhost_url("/guarded")})),
    )
    .await?;
    let record = wait_for_exhausted(&guarded, &task).await?;
    assert_eq!(record["host"], "localhost", "{record}");
    assert!(
        record["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("not allowed"),
        "{record}"
    );
    assert!(receiver.requests_to("/guarded").is_empty());
    let metrics = guarded
        .http
        .get(format!("{}/metrics", guarded.base()))
        .send()
        .await?
        .text()
        .await?;
    assert!(
        metrics
            .lines()
            .any(|line| line.starts_with("taskcluster_push_deliveries_total")
                && line.contains("outcome=\"exhausted\"")
                && !line.ends_with(" 0")),
        "{metrics}"
    );

    // The same host on the allowlist: delivered.
    let allow = format!("localhost:{}", receiver.port());
    let allowed = cluster(&[("PUSH_ALLOWLIST", allow.as_str())]).await?;
    send(
        &allowed,
        "echo",
        json!({"hello": "allowed"}),
        Some(json!({"url": receiver.localhost_url("/allowed")})),
    )
    .await?;
    receiver
        .wait_for(PATIENCE, "the allowed delivery", |requests| {
            requests
                .iter()
                .any(|r| r.path == "/allowed" && status_state(r) == Some("TASK_STATE_COMPLETED"))
        })
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_receiver_gets_a_bounded_number_of_attempts_then_the_delivery_is_kept()
-> TestResult {
    let receiver = WebhookReceiver::start(Answer::Status(503)).await?;
    let allow = loopback(&receiver);
    let cluster = cluster(&[
        ("PUSH_ALLOWLIST", allow.as_str()),
        ("PUSH_MAX_ATTEMPTS", "3"),
        ("PUSH_RETRY_BASE_MS", "20"),
        ("PUSH_RETRY_CAP_MS", "100"),
    ])
    .await?;
    let task = send(
        &cluster,
        "echo",
        json!({"n": 1}),
        Some(json!({"url": receiver.url("/down")})),
    )
    .await?;
    let record = wait_for_exhausted(&cluster, &task).await?;
    assert_eq!(record["attempts"], 3, "{record}");
    assert!(
        record["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("503"),
        "{record}"
    );
    // Three attempts at the first update of the run's one event (its end: `working`, its
    // artifact, `completed`), then none: the event is given up whole.
    let attempts = receiver.requests_to("/down");
    assert_eq!(attempts.len(), 3, "{attempts:?}");
    assert!(
        attempts
            .iter()
            .all(|r| status_state(r) == Some("TASK_STATE_WORKING"))
    );
    wait_for_keys(&cluster, &format!("{{tc}}:push-out:{task}"), false).await?;
    assert_eq!(receiver.requests_to("/down").len(), 3);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gateway_killed_mid_delivery_loses_no_delivery() -> TestResult {
    // The receiver holds the first delivery open: the gateway is killed while it waits.
    let receiver = WebhookReceiver::start(Answer::Hang).await?;
    let allow = loopback(&receiver);
    let settings = [
        ("PUSH_ALLOWLIST", allow.as_str()),
        ("PUSH_CLAIM_MS", "1500"),
    ];
    let mut cluster = cluster(&settings).await?;
    let task = send(
        &cluster,
        "count",
        json!({"n": 3}),
        Some(json!({"url": receiver.url("/hook")})),
    )
    .await?;
    receiver
        .wait_for(PATIENCE, "a first delivery", |requests| {
            !requests.is_empty()
        })
        .await?;
    cluster.gateways[0].process.kill()?;
    receiver.answer(Answer::Ok);
    // Another gateway takes the task over once the dead one's claim expires.
    cluster.add_gateway("g2", &settings).await?;
    let requests = receiver
        .wait_for(PATIENCE, "the completed status", completed)
        .await?;
    // At least once, in order: duplicates only of what was not confirmed, never a reordering.
    let stream = format!("{task}-stream");
    let mut seen: Vec<String> = Vec::new();
    for request in &requests {
        let artifact = &request.body["artifactUpdate"]["artifact"];
        let key = match status_state(request) {
            Some(state) => state.to_owned(),
            None if artifact["artifactId"] == stream.as_str() => artifact["parts"][0].to_string(),
            None => "result".to_owned(),
        };
        if seen.last() != Some(&key) {
            seen.push(key);
        }
    }
    let expected = [
        "TASK_STATE_WORKING",
        r#"{"data":1}"#,
        r#"{"data":2}"#,
        r#"{"data":3}"#,
        "result",
        "TASK_STATE_COMPLETED",
    ];
    assert_eq!(seen, expected, "{requests:#?}");
    // The first delivery was never confirmed to the killed gateway: it was made again.
    let working = requests
        .iter()
        .filter(|request| status_state(request) == Some("TASK_STATE_WORKING"))
        .count();
    assert!(working >= 2, "{seen:?}");
    wait_for_keys(&cluster, &format!("{{tc}}:push-out:{task}"), false).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_addresss_hanging_receivers_leave_other_addresses_a_slot_whatever_its_tokens()
-> TestResult {
    let receiver = WebhookReceiver::start(Answer::Ok).await?;
    receiver.answer_path("/flood", Answer::Hang);
    // Four slots: one is each address's share and one is kept for addresses with nothing under
    // way, so the flood's tasks get three at most. Client addresses come from a single
    // X-Forwarded-For hop, trusted from the loopback peer.
    let allow = loopback(&receiver);
    let cluster = cluster(&[
        ("PUSH_ALLOWLIST", allow.as_str()),
        ("PUSH_CONCURRENCY", "4"),
        ("TRUST_FORWARDED_FOR", "true"),
    ])
    .await?;
    // Eight tasks under eight fresh tokens, all from one address: minting buys no slots.
    for n in 0..8 {
        let token = format!("push-suite-flood-token-{n}-0123456789abcdef");
        send_from(
            &cluster,
            &token,
            Some(FLOOD_ADDRESS),
            "echo",
            json!({ "flood": n }),
            Some(json!({"url": receiver.url("/flood")})),
        )
        .await?;
    }
    // The flood takes its share and the free slots, all but the reserve.
    receiver
        .wait_for(PATIENCE, "three of the flood's deliveries", |requests| {
            requests
                .iter()
                .filter(|request| request.path == "/flood")
                .count()
                >= 3
        })
        .await?;
    // A caller from another address gets its notification while the flood's receiver hangs.
    send_from(
        &cluster,
        TOKEN_A,
        Some(VICTIM_ADDRESS),
        "echo",
        json!({"victim": true}),
        Some(json!({"url": receiver.url("/victim")})),
    )
    .await?;
    receiver
        .wait_for(PATIENCE, "the other address's delivery", |requests| {
            requests
                .iter()
                .any(|r| r.path == "/victim" && status_state(r) == Some("TASK_STATE_COMPLETED"))
        })
        .await?;
    // The flood never had a fourth: the other address took the reserve.
    assert_eq!(
        receiver.most_open("/flood"),
        3,
        "the flood held the reserve, or less than its share and the free slots"
    );
    Ok(())
}

/// The time a status update says (its `status.timestamp`), as Unix ms.
fn stamp_ms(received: &Received) -> TestResult<i64> {
    let text = received.body["statusUpdate"]["status"]["timestamp"]
        .as_str()
        .ok_or_else(|| format!("no timestamp in {}", received.body))?;
    Ok(chrono::DateTime::parse_from_rfc3339(text)?.timestamp_millis())
}

/// Issue 36, item 9: a run that ends before its first delivery is rendered, for each update,
/// at delivery time. Its `working` update must still come before `completed` and say the
/// time of the event that told it (the run's end), not the time it was sent: a receiver that
/// orders or deduplicates by timestamp must not see the task work after it completed.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_that_ends_before_its_first_delivery_is_told_in_order_at_its_events_times()
-> TestResult {
    let receiver = WebhookReceiver::start(Answer::Hang).await?;
    // One delivery slot, held by a first task's receiver: the raced task's first claim can
    // only come once its run is over.
    let allow = loopback(&receiver);
    let cluster = cluster(&[
        ("PUSH_ALLOWLIST", allow.as_str()),
        ("PUSH_CONCURRENCY", "1"),
    ])
    .await?;
    send(
        &cluster,
        "echo",
        json!({"hold": true}),
        Some(json!({"url": receiver.url("/hold")})),
    )
    .await?;
    receiver
        .wait_for(PATIENCE, "the held delivery", |requests| {
            requests.iter().any(|request| request.path == "/hold")
        })
        .await?;
    // The raced task: created, run and finished while the only slot is held (a blocking send
    // answers once it finished).
    let (result, error) = rpc(
        &cluster,
        TOKEN_A,
        "SendMessage",
        json!({
            "message": {
                "messageId": format!("push-raced-{}", uuid()),
                "role": "ROLE_USER",
                "parts": [{"data": {"raced": true}}],
                "metadata": {"skillId": "echo"},
            },
            "configuration": {
                "returnImmediately": false,
                "taskPushNotificationConfig": {"url": receiver.url("/raced")},
            },
        }),
    )
    .await?;
    assert!(error.is_null(), "{error}");
    let task = &result["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{result}");
    let finished = task["status"]["timestamp"]
        .as_str()
        .ok_or_else(|| format!("no status timestamp in {result}"))?;
    let finished_ms = chrono::DateTime::parse_from_rfc3339(finished)?.timestamp_millis();
    // Every delivery of the raced task is rendered after this: past the end's millisecond.
    loop {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
        if i64::try_from(now.as_millis())? > finished_ms {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    receiver.answer(Answer::Ok);
    receiver
        .wait_for(PATIENCE, "the raced task's completed status", |requests| {
            requests
                .iter()
                .any(|r| r.path == "/raced" && status_state(r) == Some("TASK_STATE_COMPLETED"))
        })
        .await?;
    let raced = receiver.requests_to("/raced");
    let states: Vec<&str> = raced.iter().filter_map(status_state).collect();
    assert_eq!(
        states,
        ["TASK_STATE_WORKING", "TASK_STATE_COMPLETED"],
        "{raced:#?}"
    );
    let stamps = raced
        .iter()
        .filter(|request| status_state(request).is_some())
        .map(stamp_ms)
        .collect::<TestResult<Vec<i64>>>()?;
    // Each update says when its event happened: the run's end, as the task records it.
    assert_eq!(
        stamps,
        [finished_ms, finished_ms],
        "working then completed, stamped {stamps:?}; the task finished at {finished}"
    );
    Ok(())
}

/// Issue 36, item 8b: an allowlist entry admits the port it names, and an entry without one
/// only the URL scheme's (80 or 443), not every port of its host: allowing a receiver must not
/// open the host's other services (Redis, an admin port) to whoever creates a config.
#[tokio::test(flavor = "multi_thread")]
async fn an_allowlisted_host_is_reached_only_on_the_port_its_entry_names() -> TestResult {
    let receiver = WebhookReceiver::start(Answer::Ok).await?;
    // The receiver's host and address, without a port: http's 80 only, never the receiver's.
    let guarded = cluster(&[("PUSH_ALLOWLIST", "127.0.0.1,localhost")]).await?;
    // An IP literal: refused when the config is created, as any SSRF refusal is.
    let waiting = send(&guarded, "sleep", json!({"ms": 60_000}), None).await?;
    let (_, error) = rpc(
        &guarded,
        TOKEN_A,
        "CreateTaskPushNotificationConfig",
        json!({"taskId": waiting, "url": receiver.url("/literal")}),
    )
    .await?;
    assert_eq!(code(&error), -32602, "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap_or_default()
            .contains("webhook host 127.0.0.1 is not allowed: 127.0.0.1 is loopback"),
        "{error}"
    );
    // A host name is taken when created (it is not resolved then), and refused at the
    // connection: given up at once, never sent.
    let task = send(
        &guarded,
        "echo",
        json!({"port": "unlisted"}),
        Some(json!({"url": receiver.localhost_url("/named")})),
    )
    .await?;
    let record = wait_for_exhausted(&guarded, &task).await?;
    assert_eq!(record["host"], "localhost", "{record}");
    assert!(
        record["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("not allowed"),
        "{record}"
    );
    assert!(receiver.requests().is_empty(), "{:?}", receiver.requests());

    // Entries naming the receiver's port: both forms delivered.
    let allowlist = format!("127.0.0.1:{0},localhost:{0}", receiver.port());
    let open = cluster(&[("PUSH_ALLOWLIST", allowlist.as_str())]).await?;
    for (path, url) in [
        ("/literal", receiver.url("/literal")),
        ("/named", receiver.localhost_url("/named")),
    ] {
        send(
            &open,
            "echo",
            json!({"path": path}),
            Some(json!({"url": url})),
        )
        .await?;
        receiver
            .wait_for(PATIENCE, path, |requests| {
                requests
                    .iter()
                    .any(|r| r.path == path && status_state(r) == Some("TASK_STATE_COMPLETED"))
            })
            .await?;
    }
    Ok(())
}
