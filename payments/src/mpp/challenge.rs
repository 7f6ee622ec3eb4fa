//! A Payment challenge: what a route asks for ([`ChallengeParams`]), the challenge issued from
//! it with an HMAC-bound `id` ([`Challenge`]), and its `WWW-Authenticate` value.
//!
//! The `id` is stateless: base64url-nopad(HMAC-SHA256(secret, "realm|method|intent|request|
//! expires|digest|opaque")), absent optional slots empty (draft-httpauth-payment, "Recommended:
//! HMAC-SHA256 Binding"). A credential that echoes a challenge is then checked by recomputing
//! the HMAC over what it echoes ([`Challenge::id_matches`], constant time); nothing is stored.
//! `description` is not bound (display only; the spec says never to rely on it).

use std::collections::BTreeMap;

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::params::AuthChallenge;
use super::{MAX_REQUEST_PARAM_BYTES, SCHEME, b64};
use crate::rfc3339;

type HmacSha256 = Hmac<Sha256>;

/// The server secret that binds challenge ids. Never printed; at least 32 bytes (mppx's
/// minimum: `openssl rand -base64 32`).
#[derive(Clone)]
pub struct ChallengeSecret(Vec<u8>);

impl ChallengeSecret {
    pub const MIN_BYTES: usize = 32;

    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self, ChallengeError> {
        let bytes = bytes.into();
        if bytes.len() < Self::MIN_BYTES {
            return Err(ChallengeError::WeakSecret);
        }
        Ok(ChallengeSecret(bytes))
    }

    fn mac(&self) -> Result<HmacSha256, ChallengeError> {
        // HMAC takes a key of any length; the error is unreachable but not unwrapped.
        HmacSha256::new_from_slice(&self.0).map_err(|_| ChallengeError::WeakSecret)
    }
}

impl std::fmt::Debug for ChallengeSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChallengeSecret(<redacted>)")
    }
}

/// Why a challenge cannot be issued, written or read. Messages quote nothing of the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChallengeError {
    #[error(
        "the challenge secret must be at least {} bytes",
        ChallengeSecret::MIN_BYTES
    )]
    WeakSecret,
    #[error("the payment request must be a JSON object")]
    RequestNotObject,
    #[error("the payment request could not be written as canonical JSON (JCS)")]
    Canonicalize,
    #[error("method must be lowercase ASCII (a-z first, then a-z, 0-9, ':', '_', '-')")]
    Method,
    #[error("intent must be ASCII letters, digits and '-'")]
    Intent,
    #[error("the expiry is out of range")]
    Expires,
    #[error("challenge id is missing or empty")]
    EmptyId,
    #[error("challenge parameter {0} is missing")]
    Missing(&'static str),
    #[error("challenge parameter {0} is not valid")]
    Invalid(&'static str),
    #[error(
        "challenge parameter {0} has a character a header quoted-string cannot carry safely \
         (control character or non-ASCII)"
    )]
    UnsafeValue(&'static str),
    #[error("the request parameter is larger than {MAX_REQUEST_PARAM_BYTES} bytes")]
    RequestTooLarge,
    #[error("not a Payment challenge")]
    NotPayment,
}

/// What a route asks for, before an expiry and an id make it a [`Challenge`]. The gateway
/// builds one per priced route (see [`super::evm::charge_params`]) and keeps it: it issues
/// challenges from it and checks credentials against it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChallengeParams {
    pub realm: String,
    pub method: String,
    pub intent: String,
    /// base64url-nopad of the JCS JSON of the method's request object, as it goes on the wire.
    pub request: String,
    /// RFC 9530 digest of the request body the credential must come with, if bound.
    pub digest: Option<String>,
    /// The route's correlation entries, sent in `opaque` (base64url-nopad of the JCS JSON of
    /// a flat string map) beside the per-challenge [`OPAQUE_NONCE`].
    pub opaque: BTreeMap<String, String>,
    pub description: Option<String>,
}

/// The `opaque` entry that makes every issued challenge unique: without it, two challenges of
/// one route issued in the same second would have the same parameters, hence the same id,
/// and could not each be used once.
pub const OPAQUE_NONCE: &str = "challengeNonce";

