//! A payment header, decoded and typed: which x402 version, which network, the scheme's
//! authorization (EIP-3009 for `exact`, a Permit2 witness for `upto`) and its signature, and
//! the document to forward to the facilitator.

use alloy_primitives::{Address, B256, Signature, U256};
use serde_json::Value;

use crate::eip3009::{self, Authorization, AuthorizationError};
use crate::network::Network;
use crate::permit2::{self, UptoAuthorization};
use crate::terms::{SCHEME_EXACT, SCHEME_UPTO};
use crate::wire::exact::ExactEvmPayload;
use crate::wire::upto::UptoEvmPayload;
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
    #[error("payment scheme {0:?} is not supported (\"exact\", or \"upto\" on x402 v2)")]
    Scheme(String),
    #[error("payment network {0:?} is not supported")]
    Network(String),
    #[error("payment payload is not an exact EVM payload ({{signature, authorization}})")]
    Payload,
    #[error("payment payload is not an upto EVM payload ({{signature, permit2Authorization}})")]
    UptoPayload,
    #[error("payment {0}")]
    Authorization(#[from] AuthorizationError),
}

/// The replay identity of a credential: a nonce is spent once per (chain, contract keeping it,
/// payer). EIP-3009 nonces are kept by the token (`asset` is USDC); Permit2 nonces by Permit2
/// (`asset` is [`permit2::PERMIT2_ADDRESS`], its uint256 nonce as 32 big-endian bytes). Two
/// contracts never share an address, so an exact key and an upto key never collide.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NonceKey {
    pub chain_id: u64,
    /// The contract keeping the nonce: the token (exact) or Permit2 (upto).
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

/// The scheme's signed authorization.
#[derive(Clone, PartialEq, Eq)]
pub enum Payload {
    /// `exact`: an EIP-3009 `TransferWithAuthorization` of exactly the price.
    Exact {
        authorization: Authorization,
        signature: Signature,
    },
    /// `upto`: a Permit2 witness transfer of at most the price, for one facilitator to settle.
    Upto {
        authorization: UptoAuthorization,
        signature: Signature,
    },
}

impl std::fmt::Debug for Payload {
    /// The signature is what makes the authorization spendable: never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Payload::Exact { authorization, .. } => f
                .debug_struct("Exact")
                .field("authorization", authorization)
                .field("signature", &"<redacted>")
                .finish(),
            Payload::Upto { authorization, .. } => f
                .debug_struct("Upto")
                .field("authorization", authorization)
                .field("signature", &"<redacted>")
                .finish(),
        }
    }
}

#[derive(Clone)]
pub struct Credential {
    pub version: X402Version,
    pub network: &'static Network,
    pub payload: Payload,
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
            .field("scheme", &self.scheme())
            .field("network", &self.network.name)
            .field("from", &self.payer())
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

    /// Types a decoded document (the facilitator's `paymentPayload`): `exact` on v1 and v2,
    /// `upto` on v2 (x402 v1 has no upto).
    pub fn from_document(version: X402Version, document: Value) -> Result<Self, CredentialError> {
        let (network, upto, payload, accepted) = match version {
            X402Version::V2 => {
                let parsed: PaymentPayloadV2 = serde_json::from_value(document.clone())
                    .map_err(|_| HeaderError::NotJson("not an x402 v2 payment payload".into()))?;
                check_version(parsed.x402_version, 2)?;
                let accepted = parsed.accepted;
                let upto = match accepted.scheme.as_str() {
                    SCHEME_EXACT => false,
                    SCHEME_UPTO => true,
                    _ => return Err(CredentialError::Scheme(accepted.scheme)),
                };
                let network = Network::find(&accepted.network)
                    .filter(|network| network.caip2 == accepted.network)
                    .ok_or_else(|| CredentialError::Network(accepted.network.clone()))?;
                (network, upto, parsed.payload, Some(accepted))
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
                (network, false, parsed.payload, None)
            }
        };
        let payload = if upto {
            let upto: UptoEvmPayload =
                serde_json::from_value(payload).map_err(|_| CredentialError::UptoPayload)?;
            Payload::Upto {
                authorization: UptoAuthorization::from_wire(&upto.permit2_authorization)?,
                signature: eip3009::parse_signature(&upto.signature)?,
            }
        } else {
            let exact: ExactEvmPayload =
                serde_json::from_value(payload).map_err(|_| CredentialError::Payload)?;
            Payload::Exact {
                authorization: Authorization::from_wire(&exact.authorization)?,
                signature: eip3009::parse_signature(&exact.signature)?,
            }
        };
        Ok(Credential {
            version,
            network,
            payload,
            accepted,
            document,
        })
    }

