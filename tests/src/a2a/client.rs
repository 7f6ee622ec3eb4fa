//! The A2A client ([`A2a`]) of both bindings, JSON-RPC (`POST /a2a/jsonrpc`) and HTTP+JSON
//! (`/a2a/v1`), with its version header and credentials; and polling a task's state.

use std::sync::atomic::{AtomicU64, Ordering};

use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::replies::{Failure, Reply, ok, rest_reply, rpc_reply};
use super::sse::Sse;
use super::{Binding, ensure, state};
use crate::TestResult;
use crate::cluster::{PATIENCE, POLL};

/// A client of both bindings, with its version and credentials.
#[derive(Clone)]
pub struct A2a {
    pub http: reqwest::Client,
    pub base: String,
    pub version: Option<String>,
    pub authorization: Option<String>,
}

impl A2a {
    /// A client of the gateway at `base` (its URL, `BASE_PATH` included) sending
    /// `A2A-Version: 1.0` and no credentials.
    pub fn new(http: reqwest::Client, base: &str) -> A2a {
        A2a {
            http,
            base: base.to_owned(),
            version: Some("1.0".to_owned()),
            authorization: None,
        }
    }

    /// The same client calling as bearer `token` (`None`: without an `Authorization` header).
    pub fn with_bearer(&self, token: Option<&str>) -> A2a {
        A2a {
            authorization: token.map(|token| format!("Bearer {token}")),
            ..self.clone()
        }
    }

    pub fn with_version(&self, version: Option<&str>) -> A2a {
        A2a {
            version: version.map(str::to_owned),
            ..self.clone()
        }
    }

    pub fn with_authorization(&self, authorization: Option<&str>) -> A2a {
        A2a {
            authorization: authorization.map(str::to_owned),
            ..self.clone()
        }
    }

    pub fn request(&self, method: Method, url: &str) -> reqwest::RequestBuilder {
        let mut request = self.http.request(method, url);
        if let Some(version) = &self.version {
            request = request.header("A2A-Version", version);
        }
        if let Some(authorization) = &self.authorization {
            request = request.header(reqwest::header::AUTHORIZATION, authorization);
        }
        request
    }

    pub fn jsonrpc_url(&self) -> String {
        format!("{}/a2a/jsonrpc", self.base)
    }

    pub fn rest_url(&self, path: &str) -> String {
        format!("{}/a2a/v1{path}", self.base)
    }

    /// A JSON-RPC request of `method` with `params`: its id (unique in this process) and body.
    pub fn envelope(method: &str, params: Value) -> (Value, Value) {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let id = json!(NEXT.fetch_add(1, Ordering::Relaxed));
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        (id, body)
    }

    pub async fn rpc(&self, method: &str, params: Value) -> TestResult<Reply> {
        let (id, body) = A2a::envelope(method, params);
        let response = self
            .request(Method::POST, &self.jsonrpc_url())
            .json(&body)
            .send()
            .await?;
        rpc_reply(response, &id).await
    }

    /// `method` on `path` below the base (any route, Lucid or A2A) with `body` as JSON: the
    /// status, headers and JSON body (`null` when the body is not JSON), as they came; for
    /// tests that compare whole answers rather than read them as a [`Reply`].
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> TestResult<(StatusCode, HeaderMap, Value)> {
        let mut request = self.request(method, &format!("{}{path}", self.base));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await?;
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response.bytes().await?;
        Ok((
            status,
            headers,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        ))
    }

    /// The JSON-RPC request of `method` with `params`, as [`A2a::call`] answers it: the status
    /// and the whole JSON-RPC answer (`null` when it is not JSON), unchecked.
    pub async fn rpc_call(&self, method: &str, params: Value) -> TestResult<(StatusCode, Value)> {
        let (_, body) = A2a::envelope(method, params);
        let (status, _, answer) = self.call(Method::POST, "/a2a/jsonrpc", Some(body)).await?;
        Ok((status, answer))
    }

    pub async fn rest(&self, method: Method, path: &str, body: Option<Value>) -> TestResult<Reply> {
        let mut request = self.request(method, &self.rest_url(path));
        if let Some(body) = body {
            request = request.json(&body);
        }
        rest_reply(request.send().await?).await
    }

    /// Posts `body` as it is to the JSON-RPC endpoint: its status and JSON body (`null` when
    /// the body is not JSON), never a 5xx.
    pub async fn raw_rpc(
        &self,
        body: Vec<u8>,
        content_type: &str,
    ) -> TestResult<(StatusCode, Value)> {
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

    pub async fn send(&self, binding: Binding, request: Value) -> TestResult<Reply> {
        match binding {
            Binding::JsonRpc => self.rpc("SendMessage", request).await,
            Binding::Rest => {
                self.rest(Method::POST, "/message:send", Some(request))
                    .await
            }
        }
    }

    /// `SendMessage` that must answer a task: the task.
    pub async fn send_task(&self, binding: Binding, request: Value) -> TestResult<Value> {
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

    pub async fn get_task(
        &self,
        binding: Binding,
        id: &str,
        history_length: Option<i64>,
    ) -> TestResult<Reply> {
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

    pub async fn cancel(&self, binding: Binding, id: &str) -> TestResult<Reply> {
        match binding {
            Binding::JsonRpc => self.rpc("CancelTask", json!({"id": id})).await,
            Binding::Rest => {
                self.rest(Method::POST, &format!("/tasks/{id}:cancel"), None)
                    .await
            }
        }
    }

    /// `ListTasks` with `params` (the JSON-RPC params; HTTP+JSON sends them as the query).
    pub async fn list(&self, binding: Binding, params: Value) -> TestResult<Reply> {
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
    pub async fn stream(
        &self,
        binding: Binding,
        request: Value,
    ) -> TestResult<Result<Sse, Failure>> {
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
    pub async fn subscribe(
        &self,
        binding: Binding,
        id: &str,
        method: Method,
    ) -> TestResult<Result<Sse, Failure>> {
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

/// Waits until `GetTask` shows task `id` in `wanted` (a worker took it, say).
pub async fn wait_for_state(client: &A2a, binding: Binding, id: &str, wanted: &str) -> TestResult {
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
