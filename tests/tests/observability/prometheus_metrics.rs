//! `/metrics` of real processes (a private redis-server, two workers, two gateways), no OTLP
//! endpoint anywhere: the gateway serves it on its own listener under its `BASE_PATH`
//! (`METRICS_LISTEN=main`) or on an admin listener (`/metrics`, `/health`); a worker on its
//! admin listener. The names are the OpenTelemetry-to-Prometheus ones the dashboard queries;
//! the cluster gauges come from exactly one worker (the reporter lease), never from a gateway,
//! and pass to the other worker when the reporter stops; the task's token is in no label; each
//! process stops cleanly on SIGTERM with its admin listener open. The embedded gateway (one
//! process) reports the cluster itself; a mistyped `METRICS_LISTEN` stops a process at start.

use std::collections::BTreeMap;

use harness::TestResult;
use harness::cluster::{self, Cluster, PATIENCE, POLL, free_port};
use harness::process::ServiceProcess;
use nix::sys::signal::Signal;
use serde_json::{Value, json};

const TOKEN: &str = "metrics-secret-token-3c9a1f7e5d2b4a68";
/// The cluster gauges: reported by one process of the cluster.
const CLUSTER_GAUGES: [&str; 6] = [
    "taskcluster_queue_depth",
    "taskcluster_tasks_live",
    "taskcluster_leases_active",
    "taskcluster_workers_live",
    "taskcluster_workers_capacity",
    "taskcluster_store_memory_fill_ratio",
];

/// `name{labels} value` lines of an exposition, by series (name and labels).
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// The value of the one series named `name` (no labels).
fn value(text: &str, name: &str) -> Option<f64> {
    samples(text).get(name).copied()
}

fn has(text: &str, name: &str) -> bool {
    samples(text)
        .keys()
        .any(|series| series.split('{').next() == Some(name))
}

async fn scrape(http: &reqwest::Client, url: &str) -> TestResult<String> {
    let response = http.get(url).send().await?;
    if !response.status().is_success() {
        return Err(format!("{url}: {}", response.status()).into());
    }
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    Ok(response.text().await?)
}

/// Scrapes `url` until `ready` accepts the text; the last text otherwise.
async fn scrape_until(
    http: &reqwest::Client,
    url: &str,
    what: &str,
    ready: impl Fn(&str) -> bool,
) -> TestResult<String> {
    let start = tokio::time::Instant::now();
    loop {
        let text = scrape(http, url).await?;
        if ready(&text) {
            return Ok(text);
        }
        if start.elapsed() > PATIENCE {
            return Err(format!("{url} never showed {what}:\n{text}").into());
        }
        tokio::time::sleep(POLL).await;
    }
}

