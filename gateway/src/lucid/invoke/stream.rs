//! `POST /entrypoints/:key/stream`: runs a streaming entrypoint on a worker and relays its
//! events as SSE, as upstream frames them:
//!
//! ```text
//! id: <sequence>
//! event: <kind>
//! data: {"kind":<kind>, ..fields, "runId", "sequence", "createdAt"}
//! ```
//!
//! `run-start` first, then each worker event (`text`, `delta`, `asset`, `control`, its data
//! merged into the envelope), then the end: `run-end` `succeeded` with output, usage and model;
//! `error` then `run-end` `failed`; or `run-end` `cancelled`. Sequences count from 0 by one per
//! event. The run is cancelled when the client goes away, the wait passes `invoke_timeout_ms`
//! or the gateway shuts down (the stream then just closes).

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{OriginalUri, Path, Request, State};
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use protocol::{ErrorCode, TaskStatus, Timestamp};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;

use super::{
    Kind, Run, cancel, extract_input, find_entrypoint, gate, outcome, read_json, start_paid_run,
};
use crate::core::admit;
use crate::core::state::AppState;
use crate::core::watch::{RunEvent, Terminal};
use crate::http::client_address::Source;
use crate::http::error::json_response;

/// Frames buffered between the relay and a slow client.
const BUFFER: usize = 64;

pub async fn stream(
    State(state): State<AppState>,
    Path(key): Path<String>,
    OriginalUri(uri): OriginalUri,
    request: Request,
) -> Response {
    match handle(state, &key, &uri, request).await {
        Ok(response) | Err(response) => response,
    }
}

async fn handle(
    state: AppState,
    key: &str,
    uri: &Uri,
    request: Request,
) -> Result<Response, Response> {
    let entrypoint = find_entrypoint(&state, request.headers(), key)
        .await
        .map_err(IntoResponse::into_response)?;
    if !entrypoint.streaming {
        // Upstream's body: the key instead of a message.
        return Ok(json_response(
            StatusCode::BAD_REQUEST,
            &json!({"error": {"code": ErrorCode::StreamNotSupported, "key": key}}),
        ));
    }
    let payment = gate(&state, &entrypoint, Kind::Stream, request.headers(), uri)
        .await
        .map_err(|answer| *answer)?
        .payment;
    let Source(source) = Source::of(request.extensions());
    let body = read_json(request)
        .await
        .map_err(IntoResponse::into_response)?;
    let input = extract_input(&body);
    if let Err(err) = admit::check_input(&state, &entrypoint, &input) {
        if err.code == ErrorCode::InvalidInput {
            // Upstream validates inside the stream: the run fails on the wire, status 200
            // (and a paid request is not charged for it).
            return Ok(sse(invalid_input_frames()));
        }
        return Err(err.into_response());
    }
    let (run, receipt) = match payment {
        None => (
            super::start_run(&state, &entrypoint, input, source)
                .await
                .map_err(IntoResponse::into_response)?,
            None,
        ),
        Some(payment) => {
            let (run, receipt) =
                start_paid_run(&state, &entrypoint, input, source, payment).await?;
            (run, Some(receipt))
        }
    };
    let (tx, rx) = mpsc::channel(BUFFER);
    tokio::spawn(relay(state, run, tx));
    let mut response = sse(rx);
    if let Some(receipt) = receipt {
        receipt.attach(&mut response);
    }
    Ok(response)
}

/// The SSE response over the frames `rx` yields; ends when the sender is dropped.
fn sse(rx: mpsc::Receiver<Bytes>) -> Response {
    let body = Body::from_stream(ReceiverStream::new(rx).map(Ok::<_, std::convert::Infallible>));
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, no-transform"),
    );
    headers.insert(header::CONNECTION, HeaderValue::from_static("keep-alive"));
    response
}

/// Upstream's answer to input that fails the schema.
fn invalid_input_frames() -> mpsc::Receiver<Bytes> {
    let mut frames = Envelopes::new(uuid::Uuid::new_v4().to_string());
    let (tx, rx) = mpsc::channel(3);
    let run_id = frames.run_id.clone();
    for frame in [
        frames.run_start(),
        frames.frame(
            "error",
            object(json!({"code": ErrorCode::InvalidInput, "message": "Invalid input"})),
        ),
        frames.frame(
            "run-end",
            object(json!({
                "runId": run_id,
                "status": "failed",
                "error": {"code": ErrorCode::InvalidInput},
            })),
        ),
    ] {
        // Capacity 3: never full, and the receiver is still here.
        let _ = tx.try_send(frame);
    }
    rx
}

