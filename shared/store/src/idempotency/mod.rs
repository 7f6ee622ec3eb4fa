//! Idempotency records of direct invocations (`Idempotency-Key` on
//! `POST /entrypoints/:key/invoke`).
//!
//! A request carrying a key first [`begins`](IdempotencyStore::begin) a record under its scope
//! (the operation and the entrypoint, e.g. `entrypoint:<key>:invoke`: see [`scope`]) and key.
//! Its [`fingerprint`] covers the method, path and body and also who sent it (its
//! [`Subject`]: the payer a credential's signature recovers to, a signed-in address, a
//! `Task-Access-Token`'s owner hash, or nobody) and on what terms ([`SecurityContext`]:
//! protocol, network, asset, payee, price), as the upstream profile's fingerprint does, so a
//! key another caller reuses meets a conflict, never that caller's stored response:
//!
//! - no record: the request gets a [`Claim`] and runs; the record reads *in progress* until the
//!   claim completes or is released, and lapses by itself after the in-progress TTL (a crashed
//!   gateway cannot block a key for longer);
//! - a record with another fingerprint: [`Begin::Conflict`], whatever its state;
//! - a record in progress: [`Begin::InProgress`];
//! - a finished record: [`Begin::Replay`] with the stored response, kept for the retention;
//!   [`Begin::NotKept`] when its body was over [`IdempotencyLimits::max_body_bytes`];
//! - no record, and one of the request's quota subjects (see below) already holds
//!   [`IdempotencyLimits::max_records_per_subject`] live records: [`Begin::OverQuota`];
//! - no record and the store holds [`IdempotencyLimits::max_records`]: [`Begin::Full`].
//!
//! No record is ever evicted to make room for another: a record that someone else's requests
//! could push out would let them make a victim's retry run (and be charged) twice. Each new
//! record is instead charged, for its whole life, to the request's quota subjects (strings
//! the caller names: the payer of a paid request, the owner of a `Task-Access-Token`, the
//! client address; see [`IdempotencyStore::begin_for`]); a subject at its quota is refused
//! until its own oldest record lapses, whoever else is flooding.
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

use crate::StoreError;

/// How long a claim holds its key before it lapses (upstream `inProgressTtlMs`).
pub const DEFAULT_IN_PROGRESS_TTL: Duration = Duration::from_secs(15 * 60);
/// How long a finished response is replayed (upstream `retentionMs`).
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);
/// Records a store keeps at most (upstream `maxEntries`); in Redis, per namespace across
/// gateways. A ceiling on memory, not an eviction bound: at it newcomers are refused.
pub const DEFAULT_MAX_RECORDS: usize = 100_000;
/// Live records one quota subject (a payer, a token's owner, a client address) may hold.
pub const DEFAULT_MAX_RECORDS_PER_SUBJECT: usize = 1_000;
/// The largest response body kept for replay. Records are small in practice (an invoke's
/// JSON answer); in the worst case each subject's share is [`DEFAULT_MAX_RECORDS_PER_SUBJECT`]
/// × 64 KiB (64 MiB), and invokes are refused by the store's memory high-water mark well
/// before [`DEFAULT_MAX_RECORDS`] such records.
pub const DEFAULT_MAX_BODY_BYTES: usize = 64 * 1024;

/// How much a store keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdempotencyLimits {
    /// Records at most (at least 1). At the bound no record is evicted: a newcomer gets
    /// [`Begin::Full`].
    pub max_records: usize,
    /// Live records at most per quota subject (at least 1); past it that subject's newcomers
    /// get [`Begin::OverQuota`].
    pub max_records_per_subject: usize,
    /// Bytes of response body kept for replay; a larger response is recorded as run but not
    /// kept ([`Begin::NotKept`] on replay).
    pub max_body_bytes: usize,
}

impl Default for IdempotencyLimits {
    fn default() -> Self {
        IdempotencyLimits {
            max_records: DEFAULT_MAX_RECORDS,
            max_records_per_subject: DEFAULT_MAX_RECORDS_PER_SUBJECT,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
        }
    }
}

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

/// What a keyed request does: the first part of its scope. A key names one request of one
/// operation on one entrypoint; the same key on another operation is another record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// `POST /entrypoints/:key/invoke`.
    Invoke,
    /// `POST /entrypoints/:key/stream`.
    Stream,
    /// `POST /tasks` for the entrypoint.
    CreateTask,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Invoke => "invoke",
            Operation::Stream => "stream",
            Operation::CreateTask => "task",
        }
    }
}

