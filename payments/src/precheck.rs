//! The offline checks of a credential against a route's terms, done before any state is
//! reserved or any facilitator asked: a forged, mistargeted, mispriced or expired credential
//! costs one signature recovery, nothing more.

use alloy_primitives::Address;

use crate::credential::Credential;
use crate::terms::Terms;

/// An authorization must stay valid at least this long after the check, so that settlement
/// (a facilitator round trip and a block) can still use it.
pub const SETTLE_MARGIN_SECONDS: u64 = 6;

/// Why a credential does not pay for these terms. `reason()` is x402's `invalidReason`
/// vocabulary, the message says it in words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    #[error("payment is for network {0}, this route is paid on {1}")]
    Network(&'static str, &'static str),
    #[error("the accepted requirement does not match this route's (amount, asset or payee)")]
    Accepted,
    #[error("payment authorizes a transfer to another payee")]
    Recipient,
    #[error("payment amount does not equal the price")]
    Amount,
    #[error("payment authorization is not valid yet")]
    NotYetValid,
    #[error("payment authorization has expired or expires too soon to settle")]
    Expired,
    #[error("payment signature does not match its authorization's payer")]
    Signature,
}

impl Rejection {
    pub fn reason(&self) -> &'static str {
        match self {
            Rejection::Network(..) => "invalid_network",
            Rejection::Accepted => "invalid_payment_requirements",
            Rejection::Recipient => "invalid_exact_evm_payload_recipient_mismatch",
            Rejection::Amount => "invalid_exact_evm_payload_authorization_value",
            Rejection::NotYetValid => "invalid_exact_evm_payload_authorization_valid_after",
            Rejection::Expired => "invalid_exact_evm_payload_authorization_valid_before",
            Rejection::Signature => "invalid_exact_evm_payload_signature",
        }
    }
}

/// Checks `credential` against `terms` at `now` (Unix seconds); the payer on success.
pub fn precheck(credential: &Credential, terms: &Terms, now: u64) -> Result<Address, Rejection> {
    if credential.network != terms.network {
        return Err(Rejection::Network(
            credential.network.name,
            terms.network.name,
        ));
    }
    if let Some(accepted) = &credential.accepted {
        let ours = terms.requirements_v2();
        let same_address =
            |a: &str, b: &str| a.parse::<Address>().ok() == b.parse::<Address>().ok();
        if accepted.amount != ours.amount
            || !same_address(&accepted.asset, &ours.asset)
            || !same_address(&accepted.pay_to, &ours.pay_to)
        {
            return Err(Rejection::Accepted);
        }
    }
    let auth = &credential.authorization;
    if auth.to != terms.pay_to {
        return Err(Rejection::Recipient);
    }
    if auth.value != terms.amount {
        return Err(Rejection::Amount);
    }
    if auth.valid_after >= now {
        return Err(Rejection::NotYetValid);
    }
    if auth.valid_before <= now.saturating_add(SETTLE_MARGIN_SECONDS) {
        return Err(Rejection::Expired);
    }
    match auth.recover(credential.network, &credential.signature) {
        Some(signer) if signer == auth.from => Ok(signer),
        _ => Err(Rejection::Signature),
    }
}