async fn run_task(cluster: &Cluster, skill: &str, input: Value) -> TestResult<Value> {
    let created: Value = cluster
        .http
        .post(format!("{}/tasks", cluster.base()))
        .header("Task-Access-Token", TOKEN)
        .json(&json!({"skillId": skill, "message": {"role": "user", "content": {"text": input.to_string()}}}))
        .send()
        .await?
        .json()
        .await?;
    let id = created["taskId"]
        .as_str()
        .ok_or_else(|| format!("no taskId: {created}"))?
        .to_owned();
    let start = tokio::time::Instant::now();
    loop {
        let task: Value = cluster
            .http
            .get(format!("{}/tasks/{id}", cluster.base()))
            .header("Task-Access-Token", TOKEN)
            .send()
            .await?
            .json()
            .await?;
        if task["status"] != "running" {
            return Ok(task);
        }
        if start.elapsed() > PATIENCE {
            return Err(format!("task {id} never finished").into());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Whether worker `text` reports the cluster (the reporter's gauges, with both workers live).
fn reports(text: &str, workers: f64) -> bool {
    value(text, "taskcluster_workers_live") == Some(workers)
}

fn wait_exit_clean(process: &mut ServiceProcess) -> TestResult {
    process.signal(Signal::SIGTERM)?;
    let status = process.wait_exit(PATIENCE)?;
    assert!(status.success(), "{} exited with {status}", process.name());
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn gateways_and_workers_serve_metrics_and_one_worker_reports_the_cluster() -> TestResult {
    let (w1_port, w2_port, admin_port) = (free_port()?, free_port()?, free_port()?);
    let w1_metrics = format!("127.0.0.1:{w1_port}");
    let w2_metrics = format!("127.0.0.1:{w2_port}");
    let g2_metrics = format!("127.0.0.1:{admin_port}");
    // Gauges sampled every 250 ms: the reporter lease lasts 750 ms.
    let fast = ("OTEL_METRIC_EXPORT_INTERVAL", "250");
    let mut cluster = Cluster::builder()
        .worker(
            "w1",
            &[
                fast,
                ("METRICS_LISTEN", &w1_metrics),
                ("WORKER_CONCURRENCY", "3"),
            ],
        )
        .worker(
            "w2",
            &[
                fast,
                ("METRICS_LISTEN", &w2_metrics),
                ("WORKER_CONCURRENCY", "5"),
            ],
        )
        .gateway(
            "g1",
            &[("METRICS_LISTEN", "main"), ("BASE_PATH", "/agents/a")],
        )
        .gateway("g2", &[("METRICS_LISTEN", &g2_metrics)])
        .skills(&["echo", "fail"])
        .start()
        .await?;
    let http = cluster.http.clone();

    let done = run_task(&cluster, "echo", json!({"hello": "metrics"})).await?;
    assert_eq!(done["status"], "completed", "{done}");
    let failed = run_task(&cluster, "fail", json!({"code": "upstream_unavailable"})).await?;
    assert_eq!(failed["status"], "failed", "{failed}");

    // The gateway on its own listener, under its base path.
    let g1_url = format!("{}/metrics", cluster.base());
    let g1 = scrape_until(&http, &g1_url, "the admitted tasks", |text| {
        has(text, "taskcluster_tasks_admitted_total")
    })
    .await?;
    for name in [
        "taskcluster_tasks_admitted_total",
        "http_server_request_duration_seconds_bucket",
        "http_server_request_duration_seconds_count",
        "http_server_active_requests",
        "target_info",
    ] {
        assert!(has(&g1, name), "{name} missing on g1:\n{g1}");
    }
    assert!(
        g1.contains(r#"taskcluster_tasks_admitted_total{entrypoint="echo"} 1"#),
        "{g1}"
    );
    assert!(g1.contains(r#"http_route="/agents/a/tasks""#), "{g1}");
    assert!(g1.contains(r#"service_name="gateway""#), "{g1}");
    // The other gateway: an admin listener with /metrics and /health, not its main one.
    let g2_base = &cluster.gateways[1].base;
    let main = http.get(format!("{g2_base}/metrics")).send().await?;
    assert_eq!(
        main.status(),
        404,
        "METRICS_LISTEN=address keeps /metrics off the API"
    );
    let health: Value = http
        .get(format!("http://{g2_metrics}/health"))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(health["ok"], true);
    let g2 = scrape(&http, &format!("http://{g2_metrics}/metrics")).await?;
    assert!(has(&g2, "target_info"), "{g2}");

    // The workers: what they ran, and the cluster gauges from exactly one of them.
    let w1_url = format!("http://{w1_metrics}/metrics");
    let w2_url = format!("http://{w2_metrics}/metrics");
    let start = tokio::time::Instant::now();
    let (reporter, other) = loop {
        let (w1, w2) = (scrape(&http, &w1_url).await?, scrape(&http, &w2_url).await?);
        match (reports(&w1, 2.0), reports(&w2, 2.0)) {
            (true, false) => break ((0, w1), (1, w2)),
            (false, true) => break ((1, w2), (0, w1)),
            _ if start.elapsed() > PATIENCE => {
                return Err(format!("not one reporter:\n--- w1\n{w1}\n--- w2\n{w2}").into());
            }
            _ => tokio::time::sleep(POLL).await,
        }
    };
    let (reporter_index, reporter_text) = reporter;
    let (other_index, other_text) = other;
    for gauge in CLUSTER_GAUGES {
        // Memory fill only where Redis has a maxmemory; the harness's has none.
        if gauge != "taskcluster_store_memory_fill_ratio" {
            assert!(has(&reporter_text, gauge), "{gauge}:\n{reporter_text}");
        }
        assert!(!has(&other_text, gauge), "{gauge} from a second worker");
        assert!(
            !has(&g1, gauge) && !has(&g2, gauge),
            "{gauge} from a gateway"
        );
    }
    assert_eq!(
        value(&reporter_text, "taskcluster_workers_capacity"),
        Some(8.0),
        "3 + 5 slots"
    );
    assert!(
        reporter_text.contains(r#"taskcluster_queue_depth{entrypoint="echo"} 0"#),
        "{reporter_text}"
    );
    let ran = format!("{reporter_text}{other_text}");
    for name in [
        "taskcluster_tasks_finished_total",
        "taskcluster_task_end_to_end_seconds_bucket",
        "taskcluster_task_queue_wait_seconds_bucket",
        "taskcluster_task_run_time_seconds_bucket",
    ] {
        assert!(has(&ran, name), "{name} on neither worker:\n{ran}");
    }
    assert!(
        ran.contains(r#"taskcluster_tasks_finished_total{entrypoint="fail",status="failed"} 1"#),
        "{ran}"
    );
    // Nothing secret in any label.
    for text in [&g1, &g2, &reporter_text, &other_text] {
        assert!(!text.contains(TOKEN), "the task's token in /metrics");
    }

    // The reporter stops cleanly: it gives the lease up and the other worker reports at once
    // (well within the lease's ttl), alone.
    wait_exit_clean(&mut cluster.workers[reporter_index])?;
    let other_url = if other_index == 0 { &w1_url } else { &w2_url };
    let now = scrape_until(&http, other_url, "the cluster gauges", |text| {
        reports(text, 1.0)
    })
    .await?;
    let capacity = if other_index == 0 { 3.0 } else { 5.0 };
    assert_eq!(
        value(&now, "taskcluster_workers_capacity"),
        Some(capacity),
        "{now}"
    );
    let reporter_log = cluster.workers[reporter_index].log();
    assert!(
        reporter_log.contains("this worker reports the cluster gauges"),
        "{reporter_log}"
    );

    // Everything else stops cleanly too, admin listeners open.
    wait_exit_clean(&mut cluster.workers[other_index])?;
    for gateway in &mut cluster.gateways {
        wait_exit_clean(&mut gateway.process)?;
    }
    Ok(())
}

/// The settings are checked when they are read: a mistyped address stops the process at once,
/// naming the setting.
#[tokio::test(flavor = "multi_thread")]
async fn a_bad_metrics_address_is_refused_at_start() -> TestResult {
    for (binary, extra) in [
        ("gateway", vec![]),
        (
            "worker",
            vec![("REDIS_URL", "redis://127.0.0.1:1/".to_owned())],
        ),
    ] {
        let mut env = vec![("METRICS_LISTEN", "localhost".to_owned())];
        env.extend(extra);
        // Not cluster::gateway/worker: this process must refuse to start, never get healthy.
        let mut process = ServiceProcess::start(binary, binary, &[], &env)?;
        let status = process.wait_exit(PATIENCE)?;
        assert!(!status.success(), "{binary} started");
        let log = process.log();
        assert!(
            log.contains("METRICS_LISTEN") || log.contains("--metrics-listen"),
            "{log}"
        );
    }
    // `main` is a gateway's own listener: a worker has none. (It must refuse to start: not
    // cluster::worker.)
    let mut worker = ServiceProcess::start(
        "worker",
        "worker-main",
        &[],
        &[
            ("METRICS_LISTEN", "main".to_owned()),
            ("REDIS_URL", "redis://127.0.0.1:1/".to_owned()),
        ],
    )?;
    assert!(!worker.wait_exit(PATIENCE)?.success());
    Ok(())
}

/// The embedded gateway is one process, so it is the reporter: its `/metrics` has the cluster
/// gauges of its in-process worker and in-memory store, beside its HTTP metrics.
#[tokio::test(flavor = "multi_thread")]
async fn the_embedded_gateway_reports_the_cluster_itself() -> TestResult {
    // No REDIS_URL: the embedded mode.
    let cluster::Gateway {
        process: mut gateway,
        base,
    } = cluster::gateway(
        "embedded",
        &[],
        &[
            ("METRICS_LISTEN", "main".to_owned()),
            ("WORKER_CONCURRENCY", "4".to_owned()),
        ],
    )
    .await?;
    let http = cluster::http()?;
    let text = scrape_until(
        &http,
        &format!("{base}/metrics"),
        "the cluster gauges",
        |text| reports(text, 1.0),
    )
    .await?;
    assert_eq!(
        value(&text, "taskcluster_workers_capacity"),
        Some(4.0),
        "{text}"
    );
    assert_eq!(
        value(&text, "taskcluster_leases_active"),
        Some(0.0),
        "{text}"
    );
    assert!(
        text.contains(r#"taskcluster_queue_depth{entrypoint="echo"} 0"#),
        "{text}"
    );
    assert!(has(&text, "http_server_active_requests"), "{text}");
    wait_exit_clean(&mut gateway)?;
    Ok(())
}
