//! Deliveries against a real receiver on 127.0.0.1 (an axum server on a free port): the policy
//! refuses loopback by name and by literal unless allowed, redirects are reported and not
//! followed, an endless body does not hold the sender, the Authorization header arrives as
//! given (and a CR/LF never leaves), a silent receiver times out, statuses are classified.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE, LOCATION, RETRY_AFTER};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::Bytes;
use tokio::net::TcpListener;
use tokio::sync::Mutex;
use webhook::{
    AuthorizationError, DeliveryOutcome, RefusedRange, WebhookClient, WebhookConfig, WebhookError,
    WebhookPolicy,
};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const A2A_JSON: &str = "application/a2a+json";

/// What the receiver saw: each hit of `/hook` with its Authorization and Content-Type.
#[derive(Default)]
struct Seen {
    hooks: Mutex<Vec<(Option<String>, Option<String>)>>,
    requests: AtomicUsize,
}

struct Receiver {
    addr: SocketAddr,
    seen: Arc<Seen>,
}

impl Receiver {
    async fn start() -> Result<Self, std::io::Error> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let seen = Arc::new(Seen::default());
        let app = Router::new()
            .route("/hook", post(hook))
            .route("/redirect", post(redirect))
            .route("/endless", post(endless))
            .route("/status/{code}", post(status))
            .with_state(Arc::clone(&seen));
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(Self { addr, seen })
    }

    fn url(&self, host: &str, path: &str) -> String {
        format!("http://{host}:{}{path}", self.addr.port())
    }

    async fn hooks(&self) -> Vec<(Option<String>, Option<String>)> {
        self.seen.hooks.lock().await.clone()
    }

    fn requests(&self) -> usize {
        self.seen.requests.load(Ordering::SeqCst)
    }
}

fn header(headers: &HeaderMap, name: axum::http::HeaderName) -> Option<String> {
    headers
        .get(name)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
}

async fn hook(State(seen): State<Arc<Seen>>, headers: HeaderMap) -> StatusCode {
    seen.requests.fetch_add(1, Ordering::SeqCst);
    seen.hooks.lock().await.push((
        header(&headers, AUTHORIZATION),
        header(&headers, CONTENT_TYPE),
    ));
    StatusCode::NO_CONTENT
}

/// A 302 to `/hook` on the same (allowed) host: following it would count a hook.
async fn redirect(State(seen): State<Arc<Seen>>, headers: HeaderMap) -> Response {
    seen.requests.fetch_add(1, Ordering::SeqCst);
    let host = header(&headers, axum::http::header::HOST).unwrap_or_default();
    (
        StatusCode::FOUND,
        [(LOCATION, format!("http://{host}/hook"))],
    )
        .into_response()
}

/// 200 and a body that never ends (no Content-Length, 64 KiB chunks for ever, well past
/// 10 MB): a client that read it all would never return.
async fn endless(State(seen): State<Arc<Seen>>) -> Response {
    seen.requests.fetch_add(1, Ordering::SeqCst);
    let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
    let stream = futures::stream::repeat_with(move || Ok::<_, std::io::Error>(chunk.clone()));
    (StatusCode::OK, Body::from_stream(stream)).into_response()
}

async fn status(State(seen): State<Arc<Seen>>, Path(code): Path<u16>) -> Response {
    seen.requests.fetch_add(1, Ordering::SeqCst);
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, [(RETRY_AFTER, "7")], "no").into_response()
}

fn client(allowlist: &str) -> Result<WebhookClient, Box<dyn std::error::Error>> {
    Ok(WebhookClient::new(
        WebhookPolicy::from_allowlist(allowlist)?,
        WebhookConfig::default(),
    )?)
}

