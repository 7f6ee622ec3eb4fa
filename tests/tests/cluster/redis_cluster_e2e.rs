//! Real `gateway` and `worker` processes on a real Redis Cluster (3 masters, 1 replica each,
//! tests/src/redis_cluster.rs), configured with `REDIS_CLUSTER_URLS` only (no `REDIS_URL`).
//!
//! - `a_cluster_of_processes_runs_on_redis_cluster`: the card lists the built-ins, direct
//!   invoke, a Lucid task created on one gateway and followed over SSE on another whose first
//!   seed is *not* the master of the namespace's slot: the subscription is a shard channel on
//!   that master all the same (sharded pub/sub, nothing on the cluster bus), and A2A
//!   `SendMessage`.
//! - `a_sharded_namespace_spreads_over_the_masters`: with `REDIS_SHARDS=6`, tasks created
//!   through a gateway land on several masters, two workers run them all, and the owner's
//!   listing merges every shard.
//! - `tasks_survive_a_master_failover`: the master of the namespace's slot is SIGKILLed while
//!   `sleep` tasks run and wait in the queue; its replica takes over; every task created before
//!   the kill ends, the processes keep running, `/ready` comes back, new tasks complete through
//!   both gateways. What each task ended as (and whether the one created right before the kill,
//!   after the last replication checkpoint, survived) is printed with `--nocapture`.

use std::time::{Duration, Instant};

use harness::TestResult;
use harness::a2a::A2a;
use harness::cluster::{Gateway, http};
use harness::process::{ServiceProcess, plain};
use harness::redis_cluster::RedisCluster;
use nix::sys::signal::Signal;
use reqwest::StatusCode;
use serde_json::{Value, json};
use store::{Phase, RedisStore, RedisStoreConfig, TaskStore};

/// Bound on any one wait for something that must happen; reached only when a test fails.
const PATIENCE: Duration = Duration::from_secs(30);
/// Bound on the tasks of the failover test reaching their end (they run 2 s each, 2 at a time,
/// and may be run again after a lost lease).
const OUTCOME_PATIENCE: Duration = Duration::from_secs(90);
/// Between two looks at a condition being polled for.
const POLL: Duration = Duration::from_millis(25);
/// Task access token (Lucid profile) and A2A bearer token: 20 to 256 characters.
const TOKEN: &str = "redis-cluster-e2e-token-0123456789";
/// A key of the default namespace `tc`: every key of the namespace shares its slot.
const NAMESPACE_KEY: &str = "{tc}:layout";
/// The worker's built-in entrypoints, as the card lists them.
const BUILTINS: [&str; 5] = ["count", "echo", "fail", "sleep", "summarize"];
/// Short leases, so that a lease lost in the failover is recovered within the test.
const LEASE_TTL_MS: &str = "1000";

/// A gateway on the cluster seeded by `seeds` (in this order), with `extra` settings, once
/// `/health` answers.
async fn gateway(name: &str, seeds: &[String], extra: &[(&str, String)]) -> TestResult<Gateway> {
    let mut envs = vec![("REDIS_CLUSTER_URLS", seeds.join(","))];
    envs.extend(extra.iter().cloned());
    harness::cluster::gateway(name, &[], &envs).await
}

fn start_worker(
    name: &str,
    seeds: &[String],
    extra: &[(&str, String)],
) -> TestResult<ServiceProcess> {
    let mut envs = vec![
        ("REDIS_CLUSTER_URLS", seeds.join(",")),
        ("WORKER_LEASE_TTL_MS", LEASE_TTL_MS.to_owned()),
        ("WORKER_RECOVERY_INTERVAL_MS", "200".to_owned()),
    ];
    envs.extend(extra.iter().cloned());
    harness::cluster::worker_on_store("worker", name, &[], &envs)
}

/// The cluster's seed list with node `first` in front (the node a process asks first).
fn seeds_from(cluster: &RedisCluster, first: usize) -> TestResult<Vec<String>> {
    let mut seeds = vec![cluster.url(first)?];
    for url in cluster.urls() {
        if !seeds.contains(&url) {
            seeds.push(url);
        }
    }
    Ok(seeds)
}

