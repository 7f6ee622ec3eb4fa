//! A run of a remote streaming entrypoint: the SSE answer of `POST {base}/entrypoints/:key/stream`
//! relayed onto the task's events. `text`, `delta`, `asset` and `control` frames are emitted
//! with the profile's envelope fields (`kind`, `runId`, `sequence`, `createdAt`) taken off;
//! `run-end` ends the run (`succeeded`: the result; `failed`: the agent's error; `cancelled`).
//! Every frame is bounded by the answer bound; a stream that ends without `run-end` fails. A
//! connection lost before any event was relayed asks for another attempt (as an invoke's
//! does); one lost after fails the task, since a retry would relay the events twice.

use serde_json::{Map, Value};

use super::invoke::agent_error;
use crate::handler::{HandlerError, HandlerOutput, TaskContext};

const ENVELOPE: [&str; 4] = ["kind", "runId", "sequence", "createdAt"];
const RELAYED: [&str; 4] = ["text", "delta", "asset", "control"];

/// Relays the frames of `response` until `run-end`.
pub async fn relay(
    mut response: reqwest::Response,
    max_bytes: usize,
    ctx: &TaskContext,
) -> Result<HandlerOutput, HandlerError> {
    let mut buffer: Vec<u8> = Vec::new();
    let mut last_error: Option<Value> = None;
    let mut relayed = 0usize;
    loop {
        while let Some(end) = frame_end(&buffer) {
            let frame: Vec<u8> = buffer.drain(..end.0 + end.1).take(end.0).collect();
            let Some((kind, data)) = parse_frame(&frame) else {
                continue;
            };
            if RELAYED.contains(&kind.as_str()) {
                relayed += 1;
            }
            if let Some(outcome) = handle(&kind, data, &mut last_error, ctx).await? {
                return Ok(outcome);
            }
        }
        if buffer.len() > max_bytes {
            return Err(HandlerError::new(
                "result_too_large",
                format!("an event of the agent's stream exceeds {max_bytes} bytes"),
            ));
        }
        match response.chunk().await {
            Ok(Some(chunk)) => buffer.extend_from_slice(&chunk),
            Ok(None) => {
                return Err(HandlerError::new(
                    "agent_invalid_response",
                    "the agent's stream ended without run-end",
                ));
            }
            Err(err) if relayed == 0 => return Err(super::invoke::unavailable(err)),
            Err(err) => {
                // Events are out already: another attempt would relay them again, so a stream
                // broken mid-way fails its task (not retried).
                let broken = super::invoke::unavailable(err);
                return Err(HandlerError::new(
                    broken.code,
                    format!(
                        "the agent's stream broke after {relayed} events: {}",
                        broken.message
                    ),
                ));
            }
        }
    }
}

/// One frame: relayed (`None`) or the end of the run (`Some`, or the run's error).
async fn handle(
    kind: &str,
    data: Value,
    last_error: &mut Option<Value>,
    ctx: &TaskContext,
) -> Result<Option<HandlerOutput>, HandlerError> {
    let mut fields = match data {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    for key in ENVELOPE {
        fields.remove(key);
    }
    match kind {
        kind if RELAYED.contains(&kind) => {
            // The profile puts a value that is not an object under the kind's name
            // (`{"delta": 1}`): it is emitted as the value, as a local handler emits it.
            let data = match fields.remove(kind) {
                Some(value) if fields.is_empty() && !value.is_object() => value,
                Some(value) => {
                    fields.insert(kind.to_owned(), value);
                    Value::Object(fields)
                }
                None => Value::Object(fields),
            };
            if ctx.events.emit(kind, data).await.is_err() {
                // Fenced out: the run is over for this worker, which writes nothing more.
                return Err(HandlerError::cancelled());
            }
            Ok(None)
        }
        "error" => {
            *last_error = Some(Value::Object(fields));
            Ok(None)
        }
        "run-end" => match fields.get("status").and_then(Value::as_str) {
            Some("succeeded") => {
                let mut output =
                    HandlerOutput::new(fields.get("output").cloned().unwrap_or(Value::Null));
                output.usage = fields
                    .get("usage")
                    .filter(|usage| !usage.is_null())
                    .cloned();
                output.model = fields
                    .get("model")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                Ok(Some(output))
            }
            Some("failed") => {
                let error = fields.remove("error").or(last_error.take());
                let answer = serde_json::json!({"error": error});
                Err(agent_error(reqwest::StatusCode::OK, &answer))
            }
            _ => Err(HandlerError::new(
                "agent_cancelled",
                "the agent ended the run as cancelled",
            )),
        },
        _ => Ok(None),
    }
}

/// Where the first frame of `buffer` ends: its length and the separator's.
pub(super) fn frame_end(buffer: &[u8]) -> Option<(usize, usize)> {
    let lf = buffer.windows(2).position(|window| window == b"\n\n");
    let crlf = buffer.windows(4).position(|window| window == b"\r\n\r\n");
    match (lf, crlf) {
        (Some(lf), Some(crlf)) if crlf < lf => Some((crlf, 4)),
        (Some(lf), _) => Some((lf, 2)),
        (None, Some(crlf)) => Some((crlf, 4)),
        (None, None) => None,
    }
}

/// A frame's `event:` name and its `data:` lines as JSON; comments and frames without JSON
/// data are skipped.
pub(super) fn parse_frame(frame: &[u8]) -> Option<(String, Value)> {
    let text = std::str::from_utf8(frame).ok()?;
    let mut kind = "message".to_owned();
    let mut data = Vec::new();
    for line in text.lines() {
        if let Some(value) = line.strip_prefix("event:") {
            kind = value.trim().to_owned();
        } else if let Some(value) = line.strip_prefix("data:") {
            data.push(value.strip_prefix(' ').unwrap_or(value));
        }
    }
    let data = serde_json::from_str(&data.join("\n")).ok()?;
    Some((kind, data))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn frames_split_on_blank_lines_and_parse() {
        let buffer = b"id: 0\nevent: delta\ndata: {\"kind\":\"delta\",\"delta\":1}\n\nrest";
        let (end, separator) = frame_end(buffer).unwrap_or_default();
        assert_eq!(separator, 2);
        let parsed = parse_frame(&buffer[..end]);
        assert_eq!(
            parsed,
            Some(("delta".to_owned(), json!({"kind": "delta", "delta": 1})))
        );
        assert_eq!(frame_end(b"id: 0\r\nevent: x\r\n\r\n"), Some((15, 4)));
        assert_eq!(frame_end(b"id: 0\nevent: x\n"), None);
        assert_eq!(parse_frame(b": comment"), None);
    }
}
