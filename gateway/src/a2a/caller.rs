//! Who is calling, as the A2A bindings answer it: the card's two security schemes (an HTTP
//! bearer token, and the same kind of token as an API key in `Task-Access-Token`), read by
//! [`crate::core::caller`], which the rate limits share; a missing or malformed token is the
//! spec's unauthenticated error.

use axum::http::HeaderMap;
use protocol::token::{AccessToken, OwnerHash};

use super::error::A2aError;
use crate::core::caller::{self as core_caller, CallerError};

/// The security schemes' names in the card.
pub const SCHEME: &str = "bearer";
pub const API_KEY_SCHEME: &str = "taskAccessToken";

/// The owner the request's bearer token stands for.
pub fn owner(headers: &HeaderMap) -> Result<OwnerHash, A2aError> {
    core_caller::owner(headers).map_err(unauthenticated)
}

/// The request's token: `Authorization: Bearer` (which decides, valid or not), else
/// `Task-Access-Token`.
pub fn token(headers: &HeaderMap) -> Result<AccessToken, A2aError> {
    core_caller::token(headers).map_err(unauthenticated)
}

fn unauthenticated(err: CallerError) -> A2aError {
    A2aError::unauthenticated(err.to_string())
}

#[cfg(test)]
mod tests {
    use axum::http::{HeaderValue, header};

    use super::*;

    fn with(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(header::AUTHORIZATION, value);
        }
        headers
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
