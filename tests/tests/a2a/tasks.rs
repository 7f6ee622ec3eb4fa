//! `returnImmediately`, `GetTask` and `CancelTask` on both bindings: a task answered as it
//! stands, read with its history as sent (`historyLength` 0 leaves it out, a negative one is
//! refused), cancelled once and then not cancelable; unknown tasks are not found.

use harness::TestResult;
use serde_json::json;

use crate::support::{
    A2a, BINDINGS, Binding, Cluster, INVALID_PARAMS, TASK_NOT_CANCELABLE, TASK_NOT_FOUND, TOKEN_A,
    expect_error, ok, sleeping, state,
};

/// A `sleep` task of a minute sent with `returnImmediately`: its id.
async fn running_task(alice: &A2a, binding: Binding) -> TestResult<String> {
    let running = alice.send_task(binding, sleeping(binding)).await?;
    Ok(running["id"].as_str().ok_or("no task id")?.to_owned())
}

/// `returnImmediately` answers the task as it stands: submitted or working, not finished.
#[tokio::test(flavor = "multi_thread")]
async fn return_immediately_answers_the_task_before_it_ends() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        let running = alice.send_task(binding, sleeping(binding)).await?;
        assert!(
            matches!(
                state(&running),
                "TASK_STATE_SUBMITTED" | "TASK_STATE_WORKING"
            ),
            "{running}"
        );
    }
    Ok(())
}

/// The history shows the message as it was sent, whichever part carried the input.
#[tokio::test(flavor = "multi_thread")]
async fn get_task_shows_the_message_as_it_was_sent() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        let id = running_task(&alice, binding).await?;
        let read = ok(alice.get_task(binding, &id, None).await?, "GetTask")?;
        assert_eq!(read["id"], id.as_str(), "{read}");
        assert_eq!(read["history"].as_array().map(Vec::len), Some(1), "{read}");
        let sent = match binding {
            Binding::JsonRpc => json!([{"data": {"ms": 60_000}}]),
            Binding::Rest => json!([{"text": "{\"ms\": 60000}"}]),
        };
        assert_eq!(read["history"][0]["parts"], sent, "{read}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn history_length_0_leaves_out_the_history() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        let id = running_task(&alice, binding).await?;
        let short = ok(alice.get_task(binding, &id, Some(0)).await?, "GetTask 0")?;
        assert!(
            short.get("history").is_none() || short["history"] == json!([]),
            "historyLength 0: {short}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_negative_history_length_is_refused_with_invalid_params() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        let id = running_task(&alice, binding).await?;
        let negative = alice.get_task(binding, &id, Some(-1)).await?;
        expect_error(binding, negative, INVALID_PARAMS, 400, "historyLength -1")?;
    }
    Ok(())
}

/// `CancelTask` answers the task `CANCELED`, and `GetTask` reads it so from then on.
#[tokio::test(flavor = "multi_thread")]
async fn cancel_task_cancels_a_running_task() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        let id = running_task(&alice, binding).await?;
        let cancelled = ok(alice.cancel(binding, &id).await?, "CancelTask")?;
        assert_eq!(cancelled["id"], id.as_str(), "{cancelled}");
        assert_eq!(state(&cancelled), "TASK_STATE_CANCELED", "{cancelled}");
        let after = ok(alice.get_task(binding, &id, None).await?, "GetTask")?;
        assert_eq!(state(&after), "TASK_STATE_CANCELED", "{after}");
    }
    Ok(())
}

/// A second `CancelTask` is `TaskNotCancelable` (HTTP 409), and the task stays `CANCELED`.
#[tokio::test(flavor = "multi_thread")]
async fn a_second_cancel_is_refused_as_not_cancelable() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        let id = running_task(&alice, binding).await?;
        ok(alice.cancel(binding, &id).await?, "CancelTask")?;
        expect_error(
            binding,
            alice.cancel(binding, &id).await?,
            TASK_NOT_CANCELABLE,
            409,
            &format!("a second CancelTask ({binding:?})"),
        )?;
        let after = ok(alice.get_task(binding, &id, None).await?, "GetTask")?;
        assert_eq!(state(&after), "TASK_STATE_CANCELED", "{after}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn get_task_of_an_unknown_task_is_task_not_found() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        expect_error(
            binding,
            alice.get_task(binding, "no-such-task", None).await?,
            TASK_NOT_FOUND,
            404,
            &format!("GetTask of an unknown task ({binding:?})"),
        )?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_task_of_an_unknown_task_is_task_not_found() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        expect_error(
            binding,
            alice.cancel(binding, "no-such-task").await?,
            TASK_NOT_FOUND,
            404,
            &format!("CancelTask of an unknown task ({binding:?})"),
        )?;
    }
    Ok(())
}
