//! The `Authorization: {scheme} {credentials}` header a push config asks us to send. Both parts
//! come from the caller, so a CR or LF in either would let them add headers (or a whole request)
//! to a delivery; they are checked when a config is created ([`validate_authorization`]) and
//! again before every send. Errors name the position of the bad character, never the
//! credentials themselves.

use reqwest::header::HeaderValue;

/// Upper bound on the header value: enough for a large JWT, and a config is bytes the store
/// keeps for its caller (up to `--push-max-configs` of them a task), so no more than that.
pub const MAX_AUTHORIZATION_LEN: usize = 4 * 1024;

/// Why a scheme or credentials cannot go into an `Authorization` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AuthorizationError {
    #[error("the authentication scheme is empty")]
    EmptyScheme,
    /// The scheme is an HTTP token (RFC 9110 §11.1): letters, digits and ``!#$%&'*+-.^_`|~``.
    #[error(
        "the authentication scheme has {what} at byte {position}; a scheme is a token such as Bearer"
    )]
    InvalidScheme { position: usize, what: &'static str },
    #[error("the credentials are empty")]
    EmptyCredentials,
    #[error("the credentials have {what} at byte {position}")]
    InvalidCredentials { position: usize, what: &'static str },
    #[error("the credentials start or end with a space")]
    SurroundingSpace,
    #[error("the Authorization header would be longer than {MAX_AUTHORIZATION_LEN} bytes")]
    TooLong,
}

/// Checks that `scheme` and `credentials` make a well-formed `Authorization` header: the scheme
/// a token, the credentials visible ASCII with single spaces allowed inside (auth-param lists
/// such as `realm="a", id=1` need them), no control characters, CR or LF anywhere.
pub fn validate_authorization(scheme: &str, credentials: &str) -> Result<(), AuthorizationError> {
    if scheme.is_empty() {
        return Err(AuthorizationError::EmptyScheme);
    }
    if let Some((position, byte)) = scheme.bytes().enumerate().find(|(_, b)| !is_tchar(*b)) {
        return Err(AuthorizationError::InvalidScheme {
            position,
            what: describe(byte),
        });
    }
    if credentials.is_empty() {
        return Err(AuthorizationError::EmptyCredentials);
    }
    if let Some((position, byte)) = credentials
        .bytes()
        .enumerate()
        .find(|(_, b)| !(b.is_ascii_graphic() || *b == b' '))
    {
        return Err(AuthorizationError::InvalidCredentials {
            position,
            what: describe(byte),
        });
    }
    if credentials.starts_with(' ') || credentials.ends_with(' ') {
        return Err(AuthorizationError::SurroundingSpace);
    }
    if scheme.len() + 1 + credentials.len() > MAX_AUTHORIZATION_LEN {
        return Err(AuthorizationError::TooLong);
    }
    Ok(())
}

/// The header value, marked sensitive so that HTTP/2's HPACK never indexes it and `Debug`
/// prints `Sensitive`.
pub(crate) fn authorization_header(
    scheme: &str,
    credentials: &str,
) -> Result<HeaderValue, AuthorizationError> {
    validate_authorization(scheme, credentials)?;
    let mut value = HeaderValue::from_str(&format!("{scheme} {credentials}")).map_err(|_| {
        // Unreachable after validation (visible ASCII and spaces only), but typed all the same.
        AuthorizationError::InvalidCredentials {
            position: 0,
            what: "a character not allowed in a header",
        }
    })?;
    value.set_sensitive(true);
    Ok(value)
}

/// Upper bound on a push config's notification token (an opaque value the receiver checks:
/// a UUID or a MAC is far shorter).
pub const MAX_TOKEN_LEN: usize = 512;

/// Why a token cannot go into the `X-A2A-Notification-Token` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("the notification token is empty")]
    Empty,
    #[error("the notification token has {what} at byte {position}; visible ASCII only")]
    Invalid { position: usize, what: &'static str },
    #[error("the notification token is longer than {MAX_TOKEN_LEN} bytes")]
    TooLong,
}

/// Checks that a push config's `token` makes a header value: visible ASCII, no space, CR, LF
/// or other control character, at most [`MAX_TOKEN_LEN`] bytes. Errors never quote it.
pub fn validate_token(token: &str) -> Result<(), TokenError> {
    if token.is_empty() {
        return Err(TokenError::Empty);
    }
    if token.len() > MAX_TOKEN_LEN {
        return Err(TokenError::TooLong);
    }
    match token.bytes().position(|byte| !byte.is_ascii_graphic()) {
        Some(position) => Err(TokenError::Invalid {
            position,
            what: describe(token.as_bytes()[position]),
        }),
        None => Ok(()),
    }
}

/// The `X-A2A-Notification-Token` value, marked sensitive.
pub(crate) fn token_header(token: &str) -> Result<HeaderValue, TokenError> {
    validate_token(token)?;
    let mut value = HeaderValue::from_str(token).map_err(|_| TokenError::Invalid {
        position: 0,
        what: "a character not allowed in a header",
    })?;
    value.set_sensitive(true);
    Ok(value)
}

#[cfg(test)]
mod token_tests {
    use super::*;

    #[test]
    fn tokens_with_line_breaks_or_spaces_are_refused_without_being_quoted() {
        assert_eq!(validate_token("abc-123_XYZ"), Ok(()));
        assert_eq!(validate_token(""), Err(TokenError::Empty));
        for bad in ["a\r\nX-Evil: 1", "a b", "caf\u{e9}"] {
            let err = validate_token(bad).err();
            assert!(
                matches!(err, Some(TokenError::Invalid { .. })),
                "{bad:?}: {err:?}"
            );
            assert!(
                !err.map(|e| e.to_string())
                    .unwrap_or_default()
                    .contains("X-Evil")
            );
        }
        assert_eq!(
            validate_token(&"t".repeat(MAX_TOKEN_LEN + 1)),
            Err(TokenError::TooLong)
        );
    }
}

fn is_tchar(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

fn describe(byte: u8) -> &'static str {
    match byte {
        b'\r' | b'\n' => "a line break (CR or LF)",
        b' ' | b'\t' => "whitespace",
        0..=0x1f | 0x7f => "a control character",
        0x80.. => "a non-ASCII character",
        _ => "a character not allowed there",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_common_schemes() {
        assert_eq!(validate_authorization("Bearer", "x"), Ok(()));
        assert_eq!(
            validate_authorization("Bearer", "eyJhbGciOi.J9-_~+/=="),
            Ok(())
        );
        assert_eq!(validate_authorization("Basic", "dXNlcjpwYXNz"), Ok(()));
        assert_eq!(
            validate_authorization("Digest", r#"realm="a", nonce="b""#),
            Ok(())
        );
    }

    #[test]
    fn refuses_line_breaks_controls_and_spaces_naming_the_position() {
        use AuthorizationError::*;
        let line_break = "a line break (CR or LF)";
        let cases = [
            (("", "x"), EmptyScheme),
            (("Bearer", ""), EmptyCredentials),
            (
                ("Bea rer", "x"),
                InvalidScheme {
                    position: 3,
                    what: "whitespace",
                },
            ),
            (
                ("Bearer\r\n", "x"),
                InvalidScheme {
                    position: 6,
                    what: line_break,
                },
            ),
            (
                ("Bearer:", "x"),
                InvalidScheme {
                    position: 6,
                    what: "a character not allowed there",
                },
            ),
            (
                ("Bearer", "x\r\nX-Evil: 1"),
                InvalidCredentials {
                    position: 1,
                    what: line_break,
                },
            ),
            (
                ("Bearer", "x\ny"),
                InvalidCredentials {
                    position: 1,
                    what: line_break,
                },
            ),
            (
                ("Bearer", "x\ty"),
                InvalidCredentials {
                    position: 1,
                    what: "whitespace",
                },
            ),
            (
                ("Bearer", "x\0"),
                InvalidCredentials {
                    position: 1,
                    what: "a control character",
                },
            ),
            (
                ("Bearer", "x\u{7f}"),
                InvalidCredentials {
                    position: 1,
                    what: "a control character",
                },
            ),
            (
                ("Bearer", "jé"),
                InvalidCredentials {
                    position: 1,
                    what: "a non-ASCII character",
                },
            ),
            (("Bearer", " x"), SurroundingSpace),
            (("Bearer", "x "), SurroundingSpace),
        ];
        for ((scheme, credentials), expected) in cases {
            assert_eq!(
                validate_authorization(scheme, credentials),
                Err(expected),
                "{scheme:?} {credentials:?}"
            );
        }
        let long = "x".repeat(MAX_AUTHORIZATION_LEN);
        assert_eq!(validate_authorization("Bearer", &long), Err(TooLong));
    }

    #[test]
    fn errors_never_show_the_credentials() {
        let secret = "s3cr3t\r\nX-Evil: 1";
        let message = match validate_authorization("Bearer", secret) {
            Err(error) => format!("{error} {error:?}"),
            Ok(()) => String::new(),
        };
        assert!(message.contains("byte 6"), "{message}");
        assert!(!message.contains("s3cr3t"), "{message}");
    }

    #[test]
    fn the_header_is_sensitive() -> Result<(), AuthorizationError> {
        let value = authorization_header("Bearer", "x")?;
        assert_eq!(value.as_bytes(), b"Bearer x");
        assert!(value.is_sensitive());
        assert_eq!(format!("{value:?}"), "Sensitive");
        Ok(())
    }
}
