//! Losing workers: a streaming task whose worker is killed mid-run is run again, once, by
//! another worker, and the stream, which never broke, ends `COMPLETED`; with no worker at
//! all, a subscriber to a queued task is told when a new worker starts it.

use harness::TestResult;
use reqwest::Method;
use serde_json::json;
use store::registry::{RedisRegistry, WorkerRegistry};
use store::{RedisStore, RedisStoreConfig, TaskStore};

use crate::support::{
    Binding, Cluster, PATIENCE, POLL, TOKEN_A, check_stream, ensure, event_state, for_skill, kind,
    ok, sleeping, state, wait_for_state, worker,
};

/// The stream of a `sleep` of 3 s on w1, the only worker: w2 joins, w1 is killed once the
/// task is `WORKING`; w2 runs it again (attempt 2) and the stream ends `COMPLETED`, as
/// `GetTask` reads it on both bindings.
#[tokio::test(flavor = "multi_thread")]
async fn a_stream_survives_its_worker_being_killed() -> TestResult {
    let mut cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    let mut sse = alice
        .stream(
            Binding::JsonRpc,
            for_skill("sleep", json!({"data": {"ms": 3000}})),
        )
        .await?
        .map_err(|failure| format!("the sleep did not stream: {failure:?}"))?;
    let mut events = Vec::new();
    // Until the task is WORKING: w1, the only worker, runs it.
    loop {
        let event = sse.next().await?.ok_or("the stream ended before WORKING")?;
        let working = event_state(&event) == "TASK_STATE_WORKING";
        ensure(
            !matches!(
                event_state(&event),
                "TASK_STATE_COMPLETED" | "TASK_STATE_FAILED" | "TASK_STATE_CANCELED"
            ),
            || format!("the task ended before its worker was killed: {event}"),
        )?;
        events.push(event);
        if working {
            break;
        }
    }
    let task_id = events[0]["task"]["id"]
        .as_str()
        .ok_or("the first event is not the task")?
        .to_owned();

    // A second worker joins; then the first dies.
    cluster.workers.push(worker(&cluster.redis, "w2")?);
    let store = RedisStore::connect(RedisStoreConfig::new(cluster.redis.url())).await?;
    let registry = RedisRegistry::new(&store);
    let start = tokio::time::Instant::now();
    while !registry
        .workers()
        .await?
        .iter()
        .any(|worker| worker.worker_id == "w2")
    {
        ensure(start.elapsed() < PATIENCE, || "w2 never registered".into())?;
        tokio::time::sleep(POLL).await;
    }
    let stored = store.get(&task_id).await?.ok_or("the task is not stored")?;
    assert_eq!(stored.attempt, 1, "the task runs on w1");
    cluster
        .workers
        .first_mut()
        .ok_or("no first worker")?
        .kill()?;

    events.extend(sse.rest().await?);
    check_stream(&events, "TASK_STATE_COMPLETED", "a stream across a crash")?;
    let task = ok(
        alice.get_task(Binding::JsonRpc, &task_id, None).await?,
        "GetTask",
    )?;
    assert_eq!(state(&task), "TASK_STATE_COMPLETED", "{task}");
    assert_eq!(
        task["artifacts"][0]["parts"][0]["data"],
        json!({"slept": 3000}),
        "{task}"
    );
    let rest = ok(
        alice.get_task(Binding::Rest, &task_id, None).await?,
        "GetTask",
    )?;
    assert_eq!(state(&rest), "TASK_STATE_COMPLETED", "{rest}");
    let stored = store.get(&task_id).await?.ok_or("the task is not stored")?;
    assert_eq!(stored.attempt, 2, "run again once, by w2");
    Ok(())
}

/// No worker left: a new task stays `SUBMITTED` (its skill is still offered for a grace
/// period). A subscriber sees it `SUBMITTED`, then `WORKING` once a new worker starts it,
/// then its cancellation.
#[tokio::test(flavor = "multi_thread")]
async fn a_subscriber_to_a_queued_task_is_told_when_a_worker_starts_it() -> TestResult {
    let mut cluster = Cluster::start().await?;
    let alice = cluster.client(TOKEN_A);
    for worker in &mut cluster.workers {
        worker.kill()?;
    }
    let queued = alice
        .send_task(Binding::JsonRpc, sleeping(Binding::JsonRpc))
        .await?;
    assert_eq!(state(&queued), "TASK_STATE_SUBMITTED", "{queued}");
    let queued_id = queued["id"].as_str().ok_or("no task id")?;
    let mut sse = alice
        .subscribe(Binding::Rest, queued_id, Method::POST)
        .await?
        .map_err(|failure| format!("could not subscribe: {failure:?}"))?;
    let first = sse.next().await?.ok_or("the subscription ended at once")?;
    assert_eq!(event_state(&first), "TASK_STATE_SUBMITTED", "{first}");
    cluster.workers.push(worker(&cluster.redis, "w2")?);
    wait_for_state(&alice, Binding::Rest, queued_id, "TASK_STATE_WORKING").await?;
    let cancelled = ok(alice.cancel(Binding::Rest, queued_id).await?, "CancelTask")?;
    assert_eq!(state(&cancelled), "TASK_STATE_CANCELED", "{cancelled}");
    let mut events = vec![first];
    events.extend(sse.rest().await?);
    check_stream(
        &events,
        "TASK_STATE_CANCELED",
        "a subscription to a queued task",
    )?;
    assert!(
        events.iter().any(|event| {
            kind(event) == "statusUpdate" && event_state(event) == "TASK_STATE_WORKING"
        }),
        "the subscriber is told when the task starts working: {events:?}"
    );
    Ok(())
}
