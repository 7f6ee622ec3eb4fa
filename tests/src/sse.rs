//! The Lucid routes' event streams as the suites read them: frames of `event:` and `data:`
//! lines, the data JSON. Frames without an `event:` line (comments, keep-alives) are skipped.

use futures::StreamExt;
use serde_json::Value;

use crate::TestResult;

/// The `(event, data)` of one frame, or `None` for a frame that names no event.
pub fn parse_frame(frame: &str) -> Result<Option<(String, Value)>, String> {
    let mut name = None;
    let mut data = String::new();
    for line in frame.lines() {
        if let Some(rest) = line.strip_prefix("event:") {
            name = Some(rest.trim().to_owned());
        } else if let Some(rest) = line.strip_prefix("data:") {
            data.push_str(rest.trim());
        }
    }
    match name {
        Some(name) if !name.is_empty() => {
            let value = serde_json::from_str(&data)
                .map_err(|e| format!("SSE data {data:?} is not JSON: {e}"))?;
            Ok(Some((name, value)))
        }
        _ => Ok(None),
    }
}

/// The `(event, data)` of each frame of a whole SSE body.
pub fn events(text: &str) -> TestResult<Vec<(String, Value)>> {
    let mut events = Vec::new();
    for frame in text.split("\n\n") {
        events.extend(parse_frame(frame)?);
    }
    Ok(events)
}

/// The `(event, data)` of each frame of `response` as it streams, until the server ends the
/// stream or, with `stop_after`, that many events arrived. Unbounded in time: the caller
/// bounds it. The error is a `String` so that a spawned reader can return it.
pub async fn read_events(
    response: reqwest::Response,
    stop_after: Option<usize>,
) -> Result<Vec<(String, Value)>, String> {
    let mut body = response.bytes_stream();
    let mut buffer = String::new();
    let mut events = Vec::new();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| format!("SSE body broke ({e}) after {events:?}"))?;
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find("\n\n") {
            let frame: String = buffer.drain(..end + 2).collect();
            events.extend(parse_frame(&frame)?);
            if stop_after.is_some_and(|n| events.len() >= n) {
                return Ok(events);
            }
        }
    }
    Ok(events)
}
