//! Admission of a paid invoke that settles only after its run succeeded (settle=after):
//!
//! ```text
//! the same refusals and claims as admit_paid, up to the facilitator's verdict
//!   -> reserve the task and claim it (prepared)
//!   -> credential `reserved` (with the request), due when no waiting gateway can still settle it
//!   -> hand the task to the ready queue (no receipt: nothing is charged yet)
//! ... the run ...
//!   succeeded: `reserved -> settling` -> settle -> `settled` and the receipt stored with the task
//!              (refused: `void`, 402 as the rail says, the result withheld;
//!               no answer: stays `settling` for the settlement recovery, 503, result withheld)
//!   anything else (failed, cancelled, timed out, input asked): `reserved -> void`, nothing charged
//! ```
//!
//! A gateway killed while the run goes, or after it ended but before `reserved -> settling`,
//! leaves the record `reserved`: once due, the settlement recovery sweep ends the task if it still
//! runs and voids the record, so a run whose result nobody was handed is never charged. Killed
//! after `reserved -> settling`, it leaves a record the recovery looks up, as for a lost settle
//! answer. Every step is a compare-and-set on the record, so a gateway that settles and a sweep
//! that releases never both act.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use payments::wire::facilitator::FacilitatorRequest;
use payments::{Terms, X402Version};
use protocol::{ErrorCode, Task};
use store::TaskStore;
use store::credentials::CredentialState;

use super::end::cancel;
use super::{Attempt, Refused, SettlingRecord};
use crate::core::create::Admit;
use crate::core::pay::receipt::Receipt;
use crate::core::pay::{FaultPoint, Gate, PayContext, Payment, Rail};
use crate::http::error::ApiError;

/// A paid run admitted without settlement: its task, queued, and the payment held for it.
pub struct ReservedRun<'a> {
    pub created: Task,
    pub reservation: Reservation<'a>,
}

/// A verified payment held for one run (the credential `reserved`): [`Reservation::settle`]
/// once the run succeeded, [`Reservation::release`] otherwise. Dropped without either (the
/// request went away), the record stays `reserved` and the recovery sweep releases it.
pub struct Reservation<'a> {
    gate: &'a Gate,
    store: Arc<dyn TaskStore>,
    terms: Terms,
    rail: Rail<'a>,
    version: X402Version,
    payer: payments::Address,
    nonce_key: String,
    task_id: String,
    entrypoint: String,
    request: FacilitatorRequest,
    /// The credential (an `upto` one is settled for an amount known only after the run).
    credential: payments::Credential,
    entitles: bool,
}

/// How long after its reservation a `reserved` record falls due for the recovery sweep: the
/// longest a gateway waits for the run, and some slack to settle it.
pub fn due_in(config: &crate::core::config::GatewayConfig) -> Duration {
    Duration::from_millis(config.invoke_timeout_ms) + Duration::from_secs(5)
}

/// Admits `admit` as a task paid by `payment`, settled only after its run: the checks of
/// [`super::admit_paid`] up to the facilitator's verdict, then the task reserved, the
/// credential `reserved` and the task queued.
pub async fn admit_reserved<'a>(
    state: PayContext<'a>,
    payment: Payment<'a>,
    admit: Admit<'_>,
) -> Result<ReservedRun<'a>, Refused> {
    let Payment {
        gate,
        terms,
        checked,
        rail,
        entitles,
    } = payment;
    let credential = checked.credential;
    let task_id = uuid::Uuid::new_v4().to_string();
    let nonce_key = credential.nonce_key().to_string();
    let entrypoint = admit.entrypoint.to_owned();
    let request = payments::facilitator::request(&credential, &terms);
    let created = {
        let attempt = Attempt {
            state,
            gate,
            terms: &terms,
            rail: &rail,
            payer: checked.payer,
            store: state.store.clone(),
            entrypoint: entrypoint.clone(),
            task_id: task_id.clone(),
            nonce_key: nonce_key.clone(),
        };
        attempt.check_capacity().await?;
        attempt.check_payer_rate().await?;
        let pending = attempt.wait_for_pending_place().await?;
        attempt.claim_credential(&credential).await?;
        attempt.verify(&request).await?;
        drop(pending);
        let (created, lease) = attempt.reserve(admit).await?;
        attempt.hold_for_run(&request, state.config).await?;
        attempt.queue(&lease).await?;
        created
    };
    Ok(ReservedRun {
        created,
        reservation: Reservation {
            gate,
            store: state.store.clone(),
            terms,
            rail,
            version: credential.version,
            payer: checked.payer,
            nonce_key,
            task_id,
            entrypoint,
            request,
            credential,
            entitles,
        },
    })
}

