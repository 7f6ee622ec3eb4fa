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
//! A listing is two reads (index, then MGET of the entries), and an index member whose entry
//! expired is skipped. Everything else is one script, each in a module of its own with the
//! script's contract, its keys and arguments, its typed reply and its call; the
//! [`WorkerRegistry`] impl below is glue:
//!
//! - [`register`]: `lua/register_worker.lua`, the heartbeat;
//! - [`deregister`]: `lua/deregister_worker.lua`, a clean shutdown;
//! - [`version`]: `lua/registry_version.lua` (read-only), the [`RegistryVersion`]: the stored
//!   version and the count of passed deadlines, so a worker that was killed (and ran no
//!   script) moves it too;
//! - [`reporter_hold`], [`reporter_release`]: `lua/reporter_hold.lua` and
//!   `lua/reporter_release.lua`, the reporter lease (`{ns}:reporter`: which process reports
//!   the cluster gauges);
//! - [`operator`]: `{ns}:paused` and `{ns}:audit`, the operators' pauses and audit log;
//! - [`drain`]: `lua/operator_drain.lua` and `{ns}:registry-drain`, the operators' requests
//!   that a worker drain (removed with their worker by the two scripts above).

mod deregister;
mod drain;
mod operator;
mod register;
mod reporter_hold;
mod reporter_release;
mod version;

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;

use super::{AuditEntry, Drain, Pause, RegistryVersion, WorkerEntry, WorkerRegistry};
use crate::{RedisStore, StoreError};

/// The registry in a [`RedisStore`]'s Redis and namespace, over its connections. Cheap to
/// clone.
#[derive(Clone)]
pub struct RedisRegistry {
    store: RedisStore,
}

impl RedisRegistry {
    pub fn new(store: &RedisStore) -> Self {
        RedisRegistry {
            store: store.clone(),
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
    async fn heartbeat(
        &self,
        entry: &WorkerEntry,
        ttl: Duration,
    ) -> Result<Option<Drain>, StoreError> {
        let reply = register::call(&self.store, entry, ttl).await?;
        reply
            .drain
            .map(|json| drain::parse(&entry.worker_id, &json))
            .transpose()
    }

    async fn deregister(&self, worker_id: &str) -> Result<(), StoreError> {
        deregister::call(&self.store, worker_id).await?;
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
        version::call(&self.store).await
    }

    async fn hold_reporter(&self, holder: &str, ttl: Duration) -> Result<bool, StoreError> {
        reporter_hold::call(&self.store, holder, ttl).await
    }

    async fn release_reporter(&self, holder: &str) -> Result<(), StoreError> {
        reporter_release::call(&self.store, holder).await?;
        Ok(())
    }

    async fn pause(&self, key: &str, pause: &Pause) -> Result<(), StoreError> {
        operator::pause(&self.store, key, pause).await
    }

    async fn resume(&self, key: &str) -> Result<bool, StoreError> {
        operator::resume(&self.store, key).await
    }

    async fn paused(&self) -> Result<BTreeMap<String, Pause>, StoreError> {
        operator::paused(&self.store).await
    }

    async fn drain(&self, worker_id: &str, drain: &Drain) -> Result<Option<Drain>, StoreError> {
        drain::request(&self.store, worker_id, drain).await
    }

    async fn drain_requested(&self, worker_id: &str) -> Result<Option<Drain>, StoreError> {
        drain::requested(&self.store, worker_id).await
    }

    async fn drains(&self) -> Result<BTreeMap<String, Drain>, StoreError> {
        drain::all(&self.store).await
    }

    async fn audit(&self, entry: &AuditEntry) -> Result<(), StoreError> {
        operator::audit(&self.store, entry).await
    }

    async fn audit_log(&self, limit: usize) -> Result<Vec<AuditEntry>, StoreError> {
        operator::audit_log(&self.store, limit).await
    }
}
