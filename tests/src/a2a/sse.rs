//! Server-Sent Events read as A2A `StreamResponse`s ([`Sse`]): JSON-RPC responses of the
//! request's id, or bare `StreamResponse`s on HTTP+JSON; a refusal read as a [`Failure`].

use futures::StreamExt;
use futures::stream::BoxStream;
use reqwest::StatusCode;
use serde_json::Value;

use super::replies::{Failure, rest_reply, rpc_reply};
use super::{Binding, ensure, state};
use crate::TestResult;
use crate::cluster::PATIENCE;

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
