//! Durable admission of a paid request (task, invoke or stream), in the upstream's order:
//!
//! ```text
//! per-payer rate limit (see super::payer_rate: 429, nothing claimed or charged)
//!   -> wait for a pending place (per gateway and per payer: see super::pending)
//!   -> claim the credential (Redis, atomic: one credential, one execution)
//!   -> verify                                   (refused or failed: release, 402/503)
//!   -> reserve the task (durable, counted against capacity, expires if abandoned)
//!   -> claim it (prepared; renewed by a heartbeat while the facilitator works)
//!   -> credential `settling` (with the request), task held for the settlement, settle
//!                                               (refused: cancel, 402 settlement_failed;
//!                                                no answer: the task stays held, 503
//!                                                settlement_failed; recovery runs or
//!                                                cancels it once the outcome is known)
//!   == the rail is irreversible from here ==
//!   -> credential `settled` with the receipt, and, in one script, the receipt stored with the
//!      task and the task handed to the ready queue
//!                                               (any later failure: 200 with the task and
//!                                                its receipt, or 503 task_terminalization_failed;
//!                                                a terminal status is never invented)
//! ```
//!
//! A gateway killed anywhere in here loses nothing: before settlement the reservation is
//! reaped to `cancelled` and nothing was charged; once the receipt is stored the task is
//! already queued and runs. Killed between the facilitator's settle and the receipt write, it
//! leaves the credential `settling` with the facilitator request and the task held (no store
//! sweep cancels a held task, however long ago its claim expired): the settlement recovery
//! sweep of any gateway looks the settlement up, stores the receipt with the task and commits
//! it to run, or cancels it when nothing was settled (see [`super::recovery`]).

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use payments::mpp::Problem;
use payments::wire::facilitator::FacilitatorRequest;
use payments::{Credential, Terms, X402Version};
use protocol::{ErrorCode, Task, TaskStatus};
use serde_json::Value;
use store::credentials::{ClaimOutcome, CredentialState};
use store::{Admission, CasOutcome, Lease, ReceiptRecorded, StoreError, TaskStore, Transition};
use telemetry::metrics;
use tokio::task::JoinHandle;

use super::receipt::Receipt;
use super::{FaultPoint, Payment};
use crate::admit::{self, Admit};
use crate::error::ApiError;
use crate::state::AppState;
use payments::unix_now;

/// Times the receipt write is tried before the answer says the task's state is unconfirmed.
const RECEIPT_WRITE_TRIES: u32 = 3;

/// `Retry-After` of a settlement without an answer: about when the settlement recovery sweep
/// (every 5 s by default, once no settle call can still run) may have learned the outcome.
const HELD_RETRY_AFTER_SECS: u64 = 5;

/// A paid request that got through the rail: its task and receipt.
#[derive(Debug)]
pub struct Paid {
    pub task_id: String,
    /// `Running` once handed off; a terminal status when the task ended before it could run
    /// (its claim was lost after settlement): the caller answers 200 with it.
    pub status: TaskStatus,
    /// The task as created (status `running`), for callers that follow it.
    pub created: Task,
    pub receipt: Receipt,
}

/// What a paid request gets instead of a task.
#[derive(Debug)]
pub enum Refused {
    /// An answer to send as it is (402 challenge, 409, 503...).
    Answer(Response),
    /// Settled, but the task's state could not be confirmed: `503 task_terminalization_failed`
    /// with the task id and token (the caller adds the token) and the receipt.
    Unconfirmed { task_id: String, receipt: Receipt },
}

impl From<ApiError> for Refused {
    fn from(err: ApiError) -> Self {
        Refused::Answer(err.into_response())
    }
}

/// What a credential record in `settling` keeps: the facilitator request (to look a lost
/// settlement up) and, for an MPP payment, the challenge it answered (for its receipt).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SettlingRecord {
    #[serde(flatten)]
    pub request: FacilitatorRequest,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mpp_challenge_id: Option<String>,
}

