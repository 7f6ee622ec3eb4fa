//! Agent Card signatures (A2A v1.0 §8.4): which keys a client trusts and whether a card must be
//! signed. A signature is a detached JWS (RFC 7515) over the RFC 8785 (JCS) canonical bytes of
//! the card with `signatures` removed; the signing input is
//! `b64url(protected) "." b64url(JCS(card))`. ES256 (P-256, raw `r||s`) and EdDSA (Ed25519,
//! RFC 8037); each key verifies with its own algorithm only.
//!
//! §8.4.3: an expired or revoked key never verifies. A JWK may carry `exp` (NumericDate
//! seconds, an extension RFC 7517 allows), and the trust policy lists revoked kids.
//!
//! Verification works on the card's JSON as it came, not on [`crate::AgentCard`]: a typed round
//! trip drops empty fields and would change the canonical bytes.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;

use crate::ijson;

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
    /// Kids whose signatures never verify (§8.4.3), whatever key set names them.
    pub revoked: Vec<String>,
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
    #[error("unsupported signature algorithm {alg:?} (only ES256 and EdDSA)")]
    UnsupportedAlg { alg: String },
    #[error("the signature by key {kid:?} says {alg}, which is not that key's algorithm")]
    AlgMismatch { kid: String, alg: String },
    #[error("the card is signed by the expired key {kid:?}")]
    ExpiredKey { kid: String },
    #[error("the card is signed by the revoked key {kid:?}")]
    RevokedKey { kid: String },
    #[error("the signature by key {kid:?} does not verify")]
    BadSignature { kid: String },
    #[error("malformed signature: {0}")]
    Malformed(String),
    #[error("unusable key set: {0}")]
    Jwks(String),
}

/// A public key of a supported type.
#[derive(Debug, Clone)]
enum PublicKey {
    Es256(p256::ecdsa::VerifyingKey),
    EdDsa(ed25519_dalek::VerifyingKey),
}

impl PublicKey {
    fn alg(&self) -> &'static str {
        match self {
            PublicKey::Es256(_) => "ES256",
            PublicKey::EdDsa(_) => "EdDSA",
        }
    }

    fn verify(&self, input: &[u8], raw: &[u8]) -> bool {
        match self {
            PublicKey::Es256(key) => p256::ecdsa::Signature::from_slice(raw).is_ok_and(|sig| {
                p256::ecdsa::signature::Verifier::verify(key, input, &sig).is_ok()
            }),
            PublicKey::EdDsa(key) => ed25519_dalek::Signature::from_slice(raw)
                // Strict: refuses the malleable and small-order forms RFC 8032 allows.
                .is_ok_and(|sig| key.verify_strict(input, &sig).is_ok()),
        }
    }
}

#[derive(Debug, Clone)]
struct TrustedKey {
    kid: String,
    key: PublicKey,
    /// NumericDate (seconds) at and after which the key does not verify.
    exp: Option<f64>,
}

/// A set of public keys by `kid`: EC P-256 and OKP Ed25519 (other key types are skipped).
#[derive(Debug, Clone, Default)]
pub struct Jwks {
    keys: Vec<TrustedKey>,
}

