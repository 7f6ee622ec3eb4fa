//! `max_tasks`: live tasks are bounded, terminal ones never block creation, and expired
//! admissions are reaped before the bound is checked.

use protocol::TaskStatus;
use store::StoreError;

use crate::support::{BoxError, Fx, Harness, LONG, SHORT, StoreCfg, TestResult, outlive};

async fn fx_with_max(h: &impl Harness, max_tasks: u64) -> Result<Fx, BoxError> {
    let cfg = StoreCfg {
        max_tasks,
        one_shard: true,
        ..StoreCfg::default()
    };
    Fx::with_cfg(h, cfg).await
}

fn is_capacity(result: &Result<String, BoxError>, max: u64) -> bool {
    let error = result
        .as_ref()
        .err()
        .and_then(|error| error.downcast_ref::<StoreError>());
    matches!(error, Some(StoreError::Capacity { max: m }) if *m == max)
}

/// Upstream: maxTasks = 2, a third live task is refused.
pub async fn a_third_live_task_exceeds_max_tasks_two(h: &impl Harness) -> TestResult {
    let fx = fx_with_max(h, 2).await?;
    fx.queued("a").await?;
    fx.reserved("b", LONG).await?;
    let third = fx.queued("c").await;
    assert!(is_capacity(&third, 2), "{third:?}");
    assert_eq!(fx.store.get(&fx.id("c")).await?, None);
    assert_eq!(fx.store.live_count().await?, 2);
    assert_eq!(fx.queue_depth().await?, 1);
    Ok(())
}

/// Upstream: maxTasks = 2, terminal tasks make room (the oldest one is evicted where the store
/// counts them), a third live task is still refused.
pub async fn terminal_tasks_never_block_creation(h: &impl Harness) -> TestResult {
    let fx = fx_with_max(h, 2).await?;
    let a = fx.queued("a").await?;
    fx.queued("b").await?;
    assert!(fx.cancel(&a).await?.applied().is_some());
    fx.queued("c").await?;
    assert!(matches!(
        fx.status(&a).await?,
        None | Some(TaskStatus::Cancelled)
    ));
    assert_eq!(fx.store.live_count().await?, 2);
    let d = fx.queued("d").await;
    assert!(is_capacity(&d, 2), "{d:?}");
    Ok(())
}

/// Upstream: an abandoned admission is reaped (and may be evicted) when a new task is created.
pub async fn reaping_happens_before_capacity_is_enforced(h: &impl Harness) -> TestResult {
    let fx = fx_with_max(h, 2).await?;
    let abandoned = fx.reserved("abandoned", SHORT).await?;
    let unclaimed = fx.reserved("unclaimed", LONG).await?;
    let claim = fx.claim(&unclaimed, "gateway", SHORT).await?;
    outlive(SHORT).await;

    fx.queued("fresh").await?;
    for id in [&abandoned, &claim.lease.task_id] {
        let status = fx.status(id).await?;
        assert!(
            matches!(status, None | Some(TaskStatus::Cancelled)),
            "{id}: {status:?}"
        );
    }
    assert_eq!(fx.store.live_count().await?, 1);
    fx.queued("second").await?;
    Ok(())
}

/// An active task whose worker vanished is recoverable, not reaped: it keeps its slot.
pub async fn an_expired_active_lease_keeps_its_slot(h: &impl Harness) -> TestResult {
    let fx = fx_with_max(h, 1).await?;
    let id = fx.queued("a").await?;
    fx.running("w1", SHORT, LONG).await?;
    outlive(SHORT).await;
    let refused = fx.queued("b").await;
    assert!(is_capacity(&refused, 1), "{refused:?}");
    assert_eq!(fx.status(&id).await?, Some(TaskStatus::Running));
    Ok(())
}

pub async fn finishing_a_task_frees_its_slot(h: &impl Harness) -> TestResult {
    let fx = fx_with_max(h, 1).await?;
    let id = fx.queued("a").await?;
    let activation = fx.running("w1", LONG, LONG).await?;
    assert!(is_capacity(&fx.queued("b").await, 1));
    let done = fx
        .complete(&id, Some(&activation.lease), serde_json::json!(1))
        .await?;
    assert!(done.applied().is_some());
    assert_eq!(fx.store.live_count().await?, 0);
    fx.queued("b").await?;
    Ok(())
}
