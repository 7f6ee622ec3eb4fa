//! The `evm` payment method's `charge` intent (draft-evm-charge), paid by a
//! `type="authorization"` credential: an EIP-3009 `TransferWithAuthorization` of the
//! network's USDC, signed by the payer, which the server submits (through the facilitator).
//!
//! The request (JCS, in the challenge's `request`), as mppx's `evm/Methods.ts` writes it:
//!
//! ```json
//! {"amount":"1000","currency":"0x036CbD53842c5426634e7929541eC2318f3dCF7e",
//!  "methodDetails":{"chainId":84532,"credentialTypes":["authorization"],"decimals":6},
//!  "recipient":"0x…"}
//! ```
//!
//! The payload: `{type: "authorization", from, to, value, validAfter, validBefore, nonce,
//! signature}`, all strings. Its `nonce` binds it to one challenge: `keccak256(abi.encodePacked(
//! challenge.id, challenge.realm))`, the keccak of the id's UTF-8 bytes followed by the
//! realm's ([`challenge_hash`]). The EIP-712 domain is the token's (name and version from
//! [`Network`], verifying contract = `currency`, chain = `chainId`), as for x402's `exact`.

use alloy_primitives::{Address, B256, Signature, U256, keccak256};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::INTENT_CHARGE;
use super::challenge::{ChallengeError, ChallengeParams, ChallengeSecret};
use super::credential::PaymentCredential;
use super::problem::Problem;
use super::verify::{MppRejection, verify_challenge};
use crate::credential::{Credential, NonceKey, X402Version};
use crate::eip3009::{self, Authorization, AuthorizationError};
use crate::network::{Network, USDC_DECIMALS};
use crate::precheck::SETTLE_MARGIN_SECONDS;
use crate::terms::Terms;
use crate::wire::exact::AuthorizationWire;

/// The method identifier.
pub const METHOD: &str = "evm";
/// The one credential type accepted here (EIP-3009; USDC implements it).
pub const CREDENTIAL_AUTHORIZATION: &str = "authorization";

/// The `request` of an `evm` `charge` challenge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChargeRequest {
    /// Base units, a decimal string.
    pub amount: String,
    /// The ERC-20 contract, EIP-55.
    pub currency: String,
    /// EIP-55.
    pub recipient: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_id: Option<String>,
    pub method_details: MethodDetails,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MethodDetails {
    /// EIP-155 chain id (a JSON number).
    pub chain_id: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_types: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decimals: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permit2_address: Option<String>,
    /// Only Permit2 credentials can pay splits: present and non-empty, the challenge is not
    /// payable by authorization.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub splits: Option<Vec<Value>>,
}

impl ChargeRequest {
    /// What `terms` ask, as an `evm` charge payable by authorization.
    pub fn for_terms(terms: &Terms) -> Self {
        ChargeRequest {
            amount: terms.amount.to_string(),
            currency: terms.network.usdc.to_checksum(None),
            recipient: terms.pay_to.to_checksum(None),
            description: None,
            external_id: None,
            method_details: MethodDetails {
                chain_id: terms.network.chain_id,
                credential_types: Some(vec![CREDENTIAL_AUTHORIZATION.into()]),
                decimals: Some(USDC_DECIMALS),
                permit2_address: None,
                splits: None,
            },
        }
    }

    /// The known network whose USDC this request names (by chain id and contract).
    pub fn network(&self) -> Option<&'static Network> {
        let currency = self.currency.parse::<Address>().ok()?;
        Network::find(&format!("eip155:{}", self.method_details.chain_id))
            .filter(|network| network.usdc == currency)
    }

    fn accepts_authorization(&self) -> bool {
        self.method_details
            .credential_types
            .as_ref()
            .is_some_and(|types| types.iter().any(|t| t == CREDENTIAL_AUTHORIZATION))
    }

    fn has_splits(&self) -> bool {
        self.method_details
            .splits
            .as_ref()
            .is_some_and(|splits| !splits.is_empty())
    }
}

/// The challenge parameters of a route priced by `terms`, in the protection space `realm`
/// (the gateway's host name, say). Keep it: challenges are issued from it and credentials
/// checked against it.
pub fn charge_params(realm: &str, terms: &Terms) -> Result<ChallengeParams, ChallengeError> {
    let request = serde_json::to_value(ChargeRequest::for_terms(terms))
        .map_err(|_| ChallengeError::Canonicalize)?;
    ChallengeParams::new(realm, METHOD, INTENT_CHARGE, &request)
}

