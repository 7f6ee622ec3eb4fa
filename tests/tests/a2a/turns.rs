//! Input-required turns on both bindings: a task waits for a follow-up message, which must
//! name its context; its owner's answer resumes it (the next turn behaves by the new
//! messageId) and lands in the history; a finished task takes no more answers. Turns are
//! bounded (issue 29): with `MAX_TURNS=3` on the worker, a task that keeps asking fails with
//! `too_many_turns` on its third turn and is then finished; one answered within the bound
//! completes. (Another owner's answer: `callers`.)

use harness::TestResult;
use serde_json::{Value, json};

use crate::support::{
    A2a, BINDINGS, Binding, Cluster, TOKEN_A, UNSUPPORTED_OPERATION, ensure, expect_error, state,
    status_text, tck,
};

/// A task of the TCK agent waiting for input: the task.
async fn waiting_task(alice: &A2a, binding: Binding) -> TestResult<Value> {
    let asking = alice.send_task(binding, tck("tck-input-required")).await?;
    assert_eq!(state(&asking), "TASK_STATE_INPUT_REQUIRED", "{asking}");
    Ok(asking)
}

/// A follow-up message of the behaviour `prefix` to `task`, in its context.
fn answer_to(task: &Value, prefix: &str) -> Value {
    let mut answer = tck(prefix);
    answer["message"]["taskId"] = task["id"].clone();
    answer["message"]["contextId"] = task["contextId"].clone();
    answer
}

#[tokio::test(flavor = "multi_thread")]
async fn an_input_required_task_asks_for_a_follow_up() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        let asking = waiting_task(&alice, binding).await?;
        assert_eq!(
            status_text(&asking),
            "Input required: send a follow-up message",
            "{asking}"
        );
        ensure(asking["id"].is_string(), || format!("no task id: {asking}"))?;
        ensure(asking["contextId"].is_string(), || {
            format!("no context id: {asking}")
        })?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_answer_naming_another_context_is_refused() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        let asking = waiting_task(&alice, binding).await?;
        let waiting_context = asking["contextId"].as_str().ok_or("no context id")?;
        let mut elsewhere = answer_to(&asking, "tck-complete-task");
        elsewhere["message"]["contextId"] = json!(format!("{waiting_context}-other"));
        let refused = alice.send(binding, elsewhere).await?;
        ensure(refused.is_err(), || {
            format!("an answer naming another context was accepted ({binding:?})")
        })?;
    }
    Ok(())
}

/// The owner's answer in the task's context resumes it: the same task and context complete
/// with the greeting, and the answer is in the history.
#[tokio::test(flavor = "multi_thread")]
async fn the_owners_answer_resumes_the_task_to_completion() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        let asking = waiting_task(&alice, binding).await?;
        let answer = answer_to(&asking, "tck-complete-task");
        let answer_id = answer["message"]["messageId"].clone();
        let resumed = alice.send_task(binding, answer).await?;
        assert_eq!(resumed["id"], asking["id"], "{resumed}");
        assert_eq!(resumed["contextId"], asking["contextId"], "{resumed}");
        assert_eq!(state(&resumed), "TASK_STATE_COMPLETED", "{resumed}");
        assert_eq!(status_text(&resumed), "Hello from TCK", "{resumed}");
        let history = resumed["history"].as_array().ok_or("no history")?;
        assert!(
            history
                .iter()
                .any(|message| message["messageId"] == answer_id),
            "the answer is in the history: {resumed}"
        );
    }
    Ok(())
}

/// Once the answer finished the task, the same answer again is `UnsupportedOperation`.
#[tokio::test(flavor = "multi_thread")]
async fn an_answer_to_a_finished_task_is_refused_as_unsupported() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        let asking = waiting_task(&alice, binding).await?;
        let answer = answer_to(&asking, "tck-complete-task");
        let resumed = alice.send_task(binding, answer.clone()).await?;
        assert_eq!(state(&resumed), "TASK_STATE_COMPLETED", "{resumed}");
        expect_error(
            binding,
            alice.send(binding, answer).await?,
            UNSUPPORTED_OPERATION,
            400,
            &format!("an answer to a finished task ({binding:?})"),
        )?;
    }
    Ok(())
}

/// The suite's cluster whose worker allows three turns: the suite's worker leaves before any
/// task is sent, and one with `MAX_TURNS=3` replaces it.
async fn bounded_cluster() -> TestResult<Cluster> {
    let mut cluster = Cluster::start().await?;
    for worker in &mut cluster.workers {
        worker.kill()?;
    }
    let bounded = harness::cluster::worker_process(
        "worker",
        &cluster.redis,
        "w-turns",
        &["--a2a-tck-agent"],
        &[("MAX_TURNS", "3".to_owned())],
    )?;
    cluster.workers.push(bounded);
    Ok(cluster)
}

/// A task asking for input on each of its three turns: the task as first answered, and as
/// answered on the third turn.
async fn task_past_the_turn_limit(alice: &A2a, binding: Binding) -> TestResult<(Value, Value)> {
    let asking = waiting_task(alice, binding).await?;
    let second = alice
        .send_task(binding, answer_to(&asking, "tck-input-required"))
        .await?;
    assert_eq!(state(&second), "TASK_STATE_INPUT_REQUIRED", "{second}");
    let third = alice
        .send_task(binding, answer_to(&asking, "tck-input-required"))
        .await?;
    assert_eq!(third["id"], asking["id"], "{third}");
    Ok((asking, third))
}

/// With `MAX_TURNS=3`, a task that asks again on its third turn fails with `too_many_turns`.
#[tokio::test(flavor = "multi_thread")]
async fn a_task_asking_again_on_its_last_turn_fails_with_too_many_turns() -> TestResult {
    let cluster = bounded_cluster().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        let (_, third) = task_past_the_turn_limit(&alice, binding).await?;
        assert_eq!(state(&third), "TASK_STATE_FAILED", "{third}");
        assert_eq!(
            third["status"]["message"]["parts"][1]["data"]["code"], "too_many_turns",
            "{third}"
        );
    }
    Ok(())
}

/// A task failed for too many turns is finished: a further answer is `UnsupportedOperation`.
#[tokio::test(flavor = "multi_thread")]
async fn an_answer_past_the_turn_limit_is_refused_as_unsupported() -> TestResult {
    let cluster = bounded_cluster().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        let (asking, third) = task_past_the_turn_limit(&alice, binding).await?;
        assert_eq!(state(&third), "TASK_STATE_FAILED", "{third}");
        expect_error(
            binding,
            alice
                .send(binding, answer_to(&asking, "tck-complete-task"))
                .await?,
            UNSUPPORTED_OPERATION,
            400,
            &format!("an answer past the turn limit ({binding:?})"),
        )?;
    }
    Ok(())
}

/// With `MAX_TURNS=3`, a task answered on its third turn completes as usual.
#[tokio::test(flavor = "multi_thread")]
async fn a_task_answered_within_the_turn_limit_completes() -> TestResult {
    let cluster = bounded_cluster().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        let asking = waiting_task(&alice, binding).await?;
        let second = alice
            .send_task(binding, answer_to(&asking, "tck-input-required"))
            .await?;
        assert_eq!(state(&second), "TASK_STATE_INPUT_REQUIRED", "{second}");
        let done = alice
            .send_task(binding, answer_to(&asking, "tck-complete-task"))
            .await?;
        assert_eq!(state(&done), "TASK_STATE_COMPLETED", "{done}");
    }
    Ok(())
}
