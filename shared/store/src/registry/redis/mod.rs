//! [`RedisRegistry`]: the registry shared by every process of a cluster, in the store's Redis.
//!
//! - `{ns}:registry:<id>` (string): the entry as JSON, `SET ... PX ttl`, so a worker that stops
//!   heartbeating vanishes by itself;
//! - `{ns}:registry` (sorted set): worker id by entry expiry (Redis clock), so listing needs no
//!   SCAN. Every heartbeat prunes passed deadlines from it and sets its own expiry to the latest
//!   deadline it holds, so it disappears with the last worker;
//! - `{ns}:registry-version` (string): bumped by those scripts when a worker joins or leaves,
//!   an entry changes or the index is pruned (not on a plain refresh); expires with the index.
//!
//! Heartbeat and deregister are one script each (`shared/store/lua/register_worker.lua`,
//! `deregister_worker.lua`); a listing is two reads (index, then MGET of the entries), and an
//! index member whose entry expired is skipped. The [`RegistryVersion`] is one read-only script
//! (`registry_version.lua`): the stored version and the count of passed deadlines, so a worker
//! that was killed (and ran no script) moves it too.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use redis::Script;

use super::{RegistryVersion, WorkerEntry, WorkerRegistry};
use crate::redis::guarded_script;
use crate::{RedisStore, StoreError};

macro_rules! lua {
    ($name:literal) => {
        include_str!(concat!(env!("OUT_DIR"), "/", $name, ".lua"))
    };
}

/// The registry in a [`RedisStore`]'s Redis and namespace, over its connections. Cheap to
/// clone.
#[derive(Clone)]
pub struct RedisRegistry {
    store: RedisStore,
    scripts: Arc<Scripts>,
}

struct Scripts {
    register: Script,
    deregister: Script,
    version: Script,
}

impl RedisRegistry {
    pub fn new(store: &RedisStore) -> Self {
        RedisRegistry {
            store: store.clone(),
            scripts: Arc::new(Scripts {
                register: guarded_script(lua!("register_worker")),
                deregister: guarded_script(lua!("deregister_worker")),
                version: guarded_script(lua!("registry_version")),
            }),
        }
    }
}

impl RedisStore {
    /// The worker registry in this store's Redis and namespace.
    pub fn registry(&self) -> RedisRegistry {
        RedisRegistry::new(self)
    }
}

#[async_trait]
impl WorkerRegistry for RedisRegistry {
    async fn heartbeat(&self, entry: &WorkerEntry, ttl: Duration) -> Result<(), StoreError> {
        let json = serde_json::to_string(entry)
            .map_err(|err| StoreError::Corrupt(format!("registry entry: {err}")))?;
        // PX 0 is an error in Redis; a zero ttl means "expire at once".
        let ttl_ms = ttl.as_millis().max(1);
        let keys = self.store.keys();
        let mut invocation = self.scripts.register.prepare_invoke();
        invocation
            .key(keys.registry())
            .key(keys.registry_entry(&entry.worker_id))
            .key(keys.registry_version())
            .arg(&entry.worker_id)
            .arg(json)
            .arg(ttl_ms.to_string());
        let _expires: u64 = self
            .store
            .eval_unreplicated(keys, "register_worker", &mut invocation)
            .await?;
        Ok(())
    }

    async fn deregister(&self, worker_id: &str) -> Result<(), StoreError> {
        let keys = self.store.keys();
        let mut invocation = self.scripts.deregister.prepare_invoke();
        invocation
            .key(keys.registry())
            .key(keys.registry_entry(worker_id))
            .key(keys.registry_version())
            .arg(worker_id);
        let _removed: u64 = self
            .store
            .eval_unreplicated(keys, "deregister_worker", &mut invocation)
            .await?;
        Ok(())
    }

    async fn workers(&self) -> Result<Vec<WorkerEntry>, StoreError> {
        let keys = self.store.keys();
        let mut range = redis::cmd("ZRANGE");
        range.arg(keys.registry()).arg(0).arg(-1);
        let ids: Vec<String> = self.store.query(&mut range).await?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut mget = redis::cmd("MGET");
        for id in &ids {
            mget.arg(keys.registry_entry(id));
        }
        let found: Vec<Option<String>> = self.store.query(&mut mget).await?;
        let mut out = Vec::with_capacity(found.len());
        for json in found.into_iter().flatten() {
            let entry: WorkerEntry = serde_json::from_str(&json)
                .map_err(|err| StoreError::Corrupt(format!("registry entry: {err}")))?;
            out.push(entry);
        }
        out.sort_by(|a, b| a.worker_id.cmp(&b.worker_id));
        Ok(out)
    }

    async fn version(&self) -> Result<RegistryVersion, StoreError> {
        let keys = self.store.keys();
        let mut invocation = self.scripts.version.prepare_invoke();
        invocation.key(keys.registry()).key(keys.registry_version());
        let (stamp, expired): (String, u64) = self
            .store
            .eval_unreplicated(keys, "registry_version", &mut invocation)
            .await?;
        let stamp = stamp
            .parse()
            .map_err(|err| StoreError::Corrupt(format!("registry version {stamp:?}: {err}")))?;
        Ok(RegistryVersion::new(stamp, expired))
    }
}
