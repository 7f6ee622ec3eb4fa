//! The steps before anything is reserved: refusals that cost nothing (capacity, payer rate, a
//! pending place), the credential's claim, and the facilitator's verdict.

use std::time::Duration;

use axum::http::StatusCode;
use payments::mpp::Problem;
use payments::wire::facilitator::FacilitatorRequest;
use payments::{Credential, unix_now};
use protocol::ErrorCode;
use store::StoreError;
use store::credentials::{ClaimOutcome, CredentialState};

use super::{Attempt, Refused};
use crate::core::pay::pending::{Busy, Pending};
use crate::http::error::ApiError;

impl Attempt<'_> {
    /// A full cluster says so before the facilitator is asked anything (advisory: the
    /// reservation enforces capacity; an unreadable count refuses nothing).
    pub(super) async fn check_capacity(&self) -> Result<(), Refused> {
        let max = self.state.config.max_tasks;
        if let Ok(live) = self.store.live_count().await
            && live >= max
        {
            return Err(ApiError::from(StoreError::Capacity { max }).into());
        }
        Ok(())
    }

    /// One payer may not take every paid slot: over its rate it is refused before its
    /// credential is claimed, verified or settled.
    pub(super) async fn check_payer_rate(&self) -> Result<(), Refused> {
        if let Some(payer_rate) = &self.gate.payer_rate
            && let Some(refused) = payer_rate.check(self.payer).await
        {
            return Err(Refused::Answer(refused));
        }
        Ok(())
    }

    /// Forged credentials cost nothing: each waits its turn for one of this gateway's pending
    /// places, and a payer the facilitator just refused is refused again without asking it.
    pub(super) async fn wait_for_pending_place(&self) -> Result<Pending, Refused> {
        match self.gate.pending.enter(self.payer).await {
            Ok(pending) => Ok(pending),
            Err(Busy::Refused) => Err(Refused::Answer(self.rail.refused(
                self.terms,
                Problem::VerificationFailed,
                "the facilitator refused this payer's payment moments ago; retry later",
            ))),
            Err(busy) => Err(busy.answer().into()),
        }
    }

    /// One credential, one execution: recorded before anything else, kept past its validity.
    pub(super) async fn claim_credential(&self, credential: &Credential) -> Result<(), Refused> {
        let keep = Duration::from_secs(
            credential
                .valid_before()
                .saturating_sub(unix_now())
                .saturating_add(3600),
        );
        match self
            .gate
            .credentials
            .claim(&self.nonce_key, &self.task_id, keep)
            .await
            .map_err(ApiError::from)?
        {
            ClaimOutcome::Taken => Ok(()),
            // For MPP this is the challenge id used twice: the nonce is its hash.
            ClaimOutcome::Held(CredentialState::Settled | CredentialState::Void) => {
                Err(Refused::Answer(self.rail.refused(
                    self.terms,
                    Problem::InvalidChallenge,
                    "payment credential was already used",
                )))
            }
            ClaimOutcome::Held(_) => Err(ApiError::new(
                StatusCode::CONFLICT,
                ErrorCode::PaymentInProgress,
                "This payment credential is being used by another request",
            )
            .retry_after(1)
            .into()),
        }
    }

    /// Gives the claimed credential back: nothing was settled with it.
    pub(super) async fn release(&self) {
        if let Err(err) = self
            .gate
            .credentials
            .release(&self.nonce_key, &self.task_id)
            .await
        {
            tracing::warn!(task_id = %self.task_id, error = %err, "could not release a payment credential");
        }
    }

    /// The facilitator's verdict before anything is reserved: a credential that cannot pay
    /// never holds a task slot. Refused or unanswered, the credential is released.
    pub(super) async fn verify(&self, request: &FacilitatorRequest) -> Result<(), Refused> {
        let task_id = &self.task_id;
        match self.gate.facilitator.verify(request).await {
            Ok(verdict) if verdict.is_valid => Ok(()),
            Ok(verdict) => {
                self.release().await;
                self.gate.pending.refused(self.payer);
                let reason = verdict
                    .invalid_reason
                    .unwrap_or_else(|| "payment was not accepted".into());
                tracing::info!(%task_id, payer = %self.payer, %reason, "payment refused by the facilitator");
                Err(Refused::Answer(self.rail.refused(
                    self.terms,
                    Problem::VerificationFailed,
                    &reason,
                )))
            }
            Err(err) => {
                self.release().await;
                tracing::warn!(%task_id, error = %err, "payment verification failed");
                Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    ErrorCode::PaymentVerificationFailed,
                    "The payment could not be verified; retry shortly",
                )
                .retry_after(1)
                .into())
            }
        }
    }
}
