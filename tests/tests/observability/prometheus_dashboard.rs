//! The shipped Grafana dashboard (`deploy/grafana/dashboards/taskcluster.json`) proven against
//! data: Debian's `prometheus` scrapes the `/metrics` of a live cluster (a private redis-server
//! with AOF, the dev facilitator, two paying gateways, two workers; every second) under a small
//! mixed load: successes (`echo`, `count`), failures (`fail`), a cancellation (a `sleep`
//! cancelled mid-run), a run frozen past its lease (recovered by the other worker, and fenced
//! out when it wakes), a worker SIGKILLed mid-run (recovered by the other), and a paid x402
//! invoke. Then every panel target's `expr`, with the template variables filled in, must return
//! at least one series through Prometheus's HTTP API (a stat panel's `... or vector(0)` must
//! return one without the fallback, so the fallback cannot hide a missing metric), and the
//! `entrypoint` variable's `label_values` query must list the entrypoints. A panel whose query
//! never returns a series fails the test, named by its title and expr.
//!
//! Needs `prometheus` on PATH or `/usr/bin` (or `$PROMETHEUS`): `.ci/run` installs Debian's.

use std::time::Duration;

use harness::TestResult;
use harness::cluster::{Cluster, PATIENCE, POLL, free_port};
use harness::paid::{Facilitator, PAYEE, PAYER_KEY};
use harness::prometheus::{PrometheusServer, Target};
use harness::redis_server::RedisOptions;
use harness::store_fixtures::wait_until_active;
use nix::sys::signal::Signal;
use payments::LocalPayer;
use payments::payer::Challenge;
use serde_json::{Value, json};
use store::{RedisStore, RedisStoreConfig};

const TOKEN: &str = "dashboard-secret-token-8e2b6f1c0a9d4e73";
/// How often Prometheus scrapes.
const SCRAPE: Duration = Duration::from_secs(1);
/// How long the panels get, together, to show data once the load has run.
const QUERY_PATIENCE: Duration = Duration::from_secs(90);
/// The template variables Grafana fills in, as the test fills them. A variable not listed
/// here fails the test (see [`fill`]), so a new one is noticed.
const VARIABLES: [(&str, &str); 5] = [
    ("entrypoint", ".*"),
    ("__rate_interval", "1m"),
    ("__range", "10m"),
    ("__interval", "15s"),
    ("__range_s", "600"),
];

/// One panel target of the dashboard.
#[derive(Debug, Clone)]
struct Query {
    title: String,
    expr: String,
}

/// Every panel target's expr, rows' nested panels included.
fn dashboard_queries(dashboard: &Value) -> Vec<Query> {
    let mut queries = Vec::new();
    let mut panels: Vec<&Value> = dashboard["panels"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    while let Some(panel) = panels.pop() {
        panels.extend(panel["panels"].as_array().into_iter().flatten());
        let title = panel["title"].as_str().unwrap_or("(untitled)");
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = target["expr"].as_str() {
                queries.push(Query {
                    title: title.to_owned(),
                    expr: expr.to_owned(),
                });
            }
        }
    }
    queries.reverse();
    queries
}

/// `expr` with Grafana's variables (`$name`, `${name}`, `[[name]]`) replaced; an error names a
/// variable the test does not know.
fn fill(expr: &str) -> Result<String, String> {
    let mut text = expr.to_owned();
    // Longest names first: `$__range_s` before `$__range`.
    let mut variables = VARIABLES.to_vec();
    variables.sort_by_key(|(name, _)| std::cmp::Reverse(name.len()));
    for (name, value) in variables {
        for form in [
            format!("${{{name}}}"),
            format!("[[{name}]]"),
            format!("${name}"),
        ] {
            text = text.replace(&form, value);
        }
    }
    if text.contains('$') || text.contains("[[") {
        return Err(format!("unknown template variable in {expr:?}"));
    }
    Ok(text)
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs())
        .unwrap_or_default()
}

