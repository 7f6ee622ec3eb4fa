//! Claims held for a settlement (`hold_for_settlement`): a paid admission holds its claim
//! before it asks the facilitator to settle, because from then on the task may have been paid
//! for while nobody knows. A held task outlives its claim's deadline untouched by every sweep
//! and claimer; only the settlement's outcome moves it on: a receipt commits it to run, a
//! settlement that never happened cancels it.

use protocol::TaskStatus;
use store::{Admission, CasOutcome, Lease, Phase, ReceiptRecorded};

use std::time::Duration;

use crate::support::{BoxError, Fx, Harness, LONG, SHORT, TestResult, outlive, rejection};

/// A reserved task claimed by the admitting gateway with a claim of `ttl`, then held.
async fn held(fx: &Fx, name: &str, ttl: Duration) -> Result<Lease, BoxError> {
    let id = fx.reserved(name, LONG).await?;
    let claim = fx.claim(&id, "gateway", ttl).await?;
    if !fx.store.hold_for_settlement(&claim.lease).await? {
        return Err(format!("the live claim of {id} could not be held").into());
    }
    Ok(claim.lease)
}

/// A held task whose claim expired is neither reaped nor recovered, nobody else claims or runs
/// it, and it holds no place in the deadline index: a sweep of one task settles another.
pub async fn a_held_claim_outlives_its_deadline_untouched(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let lease = held(&fx, "held", SHORT).await?;
    let id = lease.task_id.clone();
    let stored = fx.stored(&id).await?;
    assert!(stored.settlement_held);
    assert_eq!(stored.phase, Phase::Prepared);
    // Another task's run whose lease runs out after the held claim's.
    fx.queued("other").await?;
    let other = fx.take("w1", SHORT).await?;
    outlive(SHORT).await;

    assert_eq!(fx.store.reap_expired_admissions().await?, 0);
    let report = fx.store.recover_expired(1).await?;
    assert_eq!(
        report.requeued,
        [other.lease.task_id.as_str()],
        "{report:?}"
    );
    assert!(report.failed.is_empty() && report.cancelled.is_empty());
    assert!(fx.store.recover_expired(100).await?.is_empty());

    let stored = fx.stored(&id).await?;
    assert_eq!(stored.task.status, TaskStatus::Running);
    assert_eq!(stored.phase, Phase::Prepared);
    assert!(stored.settlement_held);
    assert_eq!(fx.store.claim_execution(&id, "thief", LONG).await?, None);
    assert_eq!(fx.store.activate_execution(&lease, LONG, LONG).await?, None);
    assert_eq!(
        fx.store.lease_count().await?,
        0,
        "the held claim is indexed"
    );
    assert_eq!(fx.store.live_count().await?, 2);
    // Only the other task is in the queue.
    assert_eq!(
        fx.take("w2", LONG).await?.lease.task_id,
        other.lease.task_id
    );
    fx.take_nothing("w2").await?;
    Ok(())
}

/// The settlement recovery's receipt commits a held task whose claim lapsed: it is queued at
/// once and a worker runs it, receipt kept. Under a claim still live (its holder slow to
/// write the receipt), it is queued all the same, and the holder's receipt write that comes
/// after finds it committed: nothing is queued twice, nothing cancelled.
pub async fn a_recovered_receipt_commits_a_held_task_to_run(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let lease = held(&fx, "lapsed", SHORT).await?;
    let id = lease.task_id.clone();
    outlive(SHORT).await;
    assert!(fx.store.recover_expired(100).await?.is_empty());

    assert_eq!(
        fx.store.attach_receipt(&id, "receipt-1").await?,
        ReceiptRecorded::Committed
    );
    let stored = fx.stored(&id).await?;
    assert!(!stored.settlement_held);
    assert_eq!(stored.phase, Phase::Queued);
    assert_eq!(stored.lease, None);
    assert_eq!(stored.receipt.as_deref(), Some("receipt-1"));
    assert_eq!(
        fx.store.reap_expired_admissions().await?,
        0,
        "paid: never reaped"
    );
    assert!(fx.store.recover_expired(100).await?.is_empty());
    let run = fx.start("w1", LONG).await?;
    assert_eq!(run.claim.lease.task_id, id);
    assert_eq!(run.claim.invocation, fx.invocation("lapsed"));
    let done = fx
        .complete(&id, Some(&run.activation.lease), serde_json::json!("ran"))
        .await?;
    assert!(matches!(done, CasOutcome::Applied(_)), "{done:?}");
    let stored = fx.stored(&id).await?;
    assert_eq!(stored.task.status, TaskStatus::Completed);
    assert_eq!(stored.receipt.as_deref(), Some("receipt-1"));

    // The claim is still live, its holder late.
    let lease = held(&fx, "live", LONG).await?;
    let id = lease.task_id.clone();
    assert_eq!(
        fx.store.attach_receipt(&id, "receipt-2").await?,
        ReceiptRecorded::Committed
    );
    assert_eq!(fx.stored(&id).await?.phase, Phase::Queued);
    assert!(!fx.store.renew_execution_claim(&lease, LONG).await?);
    assert_eq!(
        fx.store.record_receipt(&lease, "receipt-2").await?,
        ReceiptRecorded::Committed
    );
    assert_eq!(fx.queue_depth().await?, 1);
    let run = fx.start("w2", LONG).await?;
    assert_eq!(run.claim.lease.task_id, id);
    // Still committed while it runs: the holder's retried write changes nothing.
    assert_eq!(
        fx.store.record_receipt(&lease, "receipt-2").await?,
        ReceiptRecorded::Committed
    );
    assert_eq!(fx.stored(&id).await?.phase, Phase::Active);
    fx.take_nothing("w3").await?;
    assert_eq!(fx.status(&id).await?, Some(TaskStatus::Running));
    Ok(())
}

