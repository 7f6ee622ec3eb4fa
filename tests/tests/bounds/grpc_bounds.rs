//! The gRPC listener (`GRPC_LISTEN`) under the HTTP listener's bounds, on the gRPC port itself
//! with real processes (issue 36, item 3): the per-address and per-owner rate limits of task
//! creation, shared with the HTTP bindings (`RESOURCE_EXHAUSTED` with `RATE_LIMITED` and a
//! retry delay); the request-body deadline (a stream that stops mid-message is answered, not
//! held); the first-request deadline and the per-address connection cap (which a trusted
//! proxy is not held to); and what is payable over gRPC, as docs/a2a.md says it.
//!
//! The rates are tiny (one request per 100 s), so a quota never refills during a test.

use std::time::Duration;

use a2a_pb::a2a_service_client::A2aServiceClient;
use a2a_pb::pbconv;
use harness::TestResult;
use harness::cluster::{Cluster, free_port};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Bytes, Frame};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tonic::transport::Channel;
use tonic::{Code, Request, Status};
use tonic_types::StatusExt;

const TOKEN_A: &str = "grpc-bounds-token-alpha-0123456789";
const TOKEN_B: &str = "grpc-bounds-token-bravo-0123456789";

/// Bound on any one wait; a failure, never a measurement.
const PATIENCE: Duration = Duration::from_secs(20);

/// What an HTTP/2 client sends first.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// A cluster whose gateway serves gRPC on a port of its own, with `settings` added.
async fn start(settings: &[(&str, &str)]) -> TestResult<(Cluster, u16)> {
    let port = free_port()?;
    let listen = format!("127.0.0.1:{port}");
    let mut gateway = vec![("GRPC_LISTEN", listen.as_str())];
    gateway.extend_from_slice(settings);
    let cluster = Cluster::builder()
        .worker("w1", &[])
        .gateway("g1", &gateway)
        .skills(&["echo"])
        .start()
        .await?;
    Ok((cluster, port))
}

async fn client(port: u16) -> TestResult<A2aServiceClient<Channel>> {
    Ok(A2aServiceClient::connect(format!("http://127.0.0.1:{port}")).await?)
}

/// `message` with the caller's bearer token and `a2a-version: 1.0`.
fn call<T>(token: &str, message: T) -> TestResult<Request<T>> {
    let mut request = Request::new(message);
    request
        .metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse()?);
    request.metadata_mut().insert("a2a-version", "1.0".parse()?);
    Ok(request)
}

/// The ProtoJSON of a message to `echo`, answered as soon as its task is admitted.
fn message() -> serde_json::Value {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    json!({
        "message": {
            "messageId": format!("grpc-bounds-{}-{id}", std::process::id()),
            "role": "ROLE_USER",
            "parts": [{"data": {"n": id}}],
            "metadata": {"skillId": "echo"},
        },
        "configuration": {"returnImmediately": true},
    })
}

fn send_request() -> TestResult<a2a_pb::SendMessageRequest> {
    let request: a2a::SendMessageRequest = serde_json::from_value(message())?;
    Ok(pbconv::to_proto_send_message_request(&request))
}

/// A gRPC `SendMessage` as `token`: the status it ended with (`Ok` for an answer).
async fn grpc_send(client: &mut A2aServiceClient<Channel>, token: &str) -> TestResult<Status> {
    match client.send_message(call(token, send_request()?)?).await {
        Ok(_) => Ok(Status::ok("")),
        Err(status) => Ok(status),
    }
}

/// `RESOURCE_EXHAUSTED` with `ErrorInfo` `RATE_LIMITED` naming `policy`, and a retry delay.
fn expect_rate_limited(status: &Status, policy: &str) -> TestResult {
    if status.code() != Code::ResourceExhausted {
        return Err(format!("expected RESOURCE_EXHAUSTED, got {status:?}").into());
    }
    let info = status
        .get_details_error_info()
        .ok_or_else(|| format!("no ErrorInfo: {status:?}"))?;
    assert_eq!(info.reason, "RATE_LIMITED", "{info:?}");
    assert_eq!(info.domain, "a2a-protocol.org", "{info:?}");
    assert_eq!(
        info.metadata.get("policy").map(String::as_str),
        Some(policy)
    );
    let retry = status
        .get_details_retry_info()
        .and_then(|retry| retry.retry_delay)
        .ok_or_else(|| format!("no RetryInfo: {status:?}"))?;
    assert!(
        retry >= Duration::from_secs(1) && retry <= Duration::from_secs(100),
        "{retry:?}"
    );
    Ok(())
}