/// The scope of `operation` on `entrypoint`: `entrypoint:<key>:<operation>` (upstream's
/// `entrypoint:<key>:invoke` for invoke).
pub fn scope(operation: Operation, entrypoint: &str) -> String {
    format!("entrypoint:{entrypoint}:{}", operation.as_str())
}

/// Who sent a keyed request, as far as the gateway can prove it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// The address a payment credential's signature recovers to (lowercase `0x` hex).
    Payer(String),
    /// The address a Sign-In-With-X signature recovers to (lowercase `0x` hex).
    SignedIn(String),
    /// The owner hash of the request's `Task-Access-Token`.
    Token(String),
    /// Nobody in particular: every anonymous caller shares this subject.
    Anonymous,
}

impl Subject {
    /// The subject as the fingerprint reads it, e.g. `payer:0xabc…` or `anonymous`.
    pub fn to_text(&self) -> String {
        match self {
            Subject::Payer(address) => format!("payer:{}", address.to_ascii_lowercase()),
            Subject::SignedIn(address) => format!("siwx:{}", address.to_ascii_lowercase()),
            Subject::Token(owner) => format!("token:{owner}"),
            Subject::Anonymous => "anonymous".to_owned(),
        }
    }
}

/// The terms a request was admitted on; part of the fingerprint, so that a key reused on
/// other terms (another protocol, network, asset, payee or price) conflicts.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SecurityContext {
    /// `x402`, `mpp`, `siwx` (signed in, unpaid) or `none` (a free route).
    pub protocol: String,
    /// CAIP-2 network, when paid or priced.
    pub network: Option<String>,
    /// The asset's contract address, when paid.
    pub asset: Option<String>,
    /// Who is paid, when paid.
    pub payee: Option<String>,
    /// The amount in the asset's atomic units, when paid.
    pub price: Option<String>,
}

impl SecurityContext {
    /// A free route's context.
    pub fn free() -> Self {
        SecurityContext {
            protocol: "none".to_owned(),
            network: None,
            asset: None,
            payee: None,
            price: None,
        }
    }
}

/// What a fingerprint covers: the request, who sent it and on what terms.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub method: &'a str,
    pub url: &'a str,
    pub body: &'a Value,
    pub subject: &'a Subject,
    pub security: &'a SecurityContext,
}

/// Lowercase hex SHA-256 of the canonical JSON
/// `{"body":..,"method":..,"securityContext":..,"subject":..,"url":..}`: object keys sorted at
/// every depth, no insignificant whitespace. Two requests that differ only in key order or
/// spacing share a fingerprint; two callers, or two sets of terms, never do.
pub fn fingerprint(request: &Request<'_>) -> String {
    let request = serde_json::json!({
        "method": request.method,
        "url": request.url,
        "body": request.body,
        "subject": request.subject.to_text(),
        "securityContext": request.security,
    });
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
    /// The quota subjects the record is charged to.
    subjects: Vec<String>,
}

