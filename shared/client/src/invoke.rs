//! Direct invocation: `POST {base}/entrypoints/{key}/invoke` (one JSON result) and
//! `POST {base}/entrypoints/{key}/stream` (server-sent events).

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use reqwest::Response;
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::card::{AgentCard, endpoint};
use super::error::ClientError;
use super::pay::{Payer, PaymentHeader, with_credential};
use super::sse::{SseEvent, SseParser};
use super::tasks::Settlement;
use super::{Client, IDEMPOTENCY_KEY_HEADER};

#[derive(Debug, Clone, Default)]
pub struct InvokeOptions {
    /// Sent as `Idempotency-Key`: a retry with the same key replays the first result.
    pub idempotency_key: Option<String>,
    /// Pays a 402 (x402) and sends the request once more with the credential; without one a
    /// 402 is a [`ClientError::PaymentRequired`]. See [`super::pay`].
    pub payer: Option<Arc<dyn Payer>>,
}

/// `{run_id, status, output, usage?, model?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InvokeResult {
    pub run_id: String,
    pub status: String,
    #[serde(default)]
    pub output: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
    /// `Idempotency-Replayed: true`: this is the stored result of an earlier call.
    #[serde(skip)]
    pub replayed: bool,
    /// Payment evidence from the response's headers (the x402 receipt of a paid call).
    #[serde(skip)]
    pub settlement: Settlement,
}

/// One event of an entrypoint stream: `run-start`, `text`, `delta`, `asset`, `control`,
/// `error`, `run-end`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamEvent {
    #[serde(rename = "type")]
    pub kind: String,
    /// The event's JSON data (a string when the data is not JSON).
    pub data: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

impl StreamEvent {
    fn from_sse(event: SseEvent) -> Self {
        let data = serde_json::from_str(&event.data).unwrap_or(Value::String(event.data));
        StreamEvent {
            kind: event.event,
            data,
            id: event.id,
        }
    }

    /// `run-end`: the last event of a run.
    pub fn is_end(&self) -> bool {
        self.kind == "run-end"
    }
}

type ByteStream = Pin<Box<dyn Stream<Item = Result<bytes::Bytes, reqwest::Error>> + Send>>;

/// The events of an SSE response, parsed as they arrive.
pub struct EventStream {
    body: ByteStream,
    parser: SseParser,
    pending: std::collections::VecDeque<SseEvent>,
    idle_timeout: Option<Duration>,
    done: bool,
    settlement: Settlement,
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStream")
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl EventStream {
    pub(crate) fn new(response: Response, max_event_bytes: usize, idle: Option<Duration>) -> Self {
        EventStream {
            settlement: Settlement::from_headers(response.headers()),
            body: Box::pin(response.bytes_stream()),
            parser: SseParser::new(max_event_bytes),
            pending: Default::default(),
            idle_timeout: idle,
            done: false,
        }
    }

    /// Payment evidence from the response's headers (the x402 receipt of a paid stream, which
    /// is settled before the first event).
    pub fn settlement(&self) -> &Settlement {
        &self.settlement
    }

    /// The next raw event; `None` once the server closed the stream.
    pub async fn next_sse(&mut self) -> Result<Option<SseEvent>, ClientError> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Ok(Some(event));
            }
            if self.done {
                return Ok(None);
            }
            let chunk = match self.idle_timeout {
                Some(limit) => tokio::time::timeout(limit, self.body.next())
                    .await
                    .map_err(|_| {
                        ClientError::Timeout(format!(
                            "the event stream was silent for {}s",
                            limit.as_secs()
                        ))
                    })?,
                None => self.body.next().await,
            };
            match chunk {
                Some(Ok(bytes)) => {
                    let events =
                        self.parser
                            .push(&bytes)
                            .map_err(|err| ClientError::Malformed {
                                status: 200,
                                reason: err.to_string(),
                                body: String::new(),
                            })?;
                    self.pending.extend(events);
                }
                Some(Err(err)) => return Err(ClientError::network(err)),
                None => {
                    self.done = true;
                    self.pending.extend(self.parser.finish());
                }
            }
        }
    }

    /// The next event of an entrypoint stream.
    pub async fn next(&mut self) -> Result<Option<StreamEvent>, ClientError> {
        Ok(self.next_sse().await?.map(StreamEvent::from_sse))
    }
}

