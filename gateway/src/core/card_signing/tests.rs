//! The signer: key file forms, both algorithms, expiry, reloads, and the canonicalizer
//! against RFC 8785's own examples.

use super::*;
use p256::ecdsa::signature::Verifier;
use p256::ecdsa::{Signature, SigningKey, VerifyingKey};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const KEY: &str = r#"{"keys":[{"kty":"EC","crv":"P-256","kid":"k1","d":"870MB6gfuTJ4HtUnUvYMyJpr5eUZNP4Bk43bVdj3eAE"}]}"#;

#[test]
fn a_signature_verifies_over_the_jcs_bytes_without_signatures()
-> Result<(), Box<dyn std::error::Error>> {
    let signer = CardSigner::from_jwks(KEY.as_bytes())?;
    let signed: Value =
        serde_json::from_slice(&signer.sign(&json!({"b": 1, "a": "é", "signatures": null}))?)?;
    let entry = &signed["signatures"][0];
    let header: Value =
        serde_json::from_slice(&B64.decode(entry["protected"].as_str().ok_or("protected")?)?)?;
    assert_eq!(header, json!({"alg": "ES256", "kid": "k1", "typ": "JOSE"}));
    let input = format!(
        "{}.{}",
        entry["protected"].as_str().ok_or("protected")?,
        B64.encode(r#"{"a":"é","b":1}"#)
    );
    let signature = Signature::from_slice(&B64.decode(entry["signature"].as_str().ok_or("sig")?)?)?;
    let signing =
        SigningKey::from_slice(&B64.decode("870MB6gfuTJ4HtUnUvYMyJpr5eUZNP4Bk43bVdj3eAE")?)?;
    VerifyingKey::from(&signing).verify(input.as_bytes(), &signature)?;
    Ok(())
}

/// RFC 8785 §3.2.2's example (numbers, string escapes, literals) and §3.2.3's sorting by
/// UTF-16 code units, through the canonicalizer the signatures use.
#[test]
fn the_canonicalizer_gives_rfc_8785_output() -> Result<(), serde_json::Error> {
    let input = r#"{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001], "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/", "literals": [null, true, false]}"#;
    let value: Value = serde_json::from_str(input)?;
    assert_eq!(
        serde_json_canonicalizer::to_string(&value)?,
        r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#
    );
    let sorting: Value = serde_json::from_str(
        r#"{"\u20ac": "Euro Sign", "\r": "Carriage Return", "\ufb33": "Hebrew Letter Dalet With Dagesh", "1": "One", "\ud83d\ude00": "Emoji: Grinning Face", "\u0080": "Control", "\u00f6": "Latin Small Letter O With Diaeresis"}"#,
    )?;
    // The workspace's serde_json keeps the order of members (`preserve_order`).
    let keys: Vec<String> = serde_json::from_str::<serde_json::Map<String, Value>>(
        &serde_json_canonicalizer::to_string(&sorting)?,
    )
    .map(|map| {
        map.values()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect()
    })?;
    assert_eq!(
        keys,
        [
            "Carriage Return",
            "One",
            "Control",
            "Latin Small Letter O With Diaeresis",
            "Euro Sign",
            "Emoji: Grinning Face",
            "Hebrew Letter Dalet With Dagesh",
        ]
    );
    Ok(())
}

#[test]
fn unusable_key_files_are_refused() {
    for bad in [
        r#"{"keys":[]}"#,
        r#"[]"#,
        r#"{"keys":[{"kty":"RSA","kid":"a","d":"AA"}]}"#,
        r#"{"keys":[{"kty":"EC","crv":"P-256","d":"870MB6gfuTJ4HtUnUvYMyJpr5eUZNP4Bk43bVdj3eAE"}]}"#,
        r#"{"keys":[{"kty":"EC","crv":"P-256","kid":"a","d":"870MB6gfuTJ4HtUnUvYMyJpr5eUZNP4Bk43bVdj3eAE","x":"AAAA"}]}"#,
    ] {
        assert!(CardSigner::from_jwks(bad.as_bytes()).is_err(), "{bad}");
    }
    let twice = r#"{"keys":[{"kty":"EC","crv":"P-256","kid":"a","d":"870MB6gfuTJ4HtUnUvYMyJpr5eUZNP4Bk43bVdj3eAE"},{"kty":"EC","crv":"P-256","kid":"a","d":"870MB6gfuTJ4HtUnUvYMyJpr5eUZNP4Bk43bVdj3eAE"}]}"#;
    assert!(matches!(
        CardSigner::from_jwks(twice.as_bytes()),
        Err(KeyFileError::DuplicateKid(_))
    ));
}

#[test]
fn a_key_file_without_a_public_url_stops_the_gateway() -> Result<(), clap::Error> {
    use clap::Parser;
    let config =
        GatewayConfig::try_parse_from(["gateway", "--card-signing-key-file", "/nonexistent"])?;
    let err = CardSigner::from_config(&config)
        .err()
        .map(|err| err.to_string());
    assert!(err.is_some_and(|err| err.contains("PUBLIC_URL")));
    Ok(())
}

/// RFC 8785 Appendix B: IEEE 754 doubles (by bit pattern) and their canonical text, and the
/// same numbers as JSON text through serde_json (the path a card takes).
#[test]
fn the_canonicalizer_gives_rfc_8785_appendix_b_numbers() -> TestResult {
    let vectors: &[(u64, &str)] = &[
        (0x0000000000000000, "0"),
        (0x8000000000000000, "0"),
        (0x0000000000000001, "5e-324"),
        (0x8000000000000001, "-5e-324"),
        (0x7fefffffffffffff, "1.7976931348623157e+308"),
        (0xffefffffffffffff, "-1.7976931348623157e+308"),
        (0x4340000000000000, "9007199254740992"),
        (0xc340000000000000, "-9007199254740992"),
        (0x4430000000000000, "295147905179352830000"),
        (0x44b52d02c7e14af5, "9.999999999999997e+22"),
        (0x44b52d02c7e14af6, "1e+23"),
        (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
        (0x444b1ae4d6e2ef4e, "999999999999999700000"),
        (0x444b1ae4d6e2ef4f, "999999999999999900000"),
        (0x444b1ae4d6e2ef50, "1e+21"),
        (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
        (0x3eb0c6f7a0b5ed8d, "0.000001"),
        (0x41b3de4355555553, "333333333.3333332"),
        (0x41b3de4355555554, "333333333.33333325"),
        (0x41b3de4355555555, "333333333.3333333"),
        (0x41b3de4355555556, "333333333.3333334"),
        (0x41b3de4355555557, "333333333.33333343"),
        (0xbecbf647612f3696, "-0.0000033333333333333333"),
        (0x43143ff3c1cb0959, "1424953923781206.2"),
    ];
    for &(bits, expected) in vectors {
        let number = serde_json::Number::from_f64(f64::from_bits(bits)).ok_or("not finite")?;
        assert_eq!(
            serde_json_canonicalizer::to_string(&Value::Number(number))?,
            expected,
            "{bits:016x}"
        );
    }
    for (text, expected) in [
        ("1e21", "1e+21"),
        ("1E21", "1e+21"),
        ("1e-7", "1e-7"),
        ("-0", "0"),
        ("-0.0", "0"),
        ("333333333.33333329", "333333333.3333333"),
        ("9007199254740992", "9007199254740992"),
        ("0.000001", "0.000001"),
        ("4.50", "4.5"),
    ] {
        let value: Value = serde_json::from_str(text)?;
        assert_eq!(
            serde_json_canonicalizer::to_string(&value)?,
            expected,
            "{text}"
        );
    }
    Ok(())
}

/// What RFC 8785 cannot canonicalize never reaches the canonicalizer: a lone surrogate escape
/// and NaN or Infinity fail to parse, and serde_json has no number for NaN or Infinity (a
/// float field holding one serializes as `null`).
#[test]
fn what_jcs_cannot_express_is_refused_before_it() {
    for text in [
        r#""\ud800""#,
        r#"{"a":"\udc00x"}"#,
        "NaN",
        "Infinity",
        "-Infinity",
        "[1e999]",
    ] {
        assert!(serde_json::from_str::<Value>(text).is_err(), "{text}");
    }
    assert!(serde_json::Number::from_f64(f64::NAN).is_none());
    assert!(serde_json::Number::from_f64(f64::INFINITY).is_none());
    assert_eq!(serde_json::to_value(f64::NAN).ok(), Some(Value::Null));
}

const ED_SEED: [u8; 32] = [5; 32];

fn ed_jwk(kid: &str) -> Value {
    json!({"kty": "OKP", "crv": "Ed25519", "kid": kid, "d": B64.encode(ED_SEED)})
}

fn ec_jwk(kid: &str) -> Value {
    json!({"kty": "EC", "crv": "P-256", "kid": kid, "d": "870MB6gfuTJ4HtUnUvYMyJpr5eUZNP4Bk43bVdj3eAE"})
}

fn signer(keys: &[Value]) -> Result<CardSigner, KeyFileError> {
    CardSigner::from_jwks(json!({ "keys": keys }).to_string().as_bytes())
}

/// The `(alg, kid)` of each signature, and whether it verifies (EdDSA ones checked here).
fn headers(signed: &[u8]) -> Result<Vec<(String, String)>, Box<dyn std::error::Error>> {
    let card: Value = serde_json::from_slice(signed)?;
    let mut found = Vec::new();
    let mut unsigned = card.clone();
    unsigned
        .as_object_mut()
        .map(|card| card.remove("signatures"));
    let payload = B64.encode(serde_json_canonicalizer::to_vec(&unsigned)?);
    for entry in card["signatures"].as_array().into_iter().flatten() {
        let protected = entry["protected"].as_str().ok_or("protected")?;
        let header: Value = serde_json::from_slice(&B64.decode(protected)?)?;
        let alg = header["alg"].as_str().ok_or("alg")?.to_owned();
        if alg == "EdDSA" {
            let signature = ed25519_dalek::Signature::from_slice(
                &B64.decode(entry["signature"].as_str().ok_or("signature")?)?,
            )?;
            ed25519_dalek::SigningKey::from_bytes(&ED_SEED)
                .verifying_key()
                .verify_strict(format!("{protected}.{payload}").as_bytes(), &signature)?;
        }
        found.push((alg, header["kid"].as_str().ok_or("kid")?.to_owned()));
    }
    Ok(found)
}

#[test]
fn a_mixed_key_file_signs_once_per_key_with_its_own_alg() -> TestResult {
    let signer = signer(&[ec_jwk("ec"), ed_jwk("ed")])?;
    let signed = signer.sign(&json!({"name": "x"}))?;
    assert_eq!(
        headers(&signed)?,
        [
            ("ES256".to_owned(), "ec".to_owned()),
            ("EdDSA".to_owned(), "ed".to_owned())
        ]
    );
    let jwks: Value = serde_json::from_slice(&signer.jwks().body)?;
    let ed = &jwks["keys"][1];
    // RFC 8037 §2: the public key only; `d` never leaves the file.
    assert_eq!(
        ed,
        &json!({"kty": "OKP", "crv": "Ed25519", "kid": "ed", "alg": "EdDSA", "use": "sig",
                "x": B64.encode(ed25519_dalek::SigningKey::from_bytes(&ED_SEED).verifying_key().to_bytes())})
    );
    assert!(!String::from_utf8(signer.jwks().body.to_vec())?.contains("\"d\""));
    for bad in [
        json!({"kty": "OKP", "crv": "Ed25519", "kid": "a", "d": "AAAA"}),
        json!({"kty": "OKP", "crv": "X25519", "kid": "a", "d": B64.encode(ED_SEED)}),
        json!({"kty": "OKP", "crv": "Ed25519", "kid": "a", "d": B64.encode(ED_SEED), "x": B64.encode([1; 32])}),
        json!({"kty": "OKP", "crv": "Ed25519", "kid": "a", "d": B64.encode(ED_SEED), "alg": "ES256"}),
        json!({"kty": "EC", "crv": "P-256", "kid": "a", "d": "870MB6gfuTJ4HtUnUvYMyJpr5eUZNP4Bk43bVdj3eAE", "alg": "EdDSA"}),
    ] {
        assert!(signer_of(&bad).is_err(), "{bad}");
    }
    Ok(())
}

fn signer_of(key: &Value) -> Result<CardSigner, KeyFileError> {
    signer(std::slice::from_ref(key))
}

#[test]
fn an_expired_key_neither_signs_nor_is_published() -> TestResult {
    let mut old = ec_jwk("old");
    old["exp"] = json!(2_000_000_000);
    let signer = signer(&[old, ed_jwk("new")])?;
    let before = 1_999_999_999.5;
    let after = 2_000_000_000.0;
    let kids = |built: &Built| -> Result<Vec<String>, serde_json::Error> {
        let set: Value = serde_json::from_slice(&built.body)?;
        Ok(set["keys"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|key| key["kid"].as_str().map(str::to_owned))
            .collect())
    };
    let (live, expired) = (signer.jwks_at(before), signer.jwks_at(after));
    assert_eq!(kids(&live)?, ["old", "new"]);
    assert_eq!(kids(&expired)?, ["new"]);
    assert_ne!(live.etag, expired.etag);
    let jwks: Value = serde_json::from_slice(&live.body)?;
    // The served key says when it expires.
    assert_eq!(jwks["keys"][0]["exp"], json!(2_000_000_000));
    let card = json!({"name": "x"});
    assert_eq!(headers(&signer.sign_at(&card, before)?)?.len(), 2);
    assert_eq!(
        headers(&signer.sign_at(&card, after)?)?,
        [("EdDSA".to_owned(), "new".to_owned())]
    );
    // Once every key has expired nothing signs, and nothing is published.
    let mut only = ed_jwk("only");
    only["exp"] = json!(2_000_000_000);
    let lone = signer_of(&only)?;
    let unsigned: Value = serde_json::from_slice(&lone.sign_at(&card, after)?)?;
    assert_eq!(unsigned, card);
    assert_eq!(kids(&lone.jwks_at(after))?, Vec::<String>::new());
    // A file whose keys have all expired is refused; so is an exp that is not a number.
    only["exp"] = json!(1);
    assert!(matches!(signer_of(&only), Err(KeyFileError::AllExpired)));
    only["exp"] = json!("soon");
    assert!(matches!(signer_of(&only), Err(KeyFileError::Key(0, _))));
    Ok(())
}

#[test]
fn a_reload_swaps_the_keys_and_a_bad_file_keeps_them() -> TestResult {
    let path = std::env::temp_dir().join(format!("card-signer-reload-{}.json", std::process::id()));
    std::fs::write(&path, json!({"keys": [ec_jwk("a")]}).to_string())?;
    let signer = CardSigner::load(&path)?;
    let card = json!({"name": "x"});
    let first_key = signer.cache_key("https://a.example");
    let first_jwks = signer.jwks();
    std::fs::write(
        &path,
        json!({"keys": [ec_jwk("a"), ed_jwk("b")]}).to_string(),
    )?;
    assert_eq!(signer.reload()?, 2);
    assert_eq!(headers(&signer.sign(&card)?)?.len(), 2);
    let second_key = signer.cache_key("https://a.example");
    assert_ne!(first_key, second_key);
    assert_ne!(first_jwks.etag, signer.jwks().etag);
    // Unusable files: the keys in use stay, and the error shows none of the file.
    for bad in [
        "{\"keys\":[{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"kid\":\"c\",\"d\":12345678901}]}",
        "{\"keys\":[{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"kid\":\"c\",\"d\":\"c2VjcmV0c2VjcmV0\"}]}",
        "{\"keys\": \"c2VjcmV0c2VjcmV0\"",
    ] {
        std::fs::write(&path, bad)?;
        let err = signer
            .reload()
            .err()
            .ok_or("a bad file was accepted")?
            .to_string();
        assert!(
            !err.contains("12345678901") && !err.contains("c2VjcmV0"),
            "{err}"
        );
        assert_eq!(signer.cache_key("https://a.example"), second_key);
        assert_eq!(headers(&signer.sign(&card)?)?.len(), 2);
    }
    std::fs::remove_file(&path)?;
    assert!(matches!(signer.reload(), Err(KeyFileError::Read { .. })));
    assert_eq!(signer.cache_key("https://a.example"), second_key);
    Ok(())
}
