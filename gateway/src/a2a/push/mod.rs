//! A2A push notifications: a task's configs (created on every binding, see
//! [`crate::a2a::service::push_config`]) and their durable delivery: [`deliver`] (the loop,
//! a task's and a config's deliveries), `send` (one POST and what it came to), `fairness`
//! (each client address's tasks under way, told to each claim), `exhausted` (deliveries given
//! up).
//!
//! **Who delivers: the gateways.** Every gateway with push notifications on runs a deliverer
//! over the store's outbox (`store::push`). A delivery is the A2A rendering of a run event
//! (a `StreamResponse`), which is the A2A adapter's business, not a worker's: workers stay
//! protocol-agnostic and keep their capacity for runs, and the gateways, stateless and
//! already the cluster's edge to callers' networks, are where egress policy (the SSRF guard)
//! belongs. Any gateway delivers any task's notifications: a task is claimed from its shard's
//! due set for a lease, so a gateway killed mid-delivery leaves the task due again once the
//! lease expires, and another gateway sends what was not confirmed.
//!
//! Guarantees: at least once, in order per task and config (one config's events go one at a
//! time, and its cursor moves only after the receiver answered 2xx); a failed attempt is
//! retried with exponential backoff and full jitter up to `--push-max-attempts`; a delivery
//! that runs out of attempts, or that the receiver or the SSRF policy refuses for good, is
//! given up, kept in the shard's exhausted list and counted (`taskcluster.push.deliveries
//! {outcome="exhausted"}`), and the config goes on with the next event.

pub mod deliver;
mod exhausted;
mod fairness;
mod send;

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
