//! The A2A gRPC binding (`lf.a2a.v1.A2AService`, `GRPC_LISTEN`) against real processes: a
//! private redis-server, a worker hosting the built-ins and a gateway serving gRPC on a port of
//! its own, called with the tonic client generated from the official proto (a2a-pb). Requests
//! and answers are converted with a2a-pb's `pbconv` from and to the ProtoJSON the other A2A
//! suites read, so the same shapes are checked.
//!
//! One behaviour per test: a blocking send, a stream to the end, owners, cancel, unknown tasks
//! with their `google.rpc.ErrorInfo`, push notification configs (and the methods refused when
//! push notifications are off), and the card's GRPC interface.

use std::time::Duration;

use a2a_pb::a2a_service_client::A2aServiceClient;
use a2a_pb::pbconv;
use harness::TestResult;
use harness::cluster::{Cluster, free_port};
use serde_json::{Value, json};
use tonic::transport::Channel;
use tonic::{Code, Request, Status};
use tonic_types::StatusExt;

const TOKEN_A: &str = "grpc-suite-token-alpha-0123456789";
const TOKEN_B: &str = "grpc-suite-token-bravo-0123456789";

/// How long a task may take to reach the state a test waits for.
const PATIENCE: Duration = Duration::from_secs(20);

/// The cluster, and the gRPC port its gateway serves.
struct Grpc {
    cluster: Cluster,
    port: u16,
}

impl Grpc {
    async fn start() -> TestResult<Grpc> {
        Grpc::start_with(&[]).await
    }

    /// [`Grpc::start`] with `gateway` added to the gateway's settings.
    async fn start_with(gateway: &[(&str, &str)]) -> TestResult<Grpc> {
        let port = free_port()?;
        let listen = format!("127.0.0.1:{port}");
        let mut settings = vec![("GRPC_LISTEN", listen.as_str())];
        settings.extend_from_slice(gateway);
        let cluster = Cluster::builder()
            .worker("w1", &[])
            .gateway("g1", &settings)
            .skills(&["echo", "count", "sleep"])
            .start()
            .await?;
        Ok(Grpc { cluster, port })
    }

    async fn client(&self) -> TestResult<A2aServiceClient<Channel>> {
        Ok(A2aServiceClient::connect(format!("http://127.0.0.1:{}", self.port)).await?)
    }
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

/// A `SendMessageRequest` for `skill` with one data part, from its ProtoJSON.
fn send_request(
    skill: &str,
    data: Value,
    immediately: bool,
) -> TestResult<a2a_pb::SendMessageRequest> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let request: a2a::SendMessageRequest = serde_json::from_value(json!({
        "message": {
            "messageId": format!("grpc-{skill}-{}-{id}", std::process::id()),
            "role": "ROLE_USER",
            "parts": [{"data": data}],
            "metadata": {"skillId": skill},
        },
        "configuration": {"returnImmediately": immediately},
    }))?;
    Ok(pbconv::to_proto_send_message_request(&request))
}

/// A protobuf task as the ProtoJSON the other suites read.
fn task_json(task: &a2a_pb::Task) -> TestResult<Value> {
    Ok(serde_json::to_value(pbconv::from_proto_task(task))?)
}

fn state(task: &Value) -> &str {
    task["status"]["state"].as_str().unwrap_or_default()
}

/// The task a `SendMessage` answered with.
fn sent_task(response: a2a_pb::SendMessageResponse) -> TestResult<Value> {
    let response = pbconv::from_proto_send_message_response(&response)
        .ok_or("SendMessage answered neither a task nor a message")?;
    match response {
        a2a::SendMessageResponse::Task(task) => Ok(serde_json::to_value(task)?),
        a2a::SendMessageResponse::Message(message) => {
            Err(format!("a message, not a task: {message:?}").into())
        }
    }
}

