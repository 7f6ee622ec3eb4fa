//! [`RedisIdempotency`]: records shared by every gateway of a cluster, in the store's Redis.
//!
//! One hash per record, `{ns}:idem:<sha256(scope "\n" key)>` (the key is hashed into the name:
//! names stay short and bounded whatever the client sends), with fields `fp`, `state`
//! (`running` | `done`), `owner` (while running), `status`, `headers` (JSON pairs), `body`.
//! Every record carries a TTL: the in-progress TTL while running, the retention once done, so
//! nothing outlives its retention.
//!
//! Bounded ([`IdempotencyLimits`]) without eviction: two sorted sets, `{ns}:idem-running` and
//! `{ns}:idem-done`, list the records' ids (the hash in the name) scored by expiry, so that
//! `begin` counts the namespace's records across every gateway against the ceiling; and one
//! sorted set per quota subject, `{ns}:idem-subject:<sha256(subject)>`, lists the ids charged
//! to it, scored the same way, so that `begin` refuses a subject at its quota. Every script
//! declares every set it touches (as a Redis Cluster requires). A body over the limit is
//! recorded as run but not kept (`kept` 0).
//!
//! One module per script, each with the script's contract, its keys and arguments, its typed
//! reply and its call; the [`IdempotencyStore`] impl below is glue:
//!
//! - [`begin`]: `lua/idempotency_begin.lua`, claims a record, or says why the request cannot run;
//! - [`complete`]: `lua/idempotency_complete.lua`, stores a claimed request's response;
//! - [`release`]: `lua/idempotency_release.lua`, drops a claimed, unfinished record.

mod begin;
mod complete;
mod release;

use std::time::Duration;

use async_trait::async_trait;
use sha2::{Digest, Sha256};

use super::{Begin, Claim, IdempotencyLimits, IdempotencyStore, StoredResponse};
use crate::{RedisStore, StoreError};

/// Idempotency records in a [`RedisStore`]'s Redis and namespace, over its connections. Cheap
/// to clone.
#[derive(Clone)]
pub struct RedisIdempotency {
    store: RedisStore,
    prefix: String,
    subject_prefix: String,
    running: String,
    done: String,
    limits: IdempotencyLimits,
}

impl RedisIdempotency {
    /// With the default limits.
    pub fn new(store: &RedisStore) -> Self {
        RedisIdempotency::with_limits(store, IdempotencyLimits::default())
    }

    pub fn with_limits(store: &RedisStore, limits: IdempotencyLimits) -> Self {
        let namespace = &store.config().namespace;
        RedisIdempotency {
            prefix: format!("{{{namespace}}}:idem:"),
            subject_prefix: format!("{{{namespace}}}:idem-subject:"),
            running: format!("{{{namespace}}}:idem-running"),
            done: format!("{{{namespace}}}:idem-done"),
            store: store.clone(),
            limits: IdempotencyLimits {
                max_records: limits.max_records.max(1),
                max_records_per_subject: limits.max_records_per_subject.max(1),
                ..limits
            },
        }
    }

    /// The sorted sets listing running and done records' ids (tests count them).
    pub fn index_keys(&self) -> [&str; 2] {
        [&self.running, &self.done]
    }

    /// The sorted set of the record ids charged to quota `subject`:
    /// `{ns}:idem-subject:<lowercase hex sha256(subject)>` (bounded whatever the subject).
    pub fn subject_key(&self, subject: &str) -> String {
        format!(
            "{}{}",
            self.subject_prefix,
            hex::encode(Sha256::digest(subject.as_bytes()))
        )
    }

    /// A record's id: the hash its name ends with.
    fn record_id<'a>(&self, record_key: &'a str) -> &'a str {
        record_key.strip_prefix(&self.prefix).unwrap_or(record_key)
    }

    /// The record's key name: `{ns}:idem:<lowercase hex sha256(scope "\n" key)>`.
    pub fn record_key(&self, scope: &str, key: &str) -> String {
        let mut digest = Sha256::new();
        digest.update(scope.as_bytes());
        digest.update(b"\n");
        digest.update(key.as_bytes());
        format!("{}{}", self.prefix, hex::encode(digest.finalize()))
    }

    /// Pattern matching every record of the namespace (leak checks).
    pub fn pattern(&self) -> String {
        format!("{}*", self.prefix)
    }
}

impl RedisStore {
    /// Idempotency records in this store's Redis and namespace, with the default limits.
    pub fn idempotency(&self) -> RedisIdempotency {
        RedisIdempotency::new(self)
    }
}

/// PX 0 is an error in Redis; a zero duration means "expire at once".
fn millis(duration: Duration) -> String {
    duration.as_millis().max(1).to_string()
}

fn corrupt(what: impl Into<String>) -> StoreError {
    StoreError::Corrupt(format!("idempotency record: {}", what.into()))
}

#[async_trait]
impl IdempotencyStore for RedisIdempotency {
    async fn begin_for(
        &self,
        scope: &str,
        key: &str,
        fingerprint: &str,
        subjects: &[String],
        in_progress_ttl: Duration,
    ) -> Result<Begin, StoreError> {
        let record = self.record_key(scope, key);
        let claim = Claim::new(scope, key, fingerprint, subjects);
        begin::call(self, &record, claim, in_progress_ttl).await
    }

    async fn complete(
        &self,
        claim: &Claim,
        response: &StoredResponse,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        complete::call(self, claim, response, retention).await
    }

    async fn release(&self, claim: &Claim) -> Result<bool, StoreError> {
        release::call(self, claim).await
    }
}