/// A2A JSON-RPC `SendMessage` as `token` on the gateway's HTTP listener: its HTTP status.
async fn jsonrpc_send(cluster: &Cluster, token: &str) -> TestResult<u16> {
    let (status, _) = cluster
        .jsonrpc(Some(token), "SendMessage", message())
        .await?;
    Ok(status)
}

#[tokio::test(flavor = "multi_thread")]
async fn grpc_task_creation_shares_the_http_per_address_quota() -> TestResult {
    let (cluster, port) = start(&[("RATE_PER_ADDRESS", "0.01"), ("RATE_BURST", "2")]).await?;
    // The burst, spent over JSON-RPC from this address.
    for i in 0..2 {
        assert_eq!(jsonrpc_send(&cluster, TOKEN_A).await?, 200, "request {i}");
    }
    assert_eq!(jsonrpc_send(&cluster, TOKEN_A).await?, 429);
    // The same address on the gRPC port, whatever the token or the method.
    let mut grpc = client(port).await?;
    for token in [TOKEN_A, TOKEN_B] {
        expect_rate_limited(&grpc_send(&mut grpc, token).await?, "per-address")?;
    }
    let streamed = grpc
        .send_streaming_message(call(TOKEN_A, send_request()?)?)
        .await
        .err()
        .ok_or("SendStreamingMessage was admitted over the quota")?;
    expect_rate_limited(&streamed, "per-address")?;
    // Reads are not task creations.
    let read = grpc
        .get_task(call(
            TOKEN_A,
            a2a_pb::GetTaskRequest {
                id: "no-such-task".into(),
                ..Default::default()
            },
        )?)
        .await
        .err()
        .ok_or("an unknown task was found")?;
    assert_eq!(read.code(), Code::NotFound, "{read:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn grpc_task_creation_charges_the_owner_quota() -> TestResult {
    let (cluster, port) = start(&[
        ("RATE_PER_ADDRESS", "0"),
        ("RATE_PER_OWNER", "0.01"),
        ("RATE_BURST", "2"),
    ])
    .await?;
    let mut grpc = client(port).await?;
    // One of the owner's two over gRPC, one over JSON-RPC: one quota.
    let first = grpc_send(&mut grpc, TOKEN_A).await?;
    assert_eq!(first.code(), Code::Ok, "{first:?}");
    assert_eq!(jsonrpc_send(&cluster, TOKEN_A).await?, 200);
    expect_rate_limited(&grpc_send(&mut grpc, TOKEN_A).await?, "per-owner")?;
    // Another owner from the same address has its own.
    let other = grpc_send(&mut grpc, TOKEN_B).await?;
    assert_eq!(other.code(), Code::Ok, "{other:?}");
    Ok(())
}

/// A frame of a streamed request body, as `StreamBody` takes it.
type BodyFrame = Result<Frame<Bytes>, std::convert::Infallible>;

#[tokio::test(flavor = "multi_thread")]
async fn grpc_streams_that_stop_mid_message_are_answered() -> TestResult {
    let (_cluster, port) = start(&[("BODY_TIMEOUT_MS", "500")]).await?;
    let stream = TcpStream::connect(("127.0.0.1", port)).await?;
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    // Each stream declares a 1,000,000-byte message (the gRPC prefix: uncompressed, length),
    // sends 900 KB of it and stops, its body still open.
    let mut bodies = Vec::new();
    let mut answers = Vec::new();
    for _ in 0..16 {
        let (body, frames) = futures::channel::mpsc::unbounded::<BodyFrame>();
        let mut first = vec![0u8];
        first.extend_from_slice(&1_000_000u32.to_be_bytes());
        first.extend(std::iter::repeat_n(0x0a, 900_000));
        body.unbounded_send(Ok(Frame::data(Bytes::from(first))))?;
        let request = hyper::Request::post(format!(
            "http://127.0.0.1:{port}/lf.a2a.v1.A2AService/SendMessage"
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("authorization", format!("Bearer {TOKEN_A}"))
        .header("a2a-version", "1.0")
        .body(StreamBody::new(frames))?;
        sender.ready().await?;
        answers.push(sender.send_request(request));
        bodies.push(body);
    }
    // Every stream is answered (a gRPC error status: the message never arrived whole) while
    // its client still holds the body open.
    for (i, answer) in answers.into_iter().enumerate() {
        let response = tokio::time::timeout(PATIENCE, answer)
            .await
            .map_err(|_| format!("stream {i} unanswered"))??;
        let status = match response.headers().get("grpc-status") {
            Some(status) => status.to_str()?.to_owned(),
            // Not trailers-only: the status is in the trailers.
            None => {
                let mut body = response.into_body();
                let mut status = None;
                while let Some(frame) = tokio::time::timeout(PATIENCE, body.frame())
                    .await
                    .map_err(|_| format!("stream {i}'s body unended"))?
                {
                    if let Some(trailers) = frame?.trailers_ref() {
                        status = trailers
                            .get("grpc-status")
                            .and_then(|value| value.to_str().ok())
                            .map(str::to_owned);
                    }
                }
                status.ok_or_else(|| format!("stream {i}: no grpc-status"))?
            }
        };
        assert_ne!(status, "0", "stream {i} succeeded without its message");
    }
    drop(bodies);
    Ok(())
}

/// Reads what the server sends on `stream` until it closes: the bytes read.
async fn read_to_close(stream: &mut TcpStream) -> TestResult<usize> {
    let mut buffer = [0u8; 4096];
    let mut total = 0;
    loop {
        match tokio::time::timeout(PATIENCE, stream.read(&mut buffer)).await? {
            Ok(0) | Err(_) => return Ok(total),
            Ok(read) => total += read,
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_grpc_port_caps_connections_per_address_and_closes_silent_ones() -> TestResult {
    let (_cluster, port) = start(&[
        ("MAX_CONNECTIONS_PER_IP", "2"),
        ("HEADER_TIMEOUT_MS", "5000"),
    ])
    .await?;
    // Two connections send the HTTP/2 preface and no request: the server answers each with
    // its SETTINGS, then closes it at the first-request deadline.
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await?;
        stream.write_all(PREFACE).await?;
        stream.write_all(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]).await?;
        let mut first = [0u8; 9];
        tokio::time::timeout(PATIENCE, stream.read_exact(&mut first)).await??;
        assert_eq!(first[3], 0x4, "a SETTINGS frame first: {first:?}");
        held.push(stream);
    }
    // A third from the same address is closed at accept: not one byte of HTTP/2.
    let mut third = TcpStream::connect(("127.0.0.1", port)).await?;
    third.write_all(PREFACE).await.ok();
    assert_eq!(read_to_close(&mut third).await?, 0);
    // The two silent ones end at the first-request deadline.
    for mut stream in held {
        read_to_close(&mut stream).await?;
    }
    Ok(())
}

/// Payments over gRPC (docs/a2a.md, gRPC binding): the payment gate runs there as on the HTTP
/// bindings. A priced skill's send without a credential is `FAILED_PRECONDITION`
/// `PAYMENT_REQUIRED` whose metadata carries the x402 challenge (`payment-required`) for this
/// method's resource (`<origin>/lf.a2a.v1.A2AService/SendMessage?skillId=echo`); the payer
/// answers it, the credential in the next call's metadata pays, settles once and is answered
/// with the receipt's metadata; a credential made for another route is refused, with a fresh
/// challenge.
#[tokio::test(flavor = "multi_thread")]
async fn a_priced_skill_is_paid_over_grpc_by_the_challenge_in_the_status_metadata() -> TestResult {
    use harness::paid::{PAYER_KEY, PaidCluster};
    use payments::LocalPayer;
    use payments::payer::Challenge;

    let priced =
        |card: &serde_json::Value| card["entrypoints"]["echo"]["pricing"]["invoke"].is_string();
    let mut cluster =
        PaidCluster::start(&[("WORKER_PRICES", "echo=0.001".to_owned())], &[], priced).await?;
    let port = free_port()?;
    let gateway = cluster
        .add_gateway(
            "g3",
            &[("GRPC_LISTEN", format!("127.0.0.1:{port}"))],
            priced,
        )
        .await?;
    let mut grpc = client(port).await?;
    let challenge_of = |status: &tonic::Status| -> TestResult<Challenge> {
        assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
        assert_eq!(
            status
                .get_details_error_info()
                .map(|info| info.reason)
                .as_deref(),
            Some("PAYMENT_REQUIRED")
        );
        let header = status
            .metadata()
            .get(payments::PAYMENT_REQUIRED)
            .ok_or("no payment-required metadata")?
            .to_str()?;
        Ok(Challenge::from_response(Some(header), b"")?)
    };
    let unpaid = grpc_send(&mut grpc, TOKEN_A).await?;
    let challenge = challenge_of(&unpaid)?;
    let Challenge::V2(terms) = &challenge else {
        return Err("the challenge is x402 v2".into());
    };
    assert_eq!(
        terms.resource.url,
        format!(
            "{}/lf.a2a.v1.A2AService/SendMessage?skillId=echo",
            cluster.base(gateway)
        )
    );
    let payer = LocalPayer::from_hex(PAYER_KEY)?;
    let paid_call = |payment: &payments::payer::PaymentHeader| -> TestResult<_> {
        let mut request = call(TOKEN_A, send_request()?)?;
        request.metadata_mut().insert(
            payment
                .name
                .to_ascii_lowercase()
                .parse::<tonic::metadata::MetadataKey<tonic::metadata::Ascii>>()?,
            payment.value.parse()?,
        );
        Ok(request)
    };
    // Made for the HTTP invoke route: another resource, refused with a fresh challenge.
    let body = json!({"input": {"text": "paid"}});
    let http_challenge = cluster.x402_challenge(gateway, "echo", &body).await?;
    let elsewhere = payer.answer(&http_challenge, None, payments::unix_now())?;
    let refused = grpc
        .send_message(paid_call(&elsewhere)?)
        .await
        .err()
        .ok_or("a credential for another route paid")?;
    challenge_of(&refused)?;
    assert_eq!(cluster.settled().await?, 0);
    // The answer to the gRPC challenge pays.
    let payment = payer.answer(&challenge, None, payments::unix_now())?;
    let answer = grpc.send_message(paid_call(&payment)?).await?;
    assert!(
        answer.metadata().get("payment-response").is_some(),
        "no receipt: {:?}",
        answer.metadata()
    );
    assert_eq!(cluster.settled().await?, 1);
    Ok(())
}

/// MPP over gRPC: a skill priced for MPP answers an unpaid send with `FAILED_PRECONDITION`
/// `PAYMENT_REQUIRED` whose `www-authenticate` metadata is the `Payment` challenge; the client
/// crate's payer answers it as it would an HTTP 402 (for the method's URL), the
/// `authorization: Payment …` credential goes in the next call's metadata (the caller then
/// names itself by `task-access-token`), and the answer carries the `payment-receipt`.
#[tokio::test(flavor = "multi_thread")]
async fn an_mpp_skill_is_paid_over_grpc_by_the_challenge_in_the_status_metadata() -> TestResult {
    use client::{KeyPayer, Payer, PaymentRequired};
    use harness::paid::{PAYER_KEY, PaidCluster};
    use payments::LocalPayer;

    let priced =
        |card: &serde_json::Value| card["entrypoints"]["echo"]["pricing"]["invoke"].is_string();
    let mpp = [
        (
            "MPP_SECRET",
            "an-mpp-secret-of-at-least-32-bytes-for-grpc".to_owned(),
        ),
        ("MPP_REALM", "127.0.0.1".to_owned()),
    ];
    let mut cluster = PaidCluster::start(
        &[("WORKER_PRICES", "echo=0.002:mpp".to_owned())],
        &mpp,
        priced,
    )
    .await?;
    let port = free_port()?;
    let mut settings = mpp.to_vec();
    settings.push(("GRPC_LISTEN", format!("127.0.0.1:{port}")));
    cluster.add_gateway("g3", &settings, priced).await?;
    let mut grpc = client(port).await?;
    let unpaid = grpc_send(&mut grpc, TOKEN_A).await?;
    assert_eq!(unpaid.code(), Code::FailedPrecondition, "{unpaid:?}");
    let challenge = unpaid
        .metadata()
        .get("www-authenticate")
        .ok_or("no www-authenticate metadata")?
        .to_str()?
        .to_owned();
    assert!(challenge.starts_with("Payment "), "{challenge}");
    let url: reqwest::Url =
        format!("http://127.0.0.1:{port}/lf.a2a.v1.A2AService/SendMessage").parse()?;
    let required = PaymentRequired::parse(None, b"")
        .with_www_authenticate(Some(&challenge))
        .for_request(&url);
    let payment = KeyPayer::new(LocalPayer::from_hex(PAYER_KEY)?, None).pay(&required)?;
    assert!(payment.name.eq_ignore_ascii_case("authorization"));
    let mut request = Request::new(send_request()?);
    let metadata = request.metadata_mut();
    metadata.insert("task-access-token", TOKEN_A.parse()?);
    metadata.insert("a2a-version", "1.0".parse()?);
    metadata.insert("authorization", payment.value.parse()?);
    let answer = grpc.send_message(request).await?;
    assert!(
        answer.metadata().get("payment-receipt").is_some(),
        "no receipt: {:?}",
        answer.metadata()
    );
    assert_eq!(cluster.settled().await?, 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_trusted_proxy_is_not_held_to_the_per_address_cap() -> TestResult {
    // The test client (127.0.0.1) stands for a proxy carrying many clients.
    let (_cluster, port) = start(&[
        ("MAX_CONNECTIONS_PER_IP", "1"),
        ("TRUSTED_PROXIES", "127.0.0.1"),
    ])
    .await?;
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).await?;
        stream.write_all(PREFACE).await?;
        stream.write_all(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]).await?;
        let mut first = [0u8; 9];
        tokio::time::timeout(PATIENCE, stream.read_exact(&mut first)).await??;
        assert_eq!(first[3], 0x4, "a SETTINGS frame first: {first:?}");
        held.push(stream);
    }
    Ok(())
}
