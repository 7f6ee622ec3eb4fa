//! An operator pauses and resumes an entrypoint cluster-wide, against real processes (a
//! private redis-server, a `worker` hosting `echo` and `sleep`, a `gateway` with an operator
//! token), through `taskctl admin pause|resume|audit` and the console API it calls.
//!
//! What is proven: a task of a paused entrypoint is accepted and stays queued (untaken, no
//! lease) while another entrypoint's tasks run; the pause survives the worker (a worker started
//! while it stands takes none of its tasks); resuming runs the queued task; `--refuse` makes
//! creating a task of it (`POST /tasks`, invoke, an A2A send) `503` with Retry-After; the
//! Lucid card, the A2A card (a `paused` tag) and the console overview show the pause; the audit log lists
//! the actions newest first under the operator key's fingerprint; refusals: no operator token,
//! a wrong one, an unknown entrypoint, a malformed body.
//!
//! "Stays queued" is checked after an event (another entrypoint's task completed on the same
//! worker), never after a fixed sleep; the worker learning a pause is an event too (its log).

use std::time::Duration;

use harness::TestResult;
use harness::cluster::Cluster;
use harness::process::{ServiceProcess, plain};
use reqwest::StatusCode;
use serde_json::{Value, json};
use store::{RedisStore, RedisStoreConfig, TaskStore};

const OPERATOR_TOKEN: &str = "pause-suite-operator-token-0123456789abcdef";
const TOKEN: &str = "pause-suite-task-access-token";
const PATIENCE: Duration = Duration::from_secs(30);
/// Short leases: the worker reads the pauses on every heartbeat (a third of this).
const WORKER: &[(&str, &str)] = &[("WORKER_LEASE_TTL_MS", "1500")];

/// `taskctl --json admin ARGS` as the operator (or with `token`): exit code and JSON answer.
async fn admin(args: &[&str], token: Option<&str>) -> TestResult<(i32, Value)> {
    harness::operator::taskctl_admin(args, token).await
}

/// Polls `check` until it holds, within [`PATIENCE`].
async fn until(what: &str, check: impl AsyncFnMut() -> TestResult<bool>) -> TestResult {
    harness::operator::until(what, PATIENCE, check).await
}

/// The worker has logged `count` changes of its paused set, the last one to `set` (as its
/// log prints it, e.g. `{"sleep"}`).
async fn worker_knows(worker: &ServiceProcess, count: usize, set: &str) -> TestResult {
    until(
        &format!("{} logs paused {set}", worker.name()),
        async || {
            let log = plain(&worker.log());
            let changes: Vec<&str> = log
                .lines()
                .filter(|line| line.contains("paused entrypoints changed"))
                .collect();
            Ok(changes.len() >= count
                && changes
                    .last()
                    .is_some_and(|line| line.contains(&format!("paused={set}"))))
        },
    )
    .await
}

/// `POST /tasks` of `skill`: the status, the Retry-After header and the body.
async fn create(
    cluster: &Cluster,
    skill: &str,
    text: &str,
) -> TestResult<(StatusCode, Option<String>, Value)> {
    let response = cluster
        .http
        .post(format!("{}/tasks", cluster.base()))
        .header("Task-Access-Token", TOKEN)
        .json(&json!({"skillId": skill, "message": {"role": "user", "content": {"text": text}}}))
        .send()
        .await?;
    let status = response.status();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    Ok((status, retry_after, response.json().await?))
}

/// Creates a task of `skill` and returns its id.
async fn created(cluster: &Cluster, skill: &str, text: &str) -> TestResult<String> {
    let (status, _, body) = create(cluster, skill, text).await?;
    assert!(status.is_success(), "{status} {body}");
    Ok(body["taskId"].as_str().ok_or("no task id")?.to_owned())
}

async fn completed(store: &RedisStore, task_id: &str) -> TestResult {
    until(&format!("{task_id} completed"), async || {
        let task = store.get(task_id).await?.ok_or("task gone")?;
        assert!(
            !task.task.status.is_terminal() || task.task.status.as_str() == "completed",
            "{task_id}: {}",
            task.task.status.as_str()
        );
        Ok(task.task.status.is_terminal())
    })
    .await
}

