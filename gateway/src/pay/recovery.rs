//! Settlement recovery: a sweep every gateway runs, for the settle answers that were lost.
//!
//! A credential stays `settling` when its gateway died between asking the facilitator to
//! settle and storing the receipt, or when the facilitator never answered (timeout, dropped
//! connection). Its record keeps the facilitator request. Once such a record is older than any
//! settle call can last, the sweep asks the facilitator whether that credential was settled, a
//! lookup that never settles anything ([`payments::Facilitator::settlement`]):
//!
//! - settled: the receipt is stored with the task (a task still held by the dead gateway's
//!   claim is committed to run: recovery queues it; a task that ended keeps its status), and
//!   the credential becomes `settled`;
//! - not settled: the credential becomes `void` (never reused; nothing was charged);
//! - the facilitator offers no lookup: the sweep stops and says so once; the records stay as
//!   evidence for reconciliation by hand.
//!
//! Every gateway may sweep at once: each transition is a compare-and-set on the record.

use std::sync::Arc;
use std::time::Duration;

use payments::{FacilitatorError, X402Version};
use shared::credentials::{CredentialState, Stuck};
use shared::store::TaskStore;
use tokio_util::sync::CancellationToken;

use super::Gate;
use super::admission::SettlingRecord;
use super::receipt::Receipt;

/// Records looked at per sweep.
const BATCH: usize = 50;

/// Sweeps every `interval` until `shutdown`. Records count as stuck `grace` after they entered
/// `settling` (longer than a settle call can take).
pub async fn run(
    gate: Arc<Gate>,
    store: Arc<dyn TaskStore>,
    interval: Duration,
    grace: Duration,
    shutdown: CancellationToken,
) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticks.tick() => {}
        }
        match sweep(&gate, store.as_ref(), grace).await {
            Ok(Sweep::Done(0)) => {}
            Ok(Sweep::Done(resolved)) => {
                tracing::info!(resolved, "settlement recovery resolved lost settle answers")
            }
            Ok(Sweep::Unsupported) => {
                tracing::warn!(
                    "the facilitator offers no settlement lookup; credentials left settling need reconciling by hand"
                );
                return;
            }
            Err(err) => tracing::warn!(error = %err, "settlement recovery sweep failed"),
        }
    }
}

enum Sweep {
    Done(usize),
    Unsupported,
}

async fn sweep(
    gate: &Gate,
    store: &dyn TaskStore,
    grace: Duration,
) -> Result<Sweep, shared::store::StoreError> {
    let mut resolved = 0;
    for stuck in gate.credentials.stuck(grace, BATCH).await? {
        match recover(gate, store, &stuck).await {
            Ok(true) => resolved += 1,
            Ok(false) => {}
            Err(FacilitatorError::Unsupported) => return Ok(Sweep::Unsupported),
            Err(err) => {
                tracing::warn!(task_id = %stuck.holder, error = %err, "settlement lookup failed; retried next sweep")
            }
        }
    }
    Ok(Sweep::Done(resolved))
}

/// Resolves one record; `Ok(false)` when another gateway got there first or the store failed
/// (retried next sweep).
async fn recover(
    gate: &Gate,
    store: &dyn TaskStore,
    stuck: &Stuck,
) -> Result<bool, FacilitatorError> {
    let void = || async {
        gate.credentials
            .resolve(&stuck.id, &stuck.holder, CredentialState::Void, None)
            .await
            .unwrap_or(false)
    };
    let Ok(record) = serde_json::from_str::<SettlingRecord>(&stuck.request) else {
        // Nothing to ask about (a record written without its request): it stays unusable.
        return Ok(void().await);
    };
    let request = record.request;
    let Some(settlement) = gate.facilitator.settlement(&request).await? else {
        tracing::info!(task_id = %stuck.holder, "lost settle answer: the credential was never settled");
        return Ok(void().await);
    };
    let version = if request.x402_version == 1 {
        X402Version::V1
    } else {
        X402Version::V2
    };
    let receipt = match &record.mpp_challenge_id {
        Some(challenge_id) => Receipt::mpp(challenge_id, gate.network.chain_id, &settlement),
        None => Receipt::of(version, &settlement),
    };
    match store
        .attach_receipt(&stuck.holder, &receipt.to_stored())
        .await
    {
        Ok(recorded) => {
            tracing::info!(task_id = %stuck.holder, transaction = %settlement.transaction, ?recorded, "lost settle answer recovered; receipt stored with the task")
        }
        Err(err) => {
            tracing::warn!(task_id = %stuck.holder, error = %err, "could not store a recovered receipt; retried next sweep");
            return Ok(false);
        }
    }
    Ok(gate
        .credentials
        .resolve(
            &stuck.id,
            &stuck.holder,
            CredentialState::Settled,
            Some(&receipt.value),
        )
        .await
        .unwrap_or(false))
}
