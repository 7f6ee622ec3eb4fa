//! Retries a handler asked for (`retry_later`): the run ends, the task waits out its backoff in
//! `backoff` (running, no lease, not queued, still live, polled by nobody) until a sweep queues
//! it again, with its last error and retries on the record; a cancel during the wait ends it.

use protocol::{TaskError, TaskStatus};
use serde_json::json;
use store::{Admission, Phase};

use crate::support::*;

fn busy() -> TaskError {
    TaskError::new("upstream_busy", "try again")
}

/// The whole round: a run fails retryably, the task waits, the sweep queues it once due (not
/// before), and the next attempt sees the count and the error.
pub async fn a_retry_waits_out_its_backoff_then_runs_again(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let soon = fx.queued("soon").await?;
    let later = fx.queued("later").await?;
    let mut sub = fx.subscribe(&soon, None).await?;
    let first = fx.running("w1", LONG, LONG).await?;
    let other = fx.running("w1", LONG, LONG).await?;
    let (run, parked) = if first.lease.task_id == soon {
        (first, other)
    } else {
        (other, first)
    };
    assert_eq!(run.attempt, 1);
    assert!(fx.store.retry_later(&run.lease, &busy(), SHORT).await?);
    assert!(fx.store.retry_later(&parked.lease, &busy(), LONG).await?);

    let waiting = fx.stored(&soon).await?;
    assert_eq!(
        (waiting.task.status, waiting.phase),
        (TaskStatus::Running, Phase::Backoff)
    );
    assert_eq!(waiting.lease, None);
    assert_eq!((waiting.attempt, waiting.retries), (1, 1));
    assert_eq!(waiting.last_error.as_deref(), Some(&busy()));
    assert_eq!(waiting.task.error, None, "the wire task shows no failure");
    assert_eq!(fx.store.live_count().await?, 2);
    assert_eq!(fx.queue_depth().await?, 0);
    // Nobody runs it before its time, and its run can write nothing more.
    fx.take_nothing("w2").await?;
    assert_eq!(fx.store.claim_execution(&soon, "w2", LONG).await?, None);
    assert_eq!(fx.store.emit(&run.lease, progress(1)).await?, None);
    let late = fx.complete(&soon, Some(&run.lease), json!("late")).await?;
    assert_eq!(rejection(&late)?.0, store::Rejection::Fenced);

    outlive(SHORT).await;
    let report = fx.store.recover_expired(100).await?;
    // Reported apart from recoveries: the handler asked for this run.
    assert_eq!(report.retried, [soon.as_str()], "{report:?}");
    assert!(report.requeued.is_empty() && report.failed.is_empty() && report.cancelled.is_empty());
    assert_eq!(fx.stored(&later).await?.phase, Phase::Backoff);
    assert!(
        fx.store.recover_expired(100).await?.is_empty(),
        "requeued once"
    );

    let claim = fx.take("w2", LONG).await?;
    assert_eq!(claim.lease.task_id, soon);
    assert_eq!(claim.previous_attempts, 1);
    let second = fx.activate(&claim.lease, LONG, LONG).await?;
    assert_eq!(second.attempt, 2);
    let done = fx.complete(&soon, Some(&second.lease), json!("ok")).await?;
    assert!(matches!(done, store::CasOutcome::Applied(_)), "{done:?}");
    let stored = fx.stored(&soon).await?;
    assert_eq!(stored.task.status, TaskStatus::Completed);
    assert_eq!((stored.attempt, stored.retries), (2, 1));
    assert_eq!(
        stored.last_error.as_deref(),
        Some(&busy()),
        "kept for the record"
    );
    // The backoff published nothing: the subscriber sees the completion next.
    assert_eq!(next_event(&mut sub.events).await?.event, "resultUpdate");
    fx.cancel(&later).await?;
    Ok(())
}

