//! The official A2A v1.0 bindings against real processes: a private redis-server, `worker`s
//! hosting the built-ins and the TCK agent (`--a2a-tck-agent`), and a `gateway` with
//! `A2A_DEFAULT_SKILL=tck`. Every operation is exercised on both bindings, JSON-RPC
//! (`POST /a2a/jsonrpc`) and HTTP+JSON (`/a2a/v1`), where it exists on both.
//!
//! What is proven: the strict card and the Lucid card's interfaces; the `A2A-Version` and
//! bearer checks; `SendMessage` (blocking, `returnImmediately`, the TCK agent's behaviours,
//! direct messages, rejection, data in and out, input-required turns); `GetTask` and
//! `historyLength`; `CancelTask` once and twice; streaming (`SendStreamingMessage`,
//! `SubscribeToTask`) in order and to the end; `ListTasks` pages, filters and owners; another
//! token's tasks reading as not found; the spec's error codes and HTTP statuses with their
//! `google.rpc.ErrorInfo`; hostile JSON-RPC and REST input answered without a 5xx; a stream
//! whose worker is killed still ending `COMPLETED` on another worker; and a subscriber to a
//! queued task told when a worker starts it.
//!
//! Processes: each test starts its own Redis, worker(s) and gateway, and stops them on drop.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use base64::Engine;
use futures::StreamExt;
use futures::stream::BoxStream;
use harness::paid::{free_port, wait_healthy};
use harness::process::ServiceProcess;
use harness::redis_server::RedisServer;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use store::registry::{RedisRegistry, WorkerRegistry};
use store::{RedisStore, RedisStoreConfig, TaskStore};

type Res<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// Bound on any one wait; reached only when a test fails.
const PATIENCE: Duration = Duration::from_secs(30);
/// Between two looks at a condition being polled for.
const POLL: Duration = Duration::from_millis(25);
/// Bearer tokens (20 to 256 characters): each one owns the tasks created with it.
const TOKEN_A: &str = "a2a-suite-token-alpha-0123456789";
const TOKEN_B: &str = "a2a-suite-token-bravo-0123456789";
const ERROR_INFO: &str = "type.googleapis.com/google.rpc.ErrorInfo";
/// The gateway's default `BODY_LIMIT_BYTES`.
const BODY_LIMIT: usize = 1024 * 1024;

// The spec's error codes.
const TASK_NOT_FOUND: i64 = -32001;
const TASK_NOT_CANCELABLE: i64 = -32002;
const PUSH_NOT_SUPPORTED: i64 = -32003;
const UNSUPPORTED_OPERATION: i64 = -32004;
const CONTENT_TYPE_NOT_SUPPORTED: i64 = -32005;
const EXTENDED_CARD_NOT_CONFIGURED: i64 = -32007;
const VERSION_NOT_SUPPORTED: i64 = -32009;
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;

/// The `ErrorInfo.reason` of an error code (both bindings carry the same).
fn reason_of(code: i64) -> &'static str {
    match code {
        TASK_NOT_FOUND => "TASK_NOT_FOUND",
        TASK_NOT_CANCELABLE => "TASK_NOT_CANCELABLE",
        PUSH_NOT_SUPPORTED => "PUSH_NOTIFICATION_NOT_SUPPORTED",
        UNSUPPORTED_OPERATION => "UNSUPPORTED_OPERATION",
        CONTENT_TYPE_NOT_SUPPORTED => "CONTENT_TYPE_NOT_SUPPORTED",
        EXTENDED_CARD_NOT_CONFIGURED => "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
        VERSION_NOT_SUPPORTED => "VERSION_NOT_SUPPORTED",
        PARSE_ERROR => "PARSE_ERROR",
        INVALID_REQUEST => "INVALID_REQUEST",
        METHOD_NOT_FOUND => "METHOD_NOT_FOUND",
        INVALID_PARAMS => "INVALID_PARAMS",
        _ => "INTERNAL_ERROR",
    }
}

