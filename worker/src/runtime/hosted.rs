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
use crate::entrypoint::{Entrypoint, Entrypoints};

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

    pub fn get(&self, key: &str) -> Option<Entrypoint> {
        self.current.borrow().get(key).cloned()
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
