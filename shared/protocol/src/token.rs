//! Access tokens and owner hashes.
//!
//! A token is the caller's secret capability over its tasks. Stores keep only
//! [`OwnerHash`] = lowercase hex SHA-256 of the trimmed token's UTF-8 bytes. Neither type prints
//! a token: `Debug` is redacted so a stray `?token` in a log line leaks nothing.

use std::fmt;

use rand::Rng;
use sha2::{Digest, Sha256};

pub const MIN_TOKEN_CHARS: usize = 20;
pub const MAX_TOKEN_CHARS: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Task-Access-Token must contain 20 to 256 characters")]
pub struct InvalidToken;

/// A validated, trimmed access token.
#[derive(Clone, PartialEq, Eq)]
pub struct AccessToken(String);

impl AccessToken {
    /// Trims and checks the length (counted in characters, as upstream does).
    pub fn parse(raw: &str) -> Result<Self, InvalidToken> {
        let trimmed = raw.trim();
        let chars = trimmed.chars().count();
        if (MIN_TOKEN_CHARS..=MAX_TOKEN_CHARS).contains(&chars) {
            Ok(AccessToken(trimmed.to_owned()))
        } else {
            Err(InvalidToken)
        }
    }

    /// A fresh token from the operating system's CSPRNG: 32 random bytes, hex encoded.
    pub fn generate() -> Self {
        let mut bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        AccessToken(hex::encode(bytes))
    }

    /// The secret itself, for the one response that hands it to its owner.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn owner_hash(&self) -> OwnerHash {
        OwnerHash(hex::encode(Sha256::digest(self.0.as_bytes())))
    }
}

impl fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AccessToken(<redacted>)")
    }
}

/// Lowercase hex SHA-256 of a token: identifies an owner without revealing the token.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OwnerHash(String);

impl OwnerHash {
    /// Accepts a stored hash: 64 lowercase hex characters.
    pub fn from_hex(hex: &str) -> Option<Self> {
        let valid = hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        valid.then(|| OwnerHash(hex.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// All zeros: a placeholder no token hashes to (finding a preimage would break SHA-256).
    pub fn nobody() -> Self {
        OwnerHash("0".repeat(64))
    }
}

impl fmt::Display for OwnerHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_and_bounds_length() {
        assert!(AccessToken::parse("short").is_err());
        assert!(AccessToken::parse(&"a".repeat(19)).is_err());
        assert!(AccessToken::parse(&"a".repeat(257)).is_err());
        assert!(AccessToken::parse(&format!("  {}  ", "a".repeat(20))).is_ok());
        assert!(AccessToken::parse(&format!("  {}  ", "a".repeat(19))).is_err());
        // Characters, not bytes: 20 two-byte characters are enough.
        assert!(AccessToken::parse(&"é".repeat(20)).is_ok());
        assert!(AccessToken::parse(&"é".repeat(257)).is_err());
    }

    #[test]
    fn owner_hash_is_lowercase_hex_sha256_of_trimmed_token() {
        let token = AccessToken::parse(" 0123456789abcdef0123456789abcdef0123 ");
        let token = token.ok();
        let hash = token.as_ref().map(AccessToken::owner_hash);
        // sha256("0123456789abcdef0123456789abcdef0123")
        let expected = hex::encode(Sha256::digest(b"0123456789abcdef0123456789abcdef0123"));
        assert_eq!(hash.map(|h| h.as_str().to_owned()), Some(expected.clone()));
        assert!(OwnerHash::from_hex(&expected).is_some());
        assert!(OwnerHash::from_hex(&expected.to_uppercase()).is_none());
    }

    #[test]
    fn generated_tokens_are_valid_distinct_and_redacted() {
        let a = AccessToken::generate();
        let b = AccessToken::generate();
        assert_ne!(a, b);
        assert!(AccessToken::parse(a.expose()).is_ok());
        assert!(!format!("{a:?}").contains(a.expose()));
    }
}
