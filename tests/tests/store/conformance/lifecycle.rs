//! A task's way from creation to one terminal status: phases, the events each transition
//! publishes, cancellation, hand-off, the ready queue and retention.

use std::time::Duration;

use protocol::{TaskError, TaskStatus};
use serde_json::json;
use store::{Admission, CasOutcome, Phase, Rejection, StoreError, StoredEvent};

use crate::support::{
    EVENT_TIMEOUT, Fx, Harness, LONG, SHORT, StoreCfg, TestResult, next_event, outlive, progress,
    rejection,
};

fn names(events: &[StoredEvent]) -> Vec<&str> {
    events.iter().map(|event| event.event.as_str()).collect()
}

pub async fn create_queues_a_running_task(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let mut new = fx.new_task("a", Admission::Queued);
    new.invocation.context_id = Some("ctx-1".into());
    let task = fx.store.create(new.clone()).await?;
    assert_eq!(task.task_id, new.task_id);
    assert_eq!(task.status, TaskStatus::Running);
    assert_eq!(task.context_id.as_deref(), Some("ctx-1"));
    assert_eq!(task.created_at, task.updated_at);
    assert_eq!((task.result.clone(), task.error.clone()), (None, None));

    let stored = fx.stored(&task.task_id).await?;
    assert_eq!(stored.task, task);
    assert_eq!(stored.owner, fx.owner);
    assert_eq!(stored.invocation, new.invocation);
    assert_eq!(stored.phase, Phase::Queued);
    assert!(stored.handed_off);
    assert_eq!(stored.lease, None);
    assert_eq!(stored.admission_expires_at_ms, None);
    assert_eq!((stored.attempt, stored.max_attempts), (0, new.max_attempts));
    assert_eq!(stored.seq, 1, "creation publishes statusUpdate running");
    assert_eq!(fx.queue_depth().await?, 1);
    assert_eq!(fx.store.live_count().await?, 1);
    Ok(())
}

