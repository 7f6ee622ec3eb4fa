//! Subscriptions: owner isolation, a gap-free hand-over from snapshot to live events, and
//! replay from the per-task log.

use protocol::TaskStatus;
use serde_json::json;
use store::{Admission, ListQuery, StoredEvent};
use tokio::task::JoinSet;

use crate::support::{
    BoxError, Fx, Harness, LONG, SHORT, TestResult, next_event, other_owner, outlive, progress,
};

fn seqs(events: &[StoredEvent]) -> Vec<u64> {
    events.iter().map(|event| event.seq).collect()
}

/// Upstream: owner isolation across get, list, cancel and subscribe. The store answers a
/// foreign owner exactly as it answers for a missing task; `get` exposes the owner so callers
/// can refuse reads and cancels.
pub async fn owner_isolation_across_reads(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let id = fx.queued("mine").await?;
    let stranger = other_owner();

    for after_seq in [None, Some(0)] {
        let foreign = fx.store.subscribe(&id, &stranger, after_seq).await?;
        let missing = fx
            .store
            .subscribe(&fx.id("missing"), &fx.owner, after_seq)
            .await?;
        assert!(foreign.is_none() && missing.is_none());
    }
    let page = fx.store.list(&stranger, &ListQuery::default()).await?;
    assert_eq!((page.tasks.len(), page.total, page.has_more), (0, 0, false));
    let stored = fx.stored(&id).await?;
    assert_eq!(stored.owner, fx.owner);
    assert_ne!(stored.owner, stranger);

    // The stranger's own task is invisible to the first owner in turn.
    let mut theirs = fx.new_task("theirs", store::Admission::Queued);
    theirs.owner = stranger.clone();
    fx.store.create(theirs).await?;
    let mine = fx.store.list(&fx.owner, &ListQuery::default()).await?;
    let ids: Vec<_> = mine.tasks.iter().map(|task| task.task_id.clone()).collect();
    assert_eq!(ids, [id.as_str()]);
    assert!(
        fx.store
            .subscribe(&fx.id("theirs"), &fx.owner, None)
            .await?
            .is_none()
    );
    assert!(fx.subscribe(&id, None).await.is_ok());
    Ok(())
}

const EMITS: u64 = 200;
const SUBSCRIBERS: usize = 8;

/// Subscribers joining while a worker publishes see every event after their snapshot, in
/// order, without gaps or duplicates, whenever they join.
pub async fn subscribe_then_snapshot_misses_nothing(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let id = fx.queued("a").await?;
    let activation = fx.running("w1", LONG, LONG).await?;
    let final_seq = EMITS + 2;

    let mut tasks: JoinSet<Result<(), BoxError>> = JoinSet::new();
    for n in 0..SUBSCRIBERS {
        let store = fx.store.clone();
        let (id, owner) = (id.clone(), fx.owner.clone());
        tasks.spawn(async move {
            for _ in 0..n * 25 {
                tokio::task::yield_now().await;
            }
            let after_seq = (n % 2 == 1).then_some(0);
            let mut sub = store
                .subscribe(&id, &owner, after_seq)
                .await?
                .ok_or("subscription refused")?;
            let snapshot_seq = sub.snapshot_seq;
            if after_seq.is_some() && !sub.replay.is_empty() {
                let replayed = seqs(&sub.replay);
                let first = replayed[0];
                assert_eq!(replayed, (first..=snapshot_seq).collect::<Vec<_>>());
            }
            if snapshot_seq == final_seq {
                assert_eq!(sub.snapshot.status, TaskStatus::Completed);
                return Ok(());
            }
            assert_eq!(sub.snapshot.status, TaskStatus::Running);
            let mut expected = snapshot_seq + 1;
            loop {
                let event = next_event(&mut sub.events).await?;
                assert_eq!(event.seq, expected, "subscriber {n} after {snapshot_seq}");
                if event.event == "resultUpdate" {
                    assert_eq!(event.seq, final_seq);
                    return Ok(());
                }
                assert_eq!(event.data, json!({"step": event.seq - 1}));
                expected += 1;
            }
        });
    }
    for step in 1..=EMITS {
        let seq = fx.store.emit(&activation.lease, progress(step)).await?;
        assert_eq!(seq, Some(step + 1));
        tokio::task::yield_now().await;
    }
    let done = fx
        .complete(&id, Some(&activation.lease), json!("ok"))
        .await?;
    assert!(done.applied().is_some());
    while let Some(joined) = tasks.join_next().await {
        joined??;
    }
    Ok(())
}