/// `POST /tasks` at `base`; the task id.
async fn create(
    http: &reqwest::Client,
    base: &str,
    skill: &str,
    input: Value,
) -> TestResult<String> {
    let created: Value = http
        .post(format!("{base}/tasks"))
        .header("Task-Access-Token", TOKEN)
        .json(&json!({"skillId": skill, "message": {"role": "user", "content": {"text": input.to_string()}}}))
        .send()
        .await?
        .json()
        .await?;
    Ok(created["taskId"]
        .as_str()
        .ok_or_else(|| format!("no taskId: {created}"))?
        .to_owned())
}

/// Polls the task until it is no longer running; its final status.
async fn finished(http: &reqwest::Client, base: &str, id: &str) -> TestResult<String> {
    let start = tokio::time::Instant::now();
    loop {
        let task: Value = http
            .get(format!("{base}/tasks/{id}"))
            .header("Task-Access-Token", TOKEN)
            .send()
            .await?
            .json()
            .await?;
        if task["status"] != "running" {
            return Ok(task["status"].as_str().unwrap_or_default().to_owned());
        }
        if start.elapsed() > PATIENCE {
            return Err(format!("task {id} never finished: {task}").into());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// A `sleep` run taken by worker `runner` alone: the other worker is frozen until the run is
/// active, so it cannot take it. Returns the task id.
async fn sleep_on(
    cluster: &Cluster,
    store: &RedisStore,
    runner: usize,
    ms: u64,
) -> TestResult<String> {
    let other = &cluster.workers[1 - runner];
    other.signal(Signal::SIGSTOP)?;
    let created = create(&cluster.http, cluster.base(), "sleep", json!({"ms": ms})).await;
    let started = match &created {
        Ok(id) => wait_until_active(store, id, PATIENCE).await,
        Err(_) => Ok(()),
    };
    other.signal(Signal::SIGCONT)?;
    started?;
    created
}

/// `env` as the cluster builder takes it.
fn borrow<'a>(env: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
    env.iter()
        .map(|(key, value)| (*key, value.as_str()))
        .collect()
}

/// A paid x402 invoke of `summarize` at `base`: unpaid 402, then paid 200.
async fn paid_invoke(http: &reqwest::Client, base: &str) -> TestResult {
    let url = format!("{base}/entrypoints/summarize/invoke");
    let body = json!({"input": {"text": "Metrics are scraped. Dashboards are proven."}});
    let unpaid = http.post(&url).json(&body).send().await?;
    assert_eq!(
        unpaid.status(),
        402,
        "the priced entrypoint asks for payment"
    );
    let required = unpaid
        .headers()
        .get(payments::PAYMENT_REQUIRED)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let challenge = Challenge::from_response(required.as_deref(), b"")?;
    let payment = LocalPayer::from_hex(PAYER_KEY)?.answer(&challenge, None, unix_now())?;
    let paid = http
        .post(&url)
        .header(payment.name, &payment.value)
        .json(&body)
        .send()
        .await?;
    let status = paid.status();
    let text = paid.text().await?;
    assert_eq!(status, 200, "{text}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn every_dashboard_panel_returns_series_from_a_live_cluster() -> TestResult {
    let dashboard_path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/grafana/dashboards/taskcluster.json"
    );
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(dashboard_path)?)?;
    let queries = dashboard_queries(&dashboard);
    assert!(queries.len() >= 20, "the dashboard's queries: {queries:?}");

    // The dev facilitator settles the paid call offline.
    let facilitator = Facilitator::start().await?;
    let facilitator_url = facilitator.base.clone();

    let worker_ports = [free_port()?, free_port()?];
    let g2_admin = format!("127.0.0.1:{}", free_port()?);
    let worker_env = |port: u16| {
        vec![
            ("METRICS_LISTEN", format!("127.0.0.1:{port}")),
            // Cluster gauges sampled every 250 ms (the reporter lease: 750 ms).
            ("OTEL_METRIC_EXPORT_INTERVAL", "250".to_owned()),
            // A frozen or killed worker's run is recovered about a second later.
            ("WORKER_LEASE_TTL_MS", "1000".to_owned()),
            ("WORKER_PRICES", "summarize=0.001".to_owned()),
        ]
    };
    let w1_env = worker_env(worker_ports[0]);
    let w2_env = worker_env(worker_ports[1]);
    let paying = [
        ("PAY_TO", PAYEE),
        ("FACILITATOR_URL", facilitator_url.as_str()),
    ];
    let mut g1_env = vec![("METRICS_LISTEN", "main")];
    g1_env.extend(paying);
    let mut g2_env = vec![("METRICS_LISTEN", g2_admin.as_str())];
    g2_env.extend(paying);
    let mut cluster = Cluster::builder()
        .redis(RedisOptions::default().with_aof(true))
        .worker("w1", &borrow(&w1_env))
        .worker("w2", &borrow(&w2_env))
        .gateway("g1", &g1_env)
        .gateway("g2", &g2_env)
        .skills(&["echo", "count", "fail", "sleep", "summarize"])
        .start()
        .await?;
    let g1 = cluster.gateways[0].base.clone();
    let g2 = cluster.gateways[1].base.clone();
    let g1_address = cluster.gateways[0].address().to_owned();
    let targets = vec![
        Target::new("gateway", &g1_address, "/metrics"),
        Target::new("gateway", &g2_admin, "/metrics"),
        Target::new(
            "worker",
            &format!("127.0.0.1:{}", worker_ports[0]),
            "/metrics",
        ),
        Target::new(
            "worker",
            &format!("127.0.0.1:{}", worker_ports[1]),
            "/metrics",
        ),
    ];
    let prometheus = PrometheusServer::start(&targets, SCRAPE).await?;
    let store = RedisStore::connect(RedisStoreConfig::new(cluster.redis.url())).await?;
    let http = cluster.http.clone();

    // Successes and failures, through both gateways.
    for base in [&g1, &g2] {
        for (skill, input) in [
            ("echo", json!({"text": "hi"})),
            ("count", json!({"n": 3})),
            ("fail", json!({"code": "upstream_unavailable"})),
        ] {
            let id = create(&http, base, skill, input).await?;
            let want = if skill == "fail" {
                "failed"
            } else {
                "completed"
            };
            assert_eq!(finished(&http, base, &id).await?, want, "{skill}");
        }
    }

    // A cancellation mid-run.
    let long = create(&http, &g1, "sleep", json!({"ms": 30_000})).await?;
    wait_until_active(&store, &long, PATIENCE).await?;
    let cancel = http
        .post(format!("{g1}/tasks/{long}/cancel"))
        .header("Task-Access-Token", TOKEN)
        .send()
        .await?;
    assert!(cancel.status().is_success(), "{}", cancel.status());
    assert_eq!(finished(&http, &g1, &long).await?, "cancelled");

    // A run frozen past its lease: w2's sweep recovers it and runs it again; w1 wakes up
    // holding a dead lease and is fenced out.
    let frozen = sleep_on(&cluster, &store, 0, 1_500).await?;
    cluster.workers[0].signal(Signal::SIGSTOP)?;
    let rerun = finished(&http, &g1, &frozen).await;
    cluster.workers[0].signal(Signal::SIGCONT)?;
    assert_eq!(rerun?, "completed");

    // A worker SIGKILLed mid-run: w1 recovers its run. Then w2 starts again, on its port.
    let orphan = sleep_on(&cluster, &store, 1, 1_500).await?;
    cluster.workers[1].kill()?;
    assert_eq!(finished(&http, &g2, &orphan).await?, "completed");
    let w2_again = borrow(&w2_env);
    cluster.add_worker("w2", &w2_again)?;
    cluster.workers.swap_remove(1);

    // A paid call through each gateway's payment gate.
    paid_invoke(&http, &g2).await?;

    // Every panel, until each returns a series or the time is up.
    let deadline = tokio::time::Instant::now() + QUERY_PATIENCE;
    let mut pending: Vec<(Query, String)> = Vec::new();
    for query in &queries {
        let filled = fill(&query.expr).map_err(|err| format!("{}: {err}", query.title))?;
        // A fallback of a stat panel must not be what answers.
        let filled = filled
            .strip_suffix(" or vector(0)")
            .map_or(filled.clone(), str::to_owned);
        pending.push((query.clone(), filled));
    }
    let mut last_error = String::new();
    loop {
        let mut still = Vec::new();
        for (query, filled) in pending {
            match prometheus.query(&filled).await {
                Ok(series) if !series.is_empty() => {}
                Ok(_) => still.push((query, filled)),
                Err(err) => {
                    last_error = err.to_string();
                    still.push((query, filled));
                }
            }
        }
        pending = still;
        if pending.is_empty() || tokio::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(SCRAPE).await;
    }
    if !pending.is_empty() {
        let failing: Vec<String> = pending
            .iter()
            .map(|(query, filled)| {
                format!(
                    "panel {:?}: {} (queried as {filled})",
                    query.title, query.expr
                )
            })
            .collect();
        return Err(format!(
            "{} panel queries never returned a series:\n{}\nlast error: {last_error}\ntargets: {}\n{}",
            failing.len(),
            failing.join("\n"),
            prometheus.targets().await,
            harness::process::plain(&cluster.logs())
        )
        .into());
    }

    // The `entrypoint` variable: `label_values(taskcluster_queue_depth, entrypoint)`.
    let variable = &dashboard["templating"]["list"][0];
    assert_eq!(variable["name"], "entrypoint");
    let definition = variable["query"].as_str().unwrap_or_default();
    let (matcher, label) = definition
        .strip_prefix("label_values(")
        .and_then(|rest| rest.strip_suffix(')'))
        .and_then(|inner| inner.split_once(','))
        .ok_or_else(|| format!("not a label_values query: {definition}"))?;
    let values = prometheus
        .label_values(label.trim(), matcher.trim())
        .await?;
    for entrypoint in ["echo", "count", "fail", "sleep", "summarize"] {
        assert!(
            values.iter().any(|value| value == entrypoint),
            "{definition} lists {values:?}"
        );
    }

    // The load left what it should: recoveries, a fenced write, the paid call's admission.
    for (what, query) in [
        ("recoveries", "sum(taskcluster_tasks_recovered_total)"),
        (
            "fenced writes",
            "sum(taskcluster_fenced_writes_rejected_total)",
        ),
        (
            "cancellations",
            r#"sum(taskcluster_tasks_finished_total{status="cancelled"})"#,
        ),
        (
            "paid admissions",
            r#"sum(taskcluster_tasks_admitted_total{entrypoint="summarize"})"#,
        ),
    ] {
        // Polled: the last scrape may not have seen the last of the load yet.
        let start = tokio::time::Instant::now();
        loop {
            let series = prometheus.query(query).await?;
            let value = series
                .first()
                .and_then(|series| series["value"][1].as_str())
                .and_then(|value| value.parse::<f64>().ok())
                .unwrap_or_default();
            if value >= 1.0 {
                break;
            }
            if start.elapsed() > QUERY_PATIENCE {
                return Err(format!("{what}: {query} = {series:?}").into());
            }
            tokio::time::sleep(SCRAPE).await;
        }
    }
    drop(prometheus);
    drop(facilitator);
    Ok(())
}

#[test]
fn template_variables_are_filled_and_unknown_ones_refused() {
    assert_eq!(
        fill(r#"sum(rate(x{entrypoint=~"$entrypoint"}[$__rate_interval]))"#),
        Ok(r#"sum(rate(x{entrypoint=~".*"}[1m]))"#.to_owned())
    );
    assert_eq!(
        fill("increase(x[${__range}]) / $__range_s"),
        Ok("increase(x[10m]) / 600".to_owned())
    );
    assert!(fill("rate(x[$__unknown])").is_err());
}
