//! The paying side: a local private key answers a 402 with a signed credential: `exact` (an
//! EIP-3009 authorization of the price) or `upto` (a Permit2 witness permit of the maximum,
//! as @x402/evm's client signs it).
//!
//! The key is read from a file or an environment variable and never printed (`Debug` shows
//! the address only). A spend cap refuses any challenge that asks for more; for `upto` the
//! cap bounds the maximum signed, not what the server later settles.

use std::path::Path;

use alloy_primitives::{Address, B256, U256};
use alloy_signer_local::PrivateKeySigner;
use serde_json::json;

use crate::credential::X402Version;
use crate::eip3009::{Authorization, signature_hex};
use crate::network::Network;
use crate::permit2::{UPTO_PROXY_ADDRESS, UptoAuthorization};
use crate::target::{Limits, Refusal, RequestTarget};
use crate::terms::{SCHEME_EXACT, Scheme, Terms, TermsError};
use crate::wire::exact::ExactEvmPayload;
use crate::wire::upto::UptoEvmPayload;
use crate::wire::v1::{ChallengeV1, PaymentPayloadV1};
use crate::wire::v2::{ChallengeV2, PaymentPayloadV2, RequirementsV2};
use crate::wire::{self, HeaderError};

/// Authorizations are back-dated this much, so a payee whose clock runs a little behind still
/// sees them as valid (what x402's own clients do).
const CLOCK_SKEW_SECONDS: u64 = 600;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayError {
    #[error("private key is not a 32-byte hex key")]
    Key,
    #[error("private key file could not be read: {0}")]
    KeyFile(String),
    #[error("private key variable {0} is not set")]
    KeyVar(String),
    #[error("the 402 carries no x402 challenge this client can read")]
    NoChallenge,
    #[error(
        "the challenge offers no payment this client can make (exact, or upto on x402 v2, in \
         USDC on a known EVM network)"
    )]
    NothingPayable,
    #[error("the price {asked} USDC is above the spend cap of {cap} USDC")]
    OverCap { asked: String, cap: String },
    #[error("signing failed")]
    Signing,
    #[error("challenge: {0}")]
    Header(#[from] HeaderError),
    /// An MPP ("Payment" scheme) challenge that could not be answered.
    #[error("MPP challenge: {0}")]
    Mpp(String),
    /// The 402 asks for something other than what was requested (another resource, realm or
    /// sign-in domain), or on an unknown network or asset: nothing was signed.
    #[error("refused to sign: {0}")]
    Refused(#[from] Refusal),
}

/// A server's 402, as the payer reads it.
#[derive(Debug, Clone, PartialEq)]
pub enum Challenge {
    V2(ChallengeV2),
    V1(ChallengeV1),
}

impl Challenge {
    /// The v2 `PAYMENT-REQUIRED` header when present, else a v1 JSON body.
    pub fn from_response(payment_required: Option<&str>, body: &[u8]) -> Result<Self, PayError> {
        if let Some(header) = payment_required {
            return Ok(Challenge::V2(wire::decode(header)?));
        }
        serde_json::from_slice::<ChallengeV1>(body)
            .ok()
            .filter(|challenge| challenge.x402_version == 1)
            .map(Challenge::V1)
            .ok_or(PayError::NoChallenge)
    }
}

/// A credential to send: the header's name and value, and what it pays.
#[derive(Clone, PartialEq, Eq)]
pub struct PaymentHeader {
    pub version: X402Version,
    pub name: &'static str,
    pub value: String,
    /// Atomic units: the price (`exact`) or the most that can be settled (`upto`).
    pub amount: U256,
    pub pay_to: Address,
    pub payer: Address,
    /// The EIP-3009 nonce, or the Permit2 nonce as 32 big-endian bytes.
    pub nonce: B256,
}

impl std::fmt::Debug for PaymentHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PaymentHeader")
            .field("name", &self.name)
            .field("value", &"<redacted>")
            .field("amount", &self.amount)
            .field("payer", &self.payer)
            .finish_non_exhaustive()
    }
}

#[derive(Clone)]
pub struct LocalPayer {
    signer: PrivateKeySigner,
}