/// Checks `status`'s code and its `ErrorInfo` (reason, domain `a2a-protocol.org`).
fn expect_status(status: &Status, code: Code, reason: &str) -> TestResult {
    if status.code() != code {
        return Err(format!("expected {code:?}, got {status:?}").into());
    }
    let info = status
        .get_details_error_info()
        .ok_or_else(|| format!("no ErrorInfo: {status:?}"))?;
    if info.reason != reason || info.domain != "a2a-protocol.org" {
        return Err(format!("expected {reason} in a2a-protocol.org, got {info:?}").into());
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn send_message_to_echo_completes_with_the_input_as_its_artifact() -> TestResult {
    let grpc = Grpc::start().await?;
    let mut client = grpc.client().await?;
    let input = json!({"hello": "grpc", "n": 7});
    let sent = send_request("echo", input.clone(), false)?;
    let answer = client.send_message(call(TOKEN_A, sent)?).await?;
    let task = sent_task(answer.into_inner())?;
    assert_eq!(state(&task), "TASK_STATE_COMPLETED", "{task}");
    // Protobuf carries every number as a double: 7 comes back as 7.0.
    let data = &task["artifacts"][0]["parts"][0]["data"];
    assert_eq!(data["hello"], input["hello"], "{task}");
    assert_eq!(data["n"].as_f64(), Some(7.0), "{task}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn send_streaming_message_to_count_streams_updates_to_the_end() -> TestResult {
    let grpc = Grpc::start().await?;
    let mut client = grpc.client().await?;
    let sent = send_request("count", json!({"n": 3}), false)?;
    let mut stream = client
        .send_streaming_message(call(TOKEN_A, sent)?)
        .await?
        .into_inner();
    let mut events = Vec::new();
    while let Some(event) = tokio::time::timeout(PATIENCE, stream.message()).await?? {
        let event = pbconv::from_proto_stream_response(&event).ok_or("an empty event")?;
        events.push(serde_json::to_value(event)?);
    }
    let artifacts = events
        .iter()
        .filter(|event| event.get("artifactUpdate").is_some())
        .count();
    assert!(artifacts >= 3, "three artifact updates: {events:?}");
    let last = events.last().ok_or("no events")?;
    let final_state = last["statusUpdate"]["status"]["state"]
        .as_str()
        .or_else(|| last["task"]["status"]["state"].as_str());
    assert_eq!(final_state, Some("TASK_STATE_COMPLETED"), "{events:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn get_task_reads_the_owners_task_and_not_another_bearers() -> TestResult {
    let grpc = Grpc::start().await?;
    let mut client = grpc.client().await?;
    let sent = send_request("echo", json!({"owned": true}), false)?;
    let task = sent_task(
        client
            .send_message(call(TOKEN_A, sent)?)
            .await?
            .into_inner(),
    )?;
    let id = task["id"].as_str().ok_or("no task id")?.to_owned();
    let get = a2a_pb::GetTaskRequest {
        id: id.clone(),
        ..Default::default()
    };
    let read = task_json(
        &client
            .get_task(call(TOKEN_A, get.clone())?)
            .await?
            .into_inner(),
    )?;
    assert_eq!(read["id"], id.as_str(), "{read}");
    let refused = client
        .get_task(call(TOKEN_B, get)?)
        .await
        .err()
        .ok_or("another bearer read the task")?;
    expect_status(&refused, Code::NotFound, "TASK_NOT_FOUND")
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_task_cancels_a_running_sleep() -> TestResult {
    let grpc = Grpc::start().await?;
    let mut client = grpc.client().await?;
    let sent = send_request("sleep", json!({"ms": 60_000}), true)?;
    let task = sent_task(
        client
            .send_message(call(TOKEN_A, sent)?)
            .await?
            .into_inner(),
    )?;
    let id = task["id"].as_str().ok_or("no task id")?.to_owned();
    let cancel = a2a_pb::CancelTaskRequest {
        id: id.clone(),
        ..Default::default()
    };
    let canceled = task_json(
        &client
            .cancel_task(call(TOKEN_A, cancel.clone())?)
            .await?
            .into_inner(),
    )?;
    assert_eq!(state(&canceled), "TASK_STATE_CANCELED", "{canceled}");
    let again = client
        .cancel_task(call(TOKEN_A, cancel)?)
        .await
        .err()
        .ok_or("a canceled task was canceled again")?;
    expect_status(&again, Code::FailedPrecondition, "TASK_NOT_CANCELABLE")
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_task_is_not_found_with_error_info() -> TestResult {
    let grpc = Grpc::start().await?;
    let mut client = grpc.client().await?;
    let get = a2a_pb::GetTaskRequest {
        id: "no-such-task".into(),
        ..Default::default()
    };
    let missing = client
        .get_task(call(TOKEN_A, get)?)
        .await
        .err()
        .ok_or("an unknown task was found")?;
    expect_status(&missing, Code::NotFound, "TASK_NOT_FOUND")?;
    let subscribe = a2a_pb::SubscribeToTaskRequest {
        id: "no-such-task".into(),
        ..Default::default()
    };
    let missing = client
        .subscribe_to_task(call(TOKEN_A, subscribe)?)
        .await
        .err()
        .ok_or("an unknown task was subscribed to")?;
    expect_status(&missing, Code::NotFound, "TASK_NOT_FOUND")?;
    // No bearer token: unauthenticated, as on the HTTP bindings.
    let mut anonymous = Request::new(a2a_pb::GetTaskRequest {
        id: "no-such-task".into(),
        ..Default::default()
    });
    anonymous
        .metadata_mut()
        .insert("a2a-version", "1.0".parse()?);
    let refused = client
        .get_task(anonymous)
        .await
        .err()
        .ok_or("an anonymous call was answered")?;
    expect_status(&refused, Code::Unauthenticated, "UNAUTHENTICATED")
}

#[tokio::test(flavor = "multi_thread")]
async fn push_configs_are_created_read_listed_and_deleted_per_owner() -> TestResult {
    let grpc = Grpc::start().await?;
    let mut client = grpc.client().await?;
    let sent = send_request("sleep", json!({"ms": 60_000}), true)?;
    let task = sent_task(
        client
            .send_message(call(TOKEN_A, sent)?)
            .await?
            .into_inner(),
    )?;
    let task_id = task["id"].as_str().ok_or("no task id")?.to_owned();
    let config = a2a_pb::TaskPushNotificationConfig {
        task_id: task_id.clone(),
        id: "grpc-1".into(),
        url: "https://hooks.example/a2a".into(),
        token: "notification-token".into(),
        ..Default::default()
    };
    let created = client
        .create_task_push_notification_config(call(TOKEN_A, config.clone())?)
        .await?
        .into_inner();
    assert_eq!(created, config);
    let get = a2a_pb::GetTaskPushNotificationConfigRequest {
        task_id: task_id.clone(),
        id: "grpc-1".into(),
        ..Default::default()
    };
    let got = client
        .get_task_push_notification_config(call(TOKEN_A, get.clone())?)
        .await?
        .into_inner();
    assert_eq!(got, config);
    let list = a2a_pb::ListTaskPushNotificationConfigsRequest {
        task_id: task_id.clone(),
        ..Default::default()
    };
    let listed = client
        .list_task_push_notification_configs(call(TOKEN_A, list)?)
        .await?
        .into_inner();
    assert_eq!(listed.configs, vec![config.clone()]);
    // Another owner's task is not found; a URL with user info is invalid.
    let refused = client
        .get_task_push_notification_config(call(TOKEN_B, get.clone())?)
        .await
        .err()
        .ok_or("another owner read the config")?;
    expect_status(&refused, Code::NotFound, "TASK_NOT_FOUND")?;
    let bad = a2a_pb::TaskPushNotificationConfig {
        url: "https://user:pw@hooks.example/a2a".into(),
        ..config.clone()
    };
    let refused = client
        .create_task_push_notification_config(call(TOKEN_A, bad)?)
        .await
        .err()
        .ok_or("a URL with user info was taken")?;
    expect_status(&refused, Code::InvalidArgument, "INVALID_PARAMS")?;
    // Deleting twice succeeds; then the config is not found.
    let delete = a2a_pb::DeleteTaskPushNotificationConfigRequest {
        task_id: task_id.clone(),
        id: "grpc-1".into(),
        ..Default::default()
    };
    for _ in 0..2 {
        client
            .delete_task_push_notification_config(call(TOKEN_A, delete.clone())?)
            .await?;
    }
    let refused = client
        .get_task_push_notification_config(call(TOKEN_A, get)?)
        .await
        .err()
        .ok_or("a deleted config was read")?;
    expect_status(&refused, Code::NotFound, "TASK_NOT_FOUND")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_push_notification_methods_are_not_supported_when_off() -> TestResult {
    let grpc = Grpc::start_with(&[("PUSH_NOTIFICATIONS", "off")]).await?;
    let mut client = grpc.client().await?;
    let reason = "PUSH_NOTIFICATION_NOT_SUPPORTED";
    let code = Code::Unimplemented;
    let create = a2a_pb::TaskPushNotificationConfig {
        task_id: "t1".into(),
        url: "https://hooks.example/a2a".into(),
        ..Default::default()
    };
    let refused = client
        .create_task_push_notification_config(call(TOKEN_A, create)?)
        .await
        .err()
        .ok_or("create answered")?;
    expect_status(&refused, code, reason)?;
    let get = a2a_pb::GetTaskPushNotificationConfigRequest {
        task_id: "t1".into(),
        id: "c1".into(),
        ..Default::default()
    };
    let refused = client
        .get_task_push_notification_config(call(TOKEN_A, get)?)
        .await
        .err()
        .ok_or("get answered")?;
    expect_status(&refused, code, reason)?;
    let list = a2a_pb::ListTaskPushNotificationConfigsRequest {
        task_id: "t1".into(),
        ..Default::default()
    };
    let refused = client
        .list_task_push_notification_configs(call(TOKEN_A, list)?)
        .await
        .err()
        .ok_or("list answered")?;
    expect_status(&refused, code, reason)?;
    let delete = a2a_pb::DeleteTaskPushNotificationConfigRequest {
        task_id: "t1".into(),
        id: "c1".into(),
        ..Default::default()
    };
    let refused = client
        .delete_task_push_notification_config(call(TOKEN_A, delete)?)
        .await
        .err()
        .ok_or("delete answered")?;
    expect_status(&refused, code, reason)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_card_lists_the_grpc_interface() -> TestResult {
    let grpc = Grpc::start().await?;
    let card: Value = grpc
        .cluster
        .http
        .get(format!(
            "{}/a2a/.well-known/agent-card.json",
            grpc.cluster.base()
        ))
        .send()
        .await?
        .json()
        .await?;
    let interfaces = card["supportedInterfaces"]
        .as_array()
        .ok_or("no supportedInterfaces")?;
    let grpc_interface = interfaces
        .iter()
        .find(|interface| interface["protocolBinding"] == "GRPC")
        .ok_or_else(|| format!("no GRPC interface: {card}"))?;
    assert_eq!(
        grpc_interface["url"],
        format!("127.0.0.1:{}", grpc.port),
        "{card}"
    );
    assert_eq!(grpc_interface["protocolVersion"], "1.0", "{card}");
    // The extended card is not configured, as on the other bindings.
    let mut client = grpc.client().await?;
    let refused = client
        .get_extended_agent_card(call(
            TOKEN_A,
            a2a_pb::GetExtendedAgentCardRequest::default(),
        )?)
        .await
        .err()
        .ok_or("an extended card was answered")?;
    expect_status(
        &refused,
        Code::FailedPrecondition,
        "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
    )
}

/// SIGTERM ends an open gRPC stream with an OK status (the task still running) and the gateway
/// exits cleanly, as it does with SSE streams.
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_ends_an_open_grpc_stream_and_the_gateway_exits() -> TestResult {
    let mut grpc = Grpc::start().await?;
    let mut client = grpc.client().await?;
    let sent = send_request("sleep", json!({"ms": 60_000}), false)?;
    let mut stream = client
        .send_streaming_message(call(TOKEN_A, sent)?)
        .await?
        .into_inner();
    let first = tokio::time::timeout(PATIENCE, stream.message())
        .await??
        .ok_or("the stream ended at once")?;
    let first = pbconv::from_proto_stream_response(&first).ok_or("an empty event")?;
    assert!(
        matches!(first, a2a::StreamResponse::Task(_)),
        "the stream opens with the task: {first:?}"
    );
    let gateway = &mut grpc.cluster.gateways[0].process;
    gateway.signal(nix::sys::signal::Signal::SIGTERM)?;
    // The rest of the stream, to its clean end (an error status would be `Err`).
    while let Some(event) = tokio::time::timeout(PATIENCE, stream.message()).await?? {
        let event = serde_json::to_value(
            pbconv::from_proto_stream_response(&event).ok_or("an empty event")?,
        )?;
        assert!(
            !event.to_string().contains("TASK_STATE_COMPLETED"),
            "the sleep completed: SIGTERM did not end the stream: {event}"
        );
    }
    let status = gateway.wait_exit(PATIENCE)?;
    assert!(status.success(), "{status}:\n{}", gateway.log());
    Ok(())
}
