//! Who is calling: the card declares one security scheme, an HTTP bearer token
//! (`Authorization: Bearer <token>`, 20 to 256 characters). The token is a capability exactly
//! like the Lucid profile's `Task-Access-Token`: its SHA-256 is the owner of the tasks the
//! caller creates, and another caller's task reads as not found. The token itself is never
//! stored, logged or echoed.

use axum::http::{HeaderMap, header};
use shared::token::{AccessToken, OwnerHash};

use super::error::A2aError;

/// The security scheme's name in the card.
pub const SCHEME: &str = "bearer";

/// The owner the request's bearer token stands for.
pub fn owner(headers: &HeaderMap) -> Result<OwnerHash, A2aError> {
    token(headers).map(|token| token.owner_hash())
}

/// The request's bearer token.
pub fn token(headers: &HeaderMap) -> Result<AccessToken, A2aError> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Err(A2aError::unauthenticated(
            "This agent requires Authorization: Bearer <token> (20 to 256 characters)",
        ));
    };
    let text = value
        .to_str()
        .map_err(|_| A2aError::unauthenticated("Authorization is not text"))?;
    let Some((scheme, credential)) = text.trim().split_once(' ') else {
        return Err(A2aError::unauthenticated(
            "Authorization must be Bearer <token>",
        ));
    };
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(A2aError::unauthenticated(
            "Authorization must use the Bearer scheme",
        ));
    }
    AccessToken::parse(credential.trim()).map_err(|_| {
        A2aError::unauthenticated("The bearer token must contain 20 to 256 characters")
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