impl std::fmt::Debug for LocalPayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalPayer")
            .field("address", &self.signer.address())
            .finish_non_exhaustive()
    }
}

impl LocalPayer {
    /// A 32-byte key in hex, with or without `0x`, surrounding whitespace ignored.
    pub fn from_hex(key: &str) -> Result<Self, PayError> {
        let key = key.trim();
        let key = key.strip_prefix("0x").unwrap_or(key);
        let bytes = B256::from_slice(&{
            if key.len() != 64 {
                return Err(PayError::Key);
            }
            alloy_primitives::hex::decode(key).map_err(|_| PayError::Key)?
        });
        PrivateKeySigner::from_bytes(&bytes)
            .map(|signer| LocalPayer { signer })
            .map_err(|_| PayError::Key)
    }

    /// The key in a file (its only content, hex).
    pub fn from_file(path: &Path) -> Result<Self, PayError> {
        let text =
            std::fs::read_to_string(path).map_err(|err| PayError::KeyFile(err.to_string()))?;
        LocalPayer::from_hex(&text)
    }

    /// The key in an environment variable.
    pub fn from_env(var: &str) -> Result<Self, PayError> {
        let text = std::env::var(var).map_err(|_| PayError::KeyVar(var.to_owned()))?;
        LocalPayer::from_hex(&text)
    }

    pub fn address(&self) -> Address {
        self.signer.address()
    }

    /// The key, for the other paying sides of this crate (MPP, SIWX); never leaves it.
    pub(crate) fn signer(&self) -> &PrivateKeySigner {
        &self.signer
    }

    /// Signs an authorization for `terms` with a fresh random nonce, valid from a little before
    /// `now` until `now + maxTimeoutSeconds` (at least a minute).
    pub fn authorize(&self, terms: &Terms, now: u64) -> Result<(Authorization, String), PayError> {
        self.authorize_within(terms, u64::MAX, now)
    }

    /// [`LocalPayer::authorize`], valid for at most `max_validity_seconds` after `now`.
    fn authorize_within(
        &self,
        terms: &Terms,
        max_validity_seconds: u64,
        now: u64,
    ) -> Result<(Authorization, String), PayError> {
        let validity = terms.max_timeout_seconds.max(60).min(max_validity_seconds);
        let authorization = Authorization {
            from: self.signer.address(),
            to: terms.pay_to,
            value: terms.amount,
            valid_after: now.saturating_sub(CLOCK_SKEW_SECONDS),
            valid_before: now.saturating_add(validity),
            nonce: B256::random(),
        };
        let signature = authorization
            .sign(terms.network, &self.signer)
            .ok_or(PayError::Signing)?;
        Ok((authorization, signature_hex(&signature)))
    }

    /// Signs an upto permit for `terms` (at most `terms.amount`, for `terms`' facilitator) with
    /// a fresh random nonce, usable from `validAfter` 0 (as @x402/evm's client signs it) until
    /// `now + maxTimeoutSeconds` (at least a minute). Exact terms are nothing to sign here.
    pub fn authorize_upto(
        &self,
        terms: &Terms,
        now: u64,
    ) -> Result<(UptoAuthorization, String), PayError> {
        self.authorize_upto_within(terms, u64::MAX, now)
    }

    fn authorize_upto_within(
        &self,
        terms: &Terms,
        max_validity_seconds: u64,
        now: u64,
    ) -> Result<(UptoAuthorization, String), PayError> {
        let Scheme::Upto { facilitator } = terms.scheme else {
            return Err(PayError::NothingPayable);
        };
        let validity = terms.max_timeout_seconds.max(60).min(max_validity_seconds);
        let permit = UptoAuthorization {
            from: self.signer.address(),
            token: terms.network.usdc,
            amount: terms.amount,
            spender: UPTO_PROXY_ADDRESS,
            nonce: U256::from_be_bytes(B256::random().0),
            deadline: now.saturating_add(validity),
            to: terms.pay_to,
            facilitator,
            valid_after: 0,
        };
        let signature = permit
            .sign(terms.network, &self.signer)
            .ok_or(PayError::Signing)?;
        Ok((permit, signature_hex(&signature)))
    }

