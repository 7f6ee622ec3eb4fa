//! Fewer round trips per task: `take_active` claims and activates in one step, and
//! `finish_and_take` writes a worker's fenced result and starts its next task in one step. Both
//! keep every guarantee of the calls they stand for: one holder per task, fencing, attempts,
//! one terminal write.

use std::collections::HashSet;
use std::time::Duration;

use protocol::{TaskResult, TaskStatus};
use serde_json::json;
use store::{Phase, Rejection, Started, Transition};
use tokio::task::JoinSet;

use crate::support::{EMPTY_WAIT, Fx, Harness, LONG, SHORT, TestResult, outlive, rejection};

fn done(output: serde_json::Value) -> Transition {
    Transition::completed(TaskResult::output(output))
}

/// A queued task comes back active: attempt 1 counted, run deadline started, the stored lease
/// the one handed out; oldest first.
pub async fn take_active_claims_and_activates(h: &impl Harness) -> TestResult {
    let fx = Fx::ordered(h).await?;
    let first = fx.queued("a").await?;
    let second = fx.queued("b").await?;
    let started = fx.start("w1", LONG).await?;
    assert_eq!(started.claim.lease.task_id, first);
    assert_eq!(started.claim.previous_attempts, 0);
    assert_eq!(started.activation.attempt, 1);
    let stored = fx.stored(&first).await?;
    assert_eq!(stored.phase, Phase::Active);
    assert_eq!(stored.attempt, 1);
    assert_eq!(stored.lease.as_ref(), Some(&started.activation.lease));
    assert_eq!(
        stored.run_deadline_ms,
        Some(started.activation.run_deadline_ms)
    );
    assert_eq!(fx.status(&second).await?, Some(TaskStatus::Running));
    assert_eq!(fx.queue_depth().await?, 1);
    // The activation's lease fences writes like any other.
    assert!(
        fx.complete(&first, Some(&started.activation.lease), json!(1))
            .await?
            .applied()
            .is_some()
    );
    Ok(())
}

/// A task whose active lease was lost is started again with its attempt counted, so the
/// worker can tell a run past `max_attempts`.
pub async fn take_active_counts_attempts_after_recovery(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let id = fx.queued("a").await?;
    let lost = fx.start("w1", SHORT).await?;
    outlive(SHORT).await;
    assert_eq!(fx.store.recover_expired(100).await?.requeued, [id.as_str()]);
    let again = fx.start("w2", LONG).await?;
    assert_eq!(again.claim.previous_attempts, 1);
    assert_eq!(again.activation.attempt, 2);
    assert!(again.activation.lease.epoch > lost.activation.lease.epoch);
    let empty = fx
        .store
        .take_active(&fx.spec("w3", 1, LONG), EMPTY_WAIT)
        .await?;
    assert!(empty.is_empty(), "{empty:?}");
    Ok(())
}

/// A store that saw the queue run dry still finds, with a take that does not wait, a task
/// queued afterwards through it: the Redis store skips shards it believes empty (its take
/// hints), and queueing a task marks its shard again.
pub async fn a_take_without_waiting_finds_what_was_queued_after_the_queue_ran_dry(
    h: &impl Harness,
) -> TestResult {
    let fx = Fx::new(h).await?;
    fx.queued("first").await?;
    let first = fx.start("w1", LONG).await?;
    let dry = fx
        .store
        .take_active(&fx.spec("w1", 4, LONG), Duration::ZERO)
        .await?;
    assert!(dry.is_empty(), "{dry:?}");
    let later = fx.queued("later").await?;
    let taken = fx
        .store
        .take_active(&fx.spec("w1", 4, LONG), Duration::ZERO)
        .await?;
    let ids: Vec<_> = taken
        .iter()
        .map(|s| s.claim.lease.task_id.clone())
        .collect();
    assert_eq!(ids, [later]);
    assert_ne!(first.claim.lease.task_id, ids[0]);
    Ok(())
}