impl Attempt<'_> {
    /// `claimed -> reserved`, with the facilitator request, before the task can run: a run
    /// never starts without its payment on record.
    async fn hold_for_run(
        &self,
        request: &FacilitatorRequest,
        config: &crate::core::config::GatewayConfig,
    ) -> Result<(), Refused> {
        let record = serde_json::to_string(&SettlingRecord {
            request: request.clone(),
            mpp_challenge_id: self.rail.challenge_id().map(str::to_owned),
        })
        .unwrap_or_default();
        let reserved = self
            .gate
            .credentials
            .reserve(&self.nonce_key, &self.task_id, &record, due_in(config))
            .await;
        if matches!(reserved, Ok(true)) {
            return Ok(());
        }
        cancel(self.store.as_ref(), &self.task_id, &self.entrypoint).await;
        self.release().await;
        Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::PaymentVerificationFailed,
            "The payment could not be recorded; nothing was charged, retry shortly",
        )
        .retry_after(1)
        .into())
    }

    /// Hands the reserved task to the ready queue. A claim lost meanwhile (reaped): the task
    /// ends, the payment is released.
    async fn queue(&self, lease: &store::Lease) -> Result<(), Refused> {
        if matches!(self.store.hand_off(lease).await, Ok(true)) {
            return Ok(());
        }
        cancel(self.store.as_ref(), &self.task_id, &self.entrypoint).await;
        void(self.gate, &self.nonce_key, &self.task_id, "not admitted").await;
        Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::TaskExecutionFailed,
            "The paid task could not be admitted; nothing was charged",
        )
        .into())
    }
}

/// `reserved -> void`, keeping `note` (why nothing was charged) with the record.
async fn void(gate: &Gate, nonce_key: &str, task_id: &str, note: &str) -> bool {
    match gate
        .credentials
        .advance(
            nonce_key,
            task_id,
            CredentialState::Reserved,
            CredentialState::Void,
            Some(note),
        )
        .await
    {
        Ok(moved) => moved,
        Err(err) => {
            // The record stays `reserved`: the recovery sweep releases it once due.
            tracing::warn!(%task_id, error = %err, "could not release a reserved payment; the recovery sweep will");
            false
        }
    }
}

/// Header on every answer of a settle=after run that charged nothing (`not-charged`).
pub const SETTLEMENT_HEADER: &str = "payment-settlement";

/// Marks `response` as the answer of a payment released without any charge.
pub fn not_charged(response: &mut Response) {
    response.headers_mut().insert(
        axum::http::HeaderName::from_static(SETTLEMENT_HEADER),
        axum::http::HeaderValue::from_static("not-charged"),
    );
}

