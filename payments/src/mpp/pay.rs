//! The paying side: a local key answers a 402's `WWW-Authenticate: Payment …` with an
//! `Authorization: Payment …` credential for the `evm` `charge` method, as mppx's EVM client
//! does (`src/evm/client/Charge.ts`): `validAfter` 0, `validBefore` the challenge's
//! `expires`, the nonce bound to the challenge, `source` the payer's `did:pkh`, the
//! challenge echoed exactly as received. A client answering a server's 402 uses
//! [`LocalPayer::answer_mpp_for`], which also checks the realm names the requested host and
//! bounds `validBefore`.

use alloy_primitives::{Address, B256, U256};

use super::INTENT_CHARGE;
use super::challenge::{Challenge, parse_www_authenticate};
use super::credential::PaymentCredential;
use super::evm::{
    AuthorizationPayload, CREDENTIAL_AUTHORIZATION, ChargeRequest, METHOD, challenge_hash, did_pkh,
    parse_amount,
};
use super::params::ParamError;
use crate::eip3009::{Authorization, signature_hex};
use crate::network::Network;
use crate::payer::LocalPayer;
use crate::target::{Limits, Refusal, RequestTarget};

/// How long an authorization stays valid when the challenge names no expiry (mppx's 300 s).
const DEFAULT_VALIDITY_SECONDS: u64 = 300;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MppPayError {
    #[error("WWW-Authenticate: {0}")]
    Header(#[from] ParamError),
    #[error(
        "the 402 carries no Payment challenge this client can pay (an open evm charge payable \
         by authorization, in USDC on a known network)"
    )]
    NothingPayable,
    #[error("the price {asked} USDC is above the spend cap of {cap} USDC")]
    OverCap { asked: String, cap: String },
    #[error("signing failed")]
    Signing,
    /// A challenge of another realm, or on an unknown network or asset: nothing was signed.
    #[error("refused to sign: {0}")]
    Refused(#[from] Refusal),
}

/// A credential to send, and what it pays.
#[derive(Clone, PartialEq, Eq)]
pub struct MppPayment {
    /// The `Authorization` header value.
    pub authorization: String,
    pub challenge_id: String,
    pub network: &'static Network,
    /// Base units.
    pub amount: U256,
    pub recipient: Address,
    pub payer: Address,
    pub nonce: B256,
}

impl std::fmt::Debug for MppPayment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MppPayment")
            .field("authorization", &"<redacted>")
            .field("challenge_id", &self.challenge_id)
            .field("network", &self.network.name)
            .field("amount", &self.amount)
            .field("payer", &self.payer)
            .finish_non_exhaustive()
    }
}

/// What one challenge asks, when this client can pay it.
struct Payable<'a> {
    challenge: &'a Challenge,
    network: &'static Network,
    amount: U256,
    recipient: Address,
    valid_before: u64,
}

/// What `challenge` asks, when this client can pay it: `Ok(None)` when it is not an open evm
/// charge payable by authorization, `Err` when it is one this client refuses (another realm
/// than `target`'s host, an unknown network or asset).
fn payable<'a>(
    challenge: &'a Challenge,
    target: Option<&RequestTarget>,
    now: u64,
) -> Result<Option<Payable<'a>>, Refusal> {
    if challenge.method != METHOD || challenge.intent != INTENT_CHARGE {
        return Ok(None);
    }
    if let Some(target) = target {
        target.check_realm(&challenge.realm)?;
    }
    let valid_before = match &challenge.expires {
        Some(_) => match challenge.expires_at().filter(|at| *at > now) {
            Some(at) => at,
            None => return Ok(None),
        },
        None => now.saturating_add(DEFAULT_VALIDITY_SECONDS),
    };
    let Some(request) = challenge
        .request_json()
        .ok()
        .and_then(|json| serde_json::from_value::<ChargeRequest>(json).ok())
    else {
        return Ok(None);
    };
    let accepts = request
        .method_details
        .credential_types
        .as_ref()
        .is_some_and(|types| types.iter().any(|t| t == CREDENTIAL_AUTHORIZATION));
    let splits = request
        .method_details
        .splits
        .as_ref()
        .is_some_and(|splits| !splits.is_empty());
    if !accepts || splits {
        return Ok(None);
    }
    let network = match request.network() {
        Some(network) => network,
        None => {
            let chain = format!("eip155:{}", request.method_details.chain_id);
            return Err(match Network::find(&chain) {
                Some(known) => Refusal::unknown_asset(known, &request.currency),
                None => Refusal::unknown_network(&chain),
            });
        }
    };
    let (Some(amount), Ok(recipient)) = (parse_amount(&request.amount), request.recipient.parse())
    else {
        return Ok(None);
    };
    Ok(Some(Payable {
        challenge,
        network,
        amount,
        recipient,
        valid_before,
    }))
}