/// The `type="authorization"` payload.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuthorizationPayload {
    #[serde(rename = "type")]
    pub kind: String,
    pub from: String,
    pub to: String,
    pub value: String,
    pub valid_after: String,
    pub valid_before: String,
    pub nonce: String,
    pub signature: String,
}

impl std::fmt::Debug for AuthorizationPayload {
    /// The signature is what makes the authorization spendable: never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthorizationPayload")
            .field("type", &self.kind)
            .field("from", &self.from)
            .field("to", &self.to)
            .field("value", &self.value)
            .field("nonce", &self.nonce)
            .field("signature", &"<redacted>")
            .finish_non_exhaustive()
    }
}

/// The EIP-3009 nonce that binds an authorization to one challenge:
/// `keccak256(abi.encodePacked(id, realm))` (two strings packed: their bytes, back to back).
pub fn challenge_hash(id: &str, realm: &str) -> B256 {
    let mut packed = Vec::with_capacity(id.len() + realm.len());
    packed.extend_from_slice(id.as_bytes());
    packed.extend_from_slice(realm.as_bytes());
    keccak256(&packed)
}

/// The `source` of a payer: `did:pkh:eip155:<chainId>:<EIP-55 address>` (mppx's
/// `evm/Types.ts` `toSource`).
pub fn did_pkh(chain_id: u64, address: Address) -> String {
    format!("did:pkh:eip155:{chain_id}:{}", address.to_checksum(None))
}

/// Why an `evm` charge credential does not pay its challenge. Messages quote nothing of it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChargeRejection {
    #[error("the credential is not for an evm charge")]
    Method,
    #[error("the challenge's request is not an evm charge request")]
    Request,
    #[error("the challenge does not accept authorization credentials, or has splits")]
    NotAuthorizable,
    #[error("the challenge's chain and currency are not a known network's USDC")]
    Network,
    #[error("the payload is not an evm authorization payload")]
    Payload,
    #[error("the payload's type is not \"authorization\"")]
    CredentialType,
    #[error("payment {0}")]
    Field(#[from] AuthorizationError),
    #[error("the authorization pays another recipient than the challenge's")]
    Recipient,
    #[error("the authorization's value is not the challenge's amount")]
    Amount,
    #[error("the authorization's nonce is not bound to this challenge")]
    ChallengeBinding,
    #[error("the authorization is not valid yet")]
    NotYetValid,
    #[error("the authorization has expired or expires too soon to settle")]
    Expired,
    #[error("the signature does not match the authorization's payer")]
    Signature,
    #[error("the credential's source is not the authorization's payer")]
    Source,
}

impl ChargeRejection {
    pub fn problem(&self) -> Problem {
        match self {
            ChargeRejection::Method => Problem::MethodUnsupported,
            ChargeRejection::Payload | ChargeRejection::Field(_) => Problem::MalformedCredential,
            ChargeRejection::Expired => Problem::PaymentExpired,
            _ => Problem::VerificationFailed,
        }
    }
}

/// A credential that passed every offline check: what to settle, and who pays.
#[derive(Clone, PartialEq, Eq)]
pub struct VerifiedCharge {
    pub challenge_id: String,
    pub network: &'static Network,
    pub authorization: Authorization,
    pub signature: Signature,
}

impl std::fmt::Debug for VerifiedCharge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerifiedCharge")
            .field("challenge_id", &self.challenge_id)
            .field("network", &self.network.name)
            .field("payer", &self.authorization.from)
            .field("amount", &self.authorization.value)
            .field("signature", &"<redacted>")
            .finish()
    }
}

impl VerifiedCharge {
    /// The payer (the recovered signer, equal to `from`).
    pub fn payer(&self) -> Address {
        self.authorization.from
    }

    /// The replay identity of the authorization, as for an x402 credential.
    pub fn nonce_key(&self) -> NonceKey {
        NonceKey {
            chain_id: self.network.chain_id,
            asset: self.network.usdc,
            from: self.authorization.from,
            nonce: self.authorization.nonce,
        }
    }

