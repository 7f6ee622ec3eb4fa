//! OpenTelemetry export of real `gateway` and `worker` processes on a private redis-server, to
//! the harness's in-process OTLP receiver:
//!
//! - over OTLP/HTTP (protobuf): a task created with a caller's `traceparent` yields one trace
//!   from the caller through the gateway's SERVER and PRODUCER spans (its context stored in the
//!   task) to the worker's CONSUMER span (a child of the producer, and linked to it) and its
//!   handler span, with Redis script CLIENT spans on both sides; the task metrics arrive with
//!   their entrypoint; the access token appears in nothing exported and no log line, and JSON
//!   log lines written in a span carry its trace id;
//! - a worker frozen past its lease: the recovering worker's sweep is a span with a `task
//!   recovered` event, the rerun joins the task's trace, and the stale worker's refused write
//!   is an event of its run's span and a `taskcluster.fenced_writes.rejected` count;
//! - SIGTERM flushes spans and metrics still buffered;
//! - over OTLP/gRPC: the embedded gateway exports its spans and metrics;
//! - without an endpoint nothing is exported (see also `shared`'s settings tests).

use std::time::Duration;

use harness::TestResult;
use harness::cluster::{self, Gateway, wait_for_skill};
use harness::otlp::{OtlpReceiver, Received, ReceivedSpan, Transport, attribute};
use harness::process::ServiceProcess;
use harness::redis_server::RedisServer;
use harness::store_fixtures::wait_until_active;
use nix::sys::signal::Signal;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use serde_json::{Value, json};
use store::{RedisStore, RedisStoreConfig};

const PATIENCE: Duration = Duration::from_secs(30);
/// The caller's access token: it must appear in nothing exported and in no log line.
const TOKEN: &str = "otel-secret-token-5f1e0c2a9b8d7e6f";
/// The caller's own trace, which the gateway's server span continues.
const CALLER_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const CALLER_SPAN: &str = "b7ad6b7169203331";

/// Telemetry settings that export quickly to `receiver` with `protocol`.
fn otel_env(receiver: &OtlpReceiver, protocol: &str) -> Vec<(&'static str, String)> {
    vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol.to_owned()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100".to_owned()),
        ("OTEL_METRIC_EXPORT_INTERVAL", "300".to_owned()),
        ("LOG_FORMAT", "json".to_owned()),
    ]
}

