//! The private JWK Set of `CARD_SIGNING_KEY_FILE`: EC P-256 keys (ES256) and OKP Ed25519 keys
//! (EdDSA, RFC 8037), each with a `kid` and maybe an `exp` (NumericDate seconds: our extension,
//! RFC 7517 §4 allows members it does not define). Only the public half of each key leaves
//! this module, as its JWK.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use serde::Deserialize;
use serde_json::{Value, json};

use super::KeyFileError;

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
    exp: Option<Value>,
}

enum Signing {
    Es256(p256::ecdsa::SigningKey),
    EdDsa(ed25519_dalek::SigningKey),
}

/// One signing key: its JWS header, private key, public JWK and expiry.
pub(super) struct Key {
    pub kid: String,
    /// The NumericDate (seconds) at and after which the key neither signs nor is published.
    pub exp: Option<f64>,
    /// The base64url of the protected header, fixed per key.
    pub protected: String,
    /// The public JWK, as the JWK Set serves it.
    pub public: Value,
    signing: Signing,
}

impl Key {
    pub fn live_at(&self, now: f64) -> bool {
        self.exp.is_none_or(|exp| now < exp)
    }

    /// The JWS signature over `input`: raw `r||s` for ES256, the 64 bytes for EdDSA.
    pub fn sign(&self, input: &[u8]) -> Vec<u8> {
        match &self.signing {
            Signing::Es256(key) => {
                let signature: p256::ecdsa::Signature =
                    p256::ecdsa::signature::Signer::sign(key, input);
                signature.to_bytes().to_vec()
            }
            Signing::EdDsa(key) => ed25519_dalek::Signer::sign(key, input).to_bytes().to_vec(),
        }
    }
}

/// Reads a private JWK Set. The errors name a key by its index, never by its contents.
pub(super) fn parse(text: &[u8]) -> Result<Vec<Key>, KeyFileError> {
    // serde_json's messages can quote the input ("invalid type: string \"...\""): only its
    // category and position are kept, since the input holds private keys.
    let set: JwkSet = serde_json::from_slice(text).map_err(|err| {
        KeyFileError::NotJwks(format!(
            "{:?} error at line {} column {}",
            err.classify(),
            err.line(),
            err.column()
        ))
    })?;
    if set.keys.is_empty() {
        return Err(KeyFileError::Empty);
    }
    let mut keys: Vec<Key> = Vec::with_capacity(set.keys.len());
    for (index, jwk) in set.keys.into_iter().enumerate() {
        let bad = |why| KeyFileError::Key(index, why);
        let kid = jwk
            .kid
            .clone()
            .filter(|kid| !kid.is_empty())
            .ok_or(bad("no kid"))?;
        if keys.iter().any(|key| key.kid == kid) {
            return Err(KeyFileError::DuplicateKid(kid));
        }
        let exp = match &jwk.exp {
            None => None,
            Some(exp) => Some(
                exp.as_f64()
                    .filter(|exp| exp.is_finite())
                    .ok_or(bad("exp is not a NumericDate"))?,
            ),
        };
        let d = jwk
            .d
            .as_deref()
            .and_then(|d| B64.decode(d).ok())
            .ok_or(bad("no private part d (base64url)"))?;
        let (alg, signing, mut public) = match (jwk.kty.as_str(), jwk.crv.as_deref()) {
            ("EC", Some("P-256")) => es256(&jwk, &d).map_err(bad)?,
            ("OKP", Some("Ed25519")) => eddsa(&jwk, &d).map_err(bad)?,
            _ => {
                return Err(bad(
                    "only EC P-256 (ES256) and OKP Ed25519 (EdDSA) keys are supported",
                ));
            }
        };
        if jwk.alg.as_deref().is_some_and(|given| given != alg) {
            return Err(bad(
                "the alg does not match the key type (ES256 for P-256, EdDSA for Ed25519)",
            ));
        }
        public["kid"] = json!(kid);
        public["alg"] = json!(alg);
        public["use"] = json!("sig");
        if let Some(exp) = &jwk.exp {
            public["exp"] = json!(exp);
        }
        let header = json!({"alg": alg, "kid": kid, "typ": "JOSE"});
        keys.push(Key {
            kid,
            exp,
            protected: B64.encode(header.to_string()),
            public,
            signing,
        });
    }
    Ok(keys)
}

type Parsed = (&'static str, Signing, Value);

fn es256(jwk: &PrivateJwk, d: &[u8]) -> Result<Parsed, &'static str> {
    let signing = p256::ecdsa::SigningKey::from_slice(d).map_err(|_| "d is not a P-256 scalar")?;
    let point = signing.verifying_key().to_encoded_point(false);
    let (Some(x), Some(y)) = (point.x(), point.y()) else {
        return Err("no public point");
    };
    let (x, y) = (B64.encode(x), B64.encode(y));
    // A file whose x/y disagree with d is a mix-up; publishing them would make every
    // signature fail to verify.
    if jwk.x.as_ref().is_some_and(|given| *given != x)
        || jwk.y.as_ref().is_some_and(|given| *given != y)
    {
        return Err("x and y are not the public half of d");
    }
    let public = json!({"kty": "EC", "crv": "P-256", "x": x, "y": y});
    Ok(("ES256", Signing::Es256(signing), public))
}

fn eddsa(jwk: &PrivateJwk, d: &[u8]) -> Result<Parsed, &'static str> {
    // RFC 8037 §2: d is the 32-byte private key (the seed), x the 32-byte public key.
    let seed: &[u8; 32] = d.try_into().map_err(|_| "d is not a 32-byte Ed25519 key")?;
    let signing = ed25519_dalek::SigningKey::from_bytes(seed);
    let x = B64.encode(signing.verifying_key().to_bytes());
    if jwk.x.as_ref().is_some_and(|given| *given != x) {
        return Err("x is not the public half of d");
    }
    if jwk.y.is_some() {
        return Err("an OKP key has no y");
    }
    let public = json!({"kty": "OKP", "crv": "Ed25519", "x": x});
    Ok(("EdDSA", Signing::EdDsa(signing), public))
}
