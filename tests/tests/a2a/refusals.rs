//! What the gateway refuses, on both bindings, staying healthy: push notification configs
//! with `PUSH_NOTIFICATIONS=off` (`PushNotificationNotSupported`), the extended card (not configured), an unknown skill, a
//! media type a skill does not take (415; the TCK agent takes any), a message to a finished
//! task or naming a task of another context, a message in the agent's role, and an empty one.

use harness::TestResult;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{
    A2a, BINDINGS, Binding, CONTENT_TYPE_NOT_SUPPORTED, Cluster, EXTENDED_CARD_NOT_CONFIGURED,
    INVALID_PARAMS, PUSH_NOT_SUPPORTED, TOKEN_A, UNSUPPORTED_OPERATION, expect_error, for_skill,
    message, send_request, state, tck, unique,
};

/// A task of Alice's that completed.
async fn completed_task(alice: &A2a, binding: Binding) -> TestResult<Value> {
    let done = alice.send_task(binding, tck("tck-complete-task")).await?;
    assert_eq!(state(&done), "TASK_STATE_COMPLETED", "{done}");
    Ok(done)
}

/// The gateway answers its health check after the refusals.
async fn still_healthy(cluster: &Cluster) -> TestResult {
    assert_eq!(cluster.health().await?, StatusCode::OK);
    Ok(())
}

/// With push notifications off, every push notification config operation, of either binding,
/// is refused, an inline config too, and the card says so.
#[tokio::test(flavor = "multi_thread")]
async fn push_notification_configs_are_not_supported_when_off() -> TestResult {
    let cluster = Cluster::start_with(&[("PUSH_NOTIFICATIONS", "off")]).await?;
    let card = cluster.a2a_card().await?;
    assert_eq!(card["capabilities"]["pushNotifications"], false, "{card}");
    let alice = cluster.client(TOKEN_A);
    let mut inline = tck("tck-complete-task");
    inline["configuration"] =
        json!({"taskPushNotificationConfig": {"url": "https://example.com/hook"}});
    for binding in BINDINGS {
        let reply = alice.send(binding, inline.clone()).await?;
        expect_error(binding, reply, PUSH_NOT_SUPPORTED, 400, "an inline config")?;
    }
    for binding in BINDINGS {
        let done = completed_task(&alice, binding).await?;
        let done_id = done["id"].as_str().ok_or("no task id")?;
        match binding {
            Binding::JsonRpc => {
                let config = json!({"url": "https://example.com/hook"});
                for (method, params) in [
                    (
                        "CreateTaskPushNotificationConfig",
                        json!({"taskId": done_id, "url": config["url"]}),
                    ),
                    (
                        "GetTaskPushNotificationConfig",
                        json!({"taskId": done_id, "id": "cfg-1"}),
                    ),
                    (
                        "ListTaskPushNotificationConfigs",
                        json!({"taskId": done_id}),
                    ),
                    (
                        "DeleteTaskPushNotificationConfig",
                        json!({"taskId": done_id, "id": "cfg-1"}),
                    ),
                ] {
                    let reply = alice.rpc(method, params).await?;
                    expect_error(binding, reply, PUSH_NOT_SUPPORTED, 400, method)?;
                }
            }
            Binding::Rest => {
                let configs = format!("/tasks/{done_id}/pushNotificationConfigs");
                let config = format!("{configs}/cfg-1");
                for (method, path, body) in [
                    (
                        Method::POST,
                        &configs,
                        Some(json!({"url": "https://example.com/hook"})),
                    ),
                    (Method::GET, &configs, None),
                    (Method::GET, &config, None),
                    (Method::DELETE, &config, None),
                ] {
                    let what = format!("{method} {path}");
                    let reply = alice.rest(method, path, body).await?;
                    expect_error(binding, reply, PUSH_NOT_SUPPORTED, 400, &what)?;
                }
            }
        }
    }
    still_healthy(&cluster).await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_extended_card_is_not_configured() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        // Whether or not the caller has tasks: this one has one.
        completed_task(&alice, binding).await?;
        let (reply, what) = match binding {
            Binding::JsonRpc => (
                alice.rpc("GetExtendedAgentCard", json!({})).await?,
                "GetExtendedAgentCard",
            ),
            Binding::Rest => (
                alice.rest(Method::GET, "/extendedAgentCard", None).await?,
                "GET /extendedAgentCard",
            ),
        };
        expect_error(binding, reply, EXTENDED_CARD_NOT_CONFIGURED, 400, what)?;
    }
    still_healthy(&cluster).await
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_skill_is_invalid_params() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        let reply = alice
            .send(binding, for_skill("no-such-skill", json!({"text": "hi"})))
            .await?;
        expect_error(binding, reply, INVALID_PARAMS, 400, "an unknown skill")?;
    }
    still_healthy(&cluster).await
}

