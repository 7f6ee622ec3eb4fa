//! The offline checks of a credential against a route's terms, done before any state is
//! reserved or any facilitator asked: a forged, mistargeted, mispriced or expired credential
//! costs one signature recovery, nothing more.
//!
//! For `upto` these are @x402/evm's `verifyUptoPermit2` checks that need no chain, in its
//! order and with its reasons; what it then asks the chain (the asset is a contract, a
//! simulated settlement: Permit2 allowance and balance) is the facilitator's.

use alloy_primitives::Address;

use crate::credential::{Credential, Payload};
use crate::eip3009::Authorization;
use crate::permit2::{UPTO_PROXY_ADDRESS, UptoAuthorization};
use crate::terms::{Scheme, Terms};

/// An authorization must stay valid at least this long after the check, so that settlement
/// (a facilitator round trip and a block) can still use it.
pub const SETTLE_MARGIN_SECONDS: u64 = 6;

/// Why a credential does not pay for these terms. `reason()` is x402's `invalidReason`
/// vocabulary, the message says it in words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    #[error("payment is an {credential:?} credential; this route is paid with {route:?}")]
    Scheme {
        credential: &'static str,
        route: &'static str,
    },
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
    /// An `upto` permit that does not pay these terms.
    #[error("{0}")]
    Upto(UptoRejection),
}

/// Why an `upto` Permit2 authorization does not pay the terms (@x402/evm's reasons).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum UptoRejection {
    #[error("the permit's spender is not x402's upto proxy")]
    Spender,
    #[error("the permit pays another payee")]
    Recipient,
    #[error("the permit names another facilitator than this route's")]
    Facilitator,
    #[error("the permit has expired or expires too soon to settle")]
    Expired,
    #[error("the permit is not valid yet")]
    NotYetValid,
    #[error("the permitted amount does not equal the route's maximum")]
    Amount,
    #[error("the permit is for another token")]
    Token,
    #[error("the permit's signature does not match its payer")]
    Signature,
}

impl UptoRejection {
    pub fn reason(&self) -> &'static str {
        match self {
            UptoRejection::Spender => "invalid_permit2_spender",
            UptoRejection::Recipient => "invalid_permit2_recipient_mismatch",
            UptoRejection::Facilitator => "upto_facilitator_mismatch",
            UptoRejection::Expired => "permit2_deadline_expired",
            UptoRejection::NotYetValid => "permit2_not_yet_valid",
            UptoRejection::Amount => "permit2_amount_mismatch",
            UptoRejection::Token => "permit2_token_mismatch",
            UptoRejection::Signature => "invalid_permit2_signature",
        }
    }
}

impl Rejection {
    pub fn reason(&self) -> &'static str {
        match self {
            Rejection::Scheme { route, .. } if *route == crate::terms::SCHEME_UPTO => {
                "invalid_upto_evm_scheme"
            }
            Rejection::Scheme { .. } => "invalid_exact_evm_scheme",
            Rejection::Network(..) => "invalid_network",
            Rejection::Accepted => "invalid_payment_requirements",
            Rejection::Recipient => "invalid_exact_evm_payload_recipient_mismatch",
            Rejection::Amount => "invalid_exact_evm_payload_authorization_value",
            Rejection::NotYetValid => "invalid_exact_evm_payload_authorization_valid_after",
            Rejection::Expired => "invalid_exact_evm_payload_authorization_valid_before",
            Rejection::Signature => "invalid_exact_evm_payload_signature",
            Rejection::Upto(why) => why.reason(),
        }
    }
}

/// Checks `credential` against `terms` at `now` (Unix seconds); the payer on success. An
/// `upto` credential on an `exact` route, or the reverse, is [`Rejection::Scheme`].
pub fn precheck(credential: &Credential, terms: &Terms, now: u64) -> Result<Address, Rejection> {
    if credential.scheme() != terms.scheme.name() {
        return Err(Rejection::Scheme {
            credential: credential.scheme(),
            route: terms.scheme.name(),
        });
    }
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
    match (&credential.payload, terms.scheme) {
        (
            Payload::Exact {
                authorization,
                signature,
            },
            Scheme::Exact,
        ) => check_exact(authorization, signature, credential, terms, now),
        (
            Payload::Upto {
                authorization,
                signature,
            },
            Scheme::Upto { facilitator },
        ) => check_upto(
            authorization,
            signature,
            credential,
            terms,
            facilitator,
            now,
        )
        .map_err(Rejection::Upto),
        // Unreachable: the schemes were compared above.
        _ => Err(Rejection::Scheme {
            credential: credential.scheme(),
            route: terms.scheme.name(),
        }),
    }
}

fn check_exact(
    auth: &Authorization,
    signature: &alloy_primitives::Signature,
    credential: &Credential,
    terms: &Terms,
    now: u64,
) -> Result<Address, Rejection> {
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
    match auth.recover(credential.network, signature) {
        Some(signer) if signer == auth.from => Ok(signer),
        _ => Err(Rejection::Signature),
    }
}

/// `verifyUptoPermit2`'s offline checks, in its order. `facilitator` is the address the
/// witness must name (the route's, or at a facilitator its own).
fn check_upto(
    permit: &UptoAuthorization,
    signature: &alloy_primitives::Signature,
    credential: &Credential,
    terms: &Terms,
    facilitator: Address,
    now: u64,
) -> Result<Address, UptoRejection> {
    if permit.spender != UPTO_PROXY_ADDRESS {
        return Err(UptoRejection::Spender);
    }
    if permit.to != terms.pay_to {
        return Err(UptoRejection::Recipient);
    }
    if permit.facilitator != facilitator {
        return Err(UptoRejection::Facilitator);
    }
    if permit.deadline < now.saturating_add(SETTLE_MARGIN_SECONDS) {
        return Err(UptoRejection::Expired);
    }
    if permit.valid_after > now {
        return Err(UptoRejection::NotYetValid);
    }
    if permit.amount != terms.amount {
        return Err(UptoRejection::Amount);
    }
    if permit.token != terms.network.usdc {
        return Err(UptoRejection::Token);
    }
    match permit.recover(credential.network, signature) {
        Some(signer) if signer == permit.from => Ok(signer),
        _ => Err(UptoRejection::Signature),
    }
}
