//! Direct invocation driven through `gateway::app` without a socket: `POST
//! /entrypoints/:key/invoke` (result envelope, errors, timeouts, `Idempotency-Key`) and `POST
//! /entrypoints/:key/stream` (SSE framing, endings, cancellation on disconnect). Runs happen on
//! workers through the store: the embedded worker hosts the built-ins, and a second in-process
//! worker hosts a few test entrypoints.

use std::error::Error;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode, header};
use futures::StreamExt;
use gateway::core::config::GatewayConfig;
use gateway::core::state::AppState;
use http_body_util::BodyExt;
use protocol::TaskStatus;
use serde_json::{Value, json};
use store::idempotency::{
    Begin, DEFAULT_IN_PROGRESS_TTL, Operation, SecurityContext, Subject, fingerprint, scope,
};
use store::registry::{Price, WorkerEntry};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;
use worker::entrypoint::{Entrypoint, Entrypoints};
use worker::handler::{HandlerError, HandlerOutput, TaskContext};

type TestResult<T = ()> = Result<T, Box<dyn Error + Send + Sync>>;

/// Bounds every wait, so a broken path fails the test instead of hanging it.
const PATIENCE: Duration = Duration::from_secs(10);

const KEY: &str = "bench-key-0123456789abcdef";

struct Gateway {
    app: Router,
    state: AppState,
    shutdown: CancellationToken,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Test entrypoints, hosted by a second in-process worker.
fn test_entrypoints() -> Entrypoints {
    Entrypoints::new()
        .with(Entrypoint::new(
            "rich",
            "Returns output, usage and model",
            |input: Value, _ctx: TaskContext| async move {
                Ok::<_, HandlerError>(HandlerOutput {
                    output: input,
                    usage: Some(json!({"total_tokens": 2})),
                    model: Some("test-model".into()),
                    awaits_input: false,
                })
            },
        ))
        .with(
            Entrypoint::new(
                "kinds",
                "Emits one event of every stream kind",
                |_input: Value, ctx: TaskContext| async move {
                    let fail = |_| HandlerError::new("emit_failed", "could not emit");
                    ctx.events.text("hello").await.map_err(fail)?;
                    ctx.events.delta(json!(" world")).await.map_err(fail)?;
                    ctx.events
                        .asset(json!({"assetId": "a1", "mime": "text/plain"}))
                        .await
                        .map_err(fail)?;
                    ctx.events.control(json!("pause")).await.map_err(fail)?;
                    ctx.events
                        .progress(json!({"done": 1}))
                        .await
                        .map_err(fail)?;
                    Ok::<_, HandlerError>(HandlerOutput::new(json!({"done": true})))
                },
            )
            .streaming(),
        )
        .with(
            Entrypoint::new(
                "stream-fail",
                "Emits a text event, then fails",
                |_input: Value, ctx: TaskContext| async move {
                    let _ = ctx.events.text("partial").await;
                    Err::<HandlerOutput, _>(HandlerError::new("boom", "it broke"))
                },
            )
            .streaming(),
        )
        .with(
            Entrypoint::new(
                "asks",
                "Ends its run asking for more input",
                |_input: Value, _ctx: TaskContext| async move {
                    Ok::<_, HandlerError>(HandlerOutput::input_required(
                        json!({"parts": [{"text": "which one?"}]}),
                    ))
                },
            )
            .streaming(),
        )
        .with(
            Entrypoint::new(
                "trickle",
                "Emits a text event, then waits until cancelled",
                |_input: Value, ctx: TaskContext| async move {
                    let _ = ctx.events.text("tick").await;
                    ctx.cancelled().await;
                    Err::<HandlerOutput, _>(HandlerError::cancelled())
                },
            )
            .streaming(),
        )
}

async fn start(config: GatewayConfig) -> TestResult<Gateway> {
    let shutdown = CancellationToken::new();
    let tracker = TaskTracker::new();
    let state = gateway::embedded::start(config, shutdown.clone(), &tracker);
    tracker.spawn(worker::runtime::run(
        state.store.clone(),
        Some(state.registry.clone()),
        test_entrypoints(),
        worker::runtime::RuntimeConfig::new("test-entrypoints"),
        shutdown.clone(),
    ));
    let gateway = Gateway {
        app: gateway::app(state.clone()),
        state,
        shutdown,
    };
    tokio::time::timeout(PATIENCE, async {
        loop {
            match gateway.state.registry.workers().await {
                Ok(workers) if workers.len() >= 2 => return,
                _ => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    })
    .await
    .map_err(|_| "the workers never registered")?;
    Ok(gateway)
}

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Reply {
    fn json(&self) -> TestResult<Value> {
        Ok(serde_json::from_slice(&self.body)?)
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }
}

fn post(path: &str, body: &str, idempotency_key: Option<&str>) -> TestResult<Request<Body>> {
    let mut builder = Request::post(path).header(header::CONTENT_TYPE, "application/json");
    if let Some(key) = idempotency_key {
        builder = builder.header("Idempotency-Key", key);
    }
    Ok(builder.body(Body::from(body.to_owned()))?)
}

async fn send(app: &Router, request: Request<Body>) -> TestResult<Reply> {
    let response = tokio::time::timeout(PATIENCE, app.clone().oneshot(request)).await??;
    let status = response.status();
    let headers = response.headers().clone();
    let body = tokio::time::timeout(PATIENCE, response.into_body().collect())
        .await??
        .to_bytes()
        .to_vec();
    Ok(Reply {
        status,
        headers,
        body,
    })
}

async fn invoke(gw: &Gateway, key: &str, body: &str) -> TestResult<Reply> {
    send(
        &gw.app,
        post(&format!("/entrypoints/{key}/invoke"), body, None)?,
    )
    .await
}

async fn invoke_with_key(gw: &Gateway, key: &str, body: &str, idem: &str) -> TestResult<Reply> {
    send(
        &gw.app,
        post(&format!("/entrypoints/{key}/invoke"), body, Some(idem))?,
    )
    .await
}

/// Waits until no task is live: every run finished or was cancelled.
async fn until_idle(state: &AppState) -> TestResult {
    tokio::time::timeout(PATIENCE, async {
        loop {
            match state.store.live_count().await {
                Ok(0) => return,
                _ => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    })
    .await
    .map_err(|_| "runs are still live")?;
    Ok(())
}

/// Waits until some task is live.
async fn until_busy(state: &AppState) -> TestResult {
    tokio::time::timeout(PATIENCE, async {
        loop {
            match state.store.live_count().await {
                Ok(n) if n > 0 => return,
                _ => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    })
    .await
    .map_err(|_| "no run started")?;
    Ok(())
}

fn run_id(reply: &Reply) -> TestResult<String> {
    let body = reply.json()?;
    let id = body["run_id"].as_str().ok_or("no run_id")?.to_owned();
    uuid::Uuid::parse_str(&id)?;
    Ok(id)
}

// ----- invoke -----

#[tokio::test]
async fn invoke_echo_answers_upstreams_envelope() -> TestResult {
    let gw = start(GatewayConfig::for_tests()).await?;
    let reply = invoke(&gw, "echo", r#"{"input":{"x":1}}"#).await?;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    assert_eq!(
        reply.header("content-type"),
        Some("application/json; charset=utf-8")
    );
    let id = run_id(&reply)?;
    assert_eq!(
        reply.text(),
        format!(r#"{{"run_id":"{id}","status":"succeeded","output":{{"x":1}}}}"#)
    );
    // The run was a task on the worker, finished and owned by nobody the caller knows.
    let stored = gw.state.store.get(&id).await?.ok_or("no task")?;
    assert_eq!(stored.task.status, TaskStatus::Completed);
    Ok(())
}

#[tokio::test]
async fn invoke_reads_input_like_upstream() -> TestResult {
    let gw = start(GatewayConfig::for_tests()).await?;
    // No `input` member: the whole body is the input.
    let reply = invoke(&gw, "echo", r#"{"x":1}"#).await?;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.json()?["output"], json!({"x": 1}));
    // `input: null` reads as `{}`.
    let reply = invoke(&gw, "echo", r#"{"input":null}"#).await?;
    assert_eq!(reply.json()?["output"], json!({}));
    Ok(())
}

/// JSON Schema counts `3.0` as an integer, so the gateway lets it through `count`'s schema;
/// the handler must then take it as 3, not refuse it (schemathesis found the refusal).
#[tokio::test]
async fn a_whole_float_is_an_integer_like_the_schema_says() -> TestResult {
    let gw = start(GatewayConfig::for_tests()).await?;
    let reply = invoke(&gw, "count", r#"{"input":{"n":3.0}}"#).await?;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    assert_eq!(reply.json()?["output"], json!({"count": 3}));
    // A fraction is still no integer: the schema refuses it before any run.
    let reply = invoke(&gw, "count", r#"{"input":{"n":2.5}}"#).await?;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.text());
    assert_eq!(reply.json()?["error"]["code"], "invalid_input");
    Ok(())
}

#[tokio::test]
async fn invoke_reports_usage_and_model_in_order() -> TestResult {
    let gw = start(GatewayConfig::for_tests()).await?;
    let reply = invoke(&gw, "rich", r#"{"input":"hi"}"#).await?;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    let id = run_id(&reply)?;
    assert_eq!(
        reply.text(),
        format!(
            r#"{{"run_id":"{id}","status":"succeeded","output":"hi","usage":{{"total_tokens":2}},"model":"test-model"}}"#
        )
    );
    Ok(())
}

#[tokio::test]
async fn invoke_rejects_bad_requests() -> TestResult {
    let gw = start(GatewayConfig::for_tests()).await?;

    let reply = invoke(&gw, "nope", r#"{"input":{}}"#).await?;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert_eq!(reply.text(), r#"{"error":{"code":"entrypoint_not_found"}}"#);

    let reply = invoke(&gw, "echo", r#"{"input":"#).await?;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        reply.text(),
        r#"{"error":{"code":"invalid_request","message":"Invalid JSON"}}"#
    );

    let reply = invoke(&gw, "sleep", r#"{"input":{"ms":"x"}}"#).await?;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.text());
    assert_eq!(reply.json()?["error"]["code"], "invalid_input");
    Ok(())
}

#[tokio::test]
async fn invoke_maps_handler_failures() -> TestResult {
    let gw = start(GatewayConfig::for_tests()).await?;
    // Any other code is a handler failure: 500 internal_error with the handler's message.
    let reply = invoke(
        &gw,
        "fail",
        r#"{"input":{"code":"boom","message":"it broke"}}"#,
    )
    .await?;
    assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        reply.text(),
        r#"{"error":{"code":"internal_error","message":"it broke"}}"#
    );
    // The profile's own codes are kept; a handler's invalid_input is the caller's fault.
    let reply = invoke(
        &gw,
        "fail",
        r#"{"input":{"code":"invalid_input","message":"no"}}"#,
    )
    .await?;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        reply.text(),
        r#"{"error":{"code":"invalid_input","message":"no"}}"#
    );
    let reply = invoke(
        &gw,
        "fail",
        r#"{"input":{"code":"task_attempts_exhausted","message":"gone"}}"#,
    )
    .await?;
    // A run whose worker was lost (and not retried) is the upstream's failure: 502.
    assert_eq!(reply.status, StatusCode::BAD_GATEWAY);
    assert_eq!(reply.json()?["error"]["code"], "task_attempts_exhausted");
    Ok(())
}

#[tokio::test]
async fn invoke_times_out_with_504_and_cancels_the_run() -> TestResult {
    let mut config = GatewayConfig::for_tests();
    config.invoke_timeout_ms = 300;
    let gw = start(config).await?;
    let reply = invoke(&gw, "sleep", r#"{"input":{"ms":60000}}"#).await?;
    assert_eq!(
        reply.status,
        StatusCode::GATEWAY_TIMEOUT,
        "{}",
        reply.text()
    );
    assert_eq!(reply.json()?["error"]["code"], "task_timeout");
    until_idle(&gw.state).await?;
    Ok(())
}

#[tokio::test]
async fn a_caller_that_goes_away_cancels_its_run() -> TestResult {
    let gw = start(GatewayConfig::for_tests()).await?;
    let app = gw.app.clone();
    let request = post(
        "/entrypoints/sleep/invoke",
        r#"{"input":{"ms":60000}}"#,
        None,
    )?;
    let pending = tokio::spawn(async move { app.oneshot(request).await });
    until_busy(&gw.state).await?;
    pending.abort();
    until_idle(&gw.state).await?;
    Ok(())
}

#[tokio::test]
async fn paid_entrypoints_need_a_payment_configuration() -> TestResult {
    let gw = start(GatewayConfig::for_tests()).await?;
    let paid = Entrypoint::new(
        "paid",
        "Costs money",
        |input: Value, _ctx: TaskContext| async move {
            Ok::<_, HandlerError>(HandlerOutput::new(input))
        },
    )
    .streaming()
    .price(Price {
        invoke: Some("0.01".into()),
        stream: Some("0.01".into()),
        protocol: Default::default(),
        settle: Default::default(),
        scheme: Default::default(),
    })
    .info();
    let entry = WorkerEntry {
        worker_id: "priced".into(),
        host: "test".into(),
        started_at_ms: 0,
        concurrency: 1,
        entrypoints: vec![paid],
    };
    gw.state
        .registry
        .heartbeat(&entry, Duration::from_secs(60))
        .await?;
    for route in ["invoke", "stream"] {
        let reply = send(
            &gw.app,
            post(
                &format!("/entrypoints/paid/{route}"),
                r#"{"input":{}}"#,
                None,
            )?,
        )
        .await?;
        // No PAY_TO / FACILITATOR_URL: priced routes are refused, never served for free.
        assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE, "{route}");
        assert!(
            reply
                .text()
                .contains(r#""code":"payment_capability_unsupported""#),
            "{route}: {}",
            reply.text()
        );
    }
    Ok(())
}

// ----- Idempotency-Key -----

#[tokio::test]
async fn a_finished_invoke_is_replayed_exactly() -> TestResult {
    let gw = start(GatewayConfig::for_tests()).await?;
    let first = invoke_with_key(&gw, "echo", r#"{"input":{"x":1}}"#, KEY).await?;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.header("idempotency-replayed"), None);

    // Same request, whatever its key order and spacing.
    let second = invoke_with_key(&gw, "echo", r#"{ "input" : { "x" : 1 } }"#, KEY).await?;
    assert_eq!(second.status, StatusCode::OK);
    assert_eq!(second.header("idempotency-replayed"), Some("true"));
    assert_eq!(
        second.header("content-type"),
        Some("application/json; charset=utf-8")
    );
    assert_eq!(second.body, first.body, "the same run, byte for byte");

    let conflict = invoke_with_key(&gw, "echo", r#"{"input":{"x":2}}"#, KEY).await?;
    assert_eq!(conflict.status, StatusCode::CONFLICT);
    assert_eq!(
        conflict.text(),
        r#"{"error":{"code":"idempotency_key_conflict","message":"Idempotency-Key was already used for a different request"}}"#
    );

    // Keys are scoped per entrypoint.
    let other = invoke_with_key(&gw, "rich", r#"{"input":{"x":1}}"#, KEY).await?;
    assert_eq!(other.status, StatusCode::OK);
    assert_eq!(other.header("idempotency-replayed"), None);
    Ok(())
}

#[tokio::test]
async fn a_response_too_large_to_keep_is_not_run_again() -> TestResult {
    let mut config = GatewayConfig::for_tests();
    config.idempotency_max_body_bytes = 200;
    let gw = start(config).await?;
    let small = r#"{"input":{"x":1}}"#;
    let large = format!(r#"{{"input":{{"text":"{}"}}}}"#, "y".repeat(300));
    let first = invoke_with_key(&gw, "echo", &large, KEY).await?;
    assert_eq!(first.status, StatusCode::OK);
    let again = invoke_with_key(&gw, "echo", &large, KEY).await?;
    assert_eq!(again.status, StatusCode::CONFLICT, "{}", again.text());
    assert_eq!(
        again.json()?["error"]["code"],
        "idempotency_response_too_large"
    );
    assert_eq!(again.header("idempotency-replayed"), None);
    // A small response under another key is kept and replayed as before.
    let other = "other-key-0123456789abcdefgh";
    let kept = invoke_with_key(&gw, "echo", small, other).await?;
    let replayed = invoke_with_key(&gw, "echo", small, other).await?;
    assert_eq!(replayed.header("idempotency-replayed"), Some("true"));
    assert_eq!(replayed.body, kept.body);
    Ok(())
}

#[tokio::test]
async fn every_record_in_progress_refuses_a_new_key_with_503() -> TestResult {
    let mut config = GatewayConfig::for_tests();
    config.idempotency_max_entries = 1;
    let gw = start(config).await?;
    let body = r#"{"input":{"ms":60000}}"#;
    let app = gw.app.clone();
    let request = post("/entrypoints/sleep/invoke", body, Some(KEY))?;
    let first = tokio::spawn(async move { app.oneshot(request).await });
    until_busy(&gw.state).await?;

    let refused = invoke_with_key(
        &gw,
        "echo",
        r#"{"input":{}}"#,
        "second-key-0123456789abcdefg",
    )
    .await?;
    assert_eq!(
        refused.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        refused.text()
    );
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert_eq!(refused.json()?["error"]["code"], "service_unavailable");
    // Without a key nothing is recorded, nothing refused.
    let unkeyed = send(
        &gw.app,
        post("/entrypoints/echo/invoke", r#"{"input":{}}"#, None)?,
    )
    .await?;
    assert_eq!(unkeyed.status, StatusCode::OK);
    first.abort();
    Ok(())
}

#[tokio::test]
async fn malformed_idempotency_keys_are_rejected() -> TestResult {
    let gw = start(GatewayConfig::for_tests()).await?;
    for key in ["short".to_owned(), "k".repeat(257)] {
        let reply = invoke_with_key(&gw, "echo", r#"{"input":{"x":1}}"#, &key).await?;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST);
        assert_eq!(
            reply.text(),
            r#"{"error":{"code":"invalid_idempotency_key","message":"Idempotency-Key must contain 20 to 256 characters"}}"#
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_running_invoke_answers_409_in_progress_and_releases_when_dropped() -> TestResult {
    let gw = start(GatewayConfig::for_tests()).await?;
    let body = r#"{"input":{"ms":60000}}"#;
    let app = gw.app.clone();
    let request = post("/entrypoints/sleep/invoke", body, Some(KEY))?;
    let first = tokio::spawn(async move { app.oneshot(request).await });
    until_busy(&gw.state).await?;

    let duplicate = invoke_with_key(&gw, "sleep", body, KEY).await?;
    assert_eq!(duplicate.status, StatusCode::CONFLICT);
    assert_eq!(duplicate.header("retry-after"), Some("1"));
    assert_eq!(
        duplicate.json()?["error"]["code"],
        "idempotency_in_progress"
    );

    // The first caller goes away: its run is cancelled and its claim released.
    first.abort();
    until_idle(&gw.state).await?;
    let print = fingerprint(&store::idempotency::Request {
        method: "POST",
        url: "/entrypoints/sleep/invoke",
        body: &serde_json::from_str(body)?,
        subject: &Subject::Anonymous,
        security: &SecurityContext::free(),
    });
    let released = tokio::time::timeout(PATIENCE, async {
        loop {
            let begun = gw
                .state
                .idempotency
                .begin(
                    &scope(Operation::Invoke, "sleep"),
                    KEY,
                    &print,
                    DEFAULT_IN_PROGRESS_TTL,
                )
                .await;
            match begun {
                Ok(Begin::Started(_)) => return Ok(()),
                Ok(Begin::InProgress) => tokio::time::sleep(Duration::from_millis(10)).await,
                other => return Err(format!("unexpected {other:?}")),
            }
        }
    })
    .await
    .map_err(|_| "the claim was never released")?;
    released?;
    Ok(())
}

#[tokio::test]
async fn server_errors_are_released_and_client_errors_recorded() -> TestResult {
    let gw = start(GatewayConfig::for_tests()).await?;
    let boom = r#"{"input":{"code":"boom","message":"it broke"}}"#;
    let first = invoke_with_key(&gw, "fail", boom, KEY).await?;
    assert_eq!(first.status, StatusCode::INTERNAL_SERVER_ERROR);
    let retry = invoke_with_key(&gw, "fail", boom, KEY).await?;
    assert_eq!(retry.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(retry.header("idempotency-replayed"), None, "ran again");

    let other_key = "another-key-0123456789abcdef";
    let invalid = r#"{"input":{"code":"invalid_input","message":"no"}}"#;
    let first = invoke_with_key(&gw, "fail", invalid, other_key).await?;
    assert_eq!(first.status, StatusCode::BAD_REQUEST);
    let retry = invoke_with_key(&gw, "fail", invalid, other_key).await?;
    assert_eq!(retry.status, StatusCode::BAD_REQUEST);
    assert_eq!(retry.header("idempotency-replayed"), Some("true"));
    assert_eq!(retry.body, first.body);
    Ok(())
}

#[tokio::test]
async fn a_timed_out_invoke_is_released() -> TestResult {
    let mut config = GatewayConfig::for_tests();
    config.invoke_timeout_ms = 200;
    let gw = start(config).await?;
    let body = r#"{"input":{"ms":60000}}"#;
    let first = invoke_with_key(&gw, "sleep", body, KEY).await?;
    assert_eq!(first.status, StatusCode::GATEWAY_TIMEOUT);
    let retry = invoke_with_key(&gw, "sleep", body, KEY).await?;
    assert_eq!(retry.status, StatusCode::GATEWAY_TIMEOUT, "ran again");
    assert_eq!(retry.header("idempotency-replayed"), None);
    Ok(())
}

// ----- stream -----

/// One SSE event: its `id:`, `event:` and parsed `data:`.
#[derive(Debug)]
struct Sse {
    id: u64,
    event: String,
    data: Value,
}

fn parse_sse(text: &str) -> TestResult<Vec<Sse>> {
    let mut events = Vec::new();
    for block in text.split("\n\n").filter(|block| !block.trim().is_empty()) {
        let mut id = None;
        let mut event = None;
        let mut data = None;
        for line in block.lines() {
            if let Some(value) = line.strip_prefix("id: ") {
                id = Some(value.parse()?);
            } else if let Some(value) = line.strip_prefix("event: ") {
                event = Some(value.to_owned());
            } else if let Some(value) = line.strip_prefix("data: ") {
                data = Some(serde_json::from_str(value)?);
            } else {
                return Err(format!("unexpected line {line:?}").into());
            }
        }
        events.push(Sse {
            id: id.ok_or("no id")?,
            event: event.ok_or("no event")?,
            data: data.ok_or("no data")?,
        });
    }
    Ok(events)
}

async fn stream(gw: &Gateway, key: &str, body: &str) -> TestResult<Reply> {
    send(
        &gw.app,
        post(&format!("/entrypoints/{key}/stream"), body, None)?,
    )
    .await
}

/// Ids and sequences count from 0 by one; every envelope names the run and a time.
fn check_envelopes(events: &[Sse]) -> TestResult<String> {
    let run_id = events
        .first()
        .and_then(|e| e.data["runId"].as_str())
        .ok_or("no runId")?
        .to_owned();
    for (i, event) in events.iter().enumerate() {
        assert_eq!(event.id, i as u64);
        assert_eq!(event.data["sequence"], json!(i));
        assert_eq!(event.data["kind"], json!(event.event));
        assert_eq!(event.data["runId"], json!(run_id));
        assert!(
            event.data["createdAt"]
                .as_str()
                .is_some_and(|t| t.ends_with('Z'))
        );
    }
    Ok(run_id)
}

#[tokio::test]
async fn stream_relays_deltas_between_run_start_and_run_end() -> TestResult {
    let gw = start(GatewayConfig::for_tests()).await?;
    let reply = stream(&gw, "count", r#"{"input":{"n":3}}"#).await?;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(
        reply.header("content-type"),
        Some("text/event-stream; charset=utf-8")
    );
    assert_eq!(
        reply.header("cache-control"),
        Some("no-cache, no-transform")
    );
    let events = parse_sse(&reply.text())?;
    let kinds: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(kinds, ["run-start", "delta", "delta", "delta", "run-end"]);
    let run_id = check_envelopes(&events)?;
    let deltas: Vec<&Value> = events[1..4].iter().map(|e| &e.data["delta"]).collect();
    assert_eq!(deltas, [&json!(1), &json!(2), &json!(3)]);
    let end = &events[4].data;
    assert_eq!(end["status"], "succeeded");
    assert_eq!(end["output"], json!({"count": 3}));
    let keys: Vec<&String> = end
        .as_object()
        .map(|m| m.keys().collect())
        .unwrap_or_default();
    assert_eq!(
        keys,
        ["kind", "runId", "status", "output", "sequence", "createdAt"]
    );
    let stored = gw.state.store.get(&run_id).await?.ok_or("no task")?;
    assert_eq!(stored.task.status, TaskStatus::Completed);
    Ok(())
}

#[tokio::test]
async fn stream_relays_every_stream_kind_and_nothing_else() -> TestResult {
    let gw = start(GatewayConfig::for_tests()).await?;
    let reply = stream(&gw, "kinds", r#"{"input":{}}"#).await?;
    let events = parse_sse(&reply.text())?;
    let kinds: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(
        kinds,
        ["run-start", "text", "delta", "asset", "control", "run-end"]
    );
    check_envelopes(&events)?;
    assert_eq!(events[1].data["text"], "hello");
    assert_eq!(events[2].data["delta"], " world");
    assert_eq!(events[3].data["asset"]["assetId"], "a1");
    assert_eq!(events[4].data["control"], "pause");
    assert_eq!(events[5].data["output"], json!({"done": true}));
    Ok(())
}

#[tokio::test]
async fn a_failing_stream_ends_with_error_then_run_end_failed() -> TestResult {
    let gw = start(GatewayConfig::for_tests()).await?;
    let reply = stream(&gw, "stream-fail", r#"{"input":{}}"#).await?;
    let events = parse_sse(&reply.text())?;
    let kinds: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(kinds, ["run-start", "text", "error", "run-end"]);
    check_envelopes(&events)?;
    assert_eq!(events[2].data["code"], "internal_error");
    assert_eq!(events[2].data["message"], "it broke");
    assert_eq!(events[3].data["status"], "failed");
    assert_eq!(
        events[3].data["error"],
        json!({"code": "internal_error", "message": "it broke"})
    );
    Ok(())
}

/// A direct run is one run: one that asks for more input fails the request, and the waiting
/// task is cancelled rather than left holding a capacity slot.
#[tokio::test]
async fn a_run_that_asks_for_input_fails_a_direct_invoke_or_stream() -> TestResult {
    let gw = start(GatewayConfig::for_tests()).await?;
    let reply = invoke(&gw, "asks", r#"{"input":{}}"#).await?;
    assert_eq!(reply.status, StatusCode::CONFLICT, "{}", reply.text());
    assert_eq!(reply.json()?["error"]["code"], "invalid_state");
    until_idle(&gw.state).await?;

    let reply = stream(&gw, "asks", r#"{"input":{}}"#).await?;
    let events = parse_sse(&reply.text())?;
    let kinds: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(kinds, ["run-start", "error", "run-end"]);
    assert_eq!(events[2].data["status"], "failed");
    // Codes outside the profile's list read as `internal_error` on the wire; the message says
    // why.
    assert!(
        events[2].data["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("more input")),
        "{}",
        events[2].data
    );
    until_idle(&gw.state).await?;
    Ok(())
}

#[tokio::test]
async fn stream_rejects_what_it_cannot_run() -> TestResult {
    let gw = start(GatewayConfig::for_tests()).await?;
    let reply = stream(&gw, "echo", r#"{"input":{}}"#).await?;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        reply.text(),
        r#"{"error":{"code":"stream_not_supported","key":"echo"}}"#
    );
    let reply = stream(&gw, "nope", r#"{"input":{}}"#).await?;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert_eq!(reply.text(), r#"{"error":{"code":"entrypoint_not_found"}}"#);
    let reply = stream(&gw, "count", r#"{"input":"#).await?;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!(reply.json()?["error"]["code"], "invalid_request");
    Ok(())
}

#[tokio::test]
async fn stream_input_that_fails_the_schema_fails_the_run_on_the_wire() -> TestResult {
    let gw = start(GatewayConfig::for_tests()).await?;
    let reply = stream(&gw, "count", r#"{"input":{"n":"x"}}"#).await?;
    assert_eq!(reply.status, StatusCode::OK);
    let events = parse_sse(&reply.text())?;
    let kinds: Vec<&str> = events.iter().map(|e| e.event.as_str()).collect();
    // With schema validation at the gateway, upstream's in-stream failure; without it, the
    // worker's decoding fails the run the same way.
    assert_eq!(kinds, ["run-start", "error", "run-end"]);
    check_envelopes(&events)?;
    assert_eq!(events[1].data["code"], "invalid_input");
    assert_eq!(events[2].data["status"], "failed");
    assert_eq!(events[2].data["error"]["code"], "invalid_input");
    Ok(())
}

#[tokio::test]
async fn a_stream_client_that_goes_away_cancels_the_run() -> TestResult {
    let gw = start(GatewayConfig::for_tests()).await?;
    let response = tokio::time::timeout(
        PATIENCE,
        gw.app.clone().oneshot(post(
            "/entrypoints/trickle/stream",
            r#"{"input":{}}"#,
            None,
        )?),
    )
    .await??;
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body().into_data_stream();
    let mut seen = String::new();
    while !seen.contains("event: text") {
        let chunk = tokio::time::timeout(PATIENCE, body.next())
            .await?
            .ok_or("the stream ended early")??;
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    let events = parse_sse(&seen)?;
    let run_id = check_envelopes(&events)?;
    drop(body);
    until_idle(&gw.state).await?;
    let stored = gw.state.store.get(&run_id).await?.ok_or("no task")?;
    assert_eq!(stored.task.status, TaskStatus::Cancelled);
    Ok(())
}

#[tokio::test]
async fn a_stream_ends_at_shutdown() -> TestResult {
    let gw = start(GatewayConfig::for_tests()).await?;
    let response = tokio::time::timeout(
        PATIENCE,
        gw.app.clone().oneshot(post(
            "/entrypoints/trickle/stream",
            r#"{"input":{}}"#,
            None,
        )?),
    )
    .await??;
    let shutdown = gw.state.shutdown.clone();
    let reader = tokio::spawn(async move { response.into_body().collect().await });
    until_busy(&gw.state).await?;
    shutdown.cancel();
    let body = tokio::time::timeout(PATIENCE, reader).await???.to_bytes();
    let events = parse_sse(&String::from_utf8_lossy(&body))?;
    assert_eq!(events.first().map(|e| e.event.as_str()), Some("run-start"));
    assert!(events.iter().all(|e| e.event != "run-end"));
    Ok(())
}

#[tokio::test]
async fn concurrent_invocations_each_get_their_own_run() -> TestResult {
    let gw = Arc::new(start(GatewayConfig::for_tests()).await?);
    let mut handles = Vec::new();
    for i in 0..20 {
        let gw = gw.clone();
        handles.push(tokio::spawn(async move {
            let reply = invoke(&gw, "echo", &format!(r#"{{"input":{{"i":{i}}}}}"#)).await?;
            let output = reply.json()?["output"].clone();
            Ok::<_, Box<dyn Error + Send + Sync>>((i, output))
        }));
    }
    for handle in handles {
        let (i, output) = handle.await??;
        assert_eq!(output, json!({ "i": i }));
    }
    Ok(())
}
