//! Connections and streams bounded (issue 29, item 5), against real gateway processes in
//! embedded mode (no Redis: `cluster::gateway` without `REDIS_URL`):
//! - SIGTERM ends an open A2A stream and an open Lucid stream cleanly, and the process exits;
//! - `MAX_STREAM_MS` ends an A2A stream cleanly;
//! - `MAX_CONNECTIONS_PER_IP` refuses a fifth connection at accept while four work, and a
//!   connection works again once one closed;
//! - a connection that sends no request head (an HTTP/2 prior-knowledge client that sends only
//!   the preface, or a client that sends nothing) is closed after `HEADER_TIMEOUT_MS`.
//!
//! Nothing waits on a timer: each step awaits an event (a frame, the end of a body, EOF). The
//! outer `FAILSAFE` only turns a hang (the behaviour before the fix) into a failure.

use std::time::Duration;

use futures::StreamExt;
use harness::TestResult;
use harness::cluster::{self, jsonrpc_request};
use nix::sys::signal::Signal;
use serde_json::json;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const FAILSAFE: Duration = Duration::from_secs(90);
static NEXT: AtomicU64 = AtomicU64::new(1);
const TOKEN: &str = "streams-bounded-token-0123456789";

/// A client without a total timeout: streams outlive any fixed one.
fn client() -> TestResult<reqwest::Client> {
    Ok(reqwest::Client::builder().build()?)
}

/// An A2A `SendStreamingMessage` (JSON-RPC) for a one-minute `sleep`.
async fn a2a_sleep_stream(http: &reqwest::Client, base: &str) -> TestResult<reqwest::Response> {
    let params = json!({
        "message": {
            "messageId": format!("m-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)),
            "role": "ROLE_USER",
            "parts": [{"data": {"ms": 60_000}}],
            "metadata": {"skillId": "sleep"},
        }
    });
    let response = jsonrpc_request(http, base, Some(TOKEN), "SendStreamingMessage", params)
        .send()
        .await?;
    if response.status() != reqwest::StatusCode::OK {
        return Err(format!("the A2A stream answered {}", response.status()).into());
    }
    Ok(response)
}

/// An SSE body read event by event, as text. Not `harness::sse`: A2A frames name no `event:`
/// (which `harness::sse` skips), and a test reads the first frame, acts, then the rest.
struct Events {
    body: futures::stream::BoxStream<'static, reqwest::Result<Vec<u8>>>,
    buffer: Vec<u8>,
}

impl Events {
    fn new(response: reqwest::Response) -> Events {
        Events {
            body: response
                .bytes_stream()
                .map(|chunk| chunk.map(|bytes| bytes.to_vec()))
                .boxed(),
            buffer: Vec::new(),
        }
    }

    /// The next event's text (keep-alive comments skipped); `None` at a clean end of the body.
    /// A body cut short (no final chunk) is an error.
    async fn next(&mut self) -> TestResult<Option<String>> {
        loop {
            if let Some(end) = self.buffer.windows(2).position(|w| w == b"\n\n") {
                let event: Vec<u8> = self.buffer.drain(..end + 2).collect();
                let text = String::from_utf8_lossy(&event).into_owned();
                if text
                    .lines()
                    .all(|line| line.starts_with(':') || line.is_empty())
                {
                    continue;
                }
                return Ok(Some(text));
            }
            match self.body.next().await {
                Some(chunk) => self.buffer.extend_from_slice(&chunk?),
                None => return Ok(None),
            }
        }
    }

    /// Every event left, until the body ends cleanly.
    async fn rest(&mut self) -> TestResult<Vec<String>> {
        let mut events = Vec::new();
        while let Some(event) = self.next().await? {
            events.push(event);
        }
        Ok(events)
    }
}

#[tokio::test]
async fn sigterm_ends_open_a2a_and_lucid_streams_and_the_process_exits() -> TestResult {
    tokio::time::timeout(FAILSAFE, async {
        // One run slot: the A2A sleep holds it, so the Lucid stream waits for a worker.
        let mut gateway =
            cluster::gateway("gateway", &[], &[("WORKER_CONCURRENCY", "1".to_owned())]).await?;
        let http = client()?;
        let mut a2a = Events::new(a2a_sleep_stream(&http, &gateway.base).await?);
        let first = a2a.next().await?.ok_or("the A2A stream ended at once")?;
        if !first.contains("\"task\"") {
            return Err(format!("the A2A stream did not open with the task: {first}").into());
        }
        let lucid = http
            .post(format!("{}/entrypoints/count/stream", gateway.base))
            .json(&json!({"input": {"n": 3}}))
            .send()
            .await?;
        if lucid.status() != reqwest::StatusCode::OK {
            return Err(format!("the Lucid stream answered {}", lucid.status()).into());
        }
        let mut lucid = Events::new(lucid);
        let start = lucid
            .next()
            .await?
            .ok_or("the Lucid stream ended at once")?;
        if !start.contains("run-start") {
            return Err(format!("the Lucid stream did not start with run-start: {start}").into());
        }

        gateway.process.signal(Signal::SIGTERM)?;
        let a2a_rest = a2a
            .rest()
            .await
            .map_err(|err| format!("the A2A stream did not end cleanly: {err}"))?;
        if a2a_rest
            .iter()
            .any(|event| event.contains("TASK_STATE_COMPLETED"))
        {
            return Err("the sleep completed: the stream was not ended by SIGTERM".into());
        }
        lucid
            .rest()
            .await
            .map_err(|err| format!("the Lucid stream did not end cleanly: {err}"))?;
        let status = gateway.process.wait_exit(FAILSAFE)?;
        if !status.success() {
            return Err(format!(
                "the gateway exited with {status}:\n{}",
                gateway.process.log()
            )
            .into());
        }
        Ok(())
    })
    .await
    .map_err(|_| "the streams or the process did not end")?
}

#[tokio::test]
async fn an_a2a_stream_ends_cleanly_after_max_stream_ms() -> TestResult {
    tokio::time::timeout(FAILSAFE, async {
        let gateway =
            cluster::gateway("gateway", &[], &[("MAX_STREAM_MS", "300".to_owned())]).await?;
        let http = client()?;
        let mut events = Events::new(a2a_sleep_stream(&http, &gateway.base).await?);
        let first = events.next().await?.ok_or("the A2A stream ended at once")?;
        if !first.contains("\"task\"") {
            return Err(format!("the A2A stream did not open with the task: {first}").into());
        }
        let rest = events
            .rest()
            .await
            .map_err(|err| format!("the A2A stream did not end cleanly: {err}"))?;
        if rest
            .iter()
            .any(|event| event.contains("TASK_STATE_COMPLETED"))
        {
            return Err("the sleep completed: MAX_STREAM_MS did not end the stream".into());
        }
        // The gateway still serves.
        let health = http.get(format!("{}/health", gateway.base)).send().await?;
        if health.status() != reqwest::StatusCode::OK {
            return Err(format!("health answered {}", health.status()).into());
        }
        Ok(())
    })
    .await
    .map_err(|_| "the A2A stream did not end")?
}

/// `GET /health` on `stream`: `Some(status line)` when answered, `None` when the gateway
/// closed the connection instead.
async fn health(stream: &mut TcpStream, close: bool) -> TestResult<Option<String>> {
    let connection = if close { "Connection: close\r\n" } else { "" };
    let request = format!("GET /health HTTP/1.1\r\nHost: gateway\r\n{connection}\r\n");
    if stream.write_all(request.as_bytes()).await.is_err() {
        return Ok(None);
    }
    let mut buffer = Vec::new();
    let mut chunk = [0_u8; 4096];
    loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
            let length: usize = head
                .lines()
                .find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse().ok())?
                })
                .unwrap_or(0);
            while buffer.len() < end + 4 + length {
                let read = stream.read(&mut chunk).await?;
                if read == 0 {
                    break;
                }
                buffer.extend_from_slice(&chunk[..read]);
            }
            return Ok(head.lines().next().map(str::to_owned));
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return Ok(None),
            Ok(read) => buffer.extend_from_slice(&chunk[..read]),
        }
    }
}