fn ensure(condition: bool, message: impl FnOnce() -> String) -> TestResult {
    if condition {
        Ok(())
    } else {
        Err(message().into())
    }
}

/// Polls the card until it lists every built-in (the worker registered); returns it.
async fn wait_for_card(base: &str) -> TestResult<Value> {
    let client = http()?;
    let start = Instant::now();
    loop {
        let card: Value = client
            .get(format!("{base}/.well-known/agent-card.json"))
            .send()
            .await?
            .json()
            .await?;
        let listed: Vec<&str> = card["skills"]
            .as_array()
            .map(|skills| skills.iter().filter_map(|s| s["id"].as_str()).collect())
            .unwrap_or_default();
        if BUILTINS.iter().all(|b| listed.contains(b)) {
            return Ok(card);
        }
        ensure(start.elapsed() < PATIENCE, || {
            format!("the card at {base} never listed {BUILTINS:?}: {card}")
        })?;
        tokio::time::sleep(POLL).await;
    }
}

/// `POST /entrypoints/echo/invoke` answers the input back.
async fn invoke_echo(base: &str, input: Value) -> TestResult {
    let response = http()?
        .post(format!("{base}/entrypoints/echo/invoke"))
        .json(&json!({ "input": input }))
        .send()
        .await?;
    let status = response.status();
    let body: Value = response.json().await?;
    ensure(status == StatusCode::OK, || {
        format!("invoke at {base}: {status} {body}")
    })?;
    ensure(
        body["status"] == "succeeded" && body["output"] == input,
        || format!("invoke at {base} answered {body}"),
    )
}

/// `POST /tasks` (Lucid profile); the task id.
async fn create_task(base: &str, skill: &str, input: Value) -> TestResult<String> {
    let response = http()?
        .post(format!("{base}/tasks"))
        .header("Task-Access-Token", TOKEN)
        .json(&json!({
            "skillId": skill,
            "message": {"role": "user", "content": {"text": input.to_string()}},
        }))
        .send()
        .await?;
    let status = response.status();
    let body: Value = response.json().await?;
    ensure(status == StatusCode::OK, || {
        format!("POST /tasks at {base}: {status} {body}")
    })?;
    Ok(body["taskId"]
        .as_str()
        .ok_or_else(|| format!("no taskId in {body}"))?
        .to_owned())
}

/// `GET /tasks/{id}/subscribe`: the response, once its head arrived (the gateway subscribed
/// to the task's channel before answering).
async fn open_sse(base: &str, task_id: &str) -> TestResult<reqwest::Response> {
    // No overall timeout: the stream lasts as long as the task; readers bound it themselves.
    let response = reqwest::Client::new()
        .get(format!("{base}/tasks/{task_id}/subscribe"))
        .header("Task-Access-Token", TOKEN)
        .send()
        .await?;
    let status = response.status();
    ensure(status == StatusCode::OK, || {
        format!("subscribe to {task_id} at {base}: {status}")
    })?;
    Ok(response)
}

/// Reads an SSE stream to its end, bounded.
async fn sse_events(
    response: reqwest::Response,
    bound: Duration,
) -> TestResult<Vec<(String, Value)>> {
    let events = tokio::time::timeout(bound, harness::sse::read_events(response, None))
        .await
        .map_err(|_| format!("the SSE stream did not end within {bound:?}"))??;
    Ok(events)
}

fn is_terminal(status: &Value) -> bool {
    matches!(status.as_str(), Some("completed" | "failed" | "cancelled"))
}

