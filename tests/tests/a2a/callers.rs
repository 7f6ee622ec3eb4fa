//! Callers, on both bindings. Authentication: a missing bearer token, a malformed one (too
//! short, empty, too long) or another scheme is refused with 401 and a `Bearer` challenge on
//! `GetTask`, `SendMessage` and `SendStreamingMessage` (and `ListTasks` without a token).
//! Owners: another token's task does not exist for `GetTask`, `CancelTask`, `SubscribeToTask`
//! and messages to it, and another token's cancel has no effect.

use harness::TestResult;
use reqwest::Method;
use serde_json::json;

use crate::support::{
    A2a, BINDINGS, Binding, Cluster, TASK_NOT_FOUND, TOKEN_A, TOKEN_B, expect_error,
    expect_unauthenticated, ok, sleeping, state, tck,
};

/// Expects `GetTask`, `SendMessage` and `SendStreamingMessage` with each of `authorizations`
/// to be refused with 401 and a `Bearer` challenge, on both bindings.
async fn expect_unauthenticated_with(alice: &A2a, authorizations: &[Option<&str>]) -> TestResult {
    for binding in BINDINGS {
        for authorization in authorizations.iter().copied() {
            let caller = alice.with_authorization(authorization);
            let what = format!("Authorization {authorization:?}");
            let reply = caller.get_task(binding, "no-such-task", None).await?;
            expect_unauthenticated(binding, reply, &what)?;
            let reply = caller.send(binding, tck("tck-complete-task")).await?;
            expect_unauthenticated(binding, reply, &what)?;
            let streamed = caller.stream(binding, tck("tck-complete-task")).await?;
            match streamed {
                Ok(_) => return Err(format!("{what}: a stream opened without a caller").into()),
                Err(failure) => expect_unauthenticated(binding, Err(failure), &what)?,
            }
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_without_a_token_is_refused_with_a_bearer_challenge() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    expect_unauthenticated_with(&alice, &[None]).await?;
    for binding in BINDINGS {
        let listed = alice
            .with_authorization(None)
            .list(binding, json!({}))
            .await?;
        expect_unauthenticated(binding, listed, "ListTasks without a token")?;
    }
    Ok(())
}

/// Bearer tokens are 20 to 256 characters.
#[tokio::test(flavor = "multi_thread")]
async fn a_token_too_short_empty_or_too_long_is_refused_with_a_bearer_challenge() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    let too_long = format!("Bearer {}", "t".repeat(257));
    expect_unauthenticated_with(
        &alice,
        &[
            Some("Bearer short"),
            Some("Bearer "),
            Some(too_long.as_str()),
        ],
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn another_authorization_scheme_is_refused_with_a_bearer_challenge() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    expect_unauthenticated_with(&alice, &[Some("Basic dXNlcjpwYXNzd29yZA==")]).await
}

/// Alice's `sleep` task of a minute, still submitted or working: its id.
async fn alices_running_task(alice: &A2a, binding: Binding) -> TestResult<String> {
    let running = alice.send_task(binding, sleeping(binding)).await?;
    Ok(running["id"].as_str().ok_or("no task id")?.to_owned())
}

#[tokio::test(flavor = "multi_thread")]
async fn another_owners_get_task_gets_task_not_found() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    let bob = cluster.client(TOKEN_B);
    for binding in BINDINGS {
        let id = alices_running_task(&alice, binding).await?;
        expect_error(
            binding,
            bob.get_task(binding, &id, None).await?,
            TASK_NOT_FOUND,
            404,
            &format!("another token's GetTask ({binding:?})"),
        )?;
    }
    Ok(())
}

/// Bob's `CancelTask` of Alice's task finds nothing, and Alice's task runs on.
#[tokio::test(flavor = "multi_thread")]
async fn another_owners_cancel_gets_task_not_found_and_cancels_nothing() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    let bob = cluster.client(TOKEN_B);
    for binding in BINDINGS {
        let id = alices_running_task(&alice, binding).await?;
        expect_error(
            binding,
            bob.cancel(binding, &id).await?,
            TASK_NOT_FOUND,
            404,
            &format!("another token's CancelTask ({binding:?})"),
        )?;
        let still = ok(alice.get_task(binding, &id, None).await?, "GetTask")?;
        assert!(
            matches!(state(&still), "TASK_STATE_SUBMITTED" | "TASK_STATE_WORKING"),
            "Bob's cancel had no effect: {still}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn another_owners_subscription_gets_task_not_found() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    let bob = cluster.client(TOKEN_B);
    for binding in BINDINGS {
        let what = format!("another token's SubscribeToTask ({binding:?})");
        let id = alices_running_task(&alice, binding).await?;
        match bob.subscribe(binding, &id, Method::POST).await? {
            Ok(_) => return Err(format!("{what}: subscribed to the task").into()),
            Err(failure) => {
                expect_error(binding, Err(failure), TASK_NOT_FOUND, 404, &what)?;
            }
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn another_owners_message_to_a_task_gets_task_not_found() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    let bob = cluster.client(TOKEN_B);
    for binding in BINDINGS {
        let id = alices_running_task(&alice, binding).await?;
        let mut to_alices = tck("tck-complete-task");
        to_alices["message"]["taskId"] = json!(id);
        expect_error(
            binding,
            bob.send(binding, to_alices).await?,
            TASK_NOT_FOUND,
            404,
            &format!("another token's message to the task ({binding:?})"),
        )?;
    }
    Ok(())
}

/// A task waiting for input takes the follow-up from its owner only.
#[tokio::test(flavor = "multi_thread")]
async fn another_owners_answer_to_a_waiting_task_gets_task_not_found() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    let bob = cluster.client(TOKEN_B);
    for binding in BINDINGS {
        let asking = alice.send_task(binding, tck("tck-input-required")).await?;
        assert_eq!(state(&asking), "TASK_STATE_INPUT_REQUIRED", "{asking}");
        let mut answer = tck("tck-complete-task");
        answer["message"]["taskId"] = asking["id"].clone();
        expect_error(
            binding,
            bob.send(binding, answer).await?,
            TASK_NOT_FOUND,
            404,
            &format!("another token's answer to a waiting task ({binding:?})"),
        )?;
        // Still waiting for its owner's answer.
        let id = asking["id"].as_str().ok_or("no task id")?;
        let waiting = ok(alice.get_task(binding, id, None).await?, "GetTask")?;
        assert_eq!(state(&waiting), "TASK_STATE_INPUT_REQUIRED", "{waiting}");
    }
    Ok(())
}
