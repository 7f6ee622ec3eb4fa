//! [`MemoryRegistry`]: the registry of a single process (tests, one-binary deployments).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;

use super::{AUDIT_KEPT, AuditEntry, Drain, Pause, RegistryVersion, WorkerEntry, WorkerRegistry};
use crate::{Clock, StoreError, SystemClock};

/// Entries in a map, each live until `ttl` after its last heartbeat by a [`Clock`]. Expired
/// entries are never listed and are dropped on the next heartbeat, listing or version read.
/// Cheap to clone; clones share the entries.
#[derive(Clone)]
pub struct MemoryRegistry {
    inner: Arc<Mutex<Inner>>,
    clock: Arc<dyn Clock>,
    /// Tells this registry's versions from another's: two registries of one process both
    /// start counting at 0.
    instance: u64,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<String, Live>,
    /// Changes to the live set or to an entry so far: the version.
    changes: u64,
    /// The reporter lease: its holder and when it expires (ms, the registry's clock).
    reporter: Option<(String, u64)>,
    /// Paused entrypoints, by key.
    paused: BTreeMap<String, Pause>,
    /// The audit log, newest first.
    audit: VecDeque<AuditEntry>,
    /// Drain requests, by worker id: only of live entries (dropped with them).
    drains: BTreeMap<String, Drain>,
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
        static INSTANCES: AtomicU64 = AtomicU64::new(0);
        MemoryRegistry {
            inner: Arc::default(),
            clock,
            instance: INSTANCES.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Runs `op` under the lock, after dropping expired entries (a change); `op` gets the
    /// current time.
    fn with_live<T>(&self, op: impl FnOnce(&mut Inner, u64) -> T) -> T {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let now = self.clock.now_ms();
        let before = inner.entries.len();
        inner.entries.retain(|_, live| live.expires_ms > now);
        if inner.entries.len() != before {
            inner.changes += 1;
            let Inner {
                entries, drains, ..
            } = &mut *inner;
            drains.retain(|id, _| entries.contains_key(id));
        }
        op(&mut inner, now)
    }
}

impl Default for MemoryRegistry {
    fn default() -> Self {
        MemoryRegistry::new()
    }
}

#[async_trait]
impl WorkerRegistry for MemoryRegistry {
    async fn heartbeat(
        &self,
        entry: &WorkerEntry,
        ttl: Duration,
    ) -> Result<Option<Drain>, StoreError> {
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        Ok(self.with_live(|inner, now| {
            let live = Live {
                entry: entry.clone(),
                expires_ms: now.saturating_add(ttl_ms),
            };
            let before = inner.entries.insert(entry.worker_id.clone(), live);
            // A drain request is for the process that was asked, not a new one under its id.
            if before
                .as_ref()
                .is_none_or(|before| before.entry.started_at_ms != entry.started_at_ms)
            {
                inner.drains.remove(&entry.worker_id);
            }
            if before.is_none_or(|before| before.entry != *entry) {
                inner.changes += 1;
            }
            inner.drains.get(&entry.worker_id).cloned()
        }))
    }

    async fn deregister(&self, worker_id: &str) -> Result<(), StoreError> {
        self.with_live(|inner, _| {
            if inner.entries.remove(worker_id).is_some() {
                inner.changes += 1;
            }
            inner.drains.remove(worker_id);
        });
        Ok(())
    }

    async fn workers(&self) -> Result<Vec<WorkerEntry>, StoreError> {
        let mut out: Vec<WorkerEntry> = self.with_live(|inner, _| {
            inner
                .entries
                .values()
                .map(|live| live.entry.clone())
                .collect()
        });
        out.sort_by(|a, b| a.worker_id.cmp(&b.worker_id));
        Ok(out)
    }

    async fn version(&self) -> Result<RegistryVersion, StoreError> {
        Ok(self.with_live(|inner, _| RegistryVersion::new(self.instance, inner.changes)))
    }

    async fn hold_reporter(&self, holder: &str, ttl: Duration) -> Result<bool, StoreError> {
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        Ok(self.with_live(|inner, now| {
            let free = match &inner.reporter {
                Some((current, expires_ms)) => current == holder || *expires_ms <= now,
                None => true,
            };
            if free {
                inner.reporter = Some((holder.to_owned(), now.saturating_add(ttl_ms)));
            }
            free
        }))
    }

    async fn release_reporter(&self, holder: &str) -> Result<(), StoreError> {
        self.with_live(|inner, _| {
            if inner
                .reporter
                .as_ref()
                .is_some_and(|(current, _)| current == holder)
            {
                inner.reporter = None;
            }
        });
        Ok(())
    }

    async fn pause(&self, key: &str, pause: &Pause) -> Result<(), StoreError> {
        self.with_live(|inner, _| {
            inner.paused.insert(key.to_owned(), pause.clone());
            inner.changes += 1;
        });
        Ok(())
    }

    async fn resume(&self, key: &str) -> Result<bool, StoreError> {
        Ok(self.with_live(|inner, _| {
            inner.changes += 1;
            inner.paused.remove(key).is_some()
        }))
    }

    async fn paused(&self) -> Result<BTreeMap<String, Pause>, StoreError> {
        Ok(self.with_live(|inner, _| inner.paused.clone()))
    }

    async fn drain(&self, worker_id: &str, drain: &Drain) -> Result<Option<Drain>, StoreError> {
        Ok(self.with_live(|inner, _| {
            if !inner.entries.contains_key(worker_id) {
                return None;
            }
            Some(
                inner
                    .drains
                    .entry(worker_id.to_owned())
                    .or_insert_with(|| drain.clone())
                    .clone(),
            )
        }))
    }

    async fn drain_requested(&self, worker_id: &str) -> Result<Option<Drain>, StoreError> {
        Ok(self.with_live(|inner, _| inner.drains.get(worker_id).cloned()))
    }

    async fn drains(&self) -> Result<BTreeMap<String, Drain>, StoreError> {
        Ok(self.with_live(|inner, _| inner.drains.clone()))
    }

    async fn audit(&self, entry: &AuditEntry) -> Result<(), StoreError> {
        self.with_live(|inner, _| {
            inner.audit.push_front(entry.clone());
            inner.audit.truncate(AUDIT_KEPT);
        });
        Ok(())
    }

    async fn audit_log(&self, limit: usize) -> Result<Vec<AuditEntry>, StoreError> {
        Ok(self.with_live(|inner, _| inner.audit.iter().take(limit).cloned().collect()))
    }
}
