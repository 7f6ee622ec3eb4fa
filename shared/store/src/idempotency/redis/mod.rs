//! [`RedisIdempotency`]: records shared by every gateway of a cluster, in the store's Redis.
//!
//! One hash per record, `{ns}:idem:<sha256(scope "\n" key)>` (the key is hashed into the name:
//! names stay short and bounded whatever the client sends), with fields `fp`, `state`
//! (`running` | `done`), `owner` (while running), `status`, `headers` (JSON pairs), `body`.
//! Every record carries a TTL: the in-progress TTL while running, the retention once done, so
//! nothing outlives its retention. One script per transition: `shared/store/lua/idempotency_*.lua`.
//!
//! Bounded ([`IdempotencyLimits`]): two sorted sets, `{ns}:idem-running` and `{ns}:idem-done`,
//! list the records' ids (the hash in the name) scored by expiry, so that `begin` counts the
//! namespace's records across every gateway. At the bound `begin` names the oldest done record;
//! this client evicts it with a script that declares its key (every script declares every key
//! it touches, as a Redis Cluster requires) and begins again. A body over the limit is recorded
//! as run but not kept (`kept` 0).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use redis::Script;
use sha2::{Digest, Sha256};

use super::{Begin, Claim, IdempotencyLimits, IdempotencyStore, StoredResponse};
use crate::redis::guarded_script;
use crate::{RedisStore, StoreError};

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
    running: String,
    done: String,
    limits: IdempotencyLimits,
    scripts: Arc<Scripts>,
}

struct Scripts {
    begin: Script,
    evict: Script,
    complete: Script,
    release: Script,
}

/// Evictions one `begin` tries before it answers [`Begin::Full`]: each makes room for one
/// record, so only a crowd of concurrent newcomers taking the room first needs more than one.
const EVICT_ATTEMPTS: usize = 8;

impl RedisIdempotency {
    /// With the default limits.
    pub fn new(store: &RedisStore) -> Self {
        RedisIdempotency::with_limits(store, IdempotencyLimits::default())
    }

    pub fn with_limits(store: &RedisStore, limits: IdempotencyLimits) -> Self {
        let namespace = &store.config().namespace;
        RedisIdempotency {
            prefix: format!("{{{namespace}}}:idem:"),
            running: format!("{{{namespace}}}:idem-running"),
            done: format!("{{{namespace}}}:idem-done"),
            store: store.clone(),
            limits: IdempotencyLimits {
                max_records: limits.max_records.max(1),
                ..limits
            },
            scripts: Arc::new(Scripts {
                begin: guarded_script(lua!("idempotency_begin")),
                evict: guarded_script(lua!("idempotency_evict")),
                complete: guarded_script(lua!("idempotency_complete")),
                release: guarded_script(lua!("idempotency_release")),
            }),
        }
    }

    /// The sorted sets listing running and done records' ids (tests count them).
    pub fn index_keys(&self) -> [&str; 2] {
        [&self.running, &self.done]
    }

    /// Drops the done record `id` named by `begin`; false when it was gone already.
    async fn evict(&self, id: &str) -> Result<bool, StoreError> {
        // Ids are the 64 hex digits of a record's name; anything else is not ours to delete.
        if id.len() != 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(corrupt(format!("bad record id {id:?}")));
        }
        let mut invocation = self.scripts.evict.prepare_invoke();
        invocation
            .key(format!("{}{id}", self.prefix))
            .key(&self.done)
            .arg(id);
        let evicted: u64 = self
            .store
            .eval("idempotency_evict", &mut invocation)
            .await?;
        Ok(evicted == 1)
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

/// What a begin script answered.
enum Reply {
    Begin(Begin),
    /// Evict this done record and begin again.
    Evict(String),
}

fn parse_begin(reply: Vec<String>, claim: Claim) -> Result<Reply, StoreError> {
    let begin = match reply.as_slice() {
        [tag, id] if tag == "evict" => return Ok(Reply::Evict(id.clone())),
        [tag] if tag == "full" => Ok(Begin::Full),
        [tag, status] if tag == "not_kept" => {
            let status = status
                .parse::<u16>()
                .map_err(|_| corrupt(format!("bad status {status:?}")))?;
            Ok(Begin::NotKept { status })
        }
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
    };
    begin.map(Reply::Begin)
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
        let record = self.record_key(scope, key);
        for _ in 0..EVICT_ATTEMPTS {
            let claim = Claim::new(scope, key, fingerprint);
            let mut invocation = self.scripts.begin.prepare_invoke();
            invocation
                .key(&record)
                .key(&self.running)
                .key(&self.done)
                .arg(fingerprint)
                .arg(&claim.owner)
                .arg(millis(in_progress_ttl))
                .arg(self.record_id(&record))
                .arg(self.limits.max_records);
            let reply: Vec<String> = self
                .store
                .eval("idempotency_begin", &mut invocation)
                .await?;
            match parse_begin(reply, claim)? {
                Reply::Begin(begin) => return Ok(begin),
                Reply::Evict(id) => {
                    self.evict(&id).await?;
                }
            }
        }
        // Other newcomers kept taking the room made: as good as full for now.
        Ok(Begin::Full)
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
        let record = self.record_key(&claim.scope, &claim.key);
        invocation
            .key(&record)
            .key(&self.running)
            .key(&self.done)
            .arg(&claim.owner)
            .arg(&claim.fingerprint)
            .arg(response.status)
            .arg(headers)
            .arg(&response.body)
            .arg(millis(retention))
            .arg(self.record_id(&record))
            .arg(self.limits.max_body_bytes);
        let done: u64 = self
            .store
            .eval("idempotency_complete", &mut invocation)
            .await?;
        Ok(done == 1)
    }

    async fn release(&self, claim: &Claim) -> Result<bool, StoreError> {
        let mut invocation = self.scripts.release.prepare_invoke();
        let record = self.record_key(&claim.scope, &claim.key);
        invocation
            .key(&record)
            .key(&self.running)
            .arg(&claim.owner)
            .arg(&claim.fingerprint)
            .arg(self.record_id(&record));
        let released: u64 = self
            .store
            .eval("idempotency_release", &mut invocation)
            .await?;
        Ok(released == 1)
    }
}