    /// The same authorization as an x402 v2 `exact` credential for `terms` (the route's), so
    /// the facilitator's `/verify` and `/settle` can take it (what mppx's
    /// `settleWithFacilitator` sends).
    pub fn to_x402(&self, terms: &Terms) -> Credential {
        let signature = eip3009::signature_hex(&self.signature);
        Credential {
            version: X402Version::V2,
            network: self.network,
            payload: crate::credential::Payload::Exact {
                authorization: self.authorization.clone(),
                signature: self.signature,
            },
            accepted: Some(terms.requirements_v2()),
            document: crate::payer::v2_document(terms, &self.authorization, &signature),
        }
    }
}

/// The offline checks of an `evm` charge credential whose challenge was already verified
/// ([`verify_challenge`]): the payload's recipient, amount, asset and chain are the request's,
/// its nonce is bound to the challenge, it is valid at `now` (and long enough to settle), and
/// its signature recovers to `from` (and `source`, when sent, names `from`).
pub fn verify_charge(
    credential: &PaymentCredential,
    now: u64,
) -> Result<VerifiedCharge, ChargeRejection> {
    let challenge = &credential.challenge;
    if challenge.method != METHOD || challenge.intent != INTENT_CHARGE {
        return Err(ChargeRejection::Method);
    }
    let request: ChargeRequest = challenge
        .request_json()
        .ok()
        .and_then(|value| serde_json::from_value(value).ok())
        .ok_or(ChargeRejection::Request)?;
    if !request.accepts_authorization() || request.has_splits() {
        return Err(ChargeRejection::NotAuthorizable);
    }
    let network = request.network().ok_or(ChargeRejection::Network)?;
    let recipient = request
        .recipient
        .parse::<Address>()
        .map_err(|_| ChargeRejection::Request)?;
    let amount = parse_amount(&request.amount).ok_or(ChargeRejection::Request)?;

    let payload: AuthorizationPayload =
        serde_json::from_value(credential.payload.clone()).map_err(|_| ChargeRejection::Payload)?;
    if payload.kind != CREDENTIAL_AUTHORIZATION {
        return Err(ChargeRejection::CredentialType);
    }
    let authorization = Authorization::from_wire(&AuthorizationWire {
        from: payload.from.clone(),
        to: payload.to.clone(),
        value: payload.value.clone(),
        valid_after: payload.valid_after.clone(),
        valid_before: payload.valid_before.clone(),
        nonce: payload.nonce.clone(),
    })?;
    let signature = eip3009::parse_signature(&payload.signature)?;

    if authorization.to != recipient {
        return Err(ChargeRejection::Recipient);
    }
    if authorization.value != amount {
        return Err(ChargeRejection::Amount);
    }
    if authorization.nonce != challenge_hash(&challenge.id, &challenge.realm) {
        return Err(ChargeRejection::ChallengeBinding);
    }
    // The token contract's rule: valid strictly after validAfter, strictly before validBefore.
    if authorization.valid_after >= now {
        return Err(ChargeRejection::NotYetValid);
    }
    if authorization.valid_before <= now.saturating_add(SETTLE_MARGIN_SECONDS) {
        return Err(ChargeRejection::Expired);
    }
    match authorization.recover(network, &signature) {
        Some(signer) if signer == authorization.from => {}
        _ => return Err(ChargeRejection::Signature),
    }
    if let Some(source) = &credential.source
        && *source != did_pkh(network.chain_id, authorization.from)
    {
        return Err(ChargeRejection::Source);
    }
    Ok(VerifiedCharge {
        challenge_id: challenge.id.clone(),
        network,
        authorization,
        signature,
    })
}

/// Everything the gateway checks before any state is reserved or the facilitator asked, in
/// one call: the `Authorization` value read, its challenge issued here for this route
/// (`expected`) and open at `now`, its authorization paying it. Single use (the challenge id
/// and the authorization's [`NonceKey`]) is the caller's to claim next.
pub fn verify_authorization_header(
    header: &str,
    secret: &ChallengeSecret,
    expected: &ChallengeParams,
    now: u64,
) -> Result<(PaymentCredential, VerifiedCharge), MppRejection> {
    let credential = PaymentCredential::parse_authorization(header)?;
    verify_challenge(&credential.challenge, secret, expected, now)?;
    let verified = verify_charge(&credential, now)?;
    Ok((credential, verified))
}

/// A decimal string of base units (digits only).
pub(crate) fn parse_amount(text: &str) -> Option<U256> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    U256::from_str_radix(text, 10).ok()
}
