//! Server-Sent Events read as A2A `StreamResponse`s ([`Sse`]), and the checks of a stream's
//! shape: the task first, `WORKING` before any artifact, one final status last.

use futures::StreamExt;
use futures::stream::BoxStream;
use harness::TestResult;
use reqwest::StatusCode;
use serde_json::Value;

use super::replies::{Failure, rest_reply, rpc_reply};
use super::{Binding, PATIENCE, ensure, state};

/// A Server-Sent Events response read as A2A `StreamResponse`s.
pub struct Sse {
    binding: Binding,
    /// The JSON-RPC request's id, which every event echoes.
    id: Option<Value>,
    body: BoxStream<'static, reqwest::Result<Vec<u8>>>,
    buffer: Vec<u8>,
    ended: bool,
}

impl Sse {
    pub async fn open(
        binding: Binding,
        response: reqwest::Response,
        id: Option<Value>,
    ) -> TestResult<Result<Sse, Failure>> {
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
    pub async fn next(&mut self) -> TestResult<Option<Value>> {
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
    pub async fn rest(&mut self) -> TestResult<Vec<Value>> {
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
    pub fn unwrap(&self, event: Value) -> TestResult<Value> {
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

/// The kind of a `StreamResponse` (`task`, `statusUpdate`, ...).
pub fn kind(event: &Value) -> &str {
    event
        .as_object()
        .and_then(|object| object.keys().next())
        .map_or("", String::as_str)
}

/// The state of a `statusUpdate` (or of a `task`).
pub fn event_state(event: &Value) -> &str {
    match kind(event) {
        "statusUpdate" => state(&event["statusUpdate"]),
        "task" => state(&event["task"]),
        _ => "",
    }
}

pub fn artifact_updates(events: &[Value]) -> Vec<&Value> {
    events
        .iter()
        .filter(|event| kind(event) == "artifactUpdate")
        .map(|event| &event["artifactUpdate"])
        .collect()
}

/// Checks a stream's shape: the task first, a `WORKING` status before any artifact and before
/// the end unless the task already was working (or was cancelled before it started), every
/// event of the task, and one final status update, of `last_state`, as the last event.
pub fn check_stream(events: &[Value], last_state: &str, what: &str) -> TestResult<String> {
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
