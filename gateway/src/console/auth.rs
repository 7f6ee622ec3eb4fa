//! Who may read the console: the holder of the operator token.
//!
//! The token is typed once into the login form (a POST body, never a URL) and traded for a
//! session: a random secret (256 bits, minus UUID version bits: 244) in a cookie
//! `<secret>.<HMAC-SHA256 of the secret>`, keyed by a key derived from the token, `HttpOnly`,
//! `SameSite=Strict`, scoped to the console's path. The server keeps a record of each session
//! (its secret's digest and the fingerprint of the key it was made with: never the secret or
//! the token) where every gateway sees it ([`store::stats::sessions`]): signing out deletes the
//! record, and a gateway started with another token deletes those of the old one, so a copied
//! cookie is dead on every gateway from then on. The signature lets a gateway refuse a made-up
//! cookie without asking the store. Scripts may send `Authorization: Bearer <token>` to the
//! API instead.

use std::time::Duration;

use axum::http::HeaderMap;
use axum::http::header::{AUTHORIZATION, COOKIE};
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::core::config::GatewayConfig;

/// The session cookie's name.
pub const COOKIE_NAME: &str = "tc_console";
/// How long a session lasts.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// The shortest operator token accepted: long enough that guessing it online is hopeless,
/// which is why failed logins need no lockout (one that an attacker could turn on the
/// operator).
pub const MIN_TOKEN_BYTES: usize = 24;

type HmacSha256 = Hmac<Sha256>;

#[derive(Debug, thiserror::Error)]
pub enum OperatorTokenError {
    #[error("--operator-token-file (OPERATOR_TOKEN_FILE) {0}: {1}")]
    File(String, std::io::Error),
    #[error(
        "the operator token must be at least {MIN_TOKEN_BYTES} bytes (make one with `openssl rand -hex 32`)"
    )]
    Short,
}

/// The configured operator token, kept only as digests: the token itself is not held after
/// start-up, so no `Debug` print or crash dump can show it.
#[derive(Clone)]
pub struct OperatorKey {
    /// SHA-256 of the token, compared in constant time with a presented token's.
    token_digest: [u8; 32],
    /// The session cookies' HMAC key.
    session_key: [u8; 32],
}

impl std::fmt::Debug for OperatorKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OperatorKey(<redacted>)")
    }
}

impl OperatorKey {
    /// The key the settings name, if any (the file wins over the variable).
    pub fn from_config(config: &GatewayConfig) -> Result<Option<OperatorKey>, OperatorTokenError> {
        let token = match (&config.operator_token_file, &config.operator_token) {
            (Some(path), _) => std::fs::read(path)
                .map_err(|err| OperatorTokenError::File(path.display().to_string(), err))?,
            (None, Some(secret)) => secret.expose().as_bytes().to_vec(),
            (None, None) => return Ok(None),
        };
        let token = String::from_utf8_lossy(&token).trim().to_owned();
        if token.len() < MIN_TOKEN_BYTES {
            return Err(OperatorTokenError::Short);
        }
        Ok(Some(OperatorKey::new(&token)))
    }

    pub fn new(token: &str) -> OperatorKey {
        let token_digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut session = Sha256::new();
        session.update(b"taskcluster console session\0");
        session.update(token.as_bytes());
        OperatorKey {
            token_digest,
            session_key: session.finalize().into(),
        }
    }

    /// Whether `presented` is the operator token (constant time in its content).
    pub fn is_token(&self, presented: &str) -> bool {
        let digest: [u8; 32] = Sha256::digest(presented.trim().as_bytes()).into();
        bool::from(digest.ct_eq(&self.token_digest))
    }

    fn mac(&self) -> HmacSha256 {
        // An HMAC takes a key of any length: this cannot fail.
        <HmacSha256 as KeyInit>::new_from_slice(&self.session_key)
            .unwrap_or_else(|_| unreachable!("HMAC accepts 32-byte keys"))
    }

    fn sign(&self, purpose: &[u8], data: &[u8]) -> HmacSha256 {
        let mut mac = self.mac();
        mac.update(purpose);
        mac.update(data);
        mac
    }

    /// The fingerprint of this key that session records carry: it tells sessions of another
    /// token apart, and says nothing of the token.
    pub fn key_id(&self) -> String {
        let mut id = Sha256::new();
        id.update(b"taskcluster console key id\0");
        id.update(self.session_key);
        hex::encode(&id.finalize()[..16])
    }

