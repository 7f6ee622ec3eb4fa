//! Idempotency records of direct invocations (`Idempotency-Key` on
//! `POST /entrypoints/:key/invoke`).
//!
//! A request carrying a key first [`begins`](IdempotencyStore::begin) a record under its scope
//! (`entrypoint:<key>:invoke`) and key:
//!
//! - no record: the request gets a [`Claim`] and runs; the record reads *in progress* until the
//!   claim completes or is released, and lapses by itself after the in-progress TTL (a crashed
//!   gateway cannot block a key for longer);
//! - a record with another fingerprint: [`Begin::Conflict`], whatever its state;
//! - a record in progress: [`Begin::InProgress`];
//! - a finished record: [`Begin::Replay`] with the stored response, kept for the retention.
//!
//! Claims are fenced by an owner id drawn at `begin`: a request whose claim lapsed and was taken
//! by a retry can neither complete nor release the retry's record.
//!
//! Two stores: [`MemoryIdempotency`] (bounded, process-local) and [`RedisIdempotency`] (shared
//! by every gateway of a cluster, one Lua script per transition).

mod memory;
mod redis;

pub use memory::MemoryIdempotency;
pub use redis::RedisIdempotency;

use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::store::StoreError;

/// How long a claim holds its key before it lapses (upstream `inProgressTtlMs`).
pub const DEFAULT_IN_PROGRESS_TTL: Duration = Duration::from_secs(15 * 60);
/// How long a finished response is replayed (upstream `retentionMs`).
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);
/// Records the in-memory store keeps before evicting the oldest (upstream `maxEntries`).
pub const DEFAULT_MAX_RECORDS: usize = 10_000;

pub const MIN_KEY_CHARS: usize = 20;
pub const MAX_KEY_CHARS: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Idempotency-Key must contain 20 to 256 characters")]
pub struct InvalidIdempotencyKey;

/// A validated, trimmed `Idempotency-Key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// Trims and checks the length, counted in characters.
    pub fn parse(raw: &str) -> Result<Self, InvalidIdempotencyKey> {
        let trimmed = raw.trim();
        let chars = trimmed.chars().count();
        if (MIN_KEY_CHARS..=MAX_KEY_CHARS).contains(&chars) {
            Ok(IdempotencyKey(trimmed.to_owned()))
        } else {
            Err(InvalidIdempotencyKey)
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The scope of invocations of one entrypoint.
pub fn invoke_scope(entrypoint: &str) -> String {
    format!("entrypoint:{entrypoint}:invoke")
}

/// Lowercase hex SHA-256 of the canonical JSON `{"body":..,"method":..,"url":..}`: object keys
/// sorted at every depth, no insignificant whitespace. Two requests that differ only in key
/// order or spacing share a fingerprint.
pub fn fingerprint(method: &str, url: &str, body: &Value) -> String {
    let request = serde_json::json!({ "method": method, "url": url, "body": body });
    let mut canonical = String::new();
    write_canonical(&request, &mut canonical);
    hex::encode(Sha256::digest(canonical.as_bytes()))
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(value, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// A response kept for replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    pub status: u16,
    /// Headers to send again (lowercase names), e.g. the content type.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

/// The right to run one request and then complete or release its record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    scope: String,
    key: String,
    fingerprint: String,
    owner: String,
}

impl Claim {
    fn new(scope: &str, key: &str, fingerprint: &str) -> Self {
        Claim {
            scope: scope.to_owned(),
            key: key.to_owned(),
            fingerprint: fingerprint.to_owned(),
            owner: uuid::Uuid::new_v4().to_string(),
        }
    }

    pub fn scope(&self) -> &str {
        &self.scope
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }
}

/// What [`IdempotencyStore::begin`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Begin {
    /// No record: this request runs, holding the claim.
    Started(Claim),
    /// The same request is still running elsewhere.
    InProgress,
    /// The same request finished: send this again.
    Replay(StoredResponse),
    /// The key was used for a different request.
    Conflict,
}

#[async_trait]
pub trait IdempotencyStore: Send + Sync + 'static {
    /// Looks up `(scope, key)` and claims it when free; the claim lapses after
    /// `in_progress_ttl`.
    async fn begin(
        &self,
        scope: &str,
        key: &str,
        fingerprint: &str,
        in_progress_ttl: Duration,
    ) -> Result<Begin, StoreError>;

    /// Records the response of a claimed request for `retention`. False when the claim is no
    /// longer current (it lapsed, or was released).
    async fn complete(
        &self,
        claim: &Claim,
        response: &StoredResponse,
        retention: Duration,
    ) -> Result<bool, StoreError>;

    /// Drops a claimed, unfinished record so that a retry runs. False when the claim is no
    /// longer current.
    async fn release(&self, claim: &Claim) -> Result<bool, StoreError>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_are_trimmed_and_bounded_in_characters() {
        assert!(IdempotencyKey::parse("short").is_err());
        assert!(IdempotencyKey::parse(&"k".repeat(19)).is_err());
        assert!(IdempotencyKey::parse(&"k".repeat(257)).is_err());
        assert!(IdempotencyKey::parse(&"é".repeat(20)).is_ok());
        let key = IdempotencyKey::parse("  bench-key-0123456789abcdef ");
        assert_eq!(
            key.as_ref().map(IdempotencyKey::as_str),
            Ok("bench-key-0123456789abcdef")
        );
    }

    #[test]
    fn fingerprint_is_canonical() {
        let a = fingerprint(
            "POST",
            "/entrypoints/echo/invoke",
            &json!({"input": {"x": 1, "y": [1, {"b": 2, "a": 1}]}}),
        );
        let b = fingerprint(
            "POST",
            "/entrypoints/echo/invoke",
            &json!({"input": {"y": [1, {"a": 1, "b": 2}], "x": 1}}),
        );
        let c = fingerprint(
            "POST",
            "/entrypoints/echo/invoke",
            &json!({"input": {"x": 2}}),
        );
        let d = fingerprint(
            "POST",
            "/entrypoints/sleep/invoke",
            &json!({"input": {"x": 1, "y": [1, {"b": 2, "a": 1}]}}),
        );
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(a, d);
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')));
        // sha256 of the canonical text itself.
        let text = r#"{"body":{"input":{"x":2}},"method":"POST","url":"/entrypoints/echo/invoke"}"#;
        assert_eq!(c, hex::encode(Sha256::digest(text.as_bytes())));
    }
}
