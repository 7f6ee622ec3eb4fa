//! Claims, epochs and fencing: one claimer wins, a lease is good only while it is the task's
//! current one and live, and a worker that lost its lease lands no write at all.

use protocol::{TaskError, TaskStatus};
use serde_json::json;
use store::{Lease, Phase, Rejection};
use tokio::task::JoinSet;

use crate::support::{
    Fx, Harness, LONG, SHORT, TestResult, next_event, outlive, progress, rejection,
};

const CLAIMERS: usize = 50;

/// Fifty workers race for one reserved task: exactly one claim succeeds.
pub async fn fifty_concurrent_claimers_one_winner(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let id = fx.reserved("a", LONG).await?;
    let mut racers = JoinSet::new();
    for n in 0..CLAIMERS {
        let store = fx.store.clone();
        let id = id.clone();
        racers.spawn(async move { store.claim_execution(&id, &format!("w{n}"), LONG).await });
    }
    let mut winners = Vec::new();
    while let Some(joined) = racers.join_next().await {
        if let Some(claim) = joined?? {
            winners.push(claim);
        }
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    let stored = fx.stored(&id).await?;
    assert_eq!(stored.lease.as_ref(), Some(&winners[0].lease));
    assert_eq!(stored.phase, Phase::Prepared);
    Ok(())
}

/// Fifty workers block on one queue holding one task: exactly one of them gets it.
pub async fn fifty_concurrent_takers_one_winner(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let id = fx.queued("a").await?;
    let mut racers = JoinSet::new();
    for n in 0..CLAIMERS {
        let store = fx.store.clone();
        let entrypoints = vec![fx.entrypoint.clone()];
        racers.spawn(async move {
            store
                .take_next(
                    &entrypoints,
                    &format!("w{n}"),
                    LONG,
                    1,
                    crate::support::EMPTY_WAIT,
                )
                .await
        });
    }
    let mut taken = Vec::new();
    while let Some(joined) = racers.join_next().await {
        taken.extend(joined??);
    }
    let ids: Vec<_> = taken
        .iter()
        .map(|claim| claim.lease.task_id.clone())
        .collect();
    assert_eq!(ids, [id]);
    assert_eq!(fx.queue_depth().await?, 0);
    Ok(())
}

/// Upstream: two runtimes sharing a store, the second claim fails.
pub async fn a_live_claim_blocks_other_claimers(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let id = fx.reserved("a", LONG).await?;
    let first = fx.claim(&id, "w1", LONG).await?;
    assert_eq!(fx.store.claim_execution(&id, "w2", LONG).await?, None);
    assert_eq!(fx.store.claim_execution(&id, "w1", LONG).await?, None);
    fx.activate(&first.lease, LONG, LONG).await?;
    assert_eq!(fx.store.claim_execution(&id, "w2", LONG).await?, None);
    Ok(())
}

pub async fn every_claim_gets_a_new_epoch(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let id = fx.queued("a").await?;
    let mut epochs = Vec::new();
    for worker in ["w1", "w2", "w3"] {
        let claim = fx.take(worker, SHORT).await?;
        epochs.push(claim.lease.epoch);
        outlive(SHORT).await;
        let report = fx.store.recover_expired(100).await?;
        assert_eq!(report.requeued, [id.as_str()]);
    }
    assert!(
        epochs.windows(2).all(|pair| pair[0] < pair[1]),
        "{epochs:?}"
    );
    Ok(())
}

/// An expired lease is never revived, even when nobody recovered the task yet.
pub async fn an_expired_lease_is_dead(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let id = fx.reserved("a", LONG).await?;
    let claim = fx.claim(&id, "w1", SHORT).await?;
    outlive(SHORT).await;
    let lease = &claim.lease;
    assert!(!fx.store.renew_execution_claim(lease, LONG).await?);
    assert_eq!(
        fx.store
            .renew_leases(std::slice::from_ref(lease), LONG)
            .await?,
        [false]
    );
    assert_eq!(fx.store.activate_execution(lease, LONG, LONG).await?, None);
    assert!(!fx.store.hand_off(lease).await?);
    assert_eq!(fx.store.emit(lease, progress(1)).await?, None);
    let write = fx.complete(&id, Some(lease), json!("late")).await?;
    assert_eq!(
        rejection(&write)?,
        (Rejection::Fenced, Some(TaskStatus::Running))
    );
    Ok(())
}

/// Upstream: after an expired lease a second worker recovers the task and the stale worker's
/// writes are fenced out: renew, activate, progress, completion and failure.
pub async fn stale_writes_are_fenced_after_recovery(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let id = fx.queued("a").await?;
    let mut sub = fx.subscribe(&id, None).await?;
    let stale = fx.running("w1", SHORT, LONG).await?;
    outlive(SHORT).await;
    assert_eq!(fx.store.recover_expired(100).await?.requeued, [id.as_str()]);
    let claim = fx.take("w2", LONG).await?;
    let fresh = fx.activate(&claim.lease, LONG, LONG).await?;
    assert!(fresh.lease.epoch > stale.lease.epoch);

    let old = &stale.lease;
    assert!(!fx.store.renew_execution_claim(old, LONG).await?);
    assert_eq!(
        fx.store
            .renew_leases(&[old.clone(), fresh.lease.clone()], LONG)
            .await?,
        [false, true]
    );
    assert_eq!(fx.store.activate_execution(old, LONG, LONG).await?, None);
    assert!(!fx.store.hand_off(old).await?);
    assert_eq!(fx.store.emit(old, progress(99)).await?, None);
    let complete = fx.complete(&id, Some(old), json!("stale")).await?;
    assert_eq!(
        rejection(&complete)?,
        (Rejection::Fenced, Some(TaskStatus::Running))
    );
    let fail = fx
        .fail(&id, Some(old), TaskError::new("internal_error", "stale"))
        .await?;
    assert_eq!(
        rejection(&fail)?,
        (Rejection::Fenced, Some(TaskStatus::Running))
    );
    // The current holder's id with an older epoch: still fenced.
    let replayed = Lease {
        epoch: old.epoch,
        ..fresh.lease.clone()
    };
    assert_eq!(fx.store.emit(&replayed, progress(98)).await?, None);

    let seq = fx.store.emit(&fresh.lease, progress(2)).await?;
    let done = fx.complete(&id, Some(&fresh.lease), json!("fresh")).await?;
    assert!(done.applied().is_some(), "{done:?}");
    let stored = fx.stored(&id).await?;
    assert_eq!(
        stored.task.result.map(|result| result.output),
        Some(json!("fresh"))
    );

    // Subscribers saw only the current worker's writes.
    let first = next_event(&mut sub.events).await?;
    assert_eq!((Some(first.seq), first.data), (seq, json!({"step": 2})));
    let last = next_event(&mut sub.events).await?;
    assert_eq!(last.event, "resultUpdate");
    Ok(())
}

/// A worker whose claim expired before activation, and was requeued, cannot start the task.
pub async fn a_stale_prepared_claim_cannot_activate(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let id = fx.queued("a").await?;
    let stale = fx.take("w1", SHORT).await?;
    outlive(SHORT).await;
    assert_eq!(fx.store.recover_expired(100).await?.requeued, [id.as_str()]);
    let fresh = fx.take("w2", LONG).await?;
    assert_eq!(fresh.previous_attempts, 0, "nothing ran yet");
    assert_eq!(
        fx.store
            .activate_execution(&stale.lease, LONG, LONG)
            .await?,
        None
    );
    assert!(!fx.store.renew_execution_claim(&stale.lease, LONG).await?);
    let activation = fx.activate(&fresh.lease, LONG, LONG).await?;
    assert_eq!(activation.attempt, 1);
    Ok(())
}

/// A lease fences only its own task.
pub async fn a_lease_fences_only_its_own_task(h: &impl Harness) -> TestResult {
    let fx = Fx::ordered(h).await?;
    let a = fx.queued("a").await?;
    let b = fx.queued("b").await?;
    let claim_a = fx.take("w1", LONG).await?;
    let claim_b = fx.take("w1", LONG).await?;
    assert_eq!((&claim_a.lease.task_id, &claim_b.lease.task_id), (&a, &b));
    let write = fx
        .complete(&b, Some(&claim_a.lease), json!("wrong"))
        .await?;
    assert_eq!(rejection(&write)?.0, Rejection::Fenced);
    let done = fx
        .complete(&b, Some(&claim_b.lease), json!("right"))
        .await?;
    assert!(done.applied().is_some());
    Ok(())
}

/// Upstream: a heartbeat keeps a prepared claim alive (other claims still fail), then renew and
/// activate complete the run.
pub async fn heartbeat_keeps_a_prepared_claim_alive(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let id = fx.reserved("a", LONG).await?;
    let ttl = SHORT * 10;
    let claim = fx.claim(&id, "gateway", ttl).await?;
    assert!(fx.store.renew_execution_claim(&claim.lease, LONG).await?);
    let renewed = fx.stored(&id).await?.lease.ok_or("lease missing")?;
    assert!(renewed.expires_at_ms > claim.lease.expires_at_ms);
    assert_eq!(renewed.epoch, claim.lease.epoch);

    outlive(ttl).await;
    assert_eq!(fx.store.claim_execution(&id, "probe", LONG).await?, None);
    assert!(fx.store.recover_expired(100).await?.is_empty());
    assert_eq!(fx.store.reap_expired_admissions().await?, 0);
    assert!(fx.store.renew_execution_claim(&claim.lease, LONG).await?);
    let activation = fx.activate(&claim.lease, LONG, LONG).await?;
    let done = fx
        .complete(&id, Some(&activation.lease), json!("ok"))
        .await?;
    assert!(done.applied().is_some());
    Ok(())
}

/// `renew_execution_claim` is for prepared claims only; `renew_leases` renews both phases and
/// answers per lease.
pub async fn renewals_by_phase(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    fx.queued("a").await?;
    fx.queued("b").await?;
    fx.queued("c").await?;
    let prepared = fx.take("w1", LONG).await?;
    let active = fx.running("w1", LONG, LONG).await?;
    let gone = fx.take("w1", LONG).await?;
    assert!(fx.cancel(&gone.lease.task_id).await?.applied().is_some());

    assert!(
        fx.store
            .renew_execution_claim(&prepared.lease, LONG)
            .await?
    );
    assert!(!fx.store.renew_execution_claim(&active.lease, LONG).await?);
    let leases = [
        prepared.lease.clone(),
        active.lease.clone(),
        gone.lease.clone(),
    ];
    assert_eq!(
        fx.store.renew_leases(&leases, LONG).await?,
        [true, true, false]
    );
    assert_eq!(fx.store.renew_leases(&[], LONG).await?, Vec::<bool>::new());
    Ok(())
}

/// Progress is fenced and numbered after the last event.
pub async fn emit_numbers_events_while_the_lease_holds(h: &impl Harness) -> TestResult {
    let fx = Fx::new(h).await?;
    let id = fx.queued("a").await?;
    let claim = fx.take("w1", LONG).await?;
    assert_eq!(fx.store.emit(&claim.lease, progress(1)).await?, Some(2));
    let activation = fx.activate(&claim.lease, LONG, LONG).await?;
    assert_eq!(
        fx.store.emit(&activation.lease, progress(2)).await?,
        Some(3)
    );
    assert_eq!(fx.stored(&id).await?.seq, 3);
    assert!(fx.cancel(&id).await?.applied().is_some());
    assert_eq!(fx.store.emit(&activation.lease, progress(3)).await?, None);
    assert_eq!(fx.stored(&id).await?.seq, 4);
    Ok(())
}