/// The holder's receipt write hands a held task off as an unheld claim's does, live or past
/// its deadline (nobody else can have claimed it); renewals keep a held claim out of the
/// deadline index.
pub async fn the_holders_receipt_hands_a_held_task_off(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let lease = held(&fx, "live", LONG).await?;
    assert!(fx.store.renew_execution_claim(&lease, LONG).await?);
    assert_eq!(
        fx.store.lease_count().await?,
        0,
        "a renewal indexed the held claim"
    );
    assert!(fx.stored(&lease.task_id).await?.settlement_held);
    assert_eq!(
        fx.store.record_receipt(&lease, "receipt-1").await?,
        ReceiptRecorded::Committed
    );
    let stored = fx.stored(&lease.task_id).await?;
    assert_eq!(stored.phase, Phase::Queued);
    assert!(!stored.settlement_held);
    assert_eq!(stored.lease, None);

    let lapsed = held(&fx, "lapsed", SHORT).await?;
    outlive(SHORT).await;
    assert!(!fx.store.renew_execution_claim(&lapsed, LONG).await?);
    assert_eq!(
        fx.store.record_receipt(&lapsed, "receipt-2").await?,
        ReceiptRecorded::Committed
    );
    let stored = fx.stored(&lapsed.task_id).await?;
    assert_eq!(stored.phase, Phase::Queued);
    assert!(!stored.settlement_held);
    assert_eq!(fx.queue_depth().await?, 2);
    assert!(fx.store.recover_expired(100).await?.is_empty());
    Ok(())
}

/// A settlement that never happened cancels the held task (the unfenced cancel): it ends,
/// leaves every index, and a late receipt is only attached.
pub async fn a_held_task_can_be_cancelled(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let lease = held(&fx, "a", SHORT).await?;
    let id = lease.task_id.clone();
    outlive(SHORT).await;
    assert_eq!(fx.store.reap_expired_admissions().await?, 0);
    assert_eq!(fx.status(&id).await?, Some(TaskStatus::Running));

    let cancelled = fx.cancel(&id).await?;
    assert!(
        matches!(&cancelled, CasOutcome::Applied(task) if task.status == TaskStatus::Cancelled),
        "{cancelled:?}"
    );
    let stored = fx.stored(&id).await?;
    assert_eq!(stored.task.status, TaskStatus::Cancelled);
    assert!(!stored.settlement_held);
    assert_eq!(stored.lease, None);
    assert_eq!(fx.store.live_count().await?, 0);
    assert_eq!(fx.store.lease_count().await?, 0);
    assert!(fx.store.recover_expired(100).await?.is_empty());
    assert_eq!(
        fx.store.record_receipt(&lease, "late").await?,
        ReceiptRecorded::Attached
    );
    assert_eq!(
        fx.store.attach_receipt(&id, "late").await?,
        ReceiptRecorded::Attached
    );
    assert_eq!(fx.status(&id).await?, Some(TaskStatus::Cancelled));
    h.check_no_leaks().await?;
    Ok(())
}

/// Holding is fenced like every claim operation: only the task's current live `prepared`
/// claim holds it.
pub async fn holding_is_fenced(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    // An expired claim, and then one that lost the task to a newer claim.
    let id = fx.reserved("a", LONG).await?;
    let stale = fx.claim(&id, "gateway", SHORT).await?.lease;
    outlive(SHORT).await;
    assert!(!fx.store.hold_for_settlement(&stale).await?);
    let current = fx.claim(&id, "gateway-2", LONG).await?.lease;
    assert!(!fx.store.hold_for_settlement(&stale).await?);
    let forged = Lease {
        epoch: current.epoch + 1,
        ..current.clone()
    };
    assert!(!fx.store.hold_for_settlement(&forged).await?);
    assert!(!fx.stored(&id).await?.settlement_held);
    assert!(fx.store.hold_for_settlement(&current).await?);
    assert!(fx.stored(&id).await?.settlement_held);

    // Not prepared: handed off, or running.
    let queued = fx.reserved("b", LONG).await?;
    let claim = fx.claim(&queued, "gateway", LONG).await?;
    assert!(fx.store.hand_off(&claim.lease).await?);
    assert!(!fx.store.hold_for_settlement(&claim.lease).await?);
    let run = fx.start("w1", LONG).await?;
    assert!(!fx.store.hold_for_settlement(&run.activation.lease).await?);
    let stored = fx.stored(&queued).await?;
    assert_eq!(stored.phase, Phase::Active);
    assert!(!stored.settlement_held);

    // A finished task.
    let done = fx
        .store
        .create(fx.new_task("c", Admission::Reserved { ttl: LONG }))
        .await?;
    let claim = fx.claim(&done.task_id, "gateway", LONG).await?;
    fx.cancel(&done.task_id).await?;
    assert!(!fx.store.hold_for_settlement(&claim.lease).await?);
    let refused = fx.cancel(&done.task_id).await?;
    assert_eq!(rejection(&refused)?.1, Some(TaskStatus::Cancelled));
    Ok(())
}
