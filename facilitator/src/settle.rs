//! Settlement of a facilitator request: verify again (a settle may come without a verify, or
//! long after one), then spend the nonce and move the funds in one atomic ledger step.

use alloy_primitives::Address;
use payments::wire::facilitator::{FacilitatorRequest, SettleResponse};

use crate::ledger::{Ledger, LedgerError, SettleOutcome};
use crate::verify::{self, Verdict, reason, request_network};

/// The settle answer at `now` (Unix seconds). `Ok` with `success: false` is a refusal that
/// moved nothing; `Err` is a ledger failure whose outcome the caller cannot know.
pub async fn settle(
    ledger: &dyn Ledger,
    request: &FacilitatorRequest,
    now: u64,
) -> Result<SettleResponse, LedgerError> {
    let network = request_network(request);
    let checked = match verify::verify(ledger, request, now).await? {
        Verdict::Valid(checked) => checked,
        Verdict::Invalid(invalid) => return Ok(refusal(invalid.reason, invalid.payer, network)),
    };
    let transfer = &checked.transfer;
    match ledger.settle(transfer).await? {
        SettleOutcome::Settled => Ok(SettleResponse {
            success: true,
            error_reason: None,
            payer: Some(checked.payer.to_checksum(None)),
            transaction: transfer.transaction().to_string(),
            network,
            amount: Some(transfer.amount.to_string()),
        }),
        // A concurrent settle won the race between our verify and our settle.
        SettleOutcome::NonceUsed => Ok(refusal(reason::NONCE_USED, Some(checked.payer), network)),
        SettleOutcome::InsufficientFunds => Ok(refusal(
            reason::INSUFFICIENT_FUNDS,
            Some(checked.payer),
            network,
        )),
    }
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
