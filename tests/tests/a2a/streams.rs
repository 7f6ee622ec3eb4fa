//! Streams on both bindings: `SendStreamingMessage` of `count` delivers its numbers in order
//! as one appended artifact; `SubscribeToTask` to a running task sees it, then its
//! cancellation, then the end; a finished task cannot be subscribed to and an unknown one is
//! not found; the TCK agent's chunked artifact arrives as two chunks, the second last. Every
//! stream has the shape `check_stream` checks.

use harness::TestResult;
use reqwest::Method;
use serde_json::{Value, json};

use crate::support::{
    BINDINGS, Binding, Cluster, TASK_NOT_FOUND, TOKEN_A, UNSUPPORTED_OPERATION, artifact_updates,
    check_stream, ensure, event_state, expect_error, for_skill, kind, ok, sleeping, state, tck,
    wait_for_state,
};

/// `count` streams its numbers as artifact updates of one artifact, in order, each after the
/// first appended to it.
#[tokio::test(flavor = "multi_thread")]
async fn count_streams_its_numbers_in_order_as_one_artifact() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        let mut sse = alice
            .stream(binding, for_skill("count", json!({"data": {"n": 3}})))
            .await?
            .map_err(|failure| format!("count did not stream: {failure:?}"))?;
        let events = sse.rest().await?;
        check_stream(&events, "TASK_STATE_COMPLETED", "count")?;
        let updates = artifact_updates(&events);
        ensure(updates.len() >= 3, || {
            format!("count: three updates: {events:?}")
        })?;
        let stream_id = &updates[0]["artifact"]["artifactId"];
        for (i, update) in updates.iter().take(3).enumerate() {
            let data = &update["artifact"]["parts"][0]["data"];
            assert_eq!(*data, json!(i + 1), "count update {i}: {events:?}");
            assert_eq!(update["artifact"]["artifactId"], *stream_id, "{events:?}");
            assert_eq!(
                update["append"].as_bool().unwrap_or(false),
                i > 0,
                "count update {i} appends to the first: {events:?}"
            );
        }
    }
    Ok(())
}

/// A subscriber to a running task (HTTP+JSON: `GET :subscribe`) sees it `WORKING` first, then
/// its cancellation, then the end of the stream.
#[tokio::test(flavor = "multi_thread")]
async fn a_subscriber_to_a_running_task_sees_it_then_its_cancellation() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        let running = alice.send_task(binding, sleeping(binding)).await?;
        let id = running["id"].as_str().ok_or("no task id")?;
        wait_for_state(&alice, binding, id, "TASK_STATE_WORKING").await?;
        let method = match binding {
            Binding::JsonRpc => Method::POST,
            Binding::Rest => Method::GET,
        };
        let mut sse = alice
            .subscribe(binding, id, method)
            .await?
            .map_err(|failure| format!("could not subscribe: {failure:?}"))?;
        let first = sse.next().await?.ok_or("the subscription ended at once")?;
        assert_eq!(kind(&first), "task", "{first}");
        assert_eq!(first["task"]["id"], id, "{first}");
        assert_eq!(event_state(&first), "TASK_STATE_WORKING", "{first}");
        let cancelled = ok(alice.cancel(binding, id).await?, "CancelTask")?;
        assert_eq!(state(&cancelled), "TASK_STATE_CANCELED", "{cancelled}");
        let mut events = vec![first];
        events.extend(sse.rest().await?);
        check_stream(&events, "TASK_STATE_CANCELED", "a cancelled subscription")?;
    }
    Ok(())
}

/// Nothing to follow: `SubscribeToTask` of a finished (cancelled) task is
/// `UnsupportedOperation`.
#[tokio::test(flavor = "multi_thread")]
async fn subscribing_to_a_finished_task_is_refused_as_unsupported() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        let running = alice.send_task(binding, sleeping(binding)).await?;
        let id = running["id"].as_str().ok_or("no task id")?;
        wait_for_state(&alice, binding, id, "TASK_STATE_WORKING").await?;
        let cancelled = ok(alice.cancel(binding, id).await?, "CancelTask")?;
        assert_eq!(state(&cancelled), "TASK_STATE_CANCELED", "{cancelled}");
        match alice.subscribe(binding, id, Method::POST).await? {
            Ok(_) => return Err("subscribed to a finished task".into()),
            Err(failure) => {
                expect_error(
                    binding,
                    Err(failure),
                    UNSUPPORTED_OPERATION,
                    400,
                    "SubscribeToTask of a finished task",
                )?;
            }
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn subscribing_to_an_unknown_task_is_task_not_found() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        match alice
            .subscribe(binding, "no-such-task", Method::GET)
            .await?
        {
            Ok(_) => return Err("subscribed to an unknown task".into()),
            Err(failure) => {
                expect_error(
                    binding,
                    Err(failure),
                    TASK_NOT_FOUND,
                    404,
                    "SubscribeToTask of an unknown task",
                )?;
            }
        }
    }
    Ok(())
}

/// The TCK agent's chunked artifact: two chunks of the artifact `chunked`, the second
/// appended and last, and nothing else between `WORKING` and `COMPLETED`.
#[tokio::test(flavor = "multi_thread")]
async fn a_chunked_artifact_streams_as_two_chunks_the_second_last() -> TestResult {
    let cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    for binding in BINDINGS {
        let mut sse = alice
            .stream(binding, tck("tck-stream-artifact-chunked"))
            .await?
            .map_err(|failure| format!("the chunked stream was refused: {failure:?}"))?;
        let events = sse.rest().await?;
        let what = format!("tck-stream-artifact-chunked ({binding:?})");
        check_stream(&events, "TASK_STATE_COMPLETED", &what)?;
        let updates = artifact_updates(&events);
        let seen: Vec<Value> = updates
            .iter()
            .map(|update| {
                json!({
                    "artifactId": update["artifact"]["artifactId"],
                    "parts": update["artifact"]["parts"],
                    "append": update["append"].as_bool().unwrap_or(false),
                    "lastChunk": update["lastChunk"].as_bool().unwrap_or(false),
                })
            })
            .collect();
        assert_eq!(
            seen,
            vec![
                json!({"artifactId": "chunked", "parts": [{"text": "chunk-1 "}], "append": false, "lastChunk": false}),
                json!({"artifactId": "chunked", "parts": [{"text": "chunk-2"}], "append": true, "lastChunk": true}),
            ],
            "{what}: {events:?}"
        );
    }
    Ok(())
}
