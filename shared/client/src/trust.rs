//! Agent Card signatures (A2A v1.0 §8.4): which keys a client trusts and whether a card must be
//! signed. A signature is a detached JWS (RFC 7515) over the RFC 8785 (JCS) canonical bytes of
//! the card with `signatures` removed; the signing input is
//! `b64url(protected) "." b64url(JCS(card))`. ES256 only (P-256, raw `r||s`).
//!
//! Verification works on the card's JSON as it came, not on [`crate::AgentCard`]: a typed round
//! trip drops empty fields and would change the canonical bytes.

use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use p256::ecdsa::signature::Verifier;
use p256::ecdsa::{Signature, VerifyingKey};
use serde_json::Value;

/// Whether cards must carry a good signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Verify {
    /// Signatures are not looked at (the default: most agents do not sign yet).
    #[default]
    Off,
    /// A signed card must verify; an unsigned card is accepted (and reported unsigned).
    Optional,
    /// The card must carry a signature that verifies with a trusted key.
    Required,
}

/// Where the trusted keys come from.
#[derive(Debug, Clone, Default)]
pub enum KeySource {
    /// The card's own origin's `/.well-known/jwks.json`. Proves the card and the JWKS come from
    /// one origin (a card relayed or altered elsewhere fails), not who runs that origin.
    #[default]
    SameOrigin,
    /// Keys pinned out of band (a JWKS file): the stronger choice.
    Pinned(Jwks),
}

/// The client's trust policy for cards.
#[derive(Debug, Clone, Default)]
pub struct TrustPolicy {
    pub verify: Verify,
    pub keys: KeySource,
}

/// How a card's signature came out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verification {
    /// Not checked ([`Verify::Off`]).
    NotChecked,
    /// No signature, and none was required.
    Unsigned,
    /// A signature verified with the key `kid`.
    Verified { kid: String },
}

/// Why a card's signature was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("the card is not signed and a signature is required")]
    Missing,
    #[error("the card is signed by an unknown key {kid:?}")]
    UnknownKey { kid: String },
    #[error("unsupported signature algorithm {alg:?} (only ES256)")]
    UnsupportedAlg { alg: String },
    #[error("the signature by key {kid:?} does not verify")]
    BadSignature { kid: String },
    #[error("malformed signature: {0}")]
    Malformed(String),
    #[error("unusable key set: {0}")]
    Jwks(String),
}

/// A set of P-256 public keys by `kid` (other key types in the set are skipped).
#[derive(Debug, Clone, Default)]
pub struct Jwks {
    keys: Vec<(String, VerifyingKey)>,
}

impl Jwks {
    /// Parses `{"keys": [{"kty":"EC","crv":"P-256","kid","x","y"}, ...]}`.
    pub fn from_json(bytes: &[u8]) -> Result<Self, SignatureError> {
        let value: Value =
            serde_json::from_slice(bytes).map_err(|err| SignatureError::Jwks(err.to_string()))?;
        let Some(entries) = value.get("keys").and_then(Value::as_array) else {
            return Err(SignatureError::Jwks("no \"keys\" array".into()));
        };
        let mut keys = Vec::new();
        for entry in entries {
            let field = |name: &str| entry.get(name).and_then(Value::as_str);
            if field("kty") != Some("EC") || field("crv") != Some("P-256") {
                continue;
            }
            let (Some(kid), Some(x), Some(y)) = (field("kid"), field("x"), field("y")) else {
                return Err(SignatureError::Jwks("an EC key without kid, x or y".into()));
            };
            let coordinate = |text: &str| {
                URL_SAFE_NO_PAD
                    .decode(text)
                    .ok()
                    .filter(|bytes| bytes.len() == 32)
                    .ok_or_else(|| SignatureError::Jwks(format!("key {kid:?}: bad coordinate")))
            };
            let mut point = vec![0x04];
            point.extend(coordinate(x)?);
            point.extend(coordinate(y)?);
            let key = VerifyingKey::from_sec1_bytes(&point)
                .map_err(|_| SignatureError::Jwks(format!("key {kid:?}: not a P-256 point")))?;
            keys.push((kid.to_owned(), key));
        }
        Ok(Jwks { keys })
    }

