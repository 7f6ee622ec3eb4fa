//! What every handler shares. Cheap to clone: everything is behind `Arc`.

use std::sync::Arc;

use store::TaskStore;
use store::idempotency::IdempotencyStore;
use store::registry::WorkerRegistry;

use crate::core::catalog::Catalog;
use crate::core::config::GatewayConfig;

#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn TaskStore>,
    pub registry: Arc<dyn WorkerRegistry>,
    /// Records of `Idempotency-Key` invocations (in the store's Redis in cluster mode).
    pub idempotency: Arc<dyn IdempotencyStore>,
    pub config: Arc<GatewayConfig>,
    /// The cached view of `registry` (and the documents built from it), with the entrypoints
    /// listed recently, admitted through a short gap in the registry.
    pub catalog: Arc<Catalog>,
    /// The payment gate of priced routes; `None` when this gateway takes no payments.
    pub payments: Option<Arc<crate::core::pay::Gate>>,
    /// The store memory watch: admission refuses new tasks while the store is near its
    /// memory limit (sampled in the background; never refuses in embedded mode).
    pub store_memory: Arc<crate::core::store_memory::MemoryWatch>,
    /// A2A push notifications (configs and their delivery); `None` when off, and always in
    /// embedded mode (the outbox is in Redis).
    pub push: Option<Arc<crate::core::push::Push>>,
    /// Signs the cards when `--card-signing-key-file` is set ([`crate::core::card_signing`]).
    pub card_signer: Option<Arc<crate::core::card_signing::CardSigner>>,
    /// The members of `--member-tokens-file` ([`crate::core::members`]); `None`: no members, no
    /// extended card, and private entrypoints run for nobody.
    pub members: Option<Arc<crate::core::members::Members>>,
    /// Cancelled when the gateway shuts down: long responses (SSE) end so the drain finishes.
    pub shutdown: tokio_util::sync::CancellationToken,
}

impl AppState {
    /// What the payment gate reads of this state ([`crate::core::pay::PayContext`]).
    pub fn pay_context(&self) -> crate::core::pay::PayContext<'_> {
        crate::core::pay::PayContext {
            config: &self.config,
            gate: self.payments.as_deref(),
            store: &self.store,
            store_memory: &self.store_memory,
        }
    }

    /// Who the caller of a request with `headers` is, for private entrypoints.
    pub fn viewer(&self, headers: &axum::http::HeaderMap) -> crate::core::members::Viewer<'_> {
        crate::core::members::Viewer::of(self.members.as_deref(), headers)
    }
}