/// Channels matching `pattern` that node `index` has subscribers for (`PUBSUB CHANNELS` is
/// local to a node: it names the node's own subscriptions).
/// The channels matching `pattern` that node `index` has subscribers on: classic ones with
/// `kind` `CHANNELS`, sharded ones with `SHARDCHANNELS`.
async fn node_channels(
    cluster: &RedisCluster,
    index: usize,
    kind: &str,
    pattern: &str,
) -> TestResult<Vec<String>> {
    let mut conn = cluster.node_connection(index).await?;
    let channels: Vec<String> = redis::cmd("PUBSUB")
        .arg(kind)
        .arg(pattern)
        .query_async(&mut conn)
        .await?;
    Ok(channels)
}

/// `A2A SendMessage` (JSON-RPC binding) of a data part to `echo`; the task it answers.
async fn a2a_send_echo(base: &str) -> TestResult<Value> {
    let (status, body) = A2a::new(http()?, base)
        .with_bearer(Some(TOKEN))
        .rpc_call(
            "SendMessage",
            json!({"message": {
                "role": "ROLE_USER",
                "messageId": "m1",
                "parts": [{"data": {"x": 1}}],
                "metadata": {"skillId": "echo"},
            }}),
        )
        .await?;
    ensure(
        status == StatusCode::OK && body.get("error").is_none(),
        || format!("SendMessage at {base}: {status} {body}"),
    )?;
    Ok(body["result"]["task"].clone())
}

/// What a task created before the failover ended as.
#[derive(Debug, Clone)]
enum Outcome {
    /// `GET /tasks/{id}` shows a terminal status: the task as it reads.
    Terminal(Value),
    /// `GET /tasks/{id}` answers 404 once the store is ready again: the task is gone.
    Lost(Value),
}

impl Outcome {
    fn describe(&self) -> String {
        match self {
            Outcome::Terminal(task) if task["status"] == "failed" => {
                format!("failed ({})", task["error"]["code"])
            }
            Outcome::Terminal(task) => task["status"].as_str().unwrap_or("?").to_owned(),
            Outcome::Lost(body) => format!("lost (404 {})", body["error"]["code"]),
        }
    }
}

/// Polls `GET /tasks/{id}` until the task is terminal or the gateway says it does not exist.
/// Store errors (503) and broken connections are waited through.
async fn wait_outcome(base: &str, task_id: &str, bound: Duration) -> TestResult<Outcome> {
    let client = http()?;
    let start = Instant::now();
    loop {
        let last = match client
            .get(format!("{base}/tasks/{task_id}"))
            .header("Task-Access-Token", TOKEN)
            .send()
            .await
        {
            Ok(response) => {
                let status = response.status();
                let body: Value = response.json().await.unwrap_or(Value::Null);
                if status == StatusCode::OK && is_terminal(&body["status"]) {
                    return Ok(Outcome::Terminal(body));
                }
                if status == StatusCode::NOT_FOUND {
                    return Ok(Outcome::Lost(body));
                }
                format!("{status} {body}")
            }
            Err(err) => err.to_string(),
        };
        ensure(start.elapsed() < bound, || {
            format!("task {task_id} did not end within {bound:?}; last answer: {last}")
        })?;
        tokio::time::sleep(POLL).await;
    }
}

/// Polls `GET /ready` until it answers 200; how long that took.
async fn wait_ready(gateway: &Gateway) -> TestResult<Duration> {
    let client = http()?;
    let start = Instant::now();
    loop {
        let last = match client.get(format!("{}/ready", gateway.base)).send().await {
            Ok(response) if response.status() == StatusCode::OK => return Ok(start.elapsed()),
            Ok(response) => format!("{} {}", response.status(), response.text().await?),
            Err(err) => err.to_string(),
        };
        ensure(start.elapsed() < PATIENCE, || {
            format!(
                "{} not ready within {PATIENCE:?} (last: {last}); log:\n{}",
                gateway.process.name(),
                gateway.process.log()
            )
        })?;
        tokio::time::sleep(POLL).await;
    }
}

/// `GET /health` answers 200.
async fn healthy(gateway: &Gateway) -> TestResult {
    let response = http()?
        .get(format!("{}/health", gateway.base))
        .send()
        .await?;
    let status = response.status();
    ensure(status == StatusCode::OK, || {
        format!("{} /health answered {status}", gateway.process.name())
    })
}

