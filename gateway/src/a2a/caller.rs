//! Who is calling: the card declares two security schemes, either of which identifies the
//! caller: an HTTP bearer token (`Authorization: Bearer <token>`, 20 to 256 characters) and
//! the same kind of token as an API key in `Task-Access-Token`, the Lucid profile's header. The
//! second exists for callers whose `Authorization` header carries something else: an MPP
//! payment (`Authorization: Payment ...`). The token is a capability: its SHA-256 is the owner
//! of the tasks the caller creates, and another caller's task reads as not found. The token
//! itself is never stored, logged or echoed.

use axum::http::{HeaderMap, header};
use protocol::token::{AccessToken, OwnerHash};

use super::error::A2aError;

/// The security schemes' names in the card.
pub const SCHEME: &str = "bearer";
pub const API_KEY_SCHEME: &str = "taskAccessToken";

/// The owner the request's bearer token stands for.
pub fn owner(headers: &HeaderMap) -> Result<OwnerHash, A2aError> {
    token(headers).map(|token| token.owner_hash())
}

/// The request's token: `Authorization: Bearer` (which decides, valid or not), else
/// `Task-Access-Token`.
pub fn token(headers: &HeaderMap) -> Result<AccessToken, A2aError> {
    let authorization = match headers.get(header::AUTHORIZATION) {
        None => None,
        Some(value) => {
            let text = value
                .to_str()
                .map_err(|_| A2aError::unauthenticated("Authorization is not text"))?
                .trim();
            let (scheme, credential) = text.split_once(' ').unwrap_or((text, ""));
            if scheme.eq_ignore_ascii_case("bearer") {
                return AccessToken::parse(credential.trim()).map_err(|_| {
                    A2aError::unauthenticated("The bearer token must contain 20 to 256 characters")
                });
            }
            Some(scheme)
        }
    };
    if let Some(value) = headers.get(crate::http::extract::TASK_ACCESS_TOKEN) {
        let text = value
            .to_str()
            .map_err(|_| A2aError::unauthenticated("Task-Access-Token is not text"))?;
        return AccessToken::parse(text.trim()).map_err(|_| {
            A2aError::unauthenticated("Task-Access-Token must contain 20 to 256 characters")
        });
    }
    Err(A2aError::unauthenticated(match authorization {
        Some(_) => "Authorization must use the Bearer scheme, or identify with Task-Access-Token",
        None => {
            "This agent requires Authorization: Bearer <token> or Task-Access-Token (20 to 256 characters)"
        }
    }))
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
    fn a_bearer_token_is_its_owner() -> Result<(), A2aError> {
        let token = "a-token-of-enough-length-1";
        let owner = owner(&with(&format!("Bearer {token}")))?;
        let same = owner_of_lowercase(token)?;
        assert_eq!(owner, same);
        let other = super::owner(&with("Bearer another-token-of-enough-length"))?;
        assert_ne!(owner, other);
        Ok(())
    }

    fn owner_of_lowercase(token: &str) -> Result<OwnerHash, A2aError> {
        owner(&with(&format!("bearer {token}")))
    }

    #[test]
    fn task_access_token_identifies_a_caller_whose_authorization_pays() -> Result<(), A2aError> {
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
            let refused = owner(&headers);
            assert!(refused.is_err_and(|err| err.unauthenticated));
        }
    }
}