/// The task is in the queue, taken by nobody: no lease, no attempt.
async fn assert_queued(store: &RedisStore, task_id: &str, entrypoint: &str) -> TestResult {
    let task = store.get(task_id).await?.ok_or("task gone")?;
    assert!(task.lease.is_none(), "{task_id} was taken");
    assert_eq!(task.attempt, 0, "{task_id} was run");
    assert!(!task.task.status.is_terminal());
    assert_eq!(store.queue_depth(entrypoint).await?, 1);
    Ok(())
}

/// The gateway's card, once `ready` holds for it (a pause reaches it with its next listing).
async fn card_until(cluster: &Cluster, ready: impl Fn(&Value) -> bool) -> TestResult<Value> {
    let url = format!("{}/.well-known/agent-card.json", cluster.base());
    let mut card = Value::Null;
    until("the card shows it", async || {
        card = cluster.http.get(&url).send().await?.json().await?;
        Ok(ready(&card))
    })
    .await?;
    Ok(card)
}

async fn post_console(
    cluster: &Cluster,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> TestResult<(StatusCode, Value)> {
    let mut request = cluster
        .http
        .post(format!("{}/console/api/{path}", cluster.base()))
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await?;
    let status = response.status();
    Ok((status, response.json().await.unwrap_or(Value::Null)))
}

#[tokio::test]
async fn an_operator_pauses_and_resumes_an_entrypoint_cluster_wide() -> TestResult {
    let mut cluster = Cluster::builder()
        .worker("w1", WORKER)
        .gateway("g1", &[("OPERATOR_TOKEN", OPERATOR_TOKEN)])
        .skills(&["echo", "sleep"])
        .start()
        .await?;
    let store = RedisStore::connect(RedisStoreConfig::new(cluster.redis.url())).await?;
    let base = cluster.base().to_owned();

    // Refusals first: nothing is paused by them.
    let (code, _) = admin(&["pause", &base, "sleep"], None).await?;
    assert_ne!(code, 0, "no operator token");
    let (status, _) = post_console(&cluster, "entrypoints/sleep/pause", None, "{}").await?;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = post_console(
        &cluster,
        "entrypoints/sleep/pause",
        Some("a-wrong-operator-token-0123456789abcdef"),
        "{}",
    )
    .await?;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (code, answer) = admin(
        &["pause", &base, "sleep"],
        Some("a-wrong-operator-token-0123456789abcdef"),
    )
    .await?;
    assert_ne!(code, 0, "{answer}");
    let (status, body) = post_console(
        &cluster,
        "entrypoints/sleep/pause",
        Some(OPERATOR_TOKEN),
        r#"{"mode":"later"}"#,
    )
    .await?;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["error"]["code"], "invalid_request");
    let (code, answer) =
        admin(&["pause", &base, "nobody-hosts-this"], Some(OPERATOR_TOKEN)).await?;
    assert_ne!(code, 0);
    assert_eq!(answer["error"]["status"], 404, "{answer}");
    let (code, answer) = admin(&["audit", &base], Some(OPERATOR_TOKEN)).await?;
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["entries"], json!([]), "refusals are not actions");

    // Pause sleep (queue mode): its task is accepted and waits; echo still runs.
    let (code, answer) = admin(&["pause", &base, "sleep"], Some(OPERATOR_TOKEN)).await?;
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["paused"]["mode"], "queue");
    worker_knows(&cluster.workers[0], 1, r#"{"sleep"}"#).await?;
    let card = card_until(&cluster, |card| {
        card["entrypoints"]["sleep"]["paused"]["mode"] == "queue"
    })
    .await?;
    assert!(card["entrypoints"]["echo"].get("paused").is_none());
    let a2a_card: Value = cluster
        .http
        .get(format!("{base}/a2a/.well-known/agent-card.json"))
        .send()
        .await?
        .json()
        .await?;
    let tags = |skill: &str| -> Vec<Value> {
        a2a_card["skills"]
            .as_array()
            .and_then(|skills| skills.iter().find(|s| s["id"] == skill))
            .and_then(|s| s["tags"].as_array().cloned())
            .unwrap_or_default()
    };
    assert!(tags("sleep").contains(&json!("paused")), "{a2a_card}");
    assert!(!tags("echo").contains(&json!("paused")), "{a2a_card}");
    let overview: Value = cluster
        .http
        .get(format!("{base}/console/api/overview"))
        .bearer_auth(OPERATOR_TOKEN)
        .send()
        .await?
        .json()
        .await?;
    let row = |name: &str| {
        overview["entrypoints"]
            .as_array()
            .and_then(|rows| rows.iter().find(|row| row["name"] == name).cloned())
            .unwrap_or_default()
    };
    assert_eq!(row("sleep")["paused"]["mode"], "queue", "{overview}");
    assert!(row("echo").get("paused").is_none(), "{overview}");
    let sleep = created(&cluster, "sleep", r#"{"ms":1}"#).await?;
    let echo = created(&cluster, "echo", "{}").await?;
    completed(&store, &echo).await?;
    assert_queued(&store, &sleep, "sleep").await?;

    // The pause outlives the worker: another one, started while it stands, takes none either.
    cluster.workers[0].kill()?;
    let second = cluster.add_worker("w2", WORKER)?;
    worker_knows(&cluster.workers[second], 1, r#"{"sleep"}"#).await?;
    let echo = created(&cluster, "echo", "{}").await?;
    completed(&store, &echo).await?;
    assert_queued(&store, &sleep, "sleep").await?;

    // Resumed: the queued task runs.
    let (code, answer) = admin(&["resume", &base, "sleep"], Some(OPERATOR_TOKEN)).await?;
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["wasPaused"], true);
    completed(&store, &sleep).await?;
    card_until(&cluster, |card| {
        card["entrypoints"]["sleep"].is_object()
            && card["entrypoints"]["sleep"].get("paused").is_none()
    })
    .await?;

    // Refuse mode: creating a task is 503 with Retry-After, naming the pause.
    let (code, answer) = admin(&["pause", &base, "echo", "--refuse"], Some(OPERATOR_TOKEN)).await?;
    assert_eq!(code, 0, "{answer}");
    assert_eq!(answer["paused"]["mode"], "refuse");
    card_until(&cluster, |card| {
        card["entrypoints"]["echo"]["paused"]["mode"] == "refuse"
    })
    .await?;
    let (status, retry_after, body) = create(&cluster, "echo", "{}").await?;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(retry_after.is_some(), "no Retry-After");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("paused")),
        "{body}"
    );
    let invoke = cluster
        .http
        .post(format!("{base}/entrypoints/echo/invoke"))
        .json(&json!({"input": {}}))
        .send()
        .await?;
    assert_eq!(invoke.status(), StatusCode::SERVICE_UNAVAILABLE);
    let (_, reply) = cluster
        .jsonrpc(
            Some(TOKEN),
            "SendMessage",
            json!({"message": {
                "messageId": "pause-suite-a2a",
                "role": "ROLE_USER",
                "parts": [{"data": {}}],
                "metadata": {"skillId": "echo"},
            }}),
        )
        .await?;
    assert!(
        reply["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("paused")),
        "an A2A send is refused too: {reply}"
    );
    // sleep is not paused any more: it runs.
    let sleep = created(&cluster, "sleep", r#"{"ms":1}"#).await?;
    completed(&store, &sleep).await?;
    let (code, answer) = admin(&["resume", &base, "echo"], Some(OPERATOR_TOKEN)).await?;
    assert_eq!(code, 0, "{answer}");

    // The audit log: every action, newest first, under the operator key's fingerprint.
    let (code, answer) = admin(&["audit", &base], Some(OPERATOR_TOKEN)).await?;
    assert_eq!(code, 0, "{answer}");
    let entries = answer["entries"].as_array().cloned().unwrap_or_default();
    let actions = harness::operator::audit_actions(&entries);
    assert_eq!(
        actions,
        [
            ("resume", "echo"),
            ("pause", "echo"),
            ("resume", "sleep"),
            ("pause", "sleep")
        ]
    );
    assert_eq!(entries[1]["detail"]["mode"], "refuse");
    let actor = entries[0]["actor"].as_str().unwrap_or_default();
    let fingerprint = actor.strip_prefix("operator token ").unwrap_or_default();
    assert_eq!(fingerprint.len(), 32, "{actor}");
    assert!(entries.iter().all(|entry| entry["actor"] == actor));
    assert!(!actor.contains(OPERATOR_TOKEN));
    // Reading it needs the operator too.
    let unauthenticated = cluster
        .http
        .get(format!("{base}/console/api/audit"))
        .send()
        .await?;
    assert_eq!(unauthenticated.status(), StatusCode::UNAUTHORIZED);
    Ok(())
}
