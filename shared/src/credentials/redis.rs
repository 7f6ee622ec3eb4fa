//! [`RedisCredentials`]: credential records in the store's Redis, shared by every gateway.
//! One hash per credential, `{ns}:cred:<sha256(key)>` (fields `holder`, `state`, `receipt`),
//! one script per transition: `shared/lua/credential_*.lua`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use redis::Script;
use sha2::{Digest, Sha256};

use super::{ClaimOutcome, CredentialLedger, CredentialState};
use crate::store::{RedisStore, StoreError};

macro_rules! lua {
    ($name:literal) => {
        include_str!(concat!(env!("OUT_DIR"), "/", $name, ".lua"))
    };
}

#[derive(Clone)]
pub struct RedisCredentials {
    store: RedisStore,
    prefix: String,
    scripts: Arc<Scripts>,
}

struct Scripts {
    claim: Script,
    release: Script,
    advance: Script,
}

impl RedisCredentials {
    pub fn new(store: &RedisStore) -> Self {
        RedisCredentials {
            prefix: format!("{{{}}}:cred:", store.config().namespace),
            store: store.clone(),
            scripts: Arc::new(Scripts {
                claim: Script::new(lua!("credential_claim")),
                release: Script::new(lua!("credential_release")),
                advance: Script::new(lua!("credential_advance")),
            }),
        }
    }

    /// The record's name: the key is hashed, so names stay short whatever a client sends.
    pub fn record_key(&self, key: &str) -> String {
        format!(
            "{}{}",
            self.prefix,
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
        let mut invocation = self.scripts.claim.prepare_invoke();
        invocation
            .key(self.record_key(key))
            .arg(holder)
            .arg(ttl.as_millis().max(1).to_string());
        let held: String = self.store.eval("credential_claim", &invocation).await?;
        if held.is_empty() {
            return Ok(ClaimOutcome::Taken);
        }
        CredentialState::parse(&held)
            .map(ClaimOutcome::Held)
            .ok_or_else(|| StoreError::Corrupt(format!("credential record in state {held:?}")))
    }

    async fn release(&self, key: &str, holder: &str) -> Result<bool, StoreError> {
        let mut invocation = self.scripts.release.prepare_invoke();
        invocation.key(self.record_key(key)).arg(holder);
        let released: u64 = self.store.eval("credential_release", &invocation).await?;
        Ok(released == 1)
    }

    async fn advance(
        &self,
        key: &str,
        holder: &str,
        expected: CredentialState,
        next: CredentialState,
        receipt: Option<&str>,
    ) -> Result<bool, StoreError> {
        let mut invocation = self.scripts.advance.prepare_invoke();
        invocation
            .key(self.record_key(key))
            .arg(holder)
            .arg(expected.as_str())
            .arg(next.as_str())
            .arg(receipt.unwrap_or(""));
        let moved: u64 = self.store.eval("credential_advance", &invocation).await?;
        Ok(moved == 1)
    }
}