    /// A new session: the cookie's value and the id the store records it under.
    pub fn new_session(&self) -> (String, String) {
        // Two v4 UUIDs: 244 bits from the operating system's random source.
        let mut secret = [0u8; 32];
        secret[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        secret[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        let secret = hex::encode(secret);
        let signature = self.sign(b"session\0", secret.as_bytes()).finalize();
        let cookie = format!("{secret}.{}", hex::encode(signature.into_bytes()));
        (cookie, session_id(&secret))
    }

    /// The session id of a cookie value this key signed, `None` for anything else.
    pub fn session_id(&self, value: &str) -> Option<String> {
        let (secret, signature) = value.split_once('.')?;
        if secret.len() != 64 || !secret.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let signature = hex::decode(signature).ok()?;
        self.sign(b"session\0", secret.as_bytes())
            .verify_slice(&signature)
            .ok()?;
        Some(session_id(secret))
    }

    /// The sign-out form's token of session `id`: only a page served to that session holds
    /// it, so another site cannot make the operator's browser sign out.
    pub fn csrf(&self, id: &str) -> String {
        hex::encode(self.sign(b"csrf\0", id.as_bytes()).finalize().into_bytes())
    }

    /// Whether `presented` is session `id`'s sign-out token (constant time).
    pub fn is_csrf(&self, id: &str, presented: &str) -> bool {
        let Ok(presented) = hex::decode(presented) else {
            return false;
        };
        self.sign(b"csrf\0", id.as_bytes())
            .verify_slice(&presented)
            .is_ok()
    }

    /// `Some(true)` for the operator token as a bearer credential, `Some(false)` for another
    /// bearer, `None` without one.
    pub fn bearer(&self, headers: &HeaderMap) -> Option<bool> {
        headers
            .get(AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "))
            .map(|token| self.is_token(token))
    }

    /// The ids of the session cookies this key signed that the request carries (their records
    /// still have to be found in the store).
    pub fn session_ids(&self, headers: &HeaderMap) -> Vec<String> {
        cookies(headers)
            .filter(|(name, _)| *name == COOKIE_NAME)
            .filter_map(|(_, value)| self.session_id(value))
            .collect()
    }
}

/// The id of a session secret: its digest, so that the store never holds a live credential.
fn session_id(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// The `name=value` pairs of every `Cookie` header.
fn cookies(headers: &HeaderMap) -> impl Iterator<Item = (&str, &str)> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|line| line.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
}

/// The `Set-Cookie` value of a new session (or, with `None`, of a logout), scoped to `path`.
pub fn set_cookie(value: Option<&str>, path: &str, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    match value {
        Some(value) => format!(
            "{COOKIE_NAME}={value}; Path={path}; Max-Age={}; HttpOnly; SameSite=Strict{secure}",
            SESSION_TTL.as_secs()
        ),
        None => {
            format!("{COOKIE_NAME}=; Path={path}; Max-Age=0; HttpOnly; SameSite=Strict{secure}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    const TOKEN: &str = "an-operator-token-of-enough-length";

    #[test]
    fn the_token_and_nothing_else_matches() {
        let key = OperatorKey::new(TOKEN);
        assert!(key.is_token(TOKEN));
        assert!(key.is_token(&format!(" {TOKEN}\n")));
        assert!(!key.is_token("an-operator-token-of-enough-lengtH"));
        assert!(!key.is_token(""));
    }

    #[test]
    fn a_session_is_signed_and_bound_to_the_key() {
        let key = OperatorKey::new(TOKEN);
        let (cookie, id) = key.new_session();
        assert_eq!(key.session_id(&cookie).as_deref(), Some(id.as_str()));
        assert!(
            !cookie.contains(&id),
            "the cookie holds the secret, not its digest"
        );
        let (other, other_id) = key.new_session();
        assert_ne!(id, other_id);
        assert_ne!(cookie, other);
        let forged = format!(
            "{}{}",
            &cookie[..63],
            if cookie.as_bytes()[63] == b'0' {
                '1'
            } else {
                '0'
            }
        );
        let forged = format!("{forged}{}", &cookie[64..]);
        assert_eq!(key.session_id(&forged), None);
        let rotated = OperatorKey::new("another-token-of-enough-length!");
        assert_eq!(rotated.session_id(&cookie), None);
        assert_ne!(rotated.key_id(), key.key_id());
        for junk in ["", ".", "x.y", "2000.zz", "2000"] {
            assert_eq!(key.session_id(junk), None, "{junk}");
        }
    }

    #[test]
    fn the_sign_out_token_is_the_sessions_own() {
        let key = OperatorKey::new(TOKEN);
        let (_, id) = key.new_session();
        let (_, other) = key.new_session();
        let csrf = key.csrf(&id);
        assert!(key.is_csrf(&id, &csrf));
        assert!(!key.is_csrf(&other, &csrf));
        assert!(!key.is_csrf(&id, ""));
        assert!(!key.is_csrf(&id, "zz"));
        assert!(!OperatorKey::new("another-token-of-enough-length!").is_csrf(&id, &csrf));
    }

    #[test]
    fn a_request_names_its_sessions_and_its_bearer()
    -> Result<(), axum::http::header::InvalidHeaderValue> {
        let key = OperatorKey::new(TOKEN);
        let mut headers = HeaderMap::new();
        assert!(key.session_ids(&headers).is_empty());
        assert_eq!(key.bearer(&headers), None);
        let (cookie, id) = key.new_session();
        let cookie = format!("other=1; {COOKIE_NAME}=junk; {COOKIE_NAME}={cookie}");
        headers.insert(COOKIE, HeaderValue::from_str(&cookie)?);
        assert_eq!(key.session_ids(&headers), vec![id]);
        let mut bearer = HeaderMap::new();
        bearer.insert(
            AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {TOKEN}"))?,
        );
        assert_eq!(key.bearer(&bearer), Some(true));
        bearer.insert(AUTHORIZATION, HeaderValue::from_static("Bearer nope"));
        assert_eq!(key.bearer(&bearer), Some(false));
        Ok(())
    }
}