impl Reservation<'_> {
    pub fn task_id(&self) -> &str {
        &self.task_id
    }

    /// For an `upto` payment: the amount to settle (the run's `charge`, at most the maximum;
    /// the maximum when it reported none) and the settle request for it. `None` for `exact`.
    fn metered(
        &self,
        charge: Option<payments::U256>,
    ) -> Option<(payments::U256, FacilitatorRequest)> {
        let payments::Scheme::Upto { .. } = self.terms.scheme else {
            return None;
        };
        let max = self.terms.amount;
        let charged = match charge {
            Some(charge) if charge <= max => charge,
            Some(charge) => {
                tracing::warn!(task_id = %self.task_id, %charge, %max, "the run reported a charge above its upto maximum; settling the maximum");
                max
            }
            None => max,
        };
        match payments::facilitator::upto_settlement(&self.credential, &self.terms, charged) {
            Ok(request) => Some((charged, request)),
            Err(err) => {
                // Not an upto credential on upto terms: the checks before admission refuse it,
                // so this is a bug; the verified request (the maximum) stands.
                tracing::error!(task_id = %self.task_id, error = %err, "could not build an upto settlement");
                None
            }
        }
    }

    /// The run did not succeed (`why`: failed with its code, cancelled, timed out): nothing is
    /// charged, and the record says why.
    pub async fn release(self, why: &str) {
        let note = format!("not charged: {why}");
        if void(self.gate, &self.nonce_key, &self.task_id, &note).await {
            tracing::info!(task_id = %self.task_id, payer = %self.payer, %why, "settle=after: the run did not succeed; nothing charged");
            self.record_not_charged(&note).await;
        }
    }

    /// Keeps with the (ended) task, where its receipt would be, that nothing was charged and
    /// why: `payment-settlement: not charged: …`, a header no answer ever copies (see
    /// [`Receipt::attach`]), for whoever reads the task record.
    async fn record_not_charged(&self, note: &str) {
        let marker = Receipt {
            header: SETTLEMENT_HEADER.to_owned(),
            value: note.to_owned(),
        };
        if let Err(err) = self
            .store
            .attach_receipt(&self.task_id, &marker.to_stored())
            .await
        {
            tracing::warn!(task_id = %self.task_id, error = %err, "could not record on the task that nothing was charged");
        }
    }

    /// The run succeeded: settles the payment and returns its receipt, stored with the task.
    /// An `upto` payment settles for `charge` (atomic units: what the run reported it used),
    /// at most its maximum, which it costs when the run reported nothing; the receipt shows
    /// both (`amount`, `maxAmount`). Otherwise the answer to send instead of the result, which
    /// is withheld: `402` when the facilitator refused (as the rail says), `503` when its
    /// answer was lost (the settlement recovery learns the outcome) or the payment was
    /// released meanwhile.
    pub async fn settle(mut self, charge: Option<payments::U256>) -> Result<Receipt, Response> {
        FaultPoint::trip(self.gate.fault_point, FaultPoint::AfterRun);
        let metered = self.metered(charge);
        if let Some((_, request)) = &metered {
            self.request = request.clone();
        }
        // The request actually sent is what a lost answer is looked up by.
        let record = metered.as_ref().map(|_| {
            serde_json::to_string(&SettlingRecord {
                request: self.request.clone(),
                mpp_challenge_id: self.rail.challenge_id().map(str::to_owned),
            })
            .unwrap_or_default()
        });
        let task_id = &self.task_id;
        let moved = self
            .gate
            .credentials
            .advance(
                &self.nonce_key,
                task_id,
                CredentialState::Reserved,
                CredentialState::Settling,
                record.as_deref(),
            )
            .await;
        if !matches!(moved, Ok(true)) {
            tracing::warn!(%task_id, "settle=after: the reserved payment was gone before settlement (released by recovery, or unwritable); result withheld");
            let mut response = ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::SettlementFailed,
                "The run finished but its payment could not be settled; nothing was charged and the result is withheld, retry with a new payment",
            )
            .retry_after(1)
            .into_response();
            not_charged(&mut response);
            return Err(response);
        }
        let settlement = match self.gate.facilitator.settle(&self.request).await {
            Ok(settlement) if settlement.success => {
                telemetry::tally::settled();
                settlement
            }
            Ok(settlement) => {
                let reason = settlement
                    .error_reason
                    .unwrap_or_else(|| "settlement was refused".into());
                tracing::info!(%task_id, payer = %self.payer, %reason, "settle=after: settlement refused; result withheld");
                let note = format!("not charged: settlement refused: {reason}");
                self.record_not_charged(&note).await;
                if let Err(err) = self
                    .gate
                    .credentials
                    .advance(
                        &self.nonce_key,
                        task_id,
                        CredentialState::Settling,
                        CredentialState::Void,
                        Some(&note),
                    )
                    .await
                {
                    tracing::warn!(%task_id, error = %err, "could not void a refused settlement; recovery will look it up");
                }
                let mut response = self.rail.refused(
                    &self.terms,
                    payments::mpp::Problem::VerificationFailed,
                    &format!("Payment settlement failed: {reason}; the result is withheld"),
                );
                not_charged(&mut response);
                return Err(response);
            }
            Err(err) => {
                tracing::error!(%task_id, payer = %self.payer, error = %err, "settle=after: settlement outcome unknown; the settlement recovery will learn it; result withheld");
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    ErrorCode::SettlementFailed,
                    format!(
                        "The run {task_id} finished but its payment's settlement could not be confirmed; the result is withheld"
                    ),
                )
                .retry_after(5)
                .into_response());
            }
        };
        FaultPoint::trip(self.gate.fault_point, FaultPoint::AfterSettle);
        let receipt = match &metered {
            Some((charged, _)) => metered_receipt(self.version, &settlement, *charged, &self.terms),
            None => self.rail.receipt(&self.terms, self.version, &settlement),
        };
        if self.entitles {
            crate::core::pay::siwx::entitle(self.gate, &self.entrypoint, self.payer).await;
        }
        tracing::info!(%task_id, payer = %self.payer, transaction = %settlement.transaction, "payment settled after the run");
        let stored = receipt.to_stored();
        let (settled, attached) = tokio::join!(
            self.gate.credentials.advance(
                &self.nonce_key,
                task_id,
                CredentialState::Settling,
                CredentialState::Settled,
                Some(&receipt.value),
            ),
            self.store.attach_receipt(task_id, &stored),
        );
        if let Err(err) = settled {
            // Stays `settling`: the recovery looks it up and finds it settled.
            tracing::warn!(%task_id, error = %err, "could not mark a credential settled");
        }
        if let Err(err) = attached {
            tracing::warn!(%task_id, error = %err, "could not store a receipt with its task");
        }
        Ok(receipt)
    }
}

