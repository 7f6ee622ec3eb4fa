//! Input-required turns: a run that asks for more input leaves its task `waiting` (running,
//! no lease, not queued, still live) until the owner resumes it with new input or cancels it.

use std::time::Duration;

use futures::future::join_all;
use protocol::TaskStatus;
use serde_json::json;
use store::{Phase, Rejection, Resumed, StoredEvent, turn_of};

use crate::support::*;

fn names(events: &[StoredEvent]) -> Vec<&str> {
    events.iter().map(|event| event.event.as_str()).collect()
}

/// The whole round: ask, wait, resume with new input, run again, finish; each step fenced.
pub async fn a_run_can_wait_for_input_and_be_resumed(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let id = fx.queued("a").await?;
    let mut sub = fx.subscribe(&id, None).await?;
    let first = fx.running("w1", LONG, LONG).await?;
    let request = json!({"parts": [{"text": "which city?"}]});
    assert!(
        fx.store
            .await_input(&first.lease, request.clone(), LONG)
            .await?
    );

    let asked = next_event(&mut sub.events).await?;
    assert_eq!(asked.event, "inputRequired");
    assert_eq!(
        asked.data,
        json!({"taskId": id, "status": "running", "request": request})
    );
    let waiting = fx.stored(&id).await?;
    assert_eq!(
        (waiting.task.status, waiting.phase),
        (TaskStatus::Running, Phase::Waiting)
    );
    assert_eq!(waiting.lease, None);
    assert_eq!(waiting.input_request.as_ref(), Some(&request));
    assert_eq!(waiting.seq, asked.seq);
    assert_eq!(fx.store.live_count().await?, 1);
    assert_eq!(fx.queue_depth().await?, 0);

    // Nobody runs a waiting task, and the run that asked can write nothing more.
    fx.take_nothing("w2").await?;
    assert_eq!(fx.store.claim_execution(&id, "w2", LONG).await?, None);
    assert_eq!(fx.store.emit(&first.lease, progress(1)).await?, None);
    assert!(
        !fx.store
            .await_input(&first.lease, json!("again"), LONG)
            .await?
    );
    let late = fx.complete(&id, Some(&first.lease), json!("late")).await?;
    assert_eq!(rejection(&late)?.0, Rejection::Fenced);

    // Only the owner resumes it.
    let stranger = fx
        .store
        .resume(&id, &other_owner(), json!("x"), None)
        .await?;
    assert_eq!(stranger, Resumed::NotFound);
    let metadata = json!({"a2a": {"messageId": "m2"}});
    let resumed = fx
        .store
        .resume(&id, &fx.owner, json!("Paris"), Some(metadata.clone()))
        .await?;
    let Resumed::Queued { task, seq } = resumed else {
        return Err(format!("resume refused: {resumed:?}").into());
    };
    assert_eq!(task.status, TaskStatus::Running);
    let running = next_event(&mut sub.events).await?;
    assert_eq!((running.seq, running.event.as_str()), (seq, "statusUpdate"));
    assert_eq!(running.data, json!({"taskId": id, "status": "running"}));
    let queued = fx.stored(&id).await?;
    assert_eq!(queued.phase, Phase::Queued);
    assert_eq!(queued.input_request, None);
    assert_eq!(queued.attempt, 0);
    assert_eq!(
        queued.turns,
        vec![turn_of(&fx.invocation("a"), Some(&request))]
    );
    assert_eq!(queued.invocation.input, json!("Paris"));
    assert_eq!(queued.invocation.metadata.as_ref(), Some(&metadata));
    assert_eq!(fx.queue_depth().await?, 1);

    // The next turn runs with the answer, as a first attempt, under a new epoch.
    let claim = fx.take("w2", LONG).await?;
    assert_eq!(claim.invocation.input, json!("Paris"));
    assert_eq!(claim.previous_attempts, 0);
    assert!(claim.lease.epoch > first.lease.epoch);
    let second = fx.activate(&claim.lease, LONG, LONG).await?;
    assert_eq!(second.attempt, 1);
    let done = fx
        .complete(&id, Some(&second.lease), json!("sunny"))
        .await?;
    assert!(done.applied().is_some(), "completion refused: {done:?}");
    let finished = fx.stored(&id).await?;
    assert_eq!(finished.task.status, TaskStatus::Completed);
    assert_eq!(finished.turns.len(), 1, "the turns outlive the task's end");
    assert_eq!(fx.store.live_count().await?, 0);

    // A finished task takes no more input; its log replays every step once.
    let again = fx.store.resume(&id, &fx.owner, json!("x"), None).await?;
    assert!(matches!(again, Resumed::NotWaiting(task) if task.status == TaskStatus::Completed));
    let log = fx.subscribe(&id, Some(0)).await?;
    assert_eq!(
        names(&log.replay),
        [
            "statusUpdate",
            "inputRequired",
            "statusUpdate",
            "resultUpdate"
        ]
    );
    Ok(())
}

/// A waiting task holds its capacity slot until it is cancelled; cancelling frees it.
pub async fn a_waiting_task_can_be_cancelled(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let id = fx.queued("a").await?;
    let run = fx.running("w1", LONG, LONG).await?;
    assert!(
        fx.store
            .await_input(&run.lease, json!("more?"), LONG)
            .await?
    );
    let cancelled = fx.cancel(&id).await?;
    assert_eq!(
        cancelled.applied().map(|task| task.status),
        Some(TaskStatus::Cancelled)
    );
    let stored = fx.stored(&id).await?;
    assert_eq!(stored.phase, Phase::Terminal);
    assert_eq!(stored.input_request, None);
    assert_eq!(fx.store.live_count().await?, 0);
    let resumed = fx.store.resume(&id, &fx.owner, json!("x"), None).await?;
    assert!(matches!(resumed, Resumed::NotWaiting(task) if task.status == TaskStatus::Cancelled));
    Ok(())
}

