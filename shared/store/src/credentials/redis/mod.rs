//! [`RedisCredentials`]: credential records in the store's Redis, shared by every gateway.
//! One hash per credential, `{ns}:cred:<sha256(key)>` (fields `holder`, `state`, `request`,
//! `receipt`), one script per transition: `shared/store/lua/credential_*.lua`; the records in
//! `settling` are indexed in `{ns}:cred-settling` (sorted by since when). Issued nonces (SIWX
//! offers) live in one sorted set, `{ns}:nonces` (nonce -> expiry), bounded by
//! `shared/store/lua/nonce_issue.lua` and spent by `shared/store/lua/nonce_take.lua`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use redis::Script;
use sha2::{Digest, Sha256};

use super::{ClaimOutcome, CredentialLedger, CredentialState, MAX_ISSUED_NONCES, Stuck};
use crate::redis::guarded_script;
use crate::{RedisStore, StoreError};

macro_rules! lua {
    ($name:literal) => {
        include_str!(concat!(env!("OUT_DIR"), "/", $name, ".lua"))
    };
}

#[derive(Clone)]
pub struct RedisCredentials {
    store: RedisStore,
    prefix: String,
    marks: String,
    settling: String,
    nonces: String,
    nonce_cap: usize,
    scripts: Arc<Scripts>,
}

struct Scripts {
    claim: Script,
    release: Script,
    advance: Script,
    nonce_issue: Script,
    nonce_take: Script,
}

impl RedisCredentials {
    pub fn new(store: &RedisStore) -> Self {
        RedisCredentials {
            prefix: format!("{{{}}}:cred:", store.config().namespace),
            settling: format!("{{{}}}:cred-settling", store.config().namespace),
            marks: format!("{{{}}}:mark:", store.config().namespace),
            nonces: format!("{{{}}}:nonces", store.config().namespace),
            nonce_cap: MAX_ISSUED_NONCES,
            store: store.clone(),
            scripts: Arc::new(Scripts {
                claim: guarded_script(lua!("credential_claim")),
                release: guarded_script(lua!("credential_release")),
                advance: guarded_script(lua!("credential_advance")),
                nonce_issue: guarded_script(lua!("nonce_issue")),
                nonce_take: guarded_script(lua!("nonce_take")),
            }),
        }
    }

    /// The same records with another cap on outstanding nonces (tests of the bound).
    pub fn with_nonce_cap(mut self, cap: usize) -> Self {
        self.nonce_cap = cap.max(1);
        self
    }

    /// The sorted set of issued nonces (nonce -> expiry in ms on the Redis clock).
    pub fn nonces_key(&self) -> &str {
        &self.nonces
    }

    /// The record's name: the key is hashed, so names stay short whatever a client sends.
    pub fn record_key(&self, key: &str) -> String {
        format!(
            "{}{}",
            self.prefix,
            hex::encode(Sha256::digest(key.as_bytes()))
        )
    }

    /// A mark's name (`mark`): `{ns}:mark:<sha256(key)>`.
    pub fn mark_key(&self, key: &str) -> String {
        format!(
            "{}{}",
            self.marks,
            hex::encode(Sha256::digest(key.as_bytes()))
        )
    }

    /// Pattern matching every record of the namespace (leak checks).
    pub fn pattern(&self) -> String {
        format!("{}*", self.prefix)
    }
}

impl RedisCredentials {
    async fn advance_record(
        &self,
        record: &str,
        holder: &str,
        expected: CredentialState,
        next: CredentialState,
        data: Option<&str>,
    ) -> Result<bool, StoreError> {
        let mut invocation = self.scripts.advance.prepare_invoke();
        invocation
            .key(record)
            .key(&self.settling)
            .arg(holder)
            .arg(expected.as_str())
            .arg(next.as_str())
            .arg(data.unwrap_or(""));
        let moved: u64 = self
            .store
            .eval("credential_advance", &mut invocation)
            .await?;
        Ok(moved == 1)
    }
}

impl RedisStore {
    /// Credential records in this store's Redis and namespace.
    pub fn credentials(&self) -> RedisCredentials {
        RedisCredentials::new(self)
    }
}