/// Admits `admit` as a task paid by `payment` (its credential passed the offline checks).
pub async fn admit_paid(
    state: &AppState,
    payment: Payment<'_>,
    admit: Admit<'_>,
) -> Result<Paid, Refused> {
    let Payment {
        gate,
        terms,
        checked,
        rail,
        entitles,
    } = payment;
    let terms = &terms;
    let credential = checked.credential;
    let store = state.store.clone();
    let entrypoint = admit.entrypoint.to_owned();
    let task_id = uuid::Uuid::new_v4().to_string();
    let nonce_key = credential.nonce_key().to_string();

    // A full cluster says so before the facilitator is asked anything (advisory: the
    // reservation below enforces capacity).
    if let Ok(live) = store.live_count().await
        && live >= state.config.max_tasks
    {
        return Err(ApiError::from(StoreError::Capacity {
            max: state.config.max_tasks,
        })
        .into());
    }

    // One payer may not take every paid slot: over its rate it is refused before its
    // credential is claimed, verified or settled.
    if let Some(payer_rate) = &gate.payer_rate
        && let Some(refused) = payer_rate.check(checked.payer).await
    {
        return Err(Refused::Answer(refused));
    }

    // Forged credentials cost nothing: each waits its turn for one of this gateway's pending
    // places, and a payer the facilitator just refused is refused again without asking it.
    let pending = match gate.pending.enter(checked.payer).await {
        Ok(pending) => pending,
        Err(super::pending::Busy::Refused) => {
            return Err(Refused::Answer(rail.refused(
                terms,
                Problem::VerificationFailed,
                "the facilitator refused this payer's payment moments ago; retry later",
            )));
        }
        Err(busy) => return Err(busy.answer().into()),
    };

    // One credential, one execution: recorded before anything else, kept past its validity.
    let keep = Duration::from_secs(
        credential
            .authorization
            .valid_before
            .saturating_sub(unix_now())
            .saturating_add(3600),
    );
    match gate
        .credentials
        .claim(&nonce_key, &task_id, keep)
        .await
        .map_err(ApiError::from)?
    {
        ClaimOutcome::Taken => {}
        ClaimOutcome::Held(CredentialState::Settled | CredentialState::Void) => {
            // For MPP this is the challenge id used twice: the nonce is its hash.
            return Err(Refused::Answer(rail.refused(
                terms,
                Problem::InvalidChallenge,
                "payment credential was already used",
            )));
        }
        ClaimOutcome::Held(_) => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                ErrorCode::PaymentInProgress,
                "This payment credential is being used by another request",
            )
            .retry_after(1)
            .into());
        }
    }
    let release = || async {
        if let Err(err) = gate.credentials.release(&nonce_key, &task_id).await {
            tracing::warn!(%task_id, error = %err, "could not release a payment credential");
        }
    };

    // The facilitator's verdict before anything is reserved: a credential that cannot pay
    // never holds a task slot.
    let request = facilitator_request(&credential, terms);
    match gate.facilitator.verify(&request).await {
        Ok(verdict) if verdict.is_valid => {}
        Ok(verdict) => {
            release().await;
            gate.pending.refused(checked.payer);
            let reason = verdict
                .invalid_reason
                .unwrap_or_else(|| "payment was not accepted".into());
            tracing::info!(%task_id, payer = %checked.payer, %reason, "payment refused by the facilitator");
            return Err(Refused::Answer(rail.refused(
                terms,
                Problem::VerificationFailed,
                &reason,
            )));
        }
        Err(err) => {
            release().await;
            tracing::warn!(%task_id, error = %err, "payment verification failed");
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::PaymentVerificationFailed,
                "The payment could not be verified; retry shortly",
            )
            .retry_after(1)
            .into());
        }
    }
    drop(pending);

    // Durable state before anything is settled.
    let created = match admit::create_as(
        state,
        admit,
        task_id.clone(),
        Admission::Reserved {
            ttl: gate.admission_ttl,
        },
    )
    .await
    {
        Ok(task) => task,
        Err(err) => {
            release().await;
            return Err(err.into());
        }
    };
    let holder = format!("gateway:{task_id}");
    let lease = match store
        .claim_execution(&task_id, &holder, gate.admission_lease)
        .await
    {
        Ok(Some(claim)) => claim.lease,
        Ok(None) | Err(_) => {
            cancel(store.as_ref(), &task_id, &entrypoint).await;
            release().await;
            return Err(execution_failed().into());
        }
    };
    let heartbeat = Heartbeat::start(store.clone(), lease.clone(), gate.admission_lease);

    // From `settling` on, the credential is never given back: funds may move even when the
    // facilitator's answer is lost. The record keeps the request, so that a lost answer can be
    // looked up later (see `recovery`).
    let request_text = serde_json::to_string(&SettlingRecord {
        request: request.clone(),
        mpp_challenge_id: rail.challenge_id().map(str::to_owned),
    })
    .unwrap_or_default();
    let advanced = gate
        .credentials
        .advance(
            &nonce_key,
            &task_id,
            CredentialState::Claimed,
            CredentialState::Settling,
            Some(&request_text),
        )
        .await;
    if !matches!(advanced, Ok(true)) {
        heartbeat.stop();
        cancel(store.as_ref(), &task_id, &entrypoint).await;
        release().await;
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::PaymentVerificationFailed,
            "The payment could not be recorded; retry shortly",
        )
        .retry_after(1)
        .into());
    }
    // Held before the facilitator is asked: once it is, the task may be paid for even if no
    // answer comes back, so no sweep may cancel it until the settlement is known (`recovery`).
    if !matches!(store.hold_for_settlement(&lease).await, Ok(true)) {
        // Nothing was settled; the record stays `settling` (never given back) and the
        // settlement recovery voids it.
        heartbeat.stop();
        cancel(store.as_ref(), &task_id, &entrypoint).await;
        tracing::warn!(%task_id, "could not hold a paid task for its settlement; not settled");
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::PaymentVerificationFailed,
            "The payment could not be recorded; nothing was charged, retry with a new payment",
        )
        .retry_after(1)
        .into());
    }
    let settlement = match gate.facilitator.settle(&request).await {
        Ok(settlement) if settlement.success => settlement,
        Ok(settlement) => {
            heartbeat.stop();
            cancel(store.as_ref(), &task_id, &entrypoint).await;
            let reason = settlement
                .error_reason
                .unwrap_or_else(|| "settlement was refused".into());
            tracing::info!(%task_id, payer = %checked.payer, %reason, "settlement refused");
            return Err(ApiError::new(
                StatusCode::PAYMENT_REQUIRED,
                ErrorCode::SettlementFailed,
                format!("Payment settlement failed: {reason}"),
            )
            .into());
        }
        Err(err) => {
            // No answer: the funds may have moved. The task stays held (not cancelled) and the
            // credential spent until the settlement recovery learns the outcome: settled, the
            // receipt is stored and the task runs; never settled, the task is cancelled.
            heartbeat.stop();
            tracing::error!(%task_id, payer = %checked.payer, error = %err, "settlement outcome unknown; the credential stays spent and the task is held until settlement recovery learns it");
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::SettlementFailed,
                format!(
                    "The payment's settlement could not be confirmed; task {task_id} is held until the settlement is known: it runs if the payment settled and is cancelled if not"
                ),
            )
            .retry_after(HELD_RETRY_AFTER_SECS)
            .into());
        }
    };

    // == irreversible from here: every answer carries the receipt ==
    FaultPoint::trip(gate.fault_point, FaultPoint::AfterSettle);
    let receipt = rail.receipt(terms, credential.version, &settlement);
    if entitles {
        // The payer may sign in (SIWX) instead of paying again.
        super::siwx::entitle(gate, &entrypoint, checked.payer).await;
    }
    tracing::info!(%task_id, payer = %checked.payer, transaction = %settlement.transaction, "payment settled");
    // The credential record and the task are written at once: independent keys, and the
    // answer waits for both anyway.
    let (settled, recorded) = tokio::join!(
        gate.credentials.advance(
            &nonce_key,
            &task_id,
            CredentialState::Settling,
            CredentialState::Settled,
            Some(&receipt.value),
        ),
        record_receipt(store.as_ref(), &lease, &receipt),
    );
    if let Err(err) = settled {
        // The record stays `settling`, which refuses reuse just as well.
        tracing::warn!(%task_id, error = %err, "could not mark a credential settled");
    }
    let status = match recorded {
        // Stored and queued in one step: it runs.
        Some(ReceiptRecorded::Committed) => {
            FaultPoint::trip(gate.fault_point, FaultPoint::AfterReceipt);
            TaskStatus::Running
        }
        Some(ReceiptRecorded::Attached) => {
            // The claim was lost before the receipt landed (reaped or cancelled): the task
            // must not run, so it ends, and the payer reads that end with its receipt.
            // Its state is never invented: unreadable or unwritable is "unconfirmed".
            match end(store.as_ref(), &task_id, &entrypoint)
                .await
                .ok()
                .flatten()
            {
                Some(status) => status,
                None => {
                    heartbeat.stop();
                    return Err(Refused::Unconfirmed { task_id, receipt });
                }
            }
        }
        Some(ReceiptRecorded::Missing) | None => {
            heartbeat.stop();
            return Err(Refused::Unconfirmed { task_id, receipt });
        }
    };
    heartbeat.stop();
    Ok(Paid {
        task_id,
        status,
        created,
        receipt,
    })
}