impl ChallengeParams {
    /// `request` must be a JSON object; it is written canonically (JCS) once, here.
    pub fn new(
        realm: &str,
        method: &str,
        intent: &str,
        request: &Value,
    ) -> Result<Self, ChallengeError> {
        quoted_string("realm", realm)?;
        check_method(method)?;
        check_intent(intent)?;
        if !request.is_object() {
            return Err(ChallengeError::RequestNotObject);
        }
        Ok(ChallengeParams {
            realm: realm.to_owned(),
            method: method.to_owned(),
            intent: intent.to_owned(),
            request: encode_canonical(request)?,
            digest: None,
            opaque: BTreeMap::new(),
            description: None,
        })
    }

    /// Binds the request body: the credential must come with a body of this digest
    /// ([`content_digest`]).
    pub fn with_digest(mut self, digest: String) -> Result<Self, ChallengeError> {
        quoted_string("digest", &digest)?;
        self.digest = Some(digest);
        Ok(self)
    }

    /// Server correlation data, echoed back unchanged and bound by the HMAC (a credential
    /// must carry these entries to pass for this route).
    pub fn with_opaque(mut self, opaque: BTreeMap<String, String>) -> Result<Self, ChallengeError> {
        if opaque.contains_key(OPAQUE_NONCE) {
            return Err(ChallengeError::Invalid("opaque"));
        }
        self.opaque = opaque;
        Ok(self)
    }

    /// Display text (not bound by the HMAC, never relied on).
    pub fn with_description(mut self, description: String) -> Result<Self, ChallengeError> {
        quoted_string("description", &description)?;
        self.description = Some(description);
        Ok(self)
    }

    /// A fresh challenge valid until `expires_at` (Unix seconds), unique (a random
    /// [`OPAQUE_NONCE`]).
    pub fn issue(
        &self,
        secret: &ChallengeSecret,
        expires_at: u64,
    ) -> Result<Challenge, ChallengeError> {
        let nonce = alloy_primitives::FixedBytes::<16>::random();
        self.issue_with_nonce(secret, expires_at, &alloy_primitives::hex::encode(nonce))
    }

    /// [`ChallengeParams::issue`] with a chosen nonce (tests, and reproducible ids).
    pub fn issue_with_nonce(
        &self,
        secret: &ChallengeSecret,
        expires_at: u64,
        nonce: &str,
    ) -> Result<Challenge, ChallengeError> {
        let mut opaque = self.opaque.clone();
        opaque.insert(OPAQUE_NONCE.to_owned(), nonce.to_owned());
        let mut challenge = Challenge {
            id: String::new(),
            realm: self.realm.clone(),
            method: self.method.clone(),
            intent: self.intent.clone(),
            request: self.request.clone(),
            description: self.description.clone(),
            digest: self.digest.clone(),
            expires: Some(rfc3339::format_seconds(expires_at).ok_or(ChallengeError::Expires)?),
            opaque: Some(encode_canonical(&opaque)?),
        };
        challenge.id = challenge.compute_id(secret)?;
        Ok(challenge)
    }
}

/// A Payment challenge, as issued in `WWW-Authenticate` and as echoed in a credential's
/// `challenge` object (same names on both; unknown fields are ignored when read).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Challenge {
    pub id: String,
    pub realm: String,
    pub method: String,
    pub intent: String,
    /// base64url-nopad of the JCS JSON of the method's request, exactly as on the wire: the
    /// HMAC binds this text, never a re-serialization of it.
    pub request: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opaque: Option<String>,
}

impl Challenge {
    /// The HMAC input: seven slots joined by `|`, absent ones empty.
    fn binding_input(&self) -> String {
        [
            self.realm.as_str(),
            self.method.as_str(),
            self.intent.as_str(),
            self.request.as_str(),
            self.expires.as_deref().unwrap_or(""),
            self.digest.as_deref().unwrap_or(""),
            self.opaque.as_deref().unwrap_or(""),
        ]
        .join("|")
    }

    /// The id `secret` gives these parameters.
    pub fn compute_id(&self, secret: &ChallengeSecret) -> Result<String, ChallengeError> {
        let mut mac = secret.mac()?;
        mac.update(self.binding_input().as_bytes());
        Ok(b64::encode(&mac.finalize().into_bytes()))
    }

