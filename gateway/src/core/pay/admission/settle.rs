//! The steps that hold a task for the payment: the durable reservation and the gateway's claim
//! on it, the credential `settling` with the task held for the settlement, and the settlement.
//! Until the facilitator is asked to settle, a failure cancels the reservation.

use axum::http::StatusCode;
use payments::wire::facilitator::{FacilitatorRequest, SettleResponse};
use protocol::{ErrorCode, Task};
use store::credentials::CredentialState;
use store::{Admission, Lease};

use super::end::cancel;
use super::heartbeat::Heartbeat;
use super::{Attempt, Refused, SettlingRecord};
use crate::core::create::{self, Admit};
use crate::http::error::ApiError;

/// `Retry-After` of a settlement without an answer: about when the settlement recovery sweep
/// (every 5 s by default, once no settle call can still run) may have learned the outcome.
const HELD_RETRY_AFTER_SECS: u64 = 5;

impl Attempt<'_> {
    /// Durable state before anything is settled: the task reserved (counted against capacity,
    /// reaped if abandoned) and claimed by this gateway (prepared).
    pub(super) async fn reserve(&self, admit: Admit<'_>) -> Result<(Task, Lease), Refused> {
        let gate = self.gate;
        let task_id = &self.task_id;
        let reserved = Admission::Reserved {
            ttl: gate.admission_ttl,
        };
        let created = match create::create_in(
            self.state.store,
            self.state.store_memory,
            admit,
            task_id.clone(),
            reserved,
        )
        .await
        {
            Ok(task) => task,
            Err(err) => {
                self.release().await;
                return Err(err.into());
            }
        };
        let holder = format!("gateway:{task_id}");
        match self
            .store
            .claim_execution(task_id, &holder, gate.admission_lease)
            .await
        {
            Ok(Some(claim)) => Ok((created, claim.lease)),
            Ok(None) | Err(_) => {
                cancel(self.store.as_ref(), task_id, &self.entrypoint).await;
                self.release().await;
                Err(execution_failed().into())
            }
        }
    }

    /// From `settling` on, the credential is never given back: funds may move even when the
    /// facilitator's answer is lost. The record keeps the request, so that a lost answer can
    /// be looked up later (see `recovery`). Then the task is held before the facilitator is
    /// asked: once it is, the task may be paid for even if no answer comes back, so no sweep
    /// may cancel it until the settlement is known.
    pub(super) async fn mark_settling(
        &self,
        request: &FacilitatorRequest,
        lease: &Lease,
        heartbeat: &mut Heartbeat,
    ) -> Result<(), Refused> {
        let task_id = &self.task_id;
        let request_text = serde_json::to_string(&SettlingRecord {
            request: request.clone(),
            mpp_challenge_id: self.rail.challenge_id().map(str::to_owned),
        })
        .unwrap_or_default();
        let advanced = self
            .gate
            .credentials
            .advance(
                &self.nonce_key,
                task_id,
                CredentialState::Claimed,
                CredentialState::Settling,
                Some(&request_text),
            )
            .await;
        if !matches!(advanced, Ok(true)) {
            heartbeat.stop();
            cancel(self.store.as_ref(), task_id, &self.entrypoint).await;
            self.release().await;
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::PaymentVerificationFailed,
                "The payment could not be recorded; retry shortly",
            )
            .retry_after(1)
            .into());
        }
        if !matches!(self.store.hold_for_settlement(lease).await, Ok(true)) {
            // Nothing was settled; the record stays `settling` (never given back) and the
            // settlement recovery voids it.
            heartbeat.stop();
            cancel(self.store.as_ref(), task_id, &self.entrypoint).await;
            tracing::warn!(%task_id, "could not hold a paid task for its settlement; not settled");
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::PaymentVerificationFailed,
                "The payment could not be recorded; nothing was charged, retry with a new payment",
            )
            .retry_after(1)
            .into());
        }
        Ok(())
    }

    /// The facilitator's settlement. Refused: the task is cancelled (`402`). No answer: the
    /// funds may have moved, so the task stays held and the credential spent until the
    /// settlement recovery learns the outcome (`503` with `Retry-After`).
    pub(super) async fn settle(
        &self,
        request: &FacilitatorRequest,
        heartbeat: &mut Heartbeat,
    ) -> Result<SettleResponse, Refused> {
        let task_id = &self.task_id;
        match self.gate.facilitator.settle(request).await {
            Ok(settlement) if settlement.success => {
                telemetry::tally::settled();
                Ok(settlement)
            }
            Ok(settlement) => {
                heartbeat.stop();
                cancel(self.store.as_ref(), task_id, &self.entrypoint).await;
                let reason = settlement
                    .error_reason
                    .unwrap_or_else(|| "settlement was refused".into());
                tracing::info!(%task_id, payer = %self.payer, %reason, "settlement refused");
                Err(ApiError::new(
                    StatusCode::PAYMENT_REQUIRED,
                    ErrorCode::SettlementFailed,
                    format!("Payment settlement failed: {reason}"),
                )
                .into())
            }
            Err(err) => {
                // Settled, the recovery stores the receipt and the task runs; never settled,
                // the task is cancelled.
                heartbeat.stop();
                tracing::error!(%task_id, payer = %self.payer, error = %err, "settlement outcome unknown; the credential stays spent and the task is held until settlement recovery learns it");
                Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    ErrorCode::SettlementFailed,
                    format!(
                        "The payment's settlement could not be confirmed; task {task_id} is held until the settlement is known: it runs if the payment settled and is cancelled if not"
                    ),
                )
                .retry_after(HELD_RETRY_AFTER_SECS)
                .into())
            }
        }
    }
}

fn execution_failed() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::TaskExecutionFailed,
        "The paid task could not be admitted; nothing was charged",
    )
}