/// No process of the test crashed or panicked.
fn still_running(processes: &mut [&mut ServiceProcess]) -> TestResult {
    for process in processes.iter_mut() {
        let running = process.is_running();
        let log = process.log();
        ensure(running && !log.contains("panicked"), || {
            format!("{} running: {running}, log:\n{log}", process.name())
        })?;
    }
    Ok(())
}

/// The warnings and errors a process logged, for the report printed with `--nocapture`: the
/// redis crate's own reconnection warnings counted, the others shown (at most `max`).
fn warnings(process: &ServiceProcess, max: usize) -> String {
    let log = process.log();
    let lines: Vec<String> = log
        .lines()
        .filter(|line| line.contains("WARN") || line.contains("ERROR"))
        .map(plain)
        .collect();
    let (client, own): (Vec<&String>, Vec<&String>) = lines
        .iter()
        .partition(|line| line.contains("redis::cluster_handling"));
    let mut shown: Vec<String> = own
        .iter()
        .take(max)
        .map(|line| format!("    {line}"))
        .collect();
    if own.len() > max {
        shown.push(format!("    ... {} more", own.len() - max));
    }
    format!(
        "  {}: {} warnings from the redis crate's cluster client, and:\n{}",
        process.name(),
        client.len(),
        shown.join("\n")
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_of_processes_runs_on_redis_cluster() -> TestResult {
    let started = Instant::now();
    let cluster = RedisCluster::start(3, 1)?;
    let cluster_up = started.elapsed();
    let owner = cluster.master_of_key(NAMESPACE_KEY)?;
    let others: Vec<usize> = cluster
        .masters()?
        .into_iter()
        .filter(|&m| m != owner)
        .collect();
    let [listener_node, third] = others[..] else {
        return Err(format!("expected 2 masters besides {owner}, got {others:?}").into());
    };
    // No process has the slot's master first among its seeds: the worker and gateway A have
    // `third`, gateway B `listener_node`. Scripts publish on the slot's master (`owner`).
    let mut worker = start_worker("w1", &seeds_from(&cluster, third)?, &[])?;
    let mut a = gateway("gateway-a", &seeds_from(&cluster, third)?, &[]).await?;
    let mut b = gateway("gateway-b", &seeds_from(&cluster, listener_node)?, &[]).await?;

    // The card lists the built-ins on both gateways.
    for gateway in [&a, &b] {
        let card = wait_for_card(&gateway.base).await?;
        let skills = card["skills"].as_array().map_or(0, Vec::len);
        ensure(skills >= BUILTINS.len(), || format!("card: {card}"))?;
    }

    // Direct invoke through both gateways.
    invoke_echo(&a.base, json!({"x": 1})).await?;
    invoke_echo(&b.base, json!({"y": [1, 2]})).await?;

    // A task created at A, followed at B. The worker is stopped while the task is created and
    // B subscribes, so B's snapshot cannot be terminal: the end can only reach B live, through
    // the shard channel B subscribed on `owner`, where the script publishes it.
    worker.signal(Signal::SIGSTOP)?;
    let task_id = create_task(&a.base, "sleep", json!({"ms": 300})).await?;
    let response = open_sse(&b.base, &task_id).await?;
    let pattern = format!("{{tc}}:ch:*:{task_id}");
    let sharded_on_owner = node_channels(&cluster, owner, "SHARDCHANNELS", &pattern).await?;
    let mut classic = Vec::new();
    let mut sharded_elsewhere = Vec::new();
    for node in [listener_node, third, owner] {
        classic.extend(node_channels(&cluster, node, "CHANNELS", &pattern).await?);
        if node != owner {
            sharded_elsewhere
                .extend(node_channels(&cluster, node, "SHARDCHANNELS", &pattern).await?);
        }
    }
    ensure(
        sharded_on_owner.len() == 1 && classic.is_empty() && sharded_elsewhere.is_empty(),
        || {
            format!(
                "task channel: sharded on the slot's master {owner}: {sharded_on_owner:?}, \
                 on other masters: {sharded_elsewhere:?}, classic: {classic:?}"
            )
        },
    )?;
    worker.signal(Signal::SIGCONT)?;
    let events = sse_events(response, PATIENCE).await?;
    let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
    ensure(
        names.first() == Some(&"statusUpdate") && names.last() == Some(&"resultUpdate"),
        || format!("events at B: {events:?}"),
    )?;
    let (_, first) = &events[0];
    let (_, done) = &events[events.len() - 1];
    ensure(first["status"] == "running", || {
        format!("B's snapshot: {first}")
    })?;
    ensure(
        done["status"] == "completed" && done["result"]["output"] == json!({"slept": 300}),
        || format!("B's terminal event: {done}"),
    )?;

    // A2A SendMessage (JSON-RPC) through both gateways.
    for gateway in [&a, &b] {
        let task = a2a_send_echo(&gateway.base).await?;
        ensure(task["status"]["state"] == "TASK_STATE_COMPLETED", || {
            format!("SendMessage at {}: {task}", gateway.base)
        })?;
    }

    still_running(&mut [&mut worker, &mut a.process, &mut b.process])?;
    eprintln!(
        "[redis_cluster_e2e] slot master node {owner}; gateway B listened on node \
         {listener_node}; cluster up in {cluster_up:?}; test {:?}",
        started.elapsed()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn tasks_survive_a_master_failover() -> TestResult {
    let started = Instant::now();
    let mut cluster = RedisCluster::start(3, 1)?;
    let owner = cluster.master_of_key(NAMESPACE_KEY)?;
    let other = cluster
        .masters()?
        .into_iter()
        .find(|&m| m != owner)
        .ok_or("a single master")?;
    // The worker and gateway A reach the cluster through the master that dies first; gateway
    // B through another.
    let mut worker = start_worker(
        "w1",
        &seeds_from(&cluster, owner)?,
        &[("WORKER_CONCURRENCY", "2".to_owned())],
    )?;
    let mut a = gateway("gateway-a", &seeds_from(&cluster, owner)?, &[]).await?;
    let mut b = gateway("gateway-b", &seeds_from(&cluster, other)?, &[]).await?;
    wait_for_card(&a.base).await?;
    wait_for_card(&b.base).await?;
    // An observer of the store (attempts and phases), as any process of the cluster sees it.
    let mut observer_config = RedisStoreConfig::new("");
    observer_config.cluster_urls = cluster.urls();
    let observer = RedisStore::connect(observer_config).await?;

    // Five 2 s tasks through both gateways: two run (concurrency 2), three wait.
    let mut tasks = Vec::new();
    for i in 0..5 {
        let gateway = if i % 2 == 0 { &a } else { &b };
        tasks.push(create_task(&gateway.base, "sleep", json!({"ms": 2000})).await?);
    }
    // Subscribers at both gateways, opened before the kill.
    let mut streams = Vec::new();
    for id in &tasks {
        for gateway in [&a, &b] {
            let response = open_sse(&gateway.base, id).await?;
            let reader = tokio::spawn(tokio::time::timeout(
                OUTCOME_PATIENCE,
                harness::sse::read_events(response, None),
            ));
            streams.push((id.clone(), gateway.process.name().to_owned(), reader));
        }
    }
    let start = Instant::now();
    loop {
        let mut active = 0;
        for id in &tasks {
            let task = observer.get(id).await?.ok_or("task missing")?;
            if task.phase == Phase::Active {
                active += 1;
            }
        }
        if active == 2 {
            break;
        }
        ensure(start.elapsed() < PATIENCE, || {
            format!("never 2 active tasks (now {active})")
        })?;
        tokio::time::sleep(POLL).await;
    }
    let mut before = Vec::new();
    for id in &tasks {
        let task = observer.get(id).await?.ok_or("task missing")?;
        before.push(format!("{:?}/attempt {}", task.phase, task.attempt));
    }

    // Replication checkpoint: a write on the slot's master acknowledged by its replica, so every
    // write before it (the five creations) is on the replica. Replication is asynchronous: what
    // comes after it may or may not survive the kill.
    let mut on_owner = cluster.node_connection(owner).await?;
    let () = redis::cmd("SET")
        .arg("{tc}:e2e-checkpoint")
        .arg(1)
        .query_async(&mut on_owner)
        .await?;
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(10_000)
        .query_async(&mut on_owner)
        .await?;
    ensure(acked == 1, || format!("WAIT 1 answered {acked}"))?;
    drop(on_owner);
    // One task created after the checkpoint, right before the kill: acknowledged to its client,
    // maybe not yet replicated.
    let late = create_task(&b.base, "sleep", json!({"ms": 2000})).await?;
    let killed_at = Instant::now();
    cluster.kill_node(owner)?;

    // During the failover: the processes are up, the store is not (or is slow).
    for gateway in [&a, &b] {
        healthy(gateway).await?;
    }
    let probe = Instant::now();
    let ready_during = match http()?.get(format!("{}/ready", b.base)).send().await {
        Ok(response) => format!("{} after {:?}", response.status(), probe.elapsed()),
        Err(err) => format!("transport error {err} after {:?}", probe.elapsed()),
    };

    let promoted = tokio::task::block_in_place(|| cluster.wait_for_failover(owner))?;
    let failover_took = killed_at.elapsed();
    let ready_a = wait_ready(&a).await?;
    let ready_b = wait_ready(&b).await?;
    let ready_after_kill = killed_at.elapsed();

    // Every task created before the kill ends (or, for the late one only, may be lost).
    let mut outcomes = Vec::new();
    for id in tasks.iter().chain([&late]) {
        let outcome = wait_outcome(&b.base, id, OUTCOME_PATIENCE).await?;
        let attempt = match observer.get(id).await {
            Ok(Some(task)) => task.attempt.to_string(),
            Ok(None) => String::from("-"),
            Err(err) => format!("? ({err})"),
        };
        outcomes.push((id.clone(), outcome, attempt));
    }
    let settled_after_kill = killed_at.elapsed();
    for (id, outcome, _) in &outcomes {
        match outcome {
            Outcome::Terminal(task) => {
                let status = &task["status"];
                let clear = status == "completed"
                    || (status == "failed" && task["error"]["code"].as_str().is_some());
                ensure(clear, || format!("task {id} ended as {task}"))?;
            }
            Outcome::Lost(body) => {
                ensure(
                    *id == late && body["error"]["code"] == "task_not_found",
                    || {
                        format!(
                            "task {id}, created and replicated before the kill, is gone: {body}"
                        )
                    },
                )?;
            }
        }
    }

    // The subscribers opened before the kill, at both gateways, each end with the task's end:
    // every subscription was on the killed master (the slot's), so each gateway subscribes
    // again on the promoted replica and re-reads the event log, retrying while the slot has no
    // master yet.
    for (id, gateway, reader) in streams {
        let events = reader
            .await?
            .map_err(|_| format!("the stream of {id} at {gateway} never ended"))?
            .map_err(|e| format!("the stream of {id} at {gateway}: {e}"))?;
        let expected = outcomes
            .iter()
            .find_map(|(task, outcome, _)| match outcome {
                Outcome::Terminal(view) if task == &id => Some(view["status"].clone()),
                _ => None,
            })
            .ok_or("a stream of an unknown task")?;
        let last = events.last().map(|(_, data)| data["status"].clone());
        ensure(last.as_ref() == Some(&expected), || {
            format!("the stream of {id} at {gateway} ended {events:?}, the task {expected}")
        })?;
    }

    // New tasks complete through both gateways.
    let after_failover = Instant::now();
    for gateway in [&a, &b] {
        let id = create_task(&gateway.base, "sleep", json!({"ms": 100})).await?;
        let outcome = wait_outcome(&gateway.base, &id, PATIENCE).await?;
        ensure(
            matches!(&outcome, Outcome::Terminal(task) if task["status"] == "completed"
                && task["result"]["output"] == json!({"slept": 100})),
            || format!("new task {id} at {}: {outcome:?}", gateway.base),
        )?;
        invoke_echo(&gateway.base, json!({"after": "failover"})).await?;
        healthy(gateway).await?;
    }
    let new_tasks_took = after_failover.elapsed();
    still_running(&mut [&mut worker, &mut a.process, &mut b.process])?;

    let report: Vec<String> = outcomes
        .iter()
        .zip(
            before
                .iter()
                .map(String::as_str)
                .chain(["created after checkpoint"]),
        )
        .map(|((id, outcome, attempt), before)| {
            format!(
                "  {id}: before kill {before}; {} (attempt {attempt})",
                outcome.describe()
            )
        })
        .collect();
    eprintln!(
        "[redis_cluster_e2e] killed slot master node {owner}, promoted node {promoted}\n  \
         /ready at B during failover: {ready_during}\n  failover settled {failover_took:?} \
         after kill; /ready 200 after {ready_a:?} (A), {ready_b:?} (B); {ready_after_kill:?} \
         after kill\n  every old task ended {settled_after_kill:?} after kill; new tasks \
         {new_tasks_took:?}\n{}\n  total {:?}\n\
         warnings and errors logged:\n{}\n{}\n{}",
        report.join("\n"),
        started.elapsed(),
        warnings(&worker, 30),
        warnings(&a.process, 30),
        warnings(&b.process, 30),
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sharded_namespace_spreads_over_the_masters() -> TestResult {
    const SHARDS: usize = 6;
    const TASKS: usize = 36;
    let cluster = RedisCluster::start(3, 0)?;
    let seeds = cluster.urls();
    let shards = [("REDIS_SHARDS", SHARDS.to_string())];
    let mut workers = [
        start_worker("w1", &seeds, &shards)?,
        start_worker("w2", &seeds, &shards)?,
    ];
    let mut gateway = gateway("gateway", &seeds, &shards).await?;

    let mut ids = Vec::new();
    for n in 0..TASKS {
        ids.push(create_task(&gateway.base, "echo", json!({ "n": n })).await?);
    }
    for id in &ids {
        match wait_outcome(&gateway.base, id, PATIENCE).await? {
            Outcome::Terminal(body) => ensure(body["status"] == "completed", || {
                format!("task {id}: {body}")
            })?,
            lost => return Err(format!("task {id}: {}", lost.describe()).into()),
        }
    }

    // The tasks' records live in several masters' keyspaces, each under its shard's tag.
    let mut masters_used = 0;
    let mut records = 0;
    for master in cluster.masters()? {
        let mut conn = cluster.node_connection(master).await?;
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("{tc:*}:task:*")
            .query_async(&mut conn)
            .await?;
        if !keys.is_empty() {
            masters_used += 1;
        }
        records += keys.len();
    }
    ensure(records == TASKS && masters_used >= 2, || {
        format!("{records} task records over {masters_used} masters")
    })?;

    // The owner's listing merges the shards' indexes.
    let listing: Value = http()?
        .get(format!("{}/tasks?limit=1000", gateway.base))
        .header("Task-Access-Token", TOKEN)
        .send()
        .await?
        .json()
        .await?;
    let listed: std::collections::HashSet<&str> = listing["tasks"]
        .as_array()
        .map(|tasks| tasks.iter().filter_map(|t| t["taskId"].as_str()).collect())
        .unwrap_or_default();
    ensure(
        listing["total"] == json!(TASKS)
            && listed.len() == TASKS
            && ids.iter().all(|id| listed.contains(id.as_str())),
        || format!("listing: {listing}"),
    )?;

    let mut processes: Vec<&mut ServiceProcess> = workers.iter_mut().collect();
    processes.push(&mut gateway.process);
    still_running(&mut processes)?;
    Ok(())
}
