//! [`RedisIdempotency`]: records shared by every gateway of a cluster, in the store's Redis.
//!
//! One hash per record, `{ns}:idem:<sha256(scope "\n" key)>` (the key is hashed into the name:
//! names stay short and bounded whatever the client sends), with fields `fp`, `state`
//! (`running` | `done`), `owner` (while running), `status`, `headers` (JSON pairs), `body`.
//! Every record carries a TTL: the in-progress TTL while running, the retention once done, so
//! nothing outlives its retention. One script per transition: `shared/lua/idempotency_*.lua`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use redis::Script;
use sha2::{Digest, Sha256};

use super::{Begin, Claim, IdempotencyStore, StoredResponse};
use crate::store::redis::guarded_script;
use crate::store::{RedisStore, StoreError};

macro_rules! lua {
    ($name:literal) => {
        include_str!(concat!(env!("OUT_DIR"), "/", $name, ".lua"))
    };
}

/// Idempotency records in a [`RedisStore`]'s Redis and namespace, over its connections. Cheap
/// to clone.
#[derive(Clone)]
pub struct RedisIdempotency {
    store: RedisStore,
    prefix: String,
    scripts: Arc<Scripts>,
}

struct Scripts {
    begin: Script,
    complete: Script,
    release: Script,
}

impl RedisIdempotency {
    pub fn new(store: &RedisStore) -> Self {
        RedisIdempotency {
            prefix: format!("{{{}}}:idem:", store.config().namespace),
            store: store.clone(),
            scripts: Arc::new(Scripts {
                begin: guarded_script(lua!("idempotency_begin")),
                complete: guarded_script(lua!("idempotency_complete")),
                release: guarded_script(lua!("idempotency_release")),
            }),
        }
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
    /// Idempotency records in this store's Redis and namespace.
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

fn parse_begin(reply: Vec<String>, claim: Claim) -> Result<Begin, StoreError> {
    match reply.as_slice() {
        [tag] if tag == "started" => Ok(Begin::Started(claim)),
        [tag] if tag == "in_progress" => Ok(Begin::InProgress),
        [tag] if tag == "conflict" => Ok(Begin::Conflict),
        [tag, status, headers, body] if tag == "replay" => {
            let status = status
                .parse::<u16>()
                .map_err(|_| corrupt(format!("bad status {status:?}")))?;
            let headers: Vec<(String, String)> =
                serde_json::from_str(headers).map_err(|err| corrupt(format!("headers: {err}")))?;
            Ok(Begin::Replay(StoredResponse {
                status,
                headers,
                body: body.clone(),
            }))
        }
        other => Err(corrupt(format!("unexpected reply {other:?}"))),
    }
}

#[async_trait]
impl IdempotencyStore for RedisIdempotency {
    async fn begin(
        &self,
        scope: &str,
        key: &str,
        fingerprint: &str,
        in_progress_ttl: Duration,
    ) -> Result<Begin, StoreError> {
        let claim = Claim::new(scope, key, fingerprint);
        let mut invocation = self.scripts.begin.prepare_invoke();
        invocation
            .key(self.record_key(scope, key))
            .arg(fingerprint)
            .arg(&claim.owner)
            .arg(millis(in_progress_ttl));
        let reply: Vec<String> = self
            .store
            .eval("idempotency_begin", &mut invocation)
            .await?;
        parse_begin(reply, claim)
    }

    async fn complete(
        &self,
        claim: &Claim,
        response: &StoredResponse,
        retention: Duration,
    ) -> Result<bool, StoreError> {
        let headers = serde_json::to_string(&response.headers)
            .map_err(|err| corrupt(format!("headers: {err}")))?;
        let mut invocation = self.scripts.complete.prepare_invoke();
        invocation
            .key(self.record_key(&claim.scope, &claim.key))
            .arg(&claim.owner)
            .arg(&claim.fingerprint)
            .arg(response.status)
            .arg(headers)
            .arg(&response.body)
            .arg(millis(retention));
        let done: u64 = self
            .store
            .eval("idempotency_complete", &mut invocation)
            .await?;
        Ok(done == 1)
    }

    async fn release(&self, claim: &Claim) -> Result<bool, StoreError> {
        let mut invocation = self.scripts.release.prepare_invoke();
        invocation
            .key(self.record_key(&claim.scope, &claim.key))
            .arg(&claim.owner)
            .arg(&claim.fingerprint);
        let released: u64 = self
            .store
            .eval("idempotency_release", &mut invocation)
            .await?;
        Ok(released == 1)
    }
}
