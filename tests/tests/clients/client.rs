//! The client library (`client`) against real processes: a gateway and a worker on a
//! private redis-server (every operation, a gateway under a base path), and small fake servers
//! for what a real gateway never does (cards pointing elsewhere, a connection dropped during
//! task creation, a failure that still names a task and carries payment evidence).

use std::time::Duration;

use client::{
    AgentCard, Client, ClientError, ClientOptions, CreationFailure, InvokeOptions, ListFilter,
    SendOptions, UrlPolicy,
};
use harness::TestResult;
use harness::cluster::Cluster;
use protocol::{TaskEventKind, TaskStatus};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const PATIENCE: Duration = Duration::from_secs(30);

/// A worker and a gateway under `base_path` (the harness's cluster builder), once the card
/// lists the worker's entrypoints; `Cluster::base()` is the gateway's URL with the base path.
async fn cluster(base_path: &str) -> TestResult<Cluster> {
    Cluster::builder()
        .worker("w1", &[])
        .gateway("g1", &[("BASE_PATH", base_path)])
        .skills(&["count"])
        .start()
        .await
}

/// An owner with two tasks: an `echo` that completed (its keys generated), then a 60 s `sleep`
/// sent with that owner's token, its own idempotency key, a context and metadata, which the
/// client sends as given. Returns the token and the running sleep.
async fn owner_with_a_slow_task(
    client: &Client,
    card: &AgentCard,
) -> TestResult<(String, client::TaskAccess)> {
    let access = client
        .send_message(card, "echo", &json!({"y": 2}), SendOptions::default())
        .await?;
    client
        .wait_for_task(card, &access.task_id, access.access_token(), PATIENCE)
        .await?;
    // The same owner for a second task (given keys are sent as they are), in a context.
    let token = access.access_token().to_owned();
    let slow = client
        .send_message(
            card,
            "sleep",
            &json!({"ms": 60_000}),
            SendOptions {
                access_token: Some(token.clone()),
                idempotency_key: Some("client-test-send-0002".into()),
                context_id: Some("ctx-1".into()),
                metadata: Some(json!({"from": "test"})),
                ..SendOptions::default()
            },
        )
        .await?;
    assert_eq!(slow.idempotency_key, "client-test-send-0002");
    assert_eq!(slow.access_token(), token);
    Ok((token, slow))
}

/// The card: version, streaming entrypoints, base URL, and fields the client has no type for.
#[tokio::test(flavor = "multi_thread")]
async fn the_card_is_read_with_its_unknown_fields_kept() -> TestResult {
    let cluster = cluster("").await?;
    let client = Client::new(ClientOptions::default())?;
    let card = client.fetch_card(cluster.base()).await?;
    assert_eq!(card.protocol_version.as_deref(), Some("1.0"));
    assert!(card.streams("count"));
    assert_eq!(
        client.base_url(&card)?.as_str(),
        format!("{}/", cluster.base())
    );
    // Fields the client has no type for are kept.
    assert!(card.extra.contains_key("supportsAuthenticatedExtendedCard"));

    Ok(())
}

/// `invoke` with an idempotency key: the second call replays the first run.
#[tokio::test(flavor = "multi_thread")]
async fn an_invoke_with_an_idempotency_key_is_replayed() -> TestResult {
    let cluster = cluster("").await?;
    let client = Client::new(ClientOptions::default())?;
    let card = client.fetch_card(cluster.base()).await?;
    // invoke, with an idempotency key: the second call replays the first.
    let options = InvokeOptions {
        idempotency_key: Some("client-test-invoke-0001".into()),
        ..InvokeOptions::default()
    };
    let first = client
        .invoke(&card, "echo", &json!({"x": 1}), &options)
        .await?;
    assert_eq!(first.status, "succeeded");
    assert_eq!(first.output, json!({"x": 1}));
    assert!(!first.replayed);
    let again = client
        .invoke(&card, "echo", &json!({"x": 1}), &options)
        .await?;
    assert!(again.replayed);
    assert_eq!(again.run_id, first.run_id);
    Ok(())
}

