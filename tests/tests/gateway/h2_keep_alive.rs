//! HTTP/2 connections under the gateway's bounds (issue 29), with a real gateway process (the
//! embedded mode: `cluster::gateway` without `REDIS_URL`) and an h2c client: an idle connection whose client answers the gateway's keep-alive PINGs stays
//! open and usable, and a connection that sends nothing after the preface is closed by the
//! first-request deadline.
//!
//! The client talks through a relay that reads the HTTP/2 frames going each way, so the test
//! waits for the PINGs themselves (events), never for a length of time.

use std::time::Duration;

use harness::TestResult;
use harness::cluster;
use http_body_util::Empty;
use hyper::body::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Bound on any one wait; a failure, never a measurement.
const PATIENCE: Duration = Duration::from_secs(30);
/// What an HTTP/2 client sends first.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const PING: u8 = 0x6;
const ACK: u8 = 0x1;

/// Splits one direction of an HTTP/2 connection into frames (after `skip` bytes: the
/// client's preface) and counts the PINGs carrying `flags`.
struct PingCounter {
    skip: usize,
    buffer: Vec<u8>,
    flags: u8,
    seen: watch::Sender<u64>,
}

impl PingCounter {
    fn feed(&mut self, bytes: &[u8]) {
        let mut bytes = bytes;
        if self.skip > 0 {
            let skipped = self.skip.min(bytes.len());
            self.skip -= skipped;
            bytes = &bytes[skipped..];
        }
        self.buffer.extend_from_slice(bytes);
        // A frame: 24-bit length, type, flags, stream id, then the payload.
        while self.buffer.len() >= 9 {
            let length = usize::from(self.buffer[0]) << 16
                | usize::from(self.buffer[1]) << 8
                | usize::from(self.buffer[2]);
            if self.buffer.len() < 9 + length {
                break;
            }
            if self.buffer[3] == PING && self.buffer[4] & ACK == self.flags {
                self.seen.send_modify(|count| *count += 1);
            }
            self.buffer.drain(..9 + length);
        }
    }
}

/// Copies `from` to `to`, counting PINGs on the way.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut counter: PingCounter,
) {
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        let read = match from.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        counter.feed(&chunk[..read]);
        if to.write_all(&chunk[..read]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

/// A relay to `target` for one connection: its address, and the counts of PINGs the server
/// sent and of PING ACKs the client answered with.
async fn relay(target: &str) -> TestResult<(String, watch::Receiver<u64>, watch::Receiver<u64>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?.to_string();
    let (pings, pings_seen) = watch::channel(0);
    let (acks, acks_seen) = watch::channel(0);
    let target = target.to_owned();
    tokio::spawn(async move {
        let (Ok((client, _)), Ok(server)) =
            (listener.accept().await, TcpStream::connect(&target).await)
        else {
            return;
        };
        let (client_read, client_write) = client.into_split();
        let (server_read, server_write) = server.into_split();
        let from_client = PingCounter {
            skip: PREFACE.len(),
            buffer: Vec::new(),
            flags: ACK,
            seen: acks,
        };
        let from_server = PingCounter {
            skip: 0,
            buffer: Vec::new(),
            flags: 0,
            seen: pings,
        };
        tokio::join!(
            pump(client_read, server_write, from_client),
            pump(server_read, client_write, from_server),
        );
    });
    Ok((address, pings_seen, acks_seen))
}

async fn at_least(counter: &mut watch::Receiver<u64>, count: u64, what: &str) -> TestResult<()> {
    tokio::time::timeout(PATIENCE, counter.wait_for(|seen| *seen >= count))
        .await
        .map_err(|_| format!("fewer than {count} {what} in {PATIENCE:?}"))??;
    Ok(())
}

async fn health(
    sender: &mut hyper::client::conn::http2::SendRequest<Empty<Bytes>>,
) -> TestResult<u16> {
    let request = hyper::Request::get("http://127.0.0.1/health").body(Empty::new())?;
    let response = tokio::time::timeout(PATIENCE, sender.send_request(request)).await??;
    Ok(response.status().as_u16())
}

#[tokio::test]
async fn an_idle_h2_connection_that_answers_pings_stays_usable() -> TestResult<()> {
    // PINGs every 20 ms: the connection sits idle through many of them.
    let gateway =
        cluster::gateway("gateway", &[], &[("H2_KEEP_ALIVE_MS", "20".to_owned())]).await?;
    let (relayed, mut pings, mut acks) = relay(gateway.address()).await?;
    let stream = TcpStream::connect(&relayed).await?;
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await?;
    let connection = tokio::spawn(connection);
    assert_eq!(health(&mut sender).await?, 200);

    // Idle, past several keep-alive intervals: the gateway PINGs, the client answers.
    at_least(&mut pings, 3, "keep-alive PINGs from the gateway").await?;
    at_least(&mut acks, 3, "PING answers from the client").await?;

    assert!(!connection.is_finished(), "the idle connection was closed");
    assert_eq!(
        health(&mut sender).await?,
        200,
        "the same connection, still usable"
    );
    Ok(())
}

#[tokio::test]
async fn an_h2_connection_silent_after_the_preface_is_closed() -> TestResult<()> {
    let gateway =
        cluster::gateway("gateway", &[], &[("HEADER_TIMEOUT_MS", "200".to_owned())]).await?;
    let mut stream = TcpStream::connect(gateway.address()).await?;
    // The preface and an empty SETTINGS frame, then nothing.
    stream.write_all(PREFACE).await?;
    stream.write_all(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]).await?;
    let mut sink = vec![0u8; 4096];
    let closed = tokio::time::timeout(PATIENCE, async {
        loop {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "the silent connection was still open after {PATIENCE:?}"
    );
    Ok(())
}