/// Reads until the peer closes the connection (EOF or reset).
async fn until_closed(stream: &mut TcpStream) {
    let mut chunk = [0_u8; 4096];
    while let Ok(read) = stream.read(&mut chunk).await {
        if read == 0 {
            return;
        }
    }
}

#[tokio::test]
async fn a_fifth_connection_from_one_address_is_refused_until_one_closes() -> TestResult {
    tokio::time::timeout(FAILSAFE, async {
        let gateway = cluster::gateway(
            "gateway",
            &[],
            &[("MAX_CONNECTIONS_PER_IP", "4".to_owned())],
        )
        .await?;
        let mut open = Vec::new();
        for _ in 0..4 {
            let mut stream = TcpStream::connect(gateway.address()).await?;
            let status = health(&mut stream, false).await?;
            if !status.as_deref().is_some_and(|s| s.contains(" 200 ")) {
                return Err(format!("one of the first four got {status:?}").into());
            }
            open.push(stream);
        }
        let mut fifth = TcpStream::connect(gateway.address()).await?;
        if let Some(status) = health(&mut fifth, false).await? {
            return Err(format!("a fifth connection was served: {status}").into());
        }
        // The four still work.
        for stream in &mut open {
            let status = health(stream, false).await?;
            if !status.as_deref().is_some_and(|s| s.contains(" 200 ")) {
                return Err(format!("an admitted connection got {status:?}").into());
            }
        }
        // One closes (the gateway closes it after answering), then a new one is served. The
        // gateway uncounts a connection just after closing it: a connection made in between
        // is refused, so each try waits for its answer or its refusal before the next.
        let mut first = open.remove(0);
        health(&mut first, true).await?;
        until_closed(&mut first).await;
        for _ in 0..100 {
            let mut again = TcpStream::connect(gateway.address()).await?;
            if let Some(status) = health(&mut again, false).await? {
                if status.contains(" 200 ") {
                    if !gateway.process.log().contains("too many open connections") {
                        return Err("the refusal was not logged".into());
                    }
                    return Ok(());
                }
                return Err(format!("the new connection got {status}").into());
            }
        }
        Err("no connection was served after one closed".into())
    })
    .await
    .map_err(|_| "a connection step hung")?
}

#[tokio::test]
async fn connections_without_a_request_head_are_closed() -> TestResult {
    tokio::time::timeout(FAILSAFE, async {
        let gateway =
            cluster::gateway("gateway", &[], &[("HEADER_TIMEOUT_MS", "300".to_owned())]).await?;
        // HTTP/2 with prior knowledge (h2c): the preface and an empty SETTINGS frame, then no
        // HEADERS frame.
        let mut h2 = TcpStream::connect(gateway.address()).await?;
        h2.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await?;
        h2.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).await?;
        let mut silent = TcpStream::connect(gateway.address()).await?;
        until_closed(&mut h2).await;
        until_closed(&mut silent).await;
        // The gateway still serves.
        let mut fresh = TcpStream::connect(gateway.address()).await?;
        let status = health(&mut fresh, true).await?;
        if !status.as_deref().is_some_and(|s| s.contains(" 200 ")) {
            return Err(format!("health got {status:?}").into());
        }
        TestResult::Ok(())
    })
    .await
    .map_err(|_| "a connection without a request head stayed open")?
}