    /// `exact` or `upto`.
    pub fn scheme(&self) -> &'static str {
        match self.payload {
            Payload::Exact { .. } => SCHEME_EXACT,
            Payload::Upto { .. } => SCHEME_UPTO,
        }
    }

    /// The payer the authorization names (proven only once its signature is checked:
    /// [`crate::precheck()`]).
    pub fn payer(&self) -> Address {
        match &self.payload {
            Payload::Exact { authorization, .. } => authorization.from,
            Payload::Upto { authorization, .. } => authorization.from,
        }
    }

    /// The payee the authorization names.
    pub fn pay_to(&self) -> Address {
        match &self.payload {
            Payload::Exact { authorization, .. } => authorization.to,
            Payload::Upto { authorization, .. } => authorization.to,
        }
    }

    /// The most the credential can move, atomic units: the exact value, or upto's permitted
    /// maximum (what is settled may be less).
    pub fn max_amount(&self) -> U256 {
        match &self.payload {
            Payload::Exact { authorization, .. } => authorization.value,
            Payload::Upto { authorization, .. } => authorization.amount,
        }
    }

    /// Unix seconds from which it is usable (EIP-3009: strictly after; Permit2: from).
    pub fn valid_after(&self) -> u64 {
        match &self.payload {
            Payload::Exact { authorization, .. } => authorization.valid_after,
            Payload::Upto { authorization, .. } => authorization.valid_after,
        }
    }

    /// Unix seconds at which it stops being usable: EIP-3009's `validBefore`, Permit2's
    /// `deadline` (usable through that second). How long a spent credential's record must be
    /// kept is counted from it.
    pub fn valid_before(&self) -> u64 {
        match &self.payload {
            Payload::Exact { authorization, .. } => authorization.valid_before,
            Payload::Upto { authorization, .. } => authorization.deadline,
        }
    }

    pub fn signature(&self) -> &Signature {
        match &self.payload {
            Payload::Exact { signature, .. } | Payload::Upto { signature, .. } => signature,
        }
    }

    /// The EIP-3009 authorization of an `exact` credential.
    pub fn exact(&self) -> Option<&Authorization> {
        match &self.payload {
            Payload::Exact { authorization, .. } => Some(authorization),
            Payload::Upto { .. } => None,
        }
    }

    /// The Permit2 authorization of an `upto` credential.
    pub fn upto(&self) -> Option<&UptoAuthorization> {
        match &self.payload {
            Payload::Upto { authorization, .. } => Some(authorization),
            Payload::Exact { .. } => None,
        }
    }

    pub fn nonce_key(&self) -> NonceKey {
        match &self.payload {
            Payload::Exact { authorization, .. } => NonceKey {
                chain_id: self.network.chain_id,
                asset: self.network.usdc,
                from: authorization.from,
                nonce: authorization.nonce,
            },
            Payload::Upto { authorization, .. } => NonceKey {
                chain_id: self.network.chain_id,
                asset: permit2::PERMIT2_ADDRESS,
                from: authorization.from,
                nonce: authorization.nonce_bytes(),
            },
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
