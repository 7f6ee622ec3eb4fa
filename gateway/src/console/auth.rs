//! Who may read the console: the holder of the operator token.
//!
//! The token is typed once into the login form (a POST body, never a URL) and traded for a
//! session cookie: `<expiry ms>.<HMAC-SHA256 of the expiry>`, keyed by a key derived from the
//! token, `HttpOnly`, `SameSite=Strict`, scoped to the console's path. Any gateway configured
//! with the same token accepts it (no session state), and changing the token ends every
//! session. Scripts may send `Authorization: Bearer <token>` to the API instead.

use std::time::Duration;

use axum::http::HeaderMap;
use axum::http::header::{AUTHORIZATION, COOKIE};
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::GatewayConfig;

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
    #[error("the operator token must be at least {MIN_TOKEN_BYTES} bytes")]
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

    /// A session cookie value valid until `expires_ms`.
    pub fn session(&self, expires_ms: u64) -> String {
        let mut mac = self.mac();
        mac.update(expires_ms.to_string().as_bytes());
        format!("{expires_ms}.{}", hex::encode(mac.finalize().into_bytes()))
    }

    /// Whether `value` is a session this key signed that has not expired at `now_ms`.
    pub fn is_session(&self, value: &str, now_ms: u64) -> bool {
        let Some((expiry, signature)) = value.split_once('.') else {
            return false;
        };
        let Ok(expires_ms) = expiry.parse::<u64>() else {
            return false;
        };
        let Ok(signature) = hex::decode(signature) else {
            return false;
        };
        let mut mac = self.mac();
        mac.update(expiry.as_bytes());
        mac.verify_slice(&signature).is_ok() && now_ms < expires_ms
    }

    /// Whether the request carries a live session cookie or the token as a bearer credential.
    pub fn authorizes(&self, headers: &HeaderMap, now_ms: u64) -> bool {
        let bearer = headers
            .get(AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "));
        if let Some(token) = bearer {
            return self.is_token(token);
        }
        cookies(headers)
            .filter(|(name, _)| *name == COOKIE_NAME)
            .any(|(_, value)| self.is_session(value, now_ms))
    }
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
    fn a_session_is_signed_and_expires() {
        let key = OperatorKey::new(TOKEN);
        let session = key.session(2_000);
        assert!(key.is_session(&session, 1_999));
        assert!(!key.is_session(&session, 2_000));
        let forged = session.replacen("2000", "9999", 1);
        assert!(!key.is_session(&forged, 1_000));
        assert!(!OperatorKey::new("another-token-of-enough-length!").is_session(&session, 1_000));
        for junk in ["", ".", "x.y", "2000.zz", "2000"] {
            assert!(!key.is_session(junk, 0), "{junk}");
        }
    }

    #[test]
    fn a_request_is_authorized_by_cookie_or_bearer()
    -> Result<(), axum::http::header::InvalidHeaderValue> {
        let key = OperatorKey::new(TOKEN);
        let mut headers = HeaderMap::new();
        assert!(!key.authorizes(&headers, 0));
        let cookie = format!("other=1; {COOKIE_NAME}={}", key.session(10));
        headers.insert(COOKIE, HeaderValue::from_str(&cookie)?);
        assert!(key.authorizes(&headers, 5));
        let mut bearer = HeaderMap::new();
        bearer.insert(
            AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {TOKEN}"))?,
        );
        assert!(key.authorizes(&bearer, 0));
        bearer.insert(AUTHORIZATION, HeaderValue::from_static("Bearer nope"));
        assert!(!key.authorizes(&bearer, 0));
        Ok(())
    }
}
