//! Settlement recovery: a sweep every gateway runs, for the settle answers that were lost.
//!
//! A credential stays `settling` when its gateway died between asking the facilitator to
//! settle and storing the receipt, or when the facilitator never answered (timeout, dropped
//! connection). Its record keeps the facilitator request, and its task is held for the
//! settlement ([`store::TaskStore::hold_for_settlement`]): no store sweep cancels or
//! requeues it, since it may have been paid for. Once such a record is older than any settle
//! call can last, the sweep asks the facilitator whether that credential was settled, a
//! lookup that never settles anything ([`payments::Facilitator::settlement`]):
//!
//! - settled: the receipt is stored with the task (a held task is queued at once; one still
//!   under a dead gateway's claim without a hold is committed to run, queued by recovery
//!   when that claim expires; a task that ended keeps its status), and the credential becomes
//!   `settled`;
//! - not settled: the held task is cancelled (nothing paid for it), then the credential
//!   becomes `void` (never reused; nothing was charged);
//! - the facilitator offers no lookup: the records stay `settling` and their tasks held, as
//!   evidence for reconciliation by hand; every sweep then only counts them, into the
//!   `taskcluster.settlements.unreconciled` gauge and a warning whenever the count changes.
//!
//! A settle=after payment (see [`super::admission::reserve`]) is `reserved` while its run goes
//! and falls due once no gateway can still be waiting to settle it: the sweep then releases it
//! (the record becomes `void`, the task is ended if it still runs), since nobody was handed the
//! run's result. Nothing is asked of the facilitator for it: nothing was sent to settle.
//!
//! Every gateway may sweep at once: each transition is a compare-and-set on the record.

use std::sync::Arc;
use std::time::Duration;

use payments::{FacilitatorError, X402Version};
use store::TaskStore;
use store::credentials::{CredentialState, Stuck};
use telemetry::metrics;
use tokio_util::sync::CancellationToken;

use super::Gate;
use super::admission::SettlingRecord;
use super::receipt::Receipt;

/// Records looked at per sweep.
const BATCH: usize = 50;
/// Records counted per sweep once the facilitator turned out to offer no lookup (a larger
/// count reads as "at least" this many).
const COUNT_LIMIT: usize = 1_000;

/// The latest count a sweep reported; unknown until the first sweep ends.
#[derive(Debug)]
pub struct LastCount(std::sync::atomic::AtomicU64);

impl Default for LastCount {
    fn default() -> Self {
        LastCount(std::sync::atomic::AtomicU64::new(u64::MAX))
    }
}

impl LastCount {
    pub fn set(&self, count: u64) {
        self.0.store(
            count.min(u64::MAX - 1),
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// `None` before the first sweep.
    pub fn get(&self) -> Option<u64> {
        let count = self.0.load(std::sync::atomic::Ordering::Relaxed);
        (count != u64::MAX).then_some(count)
    }
}

/// How long after entering `settling` a record counts as stuck: once no settle call can still
/// be running for it (the facilitator's timeout, and some slack).
pub fn grace(config: &crate::core::config::GatewayConfig) -> Duration {
    Duration::from_millis(config.facilitator_timeout_ms) + Duration::from_secs(2)
}

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
    // False once the facilitator said it offers no lookup: from then on the sweep only counts.
    let mut lookups = true;
    // The count of unreconcilable records last warned about.
    let mut warned: Option<usize> = None;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticks.tick() => {}
        }
        if lookups {
            match sweep(&gate, store.as_ref(), grace).await {
                Ok(Sweep::Done { resolved, unknown }) => {
                    if resolved > 0 {
                        tracing::info!(
                            resolved,
                            "settlement recovery resolved lost settle answers"
                        );
                    }
                    metrics::settlements_unreconciled(unknown as u64);
                    gate.unreconciled.set(unknown as u64);
                    continue;
                }
                Ok(Sweep::Unsupported) => lookups = false,
                Err(err) => {
                    tracing::warn!(error = %err, "settlement recovery sweep failed");
                    continue;
                }
            }
        }
        // Nothing can be looked up: count what waits for reconciliation by hand.
        match gate.credentials.stuck(grace, COUNT_LIMIT).await {
            Ok(stuck) => {
                let waiting = stuck.len();
                metrics::settlements_unreconciled(waiting as u64);
                gate.unreconciled.set(waiting as u64);
                if warned != Some(waiting) {
                    tracing::warn!(
                        waiting,
                        at_least = waiting >= COUNT_LIMIT,
                        "the facilitator offers no settlement lookup: credentials left settling wait for reconciliation by hand, and their paid tasks stay held until then"
                    );
                    warned = Some(waiting);
                }
            }
            Err(err) => {
                tracing::warn!(error = %err, "could not count the credentials left settling")
            }
        }
    }
}

enum Sweep {
    /// `resolved` records settled or voided; `unknown` whose lookup failed (retried).
    Done {
        resolved: usize,
        unknown: usize,
    },
    Unsupported,
}