/// An unknown entrypoint comes back as `entrypoint_not_found`.
#[tokio::test(flavor = "multi_thread")]
async fn an_invoke_of_an_unknown_entrypoint_is_a_typed_404() -> TestResult {
    let cluster = cluster("").await?;
    let client = Client::new(ClientOptions::default())?;
    let card = client.fetch_card(cluster.base()).await?;
    let missing = client
        .invoke(&card, "nope", &json!({}), &InvokeOptions::default())
        .await;
    assert!(
        matches!(&missing, Err(ClientError::Remote { status: 404, code: Some(code), .. }) if code == "entrypoint_not_found"),
        "{missing:?}"
    );

    Ok(())
}

/// `stream` yields `run-start`, one delta per item, then the end event.
#[tokio::test(flavor = "multi_thread")]
async fn a_stream_delivers_run_start_deltas_and_the_end() -> TestResult {
    let cluster = cluster("").await?;
    let client = Client::new(ClientOptions::default())?;
    let card = client.fetch_card(cluster.base()).await?;
    // stream
    let mut events = client.stream(&card, "count", &json!({"n": 3})).await?;
    let mut kinds = Vec::new();
    let mut last = None;
    while let Some(event) = tokio::time::timeout(PATIENCE, events.next()).await?? {
        kinds.push(event.kind.clone());
        last = Some(event);
    }
    assert_eq!(kinds.first().map(String::as_str), Some("run-start"));
    assert_eq!(
        kinds.iter().filter(|k| *k == "delta").count(),
        3,
        "{kinds:?}"
    );
    let last = last.ok_or("no events")?;
    assert!(last.is_end());
    assert_eq!(last.data["status"], "succeeded");

    Ok(())
}

/// `send_message` generates the token and the idempotency key; `wait_for_task` follows the task to completion.
#[tokio::test(flavor = "multi_thread")]
async fn send_message_makes_keys_and_wait_for_task_follows_it_to_the_end() -> TestResult {
    let cluster = cluster("").await?;
    let client = Client::new(ClientOptions::default())?;
    let card = client.fetch_card(cluster.base()).await?;
    // send_message generates both keys; wait_for_task follows it to the end.
    let access = client
        .send_message(&card, "echo", &json!({"y": 2}), SendOptions::default())
        .await?;
    assert_eq!(access.status, TaskStatus::Running);
    assert_eq!(access.access_token().len(), 64);
    assert!(!access.idempotency_key.is_empty());
    assert!(!format!("{access:?}").contains(access.access_token()));
    let done = client
        .wait_for_task(&card, &access.task_id, access.access_token(), PATIENCE)
        .await?;
    assert_eq!(done.status, TaskStatus::Completed);
    assert_eq!(
        done.result.as_ref().map(|r| r.output.clone()),
        Some(json!({"y": 2}))
    );
    let read = client
        .get_task(&card, &access.task_id, access.access_token())
        .await?;
    assert_eq!(read, done);

    Ok(())
}

/// `list_tasks`: given keys are sent as they are; filters by status, context and page; another owner sees nothing.
#[tokio::test(flavor = "multi_thread")]
async fn list_tasks_filters_by_status_and_context_and_owner() -> TestResult {
    let cluster = cluster("").await?;
    let client = Client::new(ClientOptions::default())?;
    let card = client.fetch_card(cluster.base()).await?;
    let (token, slow) = owner_with_a_slow_task(&client, &card).await?;

    let all = client
        .list_tasks(&card, &token, &ListFilter::default())
        .await?;
    assert_eq!(all.tasks.len(), 2);
    assert_eq!(all.total, Some(2));
    let running = client
        .list_tasks(
            &card,
            &token,
            &ListFilter {
                status: vec![TaskStatus::Running],
                ..ListFilter::default()
            },
        )
        .await?;
    assert_eq!(running.tasks.len(), 1);
    assert_eq!(running.tasks[0].task_id, slow.task_id);
    let in_context = client
        .list_tasks(
            &card,
            &token,
            &ListFilter {
                context_id: Some("ctx-1".into()),
                limit: Some(1),
                offset: Some(0),
                ..ListFilter::default()
            },
        )
        .await?;
    assert_eq!(in_context.tasks.len(), 1);
    assert_eq!(in_context.has_more, Some(false));
    let nobody = client
        .list_tasks(&card, &client::generate_token(), &ListFilter::default())
        .await?;
    assert!(nobody.tasks.is_empty());

    Ok(())
}