/// A media type `count` (a skill with a schema) does not take: `ContentTypeNotSupported`
/// (HTTP 415).
#[tokio::test(flavor = "multi_thread")]
async fn a_media_type_a_skill_does_not_take_is_content_type_not_supported() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        let nope = json!({"text": "{\"n\": 1}", "mediaType": "application/x-nope"});
        let reply = alice.send(binding, for_skill("count", nope)).await?;
        expect_error(
            binding,
            reply,
            CONTENT_TYPE_NOT_SUPPORTED,
            415,
            "application/x-nope to count",
        )?;
    }
    still_healthy(&cluster).await
}

/// The TCK agent (no schema) takes any media type.
#[tokio::test(flavor = "multi_thread")]
async fn a_skill_without_a_schema_takes_any_media_type() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        let nope = json!({"text": "{\"n\": 1}", "mediaType": "application/x-nope"});
        let taken = alice
            .send_task(
                binding,
                send_request(message(&unique("tck-complete-task"), json!([nope]))),
            )
            .await?;
        assert_eq!(state(&taken), "TASK_STATE_COMPLETED", "{taken}");
    }
    still_healthy(&cluster).await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_to_a_completed_task_is_unsupported() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        let done = completed_task(&alice, binding).await?;
        let mut to_done = tck("tck-complete-task");
        to_done["message"]["taskId"] = done["id"].clone();
        let reply = alice.send(binding, to_done).await?;
        expect_error(
            binding,
            reply,
            UNSUPPORTED_OPERATION,
            400,
            "a message to a completed task",
        )?;
    }
    still_healthy(&cluster).await
}

/// A message naming a task and another context than the task's: a client error (or a
/// JSON-RPC error code).
#[tokio::test(flavor = "multi_thread")]
async fn a_message_naming_a_task_of_another_context_is_refused() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        let done = completed_task(&alice, binding).await?;
        let done_context = done["contextId"].as_str().ok_or("no context id")?;
        let mut to_done = tck("tck-complete-task");
        to_done["message"]["taskId"] = done["id"].clone();
        to_done["message"]["contextId"] = json!(format!("{done_context}-other"));
        let reply = alice.send(binding, to_done).await?;
        let failure = reply
            .err()
            .ok_or("a message naming a task of another context was accepted")?;
        assert!(
            failure.http.is_client_error() || failure.code.is_some(),
            "{failure:?}"
        );
    }
    still_healthy(&cluster).await
}

/// Only the user speaks.
#[tokio::test(flavor = "multi_thread")]
async fn a_message_in_the_agents_role_is_invalid_params() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        let mut agent = tck("tck-complete-task");
        agent["message"]["role"] = json!("ROLE_AGENT");
        let reply = alice.send(binding, agent).await?;
        expect_error(binding, reply, INVALID_PARAMS, 400, "role ROLE_AGENT")?;
    }
    still_healthy(&cluster).await
}

/// A message says something: no parts is refused.
#[tokio::test(flavor = "multi_thread")]
async fn a_message_without_parts_is_invalid_params() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        let empty = send_request(message(&unique("tck-complete-task"), json!([])));
        let reply = alice.send(binding, empty).await?;
        expect_error(binding, reply, INVALID_PARAMS, 400, "no parts")?;
    }
    still_healthy(&cluster).await
}
