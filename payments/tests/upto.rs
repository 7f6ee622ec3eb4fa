//! The `upto` scheme through the crate's public API, as a payee and a payer use it: the payer
//! answers an upto 402 with a Permit2 witness permit of the maximum, the payee decodes it and
//! prechecks it against its terms, and every tampered or mistargeted field is refused with
//! @x402/evm's reason.

use alloy_primitives::{Address, B256, U256};
use payments::credential::Payload;
use payments::payer::{Challenge, PayError};
use payments::permit2::{PERMIT2_ADDRESS, UPTO_PROXY_ADDRESS, UptoAuthorization};
use payments::precheck::{Rejection, UptoRejection};
use payments::target::Limits;
use payments::wire::v2::ResourceInfo;
use payments::{
    Credential, LocalPayer, Network, RequestTarget, Scheme, Terms, X402Version, precheck,
};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const NOW: u64 = 1_800_000_000;
const URL: &str = "http://127.0.0.1/entrypoints/echo/invoke";
const FACILITATOR: Address = Address::repeat_byte(0x33);

fn network() -> Result<&'static Network, String> {
    Network::find("base-sepolia").ok_or_else(|| "base-sepolia is known".into())
}

fn resource() -> ResourceInfo {
    ResourceInfo {
        url: URL.into(),
        description: String::new(),
        mime_type: "application/json".into(),
    }
}

fn upto_terms() -> Result<Terms, String> {
    Ok(Terms::upto(
        network()?,
        U256::from(5000u64),
        Address::repeat_byte(0x22),
        FACILITATOR,
        300,
        resource(),
    ))
}

fn payer() -> Result<LocalPayer, PayError> {
    LocalPayer::from_hex(payments::dev::ANVIL_KEYS[0])
}

fn paid(terms: &Terms) -> Result<Credential, Box<dyn std::error::Error>> {
    let header = payer()?.answer(&Challenge::V2(terms.challenge_v2(None)), None, NOW)?;
    Ok(Credential::decode(header.version, &header.value)?)
}

/// `credential` with its permit replaced by `edit(permit)` and signed with `key` (hex), so
/// that only the edited field (or the key) can be what is refused.
fn resigned(
    credential: &Credential,
    key: &str,
    edit: impl FnOnce(&mut UptoAuthorization),
) -> Result<Credential, Box<dyn std::error::Error>> {
    let mut permit = credential.upto().ok_or("an upto credential")?.clone();
    edit(&mut permit);
    let signer: alloy_signer_local::PrivateKeySigner = key.parse()?;
    let signature = permit.sign(network()?, &signer).ok_or("signs")?;
    let document = payments::payer::v2_upto_document(
        &upto_terms()?,
        &permit,
        &payments::eip3009::signature_hex(&signature),
    );
    Ok(Credential::from_document(X402Version::V2, document)?)
}

/// A key other than the payer's.
const OTHER_KEY: &str = "1111111111111111111111111111111111111111111111111111111111111111";

