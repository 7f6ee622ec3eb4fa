//! A payment header, decoded and typed: which x402 version, which network, the EIP-3009
//! authorization and its signature, and the document to forward to the facilitator.

use alloy_primitives::{Address, B256, Signature};
use serde_json::Value;

use crate::eip3009::{self, Authorization, AuthorizationError};
use crate::network::Network;
use crate::terms::SCHEME_EXACT;
use crate::wire::exact::ExactEvmPayload;
use crate::wire::v1::PaymentPayloadV1;
use crate::wire::v2::{PaymentPayloadV2, RequirementsV2};
use crate::wire::{self, HeaderError};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum X402Version {
    /// `X-PAYMENT` / `X-PAYMENT-RESPONSE`, JSON challenge body.
    V1,
    /// `PAYMENT-SIGNATURE` / `PAYMENT-RESPONSE`, `PAYMENT-REQUIRED` challenge header.
    V2,
}

impl X402Version {
    pub fn number(self) -> u8 {
        match self {
            X402Version::V1 => 1,
            X402Version::V2 => 2,
        }
    }

    /// The receipt header of this version.
    pub fn response_header(self) -> &'static str {
        match self {
            X402Version::V1 => crate::X_PAYMENT_RESPONSE,
            X402Version::V2 => crate::PAYMENT_RESPONSE,
        }
    }
}

/// Why a payment header is unusable. Messages never quote the header.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    #[error("payment header: {0}")]
    Header(#[from] HeaderError),
    #[error("payment header declares x402Version {found}; this header carries version {expected}")]
    Version { found: u8, expected: u8 },
    #[error("payment scheme {0:?} is not supported (only \"exact\")")]
    Scheme(String),
    #[error("payment network {0:?} is not supported")]
    Network(String),
    #[error("payment payload is not an exact EVM payload ({{signature, authorization}})")]
    Payload,
    #[error("payment {0}")]
    Authorization(#[from] AuthorizationError),
}

/// The replay identity of a credential: EIP-3009 nonces are spent once per token contract and
/// payer, so (chain, asset, payer, nonce) names one spendable authorization.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NonceKey {
    pub chain_id: u64,
    pub asset: Address,
    pub from: Address,
    pub nonce: B256,
}

impl std::fmt::Display for NonceKey {
    /// Lowercase and fixed-width, so one authorization always has one spelling.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{:x}:{:x}:{:x}",
            self.chain_id, self.asset, self.from, self.nonce
        )
    }
}

#[derive(Clone)]
pub struct Credential {
    pub version: X402Version,
    pub network: &'static Network,
    pub authorization: Authorization,
    pub signature: Signature,
    /// The requirement a v2 credential says it accepted (v1 credentials name none).
    pub accepted: Option<RequirementsV2>,
    /// The decoded document, forwarded to the facilitator as it came.
    pub document: Value,
}

impl std::fmt::Debug for Credential {
    /// A credential can be spent by whoever holds it: only its public parts are printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("version", &self.version)
            .field("network", &self.network.name)
            .field("from", &self.authorization.from)
            .field("signature", &"<redacted>")
            .finish_non_exhaustive()
    }
}

impl Credential {
    /// Decodes the header of `version` (`PAYMENT-SIGNATURE` for v2, `X-PAYMENT` for v1).
    pub fn decode(version: X402Version, header: &str) -> Result<Self, CredentialError> {
        let document: Value = wire::decode(header)?;
        Credential::from_document(version, document)
    }

    /// Types a decoded document (the facilitator's `paymentPayload`).
    pub fn from_document(version: X402Version, document: Value) -> Result<Self, CredentialError> {
        let (network, payload, accepted) = match version {
            X402Version::V2 => {
                let parsed: PaymentPayloadV2 = serde_json::from_value(document.clone())
                    .map_err(|_| HeaderError::NotJson("not an x402 v2 payment payload".into()))?;
                check_version(parsed.x402_version, 2)?;
                let accepted = parsed.accepted;
                if accepted.scheme != SCHEME_EXACT {
                    return Err(CredentialError::Scheme(accepted.scheme));
                }
                let network = Network::find(&accepted.network)
                    .filter(|network| network.caip2 == accepted.network)
                    .ok_or_else(|| CredentialError::Network(accepted.network.clone()))?;
                (network, parsed.payload, Some(accepted))
            }
            X402Version::V1 => {
                let parsed: PaymentPayloadV1 = serde_json::from_value(document.clone())
                    .map_err(|_| HeaderError::NotJson("not an x402 v1 payment payload".into()))?;
                check_version(parsed.x402_version, 1)?;
                if parsed.scheme != SCHEME_EXACT {
                    return Err(CredentialError::Scheme(parsed.scheme));
                }
                let network = Network::find(&parsed.network)
                    .filter(|network| network.name == parsed.network)
                    .ok_or_else(|| CredentialError::Network(parsed.network.clone()))?;
                (network, parsed.payload, None)
            }
        };
        let exact: ExactEvmPayload =
            serde_json::from_value(payload).map_err(|_| CredentialError::Payload)?;
        Ok(Credential {
            version,
            network,
            authorization: Authorization::from_wire(&exact.authorization)?,
            signature: eip3009::parse_signature(&exact.signature)?,
            accepted,
            document,
        })
    }

    pub fn nonce_key(&self) -> NonceKey {
        NonceKey {
            chain_id: self.network.chain_id,
            asset: self.network.usdc,
            from: self.authorization.from,
            nonce: self.authorization.nonce,
        }
    }
}

fn check_version(found: u8, expected: u8) -> Result<(), CredentialError> {
    if found == expected {
        Ok(())
    } else {
        Err(CredentialError::Version { found, expected })
    }
}