/// One call finishes a task (one terminal write, one result event) and starts the worker's
/// next; with nothing queued it starts nothing.
pub async fn finish_and_take_starts_the_next_task(h: &impl Harness) -> TestResult {
    let fx = Fx::ordered(h).await?;
    let a = fx.queued("a").await?;
    let b = fx.queued("b").await?;
    let first = fx.start("w1", LONG).await?;
    let finished = fx
        .store
        .finish_and_take(
            &first.activation.lease,
            done(json!("a")),
            Some(&fx.spec("w1", 1, LONG)),
        )
        .await?;
    let applied = finished.outcome.applied().ok_or("the finish was refused")?;
    assert_eq!(applied.status, TaskStatus::Completed);
    let [next] = finished.next.as_slice() else {
        return Err(format!("expected one next task, got {:?}", finished.next).into());
    };
    assert_eq!(next.claim.lease.task_id, b);
    assert_eq!(next.activation.attempt, 1);
    assert_eq!(fx.stored(&b).await?.phase, Phase::Active);
    let stored = fx.stored(&a).await?;
    assert_eq!(stored.phase, Phase::Terminal);
    assert_eq!(stored.lease, None);
    assert_eq!(
        stored.task.result.map(|result| result.output),
        Some(json!("a"))
    );
    // Two events: running at creation, one resultUpdate.
    let all = fx.subscribe(&a, Some(0)).await?;
    let names: Vec<_> = all.replay.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(names, ["statusUpdate", "resultUpdate"]);

    let last = fx
        .store
        .finish_and_take(
            &next.activation.lease,
            done(json!("b")),
            Some(&fx.spec("w1", 1, LONG)),
        )
        .await?;
    assert!(last.outcome.applied().is_some(), "{:?}", last.outcome);
    assert!(last.next.is_empty(), "{:?}", last.next);
    // Without a take spec nothing is taken.
    let c = fx.queued("c").await?;
    let third = fx.start("w1", LONG).await?;
    assert_eq!(third.claim.lease.task_id, c);
    let d = fx.queued("d").await?;
    let only = fx
        .store
        .finish_and_take(&third.activation.lease, done(json!("c")), None)
        .await?;
    assert!(only.outcome.applied().is_some() && only.next.is_empty());
    assert_eq!(fx.stored(&d).await?.phase, Phase::Queued);
    assert_eq!(fx.store.live_count().await?, 1);
    Ok(())
}

/// A finish whose lease was lost is reported fenced and writes nothing: the task stays with
/// the worker that recovered it, whose result lands. The stale worker's slot is free all the
/// same, so its call still starts the next task.
pub async fn a_fenced_out_finish_is_never_lost_or_applied(h: &impl Harness) -> TestResult {
    let fx = Fx::ordered(h).await?;
    let a = fx.queued("a").await?;
    let stale = fx.start("w1", SHORT).await?;
    outlive(SHORT).await;
    assert_eq!(fx.store.recover_expired(100).await?.requeued, [a.as_str()]);
    let fresh = fx.start("w2", LONG).await?;
    let b = fx.queued("b").await?;

    let refused = fx
        .store
        .finish_and_take(
            &stale.activation.lease,
            done(json!("stale")),
            Some(&fx.spec("w1", 1, LONG)),
        )
        .await?;
    assert_eq!(
        rejection(&refused.outcome)?,
        (Rejection::Fenced, Some(TaskStatus::Running))
    );
    let taken: Vec<_> = refused
        .next
        .iter()
        .map(|s| s.claim.lease.task_id.clone())
        .collect();
    assert_eq!(taken, [b]);
    let stored = fx.stored(&a).await?;
    assert_eq!(stored.lease.as_ref(), Some(&fresh.activation.lease));
    assert_eq!(stored.task.result, None);

    let landed = fx
        .store
        .finish_and_take(&fresh.activation.lease, done(json!("fresh")), None)
        .await?;
    assert!(landed.outcome.applied().is_some(), "{:?}", landed.outcome);
    assert_eq!(
        fx.stored(&a).await?.task.result.map(|r| r.output),
        Some(json!("fresh"))
    );
    // A second write with the winner's lease is refused: one terminal write.
    let again = fx
        .store
        .finish_and_take(&fresh.activation.lease, done(json!("again")), None)
        .await?;
    assert!(again.outcome.applied().is_none(), "{:?}", again.outcome);
    Ok(())
}