/// An id no other message, context or task of this test process has.
fn unique(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

fn ensure(condition: bool, what: impl FnOnce() -> String) -> Res {
    if condition {
        Ok(())
    } else {
        Err(what().into())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Binding {
    JsonRpc,
    Rest,
}

const BINDINGS: [Binding; 2] = [Binding::JsonRpc, Binding::Rest];

impl Binding {
    fn tag(self) -> &'static str {
        match self {
            Binding::JsonRpc => "rpc",
            Binding::Rest => "rest",
        }
    }
}

/// Redis, workers and one gateway; everything stops when it drops.
struct Cluster {
    gateway: ServiceProcess,
    workers: Vec<ServiceProcess>,
    base: String,
    http: reqwest::Client,
    // Last: stopped after the processes that use it.
    redis: RedisServer,
}

impl Cluster {
    /// Redis, worker `w1` and the gateway, once the A2A card lists the skills the suite uses.
    async fn start() -> Res<Cluster> {
        let redis = RedisServer::start()?;
        let workers = vec![worker(&redis, "w1")?];
        let port = free_port()?;
        let base = format!("http://127.0.0.1:{port}");
        let gateway = ServiceProcess::start(
            "gateway",
            "g1",
            &[],
            &[
                ("LISTEN_ADDR", format!("127.0.0.1:{port}")),
                ("REDIS_URL", redis.url()),
                ("A2A_DEFAULT_SKILL", "tck".to_owned()),
            ],
        )?;
        wait_healthy(&gateway, &base).await?;
        let cluster = Cluster {
            gateway,
            workers,
            base,
            http: http()?,
            redis,
        };
        cluster
            .wait_for_skills(&["tck", "count", "echo", "sleep"])
            .await?;
        Ok(cluster)
    }

    async fn wait_for_skills(&self, skills: &[&str]) -> Res {
        let start = tokio::time::Instant::now();
        loop {
            let card = self.a2a_card().await?;
            let listed = skill_ids(&card);
            if skills
                .iter()
                .all(|skill| listed.contains(&(*skill).to_owned()))
            {
                return Ok(());
            }
            if start.elapsed() > PATIENCE {
                return Err(format!(
                    "the A2A card never listed {skills:?}: {card}\n{}",
                    self.gateway.log()
                )
                .into());
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn a2a_card(&self) -> Res<Value> {
        let response = self
            .http
            .get(format!("{}/a2a/.well-known/agent-card.json", self.base))
            .send()
            .await?;
        ensure(response.status() == StatusCode::OK, || {
            format!("the A2A card answered {}", response.status())
        })?;
        Ok(response.json().await?)
    }

    /// A client calling with `token`, `A2A-Version: 1.0`.
    fn client(&self, token: &str) -> A2a {
        A2a {
            http: self.http.clone(),
            base: self.base.clone(),
            version: Some("1.0".to_owned()),
            authorization: Some(format!("Bearer {token}")),
        }
    }

    async fn health(&self) -> Res<StatusCode> {
        Ok(self
            .http
            .get(format!("{}/health", self.base))
            .send()
            .await?
            .status())
    }
}

/// A worker hosting the built-ins and the TCK agent, with short leases so that a dead
/// worker's task is recovered within a test.
fn worker(redis: &RedisServer, id: &str) -> Res<ServiceProcess> {
    Ok(ServiceProcess::start(
        "worker",
        id,
        &["--a2a-tck-agent"],
        &[
            ("REDIS_URL", redis.url()),
            ("WORKER_ID", id.to_owned()),
            ("WORKER_LEASE_TTL_MS", "1000".to_owned()),
            ("WORKER_RECOVERY_INTERVAL_MS", "200".to_owned()),
        ],
    )?)
}

fn http() -> Res<reqwest::Client> {
    // Generous: an SSE response counts as one request until its stream ends.
    Ok(reqwest::Client::builder().timeout(PATIENCE * 2).build()?)
}

fn skill_ids(card: &Value) -> Vec<String> {
    card["skills"]
        .as_array()
        .map(|skills| {
            skills
                .iter()
                .filter_map(|skill| skill["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// An A2A error as either binding answered it.
#[derive(Debug)]
struct Failure {
    http: StatusCode,
    /// The JSON-RPC `error.code` (`None` on HTTP+JSON).
    code: Option<i64>,
    /// `ErrorInfo.reason`.
    reason: String,
    challenge: Option<String>,
    body: Value,
}

/// A result, or the A2A error it was refused with.
type Reply = Result<Value, Failure>;

/// Checks a `google.rpc.ErrorInfo` detail and returns its reason.
fn error_info(detail: &Value) -> Res<String> {
    ensure(detail["@type"] == ERROR_INFO, || {
        format!("not an ErrorInfo: {detail}")
    })?;
    ensure(detail["domain"] == "a2a-protocol.org", || {
        format!("ErrorInfo of another domain: {detail}")
    })?;
    Ok(detail["reason"]
        .as_str()
        .ok_or_else(|| format!("ErrorInfo without a reason: {detail}"))?
        .to_owned())
}

fn challenge_of(response: &reqwest::Response) -> Option<String> {
    response
        .headers()
        .get(reqwest::header::WWW_AUTHENTICATE)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
}

/// A JSON-RPC answer: the result, or the error with its `ErrorInfo` checked. `id` is the
/// request's id, which a well-formed request's answer echoes.
async fn rpc_reply(response: reqwest::Response, id: &Value) -> Res<Reply> {
    let http = response.status();
    let challenge = challenge_of(&response);
    let bytes = response.bytes().await?;
    ensure(!http.is_server_error(), || {
        format!(
            "JSON-RPC answered {http}: {}",
            String::from_utf8_lossy(&bytes)
        )
    })?;
    let body: Value = serde_json::from_slice(&bytes).map_err(|err| {
        format!(
            "JSON-RPC answered {http} with a body that is not JSON ({err}): {}",
            String::from_utf8_lossy(&bytes)
        )
    })?;
    ensure(body["jsonrpc"] == "2.0", || {
        format!("not JSON-RPC 2.0: {body}")
    })?;
    ensure(body["id"] == *id, || {
        format!("the answer's id is not {id}: {body}")
    })?;
    if let Some(error) = body.get("error") {
        ensure(body.get("result").is_none(), || {
            format!("both a result and an error: {body}")
        })?;
        let reason = error_info(&error["data"][0])?;
        return Ok(Err(Failure {
            http,
            code: error["code"].as_i64(),
            reason,
            challenge,
            body,
        }));
    }
    ensure(http == StatusCode::OK, || {
        format!("a JSON-RPC result with HTTP {http}: {body}")
    })?;
    Ok(Ok(body["result"].clone()))
}

/// An HTTP+JSON answer: the body, or the AIP-193 error with its `ErrorInfo` checked.
async fn rest_reply(response: reqwest::Response) -> Res<Reply> {
    let http = response.status();
    let challenge = challenge_of(&response);
    let bytes = response.bytes().await?;
    ensure(!http.is_server_error(), || {
        format!(
            "HTTP+JSON answered {http}: {}",
            String::from_utf8_lossy(&bytes)
        )
    })?;
    let body: Value = serde_json::from_slice(&bytes).map_err(|err| {
        format!(
            "HTTP+JSON answered {http} with a body that is not JSON ({err}): {}",
            String::from_utf8_lossy(&bytes)
        )
    })?;
    if http.is_success() {
        return Ok(Ok(body));
    }
    let error = &body["error"];
    ensure(error["code"] == http.as_u16(), || {
        format!("AIP-193 error.code is not the HTTP status {http}: {body}")
    })?;
    ensure(
        error["status"].is_string() && error["message"].is_string(),
        || format!("an AIP-193 error has a status and a message: {body}"),
    )?;
    let reason = error_info(&error["details"][0])?;
    Ok(Err(Failure {
        http,
        code: None,
        reason,
        challenge,
        body,
    }))
}

/// Expects `reply` to be the error of `code` (JSON-RPC: HTTP 200 and that code; HTTP+JSON:
/// `rest_status`), with the code's reason on either binding.
fn expect_error(
    binding: Binding,
    reply: Reply,
    code: i64,
    rest_status: u16,
    what: &str,
) -> Res<Failure> {
    let failure = match reply {
        Ok(value) => {
            return Err(format!("{what} ({binding:?}): expected error {code}, got {value}").into());
        }
        Err(failure) => failure,
    };
    let right = match binding {
        Binding::JsonRpc => failure.http == StatusCode::OK && failure.code == Some(code),
        Binding::Rest => failure.http.as_u16() == rest_status,
    };
    ensure(right && failure.reason == reason_of(code), || {
        format!(
            "{what} ({binding:?}): expected error {code} / HTTP {rest_status} ({}), got HTTP {}: {}",
            reason_of(code),
            failure.http,
            failure.body
        )
    })?;
    Ok(failure)
}

/// Expects an authentication refusal: `401` with `WWW-Authenticate: Bearer` on both bindings.
fn expect_unauthenticated(binding: Binding, reply: Reply, what: &str) -> Res {
    let failure = match reply {
        Ok(value) => return Err(format!("{what} ({binding:?}): expected 401, got {value}").into()),
        Err(failure) => failure,
    };
    ensure(
        failure.http == StatusCode::UNAUTHORIZED
            && failure
                .challenge
                .as_deref()
                .is_some_and(|challenge| challenge.to_ascii_lowercase().starts_with("bearer"))
            && failure.reason == "UNAUTHENTICATED",
        || format!("{what} ({binding:?}): expected 401 with a Bearer challenge, got {failure:?}"),
    )
}

fn ok(reply: Reply, what: &str) -> Res<Value> {
    reply.map_err(|failure| format!("{what}: refused with {failure:?}").into())
}

/// A client of both bindings, with its version and credentials.
#[derive(Clone)]
struct A2a {
    http: reqwest::Client,
    base: String,
    version: Option<String>,
    authorization: Option<String>,
}

impl A2a {
    fn with_version(&self, version: Option<&str>) -> A2a {
        A2a {
            version: version.map(str::to_owned),
            ..self.clone()
        }
    }

    fn with_authorization(&self, authorization: Option<&str>) -> A2a {
        A2a {
            authorization: authorization.map(str::to_owned),
            ..self.clone()
        }
    }

    fn request(&self, method: Method, url: &str) -> reqwest::RequestBuilder {
        let mut request = self.http.request(method, url);
        if let Some(version) = &self.version {
            request = request.header("A2A-Version", version);
        }
        if let Some(authorization) = &self.authorization {
            request = request.header(reqwest::header::AUTHORIZATION, authorization);
        }
        request
    }

    fn jsonrpc_url(&self) -> String {
        format!("{}/a2a/jsonrpc", self.base)
    }

    fn rest_url(&self, path: &str) -> String {
        format!("{}/a2a/v1{path}", self.base)
    }

    fn envelope(method: &str, params: Value) -> (Value, Value) {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let id = json!(NEXT.fetch_add(1, Ordering::Relaxed));
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        (id, body)
    }

    async fn rpc(&self, method: &str, params: Value) -> Res<Reply> {
        let (id, body) = A2a::envelope(method, params);
        let response = self
            .request(Method::POST, &self.jsonrpc_url())
            .json(&body)
            .send()
            .await?;
        rpc_reply(response, &id).await
    }

    async fn rest(&self, method: Method, path: &str, body: Option<Value>) -> Res<Reply> {
        let mut request = self.request(method, &self.rest_url(path));
        if let Some(body) = body {
            request = request.json(&body);
        }
        rest_reply(request.send().await?).await
    }

    /// Posts `body` as it is to the JSON-RPC endpoint: its status and JSON body (`null` when
    /// the body is not JSON), never a 5xx.
    async fn raw_rpc(&self, body: Vec<u8>, content_type: &str) -> Res<(StatusCode, Value)> {
        let response = self
            .request(Method::POST, &self.jsonrpc_url())
            .header(reqwest::header::CONTENT_TYPE, content_type)
            .body(body)
            .send()
            .await?;
        let status = response.status();
        let bytes = response.bytes().await?;
        ensure(!status.is_server_error(), || {
            format!(
                "JSON-RPC answered {status}: {}",
                String::from_utf8_lossy(&bytes)
            )
        })?;
        Ok((
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        ))
    }

    async fn send(&self, binding: Binding, request: Value) -> Res<Reply> {
        match binding {
            Binding::JsonRpc => self.rpc("SendMessage", request).await,
            Binding::Rest => {
                self.rest(Method::POST, "/message:send", Some(request))
                    .await
            }
        }
    }

    /// `SendMessage` that must answer a task: the task.
    async fn send_task(&self, binding: Binding, request: Value) -> Res<Value> {
        let result = ok(self.send(binding, request).await?, "SendMessage")?;
        ensure(result.get("message").is_none(), || {
            format!("SendMessage answered a message, not a task: {result}")
        })?;
        let task = result["task"].clone();
        ensure(task["id"].is_string(), || {
            format!("SendMessage answered no task: {result}")
        })?;
        Ok(task)
    }

    async fn get_task(
        &self,
        binding: Binding,
        id: &str,
        history_length: Option<i64>,
    ) -> Res<Reply> {
        match binding {
            Binding::JsonRpc => {
                let mut params = json!({"id": id});
                if let Some(length) = history_length {
                    params["historyLength"] = json!(length);
                }
                self.rpc("GetTask", params).await
            }
            Binding::Rest => {
                let path = match history_length {
                    Some(length) => format!("/tasks/{id}?historyLength={length}"),
                    None => format!("/tasks/{id}"),
                };
                self.rest(Method::GET, &path, None).await
            }
        }
    }

    async fn cancel(&self, binding: Binding, id: &str) -> Res<Reply> {
        match binding {
            Binding::JsonRpc => self.rpc("CancelTask", json!({"id": id})).await,
            Binding::Rest => {
                self.rest(Method::POST, &format!("/tasks/{id}:cancel"), None)
                    .await
            }
        }
    }

    /// `ListTasks` with `params` (the JSON-RPC params; HTTP+JSON sends them as the query).
    async fn list(&self, binding: Binding, params: Value) -> Res<Reply> {
        match binding {
            Binding::JsonRpc => self.rpc("ListTasks", params).await,
            Binding::Rest => {
                let mut url = reqwest::Url::parse(&self.rest_url("/tasks"))?;
                if let Value::Object(params) = &params {
                    let mut query = url.query_pairs_mut();
                    for (name, value) in params {
                        let value = match value {
                            Value::String(text) => text.clone(),
                            other => other.to_string(),
                        };
                        query.append_pair(name, &value);
                    }
                }
                let response = self.request(Method::GET, url.as_str()).send().await?;
                rest_reply(response).await
            }
        }
    }

    /// `SendStreamingMessage`: the event stream, or the refusal.
    async fn stream(&self, binding: Binding, request: Value) -> Res<Result<Sse, Failure>> {
        match binding {
            Binding::JsonRpc => {
                let (id, body) = A2a::envelope("SendStreamingMessage", request);
                let response = self
                    .request(Method::POST, &self.jsonrpc_url())
                    .json(&body)
                    .send()
                    .await?;
                Sse::open(binding, response, Some(id)).await
            }
            Binding::Rest => {
                let response = self
                    .request(Method::POST, &self.rest_url("/message:stream"))
                    .json(&request)
                    .send()
                    .await?;
                Sse::open(binding, response, None).await
            }
        }
    }

    /// `SubscribeToTask` (HTTP+JSON: `GET` or `POST /tasks/{id}:subscribe`).
    async fn subscribe(
        &self,
        binding: Binding,
        id: &str,
        method: Method,
    ) -> Res<Result<Sse, Failure>> {
        match binding {
            Binding::JsonRpc => {
                let (rpc_id, body) = A2a::envelope("SubscribeToTask", json!({"id": id}));
                let response = self
                    .request(Method::POST, &self.jsonrpc_url())
                    .json(&body)
                    .send()
                    .await?;
                Sse::open(binding, response, Some(rpc_id)).await
            }
            Binding::Rest => {
                let response = self
                    .request(method, &self.rest_url(&format!("/tasks/{id}:subscribe")))
                    .send()
                    .await?;
                Sse::open(binding, response, None).await
            }
        }
    }
}

/// A user message.
fn message(message_id: &str, parts: Value) -> Value {
    json!({"messageId": message_id, "role": "ROLE_USER", "parts": parts})
}

/// A `SendMessageRequest` for `message`.
fn send_request(message: Value) -> Value {
    json!({"message": message})
}

/// A request to the TCK agent for the behaviour of `prefix` (the messageId's prefix).
fn tck(prefix: &str) -> Value {
    send_request(message(&unique(prefix), json!([{"text": "hi"}])))
}

/// A request for `skill` with one part.
fn for_skill(skill: &str, part: Value) -> Value {
    let mut request = send_request(message(&unique(skill), json!([part])));
    request["message"]["metadata"] = json!({"skillId": skill});
    request
}

/// A request that returns at once with a `sleep` task of a minute (to cancel).
fn sleeping(binding: Binding) -> Value {
    // One binding sends the input as a data part, the other as JSON text.
    let part = match binding {
        Binding::JsonRpc => json!({"data": {"ms": 60_000}}),
        Binding::Rest => json!({"text": "{\"ms\": 60000}"}),
    };
    let mut request = for_skill("sleep", part);
    request["configuration"] = json!({"returnImmediately": true});
    request
}

fn state(task: &Value) -> &str {
    task["status"]["state"].as_str().unwrap_or_default()
}

/// The text of a task's status message.
fn status_text(task: &Value) -> &str {
    task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap_or_default()
}

/// A Server-Sent Events response read as A2A `StreamResponse`s.
struct Sse {
    binding: Binding,
    /// The JSON-RPC request's id, which every event echoes.
    id: Option<Value>,
    body: BoxStream<'static, reqwest::Result<Vec<u8>>>,
    buffer: Vec<u8>,
    ended: bool,
}

impl Sse {
    async fn open(
        binding: Binding,
        response: reqwest::Response,
        id: Option<Value>,
    ) -> Res<Result<Sse, Failure>> {
        let is_sse = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| value.starts_with("text/event-stream"));
        if response.status() == StatusCode::OK && is_sse {
            return Ok(Ok(Sse {
                binding,
                id,
                body: response
                    .bytes_stream()
                    .map(|chunk| chunk.map(|bytes| bytes.to_vec()))
                    .boxed(),
                buffer: Vec::new(),
                ended: false,
            }));
        }
        let reply = match binding {
            Binding::JsonRpc => rpc_reply(response, &id.unwrap_or(Value::Null)).await?,
            Binding::Rest => rest_reply(response).await?,
        };
        match reply {
            Ok(value) => Err(format!("a stream answered a plain result: {value}").into()),
            Err(failure) => Ok(Err(failure)),
        }
    }

    /// The next event (its `StreamResponse`), or `None` once the server ended the stream.
    async fn next(&mut self) -> Res<Option<Value>> {
        // Keep-alive comments do not count: the next event is due within PATIENCE.
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            if let Some(end) = self.buffer.windows(2).position(|pair| pair == b"\n\n") {
                let frame: Vec<u8> = self.buffer.drain(..end + 2).collect();
                let frame = String::from_utf8(frame)?;
                let mut data: Option<String> = None;
                for line in frame.lines() {
                    // Comments (`:` keep-alives) and other fields carry no event.
                    if let Some(rest) = line.strip_prefix("data:") {
                        let rest = rest.strip_prefix(' ').unwrap_or(rest);
                        match &mut data {
                            Some(data) => {
                                data.push('\n');
                                data.push_str(rest);
                            }
                            None => data = Some(rest.to_owned()),
                        }
                    }
                }
                let Some(data) = data else { continue };
                let event: Value = serde_json::from_str(&data)
                    .map_err(|err| format!("an SSE event is not JSON ({err}): {data}"))?;
                return Ok(Some(self.unwrap(event)?));
            }
            if self.ended {
                let rest = String::from_utf8_lossy(&self.buffer);
                ensure(rest.trim().is_empty(), || {
                    format!("the stream ended inside an event: {rest}")
                })?;
                return Ok(None);
            }
            match tokio::time::timeout_at(deadline, self.body.next()).await {
                Err(_) => return Err(format!("no SSE event within {PATIENCE:?}").into()),
                Ok(None) => self.ended = true,
                Ok(Some(chunk)) => self.buffer.extend_from_slice(&chunk?),
            }
        }
    }

    /// Every remaining event, up to the end of the stream.
    async fn rest(&mut self) -> Res<Vec<Value>> {
        let mut events = Vec::new();
        loop {
            match self.next().await {
                Ok(Some(event)) => events.push(event),
                Ok(None) => return Ok(events),
                Err(err) => return Err(format!("{err}; the events so far: {events:?}").into()),
            }
        }
    }

    /// A JSON-RPC event is a response of the request's id whose result is the
    /// `StreamResponse`; an HTTP+JSON event is the `StreamResponse` itself. Either has exactly
    /// one of `task`, `message`, `statusUpdate`, `artifactUpdate`.
    fn unwrap(&self, event: Value) -> Res<Value> {
        let response = match self.binding {
            Binding::JsonRpc => {
                ensure(
                    event["jsonrpc"] == "2.0"
                        && Some(&event["id"]) == self.id.as_ref()
                        && event.get("error").is_none(),
                    || format!("not a JSON-RPC result of {:?}: {event}", self.id),
                )?;
                event["result"].clone()
            }
            Binding::Rest => event,
        };
        let kinds = ["task", "message", "statusUpdate", "artifactUpdate"];
        let present = response.as_object().map(|object| {
            object
                .keys()
                .filter(|key| kinds.contains(&key.as_str()))
                .count()
        });
        ensure(
            present == Some(1) && response.as_object().is_some_and(|object| object.len() == 1),
            || format!("not a StreamResponse: {response}"),
        )?;
        Ok(response)
    }
}

/// Waits until `GetTask` shows task `id` in `wanted` (a worker took it, say).
async fn wait_for_state(client: &A2a, binding: Binding, id: &str, wanted: &str) -> Res {
    let start = tokio::time::Instant::now();
    loop {
        let task = ok(client.get_task(binding, id, None).await?, "GetTask")?;
        if state(&task) == wanted {
            return Ok(());
        }
        ensure(start.elapsed() < PATIENCE, || {
            format!("task {id} never reached {wanted}: {task}")
        })?;
        tokio::time::sleep(POLL).await;
    }
}

/// The kind of a `StreamResponse` (`task`, `statusUpdate`, ...).
fn kind(event: &Value) -> &str {
    event
        .as_object()
        .and_then(|object| object.keys().next())
        .map_or("", String::as_str)
}

/// The state of a `statusUpdate` (or of a `task`).
fn event_state(event: &Value) -> &str {
    match kind(event) {
        "statusUpdate" => state(&event["statusUpdate"]),
        "task" => state(&event["task"]),
        _ => "",
    }
}

fn artifact_updates(events: &[Value]) -> Vec<&Value> {
    events
        .iter()
        .filter(|event| kind(event) == "artifactUpdate")
        .map(|event| &event["artifactUpdate"])
        .collect()
}

/// Checks a stream's shape: the task first, a `WORKING` status before any artifact and before
/// the end unless the task already was working (or was cancelled before it started), every
/// event of the task, and one final status update, of `last_state`, as the last event.
fn check_stream(events: &[Value], last_state: &str, what: &str) -> Res<String> {
    let first = events.first().ok_or_else(|| format!("{what}: no events"))?;
    ensure(kind(first) == "task", || {
        format!("{what}: the first event is not the task: {events:?}")
    })?;
    let task = &first["task"];
    let task_id = task["id"].as_str().unwrap_or_default().to_owned();
    let context_id = task["contextId"].as_str().unwrap_or_default().to_owned();
    ensure(
        matches!(state(task), "TASK_STATE_SUBMITTED" | "TASK_STATE_WORKING"),
        || format!("{what}: the task starts submitted or working: {first}"),
    )?;
    let first_artifact = events
        .iter()
        .position(|event| kind(event) == "artifactUpdate");
    let cancelled_before_start = last_state == "TASK_STATE_CANCELED" && first_artifact.is_none();
    if state(task) == "TASK_STATE_SUBMITTED" && !cancelled_before_start {
        let working = events.iter().position(|event| {
            kind(event) == "statusUpdate" && event_state(event) == "TASK_STATE_WORKING"
        });
        ensure(
            working.is_some_and(|working| first_artifact.is_none_or(|artifact| working < artifact)),
            || format!("{what}: WORKING is announced before any artifact: {events:?}"),
        )?;
    }
    for event in &events[1..] {
        let inner = &event[kind(event)];
        ensure(
            inner["taskId"] == task_id.as_str() && inner["contextId"] == context_id.as_str(),
            || format!("{what}: an event of another task or context: {event}"),
        )?;
    }
    let last = events.last().unwrap_or(first);
    ensure(
        kind(last) == "statusUpdate" && event_state(last) == last_state,
        || format!("{what}: the last event is not {last_state}: {events:?}"),
    )?;
    let finals = events
        .iter()
        .filter(|event| {
            kind(event) == "statusUpdate"
                && !matches!(
                    event_state(event),
                    "TASK_STATE_SUBMITTED" | "TASK_STATE_WORKING"
                )
        })
        .count();
    ensure(finals == 1, || {
        format!("{what}: exactly one final status: {events:?}")
    })?;
    Ok(task_id)
}

/// 1. The strict card, the Lucid card's interfaces, `A2A-Version`, the bearer token, and 7.
///    the refusals of both bindings: push configs, the extended card, skills, media types,
///    messages to finished tasks, roles and empty messages.
#[tokio::test(flavor = "multi_thread")]
async fn cards_versions_callers_and_refusals() -> Res {
    let cluster = Cluster::start().await?;

    // The strict A2A card.
    let card = cluster.a2a_card().await?;
    let known = [
        "name",
        "description",
        "version",
        "supportedInterfaces",
        "capabilities",
        "defaultInputModes",
        "defaultOutputModes",
        "skills",
        "provider",
        "documentationUrl",
        "iconUrl",
        "securitySchemes",
        "securityRequirements",
        "signatures",
    ];
    let members = card.as_object().ok_or("the card is not an object")?;
    for member in members.keys() {
        assert!(
            known.contains(&member.as_str()),
            "the strict card has a member the schema lacks: {member}"
        );
    }
    for member in ["name", "description", "version"] {
        assert!(
            card[member].as_str().is_some_and(|text| !text.is_empty()),
            "{member}: {card}"
        );
    }
    let interfaces = card["supportedInterfaces"]
        .as_array()
        .ok_or("no supportedInterfaces")?;
    assert_eq!(interfaces.len(), 2, "{card}");
    assert_eq!(interfaces[0]["protocolBinding"], "JSONRPC");
    assert_eq!(
        interfaces[0]["url"],
        format!("{}/a2a/jsonrpc", cluster.base)
    );
    assert_eq!(interfaces[0]["protocolVersion"], "1.0");
    assert_eq!(interfaces[1]["protocolBinding"], "HTTP+JSON");
    assert_eq!(interfaces[1]["url"], format!("{}/a2a/v1", cluster.base));
    assert_eq!(interfaces[1]["protocolVersion"], "1.0");
    assert_eq!(card["capabilities"]["streaming"], true);
    assert_eq!(card["capabilities"]["pushNotifications"], false);
    let bearer = &card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"];
    assert!(
        bearer["scheme"]
            .as_str()
            .is_some_and(|scheme| scheme.eq_ignore_ascii_case("bearer")),
        "{card}"
    );
    let required = card["securityRequirements"].to_string();
    assert!(required.contains("bearer"), "{card}");
    for modes in ["defaultInputModes", "defaultOutputModes"] {
        assert!(
            card[modes]
                .as_array()
                .is_some_and(|modes| !modes.is_empty()),
            "{modes}: {card}"
        );
    }
    let skills = skill_ids(&card);
    for skill in ["tck", "count", "echo", "sleep"] {
        assert!(skills.contains(&skill.to_owned()), "{skill}: {skills:?}");
    }
    for skill in card["skills"].as_array().into_iter().flatten() {
        assert!(
            skill["id"].is_string()
                && skill["name"].is_string()
                && skill["description"].is_string()
                && skill["tags"].is_array(),
            "{skill}"
        );
    }

    // The card carries a strong validator and answers a revalidation with 304.
    let url = format!("{}/a2a/.well-known/agent-card.json", cluster.base);
    let first = cluster.http.get(&url).send().await?;
    let etag = first
        .headers()
        .get(reqwest::header::ETAG)
        .ok_or("the A2A card has no ETag")?
        .clone();
    let again = cluster
        .http
        .get(&url)
        .header(reqwest::header::IF_NONE_MATCH, etag)
        .send()
        .await?;
    assert_eq!(again.status(), StatusCode::NOT_MODIFIED);

    // The Lucid card lists the same two interfaces after its own.
    let lucid: Value = cluster
        .http
        .get(format!("{}/.well-known/agent-card.json", cluster.base))
        .send()
        .await?
        .json()
        .await?;
    let listed = lucid["supportedInterfaces"]
        .as_array()
        .ok_or("the Lucid card has no supportedInterfaces")?;
    assert_eq!(listed.len(), 3, "{lucid}");
    for (own, strict) in listed.iter().skip(1).zip(interfaces) {
        for field in ["url", "protocolBinding", "protocolVersion"] {
            assert_eq!(own[field], strict[field], "{field}: {lucid}");
        }
    }

    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        // A2A-Version: absent or empty is 0.3; only 1.0 (any patch) is spoken.
        for version in [None, Some(""), Some("0.3"), Some("99.0"), Some("1.1")] {
            let reply = alice
                .with_version(version)
                .get_task(binding, "no-such-task", None)
                .await?;
            expect_error(
                binding,
                reply,
                VERSION_NOT_SUPPORTED,
                400,
                &format!("A2A-Version {version:?}"),
            )?;
        }
        let patched = alice
            .with_version(Some("1.0.2"))
            .get_task(binding, "no-such-task", None)
            .await?;
        expect_error(binding, patched, TASK_NOT_FOUND, 404, "A2A-Version 1.0.2")?;

        // The bearer token: missing, too short, too long, another scheme.
        let too_long = format!("Bearer {}", "t".repeat(257));
        for authorization in [
            None,
            Some("Bearer short"),
            Some("Bearer "),
            Some(too_long.as_str()),
            Some("Basic dXNlcjpwYXNzd29yZA=="),
        ] {
            let caller = alice.with_authorization(authorization);
            let what = format!("Authorization {authorization:?}");
            let reply = caller.get_task(binding, "no-such-task", None).await?;
            expect_unauthenticated(binding, reply, &what)?;
            let reply = caller.send(binding, tck("tck-complete-task")).await?;
            expect_unauthenticated(binding, reply, &what)?;
            let streamed = caller.stream(binding, tck("tck-complete-task")).await?;
            match streamed {
                Ok(_) => return Err(format!("{what}: a stream opened without a caller").into()),
                Err(failure) => expect_unauthenticated(binding, Err(failure), &what)?,
            }
        }
        let listed = alice
            .with_authorization(None)
            .list(binding, json!({}))
            .await?;
        expect_unauthenticated(binding, listed, "ListTasks without a token")?;
    }

    // 7. Refusals, on both bindings.
    for binding in BINDINGS {
        let done = alice.send_task(binding, tck("tck-complete-task")).await?;
        let done_id = done["id"].as_str().ok_or("no task id")?;
        let done_context = done["contextId"].as_str().ok_or("no context id")?;
        assert_eq!(state(&done), "TASK_STATE_COMPLETED", "{done}");

        // Push notifications: none.
        match binding {
            Binding::JsonRpc => {
                let config = json!({"url": "https://example.com/hook"});
                for (method, params) in [
                    (
                        "CreateTaskPushNotificationConfig",
                        json!({"taskId": done_id, "config": config}),
                    ),
                    (
                        "GetTaskPushNotificationConfig",
                        json!({"taskId": done_id, "id": "cfg-1"}),
                    ),
                    (
                        "ListTaskPushNotificationConfigs",
                        json!({"taskId": done_id}),
                    ),
                    (
                        "DeleteTaskPushNotificationConfig",
                        json!({"taskId": done_id, "id": "cfg-1"}),
                    ),
                ] {
                    let reply = alice.rpc(method, params).await?;
                    expect_error(binding, reply, PUSH_NOT_SUPPORTED, 400, method)?;
                }
                let reply = alice.rpc("GetExtendedAgentCard", json!({})).await?;
                expect_error(
                    binding,
                    reply,
                    EXTENDED_CARD_NOT_CONFIGURED,
                    400,
                    "GetExtendedAgentCard",
                )?;
            }
            Binding::Rest => {
                let configs = format!("/tasks/{done_id}/pushNotificationConfigs");
                let config = format!("{configs}/cfg-1");
                for (method, path, body) in [
                    (
                        Method::POST,
                        &configs,
                        Some(json!({"url": "https://example.com/hook"})),
                    ),
                    (Method::GET, &configs, None),
                    (Method::GET, &config, None),
                    (Method::DELETE, &config, None),
                ] {
                    let what = format!("{method} {path}");
                    let reply = alice.rest(method, path, body).await?;
                    expect_error(binding, reply, PUSH_NOT_SUPPORTED, 400, &what)?;
                }
                let reply = alice.rest(Method::GET, "/extendedAgentCard", None).await?;
                expect_error(
                    binding,
                    reply,
                    EXTENDED_CARD_NOT_CONFIGURED,
                    400,
                    "GET /extendedAgentCard",
                )?;
            }
        }

        // A skill that does not exist.
        let reply = alice
            .send(binding, for_skill("no-such-skill", json!({"text": "hi"})))
            .await?;
        expect_error(binding, reply, INVALID_PARAMS, 400, "an unknown skill")?;

        // A media type `count` (a skill with a schema) does not take; `tck` takes anything.
        let nope = json!({"text": "{\"n\": 1}", "mediaType": "application/x-nope"});
        let reply = alice
            .send(binding, for_skill("count", nope.clone()))
            .await?;
        expect_error(
            binding,
            reply,
            CONTENT_TYPE_NOT_SUPPORTED,
            415,
            "application/x-nope to count",
        )?;
        let taken = alice
            .send_task(
                binding,
                send_request(message(&unique("tck-complete-task"), json!([nope]))),
            )
            .await?;
        assert_eq!(state(&taken), "TASK_STATE_COMPLETED", "{taken}");

        // A message to a finished task, and to a task of another context.
        let mut to_done = tck("tck-complete-task");
        to_done["message"]["taskId"] = json!(done_id);
        let reply = alice.send(binding, to_done.clone()).await?;
        expect_error(
            binding,
            reply,
            UNSUPPORTED_OPERATION,
            400,
            "a message to a completed task",
        )?;
        to_done["message"]["contextId"] = json!(format!("{done_context}-other"));
        let reply = alice.send(binding, to_done).await?;
        let failure = reply
            .err()
            .ok_or("a message naming a task of another context was accepted")?;
        assert!(
            failure.http.is_client_error() || failure.code.is_some(),
            "{failure:?}"
        );

        // Only the user speaks, and says something.
        let mut agent = tck("tck-complete-task");
        agent["message"]["role"] = json!("ROLE_AGENT");
        let reply = alice.send(binding, agent).await?;
        expect_error(binding, reply, INVALID_PARAMS, 400, "role ROLE_AGENT")?;
        let empty = send_request(message(&unique("tck-complete-task"), json!([])));
        let reply = alice.send(binding, empty).await?;
        expect_error(binding, reply, INVALID_PARAMS, 400, "no parts")?;
    }
    assert_eq!(cluster.health().await?, StatusCode::OK);
    Ok(())
}

/// 2. `SendMessage` on both bindings: the TCK agent's behaviours, contexts, direct messages,
///    rejection, a named skill's data, `returnImmediately`, `GetTask`, `CancelTask`, and
///    input-required turns; 6. another token's task does not exist.
#[tokio::test(flavor = "multi_thread")]
async fn messages_make_tasks_that_only_their_owner_sees() -> Res {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    let bob = cluster.client(TOKEN_B);
    for binding in BINDINGS {
        let what = |case: &str| format!("{case} ({binding:?})");

        // Completes with the greeting; the history starts with the message sent; a context is
        // made up when none is given and kept when one is.
        let request = tck("tck-complete-task");
        let sent_id = request["message"]["messageId"].clone();
        let task = alice.send_task(binding, request).await?;
        assert_eq!(state(&task), "TASK_STATE_COMPLETED", "{task}");
        assert_eq!(task["status"]["message"]["role"], "ROLE_AGENT", "{task}");
        assert_eq!(status_text(&task), "Hello from TCK", "{task}");
        assert_eq!(task["history"][0]["messageId"], sent_id, "{task}");
        assert_eq!(task["history"][0]["role"], "ROLE_USER", "{task}");
        let generated = task["contextId"].as_str().unwrap_or_default();
        assert!(!generated.is_empty(), "{}", what("a generated context"));
        let context = unique("ctx");
        let mut request = tck("tck-complete-task");
        request["message"]["contextId"] = json!(context);
        let kept = alice.send_task(binding, request).await?;
        assert_eq!(kept["contextId"], context.as_str(), "{kept}");
        assert_ne!(kept["contextId"], generated, "{kept}");

        // Artifacts of every kind.
        let text = alice.send_task(binding, tck("tck-artifact-text")).await?;
        assert_eq!(state(&text), "TASK_STATE_COMPLETED", "{text}");
        assert_eq!(
            text["artifacts"][0]["parts"][0]["text"], "Generated text content",
            "{text}"
        );
        let file = alice.send_task(binding, tck("tck-artifact-file")).await?;
        let part = &file["artifacts"][0]["parts"][0];
        let raw = part["raw"]
            .as_str()
            .ok_or_else(|| format!("no raw part: {file}"))?;
        let bytes = base64::engine::general_purpose::STANDARD.decode(raw)?;
        assert_eq!(bytes, b"Generated file content", "{file}");
        assert_eq!(part["filename"], "output.txt", "{file}");
        assert_eq!(part["mediaType"], "text/plain", "{file}");
        let url = alice
            .send_task(binding, tck("tck-artifact-file-url"))
            .await?;
        assert_eq!(
            url["artifacts"][0]["parts"][0]["url"], "https://example.com/output.txt",
            "{url}"
        );
        let data = alice.send_task(binding, tck("tck-artifact-data")).await?;
        assert_eq!(
            data["artifacts"][0]["parts"][0]["data"],
            json!({"key": "value", "count": 42}),
            "{data}"
        );

        // A direct message instead of a task.
        let reply = ok(
            alice.send(binding, tck("tck-message-response")).await?,
            "tck-message-response",
        )?;
        assert!(reply.get("task").is_none(), "{reply}");
        assert_eq!(reply["message"]["role"], "ROLE_AGENT", "{reply}");
        assert_eq!(
            reply["message"]["parts"][0]["text"], "Direct message response",
            "{reply}"
        );

        // A refusal of the work.
        let rejected = alice.send_task(binding, tck("tck-reject-task")).await?;
        assert_eq!(state(&rejected), "TASK_STATE_REJECTED", "{rejected}");

        // A named skill: echo returns its data part as the artifact.
        let value = json!({"hello": [1, "two", {"three": 3.5}], "binding": binding.tag()});
        let echoed = alice
            .send_task(binding, for_skill("echo", json!({"data": value})))
            .await?;
        assert_eq!(state(&echoed), "TASK_STATE_COMPLETED", "{echoed}");
        assert_eq!(
            echoed["artifacts"][0]["parts"][0]["data"], value,
            "{echoed}"
        );

        // returnImmediately: the task as it stands, then read, cancelled once and no more.
        let running = alice.send_task(binding, sleeping(binding)).await?;
        assert!(
            matches!(
                state(&running),
                "TASK_STATE_SUBMITTED" | "TASK_STATE_WORKING"
            ),
            "{running}"
        );
        let id = running["id"].as_str().ok_or("no task id")?;
        let read = ok(alice.get_task(binding, id, None).await?, "GetTask")?;
        assert_eq!(read["id"], id, "{read}");
        assert_eq!(read["history"].as_array().map(Vec::len), Some(1), "{read}");
        // The history shows the message as it was sent, whichever part carried the input.
        let sent = match binding {
            Binding::JsonRpc => json!([{"data": {"ms": 60_000}}]),
            Binding::Rest => json!([{"text": "{\"ms\": 60000}"}]),
        };
        assert_eq!(read["history"][0]["parts"], sent, "{read}");
        let short = ok(alice.get_task(binding, id, Some(0)).await?, "GetTask 0")?;
        assert!(
            short.get("history").is_none() || short["history"] == json!([]),
            "historyLength 0: {short}"
        );
        let negative = alice.get_task(binding, id, Some(-1)).await?;
        expect_error(binding, negative, INVALID_PARAMS, 400, "historyLength -1")?;

        // 6. Bob does not see Alice's running task, whatever he tries.
        expect_error(
            binding,
            bob.get_task(binding, id, None).await?,
            TASK_NOT_FOUND,
            404,
            &what("another token's GetTask"),
        )?;
        expect_error(
            binding,
            bob.cancel(binding, id).await?,
            TASK_NOT_FOUND,
            404,
            &what("another token's CancelTask"),
        )?;
        match bob.subscribe(binding, id, Method::POST).await? {
            Ok(_) => return Err(what("another token subscribed to the task").into()),
            Err(failure) => {
                expect_error(
                    binding,
                    Err(failure),
                    TASK_NOT_FOUND,
                    404,
                    &what("another token's SubscribeToTask"),
                )?;
            }
        }
        let mut to_alices = tck("tck-complete-task");
        to_alices["message"]["taskId"] = json!(id);
        expect_error(
            binding,
            bob.send(binding, to_alices).await?,
            TASK_NOT_FOUND,
            404,
            &what("another token's message to the task"),
        )?;
        let still = ok(alice.get_task(binding, id, None).await?, "GetTask")?;
        assert!(
            matches!(state(&still), "TASK_STATE_SUBMITTED" | "TASK_STATE_WORKING"),
            "Bob's cancel had no effect: {still}"
        );

        let cancelled = ok(alice.cancel(binding, id).await?, "CancelTask")?;
        assert_eq!(cancelled["id"], id, "{cancelled}");
        assert_eq!(state(&cancelled), "TASK_STATE_CANCELED", "{cancelled}");
        expect_error(
            binding,
            alice.cancel(binding, id).await?,
            TASK_NOT_CANCELABLE,
            409,
            &what("a second CancelTask"),
        )?;
        let after = ok(alice.get_task(binding, id, None).await?, "GetTask")?;
        assert_eq!(state(&after), "TASK_STATE_CANCELED", "{after}");

        // Input-required turns: the task waits for a follow-up message, which only its owner
        // can send, in its context; the next turn behaves by the new messageId.
        let asking = alice.send_task(binding, tck("tck-input-required")).await?;
        assert_eq!(state(&asking), "TASK_STATE_INPUT_REQUIRED", "{asking}");
        assert_eq!(
            status_text(&asking),
            "Input required: send a follow-up message",
            "{asking}"
        );
        let waiting = asking["id"].as_str().ok_or("no task id")?;
        let waiting_context = asking["contextId"].as_str().ok_or("no context id")?;
        let mut answer = tck("tck-complete-task");
        answer["message"]["taskId"] = json!(waiting);
        expect_error(
            binding,
            bob.send(binding, answer.clone()).await?,
            TASK_NOT_FOUND,
            404,
            &what("another token's answer to a waiting task"),
        )?;
        let mut elsewhere = answer.clone();
        elsewhere["message"]["contextId"] = json!(format!("{waiting_context}-other"));
        let refused = alice.send(binding, elsewhere).await?;
        ensure(refused.is_err(), || {
            what("an answer naming another context was accepted")
        })?;
        answer["message"]["contextId"] = json!(waiting_context);
        let answer_id = answer["message"]["messageId"].clone();
        let resumed = alice.send_task(binding, answer.clone()).await?;
        assert_eq!(resumed["id"], waiting, "{resumed}");
        assert_eq!(resumed["contextId"], waiting_context, "{resumed}");
        assert_eq!(state(&resumed), "TASK_STATE_COMPLETED", "{resumed}");
        assert_eq!(status_text(&resumed), "Hello from TCK", "{resumed}");
        let history = resumed["history"].as_array().ok_or("no history")?;
        assert!(
            history
                .iter()
                .any(|message| message["messageId"] == answer_id),
            "the answer is in the history: {resumed}"
        );
        expect_error(
            binding,
            alice.send(binding, answer).await?,
            UNSUPPORTED_OPERATION,
            400,
            &what("an answer to a finished task"),
        )?;

        // Unknown tasks.
        expect_error(
            binding,
            alice.get_task(binding, "no-such-task", None).await?,
            TASK_NOT_FOUND,
            404,
            &what("GetTask of an unknown task"),
        )?;
        expect_error(
            binding,
            alice.cancel(binding, "no-such-task").await?,
            TASK_NOT_FOUND,
            404,
            &what("CancelTask of an unknown task"),
        )?;
    }
    Ok(())
}

/// Turns are bounded (issue 29): with `MAX_TURNS=3` on the worker, a task that keeps asking
/// for input waits after its first and second turns, fails with `too_many_turns` when its
/// third asks again, and a further answer is refused as to any finished task
/// (UnsupportedOperation). A task answered within the bound completes as usual.
#[tokio::test(flavor = "multi_thread")]
async fn a_task_takes_at_most_max_turns() -> Res {
    let mut cluster = Cluster::start().await?;
    // The suite's worker leaves before any task is sent; one allowing three turns replaces it.
    for worker in &mut cluster.workers {
        worker.kill()?;
    }
    let bounded = ServiceProcess::start(
        "worker",
        "w-turns",
        &["--a2a-tck-agent"],
        &[
            ("REDIS_URL", cluster.redis.url()),
            ("WORKER_ID", "w-turns".to_owned()),
            ("MAX_TURNS", "3".to_owned()),
        ],
    )?;
    cluster.workers.push(bounded);
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        let what = |case: &str| format!("{case} ({binding:?})");
        let asking = alice.send_task(binding, tck("tck-input-required")).await?;
        assert_eq!(state(&asking), "TASK_STATE_INPUT_REQUIRED", "{asking}");
        let id = asking["id"].clone();
        let context = asking["contextId"].clone();
        let answer = |prefix: &str| {
            let mut answer = tck(prefix);
            answer["message"]["taskId"] = id.clone();
            answer["message"]["contextId"] = context.clone();
            answer
        };
        let second = alice
            .send_task(binding, answer("tck-input-required"))
            .await?;
        assert_eq!(state(&second), "TASK_STATE_INPUT_REQUIRED", "{second}");
        let third = alice
            .send_task(binding, answer("tck-input-required"))
            .await?;
        assert_eq!(third["id"], id, "{third}");
        assert_eq!(state(&third), "TASK_STATE_FAILED", "{third}");
        assert_eq!(
            third["status"]["message"]["parts"][1]["data"]["code"], "too_many_turns",
            "{third}"
        );
        expect_error(
            binding,
            alice.send(binding, answer("tck-complete-task")).await?,
            UNSUPPORTED_OPERATION,
            400,
            &what("an answer past the turn limit"),
        )?;

        // Within the bound: the third turn completes.
        let asking = alice.send_task(binding, tck("tck-input-required")).await?;
        let id = asking["id"].clone();
        let context = asking["contextId"].clone();
        let answer = |prefix: &str| {
            let mut answer = tck(prefix);
            answer["message"]["taskId"] = id.clone();
            answer["message"]["contextId"] = context.clone();
            answer
        };
        let second = alice
            .send_task(binding, answer("tck-input-required"))
            .await?;
        assert_eq!(state(&second), "TASK_STATE_INPUT_REQUIRED", "{second}");
        let done = alice
            .send_task(binding, answer("tck-complete-task"))
            .await?;
        assert_eq!(state(&done), "TASK_STATE_COMPLETED", "{done}");
    }
    Ok(())
}

/// 3. Streams on both bindings: `count` in order, and 4. `SubscribeToTask` to a running task
///    that is cancelled meanwhile, to a finished and to an unknown task; then the TCK agent's
///    chunked artifact.
#[tokio::test(flavor = "multi_thread")]
async fn streams_and_subscriptions_end_with_the_task() -> Res {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        // `count` streams its numbers as artifact updates of one artifact, in order.
        let mut sse = alice
            .stream(binding, for_skill("count", json!({"data": {"n": 3}})))
            .await?
            .map_err(|failure| format!("count did not stream: {failure:?}"))?;
        let events = sse.rest().await?;
        check_stream(&events, "TASK_STATE_COMPLETED", "count")?;
        let updates = artifact_updates(&events);
        ensure(updates.len() >= 3, || {
            format!("count: three updates: {events:?}")
        })?;
        let stream_id = &updates[0]["artifact"]["artifactId"];
        for (i, update) in updates.iter().take(3).enumerate() {
            let data = &update["artifact"]["parts"][0]["data"];
            assert_eq!(*data, json!(i + 1), "count update {i}: {events:?}");
            assert_eq!(update["artifact"]["artifactId"], *stream_id, "{events:?}");
            assert_eq!(
                update["append"].as_bool().unwrap_or(false),
                i > 0,
                "count update {i} appends to the first: {events:?}"
            );
        }

        // A subscriber to a running task sees it first, then its cancellation, then the end.
        let running = alice.send_task(binding, sleeping(binding)).await?;
        let id = running["id"].as_str().ok_or("no task id")?;
        wait_for_state(&alice, binding, id, "TASK_STATE_WORKING").await?;
        let method = match binding {
            Binding::JsonRpc => Method::POST,
            Binding::Rest => Method::GET,
        };
        let mut sse = alice
            .subscribe(binding, id, method)
            .await?
            .map_err(|failure| format!("could not subscribe: {failure:?}"))?;
        let first = sse.next().await?.ok_or("the subscription ended at once")?;
        assert_eq!(kind(&first), "task", "{first}");
        assert_eq!(first["task"]["id"], id, "{first}");
        assert_eq!(event_state(&first), "TASK_STATE_WORKING", "{first}");
        let cancelled = ok(alice.cancel(binding, id).await?, "CancelTask")?;
        assert_eq!(state(&cancelled), "TASK_STATE_CANCELED", "{cancelled}");
        let mut events = vec![first];
        events.extend(sse.rest().await?);
        check_stream(&events, "TASK_STATE_CANCELED", "a cancelled subscription")?;

        // Nothing to follow: a finished task, an unknown one.
        match alice.subscribe(binding, id, Method::POST).await? {
            Ok(_) => return Err("subscribed to a finished task".into()),
            Err(failure) => {
                expect_error(
                    binding,
                    Err(failure),
                    UNSUPPORTED_OPERATION,
                    400,
                    "SubscribeToTask of a finished task",
                )?;
            }
        }
        match alice
            .subscribe(binding, "no-such-task", Method::GET)
            .await?
        {
            Ok(_) => return Err("subscribed to an unknown task".into()),
            Err(failure) => {
                expect_error(
                    binding,
                    Err(failure),
                    TASK_NOT_FOUND,
                    404,
                    "SubscribeToTask of an unknown task",
                )?;
            }
        }
    }

    // The TCK agent's chunked artifact: two chunks of the artifact `chunked`, the second
    // appended and last, and nothing else between WORKING and COMPLETED.
    for binding in BINDINGS {
        let mut sse = alice
            .stream(binding, tck("tck-stream-artifact-chunked"))
            .await?
            .map_err(|failure| format!("the chunked stream was refused: {failure:?}"))?;
        let events = sse.rest().await?;
        let what = format!("tck-stream-artifact-chunked ({binding:?})");
        check_stream(&events, "TASK_STATE_COMPLETED", &what)?;
        let updates = artifact_updates(&events);
        let seen: Vec<Value> = updates
            .iter()
            .map(|update| {
                json!({
                    "artifactId": update["artifact"]["artifactId"],
                    "parts": update["artifact"]["parts"],
                    "append": update["append"].as_bool().unwrap_or(false),
                    "lastChunk": update["lastChunk"].as_bool().unwrap_or(false),
                })
            })
            .collect();
        assert_eq!(
            seen,
            vec![
                json!({"artifactId": "chunked", "parts": [{"text": "chunk-1 "}], "append": false, "lastChunk": false}),
                json!({"artifactId": "chunked", "parts": [{"text": "chunk-2"}], "append": true, "lastChunk": true}),
            ],
            "{what}: {events:?}"
        );
    }
    Ok(())
}

/// 5. `ListTasks` on both bindings: pages by context, totals, owners, the state filter, page
///    sizes and tokens, artifacts only when asked for.
#[tokio::test(flavor = "multi_thread")]
async fn list_tasks_pages_filters_and_owners() -> Res {
    let cluster = Cluster::start().await?;
    let mut by_state = Vec::new();
    for binding in BINDINGS {
        let what = |case: &str| format!("{case} ({binding:?})");
        // A fresh token for each binding: its tasks are the ones made here.
        let owner = cluster.client(&unique("list-token-of-enough-length"));
        let stranger = cluster.client(&unique("stranger-token-of-enough-length"));
        let context = unique("list-ctx");
        let mut created = Vec::new();
        for prefix in ["tck-complete-task", "tck-artifact-text", "tck-reject-task"] {
            let mut request = tck(prefix);
            request["message"]["contextId"] = json!(context);
            let task = owner.send_task(binding, request).await?;
            created.push(task["id"].as_str().ok_or("no task id")?.to_owned());
        }
        // One more, in a context of its own.
        owner.send_task(binding, tck("tck-complete-task")).await?;

        let first = ok(
            owner
                .list(binding, json!({"contextId": context, "pageSize": 2}))
                .await?,
            "ListTasks",
        )?;
        let first_tasks = first["tasks"].as_array().ok_or("no tasks")?;
        assert_eq!(first_tasks.len(), 2, "{first}");
        assert_eq!(first["totalSize"], 3, "{first}");
        assert_eq!(first["pageSize"], 2, "{first}");
        let token = first["nextPageToken"].as_str().unwrap_or_default();
        assert!(!token.is_empty(), "{}: {first}", what("a next page"));
        let second = ok(
            owner
                .list(
                    binding,
                    json!({"contextId": context, "pageSize": 2, "pageToken": token}),
                )
                .await?,
            "ListTasks page 2",
        )?;
        let second_tasks = second["tasks"].as_array().ok_or("no tasks")?;
        assert_eq!(second_tasks.len(), 1, "{second}");
        assert_eq!(second["nextPageToken"], "", "{second}");
        assert_eq!(second["totalSize"], 3, "{second}");
        let mut listed: Vec<String> = first_tasks
            .iter()
            .chain(second_tasks)
            .map(|task| {
                assert_eq!(task["contextId"], context.as_str(), "{task}");
                task["id"].as_str().unwrap_or_default().to_owned()
            })
            .collect();
        listed.sort();
        let mut expected = created.clone();
        expected.sort();
        assert_eq!(listed, expected, "{}", what("both pages"));

        // Without a context: all four. Another token: none.
        let all = ok(owner.list(binding, json!({})).await?, "ListTasks")?;
        assert_eq!(all["tasks"].as_array().map(Vec::len), Some(4), "{all}");
        assert_eq!(all["totalSize"], 4, "{all}");
        for params in [json!({"contextId": context}), json!({})] {
            let none = ok(stranger.list(binding, params).await?, "ListTasks")?;
            assert_eq!(
                none["tasks"],
                json!([]),
                "{}: {none}",
                what("another token")
            );
            assert_eq!(none["totalSize"], 0, "{none}");
        }

        // By state.
        let completed = ok(
            owner
                .list(
                    binding,
                    json!({"contextId": context, "status": "TASK_STATE_COMPLETED"}),
                )
                .await?,
            "ListTasks by state",
        )?;
        let tasks = completed["tasks"].as_array().ok_or("no tasks")?;
        assert_eq!(tasks.len(), 2, "{completed}");
        assert!(
            tasks
                .iter()
                .all(|task| state(task) == "TASK_STATE_COMPLETED"),
            "{completed}"
        );

        // Artifacts only when asked for.
        assert!(
            first_tasks
                .iter()
                .chain(second_tasks)
                .all(|task| task.get("artifacts").is_none()),
            "{}: {first} {second}",
            what("no artifacts by default")
        );
        let with = ok(
            owner
                .list(
                    binding,
                    json!({"contextId": context, "includeArtifacts": true}),
                )
                .await?,
            "ListTasks with artifacts",
        )?;
        let with_artifacts = with["tasks"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|task| task["artifacts"][0]["parts"][0]["text"] == "Generated text content")
            .count();
        assert_eq!(with_artifacts, 1, "{with}");

        // Page sizes and tokens.
        let default = ok(
            owner
                .list(binding, json!({"contextId": context, "pageSize": 0}))
                .await?,
            "ListTasks pageSize 0",
        )?;
        assert_eq!(
            default["tasks"].as_array().map(Vec::len),
            Some(3),
            "{default}"
        );
        assert_eq!(default["pageSize"], 50, "{default}");
        assert_eq!(default["nextPageToken"], "", "{default}");
        for (params, case) in [
            (json!({"pageSize": 101}), "pageSize 101"),
            (json!({"pageSize": -1}), "pageSize -1"),
            (json!({"pageToken": "not-a-token"}), "a foreign pageToken"),
            (json!({"pageToken": "!!!"}), "a garbage pageToken"),
            (json!({"historyLength": -1}), "historyLength -1"),
        ] {
            let reply = owner.list(binding, params).await?;
            expect_error(binding, reply, INVALID_PARAMS, 400, &what(case))?;
        }
        by_state.push((binding, owner, context));
    }

    // A state filter counts and pages the tasks in that state only: the context holds one
    // rejected task and no failed one.
    for (binding, owner, context) in by_state {
        for (status, count) in [("TASK_STATE_REJECTED", 1), ("TASK_STATE_FAILED", 0)] {
            let page = ok(
                owner
                    .list(binding, json!({"contextId": context, "status": status}))
                    .await?,
                "ListTasks by state",
            )?;
            let tasks = page["tasks"].as_array().ok_or("no tasks")?;
            assert_eq!(tasks.len(), count, "{status} ({binding:?}): {page}");
            assert!(
                tasks.iter().all(|task| state(task) == status),
                "{status} ({binding:?}): {page}"
            );
            assert_eq!(
                page["totalSize"], count,
                "totalSize counts only {status} ({binding:?}): {page}"
            );
        }
    }
    Ok(())
}

/// 8. Hostile JSON-RPC and HTTP+JSON input: the right code, never a 5xx, and the gateway stays
///    up.
#[tokio::test(flavor = "multi_thread")]
async fn hostile_input_gets_protocol_errors_and_never_a_5xx() -> Res {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    let json = "application/json";

    /// Expects a JSON-RPC error of `code` answered with HTTP 200 and the id `id`.
    fn expect_rpc(answer: &(StatusCode, Value), code: i64, id: &Value, what: &str) -> Res {
        let (status, body) = answer;
        ensure(
            *status == StatusCode::OK
                && body["jsonrpc"] == "2.0"
                && body["error"]["code"] == code
                && body["id"] == *id
                && body.get("result").is_none(),
            || format!("{what}: expected error {code} with id {id}, got {status}: {body}"),
        )?;
        let reason = error_info(&body["error"]["data"][0])?;
        ensure(reason == reason_of(code), || {
            format!("{what}: reason {reason} for {code}")
        })
    }
    let get =
        |id: Value| json!({"jsonrpc": "2.0", "id": id, "method": "GetTask", "params": {"id": "x"}});
    let bytes = |value: &Value| value.to_string().into_bytes();

    // Not JSON, or JSON that is not one request object.
    let answer = alice
        .raw_rpc(br#"{"jsonrpc":"2.0","id":1,"method":"#.to_vec(), json)
        .await?;
    expect_rpc(&answer, PARSE_ERROR, &Value::Null, "invalid JSON")?;
    for (body, case) in [
        (json!([get(json!(1))]), "a batch"),
        (json!([]), "an empty batch"),
        (json!("GetTask"), "a string"),
        (json!(42), "a number"),
        (Value::Null, "null"),
    ] {
        let answer = alice.raw_rpc(bytes(&body), json).await?;
        expect_rpc(&answer, INVALID_REQUEST, &Value::Null, case)?;
    }

    // The envelope: version, method, id, params.
    let mut old = get(json!(1));
    old["jsonrpc"] = json!("1.0");
    expect_rpc(
        &alice.raw_rpc(bytes(&old), json).await?,
        INVALID_REQUEST,
        &json!(1),
        "jsonrpc 1.0",
    )?;
    let no_version = json!({"id": 1, "method": "GetTask", "params": {"id": "x"}});
    expect_rpc(
        &alice.raw_rpc(bytes(&no_version), json).await?,
        INVALID_REQUEST,
        &json!(1),
        "no jsonrpc member",
    )?;
    for method in [None, Some(json!(7)), Some(json!(["GetTask"]))] {
        let mut request = get(json!(2));
        match method.clone() {
            Some(method) => request["method"] = method,
            None => {
                if let Some(object) = request.as_object_mut() {
                    object.remove("method");
                }
            }
        }
        expect_rpc(
            &alice.raw_rpc(bytes(&request), json).await?,
            INVALID_REQUEST,
            &json!(2),
            &format!("method {method:?}"),
        )?;
    }
    let mut unknown = get(json!("u-1"));
    unknown["method"] = json!("NoSuchMethod");
    expect_rpc(
        &alice.raw_rpc(bytes(&unknown), json).await?,
        METHOD_NOT_FOUND,
        &json!("u-1"),
        "an unknown method",
    )?;
    let long_name = "M".repeat(10 * 1024);
    unknown["method"] = json!(long_name);
    let answer = alice.raw_rpc(bytes(&unknown), json).await?;
    expect_rpc(&answer, METHOD_NOT_FOUND, &json!("u-1"), "a 10 KB method")?;
    let message = answer.1["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.len() < 1024 && !message.contains(&long_name),
        "the method name is not echoed in full: {} bytes",
        message.len()
    );
    for (id, case) in [
        (json!({"a": 1}), "an object id"),
        (json!([1]), "an array id"),
        (json!(1.5), "a fractional id"),
        (json!(1e300), "a huge float id"),
        (json!("i".repeat(10_000)), "a 10,000-character id"),
    ] {
        let answer = alice.raw_rpc(bytes(&get(id)), json).await?;
        expect_rpc(&answer, INVALID_REQUEST, &Value::Null, case)?;
    }
    let mut array_params = get(json!(3));
    array_params["params"] = json!(["x"]);
    expect_rpc(
        &alice.raw_rpc(bytes(&array_params), json).await?,
        INVALID_PARAMS,
        &json!(3),
        "params as an array",
    )?;
    for (method, params, case) in [
        (
            "SendMessage",
            json!({"message": "hello"}),
            "message as a string",
        ),
        (
            "SendMessage",
            json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": {"text": "x"}}}),
            "parts as an object",
        ),
        (
            "SendMessage",
            json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"nothing": 1}]}}),
            "a part with no content",
        ),
        (
            "GetTask",
            json!({"id": "x", "historyLength": "ten"}),
            "historyLength as a string",
        ),
        ("GetTask", json!({"id": 7}), "id as a number"),
        (
            "ListTasks",
            json!({"pageSize": "two"}),
            "pageSize as a string",
        ),
    ] {
        let request = json!({"jsonrpc": "2.0", "id": 4, "method": method, "params": params});
        expect_rpc(
            &alice.raw_rpc(bytes(&request), json).await?,
            INVALID_PARAMS,
            &json!(4),
            case,
        )?;
    }

    // Deep nesting: an error, not a crash.
    let depth = 10_000;
    let nested = format!(
        r#"{{"jsonrpc":"2.0","id":5,"method":"SendMessage","params":{{"x":{}{}}}}}"#,
        "[".repeat(depth),
        "]".repeat(depth)
    );
    let (status, body) = alice.raw_rpc(nested.into_bytes(), json).await?;
    assert_eq!(status, StatusCode::OK, "deep nesting: {body}");
    assert!(
        body["error"]["code"].is_i64() && body.get("result").is_none(),
        "deep nesting: {body}"
    );

    // A body over the limit: a JSON-RPC error or 413.
    let big = json!({"jsonrpc": "2.0", "id": 6, "method": "SendMessage", "params": {"message":
        message_of_size(BODY_LIMIT + 1024)}});
    let (status, body) = alice.raw_rpc(bytes(&big), json).await?;
    assert!(
        status == StatusCode::PAYLOAD_TOO_LARGE
            || (status == StatusCode::OK && body["error"]["code"].is_i64()),
        "an oversized body: {status} {body}"
    );

    // Not declared as JSON, or not UTF-8.
    expect_rpc(
        &alice.raw_rpc(bytes(&get(json!(7))), "text/plain").await?,
        CONTENT_TYPE_NOT_SUPPORTED,
        &Value::Null,
        "Content-Type text/plain",
    )?;
    let mut invalid_utf8 =
        br#"{"jsonrpc":"2.0","id":8,"method":"GetTask","params":{"id":""#.to_vec();
    invalid_utf8.extend_from_slice(&[0xff, 0xfe, 0xc3]);
    invalid_utf8.extend_from_slice(br#""}}"#);
    expect_rpc(
        &alice.raw_rpc(invalid_utf8, json).await?,
        PARSE_ERROR,
        &Value::Null,
        "invalid UTF-8",
    )?;

    // HTTP+JSON: bad bodies, bad queries, unknown paths, in AIP-193 shape.
    let rest = |path: &str| format!("{}/a2a/v1{path}", cluster.base);
    let post = |path: &str, body: &'static [u8], content_type: &str| {
        alice
            .request(Method::POST, &rest(path))
            .header(reqwest::header::CONTENT_TYPE, content_type)
            .body(body)
            .send()
    };
    for (body, content_type, status, case) in [
        (&b"{nope"[..], json, 400, "invalid JSON"),
        (&b"[]"[..], json, 400, "an array"),
        (&b"\"x\""[..], json, 400, "a string"),
        (&b"{\"message\": 7}"[..], json, 400, "message as a number"),
        (&b"{}"[..], "text/plain", 415, "text/plain"),
    ] {
        let failure = rest_reply(post("/message:send", body, content_type).await?)
            .await?
            .err()
            .ok_or_else(|| format!("REST {case}: accepted"))?;
        assert_eq!(failure.http.as_u16(), status, "REST {case}: {failure:?}");
    }
    for (path, status, case) in [
        ("/tasks?pageSize=abc", 400, "pageSize=abc"),
        (
            "/tasks?includeArtifacts=maybe",
            400,
            "includeArtifacts=maybe",
        ),
        ("/tasks?status=DONE", 400, "status=DONE"),
        ("/tasks/x?historyLength=abc", 400, "historyLength=abc"),
        ("/no/such/path", 404, "an unknown path"),
        ("/tasks/x:explode", 404, "an unknown action"),
    ] {
        let response = alice.request(Method::GET, &rest(path)).send().await?;
        let failure = rest_reply(response)
            .await?
            .err()
            .ok_or_else(|| format!("REST {case}: accepted"))?;
        assert_eq!(failure.http.as_u16(), status, "REST {case}: {failure:?}");
    }

    // Still up, still answering.
    assert_eq!(cluster.health().await?, StatusCode::OK);
    expect_error(
        Binding::JsonRpc,
        alice
            .get_task(Binding::JsonRpc, "no-such-task", None)
            .await?,
        TASK_NOT_FOUND,
        404,
        "after the hostile input",
    )?;
    let task = alice
        .send_task(Binding::JsonRpc, tck("tck-complete-task"))
        .await?;
    assert_eq!(state(&task), "TASK_STATE_COMPLETED", "{task}");

    // JSON's grammar has no bound on numbers, but RFC 8259 (section 6) lets a parser limit
    // their range: 1e400 is past what an f64 holds, so the body is unreadable (-32700), and an
    // error without an id is all it can get.
    let huge = br#"{"jsonrpc":"2.0","id":1e400,"method":"GetTask","params":{"id":"x"}}"#;
    let answer = alice.raw_rpc(huge.to_vec(), json).await?;
    expect_rpc(&answer, PARSE_ERROR, &Value::Null, "an id of 1e400")?;
    assert_eq!(cluster.health().await?, StatusCode::OK);
    Ok(())
}

/// A user message whose JSON is about `size` bytes.
fn message_of_size(size: usize) -> Value {
    message("big", json!([{"text": "a".repeat(size)}]))
}

/// 9. A streaming task whose worker is killed mid-run is recovered by another worker, and
///    the stream, which never broke, ends `COMPLETED`; then, with no worker at all, a
///    subscriber to a queued task is told when a new worker starts it.
#[tokio::test(flavor = "multi_thread")]
async fn a_stream_survives_its_worker_being_killed() -> Res {
    let mut cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    let mut sse = alice
        .stream(
            Binding::JsonRpc,
            for_skill("sleep", json!({"data": {"ms": 3000}})),
        )
        .await?
        .map_err(|failure| format!("the sleep did not stream: {failure:?}"))?;
    let mut events = Vec::new();
    // Until the task is WORKING: w1, the only worker, runs it.
    loop {
        let event = sse.next().await?.ok_or("the stream ended before WORKING")?;
        let working = event_state(&event) == "TASK_STATE_WORKING";
        ensure(
            !matches!(
                event_state(&event),
                "TASK_STATE_COMPLETED" | "TASK_STATE_FAILED" | "TASK_STATE_CANCELED"
            ),
            || format!("the task ended before its worker was killed: {event}"),
        )?;
        events.push(event);
        if working {
            break;
        }
    }
    let task_id = events[0]["task"]["id"]
        .as_str()
        .ok_or("the first event is not the task")?
        .to_owned();

    // A second worker joins; then the first dies.
    cluster.workers.push(worker(&cluster.redis, "w2")?);
    let store = RedisStore::connect(RedisStoreConfig::new(cluster.redis.url())).await?;
    let registry = RedisRegistry::new(&store);
    let start = tokio::time::Instant::now();
    while !registry
        .workers()
        .await?
        .iter()
        .any(|worker| worker.worker_id == "w2")
    {
        ensure(start.elapsed() < PATIENCE, || "w2 never registered".into())?;
        tokio::time::sleep(POLL).await;
    }
    let stored = store.get(&task_id).await?.ok_or("the task is not stored")?;
    assert_eq!(stored.attempt, 1, "the task runs on w1");
    cluster
        .workers
        .first_mut()
        .ok_or("no first worker")?
        .kill()?;

    events.extend(sse.rest().await?);
    check_stream(&events, "TASK_STATE_COMPLETED", "a stream across a crash")?;
    let task = ok(
        alice.get_task(Binding::JsonRpc, &task_id, None).await?,
        "GetTask",
    )?;
    assert_eq!(state(&task), "TASK_STATE_COMPLETED", "{task}");
    assert_eq!(
        task["artifacts"][0]["parts"][0]["data"],
        json!({"slept": 3000}),
        "{task}"
    );
    let rest = ok(
        alice.get_task(Binding::Rest, &task_id, None).await?,
        "GetTask",
    )?;
    assert_eq!(state(&rest), "TASK_STATE_COMPLETED", "{rest}");
    let stored = store.get(&task_id).await?.ok_or("the task is not stored")?;
    assert_eq!(stored.attempt, 2, "run again once, by w2");

    // No worker left: a new task stays SUBMITTED (its skill is still offered for a grace
    // period). A subscriber sees it SUBMITTED, then WORKING once a worker starts it.
    cluster
        .workers
        .last_mut()
        .ok_or("no second worker")?
        .kill()?;
    let queued = alice
        .send_task(Binding::JsonRpc, sleeping(Binding::JsonRpc))
        .await?;
    assert_eq!(state(&queued), "TASK_STATE_SUBMITTED", "{queued}");
    let queued_id = queued["id"].as_str().ok_or("no task id")?;
    let mut sse = alice
        .subscribe(Binding::Rest, queued_id, Method::POST)
        .await?
        .map_err(|failure| format!("could not subscribe: {failure:?}"))?;
    let first = sse.next().await?.ok_or("the subscription ended at once")?;
    assert_eq!(event_state(&first), "TASK_STATE_SUBMITTED", "{first}");
    cluster.workers.push(worker(&cluster.redis, "w3")?);
    wait_for_state(&alice, Binding::Rest, queued_id, "TASK_STATE_WORKING").await?;
    let cancelled = ok(alice.cancel(Binding::Rest, queued_id).await?, "CancelTask")?;
    assert_eq!(state(&cancelled), "TASK_STATE_CANCELED", "{cancelled}");
    let mut events = vec![first];
    events.extend(sse.rest().await?);
    check_stream(
        &events,
        "TASK_STATE_CANCELED",
        "a subscription to a queued task",
    )?;
    assert!(
        events.iter().any(|event| {
            kind(event) == "statusUpdate" && event_state(event) == "TASK_STATE_WORKING"
        }),
        "the subscriber is told when the task starts working: {events:?}"
    );
    Ok(())
}
