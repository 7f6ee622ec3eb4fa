//! Settlement of a facilitator request: verify again (a settle may come without a verify, or
//! long after one), then spend the nonce and move the funds in one atomic ledger step.
//!
//! `upto`, as @x402/evm's `settleUptoPermit2` does it: the requirements' `amount` is the
//! actual amount to charge. The request is verified with `amount` replaced by the permit's
//! maximum; then an actual amount of zero is a success with an empty `transaction` that moves
//! nothing and leaves the nonce unspent (on a chain no transaction is sent, so the permit stays
//! usable until its deadline; a zero settlement is therefore repeatable, and a lookup reports
//! the permit unsettled); an amount above the maximum is refused
//! (`invalid_upto_evm_payload_settlement_exceeds_amount`); anything else spends the nonce and
//! moves exactly that amount.

use alloy_primitives::{Address, U256};
use payments::terms::SCHEME_UPTO;
use payments::wire::facilitator::{FacilitatorRequest, SettleResponse};
use payments::{Credential, X402Version};
use serde_json::Value;

use crate::ledger::{Ledger, LedgerError, SettleOutcome};
use crate::verify::{self, Verdict, reason, request_network};

/// The settle answer at `now` (Unix seconds); `facilitator` is this facilitator's address.
/// `Ok` with `success: false` is a refusal that moved nothing; `Err` is a ledger failure whose
/// outcome the caller cannot know.
pub async fn settle(
    ledger: &dyn Ledger,
    facilitator: Address,
    request: &FacilitatorRequest,
    now: u64,
) -> Result<SettleResponse, LedgerError> {
    let network = request_network(request);
    let upto = match upto_settlement(request) {
        Ok(upto) => upto,
        Err(reason) => return Ok(refusal(reason, None, network)),
    };
    let verified = match &upto {
        Some(upto) => &upto.verify,
        None => request,
    };
    let checked = match verify::verify(ledger, facilitator, verified, now).await? {
        Verdict::Valid(checked) => checked,
        Verdict::Invalid(invalid) => return Ok(refusal(invalid.reason, invalid.payer, network)),
    };
    let mut transfer = checked.transfer.clone();
    if let Some(upto) = &upto {
        if upto.actual.is_zero() {
            return Ok(SettleResponse {
                success: true,
                error_reason: None,
                payer: Some(checked.payer.to_checksum(None)),
                transaction: String::new(),
                network,
                amount: Some("0".into()),
            });
        }
        if upto.actual > transfer.amount {
            return Ok(refusal(
                reason::SETTLEMENT_EXCEEDS_AMOUNT,
                Some(checked.payer),
                network,
            ));
        }
        transfer.amount = upto.actual;
    }
    match ledger.settle(&transfer).await? {
        SettleOutcome::Settled => Ok(SettleResponse {
            success: true,
            error_reason: None,
            payer: Some(checked.payer.to_checksum(None)),
            transaction: transfer.transaction().to_string(),
            network,
            amount: Some(transfer.amount.to_string()),
        }),
        // A concurrent settle won the race between our verify and our settle.
        SettleOutcome::NonceUsed => Ok(refusal(
            if checked.upto {
                reason::PERMIT2_NONCE_USED
            } else {
                reason::NONCE_USED
            },
            Some(checked.payer),
            network,
        )),
        SettleOutcome::InsufficientFunds => Ok(refusal(
            reason::INSUFFICIENT_FUNDS,
            Some(checked.payer),
            network,
        )),
    }
}

/// An upto settlement: the amount asked, and the request to verify (the same, asking for the
/// permit's maximum).
struct UptoSettlement {
    actual: U256,
    verify: FacilitatorRequest,
}

/// `Some` when `request` settles an upto permit on upto requirements; anything else (exact,
/// a scheme mismatch, an unreadable payload) is left to verification to refuse.
fn upto_settlement(request: &FacilitatorRequest) -> Result<Option<UptoSettlement>, &'static str> {
    let requirements = &request.payment_requirements;
    if request.x402_version != 2
        || requirements.get("scheme").and_then(Value::as_str) != Some(SCHEME_UPTO)
    {
        return Ok(None);
    }
    let Ok(credential) =
        Credential::from_document(X402Version::V2, request.payment_payload.clone())
    else {
        return Ok(None);
    };
    let Some(permit) = credential.upto() else {
        return Ok(None);
    };
    let actual = requirements
        .get("amount")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|text| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|text| U256::from_str_radix(text, 10).ok())
        .ok_or(reason::INVALID_REQUIREMENTS)?;
    let mut verify = request.clone();
    verify.payment_requirements["amount"] = Value::String(permit.amount.to_string());
    Ok(Some(UptoSettlement { actual, verify }))
}

/// A settlement refused with `reason`, nothing moved.
pub fn refusal(reason: &str, payer: Option<Address>, network: String) -> SettleResponse {
    SettleResponse {
        success: false,
        error_reason: Some(reason.to_owned()),
        payer: payer.map(|payer| payer.to_checksum(None)),
        transaction: String::new(),
        network,
        amount: None,
    }
}