const WORKERS: usize = 8;
const TASKS: usize = 60;

/// Eight workers run a queue down, each finishing with `finish_and_take` and falling back to
/// `take_active` when its finish brought nothing: every task is started exactly once and
/// finished exactly once, and none is left behind.
pub async fn concurrent_finish_and_take_hands_each_task_out_once(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let mut ids = HashSet::new();
    for n in 0..TASKS {
        ids.insert(fx.queued(&format!("t{n}")).await?);
    }
    let fx = std::sync::Arc::new(fx);
    let mut workers = JoinSet::new();
    for w in 0..WORKERS {
        let fx = fx.clone();
        workers.spawn(async move {
            let worker = format!("w{w}");
            let spec = fx.spec(&worker, 1, LONG);
            let mut ran = Vec::new();
            let mut current: Vec<Started> = Vec::new();
            loop {
                if current.is_empty() {
                    current = fx.store.take_active(&spec, EMPTY_WAIT).await?;
                    if current.is_empty() {
                        return Ok::<_, store::StoreError>(ran);
                    }
                }
                let mut next = Vec::new();
                for started in current.drain(..) {
                    let id = started.claim.lease.task_id.clone();
                    let finished = fx
                        .store
                        .finish_and_take(&started.activation.lease, done(json!(id)), Some(&spec))
                        .await?;
                    ran.push((id, finished.outcome.applied().is_some()));
                    next.extend(finished.next);
                }
                current = next;
            }
        });
    }
    let mut seen = HashSet::new();
    while let Some(joined) = workers.join_next().await {
        for (id, applied) in joined?? {
            assert!(applied, "the only holder's finish of {id} was refused");
            assert!(seen.insert(id.clone()), "{id} was started twice");
        }
    }
    assert_eq!(seen, ids);
    for id in &ids {
        let stored = fx.stored(id).await?;
        assert_eq!(stored.task.status, TaskStatus::Completed);
        assert_eq!(stored.attempt, 1, "{id}");
        assert_eq!(
            stored.task.result.map(|result| result.output),
            Some(json!(id))
        );
    }
    assert_eq!(fx.store.live_count().await?, 0);
    assert_eq!(fx.queue_depth().await?, 0);
    Ok(())
}

/// `create_watched` answers like `create` followed by `subscribe(after_seq = 0)`: the snapshot
/// of the new task, its first event replayed, and every later event live, in order.
pub async fn create_watched_follows_the_run_from_its_first_event(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let new = fx.new_task("a", store::Admission::Queued);
    let id = new.task_id.clone();
    let (task, mut watched) = fx.store.create_watched(new).await?;
    assert_eq!(task.status, TaskStatus::Running);
    assert_eq!(watched.snapshot, task);
    assert_eq!(watched.snapshot_seq, 1);
    let fresh = fx.subscribe(&id, Some(0)).await?;
    assert_eq!(watched.replay, fresh.replay);
    assert_eq!(
        watched.replay.first().map(|e| (e.seq, e.event.as_str())),
        Some((1, "statusUpdate"))
    );

    let started = fx.start("w1", LONG).await?;
    fx.store
        .emit(&started.activation.lease, crate::support::progress(1))
        .await?;
    let finished = fx
        .store
        .finish_and_take(&started.activation.lease, done(json!("a")), None)
        .await?;
    assert!(finished.outcome.applied().is_some());
    let progress = crate::support::next_event(&mut watched.events).await?;
    assert_eq!((progress.seq, progress.data), (2, json!({"step": 1})));
    let result = crate::support::next_event(&mut watched.events).await?;
    assert_eq!((result.seq, result.event.as_str()), (3, "resultUpdate"));
    assert_eq!(result.data["result"]["output"], json!("a"));
    Ok(())
}