    /// Answers `challenge` with a credential, refusing a price above `cap` (atomic units), an
    /// unknown network or asset. It does not check whose resource the challenge names: a
    /// client answering a server's 402 uses [`LocalPayer::answer_for`].
    pub fn answer(
        &self,
        challenge: &Challenge,
        cap: Option<U256>,
        now: u64,
    ) -> Result<PaymentHeader, PayError> {
        let (version, terms, accepted) = select(challenge, None)?;
        self.sign_answer(version, terms, accepted, cap, u64::MAX, now)
    }

    /// Answers `challenge`, a 402 to a request for `target`, within `limits`: refuses a
    /// challenge whose resource is not of the target's origin and path, an unknown network or
    /// asset, a price above the cap; the authorization is valid for at most
    /// `limits.max_validity_seconds`. A refusal signs nothing.
    pub fn answer_for(
        &self,
        challenge: &Challenge,
        target: &RequestTarget,
        limits: &Limits,
        now: u64,
    ) -> Result<PaymentHeader, PayError> {
        let (version, terms, accepted) = select(challenge, Some(target))?;
        self.sign_answer(
            version,
            terms,
            accepted,
            limits.cap,
            limits.max_validity_seconds,
            now,
        )
    }

    fn sign_answer(
        &self,
        version: X402Version,
        terms: Terms,
        accepted: Option<RequirementsV2>,
        cap: Option<U256>,
        max_validity_seconds: u64,
        now: u64,
    ) -> Result<PaymentHeader, PayError> {
        if let Some(cap) = cap
            && terms.amount > cap
        {
            return Err(PayError::OverCap {
                asked: crate::amount::to_decimal(terms.amount),
                cap: crate::amount::to_decimal(cap),
            });
        }
        let (payload, nonce) = match terms.scheme {
            Scheme::Exact => {
                let (authorization, signature) =
                    self.authorize_within(&terms, max_validity_seconds, now)?;
                let payload = serde_json::to_value(ExactEvmPayload {
                    signature,
                    authorization: authorization.to_wire(),
                });
                (payload, authorization.nonce)
            }
            // x402 v1 has no upto (`Terms::from_v1` never yields it): nothing to sign there.
            Scheme::Upto { .. } if accepted.is_none() => return Err(PayError::NothingPayable),
            Scheme::Upto { .. } => {
                let (permit, signature) =
                    self.authorize_upto_within(&terms, max_validity_seconds, now)?;
                let payload = serde_json::to_value(UptoEvmPayload {
                    signature,
                    permit2_authorization: permit.to_wire(),
                });
                (payload, permit.nonce_bytes())
            }
        };
        let payload = payload.map_err(|_| PayError::Signing)?;
        let value = match accepted {
            Some(accepted) => wire::encode(&PaymentPayloadV2 {
                x402_version: 2,
                resource: Some(terms.resource.clone()),
                accepted,
                payload,
                extensions: None,
            }),
            None => wire::encode(&PaymentPayloadV1 {
                x402_version: 1,
                scheme: SCHEME_EXACT.into(),
                network: terms.network.name.into(),
                payload,
            }),
        };
        Ok(PaymentHeader {
            version,
            name: match version {
                X402Version::V1 => crate::X_PAYMENT,
                X402Version::V2 => crate::PAYMENT_SIGNATURE,
            },
            value,
            amount: terms.amount,
            pay_to: terms.pay_to,
            payer: self.signer.address(),
            nonce,
        })
    }
}

/// The first requirement of `challenge` this client pays (with `target`, only for the target's
/// resource), or why none: the first refusal met (another resource, an unknown network or
/// asset), else [`PayError::NothingPayable`].
fn select(
    challenge: &Challenge,
    target: Option<&RequestTarget>,
) -> Result<(X402Version, Terms, Option<RequirementsV2>), PayError> {
    let mut refusal = None;
    match challenge {
        Challenge::V2(challenge) => {
            if let Some(target) = target {
                target.check_resource(&challenge.resource.url)?;
            }
            for requirement in &challenge.accepts {
                match Terms::from_v2(requirement, challenge.resource.clone()) {
                    Ok(terms) => return Ok((X402Version::V2, terms, Some(requirement.clone()))),
                    Err(err) => note(
                        &mut refusal,
                        refusal_of(&err, &requirement.network, &requirement.asset),
                    ),
                }
            }
        }
        Challenge::V1(challenge) => {
            for requirement in &challenge.accepts {
                if let Some(target) = target
                    && let Err(why) = target.check_resource(&requirement.resource)
                {
                    note(&mut refusal, Some(why));
                    continue;
                }
                match Terms::from_v1(requirement) {
                    Ok(terms) => return Ok((X402Version::V1, terms, None)),
                    Err(err) => note(
                        &mut refusal,
                        refusal_of(&err, &requirement.network, &requirement.asset),
                    ),
                }
            }
        }
    }
    Err(refusal.map_or(PayError::NothingPayable, PayError::Refused))
}