/// `subscribe_task`: a running snapshot, then a cancel ends the stream, and `wait_for_task` treats cancelled as terminal.
#[tokio::test(flavor = "multi_thread")]
async fn a_subscription_sees_the_snapshot_then_the_cancellation() -> TestResult {
    let cluster = cluster("").await?;
    let client = Client::new(ClientOptions::default())?;
    let card = client.fetch_card(cluster.base()).await?;
    let (token, slow) = owner_with_a_slow_task(&client, &card).await?;

    // subscribe: a running snapshot, then the cancellation ends the stream.
    let mut updates = client.subscribe_task(&card, &slow.task_id, &token).await?;
    let snapshot = tokio::time::timeout(PATIENCE, updates.next())
        .await??
        .ok_or("no snapshot")?;
    assert_eq!(snapshot.kind, TaskEventKind::StatusUpdate);
    assert_eq!(snapshot.data.status, Some(TaskStatus::Running));
    let waiter = {
        let client = client.clone();
        let card = card.clone();
        let task_id = slow.task_id.clone();
        let token = token.clone();
        tokio::spawn(async move {
            client
                .wait_for_task(&card, &task_id, &token, PATIENCE)
                .await
        })
    };
    let cancelled = client.cancel_task(&card, &slow.task_id, &token).await?;
    assert_eq!(cancelled.status, TaskStatus::Cancelled);
    let end = tokio::time::timeout(PATIENCE, updates.next())
        .await??
        .ok_or("no cancellation event")?;
    assert_eq!(end.data.status, Some(TaskStatus::Cancelled));
    assert!(
        tokio::time::timeout(PATIENCE, updates.next())
            .await??
            .is_none()
    );
    // wait_for_task treats cancelled as terminal.
    assert_eq!(waiter.await??.status, TaskStatus::Cancelled);

    Ok(())
}

/// A second cancel is `invalid_state`; another owner gets `task_not_found` and a 404 wait.
#[tokio::test(flavor = "multi_thread")]
async fn errors_the_agent_gives_come_back_typed() -> TestResult {
    let cluster = cluster("").await?;
    let client = Client::new(ClientOptions::default())?;
    let card = client.fetch_card(cluster.base()).await?;
    let (token, slow) = owner_with_a_slow_task(&client, &card).await?;

    let cancelled = client.cancel_task(&card, &slow.task_id, &token).await?;
    assert_eq!(cancelled.status, TaskStatus::Cancelled);

    // Errors the agent gives come back typed.
    let again = client.cancel_task(&card, &slow.task_id, &token).await;
    assert!(
        matches!(&again, Err(ClientError::Remote { status: 400, code: Some(code), .. }) if code == "invalid_state"),
        "{again:?}"
    );
    let stranger = client::generate_token();
    let hidden = client.get_task(&card, &slow.task_id, &stranger).await;
    assert_eq!(
        hidden.as_ref().err().and_then(ClientError::code),
        Some("task_not_found")
    );
    let waited = client
        .wait_for_task(&card, &slow.task_id, &stranger, PATIENCE)
        .await;
    assert_eq!(
        waited.as_ref().err().and_then(ClientError::status),
        Some(404)
    );

    Ok(())
}

/// `wait_for_task` gives up with `ClientError::Timeout`.
#[tokio::test(flavor = "multi_thread")]
async fn a_wait_that_runs_out_of_time_is_a_timeout() -> TestResult {
    let cluster = cluster("").await?;
    let client = Client::new(ClientOptions::default())?;
    let card = client.fetch_card(cluster.base()).await?;
    // A wait that runs out of time.
    let long = client
        .send_message(
            &card,
            "sleep",
            &json!({"ms": 60_000}),
            SendOptions::default(),
        )
        .await?;
    let timed_out = client
        .wait_for_task(
            &card,
            &long.task_id,
            long.access_token(),
            Duration::from_millis(300),
        )
        .await;
    assert!(
        matches!(timed_out, Err(ClientError::Timeout(_))),
        "{timed_out:?}"
    );
    client
        .cancel_task(&card, &long.task_id, long.access_token())
        .await?;

    Ok(())
}

