//! Signed Agent Cards (A2A v1.0 §8.4): with `--card-signing-key-file`, every card the gateway
//! serves carries one JWS (RFC 7515) per key, `{"protected", "signature"}`, whose detached
//! payload is the RFC 8785 (JCS) canonical form of the card as served, its `signatures` member
//! removed. The public keys are served as a JWK Set at `/.well-known/jwks.json`.
//!
//! The key file is a JWK Set (RFC 7517) of private P-256 keys (`kty` `EC`, `crv` `P-256`, `d`,
//! and a `kid` each); each key signs with ES256. Several keys (a rotation under way) give one
//! signature each. Keys are read once, at start: a rotation step is a restart.
//!
//! A card is signed only over URLs from `--public-url`: a card whose URLs came from the
//! request's `Host` header would be a validly signed card pointing wherever the caller said.

use std::path::Path;
use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use p256::ecdsa::signature::Signer;
use p256::ecdsa::{Signature, SigningKey};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::config::GatewayConfig;
use crate::http::document::Built;

/// Why the key file cannot be used. Never carries key material.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    #[error("cannot read the card signing key file {path}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("the card signing key file is not a JWK Set ({{\"keys\":[...]}}): {0}")]
    NotJwks(serde_json::Error),
    #[error("the card signing key file holds no keys")]
    Empty,
    #[error("card signing key {0}: {1}")]
    Key(usize, &'static str),
    #[error("two card signing keys share the kid {0:?}")]
    DuplicateKid(String),
}

#[derive(Deserialize)]
struct JwkSet {
    keys: Vec<PrivateJwk>,
}

#[derive(Deserialize)]
struct PrivateJwk {
    kty: String,
    crv: Option<String>,
    kid: Option<String>,
    alg: Option<String>,
    d: Option<String>,
    x: Option<String>,
    y: Option<String>,
}

struct Key {
    /// The base64url of the protected header, fixed per key.
    protected: String,
    signing: SigningKey,
}

/// The loaded keys, the JWK Set of their public halves, and nothing else.
pub struct CardSigner {
    keys: Vec<Key>,
    jwks: Built,
}

impl std::fmt::Debug for CardSigner {
    // The private keys stay out of every log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CardSigner")
            .field("keys", &self.keys.len())
            .finish_non_exhaustive()
    }
}

/// The path of the public JWK Set, under the base path.
pub const JWKS_PATH: &str = "/.well-known/jwks.json";

impl CardSigner {
    /// The signer `config` asks for: none without `--card-signing-key-file`; an error when the
    /// file is unusable or `--public-url` is unset (a signed card must not name URLs taken
    /// from request headers).
    pub fn from_config(config: &GatewayConfig) -> anyhow::Result<Option<Arc<CardSigner>>> {
        let Some(path) = &config.card_signing_key_file else {
            return Ok(None);
        };
        let Some(public) = &config.public_url else {
            anyhow::bail!(
                "CARD_SIGNING_KEY_FILE needs PUBLIC_URL: a signed card names the public URL, never one taken from request headers"
            );
        };
        let signer = CardSigner::load(path)?;
        tracing::info!(
            keys = signer.keys.len(),
            public_url = public.origin(),
            "agent cards are signed (ES256)"
        );
        Ok(Some(Arc::new(signer)))
    }

    pub fn load(path: &Path) -> Result<CardSigner, KeyFileError> {
        let text = std::fs::read(path).map_err(|source| KeyFileError::Read {
            path: path.display().to_string(),
            source,
        })?;
        CardSigner::from_jwks(&text)
    }