/// The receipt of an `upto` settlement: the facilitator's answer with what was charged
/// (`amount`, when the facilitator did not say) and the most that could have been
/// (`maxAmount`), so the payer sees both.
fn metered_receipt(
    version: X402Version,
    settlement: &payments::wire::facilitator::SettleResponse,
    charged: payments::U256,
    terms: &Terms,
) -> Receipt {
    let mut document = serde_json::to_value(settlement).unwrap_or_default();
    if let Some(fields) = document.as_object_mut() {
        fields
            .entry("amount")
            .or_insert_with(|| serde_json::Value::String(charged.to_string()));
        fields.insert(
            "maxAmount".into(),
            serde_json::Value::String(terms.amount.to_string()),
        );
    }
    Receipt::of_document(version, &document)
}

/// The charge a run reported (`usage.charge`, decimal USDC as a string, `"0"` for nothing), in
/// atomic units: what an `upto` payment settles for. `None` when the run reported none, or
/// one that is no amount (logged: the maximum is settled then, which the payer authorized).
pub fn reported_charge(usage: Option<&serde_json::Value>) -> Option<payments::U256> {
    let charge = usage?.get("charge")?;
    let Some(text) = charge.as_str() else {
        tracing::warn!(
            "a run reported a charge that is not a decimal string; settling the maximum"
        );
        return None;
    };
    match payments::amount::to_atomic(text) {
        Ok(atomic) => Some(atomic),
        // "0", "0.00": nothing used, nothing charged.
        Err(payments::amount::AmountError::NotPositive(_)) => Some(payments::U256::ZERO),
        Err(err) => {
            tracing::warn!(error = %err, "a run reported a charge that is no USDC amount; settling the maximum");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use payments::U256;
    use serde_json::json;

    use super::reported_charge;

    #[test]
    fn a_run_reports_its_charge_in_decimal_usdc() {
        let charge = |usage: serde_json::Value| reported_charge(Some(&usage));
        assert_eq!(
            charge(json!({"charge": "0.0025"})),
            Some(U256::from(2500u64))
        );
        assert_eq!(charge(json!({"charge": "0"})), Some(U256::ZERO));
        assert_eq!(charge(json!({"charge": "0.000"})), Some(U256::ZERO));
        assert_eq!(
            charge(json!({"charge": "0.000001", "words": 3})),
            Some(U256::from(1u64))
        );
        // Nothing usable: the maximum is settled.
        assert_eq!(charge(json!({"charge": 0.5})), None);
        assert_eq!(charge(json!({"charge": "-1"})), None);
        assert_eq!(charge(json!({"charge": "."})), None);
        assert_eq!(charge(json!({"tokens": 10})), None);
        assert_eq!(reported_charge(None), None);
    }
}