/// A gateway with `envs` on `redis` (the embedded mode without it), once its card lists `echo`.
async fn start_gateway(
    redis: Option<&RedisServer>,
    mut envs: Vec<(&'static str, String)>,
) -> TestResult<Gateway> {
    if let Some(redis) = redis {
        envs.push(("REDIS_URL", redis.url()));
    }
    let gateway = cluster::gateway("gateway", &[], &envs).await?;
    wait_for_skill(&gateway.process, &gateway.base, "echo").await?;
    Ok(gateway)
}

/// `POST /tasks` for `echo` with the caller's token and trace context; returns the task id.
async fn create_echo(base: &str) -> TestResult<String> {
    create_task(base, "echo", json!({"x": 1})).await
}

async fn create_task(base: &str, skill: &str, input: Value) -> TestResult<String> {
    let response = reqwest::Client::new()
        .post(format!("{base}/tasks"))
        .header("Task-Access-Token", TOKEN)
        .header("traceparent", format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01"))
        .json(&json!({"skillId": skill, "message": {"role": "user", "content": {"text": input.to_string()}}}))
        .send()
        .await?;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await?;
    Ok(body["taskId"].as_str().ok_or("no taskId")?.to_owned())
}

/// Follows the task until it is no longer running; returns its final view.
async fn wait_until_finished(base: &str, task_id: &str) -> TestResult<Value> {
    let client = reqwest::Client::new();
    let start = tokio::time::Instant::now();
    loop {
        let task: Value = client
            .get(format!("{base}/tasks/{task_id}"))
            .header("Task-Access-Token", TOKEN)
            .send()
            .await?
            .json()
            .await?;
        if task["status"] != "running" {
            return Ok(task);
        }
        if start.elapsed() > PATIENCE {
            return Err(format!("task {task_id} never finished").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn kind(span: &ReceivedSpan) -> i32 {
    span.span.kind
}

fn attr(span: &ReceivedSpan, key: &str) -> Option<String> {
    attribute(&span.span.attributes, key)
}

/// The one span of `service` matching `pick`.
fn find<'a>(
    spans: &'a [ReceivedSpan],
    service: &str,
    pick: impl Fn(&ReceivedSpan) -> bool,
) -> Option<&'a ReceivedSpan> {
    spans.iter().find(|s| s.service == service && pick(s))
}

fn has_point(received: &Received, metric: &str, pairs: &[(&str, &str)]) -> bool {
    received.points(metric).iter().any(|point| {
        pairs
            .iter()
            .all(|(key, value)| attribute(&point.attributes, key).as_deref() == Some(*value))
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn one_trace_covers_a_task_from_gateway_to_worker_over_otlp_http() -> TestResult {
    let receiver = OtlpReceiver::start().await?;
    let redis = RedisServer::start()?;
    let mut worker = cluster::worker(&redis, "w-otel", &worker_env(&receiver))?;
    let Gateway {
        process: mut gateway,
        base,
    } = start_gateway(Some(&redis), otel_env(&receiver, "http/protobuf")).await?;

    let task_id = create_echo(&base).await?;
    let task = wait_until_finished(&base, &task_id).await?;
    assert_eq!(task["status"], "completed", "{task}");

    // Wait for the worker's consumer and handler spans, and the task metrics of both sides.
    let id = task_id.clone();
    let received = receiver
        .wait_for(PATIENCE, |received| {
            let spans = received.spans();
            let done = find(&spans, "worker", |s| {
                kind(s) == SpanKind::Consumer as i32
                    && attr(s, "messaging.message.id").as_deref() == Some(id.as_str())
            })
            .is_some()
                && find(&spans, "worker", |s| s.span.name == "handler echo").is_some()
                && find(&spans, "gateway", |s| kind(s) == SpanKind::Producer as i32).is_some()
                // The server span ends last of the gateway's (its children, the producer and
                // the Redis calls, end first), and each process exports on its own schedule:
                // wait for it rather than assume it came with the worker's.
                && find(&spans, "gateway", |s| {
                    kind(s) == SpanKind::Server as i32
                        && attr(s, "http.route").as_deref() == Some("/tasks")
                })
                .is_some()
                && has_point(
                    received,
                    "taskcluster.tasks.admitted",
                    &[("entrypoint", "echo")],
                )
                && has_point(
                    received,
                    "taskcluster.tasks.finished",
                    &[("entrypoint", "echo"), ("status", "completed")],
                )
                // The counters above are created at zero when the worker starts, so they can
                // be exported before the run: its timings are what says the run's metrics came.
                && [
                    "taskcluster.task.queue_wait",
                    "taskcluster.task.run_time",
                    "taskcluster.task.end_to_end",
                ]
                .iter()
                .all(|metric| has_point(received, metric, &[("entrypoint", "echo")]));
            done.then(|| received.clone())
        })
        .await?;
    let spans = received.spans();
    let summary = received.summary();
    assert!(
        received.traces.iter().all(|(t, _)| *t == Transport::Http),
        "exports used OTLP/HTTP"
    );

    // The gateway's SERVER span follows the HTTP conventions and continues the caller's trace.
    let server = find(&spans, "gateway", |s| {
        kind(s) == SpanKind::Server as i32 && attr(s, "http.route").as_deref() == Some("/tasks")
    })
    .ok_or_else(|| format!("no server span for POST /tasks: {summary}"))?;
    assert_eq!(server.span.name, "POST /tasks");
    assert_eq!(attr(server, "http.request.method").as_deref(), Some("POST"));
    assert_eq!(attr(server, "url.path").as_deref(), Some("/tasks"));
    assert_eq!(
        attr(server, "http.response.status_code").as_deref(),
        Some("200")
    );
    assert_eq!(hex(&server.span.trace_id), CALLER_TRACE);
    assert_eq!(hex(&server.span.parent_span_id), CALLER_SPAN);

    // The PRODUCER span of the creation is the server span's child.
    let producer = find(&spans, "gateway", |s| {
        kind(s) == SpanKind::Producer as i32
            && attr(s, "messaging.message.id").as_deref() == Some(task_id.as_str())
    })
    .ok_or_else(|| format!("no producer span: {summary}"))?;
    assert_eq!(producer.span.name, "create echo");
    assert_eq!(
        attr(producer, "messaging.destination.name").as_deref(),
        Some("echo")
    );
    assert_eq!(producer.span.parent_span_id, server.span.span_id);

    // The worker's CONSUMER span: same trace, child of the producer and linked to it.
    let consumer = find(&spans, "worker", |s| {
        kind(s) == SpanKind::Consumer as i32
            && attr(s, "messaging.message.id").as_deref() == Some(task_id.as_str())
    })
    .ok_or_else(|| format!("no consumer span: {summary}"))?;
    assert_eq!(consumer.span.name, "process echo");
    assert_eq!(
        consumer.span.trace_id, producer.span.trace_id,
        "one trace id"
    );
    assert_eq!(consumer.span.parent_span_id, producer.span.span_id);
    assert!(
        consumer
            .span
            .links
            .iter()
            .any(|link| link.span_id == producer.span.span_id
                && link.trace_id == producer.span.trace_id),
        "the consumer links to the producer: {:?}",
        consumer.span.links
    );
    assert_eq!(
        attr(consumer, "taskcluster.task.status").as_deref(),
        Some("completed")
    );
    let handler = find(&spans, "worker", |s| s.span.name == "handler echo")
        .ok_or_else(|| format!("no handler span: {summary}"))?;
    assert_eq!(handler.span.parent_span_id, consumer.span.span_id);

    // Redis script calls are CLIENT spans inside the traced work, on both sides.
    let client_spans: Vec<&ReceivedSpan> = spans
        .iter()
        .filter(|s| kind(s) == SpanKind::Client as i32)
        .collect();
    let create = client_spans
        .iter()
        .find(|s| {
            s.service == "gateway" && attr(s, "db.operation.name").as_deref() == Some("create")
        })
        .ok_or_else(|| format!("no redis create span: {summary}"))?;
    assert_eq!(attr(create, "db.system.name").as_deref(), Some("redis"));
    assert_eq!(attr(create, "server.address").as_deref(), Some("127.0.0.1"));
    assert_eq!(
        attr(create, "server.port").as_deref(),
        Some(redis.port().to_string().as_str())
    );
    assert_eq!(create.span.parent_span_id, producer.span.span_id);
    let worker_scripts: Vec<String> = client_spans
        .iter()
        .filter(|s| s.service == "worker" && s.span.trace_id == consumer.span.trace_id)
        .filter_map(|s| attr(s, "db.operation.name"))
        .collect();
    // The claim is activated by the take that found the task (before its trace is known);
    // the run's fenced result is written (and the next task taken) inside the trace.
    assert!(
        worker_scripts
            .iter()
            .any(|s| s == "finish_take" || s == "cas"),
        "worker script spans: {worker_scripts:?}"
    );

    // Metrics: admissions by the gateway, terminal writes and timings by the worker, HTTP.
    assert!(has_point(
        &received,
        "taskcluster.tasks.admitted",
        &[("entrypoint", "echo")]
    ));
    for metric in [
        "taskcluster.task.queue_wait",
        "taskcluster.task.run_time",
        "taskcluster.task.end_to_end",
    ] {
        let points = received.points(metric);
        assert!(
            points.iter().any(|p| p.unit == "s"
                && attribute(&p.attributes, "entrypoint").as_deref() == Some("echo")),
            "{metric}: {points:?}"
        );
    }
    assert!(has_point(
        &received,
        "http.server.request.duration",
        &[
            ("http.request.method", "POST"),
            ("http.route", "/tasks"),
            ("http.response.status_code", "200")
        ],
    ));
    assert!(!received.points("http.server.active_requests").is_empty());

    // The cluster gauges arrive too (sampled by the worker in the background).
    receiver
        .wait_for(PATIENCE, |received| {
            (!received.points("taskcluster.workers.live").is_empty()
                && has_point(
                    received,
                    "taskcluster.queue.depth",
                    &[("entrypoint", "echo")],
                ))
            .then_some(())
        })
        .await?;

    // The token reached the gateway (and its owner hash the worker); nothing exported and no
    // log line shows it.
    let everything = receiver.received();
    let token = TOKEN.as_bytes();
    for body in &everything.raw {
        assert!(
            !body.windows(token.len()).any(|w| w == token),
            "an exported batch contains the access token"
        );
    }
    // The export threads the disabled test looks for do exist when exporting.
    assert_eq!(export_threads(&worker)?, 2, "{:?}", thread_names(&worker)?);
    // SIGTERM flushes and exits cleanly.
    gateway.signal(Signal::SIGTERM)?;
    worker.signal(Signal::SIGTERM)?;
    assert!(gateway.wait_exit(PATIENCE)?.success(), "{}", gateway.log());
    assert!(worker.wait_exit(PATIENCE)?.success(), "{}", worker.log());
    let trace = hex(&consumer.span.trace_id);
    for process in [&gateway, &worker] {
        let log = process.log();
        assert!(
            !log.contains(TOKEN),
            "a log line of {} shows the token",
            process.name()
        );
        let traced = log.lines().any(|line| {
            serde_json::from_str::<Value>(line)
                .is_ok_and(|line| line["trace_id"] == trace.as_str() && line["span_id"].is_string())
        });
        assert!(
            traced,
            "no JSON log line of {} carries trace {trace}:\n{log}",
            process.name()
        );
    }
    Ok(())
}

/// A worker's settings: telemetry to `receiver`, short leases.
fn worker_env(receiver: &OtlpReceiver) -> Vec<(&'static str, String)> {
    let mut envs = otel_env(receiver, "http/protobuf");
    envs.push(("WORKER_LEASE_TTL_MS", "1000".to_owned()));
    envs
}

fn has_event(span: &ReceivedSpan, name_part: &str) -> bool {
    span.span.events.iter().any(|e| e.name.contains(name_part))
}

#[tokio::test(flavor = "multi_thread")]
async fn recovery_and_fencing_are_span_events_and_the_rerun_joins_the_trace() -> TestResult {
    let receiver = OtlpReceiver::start().await?;
    let redis = RedisServer::start()?;
    let w1 = cluster::worker(&redis, "w1", &worker_env(&receiver))?;
    let gateway = start_gateway(Some(&redis), otel_env(&receiver, "http/protobuf")).await?;
    let base = gateway.base.clone();
    let store = RedisStore::connect(RedisStoreConfig::new(redis.url())).await?;

    let task_id = create_task(&base, "sleep", json!({"ms": 1200})).await?;
    wait_until_active(&store, &task_id, PATIENCE).await?;
    w1.signal(Signal::SIGSTOP)?; // frozen past its lease
    let w2 = cluster::worker(&redis, "w2", &worker_env(&receiver))?;
    let task = wait_until_finished(&base, &task_id).await?;
    assert_eq!(task["status"], "completed", "{task}");
    w1.signal(Signal::SIGCONT)?; // wakes up holding a dead lease

    let id = task_id.clone();
    let run_of = move |s: &ReceivedSpan, worker: &str| {
        kind(s) == SpanKind::Consumer as i32
            && attr(s, "messaging.message.id").as_deref() == Some(id.as_str())
            && attr(s, "taskcluster.worker.id").as_deref() == Some(worker)
    };
    let id = task_id.clone();
    let seen = std::sync::Mutex::new(String::new());
    let received = receiver
        .wait_for(PATIENCE, |received| {
            let spans = received.spans();
            let sweep = spans.iter().any(|s| {
                s.span.name == "recovery sweep"
                    && s.span.events.iter().any(|e| {
                        e.name == "task recovered"
                            && attribute(&e.attributes, "task_id").as_deref() == Some(id.as_str())
                    })
            });
            let stale_run_ended = spans.iter().any(|s| run_of(s, "w1"));
            // w2's run ended before the task read as completed, but each process exports on
            // its own schedule: wait for its span too instead of assuming it came first.
            let rerun_exported = spans.iter().any(|s| run_of(s, "w2"));
            let fenced = received
                .points("taskcluster.fenced_writes.rejected")
                .iter()
                .any(|p| attribute(&p.attributes, "entrypoint").as_deref() == Some("sleep"));
            let recovered = has_point(
                received,
                "taskcluster.tasks.recovered",
                &[("entrypoint", "sleep"), ("outcome", "requeued")],
            );
            *seen
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = format!(
                "sweep {sweep}, stale run {stale_run_ended}, rerun {rerun_exported}, \
                 fenced {fenced}, recovered {recovered}"
            );
            (sweep && stale_run_ended && rerun_exported && fenced && recovered)
                .then(|| received.clone())
        })
        .await
        .map_err(|err| {
            // Which of the five never arrived, and what each worker said meanwhile.
            let seen = seen
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            format!("{seen}\n--- w1\n{}\n--- w2\n{}\n{err}", w1.log(), w2.log())
        })?;
    let spans = received.spans();
    let producer = find(&spans, "gateway", |s| {
        kind(s) == SpanKind::Producer as i32
            && attr(s, "messaging.message.id").as_deref() == Some(task_id.as_str())
    })
    .ok_or("no producer span")?;
    let stale = spans
        .iter()
        .find(|s| run_of(s, "w1"))
        .ok_or("no run of w1")?;
    let rerun = spans
        .iter()
        .find(|s| run_of(s, "w2"))
        .ok_or("no run of w2")?;
    for run in [stale, rerun] {
        assert_eq!(
            run.span.trace_id, producer.span.trace_id,
            "the runs join the task's trace"
        );
        assert_eq!(run.span.parent_span_id, producer.span.span_id);
    }
    assert_eq!(
        attr(stale, "taskcluster.task.attempt").as_deref(),
        Some("1")
    );
    assert_eq!(
        attr(rerun, "taskcluster.task.attempt").as_deref(),
        Some("2")
    );
    // Woken up, w1 either writes its result and is refused (fenced out, or the task is already
    // finished), or learns from its heartbeat that the lease is gone first: either way an event
    // of its run says so.
    assert!(
        ["result fenced out", "result not written", "writing nothing"]
            .iter()
            .any(|event| has_event(stale, event)),
        "events of the stale run: {:?}",
        stale.span.events
    );
    let operations: Vec<String> = received
        .points("taskcluster.fenced_writes.rejected")
        .iter()
        .filter_map(|p| attribute(&p.attributes, "operation"))
        .collect();
    // Its first refused write: the result, the lease renewal, or an event its handler emitted
    // after waking (whichever it attempted first, as load decides); or, when it was frozen
    // with a renewal in flight, its own check that no renewal was confirmed within the TTL.
    assert!(
        operations
            .iter()
            .any(|op| ["finish", "renew", "emit", "stale"].contains(&op.as_str())),
        "{operations:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_flushes_what_is_buffered() -> TestResult {
    let receiver = OtlpReceiver::start().await?;
    let mut envs = otel_env(&receiver, "http/protobuf");
    // Nothing would be exported for a minute but for the flush at shutdown.
    envs.retain(|(name, _)| !name.starts_with("OTEL_BSP") && !name.starts_with("OTEL_METRIC"));
    envs.push(("OTEL_BSP_SCHEDULE_DELAY", "60000".to_owned()));
    envs.push(("OTEL_METRIC_EXPORT_INTERVAL", "60000".to_owned()));
    let Gateway {
        process: mut gateway,
        base,
    } = start_gateway(None, envs).await?;
    let task_id = create_echo(&base).await?;
    wait_until_finished(&base, &task_id).await?;
    gateway.signal(Signal::SIGTERM)?;
    assert!(gateway.wait_exit(PATIENCE)?.success(), "{}", gateway.log());
    // The process exits only after its exporters flushed: everything is here already.
    let received = receiver.received();
    let spans = received.spans();
    assert!(
        find(&spans, "gateway", |s| s.span.name == "POST /tasks").is_some(),
        "{}",
        received.summary()
    );
    assert!(has_point(
        &received,
        "taskcluster.tasks.finished",
        &[("entrypoint", "echo"), ("status", "completed")],
    ));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_embedded_gateway_exports_over_otlp_grpc() -> TestResult {
    let receiver = OtlpReceiver::start().await?;
    let gateway = start_gateway(None, otel_env(&receiver, "grpc")).await?;
    let base = gateway.base.clone();
    let task_id = create_echo(&base).await?;
    wait_until_finished(&base, &task_id).await?;
    let received = receiver
        .wait_for(PATIENCE, |received| {
            let spans = received.spans();
            let consumer = find(&spans, "gateway", |s| {
                kind(s) == SpanKind::Consumer as i32
                    && attr(s, "messaging.message.id").as_deref() == Some(task_id.as_str())
            })
            .is_some();
            (consumer
                && has_point(
                    received,
                    "taskcluster.tasks.finished",
                    &[("entrypoint", "echo"), ("status", "completed")],
                ))
            .then(|| received.clone())
        })
        .await?;
    assert!(!received.traces.is_empty() && !received.metrics.is_empty());
    assert!(
        received
            .traces
            .iter()
            .chain(std::iter::empty())
            .all(|(transport, _)| *transport == Transport::Grpc),
        "spans came over gRPC"
    );
    assert!(received.metrics.iter().all(|(t, _)| *t == Transport::Grpc));
    // In one process the producer and consumer spans still share the trace.
    let spans = received.spans();
    let producer = find(&spans, "gateway", |s| kind(s) == SpanKind::Producer as i32)
        .ok_or("no producer span")?;
    let consumer = find(&spans, "gateway", |s| kind(s) == SpanKind::Consumer as i32)
        .ok_or("no consumer span")?;
    assert_eq!(producer.span.trace_id, consumer.span.trace_id);
    Ok(())
}

/// Names of the process's threads (`/proc/<pid>/task/*/comm`, cut to 15 bytes).
fn thread_names(process: &ServiceProcess) -> TestResult<Vec<String>> {
    let pid = process.pid().ok_or("the process has exited")?;
    let mut names = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let comm = std::fs::read_to_string(task?.path().join("comm"))?;
        names.push(comm.trim().to_owned());
    }
    Ok(names)
}

/// The SDK's export threads (`OpenTelemetry.Traces.BatchProcessor`,
/// `OpenTelemetry.Metrics.PeriodicReader`).
fn export_threads(process: &ServiceProcess) -> TestResult<usize> {
    Ok(thread_names(process)?
        .iter()
        .filter(|name| name.starts_with("OpenTelemetry"))
        .count())
}

#[tokio::test(flavor = "multi_thread")]
async fn without_an_endpoint_nothing_is_exported() -> TestResult {
    // Everything that would shape an export, except an endpoint: no exporter thread starts
    // (a receiver on the default OTLP ports cannot be assumed free, so the process is checked).
    let envs = vec![
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf".to_owned()),
        ("OTEL_BSP_SCHEDULE_DELAY", "50".to_owned()),
        ("OTEL_METRIC_EXPORT_INTERVAL", "100".to_owned()),
        ("OTEL_SERVICE_NAME", "silent".to_owned()),
        ("LOG_FORMAT", "json".to_owned()),
    ];
    let Gateway {
        process: gateway,
        base,
    } = start_gateway(None, envs).await?;
    let task_id = create_echo(&base).await?;
    wait_until_finished(&base, &task_id).await?;
    assert_eq!(
        export_threads(&gateway)?,
        0,
        "{:?}",
        thread_names(&gateway)?
    );
    let log = gateway.log();
    assert!(
        !log.contains("trace_id"),
        "untraced logs carry no trace ids:\n{log}"
    );
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
