//! The entrypoints a worker hosts, swappable while it runs: a remote agent's card, read again
//! periodically, may add, drop or change entrypoints (see `crate::remote::refresh`).
//!
//! One `watch` channel holds the current set. Whoever looks an entrypoint up (a run about to
//! start, the fetch loop's take) reads the set of that moment; a run already started keeps
//! the handler it started with. On a change [`follow`] gives the slot share the new keys and
//! publishes the new registry entry at once, so gateways' cards, OpenAPI documents and the
//! console show it without waiting for the next heartbeat.

use std::sync::Arc;

use store::registry::{EntrypointInfo, WorkerEntry, WorkerRegistry};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::Shared;
use crate::entrypoint::Entrypoints;
use crate::handler::Handler;

/// What a run needs of its entrypoint.
pub struct RunHandle {
    pub handler: Arc<dyn Handler>,
}

/// A shared, swappable [`Entrypoints`]; clones share the set.
#[derive(Clone)]
pub struct Hosted {
    current: Arc<watch::Sender<Arc<Entrypoints>>>,
}

impl Hosted {
    pub fn new(entrypoints: Entrypoints) -> Self {
        Hosted {
            current: Arc::new(watch::Sender::new(Arc::new(entrypoints))),
        }
    }

    /// The set as it is now.
    pub fn current(&self) -> Arc<Entrypoints> {
        self.current.borrow().clone()
    }

    /// Replaces the set: later takes and runs use the new one; runs under way are untouched.
    pub fn replace(&self, entrypoints: Entrypoints) {
        self.current.send_replace(Arc::new(entrypoints));
    }

    /// Resolves on every later [`Hosted::replace`].
    pub fn subscribe(&self) -> watch::Receiver<Arc<Entrypoints>> {
        self.current.subscribe()
    }

    /// The handler of `key` for a run about to start: cheap to clone, unlike the whole
    /// entrypoint with its schemas.
    pub fn get(&self, key: &str) -> Option<RunHandle> {
        self.current.borrow().get(key).map(|entrypoint| RunHandle {
            handler: entrypoint.handler.clone(),
        })
    }

    pub fn keys(&self) -> Vec<String> {
        self.current.borrow().keys()
    }

    pub fn infos(&self) -> Vec<EntrypointInfo> {
        self.current.borrow().infos()
    }
}

impl From<Entrypoints> for Hosted {
    fn from(entrypoints: Entrypoints) -> Self {
        Hosted::new(entrypoints)
    }
}

/// Applies every change of the hosted set: the slot share's keys, the metrics' counters and,
/// at once, the registry entry (`entry` with the new entrypoints).
pub async fn follow(
    shared: Arc<Shared>,
    mut changes: watch::Receiver<Arc<Entrypoints>>,
    registry: Option<(Arc<dyn WorkerRegistry>, WorkerEntry)>,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            changed = changes.changed() => if changed.is_err() { return },
        }
        let keys = shared.entrypoints.keys();
        shared.share.set_keys(keys.clone());
        telemetry::metrics::prime_worker_counters(keys.iter().map(String::as_str));
        tracing::info!(entrypoints = ?keys, "hosted entrypoints changed");
        if let Some((registry, entry)) = &registry {
            let entry = WorkerEntry {
                entrypoints: shared.entrypoints.infos(),
                ..entry.clone()
            };
            if let Err(err) = registry
                .heartbeat(&entry, super::registry_ttl(&shared.config))
                .await
            {
                tracing::warn!(error = %err, "could not publish the changed registry entry");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use store::registry::MemoryRegistry;
    use store::{MemoryStore, MemoryStoreConfig};

    use super::*;
    use crate::runtime::RuntimeConfig;

    /// The keys the registry lists, once they are `want` (or after 10 s, whatever they are).
    async fn registered(registry: &MemoryRegistry, want: &[&str]) -> Vec<String> {
        let mut keys = Vec::new();
        for _ in 0..1000 {
            let workers = registry.workers().await.unwrap_or_default();
            keys = workers
                .iter()
                .flat_map(|worker| worker.entrypoints.iter().map(|info| info.key.clone()))
                .collect();
            if keys == want {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        keys
    }

    #[tokio::test]
    async fn a_replaced_set_is_registered_at_once() {
        let only = |keys: &[&str]| {
            let keys: Vec<String> = keys.iter().map(|key| (*key).to_owned()).collect();
            crate::builtins::all().only(&keys).unwrap_or_default()
        };
        let store = Arc::new(MemoryStore::new(MemoryStoreConfig::default()));
        let registry = Arc::new(MemoryRegistry::new());
        let hosted = Hosted::new(only(&["echo"]));
        let mut config = RuntimeConfig::new("w");
        // Heartbeats far apart: only the change itself can publish the new entry in time.
        config.lease_ttl = Duration::from_secs(600);
        let shutdown = CancellationToken::new();
        let worker = tokio::spawn(crate::runtime::run(
            store,
            Some(registry.clone() as Arc<dyn WorkerRegistry>),
            hosted.clone(),
            config,
            shutdown.clone(),
        ));
        assert_eq!(registered(&registry, &["echo"]).await, ["echo"]);
        hosted.replace(only(&["count", "sleep"]));
        assert_eq!(
            registered(&registry, &["count", "sleep"]).await,
            ["count", "sleep"]
        );
        assert!(hosted.get("echo").is_none());
        assert!(hosted.get("sleep").is_some());
        shutdown.cancel();
        assert!(worker.await.is_ok_and(|run| run.is_ok()));
    }
}