/// An unknown skill: `TaskCreationError` with the keys and the answer, the token never printed.
#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_skill_is_a_creation_error_with_the_keys() -> TestResult {
    let cluster = cluster("").await?;
    let client = Client::new(ClientOptions::default())?;
    let card = client.fetch_card(cluster.base()).await?;
    // A skill the agent does not have: TaskCreationError with the keys and the answer.
    let error = client
        .send_message(&card, "nope", &json!({}), SendOptions::default())
        .await
        .err()
        .ok_or("an unknown skill was accepted")?;
    assert_eq!(error.failure, CreationFailure::Status);
    assert_eq!(error.response_status, Some(404));
    assert_eq!(error.cause.code(), Some("skill_not_found"));
    assert_eq!(error.access_token().len(), 64);
    assert!(!format!("{error:?}").contains(error.access_token()));
    assert!(!error.to_string().contains(error.access_token()));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gateway_under_a_base_path_keeps_it() -> TestResult {
    let cluster = cluster("/agents/a").await?;
    let client = Client::new(ClientOptions::default())?;
    let card = client.fetch_card(cluster.base()).await?;
    assert_eq!(
        client.base_url(&card)?.as_str(),
        format!("{}/", cluster.base())
    );
    let result = client
        .invoke(&card, "echo", &json!("hi"), &InvokeOptions::default())
        .await?;
    assert_eq!(result.output, json!("hi"));
    let access = client
        .send_message(&card, "echo", &json!({"z": 3}), SendOptions::default())
        .await?;
    let done = client
        .wait_for_task(&card, &access.task_id, access.access_token(), PATIENCE)
        .await?;
    assert_eq!(done.status, TaskStatus::Completed);
    let listed = client
        .list_tasks(&card, access.access_token(), &ListFilter::default())
        .await?;
    assert_eq!(listed.tasks.len(), 1);
    let mut events = client
        .subscribe_task(&card, &access.task_id, access.access_token())
        .await?;
    let mut kinds = Vec::new();
    while let Some(event) = tokio::time::timeout(PATIENCE, events.next()).await?? {
        kinds.push(event.kind);
    }
    assert_eq!(
        kinds,
        [TaskEventKind::StatusUpdate, TaskEventKind::ResultUpdate]
    );
    // The card itself says where the gateway lives; the root does not serve the profile.
    let root = format!("http://{}", client.base_url(&card)?.authority());
    assert!(matches!(
        client.fetch_card(&root).await,
        Err(ClientError::CardNotFound { .. })
    ));
    Ok(())
}

/// A one-trick HTTP server: every request gets `respond(path)`, or, when that is `None`, a
/// connection closed without an answer. Returns its origin.
async fn fake_server(
    respond: impl Fn(&str) -> Option<String> + Send + Sync + 'static,
) -> TestResult<String> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let origin = format!("http://{}", listener.local_addr()?);
    let respond = std::sync::Arc::new(respond);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let respond = respond.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buffer = [0u8; 4096];
                // Headers, then whatever body Content-Length announces.
                loop {
                    let Ok(read) = socket.read(&mut buffer).await else {
                        return;
                    };
                    if read == 0 {
                        return;
                    }
                    request.extend_from_slice(&buffer[..read]);
                    let text = String::from_utf8_lossy(&request).into_owned();
                    let Some(end) = text.find("\r\n\r\n") else {
                        continue;
                    };
                    let length = text[..end]
                        .lines()
                        .find_map(|line| {
                            let (name, value) = line.split_once(':')?;
                            name.eq_ignore_ascii_case("content-length")
                                .then(|| value.trim().parse::<usize>().ok())?
                        })
                        .unwrap_or(0);
                    if request.len() >= end + 4 + length {
                        break;
                    }
                }
                let text = String::from_utf8_lossy(&request).into_owned();
                let path = text.split_whitespace().nth(1).unwrap_or("/").to_owned();
                if let Some(response) = respond(&path) {
                    let _ = socket.write_all(response.as_bytes()).await;
                }
                let _ = socket.shutdown().await;
            });
        }
    });
    Ok(origin)
}

