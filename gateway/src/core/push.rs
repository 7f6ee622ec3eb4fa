//! Push notifications as this gateway serves them: the outbox in Redis, the SSRF-guarded
//! client, the retry schedule. Protocol-neutral (what a delivery says is the A2A adapter's
//! business: `crate::a2a::push`); [`crate::core::state::AppState`] holds it.

use std::time::Duration;

use store::RedisStore;
use store::push::PushOutbox;
use webhook::{Backoff, WebhookClient, WebhookConfig, WebhookPolicy};

use crate::core::config::GatewayConfig;

/// Push notifications as this gateway serves them: the outbox in Redis, the guarded client,
/// the retry schedule.
pub struct Push {
    pub outbox: PushOutbox,
    pub client: WebhookClient,
    pub backoff: Backoff,
    /// Deliveries made at once.
    pub concurrency: usize,
    /// How long a claim on a task's deliveries lasts (`--push-claim-ms`).
    pub claim: Duration,
}

/// Why push notifications cannot be set up as configured.
#[derive(Debug, thiserror::Error)]
pub enum PushSetupError {
    #[error("PUSH_ALLOWLIST: {0}")]
    Allowlist(#[from] webhook::PolicyError),
    #[error("push retry schedule: {0}")]
    Backoff(#[from] webhook::BackoffError),
    #[error(transparent)]
    Client(#[from] webhook::WebhookError),
}

impl Push {
    /// Push notifications over `store`, or `None` when `--push-notifications` is off.
    pub fn from_config(
        config: &GatewayConfig,
        store: &RedisStore,
    ) -> Result<Option<Push>, PushSetupError> {
        if !config.push_notifications {
            return Ok(None);
        }
        let policy = if config.push_allowlist.trim().is_empty() {
            WebhookPolicy::public_only()
        } else {
            WebhookPolicy::from_allowlist(&config.push_allowlist)?
        };
        let backoff = Backoff::new(
            Duration::from_millis(config.push_retry_base_ms),
            Duration::from_millis(config.push_retry_cap_ms),
            config.push_max_attempts,
        )?;
        Ok(Some(Push {
            outbox: store.push_outbox(config.push_max_configs),
            client: WebhookClient::new(policy, WebhookConfig::default())?,
            backoff,
            concurrency: config.push_concurrency.max(1),
            claim: Duration::from_millis(config.push_claim_ms),
        }))
    }
}