impl LocalPayer {
    /// Answers the first payable Payment challenge of `www_authenticate` (several header
    /// lines may be joined with `, `), refusing a price above `cap` (base units) and unknown
    /// networks and assets. It does not check the realm: a client answering a server's 402
    /// uses [`LocalPayer::answer_mpp_for`].
    pub fn answer_mpp(
        &self,
        www_authenticate: &str,
        cap: Option<U256>,
        now: u64,
    ) -> Result<MppPayment, MppPayError> {
        self.answer_mpp_within(www_authenticate, None, cap, u64::MAX, now)
    }

    /// [`LocalPayer::answer_mpp`] for a 402 answering a request for `target`, within `limits`:
    /// only challenges whose realm is the target's host (with or without the port) are paid,
    /// and `validBefore` is at most `limits.max_validity_seconds` after `now` (the challenge's
    /// `expires` when sooner). A refusal signs nothing.
    pub fn answer_mpp_for(
        &self,
        www_authenticate: &str,
        target: &RequestTarget,
        limits: &Limits,
        now: u64,
    ) -> Result<MppPayment, MppPayError> {
        self.answer_mpp_within(
            www_authenticate,
            Some(target),
            limits.cap,
            limits.max_validity_seconds,
            now,
        )
    }

    fn answer_mpp_within(
        &self,
        www_authenticate: &str,
        target: Option<&RequestTarget>,
        cap: Option<U256>,
        max_validity_seconds: u64,
        now: u64,
    ) -> Result<MppPayment, MppPayError> {
        let challenges: Vec<Challenge> = parse_www_authenticate(www_authenticate)?
            .into_iter()
            .filter_map(Result::ok)
            .collect();
        let mut refusal = None;
        let chosen = challenges
            .iter()
            .find_map(|challenge| match payable(challenge, target, now) {
                Ok(payable) => payable,
                Err(why) => {
                    refusal.get_or_insert(why);
                    None
                }
            })
            .ok_or_else(|| refusal.map_or(MppPayError::NothingPayable, MppPayError::Refused))?;
        if let Some(cap) = cap
            && chosen.amount > cap
        {
            return Err(MppPayError::OverCap {
                asked: crate::amount::to_decimal(chosen.amount),
                cap: crate::amount::to_decimal(cap),
            });
        }
        let challenge = chosen.challenge;
        let signer = self.signer();
        let authorization = Authorization {
            from: signer.address(),
            to: chosen.recipient,
            value: chosen.amount,
            valid_after: 0,
            valid_before: chosen
                .valid_before
                .min(now.saturating_add(max_validity_seconds)),
            nonce: challenge_hash(&challenge.id, &challenge.realm),
        };
        let signature = authorization
            .sign(chosen.network, signer)
            .ok_or(MppPayError::Signing)?;
        let payload = AuthorizationPayload {
            kind: CREDENTIAL_AUTHORIZATION.into(),
            from: authorization.from.to_checksum(None),
            to: authorization.to.to_checksum(None),
            value: authorization.value.to_string(),
            valid_after: authorization.valid_after.to_string(),
            valid_before: authorization.valid_before.to_string(),
            nonce: authorization.nonce.to_string(),
            signature: signature_hex(&signature),
        };
        let credential = PaymentCredential {
            challenge: challenge.clone(),
            source: Some(did_pkh(chosen.network.chain_id, authorization.from)),
            payload: serde_json::to_value(payload).map_err(|_| MppPayError::Signing)?,
        };
        Ok(MppPayment {
            authorization: credential.to_authorization(),
            challenge_id: challenge.id.clone(),
            network: chosen.network,
            amount: chosen.amount,
            recipient: chosen.recipient,
            payer: authorization.from,
            nonce: authorization.nonce,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::ANVIL_KEYS;
    use crate::mpp::challenge::{ChallengeParams, ChallengeSecret};
    use crate::mpp::evm::{
        ChargeRejection, charge_params, verify_authorization_header, verify_charge,
    };
    use crate::mpp::problem::Problem;
    use crate::mpp::verify::{ChallengeRejection, MppRejection};
    use crate::precheck::precheck;
    use crate::terms::Terms;
    use crate::wire::v2::ResourceInfo;
    use serde_json::{Value, json};

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    const NOW: u64 = 1_800_000_000;
    const REALM: &str = "api.example.com";

    fn terms() -> Result<Terms, Box<dyn std::error::Error>> {
        Ok(Terms {
            scheme: crate::terms::Scheme::Exact,
            network: Network::find("base-sepolia").ok_or("base-sepolia is known")?,
            amount: U256::from(1000u64),
            pay_to: Address::repeat_byte(0x22),
            max_timeout_seconds: 300,
            resource: ResourceInfo {
                url: "https://api.example.com/entrypoints/echo/invoke".into(),
                description: String::new(),
                mime_type: "application/json".into(),
            },
        })
    }

    struct Fixture {
        secret: ChallengeSecret,
        params: ChallengeParams,
        challenge: Challenge,
        payer: LocalPayer,
    }

    fn fixture() -> Result<Fixture, Box<dyn std::error::Error>> {
        let secret = ChallengeSecret::new(*b"0123456789abcdef0123456789abcdef")?;
        let params = charge_params(REALM, &terms()?)?;
        let challenge = params.issue(&secret, NOW + 300)?;
        Ok(Fixture {
            secret,
            params,
            challenge,
            payer: LocalPayer::from_hex(ANVIL_KEYS[0])?,
        })
    }

    fn resign(credential: &PaymentCredential, payload: &Value) -> String {
        PaymentCredential {
            payload: payload.clone(),
            ..credential.clone()
        }
        .to_authorization()
    }

    /// issue → 402 header → pay with Anvil key #0 → parse → verify → the payer recovered.
    #[test]
    fn round_trip_recovers_the_payer() -> TestResult {
        let f = fixture()?;
        let request: Value = f.challenge.request_json()?;
        assert_eq!(
            serde_json_canonicalizer::to_string(&request)?,
            r#"{"amount":"1000","currency":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","methodDetails":{"chainId":84532,"credentialTypes":["authorization"],"decimals":6},"recipient":"0x2222222222222222222222222222222222222222"}"#
        );
        let header = f.challenge.to_header()?;
        let payment = f
            .payer
            .answer_mpp(&header, Some(U256::from(1000u64)), NOW)?;
        assert_eq!(
            payment.payer.to_checksum(None),
            "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
        );
        assert_eq!(payment.challenge_id, f.challenge.id);
        assert!(payment.authorization.starts_with("Payment "));
        assert!(!format!("{payment:?}").contains(&payment.authorization[8..]));

        let (credential, verified) =
            verify_authorization_header(&payment.authorization, &f.secret, &f.params, NOW)?;
        assert_eq!(verified.payer(), payment.payer);
        assert_eq!(verified.challenge_id, f.challenge.id);
        assert_eq!(credential.challenge, f.challenge);
        assert_eq!(
            credential.source.as_deref(),
            Some("did:pkh:eip155:84532:0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266")
        );
        // The nonce is the challenge hash: keccak256(id bytes ++ realm bytes).
        let mut packed = f.challenge.id.as_bytes().to_vec();
        packed.extend_from_slice(REALM.as_bytes());
        assert_eq!(
            verified.authorization.nonce,
            alloy_primitives::keccak256(&packed)
        );
        assert_eq!(verified.nonce_key().nonce, payment.nonce);
        assert_eq!(verified.authorization.valid_after, 0);
        assert_eq!(verified.authorization.valid_before, NOW + 300);
        // The payload has exactly the spec's fields.
        let mut keys: Vec<&str> = credential
            .payload
            .as_object()
            .ok_or("payload is an object")?
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "from",
                "nonce",
                "signature",
                "to",
                "type",
                "validAfter",
                "validBefore",
                "value"
            ]
        );
        // The same authorization, as x402 v2, passes the x402 offline checks too (what the
        // facilitator will be handed).
        assert_eq!(
            precheck(&verified.to_x402(&terms()?), &terms()?, NOW),
            Ok(payment.payer)
        );
        // Nothing printable shows the signature.
        let signature = crate::eip3009::signature_hex(&verified.signature);
        let printed = format!("{verified:?}{credential:?}{payment:?}");
        assert!(!printed.contains(signature.trim_start_matches("0x")));
        Ok(())
    }

    #[test]
    fn picks_the_payable_challenge_and_respects_the_cap() -> TestResult {
        let f = fixture()?;
        let tempo = ChallengeParams::new(REALM, "tempo", "charge", &json!({"amount": "1"}))?
            .issue(&f.secret, NOW + 300)?;
        let expired = f.params.issue(&f.secret, NOW - 1)?;
        let header = format!(
            "Bearer realm=\"x\", {}, {}, {}",
            tempo.to_header()?,
            expired.to_header()?,
            f.challenge.to_header()?
        );
        let payment = f.payer.answer_mpp(&header, None, NOW)?;
        assert_eq!(payment.challenge_id, f.challenge.id);
        assert!(matches!(
            f.payer.answer_mpp(&header, Some(U256::from(999u64)), NOW),
            Err(MppPayError::OverCap { .. })
        ));
        assert_eq!(
            f.payer.answer_mpp(&tempo.to_header()?, None, NOW),
            Err(MppPayError::NothingPayable)
        );
        assert_eq!(
            f.payer.answer_mpp(&expired.to_header()?, None, NOW),
            Err(MppPayError::NothingPayable)
        );
        assert!(matches!(
            f.payer.answer_mpp("Payment id=\"x", None, NOW),
            Err(MppPayError::Header(_))
        ));
        // Not payable by authorization: another credential type, splits, an unknown token.
        for request in [
            json!({"amount": "1", "currency": "0x036CbD53842c5426634e7929541eC2318f3dCF7e", "recipient": "0x2222222222222222222222222222222222222222", "methodDetails": {"chainId": 84532, "credentialTypes": ["permit2"]}}),
            json!({"amount": "1", "currency": "0x036CbD53842c5426634e7929541eC2318f3dCF7e", "recipient": "0x2222222222222222222222222222222222222222", "methodDetails": {"chainId": 84532}}),
            json!({"amount": "1", "currency": "0x036CbD53842c5426634e7929541eC2318f3dCF7e", "recipient": "0x2222222222222222222222222222222222222222", "methodDetails": {"chainId": 84532, "credentialTypes": ["authorization"], "splits": [{"recipient": "0x2222222222222222222222222222222222222222", "amount": "1"}]}}),
            json!({"amount": "-1", "currency": "0x036CbD53842c5426634e7929541eC2318f3dCF7e", "recipient": "0x2222222222222222222222222222222222222222", "methodDetails": {"chainId": 84532, "credentialTypes": ["authorization"]}}),
        ] {
            let challenge = ChallengeParams::new(REALM, "evm", "charge", &request)?
                .issue(&f.secret, NOW + 300)?;
            assert_eq!(
                f.payer.answer_mpp(&challenge.to_header()?, None, NOW),
                Err(MppPayError::NothingPayable),
                "{request}"
            );
        }
        // Another token, or the USDC of another chain, or a chain this client does not know:
        // refused as such.
        for (request, refusal) in [
            (
                json!({"amount": "1", "currency": "0x1111111111111111111111111111111111111111", "recipient": "0x2222222222222222222222222222222222222222", "methodDetails": {"chainId": 84532, "credentialTypes": ["authorization"]}}),
                Refusal::UnknownAsset {
                    network: "base-sepolia",
                    asset: "\"0x1111111111111111111111111111111111111111\"".into(),
                },
            ),
            (
                json!({"amount": "1", "currency": "0x036CbD53842c5426634e7929541eC2318f3dCF7e", "recipient": "0x2222222222222222222222222222222222222222", "methodDetails": {"chainId": 1, "credentialTypes": ["authorization"]}}),
                Refusal::UnknownAsset {
                    network: "ethereum",
                    asset: "\"0x036CbD53842c5426634e7929541eC2318f3dCF7e\"".into(),
                },
            ),
            (
                json!({"amount": "1", "currency": "0x036CbD53842c5426634e7929541eC2318f3dCF7e", "recipient": "0x2222222222222222222222222222222222222222", "methodDetails": {"chainId": 999, "credentialTypes": ["authorization"]}}),
                Refusal::UnknownNetwork {
                    network: "\"eip155:999\"".into(),
                },
            ),
        ] {
            let challenge = ChallengeParams::new(REALM, "evm", "charge", &request)?
                .issue(&f.secret, NOW + 300)?;
            assert_eq!(
                f.payer.answer_mpp(&challenge.to_header()?, None, NOW),
                Err(MppPayError::Refused(refusal)),
                "{request}"
            );
        }
        Ok(())
    }

    /// A client pays only a challenge of the requested host's realm, and bounds `validBefore`.
    #[test]
    fn a_client_pays_its_own_realm_for_a_bounded_time() -> TestResult {
        let f = fixture()?;
        let target = RequestTarget::parse("https://api.example.com/entrypoints/echo/invoke")?;
        let limits = Limits::default();
        let header = f.challenge.to_header()?;
        let payment = f.payer.answer_mpp_for(&header, &target, &limits, NOW)?;
        assert_eq!(payment.challenge_id, f.challenge.id);
        // The realm may carry the port; the requested URL's default one here.
        let with_port =
            charge_params("api.example.com:443", &terms()?)?.issue(&f.secret, NOW + 300)?;
        assert!(
            f.payer
                .answer_mpp_for(&with_port.to_header()?, &target, &limits, NOW)
                .is_ok()
        );

        // Another realm: refused, even when it is the only challenge; skipped when ours is
        // there too.
        let foreign = charge_params("evil.example", &terms()?)?.issue(&f.secret, NOW + 300)?;
        let refused = f
            .payer
            .answer_mpp_for(&foreign.to_header()?, &target, &limits, NOW);
        assert!(
            matches!(&refused, Err(MppPayError::Refused(Refusal::Realm { realm, host }))
                if realm == "\"evil.example\"" && host == "api.example.com"),
            "{refused:?}"
        );
        let both = format!("{}, {}", foreign.to_header()?, header);
        let chosen = f.payer.answer_mpp_for(&both, &target, &limits, NOW)?;
        assert_eq!(chosen.challenge_id, f.challenge.id);
        // Without a target (answer_mpp) nothing is compared.
        assert!(f.payer.answer_mpp(&foreign.to_header()?, None, NOW).is_ok());

        // validBefore: the challenge's expiry, or now + the cap when that is sooner.
        let valid_before = |payment: &MppPayment| -> Result<u64, Box<dyn std::error::Error>> {
            let credential = PaymentCredential::parse_authorization(&payment.authorization)?;
            Ok(credential.payload["validBefore"]
                .as_str()
                .ok_or("validBefore")?
                .parse()?)
        };
        let long = f.params.issue(&f.secret, NOW + 3600)?.to_header()?;
        let capped = Limits {
            max_validity_seconds: 120,
            ..limits
        };
        assert_eq!(
            valid_before(&f.payer.answer_mpp_for(&long, &target, &capped, NOW)?)?,
            NOW + 120
        );
        assert_eq!(
            valid_before(&f.payer.answer_mpp_for(&long, &target, &limits, NOW)?)?,
            NOW + 300
        );
        assert_eq!(
            valid_before(&f.payer.answer_mpp_for(&header, &target, &capped, NOW)?)?,
            NOW + 120
        );
        let short = f.params.issue(&f.secret, NOW + 60)?.to_header()?;
        assert_eq!(
            valid_before(&f.payer.answer_mpp_for(&short, &target, &capped, NOW)?)?,
            NOW + 60
        );
        Ok(())
    }

    #[test]
    fn refuses_credentials_that_do_not_pay_their_challenge() -> TestResult {
        let f = fixture()?;
        let payment = f.payer.answer_mpp(&f.challenge.to_header()?, None, NOW)?;
        let credential = PaymentCredential::parse_authorization(&payment.authorization)?;
        let payload = credential.payload.clone();
        let check = |header: &str| verify_authorization_header(header, &f.secret, &f.params, NOW);

        // The same signed payload presented with another (genuine, open) challenge of the
        // route: the nonce names the first challenge only.
        let other_id = f.params.issue(&f.secret, NOW + 300)?;
        assert_ne!(other_id.id, f.challenge.id);
        let moved = PaymentCredential {
            challenge: other_id.clone(),
            ..credential.clone()
        };
        assert_eq!(
            check(&moved.to_authorization()),
            Err(MppRejection::Charge(ChargeRejection::ChallengeBinding))
        );

        let edit = |field: &str, value: Value| {
            let mut changed = payload.clone();
            changed[field] = value;
            resign(&credential, &changed)
        };
        let cases = [
            (edit("value", json!("999")), ChargeRejection::Amount),
            (
                edit("to", json!("0x3333333333333333333333333333333333333333")),
                ChargeRejection::Recipient,
            ),
            (
                edit("nonce", json!(format!("0x{}", "11".repeat(32)))),
                ChargeRejection::ChallengeBinding,
            ),
            (
                edit("validBefore", json!((NOW + 3).to_string())),
                ChargeRejection::Expired,
            ),
            (
                edit("validAfter", json!(NOW.to_string())),
                ChargeRejection::NotYetValid,
            ),
            // A field changed after signing: the signature recovers someone else.
            (
                edit("validBefore", json!((NOW + 200).to_string())),
                ChargeRejection::Signature,
            ),
            (
                edit("from", json!("0x70997970C51812dc3A010C7d01b50e0d17dc79C8")),
                ChargeRejection::Signature,
            ),
            (
                edit("type", json!("permit2")),
                ChargeRejection::CredentialType,
            ),
            (
                edit("signature", json!("0x1234")),
                ChargeRejection::Field(crate::eip3009::AuthorizationError::Signature),
            ),
            (
                edit("value", json!("1e3")),
                ChargeRejection::Field(crate::eip3009::AuthorizationError::Field("value")),
            ),
            (edit("value", json!(1000)), ChargeRejection::Payload),
        ];
        for (header, expected) in cases {
            let problem = expected.problem();
            assert_eq!(check(&header), Err(MppRejection::Charge(expected)));
            assert_ne!(problem, Problem::PaymentRequired);
        }

        // Another key's signature over the very same authorization.
        let other = LocalPayer::from_hex(ANVIL_KEYS[1])?;
        let forged = verify_charge(&credential, NOW)
            .map(|v| v.authorization)
            .map_err(|e| e.to_string())?
            .sign(f.params_network()?, other.signer())
            .ok_or("signs")?;
        let header = edit("signature", json!(crate::eip3009::signature_hex(&forged)));
        assert_eq!(
            check(&header),
            Err(MppRejection::Charge(ChargeRejection::Signature))
        );

        // A source naming someone else.
        let lying = PaymentCredential {
            source: Some(did_pkh(84532, other.address())),
            ..credential.clone()
        };
        assert_eq!(
            check(&lying.to_authorization()),
            Err(MppRejection::Charge(ChargeRejection::Source))
        );

        // The challenge itself: expired, forged, garbage.
        assert_eq!(
            verify_authorization_header(&payment.authorization, &f.secret, &f.params, NOW + 300),
            Err(MppRejection::Challenge(ChallengeRejection::Expired))
        );
        let stranger = ChallengeSecret::new([5u8; 32])?;
        let rejection =
            verify_authorization_header(&payment.authorization, &stranger, &f.params, NOW);
        assert_eq!(
            rejection,
            Err(MppRejection::Challenge(ChallengeRejection::Unknown))
        );
        assert_eq!(
            rejection.err().map(|r| r.problem()),
            Some(Problem::InvalidChallenge)
        );
        let garbage = check("Payment !!!");
        assert_eq!(
            garbage.err().map(|r| r.problem()),
            Some(Problem::MalformedCredential)
        );
        Ok(())
    }

    impl Fixture {
        fn params_network(&self) -> Result<&'static Network, Box<dyn std::error::Error>> {
            Ok(Network::find("base-sepolia").ok_or("base-sepolia is known")?)
        }
    }
}
