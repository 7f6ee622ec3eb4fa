//! Cards from a hostile in-process server: foreign origins, swapped URLs, stripped or foreign
//! signatures, and a card that never ends. The good signatures are made here with p256 over
//! the JCS bytes, as a signing gateway does.

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{StatusCode, Uri};
use axum::response::Response;
use futures::StreamExt;
use p256::ecdsa::signature::Signer;
use p256::ecdsa::{Signature, SigningKey};
use serde_json::json;

use super::*;
use crate::{Client, ClientError, ClientOptions, UrlPolicy};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const CARD_PATH: &str = "/.well-known/agent-card.json";

/// What the hostile server answers: its card, and its JWKS when it has one.
struct Served {
    card: Value,
    jwks: Option<Value>,
}

fn answer(served: &Served, path: &str) -> Response {
    let json = |value: &Value| {
        Response::builder()
            .header("content-type", "application/json")
            .body(Body::from(value.to_string()))
            .unwrap_or_default()
    };
    match (path, &served.jwks) {
        (CARD_PATH, _) => json(&served.card),
        ("/.well-known/jwks.json", Some(jwks)) => json(jwks),
        ("/endless/.well-known/agent-card.json", _) => {
            // A card that grows without end, with no Content-Length to refuse it early.
            let head = futures::stream::once(async {
                Ok::<_, std::io::Error>(Bytes::from_static(br#"{"name":"x","pad":""#))
            });
            let tail = futures::stream::repeat_with(|| Ok(Bytes::from(vec![b'a'; 8192])));
            Response::builder()
                .header("content-type", "application/json")
                .body(Body::from_stream(head.chain(tail)))
                .unwrap_or_default()
        }
        _ => Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(Body::empty())
            .unwrap_or_default(),
    }
}

fn key(seed: u8) -> Result<SigningKey, p256::ecdsa::Error> {
    SigningKey::from_slice(&[seed; 32])
}

fn jwk(key: &SigningKey, kid: &str) -> Value {
    let point = key.verifying_key().to_encoded_point(false);
    let coordinate = |bytes: Option<&p256::FieldBytes>| {
        URL_SAFE_NO_PAD.encode(bytes.map(|b| &b[..]).unwrap_or_default())
    };
    json!({"kty": "EC", "crv": "P-256", "kid": kid, "alg": "ES256", "use": "sig",
           "x": coordinate(point.x()), "y": coordinate(point.y())})
}

/// `card` with one ES256 signature by `key` under `kid` appended.
fn sign(mut card: Value, key: &SigningKey, kid: &str) -> Result<Value, SignatureError> {
    let protected = URL_SAFE_NO_PAD.encode(json!({"alg": "ES256", "kid": kid}).to_string());
    let payload = canonical_payload(&card)?;
    let signature: Signature = key.sign(format!("{protected}.{payload}").as_bytes());
    let entry =
        json!({"protected": protected, "signature": URL_SAFE_NO_PAD.encode(signature.to_bytes())});
    if let Some(object) = card.as_object_mut() {
        object.insert("signatures".into(), json!([entry]));
    }
    Ok(card)
}

fn card_at(origin: &str) -> Value {
    json!({
        "name": "hostile",
        "url": format!("{origin}/"),
        "supportedInterfaces": [{"url": format!("{origin}/"), "protocolBinding": "HTTP+JSON"}],
        "skills": [],
        "capabilities": {"streaming": true, "note": "é \u{1F600} 1e3"},
        "numbers": [1.0, 0.1, 1e21, -0.0],
    })
}

fn client(trust: TrustPolicy, policy: UrlPolicy) -> Result<Client, ClientError> {
    Client::new(ClientOptions {
        trust,
        policy,
        ..ClientOptions::default()
    })
}

fn required(keys: KeySource) -> TrustPolicy {
    TrustPolicy {
        verify: Verify::Required,
        keys,
        revoked: Vec::new(),
    }
}

/// Serves the card `make` builds for the server's own origin (known once bound) on a free
/// loopback port; returns `http://127.0.0.1:PORT`.
async fn serve(
    make: impl FnOnce(&str) -> Result<Value, Box<dyn std::error::Error>>,
    jwks: Option<Value>,
) -> Result<String, Box<dyn std::error::Error>> {
    // Bind first to learn the origin, then build the card for it.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let origin = format!("http://{}", listener.local_addr()?);
    let served = Arc::new(Served {
        card: make(&origin)?,
        jwks,
    });
    let app = Router::new().fallback(move |uri: Uri| {
        let served = Arc::clone(&served);
        async move { answer(&served, uri.path()) }
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(origin)
}

#[tokio::test]
async fn an_interface_on_another_origin_is_refused_unless_allowed() -> TestResult {
    let origin = serve(
        |origin| {
            let mut card = card_at(origin);
            card["supportedInterfaces"] =
                json!([{"url": "http://attacker.example/", "protocolBinding": "HTTP+JSON"}]);
            Ok(card)
        },
        None,
    )
    .await?;
    let plain = client(TrustPolicy::default(), UrlPolicy::default())?;
    let refused = plain.fetch_card(&origin).await;
    assert!(
        matches!(&refused, Err(ClientError::RefusedUrl { reason, .. }) if reason.contains("not the card's origin")),
        "{refused:?}"
    );
    let allowing = client(
        TrustPolicy::default(),
        UrlPolicy {
            allowed_origins: Some(vec![origin.clone(), "http://attacker.example".into()]),
        },
    )?;
    let card = allowing.fetch_card(&origin).await?;
    assert_eq!(
        allowing.base_url(&card)?.as_str(),
        "http://attacker.example/"
    );
    Ok(())
}

#[tokio::test]
async fn a_swapped_url_is_refused_even_when_the_interface_is_right() -> TestResult {
    let origin = serve(
        |origin| {
            let mut card = card_at(origin);
            card["url"] = json!("https://attacker.example:8443/steal");
            Ok(card)
        },
        None,
    )
    .await?;
    let refused = client(TrustPolicy::default(), UrlPolicy::default())?
        .fetch_card(&origin)
        .await;
    assert!(
        matches!(&refused, Err(ClientError::RefusedUrl { url, .. }) if url.contains("attacker.example")),
        "{refused:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_good_signature_verifies_with_same_origin_and_pinned_keys() -> TestResult {
    let signer = key(7)?;
    let jwks = json!({"keys": [jwk(&signer, "k1")]});
    let origin = serve(
        |origin| Ok(sign(card_at(origin), &signer, "k1")?),
        Some(jwks.clone()),
    )
    .await?;
    let (card, verification) = client(required(KeySource::SameOrigin), UrlPolicy::default())?
        .fetch_card_verified(&origin)
        .await?;
    assert_eq!(verification, Verification::Verified { kid: "k1".into() });
    assert_eq!(card.name, "hostile");
    let pinned = Jwks::from_json(jwks.to_string().as_bytes())?;
    let (_, verification) = client(required(KeySource::Pinned(pinned)), UrlPolicy::default())?
        .fetch_card_verified(&origin)
        .await?;
    assert_eq!(verification, Verification::Verified { kid: "k1".into() });
    Ok(())
}

#[tokio::test]
async fn a_stripped_signature_is_refused_when_required() -> TestResult {
    let signer = key(7)?;
    let jwks = json!({"keys": [jwk(&signer, "k1")]});
    let origin = serve(
        |origin| {
            let mut card = sign(card_at(origin), &signer, "k1")?;
            card.as_object_mut().map(|o| o.remove("signatures"));
            Ok(card)
        },
        Some(jwks),
    )
    .await?;
    let refused = client(required(KeySource::SameOrigin), UrlPolicy::default())?
        .fetch_card(&origin)
        .await;
    assert!(
        matches!(
            refused,
            Err(ClientError::Signature(SignatureError::Missing))
        ),
        "{refused:?}"
    );
    // Optional: the unsigned card passes, and says so.
    let optional = TrustPolicy {
        verify: Verify::Optional,
        keys: KeySource::SameOrigin,
        revoked: Vec::new(),
    };
    let (_, verification) = client(optional, UrlPolicy::default())?
        .fetch_card_verified(&origin)
        .await?;
    assert_eq!(verification, Verification::Unsigned);
    Ok(())
}

#[tokio::test]
async fn a_signature_by_an_unknown_key_is_refused() -> TestResult {
    let trusted = key(7)?;
    let stranger = key(9)?;
    let jwks = json!({"keys": [jwk(&trusted, "k1")]});
    let origin = serve(
        |origin| Ok(sign(card_at(origin), &stranger, "k2")?),
        Some(jwks),
    )
    .await?;
    let refused = client(required(KeySource::SameOrigin), UrlPolicy::default())?
        .fetch_card(&origin)
        .await;
    assert!(
        matches!(&refused, Err(ClientError::Signature(SignatureError::UnknownKey { kid })) if kid == "k2"),
        "{refused:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_card_that_never_ends_is_stopped_at_the_bound() -> TestResult {
    let origin = serve(|_| Ok(json!({})), None).await?;
    let client = Client::new(ClientOptions {
        max_card_bytes: 64 * 1024,
        ..ClientOptions::default()
    })?;
    let refused = client
        .fetch_card(&format!("{origin}/endless/.well-known/agent-card.json"))
        .await;
    assert!(
        matches!(refused, Err(ClientError::TooLarge { limit, .. }) if limit == 64 * 1024),
        "{refused:?}"
    );
    Ok(())
}

#[test]
fn a_key_under_a_trusted_kid_an_altered_card_and_alg_none_are_refused() -> TestResult {
    let trusted = key(7)?;
    let keys = Jwks::from_json(
        json!({"keys": [jwk(&trusted, "k1")]})
            .to_string()
            .as_bytes(),
    )?;
    let card = card_at("https://a.example");
    let good = sign(card.clone(), &trusted, "k1")?;
    assert_eq!(
        verify_card(&good, &keys, true),
        Ok(Verification::Verified { kid: "k1".into() })
    );
    // Key order and whitespace do not matter (JCS); content does.
    let reordered: Value = serde_json::from_str(&serde_json::to_string_pretty(&good)?)?;
    assert!(verify_card(&reordered, &keys, true).is_ok());
    let mut altered = good.clone();
    altered["url"] = json!("https://b.example/");
    assert_eq!(
        verify_card(&altered, &keys, true),
        Err(SignatureError::BadSignature { kid: "k1".into() })
    );
    let forged = sign(card.clone(), &key(9)?, "k1")?;
    assert_eq!(
        verify_card(&forged, &keys, true),
        Err(SignatureError::BadSignature { kid: "k1".into() })
    );
    let mut none = good;
    none["signatures"][0]["protected"] =
        json!(URL_SAFE_NO_PAD.encode(json!({"alg": "none", "kid": "k1"}).to_string()));
    assert_eq!(
        verify_card(&none, &keys, true),
        Err(SignatureError::UnsupportedAlg { alg: "none".into() })
    );
    assert_eq!(verify_card(&card, &keys, false), Ok(Verification::Unsigned));
    Ok(())
}

/// One JWS entry over `card` (without `signatures`) with header `{alg, kid}`, signed by
/// `sign` (which may be any key: the tests forge headers on purpose).
fn entry(
    card: &Value,
    alg: &str,
    kid: &str,
    sign: impl FnOnce(&[u8]) -> Vec<u8>,
) -> Result<Value, SignatureError> {
    let protected = URL_SAFE_NO_PAD.encode(json!({"alg": alg, "kid": kid}).to_string());
    let payload = canonical_payload(card)?;
    let signature = sign(format!("{protected}.{payload}").as_bytes());
    Ok(json!({"protected": protected, "signature": URL_SAFE_NO_PAD.encode(signature)}))
}

fn es256(key: &SigningKey) -> impl FnOnce(&[u8]) -> Vec<u8> + '_ {
    move |input| {
        let signature: Signature = key.sign(input);
        signature.to_bytes().to_vec()
    }
}

fn eddsa(key: &ed25519_dalek::SigningKey) -> impl FnOnce(&[u8]) -> Vec<u8> + '_ {
    move |input| ed25519_dalek::Signer::sign(key, input).to_bytes().to_vec()
}

fn ed_jwk(key: &ed25519_dalek::SigningKey, kid: &str) -> Value {
    json!({"kty": "OKP", "crv": "Ed25519", "kid": kid, "alg": "EdDSA",
           "x": URL_SAFE_NO_PAD.encode(key.verifying_key().to_bytes())})
}

fn with_signatures(mut card: Value, entries: Vec<Value>) -> Value {
    card["signatures"] = Value::Array(entries);
    card
}

fn check(revoked: &[String], now: f64) -> Check<'_> {
    Check {
        required: true,
        revoked,
        now,
    }
}

#[test]
fn eddsa_verifies_and_each_key_takes_its_own_alg_only() -> TestResult {
    let p256 = key(7)?;
    let ed = ed25519_dalek::SigningKey::from_bytes(&[5; 32]);
    let keys = Jwks::from_json(
        json!({"keys": [jwk(&p256, "ec"), ed_jwk(&ed, "ed")]})
            .to_string()
            .as_bytes(),
    )?;
    let card = card_at("https://a.example");
    let signed = with_signatures(card.clone(), vec![entry(&card, "EdDSA", "ed", eddsa(&ed))?]);
    assert_eq!(
        verify_card(&signed, &keys, true),
        Ok(Verification::Verified { kid: "ed".into() })
    );
    let mut altered = signed.clone();
    altered["name"] = json!("other");
    assert_eq!(
        verify_card(&altered, &keys, true),
        Err(SignatureError::BadSignature { kid: "ed".into() })
    );
    // A header naming the other key type's algorithm is refused before any verification.
    for (alg, kid) in [("ES256", "ed"), ("EdDSA", "ec")] {
        let forged = with_signatures(card.clone(), vec![entry(&card, alg, kid, eddsa(&ed))?]);
        assert_eq!(
            verify_card(&forged, &keys, true),
            Err(SignatureError::AlgMismatch {
                kid: kid.into(),
                alg: alg.into()
            })
        );
    }
    for alg in ["none", "HS256", "RS256", "Ed25519", ""] {
        let other = with_signatures(card.clone(), vec![entry(&card, alg, "ed", eddsa(&ed))?]);
        assert_eq!(
            verify_card(&other, &keys, true),
            Err(SignatureError::UnsupportedAlg { alg: alg.into() })
        );
    }
    // Both kinds on one card (a rotation from ES256 to EdDSA).
    let both = with_signatures(
        card.clone(),
        vec![
            entry(&card, "ES256", "ec", es256(&p256))?,
            entry(&card, "EdDSA", "ed", eddsa(&ed))?,
        ],
    );
    assert_eq!(
        verify_card(&both, &keys, true),
        Ok(Verification::Verified { kid: "ec".into() })
    );
    // A JWK whose alg disagrees with its type is refused with the set.
    let mut lying = ed_jwk(&ed, "ed");
    lying["alg"] = json!("ES256");
    assert!(Jwks::from_json(json!({"keys": [lying]}).to_string().as_bytes()).is_err());
    Ok(())
}

#[test]
fn expired_and_revoked_keys_never_verify() -> TestResult {
    let old = key(7)?;
    let new = ed25519_dalek::SigningKey::from_bytes(&[5; 32]);
    let mut old_jwk = jwk(&old, "old");
    old_jwk["exp"] = json!(1000);
    let keys = Jwks::from_json(
        json!({"keys": [old_jwk, ed_jwk(&new, "new")]})
            .to_string()
            .as_bytes(),
    )?;
    let card = card_at("https://a.example");
    let by_old = entry(&card, "ES256", "old", es256(&old))?;
    let by_new = entry(&card, "EdDSA", "new", eddsa(&new))?;
    let old_only = with_signatures(card.clone(), vec![by_old.clone()]);
    // Before exp it verifies; at and after exp it does not.
    assert_eq!(
        verify_card_with(&old_only, &keys, &check(&[], 999.5)),
        Ok(Verification::Verified { kid: "old".into() })
    );
    for now in [1000.0, 5000.0] {
        assert_eq!(
            verify_card_with(&old_only, &keys, &check(&[], now)),
            Err(SignatureError::ExpiredKey { kid: "old".into() })
        );
    }
    assert_eq!(
        verify_card(&old_only, &keys, false),
        Err(SignatureError::ExpiredKey { kid: "old".into() })
    );
    let revoked = ["new".to_owned()];
    let new_only = with_signatures(card.clone(), vec![by_new.clone()]);
    assert_eq!(
        verify_card_with(&new_only, &keys, &check(&revoked, 0.0)),
        Err(SignatureError::RevokedKey { kid: "new".into() })
    );
    // A revoked kid is refused even when the key set does not know it.
    let unknown = ["stranger".to_owned()];
    let by_stranger = with_signatures(
        card.clone(),
        vec![entry(&card, "ES256", "stranger", es256(&key(9)?))?],
    );
    assert_eq!(
        verify_card_with(&by_stranger, &keys, &check(&unknown, 0.0)),
        Err(SignatureError::RevokedKey {
            kid: "stranger".into()
        })
    );
    // Only expired or revoked signatures, and a malformed one: refused, saying why.
    let malformed = json!({"protected": "!!", "signature": "AA"});
    let dead = with_signatures(card.clone(), vec![malformed.clone(), by_new.clone()]);
    assert_eq!(
        verify_card_with(&dead, &keys, &check(&revoked, 0.0)),
        Err(SignatureError::RevokedKey { kid: "new".into() })
    );
    let dead = with_signatures(card.clone(), vec![by_old.clone(), malformed]);
    assert_eq!(
        verify_card_with(&dead, &keys, &check(&[], 2000.0)),
        Err(SignatureError::ExpiredKey { kid: "old".into() })
    );
    // One good signature and one revoked: the good one carries the card.
    let rotating = with_signatures(card.clone(), vec![by_new, by_old]);
    let revoked_new = ["new".to_owned()];
    assert_eq!(
        verify_card_with(&rotating, &keys, &check(&revoked_new, 0.0)),
        Ok(Verification::Verified { kid: "old".into() })
    );
    Ok(())
}

#[tokio::test]
async fn a_revoked_kid_in_the_policy_refuses_the_fetched_card() -> TestResult {
    let signer = key(7)?;
    let jwks = json!({"keys": [jwk(&signer, "k1")]});
    let origin = serve(
        |origin| Ok(sign(card_at(origin), &signer, "k1")?),
        Some(jwks),
    )
    .await?;
    let policy = TrustPolicy {
        revoked: vec!["k1".into()],
        ..required(KeySource::SameOrigin)
    };
    let refused = client(policy, UrlPolicy::default())?
        .fetch_card(&origin)
        .await;
    assert!(
        matches!(&refused, Err(ClientError::Signature(SignatureError::RevokedKey { kid })) if kid == "k1"),
        "{refused:?}"
    );
    Ok(())
}

/// Serves `body` as the card at the well-known path of a free loopback port.
async fn serve_text(
    make: impl FnOnce(&str) -> Result<String, Box<dyn std::error::Error>>,
) -> Result<String, Box<dyn std::error::Error>> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let origin = format!("http://{}", listener.local_addr()?);
    let body = Arc::new(make(&origin)?);
    let app = Router::new().fallback(move |uri: Uri| {
        let body = Arc::clone(&body);
        async move {
            if uri.path() == CARD_PATH {
                Response::builder()
                    .header("content-type", "application/json")
                    .body(Body::from(body.as_str().to_owned()))
                    .unwrap_or_default()
            } else {
                Response::builder()
                    .status(StatusCode::NOT_FOUND)
                    .body(Body::empty())
                    .unwrap_or_default()
            }
        }
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(origin)
}

/// A validly signed card, then a second `url` member after the signed one: serde_json alone
/// would keep the second, which the signature never covered. Refused (I-JSON), with or
/// without verification, the card's own URL included; a JWKS with a duplicate too.
#[tokio::test]
async fn a_duplicate_member_after_the_signed_one_is_refused() -> TestResult {
    let signer = key(7)?;
    let keys = Jwks::from_json(json!({"keys": [jwk(&signer, "k1")]}).to_string().as_bytes())?;
    let origin = serve_text(|origin| {
        let signed = sign(card_at(origin), &signer, "k1")?.to_string();
        let head = signed.strip_suffix('}').ok_or("not an object")?;
        Ok(format!(r#"{head},"url":"{origin}/evil"}}"#))
    })
    .await?;
    let pinned = TrustPolicy {
        keys: KeySource::Pinned(keys),
        ..required(KeySource::SameOrigin)
    };
    for trust in [TrustPolicy::default(), pinned] {
        let client = client(trust, UrlPolicy::default())?;
        for url in [origin.clone(), format!("{origin}{CARD_PATH}")] {
            let refused = client.fetch_card(&url).await;
            assert!(
                matches!(&refused, Err(ClientError::InvalidCard { reason, .. }) if reason.contains("duplicate member name \"url\"")),
                "{refused:?}"
            );
        }
    }
    let twice = r#"{"keys":[{"kty":"EC","crv":"P-256","kid":"a","kid":"b","x":"","y":""}]}"#;
    assert!(matches!(
        Jwks::from_json(twice.as_bytes()),
        Err(SignatureError::Jwks(reason)) if reason.contains("duplicate")
    ));
    Ok(())
}

#[test]
fn a_card_with_more_signatures_than_the_bound_is_refused_unchecked() -> TestResult {
    let trusted = key(7)?;
    let keys = Jwks::from_json(
        json!({"keys": [jwk(&trusted, "k1")]})
            .to_string()
            .as_bytes(),
    )?;
    let good = sign(card_at("https://a.example"), &trusted, "k1")?;
    let one = good["signatures"][0].clone();
    let mut flood = good.clone();
    // Copies of a good signature, one more than the bound: refused before any is checked.
    flood["signatures"] = Value::Array(vec![one; crate::trust::MAX_SIGNATURES + 1]);
    assert!(matches!(
        verify_card(&flood, &keys, true),
        Err(SignatureError::Malformed(reason)) if reason.contains("at most")
    ));
    assert!(verify_card(&good, &keys, true).is_ok());
    Ok(())
}
