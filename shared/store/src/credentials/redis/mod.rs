//! [`RedisCredentials`]: credential records in the store's Redis, shared by every gateway.
//! One hash per credential, `{ns}:cred:<sha256(key)>` (fields `holder`, `state`, `request`,
//! `receipt`); the records in `settling` or `reserved` are indexed in `{ns}:cred-settling` (sorted by
//! since when, or for `reserved` by when they fall due). Issued nonces (SIWX offers) live in one sorted set, `{ns}:nonces` (nonce -> expiry).
//!
//! One module per script, each with the script's contract, its keys and arguments, its typed
//! reply and its call; the [`CredentialLedger`] impl below is glue:
//!
//! - [`claim`]: `lua/credential_claim.lua`, takes a credential once;
//! - [`advance`]: `lua/credential_advance.lua`, `claimed -> settling -> settled | void`;
//! - [`release`]: `lua/credential_release.lua`, gives a `claimed` credential back;
//! - [`nonce_issue`]: `lua/nonce_issue.lua`, records an issued nonce, bounding the set;
//! - [`nonce_take`]: `lua/nonce_take.lua`, spends an issued nonce once.
//!
//! Marks and the settlement-recovery sweep ([`CredentialLedger::stuck`]) are plain commands.

mod advance;
mod claim;
mod nonce_issue;
mod nonce_take;
mod release;

use std::time::Duration;

use async_trait::async_trait;
use sha2::{Digest, Sha256};

use super::{ClaimOutcome, CredentialLedger, CredentialState, MAX_ISSUED_NONCES, Stuck};
use crate::{RedisStore, StoreError};

#[derive(Clone)]
pub struct RedisCredentials {
    store: RedisStore,
    prefix: String,
    marks: String,
    settling: String,
    nonces: String,
    nonce_cap: usize,
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
        claim::call(self, key, holder, ttl).await
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
        nonce_issue::call(self, nonce, ttl).await?;
        Ok(())
    }

    async fn take_nonce(&self, nonce: &str) -> Result<bool, StoreError> {
        nonce_take::call(self, nonce).await
    }

    async fn marked(&self, key: &str) -> Result<bool, StoreError> {
        let mut cmd = redis::cmd("EXISTS");
        cmd.arg(self.mark_key(key));
        let found: u64 = self.store.query(&mut cmd).await?;
        Ok(found == 1)
    }

    async fn release(&self, key: &str, holder: &str) -> Result<bool, StoreError> {
        release::call(self, key, holder).await
    }

    async fn advance(
        &self,
        key: &str,
        holder: &str,
        expected: CredentialState,
        next: CredentialState,
        data: Option<&str>,
    ) -> Result<bool, StoreError> {
        advance::call(
            self,
            &self.record_key(key),
            holder,
            expected,
            next,
            data,
            Duration::ZERO,
        )
        .await
    }

    async fn reserve(
        &self,
        key: &str,
        holder: &str,
        request: &str,
        due_in: Duration,
    ) -> Result<bool, StoreError> {
        advance::call(
            self,
            &self.record_key(key),
            holder,
            CredentialState::Claimed,
            CredentialState::Reserved,
            Some(request),
            due_in,
        )
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
            .arg(limit.max(1))
            .arg("WITHSCORES");
        // Scores: when each record entered `settling`, in the server's milliseconds.
        let entries: Vec<(String, f64)> = self.store.query(&mut range).await?;
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        let (ids, since): (Vec<String>, Vec<f64>) = entries.into_iter().unzip();
        let mut read = redis::pipe();
        for id in &ids {
            read.cmd("HMGET")
                .arg(id)
                .arg(&["holder", "state", "request"]);
        }
        let rows: Vec<Vec<Option<String>>> = self.store.pipe(&read).await?;
        let mut stuck = Vec::new();
        let mut stale = Vec::new();
        for ((id, since), row) in ids.into_iter().zip(since).zip(rows) {
            match row.as_slice() {
                [Some(holder), Some(state), Some(request)]
                    if state == "settling" || state == "reserved" =>
                {
                    // Scores are whole milliseconds; a NaN or negative one reads as now.
                    let since_ms = since.max(0.0) as u64;
                    stuck.push(Stuck {
                        id,
                        state: CredentialState::parse(state).unwrap_or(CredentialState::Settling),
                        holder: holder.clone(),
                        request: request.clone(),
                        age: Duration::from_millis(now_ms.saturating_sub(since_ms)),
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
        from: CredentialState,
        next: CredentialState,
        receipt: Option<&str>,
    ) -> Result<bool, StoreError> {
        // Only this namespace's records: an id comes from the index, never from a client.
        if !id.starts_with(&self.prefix) {
            return Ok(false);
        }
        advance::call(self, id, holder, from, next, receipt, Duration::ZERO).await
    }
}