impl Jwks {
    /// Parses `{"keys": [{"kty":"EC","crv":"P-256","kid","x","y"},
    /// {"kty":"OKP","crv":"Ed25519","kid","x"}, ...]}`, each maybe with `exp`. A set with a
    /// duplicate member name anywhere is refused (I-JSON, [`crate::ijson`]).
    pub fn from_json(bytes: &[u8]) -> Result<Self, SignatureError> {
        ijson::no_duplicate_members(bytes).map_err(SignatureError::Jwks)?;
        let value: Value =
            serde_json::from_slice(bytes).map_err(|err| SignatureError::Jwks(err.to_string()))?;
        let Some(entries) = value.get("keys").and_then(Value::as_array) else {
            return Err(SignatureError::Jwks("no \"keys\" array".into()));
        };
        let mut keys = Vec::new();
        for entry in entries {
            let field = |name: &str| entry.get(name).and_then(Value::as_str);
            let key = match (field("kty"), field("crv")) {
                (Some("EC"), Some("P-256")) => ec_key(entry)?,
                (Some("OKP"), Some("Ed25519")) => ed25519_key(entry)?,
                _ => continue,
            };
            let kid = field("kid").unwrap_or_default();
            if field("alg").is_some_and(|alg| alg != key.alg()) {
                return Err(SignatureError::Jwks(format!(
                    "key {kid:?}: alg is not {}",
                    key.alg()
                )));
            }
            let exp = match entry.get("exp") {
                None => None,
                Some(exp) => Some(exp.as_f64().ok_or_else(|| {
                    SignatureError::Jwks(format!("key {kid:?}: exp is not a NumericDate"))
                })?),
            };
            keys.push(TrustedKey {
                kid: kid.to_owned(),
                key,
                exp,
            });
        }
        Ok(Jwks { keys })
    }

    pub fn from_file(path: &Path) -> Result<Self, SignatureError> {
        let bytes = std::fs::read(path)
            .map_err(|err| SignatureError::Jwks(format!("{}: {err}", path.display())))?;
        Self::from_json(&bytes)
    }

    fn key(&self, kid: &str) -> Option<&TrustedKey> {
        self.keys.iter().find(|key| key.kid == kid)
    }
}

fn b64_field(entry: &Value, name: &str, len: usize) -> Result<Vec<u8>, SignatureError> {
    let kid = entry.get("kid").and_then(Value::as_str);
    let Some(kid) = kid else {
        return Err(SignatureError::Jwks("a key without kid".into()));
    };
    entry
        .get(name)
        .and_then(Value::as_str)
        .and_then(|text| URL_SAFE_NO_PAD.decode(text).ok())
        .filter(|bytes| bytes.len() == len)
        .ok_or_else(|| SignatureError::Jwks(format!("key {kid:?}: bad or missing {name}")))
}

fn ec_key(entry: &Value) -> Result<PublicKey, SignatureError> {
    let mut point = vec![0x04];
    point.extend(b64_field(entry, "x", 32)?);
    point.extend(b64_field(entry, "y", 32)?);
    p256::ecdsa::VerifyingKey::from_sec1_bytes(&point)
        .map(PublicKey::Es256)
        .map_err(|_| SignatureError::Jwks("an EC key that is not a P-256 point".into()))
}

fn ed25519_key(entry: &Value) -> Result<PublicKey, SignatureError> {
    let x = b64_field(entry, "x", 32)?;
    let bytes: [u8; 32] = x
        .try_into()
        .map_err(|_| SignatureError::Jwks("an Ed25519 key that is not 32 bytes".into()))?;
    ed25519_dalek::VerifyingKey::from_bytes(&bytes)
        .map(PublicKey::EdDsa)
        .map_err(|_| SignatureError::Jwks("an OKP key that is not an Ed25519 point".into()))
}

/// What [`verify_card_with`] holds a card to besides the keys.
#[derive(Debug, Clone, Copy)]
pub struct Check<'a> {
    /// An unsigned card fails ([`SignatureError::Missing`]).
    pub required: bool,
    /// Kids that never verify.
    pub revoked: &'a [String],
    /// Now, in NumericDate seconds (keys with `exp` at or before it do not verify).
    pub now: f64,
}

/// Now as a NumericDate (seconds since the epoch).
pub fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |since| since.as_secs_f64())
}

/// Checks the signatures of `card` (its JSON as received) against `keys`, now and with no
/// revoked kids: [`verify_card_with`].
pub fn verify_card(
    card: &Value,
    keys: &Jwks,
    required: bool,
) -> Result<Verification, SignatureError> {
    verify_card_with(
        card,
        keys,
        &Check {
            required,
            revoked: &[],
            now: now(),
        },
    )
}

/// The most signatures a card may carry: one per key in rotation is a handful.
pub const MAX_SIGNATURES: usize = 16;

