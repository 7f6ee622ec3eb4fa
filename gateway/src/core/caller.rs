//! Who is calling: the card declares two security schemes, either of which identifies the
//! caller: an HTTP bearer token (`Authorization: Bearer <token>`, 20 to 256 characters) and
//! the same kind of token as an API key in `Task-Access-Token`, the Lucid profile's header. The
//! second exists for callers whose `Authorization` header carries something else: an MPP
//! payment (`Authorization: Payment ...`). The token is a capability: its SHA-256 is the owner
//! of the tasks the caller creates, and another caller's task reads as not found. The token
//! itself is never stored, logged or echoed.
//!
//! Protocol-neutral: the A2A adapter answers a [`CallerError`] as the spec's unauthenticated
//! error, and the rate limits key a request by its owner.

use axum::http::{HeaderMap, header};
use protocol::token::{AccessToken, OwnerHash};

/// Why a request names no caller (the messages are the A2A bindings' answers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CallerError {
    #[error("Authorization is not text")]
    AuthorizationNotText,
    #[error("The bearer token must contain 20 to 256 characters")]
    BearerLength,
    #[error("Task-Access-Token is not text")]
    TaskAccessTokenNotText,
    #[error("Task-Access-Token must contain 20 to 256 characters")]
    TaskAccessTokenLength,
    #[error("Authorization must use the Bearer scheme, or identify with Task-Access-Token")]
    OtherScheme,
    #[error(
        "This agent requires Authorization: Bearer <token> or Task-Access-Token (20 to 256 characters)"
    )]
    Missing,
}

/// The owner the request's bearer token stands for.
pub fn owner(headers: &HeaderMap) -> Result<OwnerHash, CallerError> {
    token(headers).map(|token| token.owner_hash())
}

/// The request's token: `Authorization: Bearer` (which decides, valid or not), else
/// `Task-Access-Token`.
pub fn token(headers: &HeaderMap) -> Result<AccessToken, CallerError> {
    let authorization = match headers.get(header::AUTHORIZATION) {
        None => None,
        Some(value) => {
            let text = value
                .to_str()
                .map_err(|_| CallerError::AuthorizationNotText)?
                .trim();
            let (scheme, credential) = text.split_once(' ').unwrap_or((text, ""));
            if scheme.eq_ignore_ascii_case("bearer") {
                return AccessToken::parse(credential.trim())
                    .map_err(|_| CallerError::BearerLength);
            }
            Some(scheme)
        }
    };
    if let Some(value) = headers.get(crate::http::extract::TASK_ACCESS_TOKEN) {
        let text = value
            .to_str()
            .map_err(|_| CallerError::TaskAccessTokenNotText)?;
        return AccessToken::parse(text.trim()).map_err(|_| CallerError::TaskAccessTokenLength);
    }
    Err(match authorization {
        Some(_) => CallerError::OtherScheme,
        None => CallerError::Missing,
    })
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn with(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(header::AUTHORIZATION, value);
        }
        headers
    }

    #[test]
    fn a_bearer_token_is_its_owner() -> Result<(), CallerError> {
        let token = "a-token-of-enough-length-1";
        let owner = owner(&with(&format!("Bearer {token}")))?;
        let same = owner_of_lowercase(token)?;
        assert_eq!(owner, same);
        let other = super::owner(&with("Bearer another-token-of-enough-length"))?;
        assert_ne!(owner, other);
        Ok(())
    }

    fn owner_of_lowercase(token: &str) -> Result<OwnerHash, CallerError> {
        owner(&with(&format!("bearer {token}")))
    }

    #[test]
    fn task_access_token_identifies_a_caller_whose_authorization_pays() -> Result<(), CallerError> {
        let token = "a-token-of-enough-length-2";
        let mut headers = with("Payment eyJjaGFsbGVuZ2UiOnt9fQ");
        headers.insert(
            crate::http::extract::TASK_ACCESS_TOKEN,
            HeaderValue::from_static("a-token-of-enough-length-2"),
        );
        assert_eq!(owner(&headers)?, owner(&with(&format!("Bearer {token}")))?);
        Ok(())
    }

    #[test]
    fn missing_short_or_other_schemes_are_unauthenticated() {
        for headers in [
            HeaderMap::new(),
            with("Bearer short"),
            with("Basic dXNlcjpwYXNzd29yZA=="),
            with("Bearer"),
        ] {
            assert!(owner(&headers).is_err());
        }
    }
}
