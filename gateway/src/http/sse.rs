//! Server-sent events, as both protocols stream them: the keep-alive cadence, and a stream of
//! `data:` lines for the bindings that send nothing else.

use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use futures::stream::BoxStream;

/// Comment lines keep idle streams open through proxies.
pub const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(15);

/// The keep-alive every SSE response of the gateway sends while its stream is idle.
pub fn keep_alive() -> KeepAlive {
    KeepAlive::new().interval(KEEP_ALIVE_INTERVAL)
}

/// Each item as one SSE `data:` line, with keep-alive comments while the stream is idle.
pub fn data_lines(frames: BoxStream<'static, String>) -> Response {
    let events = frames.map(|data| Ok::<_, Infallible>(Event::default().data(data)));
    Sse::new(events).keep_alive(keep_alive()).into_response()
}