fn http_response(status: &str, headers: &[(&str, &str)], body: &str) -> String {
    let mut response = format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        response.push_str(&format!("{name}: {value}\r\n"));
    }
    response.push_str("\r\n");
    response.push_str(body);
    response
}

fn card_at(url: &str) -> String {
    json!({
        "protocolVersion": "1.0",
        "name": "fake",
        "url": url,
        "supportedInterfaces": [{"url": url, "protocolBinding": "HTTP+JSON"}],
    })
    .to_string()
}

#[tokio::test]
async fn cards_pointing_elsewhere_are_refused() -> TestResult {
    // A card at the second location (the first answers 404) pointing to a file URL.
    let file_card = fake_server(|path| {
        Some(match path {
            "/.well-known/agent-card.json" => {
                http_response("200 OK", &[], &card_at("file:///etc/passwd"))
            }
            _ => http_response("404 Not Found", &[], "{}"),
        })
    })
    .await?;
    let client = Client::new(ClientOptions::default())?;
    let refused = client.fetch_card(&file_card).await;
    assert!(
        matches!(refused, Err(ClientError::RefusedUrl { .. })),
        "{refused:?}"
    );

    // A card at the legacy location pointing to another origin: refused by default (a card
    // may only name its own origin), fine with an allowlist that lists both, refused with one
    // that lists only the card's own origin.
    let elsewhere = fake_server(|path| {
        Some(match path {
            "/.well-known/agent.json" => {
                http_response("200 OK", &[], &card_at("http://elsewhere.example/agent/"))
            }
            _ => http_response("404 Not Found", &[], "{}"),
        })
    })
    .await?;
    let refused = client.fetch_card(&elsewhere).await;
    assert!(
        matches!(&refused, Err(ClientError::RefusedUrl { reason, .. }) if reason.contains("not the card's origin")),
        "{refused:?}"
    );
    let both = Client::new(ClientOptions {
        policy: UrlPolicy {
            allowed_origins: Some(vec![elsewhere.clone(), "http://elsewhere.example".into()]),
        },
        ..ClientOptions::default()
    })?;
    let card = both.fetch_card(&elsewhere).await?;
    assert_eq!(
        both.base_url(&card)?.as_str(),
        "http://elsewhere.example/agent/"
    );
    let strict = Client::new(ClientOptions {
        policy: UrlPolicy {
            allowed_origins: Some(vec![elsewhere.clone()]),
        },
        ..ClientOptions::default()
    })?;
    let refused = strict.fetch_card(&elsewhere).await;
    assert!(
        matches!(refused, Err(ClientError::RefusedUrl { .. })),
        "{refused:?}"
    );
    // Nor is a card fetched from outside the allowlist, nor an operation on a card that
    // names a disallowed origin.
    assert!(matches!(
        strict.fetch_card(&file_card).await,
        Err(ClientError::RefusedUrl { .. })
    ));
    assert!(matches!(
        strict.get_task(&card, "t", &client::generate_token()).await,
        Err(ClientError::RefusedUrl { .. })
    ));
    assert!(matches!(
        client.fetch_card("ftp://127.0.0.1/").await,
        Err(ClientError::RefusedUrl { .. })
    ));

    // The fourth location, and a card over the size limit. Its service URL is relative: the
    // card's own origin, the only one allowed without an allowlist.
    let last = fake_server(|path| {
        Some(match path {
            "/agentcard.json" => http_response("200 OK", &[], &card_at("/")),
            _ => http_response("404 Not Found", &[], "{}"),
        })
    })
    .await?;
    assert_eq!(client.fetch_card(&last).await?.name, "fake");
    // The card's own URL works too: the URL itself is tried first.
    assert_eq!(
        client
            .fetch_card(&format!("{last}/agentcard.json"))
            .await?
            .name,
        "fake"
    );
    let small = Client::new(ClientOptions {
        max_card_bytes: 16,
        ..ClientOptions::default()
    })?;
    assert!(matches!(
        small.fetch_card(&last).await,
        Err(ClientError::TooLarge { .. })
    ));
    Ok(())
}