/// Replay gives the logged events after `after_seq` up to the snapshot; live events follow.
pub async fn replay_resumes_after_a_sequence_number(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let id = fx.queued("a").await?;
    let claim = fx.take("w1", LONG).await?;
    for step in 1..=3 {
        fx.store.emit(&claim.lease, progress(step)).await?;
    }

    let fresh = fx.subscribe(&id, None).await?;
    assert_eq!((fresh.snapshot_seq, fresh.replay.len()), (4, 0));
    let all = fx.subscribe(&id, Some(0)).await?;
    assert_eq!(seqs(&all.replay), [1, 2, 3, 4]);
    assert_eq!(all.replay[0].event, "statusUpdate");
    assert_eq!(all.replay[3].data, json!({"step": 3}));
    let caught_up = fx.subscribe(&id, Some(4)).await?;
    assert!(caught_up.replay.is_empty());
    let mut resumed = fx.subscribe(&id, Some(2)).await?;
    assert_eq!(seqs(&resumed.replay), [3, 4]);
    assert_eq!(resumed.snapshot_seq, 4);

    fx.store.emit(&claim.lease, progress(4)).await?;
    let live = next_event(&mut resumed.events).await?;
    assert_eq!((live.seq, live.data), (5, json!({"step": 4})));
    Ok(())
}

/// A finished task replays exactly what its subscribers heard, event by event, whichever way
/// it ended (a worker's result after progress, a recovered run's failure, a cancel): the
/// replay is the creation event followed by the live feed, data included, and ends with the
/// terminal event, also after a later subscriber resumes mid-way.
pub async fn a_finished_task_replays_exactly_what_it_published(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let completed = fx.queued("completed").await?;
    let mut heard = fx.subscribe(&completed, None).await?;
    let activation = fx.running("w1", LONG, LONG).await?;
    fx.store.emit(&activation.lease, progress(1)).await?;
    let done = fx
        .complete(
            &completed,
            Some(&activation.lease),
            json!({"i": 7, "s": "x"}),
        )
        .await?;
    assert!(done.applied().is_some(), "{done:?}");
    let mut live = vec![
        next_event(&mut heard.events).await?,
        next_event(&mut heard.events).await?,
    ];

    let mut once = fx.new_task("recovered", Admission::Queued);
    once.max_attempts = 1;
    let recovered = fx.store.create(once).await?.task_id;
    let mut heard_failed = fx.subscribe(&recovered, None).await?;
    fx.running("w1", SHORT, LONG).await?;
    outlive(SHORT).await;
    let report = fx.store.recover_expired(100).await?;
    assert_eq!(report.failed, [recovered.as_str()]);
    let failed_live = vec![next_event(&mut heard_failed.events).await?];

    let cancelled = fx.queued("cancelled").await?;
    let mut heard_cancel = fx.subscribe(&cancelled, None).await?;
    assert!(fx.cancel(&cancelled).await?.applied().is_some());
    let cancel_live = vec![next_event(&mut heard_cancel.events).await?];

    for (id, mut published, end) in [
        (&completed, std::mem::take(&mut live), "resultUpdate"),
        (&recovered, failed_live, "error"),
        (&cancelled, cancel_live, "statusUpdate"),
    ] {
        let replay = fx.subscribe(id, Some(0)).await?;
        let first = replay.replay.first().ok_or("empty replay")?;
        assert_eq!(
            (first.seq, first.event.as_str(), &first.data),
            (
                1,
                "statusUpdate",
                &json!({"taskId": id, "status": "running"})
            )
        );
        let mut expected = vec![first.clone()];
        expected.append(&mut published);
        assert_eq!(replay.replay, expected, "replay of {id}");
        assert_eq!(replay.snapshot_seq, expected.len() as u64);
        let last = expected.last().ok_or("no events")?;
        assert_eq!(last.event, end);
        assert_ne!(last.data["status"], "running");
        let resumed = fx.subscribe(id, Some(1)).await?;
        assert_eq!(resumed.replay, expected[1..]);
    }
    Ok(())
}

/// A subscription hears only its own task.
pub async fn events_of_other_tasks_stay_out(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let watched = fx.reserved("watched", LONG).await?;
    let other = fx.reserved("other", LONG).await?;
    let mut sub = fx.subscribe(&watched, None).await?;
    let watched_claim = fx.claim(&watched, "w1", LONG).await?;
    let other_claim = fx.claim(&other, "w1", LONG).await?;

    fx.store.emit(&other_claim.lease, progress(1)).await?;
    assert!(fx.cancel(&other).await?.applied().is_some());
    fx.store.emit(&watched_claim.lease, progress(7)).await?;
    let event = next_event(&mut sub.events).await?;
    assert_eq!((event.seq, event.data), (2, json!({"step": 7})));
    Ok(())
}

/// Dropping one subscription leaves the others receiving.
pub async fn dropping_a_subscription_leaves_the_others(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let id = fx.queued("a").await?;
    let dropped = fx.subscribe(&id, None).await?;
    let mut kept = fx.subscribe(&id, None).await?;
    drop(dropped);
    assert!(fx.cancel(&id).await?.applied().is_some());
    let event = next_event(&mut kept.events).await?;
    assert_eq!(event.data, json!({"taskId": id, "status": "cancelled"}));
    Ok(())
}
