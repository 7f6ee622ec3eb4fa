//! What every handler shares. Cheap to clone: everything is behind `Arc`.

use std::sync::Arc;

use shared::registry::WorkerRegistry;
use shared::store::TaskStore;

use crate::config::GatewayConfig;

#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn TaskStore>,
    pub registry: Arc<dyn WorkerRegistry>,
    pub config: Arc<GatewayConfig>,
    /// Cancelled when the gateway shuts down: long responses (SSE) end so the drain finishes.
    pub shutdown: tokio_util::sync::CancellationToken,
}
