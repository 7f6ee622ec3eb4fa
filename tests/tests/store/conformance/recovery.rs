//! What happens to a task whose lease or admission ran out: requeued (prepared after hand-off,
//! active with attempts left), failed (run deadline, attempts exhausted) or cancelled
//! (reservations and claims never handed off).

use std::collections::HashSet;
use std::time::Duration;

use protocol::TaskStatus;
use serde_json::json;
use store::{Admission, Phase, ReceiptRecorded};
use tokio::task::JoinSet;

use crate::support::{Fx, Harness, LONG, SHORT, TestResult, next_event, outlive};

pub async fn an_expired_claim_after_hand_off_is_requeued(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let id = fx.queued("a").await?;
    let claim = fx.take("w1", SHORT).await?;
    let seq = fx.stored(&id).await?.seq;
    outlive(SHORT).await;

    let report = fx.store.recover_expired(100).await?;
    assert_eq!(report.requeued, [id.as_str()]);
    assert!(report.failed.is_empty() && report.cancelled.is_empty());
    let stored = fx.stored(&id).await?;
    assert_eq!(stored.phase, Phase::Queued);
    assert_eq!(stored.task.status, TaskStatus::Running);
    assert_eq!(stored.lease, None);
    assert_eq!(stored.attempt, 0);
    assert_eq!(stored.seq, seq, "requeueing publishes nothing");
    assert_eq!(fx.queue_depth().await?, 1);
    assert!(fx.store.recover_expired(100).await?.is_empty());

    let again = fx.take("w2", LONG).await?;
    assert_eq!(again.previous_attempts, 0);
    assert!(again.lease.epoch > claim.lease.epoch);
    Ok(())
}

/// Active leases that run out are requeued with the next attempt, until the attempts are spent.
pub async fn an_abandoned_run_is_retried_then_failed(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let mut new = fx.new_task("a", Admission::Queued);
    new.max_attempts = 2;
    let id = fx.store.create(new).await?.task_id;
    let mut sub = fx.subscribe(&id, None).await?;

    let first = fx.running("w1", SHORT, LONG).await?;
    assert_eq!(first.attempt, 1);
    outlive(SHORT).await;
    assert_eq!(fx.store.recover_expired(100).await?.requeued, [id.as_str()]);
    let stored = fx.stored(&id).await?;
    assert_eq!((stored.phase, stored.attempt), (Phase::Queued, 1));

    let claim = fx.take("w2", LONG).await?;
    assert_eq!((claim.previous_attempts, claim.max_attempts), (1, 2));
    let second = fx.activate(&claim.lease, SHORT, LONG).await?;
    assert_eq!(second.attempt, 2);
    outlive(SHORT).await;

    let report = fx.store.recover_expired(100).await?;
    assert_eq!(report.failed, [id.as_str()]);
    assert!(report.requeued.is_empty());
    let stored = fx.stored(&id).await?;
    assert_eq!(stored.task.status, TaskStatus::Failed);
    assert_eq!(stored.phase, Phase::Terminal);
    let error = stored.task.error.ok_or("no error stored")?;
    assert_eq!(error.code, "task_attempts_exhausted");
    assert_eq!(error.message, "Task was abandoned by its worker 2 times");
    let event = next_event(&mut sub.events).await?;
    assert_eq!(event.event, "error");
    assert_eq!(
        event.data["error"]["code"],
        json!("task_attempts_exhausted")
    );
    assert_eq!(fx.queue_depth().await?, 0);
    assert_eq!(fx.store.live_count().await?, 0);
    Ok(())
}

