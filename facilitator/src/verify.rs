//! Verification of a facilitator request, as `/verify` answers it and `/settle` repeats it:
//! the offline checks of `payments` (decoding, terms, EIP-712 signature recovery, validity
//! window), then the ledger's (nonce unspent, payer funded).
//!
//! For `upto` the requirements' `amount` is the maximum the permit must state exactly, the
//! witness must name this facilitator ([`crate::state::AppState::address`]; whatever the
//! requirements' `extra.facilitatorAddress` says, as @x402/evm checks its own signers), and
//! the payer must hold that maximum (what @x402/evm's simulated settlement demands).

use alloy_primitives::Address;
use payments::terms::SCHEME_UPTO;
use payments::terms::TermsError;
use payments::wire::facilitator::FacilitatorRequest;
use payments::wire::v1::RequirementsV1;
use payments::wire::v2::{RequirementsV2, ResourceInfo};
use payments::{Credential, CredentialError, Network, Terms, X402Version, precheck};
use serde_json::Value;

use crate::ledger::{Ledger, LedgerError, Transfer};

/// The networks this facilitator settles on (what `/supported` lists): a dev facilitator
/// answering "settled" for a mainnet payment would mislead.
pub const SUPPORTED_NETWORKS: [&str; 1] = ["base-sepolia"];

/// x402 `invalidReason` / `errorReason` values used here besides `payments`' own.
pub mod reason {
    pub const INVALID_VERSION: &str = "invalid_x402_version";
    pub const INVALID_PAYLOAD: &str = "invalid_payload";
    pub const UNSUPPORTED_SCHEME: &str = "unsupported_scheme";
    pub const INVALID_NETWORK: &str = "invalid_network";
    pub const INVALID_REQUIREMENTS: &str = "invalid_payment_requirements";
    pub const NONCE_USED: &str = "invalid_exact_evm_payload_authorization_nonce_used";
    /// An upto permit whose Permit2 nonce was spent (Permit2's `InvalidNonce`).
    pub const PERMIT2_NONCE_USED: &str = "permit2_invalid_nonce";
    pub const INSUFFICIENT_FUNDS: &str = "insufficient_funds";
    /// An upto settlement asking for more than the permit's maximum.
    pub const SETTLEMENT_EXCEEDS_AMOUNT: &str =
        "invalid_upto_evm_payload_settlement_exceeds_amount";
}

/// A credential that pays the requirements, and the transfer settling it would make (for
/// `upto`, of the permitted maximum: the settlement sets the actual amount).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    pub payer: Address,
    pub transfer: Transfer,
    /// Whether the credential is an upto permit.
    pub upto: bool,
}

/// Why a request does not pay; `payer` when the credential named one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    pub reason: &'static str,
    pub payer: Option<Address>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Valid(Checked),
    Invalid(Invalid),
}

/// The requirements' network as the client spelled it (echoed in settle responses).
pub fn request_network(request: &FacilitatorRequest) -> String {
    request
        .payment_requirements
        .get("network")
        .and_then(|network| network.as_str())
        .unwrap_or_default()
        .to_owned()
}

/// Offline checks then ledger checks, at `now` (Unix seconds); `facilitator` is this
/// facilitator's address.
pub async fn verify(
    ledger: &dyn Ledger,
    facilitator: Address,
    request: &FacilitatorRequest,
    now: u64,
) -> Result<Verdict, LedgerError> {
    let checked = match check_offline(request, facilitator, now) {
        Ok(checked) => checked,
        Err(invalid) => return Ok(Verdict::Invalid(invalid)),
    };
    let invalid = |reason| {
        Ok(Verdict::Invalid(Invalid {
            reason,
            payer: Some(checked.payer),
        }))
    };
    if ledger.nonce_used(&checked.transfer.key).await? {
        return invalid(if checked.upto {
            reason::PERMIT2_NONCE_USED
        } else {
            reason::NONCE_USED
        });
    }
    if ledger.balance(checked.payer).await? < checked.transfer.amount {
        return invalid(reason::INSUFFICIENT_FUNDS);
    }
    Ok(Verdict::Valid(checked))
}