/// Only the live lease of an active run may ask for input.
pub async fn await_input_is_fenced(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let id = fx.queued("a").await?;
    // A prepared claim has no run yet.
    let claim = fx.take("w1", LONG).await?;
    assert!(!fx.store.await_input(&claim.lease, json!("q"), LONG).await?);
    let run = fx.activate(&claim.lease, LONG, LONG).await?;
    let mut stale = run.lease.clone();
    stale.epoch += 1;
    assert!(!fx.store.await_input(&stale, json!("q"), LONG).await?);
    // A cancelled task's run is fenced out.
    fx.cancel(&id).await?;
    assert!(!fx.store.await_input(&run.lease, json!("q"), LONG).await?);
    assert_eq!(fx.status(&id).await?, Some(TaskStatus::Cancelled));
    let missing = fx
        .store
        .resume(&fx.id("ghost"), &fx.owner, json!("x"), None)
        .await?;
    assert_eq!(missing, Resumed::NotFound);
    // A task that is running (not waiting) cannot be resumed.
    let busy = fx.queued("b").await?;
    let resumed = fx.store.resume(&busy, &fx.owner, json!("x"), None).await?;
    assert!(matches!(resumed, Resumed::NotWaiting(task) if task.status == TaskStatus::Running));
    Ok(())
}

/// Twenty answers to one question: exactly one resumes the task.
pub async fn concurrent_resumes_resume_once(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let id = fx.queued("a").await?;
    let run = fx.running("w1", LONG, LONG).await?;
    assert!(fx.store.await_input(&run.lease, json!("q"), LONG).await?);
    let outcomes = join_all((0..20).map(|i| {
        let store = fx.store.clone();
        let (id, owner) = (id.clone(), fx.owner.clone());
        async move { store.resume(&id, &owner, json!(i), None).await }
    }))
    .await;
    let mut queued = 0;
    for outcome in outcomes {
        match outcome? {
            Resumed::Queued { .. } => queued += 1,
            Resumed::NotWaiting(task) => assert_eq!(task.status, TaskStatus::Running),
            Resumed::NotFound => return Err("a resume lost the task".into()),
        }
    }
    assert_eq!(queued, 1);
    assert_eq!(fx.stored(&id).await?.turns.len(), 1);
    assert_eq!(fx.queue_depth().await?, 1);
    Ok(())
}

/// Recovery runs expired leases; a waiting task holds none, so it is left waiting.
pub async fn recovery_leaves_a_waiting_task_alone(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let id = fx.queued("a").await?;
    // The lease must still hold for the request (a SHORT one ran out first on a loaded CI
    // machine), and must have run out before the recovery below.
    let ttl = Duration::from_secs(1);
    let run = fx.running("w1", ttl, LONG).await?;
    assert!(fx.store.await_input(&run.lease, json!("q"), LONG).await?);
    outlive(ttl).await;
    let report = fx.store.recover_expired(100).await?;
    assert!(!report.requeued.contains(&id) && !report.failed.contains(&id));
    assert_eq!(fx.stored(&id).await?.phase, Phase::Waiting);
    fx.take_nothing("w2").await?;
    Ok(())
}

/// A request nobody answers in time fails the task with `input_timeout`, through either sweep,
/// and frees its capacity slot.
pub async fn an_unanswered_request_times_out(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let swept = fx.queued("swept").await?;
    let reaped = fx.queued("reaped").await?;
    let mut sub = fx.subscribe(&swept, None).await?;
    for _ in [&swept, &reaped] {
        let run = fx.running("w1", LONG, LONG).await?;
        assert!(fx.store.await_input(&run.lease, json!("q"), SHORT).await?);
    }
    assert_eq!(next_event(&mut sub.events).await?.event, "inputRequired");
    outlive(SHORT).await;

    let report = fx.store.recover_expired(100).await?;
    assert!(report.failed.contains(&swept), "{report:?}");
    assert!(fx.store.reap_expired_admissions().await? <= 1);
    for id in [&swept, &reaped] {
        let stored = fx.stored(id).await?;
        assert_eq!(stored.task.status, TaskStatus::Failed, "{id}");
        assert_eq!(
            stored.task.error.as_ref().map(|error| error.code.as_str()),
            Some(store::INPUT_TIMEOUT)
        );
    }
    let failed = next_event(&mut sub.events).await?;
    assert_eq!(failed.event, "error");
    assert_eq!(failed.data["error"]["code"], store::INPUT_TIMEOUT);
    assert_eq!(fx.store.live_count().await?, 0);
    let late = fx.store.resume(&swept, &fx.owner, json!("x"), None).await?;
    assert!(matches!(late, Resumed::NotWaiting(task) if task.status == TaskStatus::Failed));
    Ok(())
}

/// An answer takes the deadline away: the next turn runs however long the wait was.
pub async fn an_answer_clears_the_waiting_deadline(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let id = fx.queued("a").await?;
    let run = fx.running("w1", LONG, LONG).await?;
    assert!(fx.store.await_input(&run.lease, json!("q"), SHORT).await?);
    let resumed = fx.store.resume(&id, &fx.owner, json!("a"), None).await?;
    assert!(matches!(resumed, Resumed::Queued { .. }), "{resumed:?}");
    outlive(SHORT).await;
    let report = fx.store.recover_expired(100).await?;
    assert!(!report.failed.contains(&id), "{report:?}");
    assert_eq!(fx.store.reap_expired_admissions().await?, 0);
    assert_eq!(fx.status(&id).await?, Some(TaskStatus::Running));
    let claim = fx.take("w2", LONG).await?;
    assert_eq!(claim.lease.task_id, id);
    Ok(())
}