/// The facilitator request for `credential`: the payload as the payer sent it, with our
/// requirements in its version.
fn facilitator_request(credential: &Credential, terms: &Terms) -> FacilitatorRequest {
    let requirements = match credential.version {
        X402Version::V2 => serde_json::to_value(terms.requirements_v2()),
        X402Version::V1 => serde_json::to_value(terms.requirements_v1()),
    }
    .unwrap_or(Value::Null);
    FacilitatorRequest {
        x402_version: credential.version.number(),
        payment_payload: credential.document.clone(),
        payment_requirements: requirements,
    }
}

async fn record_receipt(
    store: &dyn TaskStore,
    lease: &Lease,
    receipt: &Receipt,
) -> Option<ReceiptRecorded> {
    let stored = receipt.to_stored();
    for attempt in 1..=RECEIPT_WRITE_TRIES {
        match store.record_receipt(lease, &stored).await {
            Ok(recorded) => return Some(recorded),
            Err(err) => {
                tracing::warn!(task_id = %lease.task_id, attempt, error = %err, "could not store a payment receipt");
                tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt))).await;
            }
        }
    }
    None
}

/// Cancels a reservation that will not run (before the rail is irreversible). A failure is
/// logged: the reservation expires and is reaped to `cancelled` anyway.
async fn cancel(store: &dyn TaskStore, task_id: &str, entrypoint: &str) {
    if let Err(err) = end(store, task_id, entrypoint).await {
        tracing::warn!(%task_id, error = %err, "could not cancel a paid reservation; it will be reaped");
    }
}

