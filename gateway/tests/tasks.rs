//! The task routes end to end in embedded mode: the router driven without a socket, tasks run
//! by the in-process worker hosting the built-ins. Bodies are compared byte for byte with
//! upstream's (reference/lucid-wire-captures.txt) where the capture pins them down.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, Request, StatusCode, header};
use gateway::core::config::GatewayConfig;
use gateway::core::pay::Gate;
use gateway::core::state::AppState;
use http_body_util::BodyExt;
use payments::payer::Challenge;
use payments::wire::facilitator::{
    FacilitatorRequest, SettleResponse, SupportedResponse, VerifyResponse,
};
use payments::{Facilitator, LocalPayer};
use protocol::TaskStatus;
use protocol::token::OwnerHash;
use serde_json::{Value, json};
use store::credentials::MemoryCredentials;
use store::registry::{
    EntrypointInfo, MemoryRegistry, Pause, PauseMode, Price, WorkerEntry, WorkerRegistry,
};
use store::{
    Activation, CasOutcome, Claim, Durability, EventPayload, Lease, ListQuery, MemoryStore,
    MemoryStoreConfig, NewTask, RecoveryReport, StoreError, StoredTask, Subscription, TaskPage,
    TaskStore, Transition,
};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

type TestResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Upper bound on anything a test waits for; passing tests take milliseconds.
const PATIENCE: Duration = Duration::from_secs(10);
const TOKEN: &str = "0123456789abcdef0123456789abcdef0123";
const OTHER_TOKEN: &str = "ffffffffffffffffffffffffffffffffffff";
const TOKEN_REQUIRED: &str = r#"{"error":{"code":"task_access_required","message":"Task-Access-Token must contain 20 to 256 characters"}}"#;

fn fail(message: impl Into<String>) -> Box<dyn std::error::Error + Send + Sync> {
    message.into().into()
}

/// An embedded gateway whose worker has registered its entrypoints.
struct Gateway {
    app: Router,
    shutdown: CancellationToken,
    tracker: TaskTracker,
}

impl Gateway {
    async fn start() -> TestResult<Gateway> {
        Gateway::start_with(GatewayConfig::for_tests()).await
    }

    async fn start_with(config: GatewayConfig) -> TestResult<Gateway> {
        Ok(Gateway::start_keeping_registry(config).await?.0)
    }

