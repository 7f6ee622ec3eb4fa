//! `/metrics` names: every instrument, rendered by the Prometheus exposition, carries the name
//! the OpenTelemetry-to-Prometheus conventions give it, and every metric the shipped Grafana
//! dashboard queries is among them. The cluster gauges report nothing once cleared (a process
//! that does not report the cluster). No OTLP endpoint: the exposition alone turns metrics on.
//! (Its own test binary: it installs the process-wide meter provider and log subscriber.)

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use protocol::TaskStatus;
use telemetry::metrics::{self, ClusterGauges, ClusterSample};
use telemetry::settings::Settings;
use telemetry::{self, LogFormat};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// The metric names of a text-format exposition (the series' names, before labels).
fn names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter_map(|line| line.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}

/// The metric names the dashboard's queries use: every identifier of a panel target's `expr`
/// that starts like one of ours.
fn dashboard_names() -> Result<BTreeSet<String>, Box<dyn std::error::Error>> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/grafana/dashboards/taskcluster.json"
    );
    let dashboard: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path)?)?;
    let mut exprs = Vec::new();
    let mut panels: Vec<&serde_json::Value> = dashboard["panels"]
        .as_array()
        .map(|panels| panels.iter().collect())
        .unwrap_or_default();
    while let Some(panel) = panels.pop() {
        if let Some(nested) = panel["panels"].as_array() {
            panels.extend(nested);
        }
        for target in panel["targets"].as_array().into_iter().flatten() {
            if let Some(expr) = target["expr"].as_str() {
                exprs.push(expr.to_owned());
            }
        }
    }
    let mut found = BTreeSet::new();
    for expr in &exprs {
        for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if word.starts_with("taskcluster_") || word.starts_with("http_server_") {
                found.insert(word.to_owned());
            }
        }
    }
    Ok(found)
}

#[test]
fn every_instrument_renders_under_its_prometheus_name() -> TestResult {
    let settings = Settings {
        prometheus: true,
        default_service_name: Some("names-test".into()),
        ..Settings::default()
    };
    let guard = telemetry::init_with(settings, LogFormat::Text)?;
    assert!(
        telemetry::metrics_enabled(),
        "/metrics alone turns metrics on"
    );
    let exposition = guard.exposition().ok_or("no exposition")?;

    metrics::task_admitted("echo");
    metrics::task_settled("echo", TaskStatus::Failed, Some(Duration::from_millis(30)));
    metrics::task_recovered("sleep", "requeued");
    metrics::fenced_write_rejected("sleep", "finish");
    metrics::queue_wait("echo", Duration::from_millis(5));
    metrics::run_time("echo", TaskStatus::Completed, Duration::from_millis(7));
    metrics::http_request("POST", Some("/tasks"), 201, Duration::from_millis(3));
    metrics::http_active("POST", 1);
    metrics::settlements_unreconciled(0);
    metrics::store_memory_high_water(0.8);
    metrics::admission_refused("store_memory");
    let gauges = Arc::new(ClusterGauges::default());
    let _registered = metrics::register_cluster_gauges(gauges.clone()).ok_or("no gauges")?;
    gauges.update(ClusterSample {
        queue_depth: vec![("echo".into(), 3)],
        tasks_live: Some(4),
        leases_active: Some(1),
        workers_live: Some(2),
        workers_capacity: Some(32),
        memory_fill: vec![("server".into(), 0.25)],
    });

    let text = exposition.render()?;
    let rendered = names(&text);
    let expected = [
        "taskcluster_tasks_admitted_total",
        "taskcluster_tasks_finished_total",
        "taskcluster_tasks_recovered_total",
        "taskcluster_fenced_writes_rejected_total",
        "taskcluster_task_queue_wait_seconds_bucket",
        "taskcluster_task_queue_wait_seconds_count",
        "taskcluster_task_run_time_seconds_bucket",
        "taskcluster_task_end_to_end_seconds_bucket",
        "taskcluster_task_end_to_end_seconds_sum",
        "taskcluster_queue_depth",
        "taskcluster_tasks_live",
        "taskcluster_leases_active",
        "taskcluster_workers_live",
        "taskcluster_workers_capacity",
        "taskcluster_store_memory_fill_ratio",
        "taskcluster_store_memory_high_water_ratio",
        "taskcluster_settlements_unreconciled",
        "taskcluster_admissions_refused_total",
        "http_server_request_duration_seconds_bucket",
        "http_server_request_duration_seconds_count",
        "http_server_active_requests",
        "target_info",
    ];
    for name in expected {
        assert!(rendered.contains(name), "{name} missing from:\n{text}");
    }
    for name in dashboard_names()? {
        assert!(
            rendered.contains(&name),
            "the dashboard queries {name}, which /metrics does not have:\n{text}"
        );
    }
    // Labels by the conventions (dots to underscores); no scope label on every series.
    assert!(
        text.contains(r#"taskcluster_queue_depth{entrypoint="echo"} 3"#),
        "{text}"
    );
    assert!(
        text.contains(r#"http_server_request_duration_seconds_count{http_request_method="POST",http_response_status_code="201",http_route="/tasks",url_scheme="http"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"target_info{service_name="names-test""#),
        "{text}"
    );
    assert!(!text.contains("otel_scope_"), "{text}");

    // A process that stops reporting the cluster reports none of its gauges.
    gauges.clear();
    let rendered = names(&exposition.render()?);
    for gauge in [
        "taskcluster_queue_depth",
        "taskcluster_tasks_live",
        "taskcluster_leases_active",
        "taskcluster_workers_live",
        "taskcluster_workers_capacity",
        "taskcluster_store_memory_fill_ratio",
    ] {
        assert!(!rendered.contains(gauge), "{gauge} still reported");
    }
    assert!(rendered.contains("taskcluster_tasks_admitted_total"));
    guard.shutdown();
    Ok(())
}