impl Claim {
    fn new(scope: &str, key: &str, fingerprint: &str, subjects: &[String]) -> Self {
        Claim {
            scope: scope.to_owned(),
            key: key.to_owned(),
            fingerprint: fingerprint.to_owned(),
            owner: uuid::Uuid::new_v4().to_string(),
            subjects: subjects.to_vec(),
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
    /// The same request finished with this status, but its body was larger than the store
    /// keeps: it cannot be replayed, and must not run again under this key.
    NotKept { status: u16 },
    /// One of the request's quota subjects holds its maximum of live records: no record was
    /// made, so the request must not run (it could not be deduplicated). Its oldest record
    /// lapses after `retry_after`.
    OverQuota { retry_after: Duration },
    /// The store holds its maximum of records: no record could be made, so the request must
    /// not run (it could not be deduplicated).
    Full,
    /// The key was used for a different request.
    Conflict,
}

#[async_trait]
pub trait IdempotencyStore: Send + Sync + 'static {
    /// Looks up `(scope, key)` and claims it when free, charging the new record to each of
    /// `subjects` (quota subjects, e.g. `payer:0x…`, `token:<owner hash>`, `address:<key>`)
    /// until it lapses; the claim lapses after `in_progress_ttl`.
    async fn begin_for(
        &self,
        scope: &str,
        key: &str,
        fingerprint: &str,
        subjects: &[String],
        in_progress_ttl: Duration,
    ) -> Result<Begin, StoreError>;

    /// [`IdempotencyStore::begin_for`] charged to no subject: only the store's ceiling
    /// bounds it (tools and tests; the gateway always names subjects).
    async fn begin(
        &self,
        scope: &str,
        key: &str,
        fingerprint: &str,
        in_progress_ttl: Duration,
    ) -> Result<Begin, StoreError> {
        self.begin_for(scope, key, fingerprint, &[], in_progress_ttl)
            .await
    }

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

    fn print(url: &str, body: &Value, subject: &Subject, security: &SecurityContext) -> String {
        fingerprint(&Request {
            method: "POST",
            url,
            body,
            subject,
            security,
        })
    }

    #[test]
    fn fingerprint_is_canonical() {
        let free = SecurityContext::free();
        let anonymous = Subject::Anonymous;
        let a = print(
            "/entrypoints/echo/invoke",
            &json!({"input": {"x": 1, "y": [1, {"b": 2, "a": 1}]}}),
            &anonymous,
            &free,
        );
        let b = print(
            "/entrypoints/echo/invoke",
            &json!({"input": {"y": [1, {"a": 1, "b": 2}], "x": 1}}),
            &anonymous,
            &free,
        );
        let c = print(
            "/entrypoints/echo/invoke",
            &json!({"input": {"x": 2}}),
            &anonymous,
            &free,
        );
        let d = print(
            "/entrypoints/sleep/invoke",
            &json!({"input": {"x": 1, "y": [1, {"b": 2, "a": 1}]}}),
            &anonymous,
            &free,
        );
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(a, d);
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')));
        // sha256 of the canonical text itself.
        let text = concat!(
            r#"{"body":{"input":{"x":2}},"method":"POST","#,
            r#""securityContext":{"asset":null,"network":null,"payee":null,"price":null,"protocol":"none"},"#,
            r#""subject":"anonymous","url":"/entrypoints/echo/invoke"}"#
        );
        assert_eq!(c, hex::encode(Sha256::digest(text.as_bytes())));
    }

    #[test]
    fn fingerprint_covers_subject_and_terms() {
        let body = json!({"input": {"text": "document-42"}});
        let url = "/entrypoints/summarize/invoke";
        let paid = SecurityContext {
            protocol: "x402".into(),
            network: Some("eip155:84532".into()),
            asset: Some("0x036cbd53842c5426634e7929541ec2318f3dcf7e".into()),
            payee: Some("0x70997970c51812dc3a010c7d01b50e0d17dc79c8".into()),
            price: Some("1000".into()),
        };
        let victim = Subject::Payer("0xF39Fd6e51aad88F6F4ce6aB8827279cffFb92266".into());
        let attacker = Subject::Payer("0x3c44cdddb6a900fa2b585dd299e03d12fa4293bc".into());
        let base = print(url, &body, &victim, &paid);
        // The same address in another case is the same payer.
        let same = Subject::Payer("0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266".into());
        assert_eq!(base, print(url, &body, &same, &paid));
        assert_ne!(base, print(url, &body, &attacker, &paid));
        assert_ne!(
            base,
            print(
                url,
                &body,
                &Subject::SignedIn("0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266".into()),
                &paid
            )
        );
        assert_ne!(base, print(url, &body, &Subject::Anonymous, &paid));
        for other in [
            SecurityContext {
                protocol: "mpp".into(),
                ..paid.clone()
            },
            SecurityContext {
                network: Some("eip155:8453".into()),
                ..paid.clone()
            },
            SecurityContext {
                asset: Some("0x0".into()),
                ..paid.clone()
            },
            SecurityContext {
                payee: Some("0x1".into()),
                ..paid.clone()
            },
            SecurityContext {
                price: Some("2000".into()),
                ..paid.clone()
            },
            SecurityContext::free(),
        ] {
            assert_ne!(base, print(url, &body, &victim, &other), "{other:?}");
        }
    }

    #[test]
    fn scopes_name_the_operation_and_entrypoint() {
        assert_eq!(scope(Operation::Invoke, "echo"), "entrypoint:echo:invoke");
        assert_eq!(scope(Operation::Stream, "echo"), "entrypoint:echo:stream");
        assert_eq!(scope(Operation::CreateTask, "echo"), "entrypoint:echo:task");
    }
}
