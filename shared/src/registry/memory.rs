//! [`MemoryRegistry`]: the registry of a single process (tests, one-binary deployments).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;

use super::{WorkerEntry, WorkerRegistry};
use crate::store::{Clock, StoreError, SystemClock};

/// Entries in a map, each live until `ttl` after its last heartbeat by a [`Clock`]. Expired
/// entries are never listed and are dropped on the next heartbeat or listing. Cheap to clone;
/// clones share the entries.
#[derive(Clone)]
pub struct MemoryRegistry {
    entries: Arc<Mutex<HashMap<String, Live>>>,
    clock: Arc<dyn Clock>,
}

struct Live {
    entry: WorkerEntry,
    /// Milliseconds since the epoch, by the registry's clock.
    expires_ms: u64,
}

impl MemoryRegistry {
    /// A registry timed by the system clock.
    pub fn new() -> Self {
        MemoryRegistry::with_clock(Arc::new(SystemClock))
    }

    /// A registry timed by `clock` (tests move it by hand).
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        MemoryRegistry {
            entries: Arc::default(),
            clock,
        }
    }

    /// Runs `op` under the lock, after dropping expired entries; `op` gets the current time.
    fn with_live<T>(&self, op: impl FnOnce(&mut HashMap<String, Live>, u64) -> T) -> T {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let now = self.clock.now_ms();
        entries.retain(|_, live| live.expires_ms > now);
        op(&mut entries, now)
    }
}

impl Default for MemoryRegistry {
    fn default() -> Self {
        MemoryRegistry::new()
    }
}

#[async_trait]
impl WorkerRegistry for MemoryRegistry {
    async fn heartbeat(&self, entry: &WorkerEntry, ttl: Duration) -> Result<(), StoreError> {
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        self.with_live(|entries, now| {
            entries.insert(
                entry.worker_id.clone(),
                Live {
                    entry: entry.clone(),
                    expires_ms: now.saturating_add(ttl_ms),
                },
            );
        });
        Ok(())
    }

    async fn deregister(&self, worker_id: &str) -> Result<(), StoreError> {
        self.with_live(|entries, _| {
            entries.remove(worker_id);
        });
        Ok(())
    }

    async fn workers(&self) -> Result<Vec<WorkerEntry>, StoreError> {
        let mut out: Vec<WorkerEntry> =
            self.with_live(|entries, _| entries.values().map(|live| live.entry.clone()).collect());
        out.sort_by(|a, b| a.worker_id.cmp(&b.worker_id));
        Ok(out)
    }
}