/// Keeps the first refusal met.
fn note(first: &mut Option<Refusal>, refusal: Option<Refusal>) {
    if first.is_none() {
        *first = refusal;
    }
}

/// The refusal a requirement's terms error stands for: an unknown network or asset (other
/// reasons, such as another scheme, are "nothing payable").
pub(crate) fn refusal_of(err: &TermsError, network: &str, asset: &str) -> Option<Refusal> {
    match err {
        TermsError::Network(_) => Some(Refusal::unknown_network(network)),
        TermsError::Asset | TermsError::Field("asset") => {
            Network::find(network).map(|known| Refusal::unknown_asset(known, asset))
        }
        _ => None,
    }
}

/// An `upto` v2 credential document for tests and tools that build one by hand.
pub fn v2_upto_document(
    terms: &Terms,
    permit: &UptoAuthorization,
    signature: &str,
) -> serde_json::Value {
    json!({
        "x402Version": 2,
        "resource": terms.resource,
        "accepted": terms.requirements_v2(),
        "payload": {"signature": signature, "permit2Authorization": permit.to_wire()},
    })
}

/// An `exact` v2 credential document for tests and tools that build one by hand.
pub fn v2_document(
    terms: &Terms,
    authorization: &Authorization,
    signature: &str,
) -> serde_json::Value {
    json!({
        "x402Version": 2,
        "resource": terms.resource,
        "accepted": terms.requirements_v2(),
        "payload": {"signature": signature, "authorization": authorization.to_wire()},
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credential::Credential;
    use crate::precheck::{Rejection, precheck};
    use crate::wire::v2::ResourceInfo;

    const ANVIL_KEY_0: &str = "ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";
    const NOW: u64 = 1_800_000_000;

    fn terms() -> Terms {
        Terms {
            scheme: Scheme::Exact,
            network: &crate::network::NETWORKS[0],
            amount: U256::from(1000u64),
            pay_to: Address::repeat_byte(0x22),
            max_timeout_seconds: 300,
            resource: ResourceInfo {
                url: "http://127.0.0.1/entrypoints/echo/invoke".into(),
                description: String::new(),
                mime_type: "application/json".into(),
            },
        }
    }

    fn payer() -> LocalPayer {
        match LocalPayer::from_hex(ANVIL_KEY_0) {
            Ok(payer) => payer,
            Err(err) => panic!("{err}"),
        }
    }

    #[test]
    fn answers_both_versions_and_passes_precheck() {
        let payer = payer();
        for challenge in [
            Challenge::V2(terms().challenge_v2(None)),
            Challenge::V1(terms().challenge_v1("X-PAYMENT header is required")),
        ] {
            let header = match payer.answer(&challenge, None, NOW) {
                Ok(header) => header,
                Err(err) => panic!("{err}"),
            };
            let credential = match Credential::decode(header.version, &header.value) {
                Ok(credential) => credential,
                Err(err) => panic!("{err}"),
            };
            assert_eq!(precheck(&credential, &terms(), NOW), Ok(payer.address()));
            assert_eq!(credential.nonce_key().nonce, header.nonce);
            assert!(!format!("{credential:?}{header:?}{payer:?}").contains(&header.value));
        }
    }

    #[test]
    fn precheck_refuses_other_terms_and_times() {
        let payer = payer();
        let Ok(header) = payer.answer(&Challenge::V2(terms().challenge_v2(None)), None, NOW) else {
            panic!("answers")
        };
        let Ok(credential) = Credential::decode(header.version, &header.value) else {
            panic!("decodes")
        };
        let mut pricier = terms();
        pricier.amount = U256::from(2000u64);
        assert_eq!(
            precheck(&credential, &pricier, NOW),
            Err(Rejection::Accepted)
        );
        let mut elsewhere = terms();
        elsewhere.pay_to = Address::repeat_byte(0x33);
        assert_eq!(
            precheck(&credential, &elsewhere, NOW),
            Err(Rejection::Accepted)
        );
        assert_eq!(
            precheck(&credential, &terms(), NOW + 10_000),
            Err(Rejection::Expired)
        );
        assert_eq!(
            precheck(&credential, &terms(), NOW - 10_000),
            Err(Rejection::NotYetValid)
        );

        // A v1 credential names no accepted requirement: the authorization itself is checked.
        let Ok(v1) = payer.answer(&Challenge::V1(terms().challenge_v1("")), None, NOW) else {
            panic!("answers")
        };
        let Ok(v1) = Credential::decode(v1.version, &v1.value) else {
            panic!("decodes")
        };
        assert_eq!(precheck(&v1, &pricier, NOW), Err(Rejection::Amount));
        assert_eq!(precheck(&v1, &elsewhere, NOW), Err(Rejection::Recipient));

        // A forged signature: someone else's key over the same authorization.
        let mut forged = credential.clone();
        let Ok(other) = LocalPayer::from_hex(&"11".repeat(32)) else {
            panic!("key")
        };
        let crate::credential::Payload::Exact {
            authorization,
            signature,
        } = &mut forged.payload
        else {
            panic!("an exact credential")
        };
        let Some(other_signature) = authorization.sign(credential.network, &other.signer) else {
            panic!("signs")
        };
        *signature = other_signature;
        assert_eq!(precheck(&forged, &terms(), NOW), Err(Rejection::Signature));
    }

    #[test]
    fn spend_cap_and_bad_keys() {
        let result = payer().answer(
            &Challenge::V2(terms().challenge_v2(None)),
            Some(U256::from(999u64)),
            NOW,
        );
        assert!(matches!(result, Err(PayError::OverCap { .. })));
        for key in ["", "0x12", &"zz".repeat(32), &"00".repeat(32)] {
            assert_eq!(
                LocalPayer::from_hex(key).map(|p| p.address()),
                Err(PayError::Key)
            );
        }
        assert_eq!(
            Challenge::from_response(None, b"{\"error\":{}}"),
            Err(PayError::NoChallenge)
        );
    }

    fn target(url: &str) -> RequestTarget {
        match RequestTarget::parse(url) {
            Ok(target) => target,
            Err(err) => panic!("{err}"),
        }
    }

    /// `terms()` as a server at `url` would price it.
    fn terms_at(url: &str) -> Terms {
        let mut terms = terms();
        terms.resource.url = url.into();
        terms
    }

    const HERE: &str = "http://127.0.0.1/entrypoints/echo/invoke";

    #[test]
    fn a_client_signs_only_for_the_requested_resource() {
        let payer = payer();
        let here = target(HERE);
        let limits = Limits::default();
        for challenge in [
            Challenge::V2(terms().challenge_v2(None)),
            Challenge::V1(terms().challenge_v1("")),
        ] {
            assert!(payer.answer_for(&challenge, &here, &limits, NOW).is_ok());
        }
        let elsewhere = [
            "http://evil.example/entrypoints/echo/invoke",
            "https://127.0.0.1/entrypoints/echo/invoke",
            "http://127.0.0.1:8080/entrypoints/echo/invoke",
        ];
        for url in elsewhere {
            for challenge in [
                Challenge::V2(terms_at(url).challenge_v2(None)),
                Challenge::V1(terms_at(url).challenge_v1("")),
            ] {
                let refused = payer.answer_for(&challenge, &here, &limits, NOW);
                assert!(
                    matches!(
                        refused,
                        Err(PayError::Refused(Refusal::ResourceOrigin { .. }))
                    ),
                    "{url}: {refused:?}"
                );
            }
        }
        let other_path = terms_at("http://127.0.0.1/entrypoints/other/invoke");
        for challenge in [
            Challenge::V2(other_path.challenge_v2(None)),
            Challenge::V1(other_path.challenge_v1("")),
        ] {
            assert!(matches!(
                payer.answer_for(&challenge, &here, &limits, NOW),
                Err(PayError::Refused(Refusal::ResourcePath { .. }))
            ));
        }
        // v1 names a resource per requirement: a foreign one is skipped when ours is there.
        let mut mixed = terms_at(elsewhere[0]).challenge_v1("");
        mixed.accepts.extend(terms().challenge_v1("").accepts);
        let paid = payer.answer_for(&Challenge::V1(mixed), &here, &limits, NOW);
        assert!(paid.is_ok(), "{paid:?}");
    }

    #[test]
    fn unknown_networks_and_assets_are_refused_before_signing() {
        let payer = payer();
        let here = target(HERE);
        let limits = Limits::default();
        let mut v2 = terms().challenge_v2(None);
        v2.accepts[0].network = "eip155:999".into();
        let mut v1 = terms().challenge_v1("");
        v1.accepts[0].network = "solana".into();
        for (challenge, network) in [
            (Challenge::V2(v2), "\"eip155:999\""),
            (Challenge::V1(v1), "\"solana\""),
        ] {
            let refused = payer.answer_for(&challenge, &here, &limits, NOW);
            assert!(
                matches!(&refused, Err(PayError::Refused(Refusal::UnknownNetwork { network: n }))
                    if n == network),
                "{refused:?}"
            );
            // The offline signer refuses the same.
            assert_eq!(payer.answer(&challenge, None, NOW).err(), refused.err());
        }
        for asset in [
            Address::repeat_byte(1).to_string(),
            // Another known network's USDC is not base-sepolia's.
            crate::network::NETWORKS[1].usdc.to_string(),
            "not an address".to_owned(),
        ] {
            let mut v2 = terms().challenge_v2(None);
            v2.accepts[0].asset = asset.clone();
            let mut v1 = terms().challenge_v1("");
            v1.accepts[0].asset = asset.clone();
            for challenge in [Challenge::V2(v2), Challenge::V1(v1)] {
                let refused = payer.answer_for(&challenge, &here, &limits, NOW);
                assert!(
                    matches!(
                        &refused,
                        Err(PayError::Refused(Refusal::UnknownAsset {
                            network: "base-sepolia",
                            ..
                        }))
                    ),
                    "{asset}: {refused:?}"
                );
            }
        }
        // Another scheme is merely nothing payable.
        let mut upto = terms().challenge_v2(None);
        upto.accepts[0].scheme = "upto".into();
        assert_eq!(
            payer
                .answer_for(&Challenge::V2(upto), &here, &limits, NOW)
                .err(),
            Some(PayError::NothingPayable)
        );
    }

    #[test]
    fn the_validity_window_is_capped() {
        let payer = payer();
        let here = target(HERE);
        let valid_before = |terms: &Terms, max_validity_seconds: u64| {
            let limits = Limits {
                cap: None,
                max_validity_seconds,
            };
            let header = payer
                .answer_for(
                    &Challenge::V2(terms.challenge_v2(None)),
                    &here,
                    &limits,
                    NOW,
                )
                .map_err(|err| err.to_string())?;
            Credential::decode(header.version, &header.value)
                .map(|credential| credential.valid_before())
                .map_err(|err| err.to_string())
        };
        let mut greedy = terms();
        greedy.max_timeout_seconds = 86_400 * 365;
        // The server asks for a year: the default cap gives 300 s, a tighter one less.
        assert_eq!(valid_before(&greedy, 300), Ok(NOW + 300));
        assert_eq!(valid_before(&greedy, 90), Ok(NOW + 90));
        // The server asks for less than the cap: its figure.
        let mut modest = terms();
        modest.max_timeout_seconds = 120;
        assert_eq!(valid_before(&modest, 300), Ok(NOW + 120));
        // Below a minute the signer still gives a minute, unless the cap is lower.
        modest.max_timeout_seconds = 10;
        assert_eq!(valid_before(&modest, 300), Ok(NOW + 60));
        assert_eq!(valid_before(&modest, 30), Ok(NOW + 30));
    }
}