#[async_trait]
impl CredentialLedger for RedisCredentials {
    async fn claim(
        &self,
        key: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<ClaimOutcome, StoreError> {
        let mut invocation = self.scripts.claim.prepare_invoke();
        invocation
            .key(self.record_key(key))
            .arg(holder)
            .arg(ttl.as_millis().max(1).to_string());
        let held: String = self.store.eval("credential_claim", &mut invocation).await?;
        if held.is_empty() {
            return Ok(ClaimOutcome::Taken);
        }
        CredentialState::parse(&held)
            .map(ClaimOutcome::Held)
            .ok_or_else(|| StoreError::Corrupt(format!("credential record in state {held:?}")))
    }

    async fn mark(&self, key: &str, ttl: Duration) -> Result<(), StoreError> {
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.mark_key(key))
            .arg("1")
            .arg("PX")
            .arg(ttl.as_millis().max(1).to_string());
        let _: Option<String> = self.store.query(&mut cmd).await?;
        Ok(())
    }

    async fn issue_nonce(&self, nonce: &str, ttl: Duration) -> Result<(), StoreError> {
        let mut invocation = self.scripts.nonce_issue.prepare_invoke();
        invocation
            .key(&self.nonces)
            .arg(nonce)
            .arg(ttl.as_millis().to_string())
            .arg(self.nonce_cap);
        let _outstanding: u64 = self.store.eval("nonce_issue", &mut invocation).await?;
        Ok(())
    }

    async fn take_nonce(&self, nonce: &str) -> Result<bool, StoreError> {
        let mut invocation = self.scripts.nonce_take.prepare_invoke();
        invocation.key(&self.nonces).arg(nonce);
        let taken: u64 = self.store.eval("nonce_take", &mut invocation).await?;
        Ok(taken == 1)
    }

    async fn marked(&self, key: &str) -> Result<bool, StoreError> {
        let mut cmd = redis::cmd("EXISTS");
        cmd.arg(self.mark_key(key));
        let found: u64 = self.store.query(&mut cmd).await?;
        Ok(found == 1)
    }

    async fn release(&self, key: &str, holder: &str) -> Result<bool, StoreError> {
        let mut invocation = self.scripts.release.prepare_invoke();
        invocation.key(self.record_key(key)).arg(holder);
        let released: u64 = self
            .store
            .eval("credential_release", &mut invocation)
            .await?;
        Ok(released == 1)
    }

    async fn advance(
        &self,
        key: &str,
        holder: &str,
        expected: CredentialState,
        next: CredentialState,
        data: Option<&str>,
    ) -> Result<bool, StoreError> {
        self.advance_record(&self.record_key(key), holder, expected, next, data)
            .await
    }

    async fn stuck(&self, older_than: Duration, limit: usize) -> Result<Vec<Stuck>, StoreError> {
        // A background sweep, so three plain round trips: the server's clock, the index, the
        // records. No script: the records' names come from the index.
        let (seconds, micros): (u64, u64) = self.store.query(&mut redis::cmd("TIME")).await?;
        let now_ms = seconds * 1000 + micros / 1000;
        let before =
            now_ms.saturating_sub(u64::try_from(older_than.as_millis()).unwrap_or(u64::MAX));
        let mut range = redis::cmd("ZRANGE");
        range
            .arg(&self.settling)
            .arg("-inf")
            .arg(before)
            .arg("BYSCORE")
            .arg("LIMIT")
            .arg(0)
            .arg(limit.max(1));
        let ids: Vec<String> = self.store.query(&mut range).await?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut read = redis::pipe();
        for id in &ids {
            read.cmd("HMGET")
                .arg(id)
                .arg(&["holder", "state", "request"]);
        }
        let rows: Vec<Vec<Option<String>>> = self.store.pipe(&read).await?;
        let mut stuck = Vec::new();
        let mut stale = Vec::new();
        for (id, row) in ids.into_iter().zip(rows) {
            match row.as_slice() {
                [Some(holder), Some(state), Some(request)] if state == "settling" => {
                    stuck.push(Stuck {
                        id,
                        holder: holder.clone(),
                        request: request.clone(),
                    });
                }
                // Expired, or moved on by a transition that raced this read.
                _ => stale.push(id),
            }
        }
        if !stale.is_empty() {
            let mut remove = redis::cmd("ZREM");
            remove.arg(&self.settling).arg(&stale);
            let _: u64 = self.store.query(&mut remove).await?;
        }
        Ok(stuck)
    }

    async fn resolve(
        &self,
        id: &str,
        holder: &str,
        next: CredentialState,
        receipt: Option<&str>,
    ) -> Result<bool, StoreError> {
        // Only this namespace's records: an id comes from the index, never from a client.
        if !id.starts_with(&self.prefix) {
            return Ok(false);
        }
        self.advance_record(id, holder, CredentialState::Settling, next, receipt)
            .await
    }
}
