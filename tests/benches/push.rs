//! A2A push notification delivery, measured: `TASKS` `echo` tasks sent over JSON-RPC
//! (`SendMessage`, `returnImmediately`) with an inline push config naming a loopback receiver
//! (`harness::webhook_receiver`), by `SENDERS` concurrent loops, against a private
//! redis-server, `WORKERS` workers and `GATEWAYS` gateways (every gateway delivers). Reported:
//! the send rate; the rate at which final statuses reach the receiver (from the first send to
//! the last final status); the lag from each send's answer to its task's final status at the
//! receiver (p50, p99, max); the requests the receiver got per task; and the gateways' CPU per
//! delivered task, beside the same sends without a config (what push adds to a task's cost).
//!
//! ```sh
//! cargo build --release -p gateway -p taskcluster-worker
//! TASKS=2000 cargo bench -p cluster-tests --bench push
//! ```
//!
//! Without `--bench` (as `cargo test --all-targets` runs it) it does nothing. It never asserts a
//! speed: it measures and prints.

use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::TestResult;
use harness::cluster::{Cluster, jsonrpc_request};
use harness::measure::cpu::{clock_ticks, process_ticks};
use harness::measure::env::env_or;
use harness::measure::output::{bench_requested, cpus, loadavg};
use harness::webhook_receiver::{Answer, WebhookReceiver};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

const TOKEN: &str = "push-bench-token-0123456789abcdef";

#[tokio::main]
async fn main() -> TestResult {
    if !bench_requested("push: run with `cargo bench -p cluster-tests --bench push`") {
        return Ok(());
    }
    let tasks: usize = env_or("TASKS", 2000).map_err(|e| e.to_string())?;
    let senders: usize = env_or("SENDERS", 32).map_err(|e| e.to_string())?;
    let workers: usize = env_or("WORKERS", 2).map_err(|e| e.to_string())?;
    let gateways: usize = env_or("GATEWAYS", 1).map_err(|e| e.to_string())?;
    println!(
        "push bench: {tasks} tasks, {senders} senders, {workers} workers, {gateways} gateways, \
         {} CPUs, load {}",
        cpus(),
        loadavg()
    );
    let receiver = WebhookReceiver::start(Answer::Ok).await?;
    let allow = format!("127.0.0.1:{}", receiver.port());
    let settings = [("PUSH_ALLOWLIST", allow.as_str()), ("RUST_LOG", "warn")];
    let worker_settings = [("WORKER_CONCURRENCY", "64"), ("RUST_LOG", "warn")];
    let mut builder = Cluster::builder();
    for n in 0..workers {
        builder = builder.worker(&format!("w{n}"), &worker_settings);
    }
    for n in 0..gateways {
        builder = builder.gateway(&format!("g{n}"), &settings);
    }
    let cluster = Arc::new(builder.skills(&["echo"]).start().await?);

    for with_push in [false, true] {
        let label = if with_push { "with push" } else { "no push" };
        let path = format!("/{}", if with_push { "push" } else { "none" });
        let url = receiver.url(&path);
        let before = gateway_ticks(&cluster);
        let started = Instant::now();
        let acked = send_all(&cluster, tasks, senders, with_push.then_some(url)).await?;
        let sent_in = started.elapsed();
        let finals = if with_push {
            let received = receiver
                .wait_for(Duration::from_secs(600), "every final status", |requests| {
                    requests
                        .iter()
                        .filter(|r| r.path == path && is_final(&r.body))
                        .count()
                        >= tasks
                })
                .await?;
            received
                .into_iter()
                .filter(|r| r.path == path && is_final(&r.body))
                .collect::<Vec<_>>()
        } else {
            wait_until_done(&cluster).await?;
            Vec::new()
        };
        let done_in = started.elapsed();
        let ticks = gateway_ticks(&cluster).saturating_sub(before);
        let cpu_us = ticks as f64 / clock_ticks() * 1e6 / tasks as f64;
        println!(
            "{label}: sent {tasks} in {:.2} s ({:.0}/s); all done in {:.2} s ({:.0} tasks/s); \
             gateway CPU {cpu_us:.0} µs per task",
            sent_in.as_secs_f64(),
            tasks as f64 / sent_in.as_secs_f64(),
            done_in.as_secs_f64(),
            tasks as f64 / done_in.as_secs_f64(),
        );
        if with_push {
            let mut lags: Vec<Duration> = finals
                .iter()
                .filter_map(|r| {
                    let id = r.body["statusUpdate"]["taskId"].as_str()?;
                    let (_, at) = acked.iter().find(|(task, _)| task == id)?;
                    Some(r.at.saturating_duration_since(*at))
                })
                .collect();
            lags.sort();
            let pick = |q: f64| {
                lags.get(((lags.len() as f64 * q) as usize).min(lags.len().saturating_sub(1)))
                    .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
            };
            let requests = receiver.requests_to(&path).len();
            println!(
                "{label}: final status lag after the send's answer p50 {:.1} ms, p99 {:.1} ms, \
                 max {:.1} ms; {:.2} requests per task",
                pick(0.5),
                pick(0.99),
                pick(1.0),
                requests as f64 / tasks as f64
            );
        }
    }
    Ok(())
}