#[tokio::test]
async fn a_dropped_connection_during_send_message_surfaces_both_keys() -> TestResult {
    let origin = fake_server(|_| None).await?;
    let client = Client::new(ClientOptions::default())?;
    let card = AgentCard::for_url(&origin);
    let error = client
        .send_message(&card, "echo", &json!({}), SendOptions::default())
        .await
        .err()
        .ok_or("a closed connection created a task")?;
    assert_eq!(error.failure, CreationFailure::Network);
    assert!(error.cause.is_network());
    assert_eq!(error.access_token().len(), 64);
    assert!(
        uuid_like(&error.idempotency_key),
        "{}",
        error.idempotency_key
    );
    assert_eq!(error.response_status, None);

    // Keys the caller chose come back as they were.
    let token = "caller-chosen-token-0123456789";
    let error = client
        .send_message(
            &card,
            "echo",
            &json!({}),
            SendOptions {
                access_token: Some(token.into()),
                idempotency_key: Some("caller-key-0123456789".into()),
                ..SendOptions::default()
            },
        )
        .await
        .err()
        .ok_or("a closed connection created a task")?;
    assert_eq!(error.access_token(), token);
    assert_eq!(error.idempotency_key, "caller-key-0123456789");
    Ok(())
}

fn uuid_like(text: &str) -> bool {
    text.len() == 36 && text.chars().filter(|c| *c == '-').count() == 4
}

#[tokio::test]
async fn a_failed_creation_keeps_task_status_and_settlement() -> TestResult {
    let origin = fake_server(|_| {
        Some(http_response(
            "503 Service Unavailable",
            &[("Payment-Receipt", "receipt-1"), ("X-Payment-Response", "xpr-1")],
            r#"{"error":{"code":"task_terminalization_failed"},"taskId":"t-9","accessToken":"x","status":"cancelled"}"#,
        ))
    })
    .await?;
    let client = Client::new(ClientOptions::default())?;
    let card = AgentCard::for_url(&origin);
    let error = client
        .send_message(&card, "echo", &json!({}), SendOptions::default())
        .await
        .err()
        .ok_or("a 503 was taken for success")?;
    assert_eq!(error.failure, CreationFailure::Status);
    assert_eq!(error.response_status, Some(503));
    assert_eq!(error.task_id.as_deref(), Some("t-9"));
    assert_eq!(error.task_status, Some(TaskStatus::Cancelled));
    assert_eq!(
        error.settlement.payment_receipt.as_deref(),
        Some("receipt-1")
    );
    assert_eq!(
        error.settlement.x_payment_response.as_deref(),
        Some("xpr-1")
    );
    assert_eq!(error.cause.code(), Some("task_terminalization_failed"));
    assert!(error.body.as_deref().is_some_and(|b| b.contains("t-9")));

    // A 2xx that is not a capability is malformed, still with the keys.
    let odd =
        fake_server(|_| Some(http_response("200 OK", &[("Payment-Response", "pr")], "[]"))).await?;
    let error = client
        .send_message(
            &AgentCard::for_url(&odd),
            "echo",
            &json!({}),
            SendOptions::default(),
        )
        .await
        .err()
        .ok_or("a malformed body was accepted")?;
    assert_eq!(error.failure, CreationFailure::Malformed);
    assert_eq!(error.response_status, Some(200));
    assert_eq!(error.settlement.payment_response.as_deref(), Some("pr"));
    assert_eq!(error.access_token().len(), 64);

    // Success surfaces settlement headers too.
    let paid = fake_server(|_| {
        Some(http_response(
            "200 OK",
            &[("Payment-Receipt", "r-2")],
            r#"{"taskId":"t-1","accessToken":"ignored-by-nobody-0123456789","status":"running"}"#,
        ))
    })
    .await?;
    let access = client
        .send_message(
            &AgentCard::for_url(&paid),
            "echo",
            &json!({}),
            SendOptions::default(),
        )
        .await?;
    assert_eq!(access.task_id, "t-1");
    assert_eq!(access.settlement.payment_receipt.as_deref(), Some("r-2"));
    let _: Value = serde_json::to_value(&access)?;
    Ok(())
}