/// Only the live lease of an active run may ask for a retry.
pub async fn retry_later_is_fenced(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let id = fx.queued("a").await?;
    let claim = fx.take("w1", LONG).await?;
    assert!(!fx.store.retry_later(&claim.lease, &busy(), SHORT).await?);
    let run = fx.activate(&claim.lease, LONG, LONG).await?;
    let mut stale = run.lease.clone();
    stale.epoch += 1;
    assert!(!fx.store.retry_later(&stale, &busy(), SHORT).await?);
    assert!(fx.store.retry_later(&run.lease, &busy(), LONG).await?);
    // Once in backoff the lease is gone: a second ask is refused and counts nothing.
    assert!(!fx.store.retry_later(&run.lease, &busy(), SHORT).await?);
    assert_eq!(fx.stored(&id).await?.retries, 1);
    // A cancelled task's run is fenced out.
    let other = fx.queued("b").await?;
    let run = fx.running("w1", LONG, LONG).await?;
    assert_eq!(run.lease.task_id, other);
    fx.cancel(&other).await?;
    assert!(!fx.store.retry_later(&run.lease, &busy(), SHORT).await?);
    assert_eq!(fx.status(&other).await?, Some(TaskStatus::Cancelled));
    fx.cancel(&id).await?;
    Ok(())
}

/// A cancel during the backoff ends the task at once: no sweep brings it back, its slot and
/// deadline go.
pub async fn a_task_in_backoff_can_be_cancelled(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let id = fx.queued("a").await?;
    let mut sub = fx.subscribe(&id, None).await?;
    let run = fx.running("w1", LONG, LONG).await?;
    assert!(fx.store.retry_later(&run.lease, &busy(), SHORT).await?);
    let cancelled = fx.cancel(&id).await?;
    assert!(
        matches!(&cancelled, store::CasOutcome::Applied(task) if task.status == TaskStatus::Cancelled),
        "{cancelled:?}"
    );
    assert_eq!(next_event(&mut sub.events).await?.event, "statusUpdate");
    assert_eq!(fx.store.live_count().await?, 0);
    outlive(SHORT).await;
    let report = fx.store.recover_expired(100).await?;
    assert!(
        report.retried.is_empty() && !report.requeued.contains(&id),
        "{report:?}"
    );
    assert_eq!(fx.store.reap_expired_admissions().await?, 0);
    assert_eq!(fx.status(&id).await?, Some(TaskStatus::Cancelled));
    assert_eq!(fx.queue_depth().await?, 0);
    fx.take_nothing("w2").await?;
    h.check_no_leaks().await?;
    Ok(())
}

/// The reaping sweep queues a due backoff too, so that the entry never stays at the head of
/// the due index for a gateway that only reaps.
pub async fn the_reaping_sweep_queues_a_due_backoff(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let id = fx.queued("a").await?;
    let run = fx.running("w1", LONG, LONG).await?;
    assert!(fx.store.retry_later(&run.lease, &busy(), SHORT).await?);
    outlive(SHORT).await;
    assert_eq!(
        fx.store.reap_expired_admissions().await?,
        0,
        "nothing cancelled"
    );
    assert_eq!(fx.stored(&id).await?.phase, Phase::Queued);
    assert_eq!(fx.take("w2", LONG).await?.lease.task_id, id);
    Ok(())
}

/// Runs that asked for a retry are not abandoned runs: a lost worker still gets the task's
/// whole `max_attempts` budget of runs besides them.
pub async fn retries_do_not_spend_the_lost_worker_budget(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let mut new = fx.new_task("a", Admission::Queued);
    new.max_attempts = 2;
    let id = fx.store.create(new).await?.task_id;

    let first = fx.running("w1", LONG, LONG).await?;
    assert!(fx.store.retry_later(&first.lease, &busy(), SHORT).await?);
    outlive(SHORT).await;
    assert_eq!(fx.store.recover_expired(100).await?.retried, [id.as_str()]);

    // Attempt 2 is abandoned: one abandoned run of two allowed, so it runs again.
    let second = fx.running("w2", SHORT, LONG).await?;
    assert_eq!(second.attempt, 2);
    outlive(SHORT).await;
    assert_eq!(fx.store.recover_expired(100).await?.requeued, [id.as_str()]);

    // Attempt 3 is abandoned too: two abandoned runs, the budget is spent.
    let third = fx.running("w3", SHORT, LONG).await?;
    assert_eq!(third.attempt, 3);
    outlive(SHORT).await;
    assert_eq!(fx.store.recover_expired(100).await?.failed, [id.as_str()]);
    let stored = fx.stored(&id).await?;
    assert_eq!(stored.task.status, TaskStatus::Failed);
    assert_eq!(
        stored.task.error.map(|error| error.code),
        Some("task_attempts_exhausted".to_owned())
    );
    assert_eq!((stored.attempt, stored.retries), (3, 1));
    Ok(())
}