fn is_final(body: &Value) -> bool {
    body["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
}

fn gateway_ticks(cluster: &Cluster) -> u64 {
    cluster
        .gateways
        .iter()
        .filter_map(|g| g.process.pid())
        .filter_map(|pid| process_ticks(&pid.to_string()))
        .sum()
}

/// Sends `tasks` echo tasks over the gateways, `senders` at once; each task's id and when its
/// send was answered.
async fn send_all(
    cluster: &Arc<Cluster>,
    tasks: usize,
    senders: usize,
    url: Option<String>,
) -> TestResult<Vec<(String, Instant)>> {
    let permits = Arc::new(Semaphore::new(senders));
    let mut handles = Vec::with_capacity(tasks);
    for n in 0..tasks {
        let permit = permits.clone().acquire_owned().await?;
        let cluster = cluster.clone();
        let url = url.clone();
        handles.push(tokio::spawn(async move {
            let _permit = permit;
            send(&cluster, n, url).await.map_err(|e| e.to_string())
        }));
    }
    let mut acked = Vec::with_capacity(tasks);
    for handle in handles {
        acked.push(handle.await??);
    }
    Ok(acked)
}

async fn send(cluster: &Cluster, n: usize, url: Option<String>) -> TestResult<(String, Instant)> {
    let mut configuration = json!({"returnImmediately": true});
    if let Some(url) = url {
        configuration["taskPushNotificationConfig"] = json!({"url": url});
    }
    let gateway = &cluster.gateways[n % cluster.gateways.len()].base;
    let params = json!({
        "message": {
            "messageId": format!("bench-{n}-{}", std::process::id()),
            "role": "ROLE_USER",
            "parts": [{"data": {"n": n}}],
            "metadata": {"skillId": "echo"},
        },
        "configuration": configuration,
    });
    let reply: Value = jsonrpc_request(&cluster.http, gateway, Some(TOKEN), "SendMessage", params)
        .send()
        .await?
        .json()
        .await?;
    let id = reply["result"]["task"]["id"]
        .as_str()
        .ok_or_else(|| format!("no task: {reply}"))?;
    Ok((id.to_owned(), Instant::now()))
}

/// Waits until no task is live (the run without push: its end is the baseline's), reading
/// Redis itself so that the gateways' CPU is theirs alone.
async fn wait_until_done(cluster: &Cluster) -> TestResult {
    let mut redis = cluster.redis.client().await?;
    loop {
        let live: u64 = redis::cmd("SCARD")
            .arg("{tc}:live")
            .query_async(&mut redis)
            .await?;
        if live == 0 {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