/// Follows the run and writes its frames until it ends, the client leaves, the deadline
/// passes or the gateway shuts down. Returning without settling the run cancels it.
async fn relay(state: AppState, mut run: Run, tx: mpsc::Sender<Bytes>) {
    let task_id = run.task.task_id.clone();
    let mut frames = Envelopes::new(task_id.clone());
    if tx.send(frames.run_start()).await.is_err() {
        return;
    }
    let limit = Duration::from_millis(state.config.invoke_timeout_ms);
    let deadline = tokio::time::sleep(limit);
    tokio::pin!(deadline);
    loop {
        let next = tokio::select! {
            biased;
            () = tx.closed() => {
                tracing::debug!(%task_id, "stream client went away");
                return;
            }
            () = state.shutdown.cancelled() => return,
            () = &mut deadline => {
                let terminal = match cancel(state.store.as_ref(), &task_id, &run.entrypoint).await {
                    Ok(None) => Terminal {
                        status: TaskStatus::Failed,
                        result: None,
                        error: Some(protocol::TaskError::new(
                            ErrorCode::TaskTimeout.as_str(),
                            format!("The entrypoint did not finish within {}ms; the run was cancelled", limit.as_millis()),
                        )),
                    },
                    Ok(Some(task)) => match Terminal::of_task(&task) {
                        Some(terminal) => terminal,
                        None => return,
                    },
                    // Still armed: dropping the run tries to cancel once more.
                    Err(err) => {
                        tracing::warn!(%task_id, error = %err, "could not cancel a timed-out stream");
                        return;
                    }
                };
                run.settle();
                send_all(&tx, frames.finish(&terminal)).await;
                return;
            }
            next = run.watch.next() => next,
        };
        match next {
            Ok(RunEvent::Running | RunEvent::Progress) => {}
            Ok(RunEvent::InputRequired { .. }) => {
                // A direct stream is one run: a run that asks for more input ends it as a
                // failure, and the dropped run cancels the waiting task.
                let failed = Terminal {
                    status: TaskStatus::Failed,
                    result: None,
                    error: Some(protocol::TaskError::new(
                        "input_required",
                        "The entrypoint asked for more input; multi-turn tasks need the A2A binding",
                    )),
                };
                send_all(&tx, frames.finish(&failed)).await;
                return;
            }
            Ok(RunEvent::Stream { kind, data }) => {
                if tx.send(frames.event(&kind, data)).await.is_err() {
                    return;
                }
            }
            Ok(RunEvent::Finished(terminal)) => {
                run.settle();
                send_all(&tx, frames.finish(&terminal)).await;
                return;
            }
            Err(err) => {
                // The store failed: tell the client, and let the dropped run cancel the task.
                let error = protocol::TaskError::new(
                    err.code.as_str(),
                    err.message
                        .unwrap_or_else(|| "The run could not be followed".into()),
                );
                let failed = Terminal {
                    status: TaskStatus::Failed,
                    result: None,
                    error: Some(error),
                };
                send_all(&tx, frames.finish(&failed)).await;
                return;
            }
        }
    }
}

async fn send_all(tx: &mpsc::Sender<Bytes>, frames: Vec<Bytes>) {
    for frame in frames {
        if tx.send(frame).await.is_err() {
            return;
        }
    }
}

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// Numbers and frames the events of one run.
struct Envelopes {
    run_id: String,
    next: u64,
}

impl Envelopes {
    fn new(run_id: String) -> Self {
        Envelopes { run_id, next: 0 }
    }

    /// `id:`, `event:` and `data:` lines; the envelope is `{kind, ..fields, runId, sequence,
    /// createdAt}` (a field already present keeps its place).
    fn frame(&mut self, kind: &str, fields: Map<String, Value>) -> Bytes {
        let sequence = self.next;
        self.next += 1;
        let mut envelope = Map::new();
        envelope.insert("kind".into(), Value::String(kind.to_owned()));
        envelope.extend(fields);
        envelope.insert("runId".into(), Value::String(self.run_id.clone()));
        envelope.insert("sequence".into(), Value::from(sequence));
        envelope.insert("createdAt".into(), Value::String(Timestamp::now().to_iso()));
        let data = Value::Object(envelope).to_string();
        Bytes::from(format!("id: {sequence}\nevent: {kind}\ndata: {data}\n\n"))
    }