    /// From the bytes of a private JWK Set.
    pub fn from_jwks(text: &[u8]) -> Result<CardSigner, KeyFileError> {
        let set: JwkSet = serde_json::from_slice(text).map_err(KeyFileError::NotJwks)?;
        if set.keys.is_empty() {
            return Err(KeyFileError::Empty);
        }
        let mut keys = Vec::with_capacity(set.keys.len());
        let mut public = Vec::with_capacity(set.keys.len());
        for (index, jwk) in set.keys.into_iter().enumerate() {
            let bad = |why| KeyFileError::Key(index, why);
            if jwk.kty != "EC" || jwk.crv.as_deref() != Some("P-256") {
                return Err(bad("only EC P-256 keys (ES256) are supported"));
            }
            if jwk.alg.as_deref().is_some_and(|alg| alg != "ES256") {
                return Err(bad("an EC P-256 key signs with ES256 only"));
            }
            let kid = jwk.kid.filter(|kid| !kid.is_empty()).ok_or(bad("no kid"))?;
            if public
                .iter()
                .any(|key: &Value| key["kid"].as_str() == Some(kid.as_str()))
            {
                return Err(KeyFileError::DuplicateKid(kid));
            }
            let d = jwk
                .d
                .and_then(|d| B64.decode(d).ok())
                .ok_or(bad("no private part d (base64url)"))?;
            let signing = SigningKey::from_slice(&d).map_err(|_| bad("d is not a P-256 scalar"))?;
            let point = signing.verifying_key().to_encoded_point(false);
            let (Some(x), Some(y)) = (point.x(), point.y()) else {
                return Err(bad("no public point"));
            };
            let (x, y) = (B64.encode(x), B64.encode(y));
            // A file whose x/y disagree with d is a mix-up; publishing them would make every
            // signature fail to verify.
            if jwk.x.is_some_and(|given| given != x) || jwk.y.is_some_and(|given| given != y) {
                return Err(bad("x and y are not the public half of d"));
            }
            let header = json!({"alg": "ES256", "kid": kid, "typ": "JOSE"});
            keys.push(Key {
                protected: B64.encode(header.to_string()),
                signing,
            });
            public.push(json!({
                "kty": "EC", "crv": "P-256", "x": x, "y": y,
                "kid": kid, "alg": "ES256", "use": "sig",
            }));
        }
        let jwks = serde_json::to_vec(&json!({ "keys": public })).map_err(KeyFileError::NotJwks)?;
        Ok(CardSigner {
            keys,
            jwks: Built::new(jwks),
        })
    }

    /// The public JWK Set, as served (with its ETag).
    pub fn jwks(&self) -> &Built {
        &self.jwks
    }

    /// The base URL of a signed card: `--public-url` and the base path, whatever the request
    /// says; `None` without a public URL (then nothing is signed: [`Self::from_config`]).
    pub fn card_base(config: &GatewayConfig) -> Option<String> {
        let public = config.public_url.as_ref()?;
        Some(format!("{}{}", public.origin(), config.base_path()))
    }

    /// `card` (a JSON object) with `signatures`: one per key over its JCS form without them.
    pub fn sign(&self, card: &impl serde::Serialize) -> Result<Vec<u8>, serde_json::Error> {
        let mut card = serde_json::to_value(card)?;
        let Some(object) = card.as_object_mut() else {
            return serde_json::to_vec(&card);
        };
        object.remove("signatures");
        let payload = B64.encode(serde_json_canonicalizer::to_vec(&card)?);
        let signatures: Vec<Value> = self
            .keys
            .iter()
            .map(|key| {
                let input = format!("{}.{payload}", key.protected);
                let signature: Signature = key.signing.sign(input.as_bytes());
                json!({
                    "protected": key.protected,
                    "signature": B64.encode(signature.to_bytes()),
                })
            })
            .collect();
        if let Some(object) = card.as_object_mut() {
            object.insert("signatures".into(), Value::Array(signatures));
        }
        serde_json::to_vec(&card)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use p256::ecdsa::VerifyingKey;
    use p256::ecdsa::signature::Verifier;

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
        let signature =
            Signature::from_slice(&B64.decode(entry["signature"].as_str().ok_or("sig")?)?)?;
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
}