fn body() -> Bytes {
    Bytes::from_static(br#"{"statusUpdate":{}}"#)
}

fn assert_loopback_refused(result: Result<DeliveryOutcome, WebhookError>, host: &str) {
    match result {
        Err(WebhookError::Refused {
            host: refused,
            refusals,
        }) => {
            assert_eq!(refused, host);
            assert!(!refusals.is_empty());
            assert!(
                refusals.iter().all(|r| r.range == RefusedRange::Loopback),
                "{refusals:?}"
            );
        }
        other => panic!("{host}: expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn a_name_resolving_to_loopback_is_refused_without_the_allowlist() -> TestResult {
    let receiver = Receiver::start().await?;
    let result = client("")?
        .post(&receiver.url("localhost", "/hook"), None, A2A_JSON, body())
        .await;
    let message = match &result {
        Err(error) => error.to_string(),
        Ok(outcome) => outcome.to_string(),
    };
    assert_loopback_refused(result, "localhost");
    assert!(
        message.contains("webhook host localhost is not allowed: 127.0.0.1 is loopback"),
        "{message}"
    );
    // An allowlisted name does not admit other names that resolve to the same address.
    let other = client("receiver.internal")?
        .post(&receiver.url("localhost", "/hook"), None, A2A_JSON, body())
        .await;
    assert_loopback_refused(other, "localhost");
    assert_eq!(receiver.requests(), 0);
    Ok(())
}

#[tokio::test]
async fn a_name_resolving_to_loopback_is_delivered_when_allowed() -> TestResult {
    let receiver = Receiver::start().await?;
    let port = receiver.addr.port();
    for allowlist in [
        format!("localhost:{port}"),
        "LOCALHOST:*".to_owned(),
        format!("127.0.0.0/8:{port}"),
        format!("10.0.0.0/8, 127.0.0.1:{port}"),
    ] {
        let outcome = client(&allowlist)?
            .post(&receiver.url("localhost", "/hook"), None, A2A_JSON, body())
            .await?;
        assert_eq!(
            outcome,
            DeliveryOutcome::Delivered { status: 204 },
            "{allowlist}"
        );
    }
    assert_eq!(receiver.hooks().await.len(), 4);
    Ok(())
}

#[tokio::test]
async fn an_allowlisted_host_on_another_port_is_refused() -> TestResult {
    let receiver = Receiver::start().await?;
    let port = receiver.addr.port();
    let other = if port == 65535 { port - 1 } else { port + 1 };
    // Entries for another port of the host, and entries without a port (http's 80 only): the
    // receiver's port is not theirs, by name (refused at the connection) or by literal (before).
    for allowlist in [
        format!("localhost:{other},127.0.0.1:{other}"),
        "localhost,127.0.0.0/8".to_owned(),
    ] {
        let client = client(&allowlist)?;
        let by_name = client
            .post(&receiver.url("localhost", "/hook"), None, A2A_JSON, body())
            .await;
        assert_loopback_refused(by_name, "localhost");
        let literal = client
            .post(&receiver.url("127.0.0.1", "/hook"), None, A2A_JSON, body())
            .await;
        assert_loopback_refused(literal, "127.0.0.1");
    }
    assert_eq!(receiver.requests(), 0);
    // The same client, on the port it names: delivered.
    let outcome = client(&format!("localhost:{other},localhost:{port}"))?
        .post(&receiver.url("localhost", "/hook"), None, A2A_JSON, body())
        .await?;
    assert!(outcome.is_delivered(), "{outcome}");
    Ok(())
}

#[tokio::test]
async fn loopback_literals_are_refused_without_a_cidr() -> TestResult {
    let receiver = Receiver::start().await?;
    // A host name on the allowlist does not cover addresses written in the URL.
    for allowlist in ["", "localhost"] {
        let client = client(allowlist)?;
        for host in ["127.0.0.1", "[::ffff:127.0.0.1]"] {
            let result = client
                .post(&receiver.url(host, "/hook"), None, A2A_JSON, body())
                .await;
            let shown = host.trim_start_matches('[').trim_end_matches(']');
            match result {
                Err(WebhookError::Refused { refusals, .. }) => {
                    assert_eq!(refusals.len(), 1);
                    assert_eq!(refusals[0].range, RefusedRange::Loopback);
                    assert_eq!(refusals[0].ip.to_string(), shown);
                }
                other => panic!("{host} with {allowlist:?}: expected a refusal, got {other:?}"),
            }
        }
    }
    assert_eq!(receiver.requests(), 0);
    let outcome = client("127.0.0.0/8:*")?
        .post(&receiver.url("127.0.0.1", "/hook"), None, A2A_JSON, body())
        .await?;
    assert!(outcome.is_delivered(), "{outcome}");
    Ok(())
}

#[tokio::test]
async fn a_redirect_is_reported_not_followed() -> TestResult {
    let receiver = Receiver::start().await?;
    let outcome = client("localhost:*")?
        .post(
            &receiver.url("localhost", "/redirect"),
            Some(("Bearer", "x")),
            A2A_JSON,
            body(),
        )
        .await?;
    let location = receiver.url("localhost", "/hook");
    assert_eq!(
        outcome,
        DeliveryOutcome::Redirected {
            status: 302,
            location: Some(location.clone())
        }
    );
    assert!(!outcome.is_retryable());
    assert_eq!(
        outcome.to_string(),
        format!("redirect 302 not followed (Location: {location})")
    );
    assert_eq!(
        receiver.requests(),
        1,
        "only the redirecting route was called"
    );
    assert!(receiver.hooks().await.is_empty());
    Ok(())
}

#[tokio::test]
async fn an_endless_response_body_is_not_read_past_the_bound() -> TestResult {
    let receiver = Receiver::start().await?;
    // A generous limit: a client that kept reading would hit it, and since the status is
    // already known when the body is read, it would still report Delivered; so the test also
    // checks that the call came back long before it.
    let limit = Duration::from_secs(60);
    let config = WebhookConfig {
        timeout: limit,
        ..WebhookConfig::default()
    };
    let client = WebhookClient::new(WebhookPolicy::from_allowlist("localhost:*")?, config)?;
    let url = receiver.url("localhost", "/endless");
    let started = std::time::Instant::now();
    let outcome = client.post(&url, None, A2A_JSON, body()).await?;
    assert_eq!(outcome, DeliveryOutcome::Delivered { status: 200 });
    assert!(
        started.elapsed() < limit / 2,
        "took {:?}",
        started.elapsed()
    );
    // The dropped connection is not reused: the next attempt works as well.
    let again = client.post(&url, None, A2A_JSON, body()).await?;
    assert_eq!(again, DeliveryOutcome::Delivered { status: 200 });
    assert_eq!(receiver.requests(), 2);
    Ok(())
}

#[tokio::test]
async fn the_authorization_header_arrives_as_given_and_line_breaks_never_leave() -> TestResult {
    let receiver = Receiver::start().await?;
    let client = client("localhost:*")?;
    let url = receiver.url("localhost", "/hook");
    let outcome = client
        .post(&url, Some(("Bearer", "x")), A2A_JSON, body())
        .await?;
    assert!(outcome.is_delivered(), "{outcome}");
    client.post(&url, None, A2A_JSON, body()).await?;
    assert_eq!(
        receiver.hooks().await,
        [
            (Some("Bearer x".to_owned()), Some(A2A_JSON.to_owned())),
            (None, Some(A2A_JSON.to_owned())),
        ]
    );

    for (scheme, credentials) in [
        ("Bearer", "x\r\nX-Injected: 1"),
        ("Bearer\n", "x"),
        ("Bearer", "x\ry"),
    ] {
        match client
            .post(&url, Some((scheme, credentials)), A2A_JSON, body())
            .await
        {
            Err(WebhookError::InvalidAuthorization(
                AuthorizationError::InvalidCredentials { what, .. }
                | AuthorizationError::InvalidScheme { what, .. },
            )) => assert_eq!(what, "a line break (CR or LF)"),
            other => panic!("{scheme:?} {credentials:?}: expected a refusal, got {other:?}"),
        }
    }
    assert!(matches!(
        client
            .post(&url, None, "application/json\r\nX-Injected: 1", body())
            .await,
        Err(WebhookError::InvalidContentType)
    ));
    assert_eq!(
        receiver.requests(),
        2,
        "nothing was sent for the refused ones"
    );
    Ok(())
}

#[tokio::test]
async fn a_receiver_that_never_answers_times_out() -> TestResult {
    // Accepts connections and reads nothing, answers nothing.
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let config = WebhookConfig {
        timeout: Duration::from_millis(300),
        ..WebhookConfig::default()
    };
    let client = WebhookClient::new(WebhookPolicy::from_allowlist("localhost:*")?, config)?;
    let outcome = client
        .post(
            &format!("http://localhost:{port}/hook"),
            None,
            A2A_JSON,
            body(),
        )
        .await?;
    assert_eq!(outcome, DeliveryOutcome::TimedOut);
    assert!(outcome.is_retryable());
    Ok(())
}

#[tokio::test]
async fn a_closed_port_is_a_retryable_connection_failure() -> TestResult {
    let port = TcpListener::bind("127.0.0.1:0").await?.local_addr()?.port();
    let outcome = client("127.0.0.1:*")?
        .post(
            &format!("http://127.0.0.1:{port}/hook?token=secret"),
            None,
            A2A_JSON,
            body(),
        )
        .await?;
    match &outcome {
        DeliveryOutcome::Transport { detail } => {
            assert!(!detail.contains("secret"), "{detail}");
        }
        other => panic!("expected a connection failure, got {other:?}"),
    }
    assert!(outcome.is_retryable());
    Ok(())
}

#[tokio::test]
async fn statuses_are_classified_on_the_wire() -> TestResult {
    let receiver = Receiver::start().await?;
    let client = client("localhost:*")?;
    let seven = Some(Duration::from_secs(7));
    for (code, expected) in [
        (200, DeliveryOutcome::Delivered { status: 200 }),
        (202, DeliveryOutcome::Delivered { status: 202 }),
        (400, DeliveryOutcome::Rejected { status: 400 }),
        (401, DeliveryOutcome::Rejected { status: 401 }),
        (404, DeliveryOutcome::Rejected { status: 404 }),
        (
            408,
            DeliveryOutcome::Unavailable {
                status: 408,
                retry_after: seven,
            },
        ),
        (
            429,
            DeliveryOutcome::Unavailable {
                status: 429,
                retry_after: seven,
            },
        ),
        (
            500,
            DeliveryOutcome::Unavailable {
                status: 500,
                retry_after: seven,
            },
        ),
        (
            503,
            DeliveryOutcome::Unavailable {
                status: 503,
                retry_after: seven,
            },
        ),
    ] {
        let outcome = client
            .post(
                &receiver.url("localhost", &format!("/status/{code}")),
                None,
                A2A_JSON,
                body(),
            )
            .await?;
        assert_eq!(outcome, expected, "{code}");
    }
    Ok(())
}

#[tokio::test]
async fn urls_that_are_not_webhooks_are_refused_before_sending() -> TestResult {
    let receiver = Receiver::start().await?;
    let client = client("localhost:*")?;
    let port = receiver.addr.port();
    for url in [
        format!("ftp://localhost:{port}/hook"),
        format!("http://user:pw@localhost:{port}/hook"),
        "not a url".to_owned(),
    ] {
        match client.post(&url, None, A2A_JSON, body()).await {
            Err(WebhookError::InvalidUrl { reason }) => assert!(!reason.contains("pw"), "{reason}"),
            other => panic!("{url}: expected an invalid URL, got {other:?}"),
        }
    }
    assert_eq!(receiver.requests(), 0);
    Ok(())
}