    fn run_start(&mut self) -> Bytes {
        let run_id = self.run_id.clone();
        self.frame("run-start", object(json!({ "runId": run_id })))
    }

    /// A worker's event: its data object merged into the envelope (the envelope's own fields
    /// win); a non-object value goes under the kind's name.
    fn event(&mut self, kind: &str, data: Value) -> Bytes {
        let fields = match data {
            Value::Object(mut map) => {
                for reserved in ["kind", "runId", "sequence", "createdAt"] {
                    map.remove(reserved);
                }
                map
            }
            other => {
                let mut map = Map::new();
                map.insert(kind.to_owned(), other);
                map
            }
        };
        self.frame(kind, fields)
    }

    /// The frames that end a run.
    fn finish(&mut self, terminal: &Terminal) -> Vec<Bytes> {
        let mut end = Map::new();
        end.insert("runId".into(), Value::String(self.run_id.clone()));
        match terminal.status {
            TaskStatus::Completed => {
                end.insert("status".into(), "succeeded".into());
                if let Some(result) = &terminal.result {
                    end.insert("output".into(), result.output.clone());
                    if let Some(usage) = &result.usage {
                        end.insert("usage".into(), usage.clone());
                    }
                    if let Some(model) = &result.model {
                        end.insert("model".into(), Value::String(model.clone()));
                    }
                }
                vec![self.frame("run-end", end)]
            }
            TaskStatus::Failed => {
                let (code, message) = match &terminal.error {
                    Some(error) => (outcome::error_code(&error.code).1, error.message.clone()),
                    None => (ErrorCode::InternalError, "The run failed".to_owned()),
                };
                let error = json!({"code": code, "message": message});
                let first = self.frame("error", object(error.clone()));
                end.insert("status".into(), "failed".into());
                end.insert("error".into(), error);
                vec![first, self.frame("run-end", end)]
            }
            TaskStatus::Cancelled | TaskStatus::Running => {
                end.insert("status".into(), "cancelled".into());
                vec![self.frame("run-end", end)]
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(frame: &Bytes) -> (String, String, Value) {
        let text = String::from_utf8_lossy(frame).into_owned();
        let mut lines = text.lines();
        let id = lines.next().unwrap_or_default().to_owned();
        let event = lines.next().unwrap_or_default().to_owned();
        let data = lines
            .next()
            .and_then(|line| line.strip_prefix("data: "))
            .and_then(|json| serde_json::from_str(json).ok())
            .unwrap_or(Value::Null);
        (id, event, data)
    }

    #[test]
    fn frames_follow_upstreams_envelope() {
        let mut frames = Envelopes::new("r1".into());
        let (id, event, data) = parse(&frames.run_start());
        assert_eq!((id.as_str(), event.as_str()), ("id: 0", "event: run-start"));
        let keys: Vec<&String> = data
            .as_object()
            .map(|m| m.keys().collect())
            .unwrap_or_default();
        assert_eq!(keys, ["kind", "runId", "sequence", "createdAt"]);

        let (id, _, data) = parse(&frames.event("delta", json!({"delta": 1, "sequence": 99})));
        assert_eq!(id, "id: 1");
        assert_eq!(data["delta"], 1);
        assert_eq!(data["sequence"], 1);
        let keys: Vec<&String> = data
            .as_object()
            .map(|m| m.keys().collect())
            .unwrap_or_default();
        assert_eq!(keys, ["kind", "delta", "runId", "sequence", "createdAt"]);

        let failed = Terminal {
            status: TaskStatus::Failed,
            result: None,
            error: Some(protocol::TaskError::new("boom", "it broke")),
        };
        let end = frames.finish(&failed);
        assert_eq!(end.len(), 2);
        let (_, event, data) = parse(&end[0]);
        assert_eq!(event, "event: error");
        assert_eq!(data["code"], "internal_error");
        assert_eq!(data["message"], "it broke");
        let (id, event, data) = parse(&end[1]);
        assert_eq!((id.as_str(), event.as_str()), ("id: 3", "event: run-end"));
        assert_eq!(data["status"], "failed");
        assert_eq!(
            data["error"],
            json!({"code": "internal_error", "message": "it broke"})
        );
        let keys: Vec<&String> = data
            .as_object()
            .map(|m| m.keys().collect())
            .unwrap_or_default();
        assert_eq!(
            keys,
            ["kind", "runId", "status", "error", "sequence", "createdAt"]
        );
    }
}