    /// [`Gateway::start_with`], and the embedded registry (to act on it as an operator does).
    async fn start_keeping_registry(
        config: GatewayConfig,
    ) -> TestResult<(Gateway, Arc<dyn WorkerRegistry>)> {
        let shutdown = CancellationToken::new();
        let tracker = TaskTracker::new();
        let state = gateway::embedded::start(config, shutdown.clone(), &tracker);
        let registry = state.registry.clone();
        let registered = async {
            loop {
                if !state.registry.workers().await?.is_empty() {
                    return Ok::<_, StoreError>(());
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(PATIENCE, registered)
            .await
            .map_err(|_| fail("the embedded worker never registered"))??;
        let gateway = Gateway {
            app: gateway::app(state),
            shutdown,
            tracker,
        };
        Ok((gateway, registry))
    }

    async fn stop(self) -> TestResult {
        self.shutdown.cancel();
        self.tracker.close();
        tokio::time::timeout(PATIENCE, self.tracker.wait())
            .await
            .map_err(|_| fail("the embedded worker did not stop"))?;
        Ok(())
    }

    async fn send(&self, request: Request<Body>) -> TestResult<Reply> {
        let response = tokio::time::timeout(PATIENCE, self.app.clone().oneshot(request))
            .await
            .map_err(|_| fail("no response"))??;
        let status = response.status();
        let headers = response.headers().clone();
        let body = tokio::time::timeout(PATIENCE, response.into_body().collect())
            .await
            .map_err(|_| fail("the body never ended"))??
            .to_bytes();
        Ok(Reply {
            status,
            headers,
            body,
        })
    }

    async fn get(&self, uri: &str, token: Option<&str>) -> TestResult<Reply> {
        self.send(request(Method::GET, uri, token, Body::empty())?)
            .await
    }

    async fn post_json(&self, uri: &str, token: Option<&str>, body: &Value) -> TestResult<Reply> {
        self.send(request(
            Method::POST,
            uri,
            token,
            Body::from(body.to_string()),
        )?)
        .await
    }

    /// Creates a task and returns its id.
    async fn create(&self, token: &str, body: Value) -> TestResult<String> {
        let reply = self.post_json("/tasks", Some(token), &body).await?;
        reply.expect_status(StatusCode::OK)?;
        let created = reply.json()?;
        created["taskId"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| fail(format!("no taskId in {created}")))
    }

    /// `GET /tasks<query>` with [`TOKEN`], expecting 200.
    async fn list_page(&self, query: &str) -> TestResult<Value> {
        let reply = self.get(&format!("/tasks{query}"), Some(TOKEN)).await?;
        reply.expect_status(StatusCode::OK)?;
        assert_eq!(
            reply.content_type(),
            Some("application/json; charset=utf-8")
        );
        reply.json()
    }

    /// A subscription resumed with `Last-Event-ID: after`, read to its end.
    async fn resumed(&self, task_id: &str, after: &str) -> TestResult<String> {
        let uri = format!("/tasks/{task_id}/subscribe");
        let mut req = request(Method::GET, &uri, Some(TOKEN), Body::empty())?;
        req.headers_mut().insert("last-event-id", after.parse()?);
        let reply = self.send(req).await?;
        reply.expect_status(StatusCode::OK)?;
        reply.text()
    }

    /// The whole subscribe stream of a task that ends (the stream closes after a terminal
    /// event): also how tests wait for a task to finish.
    async fn events_until_end(&self, task_id: &str, token: &str) -> TestResult<String> {
        let reply = self
            .get(&format!("/tasks/{task_id}/subscribe"), Some(token))
            .await?;
        reply.expect_status(StatusCode::OK)?;
        reply.text()
    }
}

fn request(
    method: Method,
    uri: &str,
    token: Option<&str>,
    body: Body,
) -> TestResult<Request<Body>> {
    let mut builder = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::CONTENT_TYPE, "application/json");
    if let Some(token) = token {
        builder = builder.header("Task-Access-Token", token);
    }
    Ok(builder.body(body)?)
}

fn message(skill: &str, text: &str) -> Value {
    json!({"skillId": skill, "message": {"role": "user", "content": {"text": text}}})
}

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Reply {
    fn text(&self) -> TestResult<String> {
        Ok(String::from_utf8(self.body.to_vec())?)
    }

    fn json(&self) -> TestResult<Value> {
        Ok(serde_json::from_slice(&self.body)?)
    }

    fn expect_status(&self, status: StatusCode) -> TestResult {
        if self.status == status {
            Ok(())
        } else {
            Err(fail(format!(
                "expected {status}, got {}: {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )))
        }
    }

    fn content_type(&self) -> Option<&str> {
        self.headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
    }

    /// Status, upstream's JSON content type and the exact body.
    fn expect_json(&self, status: StatusCode, body: &str) -> TestResult {
        self.expect_status(status)?;
        assert_eq!(self.content_type(), Some("application/json; charset=utf-8"));
        assert_eq!(self.text()?, body);
        Ok(())
    }

    fn error_code(&self) -> TestResult<String> {
        let body = self.json()?;
        body["error"]["code"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| fail(format!("no error code in {body}")))
    }
}

fn not_found_body(task_id: &str) -> String {
    format!(r#"{{"error":{{"code":"task_not_found","message":"Task \"{task_id}\" not found"}}}}"#)
}

fn sse_block(event: &str, data: &Value) -> String {
    format!("event: {event}\ndata: {data}\n\n")
}

// ----- POST /tasks -----

#[tokio::test]
async fn create_with_a_token_returns_it_and_the_task_completes() -> TestResult {
    let gw = Gateway::start().await?;
    let reply = gw
        .post_json("/tasks", Some(TOKEN), &message("echo", r#"{"x":1}"#))
        .await?;
    reply.expect_status(StatusCode::OK)?;
    assert_eq!(
        reply.content_type(),
        Some("application/json; charset=utf-8")
    );
    let body = reply.json()?;
    let task_id = body["taskId"].as_str().ok_or_else(|| fail("no taskId"))?;
    assert_eq!(
        reply.text()?,
        format!(r#"{{"taskId":"{task_id}","accessToken":"{TOKEN}","status":"running"}}"#)
    );

    // Waited for through the stream, which ends with the result: live (`running` first) or
    // already completed, depending on who was quicker.
    let result = sse_block(
        "resultUpdate",
        &json!({"taskId": task_id, "status": "completed", "result": {"output": {"x": 1}}}),
    );
    let live = gw.events_until_end(task_id, TOKEN).await?;
    assert!(live.ends_with(&result), "{live}");
    assert_eq!(live.matches("event: ").count(), 2, "{live}");
    // Once completed: the capture's exact stream.
    let stream = gw.events_until_end(task_id, TOKEN).await?;
    assert_eq!(
        stream,
        sse_block(
            "statusUpdate",
            &json!({"taskId": task_id, "status": "completed"})
        ) + &result
    );

    let reply = gw.get(&format!("/tasks/{task_id}"), Some(TOKEN)).await?;
    reply.expect_status(StatusCode::OK)?;
    assert_eq!(
        reply.content_type(),
        Some("application/json; charset=utf-8")
    );
    let task = reply.json()?;
    assert_eq!(task["status"], "completed");
    assert_eq!(task["result"], json!({"output": {"x": 1}}));
    let keys: Vec<&String> = task
        .as_object()
        .map(|o| o.keys().collect())
        .unwrap_or_default();
    assert_eq!(
        keys,
        ["taskId", "status", "createdAt", "updatedAt", "result"]
    );
    gw.stop().await
}

/// Embedded mode (the registry in memory, read on every request): a refusing pause refuses a
/// new task at once with 503 and Retry-After, and a resume admits again.
#[tokio::test]
async fn an_entrypoint_paused_to_refuse_refuses_new_tasks_until_resumed() -> TestResult {
    let (gw, registry) = Gateway::start_keeping_registry(GatewayConfig::for_tests()).await?;
    let pause = Pause {
        mode: PauseMode::Refuse,
        by: "operator token ab".into(),
        at_ms: 1,
    };
    registry.pause("echo", &pause).await?;
    let reply = gw
        .post_json("/tasks", Some(TOKEN), &message("echo", r#"{"x":1}"#))
        .await?;
    reply.expect_status(StatusCode::SERVICE_UNAVAILABLE)?;
    assert_eq!(
        reply
            .headers
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("30")
    );
    assert_eq!(reply.json()?["error"]["code"], "service_unavailable");
    // Another entrypoint is not paused.
    let reply = gw
        .post_json("/tasks", Some(TOKEN), &message("sleep", r#"{"ms":1}"#))
        .await?;
    reply.expect_status(StatusCode::OK)?;
    assert!(registry.resume("echo").await?);
    let task_id = gw.create(TOKEN, message("echo", r#"{"x":1}"#)).await?;
    let events = gw.events_until_end(&task_id, TOKEN).await?;
    assert!(events.contains(r#""status":"completed""#), "{events}");
    gw.stop().await
}

#[tokio::test]
async fn create_without_a_token_generates_one_that_reads_the_task() -> TestResult {
    let gw = Gateway::start().await?;
    let reply = gw
        .post_json("/tasks", None, &message("echo", r#"{"x":1}"#))
        .await?;
    reply.expect_status(StatusCode::OK)?;
    let body = reply.json()?;
    let token = body["accessToken"]
        .as_str()
        .ok_or_else(|| fail("no accessToken"))?;
    assert_eq!(token.len(), 64);
    assert!(
        token
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    );
    assert_eq!(body["status"], "running");
    let task_id = body["taskId"].as_str().ok_or_else(|| fail("no taskId"))?;
    gw.events_until_end(task_id, token).await?;
    let reply = gw.get(&format!("/tasks/{task_id}"), Some(token)).await?;
    reply.expect_status(StatusCode::OK)?;
    assert_eq!(reply.json()?["result"]["output"], json!({"x": 1}));
    gw.stop().await
}

#[tokio::test]
async fn parts_and_plain_text_content_become_string_input_and_context_is_kept() -> TestResult {
    let gw = Gateway::start().await?;
    let parts = json!({
        "skillId": "echo",
        "contextId": "ctx-1",
        "message": {"role": "user", "content": {"parts": [{"text": "{\"y\":2}"}]}}
    });
    let task_id = gw.create(TOKEN, parts).await?;
    gw.events_until_end(&task_id, TOKEN).await?;
    let task = gw
        .get(&format!("/tasks/{task_id}"), Some(TOKEN))
        .await?
        .json()?;
    assert_eq!(task["contextId"], "ctx-1");
    assert_eq!(task["result"], json!({"output": "{\"y\":2}"}));

    let task_id = gw.create(TOKEN, message("echo", "hello")).await?;
    gw.events_until_end(&task_id, TOKEN).await?;
    let task = gw
        .get(&format!("/tasks/{task_id}"), Some(TOKEN))
        .await?
        .json()?;
    assert_eq!(task["result"], json!({"output": "hello"}));
    gw.stop().await
}

#[tokio::test]
async fn create_rejects_bad_bodies_unknown_skills_and_bad_tokens() -> TestResult {
    let gw = Gateway::start().await?;

    let reply = gw
        .send(request(
            Method::POST,
            "/tasks",
            Some(TOKEN),
            Body::from(r#"{"skillId":"#),
        )?)
        .await?;
    reply.expect_status(StatusCode::BAD_REQUEST)?;
    assert_eq!(
        reply.content_type(),
        Some("application/json; charset=utf-8")
    );
    assert_eq!(reply.error_code()?, "invalid_request");

    let reply = gw
        .post_json("/tasks", Some(TOKEN), &json!({"skillId": "echo"}))
        .await?;
    reply.expect_status(StatusCode::BAD_REQUEST)?;
    assert_eq!(reply.error_code()?, "invalid_request");

    let reply = gw
        .post_json("/tasks", Some(TOKEN), &message("nope", "{}"))
        .await?;
    reply.expect_json(
        StatusCode::NOT_FOUND,
        r#"{"error":{"code":"skill_not_found","message":"Skill \"nope\" not found"}}"#,
    )?;

    let reply = gw
        .post_json("/tasks", Some("short"), &message("echo", r#"{"x":1}"#))
        .await?;
    reply.expect_json(StatusCode::BAD_REQUEST, TOKEN_REQUIRED)?;

    // Nothing above created a task.
    let list = gw.get("/tasks", Some(TOKEN)).await?;
    list.expect_json(StatusCode::OK, r#"{"tasks":[],"total":0,"hasMore":false}"#)?;
    gw.stop().await
}

/// The built-in `sleep` is capped (WORKER_MAX_SLEEP_MS, default one minute): a longer one is
/// refused at admission with 400 `invalid_input`, and nothing is stored.
#[tokio::test]
async fn sleep_longer_than_the_cap_is_invalid_input() -> TestResult {
    let gw = Gateway::start().await?;
    let reply = gw
        .post_json("/tasks", Some(TOKEN), &message("sleep", r#"{"ms":60001}"#))
        .await?;
    reply.expect_status(StatusCode::BAD_REQUEST)?;
    let body = reply.json()?;
    assert_eq!(body["error"]["code"], "invalid_input");
    assert_eq!(body["error"]["issues"][0]["path"], json!(["ms"]));
    gw.stop().await?;

    let mut config = GatewayConfig::for_tests();
    config.worker_max_sleep_ms = 10;
    let gw = Gateway::start_with(config).await?;
    let reply = gw
        .post_json("/tasks", Some(TOKEN), &message("sleep", r#"{"ms":11}"#))
        .await?;
    reply.expect_status(StatusCode::BAD_REQUEST)?;
    assert_eq!(reply.json()?["error"]["code"], "invalid_input");
    gw.create(TOKEN, message("sleep", r#"{"ms":10}"#)).await?;
    gw.stop().await
}

#[tokio::test]
async fn input_failing_the_schema_is_invalid_input_with_zod_like_issues() -> TestResult {
    let gw = Gateway::start().await?;
    let reply = gw
        .post_json("/tasks", Some(TOKEN), &message("sleep", r#"{"ms":"x"}"#))
        .await?;
    reply.expect_json(
        StatusCode::BAD_REQUEST,
        r#"{"error":{"code":"invalid_input","issues":[{"expected":"number","code":"invalid_type","path":["ms"],"message":"Invalid input: expected number, received string"}]}}"#,
    )?;

    // A fraction for an integer is zod's `int`; other failures are `custom` issues.
    let reply = gw
        .post_json("/tasks", Some(TOKEN), &message("sleep", r#"{"ms":1.5}"#))
        .await?;
    reply.expect_status(StatusCode::BAD_REQUEST)?;
    assert_eq!(
        reply.json()?["error"]["issues"],
        json!([{"expected": "int", "code": "invalid_type", "path": ["ms"], "message": "Invalid input: expected int, received number"}])
    );
    let reply = gw
        .post_json("/tasks", Some(TOKEN), &message("sleep", "{}"))
        .await?;
    reply.expect_status(StatusCode::BAD_REQUEST)?;
    let issues = reply.json()?["error"]["issues"].clone();
    assert_eq!(issues[0]["code"], "custom");
    assert_eq!(issues[0]["path"], json!([]));
    assert!(
        issues[0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("ms"))
    );

    // Nested paths keep array indices as numbers.
    let reply = gw
        .post_json(
            "/tasks",
            Some(TOKEN),
            &message("summarize", r#"{"text":7}"#),
        )
        .await?;
    reply.expect_status(StatusCode::BAD_REQUEST)?;
    let issues = reply.json()?["error"]["issues"].clone();
    assert_eq!(issues[0]["path"], json!(["text"]));
    assert_eq!(issues[0]["expected"], "string");
    assert_eq!(
        issues[0]["message"],
        "Invalid input: expected string, received number"
    );
    gw.stop().await
}

fn entrypoint_with(input_schema: Value) -> EntrypointInfo {
    EntrypointInfo {
        key: "schema-test".into(),
        description: String::new(),
        input_schema,
        output_schema: json!({}),
        streaming: false,
        price: None,
        retry_safe: false,
        siwx: None,
        private: false,
        paused: None,
    }
}

fn issues_for(schema: Value, input: Value) -> Option<Value> {
    gateway::core::admit::validate_input(&entrypoint_with(schema), &input)
        .err()
        .map(|error| {
            assert_eq!(error.status, StatusCode::BAD_REQUEST);
            error.issues.unwrap_or_default()
        })
}

#[test]
fn validation_accepts_empty_broken_and_external_schemas() {
    assert_eq!(issues_for(json!({}), json!("anything")), None);
    assert_eq!(issues_for(json!(true), json!([1, 2])), None);
    assert_eq!(
        issues_for(
            json!({"$schema": "https://json-schema.org/draft/2020-12/schema"}),
            json!(1)
        ),
        None
    );
    // Does not compile: accepted (and logged), never a 500.
    assert_eq!(issues_for(json!({"type": 12}), json!("x")), None);
    // Points outside itself: not fetched, accepted.
    assert_eq!(
        issues_for(
            json!({"$ref": "https://example.invalid/schema.json"}),
            json!("x")
        ),
        None
    );
}

#[test]
fn validation_issues_have_zod_paths_and_shapes() {
    let schema = json!({
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": {"type": "object", "properties": {"0": {"type": ["string", "null"]}}}},
            "n": {"type": "integer", "minimum": 1}
        }
    });
    let issues = issues_for(
        schema.clone(),
        json!({"items": [{"0": "ok"}, {"0": 5}], "n": 0}),
    );
    assert_eq!(
        issues,
        Some(json!([
            {"expected": "null | string", "code": "invalid_type", "path": ["items", 1, "0"], "message": "Invalid input: expected null | string, received number"},
            {"code": "custom", "path": ["n"], "message": "0 is less than the minimum of 1"}
        ]))
    );
    assert_eq!(issues_for(schema, json!({"items": [], "n": 3})), None);
    assert_eq!(
        issues_for(json!({"type": "object"}), json!([])),
        Some(
            json!([{"expected": "object", "code": "invalid_type", "path": [], "message": "Invalid input: expected object, received array"}])
        )
    );
}

/// A body streamed without `Content-Length`.
#[tokio::test]
async fn a_body_over_the_limit_is_413_with_a_json_error() -> TestResult {
    let mut config = GatewayConfig::for_tests();
    config.body_limit_bytes = 1024;
    let gw = Gateway::start_with(config).await?;
    let big = message("echo", &"x".repeat(4096));
    let reply = gw.post_json("/tasks", Some(TOKEN), &big).await?;
    reply.expect_status(StatusCode::PAYLOAD_TOO_LARGE)?;
    assert_eq!(
        reply.content_type(),
        Some("application/json; charset=utf-8")
    );
    assert_eq!(reply.error_code()?, "invalid_request");
    gw.stop().await
}

/// What real clients send: the size up front in `Content-Length`.
#[tokio::test]
async fn a_declared_body_over_the_limit_is_413_with_a_json_error() -> TestResult {
    let mut config = GatewayConfig::for_tests();
    config.body_limit_bytes = 1024;
    let gw = Gateway::start_with(config).await?;
    let big = message("echo", &"x".repeat(4096)).to_string();
    let length = big.len().to_string();
    let mut req = request(Method::POST, "/tasks", Some(TOKEN), Body::from(big))?;
    req.headers_mut()
        .insert(header::CONTENT_LENGTH, length.parse()?);
    let reply = gw.send(req).await?;
    reply.expect_status(StatusCode::PAYLOAD_TOO_LARGE)?;
    assert_eq!(
        reply.content_type(),
        Some("application/json; charset=utf-8")
    );
    assert_eq!(reply.error_code()?, "invalid_request");
    gw.stop().await
}

// ----- access -----

#[tokio::test]
async fn a_missing_token_is_401_and_a_wrong_one_looks_like_a_missing_task() -> TestResult {
    let gw = Gateway::start().await?;
    let task_id = gw.create(TOKEN, message("echo", r#"{"x":1}"#)).await?;
    gw.events_until_end(&task_id, TOKEN).await?;

    for uri in [
        format!("/tasks/{task_id}"),
        format!("/tasks/{task_id}/subscribe"),
        "/tasks".to_owned(),
    ] {
        gw.get(&uri, None)
            .await?
            .expect_json(StatusCode::UNAUTHORIZED, TOKEN_REQUIRED)?;
        gw.get(&uri, Some("short"))
            .await?
            .expect_json(StatusCode::BAD_REQUEST, TOKEN_REQUIRED)?;
    }
    let cancel = format!("/tasks/{task_id}/cancel");
    gw.send(request(Method::POST, &cancel, None, Body::empty())?)
        .await?
        .expect_json(StatusCode::UNAUTHORIZED, TOKEN_REQUIRED)?;

    let missing = not_found_body(&task_id);
    gw.get(&format!("/tasks/{task_id}"), Some(OTHER_TOKEN))
        .await?
        .expect_json(StatusCode::NOT_FOUND, &missing)?;
    gw.get(&format!("/tasks/{task_id}/subscribe"), Some(OTHER_TOKEN))
        .await?
        .expect_json(StatusCode::NOT_FOUND, &missing)?;
    gw.send(request(
        Method::POST,
        &cancel,
        Some(OTHER_TOKEN),
        Body::empty(),
    )?)
    .await?
    .expect_json(StatusCode::NOT_FOUND, &missing)?;
    gw.get("/tasks", Some(OTHER_TOKEN))
        .await?
        .expect_json(StatusCode::OK, r#"{"tasks":[],"total":0,"hasMore":false}"#)?;

    // A task that does not exist answers the same as another owner's.
    let unknown = "00000000-0000-0000-0000-000000000000";
    gw.get(&format!("/tasks/{unknown}"), Some(TOKEN))
        .await?
        .expect_json(StatusCode::NOT_FOUND, &not_found_body(unknown))?;

    // A method a task route does not serve answers 405 with the methods it does serve.
    let reply = gw.get(&cancel, Some(TOKEN)).await?;
    reply.expect_json(
        StatusCode::METHOD_NOT_ALLOWED,
        r#"{"error":{"code":"method_not_allowed","message":"GET is not allowed on this path; see the Allow header"}}"#,
    )?;
    assert_eq!(
        reply
            .headers
            .get(header::ALLOW)
            .and_then(|v| v.to_str().ok()),
        Some("POST")
    );
    gw.stop().await
}

// ----- GET /tasks -----

/// `GET /tasks?status=` takes exactly what /openapi.json says it takes (schemathesis found the
/// document allowing any string while the server refuses all but the four states).
#[tokio::test]
async fn the_documented_status_filter_is_the_one_the_server_takes() -> TestResult {
    let gw = Gateway::start().await?;
    let doc = gw.get("/openapi.json", None).await?.json()?;
    let schema = doc["paths"]["/tasks"]["get"]["parameters"]
        .as_array()
        .and_then(|parameters| parameters.iter().find(|p| p["name"] == "status"))
        .map(|parameter| parameter["schema"].clone())
        .ok_or("no status parameter")?;
    for value in [
        "",
        "running",
        "completed,failed",
        " running , cancelled ",
        "running,running",
        "pending",
        "Running",
        "running,",
        ",running",
        "running;failed",
        "running completed",
    ] {
        let documented = jsonschema::is_valid(&schema, &json!(value));
        let query = value.replace(' ', "%20").replace(';', "%3B");
        let reply = gw
            .get(&format!("/tasks?status={query}"), Some(TOKEN))
            .await?;
        let taken = match reply.status {
            StatusCode::OK => true,
            StatusCode::BAD_REQUEST => false,
            other => return Err(fail(format!("status={value:?}: {other}"))),
        };
        assert_eq!(
            documented, taken,
            "status={value:?}: documented {documented}, taken {taken}"
        );
    }
    Ok(())
}

/// The document sets no maximum offset, so any non-negative integer is taken: past `usize` it is
/// an empty page, as upstream answers, not a 400 (schemathesis sent a 36-digit offset).
#[tokio::test]
async fn an_offset_of_any_size_is_an_empty_page() -> TestResult {
    let gw = Gateway::start().await?;
    gw.create(TOKEN, message("echo", "1")).await?;
    for offset in [
        "18446744073709551615",
        "871873475249897693317559146573201408",
    ] {
        let page = gw.list_page(&format!("?offset={offset}")).await?;
        assert_eq!(page["tasks"], json!([]), "offset {offset}");
        assert_eq!(page["total"], 1, "offset {offset}");
        assert_eq!(page["hasMore"], false, "offset {offset}");
    }
    for offset in ["-1", "1.5", "x"] {
        let reply = gw
            .get(&format!("/tasks?offset={offset}"), Some(TOKEN))
            .await?;
        reply.expect_status(StatusCode::BAD_REQUEST)?;
    }
    Ok(())
}

#[tokio::test]
async fn list_filters_by_context_and_status_and_pages() -> TestResult {
    let gw = Gateway::start().await?;
    let mut completed = Vec::new();
    for (ctx, input) in [("ctx-a", "1"), ("ctx-a", "2"), ("ctx-b", "3")] {
        let mut body = message("echo", input);
        body["contextId"] = json!(ctx);
        let task_id = gw.create(TOKEN, body).await?;
        gw.events_until_end(&task_id, TOKEN).await?;
        completed.push(task_id);
    }
    let running = gw
        .create(TOKEN, message("sleep", r#"{"ms":60000}"#))
        .await?;

    let ids = |page: &Value| -> Vec<String> {
        page["tasks"]
            .as_array()
            .map(|tasks| {
                tasks
                    .iter()
                    .filter_map(|t| t["taskId"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };

    let all = gw.list_page("").await?;
    assert_eq!(all["total"], 4);
    assert_eq!(all["hasMore"], false);
    // Newest first.
    let mut newest_first = completed.clone();
    newest_first.insert(0, running.clone());
    newest_first[1..].reverse();
    assert_eq!(ids(&all), newest_first);

    let ctx_a = gw.list_page("?contextId=ctx-a").await?;
    assert_eq!(ctx_a["total"], 2);
    assert!(
        ctx_a["tasks"]
            .as_array()
            .is_some_and(|t| t.iter().all(|t| t["contextId"] == "ctx-a"))
    );

    assert_eq!(
        ids(&gw.list_page("?status=running").await?),
        std::slice::from_ref(&running)
    );
    assert_eq!(gw.list_page("?status=completed").await?["total"], 3);
    assert_eq!(gw.list_page("?status=running,completed").await?["total"], 4);
    assert_eq!(gw.list_page("?status=cancelled,failed").await?["total"], 0);
    assert_eq!(
        gw.list_page("?status=completed&contextId=ctx-b").await?["total"],
        1
    );

    let first = gw.list_page("?limit=2").await?;
    assert_eq!(
        (first["total"].clone(), first["hasMore"].clone()),
        (json!(4), json!(true))
    );
    assert_eq!(ids(&first), newest_first[..2]);
    let second = gw.list_page("?limit=2&offset=2").await?;
    assert_eq!(ids(&second), newest_first[2..]);
    assert_eq!(second["hasMore"], false);
    let last = gw.list_page("?offset=3").await?;
    assert_eq!(ids(&last), newest_first[3..]);
    let none = gw.list_page("?limit=0").await?;
    assert_eq!(ids(&none), Vec::<String>::new());
    assert_eq!(none["total"], 4);
    assert_eq!(gw.list_page("?limit=1000").await?["total"], 4);

    gw.get("/tasks?status=bogus", Some(TOKEN)).await?.expect_json(
        StatusCode::BAD_REQUEST,
        r#"{"error":{"code":"invalid_request","message":"status contains an unsupported task state"}}"#,
    )?;
    for bad in [
        "?status=running,bogus",
        "?limit=1001",
        "?limit=abc",
        "?limit=-1",
        "?offset=-1",
        "?offset=x",
    ] {
        let reply = gw.get(&format!("/tasks{bad}"), Some(TOKEN)).await?;
        reply.expect_status(StatusCode::BAD_REQUEST)?;
        assert_eq!(reply.error_code()?, "invalid_request", "{bad}");
    }

    gw.send(request(
        Method::POST,
        &format!("/tasks/{running}/cancel"),
        Some(TOKEN),
        Body::empty(),
    )?)
    .await?
    .expect_status(StatusCode::OK)?;
    gw.stop().await
}

// ----- cancel -----

#[tokio::test]
async fn cancel_a_running_task_then_cancelling_again_is_invalid_state() -> TestResult {
    let gw = Gateway::start().await?;
    let task_id = gw
        .create(TOKEN, message("sleep", r#"{"ms":60000}"#))
        .await?;
    let running = gw.get(&format!("/tasks/{task_id}"), Some(TOKEN)).await?;
    running.expect_status(StatusCode::OK)?;
    assert_eq!(running.json()?["status"], "running");

    let cancel = format!("/tasks/{task_id}/cancel");
    let reply = gw
        .send(request(Method::POST, &cancel, Some(TOKEN), Body::empty())?)
        .await?;
    reply.expect_status(StatusCode::OK)?;
    assert_eq!(
        reply.content_type(),
        Some("application/json; charset=utf-8")
    );
    let task = reply.json()?;
    assert_eq!(task["taskId"], task_id.as_str());
    assert_eq!(task["status"], "cancelled");
    assert!(task.get("result").is_none() && task.get("error").is_none());

    let again = gw
        .send(request(Method::POST, &cancel, Some(TOKEN), Body::empty())?)
        .await?;
    again.expect_json(
        StatusCode::BAD_REQUEST,
        &format!(
            r#"{{"error":{{"code":"invalid_state","message":"Task \"{task_id}\" is not running"}}}}"#
        ),
    )?;
    let read = gw.get(&format!("/tasks/{task_id}"), Some(TOKEN)).await?;
    assert_eq!(read.json()?["status"], "cancelled");
    gw.stop().await
}

// ----- subscribe -----

#[tokio::test]
async fn subscribe_relays_a_live_cancellation_and_ends() -> TestResult {
    let gw = Gateway::start().await?;
    let task_id = gw
        .create(TOKEN, message("sleep", r#"{"ms":60000}"#))
        .await?;
    let response = tokio::time::timeout(
        PATIENCE,
        gw.app.clone().oneshot(request(
            Method::GET,
            &format!("/tasks/{task_id}/subscribe"),
            Some(TOKEN),
            Body::empty(),
        )?),
    )
    .await
    .map_err(|_| fail("no subscribe response"))??;
    assert_eq!(response.status(), StatusCode::OK);
    let header = |name| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    assert_eq!(
        header(header::CONTENT_TYPE).as_deref(),
        Some("text/event-stream; charset=utf-8")
    );
    assert_eq!(
        header(header::CACHE_CONTROL).as_deref(),
        Some("no-cache, no-transform")
    );

    let mut body = response.into_body();
    let mut text = String::new();
    let running = sse_block(
        "statusUpdate",
        &json!({"taskId": task_id, "status": "running"}),
    );
    while !text.contains(&running) {
        let frame = tokio::time::timeout(PATIENCE, body.frame())
            .await
            .map_err(|_| fail(format!("no running snapshot; got {text:?}")))?
            .ok_or_else(|| fail(format!("stream ended early: {text:?}")))??;
        if let Ok(data) = frame.into_data() {
            text.push_str(std::str::from_utf8(&data)?);
        }
    }

    gw.send(request(
        Method::POST,
        &format!("/tasks/{task_id}/cancel"),
        Some(TOKEN),
        Body::empty(),
    )?)
    .await?
    .expect_status(StatusCode::OK)?;

    let rest = tokio::time::timeout(PATIENCE, body.collect())
        .await
        .map_err(|_| fail("the stream did not end after the cancellation"))??
        .to_bytes();
    text.push_str(std::str::from_utf8(&rest)?);
    // The sleep's progress event is not a task event: only the two status updates.
    assert_eq!(
        text,
        running
            + &sse_block(
                "statusUpdate",
                &json!({"taskId": task_id, "status": "cancelled"})
            )
    );
    gw.stop().await
}

#[tokio::test]
async fn a_failed_task_streams_an_error_event() -> TestResult {
    let gw = Gateway::start().await?;
    let task_id = gw
        .create(
            TOKEN,
            message("fail", r#"{"code":"boom","message":"it broke"}"#),
        )
        .await?;
    let stream = gw.events_until_end(&task_id, TOKEN).await?;
    let error = sse_block(
        "error",
        &json!({"taskId": task_id, "status": "failed", "error": {"code": "boom", "message": "it broke"}}),
    );
    // Live (`running` then `error`) or already failed (snapshot `failed` then `error`): either
    // way the stream ends with the error event.
    assert!(stream.ends_with(&error), "{stream}");
    assert!(stream.starts_with("event: statusUpdate\n"), "{stream}");
    assert_eq!(stream.matches("event: ").count(), 2, "{stream}");

    let task = gw
        .get(&format!("/tasks/{task_id}"), Some(TOKEN))
        .await?
        .json()?;
    assert_eq!(task["status"], "failed");
    assert_eq!(
        task["error"],
        json!({"code": "boom", "message": "it broke"})
    );
    gw.stop().await
}

#[tokio::test]
async fn a_cancelled_task_streams_its_snapshot_and_ends() -> TestResult {
    let gw = Gateway::start().await?;
    let task_id = gw
        .create(TOKEN, message("sleep", r#"{"ms":60000}"#))
        .await?;
    gw.send(request(
        Method::POST,
        &format!("/tasks/{task_id}/cancel"),
        Some(TOKEN),
        Body::empty(),
    )?)
    .await?
    .expect_status(StatusCode::OK)?;
    let stream = gw.events_until_end(&task_id, TOKEN).await?;
    assert_eq!(
        stream,
        sse_block(
            "statusUpdate",
            &json!({"taskId": task_id, "status": "cancelled"})
        )
    );
    gw.stop().await
}

#[tokio::test]
async fn last_event_id_resumes_from_the_event_log() -> TestResult {
    let gw = Gateway::start().await?;
    let task_id = gw.create(TOKEN, message("echo", r#"{"x":1}"#)).await?;
    gw.events_until_end(&task_id, TOKEN).await?;
    // Event 1 was `statusUpdate running`: what follows it is the completion only.
    assert_eq!(
        gw.resumed(&task_id, "1").await?,
        sse_block(
            "resultUpdate",
            &json!({"taskId": task_id, "status": "completed", "result": {"output": {"x": 1}}})
        )
    );
    // Past the last event: nothing more will come for a finished task.
    assert_eq!(gw.resumed(&task_id, "1000").await?, "");
    // Not a sequence number: an ordinary subscription.
    assert!(
        gw.resumed(&task_id, "abc")
            .await?
            .starts_with("event: statusUpdate\n")
    );
    gw.stop().await
}

#[tokio::test]
async fn subscriptions_end_when_the_gateway_shuts_down() -> TestResult {
    let gw = Gateway::start().await?;
    let task_id = gw
        .create(TOKEN, message("sleep", r#"{"ms":60000}"#))
        .await?;
    let response = gw
        .app
        .clone()
        .oneshot(request(
            Method::GET,
            &format!("/tasks/{task_id}/subscribe"),
            Some(TOKEN),
            Body::empty(),
        )?)
        .await?;
    assert_eq!(response.status(), StatusCode::OK);
    gw.shutdown.cancel();
    let text = tokio::time::timeout(PATIENCE, response.into_body().collect())
        .await
        .map_err(|_| fail("the stream outlived the shutdown"))??
        .to_bytes();
    assert!(std::str::from_utf8(&text)?.starts_with("event: statusUpdate\n"));
    gw.stop().await
}

/// Virtual time: the in-process worker keeps the task running (its sleep is far longer) while
/// the clock jumps to the subscription's safety timeout.
#[tokio::test(start_paused = true)]
async fn subscriptions_end_after_the_safety_timeout() -> TestResult {
    let mut config = GatewayConfig::for_tests();
    config.worker_max_sleep_ms = 36_000_000;
    let gw = Gateway::start_with(config).await?;
    let task_id = gw
        .create(TOKEN, message("sleep", r#"{"ms":36000000}"#))
        .await?;
    let started = tokio::time::Instant::now();
    let response = gw
        .app
        .clone()
        .oneshot(request(
            Method::GET,
            &format!("/tasks/{task_id}/subscribe"),
            Some(TOKEN),
            Body::empty(),
        )?)
        .await?;
    assert_eq!(response.status(), StatusCode::OK);
    let bound = gateway::lucid::tasks::SUBSCRIBE_TIMEOUT + Duration::from_secs(60);
    let text = tokio::time::timeout(bound, response.into_body().collect())
        .await
        .map_err(|_| fail("the stream outlived its safety timeout"))??
        .to_bytes();
    assert!(started.elapsed() >= gateway::lucid::tasks::SUBSCRIBE_TIMEOUT);
    // Keep-alive comments (every 15 s) and the running snapshot, nothing else.
    let text = std::str::from_utf8(&text)?;
    let events: String = text
        .split_inclusive("\n\n")
        .filter(|block| !block.starts_with(':'))
        .collect();
    assert_eq!(
        events,
        sse_block(
            "statusUpdate",
            &json!({"taskId": task_id, "status": "running"})
        )
    );
    assert!(text.contains(":"), "no keep-alive in {text:?}");
    let task = gw
        .get(&format!("/tasks/{task_id}"), Some(TOKEN))
        .await?
        .json()?;
    assert_eq!(task["status"], "running");
    gw.send(request(
        Method::POST,
        &format!("/tasks/{task_id}/cancel"),
        Some(TOKEN),
        Body::empty(),
    )?)
    .await?
    .expect_status(StatusCode::OK)?;
    gw.stop().await
}

// ----- paid entrypoints -----

/// A store that claims durability (the in-memory store underneath), for the paths that only
/// look at `durability()`, and that can fail the one write after a payment settled.
struct ClaimsDurable(MemoryStore, ReceiptFault);

/// What happens to the receipt write of a paid admission.
#[derive(Clone, Copy, PartialEq)]
enum ReceiptFault {
    None,
    /// The gateway's claim was lost just before (the task was cancelled meanwhile).
    ClaimLost,
    /// The store cannot be reached.
    Unavailable,
}

#[async_trait]
impl TaskStore for ClaimsDurable {
    fn durability(&self) -> Durability {
        Durability::Durable
    }
    async fn reap_expired_admissions(&self) -> Result<u64, StoreError> {
        self.0.reap_expired_admissions().await
    }
    async fn create(&self, new: NewTask) -> Result<protocol::Task, StoreError> {
        self.0.create(new).await
    }
    async fn get(&self, task_id: &str) -> Result<Option<StoredTask>, StoreError> {
        self.0.get(task_id).await
    }
    async fn list(&self, owner: &OwnerHash, query: &ListQuery) -> Result<TaskPage, StoreError> {
        self.0.list(owner, query).await
    }
    async fn select(
        &self,
        owner: &OwnerHash,
        selection: &store::Selection,
    ) -> Result<store::Selected, StoreError> {
        self.0.select(owner, selection).await
    }
    async fn claim_execution(
        &self,
        task_id: &str,
        holder: &str,
        lease_ttl: Duration,
    ) -> Result<Option<Claim>, StoreError> {
        self.0.claim_execution(task_id, holder, lease_ttl).await
    }
    async fn renew_execution_claim(
        &self,
        lease: &Lease,
        lease_ttl: Duration,
    ) -> Result<bool, StoreError> {
        self.0.renew_execution_claim(lease, lease_ttl).await
    }
    async fn hand_off(&self, lease: &Lease) -> Result<bool, StoreError> {
        self.0.hand_off(lease).await
    }
    async fn hold_for_settlement(&self, lease: &Lease) -> Result<bool, StoreError> {
        self.0.hold_for_settlement(lease).await
    }
    async fn await_input(
        &self,
        lease: &Lease,
        request: serde_json::Value,
        patience: Duration,
    ) -> Result<bool, StoreError> {
        self.0.await_input(lease, request, patience).await
    }
    async fn retry_later(
        &self,
        lease: &Lease,
        error: &protocol::TaskError,
        delay: Duration,
    ) -> Result<bool, StoreError> {
        self.0.retry_later(lease, error, delay).await
    }
    async fn resume(
        &self,
        task_id: &str,
        owner: &OwnerHash,
        input: serde_json::Value,
        metadata: Option<serde_json::Value>,
    ) -> Result<store::Resumed, StoreError> {
        self.0.resume(task_id, owner, input, metadata).await
    }
    async fn record_receipt(
        &self,
        lease: &Lease,
        receipt: &str,
    ) -> Result<store::ReceiptRecorded, StoreError> {
        match self.1 {
            ReceiptFault::None => {}
            ReceiptFault::ClaimLost => {
                self.0
                    .compare_and_set(
                        &lease.task_id,
                        &[TaskStatus::Running],
                        Transition::cancelled(),
                        None,
                    )
                    .await?;
            }
            ReceiptFault::Unavailable => {
                return Err(StoreError::Unavailable("injected".into()));
            }
        }
        self.0.record_receipt(lease, receipt).await
    }
    async fn attach_receipt(
        &self,
        task_id: &str,
        receipt: &str,
    ) -> Result<store::ReceiptRecorded, StoreError> {
        self.0.attach_receipt(task_id, receipt).await
    }
    async fn activate_execution(
        &self,
        lease: &Lease,
        lease_ttl: Duration,
        max_run: Duration,
    ) -> Result<Option<Activation>, StoreError> {
        self.0.activate_execution(lease, lease_ttl, max_run).await
    }
    async fn compare_and_set(
        &self,
        task_id: &str,
        expected: &[TaskStatus],
        next: Transition,
        fence: Option<&Lease>,
    ) -> Result<CasOutcome, StoreError> {
        self.0.compare_and_set(task_id, expected, next, fence).await
    }
    async fn emit(&self, lease: &Lease, event: EventPayload) -> Result<Option<u64>, StoreError> {
        self.0.emit(lease, event).await
    }
    async fn subscribe(
        &self,
        task_id: &str,
        owner: &OwnerHash,
        after_seq: Option<u64>,
    ) -> Result<Option<Subscription>, StoreError> {
        self.0.subscribe(task_id, owner, after_seq).await
    }
    async fn take_next(
        &self,
        entrypoints: &[String],
        holder: &str,
        lease_ttl: Duration,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Claim>, StoreError> {
        self.0
            .take_next(entrypoints, holder, lease_ttl, max, wait)
            .await
    }
    async fn renew_leases(
        &self,
        leases: &[Lease],
        lease_ttl: Duration,
    ) -> Result<Vec<bool>, StoreError> {
        self.0.renew_leases(leases, lease_ttl).await
    }
    async fn recover_expired(&self, limit: usize) -> Result<RecoveryReport, StoreError> {
        self.0.recover_expired(limit).await
    }
    async fn watch_cancellations(
        &self,
        worker_id: &str,
    ) -> Result<tokio::sync::mpsc::UnboundedReceiver<String>, StoreError> {
        self.0.watch_cancellations(worker_id).await
    }
    async fn queue_depth(&self, entrypoint: &str) -> Result<u64, StoreError> {
        self.0.queue_depth(entrypoint).await
    }
    async fn live_count(&self) -> Result<u64, StoreError> {
        self.0.live_count().await
    }
    async fn lease_count(&self) -> Result<u64, StoreError> {
        self.0.lease_count().await
    }
    async fn close(&self) {
        self.0.close().await
    }
}

/// A gateway over `store` whose registry advertises a priced `paid` entrypoint (no worker
/// runs it). Built from the embedded state so fields added to `AppState` later need no change.
async fn paid_gateway(store: Arc<dyn TaskStore>) -> TestResult<Gateway> {
    paid_gateway_with(store, None).await
}

/// [`paid_gateway`] with a payment gate.
async fn paid_gateway_with(
    store: Arc<dyn TaskStore>,
    payments: Option<Arc<Gate>>,
) -> TestResult<Gateway> {
    priced_gateway(store, payments, None).await
}

/// [`paid_gateway_with`]; with `members`, `paid` is private (worker `--private`) and they are
/// the gateway's members.
async fn priced_gateway(
    store: Arc<dyn TaskStore>,
    payments: Option<Arc<Gate>>,
    members: Option<Arc<gateway::core::members::Members>>,
) -> TestResult<Gateway> {
    let registry = Arc::new(MemoryRegistry::new());
    let entry = WorkerEntry {
        worker_id: "paid-worker".into(),
        host: "test".into(),
        started_at_ms: 0,
        concurrency: 1,
        entrypoints: vec![EntrypointInfo {
            key: "paid".into(),
            description: "Costs money".into(),
            input_schema: json!({}),
            output_schema: json!({}),
            streaming: false,
            price: Some(Price {
                invoke: Some("0.01".into()),
                stream: None,
                protocol: Default::default(),
                settle: Default::default(),
                scheme: Default::default(),
            }),
            retry_safe: false,
            siwx: None,
            private: members.is_some(),
            paused: None,
        }],
    };
    registry.heartbeat(&entry, Duration::from_secs(600)).await?;
    let shutdown = CancellationToken::new();
    let tracker = TaskTracker::new();
    let embedded = gateway::embedded::start(GatewayConfig::for_tests(), shutdown.clone(), &tracker);
    let state = AppState {
        store,
        registry,
        payments,
        members,
        ..embedded
    };
    Ok(Gateway {
        app: gateway::app(state),
        shutdown,
        tracker,
    })
}

async fn call(gw: &Gateway, token: Option<&str>) -> TestResult<(StatusCode, Value)> {
    let reply = gw
        .post_json("/tasks", token, &message("paid", "{}"))
        .await?;
    Ok((reply.status, reply.json()?))
}

#[tokio::test]
async fn paid_tasks_need_a_durable_store_then_a_token_then_payments() -> TestResult {
    let memory = || MemoryStore::new(MemoryStoreConfig::default());

    let process = paid_gateway(Arc::new(memory())).await?;
    let (status, body) = call(&process, Some(TOKEN)).await?;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["error"]["code"], "durable_task_store_required");
    // Before anything else, including the caller's capability.
    let (status, _) = call(&process, None).await?;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);

    let durable = paid_gateway(Arc::new(ClaimsDurable(memory(), ReceiptFault::None))).await?;
    let (status, body) = call(&durable, None).await?;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["error"]["code"], "task_access_required");
    // Then the payment gate: this gateway takes no payments (no PAY_TO / FACILITATOR_URL).
    let (status, body) = call(&durable, Some(TOKEN)).await?;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body["error"]["code"], "payment_capability_unsupported");
    process.stop().await?;
    durable.stop().await
}

// ----- after the settlement -----

/// A facilitator in the test process: accepts every credential and settles it.
struct AcceptAll;

#[async_trait]
impl Facilitator for AcceptAll {
    async fn verify(
        &self,
        _: &FacilitatorRequest,
    ) -> Result<VerifyResponse, payments::FacilitatorError> {
        Ok(VerifyResponse {
            is_valid: true,
            invalid_reason: None,
            payer: None,
        })
    }
    async fn settle(
        &self,
        _: &FacilitatorRequest,
    ) -> Result<SettleResponse, payments::FacilitatorError> {
        Ok(SettleResponse {
            success: true,
            error_reason: None,
            payer: None,
            transaction: "0x01".into(),
            network: "eip155:84532".into(),
            amount: None,
        })
    }
    async fn supported(&self) -> Result<SupportedResponse, payments::FacilitatorError> {
        Err(payments::FacilitatorError::Unreachable)
    }
}

/// `paid_gateway` over a store with `fault`, taking payments through [`AcceptAll`].
async fn paying_gateway(fault: ReceiptFault) -> TestResult<Gateway> {
    paying_gateway_for(fault, None).await
}

/// [`paying_gateway`], with `paid` private to `members` when given.
async fn paying_gateway_for(
    fault: ReceiptFault,
    members: Option<Arc<gateway::core::members::Members>>,
) -> TestResult<Gateway> {
    let store = Arc::new(ClaimsDurable(
        MemoryStore::new(MemoryStoreConfig::default()),
        fault,
    ));
    let gate = Gate::new(
        "0x70997970C51812dc3A010C7d01b50e0d17dc79C8".parse()?,
        payments::Network::find("base-sepolia").ok_or_else(|| fail("no base-sepolia"))?,
        Arc::new(AcceptAll),
        Arc::new(MemoryCredentials::default()),
        &GatewayConfig::for_tests(),
    );
    priced_gateway(store, Some(Arc::new(gate)), members).await
}

/// A priced private entrypoint: to a caller who is not a member, paying or not, it does not
/// exist (404 on `POST /tasks` and invoke, never the 402 challenge that would reveal it and its
/// price); a member is challenged as for any priced entrypoint.
#[tokio::test]
async fn a_private_priced_entrypoint_is_unknown_to_a_non_member_even_paying() -> TestResult {
    let member = protocol::token::AccessToken::parse(TOKEN)?.owner_hash();
    let members = gateway::core::members::Members::parse(&format!("alice {}", member.as_str()))?;
    let gw = paying_gateway_for(ReceiptFault::None, Some(Arc::new(members))).await?;
    let stranger = "a-stranger-token-of-enough-length";
    let unknown = |skill: &str| json!({"error": {"code": "skill_not_found", "message": format!("Skill \"{skill}\" not found")}});
    for token in [None, Some(stranger)] {
        let reply = gw
            .post_json("/tasks", token, &message("paid", "{}"))
            .await?;
        reply.expect_status(StatusCode::NOT_FOUND)?;
        assert_eq!(reply.json()?, unknown("paid"));
        // With a payment credential: still not found, before the gate reads it.
        let mut paying = request(
            Method::POST,
            "/tasks",
            token,
            Body::from(message("paid", "{}").to_string()),
        )?;
        paying
            .headers_mut()
            .insert("payment-signature", "eyJ4NDAyVmVyc2lvbiI6Mn0".parse()?);
        let reply = gw.send(paying).await?;
        reply.expect_status(StatusCode::NOT_FOUND)?;
        assert_eq!(reply.json()?, unknown("paid"));
        let invoked = gw
            .post_json("/entrypoints/paid/invoke", token, &json!({"input": {}}))
            .await?;
        let missing = gw
            .post_json("/entrypoints/nosuch/invoke", token, &json!({"input": {}}))
            .await?;
        invoked.expect_status(StatusCode::NOT_FOUND)?;
        assert_eq!(invoked.json()?, missing.json()?);
    }
    let challenged = gw
        .post_json("/tasks", Some(TOKEN), &message("paid", "{}"))
        .await?;
    challenged.expect_status(StatusCode::PAYMENT_REQUIRED)?;
    gw.stop().await
}

/// Sends a paid `POST /tasks` for `paid`: first unpaid for the challenge, then with a
/// credential signed by the Anvil test key #0.
async fn pay_for_task(gw: &Gateway) -> TestResult<Reply> {
    let body = message("paid", "{}");
    let challenge = gw.post_json("/tasks", Some(TOKEN), &body).await?;
    challenge.expect_status(StatusCode::PAYMENT_REQUIRED)?;
    let header = challenge
        .headers
        .get("payment-required")
        .and_then(|value| value.to_str().ok())
        .ok_or_else(|| fail("no PAYMENT-REQUIRED"))?;
    let challenge = Challenge::from_response(Some(header), &challenge.body)?;
    let payer =
        LocalPayer::from_hex("0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80")?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    let credential = payer.answer(&challenge, None, now)?;
    let mut paid = request(
        Method::POST,
        "/tasks",
        Some(TOKEN),
        Body::from(body.to_string()),
    )?;
    paid.headers_mut()
        .insert(credential.name, credential.value.parse()?);
    gw.send(paid).await
}

/// Upstream: an execution start failing after an irreversible settlement answers 200 with the
/// task's real terminal status and the receipt, never an error that would drop either.
#[tokio::test]
async fn a_claim_lost_after_settlement_answers_the_cancelled_task_with_its_receipt() -> TestResult {
    let gw = paying_gateway(ReceiptFault::ClaimLost).await?;
    let reply = pay_for_task(&gw).await?;
    reply.expect_status(StatusCode::OK)?;
    let body = reply.json()?;
    assert_eq!(body["status"], "cancelled", "{body}");
    assert_eq!(body["accessToken"], TOKEN);
    let receipt = reply
        .headers
        .get("payment-response")
        .ok_or_else(|| fail("no receipt"))?
        .clone();
    // The receipt is stored with the task: its owner reads it again.
    let task_id = body["taskId"].as_str().ok_or_else(|| fail("no taskId"))?;
    let read = gw.get(&format!("/tasks/{task_id}"), Some(TOKEN)).await?;
    read.expect_status(StatusCode::OK)?;
    assert_eq!(read.json()?["status"], "cancelled");
    assert_eq!(read.headers.get("payment-response"), Some(&receipt));
    gw.stop().await
}

/// Upstream: a terminal status is never invented. When the task's state cannot be written
/// after settlement, the answer is 503 task_terminalization_failed with the capability and
/// the receipt, so the payer can reconcile.
#[tokio::test]
async fn an_unwritable_task_after_settlement_is_never_given_an_invented_status() -> TestResult {
    let gw = paying_gateway(ReceiptFault::Unavailable).await?;
    let reply = pay_for_task(&gw).await?;
    reply.expect_status(StatusCode::SERVICE_UNAVAILABLE)?;
    let body = reply.json()?;
    assert_eq!(
        body["error"]["code"], "task_terminalization_failed",
        "{body}"
    );
    assert_eq!(body["accessToken"], TOKEN);
    assert!(body["taskId"].is_string(), "{body}");
    assert!(body.get("status").is_none(), "{body}");
    assert!(reply.headers.contains_key("payment-response"));
    gw.stop().await
}

/// The happy path in process: 200 running with the receipt, and only the receipt header is
/// added to the answer.
#[tokio::test]
async fn a_settled_task_is_handed_off_with_its_receipt() -> TestResult {
    let gw = paying_gateway(ReceiptFault::None).await?;
    let reply = pay_for_task(&gw).await?;
    reply.expect_status(StatusCode::OK)?;
    assert_eq!(reply.json()?["status"], "running");
    assert!(reply.headers.contains_key("payment-response"));
    assert!(!reply.headers.contains_key("x-payment-response"));
    assert!(!reply.headers.contains_key("payment-required"));
    gw.stop().await
}

// ----- stored bytes -----

/// A gateway with `config` over `store` whose registry advertises a free, streaming `idle`
/// entrypoint that no worker runs: a task admitted for it stays queued, so a store that stays
/// empty proves that nothing was admitted.
async fn idle_gateway(config: GatewayConfig, store: Arc<dyn TaskStore>) -> TestResult<Gateway> {
    let registry = Arc::new(MemoryRegistry::new());
    let entry = WorkerEntry {
        worker_id: "idle-worker".into(),
        host: "test".into(),
        started_at_ms: 0,
        concurrency: 1,
        entrypoints: vec![EntrypointInfo {
            key: "idle".into(),
            description: "Never runs".into(),
            input_schema: json!({}),
            output_schema: json!({}),
            streaming: true,
            price: None,
            retry_safe: false,
            siwx: None,
            private: false,
            paused: None,
        }],
    };
    registry.heartbeat(&entry, Duration::from_secs(600)).await?;
    let shutdown = CancellationToken::new();
    let tracker = TaskTracker::new();
    let embedded = gateway::embedded::start(config, shutdown.clone(), &tracker);
    let state = AppState {
        store,
        registry,
        ..embedded
    };
    Ok(Gateway {
        app: gateway::app(state),
        shutdown,
        tracker,
    })
}

/// An input over `MAX_INPUT_BYTES` (default 256 KiB; the body limit is 1 MiB) is `413
/// invalid_request` on invoke, stream and `POST /tasks`, and no task is stored; at the limit
/// exactly it is admitted.
#[tokio::test]
async fn an_input_over_the_limit_is_refused_with_413_and_nothing_is_stored() -> TestResult {
    let config = GatewayConfig::for_tests();
    let limit = config.max_input_bytes;
    assert_eq!(limit, 256 * 1024);
    let store = Arc::new(MemoryStore::new(MemoryStoreConfig::default()));
    let gw = idle_gateway(config, store.clone()).await?;

    let big = json!({"input": {"text": "x".repeat(300 * 1024)}});
    for route in ["/entrypoints/idle/invoke", "/entrypoints/idle/stream"] {
        let reply = gw.post_json(route, None, &big).await?;
        reply.expect_status(StatusCode::PAYLOAD_TOO_LARGE)?;
        assert_eq!(
            reply.content_type(),
            Some("application/json; charset=utf-8"),
            "{route}"
        );
        assert_eq!(reply.error_code()?, "invalid_request", "{route}");
    }
    // Text content is a string input: its JSON is the text and two quotes.
    let over = message("idle", &"x".repeat(limit - 1));
    let reply = gw.post_json("/tasks", Some(TOKEN), &over).await?;
    reply.expect_status(StatusCode::PAYLOAD_TOO_LARGE)?;
    assert_eq!(reply.error_code()?, "invalid_request");
    assert_eq!(store.live_count().await?, 0);
    gw.get("/tasks", Some(TOKEN))
        .await?
        .expect_json(StatusCode::OK, r#"{"tasks":[],"total":0,"hasMore":false}"#)?;

    let at_limit = message("idle", &"x".repeat(limit - 2));
    let task_id = gw.create(TOKEN, at_limit).await?;
    let stored = store
        .get(&task_id)
        .await?
        .ok_or("the task was not stored")?;
    assert_eq!(stored.invocation.input.to_string().len(), limit);
    assert_eq!(gw.list_page("").await?["total"], 1);
    gw.stop().await
}

/// Echo of an input the gateway admits but whose output is over the embedded worker's result
/// limit: the task fails with `result_too_large` and stores no result.
#[tokio::test]
async fn an_output_over_the_result_limit_fails_the_task_with_result_too_large() -> TestResult {
    let mut config = GatewayConfig::for_tests();
    config.max_input_bytes = 64 * 1024;
    config.worker_max_result_bytes = 16 * 1024;
    let gw = Gateway::start_with(config).await?;
    let text = "x".repeat(32 * 1024);

    let task_id = gw.create(TOKEN, message("echo", &text)).await?;
    gw.events_until_end(&task_id, TOKEN).await?;
    let task = gw
        .get(&format!("/tasks/{task_id}"), Some(TOKEN))
        .await?
        .json()?;
    assert_eq!(task["status"], "failed", "{task}");
    assert_eq!(task["error"]["code"], "result_too_large", "{task}");
    assert!(task.get("result").is_none(), "{task}");

    // A direct invoke fails the same way.
    let reply = gw
        .post_json("/entrypoints/echo/invoke", None, &json!({"input": text}))
        .await?;
    reply.expect_status(StatusCode::INTERNAL_SERVER_ERROR)?;
    assert_eq!(reply.error_code()?, "result_too_large");

    // Under the result limit, echo completes.
    let task_id = gw.create(TOKEN, message("echo", "small")).await?;
    gw.events_until_end(&task_id, TOKEN).await?;
    let task = gw
        .get(&format!("/tasks/{task_id}"), Some(TOKEN))
        .await?
        .json()?;
    assert_eq!(task["result"], json!({"output": "small"}));
    gw.stop().await
}