impl Client {
    /// Runs entrypoint `key` with `input` and returns its result.
    pub async fn invoke(
        &self,
        card: &AgentCard,
        key: &str,
        input: &Value,
        options: &InvokeOptions,
    ) -> Result<InvokeResult, ClientError> {
        let url = endpoint(&self.base_url(card)?, &["entrypoints", key, "invoke"]);
        let body = json!({ "input": input });
        let request = |credential: Option<&PaymentHeader>| {
            let mut request = self
                .http
                .post(url.clone())
                .json(&body)
                .timeout(self.options.invoke_timeout);
            if let Some(key) = &options.idempotency_key {
                request = request.header(IDEMPOTENCY_KEY_HEADER, key);
            }
            with_credential(request, credential)
        };
        let response = self
            .send_paying(&url, request, options.payer.as_deref())
            .await
            .map_err(|unanswered| unanswered.error)?;
        let replayed = response
            .headers()
            .get("idempotency-replayed")
            .is_some_and(|value| value.as_bytes().eq_ignore_ascii_case(b"true"));
        let settlement = Settlement::from_headers(response.headers());
        let mut result: InvokeResult = self.json(response).await?;
        result.replayed = replayed;
        result.settlement = settlement;
        Ok(result)
    }

    /// Starts entrypoint `key` as a stream; read the events with [`EventStream::next`].
    pub async fn stream(
        &self,
        card: &AgentCard,
        key: &str,
        input: &Value,
    ) -> Result<EventStream, ClientError> {
        self.stream_with_options(card, key, input, &InvokeOptions::default())
            .await
    }

    /// [`Client::stream`] with a payer and an `Idempotency-Key`, as for [`Client::invoke`].
    pub async fn stream_with_options(
        &self,
        card: &AgentCard,
        key: &str,
        input: &Value,
        options: &InvokeOptions,
    ) -> Result<EventStream, ClientError> {
        let url = endpoint(&self.base_url(card)?, &["entrypoints", key, "stream"]);
        let body = json!({ "input": input });
        let request = |credential: Option<&PaymentHeader>| {
            let mut request = self
                .http
                .post(url.clone())
                .header(ACCEPT, "text/event-stream")
                .json(&body);
            if let Some(key) = &options.idempotency_key {
                request = request.header(IDEMPOTENCY_KEY_HEADER, key);
            }
            with_credential(request, credential)
        };
        let response = self
            .send_paying(&url, request, options.payer.as_deref())
            .await
            .map_err(|unanswered| unanswered.error)?;
        self.event_stream(response, None).await
    }

    /// An SSE response as a stream, or the error a non-SSE answer stands for.
    pub(crate) async fn event_stream(
        &self,
        response: Response,
        idle: Option<Duration>,
    ) -> Result<EventStream, ClientError> {
        let status = response.status();
        if !status.is_success() {
            let body = self
                .read_text(response, self.options.max_response_bytes)
                .await?;
            return Err(ClientError::remote(status.as_u16(), body));
        }
        let is_sse = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| value.trim_start().starts_with("text/event-stream"));
        if !is_sse {
            let body = self
                .read_text(response, self.options.max_response_bytes)
                .await?;
            return Err(ClientError::Malformed {
                status: status.as_u16(),
                reason: "expected text/event-stream".into(),
                body,
            });
        }
        Ok(EventStream::new(
            response,
            self.options.max_event_bytes,
            idle,
        ))
    }
}