    /// Whether `id` is the one `secret` gives the other parameters, compared in constant time.
    pub fn id_matches(&self, secret: &ChallengeSecret) -> bool {
        let Some(claimed) = b64::decode(&self.id) else {
            return false;
        };
        let Ok(mut mac) = secret.mac() else {
            return false;
        };
        mac.update(self.binding_input().as_bytes());
        mac.verify_slice(&claimed).is_ok()
    }

    /// `expires` in Unix seconds, if present and well-formed.
    pub fn expires_at(&self) -> Option<u64> {
        self.expires.as_deref().and_then(rfc3339::parse)
    }

    /// The decoded `request` object.
    pub fn request_json(&self) -> Result<Value, ChallengeError> {
        decode_object(&self.request)
    }

    /// The decoded `opaque` map, when present and a flat string map.
    pub fn opaque_map(&self) -> Option<BTreeMap<String, String>> {
        let value = decode_object(self.opaque.as_deref()?).ok()?;
        serde_json::from_value(value).ok()
    }

    /// The `WWW-Authenticate` value, in mppx's order: `Payment id="…", realm="…",
    /// method="…", intent="…", request="…"[, description="…"][, digest="…"][, expires="…"]
    /// [, opaque="…"]`. Every value is a quoted-string with `"` and `\` escaped; a control
    /// character (CR and LF included) or a non-ASCII character anywhere is refused, so no
    /// value can end the header or start another.
    pub fn to_header(&self) -> Result<String, ChallengeError> {
        if self.id.is_empty() {
            return Err(ChallengeError::EmptyId);
        }
        check_method(&self.method)?;
        check_intent(&self.intent)?;
        let mut parts = vec![
            format!("id={}", quoted_string("id", &self.id)?),
            format!("realm={}", quoted_string("realm", &self.realm)?),
            format!("method={}", quoted_string("method", &self.method)?),
            format!("intent={}", quoted_string("intent", &self.intent)?),
            format!("request={}", quoted_string("request", &self.request)?),
        ];
        for (name, value) in [
            ("description", &self.description),
            ("digest", &self.digest),
            ("expires", &self.expires),
            ("opaque", &self.opaque),
        ] {
            if let Some(value) = value {
                parts.push(format!("{name}={}", quoted_string(name, value)?));
            }
        }
        Ok(format!("{SCHEME} {}", parts.join(", ")))
    }

    /// A Payment challenge from its parsed auth-params (the paying side). Checks what mppx's
    /// client checks: `id` non-empty, the five required parameters present, `method` lowercase,
    /// `request` a bounded base64url JSON object, `expires` RFC 3339 when present. Unknown
    /// parameters are ignored.
    pub fn from_auth(auth: &AuthChallenge) -> Result<Self, ChallengeError> {
        if !auth.scheme.eq_ignore_ascii_case(SCHEME) {
            return Err(ChallengeError::NotPayment);
        }
        let required = |name: &'static str| {
            auth.param(name)
                .map(str::to_owned)
                .ok_or(ChallengeError::Missing(name))
        };
        let id = auth.param("id").unwrap_or_default();
        if id.is_empty() {
            return Err(ChallengeError::EmptyId);
        }
        let challenge = Challenge {
            id: id.to_owned(),
            realm: required("realm")?,
            method: required("method")?,
            intent: required("intent")?,
            request: required("request")?,
            description: auth.param("description").map(str::to_owned),
            digest: auth.param("digest").map(str::to_owned),
            expires: auth.param("expires").map(str::to_owned),
            opaque: auth.param("opaque").map(str::to_owned),
        };
        check_method(&challenge.method)?;
        check_intent(&challenge.intent)?;
        challenge.request_json()?;
        if challenge.expires.is_some() && challenge.expires_at().is_none() {
            return Err(ChallengeError::Invalid("expires"));
        }
        Ok(challenge)
    }
}