/// Checks the signatures of `card` (its JSON as received) against `keys`. The card passes when
/// one signature verifies; otherwise the most telling error is returned (a revoked or expired
/// key before a bad signature, before an unknown key or algorithm, before a malformed entry).
/// An unsigned card passes as [`Verification::Unsigned`] unless `check.required`.
pub fn verify_card_with(
    card: &Value,
    keys: &Jwks,
    check: &Check<'_>,
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
    if signatures.len() > MAX_SIGNATURES {
        // Each one could cost a signature check: a card is not a way to make us burn CPU.
        return Err(SignatureError::Malformed(format!(
            "{} signatures (at most {MAX_SIGNATURES} are checked)",
            signatures.len()
        )));
    }
    if signatures.is_empty() {
        return if check.required {
            Err(SignatureError::Missing)
        } else {
            Ok(Verification::Unsigned)
        };
    }
    let payload = canonical_payload(card)?;
    let mut worst: Option<SignatureError> = None;
    for signature in signatures {
        match verify_one(signature, &payload, keys, check) {
            Ok(kid) => return Ok(Verification::Verified { kid }),
            Err(err) => {
                if worst.as_ref().is_none_or(|kept| rank(&err) > rank(kept)) {
                    worst = Some(err);
                }
            }
        }
    }
    Err(worst.unwrap_or(SignatureError::Missing))
}

/// How much an error says about the card: the one reported is the highest.
fn rank(err: &SignatureError) -> u8 {
    match err {
        SignatureError::RevokedKey { .. } | SignatureError::ExpiredKey { .. } => 4,
        SignatureError::BadSignature { .. } | SignatureError::AlgMismatch { .. } => 3,
        SignatureError::UnknownKey { .. } | SignatureError::UnsupportedAlg { .. } => 2,
        SignatureError::Malformed(_) => 1,
        SignatureError::Missing | SignatureError::Jwks(_) => 0,
    }
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

fn verify_one(
    signature: &Value,
    payload: &str,
    keys: &Jwks,
    check: &Check<'_>,
) -> Result<String, SignatureError> {
    let malformed = |reason: &str| SignatureError::Malformed(reason.to_owned());
    let text = |name: &str| signature.get(name).and_then(Value::as_str);
    let protected_b64 = text("protected").ok_or_else(|| malformed("no protected header"))?;
    let protected: Value = URL_SAFE_NO_PAD
        .decode(protected_b64)
        .ok()
        .filter(|bytes| ijson::no_duplicate_members(bytes).is_ok())
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .filter(Value::is_object)
        .ok_or_else(|| malformed("the protected header is not base64url JSON"))?;
    // Only the algorithms of the supported key types; `none` never.
    let alg = protected.get("alg").and_then(Value::as_str).unwrap_or("");
    if alg != "ES256" && alg != "EdDSA" {
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
    let owned = || kid.to_owned();
    if check.revoked.iter().any(|revoked| revoked == kid) {
        return Err(SignatureError::RevokedKey { kid: owned() });
    }
    let trusted = keys
        .key(kid)
        .ok_or_else(|| SignatureError::UnknownKey { kid: owned() })?;
    if trusted.exp.is_some_and(|exp| check.now >= exp) {
        return Err(SignatureError::ExpiredKey { kid: owned() });
    }
    // The key decides the algorithm, never the header alone (no algorithm confusion).
    if trusted.key.alg() != alg {
        return Err(SignatureError::AlgMismatch {
            kid: owned(),
            alg: alg.to_owned(),
        });
    }
    let raw = text("signature")
        .and_then(|sig| URL_SAFE_NO_PAD.decode(sig).ok())
        .ok_or_else(|| SignatureError::BadSignature { kid: owned() })?;
    let input = format!("{protected_b64}.{payload}");
    if !trusted.key.verify(input.as_bytes(), &raw) {
        return Err(SignatureError::BadSignature { kid: owned() });
    }
    Ok(owned())
}

#[cfg(test)]
mod tests;