async fn sweep(
    gate: &Gate,
    store: &dyn TaskStore,
    grace: Duration,
) -> Result<Sweep, store::StoreError> {
    let (mut resolved, mut unknown) = (0, 0);
    for stuck in gate.credentials.stuck(grace, BATCH).await? {
        match recover(gate, store, &stuck).await {
            Ok(Resolved::Settled | Resolved::Void) => resolved += 1,
            Ok(Resolved::No) => {}
            Err(FacilitatorError::Unsupported) => return Ok(Sweep::Unsupported),
            Err(err) => {
                unknown += 1;
                tracing::warn!(task_id = %stuck.holder, error = %err, "settlement lookup failed; retried next sweep")
            }
        }
    }
    Ok(Sweep::Done { resolved, unknown })
}

/// How one record was resolved (as an operator's action answers it: `settled`, `void`,
/// `unresolved`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Resolved {
    /// The receipt is stored with the task; the record is `settled`.
    Settled,
    /// The held task is cancelled; the record is `void`.
    Void,
    /// Nothing changed: another gateway got there first, or the store failed (retried).
    #[serde(rename = "unresolved")]
    No,
}

/// Resolves one record by asking the facilitator.
pub async fn recover(
    gate: &Gate,
    store: &dyn TaskStore,
    stuck: &Stuck,
) -> Result<Resolved, FacilitatorError> {
    if stuck.state == CredentialState::Reserved {
        // A settle=after run nobody settled by its due time: its gateway died or lost the
        // record, so nobody was handed the result. Nothing was asked of the facilitator:
        // released, and the task ended if it still runs.
        return Ok(unpaid(
            gate,
            store,
            stuck,
            Some("not charged: released by the settlement recovery (the run was never settled)"),
        )
        .await);
    }
    let Ok(record) = serde_json::from_str::<SettlingRecord>(&stuck.request) else {
        // Nothing to ask about (a record written without its request): it stays unusable.
        return Ok(void(gate, stuck, None).await);
    };
    let settlement = gate.facilitator.settlement(&record.request).await?;
    Ok(match settlement {
        Some(settlement) => settled(gate, store, stuck, &record, &settlement).await,
        None => unpaid(gate, store, stuck, None).await,
    })
}

/// Nothing was paid for `stuck`: the task held for this settlement must not run. Cancelled
/// first, so that a store failure leaves the record `settling` for the next sweep; then the
/// record becomes `void`, keeping `decision` when given (an operator's, see
/// [`super::reconcile`]).
pub async fn unpaid(
    gate: &Gate,
    store: &dyn TaskStore,
    stuck: &Stuck,
    decision: Option<&str>,
) -> Resolved {
    if !cancel_unpaid(store, &stuck.holder).await {
        return Resolved::No;
    }
    tracing::info!(task_id = %stuck.holder, "lost settle answer: the credential was never settled; its task is cancelled");
    void(gate, stuck, decision).await
}

/// `stuck` (its request `record`) was paid by `settlement`: the receipt is stored with the
/// task (a held task is queued), then the record becomes `settled`.
pub async fn settled(
    gate: &Gate,
    store: &dyn TaskStore,
    stuck: &Stuck,
    record: &SettlingRecord,
    settlement: &payments::wire::facilitator::SettleResponse,
) -> Resolved {
    let version = if record.request.x402_version == 1 {
        X402Version::V1
    } else {
        X402Version::V2
    };
    let receipt = match &record.mpp_challenge_id {
        Some(challenge_id) => Receipt::mpp(challenge_id, gate.network.chain_id, settlement),
        None => Receipt::of(version, settlement),
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
            return Resolved::No;
        }
    }
    let resolved = gate
        .credentials
        .resolve(
            &stuck.id,
            &stuck.holder,
            stuck.state,
            CredentialState::Settled,
            Some(&receipt.value),
        )
        .await
        .unwrap_or(false);
    if resolved {
        Resolved::Settled
    } else {
        Resolved::No
    }
}

/// `settling -> void`, keeping `decision` with the record when given.
async fn void(gate: &Gate, stuck: &Stuck, decision: Option<&str>) -> Resolved {
    let resolved = gate
        .credentials
        .resolve(
            &stuck.id,
            &stuck.holder,
            stuck.state,
            CredentialState::Void,
            decision,
        )
        .await
        .unwrap_or(false);
    if resolved {
        Resolved::Void
    } else {
        Resolved::No
    }
}

/// Ends the task held for a credential that was never settled (unfenced, as a caller's cancel:
/// the admission's claim is held or gone). True once it is ended or gone; false when the store
/// failed (retried next sweep).
async fn cancel_unpaid(store: &dyn TaskStore, task_id: &str) -> bool {
    let entrypoint = match store.get(task_id).await {
        Ok(Some(stored)) => stored.invocation.entrypoint,
        // Expired past retention: nothing left to end.
        Ok(None) => return true,
        Err(err) => {
            tracing::warn!(%task_id, error = %err, "could not read a task held for a settlement; retried next sweep");
            return false;
        }
    };
    match super::admission::end(store, task_id, &entrypoint).await {
        // Ended now, or already (its admission cancelled it, or a caller did).
        Ok(_) => true,
        Err(err) => {
            tracing::warn!(%task_id, error = %err, "could not cancel a task held for a settlement that never happened; retried next sweep");
            false
        }
    }
}