/// Every well-formed Payment challenge in a `WWW-Authenticate` value (which may hold several,
/// and other schemes). Malformed Payment challenges are left out; a value that is not valid
/// auth-param syntax at all is an error.
pub fn parse_www_authenticate(
    value: &str,
) -> Result<Vec<Result<Challenge, ChallengeError>>, super::params::ParamError> {
    Ok(super::params::parse(value)?
        .iter()
        .filter(|auth| auth.scheme.eq_ignore_ascii_case(SCHEME))
        .map(Challenge::from_auth)
        .collect())
}

/// RFC 9530 `Content-Digest` member of `body`: `sha-256=:<base64>:` (for a challenge's
/// `digest`; the spec's example shape).
pub fn content_digest(body: &[u8]) -> String {
    use base64::Engine;
    let hash = Sha256::digest(body);
    format!(
        "sha-256=:{}:",
        base64::engine::general_purpose::STANDARD.encode(hash)
    )
}

/// base64url-nopad of the JCS JSON of `value`.
pub(crate) fn encode_canonical<T: Serialize>(value: &T) -> Result<String, ChallengeError> {
    let json = serde_json_canonicalizer::to_vec(value).map_err(|_| ChallengeError::Canonicalize)?;
    Ok(b64::encode(&json))
}

/// A bounded base64url parameter holding a JSON object.
pub(crate) fn decode_object(text: &str) -> Result<Value, ChallengeError> {
    if text.len() > MAX_REQUEST_PARAM_BYTES {
        return Err(ChallengeError::RequestTooLarge);
    }
    let bytes = b64::decode(text).ok_or(ChallengeError::Invalid("request"))?;
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(value) if value.is_object() => Ok(value),
        _ => Err(ChallengeError::Invalid("request")),
    }
}

/// mppx's method pattern, `^[a-z][a-z0-9:_-]*$` (the spec's `1*LOWERALPHA`, widened).
fn check_method(method: &str) -> Result<(), ChallengeError> {
    let mut bytes = method.bytes();
    let first_ok = bytes.next().is_some_and(|b| b.is_ascii_lowercase());
    let rest_ok = bytes.all(|b| {
        b.is_ascii_lowercase() || b.is_ascii_digit() || b == b':' || b == b'_' || b == b'-'
    });
    if first_ok && rest_ok {
        Ok(())
    } else {
        Err(ChallengeError::Method)
    }
}

/// `intent = 1*( ALPHA / DIGIT / "-" )`.
fn check_intent(intent: &str) -> Result<(), ChallengeError> {
    if !intent.is_empty()
        && intent
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    {
        Ok(())
    } else {
        Err(ChallengeError::Intent)
    }
}