#[test]
fn a_payer_answers_upto_and_the_payee_accepts_it() -> TestResult {
    let terms = upto_terms()?;
    let payer = payer()?;
    let header = payer.answer(&Challenge::V2(terms.challenge_v2(None)), None, NOW)?;
    assert_eq!(header.amount, U256::from(5000u64));
    let credential = Credential::decode(header.version, &header.value)?;
    assert_eq!(credential.scheme(), "upto");
    assert_eq!(credential.payer(), payer.address());
    assert_eq!(credential.pay_to(), terms.pay_to);
    assert_eq!(credential.max_amount(), U256::from(5000u64));
    assert_eq!(credential.valid_after(), 0);
    assert_eq!(credential.valid_before(), NOW + 300);
    let permit = credential.upto().ok_or("upto")?;
    assert_eq!(permit.spender, UPTO_PROXY_ADDRESS);
    assert_eq!(permit.facilitator, FACILITATOR);
    assert_eq!(permit.token, terms.network.usdc);
    assert!(credential.exact().is_none());
    assert_eq!(precheck(&credential, &terms, NOW), Ok(payer.address()));

    // The replay key is Permit2's nonce space, never a token's.
    let key = credential.nonce_key();
    assert_eq!(key.asset, PERMIT2_ADDRESS);
    assert_eq!(key.from, payer.address());
    assert_eq!(key.nonce, B256::from(permit.nonce));
    assert_eq!(key.nonce, header.nonce);

    // The wire, as @x402/evm writes it.
    let payload = &credential.document["payload"];
    assert!(
        payload["signature"]
            .as_str()
            .is_some_and(|s| s.len() == 132)
    );
    let auth = &payload["permit2Authorization"];
    for field in ["from", "spender", "nonce", "deadline"] {
        assert!(auth[field].is_string(), "{field}");
    }
    assert_eq!(auth["permitted"]["amount"], "5000");
    assert_eq!(auth["witness"]["validAfter"], "0");
    assert_eq!(
        auth["witness"]["facilitator"],
        FACILITATOR.to_checksum(None)
    );

    // No print shows the signature.
    let signature = payload["signature"].as_str().ok_or("signature")?;
    let printed = format!("{credential:?}{header:?}{:?}", credential.payload);
    assert!(
        !printed.contains(signature.trim_start_matches("0x")),
        "{printed}"
    );
    assert!(!printed.contains(&header.value));
    Ok(())
}

#[test]
fn schemes_do_not_cross() -> TestResult {
    let upto = upto_terms()?;
    let mut exact = upto.clone();
    exact.scheme = Scheme::Exact;
    let upto_credential = paid(&upto)?;
    let exact_credential = paid(&exact)?;
    assert_eq!(exact_credential.scheme(), "exact");
    assert_eq!(
        precheck(&exact_credential, &exact, NOW),
        Ok(payer()?.address())
    );

    let refused = precheck(&upto_credential, &exact, NOW);
    assert_eq!(
        refused,
        Err(Rejection::Scheme {
            credential: "upto",
            route: "exact"
        })
    );
    assert_eq!(
        refused.err().map(|r| r.reason()),
        Some("invalid_exact_evm_scheme")
    );
    let refused = precheck(&exact_credential, &upto, NOW);
    assert_eq!(
        refused,
        Err(Rejection::Scheme {
            credential: "exact",
            route: "upto"
        })
    );
    assert_eq!(
        refused.err().map(|r| r.reason()),
        Some("invalid_upto_evm_scheme")
    );
    Ok(())
}

#[test]
fn tampered_permits_are_refused_with_x402s_reasons() -> TestResult {
    let terms = upto_terms()?;
    let credential = paid(&terms)?;
    let anvil = payments::dev::ANVIL_KEYS[0];
    let upto = |why| Err(Rejection::Upto(why));
    let cases: Vec<(&str, Credential, Result<Address, Rejection>)> = vec![
        (
            "spender",
            resigned(&credential, anvil, |p| p.spender = Address::repeat_byte(9))?,
            upto(UptoRejection::Spender),
        ),
        (
            "payee",
            resigned(&credential, anvil, |p| p.to = Address::repeat_byte(9))?,
            upto(UptoRejection::Recipient),
        ),
        (
            "facilitator",
            resigned(&credential, anvil, |p| {
                p.facilitator = Address::repeat_byte(9)
            })?,
            upto(UptoRejection::Facilitator),
        ),
        (
            "deadline",
            resigned(&credential, anvil, |p| p.deadline = NOW + 5)?,
            upto(UptoRejection::Expired),
        ),
        (
            "validAfter",
            resigned(&credential, anvil, |p| p.valid_after = NOW + 1)?,
            upto(UptoRejection::NotYetValid),
        ),
        (
            "token",
            resigned(&credential, anvil, |p| p.token = Address::repeat_byte(9))?,
            upto(UptoRejection::Token),
        ),
        (
            "forged",
            resigned(&credential, OTHER_KEY, |_| {})?,
            upto(UptoRejection::Signature),
        ),
    ];
    for (what, tampered, expected) in cases {
        assert_eq!(precheck(&tampered, &terms, NOW), expected, "{what}");
    }
    // The deadline margin: usable through `deadline`, refused when under 6 s remain.
    let edge = resigned(&credential, anvil, |p| p.deadline = NOW + 6)?;
    assert_eq!(precheck(&edge, &terms, NOW), Ok(payer()?.address()));

    // A permit for another maximum: its accepted requirement already differs from ours.
    let mut pricier = terms.clone();
    pricier.amount = U256::from(6000u64);
    assert_eq!(
        precheck(&credential, &pricier, NOW),
        Err(Rejection::Accepted)
    );
    // The permitted amount itself changed under an unchanged accepted requirement.
    let larger = resigned(&credential, anvil, |p| p.amount = U256::from(6000u64))?;
    assert_eq!(
        precheck(&larger, &terms, NOW),
        Err(Rejection::Upto(UptoRejection::Amount))
    );
    // Any field changed after signing recovers someone else.
    let mut document = credential.document.clone();
    document["payload"]["permit2Authorization"]["witness"]["validAfter"] = "1".into();
    let edited = Credential::from_document(X402Version::V2, document)?;
    assert_eq!(
        precheck(&edited, &terms, NOW),
        Err(Rejection::Upto(UptoRejection::Signature))
    );
    // Another facilitator's terms.
    let mut theirs = terms.clone();
    theirs.scheme = Scheme::Upto {
        facilitator: Address::repeat_byte(0x44),
    };
    assert_eq!(
        precheck(&credential, &theirs, NOW),
        Err(Rejection::Upto(UptoRejection::Facilitator))
    );
    Ok(())
}