/// Ends a task that must not run: `cancelled` unless it already ended. The status it ended
/// with; `None` when it is gone or, against the odds, still running.
pub(super) async fn end(
    store: &dyn TaskStore,
    task_id: &str,
    entrypoint: &str,
) -> Result<Option<TaskStatus>, StoreError> {
    Ok(
        match store
            .compare_and_set(
                task_id,
                &[TaskStatus::Running],
                Transition::cancelled(),
                None,
            )
            .await?
        {
            CasOutcome::Applied(task) => {
                metrics::task_finished(entrypoint, &task);
                Some(task.status)
            }
            CasOutcome::Rejected { current, .. } => current
                .map(|task| task.status)
                .filter(|status| status.is_terminal()),
        },
    )
}

fn execution_failed() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::TaskExecutionFailed,
        "The paid task could not be admitted; nothing was charged",
    )
}

/// Renews the gateway's prepared claim every third of its lease while the facilitator works
/// (a slow settlement must not let the claim lapse and the reservation be reaped).
struct Heartbeat(Option<JoinHandle<()>>);

impl Heartbeat {
    fn start(store: Arc<dyn TaskStore>, lease: Lease, ttl: Duration) -> Heartbeat {
        let period = (ttl / 3).max(Duration::from_millis(1));
        Heartbeat(Some(tokio::spawn(async move {
            let mut ticks = tokio::time::interval(period);
            ticks.tick().await;
            loop {
                ticks.tick().await;
                match store.renew_execution_claim(&lease, ttl).await {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::warn!(task_id = %lease.task_id, "paid admission claim was lost");
                        return;
                    }
                    Err(err) => {
                        tracing::warn!(task_id = %lease.task_id, error = %err, "could not renew a paid admission claim")
                    }
                }
            }
        })))
    }

    fn stop(mut self) {
        if let Some(handle) = self.0.take() {
            handle.abort();
        }
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        if let Some(handle) = self.0.take() {
            handle.abort();
        }
    }
}