/// `value` as an RFC 9110 quoted-string: `"` and `\` escaped, visible ASCII and space passed,
/// anything else (CR, LF, other controls, DEL, non-ASCII) refused.
pub fn quoted_string(name: &'static str, value: &str) -> Result<String, ChallengeError> {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => return Err(ChallengeError::UnsafeValue(name)),
        }
    }
    out.push('"');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn secret(text: &str) -> ChallengeSecret {
        // The vectors' secrets are shorter than we allow for real use.
        ChallengeSecret(text.as_bytes().to_vec())
    }

    fn vector_challenge(
        realm: &str,
        method: &str,
        intent: &str,
        request: Value,
        expires: Option<&str>,
        digest: Option<&str>,
        opaque: Option<Value>,
    ) -> Result<Challenge, ChallengeError> {
        Ok(Challenge {
            id: String::new(),
            realm: realm.into(),
            method: method.into(),
            intent: intent.into(),
            request: encode_canonical(&request)?,
            description: None,
            digest: digest.map(str::to_owned),
            expires: expires.map(str::to_owned),
            opaque: opaque.map(|o| encode_canonical(&o)).transpose()?,
        })
    }

    /// mppx's HMAC test vectors (src/Challenge.test.ts, secret "test-vector-secret"): our ids
    /// must be theirs, byte for byte.
    #[test]
    fn matches_mppx_hmac_vectors() -> TestResult {
        let key = secret("test-vector-secret");
        let amount = || json!({"amount": "1000000"});
        let digest = "sha-256=X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE";
        let expires = "2025-01-06T12:00:00Z";
        let cases = [
            (
                vector_challenge(
                    "api.example.com",
                    "tempo",
                    "charge",
                    amount(),
                    None,
                    None,
                    None,
                )?,
                "X6v1eo7fJ76gAxqY0xN9Jd__4lUyDDYmriryOM-5FO4",
            ),
            (
                vector_challenge(
                    "api.example.com",
                    "tempo",
                    "charge",
                    amount(),
                    Some(expires),
                    None,
                    None,
                )?,
                "ChPX33RkKSZoSUyZcu8ai4hhkvjZJFkZVnvWs5s0iXI",
            ),
            (
                vector_challenge(
                    "api.example.com",
                    "tempo",
                    "charge",
                    amount(),
                    None,
                    Some(digest),
                    None,
                )?,
                "JHB7EFsPVb-xsYCo8LHcOzeX1gfXWVoUSzQsZhKAfKM",
            ),
            (
                vector_challenge(
                    "api.example.com",
                    "tempo",
                    "charge",
                    amount(),
                    Some(expires),
                    Some(digest),
                    None,
                )?,
                "m39jbWWCIfmfJZSwCfvKFFtBl0Qwf9X4nOmDb21peLA",
            ),
            (
                vector_challenge(
                    "api.example.com",
                    "tempo",
                    "charge",
                    amount(),
                    None,
                    None,
                    Some(json!({"pi": "pi_3abc123XYZ"})),
                )?,
                "rxzKZ2qjXvinqCH96RORTZEPs1KXsA-0AUjrCAPFOWc",
            ),
            (
                vector_challenge(
                    "api.example.com",
                    "tempo",
                    "charge",
                    amount(),
                    Some(expires),
                    None,
                    Some(json!({"pi": "pi_3abc123XYZ"})),
                )?,
                "KAfoMrA4fnzS1DPWN_cUv_b3_yHxCizdp6OhH7gluMY",
            ),
            (
                vector_challenge(
                    "api.example.com",
                    "tempo",
                    "charge",
                    json!({"recipient": "0xabcd", "currency": "0x1234", "amount": "1000000"}),
                    None,
                    None,
                    None,
                )?,
                "_H5TOnnlW0zduQ5OhQ3EyLVze_TqxLDPda2CGZPZxOc",
            ),
            (
                vector_challenge(
                    "api.example.com",
                    "tempo",
                    "charge",
                    json!({"methodDetails": {"chainId": 42431}, "currency": "0x1234", "amount": "1000000"}),
                    None,
                    None,
                    None,
                )?,
                "TqujwpuDDg_zsWGINAd5XObO2rRe6uYufpqvtDmr6N8",
            ),
            (
                vector_challenge(
                    "api.example.com",
                    "tempo",
                    "charge",
                    json!({}),
                    None,
                    None,
                    None,
                )?,
                "yLN7yChAejW9WNmb54HpJIWpdb1WWXeA3_aCx4dxmkU",
            ),
            (
                vector_challenge(
                    "api.example.com",
                    "tempo",
                    "charge",
                    amount(),
                    None,
                    None,
                    Some(json!({})),
                )?,
                "vb4IyH-0LdJ3s7L0QAw8jIzcZkyxksPhIvEfmHmzA9k",
            ),
            (
                vector_challenge(
                    "payments.other.com",
                    "tempo",
                    "charge",
                    amount(),
                    None,
                    None,
                    None,
                )?,
                "3F5bOo2a9RUihdwKk4hGRvBvzQmVPBMDvW0YM-8GD00",
            ),
            (
                vector_challenge(
                    "api.example.com",
                    "stripe",
                    "charge",
                    amount(),
                    None,
                    None,
                    None,
                )?,
                "o0ra2sd7HcB4Ph0Vns69gRDUhSj5WNOnUopcDqKPLz4",
            ),
            (
                vector_challenge(
                    "api.example.com",
                    "tempo",
                    "session",
                    amount(),
                    None,
                    None,
                    None,
                )?,
                "aAY7_IEDzsznNYplhOSE8cERQxvjFcT4Lcn-7FHjLVE",
            ),
            (
                vector_challenge(
                    "api.example.com",
                    "tempo",
                    "charge",
                    amount(),
                    None,
                    None,
                    Some(json!({"pi": "pi_3abc123XYZ", "deposit": "dep_456"})),
                )?,
                "aKskU8sadR5ZuFbUCsIwhO-ENxuVpTw17FdwHEXsJDk",
            ),
        ];
        for (mut challenge, expected) in cases {
            assert_eq!(challenge.compute_id(&key)?, expected);
            challenge.id = expected.to_owned();
            assert!(challenge.id_matches(&key));
            // The description is display only: not bound.
            challenge.description = Some("Test payment".into());
            assert!(challenge.id_matches(&key));
            assert!(!challenge.id_matches(&secret("another-secret")));
        }
        Ok(())
    }

    /// The spec's example request: JCS orders the keys, base64url drops the padding.
    #[test]
    fn request_is_jcs_base64url_without_padding() -> TestResult {
        let request = json!({"recipient": "acct_123", "currency": "USD", "amount": "1000"});
        let params = ChallengeParams::new("api.example.com", "example", "charge", &request)?;
        assert_eq!(
            params.request,
            "eyJhbW91bnQiOiIxMDAwIiwiY3VycmVuY3kiOiJVU0QiLCJyZWNpcGllbnQiOiJhY2N0XzEyMyJ9"
        );
        let nested = ChallengeParams::new(
            "r",
            "evm",
            "charge",
            &json!({"b": {"z": 1, "a": [3, "x"]}, "a": 1.5e21}),
        )?;
        let decoded = b64::decode(&nested.request).unwrap_or_default();
        assert_eq!(
            String::from_utf8(decoded)?,
            r#"{"a":1.5e+21,"b":{"a":[3,"x"],"z":1}}"#
        );
        assert!(!nested.request.contains('='));
        assert_eq!(
            ChallengeParams::new("r", "evm", "charge", &json!([1])),
            Err(ChallengeError::RequestNotObject)
        );
        assert_eq!(
            ChallengeParams::new("r", "EVM", "charge", &json!({})),
            Err(ChallengeError::Method)
        );
        assert_eq!(
            ChallengeParams::new("r", "evm", "char ge", &json!({})),
            Err(ChallengeError::Intent)
        );
        Ok(())
    }

    #[test]
    fn issues_bound_expiring_challenges() -> TestResult {
        let key = ChallengeSecret::new([7u8; 32])?;
        let params =
            ChallengeParams::new("api.example.com", "evm", "charge", &json!({"amount": "1"}))?
                .with_digest(content_digest(b"{\"hello\":1}"))?
                .with_opaque(BTreeMap::from([("route".to_owned(), "echo".to_owned())]))?
                .with_description("One echo".into())?;
        let challenge = params.issue(&key, 1_736_942_700)?;
        assert_eq!(challenge.expires.as_deref(), Some("2025-01-15T12:05:00Z"));
        assert_eq!(challenge.expires_at(), Some(1_736_942_700));
        assert!(challenge.id_matches(&key));
        assert_eq!(challenge.id.len(), 43);
        let mut later = challenge.clone();
        later.expires = Some("2025-01-15T12:06:00Z".into());
        assert!(!later.id_matches(&key));
        assert_eq!(
            challenge.opaque_map().map(|m| m.get("route").cloned()),
            Some(Some("echo".to_owned()))
        );
        // Issued twice in the same second: still two challenges.
        assert_ne!(params.issue(&key, 1_736_942_700)?.id, challenge.id);
        let fixed = params.issue_with_nonce(&key, 1_736_942_700, "00")?;
        assert_eq!(params.issue_with_nonce(&key, 1_736_942_700, "00")?, fixed);
        assert!(
            ChallengeParams::new("r", "evm", "charge", &json!({}))?
                .with_opaque(BTreeMap::from([(OPAQUE_NONCE.to_owned(), "x".to_owned())]))
                .is_err()
        );
        let mut unbound_digest = challenge.clone();
        unbound_digest.digest = None;
        assert!(!unbound_digest.id_matches(&key));
        let mut garbage = challenge.clone();
        garbage.id = "not base64!".into();
        assert!(!garbage.id_matches(&key));
        garbage.id = String::new();
        assert!(!garbage.id_matches(&key));
        assert_eq!(
            content_digest(b""),
            "sha-256=:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=:"
        );
        assert_eq!(
            ChallengeSecret::new(vec![1u8; 31]).map(|_| ()),
            Err(ChallengeError::WeakSecret)
        );
        assert_eq!(format!("{key:?}"), "ChallengeSecret(<redacted>)");
        Ok(())
    }

    #[test]
    fn header_round_trips_through_the_parser() -> TestResult {
        let key = ChallengeSecret::new([9u8; 32])?;
        let challenge =
            ChallengeParams::new("api.example.com", "evm", "charge", &json!({"amount": "1"}))?
                .with_description(r#"Say "hi" \ bye"#.into())?
                .issue(&key, 1_736_942_700)?;
        let header = challenge.to_header()?;
        assert!(header.starts_with(&format!(
            "Payment id=\"{}\", realm=\"api.example.com\", method=\"evm\", intent=\"charge\", request=\"",
            challenge.id
        )));
        assert!(header.contains(r#"description="Say \"hi\" \\ bye""#));
        assert!(header.contains(r#", expires="2025-01-15T12:05:00Z", opaque=""#));
        let parsed = parse_www_authenticate(&header)?;
        assert_eq!(parsed, vec![Ok(challenge.clone())]);
        Ok(())
    }

    /// No value can break out of its quoted-string: CR/LF and every other control character,
    /// DEL and non-ASCII are refused wherever they appear; quotes and backslashes are escaped.
    #[test]
    fn header_refuses_injection() -> TestResult {
        let key = ChallengeSecret::new([9u8; 32])?;
        let good = ChallengeParams::new("api.example.com", "evm", "charge", &json!({}))?
            .issue(&key, 1_736_942_700)?;
        let injections = [
            "x\r\nSet-Cookie: a=b",
            "x\nX-Evil: 1",
            "x\r",
            "a\u{0}b",
            "tab\there",
            "del\u{7f}",
            "caf\u{e9}",
            "\u{2028}",
            "emoji \u{1f600}",
        ];
        for bad in injections {
            for field in [
                "id",
                "realm",
                "request",
                "description",
                "digest",
                "expires",
                "opaque",
            ] {
                let mut challenge = good.clone();
                match field {
                    "id" => challenge.id = bad.into(),
                    "realm" => challenge.realm = bad.into(),
                    "request" => challenge.request = bad.into(),
                    "description" => challenge.description = Some(bad.into()),
                    "digest" => challenge.digest = Some(bad.into()),
                    "expires" => challenge.expires = Some(bad.into()),
                    _ => challenge.opaque = Some(bad.into()),
                }
                assert_eq!(
                    challenge.to_header(),
                    Err(ChallengeError::UnsafeValue(field)),
                    "{field} {bad:?}"
                );
            }
            assert!(ChallengeParams::new(bad, "evm", "charge", &json!({})).is_err());
            let params = ChallengeParams::new("r", "evm", "charge", &json!({}))?;
            assert!(params.clone().with_description(bad.into()).is_err());
            assert!(params.with_digest(bad.into()).is_err());
        }
        let mut challenge = good.clone();
        challenge.method = "evm\r\nx".into();
        assert_eq!(challenge.to_header(), Err(ChallengeError::Method));
        challenge = good.clone();
        challenge.intent = "charge\"".into();
        assert_eq!(challenge.to_header(), Err(ChallengeError::Intent));
        challenge = good.clone();
        challenge.id = String::new();
        assert_eq!(challenge.to_header(), Err(ChallengeError::EmptyId));

        // Quotes and backslashes are escaped, so the value ends where it should.
        let mut quoted = good.clone();
        quoted.realm = r#"a", evil="1"#.into();
        let header = quoted.to_header()?;
        assert!(header.contains(r#"realm="a\", evil=\"1""#));
        let parsed = parse_www_authenticate(&header)?;
        let Some(Ok(back)) = parsed.first() else {
            return Err("the challenge parses back".into());
        };
        assert_eq!(back.realm, quoted.realm);
        assert_eq!(quoted_string("x", r"\")?, r#""\\""#);
        Ok(())
    }
}