/// The creator's W3C trace context is stored with the task and reaches whoever claims it, by
/// queue or by id, with the creation time (what a worker's queue-wait metric measures from).
pub async fn trace_context_and_creation_time_reach_the_claim(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let context: std::collections::BTreeMap<String, String> = [
        (
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ),
        ("tracestate", "vendor=opaque"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let mut queued = fx.new_task("queued", Admission::Queued);
    queued.invocation.trace_context = context.clone();
    let created = fx.store.create(queued).await?;
    assert_eq!(
        fx.stored(&created.task_id).await?.invocation.trace_context,
        context
    );
    let taken = fx.take("w1", LONG).await?;
    assert_eq!(taken.invocation.trace_context, context);
    assert_eq!(taken.created_at_ms, created.created_at.0);

    let mut reserved = fx.new_task("reserved", Admission::Reserved { ttl: LONG });
    reserved.invocation.trace_context = context.clone();
    let created = fx.store.create(reserved).await?;
    let claimed = fx.claim(&created.task_id, "w2", LONG).await?;
    assert_eq!(claimed.invocation.trace_context, context);
    assert_eq!(claimed.created_at_ms, created.created_at.0);
    Ok(())
}

pub async fn create_reserves_a_paid_task(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let id = fx.reserved("a", LONG).await?;
    let stored = fx.stored(&id).await?;
    assert_eq!(stored.task.status, TaskStatus::Running);
    assert_eq!(stored.phase, Phase::Reserved);
    assert!(!stored.handed_off);
    assert_eq!(stored.lease, None);
    let created = stored.task.created_at.as_millis();
    assert_eq!(
        stored.admission_expires_at_ms,
        Some(created + LONG.as_millis() as u64)
    );
    assert_eq!(fx.queue_depth().await?, 0, "a reservation is not queued");
    fx.take_nothing("w1").await?;

    let sub = fx.subscribe(&id, Some(0)).await?;
    assert_eq!(sub.snapshot_seq, 1);
    assert_eq!(names(&sub.replay), ["statusUpdate"]);
    assert_eq!(
        sub.replay[0].data,
        json!({"taskId": id, "status": "running"})
    );
    Ok(())
}

pub async fn duplicate_ids_are_refused(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    fx.queued("a").await?;
    let again = fx.store.create(fx.new_task("a", Admission::Queued)).await;
    assert!(
        matches!(&again, Err(StoreError::Duplicate(id)) if *id == fx.id("a")),
        "{again:?}"
    );
    assert_eq!(fx.store.live_count().await?, 1);
    assert_eq!(fx.queue_depth().await?, 1);
    Ok(())
}

pub async fn missing_tasks_read_as_none(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let id = fx.id("ghost");
    assert_eq!(fx.store.get(&id).await?, None);
    assert_eq!(fx.store.claim_execution(&id, "w1", LONG).await?, None);
    let outcome = fx.cancel(&id).await?;
    assert_eq!(rejection(&outcome)?, (Rejection::NotFound, None));
    Ok(())
}

/// Upstream: execute publishes exactly one resultUpdate.
pub async fn a_run_publishes_exactly_one_result_update(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let id = fx.queued("a").await?;
    let mut sub = fx.subscribe(&id, None).await?;
    assert_eq!(sub.snapshot.status, TaskStatus::Running);

    let claim = fx.take("w1", LONG).await?;
    assert_eq!(claim.lease.task_id, id);
    assert_eq!(claim.owner, fx.owner);
    assert_eq!(claim.invocation, fx.invocation("a"));
    assert_eq!(claim.previous_attempts, 0);
    let activation = fx.activate(&claim.lease, LONG, LONG).await?;
    assert_eq!(activation.attempt, 1);
    assert_eq!(activation.lease.epoch, claim.lease.epoch);
    assert_eq!(activation.lease.holder, "w1");
    let stored = fx.stored(&id).await?;
    assert_eq!(stored.phase, Phase::Active);
    assert_eq!(stored.attempt, 1);
    assert_eq!(stored.run_deadline_ms, Some(activation.run_deadline_ms));
    assert_eq!(stored.lease.as_ref(), Some(&activation.lease));
    assert_eq!(fx.queue_depth().await?, 0);

    let seq = fx.store.emit(&activation.lease, progress(1)).await?;
    assert_eq!(seq, Some(sub.snapshot_seq + 1));
    let done = fx
        .complete(&id, Some(&activation.lease), json!({"ok": true}))
        .await?;
    let Some(task) = done.applied() else {
        return Err(format!("completion refused: {done:?}").into());
    };
    assert_eq!(task.status, TaskStatus::Completed);
    assert_eq!(
        task.result.as_ref().map(|r| &r.output),
        Some(&json!({"ok": true}))
    );
    assert!(task.updated_at >= task.created_at);

    let first = next_event(&mut sub.events).await?;
    assert_eq!(
        (first.seq, first.event.as_str()),
        (sub.snapshot_seq + 1, "progress")
    );
    assert_eq!(first.data, json!({"step": 1}));
    let last = next_event(&mut sub.events).await?;
    assert_eq!(
        (last.seq, last.event.as_str()),
        (sub.snapshot_seq + 2, "resultUpdate")
    );
    assert_eq!(
        last.data,
        json!({"taskId": id, "status": "completed", "result": {"output": {"ok": true}}})
    );

    // A second completion is refused and publishes nothing.
    let again = fx
        .complete(&id, Some(&activation.lease), json!("again"))
        .await?;
    assert_eq!(
        rejection(&again)?,
        (Rejection::Status, Some(TaskStatus::Completed))
    );
    let stored = fx.stored(&id).await?;
    assert_eq!(stored.phase, Phase::Terminal);
    assert_eq!(stored.lease, None);
    assert_eq!(stored.seq, last.seq);
    let log = fx.subscribe(&id, Some(0)).await?;
    assert_eq!(
        names(&log.replay),
        ["statusUpdate", "progress", "resultUpdate"]
    );
    assert_eq!(fx.store.live_count().await?, 0);
    Ok(())
}

/// Upstream: mapError output persisted with matching error event.
pub async fn a_failure_persists_its_error_and_publishes_it(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let id = fx.queued("a").await?;
    let mut sub = fx.subscribe(&id, None).await?;
    let activation = fx.running("w1", LONG, LONG).await?;
    let error = TaskError {
        code: "upstream_refused".into(),
        message: "the model said no".into(),
        details: Some(json!({"retryable": false})),
    };
    let outcome = fx.fail(&id, Some(&activation.lease), error.clone()).await?;
    assert!(outcome.applied().is_some(), "{outcome:?}");
    let stored = fx.stored(&id).await?;
    assert_eq!(stored.task.status, TaskStatus::Failed);
    assert_eq!(stored.task.error.as_ref(), Some(&error));
    assert_eq!(stored.task.result, None);

    let event = next_event(&mut sub.events).await?;
    assert_eq!(event.event, "error");
    assert_eq!(
        event.data,
        json!({
            "taskId": id,
            "status": "failed",
            "error": {"code": "upstream_refused", "message": "the model said no",
                      "details": {"retryable": false}}
        })
    );
    Ok(())
}

/// Upstream: a cancel during execution wins over the later completion.
pub async fn cancel_during_execution_wins_over_completion(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let id = fx.queued("a").await?;
    let mut sub = fx.subscribe(&id, None).await?;
    let activation = fx.running("w1", LONG, LONG).await?;

    let cancelled = fx.cancel(&id).await?;
    let Some(task) = cancelled.applied() else {
        return Err(format!("cancel refused: {cancelled:?}").into());
    };
    assert_eq!(task.status, TaskStatus::Cancelled);
    let event = next_event(&mut sub.events).await?;
    assert_eq!(event.event, "statusUpdate");
    assert_eq!(event.data, json!({"taskId": id, "status": "cancelled"}));

    let late = fx
        .complete(&id, Some(&activation.lease), json!("late"))
        .await?;
    assert_eq!(
        rejection(&late)?,
        (Rejection::Status, Some(TaskStatus::Cancelled))
    );
    let stored = fx.stored(&id).await?;
    assert_eq!(stored.task.status, TaskStatus::Cancelled);
    assert_eq!(stored.task.result, None);
    assert_eq!(stored.lease, None, "cancel releases the lease");
    assert_eq!(fx.store.emit(&activation.lease, progress(1)).await?, None);
    assert!(
        !fx.store
            .renew_leases(std::slice::from_ref(&activation.lease), LONG)
            .await?[0]
    );
    Ok(())
}

pub async fn cancelling_a_queued_task_empties_its_queue_slot(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let id = fx.queued("a").await?;
    assert_eq!(fx.queue_depth().await?, 1);
    assert!(fx.cancel(&id).await?.applied().is_some());
    assert_eq!(fx.queue_depth().await?, 0);
    fx.take_nothing("w1").await?;
    assert_eq!(fx.store.claim_execution(&id, "w1", LONG).await?, None);
    assert_eq!(fx.stored(&id).await?.phase, Phase::Terminal);
    Ok(())
}

pub async fn compare_and_set_checks_the_expected_status(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let id = fx.queued("a").await?;
    let outcome = fx
        .store
        .compare_and_set(
            &id,
            &[TaskStatus::Completed, TaskStatus::Failed],
            store::Transition::cancelled(),
            None,
        )
        .await?;
    assert_eq!(
        rejection(&outcome)?,
        (Rejection::Status, Some(TaskStatus::Running))
    );
    assert_eq!(
        fx.stored(&id).await?.seq,
        1,
        "a rejected write publishes nothing"
    );
    Ok(())
}

/// Upstream: claiming clears the admission expiry (the task stays running after the TTL).
pub async fn claiming_clears_the_admission_expiry(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let id = fx.reserved("a", SHORT).await?;
    let claim = fx.claim(&id, "gateway", LONG).await?;
    let stored = fx.stored(&id).await?;
    assert_eq!(stored.admission_expires_at_ms, None);
    assert_eq!(stored.phase, Phase::Prepared);
    assert_eq!(stored.lease.as_ref(), Some(&claim.lease));

    outlive(SHORT).await;
    assert_eq!(fx.store.reap_expired_admissions().await?, 0);
    assert!(fx.store.recover_expired(100).await?.is_empty());
    assert_eq!(fx.status(&id).await?, Some(TaskStatus::Running));
    assert!(fx.store.renew_execution_claim(&claim.lease, LONG).await?);
    Ok(())
}

/// Upstream: preparing an expired admission fails, and the task reads cancelled.
pub async fn claiming_an_expired_admission_cancels_it(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let id = fx.reserved("a", SHORT).await?;
    let mut sub = fx.subscribe(&id, None).await?;
    outlive(SHORT).await;

    assert_eq!(fx.store.claim_execution(&id, "gateway", LONG).await?, None);
    let stored = fx.stored(&id).await?;
    assert_eq!(stored.task.status, TaskStatus::Cancelled);
    assert_eq!(stored.admission_expires_at_ms, None);
    let event = next_event(&mut sub.events).await?;
    assert_eq!(event.data, json!({"taskId": id, "status": "cancelled"}));
    assert_eq!(fx.store.live_count().await?, 0);
    Ok(())
}

pub async fn hand_off_releases_the_claim_to_the_queue(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let id = fx.reserved("a", LONG).await?;
    let claim = fx.claim(&id, "gateway", LONG).await?;
    assert_eq!(fx.queue_depth().await?, 0);
    assert!(fx.store.hand_off(&claim.lease).await?);

    let stored = fx.stored(&id).await?;
    assert_eq!(stored.phase, Phase::Queued);
    assert!(stored.handed_off);
    assert_eq!(stored.lease, None);
    assert_eq!(fx.queue_depth().await?, 1);
    // The released lease is no longer anyone's.
    assert!(!fx.store.hand_off(&claim.lease).await?);
    assert!(!fx.store.renew_execution_claim(&claim.lease, LONG).await?);
    assert_eq!(
        fx.store
            .activate_execution(&claim.lease, LONG, LONG)
            .await?,
        None
    );

    let worker = fx.take("w1", LONG).await?;
    assert_eq!(worker.lease.task_id, id);
    assert!(worker.lease.epoch > claim.lease.epoch);
    assert_eq!(fx.queue_depth().await?, 0);
    Ok(())
}

/// Upstream: a failed completion write leaves the task running and recoverable.
pub async fn a_failed_completion_leaves_the_task_recoverable(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let id = fx.queued("a").await?;
    let first = fx.running("w1", SHORT, LONG).await?;
    // The worker's completion does not land (here: it expected the wrong status).
    let lost = fx
        .store
        .compare_and_set(
            &id,
            &[TaskStatus::Cancelled],
            store::Transition::completed(protocol::TaskResult::output(json!(1))),
            Some(&first.lease),
        )
        .await?;
    assert_eq!(rejection(&lost)?.0, Rejection::Status);
    assert_eq!(fx.stored(&id).await?.phase, Phase::Active);

    outlive(SHORT).await;
    let report = fx.store.recover_expired(100).await?;
    assert_eq!(report.requeued, [id.as_str()]);
    let second = fx.take("w2", LONG).await?;
    assert_eq!(second.previous_attempts, 1);
    let activation = fx.activate(&second.lease, LONG, LONG).await?;
    assert_eq!(activation.attempt, 2);
    let done = fx.complete(&id, Some(&activation.lease), json!(2)).await?;
    assert!(done.applied().is_some(), "{done:?}");
    Ok(())
}

pub async fn take_next_wakes_when_a_task_is_queued(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let store = fx.store.clone();
    let entrypoints = vec![fx.entrypoint.clone()];
    // Waits far longer than the test bound: only a wake-up can end it in time.
    let waiter = tokio::spawn(async move {
        store
            .take_next(&entrypoints, "w1", LONG, 4, Duration::from_secs(600))
            .await
    });
    let id = fx.queued("a").await?;
    let claims = tokio::time::timeout(EVENT_TIMEOUT, waiter).await???;
    let ids: Vec<_> = claims
        .iter()
        .map(|claim| claim.lease.task_id.clone())
        .collect();
    assert_eq!(ids, [id]);
    Ok(())
}

/// Tasks queued in different milliseconds come out oldest first (ids sort the other way, so
/// an order by id would show); `max` and the entrypoint list are honoured.
pub async fn take_next_honours_max_entrypoints_and_fifo(h: &impl Harness) -> TestResult {
    let fx = Fx::ordered(h).await?;
    let mut ids = Vec::new();
    for name in ["c", "b", "a"] {
        ids.push(fx.queued(name).await?);
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let mut elsewhere = fx.new_task("elsewhere", Admission::Queued);
    elsewhere.invocation.entrypoint = format!("{}-other", fx.entrypoint);
    fx.store.create(elsewhere).await?;

    let entrypoints = [fx.entrypoint.clone()];
    let claims = fx
        .store
        .take_next(&entrypoints, "w1", LONG, 2, EVENT_TIMEOUT)
        .await?;
    let taken: Vec<_> = claims
        .iter()
        .map(|claim| claim.lease.task_id.clone())
        .collect();
    assert_eq!(taken, ids[..2], "oldest first, at most max");
    assert_eq!(fx.queue_depth().await?, 1);
    let rest = fx
        .store
        .take_next(&entrypoints, "w1", LONG, 5, EVENT_TIMEOUT)
        .await?;
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].lease.task_id, ids[2]);
    fx.take_nothing("w1").await?;
    let other = format!("{}-other", fx.entrypoint);
    assert_eq!(fx.store.queue_depth(&other).await?, 1);
    Ok(())
}

/// Upstream: terminal tasks vanish after retention.
pub async fn terminal_tasks_vanish_after_retention(h: &impl Harness) -> TestResult {
    let retention = Duration::from_millis(100);
    let cfg = StoreCfg {
        retention,
        ..StoreCfg::default()
    };
    let fx = Fx::with_cfg(h, cfg).await?;
    let done = fx.queued("done").await?;
    let live = fx.queued("live").await?;
    assert!(fx.cancel(&done).await?.applied().is_some());

    outlive(retention).await;
    h.after_retention(&fx.store).await?;
    assert_eq!(fx.store.get(&done).await?, None);
    assert_eq!(fx.status(&live).await?, Some(TaskStatus::Running));
    let page = fx.store.list(&fx.owner, &Default::default()).await?;
    let listed: Vec<_> = page.tasks.iter().map(|task| task.task_id.clone()).collect();
    assert_eq!(listed, [live]);
    assert_eq!(page.total, 1);
    let gone = fx.cancel(&done).await?;
    assert!(matches!(
        gone,
        CasOutcome::Rejected {
            reason: Rejection::NotFound,
            ..
        }
    ));
    Ok(())
}