#[test]
fn malformed_upto_payloads_are_refused() -> TestResult {
    let credential = paid(&upto_terms()?)?;
    let mut exact_shaped = credential.document.clone();
    exact_shaped["payload"] = serde_json::json!({"signature": "0x00", "authorization": {}});
    assert_eq!(
        Credential::from_document(X402Version::V2, exact_shaped).err(),
        Some(payments::CredentialError::UptoPayload)
    );
    let mut hex_nonce = credential.document.clone();
    hex_nonce["payload"]["permit2Authorization"]["nonce"] = "0x01".into();
    assert!(Credential::from_document(X402Version::V2, hex_nonce).is_err());
    // x402 v1 has no upto.
    let v1 = serde_json::json!({
        "x402Version": 1, "scheme": "upto", "network": "base-sepolia",
        "payload": credential.document["payload"].clone(),
    });
    assert_eq!(
        Credential::from_document(X402Version::V1, v1).err(),
        Some(payments::CredentialError::Scheme("upto".into()))
    );
    Ok(())
}

#[test]
fn the_payers_guard_bounds_the_maximum_and_the_deadline() -> TestResult {
    let terms = upto_terms()?;
    let target = RequestTarget::parse(URL)?;
    let challenge = Challenge::V2(terms.challenge_v2(None));
    let over = payer()?.answer_for(
        &challenge,
        &target,
        &Limits {
            cap: Some(U256::from(4999u64)),
            ..Limits::default()
        },
        NOW,
    );
    assert!(matches!(over, Err(PayError::OverCap { .. })), "{over:?}");

    let mut greedy = terms.clone();
    greedy.max_timeout_seconds = 86_400;
    let header = payer()?.answer_for(
        &Challenge::V2(greedy.challenge_v2(None)),
        &target,
        &Limits {
            cap: Some(U256::from(5000u64)),
            max_validity_seconds: 90,
        },
        NOW,
    )?;
    let credential = Credential::decode(header.version, &header.value)?;
    assert_eq!(credential.valid_before(), NOW + 90);

    // An upto requirement without the facilitator's address cannot be signed.
    let mut anonymous = terms.challenge_v2(None);
    anonymous.accepts[0].extra = Some(serde_json::json!({"name": "USDC", "version": "2"}));
    assert_eq!(
        payer()?
            .answer_for(&Challenge::V2(anonymous), &target, &Limits::default(), NOW)
            .err(),
        Some(PayError::NothingPayable)
    );
    Ok(())
}

#[test]
fn the_payload_enum_matches_the_accessors() -> TestResult {
    let credential = paid(&upto_terms()?)?;
    let Payload::Upto { authorization, .. } = &credential.payload else {
        return Err("an upto payload".into());
    };
    assert_eq!(authorization.from, credential.payer());
    Ok(())
}