    pub fn from_file(path: &Path) -> Result<Self, SignatureError> {
        let bytes = std::fs::read(path)
            .map_err(|err| SignatureError::Jwks(format!("{}: {err}", path.display())))?;
        Self::from_json(&bytes)
    }

    fn key(&self, kid: &str) -> Option<&VerifyingKey> {
        self.keys
            .iter()
            .find(|(id, _)| id == kid)
            .map(|(_, key)| key)
    }
}

/// Checks the signatures of `card` (its JSON as received) against `keys`. The card passes when
/// one signature verifies; otherwise the first signature's error is returned. An unsigned card
/// passes as [`Verification::Unsigned`] unless `required`.
pub fn verify_card(
    card: &Value,
    keys: &Jwks,
    required: bool,
) -> Result<Verification, SignatureError> {
    let signatures = match card.get("signatures") {
        None | Some(Value::Null) => &[][..],
        Some(Value::Array(list)) => list.as_slice(),
        Some(_) => {
            return Err(SignatureError::Malformed(
                "signatures is not an array".into(),
            ));
        }
    };
    if signatures.is_empty() {
        return if required {
            Err(SignatureError::Missing)
        } else {
            Ok(Verification::Unsigned)
        };
    }
    let payload = canonical_payload(card)?;
    let mut first_error = None;
    for signature in signatures {
        match verify_one(signature, &payload, keys) {
            Ok(kid) => return Ok(Verification::Verified { kid }),
            Err(err) => {
                first_error.get_or_insert(err);
            }
        }
    }
    Err(first_error.unwrap_or(SignatureError::Missing))
}

/// The JCS bytes of the card without `signatures`, base64url-encoded (the JWS payload part).
pub fn canonical_payload(card: &Value) -> Result<String, SignatureError> {
    let mut unsigned = card.clone();
    if let Some(object) = unsigned.as_object_mut() {
        object.remove("signatures");
    }
    let bytes =
        serde_jcs::to_vec(&unsigned).map_err(|err| SignatureError::Malformed(err.to_string()))?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

fn verify_one(signature: &Value, payload: &str, keys: &Jwks) -> Result<String, SignatureError> {
    let malformed = |reason: &str| SignatureError::Malformed(reason.to_owned());
    let text = |name: &str| signature.get(name).and_then(Value::as_str);
    let protected_b64 = text("protected").ok_or_else(|| malformed("no protected header"))?;
    let protected: Value = URL_SAFE_NO_PAD
        .decode(protected_b64)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .filter(Value::is_object)
        .ok_or_else(|| malformed("the protected header is not base64url JSON"))?;
    let alg = protected.get("alg").and_then(Value::as_str).unwrap_or("");
    if alg != "ES256" {
        return Err(SignatureError::UnsupportedAlg {
            alg: alg.to_owned(),
        });
    }
    // RFC 7515 §4.1.11: an extension the verifier does not understand must fail.
    if protected.get("crit").is_some() {
        return Err(malformed("crit header parameters are not supported"));
    }
    let kid = protected
        .get("kid")
        .or_else(|| signature.get("header")?.get("kid"))
        .and_then(Value::as_str)
        .ok_or_else(|| malformed("no kid"))?;
    let key = keys.key(kid).ok_or_else(|| SignatureError::UnknownKey {
        kid: kid.to_owned(),
    })?;
    let bad = || SignatureError::BadSignature {
        kid: kid.to_owned(),
    };
    let raw = text("signature")
        .and_then(|sig| URL_SAFE_NO_PAD.decode(sig).ok())
        .ok_or_else(bad)?;
    let sig = Signature::from_slice(&raw).map_err(|_| bad())?;
    let input = format!("{protected_b64}.{payload}");
    key.verify(input.as_bytes(), &sig).map_err(|_| bad())?;
    Ok(kid.to_owned())
}

#[cfg(test)]
mod tests;
