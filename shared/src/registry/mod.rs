//! The live worker registry: each worker publishes what it hosts under a short TTL and
//! refreshes it by heartbeat, so a dead worker disappears by itself. The gateway builds the
//! Agent Card (skills, entrypoints, schemas, prices) from it.

mod memory;
mod redis;

pub use memory::MemoryRegistry;
pub use redis::RedisRegistry;

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::store::StoreError;

/// Price of an entrypoint, in the payment rail's units (decimal strings, e.g. "0.01").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Price {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invoke: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<String>,
}

/// One entrypoint as a worker advertises it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EntrypointInfo {
    pub key: String,
    pub description: String,
    pub input_schema: Value,
    pub output_schema: Value,
    pub streaming: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<Price>,
    /// The handler may run again after its worker died mid-run (it is idempotent or has no
    /// side effects): a direct invoke or stream whose worker is lost then gets another
    /// attempt. Otherwise a direct run gets exactly one attempt. Absent (older workers) reads
    /// as false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub retry_safe: bool,
}

/// A worker's registry entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkerEntry {
    pub worker_id: String,
    pub host: String,
    /// Milliseconds since the Unix epoch.
    pub started_at_ms: u64,
    pub concurrency: usize,
    pub entrypoints: Vec<EntrypointInfo>,
}

#[async_trait]
pub trait WorkerRegistry: Send + Sync + 'static {
    /// Publishes or refreshes `entry`; it vanishes `ttl` after the last refresh.
    async fn heartbeat(&self, entry: &WorkerEntry, ttl: Duration) -> Result<(), StoreError>;

    /// Removes an entry at once (clean shutdown).
    async fn deregister(&self, worker_id: &str) -> Result<(), StoreError>;

    /// Every live entry, ordered by worker id.
    async fn workers(&self) -> Result<Vec<WorkerEntry>, StoreError>;
}