/// Everything that needs no state: version, payload, requirements, network, signature, times.
pub fn check_offline(
    request: &FacilitatorRequest,
    facilitator: Address,
    now: u64,
) -> Result<Checked, Invalid> {
    let unnamed = |reason| Invalid {
        reason,
        payer: None,
    };
    let version = match request.x402_version {
        1 => X402Version::V1,
        2 => X402Version::V2,
        _ => return Err(unnamed(reason::INVALID_VERSION)),
    };
    // A payload of another version would otherwise fail on its shape, a less useful reason.
    let declared = request
        .payment_payload
        .get("x402Version")
        .and_then(|declared| declared.as_u64());
    if declared.is_some_and(|declared| declared != u64::from(request.x402_version)) {
        return Err(unnamed(reason::INVALID_VERSION));
    }
    let credential = Credential::from_document(version, request.payment_payload.clone())
        .map_err(|err| unnamed(credential_reason(&err)))?;
    let named = |reason| Invalid {
        reason,
        payer: Some(credential.payer()),
    };
    let terms = terms(version, request, facilitator).map_err(named)?;
    if !SUPPORTED_NETWORKS.contains(&terms.network.name) {
        return Err(named(reason::INVALID_NETWORK));
    }
    let payer =
        precheck(&credential, &terms, now).map_err(|rejection| named(rejection.reason()))?;
    Ok(Checked {
        payer,
        transfer: Transfer {
            key: credential.nonce_key(),
            from: payer,
            to: credential.pay_to(),
            amount: credential.max_amount(),
        },
        upto: credential.upto().is_some(),
    })
}

/// The requirements in the request's version; a v2 credential's `resource` rides along (it is
/// informational: nothing signed covers it). An upto requirement is read as settled by
/// `facilitator`, whatever its `extra.facilitatorAddress` says.
fn terms(
    version: X402Version,
    request: &FacilitatorRequest,
    facilitator: Address,
) -> Result<Terms, &'static str> {
    let result = match version {
        X402Version::V2 => {
            let mut requirements: RequirementsV2 =
                serde_json::from_value(request.payment_requirements.clone())
                    .map_err(|_| reason::INVALID_REQUIREMENTS)?;
            if requirements.scheme == SCHEME_UPTO {
                let mut extra = match requirements.extra.take() {
                    Some(Value::Object(extra)) => extra,
                    _ => serde_json::Map::new(),
                };
                extra.insert(
                    "facilitatorAddress".into(),
                    Value::String(facilitator.to_checksum(None)),
                );
                requirements.extra = Some(Value::Object(extra));
            }
            let resource = request
                .payment_payload
                .get("resource")
                .and_then(|resource| serde_json::from_value::<ResourceInfo>(resource.clone()).ok())
                .unwrap_or(ResourceInfo {
                    url: String::new(),
                    description: String::new(),
                    mime_type: String::new(),
                });
            Terms::from_v2(&requirements, resource)
        }
        X402Version::V1 => {
            let requirements: RequirementsV1 =
                serde_json::from_value(request.payment_requirements.clone())
                    .map_err(|_| reason::INVALID_REQUIREMENTS)?;
            Terms::from_v1(&requirements)
        }
    };
    result.map_err(|err| match err {
        TermsError::Scheme(_) => reason::UNSUPPORTED_SCHEME,
        TermsError::Network(_) => reason::INVALID_NETWORK,
        TermsError::Asset | TermsError::Field(_) => reason::INVALID_REQUIREMENTS,
    })
}

fn credential_reason(err: &CredentialError) -> &'static str {
    match err {
        CredentialError::Version { .. } => reason::INVALID_VERSION,
        CredentialError::Scheme(_) => reason::UNSUPPORTED_SCHEME,
        CredentialError::Network(_) => reason::INVALID_NETWORK,
        CredentialError::Header(_)
        | CredentialError::Payload
        | CredentialError::UptoPayload
        | CredentialError::Authorization(_) => reason::INVALID_PAYLOAD,
    }
}

/// The networks `/supported` lists: `exact` on each by v1 name and by CAIP-2 id, `upto` by
/// CAIP-2 id (x402 v2 only).
pub fn supported_networks() -> impl Iterator<Item = &'static Network> {
    SUPPORTED_NETWORKS
        .iter()
        .filter_map(|name| Network::find(name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(version: u8, payload: serde_json::Value) -> FacilitatorRequest {
        FacilitatorRequest {
            x402_version: version,
            payment_payload: payload,
            payment_requirements: json!({"network": "eip155:84532"}),
        }
    }

    #[test]
    fn refuses_unknown_versions_and_garbage_payloads() {
        let refused = |request: &FacilitatorRequest| check_offline(request, Address::ZERO, 0).err();
        assert_eq!(
            refused(&request(3, json!({}))),
            Some(Invalid {
                reason: reason::INVALID_VERSION,
                payer: None
            })
        );
        assert_eq!(
            refused(&request(2, json!({"x402Version": 2}))).map(|i| i.reason),
            Some(reason::INVALID_PAYLOAD)
        );
        assert_eq!(
            refused(&request(2, json!("nope"))).map(|i| i.reason),
            Some(reason::INVALID_PAYLOAD)
        );
        assert_eq!(request_network(&request(2, json!({}))), "eip155:84532");
        assert_eq!(
            supported_networks().map(|n| n.caip2).collect::<Vec<_>>(),
            vec!["eip155:84532"]
        );
    }
}