/// Upstream: a run past its deadline fails with `task_timeout` and the profile's message.
pub async fn a_run_past_its_deadline_times_out(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let id = fx.queued("a").await?;
    let mut sub = fx.subscribe(&id, None).await?;
    let max_run = Duration::from_millis(40);
    let activation = fx.running("w1", SHORT, max_run).await?;
    let stored = fx.stored(&id).await?;
    assert_eq!(stored.run_deadline_ms, Some(activation.run_deadline_ms));
    outlive(max_run).await;

    let report = fx.store.recover_expired(100).await?;
    assert_eq!(report.failed, [id.as_str()]);
    let error = fx.stored(&id).await?.task.error.ok_or("no error stored")?;
    assert_eq!(error.code, "task_timeout");
    assert_eq!(error.message, "Task exceeded its 40ms execution limit");
    let event = next_event(&mut sub.events).await?;
    assert_eq!(
        event.data,
        json!({"taskId": id, "status": "failed",
               "error": {"code": "task_timeout", "message": "Task exceeded its 40ms execution limit"}})
    );
    Ok(())
}

/// Reservations that expire unclaimed and claims that expire before hand-off are cancelled,
/// by recovery as by reaping.
pub async fn expired_reservations_and_early_claims_are_cancelled(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let reserved = fx.reserved("reserved", SHORT).await?;
    let claimed = fx.reserved("claimed", LONG).await?;
    fx.claim(&claimed, "gateway", SHORT).await?;
    let mut sub = fx.subscribe(&reserved, None).await?;
    outlive(SHORT).await;

    let report = fx.store.recover_expired(100).await?;
    let cancelled: HashSet<_> = report.cancelled.iter().cloned().collect();
    assert_eq!(
        cancelled,
        HashSet::from([reserved.clone(), claimed.clone()])
    );
    assert!(report.requeued.is_empty() && report.failed.is_empty());
    for id in [&reserved, &claimed] {
        let stored = fx.stored(id).await?;
        assert_eq!(stored.task.status, TaskStatus::Cancelled);
        assert_eq!((stored.lease, stored.admission_expires_at_ms), (None, None));
    }
    let event = next_event(&mut sub.events).await?;
    assert_eq!(
        event.data,
        json!({"taskId": reserved, "status": "cancelled"})
    );
    assert_eq!(fx.queue_depth().await?, 0);
    Ok(())
}

/// Reaping cancels the same two kinds and leaves expired active leases to recovery.
pub async fn reaping_spares_active_leases(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let reserved = fx.reserved("reserved", SHORT).await?;
    let claimed = fx.reserved("claimed", LONG).await?;
    fx.claim(&claimed, "gateway", SHORT).await?;
    let active = fx.queued("active").await?;
    fx.running("w1", SHORT, LONG).await?;
    outlive(SHORT).await;

    assert_eq!(fx.store.reap_expired_admissions().await?, 2);
    assert_eq!(fx.status(&reserved).await?, Some(TaskStatus::Cancelled));
    assert_eq!(fx.status(&claimed).await?, Some(TaskStatus::Cancelled));
    let stored = fx.stored(&active).await?;
    assert_eq!(
        (stored.task.status, stored.phase),
        (TaskStatus::Running, Phase::Active)
    );
    assert_eq!(fx.store.reap_expired_admissions().await?, 0);
    assert_eq!(fx.store.recover_expired(100).await?.requeued, [active]);
    Ok(())
}

/// Recovery takes the earliest deadlines first and at most `limit` per sweep.
pub async fn recovery_follows_deadlines_and_limit(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    // Created in order with growing TTLs: deadlines are strictly ordered a < b < c.
    let a = fx.reserved("a", SHORT).await?;
    let b = fx.reserved("b", SHORT * 2).await?;
    let c = fx.reserved("c", SHORT * 3).await?;
    let live = fx.reserved("live", LONG).await?;
    outlive(SHORT * 3).await;

    assert_eq!(fx.store.recover_expired(2).await?.cancelled, [a, b]);
    assert_eq!(fx.store.recover_expired(2).await?.cancelled, [c]);
    assert!(fx.store.recover_expired(2).await?.is_empty());
    assert_eq!(fx.status(&live).await?, Some(TaskStatus::Running));
    Ok(())
}