/// A server answering each request with `respond(path, n)` (n counts requests), writing the
/// response `chunk` bytes at a time with a flush and a pause between writes.
async fn trickle_server(
    chunk: usize,
    respond: impl Fn(&str, usize) -> String + Send + Sync + 'static,
) -> TestResult<String> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let origin = format!("http://{}", listener.local_addr()?);
    let respond = std::sync::Arc::new(respond);
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let respond = respond.clone();
            let n = count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buffer = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(read) => request.extend_from_slice(&buffer[..read]),
                    }
                }
                let text = String::from_utf8_lossy(&request).into_owned();
                let path = text.split_whitespace().nth(1).unwrap_or("/").to_owned();
                let response = respond(&path, n);
                for piece in response.as_bytes().chunks(chunk.max(1)) {
                    if socket.write_all(piece).await.is_err() {
                        return;
                    }
                    let _ = socket.flush().await;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                let _ = socket.shutdown().await;
            });
        }
    });
    Ok(origin)
}

fn sse_response(body: &str) -> String {
    format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n{body}")
}

#[tokio::test]
async fn task_events_survive_any_chunking() -> TestResult {
    // CRLF line endings, a comment, a keep-alive, multi-byte characters: one byte per write.
    let body = ": keep-alive\r\n\r\nevent: statusUpdate\r\ndata: {\"taskId\":\"t\",\"status\":\"running\"}\r\n\r\n\
                event: resultUpdate\r\ndata: {\"taskId\":\"t\",\"status\":\"completed\",\r\ndata: \"result\":{\"output\":\"h\u{e9}llo \u{1F600}\"}}\r\n\r\n";
    for chunk in [1, 2, 3, 7, 64] {
        let origin = trickle_server(chunk, move |_, _| sse_response(body)).await?;
        let client = Client::new(ClientOptions::default())?;
        let card = AgentCard::for_url(&origin);
        let mut events = client
            .subscribe_task(&card, "t", &client::generate_token())
            .await?;
        let first = events.next().await?.ok_or("no first event")?;
        assert_eq!(first.kind, TaskEventKind::StatusUpdate);
        let second = events.next().await?.ok_or("no second event")?;
        assert_eq!(second.kind, TaskEventKind::ResultUpdate);
        assert_eq!(
            second.data.result.map(|r| r.output),
            Some(json!("h\u{e9}llo \u{1F600}")),
            "chunk {chunk}"
        );
        assert!(events.next().await?.is_none());
    }
    Ok(())
}

#[tokio::test]
async fn wait_for_task_polls_when_it_cannot_subscribe() -> TestResult {
    let task = |status: &str| {
        json!({
            "taskId": "t",
            "status": status,
            "createdAt": "2026-12-02T09:55:35.048Z",
            "updatedAt": "2026-12-02T09:55:35.252Z",
        })
        .to_string()
    };
    let origin = trickle_server(4096, move |path, n| {
        if path.ends_with("/subscribe") {
            http_response(
                "503 Service Unavailable",
                &[],
                r#"{"error":{"code":"service_unavailable"}}"#,
            )
        } else if n < 4 {
            http_response("200 OK", &[], &task("running"))
        } else {
            http_response("200 OK", &[], &task("cancelled"))
        }
    })
    .await?;
    let client = Client::new(ClientOptions::default())?;
    let card = AgentCard::for_url(&origin);
    let done = client
        .wait_for_task(&card, "t", &client::generate_token(), PATIENCE)
        .await?;
    assert_eq!(done.status, TaskStatus::Cancelled);
    Ok(())
}