pub async fn live_work_is_left_alone(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    fx.queued("queued").await?;
    fx.reserved("reserved", LONG).await?;
    fx.queued("prepared").await?;
    fx.queued("active").await?;
    fx.take("w1", LONG).await?;
    fx.take("w1", LONG).await?;
    let active = fx.take("w1", LONG).await?;
    fx.activate(&active.lease, LONG, LONG).await?;
    assert!(fx.store.recover_expired(100).await?.is_empty());
    assert_eq!(fx.store.reap_expired_admissions().await?, 0);
    assert_eq!(fx.store.live_count().await?, 4);
    Ok(())
}

const TASKS: usize = 10;
const SWEEPERS: usize = 8;

/// Every worker sweeps at once: each expired task is recovered by exactly one of them.
pub async fn concurrent_sweeps_recover_each_task_once(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let mut ids = HashSet::new();
    for n in 0..TASKS {
        ids.insert(fx.queued(&format!("t{n}")).await?);
    }
    for _ in 0..TASKS {
        fx.take("w1", SHORT).await?;
    }
    outlive(SHORT).await;

    let mut sweeps = JoinSet::new();
    for _ in 0..SWEEPERS {
        let store = fx.store.clone();
        sweeps.spawn(async move { store.recover_expired(100).await });
    }
    let mut requeued = Vec::new();
    while let Some(joined) = sweeps.join_next().await {
        let report = joined??;
        assert!(report.failed.is_empty() && report.cancelled.is_empty());
        requeued.extend(report.requeued);
    }
    assert_eq!(requeued.len(), TASKS, "{requeued:?}");
    assert_eq!(requeued.into_iter().collect::<HashSet<_>>(), ids);
    assert_eq!(fx.queue_depth().await?, TASKS as u64);
    Ok(())
}

/// A paid task whose receipt was stored while the gateway's claim was live is handed to the
/// ready queue in the same step: nothing is left for a gateway's death to lose, reaping never
/// cancels it, and the receipt stays with the task.
pub async fn a_receipt_commits_a_claimed_reservation_to_run(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let id = fx.reserved("a", LONG).await?;
    let claim = fx.claim(&id, "gateway", SHORT).await?;
    assert_eq!(
        fx.store.record_receipt(&claim.lease, "receipt-1").await?,
        ReceiptRecorded::Committed
    );
    let stored = fx.stored(&id).await?;
    assert_eq!(stored.phase, Phase::Queued);
    assert_eq!(stored.lease, None);
    assert_eq!(fx.queue_depth().await?, 1);
    // The released claim is no one's; its expiry changes nothing.
    assert!(!fx.store.hand_off(&claim.lease).await?);
    outlive(SHORT).await;
    assert_eq!(fx.store.reap_expired_admissions().await?, 0);
    assert!(fx.store.recover_expired(100).await?.is_empty());

    let stored = fx.stored(&id).await?;
    assert_eq!(stored.task.status, TaskStatus::Running);
    assert_eq!(stored.receipt.as_deref(), Some("receipt-1"));
    let run = fx.take("w1", LONG).await?;
    assert_eq!(run.lease.task_id, id);
    Ok(())
}

/// A receipt that arrives after the claim was lost (the reservation was reaped) is still
/// stored, on the terminal task, and commits nothing; a missing task stores nothing.
pub async fn a_late_receipt_is_attached_to_the_reaped_task(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let id = fx.reserved("a", LONG).await?;
    let claim = fx.claim(&id, "gateway", SHORT).await?;
    outlive(SHORT).await;
    assert_eq!(fx.store.reap_expired_admissions().await?, 1);

    assert_eq!(
        fx.store.record_receipt(&claim.lease, "receipt-2").await?,
        ReceiptRecorded::Attached
    );
    let stored = fx.stored(&id).await?;
    assert_eq!(stored.task.status, TaskStatus::Cancelled);
    assert_eq!(stored.receipt.as_deref(), Some("receipt-2"));
    assert!(fx.store.recover_expired(100).await?.is_empty());

    let gone = store::Lease {
        task_id: "no-such-task".into(),
        ..claim.lease.clone()
    };
    assert_eq!(
        fx.store.record_receipt(&gone, "receipt-3").await?,
        ReceiptRecorded::Missing
    );
    Ok(())
}
